//! The placement glue: a spawn that names no profile gets one from `placement::Placement`
//! (over this host's profiles and their loads), one for `host: "any"` gets the live host with
//! the fewest members, and a member whose backend refused on a usage limit puts its
//! credential in quarantine.

use super::Gateway;
use crate::ids::{HostId, SessionId};
use crate::io::Event;
use crate::placement::{NoPlace, ProfileView, Strategy};
use crate::roster::{EntityKind, Liveness};
use std::collections::BTreeMap;

/// The host name that asks the requester's gateway to pick one.
pub const ANY_HOST: &str = "any";

impl Gateway {
    /// `host: "any"`: among the live hosts that offer `profile` (any profile, when it names
    /// none), the one with the fewest members in the roster; ties go to the first by name.
    /// `None` when no live host offers it.
    pub(super) fn place_host(&self, profile: &str) -> Option<HostId> {
        let rows = self.roster();
        let mut load: BTreeMap<HostId, usize> = rows
            .iter()
            .filter(|r| r.kind == EntityKind::Gateway && r.liveness == Liveness::Live)
            .filter(|r| {
                if profile.is_empty() {
                    !r.profiles.is_empty()
                } else {
                    r.profiles.iter().any(|p| p == profile)
                }
            })
            .map(|r| (r.host.clone(), 0))
            .collect();
        for r in rows.iter().filter(|r| r.kind == EntityKind::Member) {
            if let Some(n) = load.get_mut(&r.host) {
                *n += 1;
            }
        }
        load.into_iter()
            .min_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)))
            .map(|(h, _)| h)
    }

    /// Members per profile on this host: served, and spawns still in their gate.
    fn local_loads(&self) -> BTreeMap<String, u32> {
        let mut loads: BTreeMap<String, u32> = BTreeMap::new();
        let served = self
            .served()
            .filter(|(_, s)| s.kind == EntityKind::Member)
            .filter_map(|(g, _)| self.cards.get(g)?.profile.clone());
        let reserved = self
            .spawns
            .reserved_profiles()
            .filter(|(g, _)| !self.is_member_here(g))
            .filter_map(|(_, p)| p.map(str::to_string));
        for p in served.chain(reserved) {
            *loads.entry(p).or_default() += 1;
        }
        loads
    }

    /// The profile a spawn here that names none starts.
    pub(super) fn choose_profile(&mut self) -> Result<String, NoPlace> {
        let (loads, now) = (self.local_loads(), self.unix_now());
        self.placement.choose(&self.cfg.profiles, &loads, now)
    }

    /// This host's placement: its strategy, and each profile's credential, load and cooldown
    /// (`fleet_profiles`, `GET /profiles`, `/metrics`).
    pub fn placement_view(&self) -> (Strategy, Option<String>, Vec<ProfileView>) {
        let (loads, now) = (self.local_loads(), self.unix_now());
        (
            self.placement.strategy(),
            self.placement.default_profile(&self.cfg.profiles),
            self.placement.view(&self.cfg.profiles, &loads, now),
        )
    }

    /// `target`'s backend refused on a usage limit: its profile's credential cools down.
    pub(super) fn backend_exhausted(&mut self, target: &SessionId) {
        let Some(profile) = self.cards.get(target).and_then(|c| c.profile.clone()) else {
            return;
        };
        let now = self.unix_now();
        let (credential, until_unix_ms) = self.placement.exhausted(&profile, now);
        self.event(Event::Quarantined {
            credential,
            profile,
            until_unix_ms,
        });
    }
}
