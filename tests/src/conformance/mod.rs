//! The broker conformance suite: one list of scenarios, each a script of broker steps and the
//! history a client observes, run against `SimBroker` (`sim_side`) and against RabbitMQ through
//! fleetd's lapin port (`amqp_side`). Both must produce the scripted history, so the
//! simulation's broker and the real one agree on everything fleetd relies on.
//!
//! A history is one line per thing a client saw — `c1 up`, `c1 got <queue> <key> <body> #<tag>`,
//! `c1 published <body>: routed`, `c2 refused ACCESS_REFUSED`, `depth <queue> 2` — with the
//! namespace stripped. Lines within one step are sorted: the broker promises no order between
//! two consumers' deliveries or between a delivery and another publish's confirm.

pub mod amqp_side;
mod scenarios;
pub mod sim_side;

pub use scenarios::scenarios;

use fleet_core::broker::{BrokerEvent, Exchange, Topology};
use fleet_core::envelope::HeaderValue;

/// A client: one connection (one gateway) at a time, reconnecting after each loss.
pub type Client = u8;

#[derive(Clone, Debug)]
pub enum Step {
    /// Open the client's first connection.
    Connect(Client),
    Declare(Client, Topology),
    Publish {
        client: Client,
        exchange: Exchange,
        key: String,
        mandatory: bool,
        persistent: bool,
        body: &'static str,
    },
    /// Several steps (publishes) handed over at once, so their confirms are in flight
    /// together; the history is read after the last.
    Burst(Vec<Step>),
    /// The client deletes a queue (its consumer on it, if any, goes with it).
    Delete(Client, String),
    /// Ack the last delivery of `body` this client saw.
    Ack(Client, &'static str),
    /// Reject it (requeue=false: to the dead-letter exchange).
    Reject(Client, &'static str),
    /// The broker closes the client's connection; the client reconnects.
    Kill(Client),
    /// Let time pass (TTLs, `x-expires`).
    Wait(u64),
    /// How many messages wait in a queue, or that it is gone.
    Depth(String),
    /// Stop and start the broker: only durable state survives.
    RestartBroker,
}

pub struct Scenario {
    pub name: &'static str,
    pub steps: Vec<Step>,
    pub expect: Vec<&'static str>,
}

/// The refusals a history names: the AMQP reply texts RabbitMQ and `SimBroker` both use.
pub const REFUSALS: [&str; 4] = [
    "ACCESS_REFUSED",
    "RESOURCE_LOCKED",
    "PRECONDITION_FAILED",
    "NOT_FOUND",
];

/// The refusal named in an error message, if any.
pub fn refusal(error: &str) -> Option<&'static str> {
    REFUSALS.into_iter().find(|r| error.contains(r))
}

/// Tracks which body each publish carried and which delivery carries each body.
#[derive(Debug, Default)]
pub struct Book {
    pub publishes: std::collections::BTreeMap<u64, (Client, &'static str)>,
    pub deliveries: std::collections::BTreeMap<(Client, String), fleet_core::broker::DeliveryId>,
    next: u64,
}

impl Book {
    pub fn publish(&mut self, client: Client, body: &'static str) -> fleet_core::broker::PublishId {
        self.next += 1;
        self.publishes.insert(self.next, (client, body));
        fleet_core::broker::PublishId(self.next)
    }

    /// The history line for an event a client saw (`None` for `Down`/`Up`, which the sides
    /// write themselves, since only they know why a connection went).
    pub fn line(&mut self, client: Client, ev: &BrokerEvent, ns: &str) -> Option<String> {
        match ev {
            BrokerEvent::Delivery {
                delivery,
                queue,
                routing_key,
                redelivered,
                headers,
                body,
            } => {
                let body = String::from_utf8_lossy(body).into_owned();
                self.deliveries.insert((client, body.clone()), *delivery);
                let mut l = format!("c{client} got {} {routing_key} {body}", strip(queue, ns));
                if *redelivered {
                    l.push_str(" redelivered");
                }
                if let Some(HeaderValue::Str(r)) = headers.get("x-first-death-reason") {
                    l.push_str(&format!(" death={r}"));
                }
                if let Some(HeaderValue::Str(q)) = headers.get("x-first-death-queue") {
                    l.push_str(&format!(" from={}", strip(q, ns)));
                }
                l.push_str(&format!(" #{}", delivery.tag));
                Some(l)
            }
            BrokerEvent::Published { publish, result } => {
                let (c, body) = self.publishes.get(&publish.0).copied()?;
                let how = match result {
                    fleet_core::broker::PublishResult::Routed => "routed",
                    fleet_core::broker::PublishResult::Unroutable => "unroutable",
                    fleet_core::broker::PublishResult::Failed(_) => "failed",
                };
                Some(format!("c{c} published {body}: {how}"))
            }
            BrokerEvent::Up { .. } | BrokerEvent::Down => None,
        }
    }
}

/// A queue name without its namespace.
pub fn strip(name: &str, ns: &str) -> String {
    name.strip_prefix(ns)
        .and_then(|n| n.strip_prefix('.'))
        .unwrap_or(name)
        .to_string()
}

/// Compares a side's history with the script's, and says where they part.
pub fn check(side: &str, scenario: &Scenario, got: &[String]) -> Result<(), String> {
    if got
        .iter()
        .map(String::as_str)
        .eq(scenario.expect.iter().copied())
    {
        return Ok(());
    }
    let mut msg = format!(
        "{side} disagrees with scenario {:?}\n  expected | got\n",
        scenario.name
    );
    let n = got.len().max(scenario.expect.len());
    for i in 0..n {
        let e = scenario.expect.get(i).copied().unwrap_or("-");
        let g = got.get(i).map_or("-", String::as_str);
        let mark = if e == g { " " } else { "*" };
        msg.push_str(&format!("{mark} {e:<60} | {g}\n"));
    }
    Err(msg)
}
