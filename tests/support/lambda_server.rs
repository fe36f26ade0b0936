//! A local stand-in for AWS Lambda's Invoke API that runs a real Python handler: the tool-sandbox
//! function as `template.yaml` declares it (its `CodeUri`, `Handler` and `Timeout`), or any
//! other code for failure cases.
//!
//! The wire protocol is Lambda's (`POST /2015-03-31/functions/{name}/invocations`, the payload
//! as the body): the handler's result is a 200 with the result as the body; a handler that
//! raises, cannot be imported, crashes or passes the function's timeout is a 200 with
//! `X-Amz-Function-Error: Unhandled` and Lambda's error object; an unknown function is a 404
//! `ResourceNotFoundException`.
//!
//! The function is in tenant isolation mode (`TenancyConfig: PER_TENANT`, as the template's
//! tool sandbox): an invocation without `X-Amz-Tenant-Id` is refused (400
//! `InvalidParameterValueException`), and each tenant's invocations are served by environments
//! of that tenant only.
//!
//! Environments are kept warm, as Lambda keeps them: an environment is one `python3` process
//! (the runtime) that imports the handler once and serves one invocation after another; an
//! invocation takes an idle environment of its tenant or starts one (a cold start). So what one
//! call leaves in the process, its children or its `/tmp` is there for the tenant's next, as in
//! Lambda. Each environment is a machine of its own: its own temporary directory (`TMPDIR`,
//! Lambda's `/tmp`) and, when the tests run as root, its own non-root user (Lambda's
//! `sbx_user1051`): file modes, `RLIMIT_NPROC` and signals then apply as they do in Lambda. An
//! environment whose runtime process exits (or is killed past the function's timeout) is reset
//! in place, as Lambda resets one: the next cold start of that tenant reuses its machine, with
//! whatever the last call left in its `/tmp` and processes. Each has the environment Lambda
//! gives a function, session credentials included, so tests can check a tool sees none of it,
//! and like a Lambda function it has no capabilities.

use crate::local_server::{Handler, LocalServer, respond};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// The secret access key in the function's environment (a tool must never see it).
pub const FUNCTION_SECRET_ACCESS_KEY: &str = "function-session-secret-8f0e2a5c";

/// `AWS_LAMBDA_RUNTIME_API` in the function's environment: Lambda's own address and port, which
/// a tool must never reach even where loopback is allowed.
pub const LOCAL_RUNTIME_API: &str = "127.0.0.1:9001";

/// The runtime of one environment: imports the handler from the code folder once, then calls it
/// for each invocation read from stdin (one JSON line: `{"request_id", "event"}`), as Lambda's
/// Python runtime does, answering one JSON line: `{"result": …}` or `{"error": Lambda's error
/// object}`. What the handler prints goes to stderr (Lambda's logs).
const DRIVER: &str = r#"
import ctypes, importlib, json, os, sys, time, traceback
code, spec, timeout_ms, user = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
# The environment's own user, as Lambda's sbx_user1051 (when the tests run as root).
if user:
    os.setgroups([])
    os.setgid(int(user))
    os.setuid(int(user))
# A Lambda function runs without capabilities (so, as there, no network namespace for the tool).
libc = ctypes.CDLL(None, use_errno=True)
for capability in range(64):
    if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
        break
class Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
class Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]
libc.capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)())
answers = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
invocations = os.fdopen(os.dup(0), "rb")
quiet = os.open(os.devnull, os.O_RDONLY)
os.dup2(quiet, 0)

class Context:
    function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME")
    def __init__(self, request_id):
        self.aws_request_id = request_id
        self.deadline = time.monotonic() + timeout_ms / 1000
    def get_remaining_time_in_millis(self):
        return max(0, int((self.deadline - time.monotonic()) * 1000))

def error(kind, message, request_id, trace=()):
    return {"errorMessage": message, "errorType": kind, "requestId": request_id, "stackTrace": list(trace)}

sys.path.insert(0, code)
module_name, function_name = spec.rsplit(".", 1)
function, init_error = None, None
try:
    module = importlib.import_module(module_name)
    function = getattr(module, function_name, None)
    if function is None:
        init_error = ("Runtime.HandlerNotFound", f"Handler '{function_name}' missing on module '{module_name}'")
except Exception as failure:
    init_error = ("Runtime.ImportModuleError", f"Unable to import module '{module_name}': {failure}")
for line in invocations:
    invocation = json.loads(line)
    request_id = invocation["request_id"]
    if init_error is not None:
        reply = {"error": error(*init_error, request_id)}
    else:
        try:
            reply = {"result": function(invocation["event"], Context(request_id))}
        except Exception as failure:
            reply = {"error": error(type(failure).__name__, str(failure), request_id, traceback.format_tb(failure.__traceback__))}
    answers.write(json.dumps(reply) + "\n")
    answers.flush()
"#;

/// Where a function's code is and how it runs.
#[derive(Debug, Clone)]
pub struct FunctionCode {
    /// The code folder (`CodeUri`).
    pub folder: PathBuf,
    /// `module.function` (`Handler`).
    pub handler: String,
    /// The function's `Timeout`.
    pub timeout: Duration,
    /// Variables of its `Environment` (beside what Lambda sets).
    pub environment: Vec<(String, String)>,
}

impl FunctionCode {
    /// The template's `ToolSandboxFunction`.
    pub fn tool_sandbox() -> Self {
        let template = stack::Template::embedded().expect("template.yaml parses");
        let function =
            template.python_function("ToolSandboxFunction").expect("template.yaml declares ToolSandboxFunction");
        Self {
            folder: repository_root().join(&function.code_uri),
            handler: function.handler.clone(),
            timeout: Duration::from_secs(function.timeout_seconds.unwrap_or(3).into()),
            environment: Vec::new(),
        }
    }
}

/// One invocation as the server received it.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub function: String,
    pub headers: http::HeaderMap,
    pub payload: Value,
}

/// A running stand-in serving one function; it stops when dropped.
pub struct LambdaServer {
    server: LocalServer,
    /// The function's name.
    pub function: String,
    /// What it was asked, in order.
    pub invocations: Arc<Mutex<Vec<Invocation>>>,
    environments: Arc<Environments>,
    scratch: PathBuf,
}

/// What an environment is beside its runtime process, kept across resets: its user and its
/// temporary directory.
#[derive(Debug, Clone)]
struct Machine {
    /// The non-root user it runs as (when the tests run as root).
    user: Option<u32>,
    tmp: PathBuf,
}

/// Users of environments: distinct per machine and per test process.
static NEXT_USER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Machine {
    fn new(scratch: &Path) -> std::io::Result<Self> {
        let n = NEXT_USER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let tmp = scratch.join(format!("machine-{n}"));
        std::fs::create_dir(&tmp)?;
        // /proc/self belongs to the process's effective user.
        let root = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self")?) == 0;
        let user = root.then(|| 200_000 + (std::process::id() % 100_000) * 1000 + n % 1000);
        if let Some(user) = user {
            std::os::unix::fs::chown(&tmp, Some(user), Some(user))?;
        }
        Ok(Self { user, tmp })
    }
}

impl LambdaServer {
    /// Serves `code` as the function `function`.
    pub async fn start(function: &str, code: FunctionCode) -> Self {
        let scratch = std::env::temp_dir().join(format!("lambda-tmp-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&scratch).expect("the machines' temporary directories");
        // Each machine's /tmp is in here: others (its user) pass through.
        std::fs::set_permissions(&scratch, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("the machines' directory is open to their users");
        let invocations = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&invocations);
        let environments = Arc::new(Environments::default());
        let pool = Arc::clone(&environments);
        let name = function.to_owned();
        let tmp = scratch.clone();
        let handler: Handler = Arc::new(move |request| {
            let (name, code, tmp, recorded, pool) =
                (name.clone(), code.clone(), tmp.clone(), Arc::clone(&recorded), Arc::clone(&pool));
            Box::pin(async move {
                let path = request.uri().path().to_owned();
                let target = path
                    .strip_prefix("/2015-03-31/functions/")
                    .and_then(|rest| rest.strip_suffix("/invocations"))
                    .map(str::to_owned);
                let headers = request.headers().clone();
                let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                let Some(target) = target else {
                    return error_response(404, "UnknownOperationException", "Unknown operation");
                };
                if target != name {
                    let message =
                        format!("Function not found: arn:aws:lambda:us-east-1:123456789012:function:{target}");
                    return error_response(404, "ResourceNotFoundException", &message);
                }
                let payload: Value = match serde_json::from_slice(&body) {
                    Ok(payload) => payload,
                    Err(_) => {
                        return error_response(
                            400,
                            "InvalidRequestContentException",
                            "Could not parse request body into json",
                        );
                    }
                };
                let Some(tenant) = headers.get("x-amz-tenant-id").and_then(|id| id.to_str().ok()).map(str::to_owned)
                else {
                    return error_response(
                        400,
                        "InvalidParameterValueException",
                        "The invoked function is enabled with tenancy configuration. Add a valid tenant ID in your request and try again.",
                    );
                };
                recorded.lock().unwrap().push(Invocation { function: target, headers, payload: payload.clone() });
                let request_id = uuid::Uuid::new_v4().to_string();
                let (body, function_error) = pool.invoke(&code, &name, &tmp, &tenant, &request_id, &payload).await;
                let mut response = respond(200, "application/json", body);
                let headers = response.headers_mut();
                headers.insert("x-amzn-requestid", request_id.parse().unwrap());
                headers.insert("x-amz-executed-version", "$LATEST".parse().unwrap());
                if function_error {
                    headers.insert("x-amz-function-error", "Unhandled".parse().unwrap());
                }
                response
            })
        });
        Self {
            server: LocalServer::start(handler).await,
            function: function.to_owned(),
            invocations,
            environments,
            scratch,
        }
    }

    /// The template's tool-sandbox function, named `function`.
    pub async fn tool_sandbox(function: &str) -> Self {
        Self::start(function, FunctionCode::tool_sandbox()).await
    }

    /// The endpoint URL a Lambda client uses to reach this server.
    pub fn endpoint_url(&self) -> String {
        self.server.url("")
    }

    /// The environment's AWS configuration with this server as the endpoint (for the Lambda
    /// client only).
    pub async fn sdk_config(&self) -> aws_config::SdkConfig {
        sdk_config_at(&self.endpoint_url()).await
    }

    /// The temporary directories (Lambda's `/tmp`) of the machines started so far.
    pub fn tmp_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&self.scratch)
            .map(|entries| entries.filter_map(|entry| entry.ok().map(|entry| entry.path())).collect())
            .unwrap_or_default();
        dirs.sort();
        dirs
    }

    /// How many environments have been started (cold starts, resets included) so far.
    pub fn environments_started(&self) -> usize {
        self.environments.started.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How many machines have been made so far (a reset reuses its machine).
    pub fn machines(&self) -> usize {
        self.environments.machines.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How many environments are idle and alive now (an exited one is not).
    pub fn environments_alive(&self) -> usize {
        let mut idle = self.environments.idle.lock().unwrap();
        let mut alive = 0;
        for environments in idle.values_mut() {
            for environment in environments.iter_mut() {
                alive += usize::from(environment_alive(environment) == Some(true));
            }
        }
        alive
    }
}

impl Drop for LambdaServer {
    fn drop(&mut self) {
        // What a tool left may be mode 000: root removes it regardless.
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

fn environment_alive(environment: &mut Environment) -> Option<bool> {
    environment.child.try_wait().ok().map(|status| status.is_none())
}

/// The environment's AWS configuration (HTTP client, region, credentials) with `endpoint_url` as
/// its endpoint. Set on the loader, it wins over `AWS_ENDPOINT_URL` (the moto server), which
/// setting it on the loaded configuration would not.
pub async fn sdk_config_at(endpoint_url: &str) -> aws_config::SdkConfig {
    let base = aws_env::load().await;
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest()).endpoint_url(endpoint_url);
    if let Some(client) = base.http_client() {
        loader = loader.http_client(client);
    }
    if let Some(region) = base.region() {
        loader = loader.region(region.clone());
    }
    if let Some(credentials) = base.credentials_provider() {
        loader = loader.credentials_provider(credentials);
    }
    loader.load().await
}

/// The warm environments of a function, by tenant, and the machines of environments that were
/// reset, by tenant, for their next cold start.
#[derive(Default)]
struct Environments {
    idle: Mutex<std::collections::HashMap<String, Vec<Environment>>>,
    reset: Mutex<std::collections::HashMap<String, Vec<Machine>>>,
    started: std::sync::atomic::AtomicUsize,
    machines: std::sync::atomic::AtomicUsize,
}

/// One environment: its machine, its runtime process and the pipes of its invocations.
struct Environment {
    machine: Machine,
    child: tokio::process::Child,
    invocations: tokio::process::ChildStdin,
    answers: tokio::io::BufReader<tokio::process::ChildStdout>,
}

impl Environments {
    /// One invocation in an idle environment, or a new one: the body and whether it is a
    /// function error. The environment goes back to the idle ones unless it ended or timed out.
    async fn invoke(
        &self,
        code: &FunctionCode,
        function: &str,
        scratch: &Path,
        tenant: &str,
        request_id: &str,
        event: &Value,
    ) -> (String, bool) {
        let idle = {
            let mut idle = self.idle.lock().unwrap();
            let mut reset = self.reset.lock().unwrap();
            let environments = idle.entry(tenant.to_owned()).or_default();
            // An idle environment whose runtime exited is reset: its machine waits for the next
            // cold start.
            for mut gone in
                environments.extract_if(.., |environment| !matches!(environment_alive(environment), Some(true)))
            {
                let _ = gone.child.start_kill();
                reset.entry(tenant.to_owned()).or_default().push(gone.machine.clone());
            }
            environments.pop()
        };
        let mut environment = match idle {
            Some(environment) => environment,
            None => {
                let machine = self.reset.lock().unwrap().get_mut(tenant).and_then(Vec::pop);
                let machine = match machine {
                    Some(machine) => Ok(machine),
                    None => Machine::new(scratch).inspect(|_| {
                        self.machines.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }),
                };
                match machine.and_then(|machine| start_environment(code, function, machine)) {
                    Ok(environment) => {
                        self.started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        environment
                    }
                    Err(err) => {
                        return (lambda_error("Runtime.InvalidEntrypoint", &err.to_string(), request_id), true);
                    }
                }
            }
        };
        let line = format!("{}\n", json!({"request_id": request_id, "event": event}));
        let work = async {
            environment.invocations.write_all(line.as_bytes()).await.ok();
            let mut answer = String::new();
            environment.answers.read_line(&mut answer).await.ok();
            answer
        };
        let answer = match tokio::time::timeout(code.timeout, work).await {
            Ok(answer) => answer,
            Err(_) => {
                // Lambda resets an environment whose invocation passed the timeout.
                environment.child.start_kill().ok();
                self.reset.lock().unwrap().entry(tenant.to_owned()).or_default().push(environment.machine.clone());
                let message = format!(
                    "RequestId: {request_id} Error: Task timed out after {:.2} seconds",
                    code.timeout.as_secs_f64()
                );
                return (lambda_error("Sandbox.Timedout", &message, request_id), true);
            }
        };
        let mut reply = match serde_json::from_str::<Value>(&answer) {
            Ok(Value::Object(reply)) => reply,
            _ => {
                let status = environment.child.wait().await.ok().and_then(|status| status.code());
                self.reset.lock().unwrap().entry(tenant.to_owned()).or_default().push(environment.machine.clone());
                let message = format!("RequestId: {request_id} Error: Runtime exited with error: {status:?}");
                return (lambda_error("Runtime.ExitError", &message, request_id), true);
            }
        };
        self.idle.lock().unwrap().entry(tenant.to_owned()).or_default().push(environment);
        match (reply.remove("result"), reply.remove("error")) {
            (Some(result), _) => (result.to_string(), false),
            (None, Some(error)) => (error.to_string(), true),
            (None, None) => (lambda_error("Runtime.InvalidResponse", "no result", request_id), true),
        }
    }
}

/// A new environment's runtime process on `machine`, the handler not yet imported (that is its
/// first invocation's cold start).
fn start_environment(code: &FunctionCode, function: &str, machine: Machine) -> std::io::Result<Environment> {
    let python = std::env::var("TOOL_SANDBOX_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut child = tokio::process::Command::new(python)
        .arg("-B") // no __pycache__ in the repository
        .arg("-c")
        .arg(DRIVER)
        .arg(&code.folder)
        .arg(&code.handler)
        .arg(code.timeout.as_millis().to_string())
        .arg(machine.user.map(|user| user.to_string()).unwrap_or_default())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LANG", "C.UTF-8")
        .env("TMPDIR", &machine.tmp)
        .env("LAMBDA_TASK_ROOT", &code.folder)
        .env("AWS_LAMBDA_FUNCTION_NAME", function)
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024")
        .env("AWS_LAMBDA_RUNTIME_API", LOCAL_RUNTIME_API)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "ASIAFUNCTIONSESSION")
        .env("AWS_SECRET_ACCESS_KEY", FUNCTION_SECRET_ACCESS_KEY)
        .env("AWS_SESSION_TOKEN", "function-session-token")
        .envs(code.environment.iter().map(|(name, value)| (name, value)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let invocations = child.stdin.take().ok_or_else(|| std::io::Error::other("no stdin"))?;
    let answers = tokio::io::BufReader::new(child.stdout.take().ok_or_else(|| std::io::Error::other("no stdout"))?);
    Ok(Environment { machine, child, invocations, answers })
}

fn lambda_error(kind: &str, message: &str, request_id: &str) -> String {
    json!({"errorType": kind, "errorMessage": message, "requestId": request_id}).to_string()
}

/// A Lambda service error: its type in `x-amzn-ErrorType`, `{"Type", "message"}` as the body.
fn error_response(status: u16, kind: &str, message: &str) -> hyper::Response<crate::local_server::ResponseBody> {
    let mut response = respond(status, "application/json", json!({"Type": "User", "message": message}).to_string());
    response.headers_mut().insert("x-amzn-errortype", kind.parse().unwrap());
    response
}

/// The repository's root (template paths are relative to it).
pub fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the tests crate is in the repository").to_path_buf()
}
