//! IAM proven: every AWS call a function made across the test suite (recorded by
//! `integration_tests::iam`, tagged with the function's template logical id) is allowed by that
//! function's policy in `template.yaml` (action and resource, index ARNs included), and every
//! grant a policy writes is used by some call of its function, or listed in `UNUSED_BUT_NEEDED`
//! with the reason the suite cannot reach it.
//!
//! It reads what the suite recorded, so it runs after it: `make test` empties the record, runs
//! `cargo test --workspace` (where this test is ignored), then runs this one with `--ignored`.

use integration_tests::iam::{Call, recorded_calls};
use serde_norway::Value;
use std::collections::{BTreeMap, BTreeSet};

/// What SAM grants a function with an SQS event on its queue (its `SQSPollerPolicy`).
const SQS_POLLER_ACTIONS: &[&str] =
    &["sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:ReceiveMessage"];

/// One allowance of a policy: an action (`dynamodb:PutItem`, or a service's `*`) on resources
/// named as the recorder names them (`table/RunsTable/index/*`), logical ids for physical names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Grant {
    action: String,
    resource: String,
}

/// The resources of the template by logical id, with their type.
fn resources(template: &Value) -> BTreeMap<String, String> {
    let mut types = BTreeMap::new();
    // A parameter's default, for a policy whose resources are a parameter (`!Ref BedrockModelArns`).
    if let Some(Value::Mapping(parameters)) = template.get("Parameters") {
        for (name, parameter) in parameters {
            if let (Some(name), Some(default)) = (name.as_str(), parameter.get("Default").and_then(Value::as_str)) {
                types.insert(format!("{PARAMETER}{name}"), default.to_owned());
            }
        }
    }
    if let Some(Value::Mapping(resources)) = template.get("Resources") {
        for (id, resource) in resources {
            if let (Some(id), Some(kind)) = (id.as_str(), resource.get("Type").and_then(Value::as_str)) {
                types.insert(id.to_owned(), kind.to_owned());
            }
        }
    }
    types
}

/// The prefix of a parameter's entry in `resources` (its value is the parameter's default).
const PARAMETER: &str = "Parameter:";

/// How the recorder names a resource of `kind` with logical id `id`.
fn named(kind: &str, id: &str) -> String {
    match kind {
        "AWS::DynamoDB::Table" => format!("table/{id}"),
        "AWS::SQS::Queue" => format!("queue/{id}"),
        "AWS::SecretsManager::Secret" => format!("secret/{id}"),
        "AWS::Serverless::Function" => format!("function/{id}"),
        "AWS::S3::Bucket" => format!("bucket/{id}"),
        other => format!("{other}/{id}"),
    }
}

/// A policy's `Resource` as the recorder would name what it covers (`*` as a glob).
fn resource_patterns(value: &Value, types: &BTreeMap<String, String>) -> Vec<String> {
    match value {
        Value::Sequence(items) => items.iter().flat_map(|item| resource_patterns(item, types)).collect(),
        Value::String(text) if text == "*" => vec!["*".to_owned()],
        Value::Tagged(tagged) => {
            let text = tagged.value.as_str().unwrap_or_default();
            match tagged.tag.to_string().trim_start_matches('!') {
                "GetAtt" => {
                    let id = text.trim_end_matches(".Arn");
                    vec![named(types.get(id).map_or("", String::as_str), id)]
                }
                "Ref" => match types.get(&format!("{PARAMETER}{text}")) {
                    // A list parameter's default: each item is a resource pattern.
                    Some(default) => default.split(',').map(|item| item.trim().to_owned()).collect(),
                    None => vec![named(types.get(text).map_or("", String::as_str), text)],
                },
                "Sub" => {
                    // `${Table.Arn}/index/NAME` or a secret ARN under the stack's name.
                    if let Some(rest) = text.strip_prefix("${") {
                        let (reference, tail) = rest.split_once('}').unwrap_or((rest, ""));
                        let id = reference.trim_end_matches(".Arn");
                        vec![format!("{}{tail}", named(types.get(id).map_or("", String::as_str), id))]
                    } else if let Some((_, name)) = text.split_once(":secret:") {
                        vec![format!("secret/{name}")]
                    } else {
                        vec![format!("unresolved:{text}")]
                    }
                }
                other => vec![format!("unresolved:!{other} {text}")],
            }
        }
        other => vec![format!("unresolved:{other:?}")],
    }
}

/// The template's functions: logical id and resource.
fn functions<'a>(template: &'a Value, types: &BTreeMap<String, String>) -> Vec<(&'a str, &'a Value)> {
    let Some(Value::Mapping(all)) = template.get("Resources") else { return Vec::new() };
    all.iter()
        .filter_map(|(id, resource)| Some((id.as_str()?, resource)))
        .filter(|(id, _)| types.get(*id).map(String::as_str) == Some("AWS::Serverless::Function"))
        .collect()
}

/// Each function's grants (by logical id): what its `Policies` say, and what SAM adds for its
/// events.
fn grants(template: &Value, types: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<Grant>> {
    let mut grants = written_grants(template, types);
    for (id, resource) in functions(template, types) {
        let function = grants.entry(id.to_owned()).or_default();
        // An SQS event: SAM gives the role what the event source mapping needs on its queue
        // (the tests play the mapping through the function's own queue client).
        let events = resource.get("Properties").and_then(|p| p.get("Events")).and_then(Value::as_mapping);
        for event in events.into_iter().flat_map(|events| events.values()) {
            if event.get("Type").and_then(Value::as_str) != Some("SQS") {
                continue;
            }
            let queue = event.get("Properties").and_then(|p| p.get("Queue"));
            for resource in queue.map(|queue| resource_patterns(queue, types)).unwrap_or_default() {
                for action in SQS_POLLER_ACTIONS {
                    function.insert(Grant { action: (*action).to_owned(), resource: resource.clone() });
                }
            }
        }
    }
    grants
}

/// Each function's grants (by logical id) as its `Policies` write them.
fn written_grants(template: &Value, types: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<Grant>> {
    let mut grants: BTreeMap<String, BTreeSet<Grant>> = BTreeMap::new();
    for (id, resource) in functions(template, types) {
        let function = grants.entry(id.to_owned()).or_default();
        let policies = resource.get("Properties").and_then(|p| p.get("Policies")).and_then(Value::as_sequence);
        for policy in policies.into_iter().flatten() {
            if let Some(target) = policy.get("LambdaInvokePolicy").and_then(|p| p.get("FunctionName")) {
                for resource in resource_patterns(target, types) {
                    function.insert(Grant { action: "lambda:InvokeFunction".into(), resource });
                }
            }
            for statement in policy.get("Statement").and_then(Value::as_sequence).into_iter().flatten() {
                if statement.get("Effect").and_then(Value::as_str) != Some("Allow") {
                    continue;
                }
                let actions: Vec<String> = match statement.get("Action") {
                    Some(Value::Sequence(actions)) => {
                        actions.iter().filter_map(Value::as_str).map(str::to_owned).collect()
                    }
                    Some(Value::String(action)) => vec![action.clone()],
                    _ => Vec::new(),
                };
                let patterns = statement.get("Resource").map(|r| resource_patterns(r, types)).unwrap_or_default();
                for action in &actions {
                    for resource in &patterns {
                        function.insert(Grant { action: action.clone(), resource: resource.clone() });
                    }
                }
            }
        }
    }
    grants
}

/// `name` matches `pattern`, whose `*` stands for any text.
fn glob(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || !name.ends_with(last) || name.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// A recorded call's resource with its test stack's prefix replaced by logical ids: a table,
/// queue, function or secret named `{prefix}{LogicalId}` becomes `kind/LogicalId`; a secret
/// under the stack's name (`{stack}/language-models/…`) becomes `secret/${AWS::StackName}/…`.
fn normalized(resource: &str, types: &BTreeMap<String, String>) -> String {
    let (kind, name) = resource.split_once('/').unwrap_or((resource, ""));
    if kind == "secret"
        && let Some((_, rest)) = name.split_once('/')
    {
        return format!("secret/${{AWS::StackName}}/{rest}");
    }
    let (name, index) = match name.split_once("/index/") {
        Some((name, index)) => (name, Some(index)),
        None => (name, None),
    };
    let logical = types.keys().filter(|id| name.ends_with(id.as_str())).max_by_key(|id| id.len());
    let base = format!("{kind}/{}", logical.map_or(name, String::as_str));
    match index {
        Some(index) => format!("{base}/index/{index}"),
        None => base,
    }
}

fn allowed(grants: &BTreeSet<Grant>, action: &str, resource: &str) -> bool {
    let service = action.split(':').next().unwrap_or_default();
    grants.iter().any(|grant| {
        (grant.action == action || grant.action == format!("{service}:*")) && glob(&grant.resource, resource)
    })
}

#[test]
#[ignore = "make test runs it after the suite it reads (see the module's documentation)"]
fn every_call_a_function_made_in_the_suite_is_allowed_by_its_policy() {
    let template: Value = serde_norway::from_str(stack::TEMPLATE_YAML).expect("template.yaml");
    let types = resources(&template);
    let grants = grants(&template, &types);
    let calls: BTreeSet<Call> = recorded_calls();
    assert!(calls.len() > 50, "the suite recorded only {} calls: run it first (make test)", calls.len());
    let mut denied = BTreeSet::new();
    for call in &calls {
        let resource = normalized(&call.resource, &types);
        // A resource the template does not declare is a test's deliberate failure (a missing
        // queue or table): nothing to authorize.
        let declared = types.keys().any(|id| resource.split('/').nth(1) == Some(id.as_str()))
            || resource.starts_with("secret/${AWS::StackName}/")
            || call.action.starts_with("bedrock:");
        if !declared {
            continue;
        }
        let granted = grants.get(&call.function).is_some_and(|grants| allowed(grants, &call.action, &resource));
        if !granted {
            denied.insert(format!("{}: {} on {resource}", call.function, call.action));
        }
    }
    let denied: Vec<String> = denied.into_iter().collect();
    assert!(denied.is_empty(), "calls the template's policies do not allow:\n{}", denied.join("\n"));
}

/// The functions behind the X-API-Key gate or the meeting API's limiter.
const RATE_LIMITED: &[&str] = &[
    "AgentRunsFunction",
    "AgentsFunction",
    "AuthFunction",
    "ExternalWebhooksFunction",
    "HealthFunction",
    "LanguageModelsFunction",
    "McpsFunction",
    "MeetingsFunction",
    "RunnerFunction",
    "SchedulesFunction",
    "SpendFunction",
    "ToolsFunction",
    "WebhooksFunction",
];

/// The functions that execute (or end) runs, and so export traces.
const TRACED: &[&str] =
    &["AgentRunsFunction", "RunnerFunction", "RunnerWorkerFunction", "SchedulesFunction", "SchedulerFunction"];

/// Grants the suite cannot exercise: the functions, the action, the resource, and why they need
/// it. An entry that the suite comes to use, or that the template no longer grants, fails the
/// test: the list stays exactly what it claims.
const UNUSED_BUT_NEEDED: &[(&[&str], &str, &str, &str)] = &[
    (
        &["MeetingsFunction"],
        "s3:GetObject",
        "bucket/RecordingsBucket/recordings/*",
        "the function presigns recording downloads with its role (query-string SigV4, no call); the \
         integrator's GET of the URL is the call IAM authorizes, as the role. tests/api/recording_files.rs \
         recomputes that signature and downloads through moto's S3 (which checks none)",
    ),
    (
        TRACED,
        "xray:PutSpans",
        "*",
        "each invocation's spans go to X-Ray's OTLP endpoint, signed by the exporter itself (trace-export) \
         rather than through the SDK's recorded client; tests/api/traces.rs checks that signature (service xray)",
    ),
    (
        TRACED,
        "xray:PutSpansForIndexing",
        "*",
        "X-Ray's OTLP endpoint indexes a share of the spans for Transaction Search with the caller's role \
         (docs/tracing.md); no local stand-in calls it",
    ),
    (
        &["RunnerFunction", "RunnerWorkerFunction"],
        "bedrock:InvokeModelWithResponseStream",
        "*",
        "the runner and the queue worker run agents through the same lifecycle as the run function \
         (agent_runs::lifecycle_from_settings), whose suite run of a Bedrock agent makes the call",
    ),
    (
        RATE_LIMITED,
        "dynamodb:GetItem",
        "table/RateLimitsTable",
        "the limiter reads a bucket when its conditional update failed without returning the item \
         (the bucket expired while the container believed it full); DynamoDB Local returns it",
    ),
    (
        &["AgentRunsFunction", "RunnerFunction", "RunnerWorkerFunction", "ToolsFunction"],
        "lambda:InvokeFunction",
        "function/ToolSandboxFunction",
        "custom Python tools run in the sandbox function; locally its stand-in is a python3 \
         subprocess (TOOL_SANDBOX_FUNCTION is empty), so no test invokes the function",
    ),
    (
        &["RunnerWorkerFunction"],
        "dynamodb:BatchGetItem",
        "table/AgentsTable",
        "the run engine reads an agent with its references, as in AgentRunsFunction and RunnerFunction \
         (same code)",
    ),
    (
        &["RunnerFunction"],
        "dynamodb:BatchGetItem",
        "table/ToolsTable",
        "the run engine reads an agent's tools, as in AgentRunsFunction (same code)",
    ),
    (
        &["RunnerWorkerFunction"],
        "dynamodb:BatchGetItem",
        "table/McpConfigsTable",
        "the run engine reads an agent's MCP configurations, as in AgentRunsFunction (same code)",
    ),
    (
        &["RunnerFunction", "RunnerWorkerFunction"],
        "secretsmanager:GetSecretValue",
        "secret/${AWS::StackName}/mcps/*",
        "runs of agents with MCP servers that have secret headers; the suite runs those through \
         AgentRunsFunction (same engine)",
    ),
    (
        &["RunnerFunction", "RunnerWorkerFunction"],
        "secretsmanager:GetSecretValue",
        "secret/${AWS::StackName}/tools/*",
        "runs of agents with http tools with secret headers or flowtool flows; the suite runs those \
         through AgentRunsFunction (same engine)",
    ),
    (
        &["RunnerFunction", "RunnerWorkerFunction"],
        "secretsmanager:GetSecretValue",
        "secret/FlowServerSecret",
        "runs of flowtool agents call the configured flow server with its key; the suite runs them \
         through AgentRunsFunction (same engine)",
    ),
    (
        &["RunnerFunction", "RunnerWorkerFunction", "SchedulesFunction"],
        "dynamodb:PutItem",
        "table/WebhookDeliveriesTable",
        "a run's start or end writes a delivery to each subscribed endpoint in its transaction; the \
         suite subscribes endpoints around agent-runs and the scheduler only",
    ),
    (
        &["RunnerFunction", "RunnerWorkerFunction", "SchedulesFunction"],
        "sqs:SendMessage",
        "queue/WebhookDeliveryQueue",
        "the deliveries of a run's webhook events are queued (see the PutItem above)",
    ),
    (
        &["RunnerFunction", "RunnerWorkerFunction", "SchedulesFunction"],
        "sqs:GetQueueUrl",
        "queue/WebhookDeliveryQueue",
        "the delivery queue's URL is resolved on its first use (see the SendMessage above)",
    ),
    (
        &["RunnerFunction"],
        "dynamodb:UpdateItem",
        "table/SchedulesTable",
        "cancelling a queued scheduled run records its end on the schedule (last_run_status)",
    ),
    (
        &["SchedulerFunction", "SchedulesFunction"],
        "dynamodb:BatchWriteItem",
        "table/WebhookDeliveriesTable",
        "schedule.triggered is written with its deliveries to subscribed endpoints in one batch",
    ),
    (
        &["WebhookDeliveryFunction"],
        "dynamodb:GetItem",
        "table/WebhookEndpointsTable",
        "an endpoint's health written by two attempts at once is read again for the second (a race the \
         tests' fixed clock never makes: both writes carry the same updated_at)",
    ),
];

/// The grants of `grants` that no recorded call of the function used, as
/// `(function, action, resource)`.
fn unused<'a>(
    grants: &'a BTreeMap<String, BTreeSet<Grant>>,
    calls: &[(String, String, String)],
) -> BTreeSet<(&'a str, &'a str, &'a str)> {
    let mut unused = BTreeSet::new();
    for (function, grants) in grants {
        for grant in grants {
            let used = calls.iter().any(|(caller, action, resource)| {
                caller == function && *action == grant.action && glob(&grant.resource, resource)
            });
            if !used {
                unused.insert((function.as_str(), grant.action.as_str(), grant.resource.as_str()));
            }
        }
    }
    unused
}

#[test]
#[ignore = "make test runs it after the suite it reads (see the module's documentation)"]
fn no_policy_grants_what_its_function_never_does() {
    let template: Value = serde_norway::from_str(stack::TEMPLATE_YAML).expect("template.yaml");
    let types = resources(&template);
    let grants = written_grants(&template, &types);
    let calls: Vec<(String, String, String)> = recorded_calls()
        .into_iter()
        .map(|call| (call.function, call.action, normalized(&call.resource, &types)))
        .collect();
    assert!(calls.len() > 50, "the suite recorded only {} calls: run it first (make test)", calls.len());
    let unused = unused(&grants, &calls);
    let allowed: BTreeSet<(&str, &str, &str)> = UNUSED_BUT_NEEDED
        .iter()
        .flat_map(|(functions, action, resource, _)| functions.iter().map(move |f| (*f, *action, *resource)))
        .collect();
    let surplus: Vec<String> =
        unused.difference(&allowed).map(|(f, action, resource)| format!("{f}: {action} on {resource}")).collect();
    assert!(surplus.is_empty(), "granted, never used (remove, or list with a reason):\n{}", surplus.join("\n"));
    let stale: Vec<String> =
        allowed.difference(&unused).map(|(f, action, resource)| format!("{f}: {action} on {resource}")).collect();
    assert!(stale.is_empty(), "listed as unused, but used or no longer granted:\n{}", stale.join("\n"));
}

#[test]
fn resources_and_globs_read_as_iam_reads_them() {
    assert!(glob("table/RunsTable/index/*", "table/RunsTable/index/by-agent"));
    assert!(!glob("table/RunsTable/index/*", "table/RunsTable"));
    assert!(glob("secret/${AWS::StackName}/tools/*", "secret/${AWS::StackName}/tools/a/b"));
    let types = BTreeMap::from([
        ("RunsTable".to_owned(), "AWS::DynamoDB::Table".to_owned()),
        ("RunEventsTable".to_owned(), "AWS::DynamoDB::Table".to_owned()),
    ]);
    assert_eq!(normalized("table/t-9f2-RunEventsTable", &types), "table/RunEventsTable");
    assert_eq!(normalized("table/t-9f2-RunsTable/index/by-agent", &types), "table/RunsTable/index/by-agent");
    assert_eq!(normalized("secret/t-9f2/tools/acct/id", &types), "secret/${AWS::StackName}/tools/acct/id");
}

/// A worker allowed two actions on a table and a Query of one of its indexes, and another
/// function allowed nothing.
const WORKER_TEMPLATE: &str = r#"
Resources:
  ThingsTable:
    Type: AWS::DynamoDB::Table
  Worker:
    Type: AWS::Serverless::Function
    Properties:
      Policies:
        - Statement:
            - Effect: Allow
              Action: [dynamodb:GetItem, dynamodb:DeleteItem]
              Resource: !GetAtt ThingsTable.Arn
            - Effect: Allow
              Action: [dynamodb:Query]
              Resource: !Sub "${ThingsTable.Arn}/index/by-owner"
  Other:
    Type: AWS::Serverless::Function
"#;

#[test]
fn a_call_outside_a_functions_policy_is_denied() {
    let template: Value = serde_norway::from_str(WORKER_TEMPLATE).unwrap();
    let types = resources(&template);
    let grants = grants(&template, &types);
    let worker = &grants["Worker"];
    assert!(allowed(worker, "dynamodb:GetItem", "table/ThingsTable"));
    assert!(!allowed(worker, "dynamodb:PutItem", "table/ThingsTable"), "an action not granted");
    assert!(allowed(worker, "dynamodb:Query", "table/ThingsTable/index/by-owner"));
    assert!(!allowed(worker, "dynamodb:Query", "table/ThingsTable"), "the table is not its index");
    assert!(!allowed(worker, "dynamodb:Query", "table/ThingsTable/index/other"));
    assert!(!allowed(&grants["Other"], "dynamodb:GetItem", "table/ThingsTable"), "another function's grant");
}

#[test]
fn a_grant_no_call_of_its_function_uses_is_reported() {
    let template: Value = serde_norway::from_str(WORKER_TEMPLATE).unwrap();
    let types = resources(&template);
    let grants = written_grants(&template, &types);
    let call =
        |function: &str, action: &str, resource: &str| (function.to_owned(), action.to_owned(), resource.to_owned());
    // Another function's DeleteItem does not use the Worker's grant.
    let calls = [
        call("Worker", "dynamodb:GetItem", "table/ThingsTable"),
        call("Worker", "dynamodb:Query", "table/ThingsTable/index/by-owner"),
        call("Other", "dynamodb:DeleteItem", "table/ThingsTable"),
    ];
    let unused = unused(&grants, &calls);
    assert_eq!(unused.into_iter().collect::<Vec<_>>(), [("Worker", "dynamodb:DeleteItem", "table/ThingsTable")]);
}
