//! `/agents/…`: the AgentCreate rules, the state table, tenant isolation, filters.

use http::Method;
use integration_tests::{TestClient, TestClock, TestStack};
use platform_api::{AgentsService, LanguageModelsService, McpsService};
use serde_json::{Value, json};
use uuid::Uuid;

struct Fixture {
    stack: TestStack,
    clock: TestClock,
    /// The agents function, called with the account's key.
    api: TestClient,
    /// The same, called with another account's key.
    other: TestClient,
    key: String,
    account: Uuid,
}

async fn fixture() -> Fixture {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let other_key = stack.api_key(Uuid::new_v4()).await;
    let agents = stack.client::<AgentsService>(&clock);
    let (api, other) = (agents.with_key(&key), agents.with_key(&other_key));
    Fixture { stack, clock, api, other, key, account }
}

impl Fixture {
    /// The model fields of an agent's detail: `[language_model_id, provider, model_name]`.
    async fn resolved_model(&self, id: String) -> Value {
        let detail = self.api.get(&format!("/agents/{id}")).expect(200).await["data"].clone();
        json!([detail["language_model_id"], detail["provider"], detail["model_name"]])
    }

    async fn create(&self, body: Value) -> String {
        self.api.post("/agents/", body).created().await
    }
}

fn config(name: &str) -> Value {
    json!({"type": "config", "name": name, "framework": "chainlib", "language_model_id": "lm-1"})
}

/// Eight creates of one name at once (the name marker's conditional transaction, atomic on
/// DynamoDB Local as in AWS): one is created, seven are refused with 409 (the name is taken; in
/// AWS a loser may also meet the winner's transaction in flight, `TransactionConflict`, also a
/// 409 `CONFLICT`), and the account lists one agent.
#[tokio::test]
async fn concurrent_creates_of_one_name_have_one_winner() {
    let f = fixture().await;
    let replies = futures_util::future::join_all((0..8).map(|_| f.api.post("/agents/", config("Racer")).send())).await;
    let mut statuses: Vec<u16> = replies.iter().map(|reply| reply.status.as_u16()).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [201, 409, 409, 409, 409, 409, 409, 409]);
    for reply in replies.iter().filter(|reply| reply.status == 409) {
        reply.error(409, "CONFLICT");
    }
    assert_eq!(f.api.get("/agents/?page=1").expect(200).await["pagination"]["total"], 1);
}

#[tokio::test]
async fn create_then_read_the_detail_and_the_list() {
    let f = fixture().await;
    let body = json!({
        "type": "config", "name": "Researcher", "framework": "graphlib", "provider": "openai", "model_name": "gpt-x",
        "instruction": "Find things.", "version": "1.2", "description": "Looks things up",
        "metadata": {"display_name": "R", "is_shown": true, "timeout": 30}, "agent_config": {"planning": true}
    });
    let reply = f.api.post("/agents/", body).send().await;
    let created = reply.expect(201);
    assert_eq!(created["success"], true);
    assert_eq!(created["data"]["name"], "Researcher");
    let id = created["data"]["id"].as_str().unwrap();
    assert!(Uuid::parse_str(id).is_ok());
    assert!(reply.header("x-ratelimit-remaining").is_some());

    let detail = f.api.get(&format!("/agents/{id}")).expect(200).await["data"].clone();
    assert_eq!(detail["id"], id);
    assert_eq!(detail["account_id"], f.account.to_string());
    assert_eq!((detail["type"].as_str(), detail["framework"].as_str()), (Some("config"), Some("graphlib")));
    assert_eq!((detail["provider"].as_str(), detail["model_name"].as_str()), (Some("openai"), Some("gpt-x")));
    assert_eq!(detail["language_model_id"], "", "the pair names no stored model");
    assert_eq!(detail["tools"], json!([]));
    assert_eq!(detail["agent_config"], json!({"planning": true}));
    assert_eq!(detail["metadata"]["timeout"], 30);

    // The spec's list: every agent, in the envelope without `pagination`.
    let list = f.api.get("/agents/").expect(200).await;
    assert!(list.get("pagination").is_none(), "{list}");
    assert_eq!(list["data"].as_array().map(Vec::len), Some(1));
    let item = &list["data"][0];
    let mut keys: Vec<&str> = item.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["created_at", "deleted_at", "description", "id", "metadata", "name", "updated_at", "version"]);
    assert_eq!(item["deleted_at"], Value::Null);
}

#[tokio::test]
async fn bad_input_is_400_constraints_422_duplicates_409() {
    let f = fixture().await;
    f.api.request(Method::POST, "/agents/").body("application/json", "{not json").error(400, "BAD_REQUEST").await;
    let details =
        f.api.post("/agents/", json!({"type": "config", "tools": "x"})).error(400, "BAD_REQUEST").await["details"]
            .clone();
    assert_eq!(details, json!({"tools": "must be an array of strings"}));
    let details =
        f.api.post("/agents/", json!({"type": "config", "name": "x"})).error(422, "VALIDATION_ERROR").await["details"]
            .clone();
    assert!(details["framework"].is_string() && details["language_model_id"].is_string(), "{details}");
    let details = f.api.post("/agents/", json!({"type": "config", "name": "n", "framework": "chainlib", "language_model_id": "l", "tools": ["nope"]})).error(422, "VALIDATION_ERROR").await["details"].clone();
    assert_eq!(details, json!({"tools[0]": "must be a UUID"}));

    f.create(config("Unique")).await;
    let details = f.api.post("/agents/", config("Unique")).error(409, "CONFLICT").await["details"].clone();
    assert_eq!(details["name"], "already exists in this account");
    // Another account may use the same name.
    f.other.post("/agents/", config("Unique")).expect(201).await;
}

#[tokio::test]
async fn a_max_recursion_limit_above_the_bound_is_422_on_create_and_replace() {
    let f = fixture().await;
    let with_limit = |limit: Value| {
        let mut body = config("Deep");
        body["agent_config"] = json!({"max_recursion_limit": limit});
        body
    };
    for too_many in [json!(1001), json!(4_294_967_295u64), json!(1e12)] {
        let details =
            f.api.post("/agents/", with_limit(too_many)).error(422, "VALIDATION_ERROR").await["details"].clone();
        assert_eq!(details, json!({"agent_config.max_recursion_limit": "must be at most 1000"}));
    }
    let id = f.create(with_limit(json!(1000))).await;
    let details =
        f.api.put(&format!("/agents/{id}"), with_limit(json!(5000))).error(422, "VALIDATION_ERROR").await["details"]
            .clone();
    assert_eq!(details, json!({"agent_config.max_recursion_limit": "must be at most 1000"}));
}

#[tokio::test]
async fn soft_delete_and_restore_follow_the_state_table() {
    let f = fixture().await;
    let id = f.create(config("Doomed")).await;
    let path = format!("/agents/{id}");
    let deleted = f.api.delete(&path).expect(200).await;
    assert_eq!(deleted["data"]["id"], id);
    assert!(deleted["data"]["deleted_at"].is_string());
    f.api.get(&path).error(404, "RESOURCE_NOT_FOUND").await;
    f.api.delete(&path).error(404, "RESOURCE_NOT_FOUND").await;
    f.api.put(&path, config("Doomed")).error(404, "RESOURCE_NOT_FOUND").await;
    assert_eq!(f.api.get("/agents/").expect(200).await["data"], json!([]));
    // The name stays reserved while deleted, so restore never conflicts.
    f.api.post("/agents/", config("Doomed")).error(409, "CONFLICT").await;

    let restored = f.api.request(Method::POST, &format!("{path}/restore")).expect(200).await;
    assert_eq!(restored["data"], json!({"id": id, "status": "restored"}));
    f.api.get(&path).expect(200).await;
    // Restoring an active agent is 404, as is an unknown one.
    f.api.request(Method::POST, &format!("{path}/restore")).error(404, "RESOURCE_NOT_FOUND").await;
    f.api.request(Method::POST, &format!("/agents/{}/restore", Uuid::new_v4())).error(404, "RESOURCE_NOT_FOUND").await;
}

#[tokio::test]
async fn another_accounts_agents_are_not_found_and_ids_must_be_uuids() {
    let f = fixture().await;
    let id = f.create(config("Mine")).await;
    for (method, suffix, body) in [
        (Method::GET, "", None),
        (Method::PUT, "", Some(config("Stolen"))),
        (Method::PATCH, "", Some(json!({"description": "x"}))),
        (Method::DELETE, "", None),
        (Method::POST, "/restore", None),
    ] {
        f.other.request(method, &format!("/agents/{id}{suffix}")).json(body).error(404, "RESOURCE_NOT_FOUND").await;
    }
    let list = f.other.get("/agents/").expect(200).await;
    assert_eq!(list["data"], json!([]));
    let details = f.api.get("/agents/not-a-uuid").error(422, "VALIDATION_ERROR").await["details"].clone();
    assert_eq!(details, json!({"agent_id": "must be a UUID"}));
    let details = f
        .api
        .post("/agents/", json!({"type": "a2a", "name": "A", "account_id": Uuid::new_v4().to_string()}))
        .error(422, "VALIDATION_ERROR")
        .await["details"]
        .clone();
    assert!(details["account_id"].is_string());
}

#[tokio::test]
async fn put_replaces_and_moves_the_name() {
    let f = fixture().await;
    let first = f.create(config("First")).await;
    f.create(config("Second")).await;
    let path = format!("/agents/{first}");
    let replaced = f
        .api
        .put(&path, json!({"type": "a2a", "name": "Renamed", "a2a_profile": {"url": "https://remote.test/a2a"}}))
        .expect(200)
        .await;
    assert_eq!(replaced["data"]["name"], "Renamed");
    assert_eq!(replaced["data"]["framework"], "chainlib");
    assert_eq!(replaced["data"]["language_model_id"], "");
    // The old name is free again; a taken one is a conflict.
    f.create(config("First")).await;
    f.api.put(&path, config("Second")).error(409, "CONFLICT").await;
    // Replace needs every required field.
    f.api.put(&path, json!({"name": "x"})).error(422, "VALIDATION_ERROR").await;
}

#[tokio::test]
async fn patch_validates_what_is_sent_and_keeps_selectors_exclusive() {
    let f = fixture().await;
    let id = f.create(config("Patchy")).await;
    let path = format!("/agents/{id}");
    let patched = f.api.patch(&path, json!({"description": "now described", "version": "2"})).expect(200).await;
    assert_eq!(patched["data"]["description"], "now described");
    assert_eq!(patched["data"]["name"], "Patchy");
    assert_eq!(patched["data"]["language_model_id"], "lm-1");

    let details = f
        .api
        .patch(&path, json!({"provider": "openai", "model_name": "m"}))
        .error(422, "VALIDATION_ERROR")
        .await["details"]
        .clone();
    assert!(details["language_model_id"].as_str().unwrap().contains("one mechanism only"));
    // Switching mechanism: clear the old one in the same patch.
    let switched = f
        .api
        .patch(&path, json!({"language_model_id": null, "provider": "openai", "model_name": "m"}))
        .expect(200)
        .await;
    assert_eq!(
        (switched["data"]["provider"].as_str(), switched["data"]["language_model_id"].as_str()),
        (Some("openai"), Some(""))
    );
    f.api.patch(&path, json!({"version": 3})).error(400, "BAD_REQUEST").await;
    f.api.patch(&path, json!([1])).error(400, "BAD_REQUEST").await;
}

#[tokio::test]
async fn list_filters_and_pagination() {
    let f = fixture().await;
    f.create(json!({"type": "config", "name": "Alpha Writer", "framework": "chainlib", "language_model_id": "l", "version": "1", "metadata": {"team": "docs", "is_shown": true}})).await;
    f.create(json!({"type": "config", "name": "Beta", "framework": "graphlib", "language_model_id": "l", "version": "2", "metadata": {"team": "ops"}})).await;
    f.create(json!({"type": "a2a", "name": "Remote writer", "a2a_profile": {"url": "https://r.test"}})).await;
    f.create(json!({"type": "flowtool", "name": "Flow", "agent_config": {"flowtool": {"flow_id": "f1"}}})).await;
    let names = |body: Value| -> Vec<String> {
        let mut names: Vec<String> =
            body["data"].as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap().to_owned()).collect();
        names.sort();
        names
    };
    let cases: &[(&str, &[&str])] = &[
        ("agent_type=config", &["Alpha Writer", "Beta"]),
        ("agent_type=a2a", &["Remote writer"]),
        ("agent_type=code", &[]),
        ("framework=chainlib", &["Alpha Writer", "Remote writer"]),
        ("name=WRITER", &["Alpha Writer", "Remote writer"]),
        ("version=1", &["Alpha Writer"]),
        ("metadata.team=ops", &["Beta"]),
        ("metadata.is_shown=true", &["Alpha Writer"]),
        ("agent_type=config&metadata.team=docs&name=alpha", &["Alpha Writer"]),
    ];
    for (query, expected) in cases {
        let body = f.api.get(&format!("/agents/?{query}")).expect(200).await;
        assert_eq!(names(body), *expected, "{query}");
    }
    let page = f.api.get("/agents/?limit=3&page=2").expect(200).await;
    assert_eq!(page["pagination"], json!({"page": 2, "limit": 3, "total": 4, "pages": 2}));
    assert_eq!(page["data"].as_array().unwrap().len(), 1);
    // Without `page` or `limit`, every agent, past the pages' default limit of 20.
    for i in 0..20 {
        f.create(json!({"type": "a2a", "name": format!("Many {i}"), "a2a_profile": {"url": "https://r.test"}})).await;
    }
    let whole = f.api.get("/agents/").expect(200).await;
    assert_eq!(whole["data"].as_array().map(Vec::len), Some(24));
    assert!(whole.get("pagination").is_none());
    let first = f.api.get("/agents/?page=1").expect(200).await;
    assert_eq!(first["pagination"], json!({"page": 1, "limit": 20, "total": 24, "pages": 2}));
    for bad in ["limit=0", "limit=101", "page=0", "page=x", "agent_type=robot", "framework=other"] {
        f.api.get(&format!("/agents/?{bad}")).error(422, "VALIDATION_ERROR").await;
    }
}

#[tokio::test]
async fn references_must_exist_and_are_expanded() {
    let f = fixture().await;
    let helper = f.create(json!({"type": "config", "name": "Helper", "framework": "chainlib", "language_model_id": "l", "description": "helps"})).await;
    let lead = f.create(json!({"type": "config", "name": "Lead", "framework": "chainlib", "language_model_id": "l", "agents": [helper]})).await;
    let detail = f.api.get(&format!("/agents/{lead}")).expect(200).await;
    assert_eq!(detail["data"]["agents"], json!([{"id": helper, "name": "Helper", "description": "helps"}]));

    let missing = Uuid::new_v4();
    let details = f
        .api
        .post("/agents/", json!({"type": "a2a", "name": "X", "agents": [helper, missing], "tools": [missing]}))
        .error(422, "VALIDATION_ERROR")
        .await["details"]
        .clone();
    assert_eq!(details["agents[1]"], format!("agent {missing} does not exist"));
    assert_eq!(details["tools[0]"], format!("tool {missing} does not exist"));
    assert!(details.get("agents[0]").is_none());
    // A deleted sub-agent cannot be referenced.
    f.api.delete(&format!("/agents/{helper}")).expect(200).await;
    f.api
        .post("/agents/", json!({"type": "a2a", "name": "Y", "agents": [helper]}))
        .error(422, "VALIDATION_ERROR")
        .await;
}

#[tokio::test]
async fn mcp_references_must_be_active_configurations_and_are_expanded() {
    let f = fixture().await;
    let mcps = f.stack.client::<McpsService>(&f.clock);
    let body = json!({"name": "Search", "description": "Web search", "url": "https://mcp.example.com/mcp",
        "secret_headers": {"X-Token": "s3cret"}});
    let mcp = mcps.with_key(&f.key).post("/mcps", body).created().await;
    // A repeated id is one configuration (and never a store error).
    let agent = f.create(json!({"type": "a2a", "name": "Searcher", "mcps": [mcp, mcp]})).await;
    let detail = f.api.get(&format!("/agents/{agent}")).expect(200).await;
    // The spec's "array of MCP configuration": each as `GET /mcps/{id}` shows it, secrets by
    // name only.
    let shown = mcps.with_key(&f.key).get(&format!("/mcps/{mcp}")).expect(200).await["data"].clone();
    assert_eq!(detail["data"]["mcps"], json!([shown]));
    assert_eq!(detail["data"]["mcps"][0]["secret_header_names"], json!(["x-token"]));
    assert!(!detail.to_string().contains("s3cret"), "no secret value in the detail");
    // Strings the agent has no value for are "", never null and never left out (DESIGN.md
    // "Field presence"); an agent with no model shows "" for its model fields too.
    let fields = detail["data"].as_object().unwrap();
    for field in ["description", "instruction", "version", "language_model_id", "provider", "model_name"] {
        assert_eq!(fields.get(field), Some(&json!("")), "{field}: {fields:?}");
    }
    let listed = f.api.get("/agents/").expect(200).await;
    let item = listed["data"].as_array().unwrap().iter().find(|item| item["id"] == agent.as_str()).unwrap().clone();
    assert_eq!((&item["version"], &item["description"]), (&json!(""), &json!("")), "{item}");

    // Another account's configuration, a missing one and a deleted one are all "does not exist".
    let stranger = f.stack.api_key(Uuid::new_v4()).await;
    let foreign =
        mcps.with_key(&stranger).post("/mcps", json!({"name": "F", "url": "https://f.test/mcp"})).created().await;
    let details = f
        .api
        .post("/agents/", json!({"type": "a2a", "name": "X", "mcps": [mcp, foreign]}))
        .error(422, "VALIDATION_ERROR")
        .await["details"]
        .clone();
    assert_eq!(details["mcps[1]"], format!("MCP configuration {foreign} does not exist"));
    mcps.with_key(&f.key).delete(&format!("/mcps/{mcp}")).expect(200).await;
    // A reference deleted since is left out of the detail.
    let detail = f.api.get(&format!("/agents/{agent}")).expect(200).await;
    assert_eq!(detail["data"]["mcps"], json!([]));
    let details =
        f.api.post("/agents/", json!({"type": "a2a", "name": "Y", "mcps": [mcp]})).error(422, "VALIDATION_ERROR").await
            ["details"]
            .clone();
    assert_eq!(details["mcps[0]"], format!("MCP configuration {mcp} does not exist"));
}

#[tokio::test]
async fn the_detail_resolves_the_language_model_the_agent_names() {
    let f = fixture().await;
    let models = f.stack.client::<LanguageModelsService>(&f.clock).with_key(&f.key);
    let model = |name: &str, provider: &str| json!({"name": name, "provider": provider, "model_name": "gpt-x"});
    let openai = models.post("/language-models", model("Prod", "openai")).created().await;
    models.post("/language-models", model("Claude", "anthropic")).expect(201).await;

    // Whichever selector names the model, the detail shows all three of its fields.
    let resolved = json!([openai, "openai", "gpt-x"]);
    let by_id =
        f.create(json!({"type": "config", "name": "Id", "framework": "chainlib", "language_model_id": openai})).await;
    assert_eq!(f.resolved_model(by_id).await, resolved);
    let by_pair = f
        .create(json!({"type": "config", "name": "Pair", "framework": "chainlib", "provider": "openai", "model_name": "gpt-x"}))
        .await;
    assert_eq!(f.resolved_model(by_pair).await, resolved);
    let by_name = f
        .create(json!({"type": "config", "name": "Named", "framework": "chainlib", "agent_config": {"lm_provider": "Prod"}}))
        .await;
    assert_eq!(f.resolved_model(by_name).await, resolved);
    let by_object = f
        .create(json!({"type": "config", "name": "Object", "framework": "chainlib",
            "agent_config": {"lm_provider": {"provider": "openai", "model_name": "gpt-x"}}}))
        .await;
    assert_eq!(f.resolved_model(by_object).await, resolved);
    // Naming no stored model: what was given, and "" for what was not.
    let unknown = f
        .create(json!({"type": "config", "name": "Unknown", "framework": "chainlib", "provider": "bedrock", "model_name": "gpt-x"}))
        .await;
    assert_eq!(f.resolved_model(unknown).await, json!(["", "bedrock", "gpt-x"]));
    let direct = f.create(config("Direct")).await;
    assert_eq!(f.resolved_model(direct).await, json!(["lm-1", "", ""]));
    let remote = f.create(json!({"type": "a2a", "name": "Remote", "a2a_profile": {"url": "https://a2a.test"}})).await;
    assert_eq!(f.resolved_model(remote).await, json!(["", "", ""]));
}
