//! Declaring the core's `Topology` on a channel: exchanges, queues with their `x-` arguments,
//! bindings, then consumers (ch. 10 §3, §8). Every declare is idempotent; a redeclare with other
//! arguments is the broker's PRECONDITION_FAILED, which ends the connection loudly — save one
//! that differs in the queue's type alone (`queue_type` switched while the queue lives): that
//! queue is kept as it is, declared again with its own type, and logged, so switching types
//! never puts a gateway in a reconnect loop (`docs/operations.md`, "Switching queue types").

use super::session::bounded;
use fleet_core::broker::{ExchangeType, Names, QueueArgs, QueueSpec, QueueType, Topology};
use lapin::options::{
    BasicConsumeOptions, BasicQosOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Channel, Connection, Consumer, ExchangeKind};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// A name the broker cannot take (AMQP short strings are at most 255 bytes).
pub(crate) fn short(s: &str) -> Result<ShortString, String> {
    ShortString::try_new(s)
        .map_err(|_| format!("name of {} bytes exceeds AMQP's 255: {s:.40}…", s.len()))
}

fn int(v: u64) -> AMQPValue {
    AMQPValue::LongLongInt(i64::try_from(v).unwrap_or(i64::MAX))
}

/// The `x-` arguments RabbitMQ and LavinMQ read, exactly as `docs/broker.md` lists them.
pub fn queue_arguments(args: &QueueArgs) -> Result<FieldTable, String> {
    let mut t = FieldTable::default();
    if let Some(dlx) = &args.dead_letter_exchange {
        t.insert(
            short("x-dead-letter-exchange")?,
            AMQPValue::LongString(dlx.as_str().into()),
        );
    }
    if let Some(n) = args.max_length {
        t.insert(short("x-max-length")?, int(n));
    }
    if let Some(ms) = args.message_ttl_ms {
        t.insert(short("x-message-ttl")?, int(ms));
    }
    if let Some(ms) = args.expires_ms {
        t.insert(short("x-expires")?, int(ms));
    }
    // A classic queue names no type: queues declared before types were chosen have none, and
    // RabbitMQ would take `classic` for a different argument.
    if !args.queue_type.is_classic() {
        t.insert(
            short("x-queue-type")?,
            AMQPValue::LongString(args.queue_type.as_str().into()),
        );
    }
    if args.single_active_consumer {
        t.insert(short("x-single-active-consumer")?, AMQPValue::Boolean(true));
    }
    if let Some(n) = args.delivery_limit {
        t.insert(short("x-delivery-limit")?, int(n));
    }
    Ok(t)
}

fn kind(k: ExchangeType) -> ExchangeKind {
    match k {
        ExchangeType::Topic => ExchangeKind::Topic,
        ExchangeType::Direct => ExchangeKind::Direct,
        ExchangeType::Fanout => ExchangeKind::Fanout,
    }
}

/// What declaring needs of a connection.
pub(crate) struct Declarer<'a> {
    pub conn: &'a Connection,
    /// Exchanges, queues and bindings: a refused queue declare closes this channel alone, and
    /// a fresh one takes its place.
    pub ch: &'a mut Channel,
    /// Where consumers start (their deliveries are acked on it).
    pub consume: &'a Channel,
    /// Queues found with the other type than the one asked for, kept with theirs.
    pub kept: &'a mut BTreeMap<String, QueueType>,
    /// Refusals handled here that lapin also reports as connection events (it does so for a
    /// channel's error too): the session lets exactly these pass.
    pub absorbed: &'a mut Vec<String>,
    /// Queues this connection consumes already.
    pub consuming: &'a mut BTreeSet<String>,
    /// Consumer tags are never reused on a channel.
    pub next_tag: &'a mut u64,
    /// Bound on each broker round trip.
    pub limit: Duration,
}

impl Declarer<'_> {
    /// Declares `t` and starts its consumers, skipping queues this connection already
    /// consumes (the core re-sends its slice when members come and go). An object whose name
    /// AMQP cannot carry (over 255 bytes) is left out and logged, so one bad name cannot keep
    /// the whole slice from being declared. Returns the new consumers.
    pub async fn declare(
        &mut self,
        names: &Names,
        t: &Topology,
    ) -> Result<Vec<(String, Consumer)>, String> {
        let limit = self.limit;
        for e in &t.exchanges {
            let name = names.exchange(*e);
            let Some(n) = named(&name) else { continue };
            let opts = ExchangeDeclareOptions {
                durable: true,
                ..ExchangeDeclareOptions::default()
            };
            let what = format!("declaring exchange {name}");
            let f = self
                .ch
                .exchange_declare(n, kind(e.kind()), opts, FieldTable::default());
            bounded(limit, &what, f).await?;
        }
        for q in &t.queues {
            self.queue(q).await?;
        }
        for b in &t.bindings {
            let exchange = names.exchange(b.exchange);
            let (Some(q), Some(e), Some(k)) = (named(&b.queue), named(&exchange), named(&b.key))
            else {
                continue;
            };
            let what = format!("binding queue {} to {exchange} by {:?}", b.queue, b.key);
            let f = self
                .ch
                .queue_bind(q, e, k, QueueBindOptions::default(), FieldTable::default());
            bounded(limit, &what, f).await?;
        }
        let mut started = Vec::new();
        for c in &t.consumers {
            if self.consuming.contains(&c.queue) {
                continue;
            }
            let Some(q) = named(&c.queue) else { continue };
            // Per-consumer (global=false): the bound applies to the consumer started next.
            let what = format!("setting prefetch for {}", c.queue);
            let f = self
                .consume
                .basic_qos(c.prefetch.max(1), BasicQosOptions { global: false });
            bounded(limit, &what, f).await?;
            *self.next_tag += 1;
            let tag = short(&format!("fleetd.{}", self.next_tag))?;
            // On a quorum queue the flag is taken and ignored: its single-active-consumer
            // argument keeps the one reader there.
            let opts = BasicConsumeOptions {
                exclusive: c.exclusive,
                ..BasicConsumeOptions::default()
            };
            let what = format!("consuming {}", c.queue);
            let consumer = bounded(
                limit,
                &what,
                self.consume
                    .basic_consume(q, tag, opts, FieldTable::default()),
            )
            .await?;
            self.consuming.insert(c.queue.clone());
            started.push((c.queue.clone(), consumer));
        }
        Ok(started)
    }

    /// Declares one queue as asked, or as the type it was found with.
    async fn queue(&mut self, asked: &QueueSpec) -> Result<(), String> {
        let Some(n) = named(&asked.name) else {
            return Ok(());
        };
        let q = match self.kept.get(&asked.name) {
            Some(t) => asked.with_type(*t),
            None => asked.clone(),
        };
        let what = format!("declaring queue {}", q.name);
        let f = self
            .ch
            .queue_declare(n.clone(), options(&q), queue_arguments(&q.args)?);
        let refused = match tokio::time::timeout(self.limit, f).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) if other_type(&e) && !self.kept.contains_key(&q.name) => e,
            Ok(Err(e)) => return Err(format!("{what}: {e}")),
            Err(_) => return Err(format!("{what}: no answer within {:?}", self.limit)),
        };
        // The refusal closed the channel: declare again on a new one, with the other type.
        self.absorbed.push(refused.to_string());
        let other = match q.args.queue_type {
            QueueType::Classic => QueueType::Quorum,
            QueueType::Quorum => QueueType::Classic,
        };
        let opening = format!("reopening the declare channel after {what}: {refused}");
        *self.ch = bounded(self.limit, &opening, self.conn.create_channel()).await?;
        let q = q.with_type(other);
        let f = self
            .ch
            .queue_declare(n, options(&q), queue_arguments(&q.args)?);
        bounded(self.limit, &format!("{what} as {}", other.as_str()), f).await?;
        tracing::warn!(
            queue = %q.name,
            asked = asked.args.queue_type.as_str(),
            kept = other.as_str(),
            "queue exists with the other type: kept as it is (see \"Switching queue types\")"
        );
        self.kept.insert(q.name.clone(), other);
        Ok(())
    }
}

fn options(q: &QueueSpec) -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: q.durable,
        exclusive: q.exclusive,
        auto_delete: q.auto_delete,
        ..QueueDeclareOptions::default()
    }
}

/// RabbitMQ's refusal of a redeclare that may differ in type: it names the first argument
/// that differs, and `x-single-active-consumer` comes before `x-queue-type`. (If another
/// argument differs too, the redeclare with the other type is refused as well, and that
/// refusal ends the connection as any other would.)
fn other_type(e: &lapin::Error) -> bool {
    let text = e.to_string();
    text.contains("PRECONDITION_FAILED")
        && [
            "'x-queue-type'",
            "'x-single-active-consumer'",
            "'x-delivery-limit'",
        ]
        .iter()
        .any(|arg| text.contains(arg))
}

/// `name` as an AMQP short string, or `None` (logged) when it is too long.
fn named(name: &str) -> Option<ShortString> {
    match short(name) {
        Ok(n) => Some(n),
        Err(why) => {
            tracing::error!(%why, "left out of the topology");
            None
        }
    }
}
