//! Operator CLI: import meeting data, manage external applications and API keys, rotate the
//! pepper, set the configured flow server's key.
//!
//! Against AWS it uses the normal AWS environment plus the table and secret names from the
//! stack's outputs (`MEETINGS_TABLE`, `DIRECTORY_TABLE`, `EXTERNAL_APPS_TABLE`,
//! `ACCESS_TOKENS_TABLE`, `API_KEYS_TABLE`, `PEPPER_SECRET_ID`, and for `flow-server set-key`
//! `FLOW_SERVER_SECRET_ID`). Locally, `LOCAL_STACK_PREFIX` names the
//! `make dev` stack instead (`make admin` sets it).

mod pepper;

use chrono::Utc;
use credentials::PepperSource;
use meeting_data::administration::{self, AdminError};
use meeting_data::import::{self, ImportError};
use meeting_data::settings::{self, SettingError};
use meeting_data::store::{AppStore, DirectoryStore, MeetingStore};
use platform_data::api_keys::{ApiKey, ApiKeyStore};
use platform_data::ids::AccountId;
use std::collections::BTreeMap;
use std::process::ExitCode;

const USAGE: &str = "usage:
  admin import FILE.json
  admin recount --org ID [--org ID ...]
  admin reindex --org ID [--org ID ...]
  admin app create --name NAME --org ID [--org ID ...]
  admin app deactivate CLIENT_ID
  admin app link CLIENT_ID --org ID
  admin app unlink CLIENT_ID --org ID
  admin app list
  admin api-key create --account UUID [--name NAME]
  admin api-key list
  admin api-key revoke KEY_ID
  admin pepper status
  admin pepper stage
  admin pepper promote [--force]
  admin pepper retire [--force]
  admin flow-server set-key [KEY]      (KEY from standard input when not given)";

#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error("{0}\n\n{USAGE}")]
    Usage(String),
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
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &[String]) -> Result<String, CliError> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    if words.is_empty() || words.contains(&"--help") || words.contains(&"-h") {
        return Ok(USAGE.to_owned());
    }
    let context = context().await?;
    let now = Utc::now();
    match words.as_slice() {
        ["import", file] => {
            let bytes = std::fs::read(file).map_err(|err| CliError::Other(format!("cannot read {file}: {err}")))?;
            let plan = import::prepare(&context.directory, &bytes, now).await?;
            let summary =
                import::apply(&context.directory, &context.meetings, &plan).await.map_err(ImportError::from)?;
            Ok(format!(
                "imported {} organizations, {} users, {} meetings ({} transcript segments)",
                summary.organizations, summary.users, summary.meetings, summary.transcript_segments
            ))
        }
        ["recount", rest @ ..] => {
            let Options { positional, orgs, .. } = options(rest)?;
            if !positional.is_empty() || orgs.is_empty() {
                return Err(CliError::Usage("recount needs one or more --org ID".into()));
            }
            let mut counts = BTreeMap::new();
            for org in orgs {
                let count = context.meetings.recount(org).await.map_err(|err| CliError::Other(err.to_string()))?;
                counts.insert(org, count);
            }
            Ok(pretty(&counts))
        }
        ["reindex", rest @ ..] => {
            // Organizations stored before the filter indexes: every meeting written again.
            let Options { positional, orgs, .. } = options(rest)?;
            if !positional.is_empty() || orgs.is_empty() {
                return Err(CliError::Usage("reindex needs one or more --org ID".into()));
            }
            let mut written = BTreeMap::new();
            for org in orgs {
                let meetings = context.meetings.reindex(org).await.map_err(|err| CliError::Other(err.to_string()))?;
                written.insert(org, meetings);
            }
            Ok(pretty(&written))
        }
        ["app", "create", rest @ ..] => {
            let Options { positional, name, orgs, .. } = options(rest)?;
            let name = name.ok_or_else(|| CliError::Usage("app create needs --name".into()))?;
            if !positional.is_empty() {
                return Err(CliError::Usage(format!("unexpected arguments: {positional:?}")));
            }
            let pepper = context.pepper.get().await.map_err(|err| CliError::Other(err.to_string()))?;
            let issued =
                administration::create_app(&context.apps, &context.directory, pepper, &name, &orgs, now).await?;
            Ok(pretty(&issued))
        }
        ["app", "deactivate", client_id] => {
            Ok(pretty(&administration::deactivate_app(&context.apps, client_id, now).await?))
        }
        ["app", verb @ ("link" | "unlink"), rest @ ..] => {
            let Options { positional, orgs, .. } = options(rest)?;
            let ([client_id], [org]) = (positional.as_slice(), orgs.as_slice()) else {
                return Err(CliError::Usage(format!("app {verb} needs CLIENT_ID and one --org ID")));
            };
            let summary = if *verb == "link" {
                administration::link_organization(&context.apps, &context.directory, client_id, *org, now).await?
            } else {
                administration::unlink_organization(&context.apps, client_id, *org, now).await?
            };
            Ok(pretty(&summary))
        }
        ["app", "list"] => Ok(pretty(&administration::list_apps(&context.apps).await?)),
        ["api-key", "create", rest @ ..] => {
            let Options { positional, name, orgs, account } = options(rest)?;
            if !positional.is_empty() || !orgs.is_empty() {
                return Err(CliError::Usage("api-key create takes only --account and --name".into()));
            }
            let account = account.ok_or_else(|| CliError::Usage("api-key create needs --account UUID".into()))?;
            let account_id: AccountId =
                account.parse().map_err(|_| CliError::Usage(format!("--account {account}: not a UUID")))?;
            let pepper = context.pepper.get().await.map_err(|err| CliError::Other(err.to_string()))?;
            let (record, api_key) = ApiKey::create(account_id, name.as_deref().unwrap_or("default"), pepper, now);
            context.api_keys.insert(&record).await.map_err(store_error)?;
            Ok(pretty(&serde_json::json!({ "api_key": api_key, "account_id": account_id, "key_id": record.key_id })))
        }
        ["pepper", "status"] => Ok(pretty(&rotation_status(&context).await?.1)),
        ["pepper", "stage"] => Ok(pretty(&pepper::stage(&context.pepper).await?)),
        ["pepper", "promote", rest @ ..] => {
            let force = flag_only(rest, "pepper promote")?;
            Ok(pretty(&pepper::promote(&context.pepper, now.timestamp(), force).await?))
        }
        ["pepper", "retire", rest @ ..] => {
            let force = flag_only(rest, "pepper retire")?;
            let (version, status) = rotation_status(&context).await?;
            Ok(pretty(&pepper::retire(&context.pepper, &version, &status, now.timestamp(), force).await?))
        }
        ["flow-server", "set-key", rest @ ..] => {
            let key = flow_server_key(rest, std::io::stdin())?;
            let key = key.as_str();
            let secret_id = context.flow_server_secret_id.as_deref().ok_or_else(|| {
                CliError::Other(format!("{} is not set", platform_api::settings::FLOW_SERVER_SECRET_ID))
            })?;
            platform_data::secrets::write_secret(&context.secrets, secret_id, key, "The flow server's API key")
                .await
                .map_err(store_error)?;
            Ok(format!("the flow server key is stored in {secret_id}"))
        }
        ["api-key", "list"] => Ok(pretty(&context.api_keys.list().await.map_err(store_error)?)),
        ["api-key", "revoke", key_id] => {
            if context.api_keys.revoke(key_id).await.map_err(store_error)? {
                Ok(format!("revoked {key_id}"))
            } else {
                Err(CliError::Other(format!("no API key with key_id {key_id:?}")))
            }
        }
        _ => Err(CliError::Usage(format!("unknown command: {}", words.join(" ")))),
    }
}

/// The pepper secret as it is now, and where every credential's hash stands against it.
async fn rotation_status(context: &Context) -> Result<(credentials::SecretVersion, pepper::RotationStatus), CliError> {
    let version = context.pepper.read().await.map_err(pepper::RotationError::from)?;
    let apps = context.apps.list().await.map_err(|err| CliError::Other(err.to_string()))?;
    let keys = context.api_keys.list().await.map_err(store_error)?;
    let status = pepper::RotationStatus::new(&version, &apps, &keys);
    Ok((version, status))
}

/// Whether `--force` was given, refusing any other argument.
fn flag_only(words: &[&str], command: &str) -> Result<bool, CliError> {
    match words {
        [] => Ok(false),
        ["--force"] => Ok(true),
        _ => Err(CliError::Usage(format!("{command} takes only --force"))),
    }
}

/// The arguments after a command's verb.
struct Options {
    positional: Vec<String>,
    name: Option<String>,
    orgs: Vec<i64>,
    account: Option<String>,
}

/// Positional words, `--name` and every `--org`.
fn options(words: &[&str]) -> Result<Options, CliError> {
    let mut positional = Vec::new();
    let mut name = None;
    let mut orgs = Vec::new();
    let mut account = None;
    let mut words = words.iter();
    while let Some(word) = words.next() {
        match *word {
            "--name" => {
                name = Some(words.next().ok_or_else(|| CliError::Usage("--name needs a value".into()))?.to_string())
            }
            "--account" => {
                account =
                    Some(words.next().ok_or_else(|| CliError::Usage("--account needs a UUID".into()))?.to_string())
            }
            "--org" => {
                let value = words.next().ok_or_else(|| CliError::Usage("--org needs an organization id".into()))?;
                orgs.push(value.parse().map_err(|_| CliError::Usage(format!("--org {value}: not an integer id")))?);
            }
            other if other.starts_with("--") => return Err(CliError::Usage(format!("unknown option {other}"))),
            other => positional.push(other.to_owned()),
        }
    }
    Ok(Options { positional, name, orgs, account })
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
        meetings: MeetingStore::new(db, settings::required(&lookup, settings::MEETINGS_TABLE)?),
        pepper: PepperSource::new(
            aws_sdk_secretsmanager::Client::new(&sdk),
            settings::required(&lookup, settings::PEPPER_SECRET_ID)?,
        ),
        secrets: aws_sdk_secretsmanager::Client::new(&sdk),
        flow_server_secret_id: lookup(platform_api::settings::FLOW_SERVER_SECRET_ID),
    })
}

/// Pretty JSON for command output.
fn pretty(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|err| format!("{{\"error\": \"{err}\"}}"))
}

/// The key of `flow-server set-key [KEY]`: the argument, else standard input, trimmed.
fn flow_server_key(rest: &[&str], mut stdin: impl std::io::Read) -> Result<String, CliError> {
    let key = match rest {
        [key] => (*key).to_owned(),
        [] => {
            let mut key = String::new();
            stdin
                .read_to_string(&mut key)
                .map_err(|err| CliError::Other(format!("cannot read the key from standard input: {err}")))?;
            key
        }
        _ => return Err(CliError::Usage("flow-server set-key takes at most one KEY".into())),
    };
    let key = key.trim();
    if key.is_empty() {
        return Err(CliError::Usage("flow-server set-key needs a key (an argument or standard input)".into()));
    }
    Ok(key.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_collect_positional_name_and_every_org() {
        let parsed = options(&["CLIENT", "--name", "Acme CRM", "--org", "1", "--org", "2", "--account", "a"]).unwrap();
        assert_eq!(parsed.account.as_deref(), Some("a"));
        assert_eq!(parsed.positional, ["CLIENT"]);
        assert_eq!(parsed.name.as_deref(), Some("Acme CRM"));
        assert_eq!(parsed.orgs, [1, 2]);
    }

    #[test]
    fn bad_options_are_usage_errors() {
        for words in [&["--org"][..], &["--org", "x"], &["--name"], &["--account"], &["--bogus"]] {
            assert!(matches!(options(words), Err(CliError::Usage(_))), "{words:?}");
        }
    }

    #[test]
    fn only_force_follows_a_rotation_step() {
        assert!(!flag_only(&[], "pepper promote").unwrap());
        assert!(flag_only(&["--force"], "pepper promote").unwrap());
        assert!(matches!(flag_only(&["--forse"], "pepper promote"), Err(CliError::Usage(_))));
    }

    #[test]
    fn the_flow_server_key_is_the_argument_or_standard_input() {
        assert_eq!(flow_server_key(&["lf-key"], &b"ignored"[..]).unwrap(), "lf-key");
        assert_eq!(flow_server_key(&[], &b"  lf-from-stdin\n"[..]).unwrap(), "lf-from-stdin");
        assert!(matches!(flow_server_key(&[], &b" \n"[..]), Err(CliError::Usage(_))));
        assert!(matches!(flow_server_key(&["a", "b"], &b""[..]), Err(CliError::Usage(_))));
    }

    #[tokio::test]
    async fn help_and_unknown_commands_need_no_aws() {
        assert_eq!(run(&[]).await.unwrap(), USAGE);
        assert_eq!(run(&["--help".to_owned()]).await.unwrap(), USAGE);
    }
}
