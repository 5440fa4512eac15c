//! fleetd's herdr client (`fleetd::herdr`) against the herdr double: a real Unix socket, one
//! request per connection, every answer checked against herdr's schema. Ends with the issue's
//! point: a gateway delivers a brief into a member pane, gets the reply, and after a gateway
//! restart still knows that member by its label.

use fleet_core::AgentStatus;
use fleet_core::SessionState;
use fleet_core::{
    CoreConfig, Gateway, Outcome, Principal, Readiness, Request, Response, SessionId, SpawnError,
};
use fleet_tests::herdr_double::HerdrDouble;
use fleet_tests::herdr_real::{self, RealHerdr};
use fleetd::herdr::events::{self, WatchConfig};
use fleetd::herdr::launch::{member_secret, LaunchConfig};
use fleetd::herdr::rebuild::rebuild;
use fleetd::herdr::{HerdrClient, HerdrConfig, Kind, NewPane, Profile, ReportedState};
use fleetd::{
    Clock, Driver, HerdrError, HerdrPort, InjectFailure, NoBroker, Quiet, Sample, TokioClock,
};
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

/// The `command` member the tests spawn: prints what is typed into it, once (no echo).
const ECHO: &[&str] = &["sh", "-c", "stty -echo 2>/dev/null; exec cat"];

fn config(socket: &std::path::Path, runtime: &std::path::Path) -> HerdrConfig {
    let mut launch = LaunchConfig::new(runtime, "http://127.0.0.1:7700/mcp", MEMBER_KEY);
    launch.base_url_allow = vec!["https://llm.internal.example/v1".into()];
    let mut cfg = HerdrConfig::new(socket, launch);
    // Not the 5 s default, so a wedged herdr fails a test quickly; not much less than 2 s,
    // since a real herdr on a loaded two-core CI machine has taken over 500 ms to list.
    cfg.timeout = Duration::from_secs(2);
    cfg.profiles.insert("echo".into(), Profile::command(ECHO));
    cfg.parent_env = [("PATH", "/usr/bin"), ("AWS_SECRET_ACCESS_KEY", "x")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    cfg
}

fn client(d: &HerdrDouble) -> HerdrClient {
    HerdrClient::new(config(&d.path, &d.path.with_extension("members")))
}

/// The member program of a `command` profile, played by the test: once its pane exists, it
/// reports itself idle through herdr, as `pane.report_agent` lets a custom agent do.
/// Await the handle: the report must have been made.
fn reports_idle_when_started(c: &HerdrClient, label: &str) -> tokio::task::JoinHandle<()> {
    let (c, label) = (c.clone(), label.to_string());
    tokio::task::spawn_local(async move {
        for _ in 0..400 {
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
        panic!("no pane labelled {label}* appeared");
    })
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
        // A newer protocol is used (the daemon warns, /healthz says so); an older one is not.
        assert_eq!(pong.family(), fleetd::herdr::api::Family::Replaying);
        // herdr 0.9's protocol 22 is spoken, told by its capability names.
        d.state().protocol = 22;
        let pong = c.api().ping().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            fleetd::herdr::api::Support::of(pong.protocol),
            Some(fleetd::herdr::api::Support::Tested)
        );
        assert!(pong.has("endpoint_protocol_generation"), "{pong:?}");
        assert_eq!(pong.family(), fleetd::herdr::api::Family::LiveOnly);
        // One not tested is used (the daemon warns, /healthz says so); an older one is not.
        d.state().protocol = 23;
        let pong = c.api().ping().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            fleetd::herdr::api::Support::of(pong.protocol),
            Some(fleetd::herdr::api::Support::Newer)
        );
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
        // A fresh herdr has no workspace; the client makes one.
        d.state().no_workspace = true;
        let r = c
            .spawn(&gid, &fleet_core::SpawnSpec::of("echo").group("backend"))
            .await
            .map(|l| l.readiness);
        assert_eq!(
            r,
            Ok(Readiness::OnInjectable),
            "the launcher returns once the pane is placed; a command member's gate is its status"
        );
        let (_, pane) = d
            .pane_by_label("fleet:g-1")
            .unwrap_or_else(|| panic!("no pane"));
        // A scrubbed environment: `env -i` keeps only herdr's pane variables and runs the
        // launch script, which exports the allow-list and fleetd's variables, then execs the
        // program. Nothing of the member's environment (its token) is in the argv.
        assert!(
            pane.command[2].starts_with("exec env -i HERDR_ENV="),
            "{:?}",
            pane.command
        );
        let script_path = d
            .path
            .with_extension("members")
            .join("g-1")
            .join("launch.sh");
        assert_eq!(
            pane.command.last().map(String::as_str),
            script_path.to_str(),
            "{:?}",
            pane.command
        );
        assert!(
            pane.command.iter().all(|a| !a.contains("FLEET_MCP_TOKEN")),
            "{:?}",
            pane.command
        );
        let script = std::fs::read_to_string(&script_path).unwrap_or_else(|e| panic!("{e}"));
        for want in [
            "export FLEET_GID='g-1'",
            "export FLEET_GROUP='backend'",
            "export PATH='/usr/bin'",
            "export FLEET_MCP_TOKEN='g-1.",
        ] {
            assert!(script.contains(want), "{want} in {script}");
        }
        assert!(
            script.contains("\n'sh' '-c' 'stty -echo 2>/dev/null; exec cat'\n"),
            "{script}"
        );
        assert!(!script.contains("AWS_"), "a credential leaked: {script}");
        assert_eq!(pane.tab_label.as_deref(), Some("fleet members"));
        let asked = d.state().requests.clone();
        let at = |m: &str| asked.iter().position(|r| r == m);
        assert!(at("workspace.create") < asked.iter().rposition(|r| r == "layout.apply"));
        assert!(at("workspace.create").is_some(), "{asked:?}");
        assert_eq!(pane.focus, Some(false), "members never take focus");
        let unknown = c
            .spawn(&SessionId::new("g-2"), &fleet_core::SpawnSpec::of("nope"))
            .await
            .map(|l| l.readiness);
        assert!(matches!(unknown, Err(SpawnError::Refused(ref m)) if m.contains("nope")));
        schema_clean(&d);
    });
}

/// Its trust dialog, as a config it did not accept shows it.
const CLAUDE_TRUST: &str = "──────────────────────\n Accessing workspace:\n\n /srv/app\n\n Quick safety check: Is this a project you created or one you trust?\n\n ❯ No, exit\n   Yes, I trust this folder\n\n Enter to confirm · Esc to cancel";

/// The double's pane whose label starts with `label`, if one is placed.
fn pane_labelled(d: &HerdrDouble, label: &str) -> Option<String> {
    d.state()
        .panes
        .iter()
        .find(|(_, p)| p.label.as_deref().is_some_and(|l| l.starts_with(label)))
        .map(|(id, _)| id.clone())
}

/// Plays an agent's start in the double (which runs no program): once a pane whose label
/// starts with `label` is placed, its screen shows `screen`.
async fn draws(d: &HerdrDouble, label: &str, screen: &str) {
    for _ in 0..300 {
        if let Some(id) = pane_labelled(d, label) {
            if let Some(p) = d.state().panes.get_mut(&id) {
                p.screen = screen.lines().map(str::to_string).collect();
            }
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("no pane labelled {label}");
}

/// A first-run dialog still on screen at the gate fails the spawn at once, naming it, and
/// nothing is typed into it; the pane and the member's files go. The gate is the core's,
/// carried out by the production driver's looks at the pane.
#[test]
fn a_claude_code_dialog_at_the_gate_fails_the_spawn_naming_it() {
    scenario(async {
        let dir = Dir::new("claude-dialog");
        let d = double(&dir).await;
        let runtime = dir.0.join("members");
        let mut cfg = config(&d.path, &runtime);
        cfg.profiles.insert(
            "dev".into(),
            Profile {
                kind: Kind::ClaudeCode {
                    bin: "claude".into(),
                    base_url: "https://llm.internal.example/v1".into(),
                    model: None,
                    args: vec![],
                },
                env: Default::default(),
                cwd: None,
                charter: None,
                sandbox: false,
                network: fleetd::herdr::Network::Host,
                sandbox_paths: Vec::new(),
                config_template: None,
                reports: true,
            },
        );
        let c = HerdrClient::new(cfg);
        let gw = boot(
            &c,
            CoreConfig {
                profiles: vec!["dev".into()],
                start_timeout_ms: 30_000,
                ..CoreConfig::default()
            },
            9,
        );
        let lead = Principal::primary("lead", Some(SessionId::new("lead-pane")));
        let spawn = Request::Spawn {
            host: None,
            spec: fleet_core::SpawnSpec::of("dev"),
        };
        let asked = tokio::time::Instant::now();
        let (answer, _) = tokio::join!(
            gw.handle.call(lead, spawn),
            draws(&d, "fleet:", CLAUDE_TRUST)
        );
        let Ok(Response::Error(fleet_core::CallError::SpawnFailed { reason })) = answer else {
            panic!("a dialog passed the gate: {answer:?}");
        };
        assert!(
            reason.starts_with("claude-code is asking whether to trust /srv/app"),
            "{reason}"
        );
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "at once, not at the bound"
        );
        for _ in 0..200 {
            if pane_labelled(&d, "fleet:").is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(pane_labelled(&d, "fleet:").is_none(), "its pane is closed");
        let left: Vec<_> = std::fs::read_dir(&runtime)
            .map(|r| r.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(
            left.iter()
                .all(|f| f == "tokens" || f.to_string_lossy().starts_with('.')),
            "its files are gone: {left:?}"
        );
        let typed: Vec<String> = d
            .state()
            .panes
            .values()
            .flat_map(|p| p.typed.clone())
            .collect();
        assert!(typed.is_empty(), "typed into a dialog: {typed:?}");
        gw.stop().await;
        schema_clean(&d);
    });
}

#[test]
fn a_claude_code_member_gets_its_own_mcp_mount_off_subscription() {
    scenario(async {
        let dir = Dir::new("claude");
        let d = double(&dir).await;
        let runtime = dir.0.join("members");
        let mut cfg = config(&d.path, &runtime);
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
            sandbox: true,
            network: fleetd::herdr::Network::Host,
            sandbox_paths: Vec::new(),
            config_template: None,
            reports: true,
        };
        cfg.profiles
            .insert("dev".into(), claude("https://llm.internal.example/v1"));
        cfg.profiles.insert(
            "on-subscription".into(),
            claude("https://api.anthropic.com"),
        );
        let c = HerdrClient::new(cfg);
        let gid = SessionId::new("g-7");
        let spec = fleet_core::SpawnSpec::of("dev");
        let launched = c.spawn(&gid, &spec).await;
        assert_eq!(
            launched.map(|l| l.readiness),
            Ok(Readiness::OnPrompt(
                fleet_core::agent_screen::StartRules::ClaudeCode
            ))
        );
        let (_, pane) = d.pane_by_label("fleet:g-7").expect("a pane");
        let script = std::fs::read_to_string(runtime.join("g-7").join("launch.sh"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(script.contains("export ANTHROPIC_BASE_URL='https://llm.internal.example/v1'"));
        let mcp = runtime.join("g-7").join("mcp.json");
        let text = std::fs::read_to_string(&mcp).unwrap_or_else(|e| panic!("{e}"));
        let nonce = std::fs::read_to_string(runtime.join("g-7").join("nonce"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(text.contains(&member_secret(&MEMBER_KEY, "g-7", nonce.trim())));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&mcp).map(|m| m.permissions().mode() & 0o777);
        assert_eq!(mode.ok(), Some(0o600), "the secret file is private");
        let dir_mode =
            std::fs::metadata(runtime.join("g-7")).map(|m| m.permissions().mode() & 0o777);
        assert_eq!(dir_mode.ok(), Some(0o700));
        let claude_dir = format!(
            "export CLAUDE_CONFIG_DIR='{}'",
            runtime.join("g-7").join("claude").display()
        );
        assert!(
            script.contains(&claude_dir),
            "never the lead's ~/.claude login: {script}"
        );
        let _ = pane;
        let receipt = c.receipt(&gid).expect("a charter receipt");
        assert_eq!(receipt.bytes, 40);
        // The guard refuses before anything starts.
        let r = c
            .spawn(
                &SessionId::new("g-8"),
                &fleet_core::SpawnSpec::of("on-subscription"),
            )
            .await
            .map(|l| l.readiness);
        assert!(
            matches!(&r, Err(SpawnError::Refused(m)) if m.contains("allow-list")),
            "{r:?}"
        );
        assert!(d.pane_by_label("fleet:g-8").is_none());
        // Closing the member removes its files.
        assert_eq!(c.close(&gid).await, Ok(()));
        assert!(!runtime.join("g-7").exists());
        // So does its pane closing on its own (its program exited), found by the status poll.
        let launched = c.spawn(&gid, &spec).await;
        assert_eq!(
            launched.map(|l| l.readiness),
            Ok(Readiness::OnPrompt(
                fleet_core::agent_screen::StartRules::ClaudeCode
            ))
        );
        assert!(runtime.join("g-7").exists());
        let (pane_id, _) = d.pane_by_label("fleet:g-7").expect("a pane");
        d.remove_pane(&pane_id);
        assert_eq!(c.sample(&gid).await, Err(HerdrError::PaneNotFound));
        assert!(
            !runtime.join("g-7").exists(),
            "no secret outlives its member"
        );
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

/// A round of samples is one `pane.list`: each member's status comes from its labelled pane,
/// only one that says `unknown` is read; a member with no pane is gone, and a lead (no label)
/// is sampled on its own.
#[test]
fn a_round_of_samples_is_one_listing() {
    scenario(async {
        let dir = Dir::new("sample-all");
        let d = double(&dir).await;
        d.add_pane(Some("fleet:g-1"), "idle");
        d.add_pane(Some("fleet:g-2"), "working");
        d.add_pane(Some("fleet:g-3"), "unknown");
        let lead = d.add_pane(Some("lead"), "blocked");
        let mut cfg = config(&d.path, &d.path.with_extension("members"));
        // A lead is a target only as a configured lead (its gid names its pane here).
        cfg.lead_panes
            .insert(SessionId::new(&lead), lead.clone().into());
        let c = HerdrClient::new(cfg);
        let gids: Vec<SessionId> = ["g-1", "g-2", "g-3", "g-4", lead.as_str()]
            .into_iter()
            .map(SessionId::new)
            .collect();
        d.state().requests.clear();
        let samples = c.sample_all(&gids).await.unwrap_or_else(|e| panic!("{e}"));
        let read = |s: &Result<Sample, HerdrError>| {
            s.clone()
                .map(|s| (s.status, s.screen.is_some()))
                .map_err(|e| e.to_string())
        };
        let got: Vec<_> = samples.iter().map(|(g, s)| (g.as_str(), read(s))).collect();
        assert_eq!(
            got,
            [
                ("g-1", Ok((AgentStatus::Idle, false))),
                ("g-2", Ok((AgentStatus::Working, false))),
                ("g-3", Ok((AgentStatus::Unknown, true))),
                ("g-4", Err("pane_not_found".to_string())),
                (lead.as_str(), Ok((AgentStatus::Blocked, false))),
            ]
        );
        let requests = d.state().requests.clone();
        // One listing and one read for the members; the one with no pane is looked for again
        // (a listing), and the lead found and checked on its own (a listing, a get).
        assert_eq!(
            requests,
            [
                "pane.list",
                "pane.read",
                "pane.list",
                "pane.list",
                "pane.get"
            ]
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
            Err(InjectFailure::NotTyped(HerdrError::PaneNotFound))
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
            Err(InjectFailure::NotTyped(HerdrError::PaneNotFound))
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
        // A label that is not a plain gid is never a member (it would name a directory).
        d.add_pane(Some("fleet:../../home"), "unknown");
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
        let mut cfg = config(&d.path, &dir.0.join("members"));
        cfg.socket = dir.0.join("nothing-here.sock");
        let gone = HerdrClient::new(cfg);
        let r = gone.api().ping().await.expect_err("no herdr there");
        assert!(r.to_string().contains("nothing-here.sock"), "{r}");
    });
}

/// An inject herdr did not answer says whether the brief can have reached the pane: a
/// baseline read that got no answer typed nothing (the core may type it on a later sample); a
/// `pane.send_input` that got none may have typed it (the core never types it again).
#[test]
fn an_unanswered_inject_says_whether_anything_was_typed() {
    scenario(async {
        let dir = Dir::new("inject-hang");
        let d = double(&dir).await;
        let pane = d.add_pane(Some("fleet:g-1"), "idle");
        let c = client(&d);
        let gid = SessionId::new("g-1");
        assert!(c.sample(&gid).await.is_ok(), "the pane id is cached");
        let typed = || d.state().panes.get(&pane).map(|p| p.typed.clone());
        d.state().hang_after = vec!["pane.read".into()];
        let r = c.inject(&gid, "first").await;
        assert!(
            matches!(&r, Err(InjectFailure::NotTyped(HerdrError::Unavailable(m))) if m.contains("pane.read")),
            "{r:?}"
        );
        assert_eq!(typed(), Some(vec![]));
        d.state().hang_after = vec!["pane.send_input".into()];
        let r = c.inject(&gid, "second").await;
        assert!(
            matches!(&r, Err(InjectFailure::Unconfirmed(m)) if m.contains("pane.send_input")),
            "{r:?}"
        );
        assert_eq!(typed(), Some(vec!["second".to_string()]), "it did land");
        d.state().hang_after.clear();
        assert!(c.inject(&gid, "third").await.is_ok());
    });
}

// ---- the same scenarios on the double and on a real herdr (`HERDR_BIN`) -----------------

/// Which herdr a shared scenario runs against.
#[derive(Clone, Copy, Debug)]
enum Backend {
    Double,
    /// The double speaking herdr 0.9's protocol 22 (no real 0.9 server can be run here).
    Double22,
    /// A real `herdr server` (`HERDR_BIN`); a scenario on it is compiled as ignored without one.
    Real,
}

enum Herdr {
    Double(HerdrDouble),
    Real(Box<RealHerdr>),
}

impl Herdr {
    /// `None` (with a note on stderr) for `Real` when `HERDR_BIN` is not set.
    async fn start(backend: Backend, dir: &Dir) -> Option<Herdr> {
        match backend {
            Backend::Double => Some(Herdr::Double(double(dir).await)),
            Backend::Double22 => {
                let d = double(dir).await;
                d.state().protocol = 22;
                Some(Herdr::Double(d))
            }
            Backend::Real => {
                let Some(bin) = herdr_real::bin() else {
                    panic!(
                        "built for a real herdr (HERDR_BIN was set), but HERDR_BIN is not set now"
                    );
                };
                let h = RealHerdr::start(&bin, &dir.0)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                h.workspace().await.unwrap_or_else(|e| panic!("{e}"));
                Some(Herdr::Real(Box::new(h)))
            }
        }
    }

    fn path(&self) -> &std::path::Path {
        match self {
            Herdr::Double(d) => &d.path,
            Herdr::Real(r) => &r.path,
        }
    }

    fn client(&self, dir: &Dir) -> HerdrClient {
        HerdrClient::new(config(self.path(), &dir.0.join("members")))
    }

    /// herdr restarts underneath: labels and pane ids come back, processes do not.
    async fn restart(self, dir: &Dir) -> Herdr {
        match self {
            Herdr::Double(d) => Herdr::Double(d.restart(&dir.0).unwrap_or_else(|e| panic!("{e}"))),
            Herdr::Real(r) => Herdr::Real(Box::new(
                r.restart().await.unwrap_or_else(|e| panic!("{e}")),
            )),
        }
    }

    /// How many times `text` was submitted into the pane labelled `label`.
    async fn typed(&self, c: &HerdrClient, label: &str, text: &str) -> usize {
        match self {
            Herdr::Double(d) => d
                .pane_by_label(label)
                .map_or(0, |(_, p)| p.typed.iter().filter(|t| *t == text).count()),
            // The member prints each line typed into it once (`ECHO`).
            Herdr::Real(_) => {
                let Some(pane) = pane_of(c, label).await else {
                    return 0;
                };
                let screen = c.api().pane_read(&pane, 200).await.unwrap_or_default();
                screen.lines().filter(|l| l.trim() == text).count()
            }
        }
    }

    async fn finish(self) {
        match self {
            Herdr::Double(d) => schema_clean(&d),
            Herdr::Real(r) => {
                if let Err(e) = r.stop().await {
                    eprintln!("{e}");
                }
            }
        }
    }
}

/// The pane carrying `label`, as herdr lists it now.
async fn pane_of(c: &HerdrClient, label: &str) -> Option<String> {
    let panes = c.api().pane_list().await.unwrap_or_default();
    panes
        .into_iter()
        .find(|p| p.label.as_deref() == Some(label))
        .map(|p| p.pane_id)
}

/// The labels of every pane herdr has now.
async fn labels(c: &HerdrClient) -> Vec<String> {
    let panes = c.api().pane_list().await.unwrap_or_else(|e| panic!("{e}"));
    panes.into_iter().filter_map(|p| p.label).collect()
}

/// A pane labelled `label` running the `ECHO` member, which reports `state` (none: it stays
/// `unknown`, as a program herdr does not recognise does).
async fn add_member(c: &HerdrClient, label: &str, state: Option<ReportedState>) {
    let new = NewPane {
        label: label.into(),
        command: ECHO.iter().map(|s| s.to_string()).collect(),
        tab_label: Some("fleet members".into()),
        ..NewPane::default()
    };
    let pane = c
        .api()
        .layout_apply(&new)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    if let Some(state) = state {
        let r = c.api().report_agent(&pane, "echo", state).await;
        assert!(r.is_ok(), "{r:?}");
    }
}

/// A member agent played by the test, through herdr's API alone (so it works on both
/// backends): waits until `brief` shows in its pane, reports itself working, replies through
/// the gateway as a member does, and reports itself idle.
async fn answer_one(
    c: &HerdrClient,
    handle: &fleetd::Handle,
    gid: &SessionId,
    brief: &str,
    reply: &str,
) {
    let label = format!("fleet:{gid}");
    for _ in 0..400 {
        let Some(pane) = pane_of(c, &label).await else {
            panic!("no pane {label}");
        };
        let screen = c.api().pane_read(&pane, 200).await.unwrap_or_default();
        if screen.contains(brief) {
            let api = c.api();
            assert!(api
                .report_agent(&pane, "echo", ReportedState::Working)
                .await
                .is_ok());
            let r = handle
                .call(
                    Principal::worker(gid.clone()),
                    Request::Reply {
                        content: reply.into(),
                    },
                )
                .await;
            assert!(matches!(r, Ok(Response::ReplyAccepted { .. })), "{r:?}");
            assert!(api
                .report_agent(&pane, "echo", ReportedState::Idle)
                .await
                .is_ok());
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the brief never reached {label}");
}

async fn delegate(
    c: &HerdrClient,
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
    answer_one(c, handle, gid, brief, &format!("done: {brief}")).await;
    match call.await {
        Ok(Ok(r)) => r,
        other => panic!("the send did not complete: {other:?}"),
    }
}

/// A single-host gateway on the production driver loop with this client.
fn boot(c: &HerdrClient, cfg: CoreConfig, seed: u64) -> Booted {
    let clock = TokioClock::new();
    let gw = Gateway::new(cfg, seed, clock.now()).unwrap_or_else(|e| panic!("{e}"));
    let driver = Driver::new(gw, c.clone(), NoBroker, clock, Quiet);
    let (handle, calls) = Driver::<HerdrClient, NoBroker, TokioClock, Quiet>::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let run = tokio::task::spawn_local(driver.run(calls, stopped));
    Booted { handle, stop, run }
}

struct Booted {
    handle: fleetd::Handle,
    stop: tokio::sync::oneshot::Sender<()>,
    run: tokio::task::JoinHandle<Gateway>,
}

impl Booted {
    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.run.await;
    }

    /// Stops the loop and hands back its gateway, to look inside.
    async fn stop_into(self) -> Gateway {
        let _ = self.stop.send(());
        self.run
            .await
            .unwrap_or_else(|e| panic!("the loop panicked: {e}"))
    }
}

/// Waits, within `bound`, until the core's restart rule has decided what a test expects: each
/// of `adopted` past its readiness gate (`fleet_status` says ready), each of `closed` gone
/// from herdr. The decision is the core's (`fleet_core::adoption`); this only watches it.
async fn until_rebuilt(
    c: &HerdrClient,
    gw: &Booted,
    adopted: &[SessionId],
    closed: &[SessionId],
    bound: Duration,
) {
    let lead = Principal::primary("lead", Some(SessionId::new("lead-pane")));
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        let mut ready = Vec::new();
        for gid in adopted {
            let status = Request::Status {
                target: gid.clone(),
            };
            if let Ok(Response::Status { view, .. }) = gw.handle.call(lead.clone(), status).await {
                if view.row.ready {
                    ready.push(gid.clone());
                }
            }
        }
        let now = labels(c).await;
        let open: Vec<&SessionId> = closed
            .iter()
            .filter(|g| now.contains(&format!("fleet:{g}")))
            .collect();
        if ready.len() == adopted.len() && open.is_empty() {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "within {bound:?}: adopted {ready:?} of {adopted:?}; still open of {closed:?}: {open:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the restart tests run the core with: samples every 50 ms, a 2 s readiness bound.
fn rebuild_config() -> CoreConfig {
    CoreConfig {
        poll_interval_ms: 50,
        spawn_ready_timeout_ms: 2_000,
        ..CoreConfig::default()
    }
}

/// The point: a gateway spawns a `command` member through the launcher (ready on its
/// program's own idle report), delivers a brief into it and gets the reply; after a gateway
/// restart it rebuilds the member from herdr's labels alone and delivers again. Each brief is
/// typed exactly once.
async fn delivers_and_knows_its_member_after_a_restart(backend: Backend) {
    let dir = Dir::new(&format!("gw-{backend:?}"));
    let Some(h) = Herdr::start(backend, &dir).await else {
        return;
    };
    let lead = Principal::primary("lead", Some(SessionId::new("lead-pane")));
    let cfg = CoreConfig {
        poll_interval_ms: 50,
        profiles: vec!["echo".into()],
        ..CoreConfig::default()
    };
    let mut gid: Option<SessionId> = None;
    for start in 1..=2u64 {
        let c = h.client(&dir);
        let gw = boot(&c, cfg.clone(), start);
        // Each start rebuilds its members from herdr's labels, not from memory.
        let listed = rebuild(&c, &gw.handle)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let known: Vec<SessionId> = gid.iter().cloned().collect();
        assert_eq!(listed.members, known, "start {start}");
        until_rebuilt(&c, &gw, &known, &[], Duration::from_secs(10)).await;
        if gid.is_none() {
            let member = reports_idle_when_started(&c, "fleet:");
            let spawn = Request::Spawn {
                host: None,
                spec: fleet_core::SpawnSpec {
                    profile: "echo".into(),
                    ..Default::default()
                },
            };
            match gw.handle.call(lead.clone(), spawn).await {
                Ok(Response::Spawned { gid: g, .. }) => {
                    // Its gate passed: the launch mark is gone, so the restart below adopts
                    // it by its samples (a mark left would wait for a connection).
                    let mark = dir.0.join("members").join(g.as_str()).join("starting");
                    assert!(!mark.exists(), "{} left behind", mark.display());
                    gid = Some(g);
                }
                other => panic!("the spawn failed: {other:?}"),
            }
            assert!(member.await.is_ok(), "the member reported itself idle");
        }
        let Some(gid) = gid.clone() else {
            unreachable!("spawned above")
        };
        let brief = format!("task {start}");
        match delegate(&c, &gw.handle, &lead, &gid, &brief).await {
            Response::Outcome {
                outcome: Outcome::Replied,
                body: Some(body),
                ..
            } => assert_eq!(body, format!("done: {brief}")),
            other => panic!("start {start}: expected REPLIED, got {other:?}"),
        }
        gw.stop().await;
    }
    let c = h.client(&dir);
    let label = format!("fleet:{}", gid.as_ref().map_or("", |g| g.as_str()));
    for brief in ["task 1", "task 2"] {
        assert_eq!(h.typed(&c, &label, brief).await, 1, "{brief} typed once");
    }
    h.finish().await;
}

#[test]
fn a_gateway_delivers_through_herdr_and_knows_its_member_after_a_restart() {
    scenario(delivers_and_knows_its_member_after_a_restart(
        Backend::Double,
    ));
}

#[cfg_attr(
    not(herdr_real),
    ignore = "needs a real herdr: set HERDR_BIN (scripts/herdr/build-herdr.sh)"
)]
#[test]
fn on_a_real_herdr_a_gateway_delivers_and_knows_its_member_after_a_restart() {
    scenario(delivers_and_knows_its_member_after_a_restart(Backend::Real));
}

/// A `command` member that never reports a status misses its gate: the spawn fails, saying
/// why, and the half-built pane is closed.
async fn a_member_that_never_gets_ready_is_reaped_at_the_gate(backend: Backend) {
    let dir = Dir::new(&format!("gate-{backend:?}"));
    let Some(h) = Herdr::start(backend, &dir).await else {
        return;
    };
    let c = h.client(&dir);
    let gw = boot(
        &c,
        CoreConfig {
            profiles: vec!["echo".into()],
            start_timeout_ms: 2_000,
            start_poll_ms: 100,
            ..CoreConfig::default()
        },
        9,
    );
    let lead = Principal::primary("lead", Some(SessionId::new("lead-pane")));
    let spawn = Request::Spawn {
        host: None,
        spec: fleet_core::SpawnSpec::of("echo"),
    };
    let r = gw.handle.call(lead, spawn).await;
    assert!(
        matches!(&r, Ok(Response::Error(fleet_core::CallError::SpawnFailed { reason }))
            if reason.contains("was not ready within 2000 ms")),
        "{r:?}"
    );
    for _ in 0..200 {
        if !labels(&c).await.iter().any(|l| l.starts_with("fleet:")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        !labels(&c).await.iter().any(|l| l.starts_with("fleet:")),
        "the half-built pane is closed"
    );
    gw.stop().await;
    h.finish().await;
}

#[test]
fn a_command_member_that_never_gets_ready_is_failed_and_reaped_at_the_gate() {
    scenario(a_member_that_never_gets_ready_is_reaped_at_the_gate(
        Backend::Double,
    ));
}

#[cfg_attr(
    not(herdr_real),
    ignore = "needs a real herdr: set HERDR_BIN (scripts/herdr/build-herdr.sh)"
)]
#[test]
fn on_a_real_herdr_a_member_that_never_gets_ready_is_reaped_at_the_gate() {
    scenario(a_member_that_never_gets_ready_is_reaped_at_the_gate(
        Backend::Real,
    ));
}

/// Startup: live members (working included) adopted, a half-built one reaped, a non-member
/// left alone, and one whose launch mark says its gate never passed is not adopted by its idle
/// status (herdr calls a starting agent idle before it takes input) and, never connecting, is
/// reaped; after herdr restarts underneath, the processless members reaped.
async fn a_restart_adopts_live_members_and_reaps_the_rest(backend: Backend) {
    let dir = Dir::new(&format!("rebuild-{backend:?}"));
    let Some(h) = Herdr::start(backend, &dir).await else {
        return;
    };
    let c = h.client(&dir);
    add_member(&c, "fleet:busy", Some(ReportedState::Working)).await;
    add_member(&c, "fleet:idle", Some(ReportedState::Idle)).await;
    add_member(&c, "fleet:half-built", None).await;
    add_member(&c, "fleet:starting", Some(ReportedState::Idle)).await;
    let files = dir.0.join("members").join("starting");
    std::fs::create_dir_all(&files).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(files.join("starting"), b"").unwrap_or_else(|e| panic!("{e}"));
    add_member(&c, "not-a-member", None).await;
    let gw = boot(&c, rebuild_config(), 1);
    let r = rebuild(&c, &gw.handle)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ids = |v: &[&str]| v.iter().map(|g| SessionId::new(*g)).collect::<Vec<_>>();
    assert_eq!(r.members, ids(&["busy", "half-built", "idle", "starting"]));
    // A working member is adopted as it is: a restart never kills a busy agent; the one that
    // stays `unknown` through the 2 s bound is closed, and so is the one still starting that
    // never connected.
    let (live, dead) = (ids(&["busy", "idle"]), ids(&["half-built", "starting"]));
    until_rebuilt(&c, &gw, &live, &dead, Duration::from_secs(10)).await;
    let now = labels(&c).await;
    for gone in ["fleet:half-built", "fleet:starting"] {
        assert!(!now.contains(&gone.to_string()), "{gone}: {now:?}");
    }
    for kept in ["fleet:busy", "fleet:idle", "not-a-member"] {
        assert!(now.contains(&kept.to_string()), "{kept} kept: {now:?}");
    }
    gw.stop().await;
    let h = h.restart(&dir).await;
    let c = h.client(&dir);
    let gw = boot(&c, rebuild_config(), 2);
    let r = rebuild(&c, &gw.handle)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.members, ids(&["busy", "idle"]));
    until_rebuilt(
        &c,
        &gw,
        &[],
        &ids(&["busy", "idle"]),
        Duration::from_secs(10),
    )
    .await;
    let now = labels(&c).await;
    assert!(
        now.iter().all(|l| !l.starts_with("fleet:")),
        "every processless member closed: {now:?}"
    );
    gw.stop().await;
    h.finish().await;
}

#[test]
fn a_restart_adopts_live_members_and_reaps_half_built_and_dead_ones() {
    scenario(a_restart_adopts_live_members_and_reaps_the_rest(
        Backend::Double,
    ));
}

#[cfg_attr(
    not(herdr_real),
    ignore = "needs a real herdr: set HERDR_BIN (scripts/herdr/build-herdr.sh)"
)]
#[test]
fn on_a_real_herdr_a_restart_adopts_live_members_and_reaps_the_rest() {
    scenario(a_restart_adopts_live_members_and_reaps_the_rest(
        Backend::Real,
    ));
}

/// herdr's events, with polls 60 s apart so nothing else could explain what is seen: a turn
/// that ends without `fleet_reply` is seen ending at once (status hints make the gateway
/// sample), a member's pane closed behind fleetd's back is gone at once, and the stream is
/// reopened after it drops (the double ends it; a real herdr is not restarted here).
async fn events_show_turns_and_gone_panes_at_once(backend: Backend) {
    let dir = Dir::new(&format!("events-{backend:?}"));
    let Some(h) = Herdr::start(backend, &dir).await else {
        return;
    };
    let c = h.client(&dir);
    add_member(&c, "fleet:m1", Some(ReportedState::Idle)).await;
    add_member(&c, "fleet:m2", Some(ReportedState::Idle)).await;
    let cfg = CoreConfig {
        poll_interval_ms: 60_000,
        ..CoreConfig::default()
    };
    let gw = boot(&c, cfg, 1);
    let r = rebuild(&c, &gw.handle)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.members.len(), 2, "{r:?}");
    let (m1, m2) = (SessionId::new("m1"), SessionId::new("m2"));
    until_rebuilt(
        &c,
        &gw,
        &[m1.clone(), m2.clone()],
        &[],
        Duration::from_secs(10),
    )
    .await;
    let watch = WatchConfig {
        relist: Duration::from_millis(200),
        backoff_min: Duration::from_millis(50),
        backoff_max: Duration::from_millis(500),
    };
    let watcher = tokio::task::spawn_local(events::watch(c.clone(), gw.handle.clone(), watch));
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A turn that ends without a reply: working, then idle, seen through events.
    quiet_turn_is_heard(&h, &c, &gw, &m1, "quiet job").await;
    if let Herdr::Double(d) = &h {
        d.drop_subscriptions();
        let mut back = false;
        for _ in 0..100 {
            if d.subscribers() > 0 {
                back = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(back, "the watcher subscribed again");
    }
    // m2's pane closes behind fleetd's back: an idle member is never polled, only the event
    // tells.
    let pane2 = pane_of(&c, "fleet:m2").await.expect("m2's pane");
    let closed = request_close(&h, &pane2).await;
    assert!(closed, "closed m2 directly");
    tokio::time::sleep(Duration::from_millis(800)).await;
    watcher.abort();
    let gateway = gw.stop_into().await;
    assert_eq!(gateway.session(&m2), None, "m2 is gone");
    assert_eq!(gateway.session(&m1), Some(SessionState::Done));
    h.finish().await;
}

/// A member placed while the events watcher runs is subscribed to at once, not at the next
/// relist: with polls and relists a minute apart, its first turn's end is still seen within
/// moments (issue 22: a new member's first turns are event-driven too).
async fn a_member_placed_while_watching_is_heard_at_once(backend: Backend) {
    let dir = Dir::new(&format!("placed-{backend:?}"));
    let Some(h) = Herdr::start(backend, &dir).await else {
        return;
    };
    let c = h.client(&dir);
    let cfg = CoreConfig {
        poll_interval_ms: 60_000,
        ..CoreConfig::default()
    };
    let gw = boot(&c, cfg, 3);
    let watch = WatchConfig {
        relist: Duration::from_secs(60),
        backoff_min: Duration::from_millis(50),
        backoff_max: Duration::from_millis(500),
    };
    let watcher = tokio::task::spawn_local(events::watch(c.clone(), gw.handle.clone(), watch));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let gid = SessionId::new("g-1");
    let ready = reports_idle_when_started(&c, "fleet:g-1");
    let placed = c.spawn(&gid, &fleet_core::SpawnSpec::of("echo")).await;
    assert!(placed.is_ok(), "{placed:?}");
    assert!(ready.await.is_ok());
    // Launched behind the core's back: say what its gateway would have (`MemberReady`), so
    // the rebuild adopts it by its samples.
    c.ready(&gid);
    let r = rebuild(&c, &gw.handle)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.members.len(), 1, "{r:?}");
    until_rebuilt(
        &c,
        &gw,
        std::slice::from_ref(&gid),
        &[],
        Duration::from_secs(10),
    )
    .await;
    quiet_turn_is_heard(&h, &c, &gw, &gid, "first job").await;
    watcher.abort();
    gw.stop().await;
    h.finish().await;
}

#[test]
fn a_member_placed_while_watching_is_subscribed_at_once() {
    scenario(a_member_placed_while_watching_is_heard_at_once(
        Backend::Double,
    ));
}

#[cfg_attr(
    not(herdr_real),
    ignore = "needs a real herdr: set HERDR_BIN (scripts/herdr/build-herdr.sh)"
)]
#[test]
fn on_a_real_herdr_a_member_placed_while_watching_is_subscribed_at_once() {
    scenario(a_member_placed_while_watching_is_heard_at_once(
        Backend::Real,
    ));
}

/// A blocking send of `brief` to `gid`: once it is typed, the member reports working, then
/// idle without `fleet_reply`; the send must end COMPLETED_UNREPLIED within 10 s — with polls
/// (and relists) a minute apart, only herdr's events can tell the gateway so.
async fn quiet_turn_is_heard(
    h: &Herdr,
    c: &HerdrClient,
    gw: &Booted,
    gid: &SessionId,
    brief: &str,
) {
    let lead = Principal::primary("lead", Some(SessionId::new("lead-pane")));
    let send = Request::Send {
        target: gid.clone(),
        content: brief.into(),
        wait: true,
        timeout_ms: Some(30_000),
    };
    let hd = gw.handle.clone();
    let call = tokio::task::spawn_local(async move { hd.call(lead, send).await });
    let label = format!("fleet:{gid}");
    let mut typed = false;
    for _ in 0..200 {
        if h.typed(c, &label, brief).await > 0 {
            typed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(typed, "the brief was typed");
    let pane = pane_of(c, &label).await.expect("the member's pane");
    let api = c.api();
    assert!(api
        .report_agent(&pane, "echo", ReportedState::Working)
        .await
        .is_ok());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(api
        .report_agent(&pane, "echo", ReportedState::Idle)
        .await
        .is_ok());
    match tokio::time::timeout(Duration::from_secs(10), call).await {
        Ok(Ok(Ok(Response::Outcome { outcome, .. }))) => {
            assert_eq!(outcome, Outcome::CompletedUnreplied)
        }
        other => panic!("the turn's end was not heard within 10 s (polls are 60 s): {other:?}"),
    }
}

/// Closes a pane on the server directly, not through fleetd's client.
async fn request_close(h: &Herdr, pane: &str) -> bool {
    let r = herdr_real::request(
        h.path(),
        "pane.close",
        serde_json::json!({ "pane_id": pane }),
    )
    .await;
    matches!(r, Ok(v) if v.get("result").is_some())
}

#[test]
fn events_show_a_turn_ending_and_a_pane_gone_at_once() {
    scenario(events_show_turns_and_gone_panes_at_once(Backend::Double));
}

/// herdr 0.9 (protocol 22) on the double: its streams start at the current event (nothing
/// replayed), its `ping` names capabilities, an unknown method keeps the request's id. The
/// scenarios that read events and a restart run as on 0.8.
#[test]
fn on_protocol_22_events_show_a_turn_ending_and_a_pane_gone_at_once() {
    scenario(events_show_turns_and_gone_panes_at_once(Backend::Double22));
}

#[test]
fn on_protocol_22_a_gateway_delivers_and_knows_its_member_after_a_restart() {
    scenario(delivers_and_knows_its_member_after_a_restart(
        Backend::Double22,
    ));
}

#[test]
fn on_protocol_22_a_member_placed_while_watching_is_subscribed_at_once() {
    scenario(a_member_placed_while_watching_is_heard_at_once(
        Backend::Double22,
    ));
}

/// On herdr 0.9 a stream replays nothing: a member whose pane closed between the watcher's
/// listing and its subscription is told gone by the listing that follows the subscription
/// (on 0.8 the replayed `pane_closed` told it). Without that second listing an idle member's
/// end would wait for something to be sent to it.
#[test]
fn on_protocol_22_a_pane_gone_before_the_stream_opened_is_told() {
    scenario(async {
        let dir = Dir::new("p22-gone");
        let d = double(&dir).await;
        d.state().protocol = 22;
        let c = client(&d);
        let gid = "0f0f0f0f-0000-4000-8000-000000000022";
        let pane = d.add_pane(Some(&format!("fleet:{gid}")), "idle");
        let (handle, mut calls) = Driver::<HerdrClient, NoBroker, TokioClock, Quiet>::channel();
        // The pane goes, and the watcher starts with it already gone from herdr's list but
        // known to the gateway: only a listing after subscribing can tell it.
        let first = c.member_panes().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(first.len(), 1);
        d.remove_pane(&pane);
        let cfg = events::WatchConfig::default();
        let watch = tokio::task::spawn_local(events::watch_from(c, handle, cfg, first));
        let told = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(m) = calls.recv().await {
                if let fleetd::ToLoop::Tell(fleet_core::Input::PaneGone { target }) = &m {
                    if target.as_str() == gid {
                        return true;
                    }
                }
            }
            false
        })
        .await;
        watch.abort();
        assert_eq!(told, Ok(true), "the gone member was never told");
        schema_clean(&d);
    });
}

#[cfg_attr(
    not(herdr_real),
    ignore = "needs a real herdr: set HERDR_BIN (scripts/herdr/build-herdr.sh)"
)]
#[test]
fn on_a_real_herdr_events_show_a_turn_ending_and_a_pane_gone_at_once() {
    scenario(events_show_turns_and_gone_panes_at_once(Backend::Real));
}

/// A lead pinned by pane id (`[[leads]] pane`) is typed into only while no member holds that
/// id: a member's pane that came by it (herdr restarted, ids reissued) gets nothing meant for
/// the lead — a peer lead's note, a nudge — and the lead is "not found" until fixed.
#[test]
fn a_lead_pinned_by_id_is_never_a_members_pane() {
    scenario(async {
        let dir = Dir::new("pinned-lead");
        let d = double(&dir).await;
        let held = d.add_pane(Some("fleet:g-9"), "idle");
        let mut cfg = config(&d.path, &d.path.with_extension("members"));
        cfg.lead_panes
            .insert(SessionId::new("lead-1"), held.clone().into());
        let c = HerdrClient::new(cfg);
        let lead = SessionId::new("lead-1");
        assert_eq!(
            c.inject(&lead, "note from a peer lead").await.map(|_| ()),
            Err(fleetd::ports::InjectFailure::NotTyped(
                HerdrError::PaneNotFound
            ))
        );
        assert_eq!(
            c.sample(&lead).await.map(|_| ()),
            Err(HerdrError::PaneNotFound)
        );
        let typed = d.pane_by_label("fleet:g-9").map(|(_, p)| p.typed);
        assert_eq!(typed, Some(Vec::<String>::new()));
        // A pane of its own under the id it names is typed into.
        let own = d.add_pane(None, "idle");
        let mut cfg = config(&d.path, &d.path.with_extension("members"));
        cfg.lead_panes.insert(lead.clone(), own.clone().into());
        let c = HerdrClient::new(cfg);
        assert!(c.inject(&lead, "note").await.is_ok());
        schema_clean(&d);
    });
}

/// A second herdr for members (`member_socket`, ch. 9's `memberHerdrSocket`): members are
/// spawned, found and typed into there; a lead's pane is found and typed into on the main one.
#[test]
fn members_live_on_their_own_herdr_and_leads_on_the_main_one() {
    scenario(async {
        let (main_dir, member_dir) = (Dir::new("main"), Dir::new("members"));
        let main = double(&main_dir).await;
        let members = double(&member_dir).await;
        let lead = main.add_pane(Some("lead"), "idle");
        let mut cfg = config(&main.path, &main_dir.0.join("runtime"));
        cfg.member_socket = Some(members.path.clone());
        cfg.lead_panes
            .insert(SessionId::new(&lead), lead.clone().into());
        let c = HerdrClient::new(cfg);
        assert_eq!(
            c.socket(),
            members.path.as_path(),
            "member events come from there"
        );
        let gid = SessionId::new("g-1");
        let ready = reports_idle_when_started(&c, "fleet:g-1");
        assert_eq!(
            c.spawn(&gid, &fleet_core::SpawnSpec::of("echo"))
                .await
                .map(|l| l.readiness),
            Ok(Readiness::OnInjectable)
        );
        assert!(ready.await.is_ok());
        assert!(members.pane_by_label("fleet:g-1").is_some());
        assert!(main.pane_by_label("fleet:g-1").is_none());
        assert!(c.inject(&gid, "for the member").await.is_ok());
        let lead_id = SessionId::new(&lead);
        assert!(
            c.sample(&lead_id).await.is_ok(),
            "the lead is found on the main herdr"
        );
        assert!(c.inject(&lead_id, "for the lead").await.is_ok());
        let typed = |d: &HerdrDouble, label: &str| d.pane_by_label(label).map(|(_, p)| p.typed);
        assert_eq!(
            typed(&members, "fleet:g-1"),
            Some(vec!["for the member".to_string()])
        );
        assert_eq!(typed(&main, "lead"), Some(vec!["for the lead".to_string()]));
        assert_eq!(
            c.sample(&SessionId::new("nobody")).await,
            Err(HerdrError::PaneNotFound)
        );
        schema_clean(&main);
        schema_clean(&members);
    });
}

/// A round of samples from one listing reads what herdr says of each member — its reported
/// state, `unknown` with its screen for one that reports nothing — and a member with no pane
/// as gone.
async fn samples_a_round_from_one_listing(backend: Backend) {
    let dir = Dir::new(&format!("round-{backend:?}"));
    let Some(h) = Herdr::start(backend, &dir).await else {
        return;
    };
    let c = h.client(&dir);
    add_member(&c, "fleet:g-1", Some(ReportedState::Idle)).await;
    add_member(&c, "fleet:g-2", Some(ReportedState::Working)).await;
    add_member(&c, "fleet:g-3", None).await;
    let gids: Vec<SessionId> = ["g-1", "g-2", "g-3", "g-4"]
        .into_iter()
        .map(SessionId::new)
        .collect();
    let samples = c.sample_all(&gids).await.unwrap_or_else(|e| panic!("{e}"));
    let got: Vec<_> = samples
        .iter()
        .map(|(g, s)| {
            (
                g.as_str(),
                s.as_ref().map(|s| (s.status, s.screen.is_some())),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("g-1", Ok((AgentStatus::Idle, false))),
            ("g-2", Ok((AgentStatus::Working, false))),
            ("g-3", Ok((AgentStatus::Unknown, true))),
            ("g-4", Err(&HerdrError::PaneNotFound)),
        ]
    );
    h.finish().await;
}

#[test]
fn a_round_of_samples_reads_each_members_state_from_one_listing() {
    scenario(samples_a_round_from_one_listing(Backend::Double));
}

#[cfg_attr(
    not(herdr_real),
    ignore = "needs a real herdr: set HERDR_BIN (scripts/herdr/build-herdr.sh)"
)]
#[test]
fn on_a_real_herdr_a_round_of_samples_reads_each_members_state() {
    scenario(samples_a_round_from_one_listing(Backend::Real));
}

/// Nothing is typed into a member while herdr says it is working; the brief goes in once it
/// is injectable again.
async fn injects_only_when_injectable(backend: Backend) {
    let dir = Dir::new(&format!("inj-{backend:?}"));
    let Some(h) = Herdr::start(backend, &dir).await else {
        return;
    };
    let c = h.client(&dir);
    add_member(&c, "fleet:busy-1", Some(ReportedState::Working)).await;
    let cfg = CoreConfig {
        poll_interval_ms: 50,
        ..CoreConfig::default()
    };
    let gw = boot(&c, cfg, 1);
    let r = rebuild(&c, &gw.handle)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let busy = vec![SessionId::new("busy-1")];
    assert_eq!(r.members, busy);
    until_rebuilt(&c, &gw, &busy, &[], Duration::from_secs(10)).await;
    let lead = Principal::primary("lead", Some(SessionId::new("lead-pane")));
    let send = Request::Send {
        target: SessionId::new("busy-1"),
        content: "wait for me".into(),
        wait: false,
        timeout_ms: Some(30_000),
    };
    let r = gw.handle.call(lead, send).await;
    assert!(matches!(r, Ok(Response::Ticket(_))), "{r:?}");
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(
        h.typed(&c, "fleet:busy-1", "wait for me").await,
        0,
        "typed while the member was working"
    );
    let pane = pane_of(&c, "fleet:busy-1").await.expect("a pane");
    assert!(c
        .api()
        .report_agent(&pane, "echo", ReportedState::Idle)
        .await
        .is_ok());
    let mut typed = 0;
    for _ in 0..100 {
        typed = h.typed(&c, "fleet:busy-1", "wait for me").await;
        if typed > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(typed, 1, "typed once it was injectable");
    gw.stop().await;
    h.finish().await;
}

#[test]
fn a_brief_waits_while_the_member_works_and_goes_in_when_it_is_idle() {
    scenario(injects_only_when_injectable(Backend::Double));
}

#[cfg_attr(
    not(herdr_real),
    ignore = "needs a real herdr: set HERDR_BIN (scripts/herdr/build-herdr.sh)"
)]
#[test]
fn on_a_real_herdr_a_brief_waits_while_the_member_works() {
    scenario(injects_only_when_injectable(Backend::Real));
}

/// The member's herdr socket, on the double: its own pane's reports and reads go through to
/// herdr; typing into the lead, reading or closing another pane, renaming its own and listing
/// are refused with herdr's error shape and never reach herdr. Closing the member removes it.
#[test]
fn a_members_herdr_socket_forwards_only_what_is_its_own() {
    scenario(async {
        let dir = Dir::new("member-socket");
        let d = double(&dir).await;
        let lead = d.add_pane(Some("lead"), "idle");
        let other = d.add_pane(Some("fleet:g-9"), "idle");
        let runtime = d.path.with_extension("members");
        let c = HerdrClient::new(config(&d.path, &runtime));
        let gid = SessionId::new("g-1");
        let member = reports_idle_when_started(&c, "fleet:g-1");
        let spawned = c.spawn(&gid, &fleet_core::SpawnSpec::of("echo")).await;
        assert!(spawned.is_ok(), "{spawned:?}");
        assert!(member.await.is_ok());
        let (own, _) = d.pane_by_label("fleet:g-1").expect("a pane");
        let sock = runtime.join("g-1").join("herdr.sock");
        let ask = |v: serde_json::Value| {
            let sock = sock.clone();
            async move {
                let s = fleetd::herdr::Socket::new(sock, Duration::from_secs(2));
                let method = v["method"].as_str().unwrap_or_default().to_string();
                s.call("t", &method, v["params"].clone()).await
            }
        };
        let working = ask(serde_json::json!({"method": "pane.report_agent", "params":
            {"pane_id": own, "source": "custom:x", "agent": "x", "state": "working"}}))
        .await;
        assert!(working.is_ok(), "{working:?}");
        assert_eq!(
            d.state().panes[&own].status,
            "working",
            "forwarded to herdr"
        );
        let read = ask(serde_json::json!({"method": "pane.read", "params":
            {"pane_id": own, "source": "recent", "lines": 5, "format": "text", "strip_ansi": true}}))
        .await;
        assert!(read.is_ok(), "{read:?}");
        d.state().requests.clear();
        for (method, params) in [
            (
                "pane.send_input",
                serde_json::json!({"pane_id": lead, "text": "pwned", "keys": ["enter"]}),
            ),
            (
                "pane.read",
                serde_json::json!({"pane_id": other, "source": "recent"}),
            ),
            ("pane.close", serde_json::json!({"pane_id": other})),
            (
                "pane.rename",
                serde_json::json!({"pane_id": own, "label": "fleet:g-9"}),
            ),
            ("pane.list", serde_json::json!({})),
        ] {
            let r = ask(serde_json::json!({"method": method, "params": params})).await;
            assert!(
                matches!(&r, Err(fleetd::herdr::RpcError::Herdr { code, .. }) if code == "forbidden"),
                "{method}: {r:?}"
            );
        }
        assert!(
            d.state().requests.is_empty(),
            "nothing refused reached herdr: {:?}",
            d.state().requests
        );
        assert!(d.state().panes[&lead].typed.is_empty());
        assert_eq!(c.close(&gid).await, Ok(()));
        assert!(!sock.exists(), "the socket goes with its member");
        schema_clean(&d);
    });
}

/// A lead named by its pane's label (`[[leads]] pane_label`) is found by it at each use: when
/// its pane is restarted (a new id, the same label), what is typed for it goes to the new one.
#[test]
fn a_lead_named_by_label_is_found_again_after_its_pane_restarts() {
    scenario(async {
        let dir = Dir::new("lead-label");
        let d = double(&dir).await;
        let first = d.add_pane(Some("lead-alpha"), "idle");
        let mut cfg = config(&d.path, &d.path.with_extension("members"));
        let lead = SessionId::new("alpha");
        cfg.lead_panes.insert(
            lead.clone(),
            fleetd::herdr::LeadPane::Label("lead-alpha".into()),
        );
        let c = HerdrClient::new(cfg);
        assert!(c.inject(&lead, "one result waits").await.is_ok());
        assert_eq!(d.state().panes[&first].typed, vec!["one result waits"]);
        d.remove_pane(&first);
        assert_eq!(
            c.sample(&lead).await.map(|_| ()),
            Err(HerdrError::PaneNotFound)
        );
        let second = d.add_pane(Some("lead-alpha"), "idle");
        assert_ne!(first, second);
        assert!(c.inject(&lead, "two results wait").await.is_ok());
        assert_eq!(d.state().panes[&second].typed, vec!["two results wait"]);
        schema_clean(&d);
    });
}
