//! fleetd's herdr client (`fleetd::herdr`) against the herdr double: a real Unix socket, one
//! request per connection, every answer checked against herdr's schema. Ends with the issue's
//! point: a gateway delivers a brief into a member pane, gets the reply, and after a gateway
//! restart still knows that member by its label.

use fleet_core::AgentStatus;
use fleet_core::{
    CoreConfig, Gateway, Outcome, Principal, Readiness, Request, Response, SessionId,
};
use fleet_tests::herdr_double::HerdrDouble;
use fleetd::herdr::launch::{member_secret, LaunchConfig};
use fleetd::herdr::rebuild::rebuild;
use fleetd::herdr::{HerdrClient, HerdrConfig, Kind, Profile, ReportedState};
use fleetd::{Clock, Driver, HerdrError, HerdrPort, NoBroker, Quiet, TokioClock};
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

/// A private directory for one test's socket (removed at the end).
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("fleetd-herdr-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        if let Err(e) = std::fs::create_dir_all(&d) {
            panic!("creating {}: {e}", d.display());
        }
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scenario<F: Future<Output = ()>>(f: F) {
    fleet_tests::local_scenario(60, f);
}

async fn double(dir: &Dir) -> HerdrDouble {
    match HerdrDouble::start(&dir.0).await {
        Ok(d) => d,
        Err(e) => panic!("starting the herdr double: {e}"),
    }
}

/// The member key of every test client (a daemon derives it from its own secret).
const MEMBER_KEY: [u8; 32] = [5; 32];

fn config(d: &HerdrDouble, runtime: &std::path::Path) -> HerdrConfig {
    let mut launch = LaunchConfig::new(runtime, "http://127.0.0.1:7700/mcp", MEMBER_KEY);
    launch.base_url_allow = vec!["https://llm.internal.example/v1".into()];
    launch.ready_timeout = Duration::from_secs(2);
    launch.ready_poll = Duration::from_millis(20);
    let mut cfg = HerdrConfig::new(&d.path, launch);
    cfg.timeout = Duration::from_millis(500);
    cfg.profiles
        .insert("echo".into(), Profile::command(&["sh", "-c", "cat"]));
    cfg.parent_env = [("PATH", "/usr/bin"), ("AWS_SECRET_ACCESS_KEY", "x")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    cfg
}

fn client(d: &HerdrDouble) -> HerdrClient {
    HerdrClient::new(config(d, &d.path.with_extension("members")))
}

/// The member program of a `command` profile, played by the test: once its pane exists, it
/// reports itself idle through herdr, as `pane.report_agent` lets a custom agent do.
fn reports_idle_when_started(c: &HerdrClient, label: &str) {
    let (c, label) = (c.clone(), label.to_string());
    tokio::task::spawn_local(async move {
        for _ in 0..200 {
            let panes = c.api().pane_list().await.unwrap_or_default();
            let started = panes.iter().find(|p| {
                p.label.as_deref().is_some_and(|l| l.starts_with(&label))
                    && p.agent_status == "unknown"
            });
            if let Some(p) = started {
                let r = c
                    .api()
                    .report_agent(&p.pane_id, "echo", ReportedState::Idle)
                    .await;
                assert!(r.is_ok(), "{r:?}");
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
}

fn schema_clean(d: &HerdrDouble) {
    let v = d.state().violations.clone();
    assert!(v.is_empty(), "the double broke herdr's schema: {v:#?}");
}

#[test]
fn ping_checks_the_protocol_version() {
    scenario(async {
        let dir = Dir::new("ping");
        let d = double(&dir).await;
        let c = client(&d);
        let pong = c.api().ping().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(pong.protocol, 20);
        d.state().protocol = 19;
        let e = c.api().ping().await.expect_err("protocol 19 is refused");
        assert!(
            matches!(
                e,
                fleetd::herdr::RpcError::Protocol {
                    protocol: 19,
                    want: 20,
                    ..
                }
            ),
            "{e}"
        );
        schema_clean(&d);
    });
}

#[test]
fn a_spawn_opens_a_labelled_pane_in_an_unfocused_member_tab() {
    scenario(async {
        let dir = Dir::new("spawn");
        let d = double(&dir).await;
        let c = client(&d);
        let gid = SessionId::new("g-1");
        reports_idle_when_started(&c, "fleet:g-1");
        let r = c.spawn(&gid, "echo", Some("backend")).await;
        assert_eq!(
            r,
            Ok(Readiness::Ready),
            "a command member is ready on an idle status"
        );
        let (_, pane) = d
            .pane_by_label("fleet:g-1")
            .unwrap_or_else(|| panic!("no pane"));
        // A scrubbed environment: `env -i`, the allow-list, fleetd's variables, then the argv.
        let cut = pane
            .command
            .iter()
            .position(|a| a == "--")
            .expect("env -i … --");
        assert_eq!(&pane.command[..2], ["env", "-i"]);
        assert_eq!(&pane.command[cut + 1..], ["sh", "-c", "cat"]);
        let env = &pane.command[2..cut];
        for want in ["FLEET_GID=g-1", "FLEET_GROUP=backend", "PATH=/usr/bin"] {
            assert!(env.iter().any(|e| e == want), "{want} in {env:?}");
        }
        assert!(
            env.iter().all(|e| !e.starts_with("AWS_")),
            "a credential leaked: {env:?}"
        );
        assert_eq!(pane.tab_label.as_deref(), Some("fleet members"));
        assert_eq!(pane.focus, Some(false), "members never take focus");
        let unknown = c.spawn(&SessionId::new("g-2"), "nope", None).await;
        assert!(matches!(unknown, Err(HerdrError::Unavailable(ref m)) if m.contains("nope")));
        schema_clean(&d);
    });
}

#[test]
fn a_command_member_that_never_gets_ready_is_failed_and_reaped_at_the_gate() {
    scenario(async {
        let dir = Dir::new("gate");
        let d = double(&dir).await;
        let c = client(&d);
        // Nobody reports a status: the pane stays `unknown` past the 2 s gate.
        let r = c.spawn(&SessionId::new("g-9"), "echo", None).await;
        assert!(
            matches!(&r, Err(HerdrError::Unavailable(m)) if m.contains("not ready within 2000 ms")),
            "{r:?}"
        );
        assert!(
            d.pane_by_label("fleet:g-9").is_none(),
            "the half-built pane is closed"
        );
        schema_clean(&d);
    });
}

#[test]
fn a_claude_code_member_gets_its_own_mcp_mount_off_subscription() {
    scenario(async {
        let dir = Dir::new("claude");
        let d = double(&dir).await;
        let runtime = dir.0.join("members");
        let mut cfg = config(&d, &runtime);
        let claude = |base_url: &str| Profile {
            kind: Kind::ClaudeCode {
                bin: "claude".into(),
                base_url: base_url.into(),
                model: None,
                args: vec![],
            },
            env: Default::default(),
            cwd: None,
            charter: Some("Work the brief; answer with fleet_reply.".into()),
        };
        cfg.profiles
            .insert("dev".into(), claude("https://llm.internal.example/v1"));
        cfg.profiles.insert(
            "on-subscription".into(),
            claude("https://api.anthropic.com"),
        );
        let c = HerdrClient::new(cfg);
        let gid = SessionId::new("g-7");
        assert_eq!(c.spawn(&gid, "dev", None).await, Ok(Readiness::OnConnect));
        let (_, pane) = d.pane_by_label("fleet:g-7").expect("a pane");
        assert!(pane
            .command
            .contains(&"ANTHROPIC_BASE_URL=https://llm.internal.example/v1".to_string()));
        let mcp = runtime.join("g-7").join("mcp.json");
        let text = std::fs::read_to_string(&mcp).unwrap_or_else(|e| panic!("{e}"));
        assert!(text.contains(&member_secret(&MEMBER_KEY, "g-7")));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&mcp).map(|m| m.permissions().mode() & 0o777);
        assert_eq!(mode.ok(), Some(0o600), "the secret file is private");
        let receipt = c.receipt(&gid).expect("a charter receipt");
        assert_eq!(receipt.bytes, 40);
        // The guard refuses before anything starts.
        let r = c
            .spawn(&SessionId::new("g-8"), "on-subscription", None)
            .await;
        assert!(
            matches!(&r, Err(HerdrError::Unavailable(m)) if m.contains("allow-list")),
            "{r:?}"
        );
        assert!(d.pane_by_label("fleet:g-8").is_none());
        // Closing the member removes its files.
        assert_eq!(c.close(&gid).await, Ok(()));
        assert!(!runtime.join("g-7").exists());
        schema_clean(&d);
    });
}

#[test]
fn inject_reads_the_baseline_then_types_and_submits() {
    scenario(async {
        let dir = Dir::new("inject");
        let d = double(&dir).await;
        d.add_pane(Some("fleet:g-1"), "idle");
        let c = client(&d);
        let gid = SessionId::new("g-1");
        let baseline = c.inject(&gid, "write the parser").await;
        assert_eq!(baseline.as_deref(), Ok("❯ "));
        let (_, pane) = d
            .pane_by_label("fleet:g-1")
            .unwrap_or_else(|| panic!("no pane"));
        assert_eq!(pane.typed, vec!["write the parser"]);
        assert_eq!(c.read(&gid).await.as_deref(), Ok("❯ write the parser"));
        schema_clean(&d);
    });
}

#[test]
fn status_is_herdrs_and_the_screen_comes_with_unknown() {
    scenario(async {
        let dir = Dir::new("status");
        let d = double(&dir).await;
        let pane = d.add_pane(Some("fleet:g-1"), "idle");
        let c = client(&d);
        let gid = SessionId::new("g-1");
        let s = c.sample(&gid).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((s.status, s.screen), (AgentStatus::Idle, None));
        // A `command` member reports its own state (herdr does not recognise it).
        c.api()
            .report_agent(&pane, "fleet-test", ReportedState::Working)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let s = c.sample(&gid).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.status, AgentStatus::Working);
        d.set_status(&pane, "unknown");
        let s = c.sample(&gid).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (s.status, s.screen.as_deref()),
            (AgentStatus::Unknown, Some("❯ "))
        );
        schema_clean(&d);
    });
}

#[test]
fn a_closed_pane_is_gone_for_every_operation() {
    scenario(async {
        let dir = Dir::new("close");
        let d = double(&dir).await;
        d.add_pane(Some("fleet:g-1"), "idle");
        let c = client(&d);
        let gid = SessionId::new("g-1");
        assert_eq!(c.close(&gid).await, Ok(()));
        assert!(d.pane_by_label("fleet:g-1").is_none());
        assert_eq!(
            c.sample(&gid).await.map(|_| ()),
            Err(HerdrError::PaneNotFound)
        );
        assert_eq!(
            c.inject(&gid, "x").await.map(|_| ()),
            Err(HerdrError::PaneNotFound)
        );
        assert_eq!(c.close(&gid).await, Err(HerdrError::PaneNotFound));
        schema_clean(&d);
    });
}

#[test]
fn a_moved_pane_is_followed_by_its_label_and_a_vanished_one_is_gone() {
    scenario(async {
        let dir = Dir::new("moved");
        let d = double(&dir).await;
        let old = d.add_pane(Some("fleet:g-1"), "idle");
        let c = client(&d);
        let gid = SessionId::new("g-1");
        assert!(c.sample(&gid).await.is_ok(), "cached now");
        // herdr gives the pane a new id; the client's cached id is stale.
        let new = d.move_pane(&old).unwrap_or_else(|| panic!("no pane {old}"));
        assert_eq!(c.inject(&gid, "after the move").await.map(|_| ()), Ok(()));
        let typed = d.state().panes.get(&new).map(|p| p.typed.clone());
        assert_eq!(typed, Some(vec!["after the move".to_string()]));
        // The id comes back for another program: that pane is not this member's.
        let stranger = d.add_pane(Some("my shell"), "idle");
        {
            let mut s = d.state();
            let other = s.panes.remove(&stranger).unwrap_or_default();
            s.panes.insert(new.clone(), other);
        }
        assert_eq!(
            c.inject(&gid, "x").await.map(|_| ()),
            Err(HerdrError::PaneNotFound)
        );
        let typed = d.state().panes.get(&new).map(|p| p.typed.clone());
        assert_eq!(typed, Some(vec![]), "nothing typed into a stranger's pane");
        // herdr itself says the cached pane is gone, and no other pane has the label.
        let again = d.add_pane(Some("fleet:g-2"), "idle");
        let g2 = SessionId::new("g-2");
        assert!(c.sample(&g2).await.is_ok());
        d.remove_pane(&again);
        assert_eq!(
            c.sample(&g2).await.map(|_| ()),
            Err(HerdrError::PaneNotFound)
        );
        schema_clean(&d);
    });
}

#[test]
fn members_are_found_by_label_and_survive_a_herdr_restart() {
    scenario(async {
        let dir = Dir::new("restart");
        let d = double(&dir).await;
        d.add_pane(Some("fleet:g-1"), "idle");
        d.add_pane(Some("fleet:g-2"), "working");
        d.add_pane(Some("my shell"), "unknown");
        d.add_pane(None, "idle");
        let c = client(&d);
        let members = c.members().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(members, vec![SessionId::new("g-1"), SessionId::new("g-2")]);
        // herdr restarts underneath: labels come back, processes do not.
        let d = d.restart(&dir.0).unwrap_or_else(|e| panic!("{e}"));
        let fresh = client(&d);
        let members = fresh.members().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(members, vec![SessionId::new("g-1"), SessionId::new("g-2")]);
        let s = c
            .sample(&SessionId::new("g-2"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            s.status,
            AgentStatus::Unknown,
            "its agent died with the old herdr"
        );
        schema_clean(&d);
    });
}

#[test]
fn an_unanswered_request_is_bounded_and_a_missing_herdr_is_named() {
    scenario(async {
        let dir = Dir::new("hang");
        let d = double(&dir).await;
        d.add_pane(Some("fleet:g-1"), "idle");
        let c = client(&d);
        d.state().hang = true;
        let r = c.sample(&SessionId::new("g-1")).await;
        assert!(
            matches!(&r, Err(HerdrError::Unavailable(m)) if m.contains("did not answer")),
            "{r:?}"
        );
        let mut cfg = config(&d, &dir.0.join("members"));
        cfg.socket = dir.0.join("nothing-here.sock");
        let gone = HerdrClient::new(cfg);
        let r = gone.api().ping().await.expect_err("no herdr there");
        assert!(r.to_string().contains("nothing-here.sock"), "{r}");
    });
}

/// A member agent played by the test: waits for a brief in its pane, works, replies through
/// the gateway as a member does, and goes idle.
async fn answer_one(d: &HerdrDouble, handle: &fleetd::Handle, gid: &SessionId, reply: &str) {
    let label = format!("fleet:{gid}");
    let seen = d.pane_by_label(&label).map_or(0, |(_, p)| p.typed.len());
    for _ in 0..400 {
        let Some((pane, p)) = d.pane_by_label(&label) else {
            panic!("no pane {label}");
        };
        if p.typed.len() > seen {
            d.set_status(&pane, "working");
            let r = handle
                .call(
                    Principal::worker(gid.clone()),
                    Request::Reply {
                        content: reply.into(),
                    },
                )
                .await;
            assert!(matches!(r, Ok(Response::ReplyAccepted { .. })), "{r:?}");
            d.set_status(&pane, "idle");
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the brief never reached {label}");
}

async fn delegate(
    d: &HerdrDouble,
    handle: &fleetd::Handle,
    lead: &Principal,
    gid: &SessionId,
    brief: &str,
) -> Response {
    let send = Request::Send {
        target: gid.clone(),
        content: brief.into(),
        wait: true,
        timeout_ms: Some(30_000),
    };
    let (h, l) = (handle.clone(), lead.clone());
    let call = tokio::task::spawn_local(async move { h.call(l, send).await });
    answer_one(d, handle, gid, &format!("done: {brief}")).await;
    match call.await {
        Ok(Ok(r)) => r,
        other => panic!("the send did not complete: {other:?}"),
    }
}

#[test]
fn a_gateway_delivers_through_herdr_and_knows_its_member_after_a_restart() {
    scenario(async {
        let dir = Dir::new("gateway");
        let d = double(&dir).await;
        let lead_pane = d.add_pane(Some("lead"), "idle");
        let lead = Principal::primary("lead", Some(SessionId::new(&lead_pane)));
        let cfg = CoreConfig {
            poll_interval_ms: 50,
            profiles: vec!["echo".into()],
            ..CoreConfig::default()
        };
        let mut gid: Option<SessionId> = None;
        for start in 1..=2u64 {
            let c = client(&d);
            let clock = TokioClock::new();
            let gw =
                Gateway::new(cfg.clone(), start, clock.now()).unwrap_or_else(|e| panic!("{e}"));
            let driver = Driver::new(gw, c.clone(), NoBroker, clock, Quiet);
            let (handle, calls) = Driver::<HerdrClient, NoBroker, TokioClock, Quiet>::channel();
            let (stop, stopped) = tokio::sync::oneshot::channel();
            let run = tokio::task::spawn_local(driver.run(calls, stopped));
            // Each start rebuilds its members from herdr's labels, not from memory.
            let rebuilt = rebuild(&c, &handle).await.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                rebuilt.adopted,
                gid.iter().cloned().collect::<Vec<_>>(),
                "start {start}"
            );
            assert_eq!(rebuilt.reaped, vec![]);
            if gid.is_none() {
                // The first start spawns the member: a `command` profile through the launcher,
                // ready once its program reports itself idle.
                reports_idle_when_started(&c, "fleet:");
                let spawn = Request::Spawn {
                    host: None,
                    profile: "echo".into(),
                    group: None,
                };
                match handle.call(lead.clone(), spawn).await {
                    Ok(Response::Spawned { gid: g, .. }) => gid = Some(g),
                    other => panic!("the spawn failed: {other:?}"),
                }
            }
            let Some(gid) = gid.clone() else {
                unreachable!("spawned above")
            };
            let brief = format!("task {start}");
            match delegate(&d, &handle, &lead, &gid, &brief).await {
                Response::Outcome {
                    outcome: Outcome::Replied,
                    body: Some(body),
                    ..
                } => assert_eq!(body, format!("done: {brief}")),
                other => panic!("start {start}: expected REPLIED, got {other:?}"),
            }
            let _ = stop.send(());
            let _ = run.await;
        }
        let label = format!("fleet:{}", gid.as_ref().map_or("", |g| g.as_str()));
        let (_, pane) = d.pane_by_label(&label).unwrap_or_else(|| panic!("gone"));
        assert_eq!(
            pane.typed.len(),
            2,
            "one brief per start, each typed once: {:?}",
            pane.typed
        );
        schema_clean(&d);
    });
}

#[test]
fn a_restart_adopts_live_members_and_reaps_half_built_and_dead_ones() {
    scenario(async {
        let dir = Dir::new("rebuild");
        let mut d = double(&dir).await;
        let busy = d.add_pane(Some("fleet:busy"), "working");
        d.add_pane(Some("fleet:idle"), "idle");
        d.add_pane(Some("fleet:half-built"), "unknown");
        d.add_pane(Some("not-a-member"), "unknown");
        let clock = TokioClock::new();
        let boot = |c: HerdrClient| {
            let gw = Gateway::new(CoreConfig::default(), 1, clock.now())
                .unwrap_or_else(|e| panic!("{e}"));
            let driver = Driver::new(gw, c, NoBroker, clock, Quiet);
            let (handle, calls) = Driver::<HerdrClient, NoBroker, TokioClock, Quiet>::channel();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            (
                handle,
                stop,
                tokio::task::spawn_local(driver.run(calls, stopped)),
            )
        };
        let c = client(&d);
        let (handle, stop, run) = boot(c.clone());
        let r = rebuild(&c, &handle).await.unwrap_or_else(|e| panic!("{e}"));
        let ids = |v: &[&str]| v.iter().map(|g| SessionId::new(*g)).collect::<Vec<_>>();
        // A working member is adopted as it is: a restart never kills a busy agent.
        assert_eq!(r.adopted, ids(&["busy", "idle"]));
        assert_eq!(r.reaped.len(), 1, "{r:?}");
        assert_eq!(r.reaped[0].0, SessionId::new("half-built"));
        assert!(r.reaped[0].1.contains("not ready within"), "{r:?}");
        assert!(d.pane_by_label("fleet:half-built").is_none());
        assert!(
            d.pane_by_label("not-a-member").is_some(),
            "only members are touched"
        );
        assert!(d.state().panes.contains_key(&busy));
        let _ = stop.send(());
        let _ = run.await;
        // herdr restarts underneath: labels come back, processes do not (statuses unknown).
        d = d.restart(&dir.0).unwrap_or_else(|e| panic!("{e}"));
        let c = client(&d);
        let (handle, stop, run) = boot(c.clone());
        let r = rebuild(&c, &handle).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.adopted, vec![]);
        assert_eq!(
            r.reaped.iter().map(|(g, _)| g.clone()).collect::<Vec<_>>(),
            ids(&["busy", "idle"])
        );
        assert!(d.pane_by_label("fleet:busy").is_none() && d.pane_by_label("fleet:idle").is_none());
        let _ = stop.send(());
        let _ = run.await;
        schema_clean(&d);
    });
}
