//! Custom Python tools: `run(**arguments)` executed in a sandbox: locally ([`run_script`], local
//! development and tests) a launcher process per call, or in AWS, whose `provided.al2023`
//! runtime has no Python, the separate `tool-sandbox` function (Python runtime, no IAM
//! permissions). [`ToolSandbox`] is the choice, made once from the `TOOL_SANDBOX_FUNCTION`
//! setting.
//!
//! Both run one program, `functions/tool-sandbox/handler.py`: the function's handler, and
//! locally the launcher ([`LAUNCHER`], the same file run as a program). It runs the tool's
//! process with [`HARNESS`], and both keep the same contract: JSON `{"script", "arguments",
//! "shared_outputs", "limits"}` in, `{"ok": value}` or `{"error": message}` out, with the same
//! limits and the same messages. The sandbox: a fresh interpreter (`-I`: isolated mode, no user
//! site, no `PYTHON*` variables) with an **empty environment** (none of the platform's
//! credentials, AWS keys included), in an empty temporary directory, with CPU-time,
//! address-space and process-count limits, a wall-clock limit, and bounded output. It gives up
//! any capabilities it was started with and is not dumpable. Everything the tool starts is
//! killed before the call answers (the launcher or the handler is its subreaper). Network:
//! the process moves into a network namespace of its own where one can be made (root or user
//! namespaces; not in Lambda), and a seccomp filter makes `socket()` of any family but
//! `AF_UNIX` fail. A tool whose `config.allow_network` is true reaches the network only through
//! the handler's egress proxy, which applies the platform's outbound guard; otherwise Python's
//! socket functions raise.
//!
//! Every call is made for an account (the tenant): the function is invoked with the account's
//! id as `X-Amz-Tenant-Id` (its tenant isolation mode gives each account environments of its
//! own), and, where [`ToolSandbox::with_call_slots`] set a cap, holds one of the account's
//! `sandbox_calls` places (a lease in the quotas table) until the call has ended: for the
//! function, until its invocation returns, even when the caller stopped waiting.

use chrono::Utc;
use platform_data::ids::AccountId;
use platform_data::python_script::{ScriptProblem, precheck};
use serde_json::{Map, Value, json};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use storage::quota::{Leases, Quota};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The limits of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxLimits {
    pub wall_time: Duration,
    pub cpu_seconds: u64,
    pub memory_bytes: u64,
    pub max_output_bytes: usize,
    /// Processes the tool may start (`RLIMIT_NPROC` over what its user runs already; enforced
    /// where the sandbox is not root, as in Lambda).
    pub max_processes: u32,
    pub allow_network: bool,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            wall_time: Duration::from_secs(30),
            cpu_seconds: 20,
            memory_bytes: 512 * 1024 * 1024,
            max_output_bytes: 1024 * 1024,
            max_processes: 32,
            allow_network: false,
        }
    }
}

/// The program the tool's process runs: applies the limits, gives up privileges, closes the
/// network, loads the tool's script as a module and calls its `run` with the arguments read from
/// stdin. The tool-sandbox function runs the same file.
pub const HARNESS: &str = include_str!("../../../../functions/tool-sandbox/harness.py");

/// The tool-sandbox function's handler, which locally is the launcher of each call (`python3 -I
/// -S -c LAUNCHER HARNESS`): the event as one line on stdin, the answer on stdout; stdin closed
/// before the answer cancels the call, and the launcher kills everything the tool started.
pub const LAUNCHER: &str = include_str!("../../../../functions/tool-sandbox/handler.py");

/// How much longer than the call's wall-clock limit the runner waits for the tool-sandbox
/// function, which enforces the limit itself: its cold start and cleanup.
const INVOKE_GRACE: Duration = Duration::from_secs(15);

/// `details.quota`-style name of the cap on an account's concurrent sandbox calls.
pub const SANDBOX_CALLS_QUOTA: &str = "sandbox_calls";

/// How long a call waits for one of its account's places before its result is an error.
pub const SANDBOX_SLOT_WAIT: Duration = Duration::from_secs(10);

/// Where custom tools run, and the cap on each account's calls at once.
#[derive(Debug, Clone, Default)]
pub struct ToolSandbox {
    executor: Executor,
    slots: Option<CallSlots>,
}

/// What runs the calls.
#[derive(Debug, Clone)]
pub enum Executor {
    /// A launcher process of this process per call ([`run_script`]); `allowed_hosts` is the
    /// outbound allow-list (`OUTBOUND_ALLOWED_HOSTS`) its egress proxy applies.
    Subprocess { allowed_hosts: Option<Arc<str>> },
    /// The `tool-sandbox` Lambda function, invoked synchronously once per call with the
    /// account's id as its tenant (it reads the allow-list from its own environment).
    Lambda { invoker: aws_env::lambda::LambdaInvoker, function: Arc<str> },
}

impl Default for Executor {
    /// The local launcher, reaching public addresses only.
    fn default() -> Self {
        Self::Subprocess { allowed_hosts: None }
    }
}

/// Each account's places among sandbox calls in flight: leases of [`SANDBOX_CALLS_QUOTA`].
#[derive(Clone)]
struct CallSlots {
    leases: Leases,
    quota: Quota,
    wait: Duration,
}

impl std::fmt::Debug for CallSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallSlots").field("limit", &self.quota.limit).field("wait", &self.wait).finish()
    }
}

/// How long past a call's longest wait for its answer its place is kept if never given back
/// (the holder died): the function's own timeout stays within it.
const SLOT_MARGIN: Duration = Duration::from_secs(60);

impl CallSlots {
    /// Takes one of `account`'s places for a call of `limits`, waiting up to `self.wait` for one:
    /// the place, or the error result naming the quota.
    async fn take(&self, account: AccountId, limits: SandboxLimits) -> Result<HeldSlot, String> {
        let holder = uuid::Uuid::new_v4().to_string();
        let scope = account.to_string();
        let give_up = tokio::time::Instant::now() + self.wait;
        let lasts = limits.wall_time.saturating_add(INVOKE_GRACE).saturating_add(SLOT_MARGIN);
        let lasts_ms = i64::try_from(lasts.as_millis()).unwrap_or(i64::MAX);
        loop {
            let now_ms = Utc::now().timestamp_millis();
            match self.leases.acquire(self.quota, &scope, &holder, now_ms.saturating_add(lasts_ms), now_ms).await {
                Ok(Ok(())) => return Ok(HeldSlot { slots: self.clone(), scope, holder }),
                Ok(Err(_full)) if tokio::time::Instant::now() < give_up => {
                    let left = give_up.saturating_duration_since(tokio::time::Instant::now());
                    tokio::time::sleep(left.min(Duration::from_millis(250))).await;
                }
                Ok(Err(_full)) => {
                    return Err(format!(
                        "the account's {} quota ({}) is full: that many tool calls are running; try again when one has ended",
                        self.quota.name, self.quota.limit
                    ));
                }
                Err(err) => {
                    tracing::error!(error = %err, %account, "a sandbox call's place could not be taken");
                    return Err("the tool sandbox's quota could not be checked; try again".to_owned());
                }
            }
        }
    }
}

/// A place held among an account's sandbox calls; given back when dropped (in a task of its own:
/// a failure is logged, and the lease then expires by itself).
struct HeldSlot {
    slots: CallSlots,
    scope: String,
    holder: String,
}

impl Drop for HeldSlot {
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let slots = self.slots.clone();
        let (scope, holder) = (std::mem::take(&mut self.scope), std::mem::take(&mut self.holder));
        runtime.spawn(async move {
            if let Err(err) = slots.leases.release(slots.quota, &scope, &holder).await {
                tracing::warn!(error = %err, "a sandbox call's place was not given back; it expires by itself");
            }
        });
    }
}

impl ToolSandbox {
    /// From the `TOOL_SANDBOX_FUNCTION` setting: the function's name or ARN; absent or empty (the
    /// local stack, where the template's `!Ref` to a Python function resolves to nothing) is the
    /// local launcher, with `allowed_hosts` (`OUTBOUND_ALLOWED_HOSTS`). Invocations are not
    /// retried: a tool runs at most once per call, and a refused invocation (throttled, too
    /// large) is an error result the model may act on.
    pub fn from_setting(sdk: &aws_env::SdkConfig, function: Option<String>, allowed_hosts: Option<String>) -> Self {
        let executor = match function.map(|name| name.trim().to_owned()).filter(|name| !name.is_empty()) {
            None => Executor::Subprocess { allowed_hosts: allowed_hosts.map(Into::into) },
            Some(function) => {
                Executor::Lambda { invoker: aws_env::lambda::LambdaInvoker::new(sdk), function: function.into() }
            }
        };
        Self { executor, slots: None }
    }

    /// Caps each account's calls in flight at `limit` (leases of [`SANDBOX_CALLS_QUOTA`] in
    /// `leases`); a call waits up to [`SANDBOX_SLOT_WAIT`] for a place.
    pub fn with_call_slots(mut self, leases: Leases, limit: u32) -> Self {
        let quota = Quota { name: SANDBOX_CALLS_QUOTA, limit };
        self.slots = Some(CallSlots { leases, quota, wait: SANDBOX_SLOT_WAIT });
        self
    }

    /// How long a call waits for a place (tests shorten it); no effect without a cap.
    pub fn with_slot_wait(mut self, wait: Duration) -> Self {
        if let Some(slots) = &mut self.slots {
            slots.wait = wait;
        }
        self
    }

    /// What runs the calls.
    pub fn executor(&self) -> &Executor {
        &self.executor
    }

    /// Runs `script`'s `run(**arguments)` for `account`, here or in the function (see
    /// [`run_script`]), once the account has a place among its calls in flight.
    pub async fn run(
        &self,
        account: AccountId,
        script: &str,
        arguments: &Map<String, Value>,
        shared_outputs: Option<Value>,
        limits: SandboxLimits,
    ) -> Result<Value, String> {
        let slot = match &self.slots {
            Some(slots) => Some(slots.take(account, limits).await?),
            None => None,
        };
        let mut span = telemetry::Span::start(telemetry::genai::INVOKE_SANDBOX, telemetry::Kind::Client);
        let answer = self.execute(slot, account, script, arguments, shared_outputs, limits).await;
        if let Err(error) = &answer {
            span.fail("sandbox_error", error);
        }
        answer
    }

    async fn execute(
        &self,
        slot: Option<HeldSlot>,
        account: AccountId,
        script: &str,
        arguments: &Map<String, Value>,
        shared_outputs: Option<Value>,
        limits: SandboxLimits,
    ) -> Result<Value, String> {
        match &self.executor {
            Executor::Subprocess { allowed_hosts } => {
                // Dropping this call cancels it (the launcher then ends the tool): the place goes
                // with it.
                let answer = run_script(script, arguments, shared_outputs, limits, allowed_hosts.as_deref()).await;
                drop(slot);
                answer
            }
            Executor::Lambda { invoker, function } => {
                // An invocation cannot be called back: it runs to its end in a task of its own,
                // which keeps the place until then, whether or not this call still waits.
                let payload = sandbox_event(script, arguments, shared_outputs, limits).to_string().into_bytes();
                let (invoker, name) = (invoker.clone(), Arc::clone(function));
                let call = tokio::spawn(async move {
                    let answer = invoke(&invoker, &name, account, payload).await;
                    drop(slot);
                    answer
                });
                match tokio::time::timeout(limits.wall_time.saturating_add(INVOKE_GRACE), call).await {
                    Ok(answer) => answer.unwrap_or_else(|_| Err("the tool sandbox call failed".to_owned())),
                    Err(_) => {
                        tracing::warn!(
                            function = &**function,
                            "the tool sandbox did not answer in time; its place is kept until it does"
                        );
                        Err(did_not_finish(limits))
                    }
                }
            }
        }
    }
}

/// The program that checks a custom tool's script, run as a tool ([`ToolSandbox::check_script`]).
pub const SCRIPT_CHECKER: &str = include_str!("script_checker.py");

/// The limits of a check: compiling a script of `MAX_SCRIPT_BYTES` takes well under a second.
const CHECK_LIMITS: SandboxLimits = SandboxLimits {
    wall_time: Duration::from_secs(10),
    cpu_seconds: 5,
    memory_bytes: 512 * 1024 * 1024,
    max_output_bytes: 64 * 1024,
    max_processes: 1,
    allow_network: false,
};

impl ToolSandbox {
    /// Checks a custom tool's script with the Python that runs the tools, without running it:
    /// [`precheck`] here, then [`SCRIPT_CHECKER`] as a tool in this sandbox (CPython's parser and
    /// compiler, then the top-level `run`). `Ok(Ok(()))`: valid; `Ok(Err(problem))`: invalid;
    /// `Err(reason)`: the check could not be made (the sandbox is unreachable or refused it).
    pub async fn check_script(&self, account: AccountId, script: &str) -> Result<Result<(), ScriptProblem>, String> {
        if let Err(problem) = precheck(script) {
            return Ok(Err(problem));
        }
        let arguments = Map::from_iter([("source".to_owned(), Value::String(script.to_owned()))]);
        // A check takes no place among the account's calls: it is short, one per API request, and
        // the API's rate limits bound those.
        let unplaced = Self { executor: self.executor.clone(), slots: None };
        let answer = unplaced.run(account, SCRIPT_CHECKER, &arguments, None, CHECK_LIMITS).await?;
        read_check(&answer).ok_or_else(|| "the script checker's answer could not be read".to_owned())
    }
}

/// The checker's answer: `{"valid": true}` or `{"valid": false, "message", "line", "column"}`.
fn read_check(answer: &Value) -> Option<Result<(), ScriptProblem>> {
    match answer.get("valid")?.as_bool()? {
        true => Some(Ok(())),
        false => {
            let place = |key: &str| answer.get(key).and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok());
            let message = answer.get("message")?.as_str()?.chars().take(500).collect::<String>();
            Some(Err(ScriptProblem { message, line: place("line"), column: place("column") }))
        }
    }
}

/// One call in the tool-sandbox function, in `account`'s environments: the request with its
/// limits, the answer mapped to the local executor's results. Failures of the invocation itself
/// (unreachable, refused, the function crashed or timed out) are error results too, logged with
/// their details.
async fn invoke(
    invoker: &aws_env::lambda::LambdaInvoker,
    function: &str,
    account: AccountId,
    payload: Vec<u8>,
) -> Result<Value, String> {
    use aws_env::lambda::InvokeError;
    let tenant = account.to_string();
    let output = match invoker.invoke_for_tenant(function, &tenant, payload).await {
        Err(err) => {
            tracing::warn!(function, error = %err, "tool sandbox invocation failed");
            return Err(match err {
                InvokeError::Refused { code, .. } => format!("the tool sandbox refused the call ({code})"),
                InvokeError::Unavailable(_) => "the tool sandbox could not be reached".to_owned(),
            });
        }
        Ok(output) => output,
    };
    let body = output.payload;
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

/// The event of one call, for the function or the launcher.
fn sandbox_event(
    script: &str,
    arguments: &Map<String, Value>,
    shared_outputs: Option<Value>,
    limits: SandboxLimits,
) -> Value {
    json!({
        "script": script,
        "arguments": arguments,
        "shared_outputs": shared_outputs,
        "limits": {
            "wall_time_ms": u64::try_from(limits.wall_time.as_millis()).unwrap_or(u64::MAX).max(1),
            "cpu_seconds": limits.cpu_seconds,
            "memory_bytes": limits.memory_bytes,
            "max_output_bytes": limits.max_output_bytes,
            "max_processes": limits.max_processes,
            "allow_network": limits.allow_network,
        },
    })
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

/// How much longer than the call's wall-clock limit the runner waits for the launcher, which
/// enforces the limit itself: its start and cleanup.
const LAUNCHER_GRACE: Duration = Duration::from_secs(15);

/// Runs `script`'s `run(**arguments)` in a sandbox of its own: a launcher process ([`LAUNCHER`])
/// that starts the tool's process and kills everything the tool started before it answers.
/// `shared_outputs`, when given, is passed as the `shared_outputs` keyword argument (tool output
/// sharing); `allowed_hosts` is the allow-list of the egress proxy of a tool that may use the
/// network. An `Err` says what went wrong (the script's exception, a limit, an unreadable
/// answer). Dropping the future closes the launcher's stdin, which cancels the call: the
/// launcher still kills what the tool started.
pub async fn run_script(
    script: &str,
    arguments: &Map<String, Value>,
    shared_outputs: Option<Value>,
    limits: SandboxLimits,
    allowed_hosts: Option<&str>,
) -> Result<Value, String> {
    let mut command = tokio::process::Command::new(python());
    command
        .arg("-I")
        .arg("-S")
        .arg("-c")
        .arg(LAUNCHER)
        .arg(HARNESS)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LANG", "C.UTF-8")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Never killed from here: the launcher must outlive a dropped call to clean up after it.
        .kill_on_drop(false);
    if let Some(hosts) = allowed_hosts {
        command.env("OUTBOUND_ALLOWED_HOSTS", hosts);
    }
    let mut child = command.spawn().map_err(|err| format!("the sandbox could not start python3 ({err})"))?;
    // One line (serde_json escapes newlines); stdin then stays open until the answer.
    let mut event = sandbox_event(script, arguments, shared_outputs, limits).to_string();
    event.push('\n');
    let mut stdin = child.stdin.take().ok_or("the sandbox has no stdin")?;
    let mut stdout = child.stdout.take().ok_or("the sandbox has no stdout")?;
    let mut stderr = child.stderr.take().ok_or("the sandbox has no stderr")?;
    let max = limits.max_output_bytes;
    let work = async {
        let written = stdin.write_all(event.as_bytes()).await;
        // The answer is the tool's output re-encoded, plus at most a message: bounded near it.
        let (out, err) = tokio::join!(read_bounded(&mut stdout, max + 64 * 1024), read_bounded(&mut stderr, 4096));
        (written, out, err, child.wait().await)
    };
    let (written, out, err, status) = match tokio::time::timeout(limits.wall_time + LAUNCHER_GRACE, work).await {
        Ok(done) => done,
        Err(_) => {
            tracing::warn!("the tool sandbox's launcher did not answer in time");
            return Err(did_not_finish(limits));
        }
    };
    drop(stdin);
    let out = out.map_err(|_| format!("the tool wrote more than {max} bytes"))?;
    match serde_json::from_slice(&out) {
        Ok(answer) => read_answer(answer),
        Err(_) => {
            let status = status.map(|s| s.to_string()).unwrap_or_else(|err| err.to_string());
            let detail = String::from_utf8_lossy(&err.unwrap_or_default()).trim().chars().take(300).collect::<String>();
            tracing::warn!(%status, written = written.is_ok(), %detail, "the tool sandbox's launcher failed");
            Err(format!("the tool sandbox failed ({status})"))
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    async fn run(script: &str, arguments: Value) -> Result<Value, String> {
        let limits = SandboxLimits { wall_time: Duration::from_secs(10), ..SandboxLimits::default() };
        run_script(script, arguments.as_object().unwrap(), None, limits, None).await
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
            None,
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
        let slow = run_script("import time\ndef run():\n    time.sleep(30)\n", &Map::new(), None, limits, None).await;
        assert_eq!(slow, Err("the tool did not finish within 1 seconds".into()));
        let hungry =
            run("def run():\n    return len(bytearray(2 * 1024 * 1024 * 1024))\n", json!({})).await.unwrap_err();
        assert!(hungry.starts_with("MemoryError"), "{hungry}");
        let chatty = run("def run():\n    return 'x' * 3000000\n", json!({})).await;
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
        assert_eq!(run_script(&script, &Map::new(), None, limits, Some("127.0.0.1")).await, Ok(json!("connected")));
        assert!(accept.await.unwrap().is_ok());
    }

    #[tokio::test]
    async fn the_sandbox_is_chosen_by_the_tool_sandbox_function_setting() {
        let sdk = aws_env::SdkConfig::builder().build();
        for unset in [None, Some(String::new()), Some("  ".to_owned())] {
            assert!(matches!(ToolSandbox::from_setting(&sdk, unset, None).executor(), Executor::Subprocess { .. }));
        }
        match ToolSandbox::from_setting(&sdk, None, Some("127.0.0.1".into())).executor() {
            Executor::Subprocess { allowed_hosts } => assert_eq!(allowed_hosts.as_deref(), Some("127.0.0.1")),
            Executor::Lambda { .. } => panic!("no function is named"),
        }
        match ToolSandbox::from_setting(&sdk, Some("stack-ToolSandboxFunction-1X2Y".into()), None).executor() {
            Executor::Lambda { function, .. } => assert_eq!(&**function, "stack-ToolSandboxFunction-1X2Y"),
            Executor::Subprocess { .. } => panic!("a named function is invoked"),
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

    async fn check(script: &str) -> Result<(), ScriptProblem> {
        ToolSandbox::default().check_script(AccountId::new_v4(), script).await.expect("the check runs")
    }

    #[tokio::test]
    async fn scripts_are_checked_by_python_without_being_run() {
        assert_eq!(
            check("import json\n\ndef run(city: str) -> str:\n    return json.dumps({'city': city})\n").await,
            Ok(())
        );
        assert_eq!(check("async def run(**kwargs):\n    return kwargs\n").await, Ok(()));
        // Compiled, never executed: the side effect at import does not happen.
        assert_eq!(check("import os\nos._exit(3)\ndef run():\n    pass\n").await, Ok(()));

        let problem = check("def run(:\n    pass\n").await.unwrap_err();
        assert!(problem.message.starts_with("syntax error: "), "{problem:?}");
        assert_eq!((problem.line, problem.column), (Some(1), Some(9)));
        // What the compiler refuses after parsing is found too.
        let problem = check("return 1\ndef run():\n    pass\n").await.unwrap_err();
        assert_eq!(problem.message, "syntax error: 'return' outside function");
        assert_eq!(problem.line, Some(1));
        let problem = check("def run():\n    await thing()\n").await.unwrap_err();
        assert_eq!(problem.line, Some(2));
    }

    #[tokio::test]
    async fn the_entry_point_must_be_a_top_level_function() {
        for source in ["def main():\n    pass\n", "class T:\n    def run(self):\n        pass\n", "run = lambda: 1\n"] {
            let problem = check(source).await.unwrap_err();
            assert_eq!(problem.message, "the script must define a top-level function `run`", "{source}");
            assert_eq!((problem.line, problem.column), (None, None));
        }
    }

    #[tokio::test]
    async fn blank_oversized_and_too_deep_scripts_are_refused_not_a_crash() {
        assert_eq!(check(" \n").await.unwrap_err().message, "the script is empty");
        let huge = format!("def run():\n    return 1\n{}", "#".repeat(platform_data::python_script::MAX_SCRIPT_BYTES));
        assert!(check(&huge).await.unwrap_err().message.starts_with("the script is larger than"));
        // Issue 9, point 5: `x = ------…1` used to overflow the parser's stack and abort the
        // whole process. Python refuses it, in a process of its own.
        for deep in [
            format!("def run():\n    pass\nx={}1", "-".repeat(250_000)),
            format!("def run():\n    pass\nx={}1{}", "(".repeat(1000), ")".repeat(1000)),
            format!("def run():\n    pass\nx={}1", "lambda: ".repeat(20_000)),
            format!("def run():\n    pass\nx={}1", "1+".repeat(120_000)),
        ] {
            let problem = check(&deep).await.unwrap_err();
            assert!(!problem.message.is_empty(), "{problem:?}");
        }
    }

    #[test]
    fn checker_answers_are_read_or_refused() {
        assert_eq!(read_check(&json!({"valid": true})), Some(Ok(())));
        let problem = json!({"valid": false, "message": "syntax error: x", "line": 2, "column": 5});
        assert_eq!(
            read_check(&problem),
            Some(Err(ScriptProblem { message: "syntax error: x".into(), line: Some(2), column: Some(5) }))
        );
        let unplaced = json!({"valid": false, "message": "m", "line": null, "column": -1});
        assert_eq!(read_check(&unplaced), Some(Err(ScriptProblem::general("m"))));
        for unreadable in [json!({}), json!({"valid": "yes"}), json!({"valid": false}), json!([true]), json!(null)] {
            assert_eq!(read_check(&unreadable), None, "{unreadable}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Whatever a sandbox answers, reading it never panics: a verdict or `None`.
        #[test]
        fn any_checker_answer_is_read_without_panic(text in ".{0,200}", line in proptest::prelude::any::<i64>()) {
            for answer in [
                serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text.clone())),
                json!({"valid": false, "message": text, "line": line, "column": line}),
            ] {
                if let Some(Err(problem)) = read_check(&answer) {
                    proptest::prop_assert!(problem.message.chars().count() <= 500);
                }
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

        /// Any text gets a verdict from Python (each case is a python3 process).
        #[test]
        fn any_script_gets_a_verdict(source in proptest::prelude::any::<String>()) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let verdict = runtime.block_on(ToolSandbox::default().check_script(AccountId::new_v4(), &source));
            proptest::prop_assert!(verdict.is_ok(), "{verdict:?}");
        }
    }
}
