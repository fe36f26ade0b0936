//! A client of a Langflow-compatible flow server (`{base_url}/api/v1/…`, `x-api-key` auth).

use outbound::TenantClient;
use serde::Deserialize;
use serde_json::Value;
use std::time::Duration;

/// Longest a flow list may take.
pub const LIST_TIMEOUT: Duration = Duration::from_secs(15);

/// Largest flow list read (with header-only flows, thousands fit in far less).
pub const MAX_LIST_BYTES: usize = 8 * 1024 * 1024;

/// Where the flow server is and the key it takes.
#[derive(Clone)]
pub struct FlowServer {
    /// The server's root (`https://flows.example.com`), without `/api/v1`.
    pub base_url: String,
    pub api_key: String,
}

impl std::fmt::Debug for FlowServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowServer").field("base_url", &self.base_url).finish_non_exhaustive()
    }
}

/// A flow as the list reports it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Flow {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub endpoint_name: Option<String>,
    /// Components are building blocks, not runnable flows.
    #[serde(default)]
    pub is_component: Option<bool>,
}

/// Why the flows could not be listed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlowServerError {
    #[error("could not reach the flow server: {0}")]
    Unreachable(String),
    #[error("the flow server refused the API key (HTTP {0})")]
    Unauthorized(u16),
    #[error("the flow server answered HTTP {0}")]
    Status(u16),
    #[error("the flow server's answer is not a list of flows: {0}")]
    Unreadable(String),
}

impl FlowServer {
    /// Every runnable flow: `GET {base_url}/api/v1/flows/` with the header-only projection and
    /// without the server's example flows. Answers in both shapes Langflow has used (a JSON array,
    /// or a page `{"items": […]}`) are read; components are left out.
    pub async fn list_flows(&self, client: &TenantClient) -> Result<Vec<Flow>, FlowServerError> {
        let url = format!(
            "{}/api/v1/flows/?get_all=true&header_flows=true&remove_example_flows=true",
            self.base_url.trim_end_matches('/')
        );
        if let Err(refused) = client.check_url(&url) {
            return Err(FlowServerError::Unreachable(refused.to_string()));
        }
        let response = client
            .http()
            .get(url)
            .header("x-api-key", &self.api_key)
            .header("accept", "application/json")
            .timeout(LIST_TIMEOUT)
            .send()
            .await
            .map_err(|err| FlowServerError::Unreachable(outbound::describe(&err)))?;
        let status = response.status().as_u16();
        match status {
            200..=299 => {}
            401 | 403 => return Err(FlowServerError::Unauthorized(status)),
            _ => return Err(FlowServerError::Status(status)),
        }
        let body = outbound::read_limited(response, MAX_LIST_BYTES).await.map_err(FlowServerError::Unreadable)?;
        let body: Value = serde_json::from_slice(&body).map_err(|err| FlowServerError::Unreadable(err.to_string()))?;
        let items = match body {
            Value::Array(items) => items,
            Value::Object(mut page) => match page.remove("items") {
                Some(Value::Array(items)) => items,
                _ => return Err(FlowServerError::Unreadable("an object without an items array".into())),
            },
            _ => return Err(FlowServerError::Unreadable("neither an array nor a page".into())),
        };
        let mut flows = Vec::with_capacity(items.len());
        for item in items {
            let flow: Flow =
                serde_json::from_value(item).map_err(|err| FlowServerError::Unreadable(err.to_string()))?;
            if flow.is_component != Some(true) {
                flows.push(flow);
            }
        }
        Ok(flows)
    }
}
