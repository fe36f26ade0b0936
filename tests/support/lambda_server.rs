//! A local stand-in for AWS Lambda's Invoke API that runs a real Python handler: the tool-sandbox
//! function as `template.yaml` declares it (its `CodeUri`, `Handler` and `Timeout`), or any
//! other code for failure cases.
//!
//! The wire protocol is Lambda's (`POST /2015-03-31/functions/{name}/invocations`, the payload
//! as the body): the handler's result is a 200 with the result as the body; a handler that
//! raises, cannot be imported, crashes or passes the function's timeout is a 200 with
//! `X-Amz-Function-Error: Unhandled` and Lambda's error object; an unknown function is a 404
//! `ResourceNotFoundException`. Each invocation is a fresh `python3` process (a cold start)
//! with the environment Lambda gives a function, session credentials included, so tests can
//! check a tool sees none of it, and like a Lambda function it has no capabilities (even when
//! the tests run as root). Every invocation shares the function's temporary directory
//! (`TMPDIR`, Lambda's `/tmp`), as a warm environment does.

use crate::local_server::{Handler, LocalServer, respond};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The secret access key in the function's environment (a tool must never see it).
pub const FUNCTION_SECRET_ACCESS_KEY: &str = "function-session-secret-8f0e2a5c";

/// Imports the handler from the code folder and calls it once with the event on stdin, as
/// Lambda's Python runtime does: the result as JSON on stdout (exit 0), or Lambda's error
/// object (exit 1). What the handler prints goes to stderr (Lambda's logs).
const DRIVER: &str = r#"
import ctypes, importlib, json, os, sys, time, traceback
code, spec, timeout_ms, request_id = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
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
deadline = time.monotonic() + timeout_ms / 1000
answer = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)

class Context:
    aws_request_id = request_id
    function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME")
    def get_remaining_time_in_millis(self):
        return max(0, int((deadline - time.monotonic()) * 1000))

def fail(kind, message, trace=()):
    answer.write(json.dumps({"errorMessage": message, "errorType": kind, "requestId": request_id, "stackTrace": list(trace)}))
    answer.flush()
    sys.exit(1)

event = json.loads(sys.stdin.buffer.read())
sys.path.insert(0, code)
module_name, function_name = spec.rsplit(".", 1)
try:
    module = importlib.import_module(module_name)
except Exception as error:
    fail("Runtime.ImportModuleError", f"Unable to import module '{module_name}': {error}")
function = getattr(module, function_name, None)
if function is None:
    fail("Runtime.HandlerNotFound", f"Handler '{function_name}' missing on module '{module_name}'")
try:
    result = function(event, Context())
except Exception as error:
    fail(type(error).__name__, str(error), traceback.format_tb(error.__traceback__))
answer.write(json.dumps(result))
answer.flush()
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
    scratch: PathBuf,
}

impl LambdaServer {
    /// Serves `code` as the function `function`.
    pub async fn start(function: &str, code: FunctionCode) -> Self {
        let scratch = std::env::temp_dir().join(format!("lambda-tmp-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&scratch).expect("the function's temporary directory");
        let invocations = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&invocations);
        let name = function.to_owned();
        let tmp = scratch.clone();
        let handler: Handler = Arc::new(move |request| {
            let (name, code, tmp, recorded) = (name.clone(), code.clone(), tmp.clone(), Arc::clone(&recorded));
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
                recorded.lock().unwrap().push(Invocation { function: target, headers, payload });
                let request_id = uuid::Uuid::new_v4().to_string();
                let (body, function_error) = run_once(&code, &name, &tmp, &request_id, &body).await;
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
        Self { server: LocalServer::start(handler).await, function: function.to_owned(), invocations, scratch }
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

    /// The function's temporary directory (Lambda's `/tmp`).
    pub fn scratch(&self) -> &Path {
        &self.scratch
    }
}

impl Drop for LambdaServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
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

/// One cold invocation: the body and whether it is a function error.
async fn run_once(code: &FunctionCode, function: &str, tmp: &Path, request_id: &str, event: &[u8]) -> (String, bool) {
    let python = std::env::var("TOOL_SANDBOX_PYTHON").unwrap_or_else(|_| "python3".into());
    let spawned = tokio::process::Command::new(python)
        .arg("-B") // no __pycache__ in the repository
        .arg("-c")
        .arg(DRIVER)
        .arg(&code.folder)
        .arg(&code.handler)
        .arg(code.timeout.as_millis().to_string())
        .arg(request_id)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LANG", "C.UTF-8")
        .env("TMPDIR", tmp)
        .env("LAMBDA_TASK_ROOT", &code.folder)
        .env("AWS_LAMBDA_FUNCTION_NAME", function)
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "ASIAFUNCTIONSESSION")
        .env("AWS_SECRET_ACCESS_KEY", FUNCTION_SECRET_ACCESS_KEY)
        .env("AWS_SESSION_TOKEN", "function-session-token")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(err) => return (lambda_error("Runtime.InvalidEntrypoint", &err.to_string(), request_id), true),
    };
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = child.stdout.take().expect("stdout");
    let event = event.to_vec();
    let work = async {
        stdin.write_all(&event).await.ok();
        drop(stdin);
        let mut out = Vec::new();
        stdout.read_to_end(&mut out).await.ok();
        (out, child.wait().await)
    };
    match tokio::time::timeout(code.timeout, work).await {
        Err(_) => {
            let message = format!(
                "RequestId: {request_id} Error: Task timed out after {:.2} seconds",
                code.timeout.as_secs_f64()
            );
            (lambda_error("Sandbox.Timedout", &message, request_id), true)
        }
        Ok((out, status)) => {
            let status = status.map(|s| s.code()).ok().flatten();
            let body = String::from_utf8_lossy(&out).into_owned();
            match status {
                Some(0) => (body, false),
                Some(1) if serde_json::from_str::<Value>(&body).is_ok() => (body, true),
                other => {
                    let message = format!("RequestId: {request_id} Error: Runtime exited with error: {other:?}");
                    (lambda_error("Runtime.ExitError", &message, request_id), true)
                }
            }
        }
    }
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
