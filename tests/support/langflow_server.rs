//! A scripted flow server speaking Langflow 1.13's API: `GET /api/v1/flows/` (header-only
//! list), `GET /api/v1/flows/{id}` (a flow with its graph, `data.nodes[].data.type`) and
//! `POST /api/v1/run/{id}?stream=true` (newline-delimited JSON events), each behind
//! `x-api-key`. Its flows answer as Langflow's do: a chat flow streams `token` events, a failing
//! flow sends the two `error` events of a component failure, a text flow answers only when run
//! with `input_type`/`output_type` `text`.

use crate::local_server::{Handler, LocalServer, respond};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// What a scripted flow does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowKind {
    /// Chat Input → Chat Output, its answer streamed as `token` events ("Hi ", "there").
    Chat,
    /// A component that raises `boom`.
    Failing,
    /// Text Input → Text Output, answering `You said: {input}`.
    Text,
}

/// A request the server received: its path and query, its `x-api-key`, its JSON body.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub api_key: Option<String>,
    pub body: Value,
}

/// The running server.
pub struct LangflowServer {
    pub server: LocalServer,
    flows: Arc<Mutex<BTreeMap<String, FlowKind>>>,
    received: Arc<Mutex<Vec<Received>>>,
}

impl LangflowServer {
    /// Serves `flows` (id and kind; the name is `Flow {id}`) to callers with `api_key`.
    pub async fn start(api_key: &str, flows: &[(&str, FlowKind)]) -> Self {
        let flows: BTreeMap<String, FlowKind> = flows.iter().map(|(id, kind)| ((*id).to_owned(), *kind)).collect();
        let flows = Arc::new(Mutex::new(flows));
        let received = Arc::new(Mutex::new(Vec::new()));
        let (known, seen, key) = (Arc::clone(&flows), Arc::clone(&received), api_key.to_owned());
        let handler: Handler = Arc::new(move |request| {
            let (known, seen, key) = (Arc::clone(&known), Arc::clone(&seen), key.clone());
            Box::pin(async move {
                let path = request.uri().to_string();
                let api_key = request.headers().get("x-api-key").and_then(|v| v.to_str().ok()).map(str::to_owned);
                let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                let body = serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null);
                seen.lock().unwrap().push(Received {
                    path: path.clone(),
                    api_key: api_key.clone(),
                    body: body.clone(),
                });
                if api_key.as_deref() != Some(key.as_str()) {
                    return respond(403, "application/json", r#"{"detail":"Invalid API key"}"#);
                }
                let flows = known.lock().unwrap().clone();
                let not_found = || respond(404, "application/json", r#"{"detail":"Flow not found"}"#);
                if path.starts_with("/api/v1/flows/?") {
                    let list: Vec<Value> = flows
                        .keys()
                        .map(|id| {
                            json!({"id": id, "name": format!("Flow {id}"), "description": "", "folder_id": "d",
                            "endpoint_name": null, "is_component": false})
                        })
                        .collect();
                    return respond(200, "application/json", Value::Array(list).to_string());
                }
                if let Some(id) = path.strip_prefix("/api/v1/flows/") {
                    let Some(kind) = flows.get(id) else { return not_found() };
                    return respond(200, "application/json", flow(id, *kind).to_string());
                }
                if let Some(id) = path.strip_prefix("/api/v1/run/").and_then(|rest| rest.strip_suffix("?stream=true")) {
                    let Some(kind) = flows.get(id) else { return not_found() };
                    let stream: String = run_events(*kind, &body).iter().map(|event| format!("{event}\n\n")).collect();
                    return respond(200, "text/event-stream", stream);
                }
                not_found()
            })
        });
        Self { server: LocalServer::start(handler).await, flows, received }
    }

    /// `http://127.0.0.1:{port}{path}`.
    pub fn url(&self, path: &str) -> String {
        self.server.url(path)
    }

    /// Edits flow `id` into a flow of `kind` (its graph changes).
    pub fn edit(&self, id: &str, kind: FlowKind) {
        self.flows.lock().unwrap().insert(id.to_owned(), kind);
    }

    /// Every request so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// The bodies of the runs so far, in order.
    pub fn runs(&self) -> Vec<Value> {
        self.received().into_iter().filter(|r| r.path.starts_with("/api/v1/run/")).map(|r| r.body).collect()
    }
}

/// A flow as `GET /api/v1/flows/{id}` returns it (the graph's nodes only carry what is read).
fn flow(id: &str, kind: FlowKind) -> Value {
    let types: &[&str] = match kind {
        FlowKind::Chat => &["ChatInput", "Prompt", "ChatOutput"],
        FlowKind::Failing => &["ChatInput", "CustomComponent", "ChatOutput"],
        FlowKind::Text => &["TextInput", "TextOutput"],
    };
    let nodes: Vec<Value> = types
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"id": format!("{t}-{i}"), "type": "genericNode", "data": {"id": format!("{t}-{i}"), "type": t, "node": {}}}))
        .collect();
    json!({"id": id, "name": format!("Flow {id}"), "description": "", "data": {"nodes": nodes, "edges": []},
        "is_component": false, "endpoint_name": null})
}

/// The events Langflow streams for a run of a `kind` flow with `body`.
fn run_events(kind: FlowKind, body: &Value) -> Vec<Value> {
    let input = body["input_value"].as_str().unwrap_or_default();
    let (input_type, output_type) = (body["input_type"].as_str(), body["output_type"].as_str());
    let add_message = json!({"event": "add_message", "data": {"sender": "User", "text": input}});
    match kind {
        FlowKind::Chat => vec![
            add_message,
            json!({"event": "token", "data": {"chunk": "Hi ", "id": "m-1"}}),
            json!({"event": "token", "data": {"chunk": "there", "id": "m-1"}}),
            json!({"event": "end", "data": {"result": {"session_id": body["session_id"], "outputs": [{"inputs":
                {"input_value": input}, "outputs": [{"results": {"message": {"text": "Hi there"}},
                "component_display_name": "Chat Output"}]}]}}}),
        ],
        FlowKind::Failing => vec![
            add_message,
            json!({"event": "error", "data": {"text": "Error building Component Boom: \n\nboom", "error": false,
                "category": "error", "sender": "Machine"}}),
            json!({"event": "error", "data": {"error":
                "500: {\"message\": \"Error building Component Boom: \\n\\nboom\", \"traceback\": \"…\"}"}}),
        ],
        FlowKind::Text => {
            // The Text Input gets the message only when the run says `text`; a `chat` output
            // type returns no Text Output.
            let answer = format!("You said: {}", if input_type == Some("text") { input } else { "" });
            let outputs = if output_type == Some("text") {
                json!([{"results": {"text": {"text": answer}}, "outputs": {"text": {"message": answer, "type": "text"}},
                    "artifacts": {"text": {"raw": answer, "type": "text"}}, "component_display_name": "Text Output"}])
            } else {
                json!([])
            };
            vec![json!({"event": "end", "data": {"result": {"session_id": body["session_id"],
                "outputs": [{"inputs": {"input_value": input}, "outputs": outputs}]}}})]
        }
    }
}
