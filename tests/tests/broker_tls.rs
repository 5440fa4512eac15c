//! fleetd over `amqps://` with per-gateway broker logins, against the local RabbitMQ: the test
//! makes a CA and a server certificate (openssl), has RabbitMQ open a TLS listener on a free
//! port at runtime (no restart, no config file touched), and gives each gateway its own broker
//! user whose permissions cover its namespace only. Two `fleetd` processes delegate across
//! it; a gateway trusting another CA never connects, and says why.

use fleet_tests::conformance::amqp_side::rabbitmqctl;
use fleet_tests::fleetd_proc::{
    eventually, free_port, logs, start_host_edited, Dir, Host, Mcp, Rest,
};
use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// `openssl` with `args` in `dir`; panics with its output on failure.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("openssl (needed to make the test's certificates): {e}"));
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for localhost signed by it, and a second, unrelated CA.
fn certificates(dir: &Path) {
    let days = ["-days", "2"];
    openssl(
        dir,
        &[
            &[
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
            ][..],
            &["-out", "ca.pem", "-subj", "/CN=fleetd test CA"],
            &days,
        ]
        .concat(),
    );
    openssl(
        dir,
        &[
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "other.key",
            ][..],
            &["-out", "other.pem", "-subj", "/CN=another CA"],
            &days,
        ]
        .concat(),
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    std::fs::write(
        dir.join("san.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    openssl(
        dir,
        &[
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
            ][..],
            &[
                "-CAcreateserial",
                "-out",
                "server.pem",
                "-extfile",
                "san.cnf",
            ],
            &days,
        ]
        .concat(),
    );
    // RabbitMQ runs as its own user: it must be able to read them.
    for f in ["ca.pem", "server.pem", "server.key"] {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir.join(f), std::fs::Permissions::from_mode(0o644));
    }
}

/// The TLS listener, open while this lives.
struct Listener(u16);

impl Listener {
    async fn open(dir: &Path) -> Listener {
        let port = free_port();
        let p = |f: &str| dir.join(f).display().to_string();
        let expr = format!(
            "rabbit_networking:start_ssl_listener({port}, [{{cacertfile, \"{}\"}}, \
             {{certfile, \"{}\"}}, {{keyfile, \"{}\"}}, {{verify, verify_none}}, \
             {{fail_if_no_peer_cert, false}}], 1, 1).",
            p("ca.pem"),
            p("server.pem"),
            p("server.key")
        );
        let r = rabbitmqctl(&["eval", &expr])
            .await
            .unwrap_or_else(|e| panic!("opening a TLS listener: {e}"));
        assert!(r.trim() == "ok", "opening a TLS listener: {r}");
        Listener(port)
    }

    async fn close(self) {
        let expr = format!("rabbit_networking:stop_tcp_listener({}).", self.0);
        if let Err(e) = rabbitmqctl(&["eval", &expr]).await {
            eprintln!("closing the TLS listener: {e}");
        }
    }
}

/// A broker user for one gateway, allowed only the objects of namespace `ns`.
async fn user(name: &str, password: &str, ns: &str) {
    let _ = rabbitmqctl(&["delete_user", name]).await;
    rabbitmqctl(&["add_user", name, password])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let only = format!("^{ns}\\.");
    rabbitmqctl(&["set_permissions", "-p", "/", name, &only, &only, &only])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

fn tls_broker(config: String, uri: &str, ca: &Path) -> String {
    let plain = config
        .lines()
        .find(|l| l.starts_with("uri = "))
        .map(str::to_string)
        .unwrap_or_default();
    config.replace(
        &plain,
        &format!("uri = \"{uri}\"\nca_file = \"{}\"", ca.display()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateways_delegate_over_amqps_with_their_own_logins_and_refuse_an_unknown_ca() {
    let dir = Dir::new("tls");
    let certs = dir.0.join("certs");
    std::fs::create_dir_all(&certs).unwrap_or_else(|e| panic!("{e}"));
    certificates(&certs);
    let listener = Listener::open(&certs).await;
    let ns = format!("tls{}", std::process::id());
    let mut hosts: Vec<Host> = Vec::new();
    let mut users = Vec::new();
    for i in 0..2 {
        let name = format!("{ns}-gw{i}");
        let password = format!("pw-{i}-{}", std::process::id());
        user(&name, &password, &ns).await;
        let uri = format!("amqps://{name}:{password}@localhost:{}/%2f", listener.0);
        let ca = certs.join("ca.pem");
        hosts.push(start_host_edited(&dir, &ns, i, |c| tls_broker(c, &uri, &ca)).await);
        users.push(name);
    }
    for h in &hosts {
        let rest = Rest::new(&h.proc.url, Some(&h.token));
        eventually(&format!("{} connected over TLS", h.name), 30, || async {
            let (_, v) = rest.get("/healthz").await;
            v["broker"]["connected"] == true
        })
        .await;
    }

    // U4 + U1 across the TLS listener, each gateway under its own login.
    let alpha = Mcp::connect(&hosts[0].proc.url, Some(&hosts[0].token))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eventually("alpha hears beta's heartbeat", 30, || async {
        let (_, l) = alpha.call("fleet_list", json!({})).await;
        l["rows"].as_array().is_some_and(|r| {
            r.iter()
                .any(|r| r["host"] == "beta" && r["kind"] == "gateway")
        })
    })
    .await;
    let (ok, s) = alpha
        .call("fleet_spawn", json!({"profile": "echo", "host": "beta"}))
        .await;
    assert!(ok, "{s}\n{}", logs(&hosts));
    let gid = s["gid"].as_str().unwrap_or_default().to_string();
    let (ok, out) = alpha
        .call(
            "fleet_send",
            json!({"sessionId": gid, "message": "over tls", "timeoutMs": 60000}),
        )
        .await;
    assert!(ok, "{out}\n{}", logs(&hosts));
    assert_eq!(out["outcome"], "REPLIED", "{out}\n{}", logs(&hosts));
    let conns = rabbitmqctl(&["list_connections", "user", "ssl"])
        .await
        .unwrap_or_default();
    for u in &users {
        assert!(
            conns
                .lines()
                .any(|l| l.starts_with(u.as_str()) && l.contains("true")),
            "{u} has no TLS connection:\n{conns}"
        );
    }
    alpha.close().await;

    // A gateway that trusts another CA never connects, and says why.
    let other = certs.join("other.pem");
    hosts[0]
        .proc
        .term(Duration::from_secs(20))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let path = hosts[0].proc.config.clone();
    let config = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
    let ca = certs.join("ca.pem").display().to_string();
    std::fs::write(&path, config.replace(&ca, &other.display().to_string()))
        .unwrap_or_else(|e| panic!("{e}"));
    let h = &mut hosts[0];
    h.proc
        .restart(&dir.0.join(h.name), h.port)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let rest = Rest::new(&h.proc.url, Some(&h.token));
    let mut v = serde_json::Value::Null;
    for _ in 0..100 {
        (_, v) = rest.get("/healthz").await;
        if v["broker"]["lastError"].is_string() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(v["broker"]["connected"], false, "{v}");
    let why = v["broker"]["lastError"]
        .as_str()
        .unwrap_or_default()
        .to_lowercase();
    assert!(
        why.contains("certificate"),
        "the refusal names the certificate: {v}"
    );

    for h in &mut hosts {
        let _ = h.proc.term(Duration::from_secs(20)).await;
    }
    listener.close().await;
    for u in &users {
        let _ = rabbitmqctl(&["delete_user", u]).await;
    }
    fleet_tests::gateways::delete_namespace(&ns, &["alpha", "beta"], &["lead-alpha", "lead-beta"])
        .await;
}
