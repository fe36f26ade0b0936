//! A remote agent speaking A2A (JSON-RPC 2.0 over HTTP): its card at
//! `/.well-known/agent-card.json`, `message/stream` answered with Server-Sent Events of task
//! updates, `message/send` with the finished task. The messages received are kept.

use crate::local_server::{Handler, LocalServer, respond};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// How the remote task ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteOutcome {
    Completed,
    Failed,
}

/// A running A2A agent.
pub struct A2aServer {
    pub server: LocalServer,
    /// The JSON-RPC requests received.
    pub requests: Arc<Mutex<Vec<Value>>>,
}

impl A2aServer {
    /// Starts an agent whose card says `streaming`, answering "Hello" split in two artifact
    /// chunks, its task ending as `outcome`.
    pub async fn start(streaming: bool, outcome: RemoteOutcome) -> Self {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        let address: Arc<Mutex<String>> = Arc::new(Mutex::new(String::new()));
        let base = Arc::clone(&address);
        let handler: Handler = Arc::new(move |request| {
            let (seen, base) = (Arc::clone(&seen), Arc::clone(&base));
            Box::pin(async move {
                let host = request.headers().get("host").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                if request.method() == hyper::Method::GET && request.uri().path() == "/.well-known/agent-card.json" {
                    *base.lock().unwrap() = host.clone();
                    let card = json!({"name": "Remote", "url": format!("http://{host}/a2a"), "version": "1.0",
                        "capabilities": {"streaming": streaming}, "skills": []});
                    return respond(200, "application/json", card.to_string());
                }
                if request.method() != hyper::Method::POST || request.uri().path() != "/a2a" {
                    return respond(404, "text/plain", "not found");
                }
                let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                let call: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                seen.lock().unwrap().push(call.clone());
                let id = call["id"].clone();
                let (state, text) = match outcome {
                    RemoteOutcome::Completed => ("completed", "Done."),
                    RemoteOutcome::Failed => ("failed", "quota exceeded"),
                };
                let status = json!({"state": state, "message": {"kind": "message", "role": "agent", "messageId": "m2",
                    "parts": [{"kind": "text", "text": text}]}});
                let artifact = |chunk: &str| {
                    json!({"kind": "artifact-update", "taskId": "t1", "contextId": "c1",
                    "artifact": {"artifactId": "a1", "parts": [{"kind": "text", "text": chunk}]}, "append": true})
                };
                match call["method"].as_str() {
                    Some("message/stream") => {
                        let results = [
                            json!({"kind": "task", "id": "t1", "contextId": "c1", "status": {"state": "submitted"}}),
                            json!({"kind": "status-update", "taskId": "t1", "contextId": "c1", "status": {"state": "working"}, "final": false}),
                            artifact("Hel"),
                            artifact("lo. "),
                            json!({"kind": "status-update", "taskId": "t1", "contextId": "c1", "status": status, "final": true}),
                        ];
                        let stream: String = results
                            .iter()
                            .map(|result| {
                                format!("data: {}\n\n", json!({"jsonrpc": "2.0", "id": id, "result": result}))
                            })
                            .collect();
                        respond(200, "text/event-stream", stream)
                    }
                    Some("message/send") => {
                        let task = json!({"kind": "task", "id": "t1", "contextId": "c1", "status": status,
                            "artifacts": [{"artifactId": "a1", "parts": [{"kind": "text", "text": "Hello. "}]}]});
                        respond(
                            200,
                            "application/json",
                            json!({"jsonrpc": "2.0", "id": id, "result": task}).to_string(),
                        )
                    }
                    _ => respond(
                        200,
                        "application/json",
                        json!({"jsonrpc": "2.0", "id": id,
                        "error": {"code": -32601, "message": "Method not found"}})
                        .to_string(),
                    ),
                }
            })
        });
        Self { server: LocalServer::start(handler).await, requests }
    }
}
