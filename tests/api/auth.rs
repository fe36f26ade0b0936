//! `POST /api/auth/token/` and `POST /api/auth/revoke-token/`.

use base64::Engine as _;
use http::Method;
use http_api::Body;
use integration_tests::{TestClock, TestStack, get, obtain_token, post_form, request, send};

const TOKEN: &str = "/api/auth/token/";
const REVOKE: &str = "/api/auth/revoke-token/";
const LIST: &str = "/api/v1/external/meeting/";

#[tokio::test]
async fn issues_a_bearer_token_with_the_spec_fields_and_no_store() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1]).await;
    let reply = post_form(
        &stack.auth_service(&clock),
        TOKEN,
        &[("grant_type", "client_credentials"), ("client_id", &client_id), ("client_secret", &secret)],
    )
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
    let auth = stack.auth_service(&clock);
    let reply = send(
        &auth,
        request(Method::POST, TOKEN)
            .header("content-type", "application/x-www-form-urlencoded; charset=UTF-8")
            .header("authorization", format!("Basic {basic}"))
            .body(Body::Text("grant_type=client_credentials".into()))
            .unwrap(),
    )
    .await;
    let token = reply.expect(200)["access_token"].as_str().unwrap().to_owned();
    get(&stack.meetings_service(&clock), LIST, Some(&token)).await.expect(200);

    // Both methods at once is refused (RFC 6749 §2.3).
    let reply = send(
        &auth,
        request(Method::POST, TOKEN)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("authorization", format!("Basic {basic}"))
            .body(Body::Text(format!("grant_type=client_credentials&client_id={client_id}&client_secret={secret}")))
            .unwrap(),
    )
    .await;
    assert_eq!(reply.expect(400)["error"], "invalid_request");

    // A wrong secret through Basic is invalid_client with a Basic challenge.
    let wrong = base64::engine::general_purpose::STANDARD.encode(format!("{client_id}:nope"));
    let reply = send(
        &auth,
        request(Method::POST, TOKEN)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("authorization", format!("Basic {wrong}"))
            .body(Body::Text("grant_type=client_credentials".into()))
            .unwrap(),
    )
    .await;
    assert_eq!(reply.expect(401)["error"], "invalid_client");
    assert_eq!(reply.header("www-authenticate"), Some("Basic realm=\"meetings\""));
}

#[tokio::test]
async fn refuses_bad_credentials_with_invalid_client() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1]).await;
    let auth = stack.auth_service(&clock);
    for (id, sec) in [(client_id.as_str(), "wrong-secret"), ("unknown-client", secret.as_str())] {
        let reply =
            post_form(&auth, TOKEN, &[("grant_type", "client_credentials"), ("client_id", id), ("client_secret", sec)])
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
    let auth = stack.auth_service(&clock);
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
        let body = post_form(&auth, TOKEN, &form).await.expect(400);
        assert_eq!(body["error"], error, "{form:?}");
        assert!(body["error_description"].as_str().unwrap().contains(mentions), "{body}");
    }

    // Wrong content type: JSON is not accepted.
    let reply = send(
        &auth,
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
    let reply = send(&auth, request(Method::POST, TOKEN).body(Body::Empty).unwrap()).await;
    assert_eq!(reply.expect(400)["error"], "invalid_request");

    // Other methods and paths.
    let reply = send(&auth, request(Method::GET, TOKEN).body(Body::Empty).unwrap()).await;
    assert_eq!(reply.expect(405)["detail"], "Method \"GET\" not allowed.");
    assert_eq!(reply.header("allow"), Some("POST"));
    send(&auth, request(Method::POST, "/api/auth/other/").body(Body::Empty).unwrap()).await.expect(404);
}

#[tokio::test]
async fn tokens_expire_after_the_configured_lifetime() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1]).await;
    let token = obtain_token(&stack.auth_service(&clock), &client_id, &secret).await;
    let meetings = stack.meetings_service(&clock);
    clock.advance(10799);
    get(&meetings, LIST, Some(&token)).await.expect(200);
    clock.advance(1);
    let reply = get(&meetings, LIST, Some(&token)).await;
    assert!(reply.expect(401)["detail"].as_str().unwrap().contains("invalid or inactive"));
    assert_eq!(reply.header("www-authenticate"), Some("Bearer error=\"invalid_token\""));
}

#[tokio::test]
async fn token_lifetime_is_configurable() {
    let mut stack = TestStack::new().await;
    stack.env.insert("ACCESS_TOKEN_TTL_SECONDS".into(), "60".into());
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1]).await;
    let auth = stack.auth_service(&clock);
    let reply = post_form(
        &auth,
        TOKEN,
        &[("grant_type", "client_credentials"), ("client_id", &client_id), ("client_secret", &secret)],
    )
    .await;
    let body = reply.expect(200);
    assert_eq!(body["expires_in"], 60);
    let token = body["access_token"].as_str().unwrap();
    clock.advance(60);
    get(&stack.meetings_service(&clock), LIST, Some(token)).await.expect(401);
}

#[tokio::test]
async fn revocation_follows_rfc_7009() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1]).await;
    let (other_id, other_secret) = stack.create_app(&[1]).await;
    let auth = stack.auth_service(&clock);
    let meetings = stack.meetings_service(&clock);
    let token = obtain_token(&auth, &client_id, &secret).await;

    // Another client cannot revoke it: 200, and the token still works.
    let reply =
        post_form(&auth, REVOKE, &[("client_id", &other_id), ("client_secret", &other_secret), ("token", &token)])
            .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.text, "");
    get(&meetings, LIST, Some(&token)).await.expect(200);

    // Its owner revokes it: 200 and the token stops working at once.
    let reply =
        post_form(&auth, REVOKE, &[("client_id", &client_id), ("client_secret", &secret), ("token", &token)]).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("cache-control"), Some("no-store"));
    get(&meetings, LIST, Some(&token)).await.expect(401);

    // Revoking again, or an unknown token, is still 200.
    for unknown in [token.as_str(), "not-a-token"] {
        let reply =
            post_form(&auth, REVOKE, &[("client_id", &client_id), ("client_secret", &secret), ("token", unknown)])
                .await;
        assert_eq!(reply.status, 200);
    }

    // Bad client credentials and missing fields are errors.
    let body = post_form(&auth, REVOKE, &[("client_id", &client_id), ("client_secret", "x"), ("token", "t")])
        .await
        .expect(401);
    assert_eq!(body["error"], "invalid_client");
    let body = post_form(&auth, REVOKE, &[("client_id", &client_id), ("client_secret", &secret)]).await.expect(400);
    assert_eq!(body["error"], "invalid_request");
    assert!(body["error_description"].as_str().unwrap().contains("token"));
}

#[tokio::test]
async fn a_deactivated_application_loses_its_credentials_and_tokens_at_once() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1]).await;
    let auth = stack.auth_service(&clock);
    let meetings = stack.meetings_service(&clock);
    let token = obtain_token(&auth, &client_id, &secret).await;
    get(&meetings, LIST, Some(&token)).await.expect(200);

    let apps = stack.apps();
    let mut app = apps.get(&client_id).await.unwrap().unwrap();
    app.active = false;
    app.touch(chrono::Utc::now());
    apps.replace(&app).await.unwrap();

    get(&meetings, LIST, Some(&token)).await.expect(401);
    let reply = post_form(
        &auth,
        TOKEN,
        &[("grant_type", "client_credentials"), ("client_id", &client_id), ("client_secret", &secret)],
    )
    .await;
    assert_eq!(reply.expect(401)["error"], "invalid_client");
}

#[tokio::test]
async fn meeting_requests_without_a_valid_bearer_token_are_401() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1]).await;
    let token = obtain_token(&stack.auth_service(&clock), &client_id, &secret).await;
    let meetings = stack.meetings_service(&clock);
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
        let reply = send(&meetings, builder.body(Body::Empty).unwrap()).await;
        assert_eq!(reply.status, 401, "{header:?}");
        assert!(reply.json()["detail"].is_string());
        assert_eq!(reply.header("www-authenticate"), Some("Bearer error=\"invalid_token\""));
    }
    // Scheme is case-insensitive.
    let reply = send(
        &meetings,
        request(Method::GET, LIST).header("authorization", format!("bearer {token}")).body(Body::Empty).unwrap(),
    )
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
            _ => stack.lookup(name),
        };
        let aws = aws_env::Clients::new(aws_env::function_config(&lambda));
        meeting_api::AuthService::from_settings(&aws, &lambda).expect("auth settings").with_clock(clock.clock())
    };
    let body = post_form(&auth_in(true), TOKEN, &form).await.expect(200);
    assert_eq!(body["token_type"], "Bearer");

    let body = post_form(&auth_in(false), TOKEN, &form).await.expect(500);
    assert_eq!(body["error"], "server_error", "{body}");
}
