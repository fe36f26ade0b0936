//! Webhooks: endpoints, signed delivery through the real SQS queue (moto) to a local receiver,
//! retries, disabling, replay, and tenant isolation. Clocks and jitter are injected; nothing
//! sleeps to wait for a retry.

use http::Method;
use http_body_util::BodyExt;
use integration_tests::local_server::{Handler, LocalServer, closed_port_url, respond};
use integration_tests::{TestClient, TestClock, TestStack};
use platform_api::settings::{WEBHOOK_ALLOWED_HOSTS, WEBHOOK_DELIVERY_QUEUE_URL};
use platform_api::{AgentsService, Gate, WebhooksService};
use platform_data::ids::{AccountId, WebhookEndpointId};
use queues::{ReceivedMessage, SqsQueue};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use uuid::Uuid;
use webhooks::delivery::{Deliverer, Outcome};
use webhooks::publisher::Publisher;
use webhooks::store::{DeliveryStatus, WebhookStore};

/// A request the receiver got.
#[derive(Debug, Clone)]
struct Received {
    headers: http::HeaderMap,
    body: Vec<u8>,
}

/// Statuses to answer next, each with an optional `Retry-After`.
type Script = Arc<Mutex<VecDeque<(u16, Option<&'static str>)>>>;

/// A webhook receiver answering scripted statuses (then 200), recording every request.
struct Receiver {
    server: LocalServer,
    requests: Arc<Mutex<Vec<Received>>>,
    script: Script,
}

impl Receiver {
    async fn start() -> Self {
        let requests: Arc<Mutex<Vec<Received>>> = Arc::default();
        let script: Script = Arc::default();
        let (seen, plan) = (Arc::clone(&requests), Arc::clone(&script));
        let handler: Handler = Arc::new(move |request| {
            let (seen, plan) = (Arc::clone(&seen), Arc::clone(&plan));
            Box::pin(async move {
                let (parts, body) = request.into_parts();
                let body = body.collect().await.map(|b| b.to_bytes().to_vec()).unwrap_or_default();
                seen.lock().unwrap().push(Received { headers: parts.headers, body });
                let (status, retry_after) = plan.lock().unwrap().pop_front().unwrap_or((200, None));
                let mut response = respond(status, "text/plain", format!("answered {status}"));
                if let Some(seconds) = retry_after {
                    response.headers_mut().insert("retry-after", seconds.parse().unwrap());
                }
                response
            })
        });
        Self { server: LocalServer::start(handler).await, requests, script }
    }

    fn answer(&self, statuses: &[(u16, Option<&'static str>)]) {
        self.script.lock().unwrap().extend(statuses.iter().copied());
    }

    fn received(&self) -> Vec<Received> {
        self.requests.lock().unwrap().clone()
    }

    fn bodies(&self) -> Vec<Value> {
        self.received().iter().map(|r| serde_json::from_slice(&r.body).unwrap()).collect()
    }
}

struct Fixture {
    stack: TestStack,
    clock: TestClock,
    key: String,
    account: Uuid,
    /// The webhooks function, called with the account's key.
    api: TestClient,
    deliverer: Deliverer,
}

async fn fixture() -> Fixture {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let api = stack.client::<WebhooksService>(&clock).with_key(&key);
    let deliverer = deliverer(&stack, &clock);
    Fixture { stack, clock, key, account, api, deliverer }
}

/// The delivery worker of `stack`'s settings on `clock`, without jitter and waiting a second
/// for an answer: `into_deliverer` (the function's) has the system clock, random jitter and
/// the production timeout, which no setting changes.
fn deliverer(stack: &TestStack, clock: &TestClock) -> Deliverer {
    let settings = stack.webhook_settings();
    Deliverer::new(settings.publisher, settings.secrets, settings.policy, clock.clock(), Arc::new(|| 0.0))
        .with_attempt_timeout(Duration::from_secs(1))
}

impl Fixture {
    /// Creates an endpoint; returns its id and secret.
    async fn endpoint(&self, body: Value) -> (String, String) {
        let data = self.api.post("/webhooks/endpoints", body).expect(201).await["data"].clone();
        (data["id"].as_str().unwrap().to_owned(), data["secret"].as_str().unwrap().to_owned())
    }

    /// Receives what the queue holds now.
    async fn receive(&self) -> Vec<ReceivedMessage> {
        let queue = &self.deliverer.publisher.queue;
        let mut all = Vec::new();
        loop {
            let batch = queue.receive(Duration::ZERO).await.unwrap();
            if batch.is_empty() {
                return all;
            }
            all.extend(batch);
        }
    }

    /// Delivers everything queued, as Lambda would; returns how many messages were handled.
    async fn deliver_queued(&self) -> usize {
        let messages = self.receive().await;
        let retry = self.deliverer.handle_batch(&messages).await;
        for message in messages.iter().filter(|m| !retry.contains(&m.message_id)) {
            self.deliverer.publisher.queue.delete(&message.receipt_handle).await.unwrap();
        }
        messages.len()
    }

    /// The webhook store over this stack's tables, through `dynamodb`.
    fn store_with(&self, dynamodb: aws_sdk_dynamodb::Client) -> WebhookStore {
        use platform_api::settings::{WEBHOOK_DELIVERIES_TABLE, WEBHOOK_ENDPOINTS_TABLE, WEBHOOK_EVENTS_TABLE};
        let table = |name| self.stack.setting(name);
        WebhookStore::new(
            dynamodb,
            table(WEBHOOK_ENDPOINTS_TABLE),
            table(WEBHOOK_EVENTS_TABLE),
            table(WEBHOOK_DELIVERIES_TABLE),
        )
    }

    /// A delivery worker on the fixture's clock over another store or queue (a broken one).
    fn worker_with(&self, store: WebhookStore, queue: SqsQueue) -> Deliverer {
        let mut worker = deliverer(&self.stack, &self.clock);
        worker.publisher = Publisher { store, queue: Arc::new(queue), endpoints: Default::default() };
        worker
    }

    /// The delivery queue (the real one).
    fn queue(&self) -> SqsQueue {
        SqsQueue::new(
            aws_sdk_sqs::Client::new(&self.stack.sdk),
            self.stack.setting(platform_api::settings::WEBHOOK_DELIVERY_QUEUE_URL),
        )
    }

    /// A queue that does not exist: every send fails, as in an SQS outage.
    fn missing_queue(&self) -> SqsQueue {
        SqsQueue::new(aws_sdk_sqs::Client::new(&self.stack.sdk), self.missing_queue_url())
    }

    fn missing_queue_url(&self) -> String {
        let endpoint = std::env::var("AWS_ENDPOINT_URL").unwrap_or_default();
        format!("{}/123456789012/{}missing", endpoint.trim_end_matches('/'), self.stack.prefix)
    }

    /// The stack with its delivery queue missing: its functions store events and deliveries,
    /// and fail to queue them.
    fn without_sqs(&self) -> TestStack {
        self.stack.with_settings(&[(WEBHOOK_DELIVERY_QUEUE_URL, &self.missing_queue_url())])
    }

    /// A DynamoDB client whose `operation` calls on `table` fail (an outage of one table).
    fn failing_dynamodb(&self, operation: &'static str, table: &str) -> aws_sdk_dynamodb::Client {
        let failure = FailCalls { operation, table: self.stack.setting(table) };
        aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(&self.stack.sdk).interceptor(failure).build(),
        )
    }

    async fn deliveries(&self, endpoint: &str) -> Vec<Value> {
        let page = self.api.get(&format!("/webhooks/endpoints/{endpoint}/deliveries")).expect(200).await;
        page["data"].as_array().unwrap().clone()
    }
}

/// Refuses the DynamoDB calls of one operation on one table before they are sent.
#[derive(Debug)]
struct FailCalls {
    operation: &'static str,
    table: String,
}

impl aws_sdk_dynamodb::config::Intercept for FailCalls {
    fn name(&self) -> &'static str {
        "FailCalls"
    }

    fn read_before_transmit(
        &self,
        context: &aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _components: &aws_sdk_dynamodb::config::RuntimeComponents,
        _cfg: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let request = context.request();
        let target = request.headers().get("x-amz-target").unwrap_or_default();
        let body = request.body().bytes().and_then(|bytes| std::str::from_utf8(bytes).ok()).unwrap_or_default();
        if target.ends_with(&format!(".{}", self.operation)) && body.contains(&format!("\"{}\"", self.table)) {
            return Err(format!("injected failure of {} on {}", self.operation, self.table).into());
        }
        Ok(())
    }
}

/// Records the body of every DynamoDB request, by operation.
#[derive(Debug, Clone, Default)]
struct RecordCalls(Arc<Mutex<Vec<(String, Value)>>>);

impl RecordCalls {
    fn take(&self) -> Vec<(String, Value)> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl aws_sdk_dynamodb::config::Intercept for RecordCalls {
    fn name(&self) -> &'static str {
        "RecordCalls"
    }

    fn read_before_transmit(
        &self,
        context: &aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _components: &aws_sdk_dynamodb::config::RuntimeComponents,
        _cfg: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let request = context.request();
        let target = request.headers().get("x-amz-target").unwrap_or_default();
        let operation = target.rsplit('.').next().unwrap_or_default().to_owned();
        let body = request.body().bytes().and_then(|bytes| serde_json::from_slice(bytes).ok()).unwrap_or(Value::Null);
        self.0.lock().unwrap().push((operation, body));
        Ok(())
    }
}

/// Verifies a delivery with the independent Standard Webhooks library.
fn verify(secret: &str, received: &Received) -> bool {
    standardwebhooks::Webhook::new(secret).unwrap().verify(&received.body, &received.headers).is_ok()
}

#[tokio::test]
async fn a_test_event_is_signed_delivered_and_recorded() {
    let f = fixture().await;
    let receiver = Receiver::start().await;
    let (endpoint, secret) = f.endpoint(json!({"url": receiver.server.url("/hook"), "description": "CI"})).await;
    assert!(secret.starts_with("whsec_"));
    let detail = f.api.get(&format!("/webhooks/endpoints/{endpoint}")).send().await;
    assert!(!detail.text.contains(&secret), "the secret is shown only on create");

    let queued = f.api.request(Method::POST, &format!("/webhooks/endpoints/{endpoint}/test")).expect(202).await;
    let delivery_id = queued["data"]["delivery_id"].as_str().unwrap().to_owned();
    assert_eq!(f.deliver_queued().await, 1);

    let received = receiver.received();
    assert_eq!(received.len(), 1);
    let request = &received[0];
    assert!(verify(&secret, request), "signature must verify");
    assert_eq!(request.headers["content-type"], "application/json");
    assert!(request.headers["user-agent"].to_str().unwrap().starts_with("meeting-agent-platform-webhooks/"));
    assert_eq!(request.headers["webhook-id"], queued["data"]["event_id"].as_str().unwrap());
    let body = &receiver.bodies()[0];
    assert_eq!((body["type"].clone(), body["data"].clone()), (json!("webhook.test"), json!({"success": true})));

    let deliveries = f.deliveries(&endpoint).await;
    assert_eq!(deliveries.len(), 1);
    assert_eq!(
        (deliveries[0]["id"].as_str(), deliveries[0]["status"].as_str()),
        (Some(delivery_id.as_str()), Some("succeeded"))
    );
    let attempt = &deliveries[0]["attempts"][0];
    assert_eq!((attempt["status_code"].as_u64(), attempt["trigger"].as_str()), (Some(200), Some("scheduled")));
    assert_eq!(attempt["response_body"], "answered 200");
    assert_eq!(attempt["error"], Value::Null);

    // The reference vector, through the same library.
    let reference = webhooks::signing::sign(
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1614265330,
        br#"{"test": 2432232314}"#,
    );
    assert_eq!(reference.as_deref(), Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="));
}

#[tokio::test]
async fn agent_events_reach_the_endpoints_that_want_them() {
    let f = fixture().await;
    let (all_receiver, deleted_receiver, off_receiver) =
        (Receiver::start().await, Receiver::start().await, Receiver::start().await);
    let (all, _) = f.endpoint(json!({"url": all_receiver.server.url("/")})).await;
    f.endpoint(json!({"url": deleted_receiver.server.url("/"), "event_types": ["agent.deleted"]})).await;
    f.endpoint(json!({"url": off_receiver.server.url("/"), "enabled": false})).await;
    let agents = f.stack.client::<AgentsService>(&f.clock).with_key(&f.key);
    let agent = agents.post("/agents/", json!({"type": "a2a", "name": "Scout"})).created().await;
    f.clock.advance(1);
    agents.delete(&format!("/agents/{agent}")).expect(200).await;
    f.deliver_queued().await;

    let types = |receiver: &Receiver| {
        receiver.bodies().iter().map(|b| b["type"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
    };
    let mut seen = types(&all_receiver);
    seen.sort();
    assert_eq!(seen, ["agent.created", "agent.deleted"]);
    assert_eq!(types(&deleted_receiver), ["agent.deleted"]);
    assert!(off_receiver.received().is_empty(), "a disabled endpoint receives nothing");
    let created = all_receiver.bodies().into_iter().find(|b| b["type"] == "agent.created").unwrap();
    assert_eq!(
        (created["data"]["id"].as_str(), created["data"]["name"].as_str()),
        (Some(agent.as_str()), Some("Scout"))
    );
    assert_eq!(created["data"]["version"], "", "the spec's string, \"\" when unset");

    // The event log: newest first, filtered by type; an event lists its deliveries.
    let events = f.api.get("/webhooks/events").expect(200).await;
    let listed: Vec<&str> = events["data"].as_array().unwrap().iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(listed, ["agent.deleted", "agent.created"]);
    let only = f.api.get("/webhooks/events?type=agent.created").expect(200).await;
    assert_eq!(only["data"].as_array().unwrap().len(), 1);
    assert_eq!(only["pagination"], json!({"limit": 20, "next_cursor": null}));
    let deleted_event = events["data"][0]["id"].as_str().unwrap();
    let detail = f.api.get(&format!("/webhooks/events/{deleted_event}")).expect(200).await;
    let statuses: Vec<&str> =
        detail["data"]["deliveries"].as_array().unwrap().iter().map(|d| d["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["succeeded", "succeeded"]);
    assert_eq!(detail["data"]["data"]["id"], agent);
    let future = (f.clock.now() + chrono::Duration::hours(1)).to_rfc3339();
    let window = f.api.get(&format!("/webhooks/events?since={}", future.replace('+', "%2B"))).expect(200).await;
    assert_eq!(window["data"], json!([]));
    f.api.get("/webhooks/events?type=agent.exploded").error(422, "VALIDATION_ERROR").await;

    // Restoring and patching publish too.
    agents.request(Method::POST, &format!("/agents/{agent}/restore")).expect(200).await;
    let patch = json!({"description": "now described"});
    agents.patch(&format!("/agents/{agent}"), patch).expect(200).await;
    f.deliver_queued().await;
    let mut seen = types(&all_receiver);
    seen.sort();
    assert_eq!(seen, ["agent.created", "agent.deleted", "agent.restored", "agent.updated"]);
    let deliveries = f.api.get(&format!("/webhooks/endpoints/{all}/deliveries")).expect(200).await;
    assert_eq!(deliveries["data"].as_array().unwrap().len(), 4);
}

#[tokio::test]
async fn failures_are_recorded_and_retried_on_the_schedule() {
    let f = fixture().await;
    let receiver = Receiver::start().await;
    let (endpoint, _) = f.endpoint(json!({"url": receiver.server.url("/")})).await;
    receiver.answer(&[(500, None), (503, Some("120"))]);
    f.api.request(Method::POST, &format!("/webhooks/endpoints/{endpoint}/test")).expect(202).await;
    let message = f.receive().await.remove(0);

    // First attempt fails: retry in 5 s (jitter fixed at 0), the delivery stays pending.
    assert_eq!(f.deliverer.handle(&message).await.unwrap(), Outcome::RetryAfter(Duration::from_secs(5)));
    let delivery = f.deliveries(&endpoint).await.remove(0);
    assert_eq!(delivery["status"], "pending");
    let now = chrono::SubsecRound::trunc_subsecs(f.clock.now(), 3);
    let expected_next = now + chrono::Duration::seconds(5);
    assert_eq!(delivery["next_attempt_at"], json!(expected_next));
    assert_eq!(
        (delivery["attempts"][0]["status_code"].as_u64(), delivery["attempts"][0]["error"].as_str()),
        (Some(500), Some("HTTP 500"))
    );
    let endpoint_view = f.api.get(&format!("/webhooks/endpoints/{endpoint}")).expect(200).await;
    assert_eq!(endpoint_view["data"]["failing_since"], json!(now));

    // The second asks for Retry-After: 120, which replaces the 5-minute wait.
    f.clock.advance(5);
    assert_eq!(f.deliverer.handle(&message).await.unwrap(), Outcome::RetryAfter(Duration::from_secs(120)));
    // The third succeeds; one success clears the endpoint's failure clock.
    f.clock.advance(120);
    assert_eq!(f.deliverer.handle(&message).await.unwrap(), Outcome::Done);
    let delivery = f.deliveries(&endpoint).await.remove(0);
    assert_eq!(delivery["status"], "succeeded");
    assert_eq!(delivery["attempts"].as_array().unwrap().len(), 3);
    let endpoint_view = f.api.get(&format!("/webhooks/endpoints/{endpoint}")).expect(200).await;
    assert_eq!(endpoint_view["data"]["failing_since"], Value::Null);
    // A duplicate of a handled message changes nothing.
    assert_eq!(f.deliverer.handle(&message).await.unwrap(), Outcome::Done);
    assert_eq!(receiver.received().len(), 3);
}

#[tokio::test]
async fn gone_endpoints_are_disabled_at_once_and_failing_ones_after_five_days() {
    let f = fixture().await;
    let gone = Receiver::start().await;
    let (gone_id, _) = f.endpoint(json!({"url": gone.server.url("/")})).await;
    gone.answer(&[(410, None)]);
    f.api.request(Method::POST, &format!("/webhooks/endpoints/{gone_id}/test")).expect(202).await;
    f.deliver_queued().await;
    let view = f.api.get(&format!("/webhooks/endpoints/{gone_id}")).expect(200).await;
    assert_eq!(
        (view["data"]["enabled"].as_bool(), view["data"]["disabled_reason"].as_str()),
        (Some(false), Some("the endpoint answered 410 Gone"))
    );
    assert_eq!(f.deliveries(&gone_id).await[0]["status"], "failed");
    let disabled = f.api.get("/webhooks/events?type=endpoint.disabled").expect(200).await;
    assert_eq!(disabled["data"][0]["data"]["endpoint_id"], gone_id);
    f.api.request(Method::POST, &format!("/webhooks/endpoints/{gone_id}/test")).error(409, "CONFLICT").await;

    let failing = Receiver::start().await;
    let (failing_id, _) = f.endpoint(json!({"url": failing.server.url("/")})).await;
    failing.answer(&[(500, None), (500, None)]);
    f.api.request(Method::POST, &format!("/webhooks/endpoints/{failing_id}/test")).expect(202).await;
    let first = f.receive().await.remove(0);
    f.deliverer.handle(&first).await.unwrap();
    f.clock.advance(5 * 24 * 3600);
    f.api.request(Method::POST, &format!("/webhooks/endpoints/{failing_id}/test")).expect(202).await;
    f.deliver_queued().await;
    let view = f.api.get(&format!("/webhooks/endpoints/{failing_id}")).expect(200).await;
    assert_eq!(view["data"]["enabled"], false);
    assert_eq!(view["data"]["disabled_reason"], "the endpoint failed every delivery for 5 days");
    // Its pending retry finds it disabled: failed, and nothing is sent.
    let sent = failing.received().len();
    f.deliverer.handle(&first).await.unwrap();
    assert_eq!(failing.received().len(), sent);

    // Re-enabling clears the reason and the failure clock.
    let enabled = f
        .api
        .put(&format!("/webhooks/endpoints/{failing_id}"), json!({"url": failing.server.url("/"), "enabled": true}))
        .expect(200)
        .await;
    assert_eq!(
        (enabled["data"]["disabled_reason"].clone(), enabled["data"]["failing_since"].clone()),
        (Value::Null, Value::Null)
    );
}

#[tokio::test]
async fn network_errors_timeouts_and_refused_addresses_are_attempts_with_status_0() {
    let f = fixture().await;
    let (refused, _) = f.endpoint(json!({"url": closed_port_url("/hook")})).await;
    let slow: Handler = Arc::new(|_| {
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            respond(200, "text/plain", "late")
        })
    });
    let slow = LocalServer::start(slow).await;
    let (timed_out, _) = f.endpoint(json!({"url": slow.url("/")})).await;
    for endpoint in [&refused, &timed_out] {
        f.api.request(Method::POST, &format!("/webhooks/endpoints/{endpoint}/test")).expect(202).await;
    }
    f.deliver_queued().await;
    let refused_attempt = f.deliveries(&refused).await.remove(0)["attempts"][0].clone();
    assert_eq!(refused_attempt["status_code"], 0);
    assert!(refused_attempt["error"].as_str().unwrap().starts_with("could not connect"), "{refused_attempt}");
    let timeout_attempt = f.deliveries(&timed_out).await.remove(0)["attempts"][0].clone();
    assert_eq!(timeout_attempt["status_code"], 0);
    assert_eq!(timeout_attempt["error"], "the server did not answer in time");

    // At delivery time the address is checked after DNS resolution: a production worker (no
    // allowed hosts) refuses a name that resolves to loopback, and records why.
    let receiver = Receiver::start().await;
    let (named, _) = f.endpoint(json!({"url": format!("https://localhost:{}/", receiver.server.address.port())})).await;
    f.api.request(Method::POST, &format!("/webhooks/endpoints/{named}/test")).expect(202).await;
    let production = f.stack.with_settings(&[(WEBHOOK_ALLOWED_HOSTS, "")]);
    let production_worker = deliverer(&production, &f.clock);
    let messages = f.receive().await;
    production_worker.handle_batch(&messages).await;
    let refused_by_dns = f.deliveries(&named).await.remove(0)["attempts"][0].clone();
    assert_eq!(refused_by_dns["status_code"], 0);
    assert!(
        refused_by_dns["error"]
            .as_str()
            .unwrap()
            .contains("resolves only to private, loopback or link-local addresses"),
        "{refused_by_dns}"
    );
    assert!(receiver.received().is_empty());

    // In production (no allowed hosts) private and plain-http URLs are refused at the API.
    let production = production.client::<WebhooksService>(&f.clock).with_key(&f.key);
    for url in
        ["http://hooks.example.com/", "https://127.0.0.1/", "https://10.0.0.8/", "https://[::1]/", "https://localhost/"]
    {
        let refused = production.post("/webhooks/endpoints", json!({"url": url})).error(422, "VALIDATION_ERROR").await;
        assert!(refused["details"]["url"].is_string(), "{url}: {refused}");
    }
}

#[tokio::test]
async fn rotation_signs_with_both_secrets_for_a_day() {
    let f = fixture().await;
    let receiver = Receiver::start().await;
    let (endpoint, old) = f.endpoint(json!({"url": receiver.server.url("/")})).await;
    let rotated = f.api.request(Method::POST, &format!("/webhooks/endpoints/{endpoint}/rotate")).expect(200).await;
    let new = rotated["data"]["secret"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    f.api.request(Method::POST, &format!("/webhooks/endpoints/{endpoint}/test")).expect(202).await;
    f.deliver_queued().await;
    let during = receiver.received().remove(0);
    assert_eq!(during.headers["webhook-signature"].to_str().unwrap().split(' ').count(), 2);
    assert!(verify(&old, &during) && verify(&new, &during));

    f.clock.advance(24 * 3600 + 1);
    f.api.request(Method::POST, &format!("/webhooks/endpoints/{endpoint}/test")).expect(202).await;
    f.deliver_queued().await;
    let after = receiver.received().remove(1);
    let signature = after.headers["webhook-signature"].to_str().unwrap().to_owned();
    assert_eq!(signature.split(' ').count(), 1);
    // The timestamp is the moved clock's, so check the signature by hand.
    let id = after.headers["webhook-id"].to_str().unwrap();
    let timestamp: i64 = after.headers["webhook-timestamp"].to_str().unwrap().parse().unwrap();
    assert_eq!(webhooks::signing::sign(&new, id, timestamp, &after.body), Some(signature));
}

#[tokio::test]
async fn replay_one_and_replay_failed_in_a_window() {
    let f = fixture().await;
    let receiver = Receiver::start().await;
    let (endpoint, _) = f.endpoint(json!({"url": receiver.server.url("/")})).await;
    // Two deliveries fail for good (410 would disable, so 400s, and the schedule exhausted by
    // answering every attempt with 400).
    receiver.answer(&[(400, None); 16]);
    for _ in 0..2 {
        f.api.request(Method::POST, &format!("/webhooks/endpoints/{endpoint}/test")).expect(202).await;
    }
    let messages = f.receive().await;
    for message in &messages {
        while f.deliverer.handle(message).await.unwrap() != Outcome::Done {}
    }
    let deliveries = f.deliveries(&endpoint).await;
    assert!(deliveries.iter().all(|d| d["status"] == "failed" && d["attempts"].as_array().unwrap().len() == 8));
    let failed = f.api.get(&format!("/webhooks/endpoints/{endpoint}/deliveries?status=failed")).expect(200).await;
    assert_eq!(failed["data"].as_array().unwrap().len(), 2);

    // Replay one: a manual attempt, recorded as such.
    let one = deliveries[0]["id"].as_str().unwrap();
    f.api.request(Method::POST, &format!("/webhooks/deliveries/{one}/replay")).expect(202).await;
    f.deliver_queued().await;
    let replayed = f.deliveries(&endpoint).await.into_iter().find(|d| d["id"] == one).unwrap();
    assert_eq!(replayed["status"], "succeeded");
    assert_eq!(replayed["attempts"][8]["trigger"], "manual");

    // Replay the failed ones of a window: a window in the past finds none, the default finds one.
    let past = json!({"since": "2020-01-01T00:00:00Z", "until": "2020-01-02T00:00:00Z"});
    let none = f.api.post(&format!("/webhooks/endpoints/{endpoint}/replay-failed"), past).expect(202).await;
    assert_eq!(none["data"]["queued"], 0);
    let queued =
        f.api.request(Method::POST, &format!("/webhooks/endpoints/{endpoint}/replay-failed")).expect(202).await;
    assert_eq!(queued["data"]["queued"], 1);
    f.deliver_queued().await;
    assert!(f.deliveries(&endpoint).await.iter().all(|d| d["status"] == "succeeded"));
    let too_wide = json!({"since": "2020-01-01T00:00:00Z"});
    f.api.post(&format!("/webhooks/endpoints/{endpoint}/replay-failed"), too_wide).error(422, "VALIDATION_ERROR").await;
}

#[tokio::test]
async fn another_accounts_webhooks_are_not_found_and_bodies_are_validated() {
    let f = fixture().await;
    let receiver = Receiver::start().await;
    let (endpoint, _) = f.endpoint(json!({"url": receiver.server.url("/")})).await;
    f.api.request(Method::POST, &format!("/webhooks/endpoints/{endpoint}/test")).expect(202).await;
    f.deliver_queued().await;
    let delivery = f.deliveries(&endpoint).await.remove(0);
    let other = f.stack.api_key(Uuid::new_v4()).await;
    for (method, path) in [
        (Method::GET, format!("/webhooks/endpoints/{endpoint}")),
        (Method::DELETE, format!("/webhooks/endpoints/{endpoint}")),
        (Method::POST, format!("/webhooks/endpoints/{endpoint}/rotate")),
        (Method::POST, format!("/webhooks/endpoints/{endpoint}/test")),
        (Method::GET, format!("/webhooks/endpoints/{endpoint}/deliveries")),
        (Method::GET, format!("/webhooks/events/{}", delivery["event_id"].as_str().unwrap())),
        (Method::POST, format!("/webhooks/deliveries/{}/replay", delivery["id"].as_str().unwrap())),
    ] {
        f.api.with_key(&other).request(method, &path).error(404, "RESOURCE_NOT_FOUND").await;
    }
    let theirs = f.api.with_key(&other).get("/webhooks/endpoints").expect(200).await;
    assert_eq!(theirs["pagination"]["total"], 0);

    let url = receiver.server.url("/");
    f.api.post("/webhooks/endpoints", json!({"url": 5})).error(400, "BAD_REQUEST").await;
    let body = json!({"url": url, "event_types": ["agent.exploded"]});
    let refused = f.api.post("/webhooks/endpoints", body).error(422, "VALIDATION_ERROR").await;
    assert_eq!(refused["details"]["event_types[0]"], "unknown event type \"agent.exploded\"");
    f.api.get("/webhooks/endpoints/nope").error(422, "VALIDATION_ERROR").await;
    f.api.get(&format!("/webhooks/endpoints/{endpoint}/deliveries?status=lost")).error(422, "VALIDATION_ERROR").await;
    f.api.delete(&format!("/webhooks/endpoints/{endpoint}")).expect(200).await;
    f.api.get(&format!("/webhooks/endpoints/{endpoint}")).error(404, "RESOURCE_NOT_FOUND").await;
}

#[tokio::test]
async fn a_delivery_written_meanwhile_is_never_overwritten() {
    let f = fixture().await;
    let receiver = Receiver::start().await;
    let (endpoint, _) = f.endpoint(json!({"url": receiver.server.url("/")})).await;
    let queued = f.api.request(Method::POST, &format!("/webhooks/endpoints/{endpoint}/test")).expect(202).await;
    let id: Uuid = queued["data"]["delivery_id"].as_str().unwrap().parse().unwrap();
    let store = &f.deliverer.publisher.store;
    let account_id: AccountId =
        f.api.get(&format!("/webhooks/endpoints/{endpoint}")).expect(200).await["data"]["account_id"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
    let read = store.get_delivery(account_id, id).await.unwrap().unwrap();
    let (mut first, mut second) = (read.clone(), read);
    first.revision += 1;
    second.revision += 1;
    assert!(store.update_delivery(&first).await.unwrap());
    assert!(!store.update_delivery(&second).await.unwrap(), "a stale write must be refused");
    // The worker re-reads and records its attempt on top of what is stored.
    f.deliver_queued().await;
    let stored = store.get_delivery(account_id, id).await.unwrap().unwrap();
    assert_eq!((stored.revision, stored.attempts.len()), (2, 1));
}

#[tokio::test]
async fn errors_after_the_attempt_is_recorded_are_logged_not_retried() {
    let f = fixture().await;
    let receiver = Receiver::start().await;
    let (endpoint, _) = f.endpoint(json!({"url": receiver.server.url("/")})).await;
    let queued = f.api.request(Method::POST, &format!("/webhooks/endpoints/{endpoint}/test")).expect(202).await;
    let delivery_id = queued["data"]["delivery_id"].as_str().unwrap().to_owned();
    let message = f.receive().await.remove(0);

    // The endpoints table refuses writes, so the endpoint's failure clock cannot be recorded.
    let no_endpoint_writes = f.failing_dynamodb("PutItem", platform_api::settings::WEBHOOK_ENDPOINTS_TABLE);
    let worker = f.worker_with(f.store_with(no_endpoint_writes), f.queue());
    // A failed scheduled attempt still retries on its schedule (5 s), not at SQS's timeout.
    receiver.answer(&[(500, None)]);
    assert_eq!(worker.handle(&message).await.unwrap(), Outcome::RetryAfter(Duration::from_secs(5)));
    let endpoint_view = f.api.get(&format!("/webhooks/endpoints/{endpoint}")).expect(200).await;
    assert_eq!(endpoint_view["data"]["failing_since"], Value::Null, "the health update did fail");

    // A manual replay is sent once: its message is handled, not handed back to SQS.
    receiver.answer(&[(500, None)]);
    f.api.request(Method::POST, &format!("/webhooks/deliveries/{delivery_id}/replay")).expect(202).await;
    let replays = f.receive().await;
    assert_eq!(replays.len(), 1);
    assert!(worker.handle_batch(&replays).await.is_empty(), "the replay must not be retried by SQS");
    assert_eq!(receiver.received().len(), 2);
    let delivery = f.deliveries(&endpoint).await.remove(0);
    let triggers: Vec<&str> =
        delivery["attempts"].as_array().unwrap().iter().map(|a| a["trigger"].as_str().unwrap()).collect();
    assert_eq!(triggers, ["scheduled", "manual"]);

    // 410 disables the endpoint; publishing `endpoint.disabled` fails (SQS is unreachable), and
    // still the message is done: the disable and the attempt are recorded.
    let no_sqs = f.worker_with(f.deliverer.publisher.store.clone(), f.missing_queue());
    receiver.answer(&[(410, None)]);
    f.clock.advance(5);
    assert_eq!(no_sqs.handle(&message).await.unwrap(), Outcome::Done);
    let endpoint_view = f.api.get(&format!("/webhooks/endpoints/{endpoint}")).expect(200).await;
    assert_eq!(endpoint_view["data"]["enabled"], false);
    assert_eq!(f.deliveries(&endpoint).await.remove(0)["status"], "failed");
    assert_eq!(receiver.received().len(), 3);
}

#[tokio::test]
async fn a_delivery_keeps_its_latest_attempts_however_often_it_is_replayed() {
    let f = fixture().await;
    let receiver = Receiver::start().await;
    let (endpoint, _) = f.endpoint(json!({"url": receiver.server.url("/")})).await;
    receiver.answer(&[(500, None)]);
    let queued = f.api.request(Method::POST, &format!("/webhooks/endpoints/{endpoint}/test")).expect(202).await;
    let delivery_id = queued["data"]["delivery_id"].as_str().unwrap().to_owned();
    let event_id = queued["data"]["event_id"].as_str().unwrap().to_owned();
    let first = f.receive().await.remove(0);
    assert_eq!(f.deliverer.handle(&first).await.unwrap(), Outcome::RetryAfter(Duration::from_secs(5)));

    // Many failed replays: the record keeps the latest attempts and counts them all.
    let replays = webhooks::store::KEPT_ATTEMPTS + 5;
    receiver.answer(&vec![(503, None); replays]);
    for _ in 0..replays {
        f.api.request(Method::POST, &format!("/webhooks/deliveries/{delivery_id}/replay")).expect(202).await;
        assert_eq!(f.deliver_queued().await, 1);
    }
    // The worker keeps working: the last replay succeeds and is recorded.
    f.api.request(Method::POST, &format!("/webhooks/deliveries/{delivery_id}/replay")).expect(202).await;
    f.deliver_queued().await;
    let delivery = f.deliveries(&endpoint).await.remove(0);
    let attempts = delivery["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), webhooks::store::KEPT_ATTEMPTS);
    assert_eq!(delivery["attempt_count"], replays + 2);
    assert_eq!(
        (delivery["status"].as_str(), attempts.last().unwrap()["status_code"].as_u64()),
        (Some("succeeded"), Some(200))
    );
    assert_eq!(receiver.received().len(), replays + 2);
    let event = f.api.get(&format!("/webhooks/events/{event_id}")).expect(200).await;
    assert_eq!(event["data"]["deliveries"][0]["attempts"], replays + 2);

    // The schedule still counts its own attempts: the pending retry is the second of eight.
    let stored = f
        .deliverer
        .publisher
        .store
        .get_delivery(platform_data::ids::AccountId::from(f.account), delivery_id.parse().unwrap())
        .await
        .unwrap();
    assert_eq!(stored.map(|d| (d.status, d.scheduled_attempts())), Some((DeliveryStatus::Succeeded, 1)));
}

/// The sweeper of the fixture's stack, on its clock.
fn sweeper(f: &Fixture) -> webhooks::sweeper::Sweeper {
    f.stack.service(&f.clock)
}

const OVERDUE: i64 = webhooks::sweeper::OVERDUE_AFTER_MINUTES * 60;

#[tokio::test]
async fn deliveries_stored_while_sqs_fails_are_swept_and_delivered() {
    let f = fixture().await;
    let (receiver, other) = (Receiver::start().await, Receiver::start().await);
    let (endpoint, secret) = f.endpoint(json!({"url": receiver.server.url("/")})).await;
    f.endpoint(json!({"url": other.server.url("/"), "event_types": ["agent.created"]})).await;

    // SQS fails mid-publish: the event and its deliveries are stored, no message is sent.
    let no_sqs = f.without_sqs().client::<WebhooksService>(&f.clock).with_key(&f.key);
    let queued = no_sqs.request(Method::POST, &format!("/webhooks/endpoints/{endpoint}/test")).expect(202).await;
    let event_id = queued["data"]["event_id"].as_str().unwrap().to_owned();
    assert_eq!(f.deliver_queued().await, 0);
    assert_eq!(f.deliveries(&endpoint).await[0]["status"], "pending");

    // The sweep leaves deliveries whose next attempt is not overdue yet, then queues them.
    let sweeper = sweeper(&f);
    assert_eq!(sweeper.sweep().await.unwrap().queued, 0);
    f.clock.advance(OVERDUE - 1);
    assert_eq!(sweeper.sweep().await.unwrap().queued, 0);
    f.clock.advance(2);
    assert_eq!(sweeper.sweep().await.unwrap().queued, 1);
    assert_eq!(f.deliver_queued().await, 1);
    let received = receiver.received();
    assert_eq!(received.len(), 1);
    // Signed with the endpoint's secret (checked by hand: the moved clock's timestamp is
    // outside the library's tolerance).
    let header = |name: &str| received[0].headers[name].to_str().unwrap().to_owned();
    let timestamp: i64 = header("webhook-timestamp").parse().unwrap();
    let signature = webhooks::signing::sign(&secret, &header("webhook-id"), timestamp, &received[0].body);
    assert_eq!(signature, Some(header("webhook-signature")));
    assert_eq!(header("webhook-id"), event_id);
    assert!(other.received().is_empty(), "the other endpoint does not want webhook.test");
    assert_eq!(f.deliveries(&endpoint).await[0]["status"], "succeeded");

    // Delivered deliveries leave the sweeper's index: nothing is queued again, ever.
    f.clock.advance(24 * 3600);
    assert_eq!(sweeper.sweep().await.unwrap().queued, 0);
    // An agent event published meanwhile the normal way is not swept either.
    let agents = f.stack.client::<AgentsService>(&f.clock).with_key(&f.key);
    agents.post("/agents/", json!({"type": "a2a", "name": "Later"})).expect(201).await;
    assert_eq!(f.deliver_queued().await, 2);
    f.clock.advance(OVERDUE + 1);
    assert_eq!(sweeper.sweep().await.unwrap().queued, 0);
}

#[tokio::test]
async fn a_sweep_whose_queue_fails_still_sweeps_every_shard_and_loses_nothing() {
    let f = fixture().await;
    let receiver = Receiver::start().await;
    let (endpoint, _) = f.endpoint(json!({"url": receiver.server.url("/")})).await;
    // Eight deliveries (in several of the index's shards) whose messages are lost.
    for _ in 0..8 {
        f.api.request(Method::POST, &format!("/webhooks/endpoints/{endpoint}/test")).expect(202).await;
    }
    assert_eq!(f.receive().await.len(), 8);
    f.clock.advance(OVERDUE + 1);

    // Every shard leases its deliveries, then fails to queue them: the sweep answers the failure.
    let failing: webhooks::sweeper::Sweeper = f.without_sqs().service(&f.clock);
    assert!(failing.sweep().await.is_err());
    // No shard was left out: each delivery was leased, so none is overdue right now.
    assert_eq!(sweeper(&f).sweep().await.unwrap().queued, 0);
    assert!(f.receive().await.is_empty());
    // The leases' messages were never sent: past the bound, every delivery is queued again.
    f.clock.advance(OVERDUE + 1);
    assert_eq!(sweeper(&f).sweep().await.unwrap().queued, 8);
    assert_eq!(f.deliver_queued().await, 8);
    assert_eq!(receiver.received().len(), 8);
}

#[tokio::test]
async fn a_swept_delivery_is_sent_once_when_its_original_message_turns_up_late() {
    let f = fixture().await;
    let receiver = Receiver::start().await;
    let (endpoint, _) = f.endpoint(json!({"url": receiver.server.url("/")})).await;
    f.api.request(Method::POST, &format!("/webhooks/endpoints/{endpoint}/test")).expect(202).await;
    // The original message is held up (a backlog) past the bound, so the sweep queues it again.
    let original = f.receive().await.remove(0);
    f.clock.advance(OVERDUE + 1);
    assert_eq!(sweeper(&f).sweep().await.unwrap().queued, 1);
    let swept = f.receive().await.remove(0);
    // Only the sweeper's message attempts it now; the original is done without a send.
    assert_eq!(f.deliverer.handle(&original).await.unwrap(), Outcome::Done);
    assert!(receiver.received().is_empty());
    assert_eq!(f.deliverer.handle(&swept).await.unwrap(), Outcome::Done);
    assert_eq!(f.deliverer.handle(&original).await.unwrap(), Outcome::Done);
    assert_eq!(f.deliverer.handle(&swept).await.unwrap(), Outcome::Done);
    assert_eq!(receiver.received().len(), 1);
    let delivery = f.deliveries(&endpoint).await.remove(0);
    assert_eq!((delivery["status"].as_str(), delivery["attempt_count"].as_u64()), (Some("succeeded"), Some(1)));

    // A failing swept delivery keeps its schedule through the sweeper's message.
    receiver.answer(&[(500, None)]);
    f.api.request(Method::POST, &format!("/webhooks/endpoints/{endpoint}/test")).expect(202).await;
    let lost = f.receive().await.remove(0);
    f.clock.advance(OVERDUE + 1);
    assert_eq!(sweeper(&f).sweep().await.unwrap().queued, 1);
    let swept = f.receive().await.remove(0);
    assert_eq!(f.deliverer.handle(&swept).await.unwrap(), Outcome::RetryAfter(Duration::from_secs(5)));
    assert_eq!(f.deliverer.handle(&lost).await.unwrap(), Outcome::Done);
    f.clock.advance(5);
    assert_eq!(f.deliverer.handle(&swept).await.unwrap(), Outcome::Done);
    assert_eq!(receiver.received().len(), 3);
}

/// Follows `next_cursor` from `path` (which has a query string); returns every page's ids.
async fn pages(service: &TestClient, path: &str) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let url = match &cursor {
            Some(cursor) => format!("{path}&cursor={cursor}"),
            None => path.to_owned(),
        };
        let page = service.get(&url).expect(200).await;
        pages.push(
            page["data"].as_array().unwrap().iter().map(|item| item["id"].as_str().unwrap().to_owned()).collect(),
        );
        match page["pagination"]["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return pages,
        }
        assert!(pages.len() < 20, "paging must end");
    }
}

#[tokio::test]
async fn events_and_deliveries_are_paged_by_cursor_with_bounded_queries() {
    let f = fixture().await;
    let receiver = Receiver::start().await;
    let (endpoint, _) = f.endpoint(json!({"url": receiver.server.url("/")})).await;
    let mut published = Vec::new();
    for _ in 0..25 {
        let queued = f.api.request(Method::POST, &format!("/webhooks/endpoints/{endpoint}/test")).expect(202).await;
        published.push(queued["data"]["event_id"].as_str().unwrap().to_owned());
        f.clock.advance(1);
    }
    published.reverse();
    // A service whose webhook reads are recorded.
    let calls = RecordCalls::default();
    let recorded = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&f.stack.sdk).interceptor(calls.clone()).build(),
    );
    // Built by hand: only its store's reads are recorded (with their bodies), not the gate's.
    let mut settings = f.stack.webhook_settings();
    settings.publisher.store = f.store_with(recorded);
    let service = WebhooksService::new(f.stack.service::<Gate>(&f.clock), settings);
    let service = TestClient::new(service).with_key(&f.key);

    // Events: newest first, 10 a page, every read a Query with a Limit (the page and one more).
    calls.take();
    let event_pages = pages(&service, "/webhooks/events?limit=10").await;
    assert_eq!(event_pages.iter().map(Vec::len).collect::<Vec<_>>(), [10, 10, 5]);
    assert_eq!(event_pages.concat(), published);
    let reads = calls.take();
    assert_eq!(reads.iter().map(|(op, _)| op.as_str()).collect::<Vec<_>>(), ["Query", "Query", "Query"]);
    assert!(reads.iter().all(|(_, body)| body["Limit"] == 11), "{reads:?}");
    // A filter that matches nothing still ends, in at most 5 bounded Queries.
    let none = service.get("/webhooks/events?type=agent.created").expect(200).await;
    assert_eq!(none["data"], json!([]));
    let reads = calls.take();
    assert!((1..=webhooks::store::MAX_PAGE_QUERIES).contains(&reads.len()), "{reads:?}");
    assert!(reads.iter().all(|(op, body)| op == "Query" && body["Limit"] == 21), "{reads:?}");
    // A window: only the events created in it.
    let since = (f.clock.now() - chrono::Duration::seconds(5)).to_rfc3339().replace('+', "%2B");
    let recent = pages(&service, &format!("/webhooks/events?limit=2&since={since}")).await;
    assert_eq!(recent.concat(), published[..5]);

    // Deliveries: delivered ones, newest first, by cursor; the status filter too.
    assert_eq!(f.deliver_queued().await, 25);
    calls.take();
    let delivery_pages = pages(&service, &format!("/webhooks/endpoints/{endpoint}/deliveries?limit=10")).await;
    assert_eq!(delivery_pages.iter().map(Vec::len).collect::<Vec<_>>(), [10, 10, 5]);
    let reads = calls.take();
    assert!(reads.iter().all(|(op, body)| op == "GetItem" || body["Limit"] == 11), "{reads:?}");
    assert_eq!(reads.iter().filter(|(op, _)| op == "Query").count(), 3);
    let succeeded =
        pages(&service, &format!("/webhooks/endpoints/{endpoint}/deliveries?status=succeeded&limit=100")).await;
    assert_eq!(succeeded.concat().len(), 25);
    let failed = pages(&service, &format!("/webhooks/endpoints/{endpoint}/deliveries?status=failed&limit=5")).await;
    assert_eq!(failed, [Vec::<String>::new()]);

    // Page numbers are not how these lists page; a cursor must be one they gave.
    for query in ["page=2", "cursor=abc"] {
        service.get(&format!("/webhooks/events?{query}")).error(422, "VALIDATION_ERROR").await;
    }
}

#[tokio::test]
async fn replay_failed_works_through_its_window_in_bounded_batches() {
    let f = fixture().await;
    let receiver = Receiver::start().await;
    let (endpoint, _) = f.endpoint(json!({"url": receiver.server.url("/")})).await;
    let endpoint_id: WebhookEndpointId = endpoint.parse().unwrap();
    // 150 failed deliveries (written directly: failing each through 8 attempts is slow), and
    // some that did not fail.
    let store = &f.deliverer.publisher.store;
    let mut deliveries = Vec::new();
    for i in 0..160 {
        let at = f.clock.now() - chrono::Duration::seconds(1000 - i);
        let status = if i % 16 == 15 { DeliveryStatus::Succeeded } else { DeliveryStatus::Failed };
        deliveries.push(webhooks::store::Delivery {
            id: webhooks::publisher::time_ordered_id(at),
            owner: webhooks::owner::Owner::Account(f.account.into()),
            endpoint_id,
            event_id: Uuid::new_v4(),
            event_type: "webhook.test".into(),
            status,
            attempts: Vec::new(),
            attempt_count: 8,
            scheduled_attempt_count: 8,
            next_attempt_at: None,
            created_at: at,
            updated_at: at,
            revision: 8,
            lease: None,
        });
    }
    store.put_deliveries(&deliveries).await.unwrap();

    let path = format!("/webhooks/endpoints/{endpoint}/replay-failed");
    let replay = |body: Value| f.api.post(&path, body);
    let first = replay(json!({})).expect(202).await["data"].clone();
    assert_eq!(first["queued"], platform_api::webhooks::REPLAY_BATCH);
    let cursor = first["next_cursor"].as_str().expect("more failed deliveries follow").to_owned();
    let body = json!({"since": first["since"], "until": first["until"], "cursor": cursor});
    let second = replay(body).expect(202).await["data"].clone();
    assert_eq!((second["queued"].as_u64(), second["next_cursor"].clone()), (Some(50), Value::Null));
    let mut queued: Vec<Uuid> = f
        .receive()
        .await
        .iter()
        .map(|m| serde_json::from_str::<Value>(&m.body).unwrap()["delivery_id"].as_str().unwrap().parse().unwrap())
        .collect();
    queued.sort();
    let mut failed: Vec<Uuid> =
        deliveries.iter().filter(|d| d.status == DeliveryStatus::Failed).map(|d| d.id).collect();
    failed.sort();
    assert_eq!(queued, failed, "each failed delivery queued once, nothing else");
    replay(json!({"cursor": 5})).error(422, "VALIDATION_ERROR").await;
}

#[tokio::test]
async fn the_sweeper_runs_with_its_template_environment_and_in_the_dev_server() {
    let f = fixture().await;
    let template = stack::Template::embedded().unwrap();
    let function = template.function("WebhookSweeperFunction").unwrap();
    assert_eq!(function.binary, "webhook-sweeper");
    let env = template.environment(function, &f.stack.prefix);
    let deployed = platform_api::webhooks::sweeper_from_settings(&f.stack.aws(), &|name: &str| env.get(name).cloned())
        .expect("the sweeper's settings");
    assert_eq!(deployed.sweep().await.unwrap().queued, 0, "reads the bootstrapped index");
    let deliveries = template.table("WebhookDeliveriesTable").unwrap();
    let index = |name: &str| deliveries.indexes.iter().find(|index| index.name == name).unwrap();
    let pending = index(webhooks::store::PENDING_INDEX);
    assert_eq!((pending.key.hash.as_str(), pending.key.range.as_deref()), ("pending_shard", Some("pending_due")));
    assert_eq!(pending.non_key_attributes, ["endpoint_id", "event_id", "revision"]);
    let failed = index(webhooks::store::FAILED_INDEX);
    assert_eq!((failed.key.hash.as_str(), failed.key.range.as_deref()), ("failed_endpoint_id", Some("sk")));

    // `make dev` sweeps on an interval: a delivery stored while SQS failed gets queued.
    let receiver = Receiver::start().await;
    let (endpoint, _) = f.endpoint(json!({"url": receiver.server.url("/")})).await;
    let no_sqs = f.without_sqs().client::<WebhooksService>(&f.clock).with_key(&f.key);
    no_sqs.request(Method::POST, &format!("/webhooks/endpoints/{endpoint}/test")).expect(202).await;
    f.clock.advance(OVERDUE + 1);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let sweeps = tokio::spawn(dev_server::run_sweeper(sweeper(&f), Duration::from_millis(50), async move {
        let _ = stopped.await;
    }));
    let mut delivered = 0;
    for _ in 0..20 {
        delivered += f.deliver_queued().await;
        if delivered > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = stop.send(());
    sweeps.await.unwrap();
    assert_eq!((delivered, receiver.received().len()), (1, 1));
}

#[tokio::test]
async fn the_sweeper_fails_deliveries_whose_messages_keep_being_lost() {
    let f = fixture().await;
    let receiver = Receiver::start().await;
    let (endpoint, _) = f.endpoint(json!({"url": receiver.server.url("/")})).await;
    let no_sqs = f.without_sqs().client::<WebhooksService>(&f.clock).with_key(&f.key);
    no_sqs.request(Method::POST, &format!("/webhooks/endpoints/{endpoint}/test")).expect(202).await;
    // Three days on, still pending and overdue: failed for good, not queued again.
    f.clock.advance(webhooks::sweeper::GIVE_UP_AFTER_HOURS * 3600 + 1);
    let report = sweeper(&f).sweep().await.unwrap();
    assert_eq!((report.queued, report.failed), (0, 1));
    assert_eq!(f.deliver_queued().await, 0);
    let delivery = f.deliveries(&endpoint).await.remove(0);
    assert_eq!((delivery["status"].as_str(), delivery["next_attempt_at"].clone()), (Some("failed"), Value::Null));
    assert_eq!(sweeper(&f).sweep().await.unwrap(), webhooks::sweeper::SweepReport::default());
    // replay-failed finds it, and sends it.
    let until = f.clock.now().to_rfc3339();
    let since = (f.clock.now() - chrono::Duration::days(4)).to_rfc3339();
    let replayed = f
        .api
        .post(&format!("/webhooks/endpoints/{endpoint}/replay-failed"), json!({"since": since, "until": until}))
        .expect(202)
        .await;
    assert_eq!(replayed["data"]["queued"], 1);
    f.deliver_queued().await;
    assert_eq!(receiver.received().len(), 1);
    assert_eq!(f.deliveries(&endpoint).await[0]["status"], "succeeded");
}

/// A process of its own: a runtime on its own thread. `kill` stops it at once: its tasks are
/// dropped where they stand, as when a Lambda container dies.
struct Process(Option<tokio::runtime::Runtime>);

impl Process {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        Self(Some(runtime))
    }

    fn spawn<F>(&self, work: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.0.as_ref().unwrap().spawn(work)
    }

    fn kill(mut self) {
        self.0.take().unwrap().shutdown_background();
    }
}

/// A `config` agent of the fixture's account on `model`; its id.
async fn run_agent(f: &Fixture, model: &integration_tests::model_server::ModelServer) -> String {
    let lm = f.stack.language_model(&f.clock, &f.key, "local", &model.base_url()).await;
    let body = json!({"type": "config", "name": "Runner", "framework": "chainlib", "language_model_id": lm});
    f.stack.client::<AgentsService>(&f.clock).with_key(&f.key).post("/agents/", body).created().await
}

/// The run events a receiver got, by type.
fn run_events(receiver: &Receiver, event_type: &str) -> Vec<Value> {
    receiver.bodies().into_iter().filter(|body| body["type"] == event_type).collect()
}

/// Reads a stream to its end; its text.
async fn stream_text(body: http_api::StreamBody) -> String {
    String::from_utf8_lossy(&body.collect().await.unwrap().to_bytes()).into_owned()
}

/// The last event's name and data of an SSE text.
fn last_event(text: &str) -> (String, Value) {
    let name = text.lines().filter_map(|line| line.strip_prefix("event: ")).next_back().unwrap_or_default().to_owned();
    let data = text.lines().filter_map(|line| line.strip_prefix("data: ")).next_back().unwrap_or("null");
    (name, serde_json::from_str(data).unwrap())
}

/// An account with a receiver of its run events, and an agent whose model answers "Hello " and
/// then waits for `gate`.
struct HeldRun {
    f: Fixture,
    receiver: Receiver,
    gate: Arc<tokio::sync::Notify>,
    _model: integration_tests::model_server::ModelServer,
    agent: String,
}

async fn held_run() -> HeldRun {
    use integration_tests::model_server::{ModelServer, gated_hello_world};
    let f = fixture().await;
    let receiver = Receiver::start().await;
    f.endpoint(json!({"url": receiver.server.url("/"), "event_types": ["run.succeeded", "run.failed"]})).await;
    let gate = Arc::new(tokio::sync::Notify::new());
    let model = ModelServer::start(vec![gated_hello_world(&gate)]).await;
    let agent = run_agent(&f, &model).await;
    HeldRun { f, receiver, gate, _model: model, agent }
}

#[tokio::test]
async fn a_run_whose_process_dies_mid_stream_is_ended_once_by_the_sweep_and_its_run_failed_delivered_once() {
    let HeldRun { f, receiver, gate: _, _model, agent } = held_run().await;

    // The run executes in a process of its own, which dies after the first delta.
    let process = Process::start();
    let runs = f.stack.client::<platform_api::AgentRunsService>(&f.clock).with_key(&f.key);
    let path = format!("/agents/{agent}/run");
    let response =
        process.spawn(async move { runs.post(&path, json!({"message": "hi", "timeout": 60})).stream().await });
    let response = response.await.unwrap();
    let run_id: platform_data::ids::RunId = response.headers()["x-run-id"].to_str().unwrap().parse().unwrap();
    let mut body = response.into_body();
    integration_tests::read_until(&mut body, "event: message").await;
    process.kill();
    let cut = stream_text(body).await;
    assert!(!cut.contains("event: done") && !cut.contains("event: error"), "{cut}");
    assert_eq!(f.stack.runs().get_stored(run_id).await.unwrap().unwrap().status.as_str(), "started");

    // Past its deadline and the margin, the scheduler's sweep ends it, once.
    f.clock.advance(60 + agent_runtime::runs::STALE_MARGIN.num_seconds() + 1);
    let scheduler = f.stack.service::<agent_runtime::scheduler::Scheduler>(&f.clock);
    assert_eq!(scheduler.tick(f.clock.now()).await.unwrap().lost_runs_ended, 1);
    assert_eq!(scheduler.tick(f.clock.now()).await.unwrap().lost_runs_ended, 0);
    let ended = f.stack.runs().get_stored(run_id).await.unwrap().unwrap();
    assert_eq!(
        (ended.status.as_str(), ended.failure_reason.map(|reason| reason.as_str())),
        ("failed", Some("timeout"))
    );

    // Its `run.failed` reaches the receiver once; no `run.succeeded`.
    f.deliver_queued().await;
    let failed = run_events(&receiver, "run.failed");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["data"]["id"], json!(run_id));
    assert!(run_events(&receiver, "run.succeeded").is_empty());

    // Its stream, resumed, agrees with its record.
    let resumed = f.stack.client::<platform_api::AgentRunsService>(&f.clock).with_key(&f.key);
    let text = resumed.get(&format!("/agents/{agent}/runs/{run_id}/stream")).send().await.text;
    let (name, data) = last_event(&text);
    assert_eq!((name.as_str(), data["failure_reason"].as_str()), ("error", Some("timeout")), "{text}");
    assert!(!text.contains("event: done"));
}

#[tokio::test]
async fn a_run_ended_by_the_sweep_while_its_process_was_slow_streams_the_recorded_error_not_done() {
    let HeldRun { f, receiver, gate, _model, agent } = held_run().await;
    let runs = f.stack.client::<platform_api::AgentRunsService>(&f.clock).with_key(&f.key);
    let response = runs.post(&format!("/agents/{agent}/run"), json!({"message": "hi", "timeout": 60})).stream().await;
    let mut body = response.into_body();
    let seen = integration_tests::read_until(&mut body, "event: message").await;
    // The process is slow, not dead: the sweep finds the run past its deadline and ends it.
    f.clock.advance(60 + agent_runtime::runs::STALE_MARGIN.num_seconds() + 1);
    let scheduler = f.stack.service::<agent_runtime::scheduler::Scheduler>(&f.clock);
    assert_eq!(scheduler.tick(f.clock.now()).await.unwrap().lost_runs_ended, 1);
    // Then the model answers: the late end is refused, and the stream ends as the record says.
    gate.notify_one();
    let text = format!("{seen}{}", stream_text(body).await);
    let (name, data) = last_event(&text);
    assert_eq!((name.as_str(), data["failure_reason"].as_str()), ("error", Some("timeout")), "{text}");
    assert!(!text.contains("event: done"), "{text}");
    f.deliver_queued().await;
    assert_eq!(run_events(&receiver, "run.failed").len(), 1);
    assert!(run_events(&receiver, "run.succeeded").is_empty());
}

#[tokio::test]
async fn a_run_end_written_but_never_queued_is_delivered_once_by_the_webhook_sweeper() {
    use integration_tests::model_server::{ModelServer, text_reply};
    let f = fixture().await;
    let receiver = Receiver::start().await;
    f.endpoint(json!({"url": receiver.server.url("/"), "event_types": ["run.succeeded"]})).await;
    let model = ModelServer::start(vec![text_reply("Done here.")]).await;
    let agent = run_agent(&f, &model).await;
    // The process's queue fails after the run's end is written (as a process killed right after
    // its transaction): the end and its deliveries are stored, nothing is queued.
    let runs = f.without_sqs().client::<platform_api::AgentRunsService>(&f.clock).with_key(&f.key);
    let reply = runs.post(&format!("/agents/{agent}/run"), json!({"message": "hi"})).send().await;
    assert_eq!(last_event(&reply.text).0, "done", "{}", reply.text);
    assert_eq!(f.deliver_queued().await, 0);

    f.clock.advance(OVERDUE + 60);
    assert_eq!(sweeper(&f).sweep().await.unwrap().queued, 1);
    f.deliver_queued().await;
    assert_eq!(sweeper(&f).sweep().await.unwrap().queued, 0);
    let succeeded = run_events(&receiver, "run.succeeded");
    assert_eq!(succeeded.len(), 1, "{succeeded:?}");
    assert_eq!(succeeded[0]["data"]["status"], "success");
}

#[tokio::test]
async fn a_publisher_reads_an_account_s_endpoints_once_within_its_cache_time() {
    let f = fixture().await;
    let receiver = Receiver::start().await;
    f.endpoint(json!({"url": receiver.server.url("/first")})).await;
    // The agents function's publisher, with the template's cache time (10 s).
    let publisher = f.stack.publisher("AgentsFunction");
    let account = AccountId::from(f.account);
    let start = f.clock.now();
    let deliveries_of = |event: webhooks::store::Event| {
        let store = f.store_with(f.stack.dynamodb.clone());
        async move { store.deliveries_of_event(event.id).await.unwrap().len() }
    };
    f.stack.calls.reset();
    let event = publisher.publish(account, "agent.created", json!({}), start).await.unwrap();
    assert_eq!(f.stack.calls.operations(), ["Query", "BatchWriteItem"], "the endpoints read once");
    assert_eq!(deliveries_of(event).await, 1);

    // Another endpoint, created meanwhile: events within the cache time still go to the first
    // only, without reading the endpoints; from then on, to both.
    f.endpoint(json!({"url": receiver.server.url("/second")})).await;
    f.stack.calls.reset();
    let within =
        publisher.publish(account, "agent.updated", json!({}), start + chrono::Duration::seconds(9)).await.unwrap();
    assert_eq!(f.stack.calls.operations(), ["BatchWriteItem"], "no read of the endpoints");
    assert_eq!(deliveries_of(within).await, 1);
    f.stack.calls.reset();
    let after =
        publisher.publish(account, "agent.updated", json!({}), start + chrono::Duration::seconds(10)).await.unwrap();
    assert_eq!(f.stack.calls.operations(), ["Query", "BatchWriteItem"]);
    assert_eq!(deliveries_of(after).await, 2);
    // A clock behind the read (another container's) reads again rather than trust it.
    f.stack.calls.reset();
    publisher.publish(account, "agent.updated", json!({}), start).await.unwrap();
    assert_eq!(f.stack.calls.operations(), ["Query", "BatchWriteItem"]);

    // With no cache time every event reads the endpoints.
    let uncached = f.stack.with_settings(&[("WEBHOOK_ENDPOINT_CACHE_SECONDS", "0")]).publisher("AgentsFunction");
    for _ in 0..2 {
        f.stack.calls.reset();
        uncached.publish(account, "agent.updated", json!({}), start).await.unwrap();
        assert_eq!(f.stack.calls.operations(), ["Query", "BatchWriteItem"]);
    }
}

/// A host that accepts connections and never answers: each attempt waits out its limit.
struct BlackHole {
    address: std::net::SocketAddr,
    accepted: Arc<std::sync::atomic::AtomicUsize>,
    _task: tokio::task::JoinHandle<()>,
}

impl BlackHole {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                held.push(stream);
            }
        });
        Self { address, accepted, _task: task }
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.address)
    }

    fn accepted(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The delivery function's bound on each owner's attempts in flight, set to `limit`.
fn in_flight(stack: &TestStack, limit: u32) -> webhooks::fairness::InFlight {
    let limit = limit.to_string();
    stack.with_settings(&[(platform_api::settings::QUOTA_WEBHOOK_DELIVERIES_IN_FLIGHT, &limit)]).delivery_in_flight()
}

/// The endpoint's deliveries, newest first (read by the test, not a function).
async fn deliveries_of(f: &Fixture, endpoint: &str) -> Vec<webhooks::store::Delivery> {
    let store = f.store_with(f.stack.dynamodb.clone());
    store.deliveries_of_endpoint(endpoint.parse().unwrap(), None, 100, None).await.unwrap().items
}

#[tokio::test]
async fn an_owner_whose_endpoint_never_answers_holds_only_its_in_flight_places_while_another_owner_is_delivered() {
    let f = fixture().await;
    let hole = BlackHole::start().await;
    let (hole_endpoint, _) = f.endpoint(json!({"url": hole.url()})).await;
    let other = Uuid::new_v4();
    let other_api = f.stack.client::<WebhooksService>(&f.clock).with_key(&f.stack.api_key(other).await);
    let receiver = Receiver::start().await;
    other_api.post("/webhooks/endpoints", json!({"url": receiver.server.url("/hook")})).expect(201).await;
    let deliverer = deliverer(&f.stack, &f.clock)
        .with_attempt_timeout(Duration::from_millis(300))
        .with_in_flight(in_flight(&f.stack, 2));
    let publisher = &deliverer.publisher;
    for i in 0..6 {
        publisher.publish(AccountId::from(f.account), "agent.updated", json!({"i": i}), f.clock.now()).await.unwrap();
    }
    publisher.publish(AccountId::from(other), "agent.updated", json!({}), f.clock.now()).await.unwrap();

    // One batch, as one invocation gets it: the black-holed owner's attempts take its two places;
    // its four other deliveries wait their turn without an attempt; the other owner is delivered.
    let messages = f.receive().await;
    assert_eq!(messages.len(), 7);
    let retry = deliverer.handle_batch(&messages).await;
    assert_eq!(receiver.received().len(), 1, "the other owner's delivery");
    assert_eq!(hole.accepted(), 2, "two attempts in flight, no more");
    assert_eq!(retry.len(), 2, "the two timed-out attempts retry on their schedule");
    let attempts: Vec<usize> = deliveries_of(&f, &hole_endpoint).await.iter().map(|d| d.attempts.len()).collect();
    assert_eq!(attempts.iter().filter(|count| **count == 1).count(), 2, "{attempts:?}");
    assert_eq!(attempts.iter().filter(|count| **count == 0).count(), 4, "deferred, not attempted: {attempts:?}");
    // Deferred as new messages, delayed (so a wait for a place is never a receive of its own).
    let attributes = f
        .stack
        .aws()
        .sqs()
        .get_queue_attributes()
        .queue_url(f.stack.setting(WEBHOOK_DELIVERY_QUEUE_URL))
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesDelayed)
        .send()
        .await
        .unwrap();
    let delayed = attributes.attributes().unwrap()
        [&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesDelayed]
        .clone();
    assert_eq!(delayed, "4");
    // Every place was given back.
    let leases =
        storage::quota::Leases::new(f.stack.dynamodb.clone(), f.stack.setting(platform_api::settings::QUOTAS_TABLE));
    let quota = storage::quota::Quota { name: webhooks::fairness::IN_FLIGHT_QUOTA, limit: 2 };
    let live = leases.live(quota, &format!("account:{}", f.account), f.clock.now().timestamp_millis()).await.unwrap();
    assert_eq!(live, 0);
}

#[tokio::test]
async fn an_endpoint_that_keeps_timing_out_backs_off_faster_and_is_disabled_after_a_day() {
    let f = fixture().await;
    let hole = BlackHole::start().await;
    let (endpoint, _) = f.endpoint(json!({"url": hole.url()})).await;
    let deliverer = deliverer(&f.stack, &f.clock).with_attempt_timeout(Duration::from_millis(200));
    let publisher = &deliverer.publisher;
    publisher.publish(AccountId::from(f.account), "agent.updated", json!({}), f.clock.now()).await.unwrap();
    let message = f.receive().await.remove(0);
    let endpoint_record = || async { f.api.get(&format!("/webhooks/endpoints/{endpoint}")).expect(200).await };
    // Each redelivery of the message is one more attempt: the first two timeouts wait as the
    // schedule says; from the third in a row, at least the slow minimum.
    let mut waits = Vec::new();
    for _ in 0..4 {
        match deliverer.handle(&message).await.unwrap() {
            Outcome::RetryAfter(wait) => waits.push(wait),
            Outcome::Done => panic!("a timeout is retried"),
        }
    }
    assert_eq!(waits[..2], [Duration::from_secs(5), Duration::from_secs(300)]);
    assert!(waits[2..].iter().all(|wait| *wait >= webhooks::policy::SLOW_RETRY_MIN), "{waits:?}");
    assert_eq!(hole.accepted(), 4);
    let stored = f.store_with(f.stack.dynamodb.clone());
    let stored = stored.get_endpoint(AccountId::from(f.account), endpoint.parse().unwrap());
    assert_eq!(stored.await.unwrap().unwrap().timeouts_in_a_row, 4);
    assert_eq!(endpoint_record().await["data"]["enabled"], true);
    // A day of nothing but timeouts, ten in a row: disabled, four days sooner than other failures.
    f.clock.advance(24 * 3600);
    for _ in 0..6 {
        publisher.publish(AccountId::from(f.account), "agent.updated", json!({}), f.clock.now()).await.unwrap();
        for message in f.receive().await {
            deliverer.handle(&message).await.unwrap();
        }
    }
    assert_eq!(hole.accepted(), 10);
    let data = endpoint_record().await["data"].clone();
    assert_eq!(
        (data["enabled"].as_bool(), data["disabled_reason"].as_str()),
        (Some(false), Some("the endpoint timed out on every delivery for a day"))
    );
}

#[tokio::test]
async fn a_run_end_whose_endpoints_cannot_be_read_records_its_event_and_delivers_it_once_they_can() {
    use integration_tests::model_server::{ModelServer, text_reply};
    let f = fixture().await;
    let receiver = Receiver::start().await;
    let (endpoint, _) = f.endpoint(json!({"url": receiver.server.url("/"), "event_types": ["run.succeeded"]})).await;
    let model = ModelServer::start(vec![text_reply("Done here.")]).await;
    let agent = run_agent(&f, &model).await;
    // The run's process cannot read the endpoints table when the run ends.
    let missing = format!("{}missing-endpoints", f.stack.prefix);
    let broken = f.stack.with_settings(&[(platform_api::settings::WEBHOOK_ENDPOINTS_TABLE, &missing)]);
    let runs = broken.client::<platform_api::AgentRunsService>(&f.clock).with_key(&f.key);
    let reply = runs.post(&format!("/agents/{agent}/run"), json!({"message": "hi"})).send().await;
    assert_eq!(last_event(&reply.text).0, "done", "{}", reply.text);
    // The event is recorded all the same, with the run's end.
    let events = f.api.get("/webhooks/events?type=run.succeeded").expect(200).await;
    let recorded = events["data"].as_array().unwrap().clone();
    assert_eq!(recorded.len(), 1, "{events}");
    let event_id = recorded[0]["id"].as_str().unwrap().to_owned();
    // The worker reads the endpoints once it can, makes the deliveries, and delivers once.
    assert_eq!(f.deliver_queued().await, 2, "the fan-outs of run.started and run.succeeded");
    assert_eq!(f.deliver_queued().await, 1, "the delivery it made");
    assert_eq!(f.deliver_queued().await, 0);
    let succeeded = run_events(&receiver, "run.succeeded");
    assert_eq!(succeeded.len(), 1, "{succeeded:?}");
    let received = receiver.received();
    assert_eq!(received[0].headers["webhook-id"], event_id.as_str(), "the recorded event's id");
    // The event lists its one delivery, to the endpoint; the stand-in is never shown.
    let detail = f.api.get(&format!("/webhooks/events/{event_id}")).expect(200).await;
    let deliveries = detail["data"]["deliveries"].as_array().unwrap().clone();
    assert_eq!(deliveries.len(), 1, "{detail}");
    assert_eq!(deliveries[0]["endpoint_id"], endpoint.as_str());
    assert_eq!(deliveries[0]["status"], "succeeded");
}
