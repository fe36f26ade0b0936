//! Business metrics as CloudWatch embedded metric format (EMF) lines: one JSON object a line on
//! stdout, which Lambda's log group turns into metrics (no agent, no API call). Every metric the
//! platform emits is named here, with its dimensions, which are always bounded sets (an outcome,
//! a provider, an agent type; never an account, agent or run id: each dimension value is a
//! metric of its own, billed).
//!
//! Off unless `EMF_METRICS` says `on` (the template sets it); `docs/operations.md` lists the
//! metrics and the dashboard built on them.

use serde_json::{Map, Value, json};
use std::io::Write as _;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// The namespace when `METRICS_NAMESPACE` is not set.
pub const DEFAULT_NAMESPACE: &str = "AgentPlatform";

/// A CloudWatch unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Count,
    Milliseconds,
    None,
}

impl Unit {
    fn as_str(self) -> &'static str {
        match self {
            Self::Count => "Count",
            Self::Milliseconds => "Milliseconds",
            Self::None => "None",
        }
    }
}

/// Measurements sharing one set of dimensions: one EMF line.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurements {
    dimensions: Vec<(&'static str, String)>,
    values: Vec<(&'static str, Unit, f64)>,
}

impl Measurements {
    fn new(dimensions: Vec<(&'static str, String)>) -> Self {
        Self { dimensions, values: Vec::new() }
    }

    fn with(mut self, name: &'static str, unit: Unit, value: f64) -> Self {
        // EMF takes numbers only; a non-finite one would make the line invalid.
        if value.is_finite() {
            self.values.push((name, unit, value));
        }
        self
    }

    /// The EMF line: the `_aws` metadata, then each dimension and value as a root member.
    pub fn to_emf(&self, namespace: &str, timestamp_ms: i64) -> String {
        let mut root = Map::new();
        let dimension_names: Vec<&str> = self.dimensions.iter().map(|(name, _)| *name).collect();
        let metrics: Vec<Value> =
            self.values.iter().map(|(name, unit, _)| json!({"Name": name, "Unit": unit.as_str()})).collect();
        root.insert(
            "_aws".into(),
            json!({
                "Timestamp": timestamp_ms,
                "CloudWatchMetrics": [{"Namespace": namespace, "Dimensions": [dimension_names], "Metrics": metrics}],
            }),
        );
        for (name, value) in &self.dimensions {
            root.insert((*name).into(), Value::String(value.clone()));
        }
        for (name, _, value) in &self.values {
            root.insert((*name).into(), json!(value));
        }
        Value::Object(root).to_string()
    }
}

/// How a run ended, for `RunsEnded`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunEnd<'a> {
    /// `success` or the failure reason.
    pub outcome: &'a str,
    pub agent_type: &'a str,
    /// The model's provider (`gen_ai.provider.name`); `a2a` or `langflow` for a delegated run,
    /// `none` for a run that ended before it asked a model.
    pub provider: &'a str,
}

/// Tokens of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

/// A run's end: `RunsEnded` by outcome, agent type and provider; its tokens and cost by agent
/// type and provider.
pub fn run_ended(end: RunEnd<'_>, tokens: Tokens, cost_micros: Option<u64>) -> [Measurements; 2] {
    let runs = Measurements::new(vec![
        ("Outcome", end.outcome.to_owned()),
        ("AgentType", end.agent_type.to_owned()),
        ("Provider", end.provider.to_owned()),
    ])
    .with("RunsEnded", Unit::Count, 1.0);
    let mut spend =
        Measurements::new(vec![("AgentType", end.agent_type.to_owned()), ("Provider", end.provider.to_owned())])
            .with("InputTokens", Unit::Count, tokens.input as f64)
            .with("OutputTokens", Unit::Count, tokens.output as f64)
            .with("CacheReadTokens", Unit::Count, tokens.cache_read as f64)
            .with("CacheWriteTokens", Unit::Count, tokens.cache_write as f64);
    if let Some(cost) = cost_micros {
        spend = spend.with("CostMicroUsd", Unit::None, cost as f64);
    }
    [runs, spend]
}

/// A model turn: its duration and, when text streamed, the time to its first chunk.
pub fn model_turn(provider: &str, duration_ms: f64, time_to_first_token_ms: Option<f64>) -> Measurements {
    let mut turn = Measurements::new(vec![("Provider", provider.to_owned())]).with(
        "TurnDuration",
        Unit::Milliseconds,
        duration_ms,
    );
    if let Some(first) = time_to_first_token_ms {
        turn = turn.with("TimeToFirstToken", Unit::Milliseconds, first);
    }
    turn
}

/// A tool call by the kind of tool (`http`, `python`, `mcp`, `agent`) and its outcome.
pub fn tool_call(tool_type: &str, success: bool) -> Measurements {
    let outcome = if success { "success" } else { "error" };
    Measurements::new(vec![("ToolType", tool_type.to_owned()), ("Outcome", outcome.to_owned())]).with(
        "ToolCalls",
        Unit::Count,
        1.0,
    )
}

/// How long a queued or scheduled run waited for a worker.
pub fn queue_wait(run_type: &str, wait_ms: f64) -> Measurements {
    Measurements::new(vec![("RunType", run_type.to_owned())]).with("QueueWait", Unit::Milliseconds, wait_ms)
}

/// Attempt numbers kept as they are; later ones (manual replays beyond the retry schedule's
/// eight attempts) are `later`, so the dimension stays a handful of values.
const MAX_ATTEMPT_DIMENSION: u64 = 8;

/// A webhook delivery attempt: `delivered`, `retrying` or `failed`, and its attempt number
/// (`1` to `8`, then `later`).
pub fn webhook_delivery(outcome: &str, attempt: u64) -> Measurements {
    let attempt = if attempt <= MAX_ATTEMPT_DIMENSION { attempt.to_string() } else { "later".to_owned() };
    Measurements::new(vec![("Outcome", outcome.to_owned()), ("Attempt", attempt)]).with(
        "WebhookDeliveries",
        Unit::Count,
        1.0,
    )
}

/// A request refused by an account's quota (its name: `concurrent_runs`, `monthly_budget`, …).
pub fn quota_refusal(quota: &str) -> Measurements {
    Measurements::new(vec![("Quota", quota.to_owned())]).with("QuotaRefusals", Unit::Count, 1.0)
}

/// A trace export that failed (the run went on).
pub fn trace_export_failure() -> Measurements {
    Measurements::new(Vec::new()).with("TraceExportFailures", Unit::Count, 1.0)
}

/// Where EMF lines go.
#[derive(Debug, Clone)]
enum Sink {
    Stdout,
    /// Kept in memory (tests).
    Memory(Arc<Mutex<Vec<String>>>),
}

#[derive(Debug)]
struct Emitter {
    namespace: String,
    sink: Sink,
}

static EMITTER: OnceLock<Emitter> = OnceLock::new();

/// Emits metrics on stdout from now on when `EMF_METRICS` is `on`, in `METRICS_NAMESPACE`. Once
/// per process (a second call changes nothing).
pub fn install_from_settings(setting: &dyn Fn(&str) -> Option<String>) {
    if setting("EMF_METRICS").as_deref() == Some("on") {
        let namespace = setting("METRICS_NAMESPACE").filter(|name| !name.is_empty());
        let namespace = namespace.unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned());
        let _ = EMITTER.set(Emitter { namespace, sink: Sink::Stdout });
    }
}

/// Keeps this process's metrics in memory, returned lines shared with the caller (tests).
pub fn install_in_memory(namespace: &str) -> Option<Arc<Mutex<Vec<String>>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let emitter = Emitter { namespace: namespace.to_owned(), sink: Sink::Memory(Arc::clone(&lines)) };
    EMITTER.set(emitter).ok().map(|()| lines)
}

/// Emits `measurements` (nothing when metrics are off).
pub fn emit(measurements: impl IntoIterator<Item = Measurements>) {
    let Some(emitter) = EMITTER.get() else { return };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    for measurement in measurements {
        if measurement.values.is_empty() {
            continue;
        }
        let line = measurement.to_emf(&emitter.namespace, now);
        match &emitter.sink {
            // One write of the whole line, so no other output lands inside it.
            Sink::Stdout => {
                let _ = std::io::stdout().lock().write_all(format!("{line}\n").as_bytes());
            }
            Sink::Memory(lines) => lines.lock().unwrap_or_else(PoisonError::into_inner).push(line),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks a line against the EMF specification's rules (docs.aws.amazon.com, "Specification:
    /// Embedded metric format"): one JSON object; `_aws` with an integer `Timestamp` (ms) and
    /// `CloudWatchMetrics`; each directive a `Namespace` of 1–1024 characters, `Dimensions` an
    /// array of at least one set of at most 30 names, each a string member of the root of at most
    /// 1024 characters, `Metrics` at most 100 definitions each naming a number member of the root,
    /// with a CloudWatch unit.
    fn check_emf(line: &str) -> Result<(), String> {
        let root: Value = serde_json::from_str(line).map_err(|err| err.to_string())?;
        let root = root.as_object().ok_or("not an object")?;
        let aws = root.get("_aws").and_then(Value::as_object).ok_or("no _aws")?;
        aws.get("Timestamp").and_then(Value::as_i64).ok_or("no integer Timestamp")?;
        let directives = aws.get("CloudWatchMetrics").and_then(Value::as_array).ok_or("no CloudWatchMetrics")?;
        for directive in directives {
            let namespace = directive["Namespace"].as_str().ok_or("no Namespace")?;
            if namespace.is_empty() || namespace.len() > 1024 {
                return Err("bad Namespace".into());
            }
            let sets = directive["Dimensions"].as_array().ok_or("no Dimensions")?;
            if sets.is_empty() {
                return Err("no dimension set".into());
            }
            for set in sets {
                let names = set.as_array().ok_or("a dimension set is not an array")?;
                if names.len() > 30 {
                    return Err("more than 30 dimensions".into());
                }
                for name in names {
                    let value = root.get(name.as_str().ok_or("a dimension name")?).ok_or("dimension not in root")?;
                    if value.as_str().is_none_or(|value| value.len() > 1024) {
                        return Err("a dimension value is not a string of at most 1024 characters".into());
                    }
                }
            }
            let metrics = directive["Metrics"].as_array().ok_or("no Metrics")?;
            if metrics.len() > 100 {
                return Err("more than 100 metrics".into());
            }
            for metric in metrics {
                let name = metric["Name"].as_str().ok_or("a metric without a Name")?;
                root.get(name).and_then(Value::as_f64).ok_or("a metric's value is not a number in the root")?;
                if !["Count", "Milliseconds", "None"].contains(&metric["Unit"].as_str().ok_or("no Unit")?) {
                    return Err("unknown unit".into());
                }
            }
        }
        Ok(())
    }

    #[test]
    fn every_metric_the_platform_emits_is_a_valid_emf_line() {
        let end = RunEnd { outcome: "success", agent_type: "config", provider: "openai" };
        let tokens = Tokens { input: 10, output: 5, cache_read: 1, cache_write: 0 };
        let mut all: Vec<Measurements> = run_ended(end, tokens, Some(199)).into();
        all.extend([
            model_turn("anthropic", 812.5, Some(120.0)),
            model_turn("aws.bedrock", 10.0, None),
            tool_call("mcp", false),
            queue_wait("schedule", 1500.0),
            webhook_delivery("retrying", 2),
            webhook_delivery("failed", 40),
            quota_refusal("monthly_budget"),
            trace_export_failure(),
        ]);
        for measurement in &all {
            let line = measurement.to_emf("AgentPlatform/test", 1_700_000_000_000);
            assert!(!line.contains('\n'));
            check_emf(&line).unwrap_or_else(|err| panic!("{err}: {line}"));
        }
        let line: Value = serde_json::from_str(&all[0].to_emf("ns", 1)).unwrap();
        assert_eq!(line["_aws"]["CloudWatchMetrics"][0]["Dimensions"], json!([["Outcome", "AgentType", "Provider"]]));
        assert_eq!((line["Outcome"].as_str(), line["RunsEnded"].as_f64()), (Some("success"), Some(1.0)));
        let spend: Value = serde_json::from_str(&all[1].to_emf("ns", 1)).unwrap();
        assert_eq!(spend["CostMicroUsd"], json!(199.0));
        let replay: Value = serde_json::from_str(&all[7].to_emf("ns", 1)).unwrap();
        assert_eq!(replay["Attempt"], "later");
        let first: Value = serde_json::from_str(&all[3].to_emf("ns", 1)).unwrap();
        assert_eq!(first.get("TimeToFirstToken"), None);
        assert_eq!(
            first["_aws"]["CloudWatchMetrics"][0]["Metrics"],
            json!([{"Name": "TurnDuration", "Unit": "Milliseconds"}])
        );
    }

    #[test]
    fn the_checker_refuses_what_the_format_forbids() {
        assert!(check_emf("{}").is_err());
        assert!(check_emf(r#"{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[["A"]],"Metrics":[{"Name":"M","Unit":"Count"}]}]},"M":1}"#).is_err());
        assert!(check_emf(r#"{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[[]],"Metrics":[{"Name":"M","Unit":"Count"}]}]},"M":"x"}"#).is_err());
        assert!(check_emf(r#"{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[[]],"Metrics":[{"Name":"M","Unit":"Count"}]}]},"M":1}"#).is_ok());
    }

    #[test]
    fn a_value_that_is_not_a_finite_number_is_left_out() {
        let turn = model_turn("openai", f64::NAN, Some(f64::INFINITY));
        assert!(turn.values.is_empty());
    }
}
