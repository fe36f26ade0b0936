//! Custom Python tools in AWS: the runner invokes the tool-sandbox function. Its real handler
//! (`functions/tool-sandbox/handler.py`) runs behind a local stand-in of Lambda's Invoke API
//! (`integration_tests::lambda_server`), reached by the AWS SDK's Lambda client.

use agent_runtime::lifecycle::RunLifecycle;
use agent_runtime::tools::python::{HARNESS, SandboxLimits, ToolSandbox};
use futures_util::StreamExt;
use integration_tests::lambda_server::{FUNCTION_SECRET_ACCESS_KEY, FunctionCode, LambdaServer, sdk_config_at};
use integration_tests::local_server::closed_port_url;
use integration_tests::model_server::{ModelServer, text_reply, tool_calls_reply};
use integration_tests::{TestClient, TestClock, TestStack};
use platform_api::{AgentRunsService, AgentsService, Gate, ToolsService};
use platform_data::agents::AgentStore;
use platform_data::ids::AccountId;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// The account the calls are made for (the function's tenant).
fn tenant() -> AccountId {
    "0b1c2d3e-4f50-4a61-8b72-9c8d7e6f5a40".parse().expect("an account id")
}

fn limits(seconds: u64) -> SandboxLimits {
    SandboxLimits { wall_time: Duration::from_secs(seconds), ..SandboxLimits::default() }
}

fn object(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

/// The sandbox the runner builds from `TOOL_SANDBOX_FUNCTION` = the server's function.
async fn in_function(server: &LambdaServer) -> ToolSandbox {
    ToolSandbox::from_setting(&server.sdk_config().await, Some(server.function.clone()), None)
}

/// A function code folder holding `handler.py` with `source`, removed on drop.
struct CodeFolder(PathBuf);

impl CodeFolder {
    fn with_handler(source: Option<&str>) -> Self {
        Self::with_module("handler", source)
    }

    /// A folder holding `{module}.py` with `source`.
    fn with_module(module: &str, source: Option<&str>) -> Self {
        let folder = std::env::temp_dir().join(format!("lambda-code-{}", Uuid::new_v4()));
        std::fs::create_dir(&folder).unwrap();
        if let Some(source) = source {
            std::fs::write(folder.join(format!("{module}.py")), source).unwrap();
        }
        Self(folder)
    }

    fn code(&self, timeout: Duration) -> FunctionCode {
        FunctionCode { folder: self.0.clone(), handler: "handler.handler".into(), timeout, environment: Vec::new() }
    }
}

impl Drop for CodeFolder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One call both executors make.
struct Case {
    script: &'static str,
    arguments: Map<String, Value>,
    shared: Option<Value>,
    limits: Option<SandboxLimits>,
    expected: Option<Result<Value, String>>,
}

impl Case {
    fn new(script: &'static str) -> Self {
        Self { script, arguments: Map::new(), shared: None, limits: None, expected: None }
    }

    fn arguments(self, arguments: Value) -> Self {
        Self { arguments: object(arguments), ..self }
    }

    fn shared(self, shared: Value) -> Self {
        Self { shared: Some(shared), ..self }
    }

    fn limits(self, limits: SandboxLimits) -> Self {
        Self { limits: Some(limits), ..self }
    }

    fn gives(self, expected: Result<Value, String>) -> Self {
        Self { expected: Some(expected), ..self }
    }
}

#[tokio::test]
async fn the_function_gives_what_the_local_subprocess_gives() {
    let server = LambdaServer::tool_sandbox("tool-sandbox").await;
    let lambda = in_function(&server).await;
    let shared = json!([{"call_id": "c1", "name": "a", "output": 1}, {"call_id": "c2", "name": "b", "output": 2}]);
    let ten = limits(10);
    // A script, its arguments, shared outputs and limits, and the result both must give (where
    // it does not depend on the Python version).
    let cases = [
        Case::new("def run(city, days=1):\n    print('noise on stdout is ignored')\n    return {'city': city.upper(), 'days': days}\n")
            .arguments(json!({"city": "oslo"}))
            .gives(Ok(json!({"city": "OSLO", "days": 1}))),
        Case::new("def run(shared_outputs):\n    return [o['name'] for o in shared_outputs]\n")
            .shared(shared)
            .gives(Ok(json!(["a", "b"]))),
        Case::new("def run():\n    return {1, 2}\n").gives(Ok(json!("{1, 2}"))),
        Case::new("def run():\n    raise ValueError('bad city')\n").gives(Err("ValueError: bad city".into())),
        Case::new("def run(city):\n    return city\n"),
        Case::new("import time\ndef run():\n    time.sleep(30)\n")
            .limits(limits(1))
            .gives(Err("the tool did not finish within 1 seconds".into())),
        Case::new("def run():\n    return len(bytearray(2 * 1024 * 1024 * 1024))\n"),
        Case::new("def run():\n    return 'x' * 3000000\n")
            .gives(Err(format!("the tool wrote more than {} bytes", 1024 * 1024))),
        Case::new("import os\ndef run():\n    os._exit(3)\n")
            .gives(Err("the tool stopped without an answer (exit status: 3)".into())),
        Case::new("this is not python"),
    ];
    for case in &cases {
        let limits = case.limits.unwrap_or(ten);
        let local =
            ToolSandbox::default().run(tenant(), case.script, &case.arguments, case.shared.clone(), limits).await;
        let remote = lambda.run(tenant(), case.script, &case.arguments, case.shared.clone(), limits).await;
        assert_eq!(remote, local, "{}", case.script);
        if let Some(expected) = &case.expected {
            assert_eq!(&remote, expected, "{}", case.script);
        }
    }
    let invocations = server.invocations.lock().unwrap().clone();
    assert_eq!(invocations.len(), cases.len());

    // The payload: the local executor's request plus the call's limits, signed for Lambda.
    let first = &invocations[0];
    assert_eq!(first.function, "tool-sandbox");
    assert_eq!(first.payload["arguments"], json!({"city": "oslo"}));
    assert_eq!(first.payload["shared_outputs"], Value::Null);
    assert_eq!(
        first.payload["limits"],
        json!({"wall_time_ms": 10000, "cpu_seconds": 20, "memory_bytes": 536870912,
            "max_output_bytes": 1048576, "max_processes": 32, "allow_network": false})
    );
    assert_eq!(invocations[1].payload["shared_outputs"][1]["name"], "b");
    let authorization = first.headers["authorization"].to_str().unwrap();
    assert!(authorization.starts_with("AWS4-HMAC-SHA256 ") && authorization.contains("/lambda/aws4_request"));
    // Synchronous: no invocation type header, or RequestResponse.
    assert!(first.headers.get("x-amz-invocation-type").is_none_or(|kind| kind == "RequestResponse"));
}

#[tokio::test]
async fn a_tool_sees_nothing_of_the_functions_environment() {
    let server = LambdaServer::tool_sandbox("tool-sandbox").await;
    let lambda = in_function(&server).await;
    let script = "import os\n\
        def run():\n\
        \x20   try:\n\
        \x20       parent = open(f'/proc/{os.getppid()}/environ', 'rb').read().decode('latin-1')\n\
        \x20   except OSError as error:\n\
        \x20       parent = type(error).__name__\n\
        \x20   return {'environment': dict(os.environ), 'parent': parent}\n";
    let seen = lambda.run(tenant(), script, &Map::new(), None, limits(10)).await.unwrap();
    let text = seen.to_string();
    assert!(!text.contains(FUNCTION_SECRET_ACCESS_KEY), "{text}");
    assert!(!text.contains("AWS_") && !text.contains("LAMBDA"), "{text}");
    assert_eq!(seen["environment"]["PATH"], "/usr/bin:/bin");
    // The handler's own environment (its session credentials) is closed to the tool too.
    assert_eq!(seen["parent"], "PermissionError");
}

#[tokio::test]
async fn the_network_is_refused_unless_the_tool_allows_it() {
    let server = LambdaServer::tool_sandbox("tool-sandbox").await;
    let lambda = in_function(&server).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepting = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            drop(stream);
        }
    });
    let arguments = object(json!({"port": port}));
    let connect = "import socket\ndef run(port):\n    socket.create_connection(('127.0.0.1', port), timeout=5).close()\n    return 'connected'\n";
    // Past Python's socket module, straight to the C library: the kernel (seccomp) refuses.
    let around = "import _socket\ndef run(port):\n    s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)\n    s.connect(('127.0.0.1', port))\n    return 'connected'\n";

    let closed = limits(10);
    assert_eq!(
        lambda.run(tenant(), connect, &arguments, None, closed).await,
        Err("PermissionError: network access is not allowed for this tool".into())
    );
    assert_eq!(
        lambda.run(tenant(), around, &arguments, None, closed).await,
        Err("PermissionError: [Errno 13] Permission denied".into())
    );
    // Allowed, the network is the egress proxy's, which applies the outbound guard: loopback
    // (the function's own services) is refused, and the kernel still refuses sockets of its own.
    let open = SandboxLimits { allow_network: true, ..closed };
    assert_eq!(
        lambda.run(tenant(), connect, &arguments, None, open).await,
        Err(format!(
            "PermissionError: the connection to 127.0.0.1:{port} was refused: 127.0.0.1 is a private, loopback or \
             link-local address, which this platform does not call"
        ))
    );
    assert_eq!(
        lambda.run(tenant(), around, &arguments, None, open).await,
        Err("PermissionError: [Errno 13] Permission denied".into())
    );
    assert_eq!(server.invocations.lock().unwrap()[2].payload["limits"]["allow_network"], true);
    accepting.abort();
}

/// A tool that may use the network reaches `target` with Python's socket module.
const REACH: &str = "import socket\ndef run(host, port):\n    socket.create_connection((host, port), timeout=5).close()\n    return 'connected'\n";

#[tokio::test]
async fn a_tool_with_the_network_reaches_only_what_the_outbound_guard_allows() {
    // An operator who allows loopback (as `make dev` does) still keeps the tools off the Lambda
    // Runtime API; metadata and private addresses stay refused.
    let code = FunctionCode {
        environment: vec![("OUTBOUND_ALLOWED_HOSTS".into(), "127.0.0.0/8".into())],
        ..FunctionCode::tool_sandbox()
    };
    let server = LambdaServer::start("tool-sandbox", code).await;
    let lambda = in_function(&server).await;
    let web = integration_tests::local_server::LocalServer::start(Arc::new(|_| {
        Box::pin(async { integration_tests::local_server::respond(200, "text/plain", "hello from loopback") })
    }))
    .await;
    let fetch =
        "import urllib.request\ndef run(url):\n    return urllib.request.urlopen(url, timeout=5).read().decode()\n";
    let open = SandboxLimits { allow_network: true, ..limits(10) };
    let local = ToolSandbox::from_setting(&aws_env::SdkConfig::builder().build(), None, Some("127.0.0.0/8".into()));
    for sandbox in [&lambda, &local] {
        // Through the proxy and back: an HTTP exchange.
        let arguments = object(json!({"url": web.url("/page")}));
        assert_eq!(sandbox.run(tenant(), fetch, &arguments, None, open).await, Ok(json!("hello from loopback")));
    }
    let runtime_api = integration_tests::lambda_server::LOCAL_RUNTIME_API;
    let (host, port) = runtime_api.split_once(':').unwrap();
    let refused = lambda
        .run(tenant(), REACH, &object(json!({"host": host, "port": port.parse::<u16>().unwrap()})), None, open)
        .await;
    assert_eq!(
        refused,
        Err(format!(
            "PermissionError: the connection to {runtime_api} was refused: {runtime_api} is the function runtime's own API"
        ))
    );
    for (host, port) in [("169.254.169.254", 80), ("10.1.2.3", 443), ("::ffff:169.254.169.254", 80)] {
        for sandbox in [&lambda, &local] {
            let result = sandbox.run(tenant(), REACH, &object(json!({"host": host, "port": port})), None, open).await;
            let error = result.unwrap_err();
            assert!(
                error.starts_with("PermissionError: the connection to ")
                    && error
                        .ends_with("is a private, loopback or link-local address, which this platform does not call"),
                "{host}: {error}"
            );
        }
    }
    // Without the allowance, loopback is refused by the local executor too.
    let public_only = ToolSandbox::default();
    let arguments = object(json!({"url": web.url("/page")}));
    let error = public_only.run(tenant(), fetch, &arguments, None, open).await.unwrap_err();
    assert!(error.contains("127.0.0.1 is a private, loopback or link-local address"), "{error}");
}

/// A tool that tries to outlive its call every way the issue lists, and to spy on the next one:
/// a chain of 60 processes each in a session of its own, a double fork, a process that ignores
/// SIGTERM and SIGHUP, and a spy that waits for the next call's tool process to read its request
/// (`/proc/PID/fd/0`) and forge its answer (`/proc/PID/fd/1`). It answers the ids of all of them.
const ESCAPE: &str = r#"import json, os, signal, time

MARK = b"The harness of one custom tool call"


def spy(own_harness):
    end = time.monotonic() + 20
    while time.monotonic() < end:
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in (os.getpid(), own_harness):
                continue
            try:
                if MARK not in open(f"/proc/{entry}/cmdline", "rb").read():
                    continue
                stolen = os.read(os.open(f"/proc/{entry}/fd/0", os.O_RDONLY | os.O_NONBLOCK), 65536)
                with open(f"/proc/{entry}/fd/1", "w") as victim:
                    victim.write(json.dumps({"ok": "forged: " + stolen.decode("utf-8", "replace")}))
            except OSError:
                pass
        time.sleep(0.002)


def run():
    own_harness = os.getpid()
    reader, writer = os.pipe()
    report = lambda: os.write(writer, f"{os.getpid()}\n".encode())
    if os.fork() == 0:
        for level in range(60):
            os.setsid()
            report()
            if level < 59 and os.fork() != 0:
                break
        time.sleep(60)
        os._exit(0)
    if os.fork() == 0:
        if os.fork() == 0:
            report()
            time.sleep(60)
        os._exit(0)
    if os.fork() == 0:
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        report()
        time.sleep(60)
        os._exit(0)
    if os.fork() == 0:
        os.setsid()
        report()
        spy(own_harness)
        os._exit(0)
    os.close(writer)
    seen = b""
    while seen.count(b"\n") < 63:
        chunk = os.read(reader, 4096)
        if not chunk:
            break
        seen += chunk
    return [int(pid) for pid in seen.split()]
"#;

/// The next tenant's call: its answer must be its own.
const NEXT_CALL: &str = "def run(api_key):\n    return {'mine': api_key[-4:]}\n";

fn assert_all_gone(pids: &[u64], executor: &str) {
    let alive: Vec<_> = pids.iter().filter(|pid| Path::new(&format!("/proc/{pid}")).exists()).collect();
    assert!(alive.is_empty(), "{executor}: processes {alive:?} of {} outlived their call", pids.len());
}

#[tokio::test]
async fn nothing_a_tool_starts_outlives_its_call_and_the_next_call_is_its_own() {
    let server = LambdaServer::tool_sandbox("tool-sandbox").await;
    let lambda = in_function(&server).await;
    let next = object(json!({"api_key": "sk-tenant-b-secret-7f3a"}));
    for (executor, sandbox) in [("local", ToolSandbox::default()), ("lambda", lambda)] {
        // 63 processes: more than the default process limit, which applies where the sandbox is
        // not root (Lambda, and the stand-in's environments).
        let many = SandboxLimits { max_processes: 100, ..limits(20) };
        let left = sandbox.run(tenant(), ESCAPE, &Map::new(), None, many).await.unwrap();
        let pids: Vec<u64> = left.as_array().unwrap().iter().map(|pid| pid.as_u64().unwrap()).collect();
        assert_eq!(pids.len(), 63, "{executor}: {left}");
        assert_all_gone(&pids, executor);
        assert_eq!(
            sandbox.run(tenant(), NEXT_CALL, &next, None, limits(10)).await,
            Ok(json!({"mine": "7f3a"})),
            "{executor}"
        );
    }
    // Both calls in one warm environment, which stayed clean.
    assert_eq!(server.environments_started(), 1);
}

#[tokio::test]
async fn a_tools_process_is_limited_in_processes_and_not_dumpable() {
    let server = LambdaServer::tool_sandbox("tool-sandbox").await;
    let lambda = in_function(&server).await;
    let look = "import ctypes, resource\ndef run():\n    soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)\n    return {'nproc': [soft, hard], 'dumpable': ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)}\n";
    for sandbox in [ToolSandbox::default(), lambda] {
        let seen = sandbox.run(tenant(), look, &Map::new(), None, limits(10)).await.unwrap();
        assert_eq!(seen["dumpable"], 0, "{seen}");
        let (soft, hard) = (seen["nproc"][0].as_i64().unwrap(), seen["nproc"][1].as_i64().unwrap());
        // Python reports RLIM_INFINITY as -1.
        assert!(soft == hard && soft > 0, "{seen}");
    }
}

#[tokio::test]
async fn an_environment_where_a_process_survived_answers_then_exits() {
    // A handler whose cleanup cannot kill (as if a process were unkillable): the call is
    // answered, then the environment exits, and the next call gets a fresh one.
    let (_keep, server) = patched_sandbox("sandbox.kill = lambda pid: None").await;
    let lambda = in_function(&server).await;
    let linger = "import os, time\ndef run():\n    if os.fork() == 0:\n        os.setsid()\n        time.sleep(15)\n        os._exit(0)\n    return 'answered'\n";
    assert_eq!(lambda.run(tenant(), linger, &Map::new(), None, limits(10)).await, Ok(json!("answered")));
    assert!(environments_exit(&server).await, "the environment with a survivor did not exit");
    let clean = "def run():\n    return 'fresh'\n";
    assert_eq!(lambda.run(tenant(), clean, &Map::new(), None, limits(10)).await, Ok(json!("fresh")));
    assert_eq!(server.environments_started(), 2);
}

#[tokio::test]
async fn a_dropped_local_call_still_ends_everything_it_started() {
    let marker = std::env::temp_dir().join(format!("tool-pid-{}", Uuid::new_v4()));
    let script = "import os, time\ndef run(path):\n    if os.fork() == 0:\n        os.setsid()\n        open(path + '.tmp', 'w').write(str(os.getpid()))\n        os.rename(path + '.tmp', path)\n        time.sleep(60)\n        os._exit(0)\n    time.sleep(60)\n";
    let arguments = object(json!({"path": marker.display().to_string()}));
    let sandbox = ToolSandbox::default();
    let call = sandbox.run(tenant(), script, &arguments, None, limits(60));
    // The call is dropped (a cancelled run) once its process has started a child.
    let pid = tokio::select! {
        _ = call => panic!("the tool never answers"),
        pid = async {
            loop {
                if let Ok(pid) = std::fs::read_to_string(&marker) {
                    break pid;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        } => pid,
    };
    let _ = std::fs::remove_file(&marker);
    let proc_entry = format!("/proc/{pid}");
    let mut waited = 0;
    while Path::new(&proc_entry).exists() && waited < 100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += 1;
    }
    assert!(!Path::new(&proc_entry).exists(), "process {pid} outlived its cancelled call");
}

#[tokio::test]
async fn nothing_a_tool_leaves_behind_outlives_its_call() {
    let server = LambdaServer::tool_sandbox("tool-sandbox").await;
    let lambda = in_function(&server).await;
    // Its working directory is its own folder in the function's /tmp.
    let leave = "import subprocess, sys\n\
        def run():\n\
        \x20   open('../left-behind.txt', 'w').write('a tenant secret')\n\
        \x20   quiet = subprocess.DEVNULL\n\
        \x20   child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],\n\
        \x20       stdin=quiet, stdout=quiet, stderr=quiet, start_new_session=True)\n\
        \x20   return child.pid\n";
    let pid = lambda.run(tenant(), leave, &Map::new(), None, limits(10)).await.unwrap();
    let pid = pid.as_u64().unwrap();
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "process {pid} outlived its call");
    let tmp = server.tmp_dirs().pop().expect("the environment's machine");
    assert!(!tmp.join("left-behind.txt").exists());
    let look = "import os\ndef run():\n    return os.path.exists('../left-behind.txt')\n";
    assert_eq!(lambda.run(tenant(), look, &Map::new(), None, limits(10)).await, Ok(json!(false)));
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
}

#[tokio::test]
async fn failed_invocations_are_error_results() {
    let script = "def run():\n    return 1\n";
    let call = |sandbox: ToolSandbox| async move { sandbox.run(tenant(), script, &Map::new(), None, limits(10)).await };

    // Nothing listens at the endpoint (no retry: a tool runs at most once per call).
    let down = sdk_config_at(&closed_port_url("")).await;
    let result = call(ToolSandbox::from_setting(&down, Some("tool-sandbox".into()), None)).await;
    assert_eq!(result, Err("the tool sandbox could not be reached".into()));

    // Lambda refuses: no such function.
    let server = LambdaServer::tool_sandbox("tool-sandbox").await;
    let other = ToolSandbox::from_setting(&server.sdk_config().await, Some("another-function".into()), None);
    assert_eq!(call(other).await, Err("the tool sandbox refused the call (ResourceNotFoundException)".into()));

    // Function errors (X-Amz-Function-Error): a deployment without its handler, a handler that
    // raises, a function past its timeout.
    let empty = CodeFolder::with_handler(None);
    let broken = LambdaServer::start("tool-sandbox", empty.code(Duration::from_secs(10))).await;
    let result = call(in_function(&broken).await).await.unwrap_err();
    assert!(
        result.starts_with("the tool sandbox failed (Runtime.ImportModuleError: Unable to import module 'handler'"),
        "{result}"
    );
    let raising =
        CodeFolder::with_handler(Some("def handler(event, context):\n    raise RuntimeError('out of order')\n"));
    let failing = LambdaServer::start("tool-sandbox", raising.code(Duration::from_secs(10))).await;
    assert_eq!(
        call(in_function(&failing).await).await,
        Err("the tool sandbox failed (RuntimeError: out of order)".into())
    );
    let sleepy = CodeFolder::with_handler(Some("import time\ndef handler(event, context):\n    time.sleep(30)\n"));
    let slow = LambdaServer::start("tool-sandbox", sleepy.code(Duration::from_secs(1))).await;
    let result = call(in_function(&slow).await).await.unwrap_err();
    assert!(result.starts_with("the tool sandbox failed (Sandbox.Timedout: RequestId: "), "{result}");
    assert!(result.ends_with("Task timed out after 1.00 seconds)"), "{result}");
}

#[tokio::test]
async fn an_agent_run_calls_its_python_tool_in_the_function() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![
        tool_calls_reply(&[("call_1", "shout", json!({"text": "hello"}))]),
        text_reply("It said HELLO."),
    ])
    .await;
    let key = stack.api_key(Uuid::new_v4()).await;
    let lm = stack.language_model(&clock, &key, "local", &model.base_url()).await;
    let tool = stack
        .client::<ToolsService>(&clock)
        .with_key(&key)
        .post(
            "/tools",
            json!({"name": "shout", "type": "custom", "script": "def run(text):\n    return text.upper()\n",
            "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}}),
        )
        .created()
        .await;
    let agent = stack
        .client::<AgentsService>(&clock)
        .with_key(&key)
        .post(
            "/agents/",
            json!({"type": "config", "name": "Shouter", "framework": "chainlib", "language_model_id": lm,
            "tools": [tool]}),
        )
        .created()
        .await;

    let server = LambdaServer::tool_sandbox("tool-sandbox").await;
    // Built by hand around the functions' run sources: the sandbox function is served by a local
    // Lambda endpoint of its own, which no setting names (the stack's endpoint is moto's).
    let built: RunLifecycle = stack.service(&clock);
    let sources = Arc::clone(built.sources());
    drop(built);
    let mut sources = Arc::into_inner(sources).expect("the only handle");
    sources.tool_sandbox = in_function(&server).await;
    let runner = RunLifecycle::new(Arc::new(sources), stack.runs(), clock.clock());
    let agents = AgentStore::new(stack.dynamodb.clone(), stack.setting(platform_api::settings::AGENTS_TABLE));
    let runs = AgentRunsService::new(stack.service::<Gate>(&clock), agents, runner);
    let runs = TestClient::streaming(runs).with_key(&key);
    let body = json!({"message": "Shout hello", "timeout": 60});
    let response = runs.post(&format!("/agents/{agent}/run"), body).stream().await;
    assert_eq!(response.status(), 200);
    let mut frames = sse_stream::SseStream::new(response.into_body());
    let mut events = Vec::new();
    while let Some(frame) = frames.next().await {
        let frame = frame.unwrap();
        if let (Some(event), Some(data)) = (frame.event, frame.data) {
            events.push((event, serde_json::from_str::<Value>(&data).unwrap()));
        }
    }
    let result = events.iter().find(|(event, _)| event == "tool_result").expect("a tool_result event");
    assert_eq!(result.1, json!({"id": "call_1", "name": "shout", "output": "HELLO"}));
    assert_eq!(events.last().unwrap().1["output"], "It said HELLO.");
    let invocations = server.invocations.lock().unwrap().clone();
    assert_eq!(invocations.len(), 1);
    assert_eq!(invocations[0].payload["arguments"], json!({"text": "hello"}));
    assert_eq!(invocations[0].payload["limits"]["wall_time_ms"], 30000);
}

#[tokio::test]
async fn the_function_checks_scripts_as_the_local_subprocess_does() {
    let server = LambdaServer::tool_sandbox("tool-sandbox").await;
    let lambda = in_function(&server).await;
    let scripts = [
        "def run(city):\n    return city\n",
        "async def run():\n    return 1\n",
        "def run(:\n    pass\n",
        "return 1\ndef run():\n    pass\n",
        "def main():\n    pass\n",
        "import os\nos._exit(3)\ndef run():\n    pass\n",
    ];
    for script in scripts {
        let local = ToolSandbox::default().check_script(tenant(), script).await;
        let remote = lambda.check_script(tenant(), script).await;
        assert_eq!(remote, local, "{script}");
        assert!(remote.is_ok(), "a verdict for {script}: {remote:?}");
    }
    assert_eq!(lambda.check_script(tenant(), scripts[0]).await, Ok(Ok(())));
    let problem = lambda.check_script(tenant(), scripts[2]).await.unwrap().unwrap_err();
    assert_eq!((problem.line, problem.column), (Some(1), Some(9)));
    // The checker runs as a tool: one invocation per check, with the check's limits.
    let invocations = server.invocations.lock().unwrap().clone();
    assert_eq!(invocations.len(), scripts.len() + 2);
    assert_eq!(invocations[0].payload["arguments"], json!({"source": scripts[0]}));
    assert_eq!(invocations[0].payload["script"], agent_runtime::tools::python::SCRIPT_CHECKER);
    assert_eq!(invocations[0].payload["limits"]["allow_network"], false);

    // A blank script is refused without the sandbox; an unreachable one is no verdict.
    let down = ToolSandbox::from_setting(&sdk_config_at(&closed_port_url("")).await, Some("tool-sandbox".into()), None);
    assert_eq!(
        down.check_script(tenant(), " ").await,
        Ok(Err(platform_data::python_script::ScriptProblem::general("the script is empty")))
    );
    assert_eq!(down.check_script(tenant(), scripts[0]).await, Err("the tool sandbox could not be reached".into()));
}

#[test]
fn the_template_declares_the_function_the_runner_invokes() {
    let template = stack::Template::embedded().unwrap();
    let function = template.python_function("ToolSandboxFunction").expect("ToolSandboxFunction");
    assert_eq!(function.handler, "handler.handler");
    assert!(template.function("ToolSandboxFunction").is_none(), "not a cargo binary");
    // Its code holds the harness the local executor embeds: one program for both.
    let folder = integration_tests::lambda_server::repository_root().join(&function.code_uri);
    assert!(folder.join("handler.py").is_file());
    assert_eq!(std::fs::read_to_string(folder.join("harness.py")).unwrap(), HARNESS);
    // The run function names it; locally the name is empty, so runs use the subprocess.
    let runs = template.function("AgentRunsFunction").unwrap();
    let variable = platform_api::settings::TOOL_SANDBOX_FUNCTION;
    assert_eq!(runs.environment[variable], stack::EnvValue::Ref("ToolSandboxFunction".into()));
    assert_eq!(template.resource_variable("ToolSandboxFunction"), variable);
    assert_eq!(template.environment(runs, "local-")[variable], "");
    // The tools function has it compile custom tools' scripts.
    let tools = template.function("ToolsFunction").unwrap();
    assert_eq!(tools.environment[variable], stack::EnvValue::Ref("ToolSandboxFunction".into()));
    // The longest call fits in the function's timeout, with time for its start and cleanup.
    assert!(u64::from(function.timeout_seconds.unwrap()) >= agent_runtime::tools::MAX_TOOL_TIMEOUT.as_secs() + 10);
}

/// The tool-sandbox function with `patch` applied to its handler module (`sandbox`) at import: a
/// wrapper module in a code folder of its own, kept alive beside the server.
async fn patched_sandbox(patch: &str) -> (CodeFolder, LambdaServer) {
    let sandbox_folder = integration_tests::lambda_server::repository_root().join("functions/tool-sandbox");
    let wrapper = format!(
        "import sys\nsys.path.insert(0, {folder:?})\nimport handler as sandbox\n{patch}\nhandler = sandbox.handler\n",
        folder = sandbox_folder.display().to_string()
    );
    let folder = CodeFolder::with_module("wrapper", Some(&wrapper));
    let code = FunctionCode { handler: "wrapper.handler".into(), ..folder.code(Duration::from_secs(60)) };
    let server = LambdaServer::start("tool-sandbox", code).await;
    (folder, server)
}

/// Waits (up to 10 s) for every idle environment of `server` to have exited.
async fn environments_exit(server: &LambdaServer) -> bool {
    for _ in 0..100 {
        if server.environments_alive() == 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test]
async fn each_account_has_environments_of_its_own_and_an_invocation_names_one() {
    let server = LambdaServer::tool_sandbox("tool-sandbox").await;
    let lambda = in_function(&server).await;
    let other: AccountId = "7e6d5c4b-3a29-4180-9f7e-6d5c4b3a2918".parse().unwrap();
    let hello = "def run():\n    return 'hello'\n";
    for account in [tenant(), other, tenant(), other] {
        assert_eq!(lambda.run(account, hello, &Map::new(), None, limits(10)).await, Ok(json!("hello")));
    }
    // Two accounts, two environments on two machines, each warm for its own account's next call.
    assert_eq!((server.environments_started(), server.machines()), (2, 2));
    let tenants: Vec<String> = server
        .invocations
        .lock()
        .unwrap()
        .iter()
        .map(|invocation| invocation.headers["x-amz-tenant-id"].to_str().unwrap().to_owned())
        .collect();
    assert_eq!(tenants, [tenant().to_string(), other.to_string(), tenant().to_string(), other.to_string()]);
    // As Lambda does for a function in tenant isolation mode: no tenant, no invocation.
    let invoker = aws_env::lambda::LambdaInvoker::new(&server.sdk_config().await);
    let refused = invoker.invoke("tool-sandbox", b"{}".to_vec()).await.unwrap_err();
    assert!(
        matches!(&refused, aws_env::lambda::InvokeError::Refused { code, .. } if code == "InvalidParameterValueException"),
        "{refused}"
    );
}

#[tokio::test]
async fn what_a_call_leaves_in_tmp_is_removed_as_the_sandboxs_own_user() {
    let server = LambdaServer::tool_sandbox("tool-sandbox").await;
    let lambda = in_function(&server).await;
    // As the sandbox's user (non-root, as in Lambda): directories it may not enter or list, at
    // every depth, in its own call directory and in /tmp beside it.
    let leave = "import os\n\
        def run():\n\
        \x20   for base in ('.', '..'):\n\
        \x20       deep = os.path.join(base, 'trap', 'a', 'b')\n\
        \x20       os.makedirs(deep)\n\
        \x20       open(os.path.join(deep, 'secret.txt'), 'w').write('tenant data')\n\
        \x20       os.symlink('/etc/passwd', os.path.join(deep, 'link'))\n\
        \x20       for level in (deep, os.path.dirname(deep)):\n\
        \x20           os.chmod(level, 0)\n\
        \x20       os.makedirs(os.path.join(base, 'drop', 'inner'))\n\
        \x20       os.chmod(os.path.join(base, 'drop'), 0o300)\n\
        \x20   os.chmod(os.path.join('..', 'trap'), 0o100)\n\
        \x20   return sorted(os.listdir('..'))\n";
    let seen = lambda.run(tenant(), leave, &Map::new(), None, limits(10)).await.unwrap();
    assert!(seen.as_array().unwrap().contains(&json!("trap")), "{seen}");
    let tmp = server.tmp_dirs().pop().expect("the environment's machine");
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().map(|entry| entry.unwrap().file_name()).collect();
    assert!(left.is_empty(), "left in /tmp: {left:?}");
    // The environment was clean, so it stays: the next call runs in it and finds nothing.
    let look = "import os\ndef run():\n    return os.listdir('..')\n";
    let seen = lambda.run(tenant(), look, &Map::new(), None, limits(10)).await.unwrap();
    assert_eq!(seen.as_array().unwrap().len(), 1, "only the call's own directory: {seen}");
    assert_eq!(server.environments_started(), 1);
    // /tmp itself, made unwritable by a tool, is given back to its owner.
    let lock = "import os\ndef run():\n    os.chmod('..', 0o500)\n    return 'locked'\n";
    assert_eq!(lambda.run(tenant(), lock, &Map::new(), None, limits(10)).await, Ok(json!("locked")));
    assert_eq!(lambda.run(tenant(), look, &Map::new(), None, limits(10)).await.unwrap().as_array().unwrap().len(), 1);
    assert_eq!(server.environments_started(), 1);
}

#[tokio::test]
async fn an_environment_where_anything_stays_or_no_call_directory_can_be_made_answers_then_exits() {
    let hello = "def run():\n    return 'hello'\n";
    // Something in /tmp that the cleanup cannot remove (as if it could not).
    let (_keep, server) = patched_sandbox("sandbox.remove_tree = lambda path: None").await;
    let lambda = in_function(&server).await;
    assert_eq!(lambda.run(tenant(), hello, &Map::new(), None, limits(10)).await, Ok(json!("hello")));
    assert!(environments_exit(&server).await, "the environment with files left in /tmp did not exit");
    // No directory for the call (a full /tmp): the call's answer says so, and the environment goes.
    let full = "import errno, tempfile\ndef full(**kwargs):\n    raise OSError(errno.ENOSPC, 'No space left on device')\nsandbox.tempfile.mkdtemp = full";
    let (_keep, server) = patched_sandbox(full).await;
    let lambda = in_function(&server).await;
    let answer = lambda.run(tenant(), hello, &Map::new(), None, limits(10)).await;
    assert_eq!(answer, Err("the sandbox could not start ([Errno 28] No space left on device)".into()));
    assert!(environments_exit(&server).await, "the environment that could not make a call directory did not exit");
}

/// Whether process `pid` runs (not gone, nor a zombie: a killed orphan waits for whoever
/// adopted it to reap it, which in a container may be never).
fn running(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')))
}

/// The ids of the handler's threads other than its main one (the harness's parent's).
const HANDLER_THREADS: &str = "import os\n\
def threads():\n\
\x20   handler = os.getppid()\n\
\x20   return [int(tid) for tid in os.listdir(f'/proc/{handler}/task') if int(tid) != handler]\n";

#[tokio::test]
async fn a_tool_cannot_signal_its_handler_and_a_handler_stopped_or_killed_is_noticed() {
    let server = LambdaServer::tool_sandbox("tool-sandbox").await;
    let lambda = in_function(&server).await;
    // The handler's pid, its process group and every process (-1) are refused by the kernel.
    let signal_it = "import os, signal\n\
        def run():\n\
        \x20   refused = []\n\
        \x20   for target, sig in ((os.getppid(), signal.SIGKILL), (os.getppid(), signal.SIGSTOP), (-os.getpgid(os.getppid()), signal.SIGKILL), (-1, signal.SIGKILL)):\n\
        \x20       try:\n\
        \x20           os.kill(target, sig)\n\
        \x20       except PermissionError:\n\
        \x20           refused.append(target)\n\
        \x20   return len(refused)\n";
    assert_eq!(lambda.run(tenant(), signal_it, &Map::new(), None, limits(10)).await, Ok(json!(4)));
    assert_eq!(server.environments_started(), 1);

    // Stopped through one of its threads' ids (which kill() still reaches), then continued: the
    // handler notices the time its call took, answers, and the environment goes.
    let stop_it = format!(
        "{HANDLER_THREADS}import signal, time\n\
        def run():\n\
        \x20   tid = threads()[0]\n\
        \x20   if os.fork() == 0:\n\
        \x20       os.setsid()\n\
        \x20       time.sleep(13)\n\
        \x20       os.kill(tid, signal.SIGCONT)\n\
        \x20       os._exit(0)\n\
        \x20   os.kill(tid, signal.SIGSTOP)\n\
        \x20   return 'stopped'\n"
    );
    let stop_it: &'static str = stop_it.leak();
    let _ = lambda.run(tenant(), stop_it, &Map::new(), None, limits(1)).await;
    assert!(environments_exit(&server).await, "the environment whose handler was stopped did not exit");

    // Killed through a thread id, leaving a process behind: Lambda resets the environment in
    // place, and the new runtime kills what the last call left before it serves anything.
    let marker = std::env::temp_dir().join(format!("tool-pid-{}", Uuid::new_v4()));
    std::fs::write(&marker, "").unwrap();
    std::fs::set_permissions(&marker, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let kill_it = format!(
        "{HANDLER_THREADS}import signal, time\n\
        def run(path):\n\
        \x20   if os.fork() == 0:\n\
        \x20       os.setsid()\n\
        \x20       open(path, 'w').write(str(os.getpid()))\n\
        \x20       time.sleep(120)\n\
        \x20       os._exit(0)\n\
        \x20   time.sleep(0.5)\n\
        \x20   os.kill(threads()[0], signal.SIGKILL)\n\
        \x20   time.sleep(5)\n"
    );
    let kill_it: &'static str = kill_it.leak();
    let arguments = object(json!({"path": marker.display().to_string()}));
    let killed = lambda.run(tenant(), kill_it, &arguments, None, limits(10)).await.unwrap_err();
    assert!(killed.starts_with("the tool sandbox failed (Runtime.ExitError"), "{killed}");
    let survivor = std::fs::read_to_string(&marker).unwrap();
    let _ = std::fs::remove_file(&marker);
    assert!(!survivor.is_empty() && running(&survivor), "the tool left {survivor:?}");
    let hello = "def run():\n    return 'hello'\n";
    assert_eq!(lambda.run(tenant(), hello, &Map::new(), None, limits(10)).await, Ok(json!("hello")));
    assert!(!running(&survivor), "process {survivor} outlived the reset");
}

#[tokio::test]
async fn the_tool_never_runs_unless_the_kernel_proves_the_sandbox_closed() {
    let marker = std::env::temp_dir().join(format!("tool-ran-{}", Uuid::new_v4()));
    let ran = "import os\ndef run(path):\n    open(path, 'w').write('ran')\n    return 'ran'\n";
    let arguments = object(json!({"path": marker.display().to_string()}));
    // Each a harness whose filter cannot be made or is wrong: the call answers why.
    let cases = [
        ("ARCHITECTURES.get(os.uname().machine)", "None", "no seccomp filter for the"),
        ("libc.prctl(22, 2, ", "libc.prctl(22, 99, ", "the kernel refused the seccomp filter"),
        ("(equal, 0, 3, calls[\"socket\"])", "(equal, 0, 3, 0xFFFF)", "an Internet socket could still be opened"),
        ("if libc.prctl(38, 1, 0, 0, 0) != 0", "if libc.prctl(38, 99, 0, 0, 0) != 0", "no_new_privs was refused"),
    ];
    for (original, broken, reason) in cases {
        let patch = format!(
            "assert {original:?} in sandbox.HARNESS\nsandbox.HARNESS = sandbox.HARNESS.replace({original:?}, {broken:?})"
        );
        let (_keep, server) = patched_sandbox(&patch).await;
        let lambda = in_function(&server).await;
        let answer = lambda.run(tenant(), ran, &arguments, None, limits(10)).await.unwrap_err();
        assert!(answer.starts_with("the sandbox could not be closed (") && answer.contains(reason), "{answer}");
        assert!(!marker.exists(), "the tool ran with {broken}");
    }
}

#[tokio::test]
async fn one_file_is_bounded_and_a_write_past_it_fails() {
    let server = LambdaServer::tool_sandbox("tool-sandbox").await;
    let lambda = in_function(&server).await;
    // Sparse: the offset is past the limit, the disk is not used.
    let big =
        "def run():\n    with open('big', 'wb') as f:\n        f.seek(300 * 1024 * 1024)\n        f.write(b'x')\n";
    let error = lambda.run(tenant(), big, &Map::new(), None, limits(10)).await.unwrap_err();
    assert_eq!(error, "OSError: [Errno 27] File too large");
    let small = "def run():\n    open('small', 'wb').write(b'x' * 1024)\n    return 'written'\n";
    assert_eq!(lambda.run(tenant(), small, &Map::new(), None, limits(10)).await, Ok(json!("written")));
}

#[tokio::test]
async fn each_accounts_sandbox_calls_are_capped_until_their_invocations_return() {
    let stack = TestStack::new().await;
    let server = LambdaServer::tool_sandbox("tool-sandbox").await;
    let leases =
        storage::quota::Leases::new(stack.dynamodb.clone(), stack.setting(platform_api::settings::QUOTAS_TABLE));
    let capped = in_function(&server).await.with_call_slots(leases, 1).with_slot_wait(Duration::from_millis(500));
    let account: AccountId = AccountId::new_v4();
    let other = AccountId::new_v4();
    let slow = "import time\ndef run():\n    time.sleep(4)\n    return 'slow'\n";
    let hello = "def run():\n    return 'hello'\n";
    // The caller stops waiting (a run's tool timeout, a cancel): the invocation goes on, and so
    // does its place.
    let none = Map::new();
    let gave_up = tokio::time::timeout(Duration::from_secs(1), capped.run(account, slow, &none, None, limits(10)));
    assert!(gave_up.await.is_err(), "the slow call is still running");
    let full = capped.run(account, hello, &Map::new(), None, limits(10)).await;
    assert_eq!(
        full,
        Err("the account's sandbox_calls quota (1) is full: that many tool calls are running; try again when one has ended".into())
    );
    // Another account is not held up.
    assert_eq!(capped.run(other, hello, &Map::new(), None, limits(10)).await, Ok(json!("hello")));
    // Once the invocation has returned, the place is free again.
    let mut answered = Err(String::new());
    for _ in 0..40 {
        answered = capped.run(account, hello, &Map::new(), None, limits(10)).await;
        if answered.is_ok() {
            break;
        }
    }
    assert_eq!(answered, Ok(json!("hello")));
}

#[test]
fn the_egress_proxy_refuses_nat64_and_translated_forms_of_private_addresses() {
    let folder = integration_tests::lambda_server::repository_root().join("functions/tool-sandbox");
    let program = format!(
        "import json, sys\nsys.path.insert(0, {folder:?})\nimport handler\n\
        policy = handler.OutboundPolicy('', '127.0.0.1:9001')\n\
        print(json.dumps({{address: policy.refusal('host', address, 443) is None for address in sys.argv[1:]}}))\n",
        folder = folder.display().to_string()
    );
    let cases = [
        ("64:ff9b::a9fe:a9fe", false), // NAT64 of the metadata address
        ("64:ff9b::7f00:1", false),
        ("64:ff9b::808:808", true),      // NAT64 of a public address
        ("64:ff9b:1::a9fe:a9fe", false), // local NAT64: never
        ("64:ff9b:1:808:800:8::", false),
        ("::ffff:0:a9fe:a9fe", false), // IPv4-translated: never
        ("::ffff:0:808:808", false),
        ("::ffff:169.254.169.254", false),
        ("2002:a9fe:a9fe::", false),
        ("8.8.8.8", true),
        ("2606:4700::1111", true),
    ];
    let python = std::env::var("TOOL_SANDBOX_PYTHON").unwrap_or_else(|_| "python3".into());
    let output = std::process::Command::new(python)
        .args(["-B", "-c", &program])
        .args(cases.iter().map(|(address, _)| *address))
        .output()
        .expect("python3 runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let allowed: Value = serde_json::from_slice(&output.stdout).unwrap();
    for (address, expected) in cases {
        assert_eq!(allowed[address], expected, "{address}");
    }
}

#[tokio::test]
async fn secret_arguments_are_write_only_and_reach_only_their_tool() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![
        tool_calls_reply(&[("call_1", "whoami", json!({"text": "hi"}))]),
        text_reply("done"),
        tool_calls_reply(&[("call_2", "whoami", json!({"text": "again"}))]),
        text_reply("done again"),
    ])
    .await;
    let key = stack.api_key(Uuid::new_v4()).await;
    let lm = stack.language_model(&clock, &key, "local", &model.base_url()).await;
    let tools = stack.client::<ToolsService>(&clock).with_key(&key);
    let script =
        "def run(text, region, api_key):\n    return {'text': text, 'region': region, 'key_tail': api_key[-4:]}\n";
    let tool = tools
        .post(
            "/tools",
            json!({"name": "whoami", "type": "custom", "script": script,
            "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}}),
        )
        .created()
        .await;
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let secret = "sk-live-very-secret-9f3c";
    let agent = agents
        .post(
            "/agents/",
            json!({"type": "config", "name": "Secretive", "framework": "chainlib", "language_model_id": lm,
            "tools": [tool], "tool_configs": {tool.as_str(): {"arguments": {"region": "eu"},
            "secret_arguments": {"api_key": secret}}}}),
        )
        .created()
        .await;
    let tool_key = tool.clone();
    // Never shown again: the record lists the name only.
    let detail = agents.get(&format!("/agents/{agent}")).expect(200).await;
    assert!(!detail.to_string().contains(secret), "{detail}");
    assert_eq!(detail["data"]["tool_configs"][&tool_key]["secret_argument_names"], json!(["api_key"]));
    assert_eq!(detail["data"]["tool_configs"][&tool_key]["arguments"], json!({"region": "eu"}));
    let list = agents.get("/agents/").expect(200).await;
    assert!(!list.to_string().contains(secret));

    // A run's tool gets them beside the model's arguments and the plain ones; the events do not
    // carry them back (the tool returns only their tail).
    let runs = stack.client::<AgentRunsService>(&clock).with_key(&key);
    let run_once = |message: &'static str| {
        let (runs, agent) = (&runs, agent.clone());
        async move {
            let response =
                crate::agent_runs::run(runs, &agent, "application/json", json!({"message": message}).to_string())
                    .stream()
                    .await;
            crate::agent_runs::read_stream(response.into_body()).await
        }
    };
    let events = run_once("who am I").await;
    let result = events.iter().find(|(_, event, _)| event == "tool_result").expect("a tool_result");
    assert_eq!(result.2["output"], json!({"text": "hi", "region": "eu", "key_tail": "9f3c"}));
    // A change that leaves them out keeps them.
    agents.patch(&format!("/agents/{agent}"), json!({"description": "kept"})).expect(200).await;
    let events = run_once("again").await;
    let result = events.iter().find(|(_, event, _)| event == "tool_result").expect("a tool_result");
    assert_eq!(result.2["output"]["key_tail"], "9f3c");
    // `null` removes them.
    let removed = agents
        .patch(
            &format!("/agents/{agent}"),
            json!({"tool_configs": {&tool_key: {"arguments": {"region": "eu"}, "secret_arguments": null}}}),
        )
        .expect(200)
        .await;
    assert!(
        removed["data"]["tool_configs"][&tool_key].get("secret_argument_names").is_none_or(|names| names == &json!([]))
    );

    // Secret arguments are strings.
    let refused = agents
        .post(
            "/agents/",
            json!({"type": "config", "name": "Other", "framework": "chainlib", "language_model_id": lm,
            "tools": [tool], "tool_configs": {&tool_key: {"secret_arguments": {"k": 1}}}}),
        )
        .error(400, "BAD_REQUEST")
        .await;
    assert!(refused.to_string().contains("secret_arguments"), "{refused}");
}

#[tokio::test]
async fn a_tool_starts_at_most_its_process_limit_as_the_sandboxs_own_user() {
    let server = LambdaServer::tool_sandbox("tool-sandbox").await;
    let lambda = in_function(&server).await;
    let fork = "import os, time\n\
        def run():\n\
        \x20   started = 0\n\
        \x20   for _ in range(40):\n\
        \x20       try:\n\
        \x20           pid = os.fork()\n\
        \x20       except OSError:\n\
        \x20           break\n\
        \x20       if pid == 0:\n\
        \x20           time.sleep(30)\n\
        \x20           os._exit(0)\n\
        \x20       started += 1\n\
        \x20   return started\n";
    let few = SandboxLimits { max_processes: 5, ..limits(10) };
    let started = lambda.run(tenant(), fork, &Map::new(), None, few).await.unwrap();
    // RLIMIT_NPROC: the user's tasks at the harness's start plus `max_processes`, so exactly 5
    // more (as root the kernel would not apply it and all 40 would start).
    assert_eq!(started, json!(5));
}
