//! `make bench`: figures for the code between API Gateway and DynamoDB.
//!
//! - CPU-only work per request (list filtering and ordering, view rendering, pagination URLs);
//! - service construction (what a cold start pays after the runtime is up);
//! - whole requests through the handler against the local moto server, for context: those
//!   figures are dominated by moto, not by this code.

use chrono::{Duration, Utc};
use http_api::pagination::RequestUrl;
use integration_tests::{TestClock, TestStack, demo_fixture, get, meeting, obtain_token};
use meeting_api::MeetingsService;
use meeting_api::views::MeetingDetail;
use meeting_data::listing::{MeetingFilter, filter_and_order};
use meeting_data::store::meetings::{IndexEntry, list_sort_key};
use std::hint::black_box;
use std::time::Instant;

/// Runs `f` `iterations` times and prints the mean time per call.
fn measure<T>(label: &str, iterations: u32, mut f: impl FnMut() -> T) {
    for _ in 0..iterations.min(100) {
        black_box(f());
    }
    let start = Instant::now();
    for _ in 0..iterations {
        black_box(f());
    }
    let per_call = start.elapsed() / iterations;
    println!("{label:<58} {:>10.2} µs", per_call.as_nanos() as f64 / 1000.0);
}

fn index_entries(count: i64) -> Vec<IndexEntry> {
    let start = Utc::now();
    (0..count)
        .map(|id| IndexEntry {
            id,
            title: format!("Weekly sync {id}"),
            created_at: start,
            updated_at: start,
            summary_complete: id % 2 == 0,
            from_calendar: id % 3 == 0,
            participant_ids: vec![id % 50, id % 7],
            list_sort: list_sort_key(start - Duration::minutes(id), id),
        })
        .collect()
}

#[tokio::main]
async fn main() {
    println!("CPU work per request (release build)");
    let entries = index_entries(10_000);
    let filter = MeetingFilter { title: Some("SYNC 1".into()), participants: Some(vec![3, 4]), ..Default::default() };
    measure("list: filter + order 10,000 index entries (incl. clone)", 50, || {
        filter_and_order(vec![entries.clone()], &filter)
    });
    measure("list: order 10,000 index entries, no filter (incl. clone)", 50, || {
        filter_and_order(vec![entries.clone()], &MeetingFilter::default())
    });

    let document = demo_fixture();
    let plan = meeting_data::import::validate(
        serde_json::from_value(document).expect("fixture"),
        Vec::new(),
        Vec::new(),
        Utc::now(),
    )
    .expect("valid fixture");
    let (demo_meeting, _) = &plan.meetings[0];
    measure("detail: render the demo meeting to JSON", 20_000, || serde_json::to_vec(&MeetingDetail::of(demo_meeting)));
    let request = http::Request::builder()
        .uri("https://api.test/api/v1/external/meeting/?title=sync&size=10&page=2&participants=1,2")
        .body(())
        .expect("request");
    let page = meeting_api::meetings::PAGINATION
        .request(&http_api::Params::from_query(request.uri()))
        .resolve(1000)
        .expect("page");
    measure("list: next and previous URLs", 20_000, || {
        let url = RequestUrl::of(&request);
        (page.next_url(&url), page.previous_url(&url))
    });

    let segments: Vec<meeting_data::model::TranscriptSegment> = (0..500)
        .map(|i| meeting_data::model::TranscriptSegment {
            speaker: Some(format!("Speaker {}", i % 4)),
            start_time: f64::from(i) * 4.0,
            end_time: f64::from(i) * 4.0 + 3.5,
            raw_text: Some("and so we agreed to move the launch to the second week of the month".into()),
            formatted_text: None,
            revised_text: None,
            confidential: i % 50 == 0,
        })
        .collect();
    measure("transcript: render 500 segments to JSON", 2_000, || {
        serde_json::to_vec(&meeting_api::views::TranscriptView::of(demo_meeting, &segments))
    });

    println!("\nAgent platform: CPU work per request");
    let agent_body = br#"{"type": "config", "name": "Support", "framework": "chainlib", "provider": "openai",
        "model_name": "gpt-4o", "instruction": "Answer from the knowledge base.", "tools": [], "mcps": [],
        "agent_config": {"max_recursion_limit": 20, "planning": false}, "metadata": {"team": "support"}}"#;
    measure("agent create: parse and validate the body", 20_000, || {
        platform_data::agent_spec::parse_agent_spec(agent_body)
    });
    let secret = webhooks::signing::new_secret();
    let payload = vec![b'x'; 2_048];
    measure("webhook: sign a 2 KB payload (Standard Webhooks)", 20_000, || {
        webhooks::signing::sign(&secret, "msg_2LJ8Tf4qfNx2wW6", 1_795_000_000, &payload)
    });
    let now = Utc::now();
    measure("schedule: parse a cron expression in a time zone", 20_000, || {
        schedule::Schedule::parse("0 9 * * MON-FRI", "Europe/Berlin")
    });
    let berlin = schedule::Schedule::parse("0 9 * * MON-FRI", "Europe/Berlin").expect("valid");
    measure("schedule: the next five due times", 20_000, || berlin.upcoming(now, 5));

    agent_runs().await;

    println!("\nInit (after the Lambda runtime is up)");
    // The first load in a process also pays one-time TLS and runtime setup.
    for (label, in_lambda) in [
        ("load AWS config, Lambda path (first in process)", true),
        ("load AWS config, Lambda path (again)", true),
        ("load AWS config, default provider chains", false),
    ] {
        let start = Instant::now();
        let _ = aws_env::load_for(in_lambda).await;
        println!("{label:<58} {:>10.2} µs", start.elapsed().as_nanos() as f64 / 1000.0);
    }
    let sdk = aws_env::load_for(false).await;
    let env = [("MEETINGS_TABLE", "m"), ("EXTERNAL_APPS_TABLE", "a"), ("ACCESS_TOKENS_TABLE", "t")];
    let lookup = |name: &str| env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
    measure("build MeetingsService (clients, settings)", 1_000, || MeetingsService::from_settings(&sdk, &lookup));

    println!("\nWhole requests against local moto (moto's Python index scan dominates the list)");
    let stack = TestStack::new().await;
    stack.import(&demo_fixture()).await;
    let bulk: Vec<_> = (1..=500).map(|id| meeting(10_000 + id, 1, 11, serde_json::json!({}))).collect();
    stack.import(&serde_json::json!({ "meetings": bulk })).await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1, 2]).await;
    let token = obtain_token(&stack.auth_service(&clock), &client_id, &secret).await;
    let service = stack.meetings_service(&clock);
    let store = stack.meetings();
    let start = Instant::now();
    let entries = store.index_entries(1).await.expect("index");
    println!(
        "{:<58} {:>10.2} ms",
        format!("moto alone: one index Query of {} entries", entries.len()),
        start.elapsed().as_secs_f64() * 1000.0
    );
    let ids: Vec<i64> = entries.iter().take(10).map(|e| e.id).collect();
    let start = Instant::now();
    store.get_many(&ids).await.expect("page");
    println!("{:<58} {:>10.2} ms", "moto alone: BatchGetItem of 10 meetings", start.elapsed().as_secs_f64() * 1000.0);
    for (label, path) in [
        ("GET detail", "/api/v1/external/meeting/1001/"),
        ("GET transcript", "/api/v1/external/meeting/1001/transcript/"),
        ("GET list of 503 meetings, page of 10", "/api/v1/external/meeting/"),
    ] {
        let mut samples = Vec::new();
        for _ in 0..50 {
            let start = Instant::now();
            let reply = get(&service, path, Some(&token)).await;
            samples.push(start.elapsed());
            assert_eq!(reply.status, 200, "{path}: {}", reply.text);
        }
        samples.sort();
        println!(
            "{label:<58} p50 {:>7.2} ms  p95 {:>7.2} ms",
            samples[25].as_secs_f64() * 1000.0,
            samples[47].as_secs_f64() * 1000.0
        );
    }
}

/// The run stream's own cost: what the engine adds to the model's latency.
async fn agent_runs() {
    use agent_runtime::engine::{AgentRun, execute};
    use agent_runtime::events::RunEvent;
    use agent_runtime::providers::chat_completions::{ChatCompletions, KeyHeader, TurnAccumulator};
    use agent_runtime::sse::SseDecoder;
    use integration_tests::model_server::{ModelReply, ModelServer, chunk, finish};
    use std::sync::Arc;

    println!("\nAgent runs: per event, bytes from the provider to the client's SSE frame");
    let delta = chunk(serde_json::json!({"content": "word "}));
    measure("provider chunk -> decode SSE -> parse -> accumulate -> frame", 50_000, || {
        let mut decoder = SseDecoder::new(1 << 20);
        let mut turn = TurnAccumulator::default();
        let mut frames = Vec::new();
        for event in decoder.feed(delta.as_bytes()).expect("decoded") {
            let value: serde_json::Value = serde_json::from_str(&event.data).expect("json");
            for text in turn.feed(&value).expect("chunk") {
                frames.push(RunEvent::Message { delta: text }.to_sse(7));
            }
        }
        frames
    });
    measure("encode one message event as an SSE frame", 200_000, || {
        RunEvent::Message { delta: "word ".into() }.to_sse(42)
    });

    // End to end over loopback: a 500-delta answer from a local Chat Completions server.
    let mut pieces: Vec<(std::time::Duration, String)> = (0..500)
        .map(|i| (std::time::Duration::ZERO, chunk(serde_json::json!({"content": format!("w{i} ")}))))
        .collect();
    pieces.extend(finish("stop", 10, 500).into_iter().map(|piece| (std::time::Duration::ZERO, piece)));
    let mut first = Vec::new();
    let mut totals = Vec::new();
    for _ in 0..20 {
        let model = ModelServer::start(vec![ModelReply::Stream(pieces.clone())]).await;
        let provider = ChatCompletions {
            client: integration_tests::loopback_client(),
            url: format!("{}/chat/completions", model.base_url()),
            api_key: None,
            key_header: KeyHeader::Bearer,
            model: "m".into(),
            parameters: serde_json::Map::new(),
        };
        let run = AgentRun {
            run_id: uuid::Uuid::now_v7(),
            agent_id: uuid::Uuid::new_v4(),
            instruction: None,
            history: Vec::new(),
            message: "go".into(),
            images: Vec::new(),
            provider: Arc::new(provider),
            tools: Vec::new(),
            max_turns: 1,
            planning: false,
            tool_output_sharing: false,
            timeout: std::time::Duration::from_secs(30),
        };
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
        let start = Instant::now();
        let running = tokio::spawn(execute(run, sender, std::future::pending()));
        let mut first_message = None;
        while let Some(event) = receiver.recv().await {
            if first_message.is_none() && matches!(event, RunEvent::Message { .. }) {
                first_message = Some(start.elapsed());
            }
        }
        let _ = running.await;
        first.push(first_message.unwrap_or_default());
        totals.push(start.elapsed());
    }
    first.sort();
    totals.sort();
    println!(
        "{:<58} p50 {:>7.2} ms  p95 {:>7.2} ms",
        "loopback: request -> first message event",
        first[10].as_secs_f64() * 1000.0,
        first[18].as_secs_f64() * 1000.0
    );
    println!(
        "{:<58} p50 {:>7.2} ms  ({:.1} µs per event)",
        "loopback: whole 500-delta answer",
        totals[10].as_secs_f64() * 1000.0,
        totals[10].as_secs_f64() * 1_000_000.0 / 500.0
    );
}
