//! Core throughput with federation in the mix: two gateways in one process, 500 member
//! targets each, joined by the workspace's one broker model (`fleet_core::testing::broker::
//! SimBroker`: routing, prefetch, confirms, acks, exactly what the conformance suite holds to
//! RabbitMQ). A tenth of the sends cross to the other gateway, so the mix has
//! signed SEND / INJECTED / REPLY envelopes, admission with ed25519 verification, presence
//! heartbeats and acks, beside the local traffic of the single-host benchmark.
//!
//! Also measures, alone, what one ed25519 sign and one admission (decode + verify + checks)
//! cost, since those dominate every cross-host message, and counts per kind the signs (every
//! publish but a held copy, which keeps its signer's signature) and the verifies (every
//! delivery is admitted once) a run makes: presence's share of them is its cost.
//!
//! The counts come twice: inferred from the traffic (publishes signed, deliveries admitted)
//! and measured in the keyrings (signatures actually made and checked); the two agree when
//! every publish is signed once and every delivery verified once. Batch verification
//! (ed25519-dalek's `verify_batch`) is timed beside one-by-one `verify_strict` on bursts.
//!
//! Run: `cargo bench -p fleet-core --bench federated` (add `-- --targets N --rounds R`).

use fleet_core::admission::{admit, SeenSet};
use fleet_core::broker::{BrokerEvent, BrokerOp};
use fleet_core::envelope::{Envelope, Payload, VERSION};
use fleet_core::signing::Keyring;
use fleet_core::testing::broker::{ConnId, SimBroker};
use fleet_core::{
    AgentStatus, CallId, CoreConfig, Duration, Federation, Gateway, HostId, Input, Instant, MsgId,
    Output, Principal, Request, SessionId, TraceId,
};
use std::collections::{BTreeMap, VecDeque};

const UNIX0: u64 = 1_790_000_000_000;

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

#[derive(Clone, Copy)]
enum Agent {
    Idle,
    Working { left: u8 },
}

struct Bench {
    gws: Vec<Gateway>,
    now: Instant,
    rng: XorShift,
    /// Per gateway: its members and their tiny agents.
    members: Vec<Vec<SessionId>>,
    agents: Vec<Vec<Agent>>,
    leads: Vec<Principal>,
    broker: SimBroker,
    inputs: VecDeque<(usize, Input)>,
    next_call: u64,
    events: u64,
    remote_sends: u64,
    deliveries: u64,
    /// Signs and verifies by message kind.
    signs: BTreeMap<&'static str, u64>,
    verifies: BTreeMap<&'static str, u64>,
}

fn kind_of(h: &fleet_core::envelope::Headers) -> &'static str {
    Envelope::from_parts(h, Vec::new()).map_or("undecodable", |e| e.kind().as_str())
}

fn index(s: &SessionId) -> Option<(usize, usize)> {
    let (g, i) = s.as_str().strip_prefix('m')?.split_once('-')?;
    Some((g.parse().ok()?, i.parse().ok()?))
}

impl Bench {
    fn new(per_gateway: usize) -> Bench {
        let hosts = [HostId::new("a"), HostId::new("b")];
        let secrets = [[1u8; 32], [2u8; 32]];
        let publics: BTreeMap<HostId, [u8; 32]> = (0..2)
            .map(|i| {
                let k = Keyring::new(hosts[i].clone(), secrets[i], &BTreeMap::new()).expect("key");
                (hosts[i].clone(), k.public_key())
            })
            .collect();
        let mut b = Bench {
            gws: Vec::new(),
            now: Instant::ZERO,
            rng: XorShift(0x9e37_79b9_7f4a_7c15),
            members: vec![Vec::new(), Vec::new()],
            agents: vec![Vec::new(), Vec::new()],
            leads: Vec::new(),
            broker: SimBroker::new("bench"),
            inputs: VecDeque::new(),
            next_call: 0,
            events: 0,
            remote_sends: 0,
            deliveries: 0,
            signs: BTreeMap::new(),
            verifies: BTreeMap::new(),
        };
        for (i, host) in hosts.iter().enumerate() {
            let fed = Federation {
                host: host.clone(),
                keyring: Keyring::new(host.clone(), secrets[i], &publics).expect("keys"),
                namespace: "bench".into(),
                control_allowlist: hosts.iter().cloned().collect(),
                queue_type: fleet_core::broker::QueueType::Classic,
            };
            let gw = Gateway::federated(CoreConfig::default(), fed, i as u64, Instant::ZERO, UNIX0)
                .expect("valid config");
            b.gws.push(gw);
        }
        for g in 0..2 {
            let generation = b.broker.connect(ConnId(g as u32));
            b.push(g, Input::Broker(BrokerEvent::Up { generation }));
            for l in 0..5 {
                let gid = SessionId::new(format!("lead{g}-{l}"));
                b.leads
                    .push(Principal::primary(gid.as_str(), Some(gid.clone())));
                b.push(g, Input::LeadAttached { lead: gid });
            }
            for i in 0..per_gateway {
                let gid = SessionId::new(format!("m{g}-{i}"));
                b.members[g].push(gid.clone());
                b.agents[g].push(Agent::Idle);
                b.push(
                    g,
                    Input::MemberStarted {
                        target: gid.clone(),
                    },
                );
                b.push(g, Input::MemberConnected { target: gid });
            }
        }
        b.run();
        b
    }

    /// Signatures made and checked so far, over both gateways.
    fn crypto(&self) -> (u64, u64) {
        self.gws.iter().fold((0, 0), |(s, v), g| {
            let c = g.crypto_counts();
            (s + c.signs, v + c.verifies)
        })
    }

    fn push(&mut self, g: usize, input: Input) {
        self.inputs.push_back((g, input));
    }

    fn run(&mut self) {
        loop {
            while let Some((g, input)) = self.inputs.pop_front() {
                self.gws[g].handle(self.now, input);
                self.events += 1;
                while let Some(out) = self.gws[g].poll_output() {
                    self.carry_out(g, out);
                }
            }
            let Some((conn, ev)) = self.broker.poll_event() else {
                return;
            };
            if let BrokerEvent::Delivery { headers, .. } = &ev {
                self.deliveries += 1;
                *self.verifies.entry(kind_of(headers)).or_default() += 1;
            }
            self.push(conn.0 as usize, Input::Broker(ev));
        }
    }

    fn carry_out(&mut self, g: usize, out: Output) {
        match out {
            Output::Inject { target, msg, .. } => {
                if let Some((mg, i)) = index(&target) {
                    self.agents[mg][i] = Agent::Working {
                        left: 1 + (self.rng.next() % 3) as u8,
                    };
                }
                self.push(
                    g,
                    Input::Injected {
                        target,
                        msg,
                        result: Ok("❯ ".into()),
                    },
                );
            }
            Output::ReadPane { target, msg } => self.push(
                g,
                Input::PaneRead {
                    target,
                    msg,
                    result: Ok("❯ \n> task\ndone".into()),
                },
            ),
            Output::Broker(op) => {
                if let BrokerOp::Publish { headers, key, .. } = &op {
                    if !key.starts_with("held.") {
                        *self.signs.entry(kind_of(headers)).or_default() += 1;
                    }
                }
                if let Err(e) = self.broker.apply(ConnId(g as u32), op) {
                    panic!("the broker refused gateway {g}: {e}");
                }
            }
            _ => {}
        }
    }

    fn call(&mut self, g: usize, caller: Principal, request: Request) {
        self.next_call += 1;
        self.push(
            g,
            Input::Call {
                call: CallId(self.next_call),
                caller,
                request,
            },
        );
    }

    fn round(&mut self) {
        for g in 0..2 {
            for i in 0..self.members[g].len() {
                let target = self.members[g][i].clone();
                let roll = self.rng.next() % 100;
                match self.agents[g][i] {
                    Agent::Idle => {
                        if roll < 15 {
                            // A tenth of the delegations come from a lead on the other host.
                            let remote = roll < 2;
                            let lg = if remote { 1 - g } else { g };
                            let lead = self.leads[lg * 5 + (self.rng.next() % 5) as usize].clone();
                            if remote {
                                self.remote_sends += 1;
                            }
                            self.call(
                                lg,
                                lead,
                                Request::Send {
                                    target: target.clone(),
                                    content: "task".into(),
                                    wait: roll.is_multiple_of(2),
                                    timeout_ms: Some(120_000),
                                },
                            );
                        }
                        self.push(
                            g,
                            Input::StatusSampled {
                                target,
                                status: AgentStatus::Idle,
                                screen: None,
                                asked: self.gws[g].newest_ask(),
                            },
                        );
                    }
                    Agent::Working { left: 0 } => {
                        if roll.is_multiple_of(2) {
                            self.call(
                                g,
                                Principal::worker(target.clone()),
                                Request::Reply {
                                    content: "done".into(),
                                },
                            );
                        }
                        self.agents[g][i] = Agent::Idle;
                        self.push(
                            g,
                            Input::StatusSampled {
                                target,
                                status: AgentStatus::Idle,
                                screen: None,
                                asked: self.gws[g].newest_ask(),
                            },
                        );
                    }
                    Agent::Working { left } => {
                        self.agents[g][i] = Agent::Working { left: left - 1 };
                        self.push(
                            g,
                            Input::StatusSampled {
                                target,
                                status: AgentStatus::Working,
                                screen: None,
                                asked: self.gws[g].newest_ask(),
                            },
                        );
                    }
                }
                self.run();
            }
        }
        self.now = self.now + Duration::from_millis(500);
        for g in 0..2 {
            self.push(g, Input::Tick);
        }
        self.run();
    }
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[allow(clippy::disallowed_methods)] // a benchmark measures wall time; it never feeds the core
fn crypto_costs() -> (f64, f64) {
    let peers = BTreeMap::from([(
        HostId::new("b"),
        Keyring::new(HostId::new("b"), [2; 32], &BTreeMap::new())
            .expect("k")
            .public_key(),
    )]);
    let a = Keyring::new(HostId::new("a"), [1; 32], &BTreeMap::new()).expect("k");
    let b = Keyring::new(
        HostId::new("b"),
        [2; 32],
        &BTreeMap::from([(HostId::new("a"), a.public_key())]),
    )
    .expect("k");
    let _ = peers;
    let mut env = Envelope {
        v: VERSION,
        payload: Payload::Send,
        msg_id: MsgId(uuid::Uuid::from_u128(1)),
        trace_id: TraceId(uuid::Uuid::from_u128(2)),
        from: SessionId::new("lead"),
        to: "w".into(),
        signer: HostId::new("a"),
        ts: UNIX0,
        expires_at: UNIX0 + 60_000,
        sig: None,
        body: vec![b'x'; 200],
    };
    let n = 2_000;
    let t = std::time::Instant::now();
    for _ in 0..n {
        a.sign(&mut env);
    }
    let sign_us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    let headers = env.to_headers();
    let t = std::time::Instant::now();
    for i in 0..n {
        let mut seen = SeenSet::new(4);
        let r = admit(
            &b,
            &headers,
            env.body.clone(),
            "w",
            UNIX0 + i,
            |_| Some(HostId::new("a")),
            &mut seen,
        );
        assert!(r.is_ok());
    }
    let admit_us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    (sign_us, admit_us)
}

/// Per signature: `n` signatures over `n` different 200-byte messages verified one by one,
/// and as one batch (ed25519-dalek's deterministic batch check).
#[allow(clippy::disallowed_methods)] // a benchmark measures wall time; it never feeds the core
fn batch_costs(n: usize) -> (f64, f64) {
    use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
    let key = SigningKey::from_bytes(&[7; 32]);
    let public: VerifyingKey = key.verifying_key();
    let messages: Vec<Vec<u8>> = (0..n).map(|i| vec![i as u8; 200]).collect();
    let sigs: Vec<Signature> = messages.iter().map(|m| key.sign(m)).collect();
    let keys = vec![public; n];
    let refs: Vec<&[u8]> = messages.iter().map(Vec::as_slice).collect();
    let reps = (2_000 / n).max(4);
    let t = std::time::Instant::now();
    for _ in 0..reps {
        for (m, s) in refs.iter().zip(&sigs) {
            assert!(public.verify_strict(m, s).is_ok());
        }
    }
    let one = t.elapsed().as_secs_f64() * 1e6 / (reps * n) as f64;
    let t = std::time::Instant::now();
    for _ in 0..reps {
        assert!(ed25519_dalek::verify_batch(&refs, &sigs, &keys).is_ok());
    }
    let batch = t.elapsed().as_secs_f64() * 1e6 / (reps * n) as f64;
    (one, batch)
}

#[allow(clippy::disallowed_methods)] // a benchmark measures wall time; it never feeds the core
fn main() {
    let per = arg("--targets", 500);
    let rounds = arg("--rounds", 200);
    let runs = arg("--runs", 5).max(1);
    let (sign_us, admit_us) = crypto_costs();
    let mut rates = Vec::new();
    let mut last = (0, 0, 0);
    let mut counts = (BTreeMap::new(), BTreeMap::new());
    let mut made = (0u64, 0u64);
    for _ in 0..runs {
        let mut b = Bench::new(per);
        for _ in 0..20 {
            b.round();
        }
        let (e0, r0, d0) = (b.events, b.remote_sends, b.deliveries);
        let made0 = b.crypto();
        b.signs.clear();
        b.verifies.clear();
        let t = std::time::Instant::now();
        for _ in 0..rounds {
            b.round();
        }
        let secs = t.elapsed().as_secs_f64();
        rates.push((b.events - e0) as f64 / secs);
        last = (b.events - e0, b.remote_sends - r0, b.deliveries - d0);
        counts = (b.signs.clone(), b.verifies.clone());
        let made1 = b.crypto();
        made = (made1.0 - made0.0, made1.1 - made0.1);
    }
    rates.sort_by(f64::total_cmp);
    let median = rates[rates.len() / 2];
    println!("federated throughput: 2 gateways x {per} targets, {rounds} rounds, {runs} runs");
    println!(
        "  median {median:.0} events/s ({:.0} ns/event), min {:.0}, max {:.0}",
        1e9 / median,
        rates[0],
        rates[rates.len() - 1]
    );
    println!(
        "  per run: {} events, {} cross-host sends, {} broker deliveries ({:.1}% of events)",
        last.0,
        last.1,
        last.2,
        100.0 * last.2 as f64 / last.0 as f64
    );
    println!("  one ed25519 sign: {sign_us:.1} us; one admission (decode + verify + checks): {admit_us:.1} us");
    let events = last.0.max(1) as f64;
    for (what, by_kind) in [("signs", &counts.0), ("verifies", &counts.1)] {
        let total: u64 = by_kind.values().sum();
        let presence = by_kind.get("PRESENCE").copied().unwrap_or(0);
        let kinds: Vec<String> = by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
        println!(
            "  {what}: {total} ({:.3} per event), presence {presence} ({:.1}%): {}",
            total as f64 / events,
            100.0 * presence as f64 / total.max(1) as f64,
            kinds.join(", ")
        );
    }
    let (publishes, deliveries): (u64, u64) = (counts.0.values().sum(), counts.1.values().sum());
    println!(
        "  measured in the keyrings: {} signs ({:.3} per signed publish), {} verifies ({:.3} per delivery)",
        made.0,
        made.0 as f64 / publishes.max(1) as f64,
        made.1,
        made.1 as f64 / deliveries.max(1) as f64
    );
    for n in [4, 16, 64] {
        let (one, batch) = batch_costs(n);
        println!(
            "  a burst of {n} verified one by one (verify_strict): {one:.1} us each; as one batch (verify_batch): {batch:.1} us each ({:.2}x)",
            one / batch
        );
    }
    // What signing and admission cost of the run's wall time, at the measured unit costs.
    let crypto_us = |by_kind: &BTreeMap<&str, u64>, unit: f64, only: Option<&str>| {
        by_kind
            .iter()
            .filter(|(k, _)| only.is_none_or(|o| o == **k))
            .map(|(_, n)| *n as f64 * unit)
            .sum::<f64>()
    };
    let run_us = last.0 as f64 / median * 1e6;
    let presence_us = crypto_us(&counts.0, sign_us, Some("PRESENCE"))
        + crypto_us(&counts.1, admit_us, Some("PRESENCE"));
    let all_us = crypto_us(&counts.0, sign_us, None) + crypto_us(&counts.1, admit_us, None);
    println!(
        "  of the run's time at those costs: signing + admission {:.1}%, presence's {:.1}%",
        100.0 * all_us / run_us,
        100.0 * presence_us / run_us
    );
}
