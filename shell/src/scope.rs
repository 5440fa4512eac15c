//! `fleetd member-scope -- <program>`: run by fleetd inside a host-network member's sandbox,
//! just before the member's own program. bubblewrap's mount namespace hides the filesystem's
//! Unix sockets, but *abstract* ones (`@/tmp/.X11-unix/X0`, a D-Bus bus, an IDE's helper) live
//! in the network namespace, which a host-network member shares: it could reach the user's X
//! server (and type into every window) or session bus. A Landlock scope (Linux 6.12+, ABI 6)
//! closes them — an abstract socket created outside the member's domain cannot be connected
//! to from inside, and nothing inside may signal a process outside. The scope is inherited by
//! everything the member starts and cannot be lifted.

use landlock::{CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetStatus, Scope};
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

/// How far the scope took on this kernel.
#[derive(Debug, PartialEq, Eq)]
pub enum Scoped {
    /// Abstract sockets and signals outside the member's domain are out of its reach.
    Fully,
    /// This kernel knows no such scope (before 6.12, or Landlock off): the member runs with
    /// what the sandbox alone gives, and its pane says so.
    Not(String),
}

/// Scopes this process (and all it will start) away from abstract Unix sockets and signals
/// outside it.
pub fn restrict() -> Scoped {
    let created = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .scope(Scope::AbstractUnixSocket | Scope::Signal)
        .and_then(|r| r.create())
        .and_then(|r| r.restrict_self());
    match created {
        Ok(s) if s.ruleset == RulesetStatus::FullyEnforced => Scoped::Fully,
        Ok(s) => Scoped::Not(format!(
            "Landlock scopes are {:?} on this kernel",
            s.ruleset
        )),
        Err(e) => Scoped::Not(e.to_string()),
    }
}

/// `member-scope`: scope, then become `program` (never returns on success).
pub fn run(program: Vec<String>) -> ExitCode {
    let Some((bin, args)) = program.split_first() else {
        eprintln!("fleetd member-scope: no program to run");
        return ExitCode::from(2);
    };
    if let Scoped::Not(why) = restrict() {
        eprintln!(
            "fleetd member-scope: abstract Unix sockets stay reachable from this member ({why})"
        );
    }
    let e = std::process::Command::new(bin).args(args).exec();
    eprintln!("fleetd member-scope: running {bin}: {e}");
    ExitCode::from(127)
}
