//! `SimBroker`: the AMQP 0-9-1 behaviour fleetd relies on, as a pure state machine — exchanges
//! and bindings (topic, direct, fanout), durable vs transient and exclusive queues, exclusive
//! consumers, prefetch, manual ack and reject-to-DLX, requeue with `redelivered` when a
//! connection dies, `x-max-length` (drop-head, dead-lettered), message TTL and `x-expires`,
//! mandatory returns, and a restart that keeps only durable state. Quorum queues keep their
//! own rules: durable, never exclusive or auto-delete; the exclusive flag on a consumer is
//! accepted and ignored; single-active-consumer makes later consumers wait; a message
//! returned more than `x-delivery-limit` times is dead-lettered. A redeclare that differs in
//! the queue's type alone keeps the queue as it is, as fleetd's port does (it redeclares with
//! the existing type rather than fail its connection). It has no I/O: the
//! simulation's broker host carries its events over turmoil TCP, and the conformance suite
//! runs the same scenarios against it and against RabbitMQ.

use crate::broker::{
    BrokerEvent, BrokerOp, DeliveryId, Exchange, ExchangeType, Names, PublishResult, QueueSpec,
    Topology,
};
use crate::envelope::{HeaderValue, Headers};
use crate::{Duration, Instant};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

/// One client connection (one gateway).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u32);

/// What a real broker would answer with a channel or connection error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BrokerError {
    /// Redeclared with other arguments (AMQP 406 PRECONDITION_FAILED).
    PreconditionFailed(String),
    /// An exclusive queue declared by another connection (405 RESOURCE_LOCKED).
    ResourceLocked(String),
    /// A consumer where another holds exclusive access, or exclusive access where another
    /// consumes (403 ACCESS_REFUSED).
    AccessRefused(String),
    /// No such queue (404 NOT_FOUND).
    NotFound(String),
    /// An ack or reject of a tag this connection does not hold (406 PRECONDITION_FAILED).
    UnknownDelivery(DeliveryId),
    NotConnected(ConnId),
}

impl fmt::Display for BrokerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BrokerError::PreconditionFailed(s) => write!(f, "PRECONDITION_FAILED: {s}"),
            BrokerError::ResourceLocked(s) => write!(f, "RESOURCE_LOCKED: {s}"),
            BrokerError::AccessRefused(s) => write!(f, "ACCESS_REFUSED: {s}"),
            BrokerError::NotFound(s) => write!(f, "NOT_FOUND: {s}"),
            BrokerError::UnknownDelivery(d) => {
                write!(f, "PRECONDITION_FAILED: unknown delivery tag {d}")
            }
            BrokerError::NotConnected(c) => write!(f, "connection {} is closed", c.0),
        }
    }
}

#[derive(Clone, Debug)]
struct Message {
    routing_key: String,
    headers: Headers,
    body: Vec<u8>,
    persistent: bool,
    redelivered: bool,
    expires_at: Option<Instant>,
    /// Times it went back to its queue undelivered (a connection died holding it).
    returns: u64,
}

#[derive(Clone, Debug)]
struct Consumer {
    conn: ConnId,
    exclusive: bool,
    prefetch: u16,
    unacked: u16,
}

#[derive(Clone, Debug)]
struct Queue {
    spec: QueueSpec,
    /// The connection that declared an exclusive queue (it dies with that connection).
    owner: Option<ConnId>,
    ready: VecDeque<Message>,
    consumers: Vec<Consumer>,
    /// Auto-delete fires when the last consumer goes, not before the first one came
    /// (RabbitMQ; the conformance suite caught the difference).
    had_consumer: bool,
    next_consumer: usize,
    last_used: Instant,
}

#[derive(Clone, Debug)]
struct Conn {
    generation: u32,
    next_tag: u64,
    /// Deliveries this connection holds: tag → (queue, message).
    unacked: BTreeMap<u64, (String, Message)>,
}

/// A broker's whole state, and what it has to say to each connection.
#[derive(Debug)]
pub struct SimBroker {
    now: Instant,
    exchanges: BTreeMap<String, (ExchangeType, bool)>,
    queues: BTreeMap<String, Queue>,
    /// (exchange, pattern, queue), ordered so a key's exact bindings are one range.
    bindings: BTreeSet<(String, String, String)>,
    /// The subset whose pattern has a wildcard (`*`, `#`): the only ones a topic route scans.
    wild: BTreeSet<(String, String, String)>,
    conns: BTreeMap<ConnId, Conn>,
    generations: u32,
    events: VecDeque<(ConnId, BrokerEvent)>,
    /// Every dead-lettering, for the oracle and the conformance history.
    pub dead_lettered: u64,
    /// The namespace's exchange names (`Exchange` → `<ns>.msg`, …), as the shell maps them.
    names: Names,
    /// Queues that may have something to deliver (a message arrived, a consumer came or got
    /// room): `deliver` looks only at these, so an operation costs what it touches, not the
    /// number of queues.
    dirty: BTreeSet<String>,
    /// Nothing can be due before this (a message's TTL, an unused queue's `x-expires`): the
    /// tick looks at the queues only from then on. Anything that may bring a due time earlier
    /// lowers it — an enqueue with a TTL, a declare, consumers going.
    scan_from: Instant,
}

fn topic_match(pattern: &str, key: &str) -> bool {
    fn go(p: &[&str], k: &[&str]) -> bool {
        match (p.first(), k.first()) {
            (None, None) => true,
            (Some(&"#"), _) => go(&p[1..], k) || (!k.is_empty() && go(p, &k[1..])),
            (Some(&"*"), Some(_)) => go(&p[1..], &k[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &k[1..]),
            _ => false,
        }
    }
    let p: Vec<&str> = pattern.split('.').collect();
    let k: Vec<&str> = key.split('.').collect();
    go(&p, &k)
}

impl SimBroker {
    /// A broker whose clients name their objects under `namespace`.
    pub fn new(namespace: &str) -> Self {
        SimBroker {
            now: Instant::ZERO,
            exchanges: BTreeMap::new(),
            queues: BTreeMap::new(),
            bindings: BTreeSet::new(),
            wild: BTreeSet::new(),
            conns: BTreeMap::new(),
            generations: 0,
            events: VecDeque::new(),
            dead_lettered: 0,
            names: Names::new(namespace),
            dirty: BTreeSet::new(),
            scan_from: Instant::ZERO,
        }
    }

    /// A connection opens: a new generation of delivery tags.
    pub fn connect(&mut self, conn: ConnId) -> u32 {
        self.generations += 1;
        let generation = self.generations;
        self.conns.insert(
            conn,
            Conn {
                generation,
                next_tag: 0,
                unacked: BTreeMap::new(),
            },
        );
        generation
    }

    /// A connection dies: its unacked deliveries go back to the front of their queues marked
    /// redelivered; its consumers and its exclusive queues go with it.
    pub fn disconnect(&mut self, conn: ConnId) {
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        self.scan_from = Instant::ZERO;
        for (_, (queue, mut m)) in c.unacked.into_iter().rev() {
            let Some(q) = self.queues.get_mut(&queue) else {
                continue;
            };
            m.redelivered = true;
            m.returns += 1;
            if q.spec.args.delivery_limit.is_some_and(|l| m.returns > l) {
                self.dead_letter(&queue, m, "delivery_limit");
                continue;
            }
            q.ready.push_front(m);
            self.dirty.insert(queue);
        }
        for q in self.queues.values_mut() {
            q.consumers.retain(|c| c.conn != conn);
            q.next_consumer = 0;
        }
        let gone: Vec<String> = self
            .queues
            .iter()
            .filter(|(_, q)| {
                q.owner == Some(conn)
                    || (q.spec.auto_delete && q.had_consumer && q.consumers.is_empty())
            })
            .map(|(n, _)| n.clone())
            .collect();
        for name in gone {
            self.delete_queue(&name);
        }
    }

    pub fn is_connected(&self, conn: ConnId) -> bool {
        self.conns.contains_key(&conn)
    }

    /// The broker process restarts: every connection drops; durable exchanges, durable queues
    /// and the persistent messages in them survive (unacked ones requeued first); the rest is
    /// gone.
    pub fn restart(&mut self) {
        self.scan_from = Instant::ZERO;
        let conns: Vec<ConnId> = self.conns.keys().copied().collect();
        for c in conns {
            self.disconnect(c);
        }
        self.exchanges.retain(|_, (_, durable)| *durable);
        self.queues.retain(|_, q| q.spec.durable);
        for q in self.queues.values_mut() {
            // A quorum queue keeps every message on disk, persistent or not.
            let keeps_all = !q.spec.args.queue_type.is_classic();
            q.ready.retain(|m| m.persistent || keeps_all);
            q.consumers.clear();
            q.last_used = self.now;
        }
        let (exchanges, queues) = (&self.exchanges, &self.queues);
        let kept = |(e, _, q): &(String, String, String)| {
            exchanges.contains_key(e) && queues.contains_key(q)
        };
        self.bindings.retain(kept);
        self.wild.retain(kept);
        self.events.clear();
    }

    /// The next thing to tell a connection.
    pub fn poll_event(&mut self) -> Option<(ConnId, BrokerEvent)> {
        self.events.pop_front()
    }

    /// Time passes: expired messages are dead-lettered, unused queues past `x-expires` are
    /// deleted, and ready messages are delivered to consumers with room.
    pub fn tick(&mut self, now: Instant) {
        self.now = self.now.max(now);
        let now = self.now;
        if now < self.scan_from {
            self.deliver();
            return;
        }
        // One pass to find what is due (most queues are not), then act on those alone: with
        // thousands of queues, cloning every name each tick was a fifth of a large world's cost.
        let due: Vec<(String, bool)> = self
            .queues
            .iter()
            .filter_map(|(name, q)| {
                let unused = q.consumers.is_empty()
                    && q.spec
                        .args
                        .expires_ms
                        .is_some_and(|ms| q.last_used + Duration::from_millis(ms) <= now);
                let stale = q
                    .ready
                    .iter()
                    .any(|m| m.expires_at.is_some_and(|at| at <= now));
                (unused || stale).then(|| (name.clone(), unused))
            })
            .collect();
        // The earliest anything still kept can fall due.
        self.scan_from = self
            .queues
            .values()
            .flat_map(|q| {
                let unused = q
                    .consumers
                    .is_empty()
                    .then(|| {
                        q.spec
                            .args
                            .expires_ms
                            .map(|ms| q.last_used + Duration::from_millis(ms))
                    })
                    .flatten();
                q.ready.iter().filter_map(|m| m.expires_at).chain(unused)
            })
            .filter(|at| *at > now)
            .min()
            .unwrap_or(Instant::MAX);
        for (name, unused) in &due {
            if *unused {
                self.delete_queue(name);
                continue;
            }
            // (What is dead-lettered below lowers `scan_from` again as it is enqueued.)
            let mut dead = Vec::new();
            if let Some(q) = self.queues.get_mut(name) {
                q.ready.retain(|m| {
                    let alive = m.expires_at.is_none_or(|at| at > now);
                    if !alive {
                        dead.push(m.clone());
                    }
                    alive
                });
            }
            for m in dead {
                self.dead_letter(name, m, "expired");
            }
        }
        self.deliver();
    }

    fn delete_queue(&mut self, name: &str) {
        self.queues.remove(name);
        self.bindings.retain(|(_, _, q)| q != name);
        self.wild.retain(|(_, _, q)| q != name);
    }

    /// Carries out one operation from `conn`; an error is what a real broker would raise.
    pub fn apply(&mut self, conn: ConnId, op: BrokerOp) -> Result<(), BrokerError> {
        if !self.conns.contains_key(&conn) {
            return Err(BrokerError::NotConnected(conn));
        }
        let result = match op {
            BrokerOp::Declare(t) => {
                self.scan_from = Instant::ZERO;
                self.declare(conn, t)
            }
            BrokerOp::DeleteQueue { name } => {
                self.delete_queue(&name);
                Ok(())
            }
            BrokerOp::Publish {
                publish,
                exchange,
                key,
                mandatory,
                persistent,
                headers,
                body,
            } => {
                let m = Message {
                    routing_key: key.clone(),
                    headers,
                    body,
                    persistent,
                    redelivered: false,
                    expires_at: None,
                    returns: 0,
                };
                let name = self.exchange_name(exchange);
                let routed = self.route(&name, &key, m);
                let result = if routed || !mandatory {
                    PublishResult::Routed
                } else {
                    PublishResult::Unroutable
                };
                self.events
                    .push_back((conn, BrokerEvent::Published { publish, result }));
                Ok(())
            }
            BrokerOp::Ack { delivery } => self.settle(conn, delivery).map(|_| ()),
            BrokerOp::Reject { delivery } => {
                let (queue, m) = self.settle(conn, delivery)?;
                self.dead_letter(&queue, m, "rejected");
                Ok(())
            }
        };
        self.deliver();
        result
    }

    fn exchange_name(&self, e: Exchange) -> String {
        self.names.exchange(e)
    }

    fn declare(&mut self, conn: ConnId, t: Topology) -> Result<(), BrokerError> {
        for e in &t.exchanges {
            let name = self.exchange_name(*e);
            match self.exchanges.get(&name) {
                Some((kind, _)) if *kind != e.kind() => {
                    return Err(BrokerError::PreconditionFailed(format!(
                        "exchange {name} exists with another type"
                    )))
                }
                Some(_) => {}
                None => {
                    self.exchanges.insert(name, (e.kind(), true));
                }
            }
        }
        for spec in t.queues {
            if !spec.args.queue_type.is_classic()
                && (!spec.durable || spec.exclusive || spec.auto_delete)
            {
                return Err(BrokerError::PreconditionFailed(format!(
                    "invalid property for quorum queue {}: it must be durable, not exclusive, \
                     not auto-delete",
                    spec.name
                )));
            }
            match self.queues.get_mut(&spec.name) {
                Some(q) if spec.differs_only_in_type(&q.spec) => q.last_used = self.now,
                Some(q) if q.spec != spec => {
                    return Err(BrokerError::PreconditionFailed(format!(
                        "queue {} exists with other arguments",
                        spec.name
                    )))
                }
                Some(q) if q.owner.is_some_and(|o| o != conn) => {
                    return Err(BrokerError::ResourceLocked(format!(
                        "queue {} is exclusive to another connection",
                        spec.name
                    )))
                }
                Some(q) => q.last_used = self.now,
                None => {
                    let owner = spec.exclusive.then_some(conn);
                    self.queues.insert(
                        spec.name.clone(),
                        Queue {
                            spec,
                            owner,
                            ready: VecDeque::new(),
                            consumers: Vec::new(),
                            had_consumer: false,
                            next_consumer: 0,
                            last_used: self.now,
                        },
                    );
                }
            }
        }
        for b in t.bindings {
            if !self.queues.contains_key(&b.queue) {
                return Err(BrokerError::NotFound(b.queue));
            }
            let entry = (self.exchange_name(b.exchange), b.key, b.queue);
            if entry.1.contains(['*', '#']) {
                self.wild.insert(entry.clone());
            }
            self.bindings.insert(entry);
        }
        for c in t.consumers {
            let q = self
                .queues
                .get_mut(&c.queue)
                .ok_or_else(|| BrokerError::NotFound(c.queue.clone()))?;
            if q.consumers.iter().any(|x| x.conn == conn) {
                continue; // already consuming on this connection: idempotent re-declare
            }
            // A quorum queue takes the flag and ignores it.
            let exclusive = c.exclusive && q.spec.args.queue_type.is_classic();
            if q.consumers.iter().any(|x| x.exclusive) || (exclusive && !q.consumers.is_empty()) {
                return Err(BrokerError::AccessRefused(format!(
                    "queue {} already has a consumer; exclusive access refused",
                    c.queue
                )));
            }
            q.had_consumer = true;
            self.dirty.insert(c.queue.clone());
            q.consumers.push(Consumer {
                conn,
                exclusive,
                prefetch: c.prefetch,
                unacked: 0,
            });
            q.last_used = self.now;
        }
        Ok(())
    }

    /// Routes to every bound queue; false if none.
    fn route(&mut self, exchange: &str, key: &str, m: Message) -> bool {
        let Some((kind, _)) = self.exchanges.get(exchange).copied() else {
            return false;
        };
        let from = |pattern: &str| (exchange.to_string(), pattern.to_string(), String::new());
        let mut targets: BTreeSet<String> = BTreeSet::new();
        match kind {
            ExchangeType::Fanout => targets.extend(
                self.bindings
                    .range(from("")..)
                    .take_while(|(e, _, _)| e == exchange)
                    .map(|(_, _, q)| q.clone()),
            ),
            ExchangeType::Direct | ExchangeType::Topic => {
                targets.extend(
                    self.bindings
                        .range(from(key)..)
                        .take_while(|(e, p, _)| e == exchange && p == key)
                        .map(|(_, _, q)| q.clone()),
                );
                if kind == ExchangeType::Topic {
                    targets.extend(
                        self.wild
                            .iter()
                            .filter(|(e, p, _)| e == exchange && topic_match(p, key))
                            .map(|(_, _, q)| q.clone()),
                    );
                }
            }
        }
        for name in &targets {
            self.enqueue(name, m.clone());
        }
        !targets.is_empty()
    }

    fn enqueue(&mut self, name: &str, mut m: Message) {
        let now = self.now;
        let mut overflow = None;
        if let Some(q) = self.queues.get_mut(name) {
            self.dirty.insert(name.to_string());
            m.expires_at = q
                .spec
                .args
                .message_ttl_ms
                .map(|ms| now + Duration::from_millis(ms));
            if let Some(at) = m.expires_at {
                self.scan_from = self.scan_from.min(at);
            }
            q.ready.push_back(m);
            if let Some(max) = q.spec.args.max_length {
                if q.ready.len() as u64 > max {
                    overflow = q.ready.pop_front(); // drop-head, RabbitMQ's default overflow
                }
            }
        }
        if let Some(dropped) = overflow {
            self.dead_letter(name, dropped, "maxlen");
        }
    }

    /// To the queue's dead-letter exchange, if it has one; else the message is dropped. Like
    /// RabbitMQ, the first dead-lettering stamps why and from where (`x-first-death-*`).
    fn dead_letter(&mut self, queue: &str, mut m: Message, reason: &str) {
        let dlx = self
            .queues
            .get(queue)
            .and_then(|q| q.spec.args.dead_letter_exchange.clone());
        if let Some(dlx) = dlx {
            self.dead_lettered += 1;
            m.redelivered = false;
            if !m.headers.contains_key("x-first-death-reason") {
                m.headers.insert(
                    "x-first-death-reason".into(),
                    HeaderValue::Str(reason.into()),
                );
                m.headers
                    .insert("x-first-death-queue".into(), HeaderValue::Str(queue.into()));
            }
            let key = m.routing_key.clone();
            self.route(&dlx, &key, m);
        }
    }

    fn settle(&mut self, conn: ConnId, d: DeliveryId) -> Result<(String, Message), BrokerError> {
        let c = self
            .conns
            .get_mut(&conn)
            .ok_or(BrokerError::NotConnected(conn))?;
        if c.generation != d.generation {
            return Err(BrokerError::UnknownDelivery(d));
        }
        let (queue, m) = c
            .unacked
            .remove(&d.tag)
            .ok_or(BrokerError::UnknownDelivery(d))?;
        if let Some(q) = self.queues.get_mut(&queue) {
            if let Some(cons) = q.consumers.iter_mut().find(|x| x.conn == conn) {
                cons.unacked = cons.unacked.saturating_sub(1);
            }
            self.dirty.insert(queue.clone());
        }
        Ok((queue, m))
    }

    /// Hands ready messages to consumers with prefetch room, round-robin, queue by queue (in
    /// name order, each queue that may have something to deliver).
    fn deliver(&mut self) {
        let now = self.now;
        let names: Vec<String> = std::mem::take(&mut self.dirty).into_iter().collect();
        for name in names {
            while let Some(q) = self.queues.get_mut(&name) {
                if q.ready.is_empty() || q.consumers.is_empty() {
                    break;
                }
                // With a single active consumer, the earliest still there is the only one.
                let n = if q.spec.args.single_active_consumer {
                    1
                } else {
                    q.consumers.len()
                };
                let Some(i) = (0..n)
                    .map(|k| (q.next_consumer + k) % n)
                    .find(|&i| q.consumers[i].unacked < q.consumers[i].prefetch.max(1))
                else {
                    break;
                };
                let Some(m) = q.ready.pop_front() else { break };
                if m.expires_at.is_some_and(|at| at <= now) {
                    self.dead_letter(&name, m, "expired");
                    continue;
                }
                let Some(q) = self.queues.get_mut(&name) else {
                    break;
                };
                q.next_consumer = (i + 1) % n;
                q.consumers[i].unacked += 1;
                q.last_used = now;
                let conn = q.consumers[i].conn;
                let Some(c) = self.conns.get_mut(&conn) else {
                    break;
                };
                c.next_tag += 1;
                let delivery = DeliveryId {
                    generation: c.generation,
                    tag: c.next_tag,
                };
                c.unacked.insert(c.next_tag, (name.clone(), m.clone()));
                self.events.push_back((
                    conn,
                    BrokerEvent::Delivery {
                        delivery,
                        queue: name.clone(),
                        routing_key: m.routing_key,
                        redelivered: m.redelivered,
                        headers: m.headers,
                        body: m.body,
                    },
                ));
            }
        }
    }

    /// Messages waiting in a queue (not delivered), for the oracle and the conformance suite.
    pub fn depth(&self, queue: &str) -> Option<usize> {
        self.queues.get(queue).map(|q| q.ready.len())
    }

    /// Deliveries a connection holds unacked.
    pub fn unacked(&self, conn: ConnId) -> usize {
        self.conns.get(&conn).map_or(0, |c| c.unacked.len())
    }

    pub fn has_queue(&self, queue: &str) -> bool {
        self.queues.contains_key(queue)
    }

    /// Deliveries held unacked across every connection.
    pub fn unacked_total(&self) -> usize {
        self.conns.values().map(|c| c.unacked.len()).sum()
    }

    /// The oldest message waiting in `queue`, as a client with broker access could read it.
    pub fn peek(&self, queue: &str) -> Option<Raw> {
        let m = self.queues.get(queue)?.ready.front()?;
        Some(Raw {
            routing_key: m.routing_key.clone(),
            headers: m.headers.clone(),
            body: m.body.clone(),
        })
    }

    /// Puts `m` straight into `queue` (as a client with broker credentials can, through the
    /// default exchange), then delivers.
    pub fn push(&mut self, queue: &str, m: Raw) {
        self.enqueue(
            queue,
            Message {
                routing_key: m.routing_key,
                headers: m.headers,
                body: m.body,
                persistent: true,
                redelivered: false,
                expires_at: None,
                returns: 0,
            },
        );
        self.deliver();
    }

    /// Deletes `queue` and its bindings, as an operator could.
    pub fn remove_queue(&mut self, queue: &str) {
        self.delete_queue(queue);
    }
}

/// A message as a client with broker access sees or writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Raw {
    pub routing_key: String,
    pub headers: Headers,
    pub body: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use super::topic_match;

    #[test]
    fn topic_patterns_match_like_amqp() {
        assert!(topic_match("roster.#", "roster.a.g1"));
        assert!(topic_match("roster.#", "roster"));
        assert!(topic_match("broadcast.*", "broadcast.all"));
        assert!(!topic_match("broadcast.*", "broadcast.a.b"));
        assert!(topic_match("#", "anything.at.all"));
        assert!(topic_match("g1", "g1"));
        assert!(!topic_match("g1", "g2"));
        assert!(topic_match("a.#.z", "a.b.c.z"));
    }
}
