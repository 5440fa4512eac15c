//! The scenarios against `SimBroker`, driven directly as the simulation's broker host drives it.
//! The client side does what the lapin port does: a refused operation closes the connection
//! and the client reconnects at once; an ack or reject naming a dead generation is never sent.

use super::{refusal, Book, Client, Scenario, Step};
use fleet_core::broker::{BrokerOp, DeliveryId};
use fleet_core::{Duration, Instant};
use fleet_sim::broker::{ConnId, SimBroker};
use std::collections::BTreeMap;

/// How finely simulated time advances during a `Wait` (the broker host ticks every 100 ms).
const TICK_MS: u64 = 50;

pub struct SimSide {
    broker: SimBroker,
    ns: String,
    now: Instant,
    conns: BTreeMap<Client, (ConnId, u32)>,
    next_conn: u32,
    book: Book,
}

impl SimSide {
    pub fn new(ns: &str) -> Self {
        SimSide {
            broker: SimBroker::new(ns),
            ns: ns.to_string(),
            now: Instant::ZERO,
            conns: BTreeMap::new(),
            next_conn: 0,
            book: Book::default(),
        }
    }

    /// Runs a scenario and returns its history.
    pub fn run(scenario: &Scenario, ns: &str) -> Vec<String> {
        let mut side = SimSide::new(ns);
        let mut history = Vec::new();
        for step in &scenario.steps {
            let mut lines = side.step(step);
            lines.sort();
            history.extend(lines);
        }
        history
    }

    fn connect(&mut self, c: Client, lines: &mut Vec<String>) {
        self.next_conn += 1;
        let conn = ConnId(self.next_conn);
        let generation = self.broker.connect(conn);
        self.conns.insert(c, (conn, generation));
        lines.push(format!("c{c} up"));
    }

    fn drop_conn(&mut self, c: Client, lines: &mut Vec<String>) {
        if let Some((conn, _)) = self.conns.remove(&c) {
            self.broker.disconnect(conn);
            lines.push(format!("c{c} down"));
        }
    }

    fn apply(&mut self, c: Client, op: BrokerOp, lines: &mut Vec<String>) {
        let Some(&(conn, _)) = self.conns.get(&c) else {
            return;
        };
        if let Err(e) = self.broker.apply(conn, op) {
            if let Some(r) = refusal(&e.to_string()) {
                lines.push(format!("c{c} refused {r}"));
            }
            self.drop_conn(c, lines);
            self.connect(c, lines);
        }
    }

    fn delivery(&self, c: Client, body: &str) -> Option<DeliveryId> {
        let d = self.book.deliveries.get(&(c, body.to_string())).copied()?;
        let (_, generation) = self.conns.get(&c)?;
        (d.generation == *generation).then_some(d)
    }

    fn step(&mut self, step: &Step) -> Vec<String> {
        let mut lines = Vec::new();
        match step {
            Step::Connect(c) => self.connect(*c, &mut lines),
            Step::Declare(c, t) => self.apply(*c, BrokerOp::Declare(t.clone()), &mut lines),
            Step::Publish {
                client,
                exchange,
                key,
                mandatory,
                persistent,
                body,
            } => {
                let publish = self.book.publish(*client, body);
                let op = BrokerOp::Publish {
                    publish,
                    exchange: *exchange,
                    key: key.clone(),
                    mandatory: *mandatory,
                    persistent: *persistent,
                    headers: Default::default(),
                    body: body.as_bytes().to_vec(),
                };
                self.apply(*client, op, &mut lines);
            }
            Step::Delete(c, q) => {
                self.apply(*c, BrokerOp::DeleteQueue { name: q.clone() }, &mut lines)
            }
            Step::Burst(steps) => {
                for s in steps {
                    lines.extend(self.step(s));
                }
            }
            Step::Ack(c, body) => {
                if let Some(delivery) = self.delivery(*c, body) {
                    self.apply(*c, BrokerOp::Ack { delivery }, &mut lines);
                }
            }
            Step::Reject(c, body) => {
                if let Some(delivery) = self.delivery(*c, body) {
                    self.apply(*c, BrokerOp::Reject { delivery }, &mut lines);
                }
            }
            Step::Kill(c) => {
                self.drop_conn(*c, &mut lines);
                self.connect(*c, &mut lines);
            }
            Step::Wait(ms) => {
                let end = self.now + Duration::from_millis(*ms);
                while self.now < end {
                    self.now = (self.now + Duration::from_millis(TICK_MS)).min(end);
                    self.broker.tick(self.now);
                    self.drain(&mut lines);
                }
            }
            Step::Depth(q) => lines.push(match self.broker.depth(q) {
                Some(n) => format!("depth {} {n}", super::strip(q, &self.ns)),
                None => format!("{} absent", super::strip(q, &self.ns)),
            }),
            Step::RestartBroker => {
                let clients: Vec<Client> = self.conns.keys().copied().collect();
                self.broker.restart();
                for c in clients {
                    self.conns.remove(&c);
                    lines.push(format!("c{c} down"));
                    self.connect(c, &mut lines);
                }
            }
        }
        self.broker.tick(self.now);
        self.drain(&mut lines);
        lines
    }

    fn drain(&mut self, lines: &mut Vec<String>) {
        while let Some((conn, ev)) = self.broker.poll_event() {
            let client = self
                .conns
                .iter()
                .find(|(_, (c, _))| *c == conn)
                .map(|(k, _)| *k);
            if let Some(client) = client {
                if let Some(l) = self.book.line(client, &ev, &self.ns) {
                    lines.push(l);
                }
            }
        }
    }
}
