//! The SDK's endpoint partitions, trimmed to the one a function runs in.
//!
//! Every generated SDK client parses the partition table it embeds (eight partitions, each
//! with a region regex) the first time a client of its service is built: ~0.4 M instructions
//! per service, half of a function's init over a bare binary's and an eighth of a backend
//! function's first request, which builds the Secrets Manager client (docs/performance.md).
//! The SDK reads the table from the file `SMITHY_CLIENT_SDK_CUSTOM_PARTITION` names instead,
//! when that variable is set. A function in a region of the standard `aws` partition (every
//! commercial region) gives it that one partition, with no region list: the partition's own
//! regex is what matches the region, and its outputs are the SDK's. Elsewhere (China, GovCloud,
//! the isolated partitions, a name the SDK would not match) nothing changes.

use std::path::PathBuf;

/// The variable the SDK reads the partition table's path from.
pub const SDK_PARTITIONS_VARIABLE: &str = "SMITHY_CLIENT_SDK_CUSTOM_PARTITION";

/// The `aws` partition as the SDK's table has it (aws-sdk-rust's `sdk-partitions.json`), with
/// no region list and, as its region regex, the function's own region alone: a table of one
/// partition resolves every region to it (the SDK falls back to `aws` when nothing matches),
/// so the regex decides nothing, and a literal one costs the SDK's regex compiler a tenth of
/// the partition's own, `^(us|eu|ap|sa|ca|me|af|il|mx)\-\w+\-\d+$` (~60 K instructions of
/// every function's init; docs/performance.md). `tests/partitions.rs` checks that every service
/// the functions call resolves the same endpoints from it as from the SDK's own table.
/// `region` is one [`in_aws_partition`] accepts: letters, digits, `_` and `-`, none of which a
/// regex reads as anything but itself.
pub fn aws_partition(region: &str) -> String {
    format!(
        r#"{{"partitions":[{{"id":"aws","outputs":{{"dnsSuffix":"amazonaws.com","dualStackDnsSuffix":"api.aws","implicitGlobalRegion":"us-east-1","name":"aws","supportsDualStack":true,"supportsFIPS":true}},"regionRegex":"^{region}$","regions":{{}}}}],"version":"1.1"}}"#
    )
}

/// An AWS partition: its id (an ARN's second field) and the DNS suffix of its endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    pub id: &'static str,
    pub dns_suffix: &'static str,
}

/// AWS's partitions (aws-sdk-rust's `sdk-partitions.json`), each with the areas its
/// `regionRegex` starts with: `^(area1|area2…)\-\w+\-\d+$`. Areas are disjoint once the
/// rest must be exactly `name-number` (`us-gov-west-1` is not `us-…` of `aws`).
const PARTITIONS: [(Partition, &[&str]); 8] = [
    (Partition { id: "aws", dns_suffix: "amazonaws.com" }, &["us", "eu", "ap", "sa", "ca", "me", "af", "il", "mx"]),
    (Partition { id: "aws-cn", dns_suffix: "amazonaws.com.cn" }, &["cn"]),
    (Partition { id: "aws-us-gov", dns_suffix: "amazonaws.com" }, &["us-gov"]),
    (Partition { id: "aws-iso", dns_suffix: "c2s.ic.gov" }, &["us-iso"]),
    (Partition { id: "aws-iso-b", dns_suffix: "sc2s.sgov.gov" }, &["us-isob"]),
    (Partition { id: "aws-iso-e", dns_suffix: "cloud.adc-e.uk" }, &["eu-isoe"]),
    (Partition { id: "aws-iso-f", dns_suffix: "csp.hci.ic.gov" }, &["us-isof"]),
    (Partition { id: "aws-eusc", dns_suffix: "amazonaws.eu" }, &["eusc-de"]),
];

/// The partition whose region regex matches `region` (ASCII classes, as the SDK's regex engine
/// reads them); `None` for a name no partition has. Decided without compiling a regex.
pub fn partition_of(region: &str) -> Option<Partition> {
    PARTITIONS.iter().find(|(_, areas)| areas.iter().any(|area| in_area(region, area))).map(|(partition, _)| *partition)
}

/// Whether `region` is `{area}-{name}-{number}`: `name` word characters, `number` digits.
fn in_area(region: &str, area: &str) -> bool {
    let Some(rest) = region.strip_prefix(area).and_then(|rest| rest.strip_prefix('-')) else { return false };
    let Some((name, number)) = rest.split_once('-') else { return false };
    !name.is_empty()
        && name.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
        && !number.is_empty()
        && number.bytes().all(|byte| byte.is_ascii_digit())
}

/// Whether the SDK's `aws` partition regex, `^(us|eu|ap|sa|ca|me|af|il|mx)\-\w+\-\d+$`
/// (ASCII classes), matches `region`; decided without compiling it, which is the point.
pub fn in_aws_partition(region: &str) -> bool {
    partition_of(region).is_some_and(|partition| partition.id == "aws")
}

/// For a function in `region`, the trimmed table's path in `directory`, written unless it is
/// there already; `None` when the region is not in the `aws` partition or the file cannot be
/// written (the SDK then parses its own table, as it would anyway). A new file is written beside
/// and renamed into place, so no process reads half of it; an existing one is used only if it
/// holds exactly the table (replacing a file costs a flush of its data on ext4: 0.5 ms).
pub fn write_trimmed(region: Option<&str>, directory: &std::path::Path) -> Option<PathBuf> {
    let table = aws_partition(region.filter(|region| in_aws_partition(region))?);
    let path = directory.join("aws-sdk-partitions.json");
    if std::fs::read(&path).is_ok_and(|held| held == table.as_bytes()) {
        return Some(path);
    }
    let partial = directory.join(format!("aws-sdk-partitions.json.{}", std::process::id()));
    std::fs::write(&partial, &table).ok()?;
    if std::fs::rename(&partial, &path).is_err() {
        let _ = std::fs::remove_file(&partial);
        return None;
    }
    Some(path)
}

/// Points the SDK at the trimmed table for the function's region (see the module), unless the
/// environment already names a table. Call it first thing in a function's `main`, before any
/// SDK client is built.
///
/// # Safety
/// It sets an environment variable: no other thread may exist yet (`std::env::set_var`). A
/// function's `main` on tokio's current-thread scheduler starts none before its first await.
pub unsafe fn use_trimmed_table() {
    if std::env::var_os(SDK_PARTITIONS_VARIABLE).is_some() {
        return;
    }
    let region = std::env::var("AWS_REGION").or_else(|_| std::env::var("AWS_DEFAULT_REGION")).ok();
    if let Some(path) = write_trimmed(region.as_deref(), &std::env::temp_dir()) {
        // SAFETY: the caller guarantees that this thread is the process's only one.
        unsafe { std::env::set_var(SDK_PARTITIONS_VARIABLE, path) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commercial_regions_are_in_the_aws_partition() {
        for region in ["us-east-1", "eu-west-1", "ap-southeast-4", "il-central-1", "mx-central-1", "af-south-1"] {
            assert!(in_aws_partition(region), "{region}");
        }
    }

    #[test]
    fn other_partitions_and_malformed_names_are_not() {
        for region in [
            "cn-north-1",
            "us-gov-west-1",
            "us-iso-east-1",
            "us-isob-east-1",
            "eusc-de-east-1",
            "aws-global",
            "us-east-",
            "us--1",
            "us-east-1a",
            "US-east-1",
            "us-east-1-",
            "us-ëast-1",
            "",
        ] {
            assert!(!in_aws_partition(region), "{region}");
        }
    }

    proptest::proptest! {
        /// Any name, and names shaped like regions: the check answers as the SDK's regex does.
        #[test]
        fn the_check_agrees_with_the_sdks_regex(
            region in "[a-z0-9_ë-]{0,14}|(us|eu|ap|cn|me|mx|af|il|sa|ca|gov|US)-[a-zA-Z0-9_ë-]{0,8}-[0-9a]{0,3}",
        ) {
            let regex = regex_lite::Regex::new(r"^(us|eu|ap|sa|ca|me|af|il|mx)\-\w+\-\d+$").unwrap();
            proptest::prop_assert_eq!(in_aws_partition(&region), regex.is_match(&region), "{}", region);
        }
    }

    #[test]
    fn every_partition_is_found_by_its_regions() {
        let cases = [
            ("eu-west-1", "aws", "amazonaws.com"),
            ("cn-northwest-1", "aws-cn", "amazonaws.com.cn"),
            ("us-gov-west-1", "aws-us-gov", "amazonaws.com"),
            ("us-iso-east-1", "aws-iso", "c2s.ic.gov"),
            ("us-isob-east-1", "aws-iso-b", "sc2s.sgov.gov"),
            ("eu-isoe-west-1", "aws-iso-e", "cloud.adc-e.uk"),
            ("us-isof-south-1", "aws-iso-f", "csp.hci.ic.gov"),
            ("eusc-de-east-1", "aws-eusc", "amazonaws.eu"),
        ];
        for (region, id, dns_suffix) in cases {
            assert_eq!(partition_of(region), Some(Partition { id, dns_suffix }), "{region}");
        }
        for region in ["aws-global", "us-gov-west", "cn-north-1a", "eusc-fr-east-1", "", "us-east-1 "] {
            assert_eq!(partition_of(region), None, "{region}");
        }
    }

    proptest::proptest! {
        /// Names shaped like regions of every partition: found exactly where the SDK's regexes
        /// (sdk-partitions.json) match, in the partition whose regex it is.
        #[test]
        fn the_table_agrees_with_the_sdks_regexes(
            region in "(us|eu|cn|us-gov|us-iso|us-isob|eu-isoe|us-isof|eusc-de|eusc|gov)-[a-z0-9_-]{0,8}-[0-9a]{0,2}",
        ) {
            let regexes = [
                ("aws", r"^(us|eu|ap|sa|ca|me|af|il|mx)\-\w+\-\d+$"),
                ("aws-cn", r"^cn\-\w+\-\d+$"),
                ("aws-us-gov", r"^us\-gov\-\w+\-\d+$"),
                ("aws-iso", r"^us\-iso\-\w+\-\d+$"),
                ("aws-iso-b", r"^us\-isob\-\w+\-\d+$"),
                ("aws-iso-e", r"^eu\-isoe\-\w+\-\d+$"),
                ("aws-iso-f", r"^us\-isof\-\w+\-\d+$"),
                ("aws-eusc", r"^eusc\-(de)\-\w+\-\d+$"),
            ];
            let matched: Vec<&str> = regexes
                .iter()
                .filter(|(_, regex)| regex_lite::Regex::new(regex).unwrap().is_match(&region))
                .map(|(id, _)| *id)
                .collect();
            proptest::prop_assert!(matched.len() <= 1, "{} matches {:?}", region, matched);
            proptest::prop_assert_eq!(partition_of(&region).map(|p| p.id), matched.first().copied(), "{}", region);
        }
    }

    #[test]
    fn the_trimmed_table_is_written_only_for_the_aws_partition() {
        let directory = std::env::temp_dir().join(format!("aws-env-partitions-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let path = write_trimmed(Some("eu-west-1"), &directory).expect("written");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), aws_partition("eu-west-1"));
        assert!(aws_partition("eu-west-1").contains(r#""regionRegex":"^eu-west-1$""#));
        assert_eq!(std::fs::read_dir(&directory).unwrap().count(), 1, "no partial file is left");
        // Found, and replaced when it holds anything else (another region's, a partial one).
        assert_eq!(write_trimmed(Some("eu-west-1"), &directory), Some(path.clone()));
        assert_eq!(write_trimmed(Some("us-east-1"), &directory), Some(path.clone()));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), aws_partition("us-east-1"));
        std::fs::write(&path, &aws_partition("us-east-1")[..40]).unwrap();
        assert_eq!(write_trimmed(Some("us-east-1"), &directory), Some(path.clone()));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), aws_partition("us-east-1"));
        assert_eq!(write_trimmed(Some("cn-north-1"), &directory), None);
        assert_eq!(write_trimmed(None, &directory), None);
        assert_eq!(write_trimmed(Some("eu-west-1"), &directory.join("missing")), None);
        std::fs::remove_dir_all(&directory).unwrap();
    }
}
