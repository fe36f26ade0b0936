//! The trimmed partition table (`aws_env::partitions`) resolves, for every service the
//! functions call through a generated client, the same endpoints as the SDK's own table.
//!
//! The SDK reads its table once per process, so the endpoints are resolved in two child
//! processes (this test binary run again): one with the SDK's table, one given the trimmed one.

use aws_env::partitions::{SDK_PARTITIONS_VARIABLE, write_trimmed};
use std::process::Command;

/// Set in a child: print the endpoints instead of comparing them.
const CHILD: &str = "AWS_ENV_PARTITIONS_CHILD";

const REGIONS: [&str; 6] = ["us-east-1", "us-west-2", "eu-west-1", "ap-southeast-4", "il-central-1", "mx-central-1"];

#[tokio::test]
async fn the_trimmed_table_resolves_the_sdks_endpoints() {
    if std::env::var_os(CHILD).is_some() {
        print_endpoints().await;
        return;
    }
    let directory = std::env::temp_dir().join(format!("aws-env-partitions-test-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    let trimmed = write_trimmed(Some("us-east-1"), &directory).expect("the trimmed table");
    let sdks = endpoints(None);
    let ours = endpoints(Some(&trimmed));
    std::fs::remove_dir_all(&directory).unwrap();

    assert!(sdks.contains("dynamodb us-east-1 false false https://dynamodb.us-east-1.amazonaws.com"), "{sdks}");
    assert!(sdks.contains("sqs eu-west-1 false true https://sqs.eu-west-1.api.aws"), "{sdks}");
    assert!(sdks.contains("secretsmanager us-west-2 true false https://secretsmanager-fips.us-west-2.amazonaws.com"));
    assert_eq!(sdks.lines().count(), 3 * REGIONS.len() * 4);
    let differing: Vec<(&str, &str)> = sdks.lines().zip(ours.lines()).filter(|(sdk, our)| sdk != our).collect();
    assert_eq!(differing, [], "(the SDK's, ours)");
    assert_eq!(ours.lines().count(), sdks.lines().count());
}

/// What a child printed, with the SDK's table or the one at `table`.
fn endpoints(table: Option<&std::path::Path>) -> String {
    let mut child = Command::new(std::env::current_exe().unwrap());
    child.args(["--exact", "the_trimmed_table_resolves_the_sdks_endpoints", "--nocapture", "--test-threads=1"]);
    child.env(CHILD, "1").env_remove(SDK_PARTITIONS_VARIABLE);
    if let Some(table) = table {
        child.env(SDK_PARTITIONS_VARIABLE, table);
    }
    let output = child.output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    // The harness prints the test's name on the line the first endpoint starts.
    let stdout = String::from_utf8(output.stdout).unwrap();
    stdout.lines().filter_map(|line| line.split_once("endpoint ").map(|(_, case)| case)).collect::<Vec<_>>().join("\n")
}

/// Prints `endpoint {service} {region} {fips} {dual stack} {url or error}` for every case.
async fn print_endpoints() {
    for region in REGIONS {
        for (fips, dual_stack) in [(false, false), (true, false), (false, true), (true, true)] {
            let dynamodb = {
                use aws_sdk_dynamodb::config::endpoint::{DefaultResolver, Params, ResolveEndpoint};
                let params =
                    Params::builder().region(region).use_fips(fips).use_dual_stack(dual_stack).build().unwrap();
                DefaultResolver::new().resolve_endpoint(&params).await.map(|e| e.url().to_owned())
            };
            let sqs = {
                use aws_sdk_sqs::config::endpoint::{DefaultResolver, Params, ResolveEndpoint};
                let params =
                    Params::builder().region(region).use_fips(fips).use_dual_stack(dual_stack).build().unwrap();
                DefaultResolver::new().resolve_endpoint(&params).await.map(|e| e.url().to_owned())
            };
            let secrets = {
                use aws_sdk_secretsmanager::config::endpoint::{DefaultResolver, Params, ResolveEndpoint};
                let params =
                    Params::builder().region(region).use_fips(fips).use_dual_stack(dual_stack).build().unwrap();
                DefaultResolver::new().resolve_endpoint(&params).await.map(|e| e.url().to_owned())
            };
            for (service, url) in [("dynamodb", dynamodb), ("sqs", sqs), ("secretsmanager", secrets)] {
                let url = url.unwrap_or_else(|err| format!("error: {err}"));
                println!("endpoint {service} {region} {fips} {dual_stack} {url}");
            }
        }
    }
}
