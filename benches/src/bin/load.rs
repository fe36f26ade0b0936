//! `make load`: a load generator against a running `make dev`. For each scenario it keeps
//! `LOAD_CONCURRENCY` requests in flight for `LOAD_SECONDS` and prints requests/s, p50 and p99,
//! beside the dev server's trivial handler (`GET /_dev/ping`) on the same stack, so the share of
//! the latency that is ours (function code, moto) is visible. Figures only.
//!
//! It reads the demo credentials `make dev` writes to `.local/dev-credentials.json`. The
//! backend's per-key rate limit and the meeting API's per-client one apply as in AWS: start
//! `make dev` with `RateLimitCapacity=1000000 RateLimitPerMinute=60000
//! MeetingRateLimitCapacity=1000000 MeetingRateLimitPerMinute=60000` to measure past them (429s
//! are counted and reported, never hidden).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// One kind of request, sent again and again.
struct Scenario {
    name: &'static str,
    method: http::Method,
    url: String,
    headers: Vec<(&'static str, String)>,
    body: Option<String>,
    concurrency: usize,
}

/// What one scenario measured.
struct Outcome {
    latencies: Vec<Duration>,
    statuses: BTreeMap<u16, usize>,
    failures: usize,
    elapsed: Duration,
}

#[tokio::main]
async fn main() {
    let base = std::env::var("DEV_URL").unwrap_or_else(|_| "http://127.0.0.1:3000".into());
    let runner = std::env::var("RUNNER_URL").unwrap_or_else(|_| "http://127.0.0.1:3001".into());
    let seconds: u64 = std::env::var("LOAD_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(10);
    let concurrency: usize = std::env::var("LOAD_CONCURRENCY").ok().and_then(|c| c.parse().ok()).unwrap_or(8);
    let credentials = read_credentials();
    let text = |name: &str| credentials[name].as_str().unwrap_or_default().to_owned();
    let (client_id, secret, key, agent) =
        (text("client_id"), text("client_secret"), text("api_key"), text("demo_agent_id"));
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();

    let token_form = format!("grant_type=client_credentials&client_id={client_id}&client_secret={secret}");
    let token = issue_token(&client, &base, &token_form).await;
    let get = |name, url: String, headers: Vec<(&'static str, String)>| Scenario {
        name,
        method: http::Method::GET,
        url,
        headers,
        body: None,
        concurrency,
    };
    let scenarios = vec![
        get("trivial handler (GET /_dev/ping)", format!("{base}/_dev/ping"), vec![]),
        Scenario {
            name: "token (POST /api/auth/token/)",
            method: http::Method::POST,
            url: format!("{base}/api/auth/token/"),
            headers: vec![("content-type", "application/x-www-form-urlencoded".into())],
            body: Some(token_form),
            concurrency,
        },
        get(
            "meeting list, page of 10",
            format!("{base}/api/v1/external/meeting/?size=10"),
            vec![("authorization", format!("Bearer {token}"))],
        ),
        get("agent get (GET /agents/{id})", format!("{base}/agents/{agent}"), vec![("x-api-key", key.clone())]),
        Scenario {
            name: "a run, streamed whole (demo model)",
            method: http::Method::POST,
            url: format!("{runner}/execute/a2a/stream/agent"),
            headers: vec![("x-api-key", key.clone()), ("content-type", "application/json".into())],
            body: Some(json!({"agent_id": agent, "message": "What is on the agenda?"}).to_string()),
            concurrency: concurrency.min(4),
        },
    ];

    println!("make load: {seconds} s per scenario against {base} (runner {runner})");
    println!(
        "{:<36} {:>5} {:>8} {:>9} {:>9} {:>9}  statuses",
        "scenario", "conc", "req/s", "p50 ms", "p99 ms", "max ms"
    );
    for scenario in &scenarios {
        let outcome = run(&client, scenario, Duration::from_secs(seconds)).await;
        let mut latencies = outcome.latencies.clone();
        latencies.sort();
        let ms = |q: f64| percentile(&latencies, q).as_secs_f64() * 1000.0;
        let statuses: Vec<String> = outcome.statuses.iter().map(|(status, n)| format!("{status}×{n}")).collect();
        let failures = if outcome.failures > 0 { format!(" failed×{}", outcome.failures) } else { String::new() };
        println!(
            "{:<36} {:>5} {:>8.0} {:>9.2} {:>9.2} {:>9.2}  {}{failures}",
            scenario.name,
            scenario.concurrency,
            latencies.len() as f64 / outcome.elapsed.as_secs_f64(),
            ms(0.50),
            ms(0.99),
            ms(1.0),
            statuses.join(" "),
        );
        if outcome.statuses.contains_key(&429) {
            println!("  (429: the per-key rate limit; see the note at the top of benches/src/bin/load.rs)");
        }
    }
}

fn read_credentials() -> Value {
    let path = std::env::var("DEV_CREDENTIALS").unwrap_or_else(|_| ".local/dev-credentials.json".into());
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("{path}: {err}; start `make dev` first (it writes this file)"));
    serde_json::from_str(&text).unwrap_or_else(|err| panic!("{path}: {err}"))
}

async fn issue_token(client: &HttpClient, base: &str, form: &str) -> String {
    let request = http::Request::post(format!("{base}/api/auth/token/"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Full::new(Bytes::from(form.to_owned())))
        .expect("token request");
    let response = client.request(request).await.unwrap_or_else(|err| panic!("{base}: {err}; is `make dev` up?"));
    let body = response.into_body().collect().await.expect("token response").to_bytes();
    let body: Value = serde_json::from_slice(&body).unwrap_or_default();
    body["access_token"].as_str().unwrap_or_else(|| panic!("no token: {body}")).to_owned()
}

/// Keeps `scenario.concurrency` requests in flight for `duration`.
async fn run(client: &HttpClient, scenario: &Scenario, duration: Duration) -> Outcome {
    let started = Instant::now();
    let deadline = started + duration;
    let concurrency = scenario.concurrency;
    let scenario =
        Arc::new((scenario.method.clone(), scenario.url.clone(), scenario.headers.clone(), scenario.body.clone()));
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, scenario) = (client.clone(), Arc::clone(&scenario));
            tokio::spawn(async move {
                let mut outcome = Outcome::default();
                while Instant::now() < deadline {
                    let (method, url, headers, body) = &*scenario;
                    let mut request = http::Request::builder().method(method.clone()).uri(url.as_str());
                    for (name, value) in headers {
                        request = request.header(*name, value.as_str());
                    }
                    let body = Full::new(Bytes::from(body.clone().unwrap_or_default()));
                    let Ok(request) = request.body(body) else { break };
                    let sent = Instant::now();
                    match client.request(request).await {
                        Ok(response) => {
                            let status = response.status().as_u16();
                            // The whole body: a run's latency is its whole stream.
                            if response.into_body().collect().await.is_err() {
                                outcome.failures += 1;
                                continue;
                            }
                            outcome.latencies.push(sent.elapsed());
                            *outcome.statuses.entry(status).or_default() += 1;
                        }
                        Err(_) => outcome.failures += 1,
                    }
                }
                outcome
            })
        })
        .collect();
    let mut total = Outcome::default();
    for worker in workers {
        if let Ok(outcome) = worker.await {
            total.latencies.extend(outcome.latencies);
            total.failures += outcome.failures;
            for (status, count) in outcome.statuses {
                *total.statuses.entry(status).or_default() += count;
            }
        }
    }
    total.elapsed = started.elapsed();
    total
}

impl Default for Outcome {
    fn default() -> Self {
        Self { latencies: Vec::new(), statuses: BTreeMap::new(), failures: 0, elapsed: Duration::ZERO }
    }
}

fn percentile(sorted: &[Duration], quantile: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() - 1) as f64 * quantile).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}
