//! A TCP proxy in front of the local AWS endpoint, for the cold-start bench's split of a
//! request into AWS time and the function's own.

use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A TCP proxy in front of the local AWS endpoint that records when each exchange was under
/// way (from the request's first byte to the answer's last), so a figure can be split into the
/// time spent waiting on AWS and the function's own.
pub struct AwsProxy {
    pub address: std::net::SocketAddr,
    exchanges: Arc<Mutex<Vec<(Instant, Instant)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl AwsProxy {
    /// Proxies to `upstream` (`host:port`).
    pub async fn start(upstream: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a local port");
        let address = listener.local_addr().expect("local address");
        let exchanges = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&exchanges);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (upstream, recorded) = (upstream.clone(), Arc::clone(&recorded));
                tokio::spawn(async move {
                    if let Some(exchange) = relay(client, &upstream).await
                        && let Ok(mut exchanges) = recorded.lock()
                    {
                        exchanges.push(exchange);
                    }
                });
            }
        });
        Self { address, exchanges, task }
    }

    /// How long, between `from` and `to`, at least one exchange with AWS was under way.
    pub fn busy_between(&self, from: Instant, to: Instant) -> std::time::Duration {
        let mut spans: Vec<(Instant, Instant)> = self
            .exchanges
            .lock()
            .map(|exchanges| exchanges.iter().map(|&(start, end)| (start.max(from), end.min(to))).collect())
            .unwrap_or_default();
        spans.retain(|(start, end)| start < end);
        spans.sort();
        let mut busy = std::time::Duration::ZERO;
        let mut covered: Option<(Instant, Instant)> = None;
        for (start, end) in spans {
            covered = match covered {
                Some((s, e)) if start <= e => Some((s, e.max(end))),
                Some((s, e)) => {
                    busy += e - s;
                    Some((start, end))
                }
                None => Some((start, end)),
            };
        }
        busy + covered.map(|(s, e)| e - s).unwrap_or_default()
    }
}

impl Drop for AwsProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies one connection both ways; each connection carries one exchange at a time, and moto
/// closes it after each answer. Returns when the exchange started and ended.
///
/// The exchange starts with the request's first byte, read before the proxy connects to the
/// endpoint: that connection is the proxy's own overhead (in AWS it would be part of the network
/// path), so it counts as AWS time, not as the function's.
async fn relay(client: tokio::net::TcpStream, upstream: &str) -> Option<(Instant, Instant)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut client_read, mut client_write) = client.into_split();
    let mut buffer = vec![0u8; 16 * 1024];
    let first = client_read.read(&mut buffer).await.ok().filter(|read| *read > 0)?;
    let started = Instant::now();
    let server = tokio::net::TcpStream::connect(upstream).await.ok()?;
    let (mut server_read, mut server_write) = server.into_split();
    server_write.write_all(&buffer[..first]).await.ok()?;
    let requests = tokio::spawn(async move {
        while let Ok(read) = client_read.read(&mut buffer).await {
            if read == 0 || server_write.write_all(&buffer[..read]).await.is_err() {
                break;
            }
        }
        let _ = server_write.shutdown().await;
    });
    let mut buffer = vec![0u8; 16 * 1024];
    let mut ended = None;
    while let Ok(read) = server_read.read(&mut buffer).await {
        if read == 0 || client_write.write_all(&buffer[..read]).await.is_err() {
            break;
        }
        ended = Some(Instant::now());
    }
    let _ = client_write.shutdown().await;
    requests.abort();
    Some((started, ended?))
}
