//! The HTTP face's guards around both faces: the Host and browser-origin checks, and the
//! caller resolved once per request.

use super::*;

/// Both faces on one axum router; every request's caller is resolved once, here.
pub fn http_router(
    app: App,
    allowed_hosts: Vec<String>,
    cancel: tokio_util::sync::CancellationToken,
) -> axum::Router {
    let (rest, _) = rest::router();
    let mcp = mcp::service(app.clone(), allowed_hosts.clone(), cancel.child_token());
    let hosts = Arc::new(allowed_hosts);
    rest.nest_service("/mcp", mcp)
        .layer(axum::middleware::from_fn_with_state(app.clone(), resolve))
        .layer(axum::middleware::from_fn(
            move |req: Request, next: Next| {
                let hosts = hosts.clone();
                async move { host_guard(&hosts, req, next).await }
            },
        ))
        .with_state(app)
}

/// The DNS-rebinding guard rmcp applies to `/mcp`, applied to every route: a browser page on
/// another name must not reach REST through this port either.
async fn host_guard(allowed: &[String], req: Request, next: Next) -> axum::response::Response {
    let host = req
        .headers()
        .get(axum::http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !host_allowed(allowed, host) {
        let body = serde_json::json!({
            "code": "host_not_allowed",
            "message": format!("Host {host:?} is not in gateway.allowed_hosts"),
        });
        return (axum::http::StatusCode::FORBIDDEN, axum::Json(body)).into_response();
    }
    let refused = {
        // A header that is there but not text is not taken for an absent one.
        let header = |name: &str| req.headers().get(name).map(|v| v.to_str().unwrap_or("?"));
        cross_site(host, header("origin"), header("sec-fetch-site"))
    };
    if let Some(why) = refused {
        let body = serde_json::json!({ "code": "cross_origin", "message": why });
        return (axum::http::StatusCode::FORBIDDEN, axum::Json(body)).into_response();
    }
    next.run(req).await
}

async fn resolve(State(app): State<App>, mut req: Request, next: Next) -> axum::response::Response {
    let header = req.headers().get(axum::http::header::AUTHORIZATION);
    let auth = match header.map(|v| v.to_str()) {
        None => None,
        Some(Ok(v)) => Some(v.to_string()),
        // A credential that cannot even be read is refused, never taken for none.
        Some(Err(_)) => Some(String::new()),
    };
    let peer = req
        .extensions()
        .get::<ConnectInfo<crate::conn_limit::Peer>>()
        .map(|c| c.0 .0);
    let caller = app.caller(auth.as_deref(), peer).await;
    if caller.refused {
        // A wrong credential is refused outright: never served as anonymous, never parsed on.
        let body = serde_json::json!({
            "code": "unauthenticated",
            "message": "the bearer token is neither a lead's nor a member's of this gateway",
        });
        return (axum::http::StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    }
    req.extensions_mut().insert(caller);
    next.run(req).await
}
