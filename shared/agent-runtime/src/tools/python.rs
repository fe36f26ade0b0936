//! Custom Python tools: `run(**arguments)` executed in a sandbox, locally a `python3` subprocess.
//!
//! The sandbox: the script runs in a fresh interpreter (`-I`: isolated mode, no user site, no
//! `PYTHON*` variables), with an **empty environment** (none of the platform's credentials, AWS
//! keys included), in an empty temporary directory, with CPU-time and address-space limits, a
//! wall-clock limit after which the process is killed, and bounded output. Network: unless the
//! tool's `config.allow_network` is true, the child first moves into a network namespace of its
//! own where one can be made (root or user namespaces), and in any case replaces socket creation
//! with an error. In AWS, custom tools run in the separate `tool-sandbox` function (Python
//! runtime, no IAM permissions); this module is the local and test executor of the same
//! contract: JSON `{"script", "arguments", "shared_outputs"}` on stdin, JSON `{"ok": value}` or
//! `{"error": message}` on stdout.

use serde_json::{Map, Value, json};
use std::process::Stdio;
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

/// The program the interpreter runs: applies the limits, closes the network, loads the tool's
/// script as a module and calls its `run` with the arguments read from stdin.
const SHIM: &str = r#"
import json, sys, resource, io
limits = json.loads(sys.argv[1])
resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu"], limits["cpu"]))
resource.setrlimit(resource.RLIMIT_AS, (limits["memory"], limits["memory"]))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
if not limits["network"]:
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).unshare(0x40000000)  # CLONE_NEWNET, where permitted
    except Exception:
        pass
    import socket
    def _refused(*args, **kwargs):
        raise PermissionError("network access is not allowed for this tool")
    socket.socket = _refused
    socket.create_connection = _refused
    socket.getaddrinfo = _refused
request = json.loads(sys.stdin.read())
source = request["script"]
out = sys.stdout
sys.stdout = io.StringIO()
try:
    namespace = {"__name__": "tool"}
    exec(compile(source, "tool.py", "exec"), namespace)
    arguments = dict(request.get("arguments") or {})
    if limits["share"]:
        arguments["shared_outputs"] = request.get("shared_outputs") or []
    result = namespace["run"](**arguments)
    try:
        text = json.dumps({"ok": result})
    except (TypeError, ValueError):
        text = json.dumps({"ok": repr(result)})
except BaseException as error:
    text = json.dumps({"error": f"{type(error).__name__}: {error}"})
out.write(text)
out.flush()
"#;

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
        .arg(SHIM)
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
        Err(_) => return Err(format!("the tool did not finish within {} seconds", limits.wall_time.as_secs())),
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
    match answer {
        Value::Object(mut fields) => match (fields.remove("ok"), fields.remove("error")) {
            (Some(result), None) => Ok(result),
            (_, Some(Value::String(error))) => Err(error),
            _ => Err("the tool's answer could not be read".into()),
        },
        _ => Err("the tool's answer could not be read".into()),
    }
}

/// `python3`, or `PYTHON` when set (a virtualenv's interpreter).
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
    }
}
