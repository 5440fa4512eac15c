//! The operators' dashboard at `/ui`: one HTML page, its script and its style, embedded in
//! the binary (no build step, nothing fetched). The page holds no data: it reads
//! `GET /members` and `GET /overview` with the caller's own token, so it shows exactly what
//! that caller may read and offers only the actions `overview.may` lists.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("../ui/index.html");
const SCRIPT: &str = include_str!("../ui/app.js");
const STYLE: &str = include_str!("../ui/app.css");

/// Only this origin's own script and style; no frames of it anywhere; no referrer leaks.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

fn page(content_type: &'static str, body: &'static str) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// The dashboard: the fleet-wide roster by host, delegations in flight, held results, each
/// host's broker link and dead letters. It asks for a token (or takes `#token=` once).
#[utoipa::path(get, path = "/ui", tag = "ops",
    responses((status = 200, description = "the dashboard page (text/html); it needs no token, the data it reads does", content_type = "text/html")))]
pub async fn index() -> Response {
    page("text/html; charset=utf-8", INDEX)
}

/// The dashboard's script and style.
#[utoipa::path(get, path = "/ui/{asset}", tag = "ops",
    params(("asset" = String, Path, description = "`app.js` or `app.css`")),
    responses((status = 200, description = "the asset"), (status = 404, description = "no such asset")))]
pub async fn asset(Path(asset): Path<String>) -> Response {
    match asset.as_str() {
        "app.js" => page("text/javascript; charset=utf-8", SCRIPT),
        "app.css" => page("text/css; charset=utf-8", STYLE),
        _ => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}
