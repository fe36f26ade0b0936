//! DynamoDB's limits, met through the API on DynamoDB Local (AWS's own engine, which enforces
//! them, where moto did not): a key over 2,048 bytes (partition) or 1,024 (sort), an item over
//! 400 KB. Each is refused with its documented 4xx naming the field, before any write; never a
//! 500. (No request builds a transaction of more than three items, so the 100-item limit is out
//! of reach: docs/dynamodb.md.)

use integration_tests::model_server::{ModelServer, text_reply};
use integration_tests::{TestClock, TestStack};
use platform_api::agent_runs::MAX_SESSION_ID_BYTES;
use platform_api::{AgentRunsService, AgentsService, ToolsService};
use serde_json::json;
use uuid::Uuid;

/// A session id is part of a partition key (`{agent_id}#{session_id}`, the memory index of an
/// agent that keeps memory): one over `MAX_SESSION_ID_BYTES` is a 422 naming it, the longest
/// allowed one is stored and read back.
#[tokio::test]
async fn a_session_id_too_long_for_its_key_is_refused_naming_it() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![text_reply("Hello.")]).await;
    let key = stack.api_key(Uuid::new_v4()).await;
    let lm = stack.language_model(&clock, &key, "local", &model.base_url()).await;
    let body = json!({"type": "config", "name": "a", "framework": "chainlib", "language_model_id": lm,
                      "agent_config": {"memory": "buffer"}});
    let agent = stack.client::<AgentsService>(&clock).with_key(&key).post("/agents/", body).created().await;
    let runs = stack.client::<AgentRunsService>(&clock).with_key(&key);
    let run = |session: String| {
        crate::agent_runs::run(
            &runs,
            &agent,
            "application/json",
            json!({"message": "hi", "session_id": session}).to_string(),
        )
    };

    for length in [MAX_SESSION_ID_BYTES + 1, 3000] {
        let error = run("s".repeat(length)).error(422, "VALIDATION_ERROR").await;
        assert_eq!(error["details"]["session_id"], format!("must be at most {MAX_SESSION_ID_BYTES} bytes"));
    }
    // Multibyte characters count by their bytes.
    run("é".repeat(MAX_SESSION_ID_BYTES / 2 + 1)).error(422, "VALIDATION_ERROR").await;

    let longest = "s".repeat(MAX_SESSION_ID_BYTES);
    let reply = run(longest.clone()).send().await;
    assert_eq!(reply.status, 200);
    assert!(reply.text.contains("event: done"), "{}", reply.text);
    let listed =
        stack.client::<AgentsService>(&clock).with_key(&key).get(&format!("/agents/{agent}/runs")).expect(200).await;
    assert_eq!(listed["data"][0]["session_id"], longest.as_str());
}

/// A tool's fields are each within their own limits, yet together can exceed DynamoDB's 400 KB
/// item: that is a 422 naming the largest field, and nothing is stored.
#[tokio::test]
async fn a_tool_too_large_to_store_is_refused_naming_a_field() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let tools = stack.client::<ToolsService>(&clock).with_key(&key);
    let body = json!({
        "name": "big",
        "type": "custom",
        "script": format!("def run():\n    return 1\n# {}\n", "x".repeat(250 * 1024)),
        "metadata": {"notes": "m".repeat(60 * 1024)},
        "config": {"notes": "c".repeat(60 * 1024)},
        "input_schema": {"type": "object", "description": "i".repeat(60 * 1024), "properties": {}},
    });
    let error = tools.post("/tools", body).error(422, "VALIDATION_ERROR").await;
    assert_eq!(error["message"], "The tool is too large to store.");
    assert_eq!(error["details"]["script"], "too large: the stored record would exceed 400 KB");
    assert_eq!(tools.get("/tools").expect(200).await["pagination"]["total"], 0, "nothing stored");
}

/// A name is unique per account through a marker item whose sort key holds the name's digest,
/// not the name: the longest name (255 characters of four bytes, 1,020 bytes) fits, and is
/// still unique.
#[tokio::test]
async fn the_longest_name_is_stored_and_kept_unique() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let name = "😀".repeat(255);
    let body =
        json!({"type": "config", "name": name, "framework": "chainlib", "provider": "openai", "model_name": "m"});
    let id = agents.post("/agents/", body.clone()).created().await;
    assert_eq!(agents.get(&format!("/agents/{id}")).expect(200).await["data"]["name"], name.as_str());
    agents.post("/agents/", body).error(409, "CONFLICT").await;
}
