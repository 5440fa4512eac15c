//! A publisher on the real RabbitMQ that is no gateway: broker credentials, and a gateway key
//! only where a test says it leaked. It stamps envelopes as any client can and publishes them
//! where it likes.

use fleet_core::broker::{Exchange, Names};
use fleet_core::envelope::{Envelope, Headers, Payload, VERSION};
use fleet_core::signing::Keyring;
use fleet_core::{HostId, MsgId, SessionId, TraceId};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

/// The real clock, as a real publisher stamps with.
#[allow(clippy::disallowed_methods)] // the test's wall clock, against real gateways
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A fresh id, as any publisher can mint.
#[allow(clippy::disallowed_methods)] // ids outside any gateway's seeded stream
pub fn fresh() -> uuid::Uuid {
    uuid::Uuid::new_v4()
}

/// An unsigned envelope of `payload`'s kind from `from` on `signer` to `to`, valid for a
/// minute.
pub fn envelope(payload: Payload, from: &str, to: &str, signer: &str, body: &[u8]) -> Envelope {
    let now = now_ms();
    Envelope {
        v: VERSION,
        payload,
        msg_id: MsgId(fresh()),
        trace_id: TraceId(fresh()),
        from: SessionId::new(from),
        to: to.into(),
        signer: HostId::new(signer),
        ts: now,
        expires_at: now + 60_000,
        sig: None,
        body: body.to_vec(),
    }
}

/// The signing key of `host` whose secret is `[secret; 32]` (the test fleets' keys).
pub fn keyring(host: &str, secret: u8) -> Keyring {
    Keyring::new(HostId::new(host), [secret; 32], &BTreeMap::new())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A channel of its own on the test broker, with publisher confirms.
pub async fn channel() -> (Connection, Channel) {
    let conn = Connection::connect(
        &crate::gateways::amqp_uri(),
        ConnectionProperties::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("the rogue's connection: {e}"));
    let ch = conn
        .create_channel()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (conn, ch)
}

/// Publishes `headers` and `body` to `exchange` by `key`, persistent, and waits for the
/// broker's confirm. `what` names it in a failure.
pub async fn publish(
    ch: &Channel,
    names: &Names,
    (exchange, key): (Exchange, &str),
    headers: &Headers,
    body: &[u8],
    what: &str,
) {
    let table = fleetd::amqp::to_table(headers).unwrap_or_else(|e| panic!("{e}"));
    let confirm = ch
        .basic_publish(
            names.exchange(exchange).as_str().into(),
            key.into(),
            BasicPublishOptions::default(),
            body,
            BasicProperties::default()
                .with_headers(table)
                .with_delivery_mode(2),
        )
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    confirm.await.unwrap_or_else(|e| panic!("{what}: {e}"));
}
