//! A small JSON Schema checker for herdr's API schema (`tests/data/herdr-api.schema.json`,
//! what herdr 0.8.2 prints for `herdr api schema --json`, protocol 20; draft 2020-12): `$ref`, `type`, `const`, `enum`, `required`, `properties`, `items`,
//! `additionalProperties` (as a schema), `anyOf`, `oneOf`, `minimum`, `maximum`, and the
//! `false` schema. Not checked: `format`, `pattern`, `maxProperties`, `propertyNames`. The
//! double's answers, and the client's requests, are checked with it.

use serde_json::Value;
use std::path::{Path, PathBuf};

/// herdr's API schema: `HERDR_SCHEMA` if set (another herdr's `herdr api schema --json`),
/// else the one this repository ships. The shipped one always parses, so the checks always run.
pub fn herdr_schema() -> Value {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/herdr-api.schema.json");
    let path = std::env::var_os("HERDR_SCHEMA").map_or(shipped, PathBuf::from);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading herdr's schema {}: {e}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("herdr's schema {} is not JSON: {e}", path.display()))
}

/// Checks `v` against the schema at `pointer` (e.g. `/schemas/success_response`) of `root`.
/// Returns the first violation, with the path to it.
pub fn check(root: &Value, pointer: &str, v: &Value) -> Result<(), String> {
    let schema = root
        .pointer(pointer)
        .ok_or_else(|| format!("no schema at {pointer}"))?;
    go(root, schema, v, "$")
}

fn type_ok(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        _ => true,
    }
}

fn go(root: &Value, s: &Value, v: &Value, at: &str) -> Result<(), String> {
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let target = root
            .pointer(r.trim_start_matches('#'))
            .ok_or_else(|| format!("{at}: unresolved $ref {r}"))?;
        go(root, target, v, at)?;
    }
    match s.get("type") {
        Some(Value::String(t)) if !type_ok(t, v) => {
            return Err(format!("{at}: expected {t}, got {v}"))
        }
        Some(Value::Array(ts)) if !ts.iter().filter_map(Value::as_str).any(|t| type_ok(t, v)) => {
            return Err(format!("{at}: expected one of {ts:?}, got {v}"))
        }
        _ => {}
    }
    if let Some(n) = v.as_f64() {
        if let Some(min) = s.get("minimum").and_then(Value::as_f64) {
            if n < min {
                return Err(format!("{at}: {n} is below the minimum {min}"));
            }
        }
        if let Some(max) = s.get("maximum").and_then(Value::as_f64) {
            if n > max {
                return Err(format!("{at}: {n} is above the maximum {max}"));
            }
        }
    }
    if s == &Value::Bool(false) {
        return Err(format!("{at}: the schema allows nothing here"));
    }
    if let Some(c) = s.get("const") {
        if c != v {
            return Err(format!("{at}: expected {c}, got {v}"));
        }
    }
    if let Some(Value::Array(e)) = s.get("enum") {
        if !e.contains(v) {
            return Err(format!("{at}: {v} is not one of {e:?}"));
        }
    }
    for (key, any) in [("anyOf", true), ("oneOf", false)] {
        if let Some(Value::Array(alts)) = s.get(key) {
            let ok: Vec<bool> = alts.iter().map(|a| go(root, a, v, at).is_ok()).collect();
            let n = ok.iter().filter(|b| **b).count();
            if n == 0 || (!any && n > 1) {
                return Err(format!("{at}: matches {n} of the {key} alternatives: {v}"));
            }
        }
    }
    if let Some(obj) = v.as_object() {
        if let Some(Value::Array(req)) = s.get("required") {
            for k in req.iter().filter_map(Value::as_str) {
                if !obj.contains_key(k) {
                    return Err(format!("{at}: missing required {k:?}"));
                }
            }
        }
        let props = s.get("properties").and_then(Value::as_object);
        for (k, val) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(ps) => go(root, ps, val, &format!("{at}.{k}"))?,
                None => {
                    if let Some(extra) = s.get("additionalProperties").filter(|e| e.is_object()) {
                        go(root, extra, val, &format!("{at}.{k}"))?;
                    }
                }
            }
        }
    }
    if let (Some(items), Some(arr)) = (s.get("items"), v.as_array()) {
        for (i, x) in arr.iter().enumerate() {
            go(root, items, x, &format!("{at}[{i}]"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_checker_catches_what_the_schema_forbids() {
        let root = herdr_schema();
        let good =
            json!({"id": "1", "result": {"type": "pong", "version": "0.8.0", "protocol": 20}});
        assert_eq!(check(&root, "/schemas/success_response", &good), Ok(()));
        let bad = json!({"id": "1", "result": {"type": "pong", "version": "0.8.0"}});
        assert!(check(&root, "/schemas/success_response", &bad).is_err());
        let wrong = json!({"id": "1", "result": {"type": "pong", "version": 8, "protocol": 20}});
        assert!(check(&root, "/schemas/success_response", &wrong).is_err());
    }
}
