//! `fleetd ctl tail`: the flows in flight followed to their end, or the audit file as it grows.

use super::*;

/// One line per change of a delegation seen in the gateway's overview.
pub(super) async fn tail_flows(
    c: &Client,
    flow: Option<String>,
    json: bool,
    every: Duration,
) -> Result<Exit, CtlError> {
    let mut last: std::collections::BTreeMap<String, String> = Default::default();
    let mut seen_flow = false;
    loop {
        let v = c.get("/overview").await?;
        let mut now: std::collections::BTreeMap<String, String> = Default::default();
        for d in v["delegations"].as_array().into_iter().flatten() {
            let id = flow_of(d);
            let ticket = text(&d["ticket"]);
            // A flow is followed by its tickets once found: an ended ticket no longer shows
            // the trace or msg it was found by, and an answer's continuation has a new msg.
            let matches = last.contains_key(&ticket)
                || flow
                    .as_ref()
                    .is_none_or(|f| *f == id || *f == ticket || d["msg"] == f.as_str());
            if !matches {
                continue;
            }
            seen_flow = true;
            let state = format!("{} {}", text(&d["phase"]), text(&d["outcome"]));
            if last.get(&ticket) != Some(&state) {
                if json {
                    out::println_json(&serde_json::to_string(d).unwrap_or_default());
                } else {
                    let q = d["question"]
                        .as_str()
                        .map(|q| format!(" — {q}"))
                        .unwrap_or_default();
                    out::println(&format!(
                        "{} {} → {} {}{q}",
                        id,
                        text(&d["lead"]),
                        text(&d["target"]),
                        state.trim_end()
                    ));
                }
            }
            now.insert(ticket, state);
        }
        for gone in last.keys().filter(|t| !now.contains_key(*t)) {
            if !json {
                out::println(&format!("{gone} ended"));
            }
        }
        let _ = std::io::stdout().flush();
        if let Some(f) = &flow {
            let done = now.values().all(|s| s.starts_with("DONE"));
            if seen_flow && (now.is_empty() || done) {
                return Ok(Exit::Ok);
            }
            if !seen_flow {
                return Err(CtlError::Refused {
                    status: 404,
                    code: "not_found".into(),
                    message: format!("no delegation of flow {f} on this gateway"),
                });
            }
        }
        last = now;
        tokio::time::sleep(every).await;
    }
}

/// Follows an audit file from its end, one decision per line.
pub(super) async fn tail_audit(
    path: &std::path::Path,
    json: bool,
    every: Duration,
) -> Result<Exit, CtlError> {
    use tokio::io::{AsyncBufReadExt, AsyncSeekExt};
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| CtlError::Usage(format!("{}: {e}", path.display())))?;
    let mut reader = tokio::io::BufReader::new(file);
    reader
        .seek(std::io::SeekFrom::End(0))
        .await
        .map_err(|e| CtlError::Usage(format!("{}: {e}", path.display())))?;
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader
            .read_line(&mut line)
            .await
            .map_err(|e| CtlError::Usage(format!("{}: {e}", path.display())))?;
        if n == 0 {
            tokio::time::sleep(every).await;
            continue;
        }
        if json {
            out::println_json(line.trim_end());
        } else {
            match serde_json::from_str::<Value>(&line) {
                Ok(a) => out::println(&format!(
                    "{} {} {} {}{}",
                    if a["allowed"] == true {
                        "allow"
                    } else {
                        "DENY "
                    },
                    text(&a["role"]),
                    text(&a["caller"]),
                    text(&a["action"]),
                    a["target"]
                        .as_str()
                        .map(|t| format!(" {t}"))
                        .unwrap_or_default()
                )),
                Err(_) => out::print(&line),
            }
        }
        let _ = std::io::stdout().flush();
    }
}
