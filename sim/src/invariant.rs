//! The invariants the oracles judge (`docs/invariants.md`), as a type: a violation names one of
//! these, never a free string, and a planted bug's expected invariant is looked up by name.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    /// No double injection: a brief is typed at most once, never into a working or unready
    /// pane, one message per turn.
    I1,
    /// No silent loss: every send ends in exactly one terminal outcome within its bound.
    I2,
    /// Confirmed replies survive, and reach the lead that sent the brief once.
    I3,
    /// Per-recipient FIFO.
    I4,
    /// Turn safety: an answer reaches only the turn it names; a reply only its own send.
    I5,
    /// Spawn idempotence: one pane per spawn id, where it was asked.
    I6,
    /// Roster convergence and truth.
    I7,
    /// Authenticity: an adversary changes no outcome.
    I8,
    /// Broker outage: local sends never fail for it, remote ones fail fast.
    I9,
    /// Bounded memory.
    I10,
    /// Uncollected results never delay a lead's other flows.
    I11,
    /// A member stops only when a lead that may stop it asks.
    I12,
    /// Health tells the truth.
    I13,
    /// A turn that ended without `fleet_reply` ends its delegation with its completion.
    I14,
    /// Nothing is typed into an agent before it takes input.
    I15,
    /// Notifications tell the truth: a need is told once it has waited its grace, at most
    /// once per quiet period, with no words a rule does not allow.
    I16,
    /// A task starts only after every task it depends on is done.
    I17,
    /// An agent's word on its turn is that turn's: a delegation ends with its own brief's
    /// result, never another brief's, and a turn its agent reported ended ends with the
    /// agent's text, never at its timeout.
    I18,
    /// The core's own invariant check panicked (`Gateway::check_invariants`).
    Internal,
}

impl Invariant {
    pub const ALL: [Invariant; 19] = [
        Invariant::I1,
        Invariant::I2,
        Invariant::I3,
        Invariant::I4,
        Invariant::I5,
        Invariant::I6,
        Invariant::I7,
        Invariant::I8,
        Invariant::I9,
        Invariant::I10,
        Invariant::I11,
        Invariant::I12,
        Invariant::I13,
        Invariant::I14,
        Invariant::I15,
        Invariant::I16,
        Invariant::I17,
        Invariant::I18,
        Invariant::Internal,
    ];

    /// Its name in reports and in `docs/invariants.md`: `I1` … `I18`, `internal`.
    pub fn name(self) -> &'static str {
        match self {
            Invariant::I1 => "I1",
            Invariant::I2 => "I2",
            Invariant::I3 => "I3",
            Invariant::I4 => "I4",
            Invariant::I5 => "I5",
            Invariant::I6 => "I6",
            Invariant::I7 => "I7",
            Invariant::I8 => "I8",
            Invariant::I9 => "I9",
            Invariant::I10 => "I10",
            Invariant::I11 => "I11",
            Invariant::I12 => "I12",
            Invariant::I13 => "I13",
            Invariant::I14 => "I14",
            Invariant::I15 => "I15",
            Invariant::I16 => "I16",
            Invariant::I17 => "I17",
            Invariant::I18 => "I18",
            Invariant::Internal => fleet_core::planted::INTERNAL,
        }
    }

    pub fn from_name(s: &str) -> Option<Invariant> {
        Invariant::ALL.into_iter().find(|i| i.name() == s)
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every planted bug names an invariant the oracles know.
    #[test]
    fn every_planted_bug_breaks_a_known_invariant() {
        for bug in fleet_core::planted::PlantedBug::ALL {
            assert!(Invariant::from_name(bug.breaks()).is_some(), "{bug}");
        }
        for i in Invariant::ALL {
            assert_eq!(Invariant::from_name(i.name()), Some(i));
        }
    }
}
