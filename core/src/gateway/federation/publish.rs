//! Envelopes out, acks and rejections: a `Draft` says what a message is, `seal` numbers and
//! stamps it, `publish` signs it and hands it to the broker.

use crate::broker::{BrokerOp, DeliveryId, Exchange, Names, PublishId};
use crate::envelope::{Address, Envelope, Kind, Payload, VERSION};
use crate::gateway::Gateway;
use crate::gateway::Link;
use crate::ids::{HostId, MsgId, SessionId, TraceId};
use crate::io::{Event, RejectCode};

/// An envelope before it is numbered, stamped and signed.
#[derive(Clone, Debug)]
pub(crate) struct Draft {
    payload: Payload,
    from: SessionId,
    to: String,
    ttl_ms: u64,
    trace: Option<TraceId>,
    msg_id: Option<MsgId>,
    body: Vec<u8>,
}

impl Draft {
    /// A message of `payload`'s kind, with its references, from `from` to `to` (published
    /// under its key), expiring `ttl_ms` after its stamp.
    pub(crate) fn new(payload: Payload, from: &SessionId, to: Address, ttl_ms: u64) -> Self {
        Draft {
            payload,
            from: from.clone(),
            to: to.key(),
            ttl_ms,
            trace: None,
            msg_id: None,
            body: Vec::new(),
        }
    }

    /// Continues an existing flow instead of starting a new trace.
    pub(crate) fn trace(mut self, trace: TraceId) -> Self {
        self.trace = Some(trace);
        self
    }

    /// Goes out under a msgId chosen before (a retried reply keeps its first one).
    pub(crate) fn msg_id(mut self, msg: MsgId) -> Self {
        self.msg_id = Some(msg);
        self
    }

    pub(crate) fn body(mut self, body: Vec<u8>) -> Self {
        self.body = body;
        self
    }
}

impl Gateway {
    /// Numbers and stamps a draft: a fresh msgId (always minted, so the id sequence does not
    /// depend on which drafts reuse one) and traceId, and this host's wall clock.
    pub(crate) fn seal(&mut self, d: Draft) -> Envelope {
        let ts = self.unix_now();
        let minted = self.ids.msg();
        let trace_id = d.trace.unwrap_or_else(|| self.ids.trace());
        Envelope {
            v: VERSION,
            payload: d.payload,
            msg_id: d.msg_id.unwrap_or(minted),
            trace_id,
            from: d.from,
            to: d.to,
            signer: HostId::new(""),
            ts,
            expires_at: ts.saturating_add(d.ttl_ms),
            sig: None,
            body: d.body,
        }
    }

    /// Signs and publishes. Returns the publish id, or `None` with the broker down.
    pub(crate) fn publish(&mut self, exchange: Exchange, env: Envelope) -> Option<PublishId> {
        let key = env.to.clone();
        self.publish_keyed(exchange, key, env)
    }

    /// Signs and publishes under routing key `key`.
    pub(crate) fn publish_keyed(
        &mut self,
        exchange: Exchange,
        key: String,
        mut env: Envelope,
    ) -> Option<PublishId> {
        let f = self.link.fleet_mut()?;
        if !f.broker_up {
            return None;
        }
        f.cfg.keyring.sign(&mut env);
        self.publish_signed(exchange, key, env)
    }

    /// Copies a result, as its signer signed it, to `lead`'s held queue.
    pub(crate) fn publish_to_held(
        &mut self,
        lead: &SessionId,
        env: &Envelope,
    ) -> Option<PublishId> {
        if !self.link.fleet().is_some_and(|f| f.broker_up) {
            return None;
        }
        self.publish_signed(Exchange::Msg, Names::held_key(lead), env.clone())
    }

    fn publish_signed(
        &mut self,
        exchange: Exchange,
        key: String,
        env: Envelope,
    ) -> Option<PublishId> {
        let f = self.link.fleet_mut()?;
        let publish = f.confirms.next();
        let mandatory = env.kind() != Kind::Broadcast;
        let persistent = matches!(
            env.kind(),
            Kind::Send | Kind::Reply | Kind::Failed | Kind::Abandoned | Kind::Spawn | Kind::Stop
        );
        self.broker(BrokerOp::Publish {
            publish,
            exchange,
            key,
            mandatory,
            persistent,
            headers: env.to_headers(),
            body: env.body,
        });
        Some(publish)
    }

    /// Acks `delivery` if it belongs to the live connection (a tag from an earlier one died
    /// with it; the broker has requeued that copy).
    pub(crate) fn ack_if_current(&mut self, delivery: DeliveryId) {
        if self.link.fleet().is_some_and(|f| f.is_current(delivery)) {
            self.ack(delivery);
        }
    }

    /// The planted `AckAfterInject` bug's ack, once the brief's turn has ended.
    pub(crate) fn late_ack(&mut self, msg: MsgId) {
        if let Some(d) = self.link.fleet_mut().and_then(|f| f.late_acks.remove(&msg)) {
            self.ack_if_current(d);
        }
    }

    /// The planted `AckAfterInject` bug: the brief's ack waits for its turn's end.
    pub(crate) fn ack_late(&mut self, msg: MsgId, delivery: DeliveryId) {
        if let Link::Fleet(f) = &mut self.link {
            f.late_acks.insert(msg, delivery);
        }
    }

    pub(crate) fn ack(&mut self, delivery: DeliveryId) {
        self.broker(BrokerOp::Ack { delivery });
    }

    /// Rejects `delivery` to the DLX and says why.
    pub(crate) fn reject(
        &mut self,
        delivery: DeliveryId,
        queue: &str,
        code: RejectCode,
        detail: String,
    ) {
        self.broker(BrokerOp::Reject { delivery });
        self.event(Event::Rejected {
            queue: queue.to_string(),
            code,
            detail,
        });
    }
}
