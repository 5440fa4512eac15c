//! Protocol bugs the simulation must be able to catch — the proof that its oracle can fail.
//!
//! Each is one rule of the spec turned off. They take effect only in builds with the
//! `planted-bugs` feature (which `fleetd` never enables) and only when
//! `CoreConfig::planted` names one; otherwise [`PlantedBug`] is just a name.

use std::fmt;

/// The name the simulation reports a broken core invariant under (a panic of
/// `Gateway::check_invariants` at the step it broke).
pub const INTERNAL: &str = "internal";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PlantedBug {
    /// The forward path run at-least-once: a brief is acked only when its turn ends, and a
    /// redelivered brief is typed like a new one (breaks I1).
    AckAfterInject,
    /// The reply path forgets msgId dedup: a redelivered REPLY is taken as a new one (I3).
    NoReplyDedup,
    /// An ANSWER whose turn no longer waits is typed anyway, as a plain message (I5).
    AnswerWithoutTurnCheck,
    /// A SPAWN redelivered during the readiness gate launches a second pane (I6).
    SpawnWithoutReservation,
    /// Roster entries live forever: a dead host's agents never leave the view (I7).
    RosterNeverExpires,
    /// A released reply-path hold leaves its index entry behind: bookkeeping no outcome shows
    /// at once, caught by the core's own invariant check at the step it happens.
    HeldIndexSkew,
    /// Answers to a delegation are matched by `re` alone, never by sender: a lying gateway
    /// that learns a msgId ends or answers someone else's delegation (I8).
    ReplyWithoutCounterpart,
    /// A dead letter's unsigned broker headers are believed: a `maxlen` hint fails the brief's
    /// delegation, so a key-less broker client that republishes a live brief into the DLX
    /// ends it (I8).
    DlqTrustsBrokerHeaders,
    /// Results waiting for their lead are held unacked in its inbox, as the first build did:
    /// a lead that leaves a window of them uncollected wedges its inbox, and its later
    /// blocking sends time out although their replies were sent (I11).
    ResultsHeldInInbox,
    /// The replay record is not taken back after a restart (memory only, as the first build
    /// kept it): a captured brief replayed after the worker's gateway restarted is typed again
    /// (I1).
    ReplayRecordForgotten,
    /// A ticket that expires unpolled leaves its result held: one hold per forgotten ticket,
    /// each for the reply's whole TTL — memory no bound covers (caught by the core's own
    /// invariant, I10).
    HoldOutlivesTicket,
    /// The roster applies a presence delta whatever its order: a replayed or late delta
    /// undoes a newer snapshot or leave, and a member that left reappears (caught by the
    /// roster's own invariant: no entry's order goes back).
    DeltaAppliedOutOfOrder,
    /// A host's snapshot lists its entities without their cards: after the next round every
    /// other host forgets who a member is — its profile, role, owner, since — while its own
    /// host still knows (I7: the roster says the same of a member on every host).
    SnapshotDropsCards,
    /// A STOP is honoured from any gateway whose key verifies, allowlisted or not: a lying
    /// peer (or a member's stolen credentials on it) stops members it was never given
    /// control of (I12).
    StopWithoutAllowlist,
    /// The health classifier takes an UNKNOWN sample for a pane that is gone: a wedged
    /// member, alive in its pane, is reported GONE to operators (I13).
    HealthUnknownAsGone,
    /// A member's `fleet_reply` is taken as the end of its turn, and what waits for the pane
    /// is typed at once — while the agent is still finishing the turn it replied from (I1).
    ReplyEndsTurn,
    /// Every status sample is believed, as the first build did — one older than a sample
    /// already heard of its target, or asked before its last typing was answered, too
    /// (`sample_order`): a `working` herdr served during one turn but answered after the next
    /// brief's typing is taken as that brief's pickup, the next `idle` ends it, and what waits
    /// is typed into an agent still on it (I1).
    SamplesOutOfOrder,
    /// A turn whose end was inferred (a missed fast turn: no WORKING sample between the typing
    /// and idle) is never scraped, as the first build did: a fast agent that answers without
    /// `fleet_reply` leaves its lead waiting out the whole timeout (I14).
    InferredTurnNeverCompletes,
    /// A brief herdr took and never confirmed is queued again as if nothing had been typed:
    /// when the text did land, the agent is typed the same brief a second time (I1).
    UnconfirmedInjectRetried,
    /// A member is taken as ready when its launcher returns, not when it connects: the spawn
    /// answers and the first brief is typed while the agent is still starting — its pane
    /// already reads idle — and the agent never sees it (I15).
    ReadyAtLaunch,
    /// A member a restart finds with its launch mark still there (its gate never passed) is
    /// adopted by its first live sample, as every listed member once was: herdr calls an agent
    /// still starting idle, and the first brief is typed before it takes input (I15).
    StartingAdoptedBySample,
    /// An agent whose gate is its prompt on screen is taken as ready when it connects: one
    /// that connects before it draws its prompt is typed into, and the brief is lost (I15).
    PromptGateSkipped,
    /// A notification rule's quiet period is not kept: a need that holds is told again on
    /// every scan (I16).
    NoticeEveryScan,
    /// A notice carries the question's or result's words though its rule does not allow
    /// them (I16).
    NoticeCarriesText,
    /// A need is told as soon as a scan sees it: a question answered within the rule's grace
    /// still pages someone (I16).
    NoticeIgnoresGrace,
    /// A resolve does not close its raise: every scan after a need cleared resolves it again
    /// (I16).
    NoticeResolvedTwice,
    /// A task is ready as soon as it is added: its delegation starts before the tasks it
    /// depends on are done (I17).
    TaskDepsIgnored,
    /// An agent's report of a turn's end is believed whatever its order and whatever brief it
    /// names: a late or re-sent end of the previous turn ends the next brief's delegation with
    /// the previous brief's text (I18).
    StaleReportBelieved,
}

impl PlantedBug {
    pub const ALL: [PlantedBug; 28] = [
        PlantedBug::AckAfterInject,
        PlantedBug::NoReplyDedup,
        PlantedBug::AnswerWithoutTurnCheck,
        PlantedBug::SpawnWithoutReservation,
        PlantedBug::RosterNeverExpires,
        PlantedBug::HeldIndexSkew,
        PlantedBug::ReplyWithoutCounterpart,
        PlantedBug::DlqTrustsBrokerHeaders,
        PlantedBug::ResultsHeldInInbox,
        PlantedBug::ReplayRecordForgotten,
        PlantedBug::HoldOutlivesTicket,
        PlantedBug::DeltaAppliedOutOfOrder,
        PlantedBug::SnapshotDropsCards,
        PlantedBug::StopWithoutAllowlist,
        PlantedBug::HealthUnknownAsGone,
        PlantedBug::ReplyEndsTurn,
        PlantedBug::SamplesOutOfOrder,
        PlantedBug::InferredTurnNeverCompletes,
        PlantedBug::UnconfirmedInjectRetried,
        PlantedBug::ReadyAtLaunch,
        PlantedBug::StartingAdoptedBySample,
        PlantedBug::PromptGateSkipped,
        PlantedBug::NoticeEveryScan,
        PlantedBug::NoticeCarriesText,
        PlantedBug::NoticeIgnoresGrace,
        PlantedBug::NoticeResolvedTwice,
        PlantedBug::TaskDepsIgnored,
        PlantedBug::StaleReportBelieved,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PlantedBug::AckAfterInject => "ack-after-inject",
            PlantedBug::NoReplyDedup => "no-reply-dedup",
            PlantedBug::AnswerWithoutTurnCheck => "answer-without-turn-check",
            PlantedBug::SpawnWithoutReservation => "spawn-without-reservation",
            PlantedBug::RosterNeverExpires => "roster-never-expires",
            PlantedBug::HeldIndexSkew => "held-index-skew",
            PlantedBug::ReplyWithoutCounterpart => "reply-without-counterpart",
            PlantedBug::DlqTrustsBrokerHeaders => "dlq-trusts-broker-headers",
            PlantedBug::ResultsHeldInInbox => "results-held-in-inbox",
            PlantedBug::ReplayRecordForgotten => "replay-record-forgotten",
            PlantedBug::HoldOutlivesTicket => "hold-outlives-ticket",
            PlantedBug::DeltaAppliedOutOfOrder => "delta-applied-out-of-order",
            PlantedBug::SnapshotDropsCards => "snapshot-drops-cards",
            PlantedBug::StopWithoutAllowlist => "stop-without-allowlist",
            PlantedBug::HealthUnknownAsGone => "health-unknown-as-gone",
            PlantedBug::ReplyEndsTurn => "reply-ends-turn",
            PlantedBug::SamplesOutOfOrder => "samples-out-of-order",
            PlantedBug::InferredTurnNeverCompletes => "inferred-turn-never-completes",
            PlantedBug::UnconfirmedInjectRetried => "unconfirmed-inject-retried",
            PlantedBug::ReadyAtLaunch => "ready-at-launch",
            PlantedBug::StartingAdoptedBySample => "starting-adopted-by-sample",
            PlantedBug::PromptGateSkipped => "prompt-gate-skipped",
            PlantedBug::NoticeEveryScan => "notice-every-scan",
            PlantedBug::NoticeCarriesText => "notice-carries-text",
            PlantedBug::NoticeIgnoresGrace => "notice-ignores-grace",
            PlantedBug::NoticeResolvedTwice => "notice-resolved-twice",
            PlantedBug::TaskDepsIgnored => "task-deps-ignored",
            PlantedBug::StaleReportBelieved => "stale-report-believed",
        }
    }

    pub fn from_name(s: &str) -> Option<PlantedBug> {
        PlantedBug::ALL.into_iter().find(|b| b.name() == s)
    }

    /// The invariant this bug breaks.
    pub fn breaks(self) -> &'static str {
        match self {
            PlantedBug::AckAfterInject => "I1",
            PlantedBug::NoReplyDedup => "I3",
            PlantedBug::AnswerWithoutTurnCheck => "I5",
            PlantedBug::SpawnWithoutReservation => "I6",
            PlantedBug::RosterNeverExpires | PlantedBug::SnapshotDropsCards => "I7",
            PlantedBug::HeldIndexSkew
            | PlantedBug::HoldOutlivesTicket
            | PlantedBug::DeltaAppliedOutOfOrder => INTERNAL,
            PlantedBug::ReplyWithoutCounterpart | PlantedBug::DlqTrustsBrokerHeaders => "I8",
            PlantedBug::ResultsHeldInInbox => "I11",
            PlantedBug::ReplayRecordForgotten
            | PlantedBug::ReplyEndsTurn
            | PlantedBug::SamplesOutOfOrder
            | PlantedBug::UnconfirmedInjectRetried => "I1",
            PlantedBug::StopWithoutAllowlist => "I12",
            PlantedBug::HealthUnknownAsGone => "I13",
            PlantedBug::InferredTurnNeverCompletes => "I14",
            PlantedBug::ReadyAtLaunch
            | PlantedBug::StartingAdoptedBySample
            | PlantedBug::PromptGateSkipped => "I15",
            PlantedBug::NoticeEveryScan
            | PlantedBug::NoticeCarriesText
            | PlantedBug::NoticeIgnoresGrace
            | PlantedBug::NoticeResolvedTwice => "I16",
            PlantedBug::TaskDepsIgnored => "I17",
            PlantedBug::StaleReportBelieved => "I18",
        }
    }
}

impl fmt::Display for PlantedBug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
