//! `fleet-sim replay --timeline`: the multi-host trace regrouped per host, each line tagged
//! with the traceId of the message it is about, so one delegation can be followed from the
//! lead's host through the broker to the worker's host and back.

use std::collections::BTreeMap;

/// The `msg=` and `re=` ids on a line, in that order.
fn message_ids(line: &str) -> impl Iterator<Item = &str> {
    ["msg=", "re="].into_iter().filter_map(move |key| {
        let at = line.find(key)? + key.len();
        let id = line.get(at..at + 36)?;
        id.bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b'-')
            .then_some(id)
    })
}

/// The first `msg=`/`re=` id on a line, if any.
fn message_id(line: &str) -> Option<&str> {
    message_ids(line).next()
}

/// `lines` are `"<time> <host> <what>"`; `traces` maps msgIds to traceIds.
pub fn render(lines: &[String], traces: &BTreeMap<String, String>) -> String {
    let mut hosts: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for line in lines {
        let trimmed = line.trim_start();
        let mut parts = trimmed.splitn(3, ' ');
        let (Some(time), Some(host), Some(what)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let tag = match message_id(what) {
            Some(id) => match traces.get(id) {
                Some(t) => format!("[trace {}]", &t[..8.min(t.len())]),
                None => format!("[msg {}]", &id[..8]),
            },
            None => "[-]".to_string(),
        };
        hosts
            .entry(host)
            .or_default()
            .push(format!("{time:>9} {tag:<16} {what}"));
    }
    let mut out = String::new();
    for (host, lines) in hosts {
        out.push_str(&format!("== {host} ({} lines)\n", lines.len()));
        for l in lines {
            out.push_str(&l);
            out.push('\n');
        }
    }
    out
}

/// `fleet-sim replay --flow <id>`: the lines of one flow — every line about a message (its
/// `msg=`, or the `re=` it answers) whose traceId starts with `id` (or, for a local message
/// with no envelope, whose msgId does) — across every host, in simulation order.
pub fn flow<'a>(
    lines: impl IntoIterator<Item = &'a str>,
    traces: &BTreeMap<String, String>,
    id: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    for line in lines {
        let trimmed = line.trim_start();
        let mut parts = trimmed.splitn(3, ' ');
        let (Some(time), Some(host), Some(what)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        // A line is about its message and, for an answer or report, the message it names.
        let mut about =
            message_ids(what).flat_map(|m| [Some(m), traces.get(m).map(String::as_str)]);
        if about.any(|x| x.is_some_and(|x| x.starts_with(id))) {
            out.push(format!("{time:>9} {host:<6} {what}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_grouped_per_host_and_tagged_with_their_trace() {
        let m = "11111111-2222-4333-8444-555555555555";
        let lines = vec![
            format!("    1.000s gw0 broker publish#1 Msg key=w SEND msg={m} from=l"),
            format!("    1.100s gw1 inject w msg={m} text=\"brief\""),
            "    1.200s gw1 broker ack 1/1".to_string(),
            "    1.300s gw0 inject x msg=99999999-2222-4333-8444-555555555555 text=\"local\""
                .into(),
        ];
        let traces = BTreeMap::from([(m.to_string(), "abcdef0123456789".to_string())]);
        let t = render(&lines, &traces);
        assert_eq!(
            t,
            "== gw0 (2 lines)\n   1.000s [trace abcdef01] broker publish#1 Msg key=w SEND msg=11111111-2222-4333-8444-555555555555 from=l\n   1.300s [msg 99999999]   inject x msg=99999999-2222-4333-8444-555555555555 text=\"local\"\n== gw1 (2 lines)\n   1.100s [trace abcdef01] inject w msg=11111111-2222-4333-8444-555555555555 text=\"brief\"\n   1.200s [-]              broker ack 1/1\n"
        );
    }

    /// A flow is every host's lines about its trace, in order, and nothing else.
    #[test]
    fn a_flow_follows_one_trace_across_hosts() {
        let m = "11111111-2222-4333-8444-555555555555";
        let r = "66666666-2222-4333-8444-555555555555";
        let lines = [
            format!("    1.000s gw0 broker publish#1 Msg key=w SEND msg={m} from=l"),
            "    1.050s gw2 inject z msg=99999999-2222-4333-8444-555555555555 text=\"other\""
                .to_string(),
            format!("    1.100s gw1 inject w msg={m} text=\"brief\""),
            format!("    2.000s gw1 broker publish#4 Msg key=l REPLY msg={r} re={m}"),
        ];
        let traces = BTreeMap::from([
            (m.to_string(), "abcdef0123456789".to_string()),
            (r.to_string(), "0000000000000000".to_string()),
        ]);
        let f = flow(lines.iter().map(String::as_str), &traces, "abcdef01");
        assert_eq!(f.len(), 3);
        assert!(f[0].contains("gw0") && f[1].contains("gw1 ") && f[2].contains("REPLY"));
    }
}
