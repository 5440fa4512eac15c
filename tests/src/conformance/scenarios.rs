//! The scenarios. Each names the broker behaviour fleetd relies on and where (ch. 10 §8).
//! They run once with classic queues and once with quorum ones (as a gateway with
//! `queue_type = "quorum"` declares them); the few where the types differ say so.

use super::{Client, Scenario, Step};
use fleet_core::broker::{
    Binding, Consume, Exchange, Names, QueueArgs, QueueSpec, QueueType, Topology,
};

struct Ns(Names, QueueType);

impl Ns {
    fn q(&self, local: &str) -> String {
        format!("{}.{local}", self.0.namespace)
    }

    fn dlx(&self) -> Option<String> {
        Some(self.0.exchange(Exchange::Dlx))
    }

    /// A durable queue with `args` of the suite's type, and nothing else.
    fn queue(&self, local: &str, args: QueueArgs) -> QueueSpec {
        QueueSpec {
            name: self.q(local),
            durable: true,
            exclusive: false,
            auto_delete: false,
            args: args.with_type(self.1),
        }
    }

    /// The shared exchanges and the capped DLQ behind the dead-letter fanout.
    fn base(&self) -> Topology {
        Topology {
            exchanges: Exchange::ALL.to_vec(),
            queues: vec![self.queue(
                "dlq",
                QueueArgs {
                    max_length: Some(100),
                    ..QueueArgs::default()
                },
            )],
            bindings: vec![self.bind("dlq", Exchange::Dlx, "")],
            consumers: vec![],
        }
    }

    fn bind(&self, local: &str, exchange: Exchange, key: &str) -> Binding {
        Binding {
            queue: self.q(local),
            exchange,
            key: key.into(),
        }
    }

    fn consume(&self, local: &str, exclusive: bool, prefetch: u16) -> Consume {
        Consume {
            queue: self.q(local),
            exclusive,
            prefetch,
        }
    }
}

fn publish(
    client: Client,
    exchange: Exchange,
    key: &str,
    mandatory: bool,
    body: &'static str,
) -> Step {
    Step::Publish {
        client,
        exchange,
        key: key.into(),
        mandatory,
        persistent: true,
        body,
    }
}

fn declare(client: Client, t: Topology) -> Step {
    Step::Declare(client, t)
}

fn with_dlx(ns: &Ns) -> QueueArgs {
    QueueArgs {
        dead_letter_exchange: ns.dlx(),
        ..QueueArgs::default()
    }
}

/// Every scenario for queues of type `qt`, its names under `namespace`.
pub fn scenarios(namespace: &str, qt: QueueType) -> Vec<Scenario> {
    let ns = Ns(Names::new(namespace), qt);
    let n = &ns;
    let mut all = common(n);
    all.extend(match qt {
        QueueType::Classic => classic(n),
        QueueType::Quorum => quorum(n),
    });
    all
}

/// What holds whichever the type.
fn common(n: &Ns) -> Vec<Scenario> {
    vec![
        Scenario {
            name: "routing by key, by topic wildcard, by direct key",
            steps: vec![
                Step::Connect(1),
                declare(1, {
                    let mut t = n.base();
                    for q in ["a", "b", "r", "ctl"] {
                        t.queues.push(n.queue(q, QueueArgs::default()));
                        t.consumers.push(n.consume(q, true, 10));
                    }
                    t.bindings.push(n.bind("a", Exchange::Msg, "g1"));
                    t.bindings.push(n.bind("b", Exchange::Msg, "broadcast.*"));
                    t.bindings.push(n.bind("r", Exchange::Roster, "roster.#"));
                    t.bindings.push(n.bind("ctl", Exchange::Control, "h1"));
                    t
                }),
                publish(1, Exchange::Msg, "g1", true, "m1"),
                publish(1, Exchange::Msg, "broadcast.all", false, "m2"),
                // `*` is one word: two words after `broadcast.` match nothing, silently.
                publish(1, Exchange::Msg, "broadcast.x.y", false, "m3"),
                publish(1, Exchange::Roster, "roster.h1.g7", true, "m4"),
                publish(1, Exchange::Control, "h1", true, "m5"),
                publish(1, Exchange::Control, "h2", true, "m6"),
            ],
            expect: vec![
                "c1 up",
                "c1 got a g1 m1 #1",
                "c1 published m1: routed",
                "c1 got b broadcast.all m2 #2",
                "c1 published m2: routed",
                "c1 published m3: routed",
                "c1 got r roster.h1.g7 m4 #3",
                "c1 published m4: routed",
                "c1 got ctl h1 m5 #4",
                "c1 published m5: routed",
                "c1 published m6: unroutable",
            ],
        },
        Scenario {
            name: "an unroutable mandatory publish is returned before its confirm; a broadcast is not",
            steps: vec![
                Step::Connect(1),
                declare(1, n.base()),
                publish(1, Exchange::Msg, "nobody", true, "m1"),
                publish(1, Exchange::Msg, "broadcast.all", false, "m2"),
            ],
            expect: vec![
                "c1 up",
                "c1 published m1: unroutable",
                "c1 published m2: routed",
            ],
        },
        Scenario {
            name: "with many publishes in flight, each return is matched to its own publish",
            steps: vec![
                Step::Connect(1),
                declare(1, {
                    let mut t = n.base();
                    t.queues.push(n.queue("in", with_dlx(n)));
                    t.bindings.push(n.bind("in", Exchange::Msg, "g1"));
                    t
                }),
                Step::Burst(
                    ["m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8"]
                        .into_iter()
                        .enumerate()
                        .map(|(i, body)| {
                            let key = if i % 2 == 0 { "g1" } else { "nobody" };
                            publish(1, Exchange::Msg, key, true, body)
                        })
                        .collect(),
                ),
                Step::Depth(n.q("in")),
            ],
            expect: vec![
                "c1 up",
                "c1 published m1: routed",
                "c1 published m2: unroutable",
                "c1 published m3: routed",
                "c1 published m4: unroutable",
                "c1 published m5: routed",
                "c1 published m6: unroutable",
                "c1 published m7: routed",
                "c1 published m8: unroutable",
                "depth in 4",
            ],
        },
        Scenario {
            name: "a queue deleted and another consumed: consumer tags are never reused",
            steps: vec![
                Step::Connect(1),
                declare(1, {
                    let mut t = n.base();
                    for q in ["q1", "q2"] {
                        t.queues.push(n.queue(q, with_dlx(n)));
                        t.consumers.push(n.consume(q, true, 10));
                    }
                    t.bindings.push(n.bind("q2", Exchange::Msg, "g2"));
                    t
                }),
                Step::Delete(1, n.q("q1")),
                declare(1, {
                    let mut t = Topology::default();
                    t.queues.push(n.queue("q3", with_dlx(n)));
                    t.bindings.push(n.bind("q3", Exchange::Msg, "g3"));
                    t.consumers.push(n.consume("q3", true, 10));
                    t
                }),
                publish(1, Exchange::Msg, "g2", true, "m1"),
                publish(1, Exchange::Msg, "g3", true, "m2"),
                Step::Depth(n.q("q1")),
            ],
            expect: vec![
                "c1 up",
                "c1 got q2 g2 m1 #1",
                "c1 published m1: routed",
                "c1 got q3 g3 m2 #2",
                "c1 published m2: routed",
                "q1 absent",
            ],
        },
        Scenario {
            name: "reject(requeue=false) dead-letters through the fanout DLX into the DLQ",
            steps: vec![
                Step::Connect(1),
                declare(1, {
                    let mut t = n.base();
                    t.queues.push(n.queue("in", with_dlx(n)));
                    t.bindings.push(n.bind("in", Exchange::Msg, "g1"));
                    t.consumers.push(n.consume("in", true, 10));
                    t
                }),
                publish(1, Exchange::Msg, "g1", true, "m1"),
                Step::Reject(1, "m1"),
                Step::Depth(n.q("dlq")),
                declare(1, Topology {
                    consumers: vec![n.consume("dlq", false, 10)],
                    ..Topology::default()
                }),
                Step::Ack(1, "m1"),
                Step::Depth(n.q("dlq")),
            ],
            expect: vec![
                "c1 up",
                "c1 got in g1 m1 #1",
                "c1 published m1: routed",
                "depth dlq 1",
                "c1 got dlq g1 m1 death=rejected from=in #2",
                "depth dlq 0",
            ],
        },
        Scenario {
            name: "an exclusive queue belongs to its connection, and dies with it",
            steps: vec![
                Step::Connect(1),
                Step::Connect(2),
                declare(1, Topology {
                    exchanges: vec![Exchange::Roster],
                    queues: vec![QueueSpec {
                        name: n.q("roster.h1"),
                        durable: false,
                        exclusive: true,
                        auto_delete: true,
                        args: QueueArgs::default(),
                    }],
                    bindings: vec![n.bind("roster.h1", Exchange::Roster, "roster.#")],
                    ..Topology::default()
                }),
                declare(2, Topology {
                    queues: vec![QueueSpec {
                        name: n.q("roster.h1"),
                        durable: false,
                        exclusive: true,
                        auto_delete: true,
                        args: QueueArgs::default(),
                    }],
                    ..Topology::default()
                }),
                // Still there after c2's connection closed (auto-delete waits for a consumer
                // to come and go; an exclusive queue cannot be probed from elsewhere).
                publish(1, Exchange::Roster, "roster.h1.g1", true, "m1"),
                Step::Kill(1),
                Step::Depth(n.q("roster.h1")),
                publish(1, Exchange::Roster, "roster.h1.g1", true, "m2"),
            ],
            expect: vec![
                "c1 up",
                "c2 up",
                "c2 down",
                "c2 refused RESOURCE_LOCKED",
                "c2 up",
                "c1 published m1: routed",
                "c1 down",
                "c1 up",
                "roster.h1 absent",
                "c1 published m2: unroutable",
            ],
        },
        Scenario {
            name: "redeclaring a queue with other arguments is refused",
            steps: vec![
                Step::Connect(1),
                declare(1, Topology {
                    queues: vec![n.queue("in", with_dlx(n))],
                    ..Topology::default()
                }),
                declare(1, Topology {
                    queues: vec![n.queue(
                        "in",
                        QueueArgs {
                            max_length: Some(5),
                            ..with_dlx(n)
                        },
                    )],
                    ..Topology::default()
                }),
                declare(1, Topology {
                    queues: vec![n.queue("in", with_dlx(n))],
                    ..Topology::default()
                }),
            ],
            expect: vec![
                "c1 up",
                "c1 down",
                "c1 refused PRECONDITION_FAILED",
                "c1 up",
            ],
        },
        Scenario {
            name: "a redeclare with the other queue type keeps the queue and its messages",
            steps: vec![
                Step::Connect(1),
                declare(1, {
                    let mut t = n.base();
                    t.queues.push(n.queue("in", with_dlx(n)));
                    t.bindings.push(n.bind("in", Exchange::Msg, "g1"));
                    t
                }),
                publish(1, Exchange::Msg, "g1", true, "m1"),
                declare(1, {
                    let other = match n.1 {
                        QueueType::Classic => QueueType::Quorum,
                        QueueType::Quorum => QueueType::Classic,
                    };
                    let mut t = n.base();
                    t.queues.push(n.queue("in", with_dlx(n)).with_type(other));
                    t.bindings.push(n.bind("in", Exchange::Msg, "g1"));
                    t.consumers.push(n.consume("in", true, 10));
                    t
                }),
                publish(1, Exchange::Msg, "g1", true, "m2"),
            ],
            expect: vec![
                "c1 up",
                "c1 published m1: routed",
                "c1 got in g1 m1 #1",
                "c1 got in g1 m2 #2",
                "c1 published m2: routed",
            ],
        },
        Scenario {
            name: "prefetch bounds the deliveries a consumer holds",
            steps: vec![
                Step::Connect(1),
                declare(1, {
                    let mut t = n.base();
                    t.queues.push(n.queue("in", with_dlx(n)));
                    t.bindings.push(n.bind("in", Exchange::Msg, "g1"));
                    t
                }),
                publish(1, Exchange::Msg, "g1", true, "m1"),
                publish(1, Exchange::Msg, "g1", true, "m2"),
                publish(1, Exchange::Msg, "g1", true, "m3"),
                declare(1, Topology {
                    consumers: vec![n.consume("in", true, 2)],
                    ..Topology::default()
                }),
                Step::Depth(n.q("in")),
                Step::Ack(1, "m1"),
                Step::Depth(n.q("in")),
            ],
            expect: vec![
                "c1 up",
                "c1 published m1: routed",
                "c1 published m2: routed",
                "c1 published m3: routed",
                "c1 got in g1 m1 #1",
                "c1 got in g1 m2 #2",
                "depth in 1",
                "c1 got in g1 m3 #3",
                "depth in 0",
            ],
        },
        Scenario {
            name: "unacked deliveries come back redelivered after the connection dies; stale acks are never sent",
            steps: vec![
                Step::Connect(1),
                declare(1, {
                    let mut t = n.base();
                    t.queues.push(n.queue("in", with_dlx(n)));
                    t.bindings.push(n.bind("in", Exchange::Msg, "g1"));
                    t.consumers.push(n.consume("in", true, 10));
                    t
                }),
                publish(1, Exchange::Msg, "g1", true, "m1"),
                publish(1, Exchange::Msg, "g1", true, "m2"),
                Step::Ack(1, "m2"),
                Step::Kill(1),
                // m1's tag died with its connection: the client does not send this ack.
                Step::Ack(1, "m1"),
                Step::Depth(n.q("in")),
                declare(1, Topology {
                    consumers: vec![n.consume("in", true, 10)],
                    ..Topology::default()
                }),
                Step::Ack(1, "m1"),
                Step::Depth(n.q("in")),
            ],
            expect: vec![
                "c1 up",
                "c1 got in g1 m1 #1",
                "c1 published m1: routed",
                "c1 got in g1 m2 #2",
                "c1 published m2: routed",
                "c1 down",
                "c1 up",
                "depth in 1",
                "c1 got in g1 m1 redelivered #1",
                "depth in 0",
            ],
        },
        Scenario {
            name: "x-max-length drops the head into the DLQ",
            steps: vec![
                Step::Connect(1),
                declare(1, {
                    let mut t = n.base();
                    t.queues.push(n.queue(
                        "in",
                        QueueArgs {
                            max_length: Some(2),
                            ..with_dlx(n)
                        },
                    ));
                    t.bindings.push(n.bind("in", Exchange::Msg, "g1"));
                    t
                }),
                publish(1, Exchange::Msg, "g1", true, "m1"),
                publish(1, Exchange::Msg, "g1", true, "m2"),
                publish(1, Exchange::Msg, "g1", true, "m3"),
                Step::Depth(n.q("in")),
                declare(1, Topology {
                    consumers: vec![n.consume("dlq", false, 10)],
                    ..Topology::default()
                }),
            ],
            expect: vec![
                "c1 up",
                "c1 published m1: routed",
                "c1 published m2: routed",
                "c1 published m3: routed",
                "depth in 2",
                "c1 got dlq g1 m1 death=maxlen from=in #1",
            ],
        },
        Scenario {
            name: "message TTL dead-letters what waits too long",
            steps: vec![
                Step::Connect(1),
                declare(1, {
                    let mut t = n.base();
                    t.queues.push(n.queue(
                        "in",
                        QueueArgs {
                            // Well past a step's settle window (250 ms after the confirm),
                            // so the dead letter never lands inside the publish's step.
                            message_ttl_ms: Some(1_500),
                            ..with_dlx(n)
                        },
                    ));
                    t.bindings.push(n.bind("in", Exchange::Msg, "g1"));
                    t.consumers.push(n.consume("dlq", false, 10));
                    t
                }),
                publish(1, Exchange::Msg, "g1", true, "m1"),
                Step::Wait(3_000),
                Step::Depth(n.q("in")),
            ],
            expect: vec![
                "c1 up",
                "c1 published m1: routed",
                "c1 got dlq g1 m1 death=expired from=in #1",
                "depth in 0",
            ],
        },
        Scenario {
            name: "x-expires deletes a queue nobody uses",
            steps: vec![
                Step::Connect(1),
                declare(1, {
                    let mut t = n.base();
                    t.queues.push(n.queue(
                        "idle",
                        QueueArgs {
                            expires_ms: Some(500),
                            ..with_dlx(n)
                        },
                    ));
                    t.queues.push(n.queue(
                        "used",
                        QueueArgs {
                            expires_ms: Some(500),
                            ..with_dlx(n)
                        },
                    ));
                    t.consumers.push(n.consume("used", true, 10));
                    t
                }),
                // A quorum queue's expiry is checked every few seconds, not to the millisecond.
                Step::Wait(match n.1 {
                    QueueType::Classic => 2_000,
                    QueueType::Quorum => 8_000,
                }),
                Step::Depth(n.q("idle")),
                Step::Depth(n.q("used")),
            ],
            expect: vec!["c1 up", "idle absent", "depth used 0"],
        },
        Scenario {
            name: "a durable queue and its persistent messages survive a broker restart",
            steps: vec![
                Step::Connect(1),
                declare(1, {
                    let mut t = n.base();
                    t.queues.push(n.queue("keep", with_dlx(n)));
                    // Transient: classic whatever the suite's type (a quorum queue is durable).
                    t.queues.push(QueueSpec {
                        durable: false,
                        ..n.queue("lose", QueueArgs::default())
                            .with_type(QueueType::Classic)
                    });
                    t.bindings.push(n.bind("keep", Exchange::Msg, "g1"));
                    t.bindings.push(n.bind("lose", Exchange::Msg, "g1"));
                    t
                }),
                publish(1, Exchange::Msg, "g1", true, "m1"),
                Step::Publish {
                    client: 1,
                    exchange: Exchange::Msg,
                    key: "g1".into(),
                    mandatory: true,
                    persistent: false,
                    body: "m2",
                },
                Step::RestartBroker,
                Step::Depth(n.q("keep")),
                Step::Depth(n.q("lose")),
                declare(1, Topology {
                    consumers: vec![n.consume("keep", true, 10)],
                    ..Topology::default()
                }),
            ],
            // A quorum queue keeps the transient message too.
            expect: match n.1 {
                QueueType::Classic => vec![
                    "c1 up",
                    "c1 published m1: routed",
                    "c1 published m2: routed",
                    "c1 down",
                    "c1 up",
                    "depth keep 1",
                    "lose absent",
                    "c1 got keep g1 m1 #1",
                ],
                QueueType::Quorum => vec![
                    "c1 up",
                    "c1 published m1: routed",
                    "c1 published m2: routed",
                    "c1 down",
                    "c1 up",
                    "depth keep 2",
                    "lose absent",
                    "c1 got keep g1 m1 #1",
                    "c1 got keep g1 m2 #2",
                ],
            },
        },
    ]
}

/// Classic queues: the exclusive flag is the one-reader guarantee.
fn classic(n: &Ns) -> Vec<Scenario> {
    vec![Scenario {
        name: "a second exclusive consumer is refused, and so is any consumer beside one",
        steps: vec![
            Step::Connect(1),
            Step::Connect(2),
            declare(1, {
                let mut t = n.base();
                t.queues.push(n.queue("in", with_dlx(n)));
                t.queues.push(n.queue("shared", QueueArgs::default()));
                t.consumers.push(n.consume("in", true, 10));
                t.consumers.push(n.consume("shared", false, 10));
                t
            }),
            declare(
                2,
                Topology {
                    consumers: vec![n.consume("in", true, 10)],
                    ..Topology::default()
                },
            ),
            declare(
                2,
                Topology {
                    consumers: vec![n.consume("in", false, 10)],
                    ..Topology::default()
                },
            ),
            declare(
                2,
                Topology {
                    consumers: vec![n.consume("shared", true, 10)],
                    ..Topology::default()
                },
            ),
        ],
        expect: vec![
            "c1 up",
            "c2 up",
            "c2 down",
            "c2 refused ACCESS_REFUSED",
            "c2 up",
            "c2 down",
            "c2 refused ACCESS_REFUSED",
            "c2 up",
            "c2 down",
            "c2 refused ACCESS_REFUSED",
            "c2 up",
        ],
    }]
}

/// Quorum queues: their own rules, and the one-reader guarantee by single-active-consumer.
fn quorum(n: &Ns) -> Vec<Scenario> {
    vec![
        Scenario {
            name: "quorum: a second consumer is accepted but waits, and takes over when the first goes",
            steps: vec![
                Step::Connect(1),
                Step::Connect(2),
                declare(1, {
                    let mut t = n.base();
                    t.queues.push(n.queue("in", with_dlx(n)));
                    t.bindings.push(n.bind("in", Exchange::Msg, "g1"));
                    t.consumers.push(n.consume("in", true, 10));
                    t
                }),
                declare(2, Topology {
                    consumers: vec![n.consume("in", true, 10)],
                    ..Topology::default()
                }),
                publish(1, Exchange::Msg, "g1", true, "m1"),
                Step::Kill(1),
                publish(2, Exchange::Msg, "g1", true, "m2"),
            ],
            expect: vec![
                "c1 up",
                "c2 up",
                "c1 got in g1 m1 #1",
                "c1 published m1: routed",
                "c1 down",
                "c1 up",
                "c2 got in g1 m1 redelivered #1",
                "c2 got in g1 m2 #2",
                "c2 published m2: routed",
            ],
        },
        Scenario {
            name: "quorum: a queue must be durable, not exclusive, not auto-delete",
            steps: vec![
                Step::Connect(1),
                declare(1, Topology {
                    queues: vec![QueueSpec {
                        durable: false,
                        ..n.queue("transient", QueueArgs::default())
                    }],
                    ..Topology::default()
                }),
                declare(1, Topology {
                    queues: vec![QueueSpec {
                        exclusive: true,
                        ..n.queue("mine", QueueArgs::default())
                    }],
                    ..Topology::default()
                }),
                declare(1, Topology {
                    queues: vec![QueueSpec {
                        auto_delete: true,
                        ..n.queue("fleeting", QueueArgs::default())
                    }],
                    ..Topology::default()
                }),
            ],
            expect: vec![
                "c1 up",
                "c1 down",
                "c1 refused PRECONDITION_FAILED",
                "c1 up",
                "c1 down",
                "c1 refused PRECONDITION_FAILED",
                "c1 up",
                "c1 down",
                "c1 refused PRECONDITION_FAILED",
                "c1 up",
            ],
        },
        Scenario {
            name: "quorum: a message returned more than x-delivery-limit times is dead-lettered",
            steps: vec![
                Step::Connect(1),
                Step::Connect(2),
                declare(1, {
                    let mut t = n.base();
                    t.queues.push(QueueSpec {
                        args: QueueArgs {
                            delivery_limit: Some(1),
                            ..with_dlx(n).with_type(QueueType::Quorum)
                        },
                        ..n.queue("in", QueueArgs::default())
                    });
                    t.bindings.push(n.bind("in", Exchange::Msg, "g1"));
                    t.consumers.push(n.consume("in", true, 10));
                    t
                }),
                declare(2, Topology {
                    consumers: vec![n.consume("dlq", false, 10)],
                    ..Topology::default()
                }),
                publish(1, Exchange::Msg, "g1", true, "m1"),
                Step::Kill(1),
                declare(1, Topology {
                    consumers: vec![n.consume("in", true, 10)],
                    ..Topology::default()
                }),
                Step::Kill(1),
                Step::Depth(n.q("in")),
            ],
            expect: vec![
                "c1 up",
                "c2 up",
                "c1 got in g1 m1 #1",
                "c1 published m1: routed",
                "c1 down",
                "c1 up",
                "c1 got in g1 m1 redelivered #1",
                "c1 down",
                "c1 up",
                "c2 got dlq g1 m1 death=delivery_limit from=in #1",
                "depth in 0",
            ],
        },
    ]
}
