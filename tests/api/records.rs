//! The record store under agents, tools, MCP configurations and language models, driven directly
//! so that races are deterministic: optimistic locking by revision, hard delete against a
//! concurrent rename, idempotent transactions, and DynamoDB's key and item size limits.

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::Utc;
use integration_tests::TestStack;
use platform_api::envelope::{ApiError, ErrorCode};
use platform_data::ids::{AccountId, ToolId};
use platform_data::records::WriteError;
use platform_data::tools::{Tool, ToolSpec, ToolStore, ToolType};
use serde_json::{Map, Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

fn spec(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        description: Some("looks things up".into()),
        tool_type: ToolType::Http,
        input_schema: Map::from_iter([("type".to_owned(), json!("object"))]),
        script: None,
        config: Map::from_iter([("url".to_owned(), json!("https://example.com/lookup"))]),
        metadata: Map::new(),
    }
}

fn new_tool(account: AccountId, name: &str) -> Tool {
    let now = Utc::now();
    Tool {
        id: ToolId::new_v4(),
        account_id: account,
        spec: spec(name),
        created_at: now,
        updated_at: now,
        deleted_at: None,
        revision: 0,
    }
}

async fn read(store: &ToolStore, tool: &Tool) -> Tool {
    store.get(tool.account_id, tool.id).await.expect("read").expect("the tool exists")
}

fn renamed(previous: &Tool, name: &str) -> Tool {
    Tool { spec: spec(name), updated_at: Utc::now(), ..previous.clone() }
}

#[tokio::test]
async fn a_replace_from_a_stale_read_of_an_existing_record_is_a_conflict() {
    let stack = TestStack::new().await;
    let store = stack.tools();
    let tool = new_tool(AccountId::new_v4(), "lookup");
    store.create(&tool).await.expect("created");

    let stale = read(&store, &tool).await;
    let fresh = read(&store, &tool).await;
    store.replace(&renamed(&fresh, "lookup v2"), &fresh).await.expect("the first writer wins");

    let err = store.replace(&renamed(&stale, "lookup v3"), &stale).await.expect_err("a stale write is refused");
    let api = ApiError::from_write(err, "tool");
    assert_eq!(api.code, ErrorCode::Conflict, "the record exists, so a lost race is 409, not 404: {api:?}");
    assert_eq!(read(&store, &tool).await.spec.name, "lookup v2", "the stale write changed nothing");
}

#[tokio::test]
async fn a_replace_of_a_record_deleted_meanwhile_is_not_found() {
    let stack = TestStack::new().await;
    let store = stack.tools();
    let tool = new_tool(AccountId::new_v4(), "lookup");
    store.create(&tool).await.expect("created");
    let stale = read(&store, &tool).await;
    store.soft_delete(tool.account_id, tool.id, Utc::now()).await.expect("soft-deleted");

    let err = store.replace(&renamed(&stale, "other"), &stale).await.expect_err("refused");
    assert_eq!(ApiError::from_write(err, "tool").code, ErrorCode::ResourceNotFound);
}

#[tokio::test]
async fn a_hard_delete_racing_a_rename_never_leaves_the_new_name_reserved() {
    let stack = TestStack::new().await;
    let store = stack.tools();
    let account = AccountId::new_v4();
    let tool = new_tool(account, "alpha");
    store.create(&tool).await.expect("created");

    // The delete reads the record, then a rename commits, then the delete's transaction runs.
    let read_by_delete = read(&store, &tool).await;
    let fresh = read(&store, &tool).await;
    store.replace(&renamed(&fresh, "beta"), &fresh).await.expect("renamed");
    let err = store.delete(&read_by_delete).await.expect_err("the delete must not go through with a stale read");
    assert_eq!(ApiError::from_write(err, "tool").code, ErrorCode::Conflict);
    assert_eq!(read(&store, &tool).await.spec.name, "beta", "the record is still there, renamed");

    // Deleting from a fresh read removes the record and frees the name it has now.
    store.delete(&read(&store, &tool).await).await.expect("deleted");
    assert!(store.get(account, tool.id).await.expect("read").is_none());
    store.create(&new_tool(account, "beta")).await.expect("the name is free again");
    store.create(&new_tool(account, "alpha")).await.expect("the old name was freed by the rename");
}

#[tokio::test]
async fn names_of_255_four_byte_characters_are_stored_and_stay_unique() {
    let stack = TestStack::new().await;
    let store = stack.tools();
    let account = AccountId::new_v4();
    let name = "𝔸".repeat(255);
    assert_eq!(name.len(), 1020);

    store.create(&new_tool(account, &name)).await.expect("a 1020-byte name fits");
    let err = store.create(&new_tool(account, &name)).await.expect_err("the name is taken");
    assert_eq!(ApiError::from_write(err, "tool").code, ErrorCode::Conflict);
    // Another account may use it.
    store.create(&new_tool(AccountId::new_v4(), &name)).await.expect("names are unique per account");
}

#[tokio::test]
async fn a_record_over_dynamodb_item_limit_is_refused_naming_its_largest_field() {
    let stack = TestStack::new().await;
    let store = stack.tools();
    let mut tool = new_tool(AccountId::new_v4(), "huge");
    tool.spec.metadata.insert("blob".into(), Value::String("x".repeat(500 * 1024)));

    let err = store.create(&tool).await.expect_err("over 400 KB");
    let api = ApiError::from_write(err, "tool");
    assert_eq!(api.code, ErrorCode::ValidationError, "{api:?}");
    assert!(api.details.contains_key("metadata"), "details name the field: {:?}", api.details);
    assert!(store.get(tool.account_id, tool.id).await.expect("read").is_none(), "nothing was written");
    // The name was not reserved either.
    store.create(&new_tool(tool.account_id, "huge")).await.expect("name still free");
}

#[tokio::test]
async fn records_stored_before_revisions_load_and_can_be_replaced() {
    let stack = TestStack::new().await;
    let store = stack.tools();
    let tool = new_tool(AccountId::new_v4(), "legacy");
    store.create(&tool).await.expect("created");
    // Strip the revision, as items written before it existed lack it.
    stack
        .dynamodb
        .update_item()
        .table_name(stack.setting(platform_api::settings::TOOLS_TABLE))
        .key("pk", AttributeValue::S(format!("ACCOUNT#{}", tool.account_id)))
        .key("sk", AttributeValue::S(format!("TOOL#{}", tool.id)))
        .update_expression("REMOVE revision")
        .send()
        .await
        .expect("revision removed");

    let legacy = read(&store, &tool).await;
    assert_eq!(legacy.revision, 0);
    store.replace(&renamed(&legacy, "legacy v2"), &legacy).await.expect("a legacy record can be replaced");
    let replaced = read(&store, &tool).await;
    assert_eq!(replaced.spec.name, "legacy v2");
    assert_eq!(replaced.revision, 1);
    let err = store.replace(&renamed(&legacy, "legacy v3"), &legacy).await.expect_err("now stale");
    assert!(matches!(err, WriteError::Conflict), "{err:?}");
}

/// Records the `ClientRequestToken` of every TransactWriteItems attempt; with `fail_first`, turns
/// the first attempt's answer into a 500 after DynamoDB committed it, so the SDK retries.
#[derive(Debug, Clone, Default)]
struct TransactionTokens {
    tokens: Arc<Mutex<Vec<Option<String>>>>,
    fail_first: bool,
    answered: Arc<AtomicUsize>,
}

fn is_transaction(headers: &aws_sdk_dynamodb::config::http::HttpRequest) -> bool {
    headers.headers().get("x-amz-target").is_some_and(|target| target.ends_with(".TransactWriteItems"))
}

impl Intercept for TransactionTokens {
    fn name(&self) -> &'static str {
        "TransactionTokens"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let request = context.request();
        if is_transaction(request) {
            let body: Value = serde_json::from_slice(request.body().bytes().unwrap_or_default())?;
            let token = body.get("ClientRequestToken").and_then(Value::as_str).map(str::to_owned);
            self.tokens.lock().expect("lock").push(token);
        }
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        if self.fail_first
            && !self.tokens.lock().expect("lock").is_empty()
            && self.answered.fetch_add(1, Ordering::SeqCst) == 0
        {
            *context.response_mut().status_mut() = 500.try_into()?;
        }
        Ok(())
    }
}

fn store_with(stack: &TestStack, interceptor: TransactionTokens) -> ToolStore {
    let client = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&stack.sdk).interceptor(interceptor).build(),
    );
    ToolStore::new(client, stack.setting(platform_api::settings::TOOLS_TABLE))
}

#[tokio::test]
async fn sdk_retries_of_a_transaction_resend_its_client_request_token() {
    let stack = TestStack::new().await;
    let tokens = TransactionTokens { fail_first: true, ..TransactionTokens::default() };
    let store = store_with(&stack, tokens.clone());
    let tool = new_tool(AccountId::new_v4(), "retried");
    // The local endpoint does not implement idempotency tokens, so the retry of the committed
    // create is refused here; DynamoDB answers it with success because the token is the same.
    let _ = store.create(&tool).await;
    let seen = tokens.tokens.lock().expect("lock").clone();
    assert_eq!(seen.len(), 2, "one retry: {seen:?}");
    assert!(seen[0].is_some(), "every transaction carries a token");
    assert_eq!(seen[0], seen[1], "a retry resends the same token");
}

#[tokio::test]
async fn the_same_write_sent_twice_carries_the_same_client_request_token() {
    let stack = TestStack::new().await;
    let tokens = TransactionTokens::default();
    let store = store_with(&stack, tokens.clone());
    let account = AccountId::new_v4();
    let tool = new_tool(account, "twice");
    store.create(&tool).await.expect("created");
    let _ = store.create(&tool).await;
    let previous = read(&store, &tool).await;
    let next = renamed(&previous, "twice v2");
    store.replace(&next, &previous).await.expect("replaced");
    let _ = store.replace(&next, &previous).await;
    let other = renamed(&previous, "twice v3");
    let _ = store.replace(&other, &previous).await;

    let seen = tokens.tokens.lock().expect("lock").clone();
    assert_eq!(seen.len(), 5, "{seen:?}");
    assert!(seen.iter().all(Option::is_some), "{seen:?}");
    assert_eq!(seen[0], seen[1], "the same create is the same token");
    assert_eq!(seen[2], seen[3], "the same replacement is the same token");
    assert_ne!(seen[0], seen[2], "another write is another token");
    assert_ne!(seen[2], seen[4], "a different replacement of the same revision is another token");
}
