//! Which requests are this gateway's own: the `Host` a request names, and whether a browser
//! made it for another site's page. Pure checks, shared by the config check and the guards.

/// Why a request a browser made for another site's page is refused, if it is one: its
/// `Sec-Fetch-Site` is not `same-origin` (or `none`, a user's own navigation), or its `Origin`
/// is not this very origin (`host`, port included: a page on another port of localhost is
/// another origin). Clients that are not browsers send neither header.
pub fn cross_site(host: &str, origin: Option<&str>, fetch_site: Option<&str>) -> Option<String> {
    if let Some(site) = fetch_site {
        if !matches!(site, "same-origin" | "none") {
            return Some(format!(
                "a {site} request from a browser page (Sec-Fetch-Site); fleetd answers only its own origin"
            ));
        }
    }
    if let Some(origin) = origin {
        let authority = origin
            .split_once("://")
            .map(|(_, rest)| rest.trim_end_matches('/'))
            .unwrap_or("");
        if authority.is_empty() || !authority.eq_ignore_ascii_case(host) {
            return Some(format!(
                "Origin {origin:?} is not this gateway's own ({host}); fleetd answers only its own origin"
            ));
        }
    }
    None
}

/// `host` (a `Host` header: name, `name:port`, `[v6]:port`) matches an entry given as a name
/// (any port) or as `name:port`.
pub fn host_allowed(allowed: &[String], host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(n, _)| n),
    };
    allowed.iter().any(|a| {
        a.eq_ignore_ascii_case(host) || a.trim_matches(['[', ']']).eq_ignore_ascii_case(name)
    })
}
