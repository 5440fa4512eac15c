//! End-to-end harness: real `fleetd` processes (the binary `cargo test --workspace` builds), an
//! MCP client (rmcp's) acting as a lead, a REST client, and members played through the herdr
//! double — the only stand-in, because no herdr binary ships here (with `HERDR_BIN` the herdr
//! tests run against a real one).

use crate::panes::{Panes, ECHO};
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// The `fleetd` binary next to this test binary (`target/<profile>/fleetd`).
pub fn fleetd_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("no target directory above {}", exe.display()));
    let bin = dir.join("fleetd");
    assert!(
        bin.is_file(),
        "{} is missing: build it first (`cargo build -p fleetd`, or run the whole workspace's tests)",
        bin.display()
    );
    bin
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    // Below the kernel's ephemeral range (32768–60999 by default), where every outgoing
    // connection on the machine takes its local port: one taken there between this check and
    // the daemon's own bind failed a CI run ("Address already in use"). Tests of one binary
    // run in parallel, so each call takes the next candidate; binaries run one after another.
    // 16000–24000 also keeps clear of RabbitMQ's 5672–5674, 15672 and 25672–25674.
    const LOW: u16 = 16_000;
    const SPAN: u16 = 8_000;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let start = (std::process::id() % u32::from(SPAN)) as u16;
    for _ in 0..SPAN {
        let offset = start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN;
        let port = LOW + offset;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {LOW}..{}", LOW + SPAN)
}

/// A fixed secret key per test host, written where the config says.
pub fn write_key(path: &Path, seed: u8) -> [u8; 32] {
    use std::os::unix::fs::PermissionsExt;
    let secret = [seed; 32];
    std::fs::write(path, format!("{}\n", fleetd::config::encode_key(&secret)))
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    // fleetd refuses a key file others can read.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
    secret
}

/// A running `fleetd run`. Dropping it kills the process.
pub struct Proc {
    child: tokio::process::Child,
    pub name: String,
    pub url: String,
    pub config: PathBuf,
    pub log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

impl Proc {
    /// Starts `fleetd run` on `config_text` (written to `dir/<name>.toml`), and waits until it
    /// answers `/healthz`.
    pub async fn start(
        dir: &Path,
        name: &str,
        port: u16,
        config_text: &str,
    ) -> Result<Proc, String> {
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(&config, config_text).map_err(|e| e.to_string())?;
        Self::spawn(dir, name, port, config).await
    }

    async fn spawn(dir: &Path, name: &str, port: u16, config: PathBuf) -> Result<Proc, String> {
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| e.to_string())?;
        let child = tokio::process::Command::new(fleetd_bin())
            .arg("run")
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "info,fleetd::event=info,lapin=warn")
            // A test run inside an agent's session must not trip fleetd's primary guard.
            .env_remove("ANTHROPIC_BASE_URL")
            .env_remove("FLEET_MCP_TOKEN")
            .env_remove("FLEET_GID")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting fleetd: {e}"))?;
        let mut p = Proc {
            child,
            name: name.into(),
            url: format!("http://127.0.0.1:{port}"),
            config,
            log,
        };
        let http = reqwest::Client::new();
        for _ in 0..300 {
            if let Ok(Some(status)) = p.child.try_wait() {
                return Err(format!("{name} exited ({status}):\n{}", p.log_text()));
            }
            // Up, and this process (a reused port would answer with another host's name).
            let health = http
                .get(format!("{}/healthz", p.url))
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            if let Ok(r) = health {
                let v: Value = r.json().await.unwrap_or(Value::Null);
                if v["host"] == name {
                    return Ok(p);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = p.child.start_kill();
        Err(format!("{name} never answered /healthz:\n{}", p.log_text()))
    }

    /// Starts it again on the same config (after a kill).
    pub async fn restart(&mut self, dir: &Path, port: u16) -> Result<(), String> {
        let next = Self::spawn(dir, &self.name, port, self.config.clone()).await?;
        let old = std::mem::replace(self, next);
        drop(old);
        Ok(())
    }

    /// The process id (0 once it exited).
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `kill -9`: no shutdown path runs.
    pub async fn kill9(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// SIGTERM, and how it exited (bounded).
    pub async fn term(&mut self, bound: Duration) -> Result<std::process::ExitStatus, String> {
        let pid = self.child.id().ok_or("already exited")?;
        // SAFETY: kill(2) on our own child's pid with a valid signal has no memory effects.
        let rc = unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        if rc != 0 {
            return Err(format!("kill(SIGTERM) failed: {rc}"));
        }
        match tokio::time::timeout(bound, self.child.wait()).await {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!(
                "{} did not exit within {bound:?} of SIGTERM",
                self.name
            )),
        }
    }
}

/// An MCP client with one identity (rmcp's Streamable HTTP client).
pub struct Mcp {
    client: RunningService<RoleClient, ClientConfig>,
}

impl Mcp {
    pub async fn connect(url: &str, token: Option<&str>) -> Result<Mcp, String> {
        let mut cfg = StreamableHttpClientTransportConfig::with_uri(format!("{url}/mcp"));
        if let Some(t) = token {
            cfg = cfg.auth_header(t);
        }
        cfg.allow_stateless = true;
        let transport = StreamableHttpClientTransport::from_config(cfg);
        let client = ClientConfig::default()
            .serve(transport)
            .await
            .map_err(|e| format!("MCP initialize: {e}"))?;
        Ok(Mcp { client })
    }

    pub async fn tools(&self) -> Vec<String> {
        let tools = self
            .client
            .list_all_tools()
            .await
            .unwrap_or_else(|e| panic!("tools/list: {e}"));
        let mut names: Vec<String> = tools.into_iter().map(|t| t.name.to_string()).collect();
        names.sort();
        names
    }

    /// Calls `tool`; `(ok, the JSON it answered)`.
    pub async fn call(&self, tool: &str, args: Value) -> (bool, Value) {
        let args = match args {
            Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(args);
        let r = tokio::time::timeout(Duration::from_secs(150), self.client.call_tool(params))
            .await
            .unwrap_or_else(|_| panic!("{tool}: no answer within 150 s"))
            .unwrap_or_else(|e| panic!("{tool}: {e}"));
        let text: String = r
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect();
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (r.is_error != Some(true), v)
    }

    pub async fn close(self) {
        let _ = self.client.cancel().await;
    }
}

/// REST with one identity.
#[derive(Clone)]
pub struct Rest {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Rest {
    pub fn new(base: &str, token: Option<&str>) -> Rest {
        Rest {
            http: reqwest::Client::new(),
            base: base.into(),
            token: token.map(str::to_string),
        }
    }

    async fn send(&self, rb: reqwest::RequestBuilder) -> (u16, Value) {
        let rb = match &self.token {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        };
        let r = rb
            .timeout(Duration::from_secs(120))
            .send()
            .await
            .unwrap_or_else(|e| panic!("REST: {e}"));
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// `/metrics` once `done` holds of it, or as it is after 5 s: gauges are read from the core
    /// at most once a second, after a step of its loop.
    pub async fn metrics_until(&self, done: impl Fn(&str) -> bool) -> String {
        let mut text = String::new();
        for _ in 0..50 {
            text = match self.get("/metrics").await.1 {
                Value::String(s) => s,
                other => other.to_string(),
            };
            if done(&text) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        text
    }

    /// A request that may fail to connect (a gateway that is down, or restarting).
    async fn try_send(
        &self,
        rb: reqwest::RequestBuilder,
        bound: Duration,
    ) -> Result<(u16, Value), String> {
        let rb = match &self.token {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        };
        let r = rb.timeout(bound).send().await.map_err(|e| e.to_string())?;
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        Ok((
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ))
    }

    /// A POST that may fail to connect (a gateway that is down).
    pub async fn try_post(&self, path: &str, body: Value) -> Result<(u16, Value), String> {
        let rb = self.http.post(format!("{}{path}", self.base)).json(&body);
        self.try_send(rb, Duration::from_secs(60)).await
    }

    /// A GET that may fail to connect (a gateway that is down, or restarting).
    pub async fn try_get(&self, path: &str) -> Result<(u16, Value), String> {
        let rb = self.http.get(format!("{}{path}", self.base));
        self.try_send(rb, Duration::from_secs(30)).await
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.send(self.http.get(format!("{}{path}", self.base)))
            .await
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(self.http.post(format!("{}{path}", self.base)).json(&body))
            .await
    }

    /// A POST with no body at all (a route that takes its arguments in the query).
    pub async fn post_query(&self, path: &str) -> (u16, Value) {
        self.send(self.http.post(format!("{}{path}", self.base)))
            .await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.send(self.http.delete(format!("{}{path}", self.base)))
            .await
    }
}

/// A running `play_members`; dropping it stops the members.
pub struct Played {
    pub task: tokio::task::JoinHandle<()>,
}

impl Drop for Played {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Members played on a herdr double: a new `fleet:<gid>` pane reports idle (as a `command`
/// member's program would), and each brief typed into it is worked on between a working and
/// an idle report and answered through REST as that member (its own token):
/// - `ASK <ms>: <question>` asks the lead first (`fleet_ask`, timing out after `<ms>`) and
///   replies `answered: <the answer or the ask's outcome>`;
/// - `SLOW <ms>: …` works `<ms>` before replying;
/// - `DESIGN: <x>` (an architect's brief) is replied to with `design of <x> by <its gid>`;
/// - `DELEGATE <gid>: <task>` delegates `<task>` to member `<gid>` (`POST
///   /sessions/<gid>/message`, blocking, as this member — an architect may) and replies
///   `delegated (<status>): <outcome> <body>`;
/// - anything else is replied to at once with `done: <brief>`.
///
/// A reply the gateway does not take (it is down, or its broker is) is retried, as a member
/// would, for up to a minute. Each member's token is the one its spawn minted (the nonce the
/// gateway recorded under `state/members/<gid>/`).
pub fn play_members(herdr: Panes, base: &str, member_key: [u8; 32], state: &Path) -> Played {
    let base = base.to_string();
    let runtime = state.join("members");
    let task = tokio::spawn(async move {
        let mut answered: BTreeMap<String, usize> = BTreeMap::new();
        loop {
            for p in herdr.members().await {
                let (id, gid) = (p.pane.clone(), p.gid.clone());
                if p.status == "unknown" && p.typed.is_empty() {
                    herdr.set_status(&id, "idle").await;
                    continue;
                }
                let done = answered.entry(id.clone()).or_insert(0);
                if p.typed.len() <= *done {
                    continue;
                }
                let brief = p.typed[*done].clone();
                *done += 1;
                herdr.set_status(&id, "working").await;
                let Some(token) =
                    fleetd::herdr::launch::token_on_record(&runtime, &member_key, &gid)
                else {
                    eprintln!("played member {gid}: no nonce on record yet");
                    *done -= 1;
                    continue;
                };
                let rest = Rest::new(&base, Some(&token));
                let herdr = herdr.clone();
                tokio::spawn(async move {
                    let reply = work(&rest, &gid, &brief).await;
                    for _ in 0..200 {
                        match rest
                            .try_post(
                                &format!("/sessions/{gid}/reply"),
                                json!({ "message": reply }),
                            )
                            .await
                        {
                            Ok((200, _)) => break,
                            Ok((code, v)) => {
                                eprintln!("played member {gid}: reply answered {code}: {v}")
                            }
                            Err(e) => eprintln!("played member {gid}: reply: {e}"),
                        }
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                    herdr.set_status(&id, "idle").await;
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    Played { task }
}

/// What a played member does with `brief` before replying; returns its reply.
async fn work(rest: &Rest, gid: &str, brief: &str) -> String {
    let lead_in = |tag: &str| -> Option<(u64, String)> {
        let at = brief.find(tag)?;
        let rest = &brief[at + tag.len()..];
        let (ms, text) = rest.split_once(':')?;
        Some((ms.trim().parse().ok()?, text.trim().to_string()))
    };
    if let Some((ms, question)) = lead_in("ASK ") {
        let (code, v) = rest
            .post(
                &format!("/sessions/{gid}/ask"),
                json!({ "question": question, "timeoutMs": ms }),
            )
            .await;
        let said = match v["answer"].as_str() {
            Some(a) => a.to_string(),
            None => v["outcome"].as_str().unwrap_or("?").to_string(),
        };
        return format!("answered: {said} ({code})");
    }
    if let Some((ms, _)) = lead_in("SLOW ") {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if let Some(topic) = brief.strip_prefix("DESIGN: ") {
        return format!("design of {topic} by {gid}");
    }
    // A member talked into attacking its lead's terminal: a clipboard write, a screen clear,
    // a C1 CSI and a bell in its reply.
    if brief.starts_with("HOSTILE") {
        return "pwned \u{1b}]52;c;ZXZpbA==\u{7} \u{1b}[2J \u{9b}31m red".to_string();
    }
    if let Some((to, task)) = brief
        .strip_prefix("DELEGATE ")
        .and_then(|r| r.split_once(": "))
    {
        let (code, v) = rest
            .post(
                &format!("/sessions/{to}/message"),
                json!({ "message": task, "timeoutMs": 30000 }),
            )
            .await;
        let outcome = v["outcome"].as_str().or(v["code"].as_str()).unwrap_or("?");
        let body = v["body"].as_str().unwrap_or("");
        return format!("delegated ({code}): {outcome} {body}");
    }
    format!("done: {brief}")
}

/// A temporary directory removed on drop (kept, with its logs, when the test failed).
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(tag: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("fleetd-e2e-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        Dir(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept {} for its logs", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

// ---- a fleet of named hosts on the local RabbitMQ ------------------------------------------

/// One gateway of a three-host fleet: its process, its herdr (the double, or a real one under
/// `HERDR_BIN`) and its played members.
pub struct Host {
    pub name: &'static str,
    pub port: u16,
    pub proc: Proc,
    pub herdr: Panes,
    pub members: Played,
    pub token: String,
    /// The lead's own pane on this host's herdr (nudges and lead-to-lead messages land there).
    pub lead_pane: String,
}

pub const HOSTS: [&str; 3] = ["alpha", "beta", "gamma"];

pub fn lead_token(host: &str) -> String {
    format!("lead-{host}-token-0123456789")
}

/// Host `i`'s config: the shared RabbitMQ under namespace `ns`, the other two as peers.
/// gamma takes control only from itself and beta, so alpha's spawns there are refused.
pub fn cross_config(
    dir: &Dir,
    ns: &str,
    i: usize,
    port: u16,
    socket: &std::path::Path,
    lead_pane: &str,
) -> String {
    let name = HOSTS[i];
    let peers: String = HOSTS
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .map(|(j, h)| {
            let public = fleetd::daemon::public_key(&[10 + j as u8; 32]);
            format!("{h} = \"{}\"\n", fleetd::config::encode_key(&public))
        })
        .collect();
    let allow = if name == "gamma" {
        "control_allowlist = [\"gamma\", \"beta\"]"
    } else {
        ""
    };
    format!(
        r#"
[gateway]
host = "{name}"
listen = "127.0.0.1:{port}"
state_dir = "{state}"
shutdown_timeout_ms = 5000

[broker]
uri = "{uri}"
namespace = "{ns}"
backoff_max_ms = 1000
{allow}

[peers]
{peers}
[[leads]]
name = "lead-{name}"
gid = "lead-{name}"
pane = "{lead_pane}"
token = "{token}"

[herdr]
socket = "{socket}"
ready_timeout_ms = 7000

[profiles.echo]
kind = "command"
argv = {argv}

[core]
poll_interval_ms = 100
presence_interval_ms = 500
presence_ttl_ms = 3000
spawn_ready_timeout_ms = 8000
worker_inbox_expires_ms = 120000
lead_inbox_expires_ms = 120000
"#,
        state = dir.0.join(name).join("state").display(),
        uri = crate::gateways::amqp_uri(),
        token = lead_token(name),
        socket = socket.display(),
        argv = echo_argv(),
    )
}

/// One host, no broker, two leads with their own panes: a primary (`lead1`) and an architect
/// (`archie1`), with `tokens`; the `echo` member profile; the audit in `dir/audit.jsonl`.
pub fn solo_config(
    dir: &Dir,
    port: u16,
    socket: &std::path::Path,
    panes: (&str, &str),
    tokens: (&str, &str),
) -> String {
    format!(
        r#"
[gateway]
host = "solo"
listen = "127.0.0.1:{port}"
state_dir = "{state}"
shutdown_timeout_ms = 3000

[log]
audit_file = "{audit}"

[[leads]]
name = "lead"
gid = "lead1"
pane = "{lead_pane}"
token = "{lead_token}"

[[leads]]
name = "archie"
gid = "archie1"
pane = "{architect_pane}"
role = "architect"
token = "{architect_token}"

[herdr]
socket = "{socket}"
ready_timeout_ms = 10000

[profiles.echo]
kind = "command"
argv = {argv}

[health]
interval_ms = 300

[core]
poll_interval_ms = 100
"#,
        state = dir.0.join("state").display(),
        audit = dir.0.join("audit.jsonl").display(),
        socket = socket.display(),
        lead_pane = panes.0,
        architect_pane = panes.1,
        argv = echo_argv(),
        lead_token = tokens.0,
        architect_token = tokens.1,
    )
}

/// `ECHO` as a TOML array.
pub fn echo_argv() -> String {
    serde_json::to_string(&ECHO).unwrap_or_default()
}

pub async fn start_host(dir: &Dir, ns: &str, i: usize) -> Host {
    start_host_with(dir, ns, i, "").await
}

/// `start_host` with `extra_core` lines added to the config's `[core]` section.
pub async fn start_host_with(dir: &Dir, ns: &str, i: usize, extra_core: &str) -> Host {
    let extra = format!("[core]\n{extra_core}\n");
    start_host_edited(dir, ns, i, |c| c.replace("[core]\n", &extra)).await
}

/// `start_host` with its config text passed through `edit` first.
pub async fn start_host_edited(
    dir: &Dir,
    ns: &str,
    i: usize,
    edit: impl FnOnce(String) -> String,
) -> Host {
    let name = HOSTS[i];
    let hdir = dir.0.join(name);
    let state = hdir.join("state");
    std::fs::create_dir_all(&state).unwrap_or_else(|e| panic!("{e}"));
    let secret = write_key(&state.join("gateway.key"), 10 + i as u8);
    let herdr = Panes::start(&hdir).await;
    let lead_pane = herdr.add_lead_pane(&format!("lead-{name}")).await;
    let port = free_port();
    let config = edit(cross_config(dir, ns, i, port, &herdr.path(), &lead_pane));
    let proc = Proc::start(&hdir, name, port, &config)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let members = play_members(
        herdr.clone(),
        &proc.url,
        fleetd::daemon::member_key(&secret),
        &state,
    );
    Host {
        name,
        port,
        proc,
        herdr,
        members,
        token: lead_token(name),
        lead_pane,
    }
}

/// Stops every host with SIGTERM; each must exit 0 within 20 s (its log is shown otherwise).
pub async fn stop_all(hosts: &mut [Host]) {
    for h in hosts {
        let s = h.proc.term(Duration::from_secs(20)).await;
        assert!(
            s.as_ref().is_ok_and(|s| s.success()),
            "{} {s:?}\n{}",
            h.name,
            h.proc.log_text()
        );
    }
}

/// Every host's log, headed by its name (for a failing assertion's message).
pub fn logs(hosts: &[Host]) -> String {
    hosts
        .iter()
        .map(|h| format!("==== {} ====\n{}", h.name, h.proc.log_text()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// How many times text containing `needle` was typed into member `gid`'s pane on `h`.
pub async fn typed(h: &Host, gid: &str, needle: &str) -> usize {
    h.herdr.member_typed(gid, needle).await
}

pub async fn eventually<F: std::future::Future<Output = bool>>(
    what: &str,
    secs: u64,
    mut f: impl FnMut() -> F,
) {
    for _ in 0..secs * 10 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: not within {secs} s");
}

/// Polls `ticket` at `lead` until it ends (DONE or FAILED), for at most `secs`: its last view.
pub async fn ticket_end(lead: &Mcp, ticket: &str, secs: u64) -> Option<Value> {
    for _ in 0..secs * 10 {
        let (_, v) = lead.call("fleet_poll", json!({ "ticket": ticket })).await;
        if v["phase"] == "DONE" || v["phase"] == "FAILED" {
            return Some(v);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Drains `gid`'s held replies at `lead` until one contains `needle` (bounded).
pub async fn collect(lead: &Mcp, gid: &str, needle: &str, secs: u64) -> serde_json::Value {
    let mut seen = Vec::new();
    for _ in 0..secs * 5 {
        let (ok, v) = lead.call("fleet_poll", json!({"sessionId": gid})).await;
        assert!(ok, "{v}");
        if v.to_string().contains(needle) {
            return v;
        }
        seen.push(v);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "no held reply from {gid} containing {needle:?} within {secs} s; last: {:?}",
        seen.last()
    );
}

/// Waits (bounded by `secs`, twice: for the ticket to end, then for a held reply) until the
/// delegation `ticket` to `gid` has ended and its reply — the text containing `needle` — is
/// found, as its outcome or held for the lead. Panics with `hosts`' logs otherwise.
pub async fn reply_found(
    lead: &Mcp,
    ticket: &str,
    gid: &str,
    needle: &str,
    secs: u64,
    hosts: &[Host],
) {
    let end = ticket_end(lead, ticket, secs)
        .await
        .unwrap_or_else(|| panic!("{needle} never ended\n{}", logs(hosts)));
    eprintln!("{needle}: {} {}", end["phase"], end["outcome"]);
    let replied =
        end["outcome"] == "REPLIED" && end["body"].as_str().is_some_and(|b| b.contains(needle));
    if !replied {
        collect(lead, gid, needle, secs).await;
    }
}

/// The solo gateway's two lead tokens (`solo_config`'s primary and architect).
pub const SOLO_LEAD_TOKEN: &str = "lead-token-0123456789abcdef";
pub const SOLO_ARCHITECT_TOKEN: &str = "architect-token-0123456789abcdef";

/// One running single-host gateway on the herdr double, its members played from outside.
pub struct Solo {
    pub dir: Dir,
    pub herdr: Panes,
    pub fleetd: Proc,
    pub members: Played,
}

/// Starts `solo_config` (tokens `SOLO_*_TOKEN`) in a fresh `Dir::new(tag)`, with a gateway key
/// from `seed`, and plays its members.
pub async fn start_solo(tag: &str, seed: u8) -> Solo {
    let dir = Dir::new(tag);
    let herdr = Panes::start_double(&dir.0).await;
    let port = free_port();
    let state = dir.0.join("state");
    std::fs::create_dir_all(&state).unwrap_or_else(|e| panic!("{e}"));
    let mkey = fleetd::daemon::member_key(&write_key(&state.join("gateway.key"), seed));
    let lead_pane = herdr.add_lead_pane("lead").await;
    let architect_pane = herdr.add_lead_pane("archie").await;
    let config = solo_config(
        &dir,
        port,
        &herdr.path(),
        (&lead_pane, &architect_pane),
        (SOLO_LEAD_TOKEN, SOLO_ARCHITECT_TOKEN),
    );
    let fleetd = Proc::start(&dir.0, "solo", port, &config)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let members = play_members(herdr.clone(), &fleetd.url, mkey, &state);
    Solo {
        dir,
        herdr,
        fleetd,
        members,
    }
}
