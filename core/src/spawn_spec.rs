//! What a spawn asks for — the profile, the broadcast group, the worktree — as the north faces,
//! the SPAWN message body and the launcher output all carry it. Validation lives with the type,
//! so every path that accepts one checks it the same way.

use serde::{Deserialize, Serialize};

/// What a member is for (ch. 9's `MemberRole`), independent of the profile it runs on. The
/// roster shows it; an ARCHITECT member is authorised as an architect (it may delegate, never
/// spawn, stop or drain), a DEV or REVIEWER as a worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum MemberRole {
    Architect,
    #[default]
    Dev,
    Reviewer,
}

impl MemberRole {
    pub fn as_str(self) -> &'static str {
        match self {
            MemberRole::Architect => "ARCHITECT",
            MemberRole::Dev => "DEV",
            MemberRole::Reviewer => "REVIEWER",
        }
    }
}

/// What a spawn asks for: `fleet_spawn`'s arguments and the body of a SPAWN message.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnSpec {
    /// Empty: the target host's placement chooses (`[placement]`).
    #[serde(default)]
    pub profile: String,
    #[serde(default)]
    pub group: Option<String>,
    /// `DEV` when absent (and from a 1.0 requester, which never sends it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<MemberRole>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<Worktree>,
    /// The directory the member starts in, on its host (an absolute path); the profile's own
    /// when absent. Not with a worktree, which is its directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The work item the member is for (an issue key such as `CB-308`), shown in the roster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<String>,
}

/// The longest `cwd` a spawn may name.
pub const MAX_CWD_LEN: usize = 4096;
/// The longest `ticket` a spawn may name.
pub const MAX_TICKET_LEN: usize = 128;

/// Why `ticket` cannot label a member: it is shown in every roster, so one line of printable
/// text, at most `MAX_TICKET_LEN` characters.
pub fn invalid_ticket(ticket: &str) -> Option<String> {
    let ok = !ticket.trim().is_empty()
        && ticket.chars().count() <= MAX_TICKET_LEN
        && !ticket.chars().any(char::is_control);
    (!ok).then(|| {
        format!(
            "ticket {ticket:?} must be one line of printable text (at most {MAX_TICKET_LEN} characters)"
        )
    })
}

/// Why `cwd` cannot be a member's starting directory: an absolute path without control
/// characters (it reaches herdr's `pane.create` and the launcher as one argument).
pub fn invalid_cwd(cwd: &str) -> Option<String> {
    let ok = cwd.starts_with('/') && cwd.len() <= MAX_CWD_LEN && !cwd.chars().any(char::is_control);
    (!ok).then(|| {
        format!("cwd {cwd:?} must be an absolute path without control characters (at most {MAX_CWD_LEN} bytes)")
    })
}

/// The git worktree a spawned member works in (ch. 9's `GitWorktrees`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worktree {
    /// A repository on the target host (a path), or a URL any host can clone.
    pub repo: String,
    /// The exact commit (40 hex digits); required when the spawn crosses hosts, where a path
    /// or a branch name would mean something else.
    #[serde(default)]
    pub commit: Option<String>,
}

/// Why `group` cannot name a broadcast group: it becomes a routing key segment
/// (`broadcast.<group>`), so it is one word of letters, digits, `-` and `_` — never a
/// wildcard (`#` would bind every group) nor a dot (another level of the key).
pub fn invalid_group(group: &str) -> Option<String> {
    let word = !group.is_empty()
        && group.len() <= 64
        && group
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    (!word).then(|| {
        format!("group {group:?} is not one word of letters, digits, '-' and '_' (at most 64)")
    })
}

impl SpawnSpec {
    /// A spawn of `profile` with nothing else asked.
    pub fn of(profile: impl Into<String>) -> SpawnSpec {
        SpawnSpec {
            profile: profile.into(),
            ..SpawnSpec::default()
        }
    }

    pub fn group(mut self, group: impl Into<String>) -> SpawnSpec {
        self.group = Some(group.into());
        self
    }

    pub fn role(mut self, role: MemberRole) -> SpawnSpec {
        self.role = Some(role);
        self
    }

    /// Why this spec cannot be asked of `remote` (another host) or of any host.
    pub fn invalid(&self, remote: bool) -> Option<String> {
        if !self.profile.is_empty() && self.profile.trim().is_empty() {
            return Some("profile must not be blank".into());
        }
        if let Some(why) = self.group.as_deref().and_then(invalid_group) {
            return Some(why);
        }
        if let Some(why) = self.ticket.as_deref().and_then(invalid_ticket) {
            return Some(why);
        }
        if let Some(why) = self.cwd.as_deref().and_then(invalid_cwd) {
            return Some(why);
        }
        if self.cwd.is_some() && self.worktree.is_some() {
            return Some(
                "cwd and worktree are exclusive: a worktree is the member's directory".into(),
            );
        }
        self.worktree.as_ref().and_then(|w| w.invalid(remote))
    }
}

impl Worktree {
    /// Why this worktree cannot be asked of `remote` (another host) or of any host.
    pub fn invalid(&self, remote: bool) -> Option<String> {
        if self.repo.trim().is_empty() {
            return Some("worktree.repo must not be empty".into());
        }
        if let Some(c) = &self.commit {
            if c.len() != 40 || !c.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Some(format!("worktree.commit {c:?} is not a 40-hex commit id"));
            }
        }
        if self.repo.starts_with('-') {
            return Some(format!("worktree.repo {:?} is not a repository", self.repo));
        }
        if self.repo.contains("::") {
            // `<transport>::<address>` runs git's remote helper `git-remote-<transport>`
            // (`ext::` runs any command): never a repository fleetd clones.
            return Some(format!(
                "worktree.repo {:?} names a git remote helper (`::`); use an https or ssh URL",
                self.repo
            ));
        }
        if self.has_credentials() {
            // It would travel in the SPAWN and show in logs and errors.
            return Some("worktree.repo must not carry credentials (user:secret@)".into());
        }
        if remote {
            if self.commit.is_none() {
                return Some("a worktree on another host needs the exact commit".into());
            }
            let network = match self.repo.split_once("://") {
                Some((scheme, _)) => matches!(scheme, "https" | "ssh"),
                None => self.is_url(),
            };
            if !network {
                return Some(format!(
                    "a worktree on another host needs an https or ssh repository URL, not {:?}",
                    self.repo
                ));
            }
        }
        None
    }

    /// `scheme://user:secret@host/…`: a password or token in the URL.
    fn has_credentials(&self) -> bool {
        let Some((_, rest)) = self.repo.split_once("://") else {
            return false;
        };
        let authority = rest.split('/').next().unwrap_or("");
        authority
            .rsplit_once('@')
            .is_some_and(|(userinfo, _)| userinfo.contains(':'))
    }

    /// A URL (`scheme://…` or scp-like `user@host:path`), not a path on this host.
    pub fn is_url(&self) -> bool {
        self.repo.contains("://")
            || (!self.repo.starts_with('/') && self.repo.contains('@') && self.repo.contains(':'))
    }
}
