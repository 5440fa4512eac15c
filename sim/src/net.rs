//! `SimBroker` on its own turmoil host, reached over turmoil TCP: a small framed protocol (a
//! 4-byte big-endian length, then postcard), a broker host that serves one `ConnId` per
//! connection, and `SimBrokerClient`, the gateway's `BrokerPort`, which reconnects with backoff
//! and reports each connection as a new generation. Heartbeats both ways detect a partition:
//! turmoil's TCP never times out on its own.

use crate::broker::{ConnId, SimBroker};
use fleet_core::broker::{BrokerEvent, BrokerOp, PublishId};
use fleet_core::Instant;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::rc::Rc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use turmoil::net::{TcpListener, TcpStream};

/// The port the simulated broker listens on.
pub const PORT: u16 = 5672;
/// How often each side proves it is alive; three missed beats end the connection.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
const MAX_FRAME: u32 = 16 * 1024 * 1024;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ToBroker {
    Op(BrokerOp),
    Ping,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum FromBroker {
    /// The connection is open; its deliveries carry this generation.
    Welcome {
        generation: u32,
    },
    Event(BrokerEvent),
    /// A channel error (AMQP would close the channel): the connection is closed after it.
    Error(String),
    Pong,
}

async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(
    w: &mut W,
    msg: &T,
) -> std::io::Result<()> {
    let bytes = postcard::to_stdvec(msg).map_err(std::io::Error::other)?;
    let len = u32::try_from(bytes.len()).map_err(std::io::Error::other)?;
    w.write_all(&len.to_be_bytes()).await?;
    w.write_all(&bytes).await?;
    w.flush().await
}

async fn read_frame<R: AsyncRead + Unpin, T: for<'de> Deserialize<'de>>(
    r: &mut R,
) -> std::io::Result<T> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len);
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!("frame of {len} bytes")));
    }
    let mut buf = vec![0u8; len as usize];
    r.read_exact(&mut buf).await?;
    postcard::from_bytes(&buf).map_err(std::io::Error::other)
}

type Outboxes = Rc<RefCell<BTreeMap<ConnId, mpsc::UnboundedSender<FromBroker>>>>;

/// Hands every pending broker event to its connection's writer.
fn dispatch(broker: &RefCell<SimBroker>, outboxes: &Outboxes) {
    loop {
        let next = broker.borrow_mut().poll_event();
        let Some((conn, ev)) = next else { break };
        if let Some(tx) = outboxes.borrow().get(&conn) {
            let _ = tx.send(FromBroker::Event(ev));
        }
    }
}

/// The broker host's program: serve `broker` until the host is crashed. `broker` outlives the
/// host (it is the broker's disk): a bounced host comes back with only its durable state.
pub async fn serve(broker: Rc<RefCell<SimBroker>>) -> turmoil::Result {
    broker.borrow_mut().restart();
    let listener = TcpListener::bind((IpAddr::V4(Ipv4Addr::UNSPECIFIED), PORT)).await?;
    let outboxes: Outboxes = Rc::new(RefCell::new(BTreeMap::new()));
    let started = tokio::time::Instant::now();
    {
        // Time passes for the broker too: TTLs, x-expires, deliveries after them.
        let (broker, outboxes) = (broker.clone(), outboxes.clone());
        tokio::task::spawn_local(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                broker.borrow_mut().tick(Instant::from_millis(ms));
                dispatch(&broker, &outboxes);
            }
        });
    }
    let mut next = 0u32;
    loop {
        let (stream, _) = listener.accept().await?;
        next += 1;
        let conn = ConnId(next);
        tokio::task::spawn_local(serve_conn(conn, stream, broker.clone(), outboxes.clone()));
    }
}

async fn serve_conn(
    conn: ConnId,
    stream: TcpStream,
    broker: Rc<RefCell<SimBroker>>,
    outboxes: Outboxes,
) {
    let (mut rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<FromBroker>();
    outboxes.borrow_mut().insert(conn, tx.clone());
    let generation = broker.borrow_mut().connect(conn);
    let _ = tx.send(FromBroker::Welcome { generation });
    let writer = tokio::task::spawn_local(async move {
        while let Some(msg) = rx.recv().await {
            if write_frame(&mut wr, &msg).await.is_err() {
                break;
            }
        }
    });
    loop {
        let frame = tokio::time::timeout(HEARTBEAT * 3, read_frame::<_, ToBroker>(&mut rd)).await;
        match frame {
            Ok(Ok(ToBroker::Op(op))) => {
                let result = broker.borrow_mut().apply(conn, op);
                dispatch(&broker, &outboxes);
                if let Err(e) = result {
                    let _ = tx.send(FromBroker::Error(e.to_string()));
                    break;
                }
            }
            Ok(Ok(ToBroker::Ping)) => {
                let _ = tx.send(FromBroker::Pong);
            }
            // A closed socket, garbage, or three missed heartbeats (a partition).
            Ok(Err(_)) | Err(_) => break,
        }
    }
    outboxes.borrow_mut().remove(&conn);
    broker.borrow_mut().disconnect(conn);
    dispatch(&broker, &outboxes);
    // Let a final error frame go out before the socket closes.
    tokio::time::sleep(Duration::from_millis(1)).await;
    writer.abort();
}

/// A gateway's `BrokerPort` onto the simulated broker host.
pub struct SimBrokerClient {
    ops: mpsc::UnboundedSender<BrokerOp>,
    events: mpsc::UnboundedReceiver<BrokerEvent>,
}

impl SimBrokerClient {
    /// Starts the connection manager (on the current turmoil host) for `host`'s broker.
    pub fn start(host: &'static str) -> SimBrokerClient {
        let (ops, ops_rx) = mpsc::unbounded_channel();
        let (events_tx, events) = mpsc::unbounded_channel();
        tokio::task::spawn_local(manage(host, ops_rx, events_tx));
        SimBrokerClient { ops, events }
    }
}

impl fleetd::BrokerPort for SimBrokerClient {
    fn submit(&mut self, op: BrokerOp) {
        let _ = self.ops.send(op);
    }

    fn next_event(&mut self) -> impl std::future::Future<Output = Option<BrokerEvent>> {
        self.events.recv()
    }
}

/// Connect, announce `Up`, shuttle frames until the connection dies, announce `Down`, back
/// off, repeat. Operations queued while no connection is up are dropped: their delivery tags
/// belong to a dead generation, and the core publishes nothing while the broker is down.
async fn manage(
    host: &'static str,
    mut ops: mpsc::UnboundedReceiver<BrokerOp>,
    events: mpsc::UnboundedSender<BrokerEvent>,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        // Bounded, like every wait on the link: nothing on a cut link may wait forever.
        let connect = tokio::time::timeout(HEARTBEAT * 3, TcpStream::connect((host, PORT))).await;
        if let Ok(Ok(stream)) = connect {
            backoff = Duration::from_millis(100);
            let (mut rd, mut wr) = stream.into_split();
            let (frames_tx, mut frames) = mpsc::unbounded_channel::<FromBroker>();
            let reader = tokio::task::spawn_local(async move {
                while let Ok(f) = read_frame::<_, FromBroker>(&mut rd).await {
                    if frames_tx.send(f).is_err() {
                        break;
                    }
                }
            });
            let welcome = tokio::time::timeout(HEARTBEAT * 3, frames.recv()).await;
            if let Ok(Some(FromBroker::Welcome { generation })) = welcome {
                while ops.try_recv().is_ok() {} // stale: from before this connection
                let _ = events.send(BrokerEvent::Up { generation });
                let mut beat = tokio::time::interval(HEARTBEAT);
                let mut last_heard = tokio::time::Instant::now();
                // Publishes awaiting their confirm, with when they went out. Turmoil's TCP has
                // no retransmission, so a short cut toward the broker breaks the stream for
                // good; heartbeats alone would notice only after the broker's own bound and
                // then ours (4 x 5, seed 52: a send failed for the broker after 10.8 s, behind
                // a write that blocked 6 s). A confirm not back within the dead-peer bound
                // means the link is dead, and no write may wait past that moment.
                let mut unconfirmed: BTreeMap<PublishId, tokio::time::Instant> = BTreeMap::new();
                loop {
                    let due = unconfirmed
                        .values()
                        .min()
                        .copied()
                        .map_or(last_heard, |at| at.min(last_heard));
                    tokio::select! {
                        biased;
                        f = frames.recv() => match f {
                            Some(FromBroker::Event(ev)) => {
                                last_heard = tokio::time::Instant::now();
                                if let BrokerEvent::Published { publish, .. } = &ev {
                                    unconfirmed.remove(publish);
                                }
                                let _ = events.send(ev);
                            }
                            Some(FromBroker::Pong) | Some(FromBroker::Welcome { .. }) => last_heard = tokio::time::Instant::now(),
                            Some(FromBroker::Error(_)) | None => break,
                        },
                        // Writes are bounded too: after a one-way cut toward the broker a write
                        // was seen never to return, which kept this loop from ever checking its
                        // heartbeats (the 3 x 10 grid, seed 4).
                        op = ops.recv() => match op {
                            Some(op) => {
                                if let BrokerOp::Publish { publish, .. } = &op {
                                    unconfirmed.insert(*publish, tokio::time::Instant::now());
                                }
                                if !wrote(&mut wr, &ToBroker::Op(op), left(due)).await { break }
                            }
                            None => return,
                        },
                        _ = beat.tick() => {
                            if due.elapsed() > HEARTBEAT * 3 || !wrote(&mut wr, &ToBroker::Ping, left(due)).await {
                                break;
                            }
                        }
                    }
                }
                let _ = events.send(BrokerEvent::Down);
            }
            reader.abort();
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// What is left of the dead-peer bound (three heartbeats) counted from `since`.
fn left(since: tokio::time::Instant) -> Duration {
    (HEARTBEAT * 3)
        .saturating_sub(since.elapsed())
        .max(Duration::from_millis(1))
}

/// Writes one frame within `bound`; false if it failed or could not finish.
async fn wrote<W: tokio::io::AsyncWrite + Unpin>(
    wr: &mut W,
    frame: &ToBroker,
    bound: Duration,
) -> bool {
    matches!(
        tokio::time::timeout(bound, write_frame(wr, frame)).await,
        Ok(Ok(()))
    )
}
