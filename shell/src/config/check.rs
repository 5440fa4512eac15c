//! `Config::check`, by section: every problem in a config file, not just the first, each
//! named by its key.

use super::*;
use std::collections::{BTreeMap, BTreeSet};

/// What the `[[leads]]` seen so far took: each name, gid and token may be used once.
#[derive(Default)]
struct Seen {
    names: BTreeSet<String>,
    gids: BTreeSet<String>,
    tokens: BTreeMap<String, String>,
}

impl Config {
    /// Every problem, not just the first, in the order of the file's sections.
    pub fn check(&self) -> Vec<ConfigError> {
        let mut errs = Vec::new();
        self.check_gateway(&mut errs);
        self.check_placement(&mut errs);
        self.check_broker(&mut errs);
        self.check_peers(&mut errs);
        let mut seen = Seen::default();
        for (i, l) in self.leads.iter().enumerate() {
            self.check_lead(i, l, &mut seen, &mut errs);
        }
        self.check_herdr(&mut errs);
        self.check_profiles(&mut errs);
        self.check_notify(&mut errs);
        errs
    }

    /// `[[notify]]`: each sink's settings and the leads a rule names (the rule itself is the
    /// core's to judge, under `core`).
    fn check_notify(&self, errs: &mut Vec<ConfigError>) {
        for (i, n) in self.notify.iter().enumerate() {
            for (key, why) in n.problems() {
                errs.push(invalid(format!("notify[{i}].{key}"), why));
            }
            for l in &n.leads {
                if !self.leads.iter().any(|x| &x.name == l) {
                    errs.push(invalid(
                        format!("notify[{i}].leads"),
                        format!("no [[leads]] entry is named {l:?}"),
                    ));
                }
            }
        }
    }

    /// `[gateway]` and `[log]`.
    fn check_gateway(&self, errs: &mut Vec<ConfigError>) {
        let g = &self.gateway;
        if !launch::safe_gid(&g.host) {
            errs.push(invalid(
                "gateway.host",
                format!(
                    "{:?} must be a plain name (letters, digits, - and _)",
                    g.host
                ),
            ));
        }
        match g.listen.parse::<SocketAddr>() {
            Err(_) => errs.push(invalid(
                "gateway.listen",
                format!("{:?} is not an ip:port address", g.listen),
            )),
            Ok(a) if a.port() == 0 && g.public_url.is_none() => errs.push(invalid(
                "gateway.listen",
                "port 0 needs gateway.public_url: members must know where to reach /mcp",
            )),
            Ok(_) => {}
        }
        if g.allowed_hosts.is_empty() {
            errs.push(invalid(
                "gateway.allowed_hosts",
                "must name at least one host (an empty list would switch the DNS-rebinding guard off)",
            ));
        } else if let Some(host) = url_host(&self.mcp_url()) {
            if !crate::origin::host_allowed(&g.allowed_hosts, &host) {
                errs.push(invalid(
                    "gateway.allowed_hosts",
                    format!(
                        "members reach {} but {host:?} is not allowed: add it",
                        self.mcp_url()
                    ),
                ));
            }
        }
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log.level) {
            errs.push(invalid("log.level", format!("{:?}: {e}", self.log.level)));
        }
        if let Some(u) = &g.public_url {
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                errs.push(invalid("gateway.public_url", "must be an http(s) URL"));
            }
        }
        if g.shutdown_timeout_ms == 0 {
            errs.push(invalid(
                "gateway.shutdown_timeout_ms",
                "must be greater than zero",
            ));
        }
        if g.max_connections == 0 {
            errs.push(invalid(
                "gateway.max_connections",
                "must be greater than zero",
            ));
        }
        if g.header_read_timeout_ms == 0 {
            errs.push(invalid(
                "gateway.header_read_timeout_ms",
                "must be greater than zero",
            ));
        }
        if let Some(name) = &g.loopback_lead {
            if !self.leads.iter().any(|l| &l.name == name) {
                errs.push(invalid(
                    "gateway.loopback_lead",
                    format!("no [[leads]] entry is named {name:?}"),
                ));
            }
            if !self.profiles.is_empty() {
                errs.push(invalid(
                    "gateway.loopback_lead",
                    "trusts every local process, and members are local processes: it cannot be \
                     combined with [profiles] (give the lead a token instead)",
                ));
            }
        }
    }

    /// The core's knobs, placement and each profile's placement weight.
    fn check_placement(&self, errs: &mut Vec<ConfigError>) {
        if let Err(e) = self.core_config().validate() {
            errs.push(invalid("core", e.to_string()));
        }
        if let Some(d) = &self.placement.default_profile {
            if !self.profiles.contains_key(d) {
                errs.push(invalid(
                    "placement.default_profile",
                    format!(
                        "{d:?} is not one of [profiles] ({:?})",
                        self.profiles.keys().collect::<Vec<_>>()
                    ),
                ));
            }
        }
        for (name, p) in &self.profiles {
            if p.weight == Some(0) {
                errs.push(invalid(
                    format!("profiles.{name}.weight"),
                    "must be at least 1 (leave the profile out of placement with max_load instead)",
                ));
            }
            if p.credential.as_deref().is_some_and(|c| c.trim().is_empty()) {
                errs.push(invalid(
                    format!("profiles.{name}.credential"),
                    "must not be empty",
                ));
            }
        }
        if !self.core.profiles.is_empty() {
            errs.push(invalid(
                "core.profiles",
                "is filled from [profiles]; do not set it",
            ));
        }
    }

    /// `[broker]`, or peers without one.
    fn check_broker(&self, errs: &mut Vec<ConfigError>) {
        let g = &self.gateway;
        if let Some(b) = &self.broker {
            let amqp = |u: &str| u.starts_with("amqp://") || u.starts_with("amqps://");
            if b.uri_env.is_none() && b.uris.is_empty() && !amqp(&b.uri) {
                errs.push(invalid("broker.uri", "must start with amqp:// or amqps://"));
            }
            if !b.uris.is_empty() && b.uri != DEFAULT_BROKER_URI {
                errs.push(invalid(
                    "broker.uris",
                    "give uri (one node) or uris (a cluster), not both",
                ));
            }
            if b.uri_env.is_some() && !b.uris.is_empty() {
                errs.push(invalid(
                    "broker.uris",
                    "give uris or uri_env (comma-separated for a cluster), not both",
                ));
            }
            for (i, u) in b.uris.iter().enumerate() {
                if !amqp(u) {
                    errs.push(invalid(
                        format!("broker.uris[{i}]"),
                        "must start with amqp:// or amqps://",
                    ));
                }
            }
            if let Some(v) = &b.uri_env {
                match std::env::var(v) {
                    Ok(u) if split_uris(&u).iter().all(|u| amqp(u)) => {}
                    Ok(_) => errs.push(invalid(
                        "broker.uri_env",
                        format!("${v}: each URI must start with amqp:// or amqps://"),
                    )),
                    Err(_) => errs.push(invalid("broker.uri_env", format!("${v} is not set"))),
                }
            }
            let ns_ok = !b.namespace.is_empty()
                && b.namespace.len() <= 64
                && b.namespace
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !ns_ok {
                errs.push(invalid(
                    "broker.namespace",
                    "must be 1-64 letters, digits, - and _",
                ));
            }
            for (key, v) in [
                ("broker.connect_timeout_ms", b.connect_timeout_ms),
                ("broker.op_timeout_ms", b.op_timeout_ms),
                ("broker.backoff_min_ms", b.backoff_min_ms),
                ("broker.backoff_max_ms", b.backoff_max_ms),
            ] {
                if v == 0 {
                    errs.push(invalid(key, "must be greater than zero"));
                }
            }
            if let Some(f) = &b.ca_file {
                if !f.is_file() {
                    errs.push(invalid(
                        "broker.ca_file",
                        format!("{} is not a readable file", f.display()),
                    ));
                }
            }
            if let Some(list) = &b.control_allowlist {
                for (i, h) in list.iter().enumerate() {
                    if h != &g.host && !self.peers.contains_key(h) {
                        errs.push(invalid(
                            format!("broker.control_allowlist[{i}]"),
                            format!("{h:?} is neither this host nor a [peers] entry"),
                        ));
                    }
                }
            }
        } else if !self.peers.is_empty() {
            errs.push(invalid(
                "peers",
                "peers need a [broker] section (there is no other way to reach them)",
            ));
        }
    }

    /// `[peers]`: plain host names, not this host, public keys.
    fn check_peers(&self, errs: &mut Vec<ConfigError>) {
        let g = &self.gateway;
        for (host, key) in &self.peers {
            if !launch::safe_gid(host) {
                errs.push(invalid(format!("peers.{host}"), "not a plain host name"));
            }
            if host == &g.host {
                errs.push(invalid(
                    format!("peers.{host}"),
                    "is this gateway's own host",
                ));
            }
            if decode_key(key).is_none() {
                errs.push(invalid(
                    format!("peers.{host}"),
                    "must be a public key: 64 hex digits (`fleetd keygen` prints it)",
                ));
            }
        }
    }

    /// One `[[leads]]` entry.
    fn check_lead(&self, i: usize, l: &LeadSection, seen: &mut Seen, errs: &mut Vec<ConfigError>) {
        let at = format!("leads[{i}]");
        if !seen.names.insert(l.name.clone()) {
            errs.push(invalid(
                format!("{at}.name"),
                format!("{:?} is used twice", l.name),
            ));
        }
        check_lead_pane(&at, l, errs);
        let gid = l.gid();
        // An explicit gid or name must be a plain name; a pane id (herdr's `w1:p2`) is
        // allowed its own characters, but nothing that breaks a queue name.
        let pane_derived = l.gid.is_none() && l.pane.is_some();
        let ok = if pane_derived {
            !gid.is_empty()
                && gid.len() <= 128
                && gid
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_:.".contains(c))
        } else {
            launch::safe_gid(&gid)
        };
        if !ok {
            errs.push(invalid(
                format!("{at}.gid"),
                format!("{gid:?} must be a plain name (letters, digits, - and _)"),
            ));
        }
        if let Some(t) = l.token() {
            if let Some(other) = seen.tokens.insert(t, l.name.clone()) {
                errs.push(invalid(
                    format!("{at}.token"),
                    format!("the same token as lead {other:?}: each lead needs its own"),
                ));
            }
        }
        if !seen.gids.insert(gid.clone()) {
            errs.push(invalid(
                format!("{at}.gid"),
                format!("{gid:?} is used twice"),
            ));
        }
        match (&l.token, &l.token_env) {
            (Some(_), Some(_)) => errs.push(invalid(
                format!("{at}.token"),
                "set token or token_env, not both",
            )),
            (Some(t), None) if t.len() < 16 => errs.push(invalid(
                format!("{at}.token"),
                "must be at least 16 characters",
            )),
            (None, Some(v)) if std::env::var(v).map_or(true, |t| t.len() < 16) => {
                errs.push(invalid(
                    format!("{at}.token_env"),
                    format!("${v} must be set to at least 16 characters"),
                ))
            }
            (None, None) if self.gateway.loopback_lead.as_deref() != Some(l.name.as_str()) => errs
                .push(invalid(
                    format!("{at}.token"),
                    "a lead needs a token (or be the gateway's loopback_lead)",
                )),
            _ => {}
        }
    }

    /// `[herdr]`.
    fn check_herdr(&self, errs: &mut Vec<ConfigError>) {
        let h = &self.herdr;
        for (key, v) in [
            ("herdr.timeout_ms", h.timeout_ms),
            ("herdr.ready_timeout_ms", h.ready_timeout_ms),
            ("herdr.git_timeout_ms", h.git_timeout_ms),
            ("herdr.relist_ms", h.relist_ms),
            ("herdr.lead_check_ms", h.lead_check_ms),
            ("herdr.read_lines", u64::from(h.read_lines)),
        ] {
            if v == 0 {
                errs.push(invalid(key, "must be greater than zero"));
            }
        }
        for p in &h.git_protocols {
            let plain = !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase());
            if !plain || p == "ext" || p == "fd" {
                errs.push(invalid(
                    "herdr.git_protocols",
                    format!("{p:?} is not a transport fleetd lets git use (ext and fd run commands; names are lowercase, e.g. \"https\", \"ssh\")"),
                ));
            }
        }
        for url in &h.repo_allow {
            if url.contains("::") || url.trim().is_empty() {
                errs.push(invalid(
                    "herdr.repo_allow",
                    format!("{url:?} is not a repository URL or prefix"),
                ));
            }
        }
        if self.core.start_timeout_ms != fleet_core::CoreConfig::default().start_timeout_ms {
            errs.push(invalid(
                "core.start_timeout_ms",
                "is set from herdr.ready_timeout_ms; set that instead",
            ));
        }
        if h.ready_timeout_ms > self.core.spawn_ready_timeout_ms {
            errs.push(invalid(
                "herdr.ready_timeout_ms",
                format!(
                    "({}) exceeds core.spawn_ready_timeout_ms ({}): a spawn would be reaped before its agent's start gate could say why",
                    h.ready_timeout_ms, self.core.spawn_ready_timeout_ms
                ),
            ));
        }
    }

    /// Each `[profiles]` entry as a profile, and its model endpoint against the guard.
    fn check_profiles(&self, errs: &mut Vec<ConfigError>) {
        let h = &self.herdr;
        for (name, p) in &self.profiles {
            let at = format!("profiles.{name}");
            if let Err(e) = p.to_profile() {
                errs.push(invalid(at.clone(), e));
                continue;
            }
            if let (
                ProfileKind::ClaudeCode | ProfileKind::Codex | ProfileKind::Opencode,
                Some(url),
            ) = (p.kind, &p.base_url)
            {
                if !h.base_url_allow.iter().any(|a| a == url) {
                    errs.push(invalid(
                        format!("{at}.base_url"),
                        format!("{url:?} is not on herdr.base_url_allow (the subscription guard)"),
                    ));
                }
            }
        }
    }
}

/// A lead's pane: named by id or label (a label no member's), and what needs one — a launch
/// finds its pane by label, a heartbeat is typed there.
fn check_lead_pane(at: &str, l: &LeadSection, errs: &mut Vec<ConfigError>) {
    if l.pane.is_some() && l.pane_label.is_some() {
        errs.push(invalid(
            format!("{at}.pane_label"),
            "a lead's pane is named by its id (pane) or its label (pane_label), not both",
        ));
    }
    if l.pane_label
        .as_deref()
        .is_some_and(|p| p.trim().is_empty() || p.starts_with("fleet:"))
    {
        errs.push(invalid(
            format!("{at}.pane_label"),
            "must be a label that is not empty and not a member's (fleet:…)",
        ));
    }
    if let Some(launch) = &l.launch {
        if l.pane_label.is_none() {
            errs.push(invalid(
                format!("{at}.launch"),
                "needs pane_label: the launched pane is labelled with it, and found by it",
            ));
        }
        if let Some(why) = launch.invalid() {
            errs.push(invalid(format!("{at}.launch"), why));
        }
    }
    if let Some(hb) = &l.heartbeat {
        if l.pane.is_none() && l.pane_label.is_none() {
            errs.push(invalid(
                format!("{at}.heartbeat"),
                "needs the lead's pane (pane or pane_label): it is typed there",
            ));
        }
        if hb.idle_after_ms == 0 || hb.max_beats == 0 {
            errs.push(invalid(
                format!("{at}.heartbeat"),
                "idle_after_ms and max_beats must be greater than zero",
            ));
        }
    }
}
