//! Meeting detail, transcript, summary, participants and recording.

use integration_tests::{TestClient, TestClock, TestStack, demo_calendar_event, demo_fixture, meeting, obtain_token};
use meeting_api::{AuthService, MeetingsService};
use serde_json::json;

const BASE: &str = "/api/v1/external/meeting";

/// A stack with the demo data, the meetings function, and a token for an application linked to
/// `organizations`.
async fn demo(organizations: &[i64]) -> (TestStack, TestClient, String) {
    let stack = TestStack::new().await;
    stack.import(&demo_fixture()).await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(organizations).await;
    let token = obtain_token(&stack.client::<AuthService>(&clock), &client_id, &secret).await;
    let service = stack.client::<MeetingsService>(&clock);
    (stack, service, token)
}

#[tokio::test]
async fn detail_has_every_field_of_the_spec() {
    let (_stack, meetings, token) = demo(&[1, 2]).await;
    let body = meetings.with_token(&token).get(&format!("{BASE}/1001/")).expect(200).await;
    assert_eq!(
        body,
        json!({
            "id": 1001,
            "title": "Weekly product sync",
            "start_time": "2026-11-02T09:00:00Z",
            "end_time": "2026-11-02T09:45:30Z",
            "created_at": "2026-10-30T15:12:00Z",
            "location": "Room 4B",
            "status": "past",
            "summary_complete": true,
            "host": {"id": 11, "name": "Ada Moreno", "email": "ada@northwind.test"},
            "language": "en",
            "keywords": ["roadmap", "billing"],
            "participant_count": 3,
            "duration_seconds": 2730.0,
            "num_cluster": 3,
            "calendar_event": demo_calendar_event()
        })
    );
    // duration_seconds is a float even when whole.
    let text = meetings.with_token(&token).get(&format!("{BASE}/1001/")).send().await.text;
    assert!(text.contains("\"duration_seconds\":2730.0"), "{text}");

    let manual = meetings.with_token(&token).get(&format!("{BASE}/1002")).expect(200).await;
    assert_eq!(manual["calendar_event"], json!(null));
    assert_eq!(manual["location"], "");
    assert_eq!(manual["duration_seconds"], 1800.0);
    assert_eq!(manual["participant_count"], 1);
}

#[tokio::test]
async fn transcript_is_ordered_filtered_and_uses_the_best_text() {
    let (_stack, meetings, token) = demo(&[1]).await;
    let body = meetings.with_token(&token).get(&format!("{BASE}/1001/transcript/")).expect(200).await;
    assert_eq!(
        body,
        json!({
            "meeting_id": 1001,
            "title": "Weekly product sync",
            "total_segments": 3,
            "transcripts": [
                {"speaker": "Ada Moreno", "text": "OK, let's start with the roadmap.", "start_time": 0.0, "end_time": 6.5},
                {"speaker": "Unknown", "text": "Sounds good.", "start_time": 6.5, "end_time": 9.0},
                {"speaker": "Ben Okafor", "text": "billing ships friday", "start_time": 15.25, "end_time": 20.0}
            ]
        })
    );
    let empty = meetings.with_token(&token).get(&format!("{BASE}/1002/transcript/")).expect(200).await;
    assert_eq!(empty["total_segments"], 0);
    assert_eq!(empty["transcripts"], json!([]));
}

#[tokio::test]
async fn transcript_segments_are_sorted_by_start_time_and_replaced_on_reimport() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let segment = |start: f64, text: &str| json!({"speaker": "S", "start_time": start, "end_time": start + 1.0, "raw_text": text});
    let document = |transcript: serde_json::Value| {
        json!({
            "organizations": [{"id": 7, "name": "O"}],
            "users": [{"id": 70, "organization_id": 7, "name": "U", "email": "u@o.test"}],
            "meetings": [meeting(700, 7, 70, json!({"transcript": transcript}))]
        })
    };
    stack.import(&document(json!([segment(9.0, "c"), segment(1.0, "a"), segment(5.0, "b")]))).await;
    let (client_id, secret) = stack.create_app(&[7]).await;
    let token = obtain_token(&stack.client::<AuthService>(&clock), &client_id, &secret).await;
    let meetings = stack.client::<MeetingsService>(&clock).with_token(&token);
    let body = meetings.get(&format!("{BASE}/700/transcript/")).expect(200).await;
    let texts: Vec<&str> =
        body["transcripts"].as_array().unwrap().iter().map(|s| s["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["a", "b", "c"]);

    stack.import(&document(json!([segment(2.0, "only")]))).await;
    let body = meetings.get(&format!("{BASE}/700/transcript/")).expect(200).await;
    assert_eq!(body["total_segments"], 1);
    assert_eq!(body["transcripts"][0]["text"], "only");
}

#[tokio::test]
async fn summary_passes_markdown_legacy_objects_and_null_through() {
    let (_stack, meetings, token) = demo(&[1, 2]).await;
    let body = meetings.with_token(&token).get(&format!("{BASE}/1001/summary/")).expect(200).await;
    assert_eq!(
        body,
        json!({
            "meeting_id": 1001,
            "title": "Weekly product sync",
            "summary": "## Decisions\n- Billing ships on Friday.\n\n## Action items\n- Ben: update the release notes.",
            "notes": "Follow up with Dana about the partner API.",
            "keywords": ["roadmap", "billing"]
        })
    );
    let legacy = meetings.with_token(&token).get(&format!("{BASE}/1002/summary/")).send().await;
    // Passed through as written, key order included.
    assert!(
        legacy.text.contains(r#""topics":[{"title":"Pricing","points":["Too expensive for small teams"]}]"#),
        "{}",
        legacy.text
    );
    let legacy = legacy.expect(200);
    assert_eq!(
        legacy["summary"],
        json!({"overview": "Legacy structured summary", "topics": [{"title": "Pricing", "points": ["Too expensive for small teams"]}]})
    );
    let none = meetings.with_token(&token).get(&format!("{BASE}/2001/summary/")).expect(200).await;
    assert_eq!(none["summary"], json!(null));
    assert_eq!(none["notes"], "");
}

#[tokio::test]
async fn participants_include_users_and_guests() {
    let (_stack, meetings, token) = demo(&[1]).await;
    let body = meetings.with_token(&token).get(&format!("{BASE}/1001/participants/")).expect(200).await;
    assert_eq!(
        body,
        json!({
            "meeting_id": 1001,
            "title": "Weekly product sync",
            "total_participants": 3,
            "participants": [
                {"id": 11, "name": "Ada Moreno", "email": "ada@northwind.test", "position": "CTO", "department": "Engineering"},
                {"id": 12, "name": "Ben Okafor", "email": "ben@northwind.test", "position": "Product Manager", "department": "Product"},
                {"id": null, "name": "Dana Smith", "email": "dana@partner.test", "position": "", "department": ""}
            ]
        })
    );
}

#[tokio::test]
async fn recording_prefers_mp3_and_has_a_no_recording_shape() {
    let (stack, meetings, token) = demo(&[1]).await;
    let body = meetings.with_token(&token).get(&format!("{BASE}/1001/recording/")).expect(200).await;
    assert_eq!(
        body,
        json!({"meeting_id": 1001, "title": "Weekly product sync", "recording_url": "/media/recordings/1001.mp3", "duration": 2730.0, "format": "mp3", "download_url": null, "expires_at": null})
    );
    stack
        .import(&json!({"meetings": [meeting(1004, 1, 12, json!({"title": "No recording", "recordings": []}))]}))
        .await;
    let none = meetings.with_token(&token).get(&format!("{BASE}/1004/recording/")).send().await;
    assert!(none.text.contains("\"duration\":0.0"), "{}", none.text);
    assert_eq!(
        none.expect(200),
        json!({"meeting_id": 1004, "title": "No recording", "recording_url": null, "duration": 0.0, "format": "", "download_url": null, "expires_at": null})
    );

    let wav_only =
        meeting(1003, 1, 11, json!({"recordings": [{"format": "wav", "url": "/media/1003.wav", "duration": 12.5}]}));
    stack.import(&json!({"meetings": [wav_only]})).await;
    let body = meetings.with_token(&token).get(&format!("{BASE}/1003/recording/")).expect(200).await;
    assert_eq!(
        (body["format"].as_str(), body["recording_url"].as_str(), body["duration"].as_f64()),
        (Some("wav"), Some("/media/1003.wav"), Some(12.5))
    );
}

#[tokio::test]
async fn meetings_outside_the_accessible_organizations_are_not_found() {
    let (_stack, meetings, token) = demo(&[1]).await;
    for suffix in ["", "transcript/", "summary/", "participants/", "recording/", "recording/file.mp3"] {
        for id in [2001, 99999] {
            let body = meetings.with_token(&token).get(&format!("{BASE}/{id}/{suffix}")).expect(404).await;
            assert_eq!(body, json!({"detail": "Meeting not found."}), "{id}/{suffix}");
        }
    }
}

#[tokio::test]
async fn organization_id_narrows_and_is_validated_on_every_read() {
    let (_stack, meetings, token) = demo(&[1, 2]).await;
    meetings.with_token(&token).get(&format!("{BASE}/1001/?organization_id=1")).expect(200).await;
    let body = meetings.with_token(&token).get(&format!("{BASE}/1001/summary/?organization_id=2")).expect(404).await;
    assert_eq!(body["detail"], "Meeting not found.");
    let body = meetings.with_token(&token).get(&format!("{BASE}/1001/?organization_id=x")).expect(400).await;
    assert_eq!(body, json!({"organization_id": "Invalid organization_id format. Must be an integer."}));
}

#[tokio::test]
async fn unknown_paths_and_methods_get_drf_errors() {
    let (_stack, meetings, token) = demo(&[1]).await;
    for path in [
        "/api/v1/external/meeting/abc/",
        "/api/v1/external/meeting/1001/notes/",
        "/api/v1/external/meeting/1001/summary/x/",
    ] {
        assert_eq!(meetings.with_token(&token).get(path).expect(404).await, json!({"detail": "Not found."}), "{path}");
    }
    let reply = meetings.with_token(&token).delete("/api/v1/external/meeting/1001/").expect(405).await;
    assert_eq!(reply, json!({"detail": "Method \"DELETE\" not allowed."}));
}

/// The per-client limit: each `client_id` has its own token bucket, which its meeting reads and
/// its token requests share; refused credentials do not count. Over it, DRF's throttled answer.
#[tokio::test]
async fn a_client_over_its_limit_is_throttled_as_drf_throttles_and_others_are_not() {
    let stack = TestStack::new().await;
    stack.import(&demo_fixture()).await;
    let clock = TestClock::new();
    // Bursts of 3, one more a minute.
    let limited = stack.with_settings(&[("MEETING_RATE_LIMIT_CAPACITY", "3"), ("MEETING_RATE_LIMIT_PER_MINUTE", "1")]);
    let auth = limited.client::<AuthService>(&clock);
    let meetings = limited.client::<MeetingsService>(&clock);
    let (busy, busy_secret) = stack.create_app(&[1]).await;
    let (other, other_secret) = stack.create_app(&[1]).await;

    // Wrong secrets naming the busy client do not use up its allowance.
    for _ in 0..5 {
        let wrong = [("grant_type", "client_credentials"), ("client_id", busy.as_str()), ("client_secret", "nope")];
        let refused = auth.post_form("/api/auth/token/", &wrong).send().await;
        refused.expect(401);
        assert!(refused.header("x-ratelimit-limit").is_none());
    }
    let token = obtain_token(&auth, &busy, &busy_secret).await;
    let first = meetings.with_token(&token).get(&format!("{BASE}/1001/")).send().await;
    first.expect(200);
    assert_eq!(first.header("x-ratelimit-limit"), Some("3"));
    assert_eq!(first.header("x-ratelimit-remaining"), Some("1"));
    meetings.with_token(&token).get(&format!("{BASE}/")).expect(200).await;

    // The fourth request of the burst (the token was the first) is throttled.
    // Full again three intervals after now (Unix seconds, rounded up).
    let refill_at = (clock.now().timestamp_millis() + 180_000 + 999).div_euclid(1000);
    let throttled = meetings.with_token(&token).get(&format!("{BASE}/1001/")).send().await;
    assert_eq!(throttled.expect(429), json!({"detail": "Request was throttled. Expected available in 60 seconds."}));
    assert_eq!(throttled.header("retry-after"), Some("60"));
    assert_eq!(throttled.header("x-ratelimit-limit"), Some("3"));
    assert_eq!(throttled.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(throttled.header("x-ratelimit-reset"), Some(refill_at.to_string().as_str()));
    // The token endpoint counts against the same bucket.
    let again = [("grant_type", "client_credentials"), ("client_id", busy.as_str()), ("client_secret", &busy_secret)];
    let refused_token = auth.post_form("/api/auth/token/", &again).send().await;
    assert_eq!(
        refused_token.expect(429),
        json!({"detail": "Request was throttled. Expected available in 60 seconds."})
    );

    // Another client is unaffected.
    let other_token = obtain_token(&auth, &other, &other_secret).await;
    let answered = meetings.with_token(&other_token).get(&format!("{BASE}/1001/")).send().await;
    answered.expect(200);
    assert_eq!(answered.header("x-ratelimit-remaining"), Some("1"));

    // A minute later the busy client has one request again.
    clock.advance(60);
    meetings.with_token(&token).get(&format!("{BASE}/1001/")).expect(200).await;
    let next = meetings.with_token(&token).get(&format!("{BASE}/1001/")).send().await;
    assert_eq!(next.expect(429), json!({"detail": "Request was throttled. Expected available in 60 seconds."}));
}
