//! Rotating the pepper without invalidating credentials (docs/operations.md, "Rotating the
//! pepper"): stage a next pepper, promote it (the old one becomes previous), retire the previous.
//! Each step is written as `admin pepper …` writes it; a service built after a write is a
//! container that read the new secret, one built before is a warm container.

use credentials::{CredentialsError, HashedWith, Pepper, PepperSource, Peppers, Verification};
use integration_tests::{Reply, TestClient, TestClock, TestStack};
use meeting_api::AuthService;
use platform_api::{Gate, HealthService};
use std::time::Duration;
use storage::rate_limit::{RateLimit, RateLimiter};
use uuid::Uuid;

const TOKEN: &str = "/api/auth/token/";

/// The token endpoint over the stack's recorded DynamoDB client and a pepper source that
/// re-reads the secret after `refresh`. Built by hand: no setting sets the refresh interval.
fn auth_service(stack: &TestStack, clock: &TestClock, refresh: Duration) -> TestClient {
    let lookup = |name: &str| stack.env.get(name).cloned();
    let limiter = meeting_api::client_limit::limiter_from_settings(&stack.aws(), &lookup).expect("limiter settings");
    let auth = AuthService::new(stack.apps(), stack.pepper().with_refresh_interval(refresh), 10800, limiter);
    TestClient::new(auth.with_clock(clock.clock()))
}

/// The health function behind an X-API-Key gate whose pepper source re-reads after `refresh`
/// (built by hand for the same reason).
fn health_service(stack: &TestStack, clock: &TestClock, refresh: Duration) -> TestClient {
    let limiter = RateLimiter::new(
        stack.dynamodb.clone(),
        stack.setting(platform_api::settings::RATE_LIMITS_TABLE),
        RateLimit::DEFAULT,
    );
    let gate = Gate::new(stack.api_keys(), stack.pepper().with_refresh_interval(refresh), limiter);
    TestClient::new(stack.service::<HealthService>(clock).with_gate(gate.with_clock(clock.clock())))
}

/// A token request with form credentials.
async fn token_reply(auth: &TestClient, client_id: &str, secret: &str) -> Reply {
    let form = [("grant_type", "client_credentials"), ("client_id", client_id), ("client_secret", secret)];
    auth.post_form(TOKEN, &form).send().await
}

/// `GET /health-check/auth-test` with `key`.
async fn auth_test(health: &TestClient, key: &str) -> Reply {
    health.with_key(key).get("/health-check/auth-test").send().await
}

/// Writes the secret's next state, as the admin CLI's steps do.
async fn write(stack: &TestStack, step: impl FnOnce(&Peppers) -> Result<Peppers, CredentialsError>) -> Peppers {
    let source = stack.pepper();
    let now = source.read().await.expect("the pepper secret reads").peppers;
    let next = step(&now).expect("the rotation step applies");
    source.write(&next).await.expect("the pepper secret is written");
    next
}

async fn rotate_to_previous(stack: &TestStack) -> Peppers {
    write(stack, |peppers| peppers.staged(Pepper::generate())).await;
    write(stack, Peppers::promoted).await
}

#[tokio::test]
async fn a_client_secret_issued_under_the_old_pepper_still_gets_tokens_and_moves_to_the_new_one() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (used, used_secret) = stack.create_app(&[1]).await;
    let (idle, idle_secret) = stack.create_app(&[1]).await;
    let old = stack.pepper().read().await.unwrap().peppers;
    assert_eq!(stack.apps().get(&used).await.unwrap().unwrap().pepper_id.as_deref(), Some(old.current().id()));

    let rotated = rotate_to_previous(&stack).await;
    assert_eq!(rotated.previous().map(Pepper::id), Some(old.current().id()));
    // `admin pepper promote` and `retire` wait on the version's age, which the secret reports.
    assert!(stack.pepper().read().await.unwrap().created_at.is_some());
    let auth = auth_service(&stack, &clock, Duration::from_secs(300));

    // The first token under the new pepper re-hashes the secret: one conditional UpdateItem
    // (besides the client's rate limit: this container's first request of it reads the
    // application and its bucket in one BatchGetItem, then takes from the bucket).
    stack.calls.reset();
    token_reply(&auth, &used, &used_secret).await.expect(200);
    assert_eq!(stack.calls.operations(), ["BatchGetItem", "UpdateItem", "UpdateItem", "PutItem"]);
    let app = stack.apps().get(&used).await.unwrap().unwrap();
    assert_eq!(app.pepper_id.as_deref(), Some(rotated.current().id()));
    assert_eq!(app.revision, 2, "the re-hash bumps the revision, so a concurrent operator change conflicts");
    assert_eq!(app.verify_secret(&Peppers::single(rotated.current().clone()), &used_secret), Verification::Match);

    // From then on the common path: no extra call.
    stack.calls.reset();
    token_reply(&auth, &used, &used_secret).await.expect(200);
    assert_eq!(stack.calls.operations(), ["GetItem", "UpdateItem", "PutItem"]);
    // A wrong secret is still refused, under either pepper, with no write (the first request of
    // this client in the container: the application and its bucket read together).
    stack.calls.reset();
    assert_eq!(token_reply(&auth, &idle, "not-the-secret").await.expect(401)["error"], "invalid_client");
    assert_eq!(stack.calls.operations(), ["BatchGetItem"]);

    // New applications are hashed with the new pepper.
    let (fresh, fresh_secret) = stack.create_app(&[1]).await;
    assert_eq!(stack.apps().get(&fresh).await.unwrap().unwrap().pepper_id.as_deref(), Some(rotated.current().id()));

    // Retiring the previous pepper: the application used during the rotation and the new one
    // keep working; the idle one's secret is now refused with the spec's invalid_client.
    write(&stack, Peppers::retired).await;
    let auth = auth_service(&stack, &clock, Duration::from_secs(300));
    token_reply(&auth, &used, &used_secret).await.expect(200);
    token_reply(&auth, &fresh, &fresh_secret).await.expect(200);
    let reply = token_reply(&auth, &idle, &idle_secret).await;
    let body = reply.expect(401);
    assert_eq!(body["error"], "invalid_client");
    assert!(body["error_description"].is_string());
    assert_eq!(reply.header("www-authenticate"), Some("Basic realm=\"meetings\""));
}

#[tokio::test]
async fn an_api_key_issued_under_the_old_pepper_still_authenticates_and_moves_to_the_new_one() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    let used = stack.api_key(account).await;
    let idle = stack.api_key(account).await;
    let key_id = |key: &str| key.split_once('.').unwrap().0.to_owned();

    let rotated = rotate_to_previous(&stack).await;
    let health = health_service(&stack, &clock, Duration::from_secs(300));
    stack.calls.reset();
    let body = auth_test(&health, &used).await.expect(200);
    assert_eq!(body["data"]["account_id"], account.to_string());
    // BatchGetItem (the key and its bucket, a container's first request of it), UpdateItem (its
    // hash, once), UpdateItem (the rate-limit bucket).
    assert_eq!(stack.calls.operations(), ["BatchGetItem", "UpdateItem", "UpdateItem"]);
    stack.calls.reset();
    auth_test(&health, &used).await.expect(200);
    assert_eq!(stack.calls.operations(), ["GetItem", "UpdateItem"]);

    let listed = stack.api_keys().list().await.unwrap();
    let hashed_with = |id: &str| {
        rotated.hashed_with(listed.iter().find(|key| key.key_id == id).and_then(|key| key.pepper_id.as_deref()))
    };
    assert_eq!(hashed_with(&key_id(&used)), HashedWith::Current);
    assert_eq!(hashed_with(&key_id(&idle)), HashedWith::Previous);
    let fresh = stack.api_key(account).await;
    assert_eq!(
        stack
            .api_keys()
            .list()
            .await
            .unwrap()
            .iter()
            .find(|key| key.key_id == key_id(&fresh))
            .unwrap()
            .pepper_id
            .as_deref(),
        Some(rotated.current().id())
    );

    // A revoked key is never written back by a late upgrade.
    let revoked = stack.api_key(account).await;
    assert!(stack.api_keys().revoke(&key_id(&revoked)).await.unwrap());
    let upgrade = rotated.hash(&revoked);
    assert!(!stack.api_keys().upgrade_hash(&key_id(&revoked), "any-old-hash", &upgrade).await.unwrap());
    assert!(stack.api_keys().list().await.unwrap().iter().all(|key| key.key_id != key_id(&revoked)));

    write(&stack, Peppers::retired).await;
    let health = health_service(&stack, &clock, Duration::from_secs(300));
    auth_test(&health, &used).await.expect(200);
    auth_test(&health, &fresh).await.expect(200);
    let body = auth_test(&health, &idle).await.expect(401);
    assert_eq!(body["success"], false);
    assert_eq!(body["error"]["code"], "AUTHENTICATION_FAILED");
}

#[tokio::test]
async fn warm_containers_follow_each_step_once_they_re_read_the_secret() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    // A container that re-reads the secret on every request, and one that never does within
    // the test (it keeps what it read first).
    let following = health_service(&stack, &clock, Duration::ZERO);
    let stale = health_service(&stack, &clock, Duration::from_secs(3600));
    let before = stack.api_key(account).await;
    auth_test(&following, &before).await.expect(200);
    auth_test(&stale, &before).await.expect(200);

    // Staged: containers that read it accept the next pepper's hashes; nothing makes them yet.
    write(&stack, |peppers| peppers.staged(Pepper::generate())).await;
    auth_test(&following, &before).await.expect(200);
    let during = stack.api_key(account).await;
    auth_test(&stale, &during).await.expect(200);

    // Promoted: a key made now is hashed with the new pepper. A container still on the staged
    // secret accepts it through `next`; a container that skipped staging does not, which is
    // why the steps wait for every container to re-read the secret.
    let staged_reader = health_service(&stack, &clock, Duration::from_secs(3600));
    auth_test(&staged_reader, &before).await.expect(200);
    write(&stack, Peppers::promoted).await;
    let after = stack.api_key(account).await;
    auth_test(&following, &after).await.expect(200);
    auth_test(&staged_reader, &after).await.expect(200);
    auth_test(&stale, &after).await.expect(401);
    // Both old and new keys work on an up-to-date container.
    auth_test(&following, &before).await.expect(200);
}

#[tokio::test]
async fn a_malformed_pepper_secret_is_a_clear_error_not_a_panic() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1]).await;
    let key = stack.api_key(Uuid::new_v4()).await;
    let secrets = aws_sdk_secretsmanager::Client::new(&stack.sdk);
    let secret_id = stack.setting(meeting_data::settings::PEPPER_SECRET_ID);
    secrets
        .put_secret_value()
        .secret_id(&secret_id)
        .secret_string(r#"{"current": "pepper-material", "previus": "typo"}"#)
        .send()
        .await
        .unwrap();

    let source = PepperSource::new(secrets.clone(), &secret_id);
    let err = source.get().await.expect_err("a malformed secret is refused");
    assert!(matches!(err, CredentialsError::MalformedPepperSecret(_)), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("unknown field \"previus\""), "{message}");
    assert!(!message.contains("pepper-material"), "{message}");

    // A new container answers 500 in each API's error format.
    let body = token_reply(&auth_service(&stack, &clock, Duration::ZERO), &client_id, &secret).await.expect(500);
    assert_eq!(body["error"], "server_error");
    let body = auth_test(&health_service(&stack, &clock, Duration::ZERO), &key).await.expect(500);
    assert_eq!(body["error"]["code"], "INTERNAL_ERROR");
}

#[tokio::test]
async fn a_warm_container_keeps_its_peppers_when_a_re_read_fails() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1]).await;
    let auth = auth_service(&stack, &clock, Duration::ZERO);
    token_reply(&auth, &client_id, &secret).await.expect(200);
    aws_sdk_secretsmanager::Client::new(&stack.sdk)
        .put_secret_value()
        .secret_id(stack.setting(meeting_data::settings::PEPPER_SECRET_ID))
        .secret_string("{not json")
        .send()
        .await
        .unwrap();
    // The re-read fails (and is logged); the container goes on with what it read before.
    token_reply(&auth, &client_id, &secret).await.expect(200);
}
