//! The broker benchmark, on the real RabbitMQ (`FLEET_AMQP_URI`, default 127.0.0.1:5672), in
//! one run:
//!
//! 1. **raw**: lapin alone — publish with confirms (a window in flight) → consume → ack, with a
//!    body and header table the size of a real envelope's: the broker's ceiling here.
//! 2. **fleetd**: two gateways (driver loop + lapin port); a lead on gw0 keeps one blocking
//!    delegation open to each of gw1's members, whose herdr double replies the moment a brief
//!    is typed: delegate → inject → reply → back to the lead, closed loop. Reported as round
//!    trips/s and as broker deliveries/s, the figure comparable with raw.
//! 3. **backlog**: 10,000 signed SENDs wait in one inbox before its gateway starts; how fast it
//!    drains, the most deliveries the core ever held unacked (the prefetch bound), and the
//!    process's resident memory through the drain.
//!
//! `cargo bench -p fleet-tests --bench broker [-- --messages N --secs S --workers W --backlog B]`

use fleet_core::envelope::{Envelope, HeaderValue, Headers, Kind, VERSION};
use fleet_core::signing::Keyring;
use fleet_core::{AgentStatus, MsgId, Outcome, Principal, Request, Response, SessionId, TraceId};
use fleet_sim::agent::Behaviour;
use fleet_tests::gateways::{amqp_uri, host, lead, lead_principal, member, test_config, TestFleet};
use fleetd::{Handle, HerdrError, HerdrPort, PortFuture, Sample};
use futures_util::stream::{FuturesUnordered, StreamExt};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;
use tokio::time::Instant;

struct Args {
    messages: usize,
    secs: u64,
    workers: usize,
    backlog: usize,
}

fn args() -> Args {
    let mut a = Args {
        messages: 20_000,
        secs: 10,
        workers: 256,
        backlog: 10_000,
    };
    let argv: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < argv.len() {
        let v = argv.get(i + 1).and_then(|s| s.parse::<u64>().ok());
        match (argv[i].as_str(), v) {
            ("--messages", Some(v)) => a.messages = v as usize,
            ("--secs", Some(v)) => a.secs = v,
            ("--workers", Some(v)) => a.workers = v as usize,
            ("--backlog", Some(v)) => a.backlog = v as usize,
            ("--bench", _) => {
                i += 1;
                continue;
            }
            (other, _) => {
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
    if let Err(e) = local.block_on(&rt, run(a)) {
        eprintln!("broker bench failed: {e}");
        std::process::exit(1);
    }
}

async fn run(a: Args) -> Result<(), String> {
    let uri = amqp_uri();
    println!("broker bench against {}", fleetd::amqp::redact(&uri));
    let raw = raw(&uri, a.messages).await?;
    println!(
        "raw lapin      : {} messages, publish+confirm -> consume -> ack: {raw:.0} msg/s",
        a.messages
    );
    let (trips, deliveries) = round_trips(a.secs, a.workers).await?;
    println!(
        "fleetd         : {trips:.0} round trips/s (delegate -> inject -> reply -> lead), {deliveries:.0} inbox deliveries/s, {} workers",
        a.workers
    );
    println!(
        "ratio          : fleetd inbox deliveries/s = {:.1}% of raw msg/s (goal >= 50%)",
        100.0 * deliveries / raw
    );
    backlog(a.backlog).await
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

async fn raw(uri: &str, n: usize) -> Result<f64, String> {
    let e = |what: &'static str| move |err: lapin::Error| format!("raw {what}: {err}");
    let conn = Connection::connect(uri, ConnectionProperties::default())
        .await
        .map_err(e("connect"))?;
    let publish = conn.create_channel().await.map_err(e("channel"))?;
    publish
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(e("confirms"))?;
    let consume = conn.create_channel().await.map_err(e("channel"))?;
    let queue = format!("bench{}.raw", std::process::id());
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    consume
        .queue_declare(queue.as_str().into(), durable, FieldTable::default())
        .await
        .map_err(e("declare"))?;
    consume
        .basic_qos(64, BasicQosOptions::default())
        .await
        .map_err(e("qos"))?;
    let mut consumer = consume
        .basic_consume(
            queue.as_str().into(),
            "raw".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(e("consume"))?;
    let table = fleetd::amqp::to_table(&envelope_sized_headers()).map_err(|e| e.to_string())?;
    let body = vec![b'x'; 200];
    let start = Instant::now();
    let acker = consume.clone();
    let reader = tokio::task::spawn_local(async move {
        let mut got = 0;
        while got < n {
            match consumer.next().await {
                Some(Ok(d)) => {
                    if acker
                        .basic_ack(d.delivery_tag, BasicAckOptions::default())
                        .await
                        .is_err()
                    {
                        break;
                    }
                    got += 1;
                }
                _ => break,
            }
        }
        got
    });
    let mut confirms = FuturesUnordered::new();
    for _ in 0..n {
        while confirms.len() >= 256 {
            confirms.next().await;
        }
        let props = BasicProperties::default()
            .with_headers(table.clone())
            .with_delivery_mode(2);
        let c = publish
            .basic_publish(
                "".into(),
                queue.as_str().into(),
                BasicPublishOptions::default(),
                &body,
                props,
            )
            .await
            .map_err(e("publish"))?;
        confirms.push(c);
    }
    while confirms.next().await.is_some() {}
    let got = reader.await.map_err(|e| e.to_string())?;
    let secs = start.elapsed().as_secs_f64();
    let _ = consume
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await;
    let _ = conn.close(200, "bench done".into()).await;
    if got < n {
        return Err(format!("raw: only {got} of {n} consumed"));
    }
    Ok(n as f64 / secs)
}

/// A herdr double whose agents reply the moment a brief is typed (the benchmark measures
/// fleetd and the broker, not an agent's thinking).
#[derive(Clone, Default)]
struct EchoHerdr {
    panes: Rc<RefCell<BTreeMap<SessionId, AgentStatus>>>,
    gateway: Rc<RefCell<Option<Handle>>>,
    typed: Rc<Cell<u64>>,
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

    fn inject(&self, target: &SessionId, text: &str) -> PortFuture<Result<String, HerdrError>> {
        let (me, target, text) = (self.clone(), target.clone(), text.to_string());
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
                        content: format!("done: {}", text.len()),
                    };
                    let _ = h.call(Principal::worker(target.clone()), reply).await;
                    panes.borrow_mut().insert(target, AgentStatus::Idle);
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
    ) -> PortFuture<Result<fleet_core::Launched, HerdrError>> {
        Box::pin(async { Err(HerdrError::Unavailable("the bench spawns nothing".into())) })
    }

    fn close(&self, _: &SessionId) -> PortFuture<Result<(), HerdrError>> {
        Box::pin(async { Ok(()) })
    }
}

/// A 50 ms status poll (the default is 500 ms) so a turn's end is seen quickly; presence that
/// outlives the backlog phase's stopped gateway.
fn bench_config() -> fleet_core::CoreConfig {
    fleet_core::CoreConfig {
        poll_interval_ms: 50,
        presence_ttl_ms: 60_000,
        ..test_config()
    }
}

async fn echo_fleet(tag: &str, workers: usize) -> Result<(TestFleet, EchoHerdr), String> {
    let fleet = TestFleet::new(
        tag,
        bench_config(),
        vec![vec![], vec![Behaviour::Replies; workers]],
    )?;
    Ok((fleet, EchoHerdr::default()))
}

async fn round_trips(secs: u64, workers: usize) -> Result<(f64, f64), String> {
    let (fleet, echo) = echo_fleet("rt", workers).await?;
    let gids: Vec<SessionId> = (0..workers).map(|n| member(1, n)).collect();
    for g in &gids {
        echo.panes.borrow_mut().insert(g.clone(), AgentStatus::Idle);
    }
    let mut g0 = fleet.boot(0, EchoHerdr::default(), 1, &[], &[]).await?;
    let mut g1 = fleet.boot(1, echo.clone(), 1, &gids, &gids).await?;
    *echo.gateway.borrow_mut() = Some(g1.handle.clone());
    g0.connected().await?;
    g1.connected().await?;
    wait_listed(&g0.handle, &gids).await?;

    let done = Rc::new(Cell::new(0u64));
    let failed = Rc::new(Cell::new(0u64));
    let counting = Rc::new(Cell::new(false));
    let stop_at = Instant::now() + Duration::from_secs(secs + 2);
    let mut tasks = Vec::new();
    for g in &gids {
        let (h, g, done, failed, counting) = (
            g0.handle.clone(),
            g.clone(),
            done.clone(),
            failed.clone(),
            counting.clone(),
        );
        tasks.push(tokio::task::spawn_local(async move {
            while Instant::now() < stop_at {
                let send = Request::Send {
                    target: g.clone(),
                    content: "bench brief".into(),
                    wait: true,
                    timeout_ms: Some(30_000),
                };
                let ok = matches!(
                    h.call(lead_principal(0), send).await,
                    Ok(Response::Outcome {
                        outcome: Outcome::Replied,
                        ..
                    })
                );
                if counting.get() {
                    if ok {
                        done.set(done.get() + 1);
                    } else {
                        failed.set(failed.get() + 1);
                    }
                }
            }
        }));
    }
    // Two seconds of warm-up, then the measured window.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Inbox deliveries only (SEND, REPLY, INJECTED, …): presence on the roster queues is
    // background traffic whatever the load, and would flatter the ratio.
    let seen_at = |g: &fleet_tests::gateways::Booted| {
        g.seen
            .borrow()
            .deliveries
            .iter()
            .filter(|(q, _)| q.contains(".agent."))
            .count()
    };
    let before = seen_at(&g0) + seen_at(&g1);
    counting.set(true);
    let cpu_before = cpu_secs();
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    counting.set(false);
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = cpu_secs() - cpu_before;
    let deliveries = (seen_at(&g0) + seen_at(&g1) - before) as f64;
    println!(
        "  (both gateways used {:.0}% of one core; {:.0} µs of CPU per round trip)",
        100.0 * cpu / elapsed,
        1e6 * cpu / (done.get().max(1) as f64)
    );
    for t in tasks {
        let _ = t.await;
    }
    if failed.get() > 0 {
        println!("  ({} round trips did not end REPLIED)", failed.get());
    }
    g0.shutdown().await;
    g1.shutdown().await;
    let mut fleet = fleet;
    fleet.finish_with(&gids).await;
    Ok((done.get() as f64 / elapsed, deliveries / elapsed))
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

/// CPU time this process has used (user + system), in seconds (Linux `/proc/self/stat`,
/// clock ticks of 1/100 s).
fn cpu_secs() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
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

async fn backlog(n: usize) -> Result<(), String> {
    let (fleet, echo) = echo_fleet("bl", 1).await?;
    let worker = member(1, 0);
    echo.panes
        .borrow_mut()
        .insert(worker.clone(), AgentStatus::Idle);
    let mut g0 = fleet.boot(0, EchoHerdr::default(), 1, &[], &[]).await?;
    g0.connected().await?;
    // gw1 runs once so its inbox exists, then stops: the backlog piles up behind it.
    let mut g1 = fleet
        .boot(
            1,
            echo.clone(),
            1,
            std::slice::from_ref(&worker),
            std::slice::from_ref(&worker),
        )
        .await?;
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
            kind: Kind::Send,
            msg_id: MsgId(uuid::Uuid::from_u128(0xb000_0000 + i as u128)),
            trace_id: TraceId(uuid::Uuid::from_u128(0xc000_0000 + i as u128)),
            from: lead(0),
            to: worker.to_string(),
            signer: host(0),
            re: None,
            turn_id: None,
            spawn_id: None,
            outcome: None,
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
    let mut g1 = fleet
        .boot(
            1,
            echo.clone(),
            2,
            std::slice::from_ref(&worker),
            std::slice::from_ref(&worker),
        )
        .await?;
    *echo.gateway.borrow_mut() = Some(g1.handle.clone());
    let mut peak = rss_before;
    let inbox = fleet_core::broker::Names::new(&fleet.ns).inbox(&worker);
    let deadline = start + Duration::from_secs(300);
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        peak = peak.max(rss_kib());
        let drained = g1
            .seen
            .borrow()
            .deliveries
            .iter()
            .filter(|(q, _)| *q == inbox)
            .count();
        if drained >= n && g1.seen.borrow().held.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("backlog: only {drained} of {n} drained in 300 s"));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let max_held = g1.seen.borrow().max_held.get(&inbox).copied().unwrap_or(0);
    println!(
        "backlog        : {n} signed SENDs in one inbox drained in {secs:.1} s ({:.0}/s); {} typed, the rest answered BUSY",
        n as f64 / secs,
        echo.typed.get()
    );
    println!(
        "memory         : most inbox deliveries held unacked at once {max_held} (prefetch {}); RSS {} KiB before, peak {} KiB (+{} KiB), {} KiB after",
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
    Ok(())
}
