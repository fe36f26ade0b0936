//! One REST API of the dev server on a free loopback port, served over HTTP as `make dev` serves
//! it, for tests whose client speaks HTTP itself (a browser, a Python client, a raw socket).

use std::net::SocketAddr;

/// A dev server API listening on `address` until `stop` (or drop, which stops it without waiting).
pub struct ServedApi {
    pub address: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl ServedApi {
    pub async fn start(router: dev_server::Router) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a free loopback port");
        let address = listener.local_addr().expect("a bound listener has an address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(dev_server::serve(listener, router, async {
            let _ = stopped.await;
        }));
        Self { address, stop: Some(stop), server: Some(server) }
    }

    /// `http://127.0.0.1:{port}`, without a trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Stops accepting connections and waits for the server loop to end.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            server.await.expect("the dev server loop does not panic");
        }
    }
}

impl Drop for ServedApi {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
