//! The scenarios against a real RabbitMQ, through fleetd's lapin port (`fleetd::AmqpBroker`),
//! one port per client. The broker kills a connection with `rabbitmqctl close_connection` and
//! restarts with `stop_app`/`start_app`; queue depths come from a passive declare on a separate
//! probe connection. Every name is under a namespace of its own, deleted at the end.

use super::{refusal, Book, Client, Scenario, Step};
use fleet_core::broker::{BrokerEvent, BrokerOp, DeliveryId, Exchange};
use fleetd::amqp::Status;
use fleetd::{AmqpBroker, AmqpConfig, BrokerPort};
use lapin::options::{ExchangeDeleteOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// A step has settled when nothing more arrives for this long and every client is connected.
const QUIET: Duration = Duration::from_millis(250);
/// No step may take longer (a broker restart is the slowest, at a few seconds).
const STEP_BOUND: Duration = Duration::from_secs(60);

struct Port {
    broker: AmqpBroker,
    status: watch::Receiver<Status>,
    name: String,
    up: bool,
    generation: u32,
}

pub struct AmqpSide {
    uri: String,
    ns: String,
    ports: BTreeMap<Client, Port>,
    book: Book,
    queues: BTreeSet<String>,
}

impl AmqpSide {
    /// Runs a scenario against the broker at `uri` and returns its history, or why it could
    /// not be run (the broker unreachable, a step that never settled).
    pub async fn run(scenario: &Scenario, uri: &str, ns: &str) -> Result<Vec<String>, String> {
        let mut side = AmqpSide {
            uri: uri.to_string(),
            ns: ns.to_string(),
            ports: BTreeMap::new(),
            book: Book::default(),
            queues: BTreeSet::new(),
        };
        let mut history = Vec::new();
        let mut result = Ok(());
        for (i, step) in scenario.steps.iter().enumerate() {
            match side.step(step).await {
                Ok(mut lines) => {
                    lines.sort();
                    history.extend(lines);
                }
                Err(e) => {
                    result = Err(format!("step {i} ({step:?}): {e}"));
                    break;
                }
            }
        }
        side.cleanup().await;
        result.map(|()| history)
    }

    async fn step(&mut self, step: &Step) -> Result<Vec<String>, String> {
        let mut lines = Vec::new();
        match step {
            Step::Connect(c) => {
                let mut cfg = AmqpConfig::new(&self.uri, &self.ns);
                cfg.connection_name = format!("conformance/{}/c{c}", self.ns);
                cfg.backoff_min = Duration::from_millis(50);
                cfg.backoff_max = Duration::from_millis(500);
                let broker = AmqpBroker::start(cfg.clone()).map_err(|e| e.to_string())?;
                let status = broker.status();
                self.ports.insert(
                    *c,
                    Port {
                        broker,
                        status,
                        name: cfg.connection_name,
                        up: false,
                        generation: 0,
                    },
                );
            }
            Step::Declare(c, t) => {
                self.queues.extend(t.queues.iter().map(|q| q.name.clone()));
                self.submit(*c, BrokerOp::Declare(t.clone()));
            }
            Step::Publish { .. } => self.publish(step)?,
            Step::Delete(c, q) => self.submit(*c, BrokerOp::DeleteQueue { name: q.clone() }),
            Step::Burst(steps) => {
                for s in steps {
                    self.publish(s)?;
                }
            }
            // The port itself drops acks of an older generation: that is under test here.
            Step::Ack(c, body) => {
                if let Some(delivery) = self.delivery(*c, body) {
                    self.submit(*c, BrokerOp::Ack { delivery });
                }
            }
            Step::Reject(c, body) => {
                if let Some(delivery) = self.delivery(*c, body) {
                    self.submit(*c, BrokerOp::Reject { delivery });
                }
            }
            Step::Kill(c) => {
                let port = self.ports.get(c).ok_or("no such client")?;
                let name = format!("{}#{}", port.name, port.generation);
                kill_connection(&name).await?;
            }
            Step::Wait(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
            Step::Depth(q) => {
                self.settle(&mut lines).await?;
                let local = super::strip(q, &self.ns);
                lines.push(match self.depth(q).await? {
                    Some(n) => format!("depth {local} {n}"),
                    None => format!("{local} absent"),
                });
                return Ok(lines);
            }
            Step::RestartBroker => {
                rabbitmqctl(&["stop_app"]).await?;
                rabbitmqctl(&["start_app"]).await?;
                rabbitmqctl(&["await_startup"]).await?;
            }
        }
        self.settle(&mut lines).await?;
        Ok(lines)
    }

    /// Hands a publish step to its client's port, without waiting for anything.
    fn publish(&mut self, step: &Step) -> Result<(), String> {
        let Step::Publish {
            client,
            exchange,
            key,
            mandatory,
            persistent,
            body,
        } = step
        else {
            return Err(format!("only publishes may be burst: {step:?}"));
        };
        let publish = self.book.publish(*client, body);
        self.submit(
            *client,
            BrokerOp::Publish {
                publish,
                exchange: *exchange,
                key: key.clone(),
                mandatory: *mandatory,
                persistent: *persistent,
                headers: Default::default(),
                body: body.as_bytes().to_vec(),
            },
        );
        Ok(())
    }

    fn submit(&mut self, c: Client, op: BrokerOp) {
        if let Some(p) = self.ports.get_mut(&c) {
            p.broker.submit(op);
        }
    }

    fn delivery(&self, c: Client, body: &str) -> Option<DeliveryId> {
        self.book.deliveries.get(&(c, body.to_string())).copied()
    }

    /// Collects what every client sees until all are connected and nothing more arrives.
    async fn settle(&mut self, lines: &mut Vec<String>) -> Result<(), String> {
        let start = Instant::now();
        let mut last = Instant::now();
        loop {
            let mut heard = false;
            for (c, p) in self.ports.iter_mut() {
                while let Ok(Some(ev)) =
                    tokio::time::timeout(Duration::from_millis(5), p.broker.next_event()).await
                {
                    heard = true;
                    match &ev {
                        BrokerEvent::Up { generation } => {
                            p.up = true;
                            p.generation = *generation;
                            lines.push(format!("c{c} up"));
                        }
                        BrokerEvent::Down => {
                            p.up = false;
                            lines.push(format!("c{c} down"));
                            // Why this generation ended, as the port recorded it before `Down`.
                            let why = match &p.status.borrow().last_end {
                                Some((g, why)) if *g == p.generation => why.clone(),
                                _ => String::new(),
                            };
                            if let Some(r) = refusal(&why) {
                                lines.push(format!("c{c} refused {r}"));
                            }
                        }
                        _ => {
                            if let Some(l) = self.book.line(*c, &ev, &self.ns) {
                                lines.push(l);
                            }
                        }
                    }
                }
            }
            if heard {
                last = Instant::now();
            }
            let all_up = self.ports.values().all(|p| p.up);
            if all_up && last.elapsed() >= QUIET {
                return Ok(());
            }
            if start.elapsed() > STEP_BOUND {
                let errors: Vec<String> = self
                    .ports
                    .values()
                    .filter_map(|p| p.status.borrow().last_error.clone())
                    .collect();
                return Err(format!("did not settle within {STEP_BOUND:?}: {errors:?}"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Ready messages in `queue`, or `None` if it does not exist.
    async fn depth(&self, queue: &str) -> Result<Option<u32>, String> {
        let conn = probe(&self.uri).await?;
        let ch = conn.create_channel().await.map_err(|e| e.to_string())?;
        let passive = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        let r = ch
            .queue_declare(queue.into(), passive, FieldTable::default())
            .await;
        let _ = conn.close(200, "probe done".into()).await;
        match r {
            Ok(q) => Ok(Some(q.message_count())),
            Err(e) if e.to_string().contains("NOT_FOUND") => Ok(None),
            Err(e) => Err(format!("probing {queue}: {e}")),
        }
    }

    /// Deletes what the scenario declared, so runs leave nothing on the broker.
    async fn cleanup(self) {
        drop(self.ports);
        let queues: Vec<String> = self.queues.into_iter().collect();
        delete_all(
            &self.uri,
            &queues,
            &fleet_core::broker::Names::new(&self.ns),
        )
        .await;
    }
}

/// Deletes `queues` and the namespace's exchanges, ignoring what is already gone.
pub async fn delete_all(uri: &str, queues: &[String], names: &fleet_core::broker::Names) {
    let Ok(conn) = probe(uri).await else {
        return;
    };
    for q in queues {
        if let Ok(ch) = conn.create_channel().await {
            let _ = ch
                .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
                .await;
        }
    }
    for e in Exchange::ALL {
        if let Ok(ch) = conn.create_channel().await {
            let _ = ch
                .exchange_delete(
                    names.exchange(e).as_str().into(),
                    ExchangeDeleteOptions::default(),
                )
                .await;
        }
    }
    let _ = conn.close(200, "cleanup done".into()).await;
}

/// Whether `queue` exists on the broker (a passive declare: a missing queue closes the
/// channel with 404). `Err` when the broker cannot be asked.
pub async fn queue_exists(uri: &str, queue: &str) -> Result<bool, String> {
    let conn = probe(uri).await?;
    let ch = conn
        .create_channel()
        .await
        .map_err(|e| format!("channel: {e}"))?;
    let passive = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    let found = ch
        .queue_declare(queue.into(), passive, FieldTable::default())
        .await
        .is_ok();
    let _ = conn.close(200, "probe done".into()).await;
    Ok(found)
}

async fn probe(uri: &str) -> Result<Connection, String> {
    let connect = Connection::connect(uri, ConnectionProperties::default());
    match tokio::time::timeout(Duration::from_secs(10), connect).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(format!("probe connection to {uri}: {e}")),
        Err(_) => Err(format!("probe connection to {uri}: no answer")),
    }
}

/// Runs `rabbitmqctl` (bounded), failing with its output.
pub async fn rabbitmqctl(args: &[&str]) -> Result<String, String> {
    let run = tokio::process::Command::new("rabbitmqctl")
        .args(args)
        .kill_on_drop(true)
        .output();
    let out = match tokio::time::timeout(Duration::from_secs(60), run).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return Err(format!("rabbitmqctl {args:?}: {e}")),
        Err(_) => return Err(format!("rabbitmqctl {args:?}: no answer within 60 s")),
    };
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!(
            "rabbitmqctl {args:?}: {}{}",
            text,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Has the broker close the connection whose client-given name is `name`, as an operator or
/// a failing network would.
pub async fn kill_connection(name: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let list = rabbitmqctl(&[
            "list_connections",
            "pid",
            "client_properties",
            "--no-table-headers",
            "--quiet",
        ])
        .await?;
        let needle = format!("\"{name}\"");
        let pid = list
            .lines()
            .find(|l| l.contains(&needle))
            .and_then(|l| l.split_whitespace().next());
        if let Some(pid) = pid {
            rabbitmqctl(&["close_connection", pid, "conformance: killed by the test"]).await?;
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("no connection named {name} on the broker:\n{list}"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
