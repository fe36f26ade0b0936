//! `GET /api/v1/external/meeting/`: multi-organization rules, filters, ordering, pagination.

use integration_tests::{TestClient, TestClock, TestStack, demo_calendar_event, demo_fixture, meeting, obtain_token};
use meeting_api::{AuthService, MeetingsService};
use serde_json::{Value, json};

const LIST: &str = "/api/v1/external/meeting/";
const URL: &str = "https://api.test/api/v1/external/meeting/";

async fn token_for(stack: &TestStack, clock: &TestClock, organizations: &[i64]) -> String {
    let (client_id, secret) = stack.create_app(organizations).await;
    obtain_token(&stack.client::<AuthService>(clock), &client_id, &secret).await
}

fn ids(body: &Value) -> Vec<i64> {
    body["results"].as_array().unwrap().iter().map(|m| m["id"].as_i64().unwrap()).collect()
}

async fn list(service: &TestClient, token: &str, query: &str) -> Value {
    service.with_token(token).get(&format!("{LIST}{query}")).expect(200).await
}

#[tokio::test]
async fn lists_all_accessible_organizations_newest_first_with_list_fields() {
    let stack = TestStack::new().await;
    stack.import(&demo_fixture()).await;
    let clock = TestClock::new();
    let token = token_for(&stack, &clock, &[1, 2]).await;
    let meetings = stack.client::<MeetingsService>(&clock);
    let body = list(&meetings, &token, "").await;
    assert_eq!(body["count"], 3);
    assert_eq!(body["next"], Value::Null);
    assert_eq!(body["previous"], Value::Null);
    assert_eq!(ids(&body), vec![2001, 1002, 1001]);
    assert_eq!(
        body["results"][2],
        json!({
            "id": 1001,
            "title": "Weekly product sync",
            "start_time": "2026-11-02T09:00:00Z",
            "end_time": "2026-11-02T09:45:30Z",
            "created_at": "2026-10-30T15:12:00Z",
            "status": "past",
            "summary_complete": true,
            "host_name": "Ada Moreno",
            "calendar_event": demo_calendar_event()
        })
    );
    assert_eq!(body["results"][0]["status"], "upcoming");
    assert_eq!(body["results"][0]["calendar_event"], Value::Null);
    assert_eq!(body.as_object().unwrap().keys().collect::<Vec<_>>(), ["count", "next", "previous", "results"]);
}

#[tokio::test]
async fn organization_id_selects_one_organization_or_is_a_400() {
    let stack = TestStack::new().await;
    stack.import(&demo_fixture()).await;
    let clock = TestClock::new();
    let token = token_for(&stack, &clock, &[1, 2]).await;
    let meetings = stack.client::<MeetingsService>(&clock).with_token(&token);
    assert_eq!(ids(&list(&meetings, &token, "?organization_id=1").await), vec![1002, 1001]);
    assert_eq!(ids(&list(&meetings, &token, "?organization_id=2").await), vec![2001]);
    // Empty means absent.
    assert_eq!(ids(&list(&meetings, &token, "?organization_id=").await), vec![2001, 1002, 1001]);

    for bad in ["abc", "1.5", "1,2"] {
        let body = meetings.get(&format!("{LIST}?organization_id={bad}")).expect(400).await;
        assert_eq!(body, json!({"organization_id": "Invalid organization_id format. Must be an integer."}), "{bad}");
    }
    for inaccessible in ["3", "999", "-1"] {
        let body = meetings.get(&format!("{LIST}?organization_id={inaccessible}")).expect(400).await;
        assert_eq!(body, json!({"organization_id": "Organization not accessible to this external application."}));
    }
}

#[tokio::test]
async fn overlapping_applications_each_see_only_their_organizations() {
    let stack = TestStack::new().await;
    stack
        .import(&json!({
            "organizations": [{"id": 1, "name": "A"}, {"id": 2, "name": "B"}, {"id": 3, "name": "C"}],
            "users": [
                {"id": 10, "organization_id": 1, "name": "A1", "email": "a1@a.test"},
                {"id": 20, "organization_id": 2, "name": "B1", "email": "b1@b.test"},
                {"id": 30, "organization_id": 3, "name": "C1", "email": "c1@c.test"}
            ],
            "meetings": [meeting(100, 1, 10, json!({})), meeting(200, 2, 20, json!({})), meeting(300, 3, 30, json!({}))]
        }))
        .await;
    let clock = TestClock::new();
    let first = token_for(&stack, &clock, &[1, 2]).await;
    let second = token_for(&stack, &clock, &[2, 3]).await;
    let single = token_for(&stack, &clock, &[3]).await;
    let meetings = stack.client::<MeetingsService>(&clock);
    assert_eq!(ids(&list(&meetings, &first, "").await), vec![200, 100]);
    assert_eq!(ids(&list(&meetings, &second, "").await), vec![300, 200]);
    // Rule 4: a single-organization integration needs no organization_id.
    assert_eq!(ids(&list(&meetings, &single, "").await), vec![300]);
    assert_eq!(ids(&list(&meetings, &single, "?organization_id=3").await), vec![300]);
    meetings.with_token(&second).get(&format!("{LIST}?organization_id=1")).expect(400).await;
    meetings.with_token(&second).get("/api/v1/external/meeting/100/").expect(404).await;
    meetings.with_token(&second).get("/api/v1/external/meeting/200/").expect(200).await;
}

/// Organization 5 with six meetings that differ in every filtered field.
async fn filter_fixture() -> (TestStack, TestClient, String) {
    let stack = TestStack::new().await;
    let calendar = json!({"event_id": "e", "summary": "s", "attendees": [], "start_time": "2026-01-01T10:00:00Z", "end_time": "2026-01-01T11:00:00Z"});
    stack
        .import(&json!({
            "organizations": [{"id": 5, "name": "Filters"}],
            "users": [
                {"id": 51, "organization_id": 5, "name": "U1", "email": "u1@f.test"},
                {"id": 52, "organization_id": 5, "name": "U2", "email": "u2@f.test"},
                {"id": 53, "organization_id": 5, "name": "U3", "email": "u3@f.test"}
            ],
            "meetings": [
                meeting(1, 5, 51, json!({"title": "Weekly SYNC", "start_time": "2026-03-01T10:00:00Z", "created_at": "2026-02-01T00:00:00Z",
                    "updated_at": "2026-02-01T00:00:00Z", "summary_complete": true, "participants": [{"user_id": 51}]})),
                meeting(2, 5, 52, json!({"title": "Design review", "start_time": "2026-03-02T10:00:00Z", "created_at": "2026-02-02T23:59:59Z",
                    "updated_at": "2026-02-10T00:00:00Z", "calendar_event": calendar, "participants": [{"user_id": 52}, {"name": "Guest"}]})),
                meeting(3, 5, 53, json!({"title": "sync with partners", "start_time": "2026-03-03T10:00:00Z", "created_at": "2026-02-03T00:00:00Z",
                    "updated_at": "2026-02-20T12:00:00Z", "summary_complete": true, "calendar_event": calendar,
                    "participants": [{"user_id": 53}, {"user_id": 51}]})),
                meeting(4, 5, 51, json!({"title": "Retro", "start_time": "2026-03-04T10:00:00Z", "created_at": "2026-02-04T00:00:00Z",
                    "updated_at": "2026-02-01T00:00:00Z", "participants": []})),
                // Same start time as 6: the higher id comes first.
                meeting(5, 5, 52, json!({"title": "Planning", "start_time": "2026-03-05T10:00:00Z", "created_at": "2026-02-05T00:00:00Z",
                    "updated_at": "2026-02-01T00:00:00Z", "participants": [{"user_id": 52}]})),
                meeting(6, 5, 52, json!({"title": "Planning 2", "start_time": "2026-03-05T10:00:00Z", "created_at": "2026-02-05T00:00:00Z",
                    "updated_at": "2026-02-01T00:00:00Z", "participants": [{"user_id": 52}]}))
            ]
        }))
        .await;
    let clock = TestClock::new();
    let token = token_for(&stack, &clock, &[5]).await;
    let service = stack.client::<MeetingsService>(&clock);
    (stack, service, token)
}

#[tokio::test]
async fn each_filter_alone() {
    let (_stack, meetings, token) = filter_fixture().await;
    let cases: &[(&str, &[i64])] = &[
        ("", &[6, 5, 4, 3, 2, 1]),
        ("?title=sync", &[3, 1]),
        ("?title=SYNC", &[3, 1]),
        ("?title=planning%202", &[6]),
        ("?title=", &[6, 5, 4, 3, 2, 1]),
        ("?participants=51", &[3, 1]),
        ("?participants=53,52", &[6, 5, 3, 2]),
        ("?participants=99", &[]),
        ("?created_after=2026-02-03", &[6, 5, 4, 3]),
        ("?created_before=2026-02-02", &[2, 1]),
        ("?created_after=2026-02-02&created_before=2026-02-02", &[2]),
        // An empty range is an empty page (DynamoDB refuses a reversed BETWEEN: it was a 500).
        ("?created_after=2026-02-03&created_before=2026-02-02", &[]),
        ("?created_after=2026-02-01&created_before=2026-01-01", &[]),
        ("?summary_complete=true", &[3, 1]),
        ("?summary_complete=false", &[6, 5, 4, 2]),
        ("?from_calendar=true", &[3, 2]),
        ("?from_calendar=false", &[6, 5, 4, 1]),
        ("?updated_after=2026-02-10", &[3, 2]),
        ("?updated_after=2026-02-20T12:00:00Z", &[3]),
        ("?updated_after=2026-02-20T12:00:01Z", &[]),
        ("?updated_after=2999-12-31T23:59:59Z", &[]),
        ("?created_after=2999-12-31", &[]),
        ("?created_before=0001-01-01", &[]),
        ("?created_before=9999-12-31", &[6, 5, 4, 3, 2, 1]),
    ];
    for (query, expected) in cases {
        let body = list(&meetings, &token, query).await;
        assert_eq!(ids(&body), *expected, "{query}");
        assert_eq!(body["count"], expected.len(), "{query}");
    }
}

#[tokio::test]
async fn filters_combine() {
    let (_stack, meetings, token) = filter_fixture().await;
    let cases: &[(&str, &[i64])] = &[
        ("?title=sync&summary_complete=true&from_calendar=true", &[3]),
        ("?participants=51,52&created_after=2026-02-02&summary_complete=false", &[6, 5, 2]),
        ("?title=planning&participants=52&organization_id=5", &[6, 5]),
        ("?from_calendar=false&created_before=2026-02-04&updated_after=2026-01-01", &[4, 1]),
    ];
    for (query, expected) in cases {
        assert_eq!(ids(&list(&meetings, &token, query).await), *expected, "{query}");
    }
}

#[tokio::test]
async fn invalid_filter_values_are_400s_keyed_by_parameter() {
    let (_stack, meetings, token) = filter_fixture().await;
    let cases = [
        ("?created_after=2026-02-30", json!({"created_after": ["Enter a valid date."]})),
        ("?created_before=yesterday", json!({"created_before": ["Enter a valid date."]})),
        // Years Python's dates do not hold (chrono reads them; their keys would not sort as times).
        ("?created_after=%2B20000-01-01", json!({"created_after": ["Enter a valid date."]})),
        ("?created_before=0000-01-01", json!({"created_before": ["Enter a valid date."]})),
        ("?updated_after=%2B20000-01-01", json!({"updated_after": ["Enter a valid date/time."]})),
        ("?updated_after=9999-12-31T23:00:00-05:00", json!({"updated_after": ["Enter a valid date/time."]})),
        ("?summary_complete=yes", json!({"summary_complete": ["Must be a valid boolean."]})),
        ("?from_calendar=2", json!({"from_calendar": ["Must be a valid boolean."]})),
        ("?participants=1,two", json!({"participants": ["Enter a comma-separated list of integer user ids."]})),
        ("?updated_after=soon", json!({"updated_after": ["Enter a valid date/time."]})),
        (
            "?created_after=x&from_calendar=x",
            json!({"created_after": ["Enter a valid date."], "from_calendar": ["Must be a valid boolean."]}),
        ),
    ];
    for (query, expected) in cases {
        assert_eq!(meetings.with_token(&token).get(&format!("{LIST}{query}")).expect(400).await, expected, "{query}");
    }
}

#[tokio::test]
async fn pagination_follows_drf_page_number_pagination() {
    let stack = TestStack::new().await;
    let meetings_json: Vec<Value> =
        (1..=25).map(|id| meeting(id, 8, 80, json!({"start_time": format!("2026-04-{:02}T10:00:00Z", id)}))).collect();
    stack
        .import(&json!({
            "organizations": [{"id": 8, "name": "Pages"}],
            "users": [{"id": 80, "organization_id": 8, "name": "P", "email": "p@p.test"}],
            "meetings": meetings_json
        }))
        .await;
    let clock = TestClock::new();
    let token = token_for(&stack, &clock, &[8]).await;
    let meetings = stack.client::<MeetingsService>(&clock).with_token(&token);

    let first = list(&meetings, &token, "").await;
    assert_eq!(first["count"], 25);
    assert_eq!(ids(&first), (16..=25).rev().collect::<Vec<_>>());
    assert_eq!(first["next"], format!("{URL}?page=2"));
    assert_eq!(first["previous"], Value::Null);

    // Other parameters are kept, keys sorted, page replaced; page 1 drops `page`.
    let second = list(&meetings, &token, "?title=meeting&size=10&page=2").await;
    assert_eq!(ids(&second), (6..=15).rev().collect::<Vec<_>>());
    assert_eq!(second["next"], format!("{URL}?page=3&size=10&title=meeting"));
    assert_eq!(second["previous"], format!("{URL}?size=10&title=meeting"));

    let last = list(&meetings, &token, "?page=3").await;
    assert_eq!(ids(&last), (1..=5).rev().collect::<Vec<_>>());
    assert_eq!(last["next"], Value::Null);
    assert_eq!(last["previous"], format!("{URL}?page=2"));
    assert_eq!(ids(&list(&meetings, &token, "?page=last").await), ids(&last));

    let small = list(&meetings, &token, "?size=7&page=4").await;
    assert_eq!(ids(&small), vec![4, 3, 2, 1]);
    assert_eq!(small["previous"], format!("{URL}?page=3&size=7"));

    // Over the maximum is cut to 100; a size that is not a positive integer is the default.
    assert_eq!(ids(&list(&meetings, &token, "?size=1000").await).len(), 25);
    assert_eq!(ids(&list(&meetings, &token, "?size=0").await).len(), 10);
    assert_eq!(ids(&list(&meetings, &token, "?size=abc").await).len(), 10);

    for page in ["4", "0", "-1", "abc", "1.0"] {
        let body = meetings.get(&format!("{LIST}?page={page}")).expect(404).await;
        assert_eq!(body, json!({"detail": "Invalid page."}), "page={page}");
    }
}

#[tokio::test]
async fn an_empty_list_has_one_empty_page() {
    let stack = TestStack::new().await;
    stack.import(&json!({"organizations": [{"id": 9, "name": "Empty"}]})).await;
    let clock = TestClock::new();
    let token = token_for(&stack, &clock, &[9]).await;
    let meetings = stack.client::<MeetingsService>(&clock).with_token(&token);
    assert_eq!(list(&meetings, &token, "").await, json!({"count": 0, "next": null, "previous": null, "results": []}));
    meetings.get(&format!("{LIST}?page=2")).expect(404).await;
}

/// `count` meetings of `organization` hosted by `host`, at distinct start times (some equal, to
/// exercise the id tie-break).
fn bulk(first_id: i64, count: i64, organization: i64, host: i64) -> Vec<Value> {
    (0..count)
        .map(|i| {
            let start = format!("2025-{:02}-{:02}T{:02}:00:00Z", 1 + i % 12, 1 + (i / 12) % 28, (i * 7) % 24);
            meeting(first_id + i, organization, host, json!({"start_time": start, "end_time": start}))
        })
        .collect()
}

#[tokio::test]
async fn an_unfiltered_page_reads_only_as_deep_as_the_page_and_matches_the_full_read() {
    let stack = TestStack::new().await;
    stack.import(&demo_fixture()).await;
    stack.import(&json!({"meetings": bulk(10_000, 150, 1, 11)})).await;
    stack.import(&json!({"meetings": bulk(20_000, 40, 2, 21)})).await;
    let clock = TestClock::new();
    let token = token_for(&stack, &clock, &[1, 2]).await;
    let meetings = stack.client::<MeetingsService>(&clock).with_token(&token);
    for query in ["?size=10", "?size=10&page=3", "?size=7&page=28", "?size=100&page=2", "?page=last&size=25"] {
        stack.calls.reset();
        let unfiltered = list(&meetings, &token, query).await;
        let limits = stack.calls.query_limits();
        // A filter every meeting passes takes the full read: the same page.
        let filtered = list(&meetings, &token, &format!("{query}&created_after=2000-01-01")).await;
        assert_eq!(unfiltered["count"], 193, "{query}");
        assert_eq!(ids(&unfiltered), ids(&filtered), "{query}");
        assert!(!limits.is_empty() && limits.iter().all(Option::is_some), "{query}: {limits:?}");
        let page: usize = query.split("page=").nth(1).and_then(|p| p.split('&').next()?.parse().ok()).unwrap_or(1);
        let size: usize = query.split("size=").nth(1).and_then(|s| s.split('&').next()?.parse().ok()).unwrap_or(10);
        if !query.contains("last") {
            // Each organization is read to the page's depth, never past it.
            let depth = (page * size).min(193) as u64;
            assert!(limits.iter().all(|limit| limit.is_some_and(|limit| limit <= depth)), "{query}: {limits:?}");
        }
    }
    stack.calls.reset();
    list(&meetings, &token, "?size=10").await;
    assert_eq!(stack.calls.query_limits(), [Some(10), Some(10)], "page 1 of 10 reads 10 entries per organization");
    let past_the_end = meetings.get(&format!("{LIST}?size=10&page=21")).send().await;
    assert_eq!(past_the_end.expect(404), json!({"detail": "Invalid page."}));
}

#[tokio::test]
async fn counts_follow_reimports_and_moves_and_uncounted_organizations_are_read_whole() {
    let stack = TestStack::new().await;
    stack.import(&demo_fixture()).await;
    stack.import(&json!({"meetings": bulk(10_000, 12, 1, 11)})).await;
    // The same meetings again: no meeting is counted twice.
    stack.import(&json!({"meetings": bulk(10_000, 12, 1, 11)})).await;
    let clock = TestClock::new();
    let token = token_for(&stack, &clock, &[1, 2]).await;
    let meetings = stack.client::<MeetingsService>(&clock);
    assert_eq!(list(&meetings, &token, "?organization_id=1").await["count"], 14);
    assert_eq!(list(&meetings, &token, "?organization_id=2").await["count"], 1);
    // One meeting moves to organization 2: both counts follow.
    stack.import(&json!({"meetings": [meeting(10_000, 2, 21, json!({}))]})).await;
    assert_eq!(list(&meetings, &token, "?organization_id=1").await["count"], 13);
    assert_eq!(list(&meetings, &token, "?organization_id=2").await["count"], 2);
    let counts = stack.meetings().counts(&[1, 2]).await.unwrap();
    let meetings_of = |org: i64| counts.get(&org).map(|count| count.meetings);
    assert_eq!((meetings_of(1), meetings_of(2)), (Some(13), Some(2)));
    assert!(counts.values().all(|count| count.filter_indexes), "created by this version: in the filter indexes");
    // An organization whose meetings predate counts (no count item) is read whole, correctly;
    // `admin recount` (MeetingStore::recount) writes its count.
    stack
        .dynamodb
        .delete_item()
        .table_name(stack.setting("MEETINGS_TABLE"))
        .key("pk", aws_sdk_dynamodb::types::AttributeValue::S("ORG#1".into()))
        .key("sk", aws_sdk_dynamodb::types::AttributeValue::S("MEETING_COUNT".into()))
        .send()
        .await
        .unwrap();
    let body = list(&meetings, &token, "?size=5").await;
    assert_eq!(body["count"], 15);
    assert_eq!(ids(&body).len(), 5);
    assert_eq!(stack.meetings().recount(1).await.unwrap(), 13);
    assert_eq!(list(&meetings, &token, "?size=5").await["count"], 15);
}
