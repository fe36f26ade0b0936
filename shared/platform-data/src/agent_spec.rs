//! The AgentCreate body: parsing and validation, with the spec's status precedence.
//!
//! - A body that is not a JSON object, or a field of the wrong JSON type, is a *bad request*
//!   (400 `BAD_REQUEST`).
//! - Otherwise a missing required field or a violated constraint is a *validation error*
//!   (422 `VALIDATION_ERROR`).
//!
//! Every problem names its field (`tools[1]`, `a2a_profile.url`), and all problems of the
//! winning kind are reported together. Decisions on what the spec leaves open are in
//! `docs/agent-platform.md`.

use crate::agent_config::AgentConfig;
use crate::ids::{AccountId, AgentId, McpConfigId, ToolId, TypedId};
use crate::secret_headers::{SecretHeadersChange, read_tool_headers};
use crate::validation::{Checker, Expected, check_http_url, check_shape};
pub use crate::validation::{ProblemKind, Problems};
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// Longest `name` and `version`, in characters.
pub const MAX_TEXT_LENGTH: usize = 255;

/// Largest `metadata.timeout` (seconds): a queued run's longest (6 hours). A run executed by the
/// process that started it is clamped lower where it starts.
pub const MAX_METADATA_TIMEOUT_SECONDS: u64 = 6 * 3600;
/// Largest `tool_configs.*.timeout_seconds`.
pub const MAX_TOOL_TIMEOUT_SECONDS: u64 = 300;
/// Largest `metadata.chat_history_limit` (earlier messages given to a run with memory).
pub const MAX_CHAT_HISTORY_LIMIT: u64 = 1000;

/// Agent types an agent can be created with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentType {
    Config,
    A2a,
    Flowtool,
}

impl AgentType {
    /// Every type, in the order validation messages list them.
    pub const ALL: [Self; 3] = [Self::Config, Self::A2a, Self::Flowtool];

    /// The type as bodies, filters and the stored record spell it (its serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Config => "config",
            Self::A2a => "a2a",
            Self::Flowtool => "flowtool",
        }
    }

    /// A type from its name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|agent_type| agent_type.as_str() == name)
    }
}

/// Agent frameworks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Framework {
    Chainlib,
    Graphlib,
    VendorAdk,
}

impl Framework {
    /// Every framework, in the order validation messages list them.
    pub const ALL: [Self; 3] = [Self::Chainlib, Self::Graphlib, Self::VendorAdk];

    /// The framework as bodies, filters and the stored record spell it (its serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chainlib => "chainlib",
            Self::Graphlib => "graphlib",
            Self::VendorAdk => "vendor_adk",
        }
    }

    /// A framework from its name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|framework| framework.as_str() == name)
    }
}

/// `must be one of a, b, c` for the names of `all`.
fn one_of<T: Copy>(all: &[T], name: impl Fn(T) -> &'static str) -> String {
    let names: Vec<&str> = all.iter().map(|value| name(*value)).collect();
    format!("must be one of {}", names.join(", "))
}

/// A valid AgentCreate body.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct AgentSpec {
    #[serde(rename = "type")]
    pub agent_type: AgentType,
    pub name: String,
    pub framework: Option<Framework>,
    pub account_id: Option<AccountId>,
    pub instruction: Option<String>,
    pub version: Option<String>,
    pub description: Option<String>,
    pub agents: Vec<AgentId>,
    pub tools: Vec<ToolId>,
    pub mcps: Vec<McpConfigId>,
    pub metadata: Map<String, Value>,
    pub language_model_id: Option<String>,
    pub provider: Option<String>,
    pub model_name: Option<String>,
    /// Only entries whose key is one of `tools`.
    pub tool_configs: Map<String, Value>,
    pub agent_config: AgentConfig,
    pub a2a_profile: Option<Map<String, Value>>,
}

/// The longest `instruction`, in bytes.
pub const MAX_INSTRUCTION_BYTES: usize = 128 * 1024;

/// Every AgentCreate field and its JSON type.
const FIELDS: [(&str, Expected); 17] = [
    ("type", Expected::String),
    ("name", Expected::String),
    ("framework", Expected::String),
    ("account_id", Expected::String),
    ("instruction", Expected::Text(MAX_INSTRUCTION_BYTES)),
    ("version", Expected::String),
    ("description", Expected::String),
    ("language_model_id", Expected::String),
    ("provider", Expected::String),
    ("model_name", Expected::String),
    ("agents", Expected::StringArray),
    ("tools", Expected::StringArray),
    ("mcps", Expected::StringArray),
    ("metadata", Expected::Object),
    ("tool_configs", Expected::Object),
    ("agent_config", Expected::Object),
    ("a2a_profile", Expected::Object),
];

/// Parses and validates an AgentCreate (or PUT) body.
pub fn parse_agent_spec(body: &[u8]) -> Result<AgentSpec, Problems> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|err| Problems::single(ProblemKind::BadRequest, "body", &format!("malformed JSON: {err}")))?;
    let Value::Object(fields) = value else {
        return Err(Problems::single(ProblemKind::BadRequest, "body", "must be a JSON object"));
    };
    validate_agent_spec(&fields)
}

/// Validates an AgentCreate body already known to be a JSON object.
pub fn validate_agent_spec(body: &Map<String, Value>) -> Result<AgentSpec, Problems> {
    let mut rules = check_shape(body, &FIELDS)?;
    // Null means "not given" for every optional field.
    let present = |name: &str| body.get(name).filter(|v| !v.is_null());
    let text = |name: &str| present(name).and_then(Value::as_str).map(str::to_owned);
    let object = |name: &str| present(name).and_then(Value::as_object).cloned();

    let agent_type = match text("type").as_deref() {
        None => {
            rules.fail("type", "is required");
            None
        }
        Some(name) => {
            let parsed = AgentType::parse(name);
            if parsed.is_none() {
                rules.fail("type", &one_of(&AgentType::ALL, AgentType::as_str));
            }
            parsed
        }
    };
    let mut framework = text("framework").and_then(|name| {
        let parsed = Framework::parse(&name);
        if parsed.is_none() {
            rules.fail("framework", &one_of(&Framework::ALL, Framework::as_str));
        }
        parsed
    });
    match agent_type {
        Some(AgentType::Config) if framework.is_none() && present("framework").is_none() => {
            rules.fail("framework", "is required for config agents")
        }
        Some(AgentType::A2a) if present("framework").is_none() => framework = Some(Framework::Chainlib),
        _ => {}
    }

    let account_id = text("account_id").and_then(|id| rules.uuid("account_id", &id)).map(AccountId::from);
    let version = text("version");
    if version.as_ref().is_some_and(|v| v.chars().count() > MAX_TEXT_LENGTH) {
        rules.fail("version", "must be at most 255 characters");
    }
    let agents: Vec<AgentId> = id_list(&mut rules, present("agents"), "agents");
    let tools: Vec<ToolId> = id_list(&mut rules, present("tools"), "tools");
    let mcps: Vec<McpConfigId> = id_list(&mut rules, present("mcps"), "mcps");

    let agent_config = AgentConfig::new(object("agent_config").unwrap_or_default());
    let a2a_profile = object("a2a_profile");
    if let Some(profile) = &a2a_profile {
        match profile.get("url") {
            None | Some(Value::Null) => rules.fail("a2a_profile.url", "is required"),
            Some(Value::String(url)) => {
                if let Err(issue) = check_http_url(url) {
                    rules.fail("a2a_profile.url", issue);
                }
            }
            Some(_) => rules.fail("a2a_profile.url", "must be a string"),
        }
    }

    // Rule 2: an a2a agent without a name takes it from its populated profile.
    let populated_profile = a2a_profile.as_ref().filter(|p| p.get("url").and_then(Value::as_str).is_some());
    let name = match (text("name"), agent_type) {
        (Some(name), _) => Some(name),
        (None, Some(AgentType::A2a)) => match populated_profile.and_then(profile_name) {
            Some(name) => Some(name),
            None => {
                rules.fail("name", "is required unless a2a_profile is populated");
                None
            }
        },
        (None, Some(_)) => {
            rules.fail("name", "is required");
            None
        }
        (None, None) => None,
    };
    if let Some(name) = &name {
        if name.trim().is_empty() {
            rules.fail("name", "must not be empty");
        } else if name.chars().count() > MAX_TEXT_LENGTH {
            rules.fail("name", "must be at most 255 characters");
        }
    }

    // Rule 1: language model selectors.
    let (provider, model_name) = (text("provider"), text("model_name"));
    match (&provider, &model_name) {
        (Some(_), None) => rules.fail("model_name", "must be sent together with provider"),
        (None, Some(_)) => rules.fail("provider", "must be sent together with model_name"),
        _ => {}
    }
    let mechanisms = [
        text("language_model_id").is_some(),
        provider.is_some() || model_name.is_some(),
        agent_config.lm_provider().is_some(),
    ]
    .iter()
    .filter(|given| **given)
    .count();
    if mechanisms > 1 {
        rules.fail(
            "language_model_id",
            "name the language model by one mechanism only: language_model_id, provider + model_name, or agent_config.lm_provider",
        );
    } else if mechanisms == 0 && agent_type == Some(AgentType::Config) {
        rules.fail(
            "language_model_id",
            "a config agent needs a language model: language_model_id, provider + model_name, or agent_config.lm_provider",
        );
    }

    agent_config.check(&mut rules);
    // Rule 3: flowtool agents carry their flow.
    if agent_type == Some(AgentType::Flowtool) {
        agent_config.check_flow(&mut rules);
    }

    // tool_configs entries for tools the agent does not use are ignored.
    let tool_configs: Map<String, Value> = object("tool_configs")
        .unwrap_or_default()
        .into_iter()
        .filter(|(key, _)| key.parse::<ToolId>().is_ok_and(|id| tools.contains(&id)))
        .map(|(key, value)| (key.to_lowercase(), value))
        .collect();
    let metadata = object("metadata").unwrap_or_default();
    check_run_settings(&mut rules, &metadata, &tool_configs);

    if !rules.problems.is_empty() {
        return Err(Problems { kind: ProblemKind::Validation, fields: rules.problems });
    }
    let (Some(agent_type), Some(name)) = (agent_type, name) else {
        // Unreachable: both missing cases recorded a problem above.
        return Err(Problems::single(ProblemKind::Validation, "type", "is required"));
    };
    Ok(AgentSpec {
        agent_type,
        name,
        framework,
        account_id,
        instruction: text("instruction"),
        version,
        description: text("description"),
        agents,
        tools,
        mcps,
        metadata,
        language_model_id: text("language_model_id"),
        provider,
        model_name,
        tool_configs,
        agent_config,
        a2a_profile,
    })
}

/// The numbers a run reads from the free-form `metadata` and `tool_configs`: each within its
/// bounds (null is "not given"), so what one tenant stores is a setting, never a value a shared
/// function must survive. Records stored before these checks are read defensively where used.
fn check_run_settings(rules: &mut Checker, metadata: &Map<String, Value>, tool_configs: &Map<String, Value>) {
    let seconds_within = |value: &Value, max: u64| value.as_f64().is_some_and(|t| t > 0.0 && t <= max as f64);
    if let Some(timeout) = metadata.get("timeout").filter(|value| !value.is_null())
        && !seconds_within(timeout, MAX_METADATA_TIMEOUT_SECONDS)
    {
        rules.fail(
            "metadata.timeout",
            &format!("must be a number of seconds above 0 and at most {MAX_METADATA_TIMEOUT_SECONDS}"),
        );
    }
    if let Some(limit) = metadata.get("chat_history_limit").filter(|value| !value.is_null())
        && crate::validation::whole_number(limit).is_none_or(|limit| limit > MAX_CHAT_HISTORY_LIMIT)
    {
        rules
            .fail("metadata.chat_history_limit", &format!("must be a whole number from 0 to {MAX_CHAT_HISTORY_LIMIT}"));
    }
    for (tool, entry) in tool_configs {
        if let Some(timeout) = entry.get("timeout_seconds").filter(|value| !value.is_null())
            && !seconds_within(timeout, MAX_TOOL_TIMEOUT_SECONDS)
        {
            rules.fail(
                &format!("tool_configs.{tool}.timeout_seconds"),
                &format!("must be a number of seconds above 0 and at most {MAX_TOOL_TIMEOUT_SECONDS}"),
            );
        }
    }
}

/// The ids of the list `name` (`items`), each checked (`tools[1]` must be a UUID).
fn id_list<Id: TypedId>(rules: &mut Checker, items: Option<&Value>, name: &str) -> Vec<Id> {
    let Some(Value::Array(items)) = items else { return Vec::new() };
    items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| rules.uuid(&format!("{name}[{i}]"), item.as_str().unwrap_or_default()))
        .map(Id::from)
        .collect()
}

/// What a `tool_configs` entry says about its tool's secrets: its secret headers and its secret
/// arguments (`secret_arguments`: absent keeps them, `null` removes them, an object of strings
/// replaces them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolConfigSecretChanges {
    pub headers: SecretHeadersChange,
    pub arguments: SecretHeadersChange,
}

/// Takes the secrets out of the `tool_configs` entries (`headers` keep only the plain ones,
/// lower-cased; `secret_headers`, `secret_header_names`, `secret_arguments` and
/// `secret_argument_names` leave the record) and returns what each entry says about them, by
/// tool id. Entries that are not objects carry none.
pub fn take_tool_config_secrets(spec: &mut AgentSpec) -> Result<BTreeMap<ToolId, ToolConfigSecretChanges>, Problems> {
    let mut changes = BTreeMap::new();
    let mut failed: Option<Problems> = None;
    for (key, entry) in &mut spec.tool_configs {
        let (Ok(tool_id), Value::Object(entry)) = (key.parse::<ToolId>(), entry) else { continue };
        let read = read_tool_headers(entry, &format!("tool_configs.{key}."))
            .and_then(|headers| Ok((headers, read_secret_arguments(entry, &format!("tool_configs.{key}."))?)));
        match read {
            Ok((read, arguments)) => {
                for field in ["secret_headers", "secret_header_names", "secret_arguments", "secret_argument_names"] {
                    entry.remove(field);
                }
                if entry.contains_key("headers") || !read.headers.is_empty() {
                    entry.insert("headers".into(), json!(read.headers));
                }
                changes.insert(tool_id, ToolConfigSecretChanges { headers: read.secret, arguments });
            }
            // Bad requests (400) win over validation errors (422), as for the whole body.
            Err(problems) => match &mut failed {
                Some(all) if all.kind == problems.kind => all.fields.extend(problems.fields),
                Some(all) if problems.kind == ProblemKind::BadRequest => *all = problems,
                Some(_) => {}
                None => failed = Some(problems),
            },
        }
    }
    failed.map_or(Ok(changes), Err)
}

/// Longest name of a secret argument.
pub const MAX_SECRET_ARGUMENT_NAME: usize = 128;

/// Reads `secret_arguments` of a `tool_configs` entry (named under `prefix`): 400 when it is not
/// an object of strings, 422 for an empty or long name or one also in `arguments`.
fn read_secret_arguments(entry: &Map<String, Value>, prefix: &str) -> Result<SecretHeadersChange, Problems> {
    let given = match entry.get("secret_arguments") {
        None => return Ok(SecretHeadersChange::Keep),
        Some(Value::Null) => return Ok(SecretHeadersChange::Remove),
        Some(value) => value,
    };
    let mut types = Checker::default();
    Expected::StringMap.check(&mut types, &format!("{prefix}secret_arguments"), given);
    if !types.problems.is_empty() {
        return Err(Problems { kind: ProblemKind::BadRequest, fields: types.problems });
    }
    let plain = entry.get("arguments").and_then(Value::as_object);
    let mut rules = Checker::default();
    let mut arguments = BTreeMap::new();
    for (name, value) in given.as_object().into_iter().flatten() {
        let field = format!("{prefix}secret_arguments.{name}");
        if name.is_empty() || name.len() > MAX_SECRET_ARGUMENT_NAME {
            rules.fail(&field, &format!("must be a name of 1 to {MAX_SECRET_ARGUMENT_NAME} bytes"));
        } else if plain.is_some_and(|plain| plain.contains_key(name)) {
            rules.fail(&field, "is also in arguments");
        } else if let Some(value) = value.as_str() {
            arguments.insert(name.clone(), value.to_owned());
        }
    }
    if !rules.problems.is_empty() {
        return Err(Problems { kind: ProblemKind::Validation, fields: rules.problems });
    }
    Ok(SecretHeadersChange::Set(arguments))
}

/// Names of the secret headers of a tool's `tool_configs` entry (`secret_header_names`).
pub fn tool_config_secret_names(spec: &AgentSpec, tool_id: ToolId) -> Vec<String> {
    names_in(spec, tool_id, "secret_header_names")
}

/// Names of the secret arguments of a tool's `tool_configs` entry (`secret_argument_names`).
pub fn tool_config_secret_argument_names(spec: &AgentSpec, tool_id: ToolId) -> Vec<String> {
    names_in(spec, tool_id, "secret_argument_names")
}

fn names_in(spec: &AgentSpec, tool_id: ToolId, field: &str) -> Vec<String> {
    let names = spec.tool_configs.get(&tool_id.to_string()).and_then(|entry| entry.get(field));
    names.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect()
}

/// Whether any `tool_configs` entry of `spec` has secret headers or secret arguments.
pub fn has_tool_config_secrets(spec: &AgentSpec) -> bool {
    spec.tools.iter().any(|tool_id| {
        !tool_config_secret_names(spec, *tool_id).is_empty()
            || !tool_config_secret_argument_names(spec, *tool_id).is_empty()
    })
}

/// An agent's `tool_configs` secrets as stored in Secrets Manager, each bound to where its tool
/// sends it (`secret_headers::encode_secret_headers`): per tool id, its secret headers, and its
/// secret arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredToolConfigSecrets {
    pub headers: BTreeMap<ToolId, String>,
    pub arguments: BTreeMap<ToolId, String>,
}

/// The key of a tool's secret arguments in the stored object (a tool id alone is its headers':
/// the form before secret arguments existed).
const ARGUMENTS_KEY: &str = "arguments:";

impl StoredToolConfigSecrets {
    pub fn is_empty(&self) -> bool {
        self.headers.is_empty() && self.arguments.is_empty()
    }

    /// One JSON object: `{tool_id}` → headers, `arguments:{tool_id}` → arguments.
    pub fn encode(&self) -> String {
        let entries = self
            .headers
            .iter()
            .map(|(id, stored)| (id.to_string(), stored))
            .chain(self.arguments.iter().map(|(id, stored)| (format!("{ARGUMENTS_KEY}{id}"), stored)));
        serde_json::to_string(&entries.collect::<BTreeMap<String, &String>>()).unwrap_or_default()
    }

    /// Reads what `encode` wrote; `None` when it is not in that form.
    pub fn decode(stored: &str) -> Option<Self> {
        let entries: BTreeMap<String, String> = serde_json::from_str(stored).ok()?;
        let mut secrets = Self::default();
        for (key, value) in entries {
            match key.strip_prefix(ARGUMENTS_KEY) {
                Some(id) => secrets.arguments.insert(id.parse().ok()?, value),
                None => secrets.headers.insert(key.parse().ok()?, value),
            };
        }
        Some(secrets)
    }
}

/// An a2a profile's `name`, else its URL's host.
fn profile_name(profile: &Map<String, Value>) -> Option<String> {
    if let Some(name) = profile.get("name").and_then(Value::as_str).filter(|n| !n.trim().is_empty()) {
        return Some(name.to_owned());
    }
    let url = url::Url::parse(profile.get("url")?.as_str()?).ok()?;
    url.host_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent_config::MAX_RECURSION_LIMIT;
    use serde_json::json;
    use std::collections::BTreeMap;

    const TOOL: &str = "7d0f7a52-3f4e-4a53-9b7a-3a8f6f0b9c11";

    fn parse(body: Value) -> Result<AgentSpec, Problems> {
        parse_agent_spec(body.to_string().as_bytes())
    }

    fn problems(body: Value) -> (ProblemKind, BTreeMap<String, String>) {
        let problems = parse(body).expect_err("expected problems");
        (problems.kind, problems.fields)
    }

    fn config(extra: Value) -> Value {
        let mut body =
            json!({"type": "config", "name": "Helper", "framework": "chainlib", "language_model_id": "lm-1"});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    }

    #[test]
    fn a_minimal_config_agent_is_valid() {
        let spec = parse(config(json!({}))).unwrap();
        assert_eq!((spec.agent_type, spec.framework), (AgentType::Config, Some(Framework::Chainlib)));
        assert_eq!(spec.name, "Helper");
        assert!(spec.tools.is_empty() && spec.metadata.is_empty());
    }

    #[test]
    fn malformed_json_and_wrong_types_are_bad_requests_even_with_other_violations() {
        assert_eq!(parse_agent_spec(b"{not json").unwrap_err().kind, ProblemKind::BadRequest);
        assert_eq!(parse_agent_spec(b"[1]").unwrap_err().kind, ProblemKind::BadRequest);
        let (kind, fields) =
            problems(json!({"type": 5, "name": ["x"], "tools": ["a", 3], "metadata": "m", "framework": "nope"}));
        assert_eq!(kind, ProblemKind::BadRequest);
        assert_eq!(fields.keys().collect::<Vec<_>>(), ["metadata", "name", "tools[1]", "type"]);
    }

    #[test]
    fn missing_and_invalid_values_are_validation_errors_naming_fields() {
        let (kind, fields) = problems(
            json!({"framework": "nope", "version": "v".repeat(256), "tools": ["not-a-uuid", TOOL], "color": "red"}),
        );
        assert_eq!(kind, ProblemKind::Validation);
        assert_eq!(fields["type"], "is required");
        assert_eq!(fields["framework"], "must be one of chainlib, graphlib, vendor_adk");
        assert_eq!(fields["version"], "must be at most 255 characters");
        assert_eq!(fields["tools[0]"], "must be a UUID");
        assert_eq!(fields["color"], "unknown field");
        assert!(!fields.contains_key("tools[1]"));
    }

    #[test]
    fn type_and_framework_names_are_their_serde_names() {
        for agent_type in AgentType::ALL {
            assert_eq!(json!(agent_type), json!(agent_type.as_str()));
            assert_eq!(AgentType::parse(agent_type.as_str()), Some(agent_type));
        }
        for framework in Framework::ALL {
            assert_eq!(json!(framework), json!(framework.as_str()));
            assert_eq!(Framework::parse(framework.as_str()), Some(framework));
        }
        assert_eq!(problems(json!({"type": "code"})).1["type"], "must be one of config, a2a, flowtool");
    }

    #[test]
    fn name_rules() {
        assert_eq!(problems(config(json!({"name": null}))).1["name"], "is required");
        assert_eq!(problems(config(json!({"name": "  "}))).1["name"], "must not be empty");
        assert_eq!(problems(config(json!({"name": "é".repeat(256)}))).1["name"], "must be at most 255 characters");
        assert!(parse(config(json!({"name": "é".repeat(255)}))).is_ok());
    }

    #[test]
    fn config_agents_need_a_framework_and_exactly_one_language_model_mechanism() {
        let mut no_framework = config(json!({}));
        no_framework.as_object_mut().unwrap().remove("framework");
        assert_eq!(problems(no_framework).1["framework"], "is required for config agents");

        let mut none = config(json!({}));
        none.as_object_mut().unwrap().remove("language_model_id");
        assert!(problems(none.clone()).1.contains_key("language_model_id"));
        assert!(parse(config(json!({"language_model_id": null, "provider": "openai", "model_name": "gpt"}))).is_ok());
        assert!(parse(config(json!({"language_model_id": null, "agent_config": {"lm_provider": "x"}}))).is_ok());
        for two in [json!({"provider": "openai", "model_name": "gpt"}), json!({"agent_config": {"lm_provider": "x"}})] {
            assert!(problems(config(two)).1["language_model_id"].contains("one mechanism only"));
        }
        assert_eq!(
            problems(config(json!({"language_model_id": null, "provider": "openai"}))).1["model_name"],
            "must be sent together with provider"
        );
        assert_eq!(
            problems(config(json!({"language_model_id": null, "model_name": "gpt"}))).1["provider"],
            "must be sent together with model_name"
        );
    }

    #[test]
    fn a2a_agents_take_a_name_or_a_populated_profile_and_default_to_chainlib() {
        let spec = parse(json!({"type": "a2a", "a2a_profile": {"url": "https://agents.example.test/a2a"}})).unwrap();
        assert_eq!(spec.name, "agents.example.test");
        assert_eq!(spec.framework, Some(Framework::Chainlib));
        let named = parse(json!({"type": "a2a", "a2a_profile": {"url": "http://x.test", "name": "Remote"}})).unwrap();
        assert_eq!(named.name, "Remote");
        assert!(parse(json!({"type": "a2a", "name": "Plain"})).is_ok());
        assert_eq!(problems(json!({"type": "a2a"})).1["name"], "is required unless a2a_profile is populated");
        for (url, issue) in [
            (json!("ftp://x.test"), "must use http or https"),
            (json!("not-a-url"), "must be an absolute URL"),
            (json!("http://x.test/a b"), "must not contain spaces or control characters"),
            (json!(null), "is required"),
        ] {
            assert_eq!(
                problems(json!({"type": "a2a", "name": "A", "a2a_profile": {"url": url}})).1["a2a_profile.url"],
                issue
            );
        }
    }

    #[test]
    fn max_recursion_limit_is_bounded() {
        let limit = |value: Value| config(json!({"agent_config": {"max_recursion_limit": value}}));
        assert!(parse(limit(json!(MAX_RECURSION_LIMIT))).is_ok());
        for too_many in [json!(MAX_RECURSION_LIMIT + 1), json!(u32::MAX), json!(1e300)] {
            let (kind, fields) = problems(limit(too_many));
            assert_eq!(kind, ProblemKind::Validation);
            assert_eq!(fields["agent_config.max_recursion_limit"], "must be at most 1000");
        }
    }

    #[test]
    fn flowtool_agents_carry_a_flow_id() {
        assert!(
            parse(json!({"type": "flowtool", "name": "F", "agent_config": {"flowtool": {"flow_id": "abc"}}})).is_ok()
        );
        assert_eq!(
            problems(json!({"type": "flowtool", "name": "F"})).1["agent_config.flowtool.flow_id"],
            "is required for flowtool agents"
        );
        let flowtool = |extra: Value| {
            let mut flowtool = json!({"flow_id": "abc"});
            flowtool.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            json!({"type": "flowtool", "name": "F", "agent_config": {"flowtool": flowtool}})
        };
        let typed = json!({"base_url": "http://flows.test/", "input_type": "text", "output_type": "chat"});
        assert!(parse(flowtool(typed)).is_ok());
        let (kind, fields) = problems(flowtool(json!({"base_url": "ftp://x", "input_type": "any", "output_type": 1})));
        assert_eq!(kind, ProblemKind::Validation);
        assert_eq!(fields["agent_config.flowtool.input_type"], "must be one of chat, text");
        assert_eq!(fields["agent_config.flowtool.output_type"], "must be one of chat, text");
        assert!(fields.contains_key("agent_config.flowtool.base_url"), "{fields:?}");
    }

    #[test]
    fn the_numbers_a_run_reads_from_metadata_and_tool_configs_are_checked_naming_their_field() {
        let body = |metadata: Value, entry: Value| {
            config(json!({"tools": [TOOL], "tool_configs": {TOOL: entry}, "metadata": metadata}))
        };
        for (metadata, entry) in [
            (json!({"timeout": 21600, "chat_history_limit": 1000}), json!({"timeout_seconds": 300})),
            (json!({"timeout": 0.5, "chat_history_limit": 0}), json!({"timeout_seconds": 0.25})),
            (json!({"timeout": null, "chat_history_limit": 10.0}), json!({"timeout_seconds": null})),
        ] {
            assert!(parse(body(metadata.clone(), entry.clone())).is_ok(), "{metadata} {entry}");
        }
        let timeout = "must be a number of seconds above 0 and at most 21600";
        let limit = "must be a whole number from 0 to 1000";
        let tool_timeout = "must be a number of seconds above 0 and at most 300";
        let tool_field = format!("tool_configs.{TOOL}.timeout_seconds");
        for (metadata, entry) in [
            (json!({"timeout": 1e20, "chat_history_limit": 1001}), json!({"timeout_seconds": 1e20})),
            (json!({"timeout": 0, "chat_history_limit": -1}), json!({"timeout_seconds": 0})),
            (json!({"timeout": "60", "chat_history_limit": 2.5}), json!({"timeout_seconds": "5"})),
            (json!({"timeout": -1, "chat_history_limit": "10"}), json!({"timeout_seconds": 300.5})),
        ] {
            let (kind, fields) = problems(body(metadata.clone(), entry.clone()));
            assert_eq!(kind, ProblemKind::Validation, "{metadata}");
            assert_eq!(fields["metadata.timeout"], timeout, "{metadata}");
            assert_eq!(fields["metadata.chat_history_limit"], limit, "{metadata}");
            assert_eq!(fields[&tool_field], tool_timeout, "{entry}");
        }
    }

    #[test]
    fn tool_configs_keep_only_entries_of_listed_tools_and_metadata_keeps_extra_properties() {
        let other = "0b0f7a52-3f4e-4a53-9b7a-3a8f6f0b9c22";
        let spec = parse(config(json!({
            "tools": [TOOL],
            "tool_configs": {TOOL: {"retries": 2}, other: {"x": 1}, "junk": {}},
            "metadata": {"display_name": "H", "is_shown": true, "anything": [1, 2]}
        })))
        .unwrap();
        assert_eq!(spec.tool_configs.keys().collect::<Vec<_>>(), [TOOL]);
        assert_eq!(spec.metadata["anything"], json!([1, 2]));
    }

    #[test]
    fn tool_configs_secret_headers_leave_the_record() {
        let mut spec = parse(config(json!({"tools": [TOOL], "tool_configs": {TOOL: {"headers": {"X-API-Key": "k",
            "X-Team": "t"}, "secret_header_names": ["stale"], "arguments": {"a": 1}}}})))
        .unwrap();
        let changes = take_tool_config_secrets(&mut spec).unwrap();
        let tool: ToolId = TOOL.parse().unwrap();
        let headers = SecretHeadersChange::Set(BTreeMap::from([("x-api-key".into(), "k".into())]));
        assert_eq!(changes[&tool].headers, headers);
        assert_eq!(changes[&tool].arguments, SecretHeadersChange::Keep);
        assert_eq!(spec.tool_configs[TOOL], json!({"headers": {"x-team": "t"}, "arguments": {"a": 1}}));
        let mut bad = parse(config(json!({"tools": [TOOL], "tool_configs": {TOOL: {"headers": {"X": 1}}}}))).unwrap();
        let problems = take_tool_config_secrets(&mut bad).unwrap_err();
        assert_eq!(problems.kind, ProblemKind::BadRequest);
        assert!(problems.fields.contains_key(&format!("tool_configs.{TOOL}.headers.X")));
    }

    #[test]
    fn tool_configs_secret_arguments_leave_the_record_and_are_checked() {
        let mut spec = parse(config(json!({"tools": [TOOL], "tool_configs": {TOOL: {"arguments": {"city": "Oslo"},
            "secret_arguments": {"api_key": "sk-1"}, "secret_argument_names": ["stale"]}}})))
        .unwrap();
        let changes = take_tool_config_secrets(&mut spec).unwrap();
        let tool: ToolId = TOOL.parse().unwrap();
        assert_eq!(
            changes[&tool].arguments,
            SecretHeadersChange::Set(BTreeMap::from([("api_key".into(), "sk-1".into())]))
        );
        assert_eq!(spec.tool_configs[TOOL], json!({"arguments": {"city": "Oslo"}}));
        let mut removing =
            parse(config(json!({"tools": [TOOL], "tool_configs": {TOOL: {"secret_arguments": null}}}))).unwrap();
        assert_eq!(take_tool_config_secrets(&mut removing).unwrap()[&tool].arguments, SecretHeadersChange::Remove);
        for (body, kind, field) in [
            (json!({"secret_arguments": {"k": 1}}), ProblemKind::BadRequest, "secret_arguments.k"),
            (json!({"secret_arguments": ["k"]}), ProblemKind::BadRequest, "secret_arguments"),
            (json!({"secret_arguments": {"": "v"}}), ProblemKind::Validation, "secret_arguments."),
            (
                json!({"arguments": {"k": 1}, "secret_arguments": {"k": "v"}}),
                ProblemKind::Validation,
                "secret_arguments.k",
            ),
        ] {
            let mut bad = parse(config(json!({"tools": [TOOL], "tool_configs": {TOOL: body}}))).unwrap();
            let problems = take_tool_config_secrets(&mut bad).unwrap_err();
            assert_eq!(problems.kind, kind, "{body}");
            assert!(
                problems.fields.contains_key(&format!("tool_configs.{TOOL}.{field}")),
                "{body}: {:?}",
                problems.fields
            );
        }
        // The stored form keeps both kinds apart, and reads what was stored before it had arguments.
        let secrets = StoredToolConfigSecrets {
            headers: BTreeMap::from([(tool, "h".to_owned())]),
            arguments: BTreeMap::from([(tool, "a".to_owned())]),
        };
        assert_eq!(StoredToolConfigSecrets::decode(&secrets.encode()), Some(secrets));
        let before = StoredToolConfigSecrets::decode(&format!("{{\"{TOOL}\": \"h\"}}")).unwrap();
        assert_eq!((before.headers.len(), before.arguments.len()), (1, 0));
        assert_eq!(StoredToolConfigSecrets::decode("{\"x\": \"h\"}"), None);
    }
}
