//! `SimBroker` against the AMQP behaviours fleetd relies on, one scenario each. Issue 5's
//! conformance suite runs the same scenarios against RabbitMQ; a behaviour the model gets
//! wrong is a bug in the model.

use fleet_core::broker::{
    Binding, BrokerEvent, BrokerOp, Consume, DeliveryId, Exchange, PublishId, PublishResult,
    QueueArgs, QueueSpec, Topology,
};
use fleet_core::envelope::Headers;
use fleet_core::{Duration, Instant};
use fleet_sim::broker::{BrokerError, ConnId, SimBroker};

const A: ConnId = ConnId(1);
const B: ConnId = ConnId(2);

fn queue(name: &str, args: QueueArgs) -> QueueSpec {
    QueueSpec {
        name: name.into(),
        durable: true,
        exclusive: false,
        auto_delete: false,
        args,
    }
}

fn dlx_args() -> QueueArgs {
    QueueArgs {
        dead_letter_exchange: Some("t.dlx".into()),
        ..QueueArgs::default()
    }
}

/// The shared exchanges, a DLQ, and one inbox `q` bound to `key` with `args`.
fn setup(b: &mut SimBroker, conn: ConnId, key: &str, args: QueueArgs, consume: Option<u16>) {
    let mut t = Topology {
        exchanges: Exchange::ALL.to_vec(),
        queues: vec![queue("t.dlq", QueueArgs::default()), queue("t.q", args)],
        bindings: vec![
            Binding {
                queue: "t.dlq".into(),
                exchange: Exchange::Dlx,
                key: String::new(),
            },
            Binding {
                queue: "t.q".into(),
                exchange: Exchange::Msg,
                key: key.into(),
            },
        ],
        consumers: Vec::new(),
    };
    if let Some(prefetch) = consume {
        t.consumers.push(Consume {
            queue: "t.q".into(),
            exclusive: true,
            prefetch,
        });
    }
    b.apply(conn, BrokerOp::Declare(t)).expect("declare");
}

fn publish(
    b: &mut SimBroker,
    conn: ConnId,
    key: &str,
    body: &str,
    persistent: bool,
) -> PublishResult {
    b.apply(
        conn,
        BrokerOp::Publish {
            publish: PublishId(7),
            exchange: Exchange::Msg,
            key: key.into(),
            mandatory: true,
            persistent,
            headers: Headers::new(),
            body: body.as_bytes().to_vec(),
        },
    )
    .expect("publish");
    let mut result = None;
    let mut rest = Vec::new();
    while let Some((c, ev)) = b.poll_event() {
        match ev {
            BrokerEvent::Published { result: r, .. } if c == conn => result = Some(r),
            other => rest.push((c, other)),
        }
    }
    for (c, ev) in rest {
        // keep deliveries for the caller: re-queue them through a fresh drain
        PENDING.with(|p| p.borrow_mut().push((c, ev)));
    }
    result.expect("a confirm")
}

thread_local! {
    static PENDING: std::cell::RefCell<Vec<(ConnId, BrokerEvent)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Every delivery so far: (conn, body, redelivered, delivery id).
fn deliveries(b: &mut SimBroker) -> Vec<(ConnId, String, bool, DeliveryId)> {
    let mut evs: Vec<(ConnId, BrokerEvent)> = PENDING.with(|p| p.borrow_mut().drain(..).collect());
    while let Some(e) = b.poll_event() {
        evs.push(e);
    }
    evs.into_iter()
        .filter_map(|(c, ev)| match ev {
            BrokerEvent::Delivery {
                delivery,
                redelivered,
                body,
                ..
            } => Some((
                c,
                String::from_utf8_lossy(&body).into_owned(),
                redelivered,
                delivery,
            )),
            _ => None,
        })
        .collect()
}

fn fresh() -> SimBroker {
    PENDING.with(|p| p.borrow_mut().clear());
    let mut b = SimBroker::new("t");
    b.connect(A);
    b.connect(B);
    b
}

#[test]
fn routing_by_key_and_by_topic_wildcard() {
    let mut b = fresh();
    setup(&mut b, A, "g1", QueueArgs::default(), Some(10));
    assert_eq!(
        publish(&mut b, A, "g1", "direct", false),
        PublishResult::Routed
    );
    assert_eq!(
        publish(&mut b, A, "g2", "other", false),
        PublishResult::Unroutable
    );
    b.apply(
        A,
        BrokerOp::Declare(Topology {
            bindings: vec![Binding {
                queue: "t.q".into(),
                exchange: Exchange::Msg,
                key: "broadcast.*".into(),
            }],
            ..Topology::default()
        }),
    )
    .expect("bind");
    assert_eq!(
        publish(&mut b, A, "broadcast.all", "fan", false),
        PublishResult::Routed
    );
    let got: Vec<String> = deliveries(&mut b).into_iter().map(|d| d.1).collect();
    assert_eq!(got, vec!["direct", "fan"]);
}

#[test]
fn a_second_exclusive_consumer_is_refused() {
    let mut b = fresh();
    setup(&mut b, A, "g1", QueueArgs::default(), Some(10));
    let second = b.apply(
        B,
        BrokerOp::Declare(Topology {
            consumers: vec![Consume {
                queue: "t.q".into(),
                exclusive: true,
                prefetch: 10,
            }],
            ..Topology::default()
        }),
    );
    assert!(
        matches!(second, Err(BrokerError::AccessRefused(_))),
        "{second:?}"
    );
}

#[test]
fn prefetch_bounds_what_a_consumer_holds() {
    let mut b = fresh();
    setup(&mut b, A, "g1", QueueArgs::default(), Some(2));
    for i in 0..5 {
        publish(&mut b, A, "g1", &format!("m{i}"), false);
    }
    let first = deliveries(&mut b);
    assert_eq!(first.len(), 2);
    assert_eq!(b.depth("t.q"), Some(3));
    b.apply(
        A,
        BrokerOp::Ack {
            delivery: first[0].3,
        },
    )
    .expect("ack");
    let next = deliveries(&mut b);
    assert_eq!(
        next.iter().map(|d| d.1.as_str()).collect::<Vec<_>>(),
        vec!["m2"]
    );
}

#[test]
fn unacked_deliveries_are_requeued_redelivered_when_the_connection_dies() {
    let mut b = fresh();
    setup(&mut b, A, "g1", QueueArgs::default(), Some(10));
    publish(&mut b, A, "g1", "one", false);
    publish(&mut b, A, "g1", "two", false);
    let got = deliveries(&mut b);
    assert_eq!(got.len(), 2);
    b.disconnect(A);
    let generation = b.connect(A);
    setup(&mut b, A, "g1", QueueArgs::default(), Some(10));
    let again = deliveries(&mut b);
    assert_eq!(
        again
            .iter()
            .map(|d| (d.1.as_str(), d.2))
            .collect::<Vec<_>>(),
        vec![("one", true), ("two", true)]
    );
    assert!(again.iter().all(|d| d.3.generation == generation));
    // An ack with a tag of the dead connection is refused.
    let stale = b.apply(A, BrokerOp::Ack { delivery: got[0].3 });
    assert!(matches!(stale, Err(BrokerError::UnknownDelivery(_))));
}

#[test]
fn reject_without_requeue_dead_letters() {
    let mut b = fresh();
    setup(&mut b, A, "g1", dlx_args(), Some(10));
    publish(&mut b, A, "g1", "poison", false);
    let d = deliveries(&mut b);
    b.apply(A, BrokerOp::Reject { delivery: d[0].3 })
        .expect("reject");
    assert_eq!(b.depth("t.dlq"), Some(1));
    assert_eq!(b.dead_lettered, 1);
}

#[test]
fn max_length_overflow_and_message_ttl_dead_letter() {
    let mut b = fresh();
    setup(
        &mut b,
        A,
        "g1",
        QueueArgs {
            max_length: Some(2),
            message_ttl_ms: Some(1_000),
            ..dlx_args()
        },
        None,
    );
    for i in 0..3 {
        publish(&mut b, A, "g1", &format!("m{i}"), false);
    }
    assert_eq!(b.depth("t.q"), Some(2), "drop-head");
    assert_eq!(b.depth("t.dlq"), Some(1));
    b.tick(Instant::from_millis(1_001));
    assert_eq!(b.depth("t.q"), Some(0), "expired");
    assert_eq!(b.depth("t.dlq"), Some(3));
}

#[test]
fn an_unused_queue_expires() {
    let mut b = fresh();
    setup(
        &mut b,
        A,
        "g1",
        QueueArgs {
            expires_ms: Some(5_000),
            ..QueueArgs::default()
        },
        None,
    );
    b.tick(Instant::from_millis(4_999));
    assert!(b.has_queue("t.q"));
    b.tick(Instant::ZERO + Duration::from_secs(5));
    assert!(!b.has_queue("t.q"));
    assert_eq!(
        publish(&mut b, A, "g1", "late", false),
        PublishResult::Unroutable
    );
}

#[test]
fn durable_state_survives_a_restart_and_transient_state_does_not() {
    let mut b = fresh();
    setup(&mut b, A, "g1", QueueArgs::default(), None);
    b.apply(
        A,
        BrokerOp::Declare(Topology {
            queues: vec![QueueSpec {
                name: "t.roster.a".into(),
                durable: false,
                exclusive: true,
                auto_delete: true,
                args: QueueArgs::default(),
            }],
            ..Topology::default()
        }),
    )
    .expect("declare");
    publish(&mut b, A, "g1", "kept", true);
    publish(&mut b, A, "g1", "lost", false);
    b.restart();
    assert!(!b.has_queue("t.roster.a"));
    assert_eq!(b.depth("t.q"), Some(1));
    b.connect(A);
    setup(&mut b, A, "g1", QueueArgs::default(), Some(10));
    let got: Vec<String> = deliveries(&mut b).into_iter().map(|d| d.1).collect();
    assert_eq!(got, vec!["kept"]);
}

#[test]
fn redeclaring_with_other_arguments_is_a_precondition_failure() {
    let mut b = fresh();
    setup(&mut b, A, "g1", QueueArgs::default(), None);
    let again = b.apply(
        A,
        BrokerOp::Declare(Topology {
            queues: vec![queue("t.q", dlx_args())],
            ..Topology::default()
        }),
    );
    assert!(matches!(again, Err(BrokerError::PreconditionFailed(_))));
}
