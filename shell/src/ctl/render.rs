//! What `fleetd ctl` prints for each answer as text: tables and short reports, every value
//! from outside passed through the terminal-safe writer's cells.

use super::*;

pub(super) fn ago(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

pub(super) fn text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub(super) fn roster_table(v: &Value, now: u64) -> String {
    let mut t = Table::new([
        "HOST", "GID", "KIND", "STATUS", "HEALTH", "ROLE", "PROFILE", "OWNER", "AGE",
    ]);
    for r in v["rows"].as_array().into_iter().flatten() {
        let age = r["since"]
            .as_u64()
            .map(|s| ago(now.saturating_sub(s)))
            .unwrap_or_default();
        let mut status = text(&r["status"]);
        if r["busy"] == true {
            status.push('*');
        }
        if r["liveness"] == "unknown" {
            status.push('?');
        }
        t.row([
            text(&r["host"]),
            text(&r["gid"]),
            text(&r["kind"]),
            status,
            text(&r["health"]),
            text(&r["role"]),
            text(&r["profile"]),
            text(&r["owner"]),
            age,
        ]);
    }
    t.render()
}

pub(super) fn status_text(v: &Value) -> String {
    let view = &v["view"];
    let mut out = String::new();
    for k in [
        "gid",
        "host",
        "kind",
        "status",
        "busy",
        "ready",
        "health",
        "health_reason",
        "role",
        "profile",
        "owner",
        "queued",
        "in_turn",
    ] {
        if !view[k].is_null() {
            out.push_str(&format!("{k:<14}{}\n", text(&view[k])));
        }
    }
    out
}

pub(super) fn profiles_table(v: &Value) -> String {
    let mut t = Table::new([
        "HOST", "PROFILE", "KIND", "LOAD", "MAX", "WEIGHT", "COOLING",
    ]);
    for (host, h) in v["hosts"].as_object().into_iter().flatten() {
        for p in h["profiles"].as_array().into_iter().flatten() {
            match p {
                Value::String(name) => {
                    t.row([
                        host.clone(),
                        name.clone(),
                        "".into(),
                        "".into(),
                        "".into(),
                        "".into(),
                        "".into(),
                    ]);
                }
                p => t.row([
                    host.clone(),
                    text(&p["name"]),
                    text(&p["kind"]),
                    text(&p["load"]),
                    text(&p["maxLoad"]),
                    text(&p["weight"]),
                    text(&p["coolingUntil"]),
                ]),
            }
        }
    }
    t.render()
}

pub(super) fn overview_text(v: &Value) -> String {
    let mut out = String::new();
    let mut hosts = Table::new([
        "HOST",
        "LINK",
        "HEARD",
        "DELEGATIONS",
        "HELD",
        "DEAD LETTERS",
        "BROKER DROPS",
    ]);
    for h in v["hosts"].as_array().into_iter().flatten() {
        let ops = &h["ops"];
        hosts.row([
            text(&h["host"]),
            text(&h["link"]),
            h["heard_ms_ago"].as_u64().map(ago).unwrap_or_default(),
            text(&ops["delegations"]),
            text(&ops["held"]),
            text(&ops["dead_letters"]),
            text(&ops["broker_drops"]),
        ]);
    }
    out.push_str(&hosts.render());
    out.push('\n');
    out.push_str(&delegations_table(
        v["delegations"].as_array().map_or(&[][..], Vec::as_slice),
    ));
    out.push('\n');
    let mut held = Table::new(["HELD FROM", "FOR LEAD", "REPLIES", "BYTES", "OLDEST"]);
    for h in v["held"].as_array().into_iter().flatten() {
        held.row([
            text(&h["target"]),
            text(&h["lead"]),
            text(&h["count"]),
            text(&h["bytes"]),
            h["oldest_ms"].as_u64().map(ago).unwrap_or_default(),
        ]);
    }
    out.push_str(&held.render());
    out
}

pub(super) fn attention_text(v: &Value) -> String {
    let mut t = Table::new(["WAITING", "KIND", "MEMBER", "FOR", "TURN", "SUMMARY"]);
    for n in v["needs"].as_array().into_iter().flatten() {
        t.row([
            n["waiting_ms"].as_u64().map(ago).unwrap_or_default(),
            text(&n["kind"]),
            text(&n["member"]),
            text(&n["waits_on"]),
            text(&n["turn_id"]),
            text(&n["summary"]),
        ]);
    }
    let mut out = t.render();
    for e in v["elsewhere"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{} more waiting at {}\n",
            text(&e["waiting"]),
            text(&e["host"])
        ));
    }
    out
}

pub(super) fn tasks_table(v: &Value) -> String {
    let mut t = Table::new(["ID", "STATE", "ASSIGNEE", "DEPS", "TRIES", "TITLE", "WHY"]);
    for task in v["tasks"].as_array().into_iter().flatten() {
        let deps: Vec<String> = task["deps"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| format!("t-{}", text(d)))
            .collect();
        let mut state = text(&task["state"]);
        if let Some(o) = task["outcome"].as_str() {
            state = format!("{state} {o}");
        }
        t.row([
            format!("t-{}", text(&task["id"])),
            state,
            text(&task["assignee"]),
            deps.join(","),
            text(&task["attempts"]),
            text(&task["title"]),
            text(&task["why"]),
        ]);
    }
    t.render()
}

pub(super) fn task_text(v: &Value) -> String {
    let mut out = tasks_table(v);
    for task in v["tasks"].as_array().into_iter().flatten() {
        for (what, key) in [("brief", "brief"), ("result", "result")] {
            if let Some(s) = task[key].as_str() {
                out.push_str(&format!("\n{what}:\n{s}\n"));
            }
        }
    }
    out
}

pub(super) fn flow_of(d: &Value) -> String {
    [&d["trace"], &d["msg"], &d["ticket"]]
        .into_iter()
        .find_map(|v| v.as_str())
        .unwrap_or("")
        .to_string()
}

pub(super) fn delegations_table(ds: &[Value]) -> String {
    let mut t = Table::new([
        "FLOW", "TARGET", "LEAD", "HALF", "PHASE", "ENDS IN", "QUESTION",
    ]);
    for d in ds {
        let mut phase = text(&d["phase"]);
        if let Some(o) = d["outcome"].as_str() {
            phase = format!("{phase} {o}");
        }
        t.row([
            flow_of(d),
            text(&d["target"]),
            text(&d["lead"]),
            text(&d["half"]),
            phase,
            d["ends_in_ms"].as_u64().map(ago).unwrap_or_default(),
            text(&d["question"]),
        ]);
    }
    t.render()
}

pub(super) fn ticket_text(v: &Value) -> String {
    let mut out = String::new();
    match (v["phase"].as_str(), v["outcome"].as_str()) {
        (Some("ASKING"), _) | (_, Some("QUESTION")) => {
            out.push_str(&format!("QUESTION: {}\n", text(&v["question"])));
            let turn = [&v["turn_id"], &v["turnId"]]
                .into_iter()
                .find_map(|t| t.as_str())
                .unwrap_or("?");
            out.push_str(&format!(
                "answer with: fleetd ctl send <gid> '<answer>' --turn-id {turn}\n"
            ));
        }
        (_, Some(outcome)) => {
            out.push_str(outcome);
            out.push('\n');
            if let Some(body) = v["body"].as_str() {
                out.push_str(body);
                out.push('\n');
            }
        }
        (Some(phase), None) => {
            out.push_str(&format!("{phase} ticket {}\n", text(&v["ticket"])));
        }
        (None, None) => out.push_str(&format!("{v}\n")),
    }
    out
}

pub(super) fn replies_text(v: &Value) -> String {
    let mut out = String::new();
    for r in v["replies"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "— from {} —\n{}\n",
            text(&r["target"]),
            text(&r["content"])
        ));
    }
    if out.is_empty() {
        out.push_str("no replies held\n");
    }
    out
}
