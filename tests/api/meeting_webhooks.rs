//! Webhooks of external applications (`/api/v1/external/webhooks/`): meeting events of the
//! organizations an application is linked to, fanned out from the import's outbox through the real
//! queue (moto) and delivery worker to local receivers, verified with the Standard Webhooks
//! reference verifier; and the routes in the meeting API's style.

use chrono::Utc;
use http::Method;
use http_body_util::BodyExt;
use integration_tests::local_server::{Handler, LocalServer, respond};
use integration_tests::{TestClient, TestClock, TestStack, demo_fixture, meeting, obtain_scoped_token};
use meeting_api::{AuthService, ExternalWebhooksService, MeetingsService};
use meeting_data::administration;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use webhooks::delivery::Deliverer;

const ENDPOINTS: &str = "/api/v1/external/webhooks/endpoints/";

/// The headers and body of each request a receiver got.
type Requests = Arc<Mutex<Vec<(http::HeaderMap, Vec<u8>)>>>;

/// A receiver answering 200 to everything, recording each request's headers and body.
struct Receiver {
    server: LocalServer,
    requests: Requests,
}

impl Receiver {
    async fn start() -> Self {
        let requests: Requests = Arc::default();
        let seen = Arc::clone(&requests);
        let handler: Handler = Arc::new(move |request| {
            let seen = Arc::clone(&seen);
            Box::pin(async move {
                let (parts, body) = request.into_parts();
                let body = body.collect().await.map(|b| b.to_bytes().to_vec()).unwrap_or_default();
                seen.lock().unwrap().push((parts.headers, body));
                respond(200, "text/plain", "ok".to_owned())
            })
        });
        Self { server: LocalServer::start(handler).await, requests }
    }

    fn url(&self) -> String {
        self.server.url("/hook")
    }

    /// The bodies received, each verified with `secret` by the reference verifier.
    fn verified(&self, secret: &str) -> Vec<Value> {
        let verifier = standardwebhooks::Webhook::new(secret).unwrap();
        self.requests
            .lock()
            .unwrap()
            .iter()
            .map(|(headers, body)| {
                verifier.verify(body, headers).expect("signed with the endpoint's secret");
                serde_json::from_slice(body).unwrap()
            })
            .collect()
    }
}

/// An application of the stack, its token for `webhooks:manage` and its client for the routes.
struct App {
    client_id: String,
    api: TestClient,
    meetings: TestClient,
}

async fn app(stack: &TestStack, clock: &TestClock, organizations: &[i64]) -> App {
    let (client_id, secret) = stack.create_app_with_scopes(organizations, &["webhooks:manage"]).await;
    let auth = stack.client::<AuthService>(clock);
    let token = obtain_scoped_token(&auth, &client_id, &secret, "meetings:read webhooks:manage").await;
    App {
        client_id,
        api: stack.client::<ExternalWebhooksService>(clock).with_token(&token),
        meetings: stack.client::<MeetingsService>(clock).with_token(&token),
    }
}

/// The delivery worker as the function builds it, on `clock`, without jitter.
fn deliverer(stack: &TestStack, clock: &TestClock) -> Deliverer {
    let settings = stack.webhook_settings();
    Deliverer::new(settings.publisher, settings.secrets, settings.policy, clock.clock(), Arc::new(|| 0.0))
        .with_attempt_timeout(Duration::from_secs(1))
        .with_audience(stack.delivery_audience())
}

/// Handles what the queue holds now, as Lambda would; returns how many messages there were.
async fn deliver_queued(worker: &Deliverer) -> usize {
    let queue = &worker.publisher.queue;
    let mut messages = Vec::new();
    loop {
        let batch = queue.receive(Duration::ZERO).await.unwrap();
        if batch.is_empty() {
            break;
        }
        messages.extend(batch);
    }
    let retry = worker.handle_batch(&messages).await;
    for message in messages.iter().filter(|m| !retry.contains(&m.message_id)) {
        queue.delete(&message.receipt_handle).await.unwrap();
    }
    messages.len()
}

/// Fans out and delivers until the queue is empty.
async fn deliver_all(worker: &Deliverer) {
    for _ in 0..5 {
        if deliver_queued(worker).await == 0 {
            return;
        }
    }
    panic!("the queue kept filling");
}

/// Imports meetings (with the demo's organizations and users).
async fn import(stack: &TestStack, meetings: Vec<Value>) {
    let mut document = demo_fixture();
    document["meetings"] = json!(meetings);
    stack.import_from(&document, None).await;
}

/// `(meeting_id, type)` of each event received.
fn events(bodies: &[Value]) -> BTreeSet<(i64, String)> {
    bodies.iter().map(|b| (b["data"]["meeting_id"].as_i64().unwrap(), b["type"].as_str().unwrap().to_owned())).collect()
}

fn set(pairs: &[(i64, &str)]) -> BTreeSet<(i64, String)> {
    pairs.iter().map(|(id, kind)| (*id, (*kind).to_owned())).collect()
}

#[tokio::test]
async fn applications_receive_the_meeting_events_of_their_linked_organizations_only() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let worker = deliverer(&stack, &clock);
    stack.import(&demo_fixture()).await;
    deliver_all(&worker).await; // the demo's own events: no endpoint yet.

    let (northwind, contoso) = (app(&stack, &clock, &[1]).await, app(&stack, &clock, &[2]).await);
    let (to_northwind, to_contoso) = (Receiver::start().await, Receiver::start().await);
    let secret = |body: Value| body["secret"].as_str().unwrap().to_owned();
    let northwind_secret = secret(northwind.api.post(ENDPOINTS, json!({"url": to_northwind.url()})).expect(201).await);
    let contoso_secret = secret(
        contoso
            .api
            .post(ENDPOINTS, json!({"url": to_contoso.url(), "event_types": ["meeting.created", "meeting.ready"]}))
            .expect(201)
            .await,
    );

    let transcript = demo_fixture()["meetings"][0]["transcript"].clone();
    import(
        &stack,
        vec![
            // New, with its transcript and summary: everything at once.
            meeting(1003, 1, 11, json!({"transcript": transcript, "summary": "## Notes", "updated_at": "2026-11-01T10:00:00Z"})),
            // New, expecting a recording it does not have yet.
            meeting(1004, 1, 11, json!({"summary": "s", "expected_artifacts": ["summary", "recording"], "updated_at": "2026-11-01T10:00:00Z"})),
            meeting(2002, 2, 21, json!({"updated_at": "2026-11-01T10:00:00Z"})),
        ],
    )
    .await;
    // A later write of 1004 brings the recording it expected; 1003 changes.
    import(
        &stack,
        vec![
            meeting(1003, 1, 11, json!({"transcript": transcript, "summary": "## Notes", "title": "Renamed", "updated_at": "2026-11-01T11:00:00Z"})),
            meeting(1004, 1, 11, json!({"summary": "s", "expected_artifacts": ["summary", "recording"], "updated_at": "2026-11-01T11:00:00Z",
                "recordings": [{"format": "mp3", "url": "https://media.example/1004.mp3", "duration": 1.0}]})),
        ],
    )
    .await;
    deliver_all(&worker).await;

    let received = to_northwind.verified(&northwind_secret);
    assert_eq!(
        events(&received),
        set(&[
            (1003, "meeting.created"),
            (1003, "transcript.ready"),
            (1003, "summary.ready"),
            (1003, "meeting.ready"),
            (1003, "meeting.updated"),
            (1004, "meeting.created"),
            (1004, "summary.ready"),
            (1004, "meeting.updated"),
            (1004, "recording.ready"),
            (1004, "meeting.ready"),
        ])
    );
    assert_eq!(received.len(), 10, "each event once");
    assert!(received.iter().all(|body| body["data"]["organization_id"] == 1));
    // The contoso endpoint asked for two types, and gets only its organization's meetings (2002
    // has neither transcript nor summary: created, not ready).
    assert_eq!(events(&to_contoso.verified(&contoso_secret)), set(&[(2002, "meeting.created")]));

    // `updated_at` is what the meeting API answers, and grows per meeting (in the set: SQS does
    // not order deliveries).
    let ready = received.iter().find(|b| b["type"] == "meeting.updated" && b["data"]["meeting_id"] == 1003).unwrap();
    let updated_at = ready["data"]["updated_at"].as_str().unwrap();
    assert_eq!(updated_at, "2026-11-01T11:00:00Z");
    let synced = |after: String| {
        let meetings = &northwind.meetings;
        async move {
            let page = meetings.get(&format!("/api/v1/external/meeting/?updated_after={after}")).expect(200).await;
            page["results"].as_array().unwrap().iter().map(|m| m["id"].as_i64().unwrap()).collect::<Vec<_>>()
        }
    };
    // The next sync from the event's `updated_at` returns the meeting (inclusive); a second later, not.
    assert!(synced(updated_at.to_owned()).await.contains(&1003));
    assert!(!synced("2026-11-01T11:00:01Z".to_owned()).await.contains(&1003));
    let created = received.iter().find(|b| b["type"] == "meeting.created" && b["data"]["meeting_id"] == 1003).unwrap();
    assert!(created["data"]["updated_at"].as_str() < ready["data"]["updated_at"].as_str());
    assert_eq!(ready["data"]["artifacts"], json!({"transcript": true, "summary": true, "recording": false}));
    assert_eq!(ready["data"]["status"], "past");
    let recording = received.iter().find(|b| b["type"] == "recording.ready").unwrap();
    assert_eq!(recording["data"]["artifacts"]["recording"], true);

    // Access is checked again when delivering: fanned out while linked, unlinked before the
    // attempt, nothing is sent.
    // A deletion is announced too, and the meeting is gone from the API.
    assert!(stack.meetings().delete(1004).await.unwrap());
    assert!(!stack.meetings().delete(1004).await.unwrap(), "deleted once");
    deliver_all(&worker).await;
    let received = to_northwind.verified(&northwind_secret);
    let deleted: Vec<&Value> = received.iter().filter(|b| b["type"] == "meeting.deleted").collect();
    assert_eq!(deleted.len(), 1);
    assert_eq!(
        (deleted[0]["data"]["meeting_id"].as_i64(), deleted[0]["data"]["organization_id"].as_i64()),
        (Some(1004), Some(1))
    );
    northwind.meetings.get("/api/v1/external/meeting/1004/").expect(404).await;
    let listed = northwind.meetings.get("/api/v1/external/meeting/").expect(200).await;
    assert!(listed["results"].as_array().unwrap().iter().all(|m| m["id"] != 1004));
    assert_eq!(listed["count"], 3, "1001, 1002 and 1003: the count went down");

    let before = received.len();
    import(&stack, vec![meeting(1003, 1, 11, json!({"title": "Again", "updated_at": "2026-11-01T12:00:00Z"}))]).await;
    assert_eq!(deliver_queued(&worker).await, 1, "the outbox's fan-out");
    administration::unlink_organization(&stack.apps(), &northwind.client_id, 1, Utc::now()).await.unwrap();
    deliver_all(&worker).await;
    assert_eq!(to_northwind.verified(&northwind_secret).len(), before);
    // Linking sends nothing by itself; a deactivated application is sent nothing.
    let directory = stack.directory();
    administration::link_organization(&stack.apps(), &directory, &northwind.client_id, 1, Utc::now()).await.unwrap();
    deliver_all(&worker).await;
    assert_eq!(to_northwind.verified(&northwind_secret).len(), before);
    administration::deactivate_app(&stack.apps(), &northwind.client_id, Utc::now()).await.unwrap();
    import(&stack, vec![meeting(1003, 1, 11, json!({"title": "Once more", "updated_at": "2026-11-01T13:00:00Z"}))])
        .await;
    deliver_all(&worker).await;
    assert_eq!(to_northwind.verified(&northwind_secret).len(), before);
}

#[tokio::test]
async fn the_routes_manage_an_applications_endpoints_in_the_meeting_api_style() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let worker = deliverer(&stack, &clock);
    stack.import(&demo_fixture()).await;
    deliver_all(&worker).await; // the demo's own events, fanned out before any endpoint exists.
    let owner = app(&stack, &clock, &[1]).await;
    let other = app(&stack, &clock, &[1]).await;
    let receiver = Receiver::start().await;

    // Without webhooks:manage: 403 insufficient_scope.
    let (client_id, secret) = stack.create_app_with_scopes(&[1], &["webhooks:manage"]).await;
    let auth = stack.client::<AuthService>(&clock);
    let read_only = obtain_scoped_token(&auth, &client_id, &secret, "meetings:read").await;
    let reply = stack.client::<ExternalWebhooksService>(&clock).with_token(&read_only).get(ENDPOINTS).send().await;
    assert_eq!(reply.expect(403)["detail"], "The access token lacks the webhooks:manage scope.");
    assert_eq!(
        reply.header("www-authenticate"),
        Some("Bearer error=\"insufficient_scope\", scope=\"webhooks:manage\"")
    );
    stack.client::<ExternalWebhooksService>(&clock).get(ENDPOINTS).expect(401).await;

    // Create: the secret once; field errors as DRF's 400.
    let created = owner
        .api
        .post(ENDPOINTS, json!({"url": receiver.url(), "event_types": ["meeting.ready"], "description": "CRM"}))
        .expect(201)
        .await;
    let id = created["id"].as_str().unwrap().to_owned();
    let endpoint_secret = created["secret"].as_str().unwrap().to_owned();
    assert!(endpoint_secret.starts_with("whsec_"));
    let bad =
        owner.api.post(ENDPOINTS, json!({"url": receiver.url(), "event_types": ["agent.created"]})).expect(400).await;
    assert_eq!(bad, json!({"event_types[0]": ["unknown event type \"agent.created\""]}));
    let private = owner.api.post(ENDPOINTS, json!({"url": "https://10.0.0.1/hook"})).expect(400).await;
    assert!(private["url"][0].as_str().unwrap().contains("private"), "{private}");

    // Read back: no secret; listed with DRF's page-number pagination; another app's is a 404.
    let path = format!("{ENDPOINTS}{id}/");
    let read = owner.api.get(&path).expect(200).await;
    assert_eq!((read["description"].as_str(), read.get("secret")), (Some("CRM"), None));
    let page = owner.api.get(ENDPOINTS).expect(200).await;
    assert_eq!(
        (page["count"].as_i64(), page["next"].is_null(), page["results"][0]["id"].as_str()),
        (Some(1), true, Some(id.as_str()))
    );
    other.api.get(&path).expect(404).await;
    other.api.delete(&path).expect(404).await;
    assert_eq!(other.api.get(ENDPOINTS).expect(200).await["count"], 0);

    // PATCH changes only what it names; PUT replaces.
    let patched = owner.api.patch(&path, json!({"enabled": false})).expect(200).await;
    assert_eq!((patched["enabled"].as_bool(), patched["event_types"].clone()), (Some(false), json!(["meeting.ready"])));
    owner.api.post(&format!("{path}test/"), json!({})).expect(409).await;
    let replaced = owner.api.put(&path, json!({"url": receiver.url()})).expect(200).await;
    assert_eq!((replaced["enabled"].as_bool(), replaced["event_types"].is_null()), (Some(true), true));

    // A test event, signed, through the real queue; its delivery listed with its attempt.
    let test = owner.api.post(&format!("{path}test/"), json!({})).expect(202).await;
    deliver_all(&worker).await;
    let bodies = receiver.verified(&endpoint_secret);
    assert_eq!((bodies.len(), bodies[0]["type"].as_str()), (1, Some("webhook.test")));
    let deliveries = owner.api.get(&format!("{path}deliveries/")).expect(200).await;
    assert_eq!(deliveries["results"][0]["id"], test["delivery_id"]);
    assert_eq!(deliveries["results"][0]["status"], "succeeded");
    assert_eq!(deliveries["results"][0]["attempts"][0]["status_code"], 200);
    assert!(deliveries["next"].is_null() && deliveries["previous"].is_null());
    owner.api.get(&format!("{path}deliveries/?status=lost")).expect(400).await;

    // Replay, rotation (the old secret keeps signing beside the new one).
    let delivery_id = test["delivery_id"].as_str().unwrap();
    owner.api.post(&format!("/api/v1/external/webhooks/deliveries/{delivery_id}/replay/"), json!({})).expect(202).await;
    other.api.post(&format!("/api/v1/external/webhooks/deliveries/{delivery_id}/replay/"), json!({})).expect(404).await;
    let rotated = owner.api.post(&format!("{path}rotate/"), json!({})).expect(200).await;
    deliver_all(&worker).await;
    let new_secret = rotated["secret"].as_str().unwrap();
    assert_eq!(receiver.verified(&endpoint_secret).len(), 2);
    let (headers, body) = receiver.requests.lock().unwrap().last().cloned().unwrap();
    standardwebhooks::Webhook::new(new_secret)
        .unwrap()
        .verify(&body, &headers)
        .expect("signed with the new secret too");

    // Methods and paths.
    let reply = owner.api.request(Method::DELETE, ENDPOINTS).send().await;
    assert_eq!((reply.status.as_u16(), reply.header("allow")), (405, Some("GET, POST")));
    owner.api.get("/api/v1/external/webhooks/events/").expect(404).await;
    owner.api.get(&format!("{ENDPOINTS}not-an-id/")).expect(404).await;

    // Delete: 204, then gone.
    let deleted = owner.api.delete(&path).send().await;
    assert_eq!(deleted.status.as_u16(), 204);
    owner.api.get(&path).expect(404).await;
}
