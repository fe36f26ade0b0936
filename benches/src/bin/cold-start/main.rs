//! `make bench`, cold start: every function's release binary started fresh against a local
//! Lambda Runtime API (`integration_tests::runtime_api`), with the environment the template gives it and the
//! local AWS endpoint, interleaved with a bare `lambda_http` binary built the same way.
//!
//! For each function it prints the medians of:
//! - **init**: exec → the first `GET /next` (what Lambda bills as Init Duration);
//! - **first**: that event → its answer, a real request against the local AWS endpoint;
//! - **warm**: the same kind of request again in the same process;
//! - **own**: of those, the time no exchange with AWS was under way (a proxy in front of the
//!   endpoint records each), i.e. the function's own work: its first request against its warm.
//!   The proxy speaks HTTPS with keep-alive, as AWS's endpoints do (`aws_proxy`), so a first
//!   request pays the TLS handshakes it would pay in AWS and a warm one reuses the connections;
//! - **cpu**: the CPU time the process used for the request (its threads' `schedstat`, read by
//!   the Runtime API while the function waits for it), kernel time included: what the function
//!   computed, whether or not an exchange with AWS was under way meanwhile, so it is not a
//!   part of "own" (a function that prepares a call while another is in flight counts it in
//!   both), but says how much of "own" is computing rather than waiting;
//! - **init private** (`Private_Dirty`) when the function first asks for an event: the memory
//!   its init wrote (heap, stacks, relocated data), the figure compared with bare's; and **init
//!   RSS**, all resident pages then, the binary's clean page-cache pages included (they grow with
//!   its size: the kernel maps 64 KB around each page touched);
//! - **peak RSS** (`VmHWM`) once the function is idle again, after its two requests.
//!
//! Figures only; nothing here is asserted. `COLD_START_WRAPPER` runs each binary under a
//! diagnostic tool (strace, perf) to see where the time goes. Binaries come from `target/release` (`make bench`
//! builds them first). Run by hand: `infra/scripts/with-local-aws cargo run --profile bench -p benches
//! --bin cold-start [-- FUNCTION…]`; `COLD_START_RUNS` sets the number of processes (15);
//! `COLD_START_AWS_TLS=0` has the proxy speak plain HTTP, to see what TLS costs; `COLD_START_BINARIES`
//! names another folder of release binaries (another build, to compare);
//! `COLD_START_DEBUG=1` prints each process's first request: its time, AWS time, CPU time and
//! the exchanges the proxy saw (µs from the event's arrival).

mod aws_proxy;

use agent_runtime::lifecycle::{RunLifecycle, StartRun};
use agent_runtime::runs::{RunInput, RunOrigin, RunType};
use aws_proxy::AwsProxy;
use http::Method;
use integration_tests::local_server::{LocalServer, respond};
use integration_tests::model_server::{ModelServer, text_reply};
use integration_tests::runtime_api::{Mark, RuntimeApi, Stamp, gateway_event};
use integration_tests::{TestClock, TestStack, demo_fixture, obtain_scoped_token};
use meeting_api::AuthService;
use platform_api::{AgentsService, McpsService, SchedulesService, ToolsService, WebhooksService};
use queues::ReceivedMessage;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Fresh processes per function (`COLD_START_RUNS` overrides it).
const RUNS: usize = 15;
const BARE: &str = "bare-lambda";
/// The pause before each process starts (see `sample`).
const SETTLE: Duration = Duration::from_millis(100);

/// What one fresh process measured.
struct Sample {
    init: Duration,
    first: Duration,
    /// Of `first`, the time an exchange with the AWS endpoint was under way.
    first_aws: Duration,
    /// The CPU time the process used for the first request.
    first_cpu: Option<Duration>,
    warm: Duration,
    warm_aws: Duration,
    warm_cpu: Option<Duration>,
    init_rss_kb: u64,
    init_private_kb: u64,
    peak_rss_kb: u64,
}

/// How a function is invoked: the same HTTP request twice, or fresh events per process.
enum Events {
    Http { method: &'static str, path: String, headers: Value, body: Option<String> },
    Scheduled,
    RunnerQueue,
    DeliveryQueue,
}

struct Case {
    binary: &'static str,
    events: Events,
    /// The status the request must answer with (HTTP functions), so a refusal isn't measured.
    status: u16,
}

/// The records the requests read, created once in the local stack.
struct World {
    stack: TestStack,
    env_overrides: Vec<(&'static str, String)>,
    /// Every function reaches the AWS endpoint through it.
    aws: AwsProxy,
    /// The agent's language model and the webhook receiver: kept serving while the bench runs.
    _model: ModelServer,
    _receiver: LocalServer,
    runner: RunLifecycle,
    agent: platform_data::agents::Agent,
    webhook_endpoint: String,
    key: String,
}

#[tokio::main]
async fn main() {
    let only: Vec<String> = std::env::args().skip(1).collect();
    let binaries = release_dir();
    let runs = std::env::var("COLD_START_RUNS").ok().and_then(|runs| runs.parse().ok()).unwrap_or(RUNS);
    let (world, cases) = prepare(runs).await;
    let cases: Vec<Case> =
        cases.into_iter().filter(|case| only.is_empty() || only.iter().any(|name| name == case.binary)).collect();
    let template = stack::Template::embedded().expect("template.yaml parses");

    let mut samples: Vec<Vec<Sample>> = cases.iter().map(|_| Vec::new()).collect();
    let mut bare = Vec::new();
    for run in 0..runs {
        for (index, case) in cases.iter().enumerate() {
            // The baseline between every function, so drift on the machine hits both alike.
            bare.push(sample(&binaries, &bare_case(), &world, &template).await);
            samples[index].push(sample(&binaries, case, &world, &template).await);
        }
        eprintln!("run {}/{runs} done", run + 1);
    }

    let bare = Medians::of(&bare);
    println!();
    println!(
        "Cold start: median of {runs} fresh processes each, interleaved with `{BARE}` (release builds, local Runtime API, DynamoDB Local + moto)"
    );
    println!("(own: the part of a request when no exchange with the AWS endpoint was under way;");
    println!(" cpu: the CPU time the process used for the request, kernel included, overlapping AWS or not)");
    println!(
        "{:<18} {:>8} {:>7} {:>12} {:>7} {:>12} {:>9} {:>10} {:>10} {:>9} {:>9} {:>12}",
        "function",
        "init ms",
        "× bare",
        "init priv KB",
        "× bare",
        "init RSS MB",
        "first ms",
        "first own",
        "first cpu",
        "warm own",
        "warm cpu",
        "peak RSS MB",
    );
    bare.print(BARE, &bare);
    for (case, samples) in cases.iter().zip(&samples) {
        Medians::of(samples).print(case.binary, &bare);
    }
    println!();
    println!("Binary sizes (target/release, x86_64; the deployed arm64 sizes are in docs/performance.md)");
    for binary in std::iter::once(BARE).chain(cases.iter().map(|case| case.binary)) {
        let size = std::fs::metadata(binaries.join(binary)).map(|meta| meta.len()).unwrap_or(0);
        println!("{binary:<18} {:>6.2} MB", size as f64 / 1_000_000.0);
    }
    drop(world);
}

struct Medians {
    init: f64,
    first: f64,
    first_own: f64,
    first_cpu: f64,
    warm_own: f64,
    warm_cpu: f64,
    init_private: f64,
    init_rss: f64,
    peak_rss: f64,
}

impl Medians {
    fn of(samples: &[Sample]) -> Self {
        let ms = |pick: &dyn Fn(&Sample) -> Duration| {
            median(samples.iter().map(|s| pick(s).as_secs_f64() * 1000.0).collect())
        };
        Self {
            init: ms(&|s| s.init),
            first: ms(&|s| s.first),
            first_own: ms(&|s| s.first.saturating_sub(s.first_aws)),
            first_cpu: cpu_ms(samples, |s| s.first_cpu),
            warm_own: ms(&|s| s.warm.saturating_sub(s.warm_aws)),
            warm_cpu: cpu_ms(samples, |s| s.warm_cpu),
            init_private: median(samples.iter().map(|s| s.init_private_kb as f64).collect()),
            init_rss: median(samples.iter().map(|s| s.init_rss_kb as f64 / 1024.0).collect()),
            peak_rss: median(samples.iter().map(|s| s.peak_rss_kb as f64 / 1024.0).collect()),
        }
    }

    fn print(&self, name: &str, bare: &Medians) {
        println!(
            "{name:<18} {:>8.2} {:>7.2} {:>12.0} {:>7.2} {:>12.2} {:>9.2} {:>10.2} {:>10.2} {:>9.2} {:>9.2} {:>12.1}",
            self.init,
            self.init / bare.init,
            self.init_private,
            self.init_private / bare.init_private,
            self.init_rss,
            self.first,
            self.first_own,
            self.first_cpu,
            self.warm_own,
            self.warm_cpu,
            self.peak_rss,
        );
    }
}

/// The median CPU time in ms, NaN when it could not be read (a `COLD_START_WRAPPER` process
/// is the wrapper's, so its figure is the wrapper's too).
fn cpu_ms(samples: &[Sample], pick: impl Fn(&Sample) -> Option<Duration>) -> f64 {
    let values: Option<Vec<f64>> = samples.iter().map(|s| pick(s).map(|cpu| cpu.as_secs_f64() * 1000.0)).collect();
    values.map_or(f64::NAN, median)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Where the binaries are: `COLD_START_BINARIES`, or the target's `release` folder.
fn release_dir() -> PathBuf {
    if let Some(binaries) = std::env::var_os("COLD_START_BINARIES") {
        return PathBuf::from(binaries);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| integration_tests::lambda_server::repository_root().join("target"));
    target.join("release")
}

fn bare_case() -> Case {
    Case { binary: BARE, events: http("GET", "/hello", json!({}), None), status: 200 }
}

fn http(method: &'static str, path: &str, headers: Value, body: Option<String>) -> Events {
    Events::Http { method, path: path.to_owned(), headers, body }
}

/// Creates what every request reads: the demo meetings, an application and its token, an API
/// key with an agent, a model, a tool, an MCP configuration, a schedule and a webhook endpoint.
async fn prepare(runs: usize) -> (World, Vec<Case>) {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    stack.import(&demo_fixture()).await;
    let (client_id, secret) = stack.create_app_with_scopes(&[1, 2], &["webhooks:manage"]).await;
    let auth = stack.client::<AuthService>(&clock);
    let token = obtain_scoped_token(&auth, &client_id, &secret, "meetings:read webhooks:manage").await;

    let model = ModelServer::start((0..4 * runs).map(|_| text_reply("Hello.")).collect()).await;
    let receiver = LocalServer::start(Arc::new(|_| Box::pin(async { respond(204, "text/plain", "") }))).await;
    let account = uuid::Uuid::new_v4();
    let key = stack.api_key(account).await;
    let lm = stack.language_model(&clock, &key, "local", &model.base_url()).await;
    let tool = stack
        .client::<ToolsService>(&clock)
        .with_key(&key)
        .post("/tools", json!({"name": "t", "type": "http"}))
        .created()
        .await;
    let mcp = stack
        .client::<McpsService>(&clock)
        .with_key(&key)
        .post("/mcps", json!({"name": "m", "url": "https://mcp.example.com/mcp"}))
        .created()
        .await;
    let agent_id = stack
        .client::<AgentsService>(&clock)
        .with_key(&key)
        .post("/agents/", json!({"type": "config", "name": "bench", "framework": "chainlib", "language_model_id": lm}))
        .created()
        .await;
    let schedule = stack
        .client::<SchedulesService>(&clock)
        .with_key(&key)
        .post(&format!("/agents/{agent_id}/schedule"), json!({"cron_expression": "@yearly", "message": "m"}))
        .expect(201)
        .await["data"]["id"]
        .as_str()
        .expect("schedule id")
        .to_owned();
    let webhooks = stack.client::<WebhooksService>(&clock);
    // Subscribed to test events only: the runner worker's runs publish `run.*` events for the
    // account, and deliveries of those would join the delivery worker's event and the sweep.
    let endpoint_body = json!({"url": receiver.url("/hook"), "event_types": ["webhook.test"]});
    let endpoint = webhooks.with_key(&key).post("/webhooks/endpoints", endpoint_body).expect(201).await["data"]["id"]
        .as_str()
        .expect("endpoint id")
        .to_owned();
    let agents = platform_data::agents::AgentStore::new(stack.dynamodb.clone(), stack.setting("AGENTS_TABLE"));
    let agent = agents
        .get(account.into(), agent_id.parse().expect("agent id"))
        .await
        .expect("read the agent")
        .expect("the agent exists");

    let form = format!("grant_type=client_credentials&client_id={client_id}&client_secret={secret}");
    let bearer = json!({"authorization": format!("Bearer {token}")});
    let api_key = json!({"x-api-key": key});
    let form_headers = json!({"content-type": "application/x-www-form-urlencoded"});
    let ok = |binary, events| Case { binary, events, status: 200 };
    let cases = vec![
        ok("auth", http("POST", "/api/auth/token/", form_headers, Some(form))),
        ok("meetings", http("GET", "/api/v1/external/meeting/1001/", bearer.clone(), None)),
        ok("external-webhooks", http("GET", "/api/v1/external/webhooks/endpoints/", bearer, None)),
        ok("health", http("GET", "/health-check/auth-test", api_key.clone(), None)),
        ok("agents", http("GET", &format!("/agents/{agent_id}"), api_key.clone(), None)),
        Case {
            binary: "agent-runs",
            events: http(
                "GET",
                &format!("/agents/{agent_id}/runs/{}/stream", uuid::Uuid::new_v4()),
                api_key.clone(),
                None,
            ),
            status: 404,
        },
        ok("language-models", http("GET", &format!("/language-models/{lm}"), api_key.clone(), None)),
        ok("spend", http("GET", "/budget", api_key.clone(), None)),
        ok("tools", http("GET", &format!("/tools/{tool}"), api_key.clone(), None)),
        ok("mcps", http("GET", &format!("/mcps/{mcp}"), api_key.clone(), None)),
        ok("webhooks", http("GET", &format!("/webhooks/endpoints/{endpoint}"), api_key.clone(), None)),
        ok("schedules", http("GET", &format!("/agents/schedules/{schedule}"), api_key.clone(), None)),
        ok("runner", http("GET", "/monitoring/executions/recent", api_key.clone(), None)),
        ok("runner-worker", Events::RunnerQueue),
        ok("webhook-delivery", Events::DeliveryQueue),
        ok("scheduler", Events::Scheduled),
        ok("webhook-sweeper", Events::Scheduled),
        ok("docs", http("GET", "/openapi.json", json!({}), None)),
        ok("runner-docs", http("GET", "/openapi.json", json!({}), None)),
    ];
    let runner: RunLifecycle = stack.service(&TestClock::system());
    let env_overrides = vec![
        (platform_api::settings::OUTBOUND_ALLOWED_HOSTS, "127.0.0.0/8".to_owned()),
        (platform_api::settings::WEBHOOK_ALLOWED_HOSTS, "127.0.0.1".to_owned()),
    ];
    let local_endpoint = |name: &str| {
        let url = std::env::var(name).expect("a local AWS endpoint: run under infra/scripts/with-local-aws");
        url.trim_start_matches("http://").trim_end_matches('/').to_owned()
    };
    let upstreams = aws_proxy::Upstreams {
        dynamodb: local_endpoint("AWS_ENDPOINT_URL_DYNAMODB"),
        other: local_endpoint("AWS_ENDPOINT_URL"),
    };
    let certificate =
        integration_tests::lambda_server::repository_root().join(".local").join("cold-start-aws-proxy.pem");
    let aws = AwsProxy::start(upstreams, certificate, std::env::var("COLD_START_AWS_TLS").as_deref() != Ok("0")).await;
    let world = World {
        stack,
        aws,
        env_overrides,
        _model: model,
        _receiver: receiver,
        runner,
        agent,
        webhook_endpoint: endpoint,
        key,
    };
    (world, cases)
}

impl World {
    /// The two events one process gets: its first invocation and the warm one.
    async fn events(&self, events: &Events) -> [Vec<u8>; 2] {
        match events {
            Events::Http { method, path, headers, body } => {
                let event = gateway_event(method, path, headers, body.as_deref());
                [event.clone(), event]
            }
            Events::Scheduled => {
                let event = json!({
                    "version": "0", "id": uuid::Uuid::new_v4(), "detail-type": "Scheduled Event",
                    "source": "aws.events", "account": "123456789012", "time": chrono::Utc::now(),
                    "region": "us-east-1", "resources": [], "detail": {}
                })
                .to_string()
                .into_bytes();
                [event.clone(), event]
            }
            Events::RunnerQueue => [self.queued_run().await, self.queued_run().await],
            Events::DeliveryQueue => [self.queued_delivery().await, self.queued_delivery().await],
        }
    }

    /// A run queued through the real queue, as the SQS event Lambda would hand the worker.
    async fn queued_run(&self) -> Vec<u8> {
        let start = StartRun {
            origin: RunOrigin {
                run_type: RunType::Queue,
                input: RunInput { message: "Hi".into(), files: Vec::new() },
                schedule_id: None,
                session_id: None,
                parent: None,
            },
            request: agent_runtime::resolve::RunRequest { message: "Hi".into(), ..Default::default() },
        };
        let queue = self.stack.run_queue();
        self.runner.enqueue(&self.agent, &start, &queue).await.expect("queue a run");
        handed_over(queue.sqs()).await
    }

    /// A test delivery queued by the webhooks function, as the delivery worker's SQS event.
    async fn queued_delivery(&self) -> Vec<u8> {
        let clock = TestClock::new();
        let path = format!("/webhooks/endpoints/{}/test", self.webhook_endpoint);
        self.stack.client::<WebhooksService>(&clock).with_key(&self.key).request(Method::POST, &path).expect(202).await;
        handed_over(&self.stack.webhook_settings().publisher.queue).await
    }
}

/// What `queue` holds, as the SQS event Lambda would hand a worker, and deleted, as Lambda's
/// event source mapping deletes a batch its worker handled without failures: otherwise each
/// message would come back once its visibility timeout ran out, into a later case's batch.
async fn handed_over(queue: &queues::SqsQueue) -> Vec<u8> {
    let messages = queue.receive(Duration::ZERO).await.expect("receive what was queued");
    for message in &messages {
        queue.delete(&message.receipt_handle).await.expect("delete a handed-over message");
    }
    sqs_event(&messages)
}

/// The SQS event source mapping's event of `messages`.
fn sqs_event(messages: &[ReceivedMessage]) -> Vec<u8> {
    let records: Vec<Value> = messages
        .iter()
        .map(|message| {
            json!({
                "messageId": message.message_id, "receiptHandle": message.receipt_handle, "body": message.body,
                "attributes": {"ApproximateReceiveCount": message.receive_count.to_string()},
                "eventSource": "aws:sqs"
            })
        })
        .collect();
    assert!(!records.is_empty(), "nothing was queued");
    json!({ "Records": records }).to_string().into_bytes()
}

/// Starts `case`'s binary fresh, hands it its two events and measures it.
async fn sample(binaries: &Path, case: &Case, world: &World, template: &stack::Template) -> Sample {
    let [first_event, warm_event] = world.events(&case.events).await;
    let mut api = RuntimeApi::start_watching(vec![first_event, warm_event]).await;
    // Preparing a worker's events (queueing a run or a delivery) leaves moto busy finishing
    // its answers for a few milliseconds; the process starts once the machine is quiet again,
    // whatever its case, so no figure includes the bench's own setup.
    // The binary is read first, so its pages are in the page cache as bare's always are (bare
    // starts between every two functions; a function's binary, idle for a minute, had pages
    // reclaimed on this VM, and each one it faulted back from disk cost its init ~1 ms).
    let _ = std::fs::read(binaries.join(case.binary));
    tokio::time::sleep(SETTLE).await;
    let log =
        integration_tests::lambda_server::repository_root().join(".local").join(format!("cold-{}.log", case.binary));
    let log_file = std::fs::File::create(&log).expect("create the function's log");
    // A diagnostic wrapper, e.g. `COLD_START_WRAPPER="strace -f -tt -o /tmp/trace"` (the figures
    // then include its overhead).
    let wrapper: Vec<String> =
        std::env::var("COLD_START_WRAPPER").unwrap_or_default().split_whitespace().map(str::to_owned).collect();
    let mut command = match wrapper.split_first() {
        Some((program, arguments)) => {
            let mut command = tokio::process::Command::new(program);
            command.args(arguments).arg(binaries.join(case.binary));
            command
        }
        None => tokio::process::Command::new(binaries.join(case.binary)),
    };
    command.env_clear().stdout(log_file.try_clone().expect("log file")).stderr(log_file).kill_on_drop(true);
    if let Some(function) = template.functions.iter().find(|function| function.binary == case.binary) {
        command.envs(template.environment(function, &world.stack.prefix));
    }
    command.envs(world.env_overrides.iter().map(|(name, value)| (*name, value.as_str())));
    command.env("AWS_ENDPOINT_URL", world.aws.endpoint_url()).env("SSL_CERT_FILE", &world.aws.certificate_file);
    for name in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"] {
        command.env(name, std::env::var(name).unwrap_or_default());
    }
    command
        .env("AWS_DEFAULT_REGION", std::env::var("AWS_REGION").unwrap_or_default())
        .env("AWS_LAMBDA_RUNTIME_API", api.address())
        .env("AWS_LAMBDA_FUNCTION_NAME", case.binary)
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{}", case.binary))
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "bench")
        .env("AWS_LAMBDA_INITIALIZATION_TYPE", "on-demand")
        .env("LAMBDA_TASK_ROOT", binaries)
        .env("_HANDLER", "bootstrap");

    let started = Instant::now();
    let mut child = command.spawn().unwrap_or_else(|error| panic!("start {}: {error}", case.binary));
    let pid = child.id().expect("a running child");
    api.watch(pid);
    let unexpected = |mark: Mark| -> ! { panic!("{}: unexpected {mark:?}; see {}", case.binary, log.display()) };
    let Mark::Next(init_done) = next_mark(&mut api, case, &log).await else { unexpected(Mark::Idle) };
    let (first_answered, body) = match next_mark(&mut api, case, &log).await {
        Mark::Answered(at, body) => (at, body),
        other => unexpected(other),
    };
    check_answer(case, &body);
    let warm_started = match next_mark(&mut api, case, &log).await {
        Mark::Next(at) => at,
        other => unexpected(other),
    };
    let warm_answered = match next_mark(&mut api, case, &log).await {
        Mark::Answered(at, body) => {
            check_answer(case, &body);
            at
        }
        other => unexpected(other),
    };
    match next_mark(&mut api, case, &log).await {
        Mark::Idle => {}
        other => unexpected(other),
    }
    let peak_rss_kb = peak_rss_kb(pid);
    let faults = page_faults(pid);
    let _ = child.kill().await;
    let sample = Sample {
        init: init_done.at - started,
        first: first_answered.at - init_done.at,
        first_aws: world.aws.busy_between(init_done.at, first_answered.at),
        first_cpu: cpu_between(init_done, first_answered),
        warm: warm_answered.at - warm_started.at,
        warm_aws: world.aws.busy_between(warm_started.at, warm_answered.at),
        warm_cpu: cpu_between(warm_started, warm_answered),
        init_rss_kb: init_done.memory.map_or(0, |memory| memory.total_kb),
        init_private_kb: init_done.memory.map_or(0, |memory| memory.private_kb),
        peak_rss_kb,
    };
    if std::env::var_os("COLD_START_DEBUG").is_some() {
        eprintln!(
            "{} init {:?} faults {faults:?} first {:?} aws {:?} cpu {:?} {:?}",
            case.binary,
            sample.init,
            sample.first,
            sample.first_aws,
            sample.first_cpu,
            world.aws.exchanges_between(init_done.at, first_answered.at)
        );
    }
    sample
}

/// The CPU time the process used between two of its calls to the Runtime API.
fn cpu_between(from: Stamp, to: Stamp) -> Option<Duration> {
    Some(to.cpu?.saturating_sub(from.cpu?))
}

/// The function's next step, within a minute.
async fn next_mark(api: &mut RuntimeApi, case: &Case, log: &Path) -> Mark {
    match tokio::time::timeout(Duration::from_secs(60), api.marks.recv()).await {
        Ok(Some(Mark::Failed(reason))) => panic!("{} failed: {reason}; see {}", case.binary, log.display()),
        Ok(Some(mark)) => mark,
        _ => panic!("{} stopped answering; see {}", case.binary, log.display()),
    }
}

/// HTTP functions must answer with the case's status (a streamed answer starts with its
/// prelude); workers must retry nothing.
fn check_answer(case: &Case, body: &[u8]) {
    let text = String::from_utf8_lossy(body);
    let ok = match case.events {
        Events::Http { .. } => text.contains(&format!("\"statusCode\":{}", case.status)),
        Events::RunnerQueue | Events::DeliveryQueue => text.contains("\"batchItemFailures\":[]"),
        Events::Scheduled => !text.is_empty(),
    };
    assert!(ok, "{}: unexpected answer {text}", case.binary);
}

/// The process's (minor, major) page faults so far, from `/proc/{pid}/stat` (debugging).
fn page_faults(pid: u32) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may hold spaces) and its closing parenthesis, from the
    // state (field 3): minflt is field 10, majflt field 12.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some((fields.get(7)?.parse().ok()?, fields.get(9)?.parse().ok()?))
}

/// The process's peak resident set (`VmHWM`), in KiB.
fn peak_rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                line.strip_prefix("VmHWM:").and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            })
        })
        .unwrap_or(0)
}
