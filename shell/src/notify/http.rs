//! The sinks' HTTP client: hyper over rustls on ring with the system's roots, built for this
//! use only (no process-wide crypto provider, no redirects followed).

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as Hyper;
use std::sync::Arc;

#[derive(Clone, Debug)]
pub struct Client(Hyper<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>);

impl Client {
    /// A client for http and https URLs; https trusts the system's roots.
    pub fn new() -> Result<Client, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        let found = rustls_native_certs::load_native_certs();
        for why in &found.errors {
            tracing::warn!(%why, "a system root certificate could not be read");
        }
        let (added, _) = roots.add_parsable_certificates(found.certs);
        if added == 0 {
            tracing::warn!("no system root certificates: https notification sinks will fail");
        }
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        let executor = hyper_util::rt::TokioExecutor::new();
        Ok(Client(Hyper::builder(executor).build(https)))
    }

    /// POSTs `body` to `url` with `headers`; the status the receiver answered.
    pub async fn post(
        &self,
        url: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
    ) -> Result<hyper::StatusCode, String> {
        let mut req = hyper::Request::post(url);
        for (k, v) in headers {
            req = req.header(*k, v.as_str());
        }
        let req = req
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("{url}: {e}"))?;
        let resp = self.0.request(req).await.map_err(|e| {
            // hyper-util's error says "client error (Connect)"; its source says why.
            match std::error::Error::source(&e) {
                Some(s) => format!("{e}: {s}"),
                None => e.to_string(),
            }
        })?;
        Ok(resp.status())
    }
}

/// Whether `url` is an http(s) URL this client can POST to.
pub fn valid_url(url: &str) -> bool {
    url.parse::<hyper::Uri>()
        .is_ok_and(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some())
}
