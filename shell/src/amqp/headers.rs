//! The envelope's header map as an AMQP field table, both ways (ch. 10 §4). Ours are strings,
//! 64-bit integers and byte arrays; what a peer or the broker sends is checked, never trusted.

use fleet_core::envelope::{HeaderValue, Headers};
use lapin::types::{AMQPValue, FieldTable, ShortString};

/// A header the shell refuses before the core ever sees the delivery.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("header {name:?} has type {kind}, which fleetd never sends")]
    WrongType { name: String, kind: &'static str },
    #[error("header {name:?} is not valid UTF-8")]
    NotUtf8 { name: String },
    #[error("header name of {0} bytes is longer than AMQP allows (255)")]
    NameTooLong(usize),
}

/// Headers → field table. Fails only on a name longer than a short string.
pub fn to_table(headers: &Headers) -> Result<FieldTable, HeaderError> {
    let mut t = FieldTable::default();
    for (name, value) in headers {
        let key = ShortString::try_new(name.as_str())
            .map_err(|_| HeaderError::NameTooLong(name.len()))?;
        let v = match value {
            HeaderValue::Str(s) => AMQPValue::LongString(s.as_str().into()),
            HeaderValue::Int(i) => AMQPValue::LongLongInt(*i),
            HeaderValue::Bytes(b) => AMQPValue::ByteArray(b.clone().into()),
        };
        t.insert(key, v);
    }
    Ok(t)
}

/// Field table → headers. Integers of any width are accepted (clients differ in what they
/// send); booleans, floats, tables, arrays and the rest are refused by name. Headers starting
/// with `x-` are the broker's (`x-death`, `x-first-death-reason`, …): kept when they are a
/// string, dropped otherwise, since fleetd never sets one.
pub fn from_table(table: Option<&FieldTable>) -> Result<Headers, HeaderError> {
    let mut h = Headers::new();
    let Some(table) = table else { return Ok(h) };
    for (name, value) in table.inner() {
        let name = name.as_str();
        let broker = name.starts_with("x-");
        let v = match value {
            AMQPValue::LongString(s) => match std::str::from_utf8(s.as_bytes()) {
                Ok(s) => HeaderValue::Str(s.to_string()),
                Err(_) if broker => continue,
                Err(_) => return Err(HeaderError::NotUtf8 { name: name.into() }),
            },
            AMQPValue::ShortString(s) => HeaderValue::Str(s.as_str().to_string()),
            AMQPValue::ShortShortInt(i) => HeaderValue::Int(i64::from(*i)),
            AMQPValue::ShortShortUInt(i) => HeaderValue::Int(i64::from(*i)),
            AMQPValue::ShortInt(i) => HeaderValue::Int(i64::from(*i)),
            AMQPValue::ShortUInt(i) => HeaderValue::Int(i64::from(*i)),
            AMQPValue::LongInt(i) => HeaderValue::Int(i64::from(*i)),
            AMQPValue::LongUInt(i) => HeaderValue::Int(i64::from(*i)),
            AMQPValue::LongLongInt(i) => HeaderValue::Int(*i),
            AMQPValue::ByteArray(b) => HeaderValue::Bytes(b.as_slice().to_vec()),
            _ if broker => continue,
            other => {
                return Err(HeaderError::WrongType {
                    name: name.into(),
                    kind: kind_name(other),
                })
            }
        };
        h.insert(name.to_string(), v);
    }
    Ok(h)
}

fn kind_name(v: &AMQPValue) -> &'static str {
    match v {
        AMQPValue::Boolean(_) => "boolean",
        AMQPValue::Float(_) | AMQPValue::Double(_) => "float",
        AMQPValue::DecimalValue(_) => "decimal",
        AMQPValue::FieldArray(_) => "array",
        AMQPValue::Timestamp(_) => "timestamp",
        AMQPValue::FieldTable(_) => "table",
        AMQPValue::Void => "void",
        _ => "integer or string",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Headers {
        let mut h = Headers::new();
        h.insert("kind".into(), HeaderValue::Str("SEND".into()));
        h.insert("ts".into(), HeaderValue::Int(-5));
        h.insert("sig".into(), HeaderValue::Bytes(vec![0, 255, 7]));
        h
    }

    #[test]
    fn our_headers_survive_the_round_trip() {
        let t = to_table(&sample()).expect("short names");
        assert_eq!(from_table(Some(&t)), Ok(sample()));
    }

    #[test]
    fn narrower_integers_and_short_strings_are_accepted() {
        let mut t = FieldTable::default();
        t.insert("ts".into(), AMQPValue::LongInt(42));
        t.insert("kind".into(), AMQPValue::ShortString("REPLY".into()));
        let h = from_table(Some(&t)).expect("accepted");
        assert_eq!(h.get("ts"), Some(&HeaderValue::Int(42)));
        assert_eq!(h.get("kind"), Some(&HeaderValue::Str("REPLY".into())));
    }

    #[test]
    fn a_wrong_type_is_refused_by_name() {
        let mut t = FieldTable::default();
        t.insert("expiresAt".into(), AMQPValue::Boolean(true));
        assert_eq!(
            from_table(Some(&t)),
            Err(HeaderError::WrongType {
                name: "expiresAt".into(),
                kind: "boolean"
            })
        );
        let mut t = FieldTable::default();
        t.insert(
            "from".into(),
            AMQPValue::LongString(vec![0xff, 0xfe].into()),
        );
        assert_eq!(
            from_table(Some(&t)),
            Err(HeaderError::NotUtf8 {
                name: "from".into()
            })
        );
    }

    #[test]
    fn broker_annotations_are_kept_as_strings_or_dropped() {
        let mut t = FieldTable::default();
        t.insert("x-death".into(), AMQPValue::FieldArray(Default::default()));
        t.insert(
            "x-first-death-reason".into(),
            AMQPValue::LongString("rejected".into()),
        );
        let h = from_table(Some(&t)).expect("broker headers never refuse a delivery");
        assert_eq!(h.len(), 1);
        assert_eq!(
            h.get("x-first-death-reason"),
            Some(&HeaderValue::Str("rejected".into()))
        );
    }

    #[test]
    fn an_overlong_name_is_an_error_not_a_panic() {
        let mut h = Headers::new();
        h.insert("n".repeat(300), HeaderValue::Int(1));
        assert_eq!(to_table(&h), Err(HeaderError::NameTooLong(300)));
        assert_eq!(from_table(None), Ok(Headers::new()));
    }
}
