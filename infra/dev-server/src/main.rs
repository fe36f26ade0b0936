//! `make dev`: creates the local stack on the local AWS endpoint, seeds the demo, and serves
//! the template's two REST APIs until Ctrl-C: the backend and the meeting API (`Api`) on
//! `DEV_PORT` (3000), the runner (`RunnerApi`) on `RUNNER_PORT` (3001). Each answers at its root
//! (as on a custom domain) and under its stage (`/Prod/...`, as on the `execute-api` URL).
//!
//! `dev-server lambda` (`make dev-lambda`) serves the same routes in Lambda mode: every function
//! runs as its own binary under `cargo lambda watch`, invoked with the events AWS sends it
//! (docs/local-stack.md).
//!
//! `dev-server env BINARY` prints the `export` lines a single function needs (for `cargo lambda
//! watch`) against the running `make dev` stack.

use chrono::Utc;
use dev_server::startup::step;
use meeting_data::access::WEBHOOKS_SCOPE;
use meeting_data::administration;
use meeting_data::settings;
use meeting_data::store::{AppStore, DirectoryStore, MeetingStore};
use platform_data::agent_spec::parse_agent_spec;
use platform_data::agents::{Agent, AgentStore};
use platform_data::api_keys::{ApiKey, ApiKeyStore};
use platform_data::ids::{AccountId, AgentId};
use platform_data::language_models::{LanguageModel, LanguageModelStore, parse_language_model};
use stack::Template;
use std::process::ExitCode;

const DEMO_FIXTURE: &[u8] = include_bytes!("../../../fixtures/demo-meetings.json");
/// Where the demo fixture's recording files are read from (`make dev` runs in the source tree).
const FIXTURES_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures");

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        [] => run(Mode::InProcess).await,
        ["lambda"] => run(Mode::Lambda).await,
        ["env", binary] => print_env(binary),
        _ => Err("usage: dev-server [lambda | env BINARY]".to_owned()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("dev-server: {err}");
            ExitCode::FAILURE
        }
    }
}

fn prefix() -> String {
    std::env::var("LOCAL_STACK_PREFIX").unwrap_or_else(|_| "local-".to_owned())
}

/// The template, with parameters overridden by environment variables of the same name.
fn local_template() -> Result<Template, String> {
    let mut template = Template::embedded().map_err(|err| err.to_string())?;
    template.override_parameters(|name| std::env::var(name).ok());
    Ok(template)
}

fn print_env(binary: &str) -> Result<(), String> {
    let template = local_template()?;
    let function = template
        .functions
        .iter()
        .find(|function| function.binary == binary)
        .ok_or_else(|| format!("no function with binary {binary:?} in template.yaml"))?;
    for (name, value) in template.environment(function, &prefix()) {
        println!("export {name}='{value}'");
    }
    Ok(())
}

/// Where the functions run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Every handler in this process (`make dev`).
    InProcess,
    /// Every function as its own binary under `cargo lambda watch` (`make dev-lambda`).
    Lambda,
}

/// The most instances of one function at once in Lambda mode, and the most concurrent batches
/// of one queue's event source mapping.
const FUNCTION_INSTANCES: usize = 2;

/// Starts every function of the template under `cargo lambda watch` (`make dev-lambda`).
async fn watch_functions(template: &Template, prefix: &str) -> Result<dev_server::lambda::WatchedFunctions, String> {
    let workspace = std::env::current_dir().map_err(|err| format!("no working directory: {err}"))?;
    // The function binaries are built beside this one (make dev-lambda builds them first).
    let executable = std::env::current_exe().map_err(|err| format!("no executable path: {err}"))?;
    let binaries = executable.parent().ok_or("the executable has no directory")?.to_path_buf();
    let options = dev_server::lambda::WatchOptions {
        cargo_lambda: workspace.join(".venv/bin/cargo-lambda"),
        state_dir: workspace.join(".local/dev-lambda"),
        workspace,
        binaries,
        local_env: dev_server::lambda::local_aws_environment()
            .into_iter()
            .chain(dev_server::lambda::telemetry_environment())
            .collect(),
        instances: FUNCTION_INSTANCES,
    };
    println!("dev-server: starting cargo lambda watch for every function (logs in .local/dev-lambda/)");
    let started = std::time::Instant::now();
    let watched = dev_server::lambda::WatchedFunctions::start(template, prefix, &options, None).await?;
    dev_server::triggers::warm_up(&watched.invoker, template).await;
    println!("dev-server: every function answers ({:.0?})", started.elapsed());
    Ok(watched)
}

async fn run(mode: Mode) -> Result<(), String> {
    dev_server::logs::init()?;
    let port: u16 = std::env::var("DEV_PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(3000);
    let prefix = prefix();
    let sdk = aws_env::load().await;
    let template = local_template()?;
    let resources = format!(
        "creating the local stack's {} tables, {} queues and {} secrets where missing",
        template.tables.len(),
        template.queues.len(),
        template.secrets.len()
    );
    step(&resources, stack::bootstrap(&sdk, &template, &prefix)).await.map_err(|err| err.to_string())?;
    let credentials = step("importing the demo meetings and their application", seed(&sdk, &template, &prefix)).await?;
    set_flow_server_key(&sdk, &template, &prefix).await?;
    // The demo agent's language model, served on a free loopback port (allowed by make dev's
    // OutboundAllowedHosts).
    let demo_model = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|err| format!("cannot listen for the demo model: {err}"))?;
    let demo_model_url = format!(
        "http://{}/v1",
        demo_model.local_addr().map_err(|err| format!("the demo model has no address: {err}"))?
    );
    let (account_id, api_key, demo_agent_id) = step(
        "creating the demo API key, language model and agent",
        seed_api_key(&sdk, &template, &prefix, &demo_model_url),
    )
    .await?;
    write_credentials(&serde_json::json!({
        "client_id": credentials.client_id,
        "client_secret": credentials.client_secret,
        "api_key": api_key,
        "demo_agent_id": demo_agent_id,
    }))?;

    let watched = match mode {
        Mode::Lambda => Some(watch_functions(&template, &prefix).await?),
        Mode::InProcess => None,
    };
    let (router, runner_router) = match &watched {
        Some(watched) => (
            dev_server::Router::invoking(&template, &watched.invoker, dev_server::BACKEND_API)?,
            dev_server::Router::invoking(&template, &watched.invoker, dev_server::RUNNER_API)?,
        ),
        None => (
            dev_server::Router::from_template(&template, &sdk, &prefix, dev_server::BACKEND_API)?,
            dev_server::Router::from_template(&template, &sdk, &prefix, dev_server::RUNNER_API)?,
        ),
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|err| format!("cannot listen on 127.0.0.1:{port}: {err}"))?;
    let runner_port: u16 = std::env::var("RUNNER_PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(3001);
    let runner_listener = tokio::net::TcpListener::bind(("127.0.0.1", runner_port))
        .await
        .map_err(|err| format!("cannot listen on 127.0.0.1:{runner_port}: {err}"))?;
    let base = format!("http://127.0.0.1:{port}");
    let runner_base = format!("http://127.0.0.1:{runner_port}");
    println!(
        "\nMeeting data API on {base}\n\n  client_id:     {}\n  client_secret: {}\n\nTry:\n  \
         TOKEN=$(curl -s -X POST {base}/api/auth/token/ -d grant_type=client_credentials \
         -d client_id={} -d client_secret={} | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"access_token\"])')\n  \
         curl -s -H \"Authorization: Bearer $TOKEN\" {base}/api/v1/external/meeting/\n\n\
         Agent platform backend on {base}\n\n  account_id: {account_id}\n  api_key:    {api_key}\n\nTry:\n  \
         curl -s -H \"X-API-Key: {api_key}\" {base}/health-check/auth-test\n  \
         curl -s -H \"X-API-Key: {api_key}\" {base}/agents/\n\n\
         Runner service on {runner_base}\n\nTry:\n  \
         curl -s -H \"X-API-Key: {api_key}\" {runner_base}/execute/a2a/agents/list\n  \
         curl -s -H \"X-API-Key: {api_key}\" {runner_base}/health-check/detailed\n\n\
         API reference pages (OpenAPI documents at .../openapi.json):\n  {base}/api/v1/external/docs\n  \
         {base}/docs\n  {runner_base}/docs\n\nCtrl-C stops everything.",
        credentials.client_id, credentials.client_secret, credentials.client_id, credentials.client_secret
    );
    let (stop, _) = tokio::sync::watch::channel(false);
    let stopped = |stop: &tokio::sync::watch::Sender<bool>| {
        let mut stopped = stop.subscribe();
        async move {
            let _ = stopped.changed().await;
        }
    };
    let mut workers = Vec::new();
    match &watched {
        // The template's event sources, invoking the function binaries.
        Some(watched) => {
            let sqs = aws_sdk_sqs::Client::new(&sdk);
            for mapping in dev_server::triggers::queue_mappings(&template, &prefix, &sqs, FUNCTION_INSTANCES) {
                workers.push(tokio::spawn(mapping.run(std::sync::Arc::clone(&watched.invoker), stopped(&stop))));
            }
            for rule in dev_server::triggers::schedule_rules(&template, &prefix)? {
                workers.push(tokio::spawn(rule.run(std::sync::Arc::clone(&watched.invoker), stopped(&stop))));
            }
        }
        None => {
            let mut env = template.stack_environment(&prefix);
            env.extend(dev_server::lambda::telemetry_environment());
            let lookup = |name: &str| env.get(name).cloned();
            let aws = aws_env::Clients::new(sdk.clone());
            let audience = meeting_data::store::ApplicationAudience::from_settings(&aws, &lookup)
                .map_err(|err| err.to_string())?;
            let deliverer = platform_api::webhooks::deliverer_from_settings(&aws, &lookup)
                .map_err(|err| err.to_string())?
                .with_audience(audience);
            let sweeper =
                platform_api::webhooks::sweeper_from_settings(&aws, &lookup).map_err(|err| err.to_string())?;
            let run_worker =
                platform_api::agent_runs::run_worker_from_settings(&aws, &lookup).map_err(|err| err.to_string())?;
            let run_queue = run_worker.queue().clone();
            let scheduler =
                platform_api::schedules::scheduler_from_settings(&aws, &lookup).map_err(|err| err.to_string())?;
            workers.push(tokio::spawn(dev_server::run_runner_worker(run_worker, run_queue, stopped(&stop))));
            workers.push(tokio::spawn(dev_server::run_delivery_worker(deliverer, stopped(&stop))));
            workers.push(tokio::spawn(dev_server::run_sweeper(sweeper, dev_server::SWEEP_INTERVAL, stopped(&stop))));
            workers.push(tokio::spawn(dev_server::run_scheduler(scheduler, stopped(&stop))));
        }
    }
    let mut model_stopped = stop.subscribe();
    let model = tokio::spawn(dev_server::demo_model::serve(demo_model, async move {
        let _ = model_stopped.changed().await;
    }));
    let mut runner_stopped = stop.subscribe();
    let runner_service = tokio::spawn(dev_server::serve(runner_listener, runner_router, async move {
        let _ = runner_stopped.changed().await;
    }));
    dev_server::serve(listener, router, async {
        stop_signal().await;
    })
    .await;
    let _ = stop.send(true);
    for worker in workers {
        let _ = worker.await;
    }
    let _ = runner_service.await;
    let _ = model.await;
    drop(watched);
    println!("dev-server: stopped");
    Ok(())
}

/// Ctrl-C or SIGTERM: either stops the dev server in order, so that in Lambda mode the watch
/// processes (each in a process group of its own) are stopped with it.
async fn stop_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut terminate) => {
                terminate.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
}

/// Where `make dev` leaves the demo credentials for local tools (`make load`); `DEV_CREDENTIALS_FILE`
/// moves them (the contract run's own stack, beside a developer's `make dev`).
const CREDENTIALS_FILE: &str = ".local/dev-credentials.json";

/// Writes the demo credentials to their file, readable by the owner only.
fn write_credentials(credentials: &serde_json::Value) -> Result<(), String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::env::var("DEV_CREDENTIALS_FILE").unwrap_or_else(|_| CREDENTIALS_FILE.to_owned());
    let path = std::path::Path::new(&file);
    if let Some(folder) = path.parent() {
        std::fs::create_dir_all(folder).map_err(|err| format!("{}: {err}", folder.display()))?;
    }
    let _ = std::fs::remove_file(path);
    let mut written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|err| format!("{file}: {err}"))?;
    written.write_all(credentials.to_string().as_bytes()).map_err(|err| format!("{file}: {err}"))
}

/// Creates the demo account's API key, its language model (the demo model at
/// `demo_model_url`) and a demo agent on it; returns the account id, the key and the agent id.
async fn seed_api_key(
    sdk: &aws_env::SdkConfig,
    template: &Template,
    prefix: &str,
    demo_model_url: &str,
) -> Result<(AccountId, String, AgentId), String> {
    let env = template.stack_environment(prefix);
    let lookup = |name: &str| env.get(name).cloned();
    let setting = |name| settings::required(&lookup, name).map_err(|err| err.to_string());
    let keys = ApiKeyStore::new(aws_sdk_dynamodb::Client::new(sdk), setting(platform_api::settings::API_KEYS_TABLE)?);
    let pepper_source =
        credentials::PepperSource::new(aws_sdk_secretsmanager::Client::new(sdk), setting(settings::PEPPER_SECRET_ID)?);
    let pepper = pepper_source.get().await.map_err(|err| err.to_string())?;
    let account_id = AccountId::new_v4();
    let (record, key) = ApiKey::create(account_id, "Demo key", pepper, Utc::now());
    keys.insert(&record).await.map_err(|err| err.to_string())?;
    let demo_agent = br#"{"type": "config", "name": "Demo assistant", "framework": "chainlib",
        "provider": "openai_compatible", "model_name": "demo-model", "description": "Seeded by make dev",
        "instruction": "Answer questions about the demo meetings."}"#;
    let now = Utc::now();
    let demo_model = serde_json::json!({"name": "Demo model", "provider": "openai_compatible",
        "model_name": dev_server::demo_model::DEMO_MODEL_NAME, "base_url": demo_model_url});
    let model = parse_language_model(demo_model.to_string().as_bytes())
        .map_err(|problems| format!("demo model: {problems:?}"))?;
    let models = LanguageModelStore::new(
        aws_sdk_dynamodb::Client::new(sdk),
        setting(platform_api::settings::LANGUAGE_MODELS_TABLE)?,
    );
    models.create(&LanguageModel::new(account_id, model.spec, now)).await.map_err(|err| err.to_string())?;
    let spec = parse_agent_spec(demo_agent).map_err(|problems| format!("demo agent: {problems:?}"))?;
    let agent = Agent::new(account_id, spec, now);
    let agents = AgentStore::new(aws_sdk_dynamodb::Client::new(sdk), setting(platform_api::settings::AGENTS_TABLE)?);
    agents.create(&agent).await.map_err(|err| err.to_string())?;
    Ok((account_id, key, agent.id))
}

/// The variable whose value `make dev` stores as the configured flow server's key.
const FLOW_SERVER_API_KEY: &str = "FLOW_SERVER_API_KEY";

/// Stores `FLOW_SERVER_API_KEY` (when set) in the local `FlowServerSecret`, so flowtool syncs
/// without a body, and the agents they create, work against `FlowServerUrl` with no manual step.
async fn set_flow_server_key(sdk: &aws_env::SdkConfig, template: &Template, prefix: &str) -> Result<(), String> {
    let Some(key) = std::env::var(FLOW_SERVER_API_KEY).ok().filter(|key| !key.trim().is_empty()) else {
        return Ok(());
    };
    dev_server::store_flow_server_key(sdk, template, prefix, &key)
        .await
        .map_err(|err| format!("{FLOW_SERVER_API_KEY}: {err}"))?;
    println!("dev-server: {FLOW_SERVER_API_KEY} stored in FlowServerSecret");
    Ok(())
}

/// Imports the demo meetings and creates an application linked to every demo organization.
async fn seed(
    sdk: &aws_env::SdkConfig,
    template: &Template,
    prefix: &str,
) -> Result<administration::IssuedCredentials, String> {
    let env = template.stack_environment(prefix);
    let lookup = |name: &str| env.get(name).cloned();
    let setting = |name| settings::required(&lookup, name).map_err(|err| err.to_string());
    let db = aws_sdk_dynamodb::Client::new(sdk);
    let directory = DirectoryStore::new(db.clone(), setting(settings::DIRECTORY_TABLE)?);
    let outbox = webhooks::settings::publisher_from_settings(&aws_env::Clients::new(sdk.clone()), &lookup)
        .map_err(|err| err.to_string())?;
    let meetings = MeetingStore::new(db.clone(), setting(settings::MEETINGS_TABLE)?).with_outbox(outbox);
    let apps = AppStore::new(db, setting(settings::EXTERNAL_APPS_TABLE)?, setting(settings::ACCESS_TOKENS_TABLE)?);
    let now = Utc::now();
    let fixtures = std::path::Path::new(FIXTURES_DIR);
    let plan = meeting_data::import::prepare(&directory, DEMO_FIXTURE, Some(fixtures), now)
        .await
        .map_err(|err| err.to_string())?;
    let recordings = object_storage::Bucket::new(setting(settings::RECORDINGS_BUCKET)?, sdk);
    meeting_data::import::upload(&object_storage::transfer::Transfer::new(recordings), &plan)
        .await
        .map_err(|err| err.to_string())?;
    meeting_data::import::apply(&directory, &meetings, &plan).await.map_err(|err| err.to_string())?;
    let pepper_source =
        credentials::PepperSource::new(aws_sdk_secretsmanager::Client::new(sdk), setting(settings::PEPPER_SECRET_ID)?);
    let pepper = pepper_source.get().await.map_err(|err| err.to_string())?;
    let organizations: Vec<i64> = plan.organizations.iter().map(|o| o.id).collect();
    administration::create_app(&apps, &directory, pepper, "Demo integration", &organizations, &[WEBHOOKS_SCOPE], now)
        .await
        .map_err(|err| err.to_string())
}
