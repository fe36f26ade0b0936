//! `http` tools: a call is one HTTP request described by the tool's `config` (`url`, `method`
//! default `POST`, `headers`), the model's arguments sent as the query string (`GET`, `DELETE`)
//! or as a JSON body (others), through the guarded tenant client.

use super::ToolSettings;
use crate::engine::{Tool, ToolContext, ToolError};
use crate::providers::ToolSpec;
use futures_util::future::BoxFuture;
use outbound::TenantClient;
use serde_json::{Map, Value};

/// Largest response body a call reads.
pub const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// An `http` tool ready to call.
pub struct HttpTool {
    spec: ToolSpec,
    client: TenantClient,
    url: String,
    method: outbound::Method,
    settings: ToolSettings,
}

impl HttpTool {
    /// From the tool's `config` and the agent's settings for it; `Err` says what is missing.
    pub fn new(
        spec: ToolSpec,
        config: &Map<String, Value>,
        settings: ToolSettings,
        client: TenantClient,
    ) -> Result<Self, String> {
        let url = config.get("url").and_then(Value::as_str).ok_or("the http tool has no config.url")?.to_owned();
        let method = config.get("method").and_then(Value::as_str).unwrap_or("POST").to_ascii_uppercase();
        let method =
            outbound::Method::from_bytes(method.as_bytes()).map_err(|_| format!("{method} is not an HTTP method"))?;
        let mut settings = settings;
        let mut headers: Vec<(String, String)> = config
            .get("headers")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(name, value)| value.as_str().map(|value| (name.clone(), value.to_owned())))
            .collect();
        headers.append(&mut settings.headers);
        settings.headers = headers;
        Ok(Self { spec, client, url, method, settings })
    }

    async fn send(&self, arguments: Map<String, Value>) -> Result<Value, String> {
        let http = self.client.for_url(&self.url).map_err(|refused| refused.to_string())?;
        let mut arguments = arguments;
        arguments.extend(self.settings.fixed_arguments.clone());
        let mut url = url::Url::parse(&self.url).map_err(|_| "the http tool's config.url is not a URL".to_owned())?;
        let as_query = matches!(self.method, outbound::Method::GET | outbound::Method::DELETE);
        if as_query {
            let mut pairs = url.query_pairs_mut();
            for (key, value) in &arguments {
                match value {
                    Value::String(text) => pairs.append_pair(key, text),
                    other => pairs.append_pair(key, &other.to_string()),
                };
            }
        }
        let mut request = http.request(self.method.clone(), url).timeout(self.settings.timeout);
        for (name, value) in &self.settings.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        if !as_query {
            request = request.json(&arguments);
        }
        let response = request.send().await.map_err(|err| outbound::describe(&err))?;
        let status = response.status();
        let body = outbound::read_limited(response, MAX_RESPONSE_BYTES).await?;
        let text = String::from_utf8_lossy(&body).into_owned();
        if !status.is_success() {
            let snippet: String = text.chars().take(300).collect();
            return Err(format!("HTTP {}: {snippet}", status.as_u16()));
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }
}

impl Tool for HttpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn kind(&self) -> &'static str {
        "http"
    }

    fn call<'a>(
        &'a self,
        arguments: Map<String, Value>,
        _context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move { self.send(arguments).await.map_err(ToolError::Failed) })
    }
}
