//! Language models: a provider, a model and default parameters, stored as account-scoped,
//! uniquely named records in `LanguageModelsTable`. A model's provider API key is write-only: it
//! lives in Secrets Manager (`secrets::RecordSecrets`), and responses only say
//! whether one is set.

use crate::StoreError;
use crate::agent_config::LmProvider;
use crate::ids::{AccountId, LanguageModelId};
use crate::records::{Record, RecordBody, RecordStore};
use crate::secret_origin::{self, SecretRefused, origin_of};
use crate::secrets::RecordSecrets;
use crate::validation::{Checker, Expected, ProblemKind, Problems, check_base_url, check_shape};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Longest `name` and `model_name`, in characters.
const MAX_TEXT_LENGTH: usize = 255;

/// Language model providers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    Openai,
    OpenaiCompatible,
    Anthropic,
    Bedrock,
    AzureOpenai,
}

impl Provider {
    /// The provider's name in requests and responses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Openai => "openai",
            Self::OpenaiCompatible => "openai_compatible",
            Self::Anthropic => "anthropic",
            Self::Bedrock => "bedrock",
            Self::AzureOpenai => "azure_openai",
        }
    }

    /// Where the provider's API is when a model names no `base_url`.
    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            Self::Openai => Some("https://api.openai.com/v1"),
            Self::Anthropic => Some("https://api.anthropic.com"),
            // Bedrock is reached through the AWS SDK in the model's region; the others need a base_url.
            Self::Bedrock | Self::OpenaiCompatible | Self::AzureOpenai => None,
        }
    }
}

const PROVIDERS: [Provider; 5] =
    [Provider::Openai, Provider::OpenaiCompatible, Provider::Anthropic, Provider::Bedrock, Provider::AzureOpenai];

/// A stored language model (never its API key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LanguageModelSpec {
    pub name: String,
    pub provider: Provider,
    pub model_name: String,
    pub base_url: Option<String>,
    pub description: Option<String>,
    pub default_parameters: Map<String, Value>,
    pub has_api_key: bool,
    /// How long the model's stream may be silent (absent from records stored before it existed).
    #[serde(default)]
    pub stream_timeouts: StreamTimeouts,
    /// A Bedrock model's AWS region (`None`: its ARN's region, else the function's own).
    #[serde(default)]
    pub region: Option<String>,
    /// What the model's tokens cost, when the account says (no built-in price table to go stale).
    #[serde(default)]
    pub pricing: Option<Pricing>,
}

/// A model's prices: integer micro-units of `currency` per million tokens of each kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pricing {
    pub currency: Currency,
    pub input_per_million_micros: u64,
    pub output_per_million_micros: u64,
    pub cache_read_per_million_micros: u64,
    pub cache_write_per_million_micros: u64,
}

/// The currencies prices are in: US dollars alone, as every provider bills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Currency {
    #[serde(rename = "USD")]
    Usd,
}

/// The largest price: a million US dollars per million tokens, far above any model's (a price
/// times a token count is computed in `u128`, so no count overflows it).
pub const MAX_PRICE_PER_MILLION_MICROS: u64 = 1_000_000_000_000;

/// The price fields of `pricing`, each required.
const PRICE_FIELDS: [&str; 4] = [
    "input_per_million_micros",
    "output_per_million_micros",
    "cache_read_per_million_micros",
    "cache_write_per_million_micros",
];

/// `pricing` of a body (an object, as `check_shape` made sure), its problems in `rules`.
fn parse_pricing(value: Option<&Value>, rules: &mut Checker) -> Option<Pricing> {
    let Some(Value::Object(fields)) = value else { return None };
    if fields.get("currency") != Some(&Value::String("USD".into())) {
        rules.fail("pricing.currency", "must be \"USD\"");
    }
    let mut prices = [0u64; 4];
    for (price, name) in prices.iter_mut().zip(PRICE_FIELDS) {
        let field = format!("pricing.{name}");
        match fields.get(name).and_then(crate::validation::whole_number) {
            Some(micros) if micros <= MAX_PRICE_PER_MILLION_MICROS => *price = micros,
            _ => rules.fail(
                &field,
                &format!("is required: a whole number of micro-USD per million tokens, from 0 to {MAX_PRICE_PER_MILLION_MICROS}"),
            ),
        }
    }
    for name in fields.keys().filter(|name| *name != "currency" && !PRICE_FIELDS.contains(&name.as_str())) {
        rules.fail(&format!("pricing.{name}"), "unknown field");
    }
    let [input, output, cache_read, cache_write] = prices;
    Some(Pricing {
        currency: Currency::Usd,
        input_per_million_micros: input,
        output_per_million_micros: output,
        cache_read_per_million_micros: cache_read,
        cache_write_per_million_micros: cache_write,
    })
}

/// How long a model's answer stream may be silent, in seconds; `None` takes the runner's default
/// (docs/agent-runtime.md). The whole stream is bounded by the run's time left, not here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamTimeouts {
    /// From the request to the stream's first byte.
    pub first_byte_seconds: Option<u64>,
    /// Between two chunks of the stream.
    pub idle_seconds: Option<u64>,
}

/// The largest `stream_timeouts` value: a Lambda invocation's 15 minutes, past which nothing waits.
pub const MAX_STREAM_TIMEOUT_SECONDS: u64 = 900;

/// `stream_timeouts` of a body (an object, as `check_shape` made sure), its problems in `rules`.
fn parse_stream_timeouts(value: Option<&Value>, rules: &mut Checker) -> StreamTimeouts {
    let Some(Value::Object(fields)) = value else { return StreamTimeouts::default() };
    let mut seconds = |name: &str| -> Option<u64> {
        let field = format!("stream_timeouts.{name}");
        match fields.get(name) {
            None | Some(Value::Null) => None,
            Some(value) => {
                match crate::validation::whole_number(value).filter(|n| (1..=MAX_STREAM_TIMEOUT_SECONDS).contains(n)) {
                    Some(n) => Some(n),
                    None => {
                        rules.fail(
                            &field,
                            &format!("must be a whole number of seconds from 1 to {MAX_STREAM_TIMEOUT_SECONDS}"),
                        );
                        None
                    }
                }
            }
        }
    };
    let timeouts =
        StreamTimeouts { first_byte_seconds: seconds("first_byte_seconds"), idle_seconds: seconds("idle_seconds") };
    for name in fields.keys().filter(|name| !["first_byte_seconds", "idle_seconds"].contains(&name.as_str())) {
        rules.fail(&format!("stream_timeouts.{name}"), "unknown field");
    }
    timeouts
}

impl RecordBody for LanguageModelSpec {
    const KIND: &'static str = "LM";
    type Id = crate::ids::LanguageModelId;

    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }
}

impl LanguageModelSpec {
    /// The origin the model's API key is sent to: its `base_url`'s, else the provider's default
    /// (`aws:bedrock` for Bedrock without a `base_url`). The key is stored bound to it
    /// (`secret_origin`), so a key never follows a changed `base_url` or provider.
    pub fn key_origin(&self) -> String {
        self.base_url
            .as_deref()
            .or(self.provider.default_base_url())
            .and_then(origin_of)
            .unwrap_or_else(|| format!("aws:{}", self.provider.as_str()))
    }
}

/// A stored language model.
pub type LanguageModel = Record<LanguageModelSpec>;

/// How an agent names its language model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSelector {
    /// `language_model_id`: a stored model's id (or an identifier no stored model has).
    Id(String),
    /// `provider` + `model_name`, or `agent_config.lm_provider` as an object of the two.
    Pair(String, String),
    /// `agent_config.lm_provider` as a string: a model's name or id.
    NameOrId(String),
}

impl ModelSelector {
    /// The selector of an agent body, if it names a model at all.
    pub fn of(spec: &crate::agent_spec::AgentSpec) -> Option<Self> {
        if let Some(id) = &spec.language_model_id {
            return Some(Self::Id(id.clone()));
        }
        match (&spec.provider, &spec.model_name, spec.agent_config.lm_provider()) {
            (Some(provider), Some(model_name), _) => Some(Self::Pair(provider.clone(), model_name.clone())),
            (_, _, Some(LmProvider::NameOrId(name))) => Some(Self::NameOrId(name.clone())),
            (_, _, Some(LmProvider::Pair { provider, model_name })) => {
                Some(Self::Pair(provider.clone(), model_name.clone()))
            }
            _ => None,
        }
    }

    /// Whether `model` is the one named.
    pub fn matches(&self, model: &LanguageModel) -> bool {
        match self {
            Self::Id(id) => &model.id.to_string() == id,
            Self::Pair(provider, model_name) => {
                model.spec.provider.as_str() == provider && &model.spec.model_name == model_name
            }
            Self::NameOrId(name) => &model.spec.name == name || &model.id.to_string() == name,
        }
    }
}

/// The account's active model `selector` names: by id one GetItem; otherwise one Query, the
/// oldest match winning, so adding a matching model never changes an agent's answer.
pub async fn find_model(
    store: &LanguageModelStore,
    account_id: AccountId,
    selector: &ModelSelector,
) -> Result<Option<LanguageModel>, StoreError> {
    if let ModelSelector::Id(id) = selector {
        let Ok(id) = id.parse::<LanguageModelId>() else { return Ok(None) };
        return Ok(store.get(account_id, id).await?.filter(|model| model.deleted_at.is_none()));
    }
    let mut models = store.list(account_id).await?;
    models.retain(|model| model.deleted_at.is_none() && selector.matches(model));
    models.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
    Ok(models.into_iter().next())
}

/// Why a model's API key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ApiKeyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the language model's API key is not sent: {0}")]
    Refused(#[from] SecretRefused),
}

/// The model's API key from `keys`, given out only for the origin it was stored for (so never to
/// a `base_url` it was not sent with). `None` when the model has no key.
pub async fn read_api_key(
    keys: &RecordSecrets<LanguageModelId>,
    model: &LanguageModel,
) -> Result<Option<String>, ApiKeyError> {
    let Some(stored) = keys.get(model.account_id, model.id).await? else { return Ok(None) };
    Ok(Some(secret_origin::decode_for(&stored, &model.spec.key_origin())?))
}

/// Storage of language models.
pub type LanguageModelStore = RecordStore<LanguageModelSpec>;

/// What a request says about the API key: absent keeps it, `null` removes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiKeyChange {
    Keep,
    Set(String),
    Remove,
}

/// A valid create or replace body.
#[derive(Debug, Clone, PartialEq)]
pub struct LanguageModelInput {
    /// The record body; `has_api_key` is settled once the key change is applied.
    pub spec: LanguageModelSpec,
    pub api_key: ApiKeyChange,
}

/// Parses and validates a language model body (POST and PUT).
pub fn parse_language_model(body: &[u8]) -> Result<LanguageModelInput, Problems> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|err| Problems::single(ProblemKind::BadRequest, "body", &format!("malformed JSON: {err}")))?;
    let Value::Object(body) = value else {
        return Err(Problems::single(ProblemKind::BadRequest, "body", "must be a JSON object"));
    };
    let present = |name: &str| body.get(name).filter(|v| !v.is_null());
    let mut rules = check_shape(
        &body,
        &[
            ("name", Expected::String),
            ("provider", Expected::String),
            ("model_name", Expected::String),
            ("base_url", Expected::String),
            ("description", Expected::String),
            ("api_key", Expected::String),
            ("default_parameters", Expected::Object),
            ("stream_timeouts", Expected::Object),
            ("region", Expected::String),
            ("pricing", Expected::Object),
        ],
    )?;
    let text = |name: &str| present(name).and_then(Value::as_str).map(str::to_owned);
    let required_text = |rules: &mut Checker, name: &str| -> String {
        match text(name) {
            None => rules.fail(name, "is required"),
            Some(value) if value.trim().is_empty() => rules.fail(name, "must not be empty"),
            Some(value) if value.chars().count() > MAX_TEXT_LENGTH => {
                rules.fail(name, "must be at most 255 characters")
            }
            Some(value) => return value,
        }
        String::new()
    };
    let name = required_text(&mut rules, "name");
    let model_name = required_text(&mut rules, "model_name");
    let provider = match text("provider") {
        None => {
            rules.fail("provider", "is required");
            None
        }
        Some(raw) => {
            let found = PROVIDERS.into_iter().find(|provider| provider.as_str() == raw);
            if found.is_none() {
                rules.fail("provider", "must be one of openai, openai_compatible, anthropic, bedrock, azure_openai");
            }
            found
        }
    };
    let base_url = text("base_url");
    if let Some(url) = &base_url
        && let Err(issue) = check_base_url(url)
    {
        rules.fail("base_url", issue);
    }
    if base_url.is_none() && matches!(provider, Some(Provider::OpenaiCompatible | Provider::AzureOpenai)) {
        rules.fail("base_url", "is required for openai_compatible and azure_openai models");
    }
    let stream_timeouts = parse_stream_timeouts(present("stream_timeouts"), &mut rules);
    let pricing = parse_pricing(present("pricing"), &mut rules);
    let region = text("region");
    if provider == Some(Provider::Bedrock) {
        check_bedrock_model(&model_name, region.as_deref(), &mut rules);
    } else if region.is_some() {
        rules.fail("region", "only bedrock models have a region");
    }
    let api_key = match body.get("api_key") {
        None => ApiKeyChange::Keep,
        Some(Value::Null) => ApiKeyChange::Remove,
        Some(Value::String(key)) if key.trim().is_empty() => {
            rules.fail("api_key", "must not be empty (send null to remove the key)");
            ApiKeyChange::Keep
        }
        Some(Value::String(key)) => ApiKeyChange::Set(key.clone()),
        Some(_) => ApiKeyChange::Keep,
    };
    if !rules.problems.is_empty() {
        return Err(Problems { kind: ProblemKind::Validation, fields: rules.problems });
    }
    let Some(provider) = provider else {
        return Err(Problems::single(ProblemKind::Validation, "provider", "is required"));
    };
    let spec = LanguageModelSpec {
        name,
        provider,
        model_name,
        base_url,
        description: text("description"),
        default_parameters: present("default_parameters").and_then(Value::as_object).cloned().unwrap_or_default(),
        has_api_key: false,
        stream_timeouts,
        region,
        pricing,
    };
    Ok(LanguageModelInput { spec, api_key })
}

/// A Bedrock model's `model_name` (a model id, an inference profile id or an ARN) and `region`:
/// the region is one of an AWS partition's, and an ARN's region, when it has one, is the same.
fn check_bedrock_model(model_name: &str, region: Option<&str>, rules: &mut Checker) {
    if let Some(region) = region
        && aws_env::partitions::partition_of(region).is_none()
    {
        rules.fail("region", "must be an AWS region, such as us-east-1");
    }
    if model_name.is_empty() {
        return;
    }
    if !model_name.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"-._:/".contains(&byte)) {
        rules.fail(
            "model_name",
            "must be a Bedrock model id, inference profile id or ARN (letters, digits and - . _ : /)",
        );
        return;
    }
    if model_name.starts_with("arn:") {
        match bedrock_arn_region(model_name) {
            Err(problem) => rules.fail("model_name", problem),
            Ok(Some(arn_region)) if region.is_some_and(|region| region != arn_region) => {
                rules.fail("region", "must be the region of model_name's ARN, or absent");
            }
            Ok(_) => {}
        }
    }
}

/// The region a Bedrock ARN (`arn:{partition}:bedrock:{region}:{account}:{resource}`) names, if
/// it names one.
pub fn bedrock_arn_region(arn: &str) -> Result<Option<&str>, &'static str> {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    let [_, partition, service, region, _, resource] = parts.as_slice() else {
        return Err("is not an ARN of the form arn:PARTITION:bedrock:REGION:ACCOUNT:RESOURCE");
    };
    if *service != "bedrock" || resource.is_empty() || !partition.starts_with("aws") {
        return Err("is not an ARN of the form arn:PARTITION:bedrock:REGION:ACCOUNT:RESOURCE");
    }
    if region.is_empty() {
        return Ok(None);
    }
    match aws_env::partitions::partition_of(region) {
        Some(found) if found.id == *partition => Ok(Some(region)),
        _ => Err("names a region that is not in its ARN's partition"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(body: Value) -> Result<LanguageModelInput, Problems> {
        parse_language_model(body.to_string().as_bytes())
    }

    #[test]
    fn a_complete_body_parses_and_the_key_is_kept_apart() {
        let input = parse(json!({"name": "Prod", "provider": "openai", "model_name": "gpt", "api_key": "sk-1",
            "default_parameters": {"temperature": 0.2}}))
        .unwrap();
        assert_eq!(input.api_key, ApiKeyChange::Set("sk-1".into()));
        assert_eq!(input.spec.provider, Provider::Openai);
        assert!(!serde_json::to_string(&input.spec).unwrap().contains("sk-1"));
        assert_eq!(
            parse(json!({"name": "P", "provider": "anthropic", "model_name": "m"})).unwrap().api_key,
            ApiKeyChange::Keep
        );
        assert_eq!(
            parse(json!({"name": "P", "provider": "bedrock", "model_name": "m", "api_key": null})).unwrap().api_key,
            ApiKeyChange::Remove
        );
    }

    #[test]
    fn types_are_400_and_rules_are_422() {
        let problems = parse(json!({"name": 1, "default_parameters": []})).unwrap_err();
        assert_eq!(problems.kind, ProblemKind::BadRequest);
        assert_eq!(problems.fields.keys().collect::<Vec<_>>(), ["default_parameters", "name"]);
        let problems =
            parse(json!({"provider": "gemini", "base_url": "ftp://x", "api_key": " ", "extra": 1})).unwrap_err();
        assert_eq!(problems.kind, ProblemKind::Validation);
        assert_eq!(
            problems.fields.keys().collect::<Vec<_>>(),
            ["api_key", "base_url", "extra", "model_name", "name", "provider"]
        );
        let problems = parse(json!({"name": "L", "provider": "openai_compatible", "model_name": "m"})).unwrap_err();
        assert_eq!(problems.fields["base_url"], "is required for openai_compatible and azure_openai models");
        for base_url in ["https://llm.example.com/v1?key=1", "https://llm.example.com/v1#x"] {
            let problems = parse(json!({"name": "L", "provider": "openai_compatible", "model_name": "m",
                "base_url": base_url}))
            .unwrap_err();
            assert_eq!(problems.fields["base_url"], "must not have a query string or fragment");
        }
    }

    #[test]
    fn a_bedrock_model_names_a_model_profile_or_arn_and_a_region_of_a_partition() {
        let bedrock = |model_name: &str, region: Value| {
            parse(json!({"name": "B", "provider": "bedrock", "model_name": model_name, "region": region}))
        };
        for model_name in [
            "anthropic.claude-sonnet-4-5-20250929-v1:0",
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "global.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "arn:aws:bedrock:us-east-1::foundation-model/amazon.nova-pro-v1:0",
            "arn:aws:bedrock:eu-west-1:123456789012:inference-profile/eu.amazon.nova-pro-v1:0",
            "arn:aws-us-gov:bedrock:us-gov-west-1:123456789012:application-inference-profile/abc",
        ] {
            assert!(bedrock(model_name, Value::Null).is_ok(), "{model_name}");
        }
        assert_eq!(bedrock("m", json!("eu-central-1")).unwrap().spec.region.as_deref(), Some("eu-central-1"));
        assert_eq!(bedrock("m", Value::Null).unwrap().spec.region, None);
        let problem = |model_name: &str, region: Value, field: &str| {
            bedrock(model_name, region).unwrap_err().fields.get(field).cloned().unwrap_or_default()
        };
        assert_eq!(problem("m", json!("mars-north-1"), "region"), "must be an AWS region, such as us-east-1");
        assert_eq!(problem("m", json!("us-east-1a"), "region"), "must be an AWS region, such as us-east-1");
        assert!(problem("anthropic claude", Value::Null, "model_name").starts_with("must be a Bedrock model id"));
        assert!(problem("arn:aws:s3:::bucket", Value::Null, "model_name").starts_with("is not an ARN"));
        assert_eq!(
            problem("arn:aws-cn:bedrock:us-east-1:1:inference-profile/x", Value::Null, "model_name"),
            "names a region that is not in its ARN's partition"
        );
        assert_eq!(
            problem("arn:aws:bedrock:us-east-1::foundation-model/m", json!("eu-west-1"), "region"),
            "must be the region of model_name's ARN, or absent"
        );
        let openai = parse(json!({"name": "O", "provider": "openai", "model_name": "gpt", "region": "us-east-1"}));
        assert_eq!(openai.unwrap_err().fields["region"], "only bedrock models have a region");
        assert_eq!(
            parse(json!({"name": "B", "provider": "bedrock", "model_name": "m", "region": 1})).unwrap_err().kind,
            ProblemKind::BadRequest
        );
    }

    #[test]
    fn pricing_is_four_whole_prices_in_usd_micros() {
        let body = |pricing: Value| json!({"name": "P", "provider": "openai", "model_name": "gpt", "pricing": pricing});
        let priced = parse(body(json!({"currency": "USD", "input_per_million_micros": 3_000_000,
            "output_per_million_micros": 15_000_000, "cache_read_per_million_micros": 300_000,
            "cache_write_per_million_micros": 3_750_000.0})))
        .unwrap();
        assert_eq!(
            priced.spec.pricing,
            Some(Pricing {
                currency: Currency::Usd,
                input_per_million_micros: 3_000_000,
                output_per_million_micros: 15_000_000,
                cache_read_per_million_micros: 300_000,
                cache_write_per_million_micros: 3_750_000,
            })
        );
        assert_eq!(serde_json::to_value(priced.spec.pricing).unwrap()["currency"], "USD", "stored and shown as sent");
        assert_eq!(parse(body(Value::Null)).unwrap().spec.pricing, None);
        let problems = parse(body(json!({"currency": "EUR", "input_per_million_micros": -1,
            "output_per_million_micros": 1.5, "cache_read_per_million_micros": 1_000_000_000_001u64, "tier": 1})))
        .unwrap_err();
        assert_eq!(problems.kind, ProblemKind::Validation);
        assert_eq!(
            problems.fields.keys().collect::<Vec<_>>(),
            [
                "pricing.cache_read_per_million_micros",
                "pricing.cache_write_per_million_micros",
                "pricing.currency",
                "pricing.input_per_million_micros",
                "pricing.output_per_million_micros",
                "pricing.tier"
            ]
        );
        assert_eq!(parse(body(json!([1]))).unwrap_err().kind, ProblemKind::BadRequest);
        // Records stored before the field existed read as unpriced.
        let stored = json!({"name": "L", "provider": "openai", "model_name": "m", "base_url": null,
            "description": null, "default_parameters": {}, "has_api_key": false});
        assert_eq!(serde_json::from_value::<LanguageModelSpec>(stored).unwrap().pricing, None);
    }

    #[test]
    fn stream_timeouts_are_whole_seconds_within_bounds() {
        let body = |timeouts: Value| json!({"name": "L", "provider": "openai", "model_name": "m", "stream_timeouts": timeouts});
        let input = parse(body(json!({"idle_seconds": 90, "first_byte_seconds": null}))).unwrap();
        assert_eq!(input.spec.stream_timeouts, StreamTimeouts { first_byte_seconds: None, idle_seconds: Some(90) });
        let absent = parse(json!({"name": "L", "provider": "openai", "model_name": "m"})).unwrap();
        assert_eq!(absent.spec.stream_timeouts, StreamTimeouts::default());
        let problems =
            parse(body(json!({"idle_seconds": 0, "first_byte_seconds": 901, "total_seconds": 5}))).unwrap_err();
        assert_eq!(problems.kind, ProblemKind::Validation);
        assert_eq!(problems.fields["stream_timeouts.idle_seconds"], "must be a whole number of seconds from 1 to 900");
        assert_eq!(
            problems.fields["stream_timeouts.first_byte_seconds"],
            problems.fields["stream_timeouts.idle_seconds"]
        );
        assert_eq!(problems.fields["stream_timeouts.total_seconds"], "unknown field");
        for bad in [json!(1.5), json!("60"), json!(-1), json!(true)] {
            let problems = parse(body(json!({"idle_seconds": bad}))).unwrap_err();
            assert_eq!(problems.kind, ProblemKind::Validation, "{bad}");
        }
        assert_eq!(parse(body(json!(60))).unwrap_err().kind, ProblemKind::BadRequest);
        // Records stored before the field existed still read.
        let stored = json!({"name": "L", "provider": "openai", "model_name": "m", "base_url": null,
            "description": null, "default_parameters": {}, "has_api_key": false});
        let spec: LanguageModelSpec = serde_json::from_value(stored).unwrap();
        assert_eq!(spec.stream_timeouts, StreamTimeouts::default());
    }

    #[test]
    fn the_key_origin_follows_base_url_and_provider() {
        let spec = |provider: &str, base_url: Value| {
            parse(json!({"name": "L", "provider": provider, "model_name": "m", "base_url": base_url})).unwrap().spec
        };
        assert_eq!(spec("openai", Value::Null).key_origin(), "https://api.openai.com");
        assert_eq!(spec("anthropic", Value::Null).key_origin(), "https://api.anthropic.com");
        assert_eq!(spec("bedrock", Value::Null).key_origin(), "aws:bedrock");
        assert_eq!(spec("openai", json!("https://proxy.example.com/v1")).key_origin(), "https://proxy.example.com");
        assert_eq!(spec("openai_compatible", json!("http://10.0.0.5:8000/v1")).key_origin(), "http://10.0.0.5:8000");
    }
}
