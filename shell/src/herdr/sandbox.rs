//! The member sandbox: what `bwrap` (bubblewrap) is told so that a member — an agent with a
//! shell, possibly talked into attacking its host — sees its own worktree, its own home and the
//! system read-only, and never the daemon's state, config, keys, home, runtime dir, herdr's
//! real socket, other members' files, or (in its own PID namespace) the daemon's process.
//!
//! Pure: the arguments are planned here and tested without running anything; `probe` is the
//! one function that runs `bwrap`, once at start, to learn whether this host can sandbox.
//!
//! The mount order is the policy: the root read-only first, then every hidden path masked (an
//! empty tmpfs over a directory, `/dev/null` over a file), then what the member may use bound
//! back on top — its member directory read-only, its home and config dir writable, its cwd or
//! worktree writable, and of its repository's git directory only what a commit writes.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a member's network namespace holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// The host's network (a model API endpoint is needed): this gateway is reachable at its
    /// `public_url` as from any local process.
    #[default]
    Host,
    /// Loopback only. This gateway stays reachable: a relay inside the sandbox listens on
    /// `127.0.0.1:<public_url's port>` and carries each connection to the gateway's member
    /// socket, bound in read-only.
    None,
}

/// Where the sandbox puts the relay's pieces, inside.
pub const RELAY_BIN: &str = "/run/fleetd/fleetd";
pub const RELAY_SOCKET: &str = "/run/fleetd/gateway.sock";

/// One word of the launch script: a literal, or a variable of the pane's own environment that
/// is only known when herdr starts it (`HERDR_BIN_PATH`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Word {
    Lit(String),
    /// `"${NAME:-<fallback>}"`.
    Var(&'static str, &'static str),
}

impl Word {
    fn lit(s: impl AsRef<str>) -> Word {
        Word::Lit(s.as_ref().to_string())
    }

    fn path(p: &Path) -> Word {
        Word::Lit(p.to_string_lossy().into_owned())
    }

    /// The word as `sh` reads it back exactly.
    pub fn render(&self) -> String {
        match self {
            Word::Lit(s) => quote(s),
            Word::Var(name, fallback) => format!("\"${{{name}:-{fallback}}}\""),
        }
    }
}

/// `s` single-quoted for `sh`: every byte literal, `'` written as `'\''`.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// This host's sandbox: found and working, or why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Availability {
    Ready,
    /// Switched off by the operator (`herdr.sandbox = "off"`).
    Off,
    /// Wanted but not possible here (no `bwrap`, or it cannot make namespaces).
    Unavailable(String),
}

/// The host-wide sandbox settings, from the config and the daemon's own paths.
#[derive(Clone, Debug)]
pub struct SandboxConfig {
    pub bwrap: PathBuf,
    pub availability: Availability,
    /// Paths no member may see (state dir, config file, key file, the daemon's home and
    /// runtime dir, herdr's socket directory, the members' and worktrees' roots).
    pub hide: Vec<PathBuf>,
    /// fleetd's own binary: the relay of a `network = "none"` member, the scope of a host one.
    pub relay_bin: Option<PathBuf>,
    /// The gateway's member socket (the north face on a Unix socket), for the relay.
    pub gateway_socket: Option<PathBuf>,
}

impl SandboxConfig {
    pub fn off() -> Self {
        SandboxConfig {
            bwrap: PathBuf::from("bwrap"),
            availability: Availability::Off,
            hide: Vec::new(),
            relay_bin: None,
            gateway_socket: None,
        }
    }

    pub fn ready(&self) -> bool {
        self.availability == Availability::Ready
    }
}

/// Finds `bwrap` (a path, or a name looked up on `PATH`) and checks, by running it once, that it
/// can make the namespaces a member needs here (a container may forbid them).
pub fn probe(bwrap: &Path, timeout: Duration) -> Result<PathBuf, String> {
    let found = if bwrap.components().count() > 1 {
        bwrap.is_file().then(|| bwrap.to_path_buf())
    } else {
        std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(bwrap))
                .find(|c| c.is_file())
        })
    };
    let Some(path) = found else {
        return Err(format!(
            "{} not found (install bubblewrap: apt-get install bubblewrap)",
            bwrap.display()
        ));
    };
    let mut child = std::process::Command::new(&path)
        .args([
            "--ro-bind",
            "/",
            "/",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--cap-drop",
            "ALL",
            "--",
            "true",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    // Counted in steps, not read off a clock (the daemon's clock is an input elsewhere).
    let step = Duration::from_millis(10);
    let mut left = timeout.as_millis() / step.as_millis();
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(path),
            Ok(Some(status)) => {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut err);
                }
                return Err(format!(
                    "{} cannot make a sandbox here ({status}): {}",
                    path.display(),
                    err.trim()
                ));
            }
            Ok(None) if left > 0 => {
                left -= 1;
                std::thread::sleep(step)
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{} did not end within {timeout:?}", path.display()));
            }
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
    }
}

/// What one member's sandbox holds.
#[derive(Clone, Debug)]
pub struct Room {
    /// The member's own directory (its MCP config, charter, filtered herdr socket): read-only.
    pub member_dir: PathBuf,
    /// Its home (`HOME`), writable, made before the pane starts.
    pub home: PathBuf,
    /// Further writable directories of its own (claude-code's config dir).
    pub own: Vec<PathBuf>,
    /// Its working directory (a worktree or a `cwd`), writable.
    pub cwd: Option<PathBuf>,
    /// Its worktree's git directory, if it has one: what a commit writes there.
    pub git: Option<GitRoom>,
    pub network: Network,
    /// The profile's `sandbox_paths`: shown read-only over whatever hides them.
    pub shown: Vec<PathBuf>,
    /// The gateway's port as the member's URL names it (the relay listens there).
    pub gateway_port: u16,
}

/// Of a repository's common git directory, what a member's commits on `fleet/<gid>` write; the
/// rest (config, hooks, other branches, packed refs) stays read-only, so nothing a member
/// writes there runs when the operator next uses the repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GitRoom {
    pub common_dir: PathBuf,
    /// The worktree's own git directory (index, HEAD): writable, but its links back to the
    /// repository (`commondir`, `gitdir`) are pinned read-only.
    pub admin_dir: PathBuf,
    /// A clone cache the repository borrows objects from: readable, never writable.
    pub borrowed: Option<PathBuf>,
}

impl GitRoom {
    /// The directories the member writes. Made by the daemon before the pane starts (bwrap
    /// binds only what exists).
    pub fn writable(&self) -> Vec<PathBuf> {
        vec![
            self.common_dir.join("objects"),
            self.admin_dir.clone(),
            self.common_dir.join("refs").join("heads").join("fleet"),
            self.common_dir
                .join("logs")
                .join("refs")
                .join("heads")
                .join("fleet"),
        ]
    }

    /// Files pinned read-only inside what is writable: the links git follows from the
    /// worktree to its repository, which the daemon reads back when it removes the worktree.
    fn pinned(&self, worktree: Option<&Path>) -> Vec<PathBuf> {
        let mut p = vec![
            self.admin_dir.join("commondir"),
            self.admin_dir.join("gitdir"),
        ];
        p.extend(worktree.map(|w| w.join(".git")));
        p
    }
}

/// Directories the sandbox empties whatever the config says.
const EMPTIED: &[&str] = &["/tmp", "/var/tmp", "/run", "/home", "/root", "/dev/shm"];

/// Where `program` (its first word, looked up on `path_var` like `sh` would) lives, when that is
/// a place `room`'s sandbox hides and nothing shows again: the member would fail to start,
/// unseen, in its pane. Returns the program's path and what hides it.
pub fn hidden_program(
    cfg: &SandboxConfig,
    room: &Room,
    program: &[String],
    path_var: Option<&str>,
) -> Option<(PathBuf, PathBuf)> {
    let first = program.first()?;
    let resolved = if first.contains('/') {
        PathBuf::from(first)
    } else {
        path_var?
            .split(':')
            .filter(|d| !d.is_empty())
            .map(|d| Path::new(d).join(first))
            .find(|p| p.is_file())?
    };
    let resolved = std::fs::canonicalize(&resolved).unwrap_or(resolved);
    let shown = room
        .shown
        .iter()
        .chain([&room.member_dir, &room.home])
        .chain(room.cwd.iter())
        .any(|s| resolved.starts_with(s));
    if shown {
        return None;
    }
    EMPTIED
        .iter()
        .map(PathBuf::from)
        .chain(cfg.hide.iter().cloned())
        .find(|h| resolved.starts_with(h))
        .map(|h| (resolved, h))
}

/// Why `cwd` (a spawn's own directory, asked by a lead or a peer) may not be a sandboxed
/// member's writable room, if it may not: `/`, an emptied root (`/home`, `/tmp`, …) or a hidden
/// path itself (what they hold inside a cwd is hidden again), or a place inside a hidden path
/// other than `home` (a project under the daemon's home is fine; its state dir, keys and
/// sockets are not).
pub fn unfit_cwd(cfg: &SandboxConfig, cwd: &Path, home: Option<&Path>) -> Option<String> {
    let cwd = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    if cwd == Path::new("/") {
        return Some("/ would make the whole host writable".into());
    }
    // `~/.ssh`, `~/.config/systemd/user`, a repository's `.git`, an agent's `.claude`: what a
    // program outside the sandbox reads and runs (keys, units, hooks) is kept in such places.
    let hidden = cwd.components().find_map(|c| match c {
        std::path::Component::Normal(n) => n.to_str().filter(|n| n.starts_with('.')),
        _ => None,
    });
    if let Some(dir) = hidden {
        return Some(format!(
            "{} is inside a hidden directory ({dir}): a member could write the keys, hooks or configs kept there",
            cwd.display()
        ));
    }
    for root in EMPTIED.iter().map(Path::new) {
        if canon(root) == cwd {
            return Some(format!(
                "{} holds what the sandbox empties ({})",
                cwd.display(),
                root.display()
            ));
        }
    }
    let home = home.map(canon);
    for h in cfg.hide.iter().map(|h| canon(h)) {
        if h == cwd {
            return Some(format!("{} is hidden from members", cwd.display()));
        }
        if cwd.starts_with(&h) && home.as_ref() != Some(&h) {
            return Some(format!(
                "{} is inside {}, hidden from members",
                cwd.display(),
                h.display()
            ));
        }
    }
    None
}

/// `dir`'s hidden directories, and its `.git` whatever it is, in name order.
fn hidden_entries(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            let dir = e.file_type().is_ok_and(|t| t.is_dir());
            name == ".git" || (name.starts_with('.') && dir)
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// The `bwrap … --` words that put `room`'s member in its sandbox, and the program words that
/// follow (the relay's, for a `network = "none"` member, then the member's own).
pub fn wrap(cfg: &SandboxConfig, room: &Room, program: &[String]) -> Vec<Word> {
    let mut w: Vec<Word> = vec![Word::path(&cfg.bwrap)];
    let mut opt = |words: &[&str]| w.extend(words.iter().map(Word::lit));
    opt(&[
        "--die-with-parent",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--cap-drop",
        "ALL",
    ]);
    if room.network == Network::None {
        opt(&["--unshare-net"]);
    }
    opt(&["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]);
    mounts(cfg, room, &mut w);
    entry(cfg, room, &mut w);
    w.extend(program.iter().map(Word::lit));
    w
}

/// Hides a path: an empty tmpfs over a directory, `/dev/null` over a file.
fn mask(w: &mut Vec<Word>, h: &Path) {
    if h.is_dir() {
        w.extend([Word::lit("--tmpfs"), Word::path(h)]);
    } else if h.exists() {
        w.extend([
            Word::lit("--ro-bind"),
            Word::lit("/dev/null"),
            Word::path(h),
        ]);
    }
}

/// Binds `p` to itself, `how` (`--bind`, `--ro-bind`, `--ro-bind-try`).
fn bind(w: &mut Vec<Word>, how: &str, p: &Path) {
    w.extend([Word::lit(how), Word::path(p), Word::path(p)]);
}

/// What the member sees of the file system: shared places emptied, hidden paths masked, the
/// repository, the cwd and the member's own bound back in that order, so nothing later is
/// covered by something earlier.
fn mounts(cfg: &SandboxConfig, room: &Room, w: &mut Vec<Word>) {
    // Shared scratch and per-user places, emptied: other users' homes, the runtime dirs (D-Bus,
    // agent sockets), anything left in /tmp.
    for dir in EMPTIED {
        if Path::new(dir).is_dir() {
            w.extend([Word::lit("--tmpfs"), Word::lit(dir)]);
        }
    }
    for h in &cfg.hide {
        mask(w, h);
    }
    let mut shared: Vec<&Path> = Vec::new();
    if let Some(g) = &room.git {
        bind(w, "--ro-bind", &g.common_dir);
        shared.push(&g.common_dir);
        if let Some(b) = &g.borrowed {
            bind(w, "--ro-bind", b);
            shared.push(b);
        }
    }
    if let Some(c) = &room.cwd {
        bind(w, "--bind", c);
        shared.push(c);
    }
    // The cwd's own hidden directories (a repository's `.git` with its hooks and config, an
    // agent's settings, CI workflows) and a `.git` file stay read-only: what is run from
    // them later runs outside the sandbox.
    let pinned_hidden: Vec<PathBuf> = room
        .cwd
        .as_deref()
        .filter(|_| room.git.is_none())
        .map(hidden_entries)
        .unwrap_or_default();
    // A hidden path inside what was bound back (a state dir under the cwd) is hidden again,
    // and so is an emptied root.
    for h in EMPTIED
        .iter()
        .map(PathBuf::from)
        .chain(cfg.hide.iter().cloned())
    {
        if shared.iter().any(|s| h.starts_with(s) && h.as_path() != *s) {
            mask(w, &h);
        }
    }
    if let Some(g) = &room.git {
        for d in g.writable() {
            bind(w, "--bind", &d);
        }
        for f in g.pinned(room.cwd.as_deref()) {
            bind(w, "--ro-bind-try", &f);
        }
    }
    for p in &pinned_hidden {
        bind(w, "--ro-bind", p);
    }
    for p in &room.shown {
        bind(w, "--ro-bind-try", p);
    }
    // The member's own, last: nothing above covers them.
    bind(w, "--ro-bind", &room.member_dir);
    bind(w, "--bind", &room.home);
    for d in &room.own {
        bind(w, "--bind", d);
    }
    // `/etc/resolv.conf` may point into `/run` (systemd-resolved), emptied above.
    if room.network == Network::Host {
        if let Ok(real) = std::fs::canonicalize("/etc/resolv.conf") {
            if real.starts_with("/run") {
                bind(w, "--ro-bind-try", &real);
            }
        }
    }
}

/// The binaries a member's command runs through (herdr's for status reports, fleetd's as the
/// relay or the scope), the working directory, and the command's prefix.
fn entry(cfg: &SandboxConfig, room: &Room, w: &mut Vec<Word>) {
    // herdr's own binary (`"$HERDR_BIN_PATH" pane report-agent …`), wherever it lives.
    w.extend([
        Word::lit("--ro-bind-try"),
        Word::Var("HERDR_BIN_PATH", "/nonexistent"),
        Word::Var("HERDR_BIN_PATH", "/nonexistent"),
    ]);
    // fleetd's own binary, inside: the relay of an offline member, the scope of a host one.
    if let Some(bin) = &cfg.relay_bin {
        w.extend([
            Word::lit("--ro-bind"),
            Word::path(bin),
            Word::lit(RELAY_BIN),
        ]);
    }
    let relay = match (room.network, &cfg.relay_bin, &cfg.gateway_socket) {
        (Network::None, Some(_), Some(sock)) => {
            w.extend([
                Word::lit("--ro-bind"),
                Word::path(sock),
                Word::lit(RELAY_SOCKET),
            ]);
            true
        }
        _ => false,
    };
    let chdir = room.cwd.as_deref().unwrap_or(&room.home);
    w.extend([Word::lit("--chdir"), Word::path(chdir), Word::lit("--")]);
    if relay {
        w.extend([
            Word::lit(RELAY_BIN),
            Word::lit("member-relay"),
            Word::lit("--listen"),
            Word::lit(format!("127.0.0.1:{}", room.gateway_port)),
            Word::lit("--to"),
            Word::lit(RELAY_SOCKET),
            Word::lit("--"),
        ]);
    }
    // A host-network member shares the host's abstract Unix sockets (X11, D-Bus), which no
    // mount hides: a Landlock scope does (`fleetd::scope`).
    if room.network == Network::Host && cfg.relay_bin.is_some() {
        w.extend([
            Word::lit(RELAY_BIN),
            Word::lit("member-scope"),
            Word::lit("--"),
        ]);
    }
}

#[cfg(test)]
mod tests;
