//! `POST /api/auth/token/` and `POST /api/auth/revoke-token/`.

use base64::Engine as _;
use http::Method;
use http_api::Body;
use integration_tests::{TestClient, TestClock, TestStack, obtain_scoped_token, obtain_token, request};
use meeting_api::{AuthService, MeetingsService};

const TOKEN: &str = "/api/auth/token/";
const REVOKE: &str = "/api/auth/revoke-token/";
const LIST: &str = "/api/v1/external/meeting/";

#[tokio::test]
async fn issues_a_bearer_token_with_the_spec_fields_and_no_store() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1]).await;
    let reply = stack
        .client::<AuthService>(&clock)
        .post_form(
            TOKEN,
            &[("grant_type", "client_credentials"), ("client_id", &client_id), ("client_secret", &secret)],
        )
        .send()
        .await;
    let body = reply.expect(200);
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["expires_in"], 10800);
    assert_eq!(body["scope"], "meetings:read");
    assert!(body["access_token"].as_str().unwrap().len() >= 43);
    assert_eq!(body.as_object().unwrap().len(), 4);
    assert_eq!(reply.header("cache-control"), Some("no-store"));
    assert_eq!(reply.header("pragma"), Some("no-cache"));
    assert_eq!(reply.header("content-type"), Some("application/json"));
}

#[tokio::test]
async fn accepts_http_basic_client_authentication() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1]).await;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("{client_id}:{secret}"));
    let auth = stack.client::<AuthService>(&clock);
    let form = "application/x-www-form-urlencoded";
    let with_basic =
        |credentials: &str| auth.request(Method::POST, TOKEN).header("authorization", format!("Basic {credentials}"));
    let reply =
        with_basic(&basic).body("application/x-www-form-urlencoded; charset=UTF-8", "grant_type=client_credentials");
    let token = reply.expect(200).await["access_token"].as_str().unwrap().to_owned();
    stack.client::<MeetingsService>(&clock).with_token(&token).get(LIST).expect(200).await;

    // Both methods at once is refused (RFC 6749 §2.3).
    let both = format!("grant_type=client_credentials&client_id={client_id}&client_secret={secret}");
    with_basic(&basic).body(form, both).error(400, "invalid_request").await;

    // A wrong secret through Basic is invalid_client with a Basic challenge.
    let wrong = base64::engine::general_purpose::STANDARD.encode(format!("{client_id}:nope"));
    let reply = with_basic(&wrong).body(form, "grant_type=client_credentials").send().await;
    reply.error(401, "invalid_client");
    assert_eq!(reply.header("www-authenticate"), Some("Basic realm=\"meetings\""));
}

#[tokio::test]
async fn refuses_bad_credentials_with_invalid_client() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1]).await;
    let auth = stack.client::<AuthService>(&clock);
    for (id, sec) in [(client_id.as_str(), "wrong-secret"), ("unknown-client", secret.as_str())] {
        let reply = auth
            .post_form(TOKEN, &[("grant_type", "client_credentials"), ("client_id", id), ("client_secret", sec)])
            .send()
            .await;
        let body = reply.expect(401);
        assert_eq!(body["error"], "invalid_client");
        assert!(body["error_description"].as_str().unwrap().contains("invalid or inactive"));
        assert_eq!(reply.header("cache-control"), Some("no-store"));
    }
}

#[tokio::test]
async fn malformed_token_requests_are_clear_400s() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1]).await;
    let auth = stack.client::<AuthService>(&clock);
    type Case<'a> = (Vec<(&'a str, &'a str)>, &'a str, &'a str);
    let cases: Vec<Case> = vec![
        (vec![("client_id", &client_id), ("client_secret", &secret)], "invalid_request", "grant_type"),
        (
            vec![("grant_type", "password"), ("client_id", &client_id), ("client_secret", &secret)],
            "unsupported_grant_type",
            "password",
        ),
        (vec![("grant_type", "client_credentials"), ("client_secret", &secret)], "invalid_request", "client_id"),
        (vec![("grant_type", "client_credentials"), ("client_id", &client_id)], "invalid_request", "client_secret"),
        (
            vec![
                ("grant_type", "client_credentials"),
                ("grant_type", "client_credentials"),
                ("client_id", &client_id),
                ("client_secret", &secret),
            ],
            "invalid_request",
            "repeated",
        ),
        (
            vec![
                ("grant_type", "client_credentials"),
                ("client_id", &client_id),
                ("client_secret", &secret),
                ("scope", "meetings:write"),
            ],
            "invalid_scope",
            "meetings:read",
        ),
    ];
    for (form, error, mentions) in cases {
        let body = auth.post_form(TOKEN, &form).expect(400).await;
        assert_eq!(body["error"], error, "{form:?}");
        assert!(body["error_description"].as_str().unwrap().contains(mentions), "{body}");
    }

    // Wrong content type: JSON is not accepted.
    let reply = auth
        .send(
            request(Method::POST, TOKEN)
                .header("content-type", "application/json")
                .body(Body::Text(format!(
                    r#"{{"grant_type":"client_credentials","client_id":"{client_id}","client_secret":"{secret}"}}"#
                )))
                .unwrap(),
        )
        .await;
    let body = reply.expect(400);
    assert_eq!(body["error"], "invalid_request");
    assert!(body["error_description"].as_str().unwrap().contains("application/x-www-form-urlencoded"));

    // No content type and no body at all.
    let reply = auth.send(request(Method::POST, TOKEN).body(Body::Empty).unwrap()).await;
    assert_eq!(reply.expect(400)["error"], "invalid_request");

    // Other methods and paths.
    let reply = auth.send(request(Method::GET, TOKEN).body(Body::Empty).unwrap()).await;
    assert_eq!(reply.expect(405)["detail"], "Method \"GET\" not allowed.");
    assert_eq!(reply.header("allow"), Some("POST"));
    auth.send(request(Method::POST, "/api/auth/other/").body(Body::Empty).unwrap()).await.expect(404);
}

#[tokio::test]
async fn tokens_expire_after_the_configured_lifetime() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1]).await;
    let token = obtain_token(&stack.client::<AuthService>(&clock), &client_id, &secret).await;
    let meetings = stack.client::<MeetingsService>(&clock).with_token(&token);
    clock.advance(10799);
    meetings.get(LIST).expect(200).await;
    clock.advance(1);
    let reply = meetings.get(LIST).send().await;
    assert!(reply.expect(401)["detail"].as_str().unwrap().contains("invalid or inactive"));
    assert_eq!(reply.header("www-authenticate"), Some("Bearer error=\"invalid_token\""));
}

#[tokio::test]
async fn token_lifetime_is_configurable() {
    let stack = TestStack::new().await;
    let stack = stack.with_settings(&[("ACCESS_TOKEN_TTL_SECONDS", "60")]);
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1]).await;
    let auth = stack.client::<AuthService>(&clock);
    let reply = auth
        .post_form(
            TOKEN,
            &[("grant_type", "client_credentials"), ("client_id", &client_id), ("client_secret", &secret)],
        )
        .send()
        .await;
    let body = reply.expect(200);
    assert_eq!(body["expires_in"], 60);
    let token = body["access_token"].as_str().unwrap();
    clock.advance(60);
    stack.client::<MeetingsService>(&clock).with_token(token).get(LIST).expect(401).await;
}

#[tokio::test]
async fn revocation_follows_rfc_7009() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1]).await;
    let (other_id, other_secret) = stack.create_app(&[1]).await;
    let auth = stack.client::<AuthService>(&clock);
    let meetings = stack.client::<MeetingsService>(&clock);
    let token = obtain_token(&auth, &client_id, &secret).await;

    // Another client cannot revoke it: 200, and the token still works.
    let reply = auth
        .post_form(REVOKE, &[("client_id", &other_id), ("client_secret", &other_secret), ("token", &token)])
        .send()
        .await;
    reply.expect(200);
    assert_eq!(reply.text, "");
    meetings.with_token(&token).get(LIST).expect(200).await;

    // Its owner revokes it: 200 and the token stops working at once.
    let reply = auth
        .post_form(REVOKE, &[("client_id", &client_id), ("client_secret", &secret), ("token", &token)])
        .send()
        .await;
    reply.expect(200);
    assert_eq!(reply.header("cache-control"), Some("no-store"));
    meetings.with_token(&token).get(LIST).expect(401).await;

    // Revoking again, or an unknown token, is still 200.
    for unknown in [token.as_str(), "not-a-token"] {
        auth.post_form(REVOKE, &[("client_id", &client_id), ("client_secret", &secret), ("token", unknown)])
            .expect(200)
            .await;
    }

    // Bad client credentials and missing fields are errors.
    let body =
        auth.post_form(REVOKE, &[("client_id", &client_id), ("client_secret", "x"), ("token", "t")]).expect(401).await;
    assert_eq!(body["error"], "invalid_client");
    let body = auth.post_form(REVOKE, &[("client_id", &client_id), ("client_secret", &secret)]).expect(400).await;
    assert_eq!(body["error"], "invalid_request");
    assert!(body["error_description"].as_str().unwrap().contains("token"));
}

#[tokio::test]
async fn a_deactivated_application_loses_its_credentials_and_tokens_at_once() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1]).await;
    let auth = stack.client::<AuthService>(&clock);
    let meetings = stack.client::<MeetingsService>(&clock);
    let token = obtain_token(&auth, &client_id, &secret).await;
    meetings.with_token(&token).get(LIST).expect(200).await;

    let apps = stack.apps();
    let mut app = apps.get(&client_id).await.unwrap().unwrap();
    app.active = false;
    app.touch(chrono::Utc::now());
    apps.replace(&app).await.unwrap();

    meetings.with_token(&token).get(LIST).expect(401).await;
    let reply = auth
        .post_form(
            TOKEN,
            &[("grant_type", "client_credentials"), ("client_id", &client_id), ("client_secret", &secret)],
        )
        .send()
        .await;
    assert_eq!(reply.expect(401)["error"], "invalid_client");
}

#[tokio::test]
async fn meeting_requests_without_a_valid_bearer_token_are_401() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1]).await;
    let token = obtain_token(&stack.client::<AuthService>(&clock), &client_id, &secret).await;
    let meetings = stack.client::<MeetingsService>(&clock);
    let forged = format!("{client_id}.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA");
    for header in [
        None,
        Some("Bearer".to_owned()),
        Some("Bearer ".to_owned()),
        Some(format!("Basic {token}")),
        Some("Bearer garbage".to_owned()),
        Some(format!("Bearer {forged}")),
    ] {
        let mut builder = request(Method::GET, LIST);
        if let Some(header) = &header {
            builder = builder.header("authorization", header);
        }
        let reply = meetings.send(builder.body(Body::Empty).unwrap()).await;
        assert_eq!(reply.status, 401, "{header:?}");
        assert!(reply.json()["detail"].is_string());
        assert_eq!(reply.header("www-authenticate"), Some("Bearer error=\"invalid_token\""));
    }
    // Scheme is case-insensitive.
    let reply = meetings
        .send(request(Method::GET, LIST).header("authorization", format!("bearer {token}")).body(Body::Empty).unwrap())
        .await;
    reply.expect(200);
}

/// A function's AWS configuration is `aws_env::function_config`, from its environment only (the
/// tests elsewhere use the provider chains): configured that way, as in Lambda, the auth function
/// reads the pepper from Secrets Manager and the app from DynamoDB; without credentials its
/// calls fail (a token request is a 500 `server_error`), and nothing panics.
#[tokio::test]
async fn a_function_configured_from_its_environment_reaches_the_local_stack() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1]).await;
    let form = [("grant_type", "client_credentials"), ("client_id", client_id.as_str()), ("client_secret", &secret)];
    let auth_in = |credentials: bool| {
        let lambda = |name: &str| match name {
            "AWS_LAMBDA_FUNCTION_NAME" => Some("auth".to_owned()),
            "AWS_ACCESS_KEY_ID" | "AWS_SECRET_ACCESS_KEY" if !credentials => None,
            "AWS_REGION" | "AWS_ACCESS_KEY_ID" | "AWS_SECRET_ACCESS_KEY" => std::env::var(name).ok(),
            _ if name.starts_with("AWS_ENDPOINT_URL") => std::env::var(name).ok(),
            _ => stack.env.get(name).cloned(),
        };
        let aws = aws_env::Clients::new(aws_env::function_config(&lambda));
        TestClient::new(AuthService::from_settings(&aws, &lambda).expect("auth settings").with_clock(clock.clock()))
    };
    let body = auth_in(true).post_form(TOKEN, &form).expect(200).await;
    assert_eq!(body["token_type"], "Bearer");

    let body = auth_in(false).post_form(TOKEN, &form).expect(500).await;
    assert_eq!(body["error"], "server_error", "{body}");
}

#[tokio::test]
async fn tokens_carry_the_scopes_asked_for_among_those_granted() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let auth = stack.client::<AuthService>(&clock);
    let (plain_id, plain_secret) = stack.create_app(&[1]).await;
    let (hooks_id, hooks_secret) = stack.create_app_with_scopes(&[1], &["webhooks:manage"]).await;
    let ask = |client_id: &str, secret: &str, scope: &str| {
        [
            ("grant_type", "client_credentials".to_owned()),
            ("client_id", client_id.to_owned()),
            ("client_secret", secret.to_owned()),
            ("scope", scope.to_owned()),
        ]
    };

    // A scope the application was not granted is invalid_scope (RFC 6749 §5.2).
    let form = ask(&plain_id, &plain_secret, "meetings:read webhooks:manage");
    let form: Vec<(&str, &str)> = form.iter().map(|(name, value)| (*name, value.as_str())).collect();
    let body = auth.post_form(TOKEN, &form).expect(400).await;
    assert_eq!(body["error"], "invalid_scope");
    assert!(body["error_description"].as_str().unwrap().contains("webhooks:manage"), "{body}");

    // Without scope, a token gets meetings:read only, even when more is granted.
    let default = obtain_token(&auth, &hooks_id, &hooks_secret).await;
    let meetings = stack.client::<MeetingsService>(&clock);
    meetings.with_token(&default).get(LIST).expect(200).await;

    // A token for webhooks only cannot read meetings: 403 insufficient_scope (RFC 6750 §3.1).
    let hooks_only = obtain_scoped_token(&auth, &hooks_id, &hooks_secret, "webhooks:manage").await;
    let reply = meetings.with_token(&hooks_only).get(LIST).send().await;
    let body = reply.expect(403);
    assert_eq!(body["detail"], "The access token lacks the meetings:read scope.");
    assert_eq!(reply.header("www-authenticate"), Some("Bearer error=\"insufficient_scope\", scope=\"meetings:read\""));

    // Both, in either order, come back in a fixed order.
    let both = obtain_scoped_token(&auth, &hooks_id, &hooks_secret, "meetings:read webhooks:manage").await;
    meetings.with_token(&both).get(LIST).expect(200).await;
    let form = ask(&hooks_id, &hooks_secret, "webhooks:manage meetings:read");
    let form: Vec<(&str, &str)> = form.iter().map(|(name, value)| (*name, value.as_str())).collect();
    assert_eq!(auth.post_form(TOKEN, &form).expect(200).await["scope"], "meetings:read webhooks:manage");
}
