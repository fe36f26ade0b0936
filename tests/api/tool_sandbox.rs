//! Custom Python tools in AWS: the runner invokes the tool-sandbox function. Its real handler
//! (`functions/tool-sandbox/handler.py`) runs behind a local stand-in of Lambda's Invoke API
//! (`integration_tests::lambda_server`), reached by the AWS SDK's Lambda client.

use agent_runtime::runner::Runner;
use agent_runtime::tools::python::{HARNESS, SandboxLimits, ToolSandbox};
use futures_util::StreamExt;
use http::Method;
use integration_tests::lambda_server::{FUNCTION_SECRET_ACCESS_KEY, FunctionCode, LambdaServer, sdk_config_at};
use integration_tests::local_server::closed_port_url;
use integration_tests::model_server::{ModelServer, text_reply, tool_calls_reply};
use integration_tests::{TestClock, TestStack, create_record, request, send_streaming};
use platform_data::agents::AgentStore;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use storage::rate_limit::RateLimit;
use uuid::Uuid;

fn limits(seconds: u64) -> SandboxLimits {
    SandboxLimits { wall_time: Duration::from_secs(seconds), ..SandboxLimits::default() }
}

fn object(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

/// The sandbox the runner builds from `TOOL_SANDBOX_FUNCTION` = the server's function.
async fn in_function(server: &LambdaServer) -> ToolSandbox {
    ToolSandbox::from_setting(&server.sdk_config().await, Some(server.function.clone()))
}

/// A function code folder holding `handler.py` with `source`, removed on drop.
struct CodeFolder(PathBuf);

impl CodeFolder {
    fn with_handler(source: Option<&str>) -> Self {
        let folder = std::env::temp_dir().join(format!("lambda-code-{}", Uuid::new_v4()));
        std::fs::create_dir(&folder).unwrap();
        if let Some(source) = source {
            std::fs::write(folder.join("handler.py"), source).unwrap();
        }
        Self(folder)
    }

    fn code(&self, timeout: Duration) -> FunctionCode {
        FunctionCode { folder: self.0.clone(), handler: "handler.handler".into(), timeout }
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
        Case::new("import sys\ndef run():\n    sys.__stdout__.write('x' * 3000000)\n")
            .gives(Err(format!("the tool wrote more than {} bytes", 1024 * 1024))),
        Case::new("import os\ndef run():\n    os._exit(3)\n")
            .gives(Err("the tool stopped without an answer (exit status: 3)".into())),
        Case::new("this is not python"),
    ];
    for case in &cases {
        let limits = case.limits.unwrap_or(ten);
        let local = ToolSandbox::Subprocess.run(case.script, &case.arguments, case.shared.clone(), limits).await;
        let remote = lambda.run(case.script, &case.arguments, case.shared.clone(), limits).await;
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
            "max_output_bytes": 1048576, "allow_network": false})
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
    let seen = lambda.run(script, &Map::new(), None, limits(10)).await.unwrap();
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
        lambda.run(connect, &arguments, None, closed).await,
        Err("PermissionError: network access is not allowed for this tool".into())
    );
    assert_eq!(
        lambda.run(around, &arguments, None, closed).await,
        Err("PermissionError: [Errno 13] Permission denied".into())
    );
    let open = SandboxLimits { allow_network: true, ..closed };
    assert_eq!(lambda.run(connect, &arguments, None, open).await, Ok(json!("connected")));
    assert_eq!(lambda.run(around, &arguments, None, open).await, Ok(json!("connected")));
    assert_eq!(server.invocations.lock().unwrap()[2].payload["limits"]["allow_network"], true);
    accepting.abort();
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
    let pid = lambda.run(leave, &Map::new(), None, limits(10)).await.unwrap();
    let pid = pid.as_u64().unwrap();
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "process {pid} outlived its call");
    assert!(!server.scratch().join("left-behind.txt").exists());
    let look = "import os\ndef run():\n    return os.path.exists('../left-behind.txt')\n";
    assert_eq!(lambda.run(look, &Map::new(), None, limits(10)).await, Ok(json!(false)));
    assert_eq!(std::fs::read_dir(server.scratch()).unwrap().count(), 0);
}

#[tokio::test]
async fn failed_invocations_are_error_results() {
    let script = "def run():\n    return 1\n";
    let call = |sandbox: ToolSandbox| async move { sandbox.run(script, &Map::new(), None, limits(10)).await };

    // Nothing listens at the endpoint (no retry: a tool runs at most once per call).
    let down = sdk_config_at(&closed_port_url("")).await;
    let result = call(ToolSandbox::from_setting(&down, Some("tool-sandbox".into()))).await;
    assert_eq!(result, Err("the tool sandbox could not be reached".into()));

    // Lambda refuses: no such function.
    let server = LambdaServer::tool_sandbox("tool-sandbox").await;
    let other = ToolSandbox::from_setting(&server.sdk_config().await, Some("another-function".into()));
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
    let lm = create_record(
        &stack.language_models_service(&clock),
        "/language-models",
        &key,
        json!({"name": "local", "provider": "openai_compatible", "model_name": "m", "base_url": model.base_url()}),
    )
    .await;
    let tool = create_record(
        &stack.tools_service(&clock),
        "/tools",
        &key,
        json!({"name": "shout", "type": "custom", "script": "def run(text):\n    return text.upper()\n",
            "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}}),
    )
    .await;
    let agent = create_record(
        &stack.agents_service(&clock),
        "/agents/",
        &key,
        json!({"type": "config", "name": "Shouter", "framework": "chainlib", "language_model_id": lm,
            "tools": [tool]}),
    )
    .await;

    let server = LambdaServer::tool_sandbox("tool-sandbox").await;
    let mut sources = Arc::into_inner(stack.run_sources()).expect("a fresh Arc");
    sources.tool_sandbox = in_function(&server).await;
    let runner = Runner::new(Arc::new(sources), stack.runs(), clock.clock());
    let runs = platform_api::AgentRunsService::new(
        stack.gate(&clock, RateLimit::DEFAULT),
        AgentStore::new(stack.dynamodb.clone(), stack.setting(platform_api::settings::AGENTS_TABLE)),
        runner,
    );
    let body = json!({"message": "Shout hello", "timeout": 60}).to_string();
    let run = request(Method::POST, &format!("/agents/{agent}/run"))
        .header("x-api-key", &key)
        .header("content-type", "application/json")
        .body(http_api::Body::Binary(body.into_bytes()))
        .unwrap();
    let response = send_streaming(&runs, run).await;
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
        let local = ToolSandbox::Subprocess.check_script(script).await;
        let remote = lambda.check_script(script).await;
        assert_eq!(remote, local, "{script}");
        assert!(remote.is_ok(), "a verdict for {script}: {remote:?}");
    }
    assert_eq!(lambda.check_script(scripts[0]).await, Ok(Ok(())));
    let problem = lambda.check_script(scripts[2]).await.unwrap().unwrap_err();
    assert_eq!((problem.line, problem.column), (Some(1), Some(9)));
    // The checker runs as a tool: one invocation per check, with the check's limits.
    let invocations = server.invocations.lock().unwrap().clone();
    assert_eq!(invocations.len(), scripts.len() + 2);
    assert_eq!(invocations[0].payload["arguments"], json!({"source": scripts[0]}));
    assert_eq!(invocations[0].payload["script"], agent_runtime::tools::python::SCRIPT_CHECKER);
    assert_eq!(invocations[0].payload["limits"]["allow_network"], false);

    // A blank script is refused without the sandbox; an unreachable one is no verdict.
    let down = ToolSandbox::from_setting(&sdk_config_at(&closed_port_url("")).await, Some("tool-sandbox".into()));
    assert_eq!(
        down.check_script(" ").await,
        Ok(Err(platform_data::python_script::ScriptProblem::general("the script is empty")))
    );
    assert_eq!(down.check_script(scripts[0]).await, Err("the tool sandbox could not be reached".into()));
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
