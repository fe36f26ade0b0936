//! Nagle's algorithm off on the connection to the Lambda Runtime API.
//!
//! `lambda_runtime` reaches the Runtime API through a hyper connector it builds itself, with
//! `TCP_NODELAY` off, and gives no way to change it. A streamed response is written in pieces
//! (the prelude, an 8-byte separator, then each body frame), and with Nagle on every piece after
//! the first waits for the previous one's ACK, which the Runtime API delays by ~40 ms: measured
//! by `make bench`'s cold start as 40 ms between a stream's last byte and the end of its response,
//! and events of a run held back in 40 ms batches. Buffered responses go out in one write and are
//! not affected.
//!
//! The fix turns `TCP_NODELAY` on for every socket of this process connected to the Runtime API,
//! once per invocation before the response is sent. The runtime's pool keeps one connection and
//! reuses it for the answer, so the answer goes out with Nagle off; a connection the pool opens
//! anew is fixed on the next invocation.

use std::mem::ManuallyDrop;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{FromRawFd, RawFd};

/// The Runtime API's address from `AWS_LAMBDA_RUNTIME_API` (`host:port`, an IP in Lambda).
pub fn runtime_api_address() -> Option<SocketAddr> {
    std::env::var("AWS_LAMBDA_RUNTIME_API").ok()?.parse().ok()
}

/// Turns `TCP_NODELAY` on for every socket of this process connected to `peer` that has it
/// off, and returns how many it changed. Costs one `getpeername` per open descriptor.
pub fn set_nodelay_toward(peer: SocketAddr) -> usize {
    let mut changed = 0;
    for_each_socket_toward(peer, |socket| {
        if socket.nodelay().is_ok_and(|on| !on) && socket.set_nodelay(true).is_ok() {
            changed += 1;
        }
    });
    changed
}

/// Whether `TCP_NODELAY` is on, for each socket of this process connected to `peer`.
pub fn nodelay_toward(peer: SocketAddr) -> Vec<bool> {
    let mut settings = Vec::new();
    for_each_socket_toward(peer, |socket| settings.push(socket.nodelay().unwrap_or(false)));
    settings
}

fn for_each_socket_toward(peer: SocketAddr, mut action: impl FnMut(&TcpStream)) {
    let Ok(descriptors) = std::fs::read_dir("/proc/self/fd") else { return };
    for entry in descriptors.flatten() {
        let Some(fd) = entry.file_name().to_str().and_then(|name| name.parse::<RawFd>().ok()) else { continue };
        // SAFETY: the descriptor is borrowed, never closed (ManuallyDrop), and only asked for
        // its peer and given a socket option; on a descriptor that is not a socket, or that was
        // closed since it was listed, both calls fail and nothing happens.
        let socket = ManuallyDrop::new(unsafe { TcpStream::from_raw_fd(fd) });
        if socket.peer_addr().is_ok_and(|address| address == peer) {
            action(&socket);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn only_sockets_toward_the_peer_get_nodelay() {
        let runtime_api = TcpListener::bind("127.0.0.1:0").unwrap();
        let elsewhere = TcpListener::bind("127.0.0.1:0").unwrap();
        let to_runtime = TcpStream::connect(runtime_api.local_addr().unwrap()).unwrap();
        let to_elsewhere = TcpStream::connect(elsewhere.local_addr().unwrap()).unwrap();
        assert!(!to_runtime.nodelay().unwrap() && !to_elsewhere.nodelay().unwrap());

        assert_eq!(nodelay_toward(runtime_api.local_addr().unwrap()), vec![false]);
        assert_eq!(set_nodelay_toward(runtime_api.local_addr().unwrap()), 1);
        assert!(to_runtime.nodelay().unwrap());
        assert_eq!(nodelay_toward(runtime_api.local_addr().unwrap()), vec![true]);
        assert!(!to_elsewhere.nodelay().unwrap());
        // Already on: nothing left to change, and the descriptors are still open and usable.
        assert_eq!(set_nodelay_toward(runtime_api.local_addr().unwrap()), 0);
        assert!(to_runtime.peer_addr().is_ok() && to_elsewhere.peer_addr().is_ok());
    }

    #[test]
    fn no_socket_toward_the_peer_changes_nothing() {
        let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        assert_eq!(set_nodelay_toward(closed), 0);
    }
}
