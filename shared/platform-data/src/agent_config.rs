//! An agent's `agent_config`: kept as it was sent (the API returns it, and the record stores it,
//! as given) and read once into the settings the platform uses: the flow of a flowtool agent,
//! the language model `lm_provider` names, the turn limit, planning, tool output sharing and
//! memory. This module is the only reader of its keys.
//!
//! Reading is lenient: a setting of the wrong JSON type reads as absent, so agents stored before
//! a rule existed run as they did; `check` and `check_flow` are the rules a body must pass.

use crate::validation::{Checker, check_base_url};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Number, Value};

/// The values of `agent_config.flowtool.input_type` / `output_type`: Langflow's run types
/// (`flow_server::IoType`).
pub const FLOW_IO_TYPES: [&str; 2] = ["chat", "text"];

/// The largest `agent_config.max_recursion_limit` (model turns of one run): a run's turns are
/// paid by the platform's workers, so an agent cannot ask for unbounded ones.
pub const MAX_RECURSION_LIMIT: u64 = 1000;

/// `agent_config`: the JSON object as stored, and what the platform reads from it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentConfig {
    raw: Map<String, Value>,
    flowtool: Option<FlowtoolConfig>,
    lm_provider: Option<LmProvider>,
    max_recursion_limit: Option<Number>,
    planning: bool,
    tool_output_sharing: bool,
    memory: bool,
}

/// `agent_config.flowtool`: where a flowtool agent's flow is and how it runs. Each field is its
/// string value (absent when it is not a string); a sync writes them in this order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FlowtoolConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint_name: Option<String>,
    /// The flow server it was synced from (agents synced before it was kept have none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// `chat` or `text` (`chat` when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_type: Option<String>,
    /// `chat` or `text` (`chat` when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_type: Option<String>,
}

/// `agent_config.lm_provider`: one of the ways an agent names its language model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LmProvider {
    /// A string: a model's name or id.
    NameOrId(String),
    /// An object of `provider` and `model_name` (a missing or non-string one reads as empty).
    Pair { provider: String, model_name: String },
    /// Any other value: it counts as naming a model (one mechanism only) but names none.
    Unreadable,
}

impl AgentConfig {
    /// Reads the settings of `raw`, which is kept as it is.
    pub fn new(raw: Map<String, Value>) -> Self {
        let flag = |key: &str| raw.get(key).and_then(Value::as_bool).unwrap_or(false);
        Self {
            flowtool: raw.get("flowtool").and_then(Value::as_object).map(FlowtoolConfig::read),
            lm_provider: raw.get("lm_provider").and_then(LmProvider::read),
            max_recursion_limit: match raw.get("max_recursion_limit") {
                Some(Value::Number(limit)) => Some(limit.clone()),
                _ => None,
            },
            planning: flag("planning"),
            tool_output_sharing: flag("tool_output_sharing"),
            memory: memory_is_on(raw.get("memory")),
            raw,
        }
    }

    /// A flowtool agent's `agent_config`: its flow and nothing else.
    pub fn for_flow(flowtool: &FlowtoolConfig) -> Self {
        let flowtool = serde_json::to_value(flowtool).unwrap_or_default();
        Self::new(Map::from_iter([("flowtool".to_owned(), flowtool)]))
    }

    /// The object as stored.
    pub fn as_map(&self) -> &Map<String, Value> {
        &self.raw
    }

    /// `flowtool`, when it is an object.
    pub fn flowtool(&self) -> Option<&FlowtoolConfig> {
        self.flowtool.as_ref()
    }

    /// Writes the fields `flowtool` has into the stored `flowtool` object (its other keys are
    /// kept); `false`, and nothing changes, when there is no such object.
    pub fn set_flowtool(&mut self, flowtool: &FlowtoolConfig) -> bool {
        let Some(Value::Object(stored)) = self.raw.get_mut("flowtool") else { return false };
        let Ok(Value::Object(fields)) = serde_json::to_value(flowtool) else { return false };
        stored.extend(fields);
        *self = Self::new(std::mem::take(&mut self.raw));
        true
    }

    /// `lm_provider`, when given (not null).
    pub fn lm_provider(&self) -> Option<&LmProvider> {
        self.lm_provider.as_ref()
    }

    /// The model turns a run may take (`max_recursion_limit`) when it is a positive whole number,
    /// held to `MAX_RECURSION_LIMIT` (agents stored before the bound was validated included).
    pub fn max_turns(&self) -> Option<u32> {
        let turns = self.max_recursion_limit.clone().map(serde_json::Value::Number);
        let turns = crate::validation::whole_number(&turns?).filter(|turns| *turns > 0)?;
        Some(u32::try_from(turns.min(MAX_RECURSION_LIMIT)).unwrap_or(u32::MAX))
    }

    /// Whether a run asks for a plan first (`planning: true`).
    pub fn planning(&self) -> bool {
        self.planning
    }

    /// Whether later tool calls see earlier outputs (`tool_output_sharing: true`).
    pub fn tool_output_sharing(&self) -> bool {
        self.tool_output_sharing
    }

    /// Whether the agent keeps memory: `memory` is any identifier but an empty one or `none`,
    /// `true`, or an object.
    pub fn keeps_memory(&self) -> bool {
        self.memory
    }

    /// The rules every body's `agent_config` must pass: a `max_recursion_limit` of at most
    /// `MAX_RECURSION_LIMIT`.
    pub fn check(&self, rules: &mut Checker) {
        if self
            .max_recursion_limit
            .as_ref()
            .and_then(Number::as_f64)
            .is_some_and(|turns| turns > MAX_RECURSION_LIMIT as f64)
        {
            rules.fail("agent_config.max_recursion_limit", &format!("must be at most {MAX_RECURSION_LIMIT}"));
        }
    }

    /// The rules of a flowtool agent's `flowtool`: a non-empty `flow_id`; `base_url`, when given,
    /// a base URL; `input_type` and `output_type`, when given, one of `FLOW_IO_TYPES`.
    pub fn check_flow(&self, rules: &mut Checker) {
        let flow_id = self.flowtool().and_then(|flowtool| flowtool.flow_id.as_deref());
        if flow_id.is_none_or(|id| id.trim().is_empty()) {
            rules.fail("agent_config.flowtool.flow_id", "is required for flowtool agents");
        }
        // A value of the wrong type is absent from the settings, so these read what was sent.
        let stored = self.raw.get("flowtool");
        let given = |key: &str| stored.and_then(|flowtool| flowtool.get(key)).filter(|value| !value.is_null());
        if let Some(base_url) = given("base_url") {
            let issue = base_url.as_str().map_or(Err("must be a string"), check_base_url);
            if let Err(issue) = issue {
                rules.fail("agent_config.flowtool.base_url", issue);
            }
        }
        for key in ["input_type", "output_type"] {
            if given(key).is_some_and(|value| !value.as_str().is_some_and(|name| FLOW_IO_TYPES.contains(&name))) {
                rules.fail(&format!("agent_config.flowtool.{key}"), "must be one of chat, text");
            }
        }
    }
}

impl FlowtoolConfig {
    fn read(flowtool: &Map<String, Value>) -> Self {
        let text = |key: &str| flowtool.get(key).and_then(Value::as_str).map(str::to_owned);
        Self {
            flow_id: text("flow_id"),
            endpoint_name: text("endpoint_name"),
            base_url: text("base_url"),
            input_type: text("input_type"),
            output_type: text("output_type"),
        }
    }
}

impl LmProvider {
    fn read(value: &Value) -> Option<Self> {
        let text = |value: Option<&Value>| value.and_then(Value::as_str).unwrap_or_default().to_owned();
        match value {
            Value::Null => None,
            Value::String(name) => Some(Self::NameOrId(name.clone())),
            Value::Object(pair) => {
                Some(Self::Pair { provider: text(pair.get("provider")), model_name: text(pair.get("model_name")) })
            }
            _ => Some(Self::Unreadable),
        }
    }
}

fn memory_is_on(memory: Option<&Value>) -> bool {
    match memory {
        Some(Value::String(kind)) => !kind.trim().is_empty() && !kind.eq_ignore_ascii_case("none"),
        Some(Value::Bool(on)) => *on,
        Some(Value::Object(_)) => true,
        _ => false,
    }
}

impl From<Map<String, Value>> for AgentConfig {
    fn from(raw: Map<String, Value>) -> Self {
        Self::new(raw)
    }
}

/// Stored and answered as the object it was sent as.
impl Serialize for AgentConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for AgentConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Map::deserialize(deserializer).map(Self::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(value: Value) -> AgentConfig {
        AgentConfig::new(value.as_object().cloned().unwrap_or_default())
    }

    #[test]
    fn memory_is_on_for_any_identifier() {
        for on in [json!({"memory": "buffer"}), json!({"memory": true}), json!({"memory": {"kind": "x"}})] {
            assert!(config(on).keeps_memory());
        }
        for off in [
            json!({}),
            json!({"memory": null}),
            json!({"memory": ""}),
            json!({"memory": "none"}),
            json!({"memory": false}),
        ] {
            assert!(!config(off).keeps_memory());
        }
    }

    #[test]
    fn settings_of_the_wrong_type_read_as_absent_and_the_object_round_trips() {
        let sent = json!({"flowtool": {"flow_id": 5, "base_url": "http://flows.test", "extra": [1]},
            "planning": "yes", "max_recursion_limit": 2000, "lm_provider": 7, "custom": {"a": 1}});
        let read = config(sent.clone());
        let flowtool = read.flowtool().expect("an object");
        assert_eq!((flowtool.flow_id.as_deref(), flowtool.base_url.as_deref()), (None, Some("http://flows.test")));
        assert!(!read.planning() && !read.tool_output_sharing());
        assert_eq!(read.max_turns(), Some(1000));
        assert_eq!(read.lm_provider(), Some(&LmProvider::Unreadable));
        assert_eq!(json!(read), sent);
        assert_eq!(serde_json::from_value::<AgentConfig>(sent).unwrap(), read);
    }

    #[test]
    fn max_turns_are_positive_whole_numbers() {
        for (limit, turns) in [(json!(5), Some(5)), (json!(0), None), (json!(-1), None), (json!(2.5), None)] {
            assert_eq!(config(json!({"max_recursion_limit": limit})).max_turns(), turns);
        }
    }

    #[test]
    fn setting_the_flow_keeps_the_other_keys_in_place() {
        let mut read = config(json!({"flowtool": {"flow_id": "f", "input_type": "chat", "x": 1}, "memory": true}));
        let flowtool = FlowtoolConfig { input_type: Some("text".into()), ..read.flowtool().cloned().unwrap() };
        assert!(read.set_flowtool(&flowtool));
        assert_eq!(json!(read), json!({"flowtool": {"flow_id": "f", "input_type": "text", "x": 1}, "memory": true}));
        assert_eq!(read.flowtool().unwrap().input_type.as_deref(), Some("text"));
        assert!(!config(json!({"flowtool": "f"})).set_flowtool(&flowtool));
    }
}
