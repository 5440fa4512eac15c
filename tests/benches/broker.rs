//! The broker benchmark, on the real RabbitMQ (`FLEET_AMQP_URI`, default 127.0.0.1:5672): the
//! whole story in one run, so every ratio compares figures taken minutes apart on one machine.
//!
//! 1. **raw lapin, one way**: publish with confirms → consume → ack, with a body and header
//!    table the size of a real envelope's, at 1 and at N messages in flight: the broker's
//!    ceiling here, with each message's latency from publish to consume.
//! 2. **raw lapin, two hops**: a request → a reply, each confirmed and acked, the replier on a
//!    connection of its own: what a delegation's broker traffic costs with nothing else.
//! 3. **fleetd**: a lead on gw0 delegates to members on gw1, whose herdr double replies the
//!    moment a brief is typed and reports idle as herdr's events would (delegate → SEND →
//!    inject → INJECTED + REPLY → the lead). gw1 runs in a child process (this binary again,
//!    `--role worker`), so CPU is measured per process. At 1 and at N delegations in flight:
//!    round trips/s, inbox deliveries/s, latency p50/p99/max, CPU per round trip by process,
//!    signatures made and checked per round trip; then the ratios to raw.
//! 4. **backlog**: 10,000 signed SENDs wait in one inbox before its gateway starts; how fast it
//!    drains, the most deliveries the core ever held unacked, and the resident memory.
//! 5. **end to end on a real herdr** (only when `HERDR_BIN` names one): a `fleetd` process
//!    with the example config's `echo` member; the time from `fleet_send` to `REPLIED` minus
//!    the member's own time (which it reports in its reply), p50/p99.
//!
//! 6. **cluster** (only with `--only cluster`; it needs root and `rabbitmq-server`): part 3 on
//!    one node with classic queues, then on a three-node cluster (`scripts/cluster/`) with
//!    quorum ones, in one run; then the node leading the inboxes is killed (`kill -9`) under
//!    load, `--rounds` times: the time from its death to the first delegation begun after it
//!    completing, and the round trips that failed meanwhile.
//!
//! `cargo bench -p fleet-tests --bench broker [-- --messages N --secs S --workers W
//! --backlog B --e2e K --rounds R --only raw|fleetd|backlog|e2e|cluster|node-loss]`; `BENCH_E2E_LOG=1`
//! prints the daemon's log after the end-to-end run.

use fleet_core::broker::BrokerEvent;
use fleet_core::envelope::{Envelope, HeaderValue, Headers, Payload, VERSION};
use fleet_core::signing::{CryptoCounts, Keyring};
use fleet_core::{
    AgentStatus, Gateway, Input, MsgId, Outcome, Output, Principal, Request, Response, SessionId,
    TraceId,
};
use fleet_sim::agent::Behaviour;
use fleet_tests::gateways::{
    amqp_uri, amqp_uris, host, lead, lead_principal, member, test_config, TestFleet,
};
use fleetd::{
    AmqpBroker, AmqpConfig, Driver, Handle, HerdrError, HerdrPort, Observer, PortFuture, Sample,
    TokioClock,
};
use futures_util::stream::{FuturesUnordered, StreamExt};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::Semaphore;
use tokio::time::Instant;

struct Args {
    messages: usize,
    secs: u64,
    workers: usize,
    backlog: usize,
    e2e: usize,
    /// Node losses in the cluster part.
    rounds: usize,
    /// `worker`: this process is the child that runs gw1 (`--ns` names the fleet).
    role: Option<String>,
    /// Run one part only: `raw`, `fleetd`, `backlog` or `e2e` (ratios need the first two).
    only: Option<String>,
    ns: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        messages: 20_000,
        secs: 10,
        workers: 256,
        backlog: 10_000,
        e2e: 200,
        rounds: 3,
        role: None,
        ns: None,
        only: None,
    };
    let argv: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < argv.len() {
        let text = argv.get(i + 1).cloned();
        let v = text.as_deref().and_then(|s| s.parse::<u64>().ok());
        match (argv[i].as_str(), v, text) {
            ("--messages", Some(v), _) => a.messages = v as usize,
            ("--secs", Some(v), _) => a.secs = v,
            ("--workers", Some(v), _) => a.workers = v.max(1) as usize,
            ("--backlog", Some(v), _) => a.backlog = v as usize,
            ("--e2e", Some(v), _) => a.e2e = v as usize,
            ("--rounds", Some(v), _) => a.rounds = v.max(1) as usize,
            ("--role", _, Some(t)) => a.role = Some(t),
            ("--ns", _, Some(t)) => a.ns = Some(t),
            ("--only", _, Some(t)) => a.only = Some(t),
            ("--bench", _, _) => {
                i += 1;
                continue;
            }
            (other, _, _) => {
                eprintln!("unknown or incomplete argument {other:?}; see the file's header");
                std::process::exit(2);
            }
        }
        i += 2;
    }
    a
}

fn main() {
    let a = args();
    // The gateways here must cost what fleetd's release build costs: this crate links the
    // simulation, whose features (every-step invariant checks, a memo of verified
    // signatures) Cargo unifies into fleet-core for it. Both are switched off at runtime.
    fleet_core::signing::verify_memo_off();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    let local = tokio::task::LocalSet::new();
    let result = match a.role.as_deref() {
        Some("worker") => local.block_on(&rt, worker_role(a)),
        Some(other) => Err(format!("unknown role {other:?}")),
        None => local.block_on(&rt, run(a)),
    };
    if let Err(e) = result {
        eprintln!("broker bench failed: {e}");
        std::process::exit(1);
    }
}

async fn run(a: Args) -> Result<(), String> {
    let uri = amqp_uri();
    let n = a.workers;
    match a.only.as_deref() {
        None => {}
        Some("raw") => return raw_part(&uri, &a).await.map(|_| ()),
        Some("backlog") => return backlog(a.backlog).await.map(|_| ()),
        Some("e2e") => return e2e_herdr(a.e2e).await,
        Some("cluster") => return cluster_part(&a).await,
        Some("node-loss") => return node_loss_only(&a).await,
        Some("fleetd") => {
            let (f1, fnn) = fleetd_round_trips(a.secs, n).await?;
            print_trips(n, &f1, &fnn);
            return Ok(());
        }
        Some(other) => {
            return Err(format!(
                "--only takes raw, fleetd, backlog, e2e, cluster or node-loss, not {other:?}"
            ))
        }
    }
    println!(
        "broker bench against {} ({} cores)",
        fleetd::amqp::redact(&uri),
        std::thread::available_parallelism().map_or(0, |c| c.get())
    );
    let (_, one_n, two_1, two_n) = raw_part(&uri, &a).await?;
    println!("fleetd: lead on gw0 -> member on gw1 (a child process) -> reply; SEND and REPLY per round trip, INJECTED too when the turn outlasts injected_defer_ms");
    let (f1, fnn) = fleetd_round_trips(a.secs, n).await?;
    print_trips(n, &f1, &fnn);
    print_ratios(n, (&one_n, &two_1, &two_n), (&f1, &fnn));
    let drained = backlog(a.backlog).await?;
    // One line a CI log can be grepped for.
    println!(
        "broker-summary: fleetd/raw deliveries {:.1}% | fleetd/raw two-hop round trips {:.1}% | CPU per round trip at {n} in flight {:.0} us | {:.2} signs {:.2} verifies per round trip | round trip p50 at 1 {} | backlog {:.0}/s, RSS +{} KiB",
        100.0 * fnn.deliveries_per_sec / one_n.rate,
        100.0 * fnn.lat.rate / two_n.rate,
        fnn.cpu_us.0 + fnn.cpu_us.1,
        fnn.signs,
        fnn.verifies,
        ms(f1.lat.p50),
        drained.rate,
        drained.rss_growth_kib
    );
    e2e_herdr(a.e2e).await
}

/// What the backlog phase measured.
struct Drained {
    rate: f64,
    rss_growth_kib: u64,
}

/// Raw lapin one way and two hops, at 1 and N in flight.
async fn raw_part(uri: &str, a: &Args) -> Result<(Figures, Figures, Figures, Figures), String> {
    let n = a.workers;
    println!("\nraw lapin, one way: publish + confirm -> consume -> ack (persistent, envelope-sized headers, 200-byte body)");
    let one_1 = raw_one_way(uri, (a.messages / 10).max(100), 1).await?;
    println!("  1 in flight    : {}", one_1.line("msg/s"));
    let one_n = raw_one_way(uri, a.messages, n).await?;
    println!("  {n:<3} in flight  : {}", one_n.line("msg/s"));
    println!("raw lapin, two hops: request -> reply, each confirmed and acked; the replier on its own connection");
    let two_1 = raw_two_hops(uri, (a.messages / 10).max(100), 1).await?;
    println!("  1 in flight    : {}", two_1.line("round trips/s"));
    let two_n = raw_two_hops(uri, a.messages / 2, n).await?;
    println!("  {n:<3} in flight  : {}", two_n.line("round trips/s"));
    Ok((one_1, one_n, two_1, two_n))
}

fn print_trips(n: usize, f1: &Trips, fnn: &Trips) {
    for (label, f) in [("1 in flight   ", f1), (&format!("{n:<3} in flight "), fnn)] {
        println!(
            "  {label} : {} ({:.0} inbox deliveries/s)",
            f.lat.line("round trips/s"),
            f.deliveries_per_sec
        );
        println!(
            "                   CPU per round trip: gw0 + lead {:.0} µs, gw1 {:.0} µs, both {:.0} µs; per round trip {:.2} signs, {:.2} verifies",
            f.cpu_us.0,
            f.cpu_us.1,
            f.cpu_us.0 + f.cpu_us.1,
            f.signs,
            f.verifies
        );
        if f.failed > 0 {
            println!(
                "                   ({} round trips did not end REPLIED)",
                f.failed
            );
        }
    }
}

fn print_ratios(n: usize, raw: (&Figures, &Figures, &Figures), fleetd: (&Trips, &Trips)) {
    let ((one_n, two_1, two_n), (f1, fnn)) = (raw, fleetd);
    println!("ratios (goals of issue 22 in brackets)");
    println!(
        "  throughput     : fleetd inbox deliveries/s {:.0} / raw one-way msg/s {:.0} = {:.1}% [>= 50%]; fleetd round trips/s / raw two-hop = {:.1}%",
        fnn.deliveries_per_sec,
        one_n.rate,
        100.0 * fnn.deliveries_per_sec / one_n.rate,
        100.0 * fnn.lat.rate / two_n.rate
    );
    println!(
        "  latency, 1     : fleetd p50 {} p99 {} [<= 5 ms, <= 25 ms]; raw two-hop p50 {} p99 {}; fleetd / raw p50 = {:.1}x",
        ms(f1.lat.p50),
        ms(f1.lat.p99),
        ms(two_1.p50),
        ms(two_1.p99),
        f1.lat.p50.as_secs_f64() / two_1.p50.as_secs_f64().max(1e-9)
    );
    println!(
        "  latency, {n:<3}   : fleetd p50 {} p99 {}; raw two-hop p50 {} p99 {}",
        ms(fnn.lat.p50),
        ms(fnn.lat.p99),
        ms(two_n.p50),
        ms(two_n.p99)
    );
    println!(
        "  CPU            : both gateways {:.0} µs per round trip at {n} in flight [<= 250 µs]",
        fnn.cpu_us.0 + fnn.cpu_us.1
    );
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// A rate and the latency distribution behind it.
struct Figures {
    rate: f64,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

impl Figures {
    fn of(count: usize, secs: f64, mut lat: Vec<Duration>) -> Figures {
        lat.sort_unstable();
        let at = |q: f64| {
            let i = ((lat.len() as f64 * q).ceil() as usize).saturating_sub(1);
            lat.get(i).copied().unwrap_or_default()
        };
        Figures {
            rate: count as f64 / secs.max(1e-9),
            p50: at(0.50),
            p99: at(0.99),
            max: lat.last().copied().unwrap_or_default(),
        }
    }

    fn line(&self, unit: &str) -> String {
        format!(
            "{:>8.0} {unit}, latency p50 {} p99 {} max {}",
            self.rate,
            ms(self.p50),
            ms(self.p99),
            ms(self.max)
        )
    }
}

/// A header table the size of a real envelope's.
fn envelope_sized_headers() -> Headers {
    let mut h = Headers::new();
    for k in ["msgId", "traceId", "from", "to", "re", "turnId"] {
        h.insert(
            k.into(),
            HeaderValue::Str("0f3c2a9e-6d1b-4c8a-9e2f-7b5d4a3c1e0f".into()),
        );
    }
    for (k, v) in [("v", "1.0"), ("kind", "SEND"), ("signer", "gw0")] {
        h.insert(k.into(), HeaderValue::Str(v.into()));
    }
    h.insert("ts".into(), HeaderValue::Int(1_790_000_000_000));
    h.insert("expiresAt".into(), HeaderValue::Int(1_790_000_600_000));
    h.insert("sig".into(), HeaderValue::Bytes(vec![7; 64]));
    h
}

fn lapin_err(what: &'static str) -> impl Fn(lapin::Error) -> String {
    move |err| format!("raw {what}: {err}")
}

/// A connection with a confirming publish channel and a consume channel.
async fn raw_connection(uri: &str) -> Result<(Connection, Channel, Channel), String> {
    let conn = Connection::connect(uri, ConnectionProperties::default())
        .await
        .map_err(lapin_err("connect"))?;
    let publish = conn.create_channel().await.map_err(lapin_err("channel"))?;
    publish
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(lapin_err("confirms"))?;
    let consume = conn.create_channel().await.map_err(lapin_err("channel"))?;
    consume
        .basic_qos(64, BasicQosOptions::default())
        .await
        .map_err(lapin_err("qos"))?;
    Ok((conn, publish, consume))
}

async fn raw_queue(ch: &Channel, name: &str) -> Result<lapin::Consumer, String> {
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(name.into(), durable, FieldTable::default())
        .await
        .map_err(lapin_err("declare"))?;
    ch.basic_consume(
        name.into(),
        "raw".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    )
    .await
    .map_err(lapin_err("consume"))
}

/// A 200-byte body whose first 8 bytes are `seq`.
fn numbered_body(seq: usize) -> Vec<u8> {
    let mut body = vec![b'x'; 200];
    body[..8].copy_from_slice(&(seq as u64).to_le_bytes());
    body
}

fn body_seq(body: &[u8]) -> Option<usize> {
    let b: [u8; 8] = body.get(..8)?.try_into().ok()?;
    Some(u64::from_le_bytes(b) as usize)
}

async fn publish_numbered(
    ch: &Channel,
    queue: &str,
    seq: usize,
    table: &FieldTable,
) -> Result<lapin::PublisherConfirm, String> {
    let props = BasicProperties::default()
        .with_headers(table.clone())
        .with_delivery_mode(2);
    ch.basic_publish(
        "".into(),
        queue.into(),
        BasicPublishOptions::default(),
        &numbered_body(seq),
        props,
    )
    .await
    .map_err(lapin_err("publish"))
}

/// Publishes `n` numbered messages to `to` on `publish`, at most `window` of them without
/// their answer read from `answers` (acked on `acker`); each one's latency from publish to
/// answer, and the seconds the whole took.
async fn closed_loop(
    publish: &Channel,
    to: &str,
    (mut answers, acker): (lapin::Consumer, Channel),
    n: usize,
    window: usize,
) -> Result<(Vec<Duration>, f64), String> {
    let table = fleetd::amqp::to_table(&envelope_sized_headers()).map_err(|e| e.to_string())?;
    let sent: Rc<RefCell<Vec<Instant>>> = Rc::new(RefCell::new(Vec::with_capacity(n)));
    let room = Rc::new(Semaphore::new(window));
    let start = Instant::now();
    let (sent2, room2) = (sent.clone(), room.clone());
    let reader = tokio::task::spawn_local(async move {
        let mut lat = Vec::with_capacity(n);
        while lat.len() < n {
            let Some(Ok(d)) = answers.next().await else {
                break;
            };
            let at = body_seq(&d.data).and_then(|s| sent2.borrow().get(s).copied());
            if let Some(at) = at {
                lat.push(at.elapsed());
            }
            if acker
                .basic_ack(d.delivery_tag, BasicAckOptions::default())
                .await
                .is_err()
            {
                break;
            }
            room2.add_permits(1);
        }
        lat
    });
    let mut confirms = FuturesUnordered::new();
    for seq in 0..n {
        room.acquire().await.map_err(|e| e.to_string())?.forget();
        while let Some(Some(_)) = futures_util::FutureExt::now_or_never(confirms.next()) {}
        sent.borrow_mut().push(Instant::now());
        confirms.push(publish_numbered(publish, to, seq, &table).await?);
    }
    while confirms.next().await.is_some() {}
    let lat = reader.await.map_err(|e| e.to_string())?;
    Ok((lat, start.elapsed().as_secs_f64()))
}

/// `n` messages, at most `window` published and not yet consumed.
async fn raw_one_way(uri: &str, n: usize, window: usize) -> Result<Figures, String> {
    let (conn, publish, consume) = raw_connection(uri).await?;
    let queue = format!("bench{}.raw1.{window}", std::process::id());
    let consumer = raw_queue(&consume, &queue).await?;
    let run = closed_loop(&publish, &queue, (consumer, consume.clone()), n, window).await;
    let _ = consume
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await;
    let _ = conn.close(200, "bench done".into()).await;
    let (lat, secs) = run?;
    if lat.len() < n {
        return Err(format!("raw one way: only {} of {n} consumed", lat.len()));
    }
    Ok(Figures::of(n, secs, lat))
}

/// `n` requests, at most `window` without their reply; each answered by a replier on its own
/// connection, which publishes the reply, waits for its confirm, then acks the request.
async fn raw_two_hops(uri: &str, n: usize, window: usize) -> Result<Figures, String> {
    let (conn, publish, consume) = raw_connection(uri).await?;
    let (rconn, rpublish, rconsume) = raw_connection(uri).await?;
    let base = format!("bench{}.raw2.{window}", std::process::id());
    let (req, rep) = (format!("{base}.req"), format!("{base}.rep"));
    let mut requests = raw_queue(&rconsume, &req).await?;
    let replies = raw_queue(&consume, &rep).await?;
    let table = fleetd::amqp::to_table(&envelope_sized_headers()).map_err(|e| e.to_string())?;
    let replier = {
        let rep = rep.clone();
        tokio::task::spawn_local(async move {
            let mut inflight = FuturesUnordered::new();
            loop {
                tokio::select! {
                    biased;
                    Some(()) = inflight.next(), if !inflight.is_empty() => {}
                    d = requests.next() => {
                        let Some(Ok(d)) = d else { break };
                        let (ch, ack, table, rep) =
                            (rpublish.clone(), rconsume.clone(), table.clone(), rep.clone());
                        inflight.push(async move {
                            let Some(seq) = body_seq(&d.data) else { return };
                            if let Ok(c) = publish_numbered(&ch, &rep, seq, &table).await {
                                let _ = c.await;
                            }
                            let _ = ack.basic_ack(d.delivery_tag, BasicAckOptions::default()).await;
                        });
                    }
                }
            }
        })
    };
    let run = closed_loop(&publish, &req, (replies, consume.clone()), n, window).await;
    for q in [&req, &rep] {
        let _ = consume
            .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
            .await;
    }
    let _ = rconn.close(200, "bench done".into()).await;
    replier.abort();
    let _ = conn.close(200, "bench done".into()).await;
    let (lat, secs) = run?;
    if lat.len() < n {
        return Err(format!("raw two hops: only {} of {n} answered", lat.len()));
    }
    Ok(Figures::of(n, secs, lat))
}

/// A herdr double whose agents reply the moment a brief is typed and then report idle, as a
/// member reporting itself to a real herdr does (herdr then emits `pane.agent_status_changed`,
/// which fleetd hears as a hint). The benchmark measures fleetd and the broker, not an agent.
#[derive(Clone, Default)]
struct EchoHerdr {
    panes: Rc<RefCell<BTreeMap<SessionId, AgentStatus>>>,
    gateway: Rc<RefCell<Option<Handle>>>,
    typed: Rc<Cell<u64>>,
}

impl EchoHerdr {
    fn with_idle(gids: &[SessionId]) -> EchoHerdr {
        let echo = EchoHerdr::default();
        for g in gids {
            echo.panes.borrow_mut().insert(g.clone(), AgentStatus::Idle);
        }
        echo
    }
}

impl HerdrPort for EchoHerdr {
    fn sample(&self, target: &SessionId) -> PortFuture<Result<Sample, HerdrError>> {
        let status = self.panes.borrow().get(target).copied();
        Box::pin(async move {
            Ok(Sample {
                status: status.ok_or(HerdrError::PaneNotFound)?,
                screen: None,
            })
        })
    }

    fn inject(
        &self,
        target: &SessionId,
        text: &str,
    ) -> PortFuture<Result<String, fleetd::InjectFailure>> {
        let (me, target, len) = (self.clone(), target.clone(), text.len());
        Box::pin(async move {
            me.panes
                .borrow_mut()
                .insert(target.clone(), AgentStatus::Working);
            me.typed.set(me.typed.get() + 1);
            let handle = me.gateway.borrow().clone();
            if let Some(h) = handle {
                let panes = me.panes.clone();
                tokio::task::spawn_local(async move {
                    let reply = Request::Reply {
                        content: format!("done: {len}"),
                    };
                    let _ = h.call(Principal::worker(target.clone()), reply).await;
                    panes.borrow_mut().insert(target.clone(), AgentStatus::Idle);
                    let _ = h.tell(Input::StatusHint { target }).await;
                });
            }
            Ok(String::new())
        })
    }

    fn read(&self, _target: &SessionId) -> PortFuture<Result<String, HerdrError>> {
        Box::pin(async { Ok("❯ ".to_string()) })
    }

    fn spawn(
        &self,
        _: &SessionId,
        _: &fleet_core::SpawnSpec,
    ) -> PortFuture<Result<fleet_core::Launched, fleet_core::SpawnError>> {
        Box::pin(async {
            Err(fleet_core::SpawnError::Refused(
                "the bench spawns nothing".into(),
            ))
        })
    }

    fn close(&self, _: &SessionId) -> PortFuture<Result<(), HerdrError>> {
        Box::pin(async { Ok(()) })
    }
}

/// The default poll (500 ms): delivery no longer waits for it; presence that outlives the
/// backlog phase's stopped gateway.
fn bench_config() -> fleet_core::CoreConfig {
    fleet_core::CoreConfig {
        presence_ttl_ms: 60_000,
        ..test_config()
    }
}

fn bench_fleet(tag: &str, workers: usize) -> Result<TestFleet, String> {
    TestFleet::new(
        tag,
        bench_config(),
        vec![vec![], vec![Behaviour::Replies; workers]],
    )
}

/// What the bench reads off a running loop, as the daemon's own observer would: inbox
/// deliveries (presence left out: background traffic at any load) and ed25519 work.
#[derive(Clone, Default)]
struct Counting {
    inbox: Rc<Cell<u64>>,
    crypto: Rc<Cell<CryptoCounts>>,
    /// Inbox deliveries handed to the core and not yet acked or rejected; the most at once.
    held: Rc<RefCell<std::collections::BTreeSet<fleet_core::broker::DeliveryId>>>,
    max_held: Rc<Cell<usize>>,
}

impl Observer for Counting {
    fn output(&mut self, _: fleet_core::Instant, out: &Output) {
        use fleet_core::broker::BrokerOp;
        if let Output::Broker(BrokerOp::Ack { delivery } | BrokerOp::Reject { delivery }) = out {
            self.held.borrow_mut().remove(delivery);
        }
    }

    fn input(&mut self, _: fleet_core::Instant, input: &Input) {
        match input {
            Input::Broker(BrokerEvent::Delivery {
                queue, delivery, ..
            }) if queue.contains(".agent.") => {
                self.inbox.set(self.inbox.get() + 1);
                let mut held = self.held.borrow_mut();
                held.insert(*delivery);
                self.max_held.set(self.max_held.get().max(held.len()));
            }
            Input::Broker(BrokerEvent::Down) => self.held.borrow_mut().clear(),
            _ => {}
        }
    }

    fn settled(&mut self, _: fleet_core::Instant, gw: &Gateway) {
        self.crypto.set(gw.crypto_counts());
    }
}

/// A running loop on the plain lapin port (no recording wrapper: what the daemon runs).
struct Plain {
    handle: Handle,
    counting: Counting,
    status: tokio::sync::watch::Receiver<fleetd::amqp::Status>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<Gateway>>,
}

impl Plain {
    async fn connected(&mut self) -> Result<(), String> {
        let up = tokio::time::timeout(
            Duration::from_secs(60),
            self.status.wait_for(|s| s.connected),
        )
        .await;
        let ok = matches!(up, Ok(Ok(_)));
        drop(up);
        match ok {
            true => Ok(()),
            false => Err(format!(
                "a bench gateway never connected to the broker within 60 s: {}",
                self.status.borrow().last_error.clone().unwrap_or_default()
            )),
        }
    }

    async fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(done) = self.done.take() {
            let _ = done.await;
        }
    }
}

async fn boot_plain<H: HerdrPort + 'static>(
    fleet: &TestFleet,
    i: usize,
    start: u64,
    herdr: H,
    members: &[SessionId],
) -> Result<Plain, String> {
    let clock = TokioClock::new();
    let mut gw = Gateway::federated(
        bench_config(),
        fleet.federation(i)?,
        (i as u64) << 32 | start,
        fleetd::Clock::now(&clock),
        fleetd::Clock::unix_ms(&clock),
    )
    .map_err(|e| e.to_string())?;
    gw.skip_invariant_checks();
    let mut amqp = AmqpConfig::cluster(amqp_uris(), &fleet.ns);
    amqp.connection_name = format!("bench/{}/gw{i}/start{start}", fleet.ns);
    let broker = AmqpBroker::start(amqp).map_err(|e| e.to_string())?;
    let status = broker.status();
    let counting = Counting::default();
    let driver = Driver::new(gw, herdr, broker, clock, counting.clone());
    let (handle, calls) = Driver::<H, AmqpBroker, TokioClock, Counting>::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let done = tokio::task::spawn_local(driver.run(calls, stopped));
    let tell = |input| {
        let h = handle.clone();
        async move { h.tell(input).await.map_err(|e| e.to_string()) }
    };
    tell(Input::LeadAttached { lead: lead(i) }).await?;
    for gid in members {
        tell(Input::MemberStarted {
            target: gid.clone(),
        })
        .await?;
        tell(Input::MemberConnected {
            target: gid.clone(),
        })
        .await?;
    }
    Ok(Plain {
        handle,
        counting,
        status,
        stop: Some(stop),
        done: Some(done),
    })
}

/// The child process: gw1 with `workers` echo members, answering `stats` and `stop` on stdin.
async fn worker_role(a: Args) -> Result<(), String> {
    let ns = a.ns.ok_or("--role worker needs --ns")?;
    let mut fleet = bench_fleet("rt", a.workers)?;
    fleet.ns = ns;
    let gids: Vec<SessionId> = (0..a.workers).map(|n| member(1, n)).collect();
    let echo = EchoHerdr::with_idle(&gids);
    let mut g1 = boot_plain(&fleet, 1, 1, echo.clone(), &gids).await?;
    *echo.gateway.borrow_mut() = Some(g1.handle.clone());
    g1.connected().await?;
    let mut out = tokio::io::stdout();
    let say = |line: String| format!("{line}\n").into_bytes();
    out.write_all(&say("ready".into()))
        .await
        .map_err(|e| e.to_string())?;
    out.flush().await.map_err(|e| e.to_string())?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        match line.trim() {
            "stats" => {
                let c = g1.counting.crypto.get();
                let line = format!("{} {} {}", g1.counting.inbox.get(), c.signs, c.verifies);
                out.write_all(&say(line)).await.map_err(|e| e.to_string())?;
                out.flush().await.map_err(|e| e.to_string())?;
            }
            _ => break,
        }
    }
    g1.shutdown().await;
    Ok(())
}

/// The child running gw1, and how to ask it for its counts.
struct Child {
    proc: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

/// A snapshot of one process's work: CPU seconds, inbox deliveries, signs, verifies.
#[derive(Clone, Copy, Default)]
struct Work {
    cpu: f64,
    inbox: u64,
    signs: u64,
    verifies: u64,
}

impl Child {
    async fn start(ns: &str, workers: usize) -> Result<Child, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut proc = tokio::process::Command::new(exe)
            .args(["--role", "worker", "--ns", ns, "--workers"])
            .arg(workers.to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting the worker process: {e}"))?;
        let stdin = proc.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(proc.stdout.take().ok_or("no stdout")?).lines();
        let mut child = Child {
            proc,
            stdin,
            stdout,
        };
        let first = tokio::time::timeout(Duration::from_secs(60), child.stdout.next_line()).await;
        match first {
            Ok(Ok(Some(l))) if l == "ready" => Ok(child),
            other => Err(format!("the worker process did not start: {other:?}")),
        }
    }

    async fn work(&mut self) -> Result<Work, String> {
        self.stdin
            .write_all(b"stats\n")
            .await
            .map_err(|e| e.to_string())?;
        self.stdin.flush().await.map_err(|e| e.to_string())?;
        let line = tokio::time::timeout(Duration::from_secs(10), self.stdout.next_line())
            .await
            .map_err(|_| "the worker process did not answer".to_string())?
            .map_err(|e| e.to_string())?
            .ok_or("the worker process ended")?;
        let n: Vec<u64> = line
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
        let [inbox, signs, verifies] = n[..] else {
            return Err(format!("the worker process said {line:?}"));
        };
        let pid = self.proc.id().ok_or("the worker process is gone")?;
        Ok(Work {
            cpu: cpu_secs_of(&format!("/proc/{pid}/stat")),
            inbox,
            signs,
            verifies,
        })
    }

    async fn stop(mut self) {
        let _ = self.stdin.write_all(b"stop\n").await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.proc.wait()).await;
    }
}

fn own_work(g: &Plain) -> Work {
    let c = g.counting.crypto.get();
    Work {
        cpu: cpu_secs_of("/proc/self/stat"),
        inbox: g.counting.inbox.get(),
        signs: c.signs,
        verifies: c.verifies,
    }
}

/// One measured phase of delegations.
struct Trips {
    lat: Figures,
    deliveries_per_sec: f64,
    /// CPU µs per round trip: (gw0 with the lead, gw1).
    cpu_us: (f64, f64),
    signs: f64,
    verifies: f64,
    failed: u64,
}

async fn fleetd_round_trips(secs: u64, workers: usize) -> Result<(Trips, Trips), String> {
    let fleet = bench_fleet("rt", workers)?;
    let gids: Vec<SessionId> = (0..workers).map(|n| member(1, n)).collect();
    let mut child = Child::start(&fleet.ns, workers).await?;
    let mut g0 = boot_plain(&fleet, 0, 1, EchoHerdr::default(), &[]).await?;
    g0.connected().await?;
    wait_listed(&g0.handle, &gids).await?;
    let one = phase(&g0, &mut child, &gids[..1], secs).await;
    let many = phase(&g0, &mut child, &gids, secs).await;
    child.stop().await;
    g0.shutdown().await;
    let mut fleet = fleet;
    fleet.finish_with(&gids).await;
    Ok((one?, many?))
}

/// Keeps one blocking delegation open to each of `gids` for a second of warm-up and then
/// `secs` measured.
async fn phase(
    g0: &Plain,
    child: &mut Child,
    gids: &[SessionId],
    secs: u64,
) -> Result<Trips, String> {
    let lat: Rc<RefCell<Vec<Duration>>> = Rc::default();
    let failed = Rc::new(Cell::new(0u64));
    let counting = Rc::new(Cell::new(false));
    let stop_at = Instant::now() + Duration::from_secs(secs + 1);
    let mut tasks = Vec::new();
    for g in gids {
        let (h, g, lat, failed, counting) = (
            g0.handle.clone(),
            g.clone(),
            lat.clone(),
            failed.clone(),
            counting.clone(),
        );
        tasks.push(tokio::task::spawn_local(async move {
            while Instant::now() < stop_at {
                let began = Instant::now();
                let ok = round_trip(&h, &g).await;
                if counting.get() {
                    if ok {
                        lat.borrow_mut().push(began.elapsed());
                    } else {
                        failed.set(failed.get() + 1);
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (w0, w1) = (own_work(g0), child.work().await?);
    counting.set(true);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    counting.set(false);
    let elapsed = start.elapsed().as_secs_f64();
    let (v0, v1) = (own_work(g0), child.work().await?);
    for t in tasks {
        let _ = t.await;
    }
    let lat = std::mem::take(&mut *lat.borrow_mut());
    let n = lat.len().max(1) as f64;
    Ok(Trips {
        deliveries_per_sec: ((v0.inbox - w0.inbox) + (v1.inbox - w1.inbox)) as f64 / elapsed,
        cpu_us: (1e6 * (v0.cpu - w0.cpu) / n, 1e6 * (v1.cpu - w1.cpu) / n),
        signs: ((v0.signs - w0.signs) + (v1.signs - w1.signs)) as f64 / n,
        verifies: ((v0.verifies - w0.verifies) + (v1.verifies - w1.verifies)) as f64 / n,
        failed: failed.get(),
        lat: Figures::of(lat.len(), elapsed, lat),
    })
}

/// One blocking delegation from gw0's lead to `g`: whether it ended REPLIED.
async fn round_trip(h: &Handle, g: &SessionId) -> bool {
    let send = Request::Send {
        target: g.clone(),
        content: "bench brief".into(),
        wait: true,
        timeout_ms: Some(30_000),
    };
    matches!(
        h.call(lead_principal(0), send).await,
        Ok(Response::Outcome {
            outcome: Outcome::Replied,
            ..
        })
    )
}

async fn wait_listed(h: &Handle, gids: &[SessionId]) -> Result<(), String> {
    for _ in 0..200 {
        if let Ok(Response::Roster { rows }) = h.call(lead_principal(0), Request::List).await {
            if gids.iter().all(|g| rows.iter().any(|r| &r.gid == g)) {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err("the workers never appeared in gw0's roster".into())
}

/// CPU time a process has used (user + system), in seconds, from its `/proc/<pid>/stat`
/// (clock ticks of 1/100 s).
fn cpu_secs_of(stat: &str) -> f64 {
    std::fs::read_to_string(stat)
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let user = f.get(11)?.parse::<f64>().ok()?;
            let sys = f.get(12)?.parse::<f64>().ok()?;
            Some((user + sys) / 100.0)
        })
        .unwrap_or(0.0)
}

/// Resident set size of this process, in KiB (Linux `/proc/self/statm`).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4)
}

async fn backlog(n: usize) -> Result<Drained, String> {
    let fleet = bench_fleet("bl", 1)?;
    let worker = member(1, 0);
    let echo = EchoHerdr::with_idle(std::slice::from_ref(&worker));
    let mut g0 = boot_plain(&fleet, 0, 1, EchoHerdr::default(), &[]).await?;
    g0.connected().await?;
    // gw1 runs once so its inbox exists, then stops: the backlog piles up behind it.
    let mut g1 = boot_plain(&fleet, 1, 1, echo.clone(), std::slice::from_ref(&worker)).await?;
    g1.connected().await?;
    wait_listed(&g0.handle, std::slice::from_ref(&worker)).await?;
    g1.shutdown().await;

    // Signed as gw0's lead would sign them: admitted, not dead-lettered.
    let keyring = Keyring::new(host(0), [1; 32], &BTreeMap::new()).map_err(|e| e.to_string())?;
    let conn = Connection::connect(&amqp_uri(), ConnectionProperties::default())
        .await
        .map_err(|e| e.to_string())?;
    let ch = conn.create_channel().await.map_err(|e| e.to_string())?;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    let exchange =
        fleet_core::broker::Names::new(&fleet.ns).exchange(fleet_core::broker::Exchange::Msg);
    let now = fleetd::Clock::unix_ms(&fleetd::TokioClock::new());
    let mut confirms = FuturesUnordered::new();
    for i in 0..n {
        let mut env = Envelope {
            v: VERSION,
            payload: Payload::Send,
            msg_id: MsgId(uuid::Uuid::from_u128(0xb000_0000 + i as u128)),
            trace_id: TraceId(uuid::Uuid::from_u128(0xc000_0000 + i as u128)),
            from: lead(0),
            to: worker.to_string(),
            signer: host(0),
            ts: now,
            expires_at: now + 3_600_000,
            sig: None,
            body: format!("backlog brief {i}").into_bytes(),
        };
        keyring.sign(&mut env);
        let table = fleetd::amqp::to_table(&env.to_headers()).map_err(|e| e.to_string())?;
        while confirms.len() >= 256 {
            confirms.next().await;
        }
        let c = ch
            .basic_publish(
                exchange.as_str().into(),
                worker.as_str().into(),
                BasicPublishOptions::default(),
                &env.body,
                BasicProperties::default()
                    .with_headers(table)
                    .with_delivery_mode(2),
            )
            .await
            .map_err(|e| e.to_string())?;
        confirms.push(c);
    }
    while confirms.next().await.is_some() {}
    let _ = conn.close(200, "backlog published".into()).await;

    let rss_before = rss_kib();
    let start = Instant::now();
    let mut g1 = boot_plain(&fleet, 1, 2, echo.clone(), std::slice::from_ref(&worker)).await?;
    *echo.gateway.borrow_mut() = Some(g1.handle.clone());
    let mut peak = rss_before;
    let deadline = start + Duration::from_secs(300);
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        peak = peak.max(rss_kib());
        // Every SEND, and the INJECTED and REPLY of each one typed, settled.
        let drained = g1.counting.inbox.get() as usize;
        if drained >= n && g1.counting.held.borrow().is_empty() {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("backlog: only {drained} of {n} drained in 300 s"));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let max_held = g1.counting.max_held.get();
    println!(
        "backlog        : {n} signed SENDs in one inbox drained in {secs:.1} s ({:.0}/s) [>= 10,000/s]; {} typed, the rest answered BUSY",
        n as f64 / secs,
        echo.typed.get()
    );
    println!(
        "memory         : most inbox deliveries held unacked at once {max_held} (prefetch {}); RSS {} KiB before, peak {} KiB (+{} KiB) [<= 1 MiB], {} KiB after",
        bench_config().prefetch,
        rss_before,
        peak,
        peak.saturating_sub(rss_before),
        rss_kib()
    );
    g0.shutdown().await;
    g1.shutdown().await;
    let mut fleet = fleet;
    fleet.finish_with(&[worker]).await;
    Ok(Drained {
        rate: n as f64 / secs,
        rss_growth_kib: peak.saturating_sub(rss_before),
    })
}

/// The example config's `echo` member, reporting its own time in each reply: the two `date`
/// calls around its work are the only change.
fn timed_example_config(
    port: u16,
    state: &std::path::Path,
    socket: &std::path::Path,
) -> Result<String, String> {
    let example = fleetd::config::EXAMPLE;
    let edits = [
        (
            "token_env = \"FLEETD_TOKEN\"",
            format!("token = \"{E2E_TOKEN}\""),
        ),
        (
            "listen = \"127.0.0.1:8765\"",
            format!(
                "listen = \"127.0.0.1:{port}\"\nstate_dir = \"{}\"",
                state.display()
            ),
        ),
        (
            "# socket = \"/run/user/1000/herdr.sock\"",
            format!("socket = \"{}\"", socket.display()),
        ),
        (
            "while IFS= read -r line; do\n  report working\n",
            "while IFS= read -r line; do\n  t0=$(date +%s%N)\n  report working\n".into(),
        ),
        (
            "-d \"{\\\"message\\\":\\\"echo: $line\\\"}\"",
            "-d \"{\\\"message\\\":\\\"echo: $line took_ns=$(( $(date +%s%N) - t0 ))\\\"}\"".into(),
        ),
    ];
    let mut config = example.to_string();
    for (from, to) in edits {
        if !config.contains(from) {
            return Err(format!("the example config no longer has {from:?}"));
        }
        config = config.replace(from, &to);
    }
    Ok(config)
}

const E2E_TOKEN: &str = "bench-e2e-lead-token-0123456789abcdef";

/// Real `fleetd` and a real herdr: `sends` blocking sends to the example's `echo` member, each
/// timed from the call to `REPLIED`, less the member's own time.
async fn e2e_herdr(sends: usize) -> Result<(), String> {
    use fleet_tests::fleetd_proc::{free_port, Dir, Proc, Rest};
    if fleet_tests::herdr_real::bin().is_none() {
        println!("end to end     : skipped (set HERDR_BIN to a herdr 0.8.x to measure fleetd + herdr + the example echo member)");
        return Ok(());
    }
    let built = std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.parent()?.join("fleetd")))
        .is_some_and(|b| b.is_file());
    if !built {
        println!(
            "end to end     : skipped (build the daemon first: cargo build --release -p fleetd)"
        );
        return Ok(());
    }
    let dir = Dir::new("bench-e2e");
    let herdr = fleet_tests::panes::Panes::start(&dir.0).await;
    let port = free_port();
    let config = timed_example_config(port, &dir.0.join("state"), &herdr.path())?;
    let mut fleetd = Proc::start(&dir.0, "alpha", port, &config).await?;
    let rest = Rest::new(&fleetd.url, Some(E2E_TOKEN));
    let (code, m) = rest
        .post("/members", serde_json::json!({"profile": "echo"}))
        .await;
    if code != 200 {
        return Err(format!("spawning the echo member: {code} {m}"));
    }
    let gid = m["gid"].as_str().unwrap_or_default().to_string();
    let mut total = Vec::with_capacity(sends);
    let mut overhead = Vec::with_capacity(sends);
    for i in 0..sends {
        let began = Instant::now();
        let (code, out) = rest
            .post(
                &format!("/sessions/{gid}/message"),
                serde_json::json!({"message": format!("brief {i}")}),
            )
            .await;
        let took = began.elapsed();
        if code != 200 || out["outcome"] != "REPLIED" {
            return Err(format!("send {i}: {code} {out}\n{}", fleetd.log_text()));
        }
        let own = out["body"]
            .as_str()
            .and_then(|b| b.rsplit_once("took_ns="))
            .and_then(|(_, n)| n.trim().parse::<u64>().ok())
            .map(Duration::from_nanos)
            .ok_or_else(|| format!("the member did not report its time: {out}"))?;
        total.push(took);
        overhead.push(took.saturating_sub(own));
    }
    let t = Figures::of(sends, 1.0, total);
    let o = Figures::of(sends, 1.0, overhead);
    println!(
        "end to end     : fleetd process + real herdr + the example echo member, {sends} blocking sends one after another"
    );
    println!(
        "                 fleet_send -> REPLIED p50 {} p99 {} max {}; less the member's own time: p50 {} p99 {} max {}",
        ms(t.p50),
        ms(t.p99),
        ms(t.max),
        ms(o.p50),
        ms(o.p99),
        ms(o.max)
    );
    // Where the time went, by fleetd's own histograms (means over the run).
    let text = rest.metrics_until(|_| true).await;
    let mut parts = Vec::new();
    for line in text.lines().filter(|l| l.contains("_seconds_sum")) {
        let Some((name, sum)) = line.rsplit_once(' ') else {
            continue;
        };
        let count_line = name.replace("_seconds_sum", "_seconds_count");
        let count = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{count_line} ")))
            .and_then(|c| c.parse::<f64>().ok())
            .unwrap_or(0.0);
        if let (Ok(sum), true) = (sum.parse::<f64>(), count > 0.0) {
            let name = name.replace("_seconds_sum", "").replace("fleet_", "");
            parts.push(format!("{name} {:.2} ms x{count}", 1e3 * sum / count));
        }
    }
    println!(
        "                 fleetd's histograms (mean): {}",
        parts.join("; ")
    );
    // The daemon's log (its `turn_complete` and `delivered` lines time each step of a turn).
    if std::env::var_os("BENCH_E2E_LOG").is_some() {
        println!("{}", fleetd.log_text());
    }
    let _ = fleetd.term(Duration::from_secs(10)).await;
    herdr.finish().await;
    Ok(())
}

/// Part 3 on one node with classic queues and on the cluster with quorum ones, then the loss
/// of the node leading the inboxes, `a.rounds` times. In-process gateways read the nodes and
/// the queue type from `FLEET_AMQP_URIS` and `FLEET_QUEUE_TYPE` (the child inherits them).
async fn cluster_part(a: &Args) -> Result<(), String> {
    use fleet_tests::cluster::{cluster_uris, unavailable, Cluster};
    if let Some(why) = unavailable() {
        return Err(format!("the cluster part cannot run here: {why}"));
    }
    let n = a.workers;
    std::env::remove_var("FLEET_AMQP_URIS");
    std::env::remove_var("FLEET_QUEUE_TYPE");
    println!(
        "fleetd round trips, one node ({}), classic queues:",
        fleetd::amqp::redact(&amqp_uri())
    );
    let (c1, cn) = fleetd_round_trips(a.secs, n).await?;
    print_trips(n, &c1, &cn);
    println!("building the cluster: rabbit2@localhost and rabbit3@localhost join rabbit@localhost");
    let cluster = Cluster::up()?;
    std::env::set_var("FLEET_AMQP_URIS", cluster_uris().join(","));
    std::env::set_var("FLEET_QUEUE_TYPE", "quorum");
    println!("fleetd round trips, three nodes (connected to rabbit2), quorum queues:");
    let trips = fleetd_round_trips(a.secs, n).await;
    let lost = match trips {
        Ok((q1, qn)) => {
            print_trips(n, &q1, &qn);
            println!(
                "  quorum on 3 nodes / classic on 1: p50 at 1 in flight {:.2}x, p99 {:.2}x; round trips/s at {n} in flight {:.2}x",
                q1.lat.p50.as_secs_f64() / c1.lat.p50.as_secs_f64().max(1e-9),
                q1.lat.p99.as_secs_f64() / c1.lat.p99.as_secs_f64().max(1e-9),
                qn.lat.rate / cn.lat.rate.max(1e-9)
            );
            node_loss(&cluster, a.rounds, n.min(16)).await
        }
        Err(e) => Err(e),
    };
    std::env::remove_var("FLEET_AMQP_URIS");
    std::env::remove_var("FLEET_QUEUE_TYPE");
    drop(cluster);
    lost
}

/// The node-loss rounds of the cluster part alone.
async fn node_loss_only(a: &Args) -> Result<(), String> {
    use fleet_tests::cluster::{cluster_uris, unavailable, Cluster};
    if let Some(why) = unavailable() {
        return Err(format!("the node-loss part cannot run here: {why}"));
    }
    let cluster = Cluster::up()?;
    std::env::set_var("FLEET_AMQP_URIS", cluster_uris().join(","));
    std::env::set_var("FLEET_QUEUE_TYPE", "quorum");
    let lost = node_loss(&cluster, a.rounds, a.workers.min(16)).await;
    std::env::remove_var("FLEET_AMQP_URIS");
    std::env::remove_var("FLEET_QUEUE_TYPE");
    drop(cluster);
    lost
}

/// Delegations kept open to `workers` members, one each, while the node leading their
/// inboxes dies and comes back, `rounds` times.
async fn node_loss(
    cluster: &fleet_tests::cluster::Cluster,
    rounds: usize,
    workers: usize,
) -> Result<(), String> {
    println!("node loss under load: {workers} delegations in flight; kill -9 the node leading the inboxes, start it again after 10 s");
    let fleet = bench_fleet("rt", workers)?;
    let gids: Vec<SessionId> = (0..workers).map(|n| member(1, n)).collect();
    let child = Child::start(&fleet.ns, workers).await?;
    let mut g0 = boot_plain(&fleet, 0, 1, EchoHerdr::default(), &[]).await?;
    g0.connected().await?;
    wait_listed(&g0.handle, &gids).await?;
    // (member, began, ended, replied) of every round trip.
    type Log = Vec<(usize, Instant, Instant, bool)>;
    let log: Rc<RefCell<Log>> = Rc::default();
    let running = Rc::new(Cell::new(true));
    let mut tasks = Vec::new();
    for (k, g) in gids.iter().enumerate() {
        let (h, g, log, running) = (g0.handle.clone(), g.clone(), log.clone(), running.clone());
        tasks.push(tokio::task::spawn_local(async move {
            while running.get() {
                let began = Instant::now();
                let ok = round_trip(&h, &g).await;
                log.borrow_mut().push((k, began, Instant::now(), ok));
                if !ok {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }));
    }
    let names = fleet_core::broker::Names::new(&fleet.ns);
    let lead_inbox = names.inbox(&lead(0));
    let member_inboxes: Vec<String> = gids.iter().map(|g| names.inbox(g)).collect();
    let mut result = Ok(());
    for round in 1..=rounds {
        if round > 1 {
            // Spread the leaders again, so the extra nodes lead something to lose.
            let _ = tokio::process::Command::new("rabbitmq-queues")
                .args(["rebalance", "quorum"])
                .output()
                .await;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        let leaders: BTreeMap<String, String> =
            fleet_tests::cluster::leaders()?.into_iter().collect();
        let killable = |q: &str| {
            leaders
                .get(q)
                .filter(|l| l.as_str() != "rabbit@localhost")
                .cloned()
        };
        // The node leading the lead's inbox (every round trip needs it), else the one leading
        // the most members' inboxes.
        let victim = killable(&lead_inbox).or_else(|| {
            let mut led: BTreeMap<String, usize> = BTreeMap::new();
            for q in &member_inboxes {
                if let Some(l) = killable(q) {
                    *led.entry(l).or_default() += 1;
                }
            }
            led.into_iter().max_by_key(|(_, c)| *c).map(|(l, _)| l)
        });
        let Some(leader) = victim else {
            println!("  round {round}: every inbox is led by rabbit@localhost, the machine's own node, which the bench does not kill; skipped");
            continue;
        };
        let lead_hit = leaders.get(&lead_inbox) == Some(&leader);
        // The members whose round trips need the dead node: all when it led the lead's inbox.
        let hit: Vec<usize> = (0..gids.len())
            .filter(|k| lead_hit || leaders.get(&member_inboxes[*k]) == Some(&leader))
            .collect();
        let node = leader.trim_end_matches("@localhost").to_string();
        cluster.kill(&node).await?;
        let died = Instant::now();
        let mut again = None;
        for _ in 0..600 {
            again = log
                .borrow()
                .iter()
                .filter(|(k, b, _, ok)| *ok && *b >= died && hit.contains(k))
                .map(|(_, _, e, _)| *e - died)
                .min();
            if again.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
        let (done, failed) = log.borrow().iter().filter(|(_, _, e, _)| *e >= died).fold(
            (0, 0),
            |(d, f), (_, _, _, ok)| {
                if *ok {
                    (d + 1, f)
                } else {
                    (d, f + 1)
                }
            },
        );
        let what = if lead_hit {
            "the lead's inbox and every round trip".to_string()
        } else {
            format!("{} of {} members' inboxes", hit.len(), gids.len())
        };
        match again {
            Some(t) => println!(
                "  round {round}: killed {leader}, leading {what}: the first of those delegations begun after its death completed {}; {done} completed and {failed} failed in the next 10 s",
                ms(t)
            ),
            None => {
                println!("  round {round}: killed {leader}, leading {what}: none of those delegations completed within 30 s");
                result = Err(format!("no recovery after {leader} died"));
            }
        }
        cluster.start(&node).await?;
        if result.is_err() {
            break;
        }
    }
    running.set(false);
    for t in tasks {
        let _ = t.await;
    }
    child.stop().await;
    g0.shutdown().await;
    let mut fleet = fleet;
    fleet.finish_with(&gids).await;
    result
}
