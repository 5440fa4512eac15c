//! Serving the faces (and the members' relay socket) over HTTP/1 with a header-read bound.
//! `axum::serve` gives hyper no timer, so a connection that never finishes a request head —
//! or sits idle between requests — is held for ever: a local process, or a host-network
//! member, could take every place under `max_connections` and keep leads out. Here hyper
//! gets tokio's timer and `header_read_timeout`: a connection must deliver each request's
//! head within the bound (counted from when the server waits for it), else it is closed. A
//! request in progress — a blocking `fleet_send` waiting hours for its reply, an SSE stream —
//! is never cut by it.

use crate::conn_limit::{Limited, Peer};
use axum::extract::ConnectInfo;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower_service::Service;

/// Serves `router` on `listener` until `cancel`, then lets every open connection finish its
/// request in flight (graceful shutdown) and returns. `peer_of` names the connection's peer
/// for `ConnectInfo<Peer>` (the faces'); `None` for a listener whose peers have no address.
pub async fn serve<L>(
    mut listener: Limited<L>,
    router: Router,
    header_read_timeout: Duration,
    peer_of: fn(&L::Addr) -> Option<Peer>,
    cancel: CancellationToken,
) where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let mut conns = JoinSet::new();
    loop {
        let (io, addr) = tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            accepted = axum::serve::Listener::accept(&mut listener) => accepted,
            // Finished connections are reaped as they go, so the set stays as large as what
            // is open.
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let peer = peer_of(&addr);
        let router = router.clone();
        let svc =
            hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                if let Some(p) = peer {
                    req.extensions_mut().insert(ConnectInfo(p));
                }
                let mut router = router.clone();
                async move { router.call(req.map(axum::body::Body::new)).await }
            });
        let cancel = cancel.clone();
        conns.spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_read_timeout);
            let conn = builder
                .serve_connection(TokioIo::new(io), svc)
                .with_upgrades();
            tokio::pin!(conn);
            let served = tokio::select! {
                biased;
                r = conn.as_mut() => r,
                _ = cancel.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = served {
                tracing::debug!(%e, "a connection ended with an error");
            }
        });
    }
    while conns.join_next().await.is_some() {}
}

/// The faces' peer: its socket address.
pub fn tcp_peer(addr: &std::net::SocketAddr) -> Option<Peer> {
    Some(Peer(*addr))
}

/// The relay socket's peers have no address.
pub fn no_peer<A>(_: &A) -> Option<Peer> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    /// Reads until the server closes the connection (or 10 s pass): what it sent.
    async fn until_closed(s: &mut TcpStream) -> Option<String> {
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got)).await;
        read.ok()
            .map(|_| String::from_utf8_lossy(&got).into_owned())
    }

    /// A connection that sends nothing, one that dribbles half a head, and one kept alive
    /// after its answer are each closed at the bound; a request whose answer takes several
    /// times the bound is answered all the same.
    #[tokio::test]
    async fn idle_connections_are_closed_and_slow_answers_are_not() {
        let inner = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = inner.local_addr().expect("addr");
        let router = Router::new().route(
            "/slow",
            axum::routing::get(|| async {
                tokio::time::sleep(Duration::from_millis(1_500)).await;
                "done"
            }),
        );
        let cancel = CancellationToken::new();
        let server = tokio::spawn(serve(
            Limited::new(inner, 8, || {}),
            router,
            Duration::from_millis(300),
            tcp_peer,
            cancel.clone(),
        ));

        let mut silent = TcpStream::connect(addr).await.expect("connect");
        assert!(
            until_closed(&mut silent).await.is_some(),
            "a silent one stays open"
        );

        let mut dribbling = TcpStream::connect(addr).await.expect("connect");
        dribbling
            .write_all(b"GET /slow HTTP/1.1\r\nHo")
            .await
            .expect("write");
        assert!(
            until_closed(&mut dribbling).await.is_some(),
            "a dribbling one stays open"
        );

        let mut slow = TcpStream::connect(addr).await.expect("connect");
        slow.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("write");
        let answer = until_closed(&mut slow).await.expect("kept alive for ever");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("done"), "{answer}");

        cancel.cancel();
        assert!(tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .is_ok());
    }
}
