//! Shared helpers for the integration tests, and the broker conformance suite.

pub mod agents;
pub mod cluster;
pub mod conformance;
pub mod fleetd_proc;
pub mod gateways;
pub mod herdr_double;
pub mod herdr_real;
pub mod model_endpoint;
pub mod panes;
pub mod rogue;
pub mod schema;
pub mod webdriver;
pub mod webhook;

use regex::Regex;
use std::collections::BTreeMap;

/// Replaces every UUID with `#n`, numbered by first appearance, so a snapshot reads as a
/// story and does not churn when id minting changes order.
pub fn redact_ids(text: &str) -> String {
    let re = match Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}") {
        Ok(re) => re,
        Err(e) => panic!("the UUID pattern is a valid regex: {e}"),
    };
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    re.replace_all(text, |c: &regex::Captures<'_>| {
        let n = names.len() + 1;
        let id = names.entry(c[0].to_string()).or_insert(n);
        format!("#{id}")
    })
    .into_owned()
}

/// Runs `f` on a current-thread runtime inside a `LocalSet` (the driver loop is not `Send`),
/// failing after `secs` so a hang fails a test instead of stalling CI.
pub fn local_scenario<F: std::future::Future<Output = ()>>(secs: u64, f: F) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("a tokio runtime: {e}"),
    };
    let local = tokio::task::LocalSet::new();
    let limit = std::time::Duration::from_secs(secs);
    let bounded = async { tokio::time::timeout(limit, f).await };
    if local.block_on(&rt, bounded).is_err() {
        panic!("scenario did not finish within {secs} s");
    }
}

/// Runs real git in `dir` as a test's own user would (a fixed identity), asserting it worked;
/// returns its trimmed stdout.
pub fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .unwrap_or_else(|e| panic!("git: {e}"));
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_numbered_by_first_appearance() {
        let a = "11111111-2222-4333-8444-555555555555";
        let b = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee";
        assert_eq!(
            redact_ids(&format!("{b} then {a} then {b}")),
            "#1 then #2 then #1"
        );
    }
}
