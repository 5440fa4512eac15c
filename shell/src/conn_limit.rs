//! A bound on the north face's open connections. Every blocking `fleet_send` holds one for up
//! to its timeout, and a member or a local process could open thousands; past the bound a new
//! connection is accepted and closed at once (counted and logged), so the daemon's memory and
//! file descriptors stay bounded and the ones already open are served.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A listener (TCP for the faces, Unix for members' relays) that holds at most `max`
/// connections open.
pub struct Limited<L = TcpListener> {
    inner: L,
    open: Arc<Semaphore>,
    max: usize,
    /// Called for each connection refused at the bound.
    on_refused: Box<dyn Fn() + Send + Sync>,
}

impl<L> Limited<L> {
    pub fn new(inner: L, max: usize, on_refused: impl Fn() + Send + Sync + 'static) -> Self {
        Limited {
            inner,
            open: Arc::new(Semaphore::new(max)),
            max,
            on_refused: Box::new(on_refused),
        }
    }
}

/// The peer of a connection (what `ConnectInfo` carries for the faces).
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub SocketAddr);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, Limited>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, Limited>) -> Self {
        Peer(*stream.remote_addr())
    }
}

/// An accepted connection and its place under the bound, released when it closes.
pub struct Held<Io = TcpStream> {
    io: Io,
    _permit: OwnedSemaphorePermit,
}

impl<L> axum::serve::Listener for Limited<L>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    type Io = Held<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Held<L::Io>, L::Addr) {
        loop {
            // axum's listeners log and retry their own accept errors.
            let (io, addr) = self.inner.accept().await;
            match self.open.clone().try_acquire_owned() {
                Ok(permit) => {
                    return (
                        Held {
                            io,
                            _permit: permit,
                        },
                        addr,
                    )
                }
                Err(_) => {
                    (self.on_refused)();
                    tracing::warn!(
                        ?addr,
                        max = self.max,
                        "refused a connection: this listener holds its maximum open"
                    );
                    drop(io);
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<L::Addr> {
        self.inner.local_addr()
    }
}

impl<Io: AsyncRead + Unpin> AsyncRead for Held<Io> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<Io: AsyncWrite + Unpin> AsyncWrite for Held<Io> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn past_the_bound_a_connection_is_closed_and_one_freed_makes_room() {
        let inner = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = inner.local_addr().expect("addr");
        let refused = Arc::new(AtomicUsize::new(0));
        let counted = refused.clone();
        let mut l = Limited::new(inner, 1, move || {
            counted.fetch_add(1, Ordering::Relaxed);
        });
        use axum::serve::Listener;
        let _a = TcpStream::connect(addr).await.expect("a");
        let (held_a, _) = l.accept().await;
        // At the bound: the next one is closed at once, and accept goes on waiting.
        let mut c = TcpStream::connect(addr).await.expect("c");
        let waited = tokio::time::timeout(std::time::Duration::from_millis(300), l.accept()).await;
        assert!(waited.is_err(), "no connection was taken past the bound");
        let mut byte = [0u8; 1];
        assert_eq!(c.read(&mut byte).await.ok(), Some(0), "closed");
        // One closed makes room for the next.
        drop(held_a);
        let d = TcpStream::connect(addr).await.expect("d");
        let (_held_d, peer) = l.accept().await;
        assert_eq!(Some(peer), d.local_addr().ok());
        assert_eq!(refused.load(Ordering::Relaxed), 1);
    }
}
