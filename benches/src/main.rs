//! `make bench`: figures for the code between API Gateway and DynamoDB.
//!
//! - CPU-only work per request: p50 and p99 of individual calls, timed with `Instant` after a
//!   warm-up (sub-microsecond work in small fixed batches, each sample the batch's time divided
//!   by its size, as the output says). Inputs a call consumes (items as the SDK hands them over)
//!   are prepared outside the timed region.
//! - Meeting lists at scale: DynamoDB calls, bytes and read units of a list request, counted
//!   from the SDK's requests and responses against moto (`CallLog` with bodies), not timed.
//! - Service construction (what a cold start pays after the runtime is up).
//! - Whole requests through the handler against the local moto server, for context: those
//!   figures are dominated by moto, not by this code.

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{TimeDelta, Utc};
use http::StatusCode;
use http_api::pagination::RequestUrl;
use http_api::{Params, json};
use integration_tests::{Exchange, TestClock, TestStack, demo_fixture, meeting, obtain_token};
use meeting_api::meetings::PAGINATION;
use meeting_api::views::{MeetingDetail, TranscriptView};
use meeting_api::{AuthService, MeetingsService};
use meeting_data::listing::ListEntry;
use meeting_data::listing::{MeetingFilter, newest_first};
use meeting_data::model::{Meeting, TranscriptSegment};
use meeting_data::store::meetings::segment_from_item;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;
use std::time::{Duration, Instant};
use storage::{Item, item_size, n, s};

/// Untimed calls before the timed ones: a tenth of the samples, 20 to 200.
fn warm_up(samples: usize) -> usize {
    (samples / 10).clamp(20, 200)
}

/// The p50 and p99 of `samples` timed calls of `run`, each on a fresh input from `setup`
/// (untimed); with `batch` > 1 a sample is `batch` calls, divided by `batch`.
fn percentiles<I, T>(
    samples: usize,
    batch: u32,
    mut setup: impl FnMut() -> I,
    mut run: impl FnMut(I) -> T,
) -> (Duration, Duration) {
    for _ in 0..warm_up(samples) * batch as usize {
        black_box(run(setup()));
    }
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let inputs: Vec<I> = (0..batch).map(|_| setup()).collect();
        let start = Instant::now();
        for input in inputs {
            black_box(run(input));
        }
        times.push(start.elapsed() / batch);
    }
    times.sort_unstable();
    (times[samples / 2], times[samples * 99 / 100])
}

fn micros(duration: Duration) -> f64 {
    duration.as_nanos() as f64 / 1000.0
}

/// Prints the p50 and p99 per call of `run` on inputs from `setup`.
fn report_with<I, T>(label: &str, samples: usize, batch: u32, setup: impl FnMut() -> I, run: impl FnMut(I) -> T) {
    let (p50, p99) = percentiles(samples, batch, setup, run);
    let note = if batch > 1 { format!("  (batches of {batch})") } else { String::new() };
    println!("{label:<70} p50 {:>9.2} µs  p99 {:>9.2} µs{note}", micros(p50), micros(p99));
}

/// Prints the p50 and p99 per call of `f`.
fn report<T>(label: &str, samples: usize, batch: u32, mut f: impl FnMut() -> T) {
    report_with(label, samples, batch, || (), |()| f());
}

/// The organization of the scaled meetings.
const ORG: i64 = 7;

/// The `i`-th meeting of a large organization: the demo meeting (calendar event, summary,
/// participants, recordings) with its own id, title and times; `i = 0` is the newest. Every
/// other one has its summary complete (what the filtered list asks for).
fn scaled_meeting(template: &Meeting, i: usize) -> Meeting {
    let offset = TimeDelta::minutes(30 * i as i64);
    let mut meeting = template.clone();
    meeting.id = 1_000_000 + i as i64;
    meeting.organization_id = ORG;
    meeting.title = format!("{} {i}", template.title);
    meeting.start_time = template.start_time - offset;
    meeting.end_time = template.end_time - offset;
    meeting.created_at = template.created_at - offset;
    meeting.updated_at = template.updated_at - offset;
    meeting.summary_complete = i.is_multiple_of(2);
    meeting
}

/// A meeting's item as `MeetingStore::put` writes it.
fn meeting_item(meeting: &Meeting) -> Item {
    meeting_data::store::meetings::meeting_item(meeting).expect("a meeting item")
}

/// An organization's meeting count item, as the store's transactions keep it for an
/// organization whose meetings are all in the filter indexes.
fn count_item(organization: i64, count: usize) -> Item {
    Item::from([
        ("pk".to_owned(), s(format!("ORG#{organization}"))),
        ("sk".to_owned(), s("MEETING_COUNT")),
        ("meetings".to_owned(), n(count)),
        ("filter_indexes".to_owned(), n(1)),
    ])
}

/// The attributes of a `by-organization` index entry (template.yaml): the table's and the
/// index's keys and the projected ones.
const INDEX_ATTRIBUTES: [&str; 11] = [
    "pk",
    "sk",
    "org_id",
    "list_sort",
    "id",
    "title",
    "created_at",
    "updated_at",
    "summary_complete",
    "from_calendar",
    "participant_ids",
];

/// An index entry as a list's Query projects it: `id`, `list_sort` and `read`.
fn projected(item: &Item, read: &[&str]) -> Item {
    ["id", "list_sort"]
        .iter()
        .chain(read)
        .filter_map(|name| item.get(*name).map(|value| ((*name).to_owned(), value.clone())))
        .collect()
}

/// A meeting item's index entry.
fn index_entry(item: &Item) -> Item {
    INDEX_ATTRIBUTES
        .iter()
        .filter_map(|name| item.get(*name).map(|value| ((*name).to_owned(), value.clone())))
        .collect()
}

/// A meeting item's `by-organization-flags` entry: the index entry with `org_flags` for
/// `org_id` as its key.
fn flags_entry(item: &Item) -> Item {
    let mut entry = index_entry(item);
    entry.remove("org_id");
    if let Some(flags) = item.get("org_flags") {
        entry.insert("org_flags".to_owned(), flags.clone());
    }
    entry
}

/// The demo meeting 1001 and its transcript, validated as an import would.
fn demo_meeting() -> (Meeting, Vec<TranscriptSegment>) {
    let plan = meeting_data::import::validate(
        serde_json::from_value(demo_fixture()).expect("fixture"),
        Vec::new(),
        Vec::new(),
        Utc::now(),
    )
    .expect("valid fixture");
    plan.meetings.into_iter().next().expect("a demo meeting")
}

#[tokio::main]
async fn main() {
    // `BENCH_PART=runs` (or another part's name) prints that part alone.
    let part = std::env::var("BENCH_PART").unwrap_or_default();
    let wanted = |name: &str| part.is_empty() || part == name;
    let (demo, _) = demo_meeting();
    if wanted("cpu") {
        meeting_cpu(&demo);
        agent_cpu();
        agent_runs().await;
    }
    if wanted("meetings") {
        list_costs(&demo).await;
    }
    if wanted("runs") {
        run_list_costs().await;
    }
    if wanted("records") {
        record_list_costs().await;
    }
    if wanted("init") {
        init().await;
        against_moto().await;
    }
}

/// The meeting API's work besides DynamoDB: decoding the items the SDK returns, filtering,
/// ordering, paginating and rendering.
fn meeting_cpu(demo: &Meeting) {
    println!(
        "CPU work per request (bench profile): p50/p99 of single calls timed with Instant, after\n\
         untimed warm-up calls (a tenth of the samples, 20 to 200); inputs prepared untimed"
    );
    // The items a list reads: the newest entries (unfiltered, Limit 10) or the whole index
    // (filtered), then the page's meetings.
    let meetings: Vec<Meeting> = (0..10_000).map(|i| scaled_meeting(demo, i)).collect();
    let items: Vec<Item> = meetings.iter().map(meeting_item).collect();
    // As the list's Queries project them: `id` and `list_sort`, and what the filter reads.
    let newest_entries: Vec<Item> = items[..10].iter().map(|item| projected(item, &[])).collect();
    let filtered_entries: Vec<Item> = items.iter().map(|item| projected(item, &["summary_complete"])).collect();
    let count = count_item(ORG, 10_000);
    let uri = |query: &str| format!("https://api.test/api/v1/external/meeting/{query}");

    // Unfiltered: the count, the 10 newest entries, the 10 meetings.
    let request = http::Request::builder().uri(uri("")).body(()).expect("request");
    let newest = (newest_entries, items[..10].to_vec());
    report_with(
        "list page of 10, unfiltered: decode count, 10 entries (id, sort key), 10 meetings; render",
        2_000,
        1,
        || (count.clone(), newest.clone()),
        |(count, (entries, items))| {
            let params = Params::from_query(request.uri());
            let counted: usize =
                count.get("meetings").and_then(|v| v.as_n().ok()).and_then(|v| v.parse().ok()).unwrap_or(0);
            let page = PAGINATION.request(&params).resolve(counted).expect("page");
            let entries: Vec<ListEntry> =
                entries.iter().map(|item| ListEntry::from_item(item).expect("entry")).collect();
            let ordered = newest_first(vec![entries]);
            let ids: Vec<i64> = ordered.get(page.range()).unwrap_or_default().iter().map(|entry| entry.id).collect();
            render_page(&request, &page, &ids, items)
        },
    );

    // Filtered (summary_complete=true): the whole index, filtered, counted, ordered, paginated.
    let request = http::Request::builder().uri(uri("?summary_complete=true")).body(()).expect("request");
    let page_items: Vec<Item> = items.iter().step_by(2).take(10).cloned().collect();
    for size in [1_000, 10_000] {
        let input = (filtered_entries[..size].to_vec(), page_items.clone());
        report_with(
            &format!("list page of 10, filtered: decode {size} entries (projected), filter, order; render"),
            if size > 1_000 { 200 } else { 1_000 },
            1,
            || input.clone(),
            |(entries, items)| {
                let params = Params::from_query(request.uri());
                let filter = MeetingFilter { summary_complete: Some(true), ..MeetingFilter::default() };
                let entries: Vec<ListEntry> = entries
                    .iter()
                    .filter(|item| filter.matches(item).expect("entry"))
                    .map(|item| ListEntry::from_item(item).expect("entry"))
                    .collect();
                let ordered = newest_first(vec![entries]);
                let page = PAGINATION.request(&params).resolve(ordered.len()).expect("page");
                let ids: Vec<i64> = ordered[page.range()].iter().map(|entry| entry.id).collect();
                render_page(&request, &page, &ids, items)
            },
        );
    }

    let list_request =
        http::Request::builder().uri(uri("?title=sync&size=10&page=2&participants=1,2")).body(()).expect("request");
    let page = PAGINATION.request(&Params::from_query(list_request.uri())).resolve(1000).expect("page");
    report("list: next and previous URLs", 5_000, 1, || {
        let url = RequestUrl::of(&list_request);
        (page.next_url(&url), page.previous_url(&url))
    });

    report("detail: render the demo meeting to JSON", 5_000, 1, || json(StatusCode::OK, &MeetingDetail::of(demo)));
    let demo_item = meeting_item(demo);
    report_with(
        "detail: decode the GetItem item + render",
        5_000,
        1,
        || demo_item.clone(),
        |item| {
            let meeting: Meeting = serde_dynamo::from_item(item).expect("meeting");
            json(StatusCode::OK, &MeetingDetail::of(&meeting))
        },
    );

    let segments: Vec<TranscriptSegment> = (0..500)
        .map(|i| TranscriptSegment {
            speaker: Some(format!("Speaker {}", i % 4)),
            start_time: f64::from(i) * 4.0,
            end_time: f64::from(i) * 4.0 + 3.5,
            raw_text: Some("and so we agreed to move the launch to the second week of the month".into()),
            formatted_text: None,
            revised_text: None,
            confidential: i % 50 == 0,
        })
        .collect();
    report("transcript: render 500 segments to JSON", 1_000, 1, || {
        json(StatusCode::OK, &TranscriptView::of(demo, &segments))
    });
    let segment_items: Vec<Item> =
        segments.iter().map(|segment| serde_dynamo::to_item(segment).expect("segment item")).collect();
    report_with(
        "transcript: decode 500 segment items + render",
        500,
        1,
        || segment_items.clone(),
        |items| {
            let segments: Vec<TranscriptSegment> =
                items.iter().map(|item| segment_from_item(item).expect("segment")).collect();
            json(StatusCode::OK, &TranscriptView::of(demo, &segments))
        },
    );
}

/// The page's meetings (decoded in the order of `ids`, as `get_many` does) rendered as the
/// list's body.
fn render_page(
    request: &http::Request<()>,
    page: &http_api::pagination::Page,
    ids: &[i64],
    items: Vec<Item>,
) -> http_api::Response<http_api::Body> {
    let mut by_id: HashMap<i64, Meeting> = HashMap::new();
    for item in items {
        let meeting: Meeting = serde_dynamo::from_item(item).expect("meeting");
        by_id.insert(meeting.id, meeting);
    }
    let meetings: Vec<Meeting> = ids.iter().filter_map(|id| by_id.remove(id)).collect();
    meeting_api::meetings::list_page(request, page, &meetings)
}

fn agent_cpu() {
    println!("\nAgent platform: CPU work per request");
    let agent_body = br#"{"type": "config", "name": "Support", "framework": "chainlib", "provider": "openai",
        "model_name": "gpt-4o", "instruction": "Answer from the knowledge base.", "tools": [], "mcps": [],
        "agent_config": {"max_recursion_limit": 20, "planning": false}, "metadata": {"team": "support"}}"#;
    report("agent create: parse and validate the body", 5_000, 1, || {
        platform_data::agent_spec::parse_agent_spec(agent_body)
    });

    // Agent list of 20: the stored bodies (JSON text in the item) parsed, deleted ones dropped,
    // rendered in the list envelope (the index reads them newest first).
    let account = platform_data::ids::AccountId::new_v4();
    let now = Utc::now();
    let agents: Vec<platform_data::agents::Agent> = (0..20)
        .map(|i| {
            let body = String::from_utf8_lossy(agent_body).replace("\"Support\"", &format!("\"Support {i}\""));
            let spec = platform_data::agent_spec::parse_agent_spec(body.as_bytes()).expect("valid agent");
            platform_data::records::Record::new(account, spec, now - TimeDelta::minutes(i))
        })
        .collect();
    let stored: Vec<String> = agents.iter().map(|agent| serde_json::to_string(&agent.spec).expect("spec")).collect();
    let request = http::Request::builder().uri("https://api.test/agents?page=1&limit=20").body(()).expect("request");
    let render = |mut agents: Vec<platform_data::agents::Agent>| {
        let params = Params::from_query(request.uri());
        let mut problems = serde_json::Map::new();
        let page = platform_api::envelope::PageRequest::from_params(&params, &mut problems);
        agents.retain(|agent| agent.deleted_at.is_none());
        let total = agents.len();
        platform_api::agents::list_page(agents, total, &page)
    };
    report_with("agent list of 20: render the envelope", 5_000, 1, || agents.clone(), render);
    report_with(
        "agent list of 20: parse the 20 stored bodies + render",
        5_000,
        1,
        || agents.clone(),
        |mut agents| {
            for (agent, text) in agents.iter_mut().zip(&stored) {
                agent.spec = serde_json::from_str(text).expect("stored spec");
            }
            render(agents)
        },
    );

    let secret = webhooks::signing::new_secret();
    let payload = vec![b'x'; 2_048];
    report("webhook: sign a 2 KB payload (Standard Webhooks)", 5_000, 1, || {
        webhooks::signing::sign(&secret, "msg_2LJ8Tf4qfNx2wW6", 1_795_000_000, &payload)
    });
    let now = Utc::now();
    report("schedule: parse a cron expression in a time zone", 5_000, 1, || {
        schedule::Schedule::parse("0 9 * * MON-FRI", "Europe/Berlin")
    });
    let berlin = schedule::Schedule::parse("0 9 * * MON-FRI", "Europe/Berlin").expect("valid");
    report("schedule: the next five due times", 5_000, 1, || berlin.upcoming(now, 5));
}

/// The run stream's own cost: what the engine adds to the model's latency.
async fn agent_runs() {
    use agent_runtime::engine::{AgentRun, execute};
    use agent_runtime::events::RunEvent;
    use agent_runtime::providers::chat_completions::{ChatCompletions, KeyHeader, TurnAccumulator};
    use integration_tests::model_server::{ModelReply, ModelServer, chunk, finish};
    use outbound::sse::SseDecoder;
    use std::sync::Arc;

    println!("\nAgent runs: per event, bytes from the provider to the client's SSE frame");
    let delta = chunk(serde_json::json!({"content": "word "}));
    // As docs/performance.md's figure was measured: a fresh decoder and accumulator per chunk.
    report("provider chunk -> decode SSE -> parse -> accumulate -> frame", 20_000, 1, || {
        let mut decoder = SseDecoder::new(1 << 20);
        let mut turn = TurnAccumulator::default();
        let mut frames = Vec::new();
        for event in decoder.feed(delta.as_bytes()).expect("decoded") {
            let value: Value = serde_json::from_str(&event.data).expect("json");
            for text in turn.feed(&value).expect("chunk") {
                frames.push(RunEvent::Message { delta: text }.to_sse(7));
            }
        }
        frames
    });
    // The engine's whole path per chunk, as in a stream: one decoder and accumulator for the
    // answer (a new one every 500 chunks), the event sent over the engine's channel, the
    // relay's numbering, frame and send to the client's channel, and the event queued for the
    // batch write (the write itself is off the stream's path).
    let (events, mut relay_in) = tokio::sync::mpsc::unbounded_channel::<RunEvent>();
    let (frames, mut client) = tokio::sync::mpsc::unbounded_channel::<String>();
    let mut decoder = SseDecoder::new(1 << 20);
    let mut turn = TurnAccumulator::default();
    let mut chunks = 0u64;
    let mut sequence = 0u64;
    let mut pending: Vec<(u64, RunEvent)> = Vec::new();
    report("run, per streamed chunk: engine + relay to the client's frame", 20_000, 1, || {
        chunks += 1;
        if chunks.is_multiple_of(500) {
            decoder = SseDecoder::new(1 << 20);
            turn = TurnAccumulator::default();
        }
        for event in decoder.feed(delta.as_bytes()).expect("decoded") {
            let value: Value = serde_json::from_str(&event.data).expect("json");
            for text in turn.feed(&value).expect("chunk") {
                let _ = events.send(RunEvent::Message { delta: text });
            }
        }
        while let Ok(event) = relay_in.try_recv() {
            sequence += 1;
            let _ = frames.send(event.to_sse(sequence));
            pending.push((sequence, event));
            if pending.len() >= 25 {
                pending.clear();
            }
        }
        let mut sent = 0;
        while let Ok(frame) = client.try_recv() {
            sent += frame.len();
        }
        sent
    });
    report("SSE: encode one message event as a frame", 20_000, 10, || {
        RunEvent::Message { delta: "word ".into() }.to_sse(42)
    });
    let mut arguments = serde_json::Map::new();
    arguments.insert("city".into(), serde_json::json!("Oslo"));
    arguments.insert("days".into(), serde_json::json!(3));
    let tool_call = RunEvent::ToolCall { id: "call_1".into(), name: "forecast".into(), arguments };
    report("SSE: encode one tool_call event as a frame", 20_000, 10, || tool_call.to_sse(43));

    // End to end over loopback: a 500-delta answer from a local Chat Completions server.
    let mut pieces: Vec<(Duration, String)> =
        (0..500).map(|i| (Duration::ZERO, chunk(serde_json::json!({"content": format!("w{i} ")})))).collect();
    pieces.extend(finish("stop", 10, 500).into_iter().map(|piece| (Duration::ZERO, piece)));
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
            silence: agent_runtime::providers::SilenceLimits::default(),
        };
        let run = AgentRun {
            run_id: platform_data::ids::RunId::now_v7(),
            agent_id: platform_data::ids::AgentId::new_v4(),
            instruction: None,
            history: Vec::new(),
            message: "go".into(),
            attachments: Vec::new(),
            provider: Arc::new(provider),
            tools: Vec::new(),
            max_turns: 1,
            planning: false,
            tool_output_sharing: false,
            timeout: Duration::from_secs(30),
            stated_timeout: None,
            limits: agent_runtime::engine::RunLimits::default(),
            sub_agent_calls: agent_runtime::engine::SubAgentCalls::default(),
            model: agent_runtime::spend::RunModel { model_id: "m".into(), pricing: None },
            model_name: "test-model".into(),
            provider_name: "openai",
            gate: None,
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
        "{:<70} p50 {:>7.2} ms  p95 {:>7.2} ms",
        "loopback: request -> first message event",
        first[10].as_secs_f64() * 1000.0,
        first[18].as_secs_f64() * 1000.0
    );
    println!(
        "{:<70} p50 {:>7.2} ms  ({:.1} µs per event)",
        "loopback: whole 500-delta answer",
        totals[10].as_secs_f64() * 1000.0,
        totals[10].as_secs_f64() * 1_000_000.0 / 500.0
    );
}

/// 1 MB, DynamoDB's limit of the data one Query page reads.
const QUERY_PAGE_BYTES: usize = 1 << 20;
/// The item size one read unit covers.
const READ_UNIT_BYTES: usize = 4096;

/// An item of the DynamoDB JSON protocol (`{"name": {"S": "…"}}`) as an SDK item.
fn wire_item(value: &Value) -> Item {
    value
        .as_object()
        .map(|fields| fields.iter().map(|(name, value)| (name.clone(), wire_value(value))).collect())
        .unwrap_or_default()
}

fn wire_value(value: &Value) -> AttributeValue {
    let (kind, inner) = value.as_object().and_then(|typed| typed.iter().next()).expect("a typed attribute value");
    let texts = || inner.as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect();
    match kind.as_str() {
        "S" => AttributeValue::S(inner.as_str().unwrap_or_default().to_owned()),
        "N" => AttributeValue::N(inner.as_str().unwrap_or_default().to_owned()),
        "BOOL" => AttributeValue::Bool(inner.as_bool().unwrap_or_default()),
        "NULL" => AttributeValue::Null(true),
        "SS" => AttributeValue::Ss(texts()),
        "NS" => AttributeValue::Ns(texts()),
        "L" => AttributeValue::L(inner.as_array().into_iter().flatten().map(wire_value).collect()),
        "M" => AttributeValue::M(wire_item(inner)),
        other => panic!("an attribute type these tables do not use: {other}"),
    }
}

/// Read units of reading `bytes` in one unit of account (an item of a GetItem or BatchGetItem,
/// or a whole Query page): 4 KB each, rounded up, at least one; half for eventually consistent.
fn read_units(bytes: usize, consistent: bool) -> f64 {
    let units = bytes.div_ceil(READ_UNIT_BYTES).max(1) as f64;
    if consistent { units } else { units / 2.0 }
}

/// One index read (a Query and the pages continuing it): its entries' sizes in order.
#[derive(Debug, Clone, Default)]
struct IndexRead {
    limit: Option<usize>,
    /// A consistent read (a table Query; index Queries never are).
    consistent: bool,
    entry_sizes: Vec<usize>,
    /// Query calls moto answered it with (moto pages by whole items of 1,000,000 bytes).
    moto_calls: usize,
}

impl IndexRead {
    /// The pages DynamoDB answers it with: at most `limit` entries and 1 MB each.
    fn pages(&self) -> Vec<usize> {
        let mut pages = Vec::new();
        let (mut bytes, mut entries) = (0, 0);
        for size in &self.entry_sizes {
            if entries > 0 && (bytes + size > QUERY_PAGE_BYTES || self.limit == Some(entries)) {
                pages.push(bytes);
                (bytes, entries) = (0, 0);
            }
            bytes += size;
            entries += 1;
        }
        if entries > 0 || pages.is_empty() {
            pages.push(bytes);
        }
        pages
    }
}

/// What a request cost in DynamoDB.
#[derive(Debug, Clone, Default)]
struct Cost {
    /// Calls other than Query, by operation.
    calls: BTreeMap<String, usize>,
    index_reads: Vec<IndexRead>,
    /// Items read and their bytes as DynamoDB counts them (index entries for index reads).
    items: usize,
    item_bytes: usize,
    /// Response bodies as moto sent them (`None` when computed rather than measured).
    wire_bytes: Option<usize>,
    /// Read units of the calls other than Query.
    other_units: f64,
}

impl Cost {
    /// The cost of `exchanges`, made one after another.
    fn of(exchanges: &[Exchange]) -> Self {
        let mut cost = Cost { wire_bytes: Some(0), ..Cost::default() };
        // Responses are paired with requests by arrival, and a route's reads overlap the gate's
        // UpdateItem: a Query or BatchGetItem takes the next answer of its own shape.
        let answers = |key: &str| -> std::collections::VecDeque<&Value> {
            exchanges.iter().map(|exchange| &exchange.response).filter(|response| response.get(key).is_some()).collect()
        };
        let (mut query_answers, mut batch_answers) = (answers("Items"), answers("Responses"));
        for exchange in exchanges {
            *cost.wire_bytes.get_or_insert(0) += exchange.response_bytes;
            let request = &exchange.request;
            let consistent = |spec: &Value| spec.get("ConsistentRead").and_then(Value::as_bool).unwrap_or(false);
            match exchange.operation.as_str() {
                "Query" => {
                    let response = query_answers.pop_front().unwrap_or(&exchange.response);
                    let sizes: Vec<usize> = response["Items"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|item| item_size(&wire_item(item)))
                        .collect();
                    cost.items += sizes.len();
                    cost.item_bytes += sizes.iter().sum::<usize>();
                    let continues = request.get("ExclusiveStartKey").is_some();
                    match cost.index_reads.last_mut() {
                        Some(read) if continues => {
                            read.entry_sizes.extend(sizes);
                            read.moto_calls += 1;
                        }
                        _ => cost.index_reads.push(IndexRead {
                            limit: request.get("Limit").and_then(Value::as_u64).map(|limit| limit as usize),
                            consistent: consistent(request),
                            entry_sizes: sizes,
                            moto_calls: 1,
                        }),
                    }
                }
                "GetItem" => {
                    *cost.calls.entry("GetItem".into()).or_default() += 1;
                    let size = exchange.response.get("Item").map(|item| item_size(&wire_item(item))).unwrap_or(0);
                    cost.items += usize::from(size > 0);
                    cost.item_bytes += size;
                    cost.other_units += read_units(size, consistent(request));
                }
                "BatchGetItem" => {
                    *cost.calls.entry("BatchGetItem".into()).or_default() += 1;
                    let response = batch_answers.pop_front().unwrap_or(&exchange.response);
                    for (table, spec) in request["RequestItems"].as_object().into_iter().flatten() {
                        let keys = spec["Keys"].as_array().map_or(0, Vec::len);
                        let found: Vec<usize> = response["Responses"][table]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .map(|item| item_size(&wire_item(item)))
                            .collect();
                        cost.items += found.len();
                        cost.item_bytes += found.iter().sum::<usize>();
                        // A key not found costs the read of an empty item.
                        let missing = keys.saturating_sub(found.len());
                        cost.other_units += found.iter().map(|size| read_units(*size, consistent(spec))).sum::<f64>()
                            + missing as f64 * read_units(0, consistent(spec));
                    }
                }
                other => *cost.calls.entry(other.into()).or_default() += 1,
            }
        }
        cost
    }

    /// The cost of a whole read of ten times as many items as this one read, in its item sizes
    /// (computed, not measured).
    fn tenfold(&self) -> Self {
        let sizes: Vec<usize> = self.index_reads.iter().flat_map(|read| read.entry_sizes.iter().copied()).collect();
        let entry_sizes: Vec<usize> = sizes.iter().cycle().take(sizes.len() * 10).copied().collect();
        Cost {
            items: entry_sizes.len(),
            item_bytes: entry_sizes.iter().sum(),
            index_reads: vec![IndexRead { limit: None, consistent: false, entry_sizes, moto_calls: 0 }],
            ..Cost::default()
        }
    }

    /// Adds another request's cost (the token check to a read made outside the handler).
    fn plus(mut self, other: &Cost) -> Self {
        for (operation, count) in &other.calls {
            *self.calls.entry(operation.clone()).or_default() += count;
        }
        self.index_reads.extend(other.index_reads.iter().cloned());
        self.items += other.items;
        self.item_bytes += other.item_bytes;
        self.wire_bytes = self.wire_bytes.zip(other.wire_bytes).map(|(a, b)| a + b);
        self.other_units += other.other_units;
        self
    }

    /// Query calls as DynamoDB pages them, and as moto did.
    fn queries(&self) -> (usize, usize) {
        let dynamodb = self.index_reads.iter().map(|read| read.pages().len()).sum();
        let moto = self.index_reads.iter().map(|read| read.moto_calls).sum();
        (dynamodb, moto)
    }

    /// Read units as DynamoDB bills them, per Query page.
    fn read_units(&self) -> f64 {
        let queries: f64 = self
            .index_reads
            .iter()
            .flat_map(|read| read.pages().into_iter().map(|bytes| read_units(bytes, read.consistent)))
            .sum();
        queries + self.other_units
    }

    fn print(&self, label: &str) {
        let (queries, moto_queries) = self.queries();
        let limits: Vec<String> = self
            .index_reads
            .iter()
            .map(|read| read.limit.map_or_else(|| "no Limit".to_owned(), |limit| format!("Limit {limit}")))
            .collect();
        let mut calls: Vec<String> =
            self.calls.iter().map(|(operation, count)| format!("{count} {operation}")).collect();
        if queries > 0 {
            let measured = self.wire_bytes.is_some();
            let moto =
                if !measured || moto_queries == queries { String::new() } else { format!(", moto {moto_queries}") };
            calls.push(format!("{queries} Query ({}{moto})", limits.join(", ")));
        }
        let wire = self.wire_bytes.map_or_else(|| "        —".to_owned(), |bytes| format!("{:>9}", kilobytes(bytes)));
        println!(
            "  {label:<34} {:<52} {:>7} items {:>11} read {wire} sent {:>8.1} RCU",
            calls.join(" + "),
            self.items,
            kilobytes(self.item_bytes),
            self.read_units()
        );
    }
}

fn kilobytes(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{:.2} MB", bytes as f64 / (1 << 20) as f64)
    } else {
        format!("{:.1} KB", bytes as f64 / 1024.0)
    }
}

/// Writes `size` meetings of `ORG` and its count, in the store's shapes; the first through
/// `MeetingStore::put`, whose items are compared with the ones built here.
async fn seed(stack: &TestStack, template: &Meeting, size: usize) {
    let store = stack.meetings();
    let table = stack.setting(meeting_data::settings::MEETINGS_TABLE);
    let first = scaled_meeting(template, 0);
    store.put(&first, &[]).await.expect("the first meeting written by the store");
    for (key, built) in [
        (
            Item::from([("pk".to_owned(), s(format!("MEETING#{}", first.id))), ("sk".to_owned(), s("MEETING"))]),
            meeting_item(&first),
        ),
        (
            Item::from([("pk".to_owned(), s(format!("ORG#{ORG}"))), ("sk".to_owned(), s("MEETING_COUNT"))]),
            count_item(ORG, 1),
        ),
    ] {
        let stored = stack.dynamodb.get_item().table_name(&table).set_key(Some(key)).send().await.expect("GetItem");
        // Seeded items of another shape would make every figure below wrong.
        assert_eq!(stored.item.as_ref(), Some(&built), "the bench builds items as MeetingStore::put writes them");
    }
    // Each meeting with its participant items (the by-participant index), as `put` writes them.
    let writes: Vec<_> = (1..size)
        .flat_map(|i| {
            let meeting = scaled_meeting(template, i);
            let item = meeting_item(&meeting);
            let participants = meeting_data::store::meetings::participant_items(&meeting, &item);
            std::iter::once(item).chain(participants)
        })
        .chain([count_item(ORG, size)])
        .map(|item| (table.clone(), storage::put_request(item).expect("put request")))
        .collect();
    let mut tasks = tokio::task::JoinSet::new();
    let per_task = writes.len().div_ceil(4).max(1);
    let mut writes = writes.into_iter().peekable();
    while writes.peek().is_some() {
        let part: Vec<_> = writes.by_ref().take(per_task).collect();
        let db = stack.dynamodb.clone();
        tasks.spawn(async move { storage::batch_write(&db, part).await });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("seeding task").expect("seeded");
    }
}

/// The three list reads of one organization: what each costs.
struct ListCosts {
    unfiltered: Cost,
    filtered: Cost,
    whole_index: Cost,
}

impl ListCosts {
    fn print(&self) {
        self.unfiltered.print("unfiltered, page 1 of 10");
        self.filtered.print("filtered, page 1 of 10");
        self.whole_index.print("before: whole index, page 1 of 10");
    }

    /// Each line's price per million requests, with the function's time of each (unfiltered,
    /// filtered, before).
    fn print_prices(&self, durations: [Duration; 3]) {
        for ((label, cost), duration) in
            [("unfiltered", &self.unfiltered), ("filtered", &self.filtered), ("before", &self.whole_index)]
                .into_iter()
                .zip(durations)
        {
            print_price(label, cost, duration);
        }
    }

    /// The costs DynamoDB would have for an organization of `size` meetings, from the items
    /// built as the seeded ones (nothing written), with the token check `auth` as measured.
    fn computed(template: &Meeting, size: usize, auth: &Cost) -> Self {
        let items: Vec<Item> = (0..size).map(|i| meeting_item(&scaled_meeting(template, i))).collect();
        let entry_sizes: Vec<usize> = items.iter().map(|item| item_size(&index_entry(item))).collect();
        let page_read = |picked: Vec<&Item>| {
            let sizes: Vec<usize> = picked.iter().map(|item| item_size(item)).collect();
            Cost {
                calls: BTreeMap::from([("BatchGetItem".to_owned(), 1)]),
                items: sizes.len(),
                item_bytes: sizes.iter().sum(),
                other_units: sizes.iter().map(|size| read_units(*size, false)).sum(),
                ..Cost::default()
            }
        };
        // summary_complete=true reads the flags partitions of the summarized meetings (every
        // other one): its entries, not the whole index.
        let summarized_sizes: Vec<usize> = items.iter().step_by(2).map(|item| item_size(&flags_entry(item))).collect();
        let summarized_read = Cost {
            items: summarized_sizes.len(),
            item_bytes: summarized_sizes.iter().sum(),
            index_reads: vec![IndexRead {
                limit: None,
                consistent: false,
                entry_sizes: summarized_sizes,
                moto_calls: 0,
            }],
            ..Cost::default()
        };
        let index_read = |limit: Option<usize>| {
            let sizes: Vec<usize> = entry_sizes.iter().take(limit.unwrap_or(usize::MAX)).copied().collect();
            Cost {
                items: sizes.len(),
                item_bytes: sizes.iter().sum(),
                index_reads: vec![IndexRead { limit, consistent: false, entry_sizes: sizes, moto_calls: 0 }],
                ..Cost::default()
            }
        };
        let count = item_size(&count_item(ORG, size));
        let counts = Cost {
            calls: BTreeMap::from([("BatchGetItem".to_owned(), 1)]),
            items: 1,
            item_bytes: count,
            other_units: read_units(count, false),
            ..Cost::default()
        };
        let newest = page_read(items.iter().take(10).collect());
        let summarized = page_read(items.iter().step_by(2).take(10).collect());
        let auth = Cost { wire_bytes: None, ..auth.clone() };
        Self {
            unfiltered: auth.clone().plus(&counts).plus(&index_read(Some(10))).plus(&newest),
            filtered: auth.clone().plus(&counts).plus(&summarized_read).plus(&summarized),
            whole_index: auth.plus(&index_read(None)).plus(&newest),
        }
    }
}

/// Meeting lists at scale: what an unfiltered page 1 of 10, a filtered one and the read the
/// list made before counts (the whole index) cost, for organizations of 1k, 10k and 100k.
async fn list_costs(template: &Meeting) {
    println!("\nMeeting lists at scale: DynamoDB calls, items, bytes and read units per request (counted, not timed)");
    println!(
        "  Each request includes the token check (1 BatchGetItem, consistent). Read units as DynamoDB bills them:\n  \
         4 KB per unit, half for eventually consistent reads; rounded per item for BatchGetItem, over a\n  \
         page's summed size for a Query (index Queries are eventually consistent). Pages of 1 MB of index\n  \
         entries as DynamoDB cuts them (moto cuts at 1,000,000 bytes of whole items; its count shown when\n  \
         it differs). \"read\" = items as DynamoDB sizes them; \"sent\" = moto's JSON responses.\n  \
         Meetings: the demo meeting 1001 (calendar event, summary, recordings) with their own id, title and\n  \
         times, half with a complete summary; filtered = ?summary_complete=true (the flags index's\n  \
         partitions of the summarized half). \"before\" = the whole index read the unfiltered list made\n  \
         before counts (a title every meeting has reads it so today), with the unfiltered page's BatchGetItem."
    );
    let part = Instant::now();
    // The handler's errors, should moto fail a call (on this thread, where the requests run).
    let errors = tracing_subscriber::fmt().with_max_level(tracing::Level::ERROR).with_writer(std::io::stderr).finish();
    let _errors = tracing::subscriber::set_default(errors);
    let mut auth = None;
    let mut durations_10k = [Duration::ZERO; 3];
    for size in [1_000, 10_000] {
        let stack = TestStack::new().await;
        let started = Instant::now();
        seed(&stack, template, size).await;
        let seeded = started.elapsed();
        let clock = TestClock::new();
        let (client_id, secret) = stack.create_app(&[ORG]).await;
        let token = obtain_token(&stack.client::<AuthService>(&clock), &client_id, &secret).await;
        let service = stack.client::<MeetingsService>(&clock).with_token(&token);
        stack.calls.keep_bodies(true);
        let measure = async |path: &str, count: usize| {
            // moto under load has dropped a request now and then (the handler answers 500, its
            // error on stderr): such a request is sent again, and said so.
            let mut attempts = 0;
            let mut duration;
            let reply = loop {
                attempts += 1;
                stack.calls.reset();
                let start = Instant::now();
                let reply = service.get(path).send().await;
                duration = start.elapsed();
                if reply.status == StatusCode::OK || attempts == 3 {
                    break reply;
                }
                println!("  ({path} answered {} on attempt {attempts}; sent again)", reply.status);
            };
            let body = reply.expect(200);
            assert_eq!(body["count"], count, "{path}");
            assert_eq!(body["results"].as_array().map(Vec::len), Some(10), "{path}");
            let exchanges = stack.calls.exchanges();
            assert_eq!(exchanges.last().map(|e| e.operation.as_str()), Some("BatchGetItem"), "the page's read last");
            (exchanges, duration)
        };
        let (unfiltered, unfiltered_time) = measure("/api/v1/external/meeting/", size).await;
        let (filtered, filtered_time) = measure("/api/v1/external/meeting/?summary_complete=true", size / 2).await;
        // Before counts, the unfiltered list read the whole index, as a title every meeting has
        // reads it today, then the newest 10 meetings, as the unfiltered one does.
        let word = template.title.split_whitespace().next().unwrap_or("Meeting");
        let (titled, titled_time) = measure(&format!("/api/v1/external/meeting/?title={word}"), size).await;
        let before: Vec<Exchange> = titled[..titled.len() - 1].iter().chain(unfiltered.last()).cloned().collect();
        let token_check = Cost::of(&filtered[..1]);
        stack.calls.keep_bodies(false);
        println!("{size:>7} meetings, on the local endpoint (seeded in {:.1} s):", seeded.as_secs_f64());
        let measured = ListCosts {
            unfiltered: Cost::of(&unfiltered),
            filtered: Cost::of(&filtered),
            whole_index: Cost::of(&before),
        };
        measured.print();
        let durations = [unfiltered_time, filtered_time, titled_time];
        measured.print_prices(durations);
        durations_10k = durations;
        let computed = ListCosts::computed(template, size, &token_check);
        for (label, measured, computed) in [
            ("unfiltered", &measured.unfiltered, &computed.unfiltered),
            ("filtered", &measured.filtered, &computed.filtered),
            ("before", &measured.whole_index, &computed.whole_index),
        ] {
            if (measured.item_bytes, measured.read_units()) != (computed.item_bytes, computed.read_units()) {
                println!(
                    "  (computed from built items, {label}: {} read, {:.1} RCU: differs from moto's)",
                    kilobytes(computed.item_bytes),
                    computed.read_units()
                );
            }
        }
        auth = Some(token_check);
    }
    let auth = auth.expect("measured");
    println!(
        "{:>7} meetings, computed, not seeded (moto's Query scans and sorts the whole table in Python for\n  \
         each page: ~5 s a page at 10,000, and ~140 pages at 100,000). Items built as the seeded ones (their\n  \
         index entries and sizes); calls and read units as DynamoDB counts them; the same computation\n  \
         matches moto's figures at 1,000 and 10,000 (a line above says when it does not):",
        100_000
    );
    let computed = ListCosts::computed(template, 100_000, &auth);
    computed.print();
    // The pages take what they took at 10,000; the reads of every entry ten times as long.
    let [unfiltered, filtered, before] = durations_10k;
    computed.print_prices([unfiltered, filtered * 10, before * 10]);
    println!("  (this part took {:.0} s, nearly all of it moto seeding and answering)", part.elapsed().as_secs_f64());
}

async fn init() {
    println!("\nInit (after the Lambda runtime is up)");
    // The first load in a process also pays one-time TLS and runtime setup.
    let lambda = |name: &str| match name {
        "AWS_LAMBDA_FUNCTION_NAME" => Some("bench".to_string()),
        "AWS_REGION" => Some("us-east-1".to_string()),
        "AWS_ACCESS_KEY_ID" | "AWS_SECRET_ACCESS_KEY" => Some("bench".to_string()),
        _ => None,
    };
    for label in ["function config, in Lambda (first in process)", "function config, in Lambda (again)"] {
        let start = Instant::now();
        let _ = aws_env::function_config(&lambda);
        println!("{label:<70} {:>9.2} µs", micros(start.elapsed()));
    }
    let start = Instant::now();
    let sdk = aws_env::load().await;
    println!("{:<70} {:>9.2} µs", "load AWS config, default provider chains (tools)", micros(start.elapsed()));
    let env = [
        ("MEETINGS_TABLE", "m"),
        ("EXTERNAL_APPS_TABLE", "a"),
        ("ACCESS_TOKENS_TABLE", "t"),
        ("RATE_LIMITS_TABLE", "r"),
        ("RECORDINGS_BUCKET", "b"),
    ];
    let lookup = |name: &str| env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
    report("build MeetingsService (clients, settings)", 1_000, 1, || {
        MeetingsService::from_settings(&aws_env::Clients::new(sdk.clone()), &lookup)
    });
}

async fn against_moto() {
    println!("\nWhole requests against local moto (moto's Python index scan dominates the list)");
    let stack = TestStack::new().await;
    stack.import(&demo_fixture()).await;
    let bulk: Vec<_> = (1..=500).map(|id| meeting(10_000 + id, 1, 11, serde_json::json!({}))).collect();
    stack.import(&serde_json::json!({ "meetings": bulk })).await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1, 2]).await;
    let token = obtain_token(&stack.client::<AuthService>(&clock), &client_id, &secret).await;
    let service = stack.client::<MeetingsService>(&clock).with_token(&token);
    let store = stack.meetings();
    let start = Instant::now();
    let entries = store.index_entries(1, &MeetingFilter::default()).await.expect("index");
    println!(
        "{:<70} {:>9.2} ms",
        format!("moto alone: one index Query of {} entries", entries.len()),
        start.elapsed().as_secs_f64() * 1000.0
    );
    let ids: Vec<i64> = entries.iter().take(10).map(|e| e.id).collect();
    let start = Instant::now();
    store.get_many(&ids).await.expect("page");
    println!("{:<70} {:>9.2} ms", "moto alone: BatchGetItem of 10 meetings", start.elapsed().as_secs_f64() * 1000.0);
    for (label, path) in [
        ("GET detail", "/api/v1/external/meeting/1001/"),
        ("GET transcript", "/api/v1/external/meeting/1001/transcript/"),
        ("GET list of 503 meetings, page of 10", "/api/v1/external/meeting/"),
    ] {
        let mut samples = Vec::new();
        for _ in 0..50 {
            let start = Instant::now();
            let reply = service.get(path).send().await;
            samples.push(start.elapsed());
            assert_eq!(reply.status, 200, "{path}: {}", reply.text);
        }
        samples.sort();
        println!(
            "{label:<70} p50 {:>7.2} ms  p95 {:>7.2} ms",
            samples[25].as_secs_f64() * 1000.0,
            samples[47].as_secs_f64() * 1000.0
        );
    }
}

/// us-east-1 list prices (2025) the cost lines use: DynamoDB on-demand, per million read
/// request units (an eventually consistent read of 4 KB; a consistent one is two).
const DYNAMODB_PER_MILLION_READ_UNITS: f64 = 0.125;
/// API Gateway REST API, per million requests (the first 333 million a month).
const REST_API_PER_MILLION_REQUESTS: f64 = 3.50;
/// Lambda, per million requests, and per GB-second on arm64.
const LAMBDA_PER_MILLION_REQUESTS: f64 = 0.20;
const LAMBDA_ARM64_PER_GB_SECOND: f64 = 0.000_013_333_4;

/// Dollars per million requests that read `read_units` each and take `duration` in a function
/// of `memory_mb` (billed per millisecond, rounded up): DynamoDB, Lambda, API Gateway, total.
fn price_per_million(read_units: f64, memory_mb: u32, duration: Duration) -> [f64; 4] {
    let dynamodb = read_units * DYNAMODB_PER_MILLION_READ_UNITS;
    let billed_seconds = duration.as_millis().max(1) as f64 / 1000.0;
    let lambda = LAMBDA_PER_MILLION_REQUESTS
        + billed_seconds * f64::from(memory_mb) / 1024.0 * LAMBDA_ARM64_PER_GB_SECOND * 1_000_000.0;
    [dynamodb, lambda, REST_API_PER_MILLION_REQUESTS, dynamodb + lambda + REST_API_PER_MILLION_REQUESTS]
}

/// The memory of the meetings and agents functions (the template's global `MemorySize`), which
/// answer the meeting, agent and run lists.
const FUNCTION_MEMORY_MB: u32 = 256;

/// Writes `size` runs of `agent`, spread over the 60 days before `now`, through the store (each
/// run's create and its end, with their counts): a third each `api`, `queue` and `schedule` (of
/// two schedules), one in ten `failed`, the others `success`.
async fn seed_runs(
    runs: &agent_runtime::runs::RunStore,
    agent: platform_data::ids::AgentId,
    schedules: [platform_data::ids::ScheduleId; 2],
    size: usize,
    now: chrono::DateTime<Utc>,
) {
    use agent_runtime::events::{FailureReason, Usage};
    use agent_runtime::runs::{RunInput, RunOrigin, RunRecord, RunType};
    let account = platform_data::ids::AccountId::new_v4();
    let span = TimeDelta::days(60);
    let mut tasks = tokio::task::JoinSet::new();
    // Four writers, each its own stretch of days (so their counts rarely collide).
    for part in 0..4 {
        let runs = runs.clone();
        tasks.spawn(async move {
            for i in (part * size / 4)..((part + 1) * size / 4) {
                let started = now - span + span * i32::try_from(i).unwrap_or(0) / i32::try_from(size).unwrap_or(1);
                let run_type = [RunType::Api, RunType::Queue, RunType::Schedule][i % 3];
                let origin = RunOrigin {
                    run_type,
                    input: RunInput { message: format!("Summarize the meetings of week {i}."), files: Vec::new() },
                    schedule_id: (run_type == RunType::Schedule).then_some(schedules[i / 3 % 2]),
                    session_id: None,
                    parent: None,
                };
                let millis = u64::try_from(started.timestamp_millis()).unwrap_or(0);
                let mut tail = [0u8; 10];
                tail.copy_from_slice(&uuid::Uuid::new_v4().as_bytes()[..10]);
                let run_id = uuid::Builder::from_unix_timestamp_millis(millis, &tail).into_uuid().into();
                let timeout = Duration::from_secs(60);
                let mut record = RunRecord::start(run_id, agent, account, origin, started, timeout, runs.retention());
                assert!(runs.create(&record, Vec::new()).await.expect("run created"));
                let ending = if i % 10 == 0 {
                    Err((FailureReason::Error, "the model answered 500".to_owned()))
                } else {
                    Ok("Three meetings: planning, review and a customer call; two need follow-ups.".to_owned())
                };
                let usage = Usage::tokens(420, 37);
                record.finish(
                    &ending,
                    agent_runtime::spend::Bill { usage, cost: None },
                    1,
                    started + TimeDelta::seconds(3),
                );
                // Long past: only the sweep's form of an end is accepted.
                assert!(runs.finish(&record, 2, Vec::new(), now, true).await.expect("run ended"));
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("seeding task");
    }
}

/// Run lists at scale: an agent's runs, 1k and 10k seeded through the store, 100k computed.
async fn run_list_costs() {
    use agent_runtime::runs::{RunFilter, RunStatus, RunType};
    println!("\nRun lists at scale: the store's DynamoDB calls, items, bytes and read units per list, and the price");
    println!(
        "  per million requests (us-east-1 list prices: DynamoDB on-demand ${DYNAMODB_PER_MILLION_READ_UNITS}/M read units, Lambda arm64 at\n  \
         {FUNCTION_MEMORY_MB} MB and the measured duration against the local endpoint, API Gateway REST ${REST_API_PER_MILLION_REQUESTS}/M). The route\n  \
         adds the gate (2 calls) and the agent's GetItem (~1 read unit). Runs: a short question and answer\n  \
         (~1 KB records), a third each api, queue and schedule runs of two schedules, one in ten failed.\n  \
         \"before\" = the whole by-agent read every filtered list made before cells (and the first list of\n  \
         an agent still makes, once)."
    );
    let part = Instant::now();
    let now = Utc::now();
    let mut whole_10k = None;
    for size in [1_000, 10_000] {
        let stack = TestStack::new().await;
        let runs = stack.runs();
        let agent = platform_data::ids::AgentId::new_v4();
        let schedules = [platform_data::ids::ScheduleId::now_v7(), platform_data::ids::ScheduleId::now_v7()];
        let started = Instant::now();
        seed_runs(&runs, agent, schedules, size, now).await;
        println!(
            "{size:>7} runs of one agent, on the local endpoint (seeded in {:.1} s):",
            started.elapsed().as_secs_f64()
        );
        // The agent's first list tallies its runs from before counts (none).
        runs.page_for_agent(agent, &RunFilter::default(), 0, 1, now).await.expect("tallied");
        stack.calls.keep_bodies(true);
        let failed = RunFilter { status: Some(RunStatus::Failed), ..RunFilter::default() };
        let cases = [
            ("unfiltered, page 1 of 20", RunFilter::default(), 0),
            ("status=failed, page 1 of 20", failed.clone(), 0),
            (
                "run_type=api&status=success, page 5",
                RunFilter { status: Some(RunStatus::Success), run_type: Some(RunType::Api), ..RunFilter::default() },
                80,
            ),
            ("schedule_id=…, page 1 of 20", RunFilter { schedule_id: Some(schedules[0]), ..RunFilter::default() }, 0),
        ];
        for (label, filter, skip) in cases {
            stack.calls.reset();
            let start = Instant::now();
            let page = runs.page_for_agent(agent, &filter, skip, 20, now).await.expect("page");
            let duration = start.elapsed();
            assert_eq!(page.runs.len(), 20, "{label}");
            print_priced(label, &Cost::of(&stack.calls.exchanges()), duration);
        }
        stack.calls.reset();
        let start = Instant::now();
        let all = runs.list_for_agent(agent, &failed, now).await.expect("whole read");
        let duration = start.elapsed();
        assert_eq!(all.len(), size / 10);
        let whole = Cost::of(&stack.calls.exchanges());
        print_priced("before: the whole index, any filter", &whole, duration);
        stack.calls.keep_bodies(false);
        whole_10k = Some((whole, duration));
    }
    // At 100k the pages read what they read at 10k (their depth, and the counts of the same 60
    // days); the whole read grows tenfold.
    let (whole, duration) = whole_10k.expect("measured");
    let computed = whole.tenfold();
    println!(
        "{:>7} runs, computed: the pages as at 10,000 (their reads do not depend on the history); the whole read:",
        100_000
    );
    print_priced("before: the whole index, any filter", &computed, duration * 10);
    println!("  (this part took {:.0} s)", part.elapsed().as_secs_f64());
}

/// A cost line and its price per million requests.
fn print_priced(label: &str, cost: &Cost, duration: Duration) {
    cost.print(label);
    print_price("", cost, duration);
}

/// The price per million requests of `cost`, taking `duration` in the function.
fn print_price(label: &str, cost: &Cost, duration: Duration) {
    let [dynamodb, lambda, api, total] = price_per_million(cost.read_units(), FUNCTION_MEMORY_MB, duration);
    println!(
        "  {label:<34} {:>8.1} ms  per million: DynamoDB ${dynamodb:.2} + Lambda ${lambda:.2} + API Gateway ${api:.2} = ${total:.2}",
        duration.as_secs_f64() * 1000.0
    );
}

/// An account's agents at scale: 500 active (the default quota) among 1k and 10k stored, the
/// rest soft-deleted (what an account's history leaves), listed through the agents function.
async fn record_list_costs() {
    use platform_data::agents::{Agent, AgentStore};
    println!("\nAgent lists at scale: DynamoDB calls, items, bytes and read units per request through the agents");
    println!(
        "  function (the gate's GetItem and UpdateItem included), and the price per million requests (as for runs,\n  \
         at the agents function's {FUNCTION_MEMORY_MB} MB). 500 active agents (QuotaAgents) of ~1 KB among 1k and 10k stored, the\n  \
         rest soft-deleted; half each framework. \"before\" = the whole partition every agent list read\n  \
         (deleted agents included) before the `active` index."
    );
    let part = Instant::now();
    let mut whole_10k = None;
    for size in [1_000usize, 10_000] {
        let stack = TestStack::new().await;
        let account = uuid::Uuid::new_v4();
        let key = stack.api_key(account).await;
        let account_id = platform_data::ids::AccountId::from(account);
        let store = AgentStore::new(stack.dynamodb.clone(), stack.setting(platform_api::settings::AGENTS_TABLE));
        let started = Instant::now();
        let now = Utc::now();
        let mut tasks = tokio::task::JoinSet::new();
        for part in 0..4 {
            let store = store.clone();
            tasks.spawn(async move {
                for i in (part * size / 4)..((part + 1) * size / 4) {
                    let framework = ["chainlib", "graphlib"][i % 2];
                    let body = format!(
                        r#"{{"type": "config", "name": "Support {i}", "framework": "{framework}", "provider": "openai",
                        "model_name": "gpt-4o", "instruction": "Answer from the knowledge base; cite the meeting and the speaker, keep it short, and say when you do not know.",
                        "description": "Answers customers' questions about their meetings.", "version": "v{}",
                        "agent_config": {{"max_recursion_limit": 20, "planning": false}}, "metadata": {{"team": "{}"}}}}"#,
                        i % 3,
                        ["ops", "sales"][i / 2 % 2]
                    );
                    let spec = platform_data::agent_spec::parse_agent_spec(body.as_bytes()).expect("valid agent");
                    let agent = Agent::new(account_id, spec, now - TimeDelta::seconds(i64::try_from(size - i).unwrap_or(0)));
                    store.create(&agent).await.expect("agent stored");
                    // The newest 500 stay; the others were deleted over time.
                    if i < size - 500 {
                        store.soft_delete(account_id, agent.id, now).await.expect("agent deleted");
                    }
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.expect("seeding task");
        }
        let counters =
            storage::quota::Counters::new(stack.dynamodb.clone(), stack.setting(platform_api::settings::QUOTAS_TABLE));
        let quota = storage::quota::Quota { name: "agents", limit: 500 };
        counters.initialize(&counters.counter(quota, &account.to_string()), 500).await.expect("counter");
        println!("{size:>7} agents stored, 500 active (seeded in {:.1} s):", started.elapsed().as_secs_f64());
        let clock = TestClock::new();
        let agents = stack.client::<platform_api::AgentsService>(&clock).with_key(&key);
        agents.get("/agents/?limit=1").expect(200).await;
        stack.calls.keep_bodies(true);
        for (label, path, listed) in [
            ("page 1 of 20", "/agents/?page=1&limit=20", 20),
            ("framework=graphlib, page 1 of 20", "/agents/?framework=graphlib&page=1&limit=20", 20),
            ("metadata.team=ops, page 1 of 20", "/agents/?metadata.team=ops&page=1&limit=20", 20),
            ("the spec's whole list (500)", "/agents/", 500),
        ] {
            stack.calls.reset();
            let start = Instant::now();
            let body = agents.get(path).expect(200).await;
            let duration = start.elapsed();
            assert_eq!(body["data"].as_array().map(Vec::len), Some(listed), "{path}");
            print_priced(label, &Cost::of(&stack.calls.exchanges()), duration);
        }
        stack.calls.reset();
        let start = Instant::now();
        let all = store.list(account_id).await.expect("whole partition");
        let duration = start.elapsed();
        assert_eq!(all.len(), size);
        let whole = Cost::of(&stack.calls.exchanges());
        print_priced("before: the whole partition", &whole, duration);
        stack.calls.keep_bodies(false);
        whole_10k = Some((whole, duration));
    }
    // At 100,000 stored the lists read what they read at 10,000 (the active agents' index); the
    // whole partition, ten times as much.
    let (whole, duration) = whole_10k.expect("measured");
    let computed = whole.tenfold();
    println!("{:>7} agents stored, computed: the lists as at 10,000; the whole partition:", 100_000);
    print_priced("before: the whole partition", &computed, duration * 10);
    println!("  (this part took {:.0} s)", part.elapsed().as_secs_f64());
}
