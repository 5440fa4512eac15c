//! The north faces' cost, on a real `fleetd` process (single host, no broker, the herdr double):
//!
//! 1. **mcp**: `fleet_status` calls/s through rmcp's client (JSON-RPC over HTTP, the caller
//!    resolved per request, one trip through the driver loop), with `--clients` in parallel.
//!    The same call as a bare JSON-RPC POST separates the server's cost from the client's.
//! 2. **rest**: `GET /sessions/{id}/status`, the same call over REST.
//! 3. **delegate**: blocking `fleet_send` round trips/s to members that reply at once (spawn,
//!    inject, reply, outcome); bounded by the status poll (`poll_interval_ms`, 20 ms here).
//!
//! Also the process's resident memory before and after. Needs the release `fleetd` binary:
//! `cargo build --release -p fleetd && cargo bench -p fleet-tests --bench faces
//! [-- --secs S --clients C --members M]`.

use fleet_tests::fleetd_proc::{free_port, play_members, write_key, Dir, Mcp, Proc, Rest};
use fleet_tests::herdr_double::HerdrDouble;
use fleet_tests::panes::Panes;
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

const TOKEN: &str = "bench-lead-token-0123456789";

struct Args {
    secs: u64,
    clients: usize,
    members: usize,
}

fn args() -> Args {
    let mut a = Args {
        secs: 5,
        clients: 8,
        members: 4,
    };
    let argv: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < argv.len() {
        let v = argv.get(i + 1).and_then(|v| v.parse::<u64>().ok());
        match (argv[i].as_str(), v) {
            ("--secs", Some(v)) => a.secs = v,
            ("--clients", Some(v)) => a.clients = v as usize,
            ("--members", Some(v)) => a.members = v as usize,
            ("--bench", _) => {
                i += 1;
                continue;
            }
            (other, _) => {
                eprintln!("unknown or incomplete argument {other:?}; see the file's doc comment");
                std::process::exit(2);
            }
        }
        i += 2;
    }
    a
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// Runs `clients` loops of `one` for `secs`; calls per second.
async fn rate<F, Fut>(secs: u64, clients: usize, one: F) -> f64
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let done = Arc::new(AtomicU64::new(0));
    let one = Arc::new(one);
    let until = Instant::now() + Duration::from_secs(secs);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (done, one) = (done.clone(), one.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < until {
                if one(c).await {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = args();
    let dir = Dir::new("bench-faces");
    let herdr = Arc::new(
        HerdrDouble::start(&dir.0)
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let state = dir.0.join("state");
    std::fs::create_dir_all(&state).unwrap_or_else(|e| panic!("{e}"));
    let secret = write_key(&state.join("gateway.key"), 7);
    let port = free_port();
    let config = format!(
        r#"
[gateway]
host = "bench"
listen = "127.0.0.1:{port}"
state_dir = "{state}"
[log]
level = "warn"
[[leads]]
name = "lead"
token = "{TOKEN}"
[herdr]
socket = "{socket}"
[profiles.echo]
kind = "command"
argv = ["cat"]
[core]
poll_interval_ms = 20
"#,
        state = state.display(),
        socket = herdr.path.display(),
    );
    let proc = Proc::start(&dir.0, "bench", port, &config)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let pid = proc.pid();
    let _members = play_members(
        Panes::Double(herdr.clone()),
        &proc.url,
        fleetd::daemon::member_key(&secret),
        &state,
    );
    let lead = Mcp::connect(&proc.url, Some(TOKEN))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut gids = Vec::new();
    for _ in 0..a.members {
        let (ok, s) = lead.call("fleet_spawn", json!({"profile": "echo"})).await;
        assert!(ok, "{s}");
        gids.push(s["gid"].as_str().unwrap_or_default().to_string());
    }
    let rss0 = rss_kib(pid);
    println!(
        "fleetd (single host, herdr double): {} s per phase, {} clients, {} members; RSS {} KiB",
        a.secs, a.clients, a.members, rss0
    );

    let mut leads = Vec::new();
    for _ in 0..a.clients {
        leads.push(Arc::new(
            Mcp::connect(&proc.url, Some(TOKEN))
                .await
                .unwrap_or_else(|e| panic!("{e}")),
        ));
    }
    let (l, g) = (Arc::new(leads), Arc::new(gids.clone()));
    let r = rate(a.secs, a.clients, move |c| {
        let (l, g) = (l.clone(), g.clone());
        async move {
            let (ok, _) = l[c]
                .call("fleet_status", json!({"sessionId": g[c % g.len()]}))
                .await;
            ok
        }
    })
    .await;
    println!("mcp   fleet_status          {r:>9.0} calls/s (rmcp's client)");

    // The same tool call as a bare JSON-RPC POST: what the server costs without rmcp's client.
    let http = reqwest::Client::new();
    let (url, g) = (format!("{}/mcp", proc.url), Arc::new(gids.clone()));
    let r = rate(a.secs, a.clients, move |c| {
        let (http, url, g) = (http.clone(), url.clone(), g.clone());
        async move {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "fleet_status", "arguments": {"sessionId": g[c % g.len()]}}});
            let r = http
                .post(&url)
                .bearer_auth(TOKEN)
                .header("accept", "application/json, text/event-stream")
                .json(&body)
                .send()
                .await;
            match r {
                Ok(r) if r.status().is_success() => {
                    r.text().await.is_ok_and(|t| t.contains("result"))
                }
                _ => false,
            }
        }
    })
    .await;
    println!("mcp   fleet_status          {r:>9.0} calls/s (bare JSON-RPC POST)");

    let rest = Rest::new(&proc.url, Some(TOKEN));
    let g = Arc::new(gids.clone());
    let r = rate(a.secs, a.clients, move |c| {
        let (rest, g) = (rest.clone(), g.clone());
        async move {
            let (code, _) = rest
                .get(&format!("/sessions/{}/status", g[c % g.len()]))
                .await;
            code == 200
        }
    })
    .await;
    println!("rest  GET …/status          {r:>9.0} calls/s");

    let rest = Rest::new(&proc.url, Some(TOKEN));
    let g = Arc::new(gids.clone());
    let r = rate(a.secs, a.members, move |c| {
        let (rest, g) = (rest.clone(), g.clone());
        async move {
            let (code, v) = rest
                .post(
                    &format!("/sessions/{}/message", g[c]),
                    json!({"message": format!("bench brief from client {c}")}),
                )
                .await;
            code == 200 && v["outcome"] == "REPLIED"
        }
    })
    .await;
    println!("rest  delegate (REPLIED)    {r:>9.1} round trips/s");
    println!("RSS after: {} KiB (before: {rss0} KiB)", rss_kib(pid));
    lead.close().await;
}
