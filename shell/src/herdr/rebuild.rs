//! A starting gateway's members, rebuilt from herdr alone (CB-308 §7.8, and §8's open question
//! decided): every pane labelled `fleet:<gid>` is a member of this gateway. One whose agent is
//! alive — any status but `unknown`, working included — is adopted as it is; one that stays
//! `unknown` through the readiness bound is half-built (its spawn never got ready) or dead (herdr
//! restarted and its process is gone) and is closed. Nothing else is reaped: a busy member is
//! never killed by a restart.

use super::HerdrClient;
use crate::driver::{Gone, Handle};
use crate::ports::HerdrPort;
use fleet_core::{Input, SessionId};
use futures_util::future::join_all;

/// What a start found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rebuilt {
    pub adopted: Vec<SessionId>,
    /// Closed, with why.
    pub reaped: Vec<(SessionId, String)>,
}

/// Rebuilds the members of the gateway behind `handle` from `client`'s panes. Each member is
/// gated first (`MemberStarted`: nothing is typed into it yet), then adopted (`MemberConnected`)
/// or closed (`PaneGone`). The checks run concurrently, each within the readiness bound.
pub async fn rebuild(client: &HerdrClient, handle: &Handle) -> Result<Rebuilt, RebuildError> {
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
            Err(why) => {
                if let Err(e) = client.close(&gid).await {
                    tracing::warn!(%gid, "closing a dead member pane: {e}");
                }
                handle
                    .tell(Input::PaneGone {
                        target: gid.clone(),
                    })
                    .await?;
                tracing::info!(%gid, %why, "reaped a member pane at startup");
                out.reaped.push((gid, why));
            }
        }
    }
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
