//! One connection generation: its two channels, its consumers, its unconfirmed publishes.

use super::topology::{short, Declarer};
use super::{headers, AmqpConfig, Status};
use fleet_core::broker::{
    BrokerEvent, BrokerOp, DeliveryId, Names, PublishId, PublishResult, QueueType,
};
use futures_util::stream::{self, FuturesUnordered, SelectAll, StreamExt};
use futures_util::FutureExt;
use lapin::message::{BasicReturnMessage, Delivery};
use lapin::options::{
    BasicAckOptions, BasicPublishOptions, BasicRejectOptions, ConfirmSelectOptions,
    QueueDeleteOptions,
};
use lapin::{BasicProperties, Channel, Confirmation, Connection, Event};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// A consumer's deliveries, then `None` once when the broker ends it (its queue was deleted).
type Deliveries = SelectAll<
    Pin<Box<dyn futures_util::Stream<Item = (String, Option<lapin::Result<Delivery>>)> + Send>>,
>;

/// Publishes to one routing key refused in a row (nacked, or their confirm failed) after which
/// the connection is given up for a new one.
const REFUSALS_BEFORE_RECONNECT: u32 = 3;

/// How a publish's confirm came back.
enum Confirmed {
    /// (publish, mandatory, the broker's answer, a returned message it carried — possibly
    /// another publish's: lapin hands returns to whichever confirm completes next).
    Answer(PublishId, bool, Box<Result<Confirmation, String>>),
    /// No confirm within the bound: the channel is not working.
    Stuck(PublishId),
}

type Confirms = FuturesUnordered<Pin<Box<dyn Future<Output = Confirmed> + Send>>>;

pub(super) enum End {
    /// The port was dropped: stop for good.
    PortDropped,
    /// The connection or a channel failed; a new generation follows.
    Failed(String),
}

/// An operation, with the generation the core had last been told was up when it made it.
pub(super) type Tagged = (u32, BrokerOp);

pub(super) struct Session {
    conn: Connection,
    /// Publishes, with confirms.
    publish: Channel,
    /// Consumers, acks and rejects.
    consume: Channel,
    /// Exchanges, queues and bindings: a refused declare closes it, never the consumers'.
    declare: Channel,
    /// Queues found with the other type than the configured one, kept with theirs.
    kept: BTreeMap<String, QueueType>,
    /// The declare channel's refusals already handled, which lapin reports again as
    /// connection events: each lets one such event pass.
    absorbed: Vec<String>,
    generation: u32,
    names: Names,
    op_timeout: Duration,
    conn_events: Pin<Box<dyn futures_util::Stream<Item = Event> + Send>>,
    deliveries: Deliveries,
    consuming: BTreeSet<String>,
    /// Consumer tags are never reused on a channel (RabbitMQ refuses a live one).
    next_tag: u64,
    confirms: Confirms,
    /// Publishes the broker returned as unroutable, by the id carried in `message_id`.
    returned: BTreeSet<u64>,
    /// The routing key of each publish awaiting its confirm.
    keys: BTreeMap<u64, String>,
    /// Publishes refused in a row, by routing key (see `REFUSALS_BEFORE_RECONNECT`).
    refused: BTreeMap<String, u32>,
    /// Delivery tags handed out on the consume channel and not yet acked or rejected: a
    /// run of acks that covers the oldest of them goes out as one `multiple` ack.
    unsettled: BTreeSet<u64>,
    /// Which tags of the consume channel this session has read: a `multiple` ack never
    /// reaches past one it has not (the consumers share the channel's tag sequence, and one
    /// consumer's delivery can wait unread while another's are acked).
    read: ReadTags,
}

impl Session {
    pub(super) async fn open(
        conn: Connection,
        generation: u32,
        cfg: &AmqpConfig,
        names: &Names,
    ) -> Result<Session, String> {
        let conn_events = Box::pin(conn.events_listener());
        let setup = async {
            let publish = conn.create_channel().await?;
            publish
                .confirm_select(ConfirmSelectOptions::default())
                .await?;
            let consume = conn.create_channel().await?;
            let declare = conn.create_channel().await?;
            Ok::<_, lapin::Error>((publish, consume, declare))
        };
        let (publish, consume, declare) =
            match tokio::time::timeout(cfg.connect_timeout, setup).await {
                Ok(Ok(chs)) => chs,
                Ok(Err(e)) => return Err(format!("opening channels: {e}")),
                Err(_) => return Err("opening channels: no answer".into()),
            };
        Ok(Session {
            conn,
            publish,
            consume,
            declare,
            kept: BTreeMap::new(),
            absorbed: Vec::new(),
            generation,
            names: names.clone(),
            op_timeout: cfg.op_timeout,
            conn_events,
            deliveries: SelectAll::new(),
            consuming: BTreeSet::new(),
            next_tag: 0,
            confirms: FuturesUnordered::new(),
            returned: BTreeSet::new(),
            keys: BTreeMap::new(),
            refused: BTreeMap::new(),
            unsettled: BTreeSet::new(),
            read: ReadTags::default(),
        })
    }

    pub(super) async fn close(self) {
        let _ = tokio::time::timeout(
            Duration::from_secs(1),
            self.conn.close(200, "fleetd: new generation".into()),
        )
        .await;
    }

    /// The port was dropped (a graceful shutdown): what the core asked for before that —
    /// acks above all — still goes out, so a settled delivery is not redelivered.
    async fn settle(&mut self, ops: &mut mpsc::UnboundedReceiver<Tagged>) {
        while let Ok((g, op)) = ops.try_recv() {
            if g == self.generation && self.apply(op).await.is_err() {
                return;
            }
        }
    }

    /// Serves the connection until it fails or the port is dropped: connection events first,
    /// then confirms, deliveries and the core's operations.
    pub(super) async fn run(
        &mut self,
        ops: &mut mpsc::UnboundedReceiver<Tagged>,
        events: &mpsc::UnboundedSender<BrokerEvent>,
        status: &watch::Sender<Status>,
    ) -> End {
        loop {
            let step = tokio::select! {
                biased;
                ev = self.conn_events.next() => self.on_connection(ev),
                Some(first) = self.confirms.next(), if !self.confirms.is_empty() => {
                    self.on_confirms(first, ops, events).await
                }
                Some((queue, d)) = self.deliveries.next(), if !self.deliveries.is_empty() => {
                    self.on_consumed(queue, d, ops, events, status).await
                }
                op = ops.recv() => self.on_op(op, ops, status).await,
            };
            if let Err(end) = step {
                return end;
            }
        }
    }

    /// An event of the connection: an error not absorbed (or its close) ends it.
    fn on_connection(&mut self, ev: Option<Event>) -> Result<(), End> {
        match ev {
            Some(Event::Error(e)) => {
                let text = e.to_string();
                match self.absorbed.iter().position(|a| *a == text) {
                    Some(i) => {
                        self.absorbed.swap_remove(i);
                    }
                    None => return Err(End::Failed(format!("connection error: {text}"))),
                }
            }
            Some(Event::ConnectionBlocked(why)) => {
                tracing::warn!(%why, "the broker blocked publishing on this connection");
            }
            Some(_) => {}
            None => return Err(End::Failed("connection closed".into())),
        }
        Ok(())
    }

    /// Confirms, judged with every other one completed at once: a return handed to a
    /// neighbour's confirm is seen before its own is judged.
    async fn on_confirms(
        &mut self,
        first: Confirmed,
        ops: &mut mpsc::UnboundedReceiver<Tagged>,
        events: &mpsc::UnboundedSender<BrokerEvent>,
    ) -> Result<(), End> {
        let mut batch = vec![first];
        while let Some(Some(more)) = self.confirms.next().now_or_never() {
            batch.push(more);
        }
        for ev in self.judge(batch).map_err(End::Failed)? {
            self.tell(ev, ops, events).await?;
        }
        Ok(())
    }

    /// A consumer's delivery (or its end).
    async fn on_consumed(
        &mut self,
        queue: String,
        d: Option<lapin::Result<Delivery>>,
        ops: &mut mpsc::UnboundedReceiver<Tagged>,
        events: &mpsc::UnboundedSender<BrokerEvent>,
        status: &watch::Sender<Status>,
    ) -> Result<(), End> {
        let d = match d {
            Some(Ok(d)) => d,
            Some(Err(e)) => return Err(End::Failed(format!("consuming {queue}: {e}"))),
            // Cancelled by the broker (the queue was deleted behind our back): a new
            // generation re-declares it. Our own deletes left `consuming` first.
            None if self.consuming.contains(&queue) => {
                let why = format!("the broker cancelled the consumer of {queue}");
                return Err(End::Failed(why));
            }
            None => return Ok(()),
        };
        match self.delivery(queue, d, status).await.map_err(End::Failed)? {
            Some(ev) => self.tell(ev, ops, events).await,
            None => Ok(()),
        }
    }

    /// `ev` to the core; a core that is gone (the port dropped) still gets what it asked for
    /// settled.
    async fn tell(
        &mut self,
        ev: BrokerEvent,
        ops: &mut mpsc::UnboundedReceiver<Tagged>,
        events: &mpsc::UnboundedSender<BrokerEvent>,
    ) -> Result<(), End> {
        if events.send(ev).is_err() {
            self.settle(ops).await;
            return Err(End::PortDropped);
        }
        Ok(())
    }

    /// An operation of the core's, for this generation; acks waiting right behind an ack go
    /// out with it.
    async fn on_op(
        &mut self,
        op: Option<Tagged>,
        ops: &mut mpsc::UnboundedReceiver<Tagged>,
        status: &watch::Sender<Status>,
    ) -> Result<(), End> {
        match op {
            None => Err(End::PortDropped),
            // Made before the core heard of this generation: for a dead one.
            Some((g, _)) if g != self.generation => Ok(()),
            Some((_, BrokerOp::Ack { delivery })) => {
                let mut acks = vec![delivery];
                let mut next = None;
                while let Ok((g, op)) = ops.try_recv() {
                    match op {
                        _ if g != self.generation => {}
                        BrokerOp::Ack { delivery } => acks.push(delivery),
                        other => {
                            next = Some(other);
                            break;
                        }
                    }
                }
                self.ack_all(acks).await.map_err(End::Failed)?;
                if let Some(op) = next {
                    self.apply(op).await.map_err(End::Failed)?;
                }
                Ok(())
            }
            Some((_, op)) => {
                self.apply(op).await.map_err(End::Failed)?;
                let kept = self.kept.len() as u64;
                status.send_if_modified(|st| {
                    let changed = st.kept_other_type != kept;
                    st.kept_other_type = kept;
                    changed
                });
                Ok(())
            }
        }
    }

    /// Confirms to events. Returns are matched by the publish id in their `message_id`.
    fn judge(&mut self, batch: Vec<Confirmed>) -> Result<Vec<BrokerEvent>, String> {
        let note = |r: &BasicReturnMessage, set: &mut BTreeSet<u64>| {
            if let Some(id) = r.delivery.properties.message_id() {
                if let Ok(n) = id.as_str().parse::<u64>() {
                    set.insert(n);
                }
            }
        };
        let mut answers = Vec::new();
        for c in batch {
            match c {
                Confirmed::Stuck(p) => {
                    return Err(format!("no confirm for publish {} within the bound", p.0))
                }
                Confirmed::Answer(p, mandatory, answer) => {
                    if let Ok(Confirmation::Ack(Some(r)) | Confirmation::Nack(Some(r))) = &*answer {
                        note(r, &mut self.returned);
                    }
                    answers.push((p, mandatory, answer));
                }
            }
        }
        let events: Vec<BrokerEvent> = answers
            .into_iter()
            .map(|(publish, mandatory, answer)| {
                let returned = self.returned.remove(&publish.0);
                let result = match *answer {
                    // "Confirmed" is not "routed": a returned mandatory publish is unroutable.
                    Ok(Confirmation::Ack(_)) if returned && mandatory => PublishResult::Unroutable,
                    Ok(Confirmation::Ack(_)) => PublishResult::Routed,
                    Ok(Confirmation::Nack(_)) => {
                        PublishResult::Failed("nacked by the broker".into())
                    }
                    Ok(Confirmation::NotRequested) => {
                        PublishResult::Failed("no confirm (confirms not enabled)".into())
                    }
                    Err(e) => PublishResult::Failed(e),
                };
                BrokerEvent::Published { publish, result }
            })
            .collect();
        for ev in &events {
            let BrokerEvent::Published { publish, result } = ev else {
                continue;
            };
            let Some(key) = self.keys.remove(&publish.0) else {
                continue;
            };
            match result {
                PublishResult::Failed(why) => {
                    tracing::warn!(publish = publish.0, %key, %why, "publish failed");
                    let n = self.refused.entry(key.clone()).or_default();
                    *n += 1;
                    // fleetd never asks the broker to refuse a publish (its queues drop their
                    // head when full), so refusals in a row for one key mean this connection's
                    // view of its queue went bad: RabbitMQ 3.10 was seen nacking every publish
                    // of a channel to a quorum queue whose leader died just before the channel's
                    // first publish there, long after a new leader was elected, while the same
                    // channel's publishes to other queues went through. A new connection starts
                    // afresh.
                    if *n >= REFUSALS_BEFORE_RECONNECT {
                        return Err(format!(
                            "{n} publishes in a row to {key:?} refused by the broker: a new \
                             connection"
                        ));
                    }
                }
                _ => {
                    self.refused.remove(&key);
                }
            }
        }
        Ok(events)
    }

    /// A delivery as the core's event, or `None` when its AMQP headers were unreadable: then
    /// it is rejected here (to the queue's dead-letter exchange, where it has one), with the
    /// reason logged.
    async fn delivery(
        &mut self,
        queue: String,
        d: Delivery,
        status: &watch::Sender<Status>,
    ) -> Result<Option<BrokerEvent>, String> {
        let delivery = DeliveryId {
            generation: self.generation,
            tag: d.delivery_tag,
        };
        self.unsettled.insert(d.delivery_tag);
        self.read.saw(d.delivery_tag);
        match headers::from_table(d.properties.headers().as_ref()) {
            Ok(headers) => Ok(Some(BrokerEvent::Delivery {
                delivery,
                queue,
                routing_key: d.routing_key.as_str().to_string(),
                redelivered: d.redelivered,
                headers,
                body: d.data,
            })),
            Err(why) => {
                tracing::warn!(%queue, %delivery, %why, "malformed AMQP headers: rejected");
                status.send_modify(|st| st.malformed += 1);
                self.unsettled.remove(&d.delivery_tag);
                let reject = self
                    .consume
                    .basic_reject(d.delivery_tag, BasicRejectOptions { requeue: false });
                bounded(self.op_timeout, "rejecting a malformed delivery", reject)
                    .await
                    .map(|()| None)
            }
        }
    }

    async fn apply(&mut self, op: BrokerOp) -> Result<(), String> {
        match op {
            BrokerOp::Declare(t) => {
                let started = Declarer {
                    conn: &self.conn,
                    ch: &mut self.declare,
                    consume: &self.consume,
                    kept: &mut self.kept,
                    absorbed: &mut self.absorbed,
                    consuming: &mut self.consuming,
                    next_tag: &mut self.next_tag,
                    limit: self.op_timeout,
                }
                .declare(&self.names, &t)
                .await?;
                for (queue, consumer) in started {
                    let ended = stream::once(async { None });
                    let items = consumer.map(Some).chain(ended);
                    self.deliveries
                        .push(Box::pin(items.map(move |d| (queue.clone(), d))));
                }
                Ok(())
            }
            BrokerOp::DeleteQueue { name } => {
                self.consuming.remove(&name);
                let Ok(queue) = short(&name) else {
                    tracing::error!(%name, "not deleting a queue whose name AMQP cannot carry");
                    return Ok(());
                };
                let delete = self
                    .consume
                    .queue_delete(queue, QueueDeleteOptions::default());
                bounded(self.op_timeout, "deleting a queue", delete)
                    .await
                    .map(|_| ())
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
                let (exchange, key) = match (short(&self.names.exchange(exchange)), short(&key)) {
                    (Ok(e), Ok(k)) => (e, k),
                    (Err(why), _) | (_, Err(why)) => return self.refuse(publish, why),
                };
                let table = match headers::to_table(&headers) {
                    Ok(t) => t,
                    Err(why) => return self.refuse(publish, why.to_string()),
                };
                let props = BasicProperties::default()
                    .with_headers(table)
                    .with_message_id(publish.0.to_string().into())
                    .with_delivery_mode(if persistent { 2 } else { 1 });
                let opts = BasicPublishOptions {
                    mandatory,
                    ..BasicPublishOptions::default()
                };
                self.keys.insert(publish.0, key.to_string());
                let sent = self
                    .publish
                    .basic_publish(exchange, key, opts, &body, props);
                let confirm = bounded(self.op_timeout, "publishing", sent).await?;
                let limit = self.op_timeout * 3;
                self.confirms.push(Box::pin(async move {
                    match tokio::time::timeout(limit, confirm).await {
                        Ok(answer) => Confirmed::Answer(
                            publish,
                            mandatory,
                            Box::new(answer.map_err(|e| e.to_string())),
                        ),
                        Err(_) => Confirmed::Stuck(publish),
                    }
                }));
                Ok(())
            }
            BrokerOp::Ack { delivery } => self.ack_all(vec![delivery]).await,
            BrokerOp::Reject { delivery } => {
                if delivery.generation != self.generation {
                    return Ok(());
                }
                self.unsettled.remove(&delivery.tag);
                let reject = self
                    .consume
                    .basic_reject(delivery.tag, BasicRejectOptions { requeue: false });
                bounded(self.op_timeout, "rejecting", reject).await
            }
        }
    }

    /// Acks `acks` (an older generation's are dropped: their deliveries were requeued). Those
    /// that are exactly the oldest unsettled deliveries of the channel, all of whose earlier
    /// tags were read, go out as one `multiple` ack for the newest of them; the rest one by
    /// one, in tag order.
    async fn ack_all(&mut self, mut acks: Vec<DeliveryId>) -> Result<(), String> {
        acks.retain(|d| d.generation == self.generation);
        let wanted: BTreeSet<u64> = acks.iter().map(|d| d.tag).collect();
        let (covered, through) = oldest_run(&self.unsettled, &wanted, self.read.through);
        if covered >= 2 {
            if let Some(tag) = through {
                let multiple = BasicAckOptions { multiple: true };
                let ack = self.consume.basic_ack(tag, multiple);
                bounded(self.op_timeout, "acking", ack).await?;
                self.unsettled = self.unsettled.split_off(&(tag + 1));
            }
        }
        for tag in wanted {
            if !self.unsettled.remove(&tag) {
                // Covered by the multiple ack above, or acked already (never twice).
                continue;
            }
            let ack = self.consume.basic_ack(tag, BasicAckOptions::default());
            bounded(self.op_timeout, "acking", ack).await?;
        }
        Ok(())
    }

    /// A publish the broker could never take (a name over 255 bytes): failed at once, the
    /// connection unharmed.
    fn refuse(&mut self, publish: PublishId, why: String) -> Result<(), String> {
        tracing::warn!(publish = publish.0, %why, "publish refused before sending");
        self.confirms.push(Box::pin(async move {
            Confirmed::Answer(publish, false, Box::new(Err(why)))
        }));
        Ok(())
    }
}

/// One broker round trip within `limit` (a free function: the session is not `Sync`).
pub(super) async fn bounded<T>(
    limit: Duration,
    what: &str,
    f: impl Future<Output = lapin::Result<T>>,
) -> Result<T, String> {
    match tokio::time::timeout(limit, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!("{what}: no answer within {limit:?}")),
    }
}

/// The consume channel's tags this session has read: every tag up to `through`, and those
/// read ahead of a gap. (AMQP numbers a channel's deliveries 1, 2, 3, … across consumers.)
#[derive(Debug, Default)]
struct ReadTags {
    through: u64,
    ahead: BTreeSet<u64>,
    /// A gap that never closed (a delivery of a queue deleted under its consumer never comes):
    /// `through` stays where it is for the rest of the connection, and nothing more is kept.
    stuck: bool,
}

/// Tags read past a gap, at most: past it the gap is taken as one that will not close.
const READ_AHEAD: usize = 1_024;

impl ReadTags {
    fn saw(&mut self, tag: u64) {
        if self.stuck || tag <= self.through {
            return;
        }
        self.ahead.insert(tag);
        while self.ahead.remove(&(self.through + 1)) {
            self.through += 1;
        }
        if self.ahead.len() > READ_AHEAD {
            self.stuck = true;
            self.ahead.clear();
        }
    }
}

/// How many of the oldest `unsettled` tags are all in `wanted`, none past `read_through`, and
/// the newest of them: the run one `multiple` ack may cover without acking a delivery the core
/// still holds or has not been handed yet.
fn oldest_run(
    unsettled: &BTreeSet<u64>,
    wanted: &BTreeSet<u64>,
    read_through: u64,
) -> (usize, Option<u64>) {
    let mut covered = 0;
    let mut through = None;
    for tag in unsettled {
        if *tag > read_through || !wanted.contains(tag) {
            break;
        }
        covered += 1;
        through = Some(*tag);
    }
    (covered, through)
}

#[cfg(test)]
mod tests {
    use super::{oldest_run, ReadTags};
    use std::collections::BTreeSet;

    fn set(tags: &[u64]) -> BTreeSet<u64> {
        tags.iter().copied().collect()
    }

    /// A multiple ack covers only a run of the oldest unsettled deliveries that are all being
    /// acked: one the core still holds (a result waiting for its lead) stops it.
    #[test]
    fn a_multiple_ack_never_covers_a_held_delivery() {
        let all = u64::MAX;
        assert_eq!(
            oldest_run(&set(&[3, 4, 5, 9]), &set(&[3, 4, 5]), all),
            (3, Some(5))
        );
        assert_eq!(
            oldest_run(&set(&[2, 3, 4, 5]), &set(&[3, 4, 5]), all),
            (0, None)
        );
        assert_eq!(
            oldest_run(&set(&[3, 4, 7, 8]), &set(&[3, 4, 8]), all),
            (2, Some(4))
        );
        assert_eq!(oldest_run(&set(&[]), &set(&[1]), all), (0, None));
        assert_eq!(oldest_run(&set(&[1]), &set(&[1]), all), (1, Some(1)));
    }

    /// Nor one not read yet: tags 1 and 3 were read and are acked, 2 (another consumer's)
    /// waits unread — `ack 3 multiple` would ack it unseen, so 1 goes alone and 3 by itself.
    #[test]
    fn a_multiple_ack_never_covers_an_unread_delivery() {
        let mut read = ReadTags::default();
        for tag in [1, 3] {
            read.saw(tag);
        }
        assert_eq!(read.through, 1);
        assert_eq!(
            oldest_run(&set(&[1, 3]), &set(&[1, 3]), read.through),
            (1, Some(1))
        );
        read.saw(2);
        assert_eq!(read.through, 3, "the gap closed");
        assert_eq!(
            oldest_run(&set(&[1, 3]), &set(&[1, 3]), read.through),
            (2, Some(3))
        );
        // A gap that never closes costs bounded memory, and multiple acks stop short of it.
        for tag in 5..5 + super::READ_AHEAD as u64 + 2 {
            read.saw(tag);
        }
        assert_eq!(read.through, 3);
        assert!(read.ahead.is_empty());
        read.saw(4);
        assert_eq!(read.through, 3, "stuck for the rest of the connection");
    }
}
