//! U1 on the turmoil world: a broker host running `SimBroker`, two gateway hosts each running
//! the real driver loop with simulated ports. A lead on `a` delegates to a member on `b`; the
//! brief crosses the broker, is typed by `b`, the member replies, the reply crosses back.

use fleet_core::signing::Keyring;
use fleet_core::{CoreConfig, HostId, Outcome, Principal, Request, Response, SessionId};
use fleet_sim::agent::Behaviour;
use fleet_sim::broker::SimBroker;
use fleet_sim::host::{run_gateway, GatewaySpec};
use fleet_sim::net::serve;
use fleet_sim::trace::Trace;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::{Duration, SystemTime};

const EPOCH_S: u64 = 1_790_000_000;
const LEAD: &str = "11111111-1111-4111-8111-111111111111";
const WORKER: &str = "22222222-2222-4222-8222-222222222222";

fn specs(trace: &Trace) -> (GatewaySpec, GatewaySpec) {
    let hosts = [HostId::new("a"), HostId::new("b")];
    let secrets = [[1u8; 32], [2u8; 32]];
    let publics: BTreeMap<HostId, [u8; 32]> = (0..2)
        .map(|i| {
            let k = Keyring::new(hosts[i].clone(), secrets[i], &BTreeMap::new()).expect("key");
            (hosts[i].clone(), k.public_key())
        })
        .collect();
    let cfg = CoreConfig {
        profiles: vec!["claude".into()],
        ..CoreConfig::default()
    };
    let spec = |i: usize| GatewaySpec {
        host: hosts[i].clone(),
        seed: 100 + i as u64,
        secret: secrets[i],
        peers: publics.clone(),
        allow: hosts.iter().cloned().collect::<BTreeSet<_>>(),
        queue_type: Default::default(),
        epoch_unix_ms: EPOCH_S * 1000,
        cfg: cfg.clone(),
        leads: Vec::new(),
        members: Vec::new(),
        trace: trace.clone(),
        herdr: Default::default(),
        starts: Rc::default(),
        skew_ms: Rc::default(),
        disk: Default::default(),
    };
    let mut a = spec(0);
    a.leads.push(SessionId::new(LEAD));
    let mut b = spec(1);
    b.members.push((SessionId::new(WORKER), Behaviour::Replies));
    (a, b)
}

/// Runs U1 with `seed`; returns the outcome and the whole trace.
fn run_u1(seed: u64) -> turmoil::Result<(Response, Trace)> {
    let (outcomes, trace) = run_u1_cut(seed, None)?;
    let last = outcomes.last().cloned().expect("an outcome");
    Ok((last, trace))
}

/// U1, optionally with the worker's host cut from the broker for `cut`, from just after the
/// brief is typed (its INJECTED already out): the member's reply falls into the cut. Returns
/// every outcome the lead saw, in order, up to the first REPLIED (or the first outcome of any
/// kind when there is a cut: the test judges that one).
fn run_u1_cut(seed: u64, cut: Option<Duration>) -> turmoil::Result<(Vec<Response>, Trace)> {
    let trace = Trace::default();
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .epoch(SystemTime::UNIX_EPOCH + Duration::from_secs(EPOCH_S))
        .simulation_duration(Duration::from_secs(300))
        .tick_duration(Duration::from_millis(10))
        .build();
    let broker = Rc::new(RefCell::new(SimBroker::new("fleet")));
    sim.host("broker", move || serve(broker.clone()));
    let (a, b) = specs(&trace);
    let outcomes: Rc<RefCell<Vec<Response>>> = Rc::default();
    let seen = outcomes.clone();
    sim.host("a", move || {
        let seen = seen.clone();
        run_gateway(a.clone(), move |gateway, _herdr| async move {
            let lead = Principal::primary(LEAD, Some(SessionId::new(LEAD)));
            // Until the worker's inbox and the roster exist, a send can fail fast; retry.
            loop {
                tokio::time::sleep(Duration::from_secs(3)).await;
                let r = gateway
                    .call(
                        lead.clone(),
                        Request::Send {
                            target: SessionId::new(WORKER),
                            content: "write the tests".into(),
                            wait: true,
                            timeout_ms: Some(120_000),
                        },
                    )
                    .await;
                if let Ok(r @ Response::Outcome { .. }) = r {
                    let done = matches!(
                        r,
                        Response::Outcome {
                            outcome: Outcome::Replied,
                            ..
                        }
                    );
                    seen.borrow_mut().push(r);
                    if done {
                        break;
                    }
                }
            }
        })
    });
    sim.host("b", move || {
        run_gateway(b.clone(), |_gateway, _herdr| async {})
    });
    let replied = |r: &Response| {
        matches!(
            r,
            Response::Outcome {
                outcome: Outcome::Replied,
                ..
            }
        )
    };
    // (typed at, cut at, healed)
    let mut typed: Option<Duration> = None;
    let mut healed = false;
    loop {
        {
            let seen = outcomes.borrow();
            if seen.last().is_some_and(replied) || (cut.is_some() && !seen.is_empty()) {
                break;
            }
        }
        sim.step()?;
        let Some(cut) = cut else { continue };
        let now = sim.elapsed();
        match typed {
            None if trace.text().contains(" b inject ") => typed = Some(now),
            Some(at) if !healed && now >= at + Duration::from_millis(300) + cut => {
                sim.repair("b", "broker");
                healed = true;
            }
            Some(at) if !healed && now >= at + Duration::from_millis(300) => {
                sim.partition("b", "broker")
            }
            _ => {}
        }
    }
    let seen = outcomes.borrow().clone();
    Ok((seen, trace))
}

#[test]
fn u1_runs_across_turmoil_hosts_through_the_real_driver_loop() -> turmoil::Result {
    let (r, trace) = run_u1(3)?;
    match r {
        Response::Outcome { outcome, body, .. } => {
            assert_eq!(outcome, Outcome::Replied);
            assert_eq!(body.as_deref(), Some("done: write the tests"));
        }
        other => panic!("{other:?}"),
    }
    let t = trace.text();
    assert!(
        t.contains(" a broker publish") && t.contains(" b inject "),
        "{t}"
    );
    Ok(())
}

/// Same seed, same trace, byte for byte — through turmoil, TCP, the broker host and two
/// driver loops.
#[test]
fn the_same_seed_gives_the_same_trace() -> turmoil::Result {
    let (_, one) = run_u1(5)?;
    let (_, two) = run_u1(5)?;
    assert!(one.len() > 20, "a real run: {} lines", one.len());
    assert_eq!(one.text(), two.text());
    Ok(())
}

/// The worker's host loses the broker while its member replies: the reply's confirm never
/// comes, the member is told the broker is unavailable, tries again once the link is back,
/// and the lead's one blocking send ends REPLIED — nothing buffered in the gateway, nothing
/// lost (the kill test on RabbitMQ caught this window, CI stop 11).
#[test]
fn a_reply_made_while_the_worker_host_is_cut_off_arrives_once_the_link_is_back() -> turmoil::Result
{
    let (outcomes, trace) = run_u1_cut(3, Some(Duration::from_secs(10)))?;
    let t = trace.text();
    match outcomes.first() {
        Some(Response::Outcome { outcome, body, .. }) => {
            assert_eq!(*outcome, Outcome::Replied, "{t}");
            assert_eq!(body.as_deref(), Some("done: write the tests"));
        }
        other => panic!("{other:?}\n{t}"),
    }
    assert_eq!(
        t.matches(" b inject ").count(),
        1,
        "the brief was typed once: {t}"
    );
    assert!(
        t.contains(" b respond call#1 error the broker is unreachable"),
        "the member's first reply did fall into the cut: {t}"
    );
    assert!(
        !t.contains(" a event reply_held"),
        "no second, stranded copy at the lead: {t}"
    );
    Ok(())
}
