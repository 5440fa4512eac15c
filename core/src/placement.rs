//! Placement (ch. 9 `PlacementPolicy`) and backend quarantine (`BackendQuarantine`): which
//! profile a spawn that names none starts, and which credentials are cooling down after their
//! backend refused on a usage limit.
//!
//! `fixed` always takes the default profile; `weighted` is smooth weighted round-robin
//! (nginx's: every eligible profile gains its weight, the largest total is picked and pays
//! back the sum), gated by each profile's `max_load`. A credential that ended a turn
//! BACKEND_EXHAUSTED is quarantined for the cooldown, and every profile using it is skipped:
//! the quarantine is keyed by credential, since two profiles may share one account.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// The default profile, always.
    #[default]
    Fixed,
    /// Smooth weighted round-robin over the profiles, skipping full and cooling ones.
    Weighted,
}

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Fixed => "fixed",
            Strategy::Weighted => "weighted",
        }
    }
}

/// One profile as placement sees it (from `[profiles.<name>]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfilePlacement {
    /// Its share under `weighted` (at least 1).
    pub weight: u32,
    /// At most this many of its members at once on this host; 0: no bound.
    pub max_load: u32,
    /// The account its members use; the profile's own name when none is given.
    pub credential: Option<String>,
}

impl Default for ProfilePlacement {
    fn default() -> Self {
        ProfilePlacement {
            weight: 1,
            max_load: 0,
            credential: None,
        }
    }
}

/// `[placement]` in the daemon's config.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlacementConfig {
    pub strategy: Strategy,
    /// `fixed`: the profile a spawn without one starts (the only profile, when there is one).
    pub default_profile: Option<String>,
    /// How long a credential whose backend refused on a usage limit is skipped.
    pub cooldown_ms: u64,
    /// Per profile (filled from `[profiles.<name>] weight, max_load, credential`).
    #[serde(skip)]
    pub profiles: BTreeMap<String, ProfilePlacement>,
}

impl Default for PlacementConfig {
    fn default() -> Self {
        PlacementConfig {
            strategy: Strategy::Fixed,
            default_profile: None,
            cooldown_ms: 30 * 60_000,
            profiles: BTreeMap::new(),
        }
    }
}

/// Why no profile could be chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoPlace {
    /// This host offers no profile.
    NoProfiles,
    /// `fixed` with several profiles and no `default_profile`.
    NoDefault { offered: Vec<String> },
    /// Every candidate is cooling down or full.
    AllUnavailable { why: Vec<String> },
}

impl fmt::Display for NoPlace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoPlace::NoProfiles => f.write_str("this host offers no profile"),
            NoPlace::NoDefault { offered } => write!(
                f,
                "name a profile: [placement] is fixed with no default_profile, and this host \
                 offers {offered:?}"
            ),
            NoPlace::AllUnavailable { why } => {
                write!(f, "no profile can take a member now: {}", why.join("; "))
            }
        }
    }
}

/// One profile's placement state, for `fleet_profiles` and `/metrics`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileView {
    pub name: String,
    pub credential: String,
    pub weight: u32,
    /// 0: no bound.
    pub max_load: u32,
    /// Its members on this host now, spawns in their gate included.
    pub load: u32,
    /// Its credential is skipped until then (Unix ms), if it is cooling down.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cooling_until: Option<u64>,
}

/// Credentials cooling down: since when, until when (Unix ms).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Quarantine {
    cooling: BTreeMap<String, Cooling>,
}

/// One credential's cooldown: from its first refusal (a later one extends it, not restarts it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cooling {
    pub from: u64,
    pub until: u64,
}

impl Quarantine {
    /// `credential`'s backend refused at `from`: skipped until `until` (a later refusal while
    /// it still cools extends it, and it has cooled since the first).
    pub fn exhausted(&mut self, credential: &str, from: u64, until: u64) {
        let c = self
            .cooling
            .entry(credential.to_string())
            .or_insert(Cooling { from, until });
        if c.until <= from {
            *c = Cooling { from, until };
        }
        c.until = c.until.max(until);
    }

    /// Until when `credential` cools down, if it still does at `now`.
    pub fn cooling_until(&self, credential: &str, now: u64) -> Option<u64> {
        self.cooling
            .get(credential)
            .map(|c| c.until)
            .filter(|u| *u > now)
    }

    /// Each credential cooling down at `now`, in name order.
    pub fn cooling(&self, now: u64) -> impl Iterator<Item = (&str, Cooling)> {
        self.cooling
            .iter()
            .filter(move |(_, c)| c.until > now)
            .map(|(k, c)| (k.as_str(), *c))
    }

    /// Forgets cooldowns that are over.
    pub fn expire(&mut self, now: u64) {
        self.cooling.retain(|_, c| c.until > now);
    }
}

/// The policy with its round-robin state and the quarantine.
#[derive(Clone, Debug)]
pub struct Placement {
    cfg: PlacementConfig,
    /// The smooth round-robin's running totals, by profile.
    current: BTreeMap<String, i64>,
    pub quarantine: Quarantine,
}

impl Placement {
    pub fn new(cfg: PlacementConfig) -> Placement {
        Placement {
            cfg,
            current: BTreeMap::new(),
            quarantine: Quarantine::default(),
        }
    }

    pub fn strategy(&self) -> Strategy {
        self.cfg.strategy
    }

    /// The profile `fixed` starts: `default_profile`, or the only one offered.
    pub fn default_profile(&self, offered: &[String]) -> Option<String> {
        match (&self.cfg.default_profile, offered) {
            (Some(p), _) => Some(p.clone()),
            (None, [only]) => Some(only.clone()),
            _ => None,
        }
    }

    fn of(&self, profile: &str) -> ProfilePlacement {
        self.cfg.profiles.get(profile).cloned().unwrap_or_default()
    }

    /// The credential `profile`'s members use.
    pub fn credential(&self, profile: &str) -> String {
        self.of(profile)
            .credential
            .unwrap_or_else(|| profile.to_string())
    }

    /// Until when `profile`'s credential cools down, at `now` (Unix ms).
    pub fn cooling_until(&self, profile: &str, now: u64) -> Option<u64> {
        self.quarantine
            .cooling_until(&self.credential(profile), now)
    }

    /// `profile`'s backend refused: its credential cools down from `now`. Returns the
    /// credential and until when.
    pub fn exhausted(&mut self, profile: &str, now: u64) -> (String, u64) {
        let credential = self.credential(profile);
        let until = now.saturating_add(self.cfg.cooldown_ms);
        self.quarantine.exhausted(&credential, now, until);
        (credential, until)
    }

    /// Why `profile` cannot take a member now, if it cannot.
    fn unavailable(&self, profile: &str, load: u32, now: u64) -> Option<String> {
        if let Some(until) = self.cooling_until(profile, now) {
            return Some(format!(
                "{profile}: credential {} cools down until {until} (Unix ms)",
                self.credential(profile)
            ));
        }
        let max = self.of(profile).max_load;
        (max > 0 && load >= max).then(|| format!("{profile}: at max_load ({load} of {max})"))
    }

    /// The profile a spawn that names none starts, among `offered` (in name order) with their
    /// current `loads`, at `now` (Unix ms).
    pub fn choose(
        &mut self,
        offered: &[String],
        loads: &BTreeMap<String, u32>,
        now: u64,
    ) -> Result<String, NoPlace> {
        self.quarantine.expire(now);
        let load = |p: &str| loads.get(p).copied().unwrap_or(0);
        match self.cfg.strategy {
            Strategy::Fixed => {
                let Some(chosen) = self.default_profile(offered) else {
                    return Err(match offered {
                        [] => NoPlace::NoProfiles,
                        _ => NoPlace::NoDefault {
                            offered: offered.to_vec(),
                        },
                    });
                };
                match self.unavailable(&chosen, load(&chosen), now) {
                    Some(why) => Err(NoPlace::AllUnavailable { why: vec![why] }),
                    None => Ok(chosen),
                }
            }
            Strategy::Weighted => {
                if offered.is_empty() {
                    return Err(NoPlace::NoProfiles);
                }
                let mut why = Vec::new();
                let mut eligible = Vec::new();
                for p in offered {
                    match self.unavailable(p, load(p), now) {
                        Some(w) => why.push(w),
                        None => eligible.push(p.clone()),
                    }
                }
                if eligible.is_empty() {
                    return Err(NoPlace::AllUnavailable { why });
                }
                let total: i64 = eligible
                    .iter()
                    .map(|p| i64::from(self.of(p).weight.max(1)))
                    .sum();
                let mut best: Option<(i64, String)> = None;
                for p in &eligible {
                    let w = i64::from(self.of(p).weight.max(1));
                    let c = self.current.entry(p.clone()).or_insert(0);
                    *c += w;
                    // Ties go to the first in name order: strictly greater replaces.
                    if best.as_ref().is_none_or(|(b, _)| *c > *b) {
                        best = Some((*c, p.clone()));
                    }
                }
                let (_, chosen) = best.ok_or(NoPlace::NoProfiles)?;
                if let Some(c) = self.current.get_mut(&chosen) {
                    *c -= total;
                }
                Ok(chosen)
            }
        }
    }

    /// Every offered profile's state.
    pub fn view(
        &self,
        offered: &[String],
        loads: &BTreeMap<String, u32>,
        now: u64,
    ) -> Vec<ProfileView> {
        offered
            .iter()
            .map(|p| {
                let pp = self.of(p);
                ProfileView {
                    name: p.clone(),
                    credential: self.credential(p),
                    weight: pp.weight.max(1),
                    max_load: pp.max_load,
                    load: loads.get(p).copied().unwrap_or(0),
                    cooling_until: self.cooling_until(p, now),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(ps: &[&str]) -> Vec<String> {
        ps.iter().map(|p| p.to_string()).collect()
    }

    fn weighted(ws: &[(&str, u32, u32, Option<&str>)]) -> Placement {
        Placement::new(PlacementConfig {
            strategy: Strategy::Weighted,
            profiles: ws
                .iter()
                .map(|(p, weight, max_load, cred)| {
                    (
                        p.to_string(),
                        ProfilePlacement {
                            weight: *weight,
                            max_load: *max_load,
                            credential: cred.map(str::to_string),
                        },
                    )
                })
                .collect(),
            ..PlacementConfig::default()
        })
    }

    #[test]
    fn fixed_takes_the_default_or_the_only_profile_and_says_when_it_cannot() {
        let mut p = Placement::new(PlacementConfig::default());
        let none = BTreeMap::new();
        assert_eq!(p.choose(&names(&["a"]), &none, 0), Ok("a".into()));
        assert_eq!(
            p.choose(&names(&["a", "b"]), &none, 0),
            Err(NoPlace::NoDefault {
                offered: names(&["a", "b"])
            })
        );
        assert_eq!(p.choose(&[], &none, 0), Err(NoPlace::NoProfiles));
        let mut p = Placement::new(PlacementConfig {
            default_profile: Some("b".into()),
            ..PlacementConfig::default()
        });
        assert_eq!(p.choose(&names(&["a", "b"]), &none, 0), Ok("b".into()));
    }

    #[test]
    fn weighted_is_smooth_round_robin_in_proportion() {
        let mut p = weighted(&[("a", 5, 0, None), ("b", 1, 0, None), ("c", 1, 0, None)]);
        let offered = names(&["a", "b", "c"]);
        let picks: Vec<String> = (0..7)
            .map(|_| p.choose(&offered, &BTreeMap::new(), 0).expect("a pick"))
            .collect();
        // nginx's sequence for 5:1:1 — the heavy one spread out, never five in a row.
        assert_eq!(picks, names(&["a", "a", "b", "a", "c", "a", "a"]));
    }

    #[test]
    fn max_load_gates_a_profile_until_a_member_leaves() {
        let mut p = weighted(&[("a", 10, 2, None), ("b", 1, 0, None)]);
        let offered = names(&["a", "b"]);
        let full: BTreeMap<String, u32> = [("a".to_string(), 2)].into_iter().collect();
        for _ in 0..3 {
            assert_eq!(p.choose(&offered, &full, 0), Ok("b".into()));
        }
        let room: BTreeMap<String, u32> = [("a".to_string(), 1)].into_iter().collect();
        assert_eq!(p.choose(&offered, &room, 0), Ok("a".into()));
        let mut only = weighted(&[("a", 1, 1, None)]);
        let one: BTreeMap<String, u32> = [("a".to_string(), 1)].into_iter().collect();
        assert!(matches!(
            only.choose(&names(&["a"]), &one, 0),
            Err(NoPlace::AllUnavailable { .. })
        ));
    }

    #[test]
    fn an_exhausted_credential_is_skipped_for_every_profile_using_it_until_it_cools() {
        let mut p = weighted(&[
            ("opus", 1, 0, Some("acct-1")),
            ("sonnet", 1, 0, Some("acct-1")),
            ("other", 1, 0, Some("acct-2")),
        ]);
        let offered = names(&["opus", "other", "sonnet"]);
        let (cred, until) = p.exhausted("opus", 1_000);
        assert_eq!((cred.as_str(), until), ("acct-1", 1_000 + 30 * 60_000));
        for _ in 0..4 {
            assert_eq!(
                p.choose(&offered, &BTreeMap::new(), 2_000),
                Ok("other".into())
            );
        }
        assert_eq!(p.cooling_until("sonnet", 2_000), Some(until));
        // Expiry: both come back.
        let after = until;
        let picks: Vec<String> = (0..3)
            .map(|_| p.choose(&offered, &BTreeMap::new(), after).expect("a pick"))
            .collect();
        assert!(picks.contains(&"opus".to_string()) && picks.contains(&"sonnet".to_string()));
        assert_eq!(p.cooling_until("opus", after), None);
    }

    #[test]
    fn a_cooldown_counts_from_its_first_refusal_until_it_is_over() {
        let mut q = Quarantine::default();
        q.exhausted("acct", 1_000, 5_000);
        q.exhausted("acct", 2_000, 6_000);
        let c = |q: &Quarantine, now| q.cooling(now).map(|(_, c)| c).next();
        assert_eq!(
            c(&q, 3_000),
            Some(Cooling {
                from: 1_000,
                until: 6_000
            })
        );
        // Over, then refused again: a new cooldown.
        assert_eq!(c(&q, 6_000), None);
        q.exhausted("acct", 7_000, 9_000);
        assert_eq!(
            c(&q, 7_000),
            Some(Cooling {
                from: 7_000,
                until: 9_000
            })
        );
    }

    #[test]
    fn fixed_refuses_while_its_profile_cools_down_saying_until_when() {
        let mut p = Placement::new(PlacementConfig::default());
        p.exhausted("a", 0);
        match p.choose(&names(&["a"]), &BTreeMap::new(), 10) {
            Err(NoPlace::AllUnavailable { why }) => {
                assert_eq!(why, ["a: credential a cools down until 1800000 (Unix ms)"])
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_view_shows_load_and_cooldown_per_profile() {
        let mut p = weighted(&[("a", 3, 4, Some("acct"))]);
        p.exhausted("a", 0);
        let loads: BTreeMap<String, u32> = [("a".to_string(), 2)].into_iter().collect();
        assert_eq!(
            p.view(&names(&["a", "b"]), &loads, 5),
            vec![
                ProfileView {
                    name: "a".into(),
                    credential: "acct".into(),
                    weight: 3,
                    max_load: 4,
                    load: 2,
                    cooling_until: Some(1_800_000),
                },
                ProfileView {
                    name: "b".into(),
                    credential: "b".into(),
                    weight: 1,
                    max_load: 0,
                    load: 0,
                    cooling_until: None,
                }
            ]
        );
    }
}
