//! The lapin port's URI list (`[broker] uris`), against the real RabbitMQ reached through
//! TCP forwarders the test can kill: each forwarder stands for one node of a cluster. A node
//! that refuses or never answers is passed over within the connect bound; a node lost under a
//! live connection is left for the next one at once, as a new generation, and the port works
//! there as before.

use fleet_core::broker::{
    Binding, BrokerEvent, BrokerOp, Consume, Exchange, PublishId, PublishResult, QueueArgs,
    QueueSpec, Topology,
};
use fleetd::{AmqpBroker, AmqpConfig, BrokerPort};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// The broker's address, from `FLEET_AMQP_URI`'s host and port (default 127.0.0.1:5672).
fn broker_addr() -> String {
    let uri = std::env::var("FLEET_AMQP_URI")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_string());
    let rest = uri.split('@').next_back().unwrap_or("127.0.0.1:5672");
    let hostport = rest.split('/').next().unwrap_or("127.0.0.1:5672");
    if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:5672")
    }
}

fn uri(port: u16) -> String {
    format!("amqp://guest:guest@127.0.0.1:{port}/%2f")
}

/// A "node": forwards every connection to the broker until killed, then refuses.
struct Node {
    port: u16,
    tasks: JoinSet<()>,
}

impl Node {
    async fn start() -> Node {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("binding a forwarder: {e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        let mut tasks = JoinSet::new();
        let target = broker_addr();
        tasks.spawn(async move {
            let mut conns = JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                let target = target.clone();
                conns.spawn(async move {
                    if let Ok(mut out) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
            }
        });
        Node { port, tasks }
    }

    /// The node dies: its listener and every connection through it close at once.
    fn kill(&mut self) {
        self.tasks.abort_all();
    }
}

/// A port that accepts TCP and never says a word (a node hung mid-handshake).
async fn silent() -> (u16, JoinSet<()>) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    let mut tasks = JoinSet::new();
    tasks.spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    (port, tasks)
}

/// A port nothing listens on.
async fn refused() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    l.local_addr().map(|a| a.port()).unwrap_or_default()
}

async fn next(port: &mut AmqpBroker, secs: u64) -> BrokerEvent {
    tokio::time::timeout(Duration::from_secs(secs), port.next_event())
        .await
        .unwrap_or_else(|_| panic!("no broker event within {secs} s"))
        .unwrap_or_else(|| panic!("the port's task ended"))
}

async fn up(port: &mut AmqpBroker, secs: u64) -> u32 {
    loop {
        match next(port, secs).await {
            BrokerEvent::Up { generation } => return generation,
            BrokerEvent::Down => {}
            other => panic!("expected Up, got {other:?}"),
        }
    }
}

/// Declares a queue bound to `key`, consumes it, publishes `body` there, and returns what
/// came back: the publish's result and the delivered body.
async fn round_trip(port: &mut AmqpBroker, ns: &str, key: &str, body: &str) -> (bool, String) {
    let queue = format!("{ns}.failover");
    port.submit(BrokerOp::Declare(Topology {
        exchanges: Exchange::ALL.to_vec(),
        queues: vec![QueueSpec {
            name: queue.clone(),
            durable: false,
            exclusive: true,
            auto_delete: true,
            args: QueueArgs::default(),
        }],
        bindings: vec![Binding {
            queue: queue.clone(),
            exchange: Exchange::Msg,
            key: key.into(),
        }],
        consumers: vec![Consume {
            queue,
            exclusive: true,
            prefetch: 10,
        }],
    }));
    port.submit(BrokerOp::Publish {
        publish: PublishId(1),
        exchange: Exchange::Msg,
        key: key.into(),
        mandatory: true,
        persistent: false,
        headers: Default::default(),
        body: body.as_bytes().to_vec(),
    });
    let (mut routed, mut got) = (None, None);
    while routed.is_none() || got.is_none() {
        match next(port, 10).await {
            BrokerEvent::Published { result, .. } => routed = Some(result == PublishResult::Routed),
            BrokerEvent::Delivery { delivery, body, .. } => {
                got = Some(String::from_utf8_lossy(&body).into_owned());
                port.submit(BrokerOp::Ack { delivery });
            }
            other => panic!("during a round trip: {other:?}"),
        }
    }
    (routed.unwrap_or(false), got.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_that_refuse_or_never_answer_are_passed_over_within_the_connect_bound() {
    let (hung, _hold) = silent().await;
    let closed = refused().await;
    let live = Node::start().await;
    let ns = format!("fo{}a", std::process::id());
    let mut cfg = AmqpConfig::cluster(vec![uri(hung), uri(closed), uri(live.port)], &ns);
    cfg.connect_timeout = Duration::from_secs(1);
    cfg.backoff_max = Duration::from_secs(1);
    let mut port = AmqpBroker::start(cfg).unwrap_or_else(|e| panic!("{e}"));
    let status = port.status();
    // The hung node costs one connect bound, the closed one nothing: well within 10 s.
    let generation = up(&mut port, 10).await;
    assert_eq!(
        generation, 3,
        "one generation per attempt: hung, refused, live"
    );
    let node = status.borrow().node.clone().unwrap_or_default();
    assert_eq!(
        node,
        format!("amqp://guest:***@127.0.0.1:{}/%2f", live.port)
    );
    let last = status.borrow().last_error.clone().unwrap_or_default();
    assert!(last.contains(&closed.to_string()), "{last}");
    assert_eq!(
        round_trip(&mut port, &ns, "k", "hello").await,
        (true, "hello".into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_lost_under_a_live_connection_is_left_for_the_next_at_once() {
    let mut a = Node::start().await;
    let b = Node::start().await;
    let ns = format!("fo{}b", std::process::id());
    let mut cfg = AmqpConfig::cluster(vec![uri(a.port), uri(b.port)], &ns);
    // A backoff the test would notice: moving to the next node must not wait for it.
    cfg.backoff_min = Duration::from_secs(30);
    cfg.backoff_max = Duration::from_secs(30);
    let mut port = AmqpBroker::start(cfg).unwrap_or_else(|e| panic!("{e}"));
    let status = port.status();
    assert_eq!(up(&mut port, 10).await, 1);
    assert_eq!(
        round_trip(&mut port, &ns, "k1", "before").await,
        (true, "before".into())
    );

    a.kill();
    assert_eq!(next(&mut port, 30).await, BrokerEvent::Down);
    assert_eq!(
        up(&mut port, 10).await,
        2,
        "the next node, without the 30 s backoff"
    );
    let node = status.borrow().node.clone().unwrap_or_default();
    assert!(node.contains(&format!(":{}/", b.port)), "{node}");
    assert_eq!(
        round_trip(&mut port, &ns, "k2", "after").await,
        (true, "after".into())
    );
}

/// Publishes to one routing key that the broker keeps refusing (nacks) end the connection for
/// a new one at the third in a row; refusals are counted per key, so publishes to other keys
/// going through in between neither reset nor add to the count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_refused_publishes_to_one_key_start_a_new_connection() {
    let ns = format!("fo{}c", std::process::id());
    let mut port = AmqpBroker::start(AmqpConfig::new(&fleet_tests::gateways::amqp_uri(), &ns))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(up(&mut port, 10).await, 1);
    // A queue that refuses everything: empty cap, reject-publish (declared as any broker
    // client could; fleetd's own queues drop their head instead).
    let full = format!("{ns}.full");
    let conn = lapin::Connection::connect(
        &fleet_tests::gateways::amqp_uri(),
        lapin::ConnectionProperties::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let ch = conn
        .create_channel()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut args = lapin::types::FieldTable::default();
    args.insert(
        "x-max-length".into(),
        lapin::types::AMQPValue::LongLongInt(0),
    );
    args.insert(
        "x-overflow".into(),
        lapin::types::AMQPValue::LongString("reject-publish".into()),
    );
    let opts = lapin::options::QueueDeclareOptions {
        auto_delete: true,
        ..Default::default()
    };
    ch.queue_declare(full.as_str().into(), opts, args)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Bound to the message exchange (declared by the round trip's topology).
    assert_eq!(
        round_trip(&mut port, &ns, "k", "hello").await,
        (true, "hello".into())
    );
    ch.queue_bind(
        full.as_str().into(),
        format!("{ns}.msg").as_str().into(),
        "full".into(),
        Default::default(),
        Default::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));

    let publish = |n: u64, key: &str| BrokerOp::Publish {
        publish: PublishId(100 + n),
        exchange: Exchange::Msg,
        key: key.into(),
        mandatory: true,
        persistent: false,
        headers: Default::default(),
        body: b"x".to_vec(),
    };
    let mut results = Vec::new();
    for (n, key) in [(1, "full"), (2, "full"), (3, "k")] {
        port.submit(publish(n, key));
        loop {
            match next(&mut port, 10).await {
                BrokerEvent::Published { result, .. } => {
                    results.push((key, result));
                    break;
                }
                BrokerEvent::Delivery { delivery, .. } => {
                    port.submit(BrokerOp::Ack { delivery });
                }
                other => panic!("publish {n}: {other:?} (results so far {results:?})"),
            }
        }
    }
    assert!(
        matches!(
            &results[..],
            [
                (_, PublishResult::Failed(_)),
                (_, PublishResult::Failed(_)),
                (_, PublishResult::Routed),
            ]
        ),
        "two refusals and a publish elsewhere keep the connection: {results:?}"
    );
    // The third refusal to "full" ends the connection (the core fails what was unconfirmed).
    port.submit(publish(4, "full"));
    loop {
        match next(&mut port, 10).await {
            BrokerEvent::Down => break,
            BrokerEvent::Delivery { .. } => {}
            other => panic!("after the third refusal: {other:?}"),
        }
    }
    let why = port
        .status()
        .borrow()
        .last_error
        .clone()
        .unwrap_or_default();
    assert!(why.contains("refused by the broker"), "{why}");
    assert_eq!(up(&mut port, 10).await, 2);
    let _ = ch
        .queue_delete(full.as_str().into(), Default::default())
        .await;
    let _ = conn.close(200, "done".into()).await;
}
