//! Custom Python tools: `run(**arguments)` executed in a sandbox: a `python3` subprocess of this
//! process ([`run_script`], local development and tests), or in AWS, whose `provided.al2023`
//! runtime has no Python, the separate `tool-sandbox` function (Python runtime, no IAM
//! permissions; `functions/tool-sandbox/handler.py`). [`ToolSandbox`] is the choice, made once
//! from the `TOOL_SANDBOX_FUNCTION` setting.
//!
//! Both run the tool's process with the same program, [`HARNESS`], and keep the same contract:
//! JSON `{"script", "arguments", "shared_outputs"}` in, `{"ok": value}` or `{"error": message}`
//! out, with the same limits and the same messages. The sandbox: a fresh interpreter (`-I`:
//! isolated mode, no user site, no `PYTHON*` variables) with an **empty environment** (none of
//! the platform's credentials, AWS keys included), in an empty temporary directory, with
//! CPU-time and address-space limits, a wall-clock limit after which the process is killed, and
//! bounded output. It gives up any capabilities it was started with. Network: unless the tool's
//! `config.allow_network` is true, the process moves into a network namespace of its own where
//! one can be made (root or user namespaces; not in Lambda), a seccomp filter makes `socket()`
//! of any family but `AF_UNIX` fail, and Python's socket functions raise.

use serde_json::{Map, Value, json};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The limits of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxLimits {
    pub wall_time: Duration,
    pub cpu_seconds: u64,
    pub memory_bytes: u64,
    pub max_output_bytes: usize,
    pub allow_network: bool,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            wall_time: Duration::from_secs(30),
            cpu_seconds: 20,
            memory_bytes: 512 * 1024 * 1024,
            max_output_bytes: 1024 * 1024,
            allow_network: false,
        }
    }
}

/// The program the tool's process runs: applies the limits, gives up privileges, closes the
/// network, loads the tool's script as a module and calls its `run` with the arguments read from
/// stdin. The tool-sandbox function runs the same file.
pub const HARNESS: &str = include_str!("../../../../functions/tool-sandbox/harness.py");

/// How much longer than the call's wall-clock limit the runner waits for the tool-sandbox
/// function, which enforces the limit itself: its cold start and cleanup.
const INVOKE_GRACE: Duration = Duration::from_secs(15);

/// Where custom tools run.
#[derive(Debug, Clone, Default)]
pub enum ToolSandbox {
    /// A `python3` subprocess of this process ([`run_script`]).
    #[default]
    Subprocess,
    /// The `tool-sandbox` Lambda function, invoked synchronously once per call.
    Lambda { client: aws_env::Lazy<aws_sdk_lambda::Client>, function: Arc<str> },
}

impl ToolSandbox {
    /// From the `TOOL_SANDBOX_FUNCTION` setting: the function's name or ARN; absent or empty (the
    /// local stack, where the template's `!Ref` to a Python function resolves to nothing) is the
    /// subprocess. Invocations are not retried: a tool runs at most once per call, and a refused
    /// invocation (throttled, too large) is an error result the model may act on.
    pub fn from_setting(sdk: &aws_env::SdkConfig, function: Option<String>) -> Self {
        match function.map(|name| name.trim().to_owned()).filter(|name| !name.is_empty()) {
            None => Self::Subprocess,
            Some(function) => {
                let config = aws_sdk_lambda::config::Builder::from(sdk)
                    .retry_config(aws_sdk_lambda::config::retry::RetryConfig::disabled())
                    .build();
                Self::Lambda {
                    client: aws_env::Lazy::new(move || aws_sdk_lambda::Client::from_conf(config)),
                    function: function.into(),
                }
            }
        }
    }

    /// Runs `script`'s `run(**arguments)` here or in the function: see [`run_script`].
    pub async fn run(
        &self,
        script: &str,
        arguments: &Map<String, Value>,
        shared_outputs: Option<Value>,
        limits: SandboxLimits,
    ) -> Result<Value, String> {
        match self {
            Self::Subprocess => run_script(script, arguments, shared_outputs, limits).await,
            Self::Lambda { client, function } => {
                invoke(client, function, script, arguments, shared_outputs, limits).await
            }
        }
    }
}

/// One call in the tool-sandbox function: the request with its limits, the answer mapped to the
/// local executor's results. Failures of the invocation itself (unreachable, refused, the
/// function crashed or timed out) are error results too, logged with their details.
async fn invoke(
    client: &aws_sdk_lambda::Client,
    function: &str,
    script: &str,
    arguments: &Map<String, Value>,
    shared_outputs: Option<Value>,
    limits: SandboxLimits,
) -> Result<Value, String> {
    use aws_sdk_lambda::error::{DisplayErrorContext, ProvideErrorMetadata};
    let payload = json!({
        "script": script,
        "arguments": arguments,
        "shared_outputs": shared_outputs,
        "limits": {
            "wall_time_ms": u64::try_from(limits.wall_time.as_millis()).unwrap_or(u64::MAX).max(1),
            "cpu_seconds": limits.cpu_seconds,
            "memory_bytes": limits.memory_bytes,
            "max_output_bytes": limits.max_output_bytes,
            "allow_network": limits.allow_network,
        },
    });
    let call = client
        .invoke()
        .function_name(function)
        .payload(aws_sdk_lambda::primitives::Blob::new(payload.to_string()))
        .send();
    let output = match tokio::time::timeout(limits.wall_time + INVOKE_GRACE, call).await {
        Err(_) => {
            tracing::warn!(function, "the tool sandbox did not answer in time");
            return Err(did_not_finish(limits));
        }
        Ok(Err(err)) => {
            tracing::warn!(function, error = %DisplayErrorContext(&err), "tool sandbox invocation failed");
            return Err(match err.code() {
                Some(code) => format!("the tool sandbox refused the call ({code})"),
                None => "the tool sandbox could not be reached".to_owned(),
            });
        }
        Ok(Ok(output)) => output,
    };
    let body = output.payload.map(aws_sdk_lambda::primitives::Blob::into_inner).unwrap_or_default();
    if let Some(kind) = output.function_error {
        // Lambda's error object: the handler raised, or the function crashed or timed out.
        let error: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let text = |key: &str| error.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
        tracing::warn!(function, kind = %kind, error_type = %text("errorType"), message = %text("errorMessage"), "the tool sandbox failed");
        let detail = [text("errorType"), text("errorMessage")]
            .into_iter()
            .filter(|part| !part.is_empty())
            .collect::<Vec<_>>()
            .join(": ");
        let detail = if detail.is_empty() { kind } else { detail.chars().take(300).collect() };
        return Err(format!("the tool sandbox failed ({detail})"));
    }
    match serde_json::from_slice(&body) {
        Ok(answer) => read_answer(answer),
        Err(_) => Err("the tool's answer could not be read".into()),
    }
}

fn did_not_finish(limits: SandboxLimits) -> String {
    format!("the tool did not finish within {} seconds", limits.wall_time.as_secs())
}

/// `{"ok": value}` is the output, `{"error": message}` the error.
fn read_answer(answer: Value) -> Result<Value, String> {
    match answer {
        Value::Object(mut fields) => match (fields.remove("ok"), fields.remove("error")) {
            (Some(result), None) => Ok(result),
            (_, Some(Value::String(error))) => Err(error),
            _ => Err("the tool's answer could not be read".into()),
        },
        _ => Err("the tool's answer could not be read".into()),
    }
}

/// Runs `script`'s `run(**arguments)` in a sandbox. `shared_outputs`, when given, is passed as
/// the `shared_outputs` keyword argument (tool output sharing). An `Err` says what went wrong
/// (the script's exception, a limit, an unreadable answer).
pub async fn run_script(
    script: &str,
    arguments: &Map<String, Value>,
    shared_outputs: Option<Value>,
    limits: SandboxLimits,
) -> Result<Value, String> {
    let directory = TempDir::create().map_err(|err| format!("the sandbox could not start ({err})"))?;
    let settings = json!({
        "cpu": limits.cpu_seconds,
        "memory": limits.memory_bytes,
        "network": limits.allow_network,
        "share": shared_outputs.is_some(),
    });
    let mut child = tokio::process::Command::new(python())
        .arg("-I")
        .arg("-S")
        .arg("-c")
        .arg(HARNESS)
        .arg(settings.to_string())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LANG", "C.UTF-8")
        .current_dir(&directory.0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|err| format!("the sandbox could not start python3 ({err})"))?;
    // The script goes on stdin: an argument is limited to 128 KiB, a script may have 256.
    let request = json!({ "script": script, "arguments": arguments, "shared_outputs": shared_outputs }).to_string();
    let mut stdin = child.stdin.take().ok_or("the sandbox has no stdin")?;
    let mut stdout = child.stdout.take().ok_or("the sandbox has no stdout")?;
    let mut stderr = child.stderr.take().ok_or("the sandbox has no stderr")?;
    let max = limits.max_output_bytes;
    let work = async {
        // A script that never reads stdin must not block the write: the write runs beside
        // the reads.
        let write = async {
            let _ = stdin.write_all(request.as_bytes()).await;
            drop(stdin);
        };
        let read_out = read_bounded(&mut stdout, max);
        let read_err = read_bounded(&mut stderr, 4096);
        let ((), out, err) = tokio::join!(write, read_out, read_err);
        let status = child.wait().await;
        (out, err, status)
    };
    let (out, err, status) = match tokio::time::timeout(limits.wall_time, work).await {
        Ok(done) => done,
        Err(_) => return Err(did_not_finish(limits)),
    };
    let out = out.map_err(|_| format!("the tool wrote more than {max} bytes"))?;
    let answer: Value = match serde_json::from_slice(&out) {
        Ok(answer) => answer,
        Err(_) => {
            let status = status.map(|s| s.to_string()).unwrap_or_else(|err| err.to_string());
            let detail = String::from_utf8_lossy(&err.unwrap_or_default()).trim().chars().take(300).collect::<String>();
            return Err(format!("the tool stopped without an answer ({status}) {detail}").trim().to_owned());
        }
    };
    read_answer(answer)
}

/// `python3`, or `TOOL_SANDBOX_PYTHON` when set (a virtualenv's interpreter).
fn python() -> String {
    std::env::var("TOOL_SANDBOX_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Reads to the end, keeping at most `max` bytes; `Err` when there was more. Draining the rest
/// keeps a talkative child from blocking on a full pipe (the wall-clock limit still ends it).
async fn read_bounded(reader: &mut (impl AsyncReadExt + Unpin), max: usize) -> Result<Vec<u8>, ()> {
    let mut kept = Vec::new();
    let mut chunk = [0u8; 8192];
    let mut overflow = false;
    loop {
        match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                let room = max.saturating_sub(kept.len());
                overflow |= read > room;
                kept.extend_from_slice(&chunk[..read.min(room)]);
            }
        }
    }
    if overflow { Err(()) } else { Ok(kept) }
}

/// A temporary directory removed on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn create() -> std::io::Result<Self> {
        let path = std::env::temp_dir().join(format!("tool-sandbox-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&path)?;
        Ok(Self(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn run(script: &str, arguments: Value) -> Result<Value, String> {
        let limits = SandboxLimits { wall_time: Duration::from_secs(10), ..SandboxLimits::default() };
        run_script(script, arguments.as_object().unwrap(), None, limits).await
    }

    #[tokio::test]
    async fn run_gets_its_arguments_and_its_return_value_is_the_output() {
        let script = "def run(city, days=1):\n    print('noise on stdout is ignored')\n    return {'city': city.upper(), 'days': days}\n";
        assert_eq!(run(script, json!({"city": "oslo"})).await, Ok(json!({"city": "OSLO", "days": 1})));
        let shared = run_script(
            "def run(shared_outputs):\n    return len(shared_outputs)\n",
            &Map::new(),
            Some(json!([{"name": "a"}, {"name": "b"}])),
            SandboxLimits::default(),
        )
        .await;
        assert_eq!(shared, Ok(json!(2)));
    }

    #[tokio::test]
    async fn exceptions_and_limits_are_errors() {
        assert_eq!(
            run("def run():\n    raise ValueError('bad city')\n", json!({})).await,
            Err("ValueError: bad city".into())
        );
        let missing = run("def run(city):\n    return city\n", json!({})).await.unwrap_err();
        assert!(missing.starts_with("TypeError"), "{missing}");
        let limits = SandboxLimits { wall_time: Duration::from_secs(1), ..SandboxLimits::default() };
        let slow = run_script("import time\ndef run():\n    time.sleep(30)\n", &Map::new(), None, limits).await;
        assert_eq!(slow, Err("the tool did not finish within 1 seconds".into()));
        let hungry =
            run("def run():\n    return len(bytearray(2 * 1024 * 1024 * 1024))\n", json!({})).await.unwrap_err();
        assert!(hungry.starts_with("MemoryError"), "{hungry}");
        let chatty = run("import sys\ndef run():\n    sys.__stdout__.write('x' * 3000000)\n", json!({})).await;
        assert_eq!(chatty, Err(format!("the tool wrote more than {} bytes", 1024 * 1024)));
    }

    #[tokio::test]
    async fn the_sandbox_has_no_platform_environment_and_no_network() {
        // SAFETY: tests in this binary do not read this variable concurrently.
        unsafe { std::env::set_var("AWS_SECRET_ACCESS_KEY", "platform-secret") };
        let environment = run("import os\ndef run():\n    return dict(os.environ)\n", json!({})).await.unwrap();
        assert!(!environment.to_string().contains("platform-secret"), "{environment}");
        assert!(environment.get("AWS_SECRET_ACCESS_KEY").is_none());
        let network =
            run("import socket\ndef run():\n    socket.create_connection(('127.0.0.1', 9))\n", json!({})).await;
        let error = network.unwrap_err();
        assert!(error.contains("not allowed") || error.contains("unreachable") || error.contains("Errno"), "{error}");
        // Past Python's socket module: the seccomp filter refuses the system call itself.
        let around =
            run("import _socket\ndef run():\n    _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)\n", json!({}))
                .await;
        assert_eq!(around, Err("PermissionError: [Errno 13] Permission denied".into()));
    }

    #[tokio::test]
    async fn a_tool_that_allows_the_network_can_connect() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accept = tokio::spawn(async move { listener.accept().await.map(|_| ()) });
        let limits =
            SandboxLimits { wall_time: Duration::from_secs(10), allow_network: true, ..SandboxLimits::default() };
        let script = format!(
            "import socket\ndef run():\n    socket.create_connection(('127.0.0.1', {port}), timeout=5).close()\n    return 'connected'\n"
        );
        assert_eq!(run_script(&script, &Map::new(), None, limits).await, Ok(json!("connected")));
        assert!(accept.await.unwrap().is_ok());
    }

    #[tokio::test]
    async fn the_sandbox_is_chosen_by_the_tool_sandbox_function_setting() {
        let sdk = aws_env::SdkConfig::builder().build();
        for unset in [None, Some(String::new()), Some("  ".to_owned())] {
            assert!(matches!(ToolSandbox::from_setting(&sdk, unset), ToolSandbox::Subprocess));
        }
        match ToolSandbox::from_setting(&sdk, Some("stack-ToolSandboxFunction-1X2Y".into())) {
            ToolSandbox::Lambda { function, .. } => assert_eq!(&*function, "stack-ToolSandboxFunction-1X2Y"),
            ToolSandbox::Subprocess => panic!("a named function is invoked"),
        }
    }

    #[test]
    fn answers_are_outputs_or_errors() {
        assert_eq!(read_answer(json!({"ok": [1]})), Ok(json!([1])));
        assert_eq!(read_answer(json!({"ok": null})), Ok(Value::Null));
        assert_eq!(read_answer(json!({"error": "ValueError: x"})), Err("ValueError: x".into()));
        for unreadable in [json!({"error": 3}), json!({}), json!([1]), json!({"ok": 1, "error": 2})] {
            assert_eq!(read_answer(unreadable), Err("the tool's answer could not be read".into()));
        }
    }
}
