//! The template as AWS will read it: SAM's own transform (`aws-sam-translator`, run offline by
//! `make template-check` into `target/tmp/template.transformed.json`) serves every route of both
//! spec documents on its service's REST API, from the function the code expects, streamed where
//! the answer streams; the resource trees keep REST's rules; no function has a public URL.
//!
//! It reads the transform's output, so `make template-check` runs it after the transform
//! (`cargo test --workspace` lists it as ignored).

use serde_json::Value;
use stack::Route;
use stack::rest::resource_tree_problems;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Where `make template-check` writes the transformed template.
fn transformed_template() -> Value {
    let path = std::env::var_os("TRANSFORMED_TEMPLATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/tmp/template.transformed.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("{}: {err} (make template-check writes it)", path.display()));
    serde_json::from_str(&text).expect("the transform's output is JSON")
}

/// Every route of the two spec documents and the platform's own, with the REST API that must
/// serve it (`Api`: `{base_url}`, `RunnerApi`: `{runner_url}`), the binary that must answer
/// and whether its answer streams. Paths as the spec writes them (trailing slashes included).
const SPEC_ROUTES: &[(&str, &str, &str, &str, bool)] = &[
    // Meeting data API.
    ("Api", "POST", "/api/auth/token/", "auth", false),
    ("Api", "POST", "/api/auth/revoke-token/", "auth", false),
    ("Api", "GET", "/api/v1/external/meeting/", "meetings", false),
    ("Api", "GET", "/api/v1/external/meeting/{id}/", "meetings", false),
    ("Api", "GET", "/api/v1/external/meeting/{id}/transcript/", "meetings", false),
    ("Api", "GET", "/api/v1/external/meeting/{id}/summary/", "meetings", false),
    ("Api", "GET", "/api/v1/external/meeting/{id}/participants/", "meetings", false),
    ("Api", "GET", "/api/v1/external/meeting/{id}/recording/", "meetings", false),
    ("Api", "GET", "/api/v1/external/meeting/{id}/recording/file.{format}", "meetings", false),
    // External applications' webhooks (issue 51).
    ("Api", "GET", "/api/v1/external/webhooks/endpoints/", "external-webhooks", false),
    ("Api", "POST", "/api/v1/external/webhooks/endpoints/", "external-webhooks", false),
    ("Api", "GET", "/api/v1/external/webhooks/endpoints/{endpoint_id}/", "external-webhooks", false),
    ("Api", "PUT", "/api/v1/external/webhooks/endpoints/{endpoint_id}/", "external-webhooks", false),
    ("Api", "PATCH", "/api/v1/external/webhooks/endpoints/{endpoint_id}/", "external-webhooks", false),
    ("Api", "DELETE", "/api/v1/external/webhooks/endpoints/{endpoint_id}/", "external-webhooks", false),
    ("Api", "POST", "/api/v1/external/webhooks/endpoints/{endpoint_id}/rotate/", "external-webhooks", false),
    ("Api", "POST", "/api/v1/external/webhooks/endpoints/{endpoint_id}/test/", "external-webhooks", false),
    ("Api", "GET", "/api/v1/external/webhooks/endpoints/{endpoint_id}/deliveries/", "external-webhooks", false),
    ("Api", "POST", "/api/v1/external/webhooks/deliveries/{delivery_id}/replay/", "external-webhooks", false),
    // Agents.
    ("Api", "GET", "/agents/", "agents", false),
    ("Api", "POST", "/agents/", "agents", false),
    ("Api", "GET", "/agents/{agent_id}", "agents", false),
    ("Api", "PUT", "/agents/{agent_id}", "agents", false),
    ("Api", "PATCH", "/agents/{agent_id}", "agents", false),
    ("Api", "DELETE", "/agents/{agent_id}", "agents", false),
    ("Api", "POST", "/agents/{agent_id}/restore", "agents", false),
    ("Api", "POST", "/agents/{agent_id}/run", "agent-runs", true),
    ("Api", "GET", "/agents/{agent_id}/runs", "agents", false),
    ("Api", "GET", "/agents/{agent_id}/runs/{run_id}", "agents", false),
    ("Api", "GET", "/agents/{agent_id}/runs/{run_id}/stream", "agent-runs", true),
    ("Api", "POST", "/agents/flowtool/sync", "agents", false),
    // Schedules.
    ("Api", "POST", "/agents/{agent_id}/schedule", "schedules", false),
    ("Api", "GET", "/agents/schedules", "schedules", false),
    ("Api", "GET", "/agents/schedules/", "schedules", false),
    ("Api", "GET", "/agents/schedules/{schedule_id}", "schedules", false),
    ("Api", "PUT", "/agents/schedules/{schedule_id}", "schedules", false),
    ("Api", "DELETE", "/agents/schedules/{schedule_id}", "schedules", false),
    ("Api", "POST", "/agents/schedules/{schedule_id}/trigger", "schedules", false),
    // Tools.
    ("Api", "GET", "/tools", "tools", false),
    ("Api", "POST", "/tools", "tools", false),
    ("Api", "GET", "/tools/{id}", "tools", false),
    ("Api", "PUT", "/tools/{id}", "tools", false),
    ("Api", "DELETE", "/tools/{id}", "tools", false),
    ("Api", "POST", "/tools/upload", "tools", false),
    ("Api", "PUT", "/tools/{tool_id}/upload", "tools", false),
    ("Api", "GET", "/tools/{tool_id}/script", "tools", false),
    ("Api", "POST", "/tools/{id}/restore", "tools", false),
    // MCPs.
    ("Api", "GET", "/mcps", "mcps", false),
    ("Api", "POST", "/mcps", "mcps", false),
    ("Api", "GET", "/mcps/{mcp_id}", "mcps", false),
    ("Api", "PUT", "/mcps/{mcp_id}", "mcps", false),
    ("Api", "DELETE", "/mcps/{mcp_id}", "mcps", false),
    ("Api", "POST", "/mcps/{mcp_id}/restore", "mcps", false),
    ("Api", "GET", "/mcps/{mcp_id}/tools", "mcps", false),
    ("Api", "POST", "/mcps/connect", "mcps", false),
    ("Api", "POST", "/mcps/connect/tools", "mcps", false),
    // Language models.
    ("Api", "GET", "/language-models", "language-models", false),
    ("Api", "POST", "/language-models", "language-models", false),
    ("Api", "GET", "/language-models/{lm_id}", "language-models", false),
    ("Api", "PUT", "/language-models/{lm_id}", "language-models", false),
    ("Api", "DELETE", "/language-models/{lm_id}", "language-models", false),
    // Spend (docs/spend.md).
    ("Api", "GET", "/usage", "spend", false),
    ("Api", "GET", "/budget", "spend", false),
    ("Api", "PUT", "/budget", "spend", false),
    // Health (backend).
    ("Api", "GET", "/health-check", "health", false),
    ("Api", "GET", "/health-check/auth-test", "health", false),
    ("Api", "GET", "/health-check/database", "health", false),
    // Webhooks (the platform's own, docs/webhooks.md).
    ("Api", "GET", "/webhooks/endpoints", "webhooks", false),
    ("Api", "POST", "/webhooks/endpoints", "webhooks", false),
    ("Api", "GET", "/webhooks/endpoints/{endpoint_id}", "webhooks", false),
    ("Api", "PUT", "/webhooks/endpoints/{endpoint_id}", "webhooks", false),
    ("Api", "DELETE", "/webhooks/endpoints/{endpoint_id}", "webhooks", false),
    ("Api", "POST", "/webhooks/endpoints/{endpoint_id}/rotate", "webhooks", false),
    ("Api", "POST", "/webhooks/endpoints/{endpoint_id}/test", "webhooks", false),
    ("Api", "GET", "/webhooks/endpoints/{endpoint_id}/deliveries", "webhooks", false),
    ("Api", "POST", "/webhooks/endpoints/{endpoint_id}/replay-failed", "webhooks", false),
    ("Api", "GET", "/webhooks/events", "webhooks", false),
    ("Api", "GET", "/webhooks/events/{event_id}", "webhooks", false),
    ("Api", "POST", "/webhooks/deliveries/{delivery_id}/replay", "webhooks", false),
    // Runner: every answer of its function streams.
    ("RunnerApi", "POST", "/execute/a2a/stream/agent", "runner", true),
    ("RunnerApi", "POST", "/execute/a2a/stream/celery/agent", "runner", true),
    ("RunnerApi", "GET", "/execute/a2a/agents/list", "runner", true),
    ("RunnerApi", "GET", "/execute/a2a/agents/health", "runner", true),
    ("RunnerApi", "POST", "/tools/validation", "runner", true),
    ("RunnerApi", "GET", "/monitoring/tasks/{task_id}", "runner", true),
    ("RunnerApi", "DELETE", "/monitoring/tasks/{task_id}", "runner", true),
    ("RunnerApi", "GET", "/monitoring/tasks/{task_id}/stream", "runner", true),
    ("RunnerApi", "GET", "/monitoring/agent/{agent_id}/executions", "runner", true),
    ("RunnerApi", "GET", "/monitoring/executions/recent", "runner", true),
    ("RunnerApi", "GET", "/health-check", "runner", true),
    ("RunnerApi", "GET", "/health-check/detailed", "runner", true),
    // The OpenAPI documents and reference pages (docs/openapi.md).
    ("Api", "GET", "/api/v1/external/openapi.json", "docs", false),
    ("Api", "GET", "/api/v1/external/docs", "docs", false),
    ("Api", "GET", "/openapi.json", "docs", false),
    ("Api", "GET", "/docs", "docs", false),
    ("RunnerApi", "GET", "/openapi.json", "runner-docs", false),
    ("RunnerApi", "GET", "/docs", "runner-docs", false),
];

/// One method of a transformed REST API: its route and the function its integration invokes.
struct Method {
    route: Route,
    function: String,
    /// The integration's URI names `response-streaming-invocations`.
    streaming_uri: bool,
    timeout_ms: Option<u64>,
}

/// The methods of the `AWS::ApiGateway::RestApi` `api` of the transformed template, from its
/// OpenAPI body (SAM writes every `Api` event there).
fn methods(template: &Value, api: &str) -> Vec<Method> {
    let resource = &template["Resources"][api];
    assert_eq!(resource["Type"], "AWS::ApiGateway::RestApi", "{api}");
    let paths = resource["Properties"]["Body"]["paths"].as_object().expect("an OpenAPI body with paths");
    let mut methods = Vec::new();
    for (path, operations) in paths {
        for (method, operation) in operations.as_object().into_iter().flatten() {
            let method = match method.as_str() {
                "x-amazon-apigateway-any-method" => "ANY".to_owned(),
                other => other.to_ascii_uppercase(),
            };
            let integration = &operation["x-amazon-apigateway-integration"];
            let uri = integration["uri"]["Fn::Sub"].as_str().unwrap_or_default();
            // `…/functions/${AgentRunsFunction.Arn}/invocations`.
            let function = uri.split(".Arn}").next().and_then(|head| head.rsplit("${").next()).unwrap_or_default();
            assert_eq!(integration["type"], "aws_proxy", "{method} {path}: a Lambda proxy integration");
            methods.push(Method {
                route: Route {
                    api: api.to_owned(),
                    method,
                    path: path.clone(),
                    streamed: integration["responseTransferMode"] == "STREAM",
                },
                function: function.to_owned(),
                streaming_uri: uri.ends_with("/response-streaming-invocations"),
                timeout_ms: integration["timeoutInMillis"].as_u64(),
            });
        }
    }
    methods
}

/// The binary of each function of the transformed template (`Metadata.BuildProperties.Binary`).
fn binaries(template: &Value) -> BTreeMap<String, String> {
    let resources = template["Resources"].as_object().expect("Resources");
    resources
        .iter()
        .filter(|(_, resource)| resource["Type"] == "AWS::Lambda::Function")
        .filter_map(|(id, resource)| {
            resource["Metadata"]["BuildProperties"]["Binary"].as_str().map(|binary| (id.clone(), binary.to_owned()))
        })
        .collect()
}

#[test]
#[ignore = "reads the transform's output: make template-check runs it"]
fn every_spec_route_resolves_on_its_api_to_the_expected_function_streamed_where_it_streams() {
    let template = transformed_template();
    let binaries = binaries(&template);
    let apis: BTreeMap<&str, Vec<Method>> =
        ["Api", "RunnerApi"].into_iter().map(|api| (api, methods(&template, api))).collect();
    let mut problems = Vec::new();
    for (api, method, spec_path, binary, streamed) in SPEC_ROUTES {
        let path = integration_tests::concrete_path(spec_path);
        let matching = apis[api].iter().filter(|candidate| candidate.route.matches(method, &path));
        let Some(found) = matching.max_by_key(|candidate| candidate.route.specificity()) else {
            problems.push(format!("{method} {spec_path}: no route on {api}"));
            continue;
        };
        let serving = binaries.get(&found.function).map(String::as_str).unwrap_or("?");
        if serving != *binary {
            problems.push(format!("{method} {spec_path}: served by {serving} ({}), not {binary}", found.function));
        }
        if found.route.streamed != *streamed || found.streaming_uri != *streamed {
            problems.push(format!("{method} {spec_path}: streamed {}, expected {streamed}", found.route.streamed));
        }
        if *streamed && found.timeout_ms != Some(900_000) {
            problems.push(format!("{method} {spec_path}: a stream's integration timeout is 15 minutes"));
        }
    }
    assert_eq!(problems, Vec::<String>::new());
}

#[test]
#[ignore = "reads the transform's output: make template-check runs it"]
fn the_rest_apis_keep_their_resource_tree_rules_and_stream_whole_functions() {
    let template = transformed_template();
    for api in ["Api", "RunnerApi"] {
        let methods = methods(&template, api);
        // A REST resource has no trailing slash: SAM keeps the template's path as written.
        let routes: Vec<&Route> = methods.iter().map(|method| &method.route).collect();
        assert_eq!(resource_tree_problems(routes), Vec::<String>::new(), "{api}");
        // A function answers streamed or whole on every route: its runtime mode is one.
        let mut modes: BTreeMap<&str, bool> = BTreeMap::new();
        for method in &methods {
            let mode = modes.entry(&method.function).or_insert(method.route.streamed);
            assert_eq!(
                *mode, method.route.streamed,
                "{}: {} {}",
                method.function, method.route.method, method.route.path
            );
        }
    }
}

#[test]
#[ignore = "reads the transform's output: make template-check runs it"]
fn the_apis_are_regional_throttled_logged_traced_and_the_only_way_in() {
    let template = transformed_template();
    let resources = template["Resources"].as_object().expect("Resources");
    let of_type = |kind: &'static str| resources.iter().filter(move |(_, resource)| resource["Type"] == kind);
    // No function URL (an open one would bypass the stage's throttling, logs and WAF).
    assert_eq!(of_type("AWS::Lambda::Url").count(), 0);
    let outputs = template["Outputs"].as_object().expect("Outputs");
    assert!(outputs.contains_key("ApiUrl") && outputs.contains_key("RunnerUrl"));
    assert!(!outputs.values().any(|output| output.to_string().contains("FunctionUrl")), "a function URL output");
    for api in ["Api", "RunnerApi"] {
        let properties = &template["Resources"][api]["Properties"];
        assert_eq!(properties["EndpointConfiguration"]["Types"], serde_json::json!(["REGIONAL"]), "{api}");
        // SAM decodes its `~1` escapes into the OpenAPI body, which API Gateway imports.
        let binary = properties["Body"]["x-amazon-apigateway-binary-media-types"].as_array().expect("binary types");
        assert!(binary.iter().any(|kind| kind == "multipart/form-data"), "{api}: {binary:?}");
        let (_, stage) = of_type("AWS::ApiGateway::Stage")
            .find(|(_, stage)| stage["Properties"]["RestApiId"]["Ref"] == api)
            .unwrap_or_else(|| panic!("{api} has a stage"));
        let stage = &stage["Properties"];
        assert_eq!((stage["StageName"].as_str(), stage["TracingEnabled"].as_bool()), (Some("Prod"), Some(true)));
        assert!(stage["AccessLogSetting"]["DestinationArn"].is_object(), "{api}: access logs");
        let settings = stage["MethodSettings"].as_array().expect("MethodSettings");
        let every_method = settings.iter().find(|setting| setting["ResourcePath"] == "/*").expect("stage throttling");
        assert!(every_method["ThrottlingRateLimit"].is_object() && every_method["ThrottlingBurstLimit"].is_object());
        // API Gateway may invoke each function it integrates, and only from this API.
        for method in methods(&template, api) {
            let permitted = of_type("AWS::Lambda::Permission").any(|(_, permission)| {
                let permission = &permission["Properties"];
                permission["FunctionName"]["Ref"] == method.function.as_str()
                    && permission["Principal"] == "apigateway.amazonaws.com"
                    && permission["SourceArn"]["Fn::Sub"][1]["__ApiId__"]["Ref"] == api
            });
            assert!(permitted, "{api}: {} may not invoke {}", method.route.path, method.function);
        }
    }
}

#[test]
#[ignore = "reads the transform's output: make template-check runs it"]
fn anonymous_traffic_has_its_own_limits_compression_and_an_optional_ip_rate_rule() {
    let template = transformed_template();
    let resources = template["Resources"].as_object().expect("Resources");
    let stage_of = |api: &str| {
        resources
            .values()
            .find(|resource| {
                resource["Type"] == "AWS::ApiGateway::Stage" && resource["Properties"]["RestApiId"]["Ref"] == api
            })
            .unwrap_or_else(|| panic!("{api} has a stage"))
    };
    let docs_paths: [(&str, &[&str]); 2] = [
        ("Api", &["/~1docs", "/~1openapi.json", "/~1api~1v1~1external~1docs", "/~1api~1v1~1external~1openapi.json"]),
        ("RunnerApi", &["/~1docs", "/~1openapi.json"]),
    ];
    for (api, paths) in docs_paths {
        // Compressed by API Gateway above a size the stack sets (the 1 MB reference pages).
        assert_eq!(
            resources[api]["Properties"]["MinimumCompressionSize"],
            serde_json::json!({"Ref": "ApiMinimumCompressionSize"}),
            "{api}"
        );
        // The keyless documents and pages have a method throttle of their own.
        let settings = stage_of(api)["Properties"]["MethodSettings"].as_array().expect("MethodSettings");
        for path in paths {
            let setting = settings
                .iter()
                .find(|setting| setting["ResourcePath"] == *path)
                .unwrap_or_else(|| panic!("{api}: no method settings for {path}"));
            assert_eq!(setting["HttpMethod"], "*", "{api} {path}");
            assert_eq!(setting["ThrottlingRateLimit"], serde_json::json!({"Ref": "DocsThrottlingRateLimit"}));
            assert_eq!(setting["ThrottlingBurstLimit"], serde_json::json!({"Ref": "DocsThrottlingBurstLimit"}));
        }
    }
    // A rate-based rule by client IP, created by a parameter (0: none) unless the operator
    // attaches a web ACL of their own; either is attached to both stages.
    let parameters = &template["Parameters"];
    assert_eq!(parameters["WafRateLimitPerIp"]["Default"], 0);
    let acl = &resources["IpRateWebAcl"];
    assert_eq!((acl["Type"].as_str(), acl["Condition"].as_str()), (Some("AWS::WAFv2::WebACL"), Some("CreatesWebAcl")));
    assert_eq!(acl["Properties"]["Scope"], "REGIONAL");
    assert_eq!(acl["Properties"]["DefaultAction"], serde_json::json!({"Allow": {}}));
    let rules = acl["Properties"]["Rules"].as_array().expect("rules");
    let rate = &rules[0]["Statement"]["RateBasedStatement"];
    assert_eq!(
        (rate["AggregateKeyType"].as_str(), &rate["Limit"]),
        (Some("IP"), &serde_json::json!({"Ref": "WafRateLimitPerIp"}))
    );
    assert_eq!(rules[0]["Action"], serde_json::json!({"Block": {}}));
    let conditions = &template["Conditions"];
    assert_eq!(
        conditions["CreatesWebAcl"],
        serde_json::json!({"Fn::And": [{"Fn::Not": [{"Condition": "HasWebAcl"}]},
            {"Fn::Not": [{"Fn::Equals": [{"Ref": "WafRateLimitPerIp"}, "0"]}]}]})
    );
    for (association, api, stage) in
        [("ApiWebAcl", "Api", "ApiProdStage"), ("RunnerApiWebAcl", "RunnerApi", "RunnerApiProdStage")]
    {
        let association = &resources[association];
        assert_eq!(association["Condition"], "AttachesWebAcl");
        let arn = association["Properties"]["ResourceArn"]["Fn::Sub"].as_str().expect("a stage ARN");
        assert!(arn.ends_with(&format!("/restapis/${{{api}}}/stages/${{{stage}}}")), "{arn}");
        assert_eq!(
            association["Properties"]["WebACLArn"],
            serde_json::json!({"Fn::If": ["HasWebAcl", {"Ref": "WebAclArn"}, {"Fn::GetAtt": ["IpRateWebAcl", "Arn"]}]})
        );
    }
}

/// The OpenAPI document (`openapi/`) that describes a route of `api`.
fn document_of(api: &str, path: &str) -> &'static str {
    match (api, path.starts_with("/api/")) {
        ("Api", true) => "meeting-data-api",
        ("Api", false) => "backend",
        _ => "runner",
    }
}

/// A path with its parameters unnamed and no trailing slash: `/agents/{}/run`.
fn route_shape(path: &str) -> String {
    let segments: Vec<String> = path
        .split('/')
        .filter(|segment| !segment.is_empty())
        .map(|segment| if segment.starts_with('{') { "{}".to_owned() } else { segment.to_owned() })
        .collect();
    format!("/{}", segments.join("/"))
}

/// The documents and the routes agree both ways: every route above is an operation of its
/// API's document, and every operation a route (docs/openapi.md). Runs in `make test`: it reads
/// only the committed files.
#[test]
fn every_route_is_an_operation_of_its_document_and_every_operation_a_route() {
    use std::collections::BTreeSet;
    let routes: BTreeSet<(&str, String, String)> = SPEC_ROUTES
        .iter()
        .map(|(api, method, path, _, _)| (document_of(api, path), method.to_string(), route_shape(path)))
        .collect();
    let mut operations = BTreeSet::new();
    for (name, document) in integration_tests::openapi::documents() {
        for (path, item) in document["paths"].as_object().expect("paths") {
            for method in item.as_object().expect("a path item").keys() {
                if ["get", "put", "post", "delete", "patch", "head", "options", "trace"].contains(&method.as_str()) {
                    operations.insert((*name, method.to_ascii_uppercase(), route_shape(path)));
                }
            }
        }
    }
    let undocumented: Vec<_> = routes.difference(&operations).collect();
    let unrouted: Vec<_> = operations.difference(&routes).collect();
    assert_eq!((undocumented, unrouted), (vec![], vec![]), "(routes no document has, operations no route serves)");
}

#[test]
#[ignore = "reads the transformed template: make template-check"]
fn the_tool_sandbox_serves_one_account_per_environment_and_writes_only_its_own_logs() {
    let template = transformed_template();
    let resources = template["Resources"].as_object().expect("Resources");
    let function = &resources["ToolSandboxFunction"];
    assert_eq!(function["Type"], "AWS::Lambda::Function", "SAM's function, transformed");
    let properties = &function["Properties"];
    // Tenant isolation: every environment serves one tenant (the runners name the account).
    assert_eq!(properties["TenancyConfig"], serde_json::json!({"TenantIsolationMode": "PER_TENANT"}));
    assert!(properties.get("ProvisionedConcurrencyConfig").is_none(), "no provisioned concurrency with tenancy");
    assert!(!resources.values().any(|resource| resource["Type"] == "AWS::Lambda::Version"
        && resource["Properties"]["FunctionName"]["Ref"] == "ToolSandboxFunction"
        && resource["Properties"].get("ProvisionedConcurrencyConfig").is_some()));
    // What a call may write in all is explicit.
    assert_eq!(properties["EphemeralStorage"]["Size"], 1024);
    // The longest call (a tool's largest timeout) fits, with its start, /tmp emptied before and
    // after, and its processes killed.
    let timeout = properties["Timeout"].as_u64().expect("a timeout");
    assert!(timeout >= agent_runtime::tools::MAX_TOOL_TIMEOUT.as_secs() + 25, "{timeout}");
    // Its own role, allowed to write its own log group and nothing else.
    assert_eq!(properties["Role"], serde_json::json!({"Fn::GetAtt": ["ToolSandboxRole", "Arn"]}));
    assert_eq!(properties["LoggingConfig"]["LogGroup"], serde_json::json!({"Ref": "ToolSandboxLogs"}));
    let role = &resources["ToolSandboxRole"]["Properties"];
    assert!(role.get("ManagedPolicyArns").is_none_or(|arns| arns.as_array().is_some_and(Vec::is_empty)), "{role}");
    let policies = role["Policies"].as_array().expect("inline policies");
    let statements: Vec<Value> = policies
        .iter()
        .flat_map(|policy| policy["PolicyDocument"]["Statement"].as_array().cloned().unwrap_or_default())
        .collect();
    assert_eq!(statements.len(), 1, "{statements:?}");
    assert_eq!(statements[0]["Effect"], "Allow");
    assert_eq!(statements[0]["Action"], serde_json::json!(["logs:CreateLogStream", "logs:PutLogEvents"]));
    assert_eq!(statements[0]["Resource"], serde_json::json!({"Fn::GetAtt": ["ToolSandboxLogs", "Arn"]}));
    assert_eq!(resources["ToolSandboxLogs"]["Type"], "AWS::Logs::LogGroup");
    // The runners that invoke it cap each account's calls in flight.
    for runner in ["AgentRunsFunction", "RunnerFunction", "RunnerWorkerFunction"] {
        let variables = &resources[runner]["Properties"]["Environment"]["Variables"];
        assert_eq!(variables["QUOTA_SANDBOX_CALLS"], serde_json::json!({"Ref": "QuotaSandboxCalls"}), "{runner}");
        assert_eq!(variables["TOOL_SANDBOX_FUNCTION"], serde_json::json!({"Ref": "ToolSandboxFunction"}), "{runner}");
    }
    assert_eq!(template["Parameters"]["QuotaSandboxCalls"]["Default"], 50);
}
