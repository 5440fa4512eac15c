//! Declaring the core's `Topology` on a channel: exchanges, queues with their `x-` arguments,
//! bindings, then consumers (ch. 10 §3, §8). Every declare is idempotent; a redeclare with other
//! arguments is the broker's PRECONDITION_FAILED, which ends the connection loudly.

use super::session::bounded;
use fleet_core::broker::{ExchangeType, Names, QueueArgs, Topology};
use lapin::options::{
    BasicConsumeOptions, BasicQosOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Channel, Consumer, ExchangeKind};
use std::collections::BTreeSet;
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
    Ok(t)
}

fn kind(k: ExchangeType) -> ExchangeKind {
    match k {
        ExchangeType::Topic => ExchangeKind::Topic,
        ExchangeType::Direct => ExchangeKind::Direct,
        ExchangeType::Fanout => ExchangeKind::Fanout,
    }
}

/// Declares `t` on `ch` and starts its consumers, skipping queues this connection already
/// consumes (the core re-sends its slice when members come and go). Each broker round trip is
/// bounded by `limit`. An object whose name AMQP cannot carry (over 255 bytes) is left out and
/// logged, so one bad name cannot keep the whole slice from being declared. Returns the new
/// consumers.
pub async fn declare(
    ch: &Channel,
    names: &Names,
    t: &Topology,
    consuming: &mut BTreeSet<String>,
    next_tag: &mut u64,
    limit: Duration,
) -> Result<Vec<(String, Consumer)>, String> {
    for e in &t.exchanges {
        let name = names.exchange(*e);
        let Some(n) = named(&name) else { continue };
        let opts = ExchangeDeclareOptions {
            durable: true,
            ..ExchangeDeclareOptions::default()
        };
        let what = format!("declaring exchange {name}");
        let f = ch.exchange_declare(n, kind(e.kind()), opts, FieldTable::default());
        bounded(limit, &what, f).await?;
    }
    for q in &t.queues {
        let Some(n) = named(&q.name) else { continue };
        let opts = QueueDeclareOptions {
            durable: q.durable,
            exclusive: q.exclusive,
            auto_delete: q.auto_delete,
            ..QueueDeclareOptions::default()
        };
        let what = format!("declaring queue {}", q.name);
        bounded(
            limit,
            &what,
            ch.queue_declare(n, opts, queue_arguments(&q.args)?),
        )
        .await?;
    }
    for b in &t.bindings {
        let exchange = names.exchange(b.exchange);
        let (Some(q), Some(e), Some(k)) = (named(&b.queue), named(&exchange), named(&b.key)) else {
            continue;
        };
        let what = format!("binding queue {} to {exchange} by {:?}", b.queue, b.key);
        let f = ch.queue_bind(q, e, k, QueueBindOptions::default(), FieldTable::default());
        bounded(limit, &what, f).await?;
    }
    let mut started = Vec::new();
    for c in &t.consumers {
        if consuming.contains(&c.queue) {
            continue;
        }
        let Some(q) = named(&c.queue) else { continue };
        // Per-consumer (global=false): the bound applies to the consumer started next.
        let what = format!("setting prefetch for {}", c.queue);
        let f = ch.basic_qos(c.prefetch.max(1), BasicQosOptions { global: false });
        bounded(limit, &what, f).await?;
        *next_tag += 1;
        let tag = short(&format!("fleetd.{next_tag}"))?;
        let opts = BasicConsumeOptions {
            exclusive: c.exclusive,
            ..BasicConsumeOptions::default()
        };
        let what = format!("consuming {}", c.queue);
        let consumer = bounded(
            limit,
            &what,
            ch.basic_consume(q, tag, opts, FieldTable::default()),
        )
        .await?;
        consuming.insert(c.queue.clone());
        started.push((c.queue.clone(), consumer));
    }
    Ok(started)
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
