//! Operator actions: import and external application management.

use chrono::Utc;
use integration_tests::{TestClock, TestStack, demo_fixture, meeting, obtain_scoped_token, obtain_token};
use meeting_api::{AuthService, MeetingsService};
use meeting_data::administration::{self, AdminError};
use meeting_data::import::{self, ImportError};
use serde_json::json;

#[tokio::test]
async fn an_invalid_document_names_the_field_and_writes_nothing() {
    let stack = TestStack::new().await;
    let mut document = demo_fixture();
    document["meetings"][2]["host_id"] = json!(99);
    let json = serde_json::to_vec(&document).unwrap();
    let fixtures = Some(std::path::Path::new(integration_tests::FIXTURES_DIR));
    let Err(ImportError::Invalid(errors)) = import::prepare(&stack.directory(), &json, fixtures, Utc::now()).await
    else {
        panic!("expected the document to be refused")
    };
    assert_eq!(errors, ["meetings[2].host_id: unknown user 99"]);

    let bad_type =
        br#"{"organizations": [{"id": 1, "name": "A"}], "meetings": [{"id": 5, "start_time": "not a date"}]}"#;
    let Err(ImportError::Invalid(errors)) = import::prepare(&stack.directory(), bad_type, None, Utc::now()).await
    else {
        panic!("expected a type error")
    };
    assert!(errors[0].starts_with("meetings[0]"), "{errors:?}");

    // Nothing of either document was written.
    assert!(stack.directory().organizations(&[1, 2]).await.unwrap().is_empty());
    assert!(stack.meetings().get(1001).await.unwrap().is_none());
}

#[tokio::test]
async fn import_is_an_upsert_and_resolves_stored_users() {
    let stack = TestStack::new().await;
    stack.import(&demo_fixture()).await;
    stack.import(&demo_fixture()).await;
    // A later document may refer to users stored earlier.
    stack.import(&json!({"meetings": [meeting(1001, 1, 12, json!({"title": "Renamed"}))]})).await;
    let stored = stack.meetings().get(1001).await.unwrap().unwrap();
    assert_eq!(stored.title, "Renamed");
    assert_eq!(stored.host.name, "Ben Okafor");
}

#[tokio::test]
async fn app_lifecycle_create_link_unlink_deactivate_list() {
    let stack = TestStack::new().await;
    stack.import(&demo_fixture()).await;
    let clock = TestClock::new();
    let (apps, directory) = (stack.apps(), stack.directory());
    let pepper_source = stack.pepper();
    let pepper = pepper_source.get().await.unwrap();
    let now = Utc::now();

    let issued = administration::create_app(&apps, &directory, pepper, "Acme", &[1, 1], &[], now).await.unwrap();
    let token = obtain_token(&stack.client::<AuthService>(&clock), &issued.client_id, &issued.client_secret).await;
    let meetings = stack.client::<MeetingsService>(&clock).with_token(&token);
    let ids = |body: serde_json::Value| {
        body["results"].as_array().unwrap().iter().map(|m| m["id"].as_i64().unwrap()).collect::<Vec<_>>()
    };
    let list = "/api/v1/external/meeting/";
    assert_eq!(ids(meetings.get(list).expect(200).await), [1002, 1001]);

    let linked = administration::link_organization(&apps, &directory, &issued.client_id, 2, now).await.unwrap();
    assert_eq!(linked.organization_ids, [1, 2]);
    assert_eq!(ids(meetings.get(list).expect(200).await), [2001, 1002, 1001]);

    administration::unlink_organization(&apps, &issued.client_id, 1, now).await.unwrap();
    assert_eq!(ids(meetings.get(list).expect(200).await), [2001]);
    meetings.get("/api/v1/external/meeting/1001/").expect(404).await;

    let listed = administration::list_apps(&apps).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].active);
    let listed_json = serde_json::to_string(&listed).unwrap();
    assert!(!listed_json.contains("secret"), "{listed_json}");

    // Scopes: granted, asked for, and taken away again (the token loses it at once).
    assert_eq!(listed[0].scopes, ["meetings:read"]);
    let granted = administration::grant_scopes(&apps, &issued.client_id, &["webhooks:manage"], now).await.unwrap();
    assert_eq!(granted.scopes, ["meetings:read", "webhooks:manage"]);
    let auth = stack.client::<AuthService>(&clock);
    obtain_scoped_token(&auth, &issued.client_id, &issued.client_secret, "webhooks:manage").await;
    let revoked = administration::revoke_scopes(&apps, &issued.client_id, &["webhooks:manage"], now).await.unwrap();
    assert_eq!(revoked.scopes, ["meetings:read"]);
    let form = [
        ("grant_type", "client_credentials"),
        ("client_id", issued.client_id.as_str()),
        ("client_secret", issued.client_secret.as_str()),
        ("scope", "webhooks:manage"),
    ];
    assert_eq!(auth.post_form("/api/auth/token/", &form).expect(400).await["error"], "invalid_scope");

    administration::deactivate_app(&apps, &issued.client_id, now).await.unwrap();
    meetings.get(list).expect(401).await;
    assert!(!administration::list_apps(&apps).await.unwrap()[0].active);
}

#[tokio::test]
async fn app_commands_refuse_unknown_organizations_and_applications() {
    let stack = TestStack::new().await;
    stack.import(&demo_fixture()).await;
    let (apps, directory) = (stack.apps(), stack.directory());
    let pepper_source = stack.pepper();
    let pepper = pepper_source.get().await.unwrap();
    let now = Utc::now();
    let err = administration::create_app(&apps, &directory, pepper, "X", &[1, 42], &[], now).await.unwrap_err();
    assert!(matches!(err, AdminError::UnknownOrganizations(ref ids) if ids == &[42]), "{err}");
    assert!(matches!(
        administration::create_app(&apps, &directory, pepper, " ", &[1], &[], now).await,
        Err(AdminError::Invalid(_))
    ));
    assert!(matches!(
        administration::create_app(&apps, &directory, pepper, "X", &[], &[], now).await,
        Err(AdminError::Invalid(_))
    ));
    assert!(administration::list_apps(&apps).await.unwrap().is_empty());

    assert!(matches!(
        administration::create_app(&apps, &directory, pepper, "X", &[1], &["meetings:write"], now).await,
        Err(AdminError::Invalid(ref message)) if message.contains("meetings:write")
    ));
    let issued = administration::create_app(&apps, &directory, pepper, "X", &[1], &[], now).await.unwrap();
    assert!(matches!(
        administration::revoke_scopes(&apps, &issued.client_id, &["meetings:read"], now).await,
        Err(AdminError::Invalid(_))
    ));
    assert!(matches!(
        administration::grant_scopes(&apps, "nope", &["webhooks:manage"], now).await,
        Err(AdminError::UnknownApplication(_))
    ));
    assert!(matches!(administration::deactivate_app(&apps, "nope", now).await, Err(AdminError::UnknownApplication(_))));
    assert!(matches!(
        administration::link_organization(&apps, &directory, &issued.client_id, 42, now).await,
        Err(AdminError::UnknownOrganizations(_))
    ));
    assert!(matches!(
        administration::unlink_organization(&apps, &issued.client_id, 2, now).await,
        Err(AdminError::Invalid(_))
    ));
}
