//! Reading the parts of a SAM template that the local stack reproduces.

use crate::physical_name;
use serde_norway::Value;
use std::collections::BTreeMap;

/// The resources of the template that matter locally.
#[derive(Debug, Clone)]
pub struct Template {
    pub tables: Vec<TableSpec>,
    /// Logical ids of `AWS::SecretsManager::Secret` resources.
    pub secrets: Vec<String>,
    pub queues: Vec<QueueSpec>,
    /// Logical ids of `AWS::S3::Bucket` resources (locally named by [`bucket_name`]).
    pub buckets: Vec<String>,
    /// Those of `secrets` created without a value (neither `GenerateSecretString` nor
    /// `SecretString`): an operator sets them after deploying.
    pub secrets_set_by_operator: Vec<String>,
    pub functions: Vec<FunctionSpec>,
    /// The REST APIs (`AWS::Serverless::Api`) the functions' `Api` events attach to.
    pub apis: Vec<ApiSpec>,
    /// Functions on a Python runtime (the tool sandbox). They are neither built nor served
    /// locally: a `!Ref` to one resolves to an empty value, which tells its caller to use its
    /// local stand-in (the tool sandbox's is a `python3` subprocess running the same harness).
    pub python_functions: Vec<PythonFunctionSpec>,
    /// Parameter defaults, by name.
    pub parameters: BTreeMap<String, String>,
}

/// An `AWS::Serverless::Api`: a REST API, one base URL of the platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiSpec {
    pub logical_id: String,
    /// `StageName`: the first segment of the `execute-api` URL's path (`/Prod/…`).
    pub stage_name: String,
    /// `BinaryMediaTypes` (`~1` read as `/`): request bodies of these types reach the function
    /// base64-encoded and intact; any other body is passed as UTF-8 text.
    pub binary_media_types: Vec<String>,
    /// `MinimumCompressionSize`, as written (a number or a parameter's `!Ref`): responses of at
    /// least this many bytes are compressed when the client accepts it (`Template::compression_from`).
    pub minimum_compression_size: Option<EnvValue>,
}

/// An `AWS::SQS::Queue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSpec {
    pub logical_id: String,
    pub visibility_timeout: Option<u32>,
    pub message_retention: Option<u32>,
    /// The dead-letter queue's logical id and `maxReceiveCount`.
    pub dead_letter: Option<(String, u32)>,
}

/// An `AWS::DynamoDB::Table`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    pub logical_id: String,
    /// Attribute name and scalar type (`S`, `N`, `B`).
    pub attributes: Vec<(String, String)>,
    pub key: KeySchema,
    pub indexes: Vec<IndexSpec>,
    pub ttl_attribute: Option<String>,
}

/// A hash key and an optional range key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct KeySchema {
    pub hash: String,
    pub range: Option<String>,
}

/// A global secondary index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexSpec {
    pub name: String,
    pub key: KeySchema,
    /// `ALL`, `KEYS_ONLY` or `INCLUDE`.
    pub projection: String,
    pub non_key_attributes: Vec<String>,
}

/// An `AWS::Serverless::Function`.
#[derive(Debug, Clone)]
pub struct FunctionSpec {
    pub logical_id: String,
    /// The cargo binary (`Metadata.BuildProperties.Binary`).
    pub binary: String,
    pub environment: BTreeMap<String, EnvValue>,
    /// Its `Api` events: the REST API routes it serves.
    pub routes: Vec<Route>,
    /// Its `SQS` events: the queues Lambda's event source mapping feeds it from.
    pub queue_triggers: Vec<QueueTrigger>,
    /// Its `Schedule` events: the EventBridge rules that invoke it.
    pub schedules: Vec<ScheduleTrigger>,
}

/// An `SQS` event of a function, as its event source mapping reads the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueTrigger {
    /// The queue's logical id (`Queue: !GetAtt Queue.Arn`).
    pub queue: String,
    /// At most this many messages per invocation (`BatchSize`, default 10).
    pub batch_size: u32,
    /// How long to gather a batch (`MaximumBatchingWindowInSeconds`, default 0).
    pub batching_window_seconds: u32,
    /// `FunctionResponseTypes: [ReportBatchItemFailures]`: the function names the messages to
    /// retry, the others are deleted; without it, a batch is deleted whole or not at all.
    pub reports_batch_item_failures: bool,
}

/// A `Schedule` event of a function: its name and its `rate(…)` or `cron(…)` expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleTrigger {
    pub name: String,
    pub expression: String,
}

/// An `AWS::Serverless::Function` with a `python…` `Runtime`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PythonFunctionSpec {
    pub logical_id: String,
    /// The folder of its code, relative to the template.
    pub code_uri: String,
    /// `module.function`.
    pub handler: String,
    /// Its `Timeout` in seconds, when set on the function.
    pub timeout_seconds: Option<u32>,
}

/// An environment variable's value as written in the template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvValue {
    Literal(String),
    /// `!Ref LogicalId`: a resource's physical name or a parameter's value.
    Ref(String),
    /// `!Sub "…${AWS::StackName}…"`: the only substitution functions use here.
    Sub(String),
}

/// An `Api` event: a REST API's resource path (with `{name}` variables) and method (or `ANY`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The logical id of its API (`RestApiId: !Ref Api`).
    pub api: String,
    pub method: String,
    pub path: String,
    /// `ResponseTransferMode: RESPONSE_STREAM`: API Gateway streams the function's answer
    /// (`response-streaming-invocations`) rather than buffering it.
    pub streamed: bool,
}

/// Local name of a bucket: its physical name in lowercase, as S3 requires
/// (`local-recordingsbucket`).
pub fn bucket_name(prefix: &str, logical_id: &str) -> String {
    physical_name(prefix, logical_id).to_ascii_lowercase()
}

/// The template does not have the shape this module reads.
#[derive(Debug, thiserror::Error)]
#[error("template.yaml: {0}")]
pub struct TemplateError(String);

impl Template {
    /// The project's embedded `template.yaml`.
    pub fn embedded() -> Result<Self, TemplateError> {
        Self::parse(crate::TEMPLATE_YAML)
    }

    /// Parses a SAM template.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let root: Value = serde_norway::from_str(text).map_err(|err| TemplateError(err.to_string()))?;
        let mut template = Template {
            tables: Vec::new(),
            secrets: Vec::new(),
            secrets_set_by_operator: Vec::new(),
            queues: Vec::new(),
            buckets: Vec::new(),
            functions: Vec::new(),
            apis: Vec::new(),
            python_functions: Vec::new(),
            parameters: BTreeMap::new(),
        };
        if let Some(Value::Mapping(parameters)) = root.get("Parameters") {
            for (name, parameter) in parameters {
                if let (Some(name), Some(default)) = (name.as_str(), parameter.get("Default").and_then(scalar)) {
                    template.parameters.insert(name.to_owned(), default);
                }
            }
        }
        let Some(Value::Mapping(resources)) = root.get("Resources") else {
            return Err(TemplateError("no Resources".into()));
        };
        for (logical_id, resource) in resources {
            let logical_id = logical_id.as_str().ok_or_else(|| TemplateError("non-string logical id".into()))?;
            let properties = resource.get("Properties").unwrap_or(&Value::Null);
            match resource.get("Type").and_then(Value::as_str) {
                Some("AWS::DynamoDB::Table") => template.tables.push(parse_table(logical_id, properties)?),
                Some("AWS::SecretsManager::Secret") => {
                    template.secrets.push(logical_id.to_owned());
                    if properties.get("GenerateSecretString").is_none() && properties.get("SecretString").is_none() {
                        template.secrets_set_by_operator.push(logical_id.to_owned());
                    }
                }
                Some("AWS::SQS::Queue") => template.queues.push(parse_queue(logical_id, properties)),
                Some("AWS::S3::Bucket") => template.buckets.push(logical_id.to_owned()),
                Some("AWS::Serverless::Api") => template.apis.push(parse_api(logical_id, properties)?),
                Some("AWS::Serverless::Function")
                    if properties.get("Runtime").and_then(Value::as_str).is_some_and(|r| r.starts_with("python")) =>
                {
                    template.python_functions.push(parse_python_function(logical_id, properties)?)
                }
                Some("AWS::Serverless::Function") => template.functions.push(parse_function(logical_id, resource)?),
                _ => {}
            }
        }
        Ok(template)
    }

    /// Replaces parameter defaults with the values `lookup` gives by parameter name, as
    /// `sam deploy --parameter-overrides` would (`FlowServerUrl=http://… make dev`).
    pub fn override_parameters(&mut self, lookup: impl Fn(&str) -> Option<String>) {
        for (name, value) in &mut self.parameters {
            if let Some(given) = lookup(name) {
                *value = given;
            }
        }
    }

    /// The table with this logical id.
    pub fn table(&self, logical_id: &str) -> Option<&TableSpec> {
        self.tables.iter().find(|table| table.logical_id == logical_id)
    }

    /// The function with this logical id.
    pub fn function(&self, logical_id: &str) -> Option<&FunctionSpec> {
        self.functions.iter().find(|function| function.logical_id == logical_id)
    }

    /// The REST API with this logical id.
    pub fn api(&self, logical_id: &str) -> Option<&ApiSpec> {
        self.apis.iter().find(|api| api.logical_id == logical_id)
    }

    /// The routes of the REST API `api`, each with the function that serves it.
    pub fn routes_of<'a>(&'a self, api: &'a str) -> impl Iterator<Item = (&'a FunctionSpec, &'a Route)> + 'a {
        self.functions
            .iter()
            .flat_map(|function| function.routes.iter().map(move |route| (function, route)))
            .filter(move |(_, route)| route.api == api)
    }

    /// The Python function with this logical id.
    pub fn python_function(&self, logical_id: &str) -> Option<&PythonFunctionSpec> {
        self.python_functions.iter().find(|function| function.logical_id == logical_id)
    }

    /// A function's environment with `!Ref`s resolved to the local stack's names.
    pub fn environment(&self, function: &FunctionSpec, prefix: &str) -> BTreeMap<String, String> {
        function.environment.iter().map(|(name, value)| (name.clone(), self.resolve(value, prefix))).collect()
    }

    /// What an operator tool needs to reach every table and secret: each one under its
    /// conventional variable name (see [`resource_variable`]), plus every function's settings.
    pub fn stack_environment(&self, prefix: &str) -> BTreeMap<String, String> {
        let mut env: BTreeMap<String, String> =
            self.functions.iter().flat_map(|function| self.environment(function, prefix)).collect();
        let resources = self
            .tables
            .iter()
            .map(|t| &t.logical_id)
            .chain(&self.secrets)
            .chain(self.queues.iter().map(|q| &q.logical_id));
        for logical_id in resources {
            env.insert(self.resource_variable(logical_id), physical_name(prefix, logical_id));
        }
        for logical_id in &self.buckets {
            env.insert(self.resource_variable(logical_id), bucket_name(prefix, logical_id));
        }
        env
    }

    /// The environment variable that names a table, secret or queue: `MeetingsTable` is
    /// `MEETINGS_TABLE`, `PepperSecret` is `PEPPER_SECRET_ID`, `WebhookDeliveryQueue` is
    /// `WEBHOOK_DELIVERY_QUEUE_URL`. Functions use the same names. Locally a queue's variable
    /// holds its name (its URL depends on the endpoint); code resolves a name to a URL once.
    pub fn resource_variable(&self, logical_id: &str) -> String {
        let mut name = String::new();
        for (i, c) in logical_id.chars().enumerate() {
            if c.is_ascii_uppercase() && i > 0 {
                name.push('_');
            }
            name.push(c.to_ascii_uppercase());
        }
        if self.secrets.iter().any(|secret| secret == logical_id) {
            name.push_str("_ID");
        }
        if self.queues.iter().any(|queue| queue.logical_id == logical_id) {
            name.push_str("_URL");
        }
        name
    }

    /// The size from which `api`'s responses are compressed (its `MinimumCompressionSize`, a
    /// parameter's value resolved); `None` when it compresses none.
    pub fn compression_from(&self, api: &ApiSpec) -> Option<usize> {
        api.minimum_compression_size.as_ref().and_then(|value| self.resolve(value, "").parse().ok())
    }

    fn resolve(&self, value: &EnvValue, prefix: &str) -> String {
        match value {
            EnvValue::Literal(text) => text.clone(),
            EnvValue::Ref(name) if self.python_functions.iter().any(|f| &f.logical_id == name) => String::new(),
            EnvValue::Ref(name) if self.buckets.contains(name) => bucket_name(prefix, name),
            EnvValue::Ref(name) => self.parameters.get(name).cloned().unwrap_or_else(|| physical_name(prefix, name)),
            // Locally the stack's name is its prefix without the separator.
            EnvValue::Sub(text) => text.replace("${AWS::StackName}", prefix.trim_end_matches('-')),
        }
    }
}

fn parse_table(logical_id: &str, properties: &Value) -> Result<TableSpec, TemplateError> {
    let error = |what: &str| TemplateError(format!("{logical_id}: {what}"));
    let attributes = sequence(properties.get("AttributeDefinitions"))
        .iter()
        .map(|attribute| {
            let name = string(attribute.get("AttributeName")).ok_or_else(|| error("attribute without a name"))?;
            let kind = string(attribute.get("AttributeType")).ok_or_else(|| error("attribute without a type"))?;
            Ok((name, kind))
        })
        .collect::<Result<Vec<_>, TemplateError>>()?;
    let key = parse_key_schema(properties.get("KeySchema")).ok_or_else(|| error("missing KeySchema"))?;
    let indexes = sequence(properties.get("GlobalSecondaryIndexes"))
        .iter()
        .map(|index| {
            let projection = index.get("Projection").unwrap_or(&Value::Null);
            Ok(IndexSpec {
                name: string(index.get("IndexName")).ok_or_else(|| error("index without a name"))?,
                key: parse_key_schema(index.get("KeySchema")).ok_or_else(|| error("index without a KeySchema"))?,
                projection: string(projection.get("ProjectionType")).unwrap_or_else(|| "ALL".into()),
                non_key_attributes: sequence(projection.get("NonKeyAttributes"))
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect(),
            })
        })
        .collect::<Result<Vec<_>, TemplateError>>()?;
    let ttl = properties.get("TimeToLiveSpecification");
    let ttl_attribute = ttl
        .filter(|ttl| ttl.get("Enabled").and_then(Value::as_bool).unwrap_or(false))
        .and_then(|ttl| string(ttl.get("AttributeName")));
    Ok(TableSpec { logical_id: logical_id.to_owned(), attributes, key, indexes, ttl_attribute })
}

fn parse_key_schema(value: Option<&Value>) -> Option<KeySchema> {
    let mut hash = None;
    let mut range = None;
    for element in sequence(value) {
        let name = string(element.get("AttributeName"))?;
        match element.get("KeyType").and_then(Value::as_str)? {
            "HASH" => hash = Some(name),
            "RANGE" => range = Some(name),
            _ => return None,
        }
    }
    Some(KeySchema { hash: hash?, range })
}

fn parse_function(logical_id: &str, resource: &Value) -> Result<FunctionSpec, TemplateError> {
    let error = |what: &str| TemplateError(format!("{logical_id}: {what}"));
    let binary = resource
        .get("Metadata")
        .and_then(|m| m.get("BuildProperties"))
        .and_then(|p| string(p.get("Binary")))
        .ok_or_else(|| error("missing Metadata.BuildProperties.Binary"))?;
    let properties = resource.get("Properties").unwrap_or(&Value::Null);
    let mut environment = BTreeMap::new();
    if let Some(Value::Mapping(variables)) = properties.get("Environment").and_then(|e| e.get("Variables")) {
        for (name, value) in variables {
            let name = name.as_str().ok_or_else(|| error("non-string variable name"))?;
            let value = if let Some(target) = reference(value) {
                EnvValue::Ref(target)
            } else if let Value::Tagged(tagged) = value
                && tagged.tag == "Sub"
                && let Some(text) = tagged.value.as_str()
            {
                EnvValue::Sub(text.to_owned())
            } else {
                EnvValue::Literal(scalar(value).ok_or_else(|| error(&format!("{name}: unsupported value")))?)
            };
            environment.insert(name.to_owned(), value);
        }
    }
    let mut routes = Vec::new();
    let mut queue_triggers = Vec::new();
    let mut schedules = Vec::new();
    if let Some(Value::Mapping(events)) = properties.get("Events") {
        for (name, event) in events {
            let event_properties = event.get("Properties").unwrap_or(&Value::Null);
            let number = |field: &str| event_properties.get(field).and_then(scalar).and_then(|n| n.parse::<u32>().ok());
            match event.get("Type").and_then(Value::as_str) {
                Some("Api") => routes.push(Route {
                    api: event_properties
                        .get("RestApiId")
                        .and_then(reference)
                        .ok_or_else(|| error("an Api event's RestApiId is not !Ref Api"))?,
                    method: string(event_properties.get("Method")).ok_or_else(|| error("route without Method"))?,
                    path: string(event_properties.get("Path")).ok_or_else(|| error("route without Path"))?,
                    streamed: string(event_properties.get("ResponseTransferMode")).as_deref()
                        == Some("RESPONSE_STREAM"),
                }),
                Some("HttpApi") => return Err(error("HttpApi events are not served: the APIs are REST APIs (Api)")),
                Some("SQS") => queue_triggers.push(QueueTrigger {
                    queue: attribute_target(event_properties.get("Queue"))
                        .ok_or_else(|| error("an SQS event's Queue is not !GetAtt Queue.Arn"))?,
                    batch_size: number("BatchSize").unwrap_or(10),
                    batching_window_seconds: number("MaximumBatchingWindowInSeconds").unwrap_or(0),
                    reports_batch_item_failures: sequence(event_properties.get("FunctionResponseTypes"))
                        .iter()
                        .any(|kind| kind.as_str() == Some("ReportBatchItemFailures")),
                }),
                Some("Schedule") => schedules.push(ScheduleTrigger {
                    name: name.as_str().unwrap_or_default().to_owned(),
                    expression: string(event_properties.get("Schedule"))
                        .ok_or_else(|| error("a Schedule event without Schedule"))?,
                }),
                _ => {}
            }
        }
    }
    Ok(FunctionSpec { logical_id: logical_id.to_owned(), binary, environment, routes, queue_triggers, schedules })
}

fn parse_api(logical_id: &str, properties: &Value) -> Result<ApiSpec, TemplateError> {
    let stage_name =
        string(properties.get("StageName")).ok_or_else(|| TemplateError(format!("{logical_id}: missing StageName")))?;
    let binary_media_types = sequence(properties.get("BinaryMediaTypes"))
        .iter()
        .filter_map(Value::as_str)
        .map(|kind| kind.replace("~1", "/"))
        .collect();
    let minimum_compression_size = properties
        .get("MinimumCompressionSize")
        .and_then(|value| reference(value).map(EnvValue::Ref).or_else(|| scalar(value).map(EnvValue::Literal)));
    Ok(ApiSpec { logical_id: logical_id.to_owned(), stage_name, binary_media_types, minimum_compression_size })
}

fn parse_python_function(logical_id: &str, properties: &Value) -> Result<PythonFunctionSpec, TemplateError> {
    let error = |what: &str| TemplateError(format!("{logical_id}: {what}"));
    Ok(PythonFunctionSpec {
        logical_id: logical_id.to_owned(),
        code_uri: string(properties.get("CodeUri")).ok_or_else(|| error("missing CodeUri"))?,
        handler: string(properties.get("Handler")).ok_or_else(|| error("missing Handler"))?,
        timeout_seconds: properties.get("Timeout").and_then(scalar).and_then(|text| text.parse().ok()),
    })
}

/// The resource of `!GetAtt Resource.Arn`.
fn attribute_target(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::Tagged(tagged) if tagged.tag == "GetAtt" => {
            tagged.value.as_str().map(|text| text.trim_end_matches(".Arn").to_owned())
        }
        _ => None,
    }
}

/// `!Ref Name` or `{Ref: Name}`.
fn reference(value: &Value) -> Option<String> {
    match value {
        Value::Tagged(tagged) if tagged.tag == "Ref" => tagged.value.as_str().map(str::to_owned),
        Value::Mapping(map) if map.len() == 1 => string(map.get("Ref")),
        _ => None,
    }
}

fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

fn string(value: Option<&Value>) -> Option<String> {
    value.and_then(Value::as_str).map(str::to_owned)
}

fn sequence(value: Option<&Value>) -> &[Value] {
    value.and_then(Value::as_sequence).map(Vec::as_slice).unwrap_or(&[])
}

fn parse_queue(logical_id: &str, properties: &Value) -> QueueSpec {
    let number = |value: Option<&Value>| value.and_then(scalar).and_then(|text| text.parse::<u32>().ok());
    let redrive = properties.get("RedrivePolicy");
    let target = redrive.and_then(|policy| policy.get("deadLetterTargetArn")).and_then(|arn| match arn {
        // `!GetAtt Queue.Arn`, as serde_norway reads the tag.
        Value::Tagged(tagged) => tagged.value.as_str().map(|text| text.trim_end_matches(".Arn").to_owned()),
        _ => None,
    });
    let max_receive = number(redrive.and_then(|policy| policy.get("maxReceiveCount")));
    QueueSpec {
        logical_id: logical_id.to_owned(),
        visibility_timeout: number(properties.get("VisibilityTimeout")),
        message_retention: number(properties.get("MessageRetentionPeriod")),
        dead_letter: target.zip(max_receive),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_and_schedule_events_are_read_from_the_embedded_template() {
        let template = Template::embedded().unwrap();
        let function = |binary: &str| template.functions.iter().find(|f| f.binary == binary).unwrap();
        let runs = QueueTrigger {
            queue: "RunnerQueue".into(),
            batch_size: 1,
            batching_window_seconds: 0,
            reports_batch_item_failures: true,
        };
        assert_eq!(function("runner-worker").queue_triggers, [runs]);
        assert_eq!(function("webhook-delivery").queue_triggers[0].batch_size, 10);
        let tick = ScheduleTrigger { name: "Tick".into(), expression: "rate(1 minute)".into() };
        assert_eq!(function("scheduler").schedules, [tick]);
        assert_eq!(function("webhook-sweeper").schedules[0].expression, "rate(5 minutes)");
        assert!(function("agents").queue_triggers.is_empty() && function("agents").schedules.is_empty());
    }

    #[test]
    fn references_resolve_to_prefixed_names_and_parameter_defaults() {
        let template = Template::parse(
            r#"
Parameters:
  Ttl: {Type: Number, Default: 60}
Resources:
  Things:
    Type: AWS::DynamoDB::Table
    Properties:
      AttributeDefinitions: [{AttributeName: pk, AttributeType: S}]
      KeySchema: [{AttributeName: pk, KeyType: HASH}]
      TimeToLiveSpecification: {AttributeName: ttl, Enabled: true}
  Fn:
    Type: AWS::Serverless::Function
    Metadata: {BuildProperties: {Binary: fn}}
    Properties:
      Environment:
        Variables: {TABLE: !Ref Things, TTL: !Ref Ttl, MODE: fast, PREFIX: !Sub "${AWS::StackName}/keys/"}
      Events:
        Get: {Type: Api, Properties: {RestApiId: !Ref ThingsApi, Path: /things, Method: GET}}
        Run:
          Type: Api
          Properties: {RestApiId: !Ref ThingsApi, Path: "/things/{id}/run", Method: POST, ResponseTransferMode: RESPONSE_STREAM}
  ThingsApi:
    Type: AWS::Serverless::Api
    Properties: {StageName: Prod, BinaryMediaTypes: [multipart~1form-data]}
"#,
        )
        .unwrap();
        let table = template.table("Things").unwrap();
        assert_eq!(table.ttl_attribute.as_deref(), Some("ttl"));
        let function = template.function("Fn").unwrap();
        let env = template.environment(function, "dev-");
        assert_eq!(env["TABLE"], "dev-Things");
        assert_eq!(env["TTL"], "60");
        assert_eq!(env["MODE"], "fast");
        assert_eq!(env["PREFIX"], "dev/keys/");
        let route = |method: &str, path: &str, streamed| Route {
            api: "ThingsApi".into(),
            method: method.into(),
            path: path.into(),
            streamed,
        };
        assert_eq!(function.routes, [route("GET", "/things", false), route("POST", "/things/{id}/run", true)]);
        let api = template.api("ThingsApi").unwrap();
        assert_eq!(
            (api.stage_name.as_str(), api.binary_media_types.as_slice()),
            ("Prod", &["multipart/form-data".to_owned()][..])
        );
    }

    #[test]
    fn python_functions_are_not_cargo_binaries_and_references_to_them_are_empty_locally() {
        let template = Template::parse(
            r#"
Resources:
  Sandbox:
    Type: AWS::Serverless::Function
    Properties: {Runtime: python3.12, CodeUri: functions/sandbox, Handler: handler.handler, Timeout: 60}
  Runner:
    Type: AWS::Serverless::Function
    Metadata: {BuildProperties: {Binary: runner}}
    Properties:
      Environment:
        Variables: {SANDBOX_FUNCTION: !Ref Sandbox}
"#,
        )
        .unwrap();
        assert_eq!(template.functions.len(), 1);
        assert_eq!(
            template.python_functions,
            vec![PythonFunctionSpec {
                logical_id: "Sandbox".into(),
                code_uri: "functions/sandbox".into(),
                handler: "handler.handler".into(),
                timeout_seconds: Some(60),
            }]
        );
        let env = template.environment(template.function("Runner").unwrap(), "dev-");
        assert_eq!(env["SANDBOX_FUNCTION"], "");
    }

    #[test]
    fn the_project_templates_apis_keep_the_rest_resource_tree_rules_and_stream_whole_functions() {
        let template = Template::embedded().unwrap();
        assert_eq!(template.apis.iter().map(|api| api.logical_id.as_str()).collect::<Vec<_>>(), ["Api", "RunnerApi"]);
        for api in &template.apis {
            let routes = template.routes_of(&api.logical_id).map(|(_, route)| route);
            assert_eq!(crate::rest::resource_tree_problems(routes), Vec::<String>::new(), "{}", api.logical_id);
        }
        // A function streams every answer or none: a buffered integration cannot read a
        // streamed answer, nor the other way round.
        for function in template.functions.iter().filter(|function| !function.routes.is_empty()) {
            let streamed = function.routes.iter().filter(|route| route.streamed).count();
            assert!(streamed == 0 || streamed == function.routes.len(), "{}", function.logical_id);
        }
    }

    #[test]
    fn the_project_template_parses() {
        let template = Template::embedded().unwrap();
        assert!(!template.tables.is_empty());
        assert!(!template.function("MeetingsFunction").unwrap().routes.is_empty());
    }
}
