//! `/language-models`: list, create, get, replace, delete. Provider API keys are write-only:
//! kept in Secrets Manager, never returned; responses carry `has_api_key`.
//!
//! Deleting a model that agents name by `language_model_id` (active or soft-deleted, since a
//! restore would bring the reference back) is 409 `CONFLICT` listing them.
//!
//! Calls after the gate: list = 1 Query; get = 1 GetItem; create = [CreateSecret] +
//! 1 TransactWriteItems; replace = 1 GetItem + [Put/DeleteSecret] + 1 TransactWriteItems;
//! delete = 1 GetItem + 1 Query (agents) + 1 TransactWriteItems + 1 DeleteSecret.

use crate::envelope::{ApiError, ErrorCode, PageRequest, path_id, success};
use crate::gate::{Access, Gate};
use crate::records::active_record;
use crate::settings;
use aws_env::settings::{Lookup, SettingError, required};
use http::{Method, StatusCode};
use http_api::routing::segments_under;
use http_api::{Body, HttpFunction, Params, Request, Response, ResponseFuture};
use platform_data::agents::AgentStore;
use platform_data::api_keys::Caller;
use platform_data::ids::{AccountId, LanguageModelId};
use platform_data::language_models::{ApiKeyChange, LanguageModel, LanguageModelStore, parse_language_model};
use platform_data::secret_origin;
use platform_data::secrets::RecordSecrets;
use serde_json::{Map, Value, json};

/// The language models function.
pub struct LanguageModelsService {
    gate: Gate,
    models: LanguageModelStore,
    keys: RecordSecrets<LanguageModelId>,
    agents: AgentStore,
}

impl LanguageModelsService {
    /// A service over explicit dependencies.
    pub fn new(
        gate: Gate,
        models: LanguageModelStore,
        keys: RecordSecrets<LanguageModelId>,
        agents: AgentStore,
    ) -> Self {
        Self { gate, models, keys, agents }
    }

    /// A service configured from settings (see `template.yaml`).
    pub fn from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<Self, SettingError> {
        let db = aws.dynamodb();
        Ok(Self::new(
            Gate::from_settings(aws, lookup)?,
            LanguageModelStore::new(db.clone(), required(lookup, settings::LANGUAGE_MODELS_TABLE)?).with_quota(
                storage::quota::Counters::new(db.clone(), required(lookup, settings::QUOTAS_TABLE)?),
                settings::quota(lookup, "language_models", settings::QUOTA_LANGUAGE_MODELS, 500)?,
            ),
            language_model_keys(aws.secrets(), required(lookup, settings::LANGUAGE_MODEL_SECRET_PREFIX)?),
            AgentStore::new(db, required(lookup, settings::AGENTS_TABLE)?),
        ))
    }

    /// Reads the time from `clock` (tests).
    pub fn with_clock(mut self, clock: aws_env::clock::Clock) -> Self {
        self.gate = self.gate.with_clock(clock);
        self
    }

    async fn route(&self, caller: Caller, request: Request) -> Result<Response<Body>, ApiError> {
        let path = request.uri().path().to_owned();
        let segments = segments_under(&path, "/language-models").ok_or_else(|| ApiError::not_found("resource"))?;
        let account = caller.account_id;
        match (request.method().clone(), segments.as_slice()) {
            (Method::GET, []) => self.list(account, &Params::from_query(request.uri())).await,
            (Method::POST, []) => self.create(account, request.body()).await,
            (method, [id]) => {
                let id = path_id(id, "lm_id")?;
                match method {
                    Method::GET => Ok(success(
                        StatusCode::OK,
                        view(&active_record(&self.models, account, id, "language model").await?),
                        "Language model retrieved",
                    )),
                    Method::PUT => self.replace(account, id, request.body()).await,
                    Method::DELETE => self.delete(account, id).await,
                    other => Err(ApiError::method_not_allowed(&other, "GET, PUT, DELETE")),
                }
            }
            (other, []) => Err(ApiError::method_not_allowed(&other, "GET, POST")),
            _ => Err(ApiError::not_found("resource")),
        }
    }

    async fn list(&self, account: AccountId, params: &Params) -> Result<Response<Body>, ApiError> {
        let mut problems = Map::new();
        let page = PageRequest::from_params(params, &mut problems);
        if !problems.is_empty() {
            return Err(ApiError {
                code: ErrorCode::ValidationError,
                message: "Invalid query parameters.".into(),
                details: problems,
            });
        }
        // The page's depth of the `active` index, the page, the counter as the total.
        let found = self.models.active_page(account, page.offset(), page.limit).await?;
        Ok(page.respond_page(found.records.iter().map(view).collect(), found.total, "Language models retrieved"))
    }

    async fn create(&self, account: AccountId, body: &Body) -> Result<Response<Body>, ApiError> {
        let input = parse_language_model(body.as_ref())
            .map_err(|problems| ApiError::from_problems(problems, "language model"))?;
        let now = self.gate.now();
        let mut model = LanguageModel::new(account, input.spec, now);
        if let ApiKeyChange::Set(key) = &input.api_key {
            self.keys.put(account, model.id, &secret_origin::encode(&model.spec.key_origin(), key)).await?;
            model.spec.has_api_key = true;
        }
        if let Err(err) = self.models.create(&model).await {
            if model.spec.has_api_key {
                let _ = self.keys.remove(account, model.id).await;
            }
            return Err(ApiError::from_write(err, "language model"));
        }
        tracing::info!(model_id = %model.id, %account, "language model created");
        Ok(success(StatusCode::CREATED, view(&model), "Language model created"))
    }

    async fn replace(&self, account: AccountId, id: LanguageModelId, body: &Body) -> Result<Response<Body>, ApiError> {
        let input = parse_language_model(body.as_ref())
            .map_err(|problems| ApiError::from_problems(problems, "language model"))?;
        let previous = active_record(&self.models, account, id, "language model").await?;
        let mut spec = input.spec;
        // A stored key never follows the model to another server: moving it there needs the key
        // again (and the stored key is bound to its origin, see `secret_origin`).
        if input.api_key == ApiKeyChange::Keep
            && previous.spec.has_api_key
            && spec.key_origin() != previous.spec.key_origin()
        {
            return Err(ApiError::validation(
                "The language model is invalid.",
                Map::from_iter([(
                    "api_key".to_owned(),
                    json!(
                        "must be sent again (or null to remove it) when provider or base_url sends it to another origin"
                    ),
                )]),
            ));
        }
        spec.has_api_key = match &input.api_key {
            ApiKeyChange::Keep => previous.spec.has_api_key,
            ApiKeyChange::Set(_) => true,
            ApiKeyChange::Remove => false,
        };
        let model = LanguageModel { spec, updated_at: self.gate.now(), ..previous.clone() };
        // The record first: a refused write (name taken, concurrent change) leaves the key as it
        // was. A failure after it leaves the old key bound to the old origin, never sent elsewhere.
        self.models.replace(&model, &previous).await.map_err(|err| ApiError::from_write(err, "language model"))?;
        match &input.api_key {
            ApiKeyChange::Keep => {}
            ApiKeyChange::Set(key) => {
                self.keys.put(account, id, &secret_origin::encode(&model.spec.key_origin(), key)).await?
            }
            ApiKeyChange::Remove => self.keys.remove(account, id).await?,
        }
        tracing::info!(model_id = %id, %account, "language model updated");
        Ok(success(StatusCode::OK, view(&model), "Language model updated"))
    }

    async fn delete(&self, account: AccountId, id: LanguageModelId) -> Result<Response<Body>, ApiError> {
        let model = active_record(&self.models, account, id, "language model").await?;
        let id_text = id.to_string();
        let users: Vec<String> = self
            .agents
            .list(account)
            .await?
            .into_iter()
            .filter(|agent| agent.spec.language_model_id.as_deref() == Some(id_text.as_str()))
            .map(|agent| agent.id.to_string())
            .collect();
        if !users.is_empty() {
            return Err(ApiError::new(ErrorCode::Conflict, "Agents use this language model; change them first.")
                .with_detail("agents", users));
        }
        self.models.delete(&model).await.map_err(|err| ApiError::from_write(err, "language model"))?;
        self.keys.remove(account, id).await?;
        tracing::info!(model_id = %id, %account, "language model deleted");
        Ok(success(StatusCode::OK, json!({ "id": id_text }), "Language model deleted"))
    }
}

impl HttpFunction for LanguageModelsService {
    fn handle(&self, request: Request) -> ResponseFuture<'_> {
        let access = Access::by_method(&request);
        Box::pin(self.gate.serve(request, access, |caller, request| self.route(caller, request)))
    }
}

/// Where provider API keys live: `{prefix}{account_id}/{model_id}`.
pub fn language_model_keys(
    client: impl Into<aws_env::Lazy<aws_sdk_secretsmanager::Client>>,
    prefix: String,
) -> RecordSecrets<LanguageModelId> {
    RecordSecrets::new(client, prefix, "Language model provider API key (write-only through the API)")
}

/// A language model as responses show it (never its key).
fn view(model: &LanguageModel) -> Value {
    let spec = &model.spec;
    json!({
        "id": model.id,
        "name": spec.name,
        "provider": spec.provider,
        "model_name": spec.model_name,
        "base_url": spec.base_url,
        "description": spec.description,
        "default_parameters": spec.default_parameters,
        "has_api_key": spec.has_api_key,
        "stream_timeouts": spec.stream_timeouts,
        "region": spec.region,
        "pricing": spec.pricing,
        "account_id": model.account_id,
        "created_at": model.created_at,
        "updated_at": model.updated_at,
    })
}
