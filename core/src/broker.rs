//! The broker vocabulary the core speaks (ch. 10 §3–§4, §8): exchanges, this gateway's slice
//! of queues and bindings, and the operations the shell carries out against AMQP. Names live
//! under a namespace (default `fleet`) so several fleets and test runs can share one broker.

use crate::envelope::Headers;
use crate::ids::{HostId, SessionId};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The shared exchanges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Exchange {
    /// topic: entity → entity messages and broadcasts; key = recipient gid or `broadcast.*`.
    Msg,
    /// topic: presence; key = `roster.<host>.<gid>`.
    Roster,
    /// direct: spawn and lifecycle; key = target host id.
    Control,
    /// fanout: dead letters from every inbox, into the DLQ and each host's dead-letter tap.
    Dlx,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExchangeType {
    Topic,
    Direct,
    Fanout,
}

impl Exchange {
    pub const ALL: [Exchange; 4] = [
        Exchange::Msg,
        Exchange::Roster,
        Exchange::Control,
        Exchange::Dlx,
    ];

    pub fn kind(self) -> ExchangeType {
        match self {
            Exchange::Msg | Exchange::Roster => ExchangeType::Topic,
            Exchange::Control => ExchangeType::Direct,
            Exchange::Dlx => ExchangeType::Fanout,
        }
    }

    fn suffix(self) -> &'static str {
        match self {
            Exchange::Msg => "msg",
            Exchange::Roster => "roster",
            Exchange::Control => "control",
            Exchange::Dlx => "dlx",
        }
    }
}

/// Broker object names under one namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Names {
    pub namespace: String,
}

impl Names {
    pub fn new(namespace: &str) -> Self {
        Names {
            namespace: namespace.to_string(),
        }
    }

    pub fn exchange(&self, e: Exchange) -> String {
        format!("{}.{}", self.namespace, e.suffix())
    }

    /// `agent.<gid>.inbox.v2`: the version suffix keeps a changed argument set from crashing
    /// on redeclare (PRECONDITION_FAILED) and old sender-keyed queues apart.
    pub fn inbox(&self, gid: &SessionId) -> String {
        format!("{}.agent.{gid}.inbox.v2", self.namespace)
    }

    /// The gid whose inbox `queue` is, if it is one of ours.
    pub fn inbox_gid(&self, queue: &str) -> Option<SessionId> {
        let gid = queue
            .strip_prefix(&self.namespace)?
            .strip_prefix(".agent.")?
            .strip_suffix(".inbox.v2")?;
        (!gid.is_empty()).then(|| SessionId::new(gid))
    }

    pub fn control(&self, host: &HostId) -> String {
        format!("{}.control.{host}", self.namespace)
    }

    pub fn roster(&self, host: &HostId) -> String {
        format!("{}.roster.{host}", self.namespace)
    }

    /// The operators' dead-letter store: every dead letter of the fleet, capped, never
    /// consumed by a gateway (nothing unsigned is believed, and operators keep what is there).
    pub fn dlq(&self) -> String {
        format!("{}.dlq", self.namespace)
    }

    /// `host`'s own copy of the dead letters, which its gateway drains to count the broker's
    /// drops of its queues by reason (a metric, never grounds to end a delegation).
    pub fn dead_letters(&self, host: &HostId) -> String {
        format!("{}.dlq.{host}", self.namespace)
    }

    /// Where `gid`'s results wait for it to collect them: a queue of their own, consumed
    /// with its own window, so uncollected results never hold the inbox's prefetch.
    pub fn held(&self, gid: &SessionId) -> String {
        format!("{}.agent.{gid}.held.v1", self.namespace)
    }

    /// The message-exchange key `gid`'s held queue is bound to.
    pub fn held_key(gid: &SessionId) -> String {
        format!("held.{gid}")
    }

    /// The gid whose held queue `queue` is, if it is one.
    pub fn held_gid(&self, queue: &str) -> Option<SessionId> {
        let gid = queue
            .strip_prefix(&self.namespace)?
            .strip_prefix(".agent.")?
            .strip_suffix(".held.v1")?;
        (!gid.is_empty()).then(|| SessionId::new(gid))
    }
}

/// How a durable queue is kept (`x-queue-type`): on the node that declared it (classic), or
/// replicated by Raft across the cluster (quorum), so it outlives the loss of a node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueType {
    #[default]
    Classic,
    Quorum,
}

impl QueueType {
    pub fn is_classic(&self) -> bool {
        *self == QueueType::Classic
    }

    pub fn as_str(self) -> &'static str {
        match self {
            QueueType::Classic => "classic",
            QueueType::Quorum => "quorum",
        }
    }
}

/// Redeliveries after which a quorum queue would drop a message. RabbitMQ 3.x counts a
/// connection's loss as a return and 4.x limits returns to 20 unless told otherwise; fleetd
/// never returns a message on purpose (it acks or rejects), so the limit is set where a
/// gateway could not reach it by reconnecting, and a held reply outlives any outage. (A
/// negative value means "drop on the first return" to 3.x, not "no limit".)
pub const QUORUM_DELIVERY_LIMIT: u64 = 1_000_000;

/// A queue's arguments (the `x-` arguments of RabbitMQ and LavinMQ).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueArgs {
    pub dead_letter_exchange: Option<String>,
    pub max_length: Option<u64>,
    pub message_ttl_ms: Option<u64>,
    pub expires_ms: Option<u64>,
    pub queue_type: QueueType,
    /// One consumer at a time gets deliveries; the others wait their turn. A quorum queue's
    /// way to keep one reader: it accepts, and ignores, the exclusive flag on a consumer.
    pub single_active_consumer: bool,
    pub delivery_limit: Option<u64>,
}

impl QueueArgs {
    /// These arguments for a queue of type `t`: a quorum queue keeps one reader by
    /// single-active-consumer and carries `QUORUM_DELIVERY_LIMIT`; a classic one keeps one
    /// reader by its consumer's exclusive flag and has neither.
    pub fn with_type(&self, t: QueueType) -> QueueArgs {
        let quorum = t == QueueType::Quorum;
        QueueArgs {
            queue_type: t,
            single_active_consumer: quorum,
            delivery_limit: quorum.then_some(QUORUM_DELIVERY_LIMIT),
            ..self.clone()
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueSpec {
    pub name: String,
    pub durable: bool,
    pub exclusive: bool,
    pub auto_delete: bool,
    pub args: QueueArgs,
}

impl QueueSpec {
    /// The same queue declared as type `t` (see `QueueArgs::with_type`).
    pub fn with_type(&self, t: QueueType) -> QueueSpec {
        QueueSpec {
            args: self.args.with_type(t),
            ..self.clone()
        }
    }

    /// Whether `other` differs from this declaration in its type alone: a gateway keeps a
    /// queue of the other type rather than failing its connection on every redeclare, so a
    /// fleet can switch `queue_type` a gateway at a time (`docs/operations.md`).
    pub fn differs_only_in_type(&self, other: &QueueSpec) -> bool {
        self != other && self.with_type(other.args.queue_type) == *other
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    pub queue: String,
    pub exchange: Exchange,
    pub key: String,
}

/// A consumer to start: manual ack always; exclusive where one gateway must be the only reader.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Consume {
    pub queue: String,
    pub exclusive: bool,
    pub prefetch: u16,
}

/// Everything to declare (idempotently), bind and consume, in this order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    pub exchanges: Vec<Exchange>,
    pub queues: Vec<QueueSpec>,
    pub bindings: Vec<Binding>,
    pub consumers: Vec<Consume>,
}

/// A delivery of the current connection generation. Tags of an older generation are void:
/// the shell never acks them (the broker already requeued those messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DeliveryId {
    pub generation: u32,
    pub tag: u64,
}

impl fmt::Display for DeliveryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.generation, self.tag)
    }
}

/// One publish, numbered by the core so its confirm can be matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PublishId(pub u64);

/// How a publish ended, as the shell saw it at confirm time (a mandatory return arrives before
/// the confirm: "confirmed" is not "routed").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PublishResult {
    Routed,
    /// Returned: no queue is bound to the key.
    Unroutable,
    /// Nacked by the broker, or the channel failed before the confirm.
    Failed(String),
}

/// Please do this against the broker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BrokerOp {
    Declare(Topology),
    /// Delete a queue (a stopped member's inbox: its broadcast bindings die with it).
    DeleteQueue {
        name: String,
    },
    Publish {
        publish: PublishId,
        exchange: Exchange,
        key: String,
        /// False only for BROADCAST, where an empty group is legal silence.
        mandatory: bool,
        persistent: bool,
        headers: Headers,
        #[serde(with = "serde_bytes")]
        body: Vec<u8>,
    },
    Ack {
        delivery: DeliveryId,
    },
    /// basic.reject with requeue=false: to the DLX.
    Reject {
        delivery: DeliveryId,
    },
}

/// What the broker did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BrokerEvent {
    /// Connected, with a new generation of delivery tags; the core answers with its topology.
    Up { generation: u32 },
    /// The connection is gone: unacked deliveries will be redelivered to the next generation.
    Down,
    Delivery {
        delivery: DeliveryId,
        queue: String,
        routing_key: String,
        redelivered: bool,
        headers: Headers,
        #[serde(with = "serde_bytes")]
        body: Vec<u8>,
    },
    Published {
        publish: PublishId,
        result: PublishResult,
    },
}
