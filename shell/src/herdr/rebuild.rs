//! A starting gateway's members, rebuilt from herdr alone (CB-308 §7.8, and §8's open question
//! decided): every pane labelled `fleet:<gid>` is a member of this gateway. One whose agent is
//! alive — any status but `unknown`, working included — is adopted as it is; one that stays
//! `unknown` through the readiness bound is half-built (its spawn never got ready) or dead (herdr
//! restarted and its process is gone) and is closed. Nothing else is reaped: a busy member is
//! never killed by a restart.

use super::{GateError, HerdrClient};
use crate::driver::{Gone, Handle};
use crate::ports::{HerdrError, HerdrPort};
use fleet_core::{Input, SessionId};
use futures_util::future::join_all;

/// What a start found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rebuilt {
    pub adopted: Vec<SessionId>,
    /// Closed, with why.
    pub reaped: Vec<(SessionId, String)>,
    /// herdr stopped answering about these: neither adopted nor closed (they stay gated, so
    /// nothing is typed into them), with why.
    pub undecided: Vec<(SessionId, String)>,
    /// Member file directories with no pane left, removed.
    pub swept: Vec<String>,
}

/// Rebuilds the members of the gateway behind `handle` from `client`'s panes. Each member is
/// gated first (`MemberStarted`: nothing is typed into it yet), then adopted (`MemberConnected`)
/// or closed (`PaneGone`). The checks run concurrently, each within the readiness bound. A
/// member is only closed on herdr's word (it answered, and the status stayed `unknown`), never
/// because herdr stopped answering.
pub async fn rebuild(client: &HerdrClient, handle: &Handle) -> Result<Rebuilt, RebuildError> {
    let members = gate(client, handle).await?;
    settle(client, handle, &members).await
}

/// The first, quick half of `rebuild`: every member herdr lists is gated (`MemberStarted`).
/// The daemon runs it before it opens its port, so a member's first call finds itself known.
pub async fn gate(client: &HerdrClient, handle: &Handle) -> Result<Vec<SessionId>, RebuildError> {
    let members = client
        .members()
        .await
        .map_err(|e| RebuildError::Herdr(e.to_string()))?;
    for gid in &members {
        handle
            .tell(Input::MemberStarted {
                target: gid.clone(),
            })
            .await?;
    }
    Ok(members)
}

/// The second half of `rebuild`: each gated member adopted or closed, within the readiness
/// bound, then the files of members no pane names swept.
pub async fn settle(
    client: &HerdrClient,
    handle: &Handle,
    members: &[SessionId],
) -> Result<Rebuilt, RebuildError> {
    let checks = members.iter().map(|gid| async move {
        let verdict = client.alive_within(gid).await;
        (gid.clone(), verdict)
    });
    let mut out = Rebuilt::default();
    for (gid, verdict) in join_all(checks).await {
        match verdict {
            Ok(()) => {
                handle
                    .tell(Input::MemberConnected {
                        target: gid.clone(),
                    })
                    .await?;
                out.adopted.push(gid);
            }
            Err(GateError::Herdr(why)) => {
                tracing::warn!(%gid, %why, "herdr did not answer about a member at startup");
                out.undecided.push((gid, why));
            }
            Err(GateError::NotReady(why)) => match client.close(&gid).await {
                Ok(()) | Err(HerdrError::PaneNotFound) => {
                    handle
                        .tell(Input::PaneGone {
                            target: gid.clone(),
                        })
                        .await?;
                    tracing::info!(%gid, %why, "reaped a member pane at startup");
                    out.reaped.push((gid, why));
                }
                // Still there as far as anyone knows: its inbox stays too.
                Err(e) => out.undecided.push((gid, format!("{why}; closing it: {e}"))),
            },
        }
    }
    let mut live = out.adopted.clone();
    live.extend(out.undecided.iter().map(|(g, _)| g.clone()));
    out.swept = client.sweep_files(&live);
    Ok(out)
}

/// Why a rebuild could not run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RebuildError {
    #[error("listing herdr's panes: {0}")]
    Herdr(String),
    #[error(transparent)]
    Gone(#[from] Gone),
}
