//! A webhook receiver on loopback (axum) for the notification tests: it records every request
//! with the headers fleetd's sinks set, and answers from a script of statuses.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the receiver got: each request's headers of interest and body, and what it answered.
#[derive(Clone, Debug)]
pub struct Got {
    pub delivery: Option<String>,
    pub timestamp: Option<String>,
    pub signature: Option<String>,
    pub title: Option<String>,
    pub body: Vec<u8>,
    pub answered: u16,
    /// When it came.
    pub at: std::time::Instant,
}

#[derive(Clone, Default)]
pub struct Receiver {
    got: Arc<Mutex<Vec<Got>>>,
    /// Statuses to answer, in order; 200 once they run out.
    script: Arc<Mutex<std::collections::VecDeque<u16>>>,
}

impl Receiver {
    pub async fn start(script: &[u16]) -> (Receiver, String) {
        let r = Receiver::default();
        r.script
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(script);
        let app = axum::Router::new()
            .route("/{*path}", axum::routing::post(take))
            .with_state(r.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        (r, format!("http://{addr}"))
    }

    pub fn got(&self) -> Vec<Got> {
        self.got.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// What it got once it has `n` requests, or after 4 s.
    pub async fn until(&self, n: usize) -> Vec<Got> {
        for _ in 0..200 {
            if self.got().len() >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.got()
    }
}

#[allow(clippy::disallowed_methods)] // when a request came, on the test's own clock
async fn take(
    State(r): State<Receiver>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> StatusCode {
    let h = |k: &str| {
        headers
            .get(k)
            .and_then(|v| v.to_str().ok())
            .map(String::from)
    };
    let answered = r
        .script
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .pop_front()
        .unwrap_or(200);
    r.got.lock().unwrap_or_else(|p| p.into_inner()).push(Got {
        delivery: h(fleetd::notify::send::DELIVERY_HEADER),
        timestamp: h(fleetd::notify::send::TIMESTAMP_HEADER),
        signature: h(fleetd::notify::send::SIGNATURE_HEADER),
        title: h("title"),
        body: body.to_vec(),
        answered,
        at: std::time::Instant::now(),
    });
    StatusCode::from_u16(answered).unwrap_or(StatusCode::OK)
}
