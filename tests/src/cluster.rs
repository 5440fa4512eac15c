//! A three-node RabbitMQ cluster for a test: `scripts/cluster/rabbit-cluster.sh` adds
//! rabbit2@localhost (5673) and rabbit3@localhost (5674) to the machine's node and takes them
//! out again when the `Cluster` is dropped, so the pre-started node is left as it was found.

use std::path::PathBuf;
use std::process::Command;

/// The script, from the workspace root.
pub fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("scripts/cluster/rabbit-cluster.sh")
}

/// The AMQP URI of a cluster node by its port (5672, 5673, 5674).
pub fn node_uri(port: u16) -> String {
    format!("amqp://guest:guest@127.0.0.1:{port}/%2f")
}

/// The cluster's nodes as a gateway lists them: rabbit2 first (it takes the connections and,
/// by client-local placement, leads the queues they declare), then rabbit3, then the
/// machine's node.
pub fn cluster_uris() -> Vec<String> {
    [5673, 5674, 5672].into_iter().map(node_uri).collect()
}

/// Why a cluster cannot be built here, if it cannot.
pub fn unavailable() -> Option<String> {
    let installed = [
        "/usr/sbin/rabbitmq-server",
        "/usr/lib/rabbitmq/bin/rabbitmq-server",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists())
        || Command::new("sh")
            .args(["-c", "command -v rabbitmq-server"])
            .output()
            .is_ok_and(|o| o.status.success());
    if !installed {
        return Some("rabbitmq-server is not installed".into());
    }
    // SAFETY: geteuid has no preconditions and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        return Some("building a cluster runs its nodes as the rabbitmq user: needs root".into());
    }
    None
}

fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new("bash").arg(script()).args(args).output();
    outcome(args, out)
}

/// The script's output, or why it failed.
fn outcome(args: &[&str], out: std::io::Result<std::process::Output>) -> Result<String, String> {
    let out = out.map_err(|e| format!("running {}: {e}", script().display()))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("rabbit-cluster.sh {}: {text}", args.join(" ")))
    }
}

/// `run` without holding up the runtime (starting a node takes seconds).
async fn run_async(args: &[&str]) -> Result<String, String> {
    let out = tokio::process::Command::new("bash")
        .arg(script())
        .args(args)
        .output()
        .await;
    outcome(args, out)
}

/// The cluster, up while this lives.
pub struct Cluster(());

impl Cluster {
    pub fn up() -> Result<Cluster, String> {
        // A cluster an earlier run left behind is taken down first.
        let _ = run(&["down"]);
        let guard = Cluster(());
        run(&["up"])?;
        Ok(guard)
    }

    /// `kill -9` a node's Erlang VM: `rabbit2` or `rabbit3`.
    pub async fn kill(&self, node: &str) -> Result<String, String> {
        run_async(&["kill", node]).await
    }

    /// Starts a killed node again; it rejoins the cluster by itself.
    pub async fn start(&self, node: &str) -> Result<String, String> {
        run_async(&["start", node]).await
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Err(e) = run(&["down"]) {
            eprintln!("taking the test cluster down: {e}");
        }
    }
}

/// Each queue's leader node, from `rabbitmqctl list_queues name leader` (quorum queues).
pub fn leaders() -> Result<Vec<(String, String)>, String> {
    let out = Command::new("rabbitmqctl")
        .args(["list_queues", "-q", "name", "leader", "--formatter", "json"])
        .output()
        .map_err(|e| format!("rabbitmqctl: {e}"))?;
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("rabbitmqctl list_queues: {e}"))?;
    Ok(v.as_array()
        .map(|qs| {
            qs.iter()
                .filter_map(|q| {
                    Some((
                        q["name"].as_str()?.to_string(),
                        q["leader"].as_str()?.to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default())
}
