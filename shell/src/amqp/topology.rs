//! Declaring the core's `Topology` on a channel: exchanges, queues with their `x-` arguments,
//! bindings, then consumers (ch. 10 §3, §8). Every declare is idempotent; a redeclare with other
//! arguments is the broker's PRECONDITION_FAILED, which ends the connection loudly.

use fleet_core::broker::{ExchangeType, Names, QueueArgs, Topology};
use lapin::options::{
    BasicConsumeOptions, BasicQosOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Channel, Consumer, ExchangeKind};
use std::collections::BTreeSet;

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
/// consumes (the core re-sends its slice when members come and go). Returns the new consumers.
pub async fn declare(
    ch: &Channel,
    names: &Names,
    t: &Topology,
    consuming: &mut BTreeSet<String>,
) -> Result<Vec<(String, Consumer)>, String> {
    let fail = |what: &str, name: &str, e: lapin::Error| format!("{what} {name}: {e}");
    for e in &t.exchanges {
        let name = names.exchange(*e);
        let opts = ExchangeDeclareOptions {
            durable: true,
            ..ExchangeDeclareOptions::default()
        };
        ch.exchange_declare(short(&name)?, kind(e.kind()), opts, FieldTable::default())
            .await
            .map_err(|err| fail("declaring exchange", &name, err))?;
    }
    for q in &t.queues {
        let opts = QueueDeclareOptions {
            durable: q.durable,
            exclusive: q.exclusive,
            auto_delete: q.auto_delete,
            ..QueueDeclareOptions::default()
        };
        ch.queue_declare(short(&q.name)?, opts, queue_arguments(&q.args)?)
            .await
            .map_err(|err| fail("declaring queue", &q.name, err))?;
    }
    for b in &t.bindings {
        let exchange = names.exchange(b.exchange);
        ch.queue_bind(
            short(&b.queue)?,
            short(&exchange)?,
            short(&b.key)?,
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(|err| fail("binding queue", &b.queue, err))?;
    }
    let mut started = Vec::new();
    for c in &t.consumers {
        if consuming.contains(&c.queue) {
            continue;
        }
        // Per-consumer (global=false): the bound applies to the consumer started next.
        ch.basic_qos(c.prefetch.max(1), BasicQosOptions { global: false })
            .await
            .map_err(|err| fail("setting prefetch for", &c.queue, err))?;
        let tag = format!("fleetd.{}", consuming.len() + started.len());
        let opts = BasicConsumeOptions {
            exclusive: c.exclusive,
            ..BasicConsumeOptions::default()
        };
        let consumer = ch
            .basic_consume(short(&c.queue)?, short(&tag)?, opts, FieldTable::default())
            .await
            .map_err(|err| fail("consuming", &c.queue, err))?;
        started.push((c.queue.clone(), consumer));
    }
    for (q, _) in &started {
        consuming.insert(q.clone());
    }
    Ok(started)
}
