//! herdr's socket transport: one JSON line out, one JSON line back, one connection per request
//! (`PROTOCOL.md`, "Transport"). Every step is bounded; nothing herdr sends is trusted.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// herdr refuses requests over 1 MiB; answers (a 1,000-line read) stay well under this.
pub const MAX_RESPONSE: usize = 8 * 1024 * 1024;

/// Why a request got no result.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RpcError {
    /// The socket is not there or refused us: herdr is not running (or not at this path).
    #[error("herdr at {path}: {why}")]
    Unreachable { path: String, why: String },
    #[error("herdr did not answer {method} within {ms} ms")]
    Timeout { method: String, ms: u64 },
    /// herdr answered with an error (`pane_not_found`, `invalid_layout`, …).
    #[error("herdr refused {method}: {code}: {message}")]
    Herdr {
        method: String,
        code: String,
        message: String,
    },
    /// herdr does not know this method: a newer herdr dropped or renamed it.
    #[error("herdr does not know {method} ({message}): it speaks a newer protocol than fleetd was tested with, and this call cannot work with it; use a herdr of a tested protocol (`fleetd --version` lists them) or a fleetd that knows this one")]
    UnknownMethod { method: String, message: String },
    /// herdr answers, but speaks an older protocol than this client was tested with.
    #[error("herdr {version} speaks protocol {protocol}; fleetd needs {want} or newer")]
    Protocol {
        version: String,
        protocol: u32,
        want: u32,
    },
    /// The answer was not the protocol: not JSON, the wrong id, neither result nor error.
    #[error("herdr's answer to {method} is malformed: {why}")]
    Malformed { method: String, why: String },
}

impl RpcError {
    /// herdr's error code, when herdr itself refused.
    pub fn code(&self) -> Option<&str> {
        match self {
            RpcError::Herdr { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// A herdr socket and the bound on each request.
#[derive(Clone, Debug)]
pub struct Socket {
    pub path: PathBuf,
    pub timeout: Duration,
}

impl Socket {
    pub fn new(path: impl Into<PathBuf>, timeout: Duration) -> Self {
        Socket {
            path: path.into(),
            timeout,
        }
    }

    /// Sends one request and returns its `result` object.
    pub async fn call(&self, id: &str, method: &str, params: Value) -> Result<Value, RpcError> {
        let ms = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
        match tokio::time::timeout(self.timeout, self.exchange(id, method, params)).await {
            Ok(r) => r,
            Err(_) => Err(RpcError::Timeout {
                method: method.to_string(),
                ms,
            }),
        }
    }

    async fn exchange(&self, id: &str, method: &str, params: Value) -> Result<Value, RpcError> {
        let mut stream = connect(&self.path).await?;
        let mut line = serde_json::to_vec(&json!({"id": id, "method": method, "params": params}))
            .map_err(|e| malformed(method, format!("encoding the request: {e}")))?;
        line.push(b'\n');
        let unreachable = |e: std::io::Error| RpcError::Unreachable {
            path: self.path.display().to_string(),
            why: e.to_string(),
        };
        stream.write_all(&line).await.map_err(unreachable)?;
        let mut reader = BufReader::new(stream);
        let answer = read_line(&mut reader, method).await?;
        parse_answer(&answer, id, method)
    }
}

pub(crate) async fn connect(path: &Path) -> Result<UnixStream, RpcError> {
    UnixStream::connect(path)
        .await
        .map_err(|e| RpcError::Unreachable {
            path: path.display().to_string(),
            why: e.to_string(),
        })
}

fn malformed(method: &str, why: String) -> RpcError {
    RpcError::Malformed {
        method: method.to_string(),
        why,
    }
}

/// One newline-terminated line, at most `MAX_RESPONSE` bytes.
pub(crate) async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    method: &str,
) -> Result<Vec<u8>, RpcError> {
    let mut buf = Vec::new();
    loop {
        let chunk = r
            .fill_buf()
            .await
            .map_err(|e| malformed(method, format!("reading: {e}")))?;
        if chunk.is_empty() {
            return Err(malformed(
                method,
                "the connection closed without an answer".into(),
            ));
        }
        if let Some(i) = chunk.iter().position(|b| *b == b'\n') {
            buf.extend_from_slice(&chunk[..i]);
            r.consume(i + 1);
            return Ok(buf);
        }
        let n = chunk.len();
        buf.extend_from_slice(chunk);
        r.consume(n);
        if buf.len() > MAX_RESPONSE {
            return Err(malformed(
                method,
                format!("an answer over {MAX_RESPONSE} bytes"),
            ));
        }
    }
}

/// The `result` of a success line for request `id`, or the error it carries.
pub fn parse_answer(line: &[u8], id: &str, method: &str) -> Result<Value, RpcError> {
    let v: Value =
        serde_json::from_slice(line).map_err(|e| malformed(method, format!("not JSON: {e}")))?;
    let got = v.get("id").and_then(Value::as_str);
    // herdr answers a line it could not parse with id "".
    if let Some(err) = v
        .get("error")
        .filter(|_| got == Some(id) || got == Some(""))
    {
        let field = |k: &str| err.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        // herdr answers a method it does not know as an invalid request naming the variant.
        // herdr 0.8 and 0.9 say it so; a later one may name it.
        let unknown = (field("code") == "invalid_request"
            && field("message").contains("unknown variant"))
            || field("code") == "unknown_method";
        if unknown {
            return Err(RpcError::UnknownMethod {
                method: method.to_string(),
                message: field("message"),
            });
        }
        return Err(RpcError::Herdr {
            method: method.to_string(),
            code: field("code"),
            message: field("message"),
        });
    }
    if got != Some(id) {
        return Err(malformed(
            method,
            format!("answer for id {got:?}, asked {id:?}"),
        ));
    }
    match v.get("result") {
        Some(r) if r.is_object() => Ok(r.clone()),
        _ => Err(malformed(method, "no result object".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_line_names_herdrs_code() {
        let e = parse_answer(
            br#"{"id":"1","error":{"code":"pane_not_found","message":"no pane w1:p9"}}"#,
            "1",
            "pane.get",
        );
        assert_eq!(
            e.as_ref().map_err(RpcError::code),
            Err(Some("pane_not_found"))
        );
    }

    #[test]
    fn garbage_and_wrong_ids_are_malformed_not_panics() {
        for line in [
            &b"not json"[..],
            br#"{"id":"2","result":{"type":"pong"}}"#,
            br#"{"id":"1"}"#,
            br#"{"id":"1","result":7}"#,
            br#"[]"#,
        ] {
            let e = parse_answer(line, "1", "ping");
            assert!(matches!(e, Err(RpcError::Malformed { .. })), "{e:?}");
        }
        assert!(parse_answer(br#"{"id":"1","result":{"type":"pong"}}"#, "1", "ping").is_ok());
    }

    #[test]
    fn a_method_a_newer_herdr_does_not_know_is_named_as_such() {
        // What herdr answers for a method name it cannot parse (its schema test,
        // `unknown_method_is_rejected`).
        let e = parse_answer(
            br#"{"id":"1","error":{"code":"invalid_request","message":"unknown variant `pane.read`, expected one of `ping`"}}"#,
            "1",
            "pane.read",
        );
        match e {
            Err(RpcError::UnknownMethod { method, .. }) => assert_eq!(method, "pane.read"),
            other => panic!("{other:?}"),
        }
        // Any other invalid request stays herdr's own refusal.
        let e = parse_answer(
            br#"{"id":"1","error":{"code":"invalid_request","message":"missing field `pane_id`"}}"#,
            "1",
            "pane.get",
        );
        assert_eq!(
            e.as_ref().map_err(RpcError::code),
            Err(Some("invalid_request"))
        );
    }
}
