//! The production `BrokerPort`: RabbitMQ (or LavinMQ, by URI) through lapin (ch. 10 §8,
//! CB-308 §7.9–§7.10).
//!
//! One task owns the connection. Each connection is a new *generation*: the core hears
//! `Up { generation }`, declares its topology, and every delivery it later acks names that
//! generation; an ack for an older one is never sent (the broker already requeued that
//! message). Publishes go on their own channel with confirms; deliveries, acks and declares on
//! another, so a publish blocked by flow control never holds an ack back. A mandatory publish
//! that comes back returned is `Unroutable` even though its confirm is an ack.
//!
//! Given several URIs (the nodes of a cluster), each attempt goes to the next node after the
//! one that failed or was lost, and the backoff waits only once every node has been tried.

mod headers;
mod session;
pub mod topology;

pub use headers::{from_table, to_table, HeaderError};

use fleet_core::broker::{BrokerEvent, BrokerOp, Names};
use lapin::tcp::OwnedTLSConfig;
use lapin::uri::{AMQPScheme, AMQPUri};
use lapin::{Connection, ConnectionProperties};
use std::str::FromStr;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// How to reach the broker. Every field has a default but the URI.
#[derive(Clone, Debug)]
pub struct AmqpConfig {
    /// `amqp://user:pass@host:5672/vhost` or `amqps://…`: this gateway's own login, one per
    /// node of the cluster (at least one).
    pub uris: Vec<String>,
    /// Prefix of every exchange and queue name (`fleet`), so fleets and test runs can share
    /// one broker.
    pub namespace: String,
    /// Shown by the broker (`rabbitmqctl list_connections name`); a generation suffix is added.
    pub connection_name: String,
    /// AMQP heartbeat; a dead peer is noticed within about twice this. Set in the URI
    /// (`?heartbeat=`) to override.
    pub heartbeat_secs: u16,
    /// PEM of the CA that signed the broker's certificate, for `amqps://` with a private CA.
    pub ca_pem: Option<String>,
    /// Bound on connecting (TCP, TLS, AMQP handshake, channels).
    pub connect_timeout: Duration,
    /// Bound on any one broker round trip (a declare, a publish handed to the socket, an ack).
    /// Past it the connection is abandoned and a new generation begins.
    pub op_timeout: Duration,
    /// Reconnect backoff: doubles from `backoff_min` up to `backoff_max`.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
}

impl AmqpConfig {
    /// One node.
    pub fn new(uri: &str, namespace: &str) -> Self {
        Self::cluster(vec![uri.to_string()], namespace)
    }

    /// The nodes of a cluster, one URI each.
    pub fn cluster(uris: Vec<String>, namespace: &str) -> Self {
        AmqpConfig {
            uris,
            namespace: namespace.to_string(),
            connection_name: format!("fleetd/{namespace}"),
            heartbeat_secs: 10,
            ca_pem: None,
            connect_timeout: Duration::from_secs(10),
            op_timeout: Duration::from_secs(10),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
        }
    }
}

/// A configuration the port refuses before it ever connects.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AmqpError {
    #[error("broker uri {uri:?}: {why}")]
    BadUri { uri: String, why: String },
    #[error("namespace {0:?} must be 1-64 letters, digits, '-' or '_'")]
    BadNamespace(String),
    #[error("no broker uri given")]
    NoUri,
}

/// What the port is doing, for `/healthz`, metrics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    pub connected: bool,
    /// The current (or last) connection's generation; 0 before the first.
    pub generation: u32,
    /// Why the last connection attempt or connection ended.
    pub last_error: Option<String>,
    /// The last generation that ended and why, set before its `Down` is sent (later failed
    /// attempts to reconnect do not overwrite it).
    pub last_end: Option<(u32, String)>,
    /// Deliveries refused by the shell before the core saw them (malformed AMQP headers):
    /// rejected to the dead-letter exchange.
    pub malformed: u64,
    /// The node of the current (or last) connection, its password hidden.
    pub node: Option<String>,
    /// Queues this connection found with the other type than `queue_type` and kept as they
    /// are (each named in a warning): what is left of a switch of types.
    pub kept_other_type: u64,
}

/// The lapin `BrokerPort`. Dropping it stops the connection task.
pub struct AmqpBroker {
    ops: mpsc::UnboundedSender<session::Tagged>,
    events: mpsc::UnboundedReceiver<BrokerEvent>,
    status: watch::Receiver<Status>,
    /// The generation the core was last told is up (0 after `Down`): every op is tagged with
    /// it, so an op the core made before it heard `Down` never reaches the next connection.
    told: u32,
}

impl AmqpBroker {
    /// Validates `cfg` and starts connecting (on the current tokio runtime). Connection
    /// failures are not errors here: the port keeps retrying and reports through `status`.
    pub fn start(cfg: AmqpConfig) -> Result<AmqpBroker, AmqpError> {
        if cfg.uris.is_empty() {
            return Err(AmqpError::NoUri);
        }
        let uris = cfg
            .uris
            .iter()
            .map(|u| parse_uri(&cfg, u).map(|parsed| (parsed, redact(u))))
            .collect::<Result<Vec<_>, _>>()?;
        let ns = &cfg.namespace;
        if ns.is_empty()
            || ns.len() > 64
            || !ns
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(AmqpError::BadNamespace(ns.clone()));
        }
        let (ops, ops_rx) = mpsc::unbounded_channel();
        let (events_tx, events) = mpsc::unbounded_channel();
        let (status_tx, status) = watch::channel(Status::default());
        tokio::spawn(manage(cfg, uris, ops_rx, events_tx, status_tx));
        Ok(AmqpBroker {
            ops,
            events,
            status,
            told: 0,
        })
    }

    /// A live view of the connection's state.
    pub fn status(&self) -> watch::Receiver<Status> {
        self.status.clone()
    }
}

impl crate::BrokerPort for AmqpBroker {
    fn submit(&mut self, op: BrokerOp) {
        // Only fails once the task is gone, which it never is while the port lives.
        let _ = self.ops.send((self.told, op));
    }

    /// Cancel-safe: the generation is noted in the same poll that takes the event.
    async fn next_event(&mut self) -> Option<BrokerEvent> {
        let ev = self.events.recv().await;
        match &ev {
            Some(BrokerEvent::Up { generation }) => self.told = *generation,
            Some(BrokerEvent::Down) => self.told = 0,
            _ => {}
        }
        ev
    }
}

fn parse_uri(cfg: &AmqpConfig, text: &str) -> Result<AMQPUri, AmqpError> {
    let bad = |why: String| AmqpError::BadUri {
        uri: redact(text),
        why,
    };
    if !(text.starts_with("amqp://") || text.starts_with("amqps://")) {
        return Err(bad("must start with amqp:// or amqps://".into()));
    }
    let mut uri = AMQPUri::from_str(text).map_err(bad)?;
    if uri.query.heartbeat.is_none() {
        uri.query.heartbeat = Some(cfg.heartbeat_secs);
    }
    if cfg.ca_pem.is_some() && uri.scheme != AMQPScheme::AMQPS {
        return Err(bad(
            "a CA file is given but the scheme is not amqps://".into()
        ));
    }
    Ok(uri)
}

/// The URI without its password, for messages and logs.
pub fn redact(uri: &str) -> String {
    match (uri.find("://"), uri.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let cred = &uri[s + 3..at];
            let user = cred.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &uri[..s + 3], &uri[at..])
        }
        _ => uri.to_string(),
    }
}

async fn connect(
    cfg: &AmqpConfig,
    (uri, shown): &(AMQPUri, String),
    generation: u32,
) -> Result<Connection, String> {
    let props = ConnectionProperties::default()
        .with_connection_name(format!("{}#{generation}", cfg.connection_name).into());
    let tls = OwnedTLSConfig {
        identity: None,
        cert_chain: cfg.ca_pem.clone(),
    };
    let runtime = lapin::runtime::default_runtime().map_err(|e| e.to_string())?;
    let attempt = Connection::connect_uri_with_config(uri.clone(), props, tls, runtime);
    match tokio::time::timeout(cfg.connect_timeout, attempt).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(format!("connecting to {shown}: {e}")),
        Err(_) => Err(format!(
            "connecting to {shown}: no answer within {:?}",
            cfg.connect_timeout
        )),
    }
}

/// Connect, announce `Up`, run the session until the connection dies, announce `Down`, try
/// the next node (backing off once every node has failed in a row), repeat — until the port
/// is dropped.
async fn manage(
    cfg: AmqpConfig,
    uris: Vec<(AMQPUri, String)>,
    mut ops: mpsc::UnboundedReceiver<session::Tagged>,
    events: mpsc::UnboundedSender<BrokerEvent>,
    status: watch::Sender<Status>,
) {
    let names = Names::new(&cfg.namespace);
    let mut generation = 0u32;
    let mut backoff = cfg.backoff_min;
    // The node to try next, and how many attempts in a row have failed (a lost connection
    // counts as the first).
    let mut at = 0usize;
    let mut failures = 0usize;
    loop {
        if events.is_closed() {
            return;
        }
        generation += 1;
        let node = &uris[at % uris.len()];
        status.send_modify(|st| st.node = Some(node.1.clone()));
        let open = async {
            match connect(&cfg, node, generation).await {
                Ok(conn) => session::Session::open(conn, generation, &cfg, &names).await,
                Err(e) => Err(e),
            }
        };
        // The port dropped while the broker is unreachable: stop now, not after the attempt.
        let opened = tokio::select! {
            biased;
            () = events.closed() => return,
            opened = open => opened,
        };
        match opened {
            Ok(mut s) => {
                status.send_modify(|st| {
                    st.connected = true;
                    st.generation = generation;
                });
                failures = 0;
                tracing::info!(generation, broker = %node.1, "broker connected");
                if events.send(BrokerEvent::Up { generation }).is_err() {
                    return;
                }
                let started = tokio::time::Instant::now();
                let end = s.run(&mut ops, &events, &status).await;
                s.close().await;
                // The status first, so whoever hears `Down` can read why.
                let why = match end {
                    session::End::PortDropped => None,
                    session::End::Failed(why) => Some(why),
                };
                if let Some(why) = &why {
                    tracing::error!(generation, %why, "broker connection lost");
                }
                let dropped = why.is_none();
                status.send_modify(|st| {
                    st.connected = false;
                    if let Some(why) = why {
                        st.last_end = Some((generation, why.clone()));
                        st.last_error = Some(why);
                    }
                });
                let _ = events.send(BrokerEvent::Down);
                if dropped {
                    return;
                }
                // A connection that lived a while earns a quick reconnect; one refused right
                // after connecting (a second gateway on an exclusive inbox) keeps backing off.
                if started.elapsed() >= cfg.backoff_max * 2 {
                    backoff = cfg.backoff_min;
                }
            }
            Err(why) => {
                tracing::warn!(generation, broker = %node.1, %why, "broker connection attempt failed");
                status.send_modify(|st| {
                    st.connected = false;
                    st.last_error = Some(why);
                });
            }
        }
        // The node that failed is tried again last; a node not yet tried is tried at once.
        at = (at + 1) % uris.len();
        failures += 1;
        if !failures.is_multiple_of(uris.len()) {
            continue;
        }
        tokio::select! {
            biased;
            () = events.closed() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(cfg.backoff_max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_uris_are_refused_with_the_password_hidden() {
        let cfg = AmqpConfig::new("amqp://localhost", "fleet");
        let err = parse_uri(&cfg, "http://guest:secret@localhost").expect_err("wrong scheme");
        assert!(err.to_string().contains("amqp://"), "{err}");
        assert!(!err.to_string().contains("secret"), "{err}");
        let err = parse_uri(&cfg, "amqp://guest:secret@localhost:notaport").expect_err("bad port");
        assert!(!err.to_string().contains("secret"), "{err}");
    }

    #[test]
    fn the_heartbeat_defaults_but_the_uri_wins() {
        let cfg = AmqpConfig::new("amqp://localhost", "fleet");
        let heartbeat = |u: &str| parse_uri(&cfg, u).map(|u| u.query.heartbeat);
        assert_eq!(heartbeat("amqp://localhost"), Ok(Some(10)));
        assert_eq!(heartbeat("amqp://localhost/%2f?heartbeat=3"), Ok(Some(3)));
    }

    #[test]
    fn a_ca_file_needs_amqps() {
        let mut cfg = AmqpConfig::new("amqp://localhost", "fleet");
        cfg.ca_pem = Some("-----BEGIN CERTIFICATE-----".into());
        assert!(parse_uri(&cfg, "amqp://localhost").is_err());
        assert!(parse_uri(&cfg, "amqps://localhost").is_ok());
    }

    #[test]
    fn redaction_keeps_the_user() {
        assert_eq!(
            redact("amqp://gw-a:pw@broker:5672/%2f"),
            "amqp://gw-a:***@broker:5672/%2f"
        );
        assert_eq!(redact("amqp://broker"), "amqp://broker");
    }
}
