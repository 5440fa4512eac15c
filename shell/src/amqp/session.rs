//! One connection generation: its two channels, its consumers, its unconfirmed publishes.

use super::topology::{declare, short};
use super::{headers, AmqpConfig, Status};
use fleet_core::broker::{BrokerEvent, BrokerOp, DeliveryId, Names, PublishId, PublishResult};
use futures_util::stream::{FuturesUnordered, SelectAll, StreamExt};
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicPublishOptions, BasicRejectOptions, ConfirmSelectOptions,
    QueueDeleteOptions,
};
use lapin::{BasicProperties, Channel, Confirmation, Connection, Event};
use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

type Deliveries =
    SelectAll<Pin<Box<dyn futures_util::Stream<Item = (String, lapin::Result<Delivery>)> + Send>>>;
type Confirms = FuturesUnordered<Pin<Box<dyn Future<Output = BrokerEvent> + Send>>>;

pub(super) enum End {
    /// The port was dropped: stop for good.
    PortDropped,
    /// The connection or a channel failed; a new generation follows.
    Failed(String),
}

pub(super) struct Session {
    conn: Connection,
    /// Publishes, with confirms.
    publish: Channel,
    /// Declares, consumers, acks and rejects.
    consume: Channel,
    generation: u32,
    names: Names,
    op_timeout: Duration,
    conn_events: Pin<Box<dyn futures_util::Stream<Item = Event> + Send>>,
    deliveries: Deliveries,
    consuming: BTreeSet<String>,
    confirms: Confirms,
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
            Ok::<_, lapin::Error>((publish, consume))
        };
        let (publish, consume) = match tokio::time::timeout(cfg.connect_timeout, setup).await {
            Ok(Ok(chs)) => chs,
            Ok(Err(e)) => return Err(format!("opening channels: {e}")),
            Err(_) => return Err("opening channels: no answer".into()),
        };
        Ok(Session {
            conn,
            publish,
            consume,
            generation,
            names: names.clone(),
            op_timeout: cfg.op_timeout,
            conn_events,
            deliveries: SelectAll::new(),
            consuming: BTreeSet::new(),
            confirms: FuturesUnordered::new(),
        })
    }

    pub(super) async fn close(self) {
        let _ = tokio::time::timeout(
            Duration::from_secs(1),
            self.conn.close(200, "fleetd: new generation".into()),
        )
        .await;
    }

    pub(super) async fn run(
        &mut self,
        ops: &mut mpsc::UnboundedReceiver<BrokerOp>,
        events: &mpsc::UnboundedSender<BrokerEvent>,
        status: &watch::Sender<Status>,
    ) -> End {
        loop {
            tokio::select! {
                biased;
                ev = self.conn_events.next() => match ev {
                    Some(Event::Error(e)) => return End::Failed(format!("connection error: {e}")),
                    Some(Event::ConnectionBlocked(why)) => {
                        tracing::warn!(%why, "the broker blocked publishing on this connection");
                    }
                    Some(_) => {}
                    None => return End::Failed("connection closed".into()),
                },
                Some(ev) = self.confirms.next(), if !self.confirms.is_empty() => {
                    if events.send(ev).is_err() {
                        return End::PortDropped;
                    }
                }
                Some((queue, d)) = self.deliveries.next(), if !self.deliveries.is_empty() => {
                    let d = match d {
                        Ok(d) => d,
                        Err(e) => return End::Failed(format!("consuming {queue}: {e}")),
                    };
                    match self.delivery(queue, d, status).await {
                        Ok(Some(ev)) => {
                            if events.send(ev).is_err() {
                                return End::PortDropped;
                            }
                        }
                        Ok(None) => {}
                        Err(why) => return End::Failed(why),
                    }
                }
                op = ops.recv() => match op {
                    None => return End::PortDropped,
                    Some(op) => {
                        if let Err(why) = self.apply(op).await {
                            return End::Failed(why);
                        }
                    }
                },
            }
        }
    }

    /// A delivery as the core's event, or `None` when its AMQP headers were unreadable: then
    /// it is rejected to the dead-letter exchange here, with the reason logged.
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
                tracing::warn!(%queue, %delivery, %why, "malformed AMQP headers: dead-lettered");
                status.send_modify(|st| st.malformed += 1);
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
                let declared = declare(&self.consume, &self.names, &t, &mut self.consuming);
                let started = match tokio::time::timeout(self.op_timeout, declared).await {
                    Ok(r) => r?,
                    Err(_) => return Err("declaring the topology: no answer".into()),
                };
                for (queue, consumer) in started {
                    self.deliveries
                        .push(Box::pin(consumer.map(move |d| (queue.clone(), d))));
                }
                Ok(())
            }
            BrokerOp::DeleteQueue { name } => {
                self.consuming.remove(&name);
                let delete = self
                    .consume
                    .queue_delete(short(&name)?, QueueDeleteOptions::default());
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
                    .with_delivery_mode(if persistent { 2 } else { 1 });
                let opts = BasicPublishOptions {
                    mandatory,
                    ..BasicPublishOptions::default()
                };
                let sent = self
                    .publish
                    .basic_publish(exchange, key, opts, &body, props);
                let confirm = bounded(self.op_timeout, "publishing", sent).await?;
                self.confirms.push(Box::pin(async move {
                    let result = match confirm.await {
                        Ok(Confirmation::Ack(None)) => PublishResult::Routed,
                        // Returned before its confirm: confirmed is not routed.
                        Ok(Confirmation::Ack(Some(_))) if mandatory => PublishResult::Unroutable,
                        Ok(Confirmation::Ack(Some(_))) => PublishResult::Routed,
                        Ok(Confirmation::Nack(_)) => {
                            PublishResult::Failed("nacked by the broker".into())
                        }
                        Ok(Confirmation::NotRequested) => {
                            PublishResult::Failed("no confirm (confirms not enabled)".into())
                        }
                        Err(e) => PublishResult::Failed(e.to_string()),
                    };
                    BrokerEvent::Published { publish, result }
                }));
                Ok(())
            }
            BrokerOp::Ack { delivery } => {
                if delivery.generation != self.generation {
                    // Its connection is gone and the broker has requeued it: never ack it here.
                    return Ok(());
                }
                let ack = self
                    .consume
                    .basic_ack(delivery.tag, BasicAckOptions::default());
                bounded(self.op_timeout, "acking", ack).await
            }
            BrokerOp::Reject { delivery } => {
                if delivery.generation != self.generation {
                    return Ok(());
                }
                let reject = self
                    .consume
                    .basic_reject(delivery.tag, BasicRejectOptions { requeue: false });
                bounded(self.op_timeout, "rejecting", reject).await
            }
        }
    }

    /// A publish the broker could never take (a name over 255 bytes): failed at once, the
    /// connection unharmed.
    fn refuse(&mut self, publish: PublishId, why: String) -> Result<(), String> {
        tracing::warn!(publish = publish.0, %why, "publish refused before sending");
        self.confirms.push(Box::pin(async move {
            BrokerEvent::Published {
                publish,
                result: PublishResult::Failed(why),
            }
        }));
        Ok(())
    }
}

/// One broker round trip within `limit` (a free function: the session is not `Sync`).
async fn bounded<T>(
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
