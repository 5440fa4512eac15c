//! Screen patterns, compiled once per process. A gateway compiles its config's patterns when
//! it is built; the simulation builds one per seed and per restart from the same config, and
//! compiling them was ≈ 45 % of a single-host seed's CPU (issue 42). A pattern compiles to the
//! same program whoever compiled it first, so what a gateway matches never depends on the
//! cache. A compiled pattern is shared whole (behind an `Arc`), search caches included: a
//! clone would build its own caches on its first search, in every gateway again.

use regex::{Regex, RegexSet};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Patterns kept at most; the cache starts afresh beyond (a daemon has a few dozen).
const CAPACITY: usize = 1_024;

#[derive(Default)]
struct Cache {
    one: BTreeMap<String, Arc<Regex>>,
    sets: BTreeMap<Vec<String>, Arc<RegexSet>>,
}

fn cache() -> &'static Mutex<Cache> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

/// `pattern` compiled, from the cache when it was compiled before.
pub fn regex(pattern: &str) -> Result<Arc<Regex>, regex::Error> {
    memo(|c| &mut c.one, pattern, || Regex::new(pattern))
}

/// `patterns` compiled as one set (one pass over a line answers whether any matches), from
/// the cache when compiled before. Each pattern must compile on its own first (see
/// [`regex`]), so an error names the one at fault.
pub fn set(patterns: &[String]) -> Result<Arc<RegexSet>, regex::Error> {
    memo(|c| &mut c.sets, patterns, || RegexSet::new(patterns))
}

/// `key`'s entry of the map `pick` chooses, built and kept if it is not there yet. A poisoned
/// cache is only bypassed: the answer is the same, compiled again.
fn memo<Q, T>(
    pick: fn(&mut Cache) -> &mut BTreeMap<Q::Owned, Arc<T>>,
    key: &Q,
    build: impl FnOnce() -> Result<T, regex::Error>,
) -> Result<Arc<T>, regex::Error>
where
    Q: Ord + ToOwned + ?Sized,
    Q::Owned: Ord,
{
    if let Some(hit) = cache()
        .lock()
        .ok()
        .and_then(|mut c| pick(&mut c).get(key).cloned())
    {
        return Ok(hit);
    }
    let built = Arc::new(build()?);
    if let Ok(mut c) = cache().lock() {
        let map = pick(&mut c);
        if map.len() >= CAPACITY {
            map.clear();
        }
        map.insert(key.to_owned(), built.clone());
    }
    Ok(built)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_compiled_twice_matches_as_it_did() {
        let a = regex(r"(?i)usage limit").expect("compiles");
        let b = regex(r"(?i)usage limit").expect("compiles");
        assert!(a.is_match("Usage LIMIT reached") && b.is_match("usage limit"));
        assert!(regex("(unclosed").is_err());
    }

    #[test]
    fn a_set_matches_where_any_of_its_patterns_does() {
        let ps = vec![r"^a\d$".to_string(), r"(?i)^b$".to_string()];
        let s = set(&ps).expect("compiles");
        assert!(s.is_match("a1") && s.is_match("B") && !s.is_match("a"));
        assert!(set(&ps).expect("cached").is_match("b"));
    }
}
