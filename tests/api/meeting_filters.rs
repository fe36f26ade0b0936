//! A filtered meeting list reads what its most selective filter matches (the filter indexes of
//! `MeetingsTable`), and answers exactly what reading the whole organization index answers.

use integration_tests::{TestClient, TestClock, TestStack, meeting, obtain_token};
use meeting_api::{AuthService, MeetingsService};
use meeting_data::listing::MeetingFilter;
use serde_json::{Value, json};

const LIST: &str = "/api/v1/external/meeting/";

/// `count` meetings of `organization` from id `first`, their fields spread so that every filter
/// matches some: a start and a creation day each, `updated_at` on the hour of its index, every
/// third from a calendar, every other summarized, participants among the organization's users
/// (100–104 in organization 1, 1100–1104 in 2).
fn varied(first: i64, count: i64, organization: i64) -> Vec<Value> {
    let user = move |k: i64| 100 + (organization - 1) * 1000 + k % 5;
    (0..count)
        .map(|i| {
            let id = first + i;
            let day = |offset: i64| format!("2026-{:02}-{:02}", 1 + (i + offset) % 12, 1 + (i * 5 + offset) % 28);
            let calendar = (i % 3 == 0).then(|| {
                json!({"event_id": format!("cal-{id}"), "summary": "From the calendar", "organizer_email": "a@example.test",
                    "attendees": [], "meeting_link": null,
                    "start_time": format!("{}T08:00:00Z", day(0)), "end_time": format!("{}T09:00:00Z", day(0))})
            });
            meeting(
                id,
                organization,
                user(i),
                json!({
                    "title": if i % 4 == 0 { format!("Weekly sync {id}") } else { format!("Review {id}") },
                    "start_time": format!("{}T{:02}:00:00Z", day(0), i % 24),
                    "created_at": format!("{}T{:02}:30:00Z", day(3), (i * 7) % 24),
                    "updated_at": format!("2026-11-{:02}T{:02}:00:00Z", 1 + i % 25, i % 24),
                    "summary_complete": i % 2 == 0,
                    "calendar_event": calendar,
                    "participants": [{"user_id": user(i)}, {"user_id": user(i + 2)}],
                }),
            )
        })
        .collect()
}

/// Organizations 1 and 2, each with users 100–104 (their meetings' hosts and participants).
fn directory() -> Value {
    let users: Vec<Value> = [1, 2]
        .into_iter()
        .flat_map(|organization| {
            (100..105).map(move |id| {
                json!({"id": id + (organization - 1) * 1000, "organization_id": organization, "name": format!("User {id}"),
                    "email": format!("u{id}-{organization}@example.test"), "position": "", "department": ""})
            })
        })
        .collect();
    json!({"organizations": [{"id": 1, "name": "One"}, {"id": 2, "name": "Two"}], "users": users, "meetings": []})
}

async fn token_for(stack: &TestStack, clock: &TestClock, organizations: &[i64]) -> String {
    let (client_id, secret) = stack.create_app(organizations).await;
    obtain_token(&stack.client::<AuthService>(clock), &client_id, &secret).await
}

fn ids(body: &Value) -> Vec<i64> {
    body["results"].as_array().unwrap().iter().map(|m| m["id"].as_i64().unwrap()).collect()
}

/// The entries each Query since the last reset read (its `ScannedCount`), in order.
fn scanned_counts(stack: &TestStack) -> Vec<u64> {
    let exchanges = stack.calls.exchanges();
    let queries = exchanges.iter().filter(|exchange| exchange.operation == "Query");
    queries.map(|exchange| exchange.response["ScannedCount"].as_u64().unwrap_or(0)).collect()
}

async fn list(service: &TestClient, query: &str) -> Value {
    service.get(&format!("{LIST}{query}")).expect(200).await
}

#[tokio::test]
async fn every_filter_answers_as_the_whole_index_does_and_reads_only_what_it_matches() {
    let stack = TestStack::new().await;
    stack.import(&directory()).await;
    stack.import(&json!({"meetings": varied(1_000, 240, 1)})).await;
    stack.import(&json!({"meetings": varied(5_000, 60, 2)})).await;
    let store = stack.meetings();
    let filters: Vec<(&str, MeetingFilter)> = vec![
        (
            "updated_after",
            MeetingFilter { updated_after: Some("2026-11-24T00:00:00Z".parse().unwrap()), ..Default::default() },
        ),
        (
            "created range",
            MeetingFilter {
                created_after: Some("2026-03-01".parse().unwrap()),
                created_before: Some("2026-04-15".parse().unwrap()),
                ..Default::default()
            },
        ),
        ("created_after", MeetingFilter { created_after: Some("2026-11-01".parse().unwrap()), ..Default::default() }),
        ("created_before", MeetingFilter { created_before: Some("2026-02-10".parse().unwrap()), ..Default::default() }),
        ("participants", MeetingFilter { participants: Some(vec![101, 103, 1101, 999]), ..Default::default() }),
        ("summary", MeetingFilter { summary_complete: Some(false), ..Default::default() }),
        ("calendar", MeetingFilter { from_calendar: Some(true), ..Default::default() }),
        (
            "both flags",
            MeetingFilter { summary_complete: Some(true), from_calendar: Some(false), ..Default::default() },
        ),
        (
            "combined",
            MeetingFilter {
                title: Some("weekly".into()),
                participants: Some(vec![102, 1102]),
                created_after: Some("2026-02-01".parse().unwrap()),
                summary_complete: Some(true),
                ..Default::default()
            },
        ),
    ];
    for organization in [1, 2] {
        for (name, filter) in &filters {
            let whole = store.index_entries(organization, filter).await.unwrap();
            let indexed = store.filtered_entries(organization, filter, true).await.unwrap();
            assert_eq!(indexed, whole, "{name} in organization {organization}");
            assert!(!whole.is_empty() || *name == "combined", "{name} matches some meetings");
        }
    }

    // What each read returns is what it matches (ScannedCount: the entries DynamoDB read).
    stack.calls.keep_bodies(true);
    for (name, filter) in &filters[..filters.len() - 1] {
        stack.calls.reset();
        let matched = store.filtered_entries(1, filter, true).await.unwrap().len();
        let scanned: u64 = scanned_counts(&stack).iter().sum();
        // Participants: a meeting with two of the users asked for is one entry per user.
        let bound = if *name == "participants" { 2 * matched } else { matched };
        assert!(
            scanned as usize <= bound && scanned as usize >= matched,
            "{name}: read {scanned} for {matched} matches"
        );
    }
}

#[tokio::test]
async fn an_incremental_sync_reads_the_changes_not_the_history() {
    let stack = TestStack::new().await;
    stack.import(&directory()).await;
    let mut meetings = varied(1_000, 400, 1);
    for meeting in &mut meetings {
        meeting["updated_at"] = json!("2026-10-01T00:00:00Z");
    }
    stack.import(&json!({"meetings": meetings})).await;
    // Three meetings change afterwards.
    let changed: Vec<Value> = varied(1_000, 3, 1)
        .into_iter()
        .map(|mut meeting| {
            meeting["updated_at"] = json!("2026-11-20T12:00:00Z");
            meeting
        })
        .collect();
    stack.import(&json!({"meetings": changed})).await;
    let clock = TestClock::new();
    let token = token_for(&stack, &clock, &[1]).await;
    let service = stack.client::<MeetingsService>(&clock).with_token(&token);
    stack.calls.keep_bodies(true);
    stack.calls.reset();
    let body = list(&service, "?updated_after=2026-11-20T00:00:00Z").await;
    assert_eq!(body["count"], 3);
    assert_eq!(ids(&body).len(), 3);
    assert_eq!(scanned_counts(&stack), [3], "one Query reading the three changes");
    // After the token and its rate limit: the count item, the changes, the page's meetings.
    assert_eq!(stack.calls.operations()[2..], ["BatchGetItem", "Query", "BatchGetItem"]);
}

#[tokio::test]
async fn a_participant_dropped_by_a_reimport_no_longer_finds_the_meeting() {
    let stack = TestStack::new().await;
    stack.import(&directory()).await;
    let first = meeting(1, 1, 100, json!({"participants": [{"user_id": 100}, {"user_id": 101}]}));
    stack.import(&json!({"meetings": [first]})).await;
    let by = |user: i64| MeetingFilter { participants: Some(vec![user]), ..Default::default() };
    let store = stack.meetings();
    assert_eq!(store.filtered_entries(1, &by(101), true).await.unwrap().len(), 1);
    // Re-imported without user 101, then moved to organization 2.
    stack.import(&json!({"meetings": [meeting(1, 1, 100, json!({"participants": [{"user_id": 100}]}))]})).await;
    assert!(store.filtered_entries(1, &by(101), true).await.unwrap().is_empty());
    assert_eq!(store.filtered_entries(1, &by(100), true).await.unwrap().len(), 1);
    let moved = meeting(1, 2, 1100, json!({"participants": [{"user_id": 1100}]}));
    stack.import(&json!({"meetings": [moved]})).await;
    assert!(store.filtered_entries(1, &by(100), true).await.unwrap().is_empty());
    assert_eq!(store.filtered_entries(2, &by(1100), true).await.unwrap().len(), 1);
}

#[tokio::test]
async fn an_organization_stored_before_the_filter_indexes_is_read_whole_until_reindexed() {
    let stack = TestStack::new().await;
    stack.import(&directory()).await;
    stack.import(&json!({"meetings": varied(1_000, 30, 1)})).await;
    // As an earlier version left it: no filter_indexes on the count item, no filter attributes.
    let table = stack.setting("MEETINGS_TABLE");
    let string = |text: &str| aws_sdk_dynamodb::types::AttributeValue::S(text.to_owned());
    stack
        .dynamodb
        .update_item()
        .table_name(&table)
        .key("pk", string("ORG#1"))
        .key("sk", string("MEETING_COUNT"))
        .update_expression("REMOVE filter_indexes")
        .send()
        .await
        .unwrap();
    for id in 1_000..1_030 {
        stack
            .dynamodb
            .update_item()
            .table_name(&table)
            .key("pk", string(&format!("MEETING#{id}")))
            .key("sk", string("MEETING"))
            .update_expression("REMOVE updated_sort, created_sort, org_flags")
            .send()
            .await
            .unwrap();
    }
    let clock = TestClock::new();
    let token = token_for(&stack, &clock, &[1]).await;
    let service = stack.client::<MeetingsService>(&clock).with_token(&token);
    let query = "?summary_complete=true&size=100";
    // Still right: the organization's whole index is read.
    assert_eq!(list(&service, query).await["count"], 15);
    assert!(!stack.meetings().counts(&[1]).await.unwrap()[&1].filter_indexes);
    // `admin reindex` writes every meeting again and records the indexes.
    assert_eq!(stack.meetings().reindex(1).await.unwrap(), 30);
    let count = stack.meetings().counts(&[1]).await.unwrap()[&1];
    assert!(count.filter_indexes && count.meetings == 30);
    stack.calls.reset();
    assert_eq!(list(&service, query).await["count"], 15);
    // After the token and its rate limit: the count item, the two flag partitions with a
    // summary (from a calendar or not), the page's meetings.
    assert_eq!(stack.calls.operations()[2..], ["BatchGetItem", "Query", "Query", "BatchGetItem"]);
}
