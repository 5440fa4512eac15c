use super::{assert_primary_clean, cross_site, DaemonError};

#[test]
fn the_daemon_refuses_an_environment_only_a_member_may_have() {
    assert!(assert_primary_clean([("PATH", "/usr/bin"), ("HOME", "/root")]).is_ok());
    for var in ["ANTHROPIC_BASE_URL", "FLEET_MCP_TOKEN", "FLEET_GID"] {
        let r = assert_primary_clean([("PATH", "/usr/bin"), (var, "x")]);
        assert!(
            matches!(&r, Err(DaemonError::Unclean { var: v, .. }) if *v == var),
            "{var}: {r:?}"
        );
    }
}

#[test]
fn only_this_origin_or_no_browser_at_all_is_answered() {
    let host = "127.0.0.1:8765";
    assert_eq!(cross_site(host, None, None), None, "curl, an MCP client");
    assert_eq!(
        cross_site(host, Some("http://127.0.0.1:8765"), Some("same-origin")),
        None
    );
    assert_eq!(
        cross_site(host, None, Some("none")),
        None,
        "typed into the address bar"
    );
    for (origin, site) in [
        (Some("http://evil.example"), Some("cross-site")),
        (Some("http://127.0.0.1:3000"), Some("same-site")),
        (Some("http://127.0.0.1:3000"), None),
        (Some("null"), None),
        (None, Some("cross-site")),
        (None, Some("same-site")),
    ] {
        assert!(
            cross_site(host, origin, site).is_some(),
            "{origin:?} {site:?}"
        );
    }
}
