//! A real herdr server for the tests, when `HERDR_BIN` names a herdr binary (0.8.x, protocol
//! 20): headless, isolated in its own directories, with update checks off (PROTOCOL.md,
//! "Running one for tests"). Each test starts its own.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::process::{Child, Command};

/// The binary named by `HERDR_BIN`, if any.
pub fn bin() -> Option<PathBuf> {
    std::env::var_os("HERDR_BIN")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// A running `herdr server`. Dropping it kills the server.
pub struct RealHerdr {
    pub path: PathBuf,
    root: PathBuf,
    bin: PathBuf,
    child: Child,
}

/// One request on its own connection, bounded.
pub async fn request(socket: &Path, method: &str, params: Value) -> Result<Value, String> {
    let go = async {
        let mut s = UnixStream::connect(socket)
            .await
            .map_err(|e| format!("{}: {e}", socket.display()))?;
        let line = json!({"id": "t", "method": method, "params": params}).to_string() + "\n";
        s.write_all(line.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut answer = String::new();
        BufReader::new(s)
            .read_line(&mut answer)
            .await
            .map_err(|e| e.to_string())?;
        serde_json::from_str::<Value>(&answer).map_err(|e| format!("{e}: {answer:?}"))
    };
    match tokio::time::timeout(Duration::from_secs(5), go).await {
        Ok(r) => r,
        Err(_) => Err(format!("{method}: no answer within 5 s")),
    }
}

impl RealHerdr {
    /// Starts `bin server` with everything under `root` (kept short: a Unix socket path has a
    /// 108-byte limit), waits for `ping`, and creates the workspace members go in.
    pub async fn start(bin: &Path, root: &Path) -> Result<RealHerdr, String> {
        let dirs = ["home", "config", "state", "runtime", "data", "cache"];
        for d in dirs {
            std::fs::create_dir_all(root.join(d)).map_err(|e| e.to_string())?;
        }
        let herdr_config = root.join("config").join("herdr");
        std::fs::create_dir_all(&herdr_config).map_err(|e| e.to_string())?;
        std::fs::write(
            herdr_config.join("config.toml"),
            "onboarding = false\n\n[update]\nversion_check = false\nmanifest_check = false\n",
        )
        .map_err(|e| e.to_string())?;
        let path = root.join("herdr.sock");
        let log = std::fs::File::create(root.join("server.log")).map_err(|e| e.to_string())?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new(bin)
            .arg("server")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", root.join("home"))
            .env("XDG_CONFIG_HOME", root.join("config"))
            .env("XDG_STATE_HOME", root.join("state"))
            .env("XDG_RUNTIME_DIR", root.join("runtime"))
            .env("XDG_DATA_HOME", root.join("data"))
            .env("XDG_CACHE_HOME", root.join("cache"))
            .env("HERDR_SOCKET_PATH", &path)
            .env("SHELL", "/bin/sh")
            .env("TERM", "xterm-256color")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting {} server: {e}", bin.display()))?;
        let h = RealHerdr {
            path,
            root: root.to_path_buf(),
            bin: bin.to_path_buf(),
            child,
        };
        h.wait_ready().await?;
        Ok(h)
    }

    async fn wait_ready(&self) -> Result<(), String> {
        let mut last = String::new();
        for _ in 0..100 {
            match request(&self.path, "ping", json!({})).await {
                Ok(v) if v.pointer("/result/type") == Some(&json!("pong")) => return Ok(()),
                Ok(v) => last = v.to_string(),
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!("herdr did not answer ping within 10 s: {last}"))
    }

    /// Makes the workspace members go in (herdr starts with none).
    pub async fn workspace(&self) -> Result<(), String> {
        let r = request(
            &self.path,
            "workspace.create",
            json!({"label": "fleet tests", "focus": false}),
        )
        .await?;
        match r.get("result") {
            Some(_) => Ok(()),
            None => Err(format!("workspace.create: {r}")),
        }
    }

    /// Stops the server (`server.stop`), bounded; kills it if it lingers.
    pub async fn stop(mut self) -> Result<(), String> {
        let _ = request(&self.path, "server.stop", json!({})).await;
        match tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await {
            Ok(_) => Ok(()),
            Err(_) => {
                let _ = self.child.kill().await;
                Err("herdr did not stop within 10 s; killed".into())
            }
        }
    }

    /// Stops and starts it again on the same directories: labels and pane ids come back,
    /// processes do not.
    pub async fn restart(self) -> Result<RealHerdr, String> {
        let (bin, root) = (self.bin.clone(), self.root.clone());
        self.stop().await?;
        RealHerdr::start(&bin, &root).await
    }
}
