//! A starting gateway's members, from herdr alone (CB-308 §7.8): every pane labelled
//! `fleet:<gid>` is a member of this gateway. The shell only lists them and tells the core
//! (`Input::MembersListed`); the core's restart rule (`fleet_core::adoption`) gates each one,
//! samples it, and adopts it (any status but `unknown`, working included) or closes it
//! (`unknown` through the readiness bound) or leaves it undecided (herdr never answered) —
//! the same rule the simulation runs. A member whose launch mark is still there (its gate
//! never passed before the last process stopped) is listed `starting`, with the gate the mark
//! recorded: only that gate adopts it. The files of gids with no pane at all are swept here.

use super::HerdrClient;
use crate::driver::{Gone, Handle};
use fleet_core::{Input, ListedMember, SessionId};

/// What a start found in herdr.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listed {
    /// The member panes herdr lists, told to the core to adopt or close.
    pub members: Vec<SessionId>,
    /// Member file directories with no pane left, removed.
    pub swept: Vec<String>,
}

/// Lists herdr's member panes and hands them to the core behind `handle`. The daemon runs it
/// before it opens its port, so a member's first call finds itself known (gated, then adopted
/// through its own gate or by its first live sample).
pub async fn rebuild(client: &HerdrClient, handle: &Handle) -> Result<Listed, RebuildError> {
    let members = client
        .members()
        .await
        .map_err(|e| RebuildError::Herdr(e.to_string()))?;
    let listed = members
        .iter()
        .map(|gid| ListedMember {
            gid: gid.clone(),
            starting: client.starting(gid),
        })
        .collect();
    handle
        .tell(Input::MembersListed { members: listed })
        .await?;
    let swept = client.sweep_files(&members);
    Ok(Listed { members, swept })
}

/// Why a rebuild could not run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RebuildError {
    #[error("listing herdr's panes: {0}")]
    Herdr(String),
    #[error(transparent)]
    Gone(#[from] Gone),
}
