//! `Authz`: the one decision table (ch. 9, `auth/Authz.java:44`). Every decision is audited;
//! an audit event never carries message content.

use crate::ids::SessionId;
use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Role {
    Primary,
    Worker,
    Architect,
    Anonymous,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Primary => "PRIMARY",
            Role::Worker => "WORKER",
            Role::Architect => "ARCHITECT",
            Role::Anonymous => "ANONYMOUS",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Action {
    Spawn,
    Stop,
    Send,
    Reply,
    Ask,
    Drain,
    Read,
    Metrics,
}

impl Action {
    pub const ALL: [Action; 8] = [
        Action::Spawn,
        Action::Stop,
        Action::Send,
        Action::Reply,
        Action::Ask,
        Action::Drain,
        Action::Read,
        Action::Metrics,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Spawn => "SPAWN",
            Action::Stop => "STOP",
            Action::Send => "SEND",
            Action::Reply => "REPLY",
            Action::Ask => "ASK",
            Action::Drain => "DRAIN",
            Action::Read => "READ",
            Action::Metrics => "METRICS",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who is calling, resolved by the shell from the connection — never from a tool argument.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Principal {
    pub role: Role,
    /// The pane this caller lives in, if any: a member's own session, a lead's pane.
    pub session: Option<SessionId>,
    /// A display name for audit lines (lead name, slot, member id).
    pub name: String,
}

impl Principal {
    pub fn primary(name: &str, pane: Option<SessionId>) -> Self {
        Principal {
            role: Role::Primary,
            session: pane,
            name: name.to_string(),
        }
    }

    pub fn worker(session: SessionId) -> Self {
        Principal {
            role: Role::Worker,
            name: session.to_string(),
            session: Some(session),
        }
    }

    pub fn architect(session: SessionId) -> Self {
        Principal {
            role: Role::Architect,
            name: session.to_string(),
            session: Some(session),
        }
    }

    pub fn anonymous() -> Self {
        Principal {
            role: Role::Anonymous,
            session: None,
            name: "anonymous".to_string(),
        }
    }
}

/// Why a decision went the way it did, as a stable code for the audit log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    PrimaryOnly,
    PrimaryOrArchitect,
    OwnSessionOnly,
    AnyKnownCaller,
}

/// One allow/deny line. Carries who, what and on which session — never content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEvent {
    pub role: Role,
    pub caller: String,
    pub action: Action,
    pub target: Option<SessionId>,
    pub allowed: bool,
    pub reason: Reason,
}

impl fmt::Display for AuditEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "audit {} {} {} {} target={} ({:?})",
            if self.allowed { "allow" } else { "deny" },
            self.role.as_str(),
            self.caller,
            self.action,
            self.target.as_ref().map_or("-", |t| t.as_str()),
            self.reason
        )
    }
}

/// The decision table. `target` is the session the action is about.
pub fn permits(caller: &Principal, action: Action, target: Option<&SessionId>) -> AuditEvent {
    let (allowed, reason) = match action {
        Action::Spawn | Action::Stop | Action::Drain => {
            (caller.role == Role::Primary, Reason::PrimaryOnly)
        }
        Action::Send => (
            matches!(caller.role, Role::Primary | Role::Architect),
            Reason::PrimaryOrArchitect,
        ),
        Action::Reply | Action::Ask => (
            caller.role != Role::Anonymous && target.is_some() && caller.session.as_ref() == target,
            Reason::OwnSessionOnly,
        ),
        Action::Read | Action::Metrics => (
            matches!(caller.role, Role::Primary | Role::Worker | Role::Architect),
            Reason::AnyKnownCaller,
        ),
    };
    AuditEvent {
        role: caller.role,
        caller: caller.name.clone(),
        action,
        target: target.cloned(),
        allowed,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(p: &Principal, a: Action, t: Option<&SessionId>) -> bool {
        permits(p, a, t).allowed
    }

    /// The whole table, role by action, for a caller acting on its own session.
    #[test]
    fn the_decision_table_matches_chapter_nine() {
        let me = SessionId::new("w1");
        let roles = [
            Principal::primary("lead", Some(me.clone())),
            Principal::worker(me.clone()),
            Principal::architect(me.clone()),
            Principal::anonymous(),
        ];
        let expect: [(Action, [bool; 4]); 8] = [
            (Action::Spawn, [true, false, false, false]),
            (Action::Stop, [true, false, false, false]),
            (Action::Drain, [true, false, false, false]),
            (Action::Send, [true, false, true, false]),
            (Action::Reply, [true, true, true, false]),
            (Action::Ask, [true, true, true, false]),
            (Action::Read, [true, true, true, false]),
            (Action::Metrics, [true, true, true, false]),
        ];
        for (action, row) in expect {
            for (p, want) in roles.iter().zip(row) {
                assert_eq!(allowed(p, action, Some(&me)), want, "{:?} {action}", p.role);
            }
        }
    }

    #[test]
    fn a_worker_that_names_another_session_is_refused() {
        let w = Principal::worker(SessionId::new("w1"));
        assert!(!allowed(&w, Action::Reply, Some(&SessionId::new("w2"))));
        assert!(!allowed(&w, Action::Ask, Some(&SessionId::new("w2"))));
        assert!(!allowed(&w, Action::Reply, None));
    }

    #[test]
    fn an_audit_line_names_the_decision_but_carries_no_content() {
        let e = permits(&Principal::anonymous(), Action::Send, Some(&"w1".into()));
        assert_eq!(
            e.to_string(),
            "audit deny ANONYMOUS anonymous SEND target=w1 (PrimaryOrArchitect)"
        );
    }
}
