//! Operator CLI: import meeting data, manage external applications and API keys, rotate the
//! pepper, set the configured flow server's key. `admin --help` lists the commands and
//! `admin COMMAND --help` shows one (the table is in `args.rs`).
//!
//! Against AWS it uses the normal AWS environment plus the table and secret names from the
//! stack's outputs (`MEETINGS_TABLE`, `DIRECTORY_TABLE`, `EXTERNAL_APPS_TABLE`,
//! `ACCESS_TOKENS_TABLE`, `API_KEYS_TABLE`, `PEPPER_SECRET_ID`, and for `flow-server set-key`
//! `FLOW_SERVER_SECRET_ID`). Locally, `LOCAL_STACK_PREFIX` names the
//! `make dev` stack instead (`make admin` sets it).

mod args;
mod import_progress;
mod pepper;

use args::{Action, Invocation, Parsed, UsageError};
use chrono::{DateTime, Utc};
use credentials::PepperSource;
use meeting_data::administration::{self, AdminError};
use meeting_data::import::{self, ImportError};
use meeting_data::settings::{self, SettingError};
use meeting_data::store::{AppStore, DirectoryStore, MeetingStore};
use platform_data::api_keys::{ApiKey, ApiKeyStore};
use platform_data::ids::AccountId;
use std::collections::BTreeMap;
use std::process::ExitCode;

#[derive(Debug, thiserror::Error)]
enum CliError {
    /// The command line does not fit the command; exit status 2.
    #[error(transparent)]
    Usage(#[from] UsageError),
    #[error(transparent)]
    Setting(#[from] SettingError),
    #[error(transparent)]
    Import(#[from] ImportError),
    #[error(transparent)]
    Admin(#[from] AdminError),
    #[error(transparent)]
    Rotation(#[from] pepper::RotationError),
    #[error("{0}")]
    Other(String),
}

/// The exit status of a command line that does not fit, as most command-line tools use it.
const USAGE_EXIT: u8 = 2;

fn store_error(err: platform_data::StoreError) -> CliError {
    CliError::Other(err.to_string())
}

/// Everything a command may need, built from the environment.
struct Context {
    apps: AppStore,
    api_keys: ApiKeyStore,
    directory: DirectoryStore,
    meetings: MeetingStore,
    pepper: PepperSource,
    secrets: aws_sdk_secretsmanager::Client,
    /// `FlowServerSecret`, when the environment names it.
    flow_server_secret_id: Option<String>,
    /// The recordings bucket (`RECORDINGS_BUCKET`), when the environment names it.
    recordings: Option<object_storage::transfer::Transfer>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args).await {
        Ok(output) => {
            println!("{output}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("admin: {err}");
            match err {
                CliError::Usage(_) => ExitCode::from(USAGE_EXIT),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

/// Runs a command line; help and usage errors need no AWS.
async fn run(args: &[String]) -> Result<String, CliError> {
    let invocation = match args::parse(args)? {
        Parsed::Help(help) => return Ok(help),
        Parsed::Run(invocation) => invocation,
    };
    let context = context().await?;
    execute(&context, &invocation, Utc::now()).await
}

async fn execute(context: &Context, invocation: &Invocation, now: DateTime<Utc>) -> Result<String, CliError> {
    match invocation.command.action {
        Action::Import => import_file(context, invocation.argument(0)?, now).await,
        Action::Recount => {
            let mut counts = BTreeMap::new();
            for org in org_ids(invocation)? {
                let count = context.meetings.recount(org).await.map_err(|err| CliError::Other(err.to_string()))?;
                counts.insert(org, count);
            }
            Ok(pretty(&counts))
        }
        Action::Reindex => {
            // Organizations stored before the filter indexes: every meeting written again.
            let mut written = BTreeMap::new();
            for org in org_ids(invocation)? {
                let meetings = context.meetings.reindex(org).await.map_err(|err| CliError::Other(err.to_string()))?;
                written.insert(org, meetings);
            }
            Ok(pretty(&written))
        }
        Action::MeetingDelete => {
            let raw = invocation.argument(0)?;
            let id: i64 =
                raw.parse().map_err(|_| invocation.error(format!("MEETING_ID must be an integer, not {raw:?}")))?;
            if !context.meetings.delete(id).await.map_err(|err| CliError::Other(err.to_string()))? {
                return Err(CliError::Other(format!("no meeting {id}")));
            }
            Ok(pretty(&serde_json::json!({ "deleted": id })))
        }
        Action::AppCreate => {
            let orgs = org_ids(invocation)?;
            let name = invocation.value("name").unwrap_or_default();
            let pepper = context.pepper.get().await.map_err(|err| CliError::Other(err.to_string()))?;
            let scopes: Vec<&str> = invocation.values("scope").collect();
            let issued =
                administration::create_app(&context.apps, &context.directory, pepper, name, &orgs, &scopes, now)
                    .await?;
            Ok(pretty(&issued))
        }
        Action::AppDeactivate => {
            Ok(pretty(&administration::deactivate_app(&context.apps, invocation.argument(0)?, now).await?))
        }
        Action::AppLink | Action::AppUnlink => {
            let client_id = invocation.argument(0)?;
            let [org] = org_ids(invocation)?[..] else {
                return Err(invocation.error("needs one --org ID").into());
            };
            let summary = if invocation.command.action == Action::AppLink {
                administration::link_organization(&context.apps, &context.directory, client_id, org, now).await?
            } else {
                administration::unlink_organization(&context.apps, client_id, org, now).await?
            };
            Ok(pretty(&summary))
        }
        Action::AppGrant | Action::AppRevoke => {
            let client_id = invocation.argument(0)?;
            let scopes: Vec<&str> = invocation.values("scope").collect();
            let summary = if invocation.command.action == Action::AppGrant {
                administration::grant_scopes(&context.apps, client_id, &scopes, now).await?
            } else {
                administration::revoke_scopes(&context.apps, client_id, &scopes, now).await?
            };
            Ok(pretty(&summary))
        }
        Action::AppList => Ok(pretty(&administration::list_apps(&context.apps).await?)),
        Action::ApiKeyCreate => {
            let [account_id] = invocation.parsed::<AccountId>("account", "a UUID")?[..] else {
                return Err(invocation.error("needs one --account UUID").into());
            };
            let pepper = context.pepper.get().await.map_err(|err| CliError::Other(err.to_string()))?;
            let name = invocation.value("name").unwrap_or("default");
            let (record, api_key) = ApiKey::create(account_id, name, pepper, now);
            context.api_keys.insert(&record).await.map_err(store_error)?;
            Ok(pretty(&serde_json::json!({ "api_key": api_key, "account_id": account_id, "key_id": record.key_id })))
        }
        Action::ApiKeyList => Ok(pretty(&context.api_keys.list().await.map_err(store_error)?)),
        Action::ApiKeyRevoke => {
            let key_id = invocation.argument(0)?;
            if context.api_keys.revoke(key_id).await.map_err(store_error)? {
                Ok(format!("revoked {key_id}"))
            } else {
                Err(CliError::Other(format!("no API key with key_id {key_id:?}")))
            }
        }
        Action::PepperStatus => Ok(pretty(&rotation_status(context).await?.1)),
        Action::PepperStage => Ok(pretty(&pepper::stage(&context.pepper).await?)),
        Action::PepperPromote => {
            Ok(pretty(&pepper::promote(&context.pepper, now.timestamp(), invocation.flag("force")).await?))
        }
        Action::PepperRetire => {
            let (version, status) = rotation_status(context).await?;
            let force = invocation.flag("force");
            Ok(pretty(&pepper::retire(&context.pepper, &version, &status, now.timestamp(), force).await?))
        }
        Action::FlowServerSetKey => {
            let key = flow_server_key(invocation, std::io::stdin())?;
            let secret_id = context.flow_server_secret_id.as_deref().ok_or_else(|| {
                CliError::Other(format!("{} is not set", platform_api::settings::FLOW_SERVER_SECRET_ID))
            })?;
            platform_data::secrets::write_secret(&context.secrets, secret_id, &key, "The flow server's API key")
                .await
                .map_err(store_error)?;
            Ok(format!("the flow server key is stored in {secret_id}"))
        }
    }
}

/// `admin import FILE`: progress on standard error, the summary it always printed on standard output.
async fn import_file(context: &Context, file: &str, now: DateTime<Utc>) -> Result<String, CliError> {
    let started = std::time::Instant::now();
    let bytes = std::fs::read(file).map_err(|err| CliError::Other(format!("cannot read {file}: {err}")))?;
    eprintln!("checking {file} ({} bytes)…", import_progress::thousands(bytes.len()));
    let base = std::path::Path::new(file).parent().unwrap_or(std::path::Path::new("."));
    let plan = import::prepare(&context.directory, &bytes, Some(base), now).await?;
    if !plan.uploads.is_empty() {
        let bucket = context.recordings.as_ref().ok_or_else(|| {
            CliError::Other(format!(
                "{} is not set: the recording files cannot be uploaded",
                settings::RECORDINGS_BUCKET
            ))
        })?;
        eprintln!("uploading {} recording files to {}…", plan.uploads.len(), bucket.bucket().name());
        import::upload(bucket, &plan).await?;
    }
    let summary = import_progress::apply(&context.directory, &context.meetings, plan, started)
        .await
        .map_err(ImportError::from)?;
    Ok(format!(
        "imported {} organizations, {} users, {} meetings ({} transcript segments)",
        summary.organizations, summary.users, summary.meetings, summary.transcript_segments
    ))
}

/// Every `--org ID`, as organization ids.
fn org_ids(invocation: &Invocation) -> Result<Vec<i64>, UsageError> {
    invocation.parsed("org", "an integer id")
}

/// The pepper secret as it is now, and where every credential's hash stands against it.
async fn rotation_status(context: &Context) -> Result<(credentials::SecretVersion, pepper::RotationStatus), CliError> {
    let version = context.pepper.read().await.map_err(pepper::RotationError::from)?;
    let apps = context.apps.list().await.map_err(|err| CliError::Other(err.to_string()))?;
    let keys = context.api_keys.list().await.map_err(store_error)?;
    let status = pepper::RotationStatus::new(&version, &apps, &keys);
    Ok((version, status))
}

async fn context() -> Result<Context, CliError> {
    let local: BTreeMap<String, String> = match std::env::var("LOCAL_STACK_PREFIX") {
        Ok(prefix) => {
            stack::Template::embedded().map_err(|err| CliError::Other(err.to_string()))?.stack_environment(&prefix)
        }
        Err(_) => BTreeMap::new(),
    };
    let lookup = |name: &str| settings::process_env(name).or_else(|| local.get(name).cloned());
    let sdk = aws_env::load().await;
    let db = aws_sdk_dynamodb::Client::new(&sdk);
    Ok(Context {
        apps: AppStore::new(
            db.clone(),
            settings::required(&lookup, settings::EXTERNAL_APPS_TABLE)?,
            settings::required(&lookup, settings::ACCESS_TOKENS_TABLE)?,
        ),
        directory: DirectoryStore::new(db.clone(), settings::required(&lookup, settings::DIRECTORY_TABLE)?),
        api_keys: ApiKeyStore::new(db.clone(), settings::required(&lookup, platform_api::settings::API_KEYS_TABLE)?),
        // Imports announce their meetings to external applications' webhooks, as every write does.
        meetings: MeetingStore::new(db, settings::required(&lookup, settings::MEETINGS_TABLE)?)
            .with_outbox(webhooks::settings::publisher_from_settings(&aws_env::Clients::new(sdk.clone()), &lookup)?),
        pepper: PepperSource::new(
            aws_sdk_secretsmanager::Client::new(&sdk),
            settings::required(&lookup, settings::PEPPER_SECRET_ID)?,
        ),
        secrets: aws_sdk_secretsmanager::Client::new(&sdk),
        flow_server_secret_id: lookup(platform_api::settings::FLOW_SERVER_SECRET_ID),
        recordings: lookup(settings::RECORDINGS_BUCKET)
            .filter(|name| !name.is_empty())
            .map(|name| object_storage::transfer::Transfer::new(object_storage::Bucket::new(name, &sdk))),
    })
}

/// Pretty JSON for command output.
fn pretty(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|err| format!("{{\"error\": \"{err}\"}}"))
}

/// The key of `flow-server set-key [KEY]`: the argument, else standard input, trimmed.
fn flow_server_key(invocation: &Invocation, mut stdin: impl std::io::Read) -> Result<String, CliError> {
    let key = match invocation.arguments.first() {
        Some(key) => key.clone(),
        None => {
            let mut key = String::new();
            stdin
                .read_to_string(&mut key)
                .map_err(|err| CliError::Other(format!("cannot read the key from standard input: {err}")))?;
            key
        }
    };
    let key = key.trim();
    if key.is_empty() {
        return Err(invocation.error("needs a key (an argument or standard input)").into());
    }
    Ok(key.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    fn invocation(line: &str) -> Invocation {
        match args::parse(&words(line)) {
            Ok(Parsed::Run(invocation)) => invocation,
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn the_flow_server_key_is_the_argument_or_standard_input() {
        let set_key = invocation("flow-server set-key");
        assert_eq!(flow_server_key(&invocation("flow-server set-key lf-key"), &b"ignored"[..]).unwrap(), "lf-key");
        assert_eq!(flow_server_key(&set_key, &b"  lf-from-stdin\n"[..]).unwrap(), "lf-from-stdin");
        assert!(matches!(flow_server_key(&set_key, &b" \n"[..]), Err(CliError::Usage(_))));
        assert!(args::parse(&words("flow-server set-key a b")).is_err());
    }

    #[test]
    fn organization_ids_are_integers() {
        assert_eq!(org_ids(&invocation("recount --org 1 --org=2")).unwrap(), [1, 2]);
        let error = org_ids(&invocation("recount --org x")).unwrap_err();
        assert_eq!(error.message, "recount: --org x: not an integer id");
    }

    #[tokio::test]
    async fn help_and_usage_errors_need_no_aws() {
        let list = run(&[]).await.unwrap();
        assert!(list.contains("\n  app create --name NAME --org ID...     create "), "{list}");
        assert_eq!(run(&words("--help")).await.unwrap(), list);
        assert_eq!(run(&words("help")).await.unwrap(), list);
        let help = run(&words("app create --help")).await.unwrap();
        assert!(help.starts_with("admin app create: "), "{help}");
        assert_eq!(run(&words("help app create")).await.unwrap(), help);
        for line in ["bogus", "app create --nme x --org 1", "app create --org 1 --name", "api-key revoke"] {
            assert!(matches!(run(&words(line)).await, Err(CliError::Usage(_))), "{line}");
        }
    }
}
