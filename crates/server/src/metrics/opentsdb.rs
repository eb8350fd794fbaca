//! OpenTSDB's write protocols: the telnet-style line `put <metric> <timestamp> <value>
//! <tagk1=tagv1 ...>` and the JSON data points of `POST /api/put` (one object or an
//! array). Testable without a socket.
//!
//! Rules, from OpenTSDB 2.x's documentation of writing data:
//! - metric names, tag names and tag values take letters (Unicode included), digits and
//!   `-`, `_`, `.`, `/`; at least one tag is required; a tag name given twice is refused;
//! - the timestamp is in seconds, or in milliseconds when it does not fit 32 bits
//!   (13 digits) or is written `seconds.mmm`;
//! - the value is an integer or a float; NaN and infinities are refused.
//!
//! Mapping onto labels (docs/protocols.md): the metric becomes `__name__` sanitized to
//! the Prometheus rule as Graphite paths are (`sys.cpu.user` → `sys_cpu_user`), tag
//! names are sanitized to `[a-zA-Z0-9_]`, tag values kept. Values are stored as floats;
//! an integer beyond 2^53, which a float does not hold exactly, is refused rather than
//! rounded.

use std::borrow::Cow;

use serde_json::Value;

/// The largest integer every float between it and zero holds exactly (2^53).
const MAX_EXACT_INT: i64 = 1 << 53;
/// Millisecond timestamps above this (more than 13 digits) are refused, as OpenTSDB does.
const MAX_MS_TIMESTAMP: i64 = 9_999_999_999_999;

/// One data point.
#[derive(Debug, Clone, PartialEq)]
pub struct Point<'a> {
    /// The metric name as sent (`sys.cpu.user`).
    pub metric: Cow<'a, str>,
    /// The metric name sanitized (`sys_cpu_user`): the `__name__` label.
    pub name: String,
    /// Milliseconds since the epoch.
    pub ts_millis: i64,
    /// The value.
    pub value: f64,
    /// The tags as labels: sanitized names, values as sent.
    pub tags: Vec<(String, Cow<'a, str>)>,
}

/// A line of the telnet-style protocol.
#[derive(Debug, Clone, PartialEq)]
pub enum Command<'a> {
    /// `put ...`: a data point.
    Put(Point<'a>),
    /// `version`: the server answers one line (tcollector sends it to check the
    /// connection).
    Version,
    /// `exit`: the server closes the connection.
    Exit,
}

/// Parses one telnet-style line (without its newline; a trailing `\r` is ignored);
/// `Ok(None)` for a blank line.
///
/// # Errors
/// The reason: an unknown command, not UTF-8, and the reasons of a bad `put` (see the
/// module docs).
pub fn parse_command(line: &[u8]) -> Result<Option<Command<'_>>, String> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let text = std::str::from_utf8(line).map_err(|e| format!("not valid UTF-8: {e}"))?;
    let mut words = text.split([' ', '\t']).filter(|w| !w.is_empty());
    let Some(command) = words.next() else {
        return Ok(None);
    };
    match command {
        "put" => {}
        "version" => return Ok(Some(Command::Version)),
        "exit" => return Ok(Some(Command::Exit)),
        other => {
            let shown: String = other.chars().take(40).collect();
            return Err(format!(
                "unknown command {shown:?}: this server takes put, version and exit"
            ));
        }
    }
    let metric = words
        .next()
        .ok_or("not enough arguments: expected put <metric> <timestamp> <value> <tagk=tagv> ...")?;
    let ts = words.next().ok_or("not enough arguments: no timestamp")?;
    let value = words.next().ok_or("not enough arguments: no value")?;
    let ts_millis = parse_timestamp(ts)?;
    let value = parse_value(value)?;
    let mut tags = Vec::new();
    for tag in words {
        let (k, v) = tag
            .split_once('=')
            .ok_or_else(|| format!("invalid tag {tag:?}: expected tagk=tagv"))?;
        push_tag(&mut tags, k, Cow::Borrowed(v))?;
    }
    point(Cow::Borrowed(metric), ts_millis, value, tags).map(|p| Some(Command::Put(p)))
}

/// A data point of `POST /api/put`: `{"metric", "timestamp", "value", "tags"}`, the
/// timestamp a number or a numeric string, the value a number or a numeric string.
///
/// # Errors
/// The reason, OpenTSDB-style (`Missing metric`, `Unable to parse value to a number`,
/// ...).
pub fn point_from_json(v: &Value) -> Result<Point<'_>, String> {
    let obj = v.as_object().ok_or("a data point must be a JSON object")?;
    let metric = match obj.get("metric") {
        Some(Value::String(s)) => s.as_str(),
        None | Some(Value::Null) => return Err("Missing metric".to_owned()),
        Some(_) => return Err("metric must be a string".to_owned()),
    };
    let ts_millis = match obj.get("timestamp") {
        Some(Value::Number(n)) => match n.as_i64() {
            Some(t) => timestamp_millis(t)?,
            None => parse_timestamp(&n.to_string())?,
        },
        Some(Value::String(s)) => parse_timestamp(s)?,
        None | Some(Value::Null) => return Err("Missing timestamp".to_owned()),
        Some(_) => return Err("timestamp must be a number".to_owned()),
    };
    let value = match obj.get("value") {
        Some(Value::Number(n)) => parse_value(&n.to_string())?,
        Some(Value::String(s)) => parse_value(s)?,
        None | Some(Value::Null) => return Err("Missing value".to_owned()),
        Some(_) => return Err("Unable to parse value to a number".to_owned()),
    };
    let mut tags = Vec::new();
    match obj.get("tags") {
        Some(Value::Object(m)) => {
            for (k, tv) in m {
                let tv = tv
                    .as_str()
                    .ok_or_else(|| format!("tag {k:?}: the value must be a string"))?;
                push_tag(&mut tags, k, Cow::Borrowed(tv))?;
            }
        }
        None | Some(Value::Null) => {}
        Some(_) => return Err("tags must be an object".to_owned()),
    }
    point(Cow::Borrowed(metric), ts_millis, value, tags)
}

fn point<'a>(
    metric: Cow<'a, str>,
    ts_millis: i64,
    value: f64,
    tags: Vec<(String, Cow<'a, str>)>,
) -> Result<Point<'a>, String> {
    check_chars("metric name", &metric)?;
    if tags.is_empty() {
        return Err("Need at least one tag".to_owned());
    }
    let name = crate::metrics::otlp::sanitize(&metric, true);
    Ok(Point {
        metric,
        name,
        ts_millis,
        value,
        tags,
    })
}

fn push_tag<'a>(
    tags: &mut Vec<(String, Cow<'a, str>)>,
    k: &str,
    v: Cow<'a, str>,
) -> Result<(), String> {
    check_chars("tag name", k)?;
    check_chars(&format!("value of tag {k:?}"), &v)?;
    let label = crate::metrics::otlp::sanitize(k, false);
    if label == tidemark::METRIC_NAME_LABEL {
        return Err(format!("tag {k:?} is reserved: the metric is the name"));
    }
    if let Some((_, old)) = tags.iter().find(|(l, _)| *l == label) {
        if *old == v {
            return Ok(());
        }
        return Err(format!(
            "duplicate tag: {k}={v}, already named {label}={old}"
        ));
    }
    tags.push((label, v));
    Ok(())
}

/// OpenTSDB's character rule for names and tag values.
fn check_chars(what: &str, s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err(format!("{what} is empty"));
    }
    match s
        .chars()
        .find(|&c| !(c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')))
    {
        None => Ok(()),
        Some(c) => Err(format!(
            "invalid {what} {s:?}: {c:?} is not allowed (letters, digits, '-', '_', '.', '/')"
        )),
    }
}

/// A timestamp as text: seconds, milliseconds (13 digits), or `seconds.mmm`.
///
/// # Errors
/// Not a positive integer, a fraction of other than 3 digits, out of range.
pub fn parse_timestamp(text: &str) -> Result<i64, String> {
    let bad = || format!("invalid timestamp {text:?}");
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match text.split_once('.') {
        Some((secs, ms)) => {
            if !digits(secs) || !digits(ms) || ms.len() != 3 {
                return Err(format!(
                    "invalid timestamp {text:?}: milliseconds are written seconds.mmm"
                ));
            }
            let s: i64 = secs.parse().map_err(|_| bad())?;
            let m: i64 = ms.parse().map_err(|_| bad())?;
            if s >= 1 << 32 {
                return Err(bad());
            }
            s.checked_mul(1000)
                .and_then(|s| s.checked_add(m))
                .ok_or_else(bad)
        }
        None => {
            if !digits(text) {
                return Err(bad());
            }
            timestamp_millis(text.parse().map_err(|_| bad())?)
        }
    }
}

/// A numeric timestamp as milliseconds: seconds below 2^32, milliseconds from there.
///
/// # Errors
/// Zero or negative; more than 13 digits.
pub fn timestamp_millis(t: i64) -> Result<i64, String> {
    if t <= 0 {
        return Err(format!("invalid timestamp {t}: must be positive"));
    }
    if t < 1 << 32 {
        return Ok(t * 1000);
    }
    if t > MAX_MS_TIMESTAMP {
        return Err(format!(
            "invalid timestamp {t}: more than 13 digits of milliseconds"
        ));
    }
    Ok(t)
}

/// A value: an integer (exact up to 2^53) or a finite float.
///
/// # Errors
/// Not a number, NaN, an infinity, an integer a float does not hold exactly.
pub fn parse_value(text: &str) -> Result<f64, String> {
    let looks_integer = {
        let t = text.strip_prefix(['-', '+']).unwrap_or(text);
        !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())
    };
    if looks_integer {
        let i: i64 = text
            .parse()
            .map_err(|_| format!("integer value {text} is out of range"))?;
        if !(-MAX_EXACT_INT..=MAX_EXACT_INT).contains(&i) {
            return Err(format!(
                "integer value {text} is beyond 2^53: a float does not hold it exactly"
            ));
        }
        return Ok(i as f64);
    }
    let f: f64 = text
        .parse()
        .map_err(|_| format!("Unable to parse value to a number: {text:?}"))?;
    if !f.is_finite() {
        return Err(format!("value is NaN or Infinite: {text}"));
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(line: &str) -> Point<'_> {
        match parse_command(line.as_bytes()) {
            Ok(Some(Command::Put(p))) => p,
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn reads_put_lines_as_collectd_sends_them() {
        let p = put("put cpu.0.cpu.user 1796417578 121804 fqdn=test.host  source=collectd\r");
        assert_eq!(p.metric, "cpu.0.cpu.user");
        assert_eq!(p.name, "cpu_0_cpu_user");
        assert_eq!(p.ts_millis, 1_796_417_578_000);
        assert_eq!(p.value, 121_804.0);
        let tags: Vec<(&str, &str)> = p.tags.iter().map(|(k, v)| (k.as_str(), &**v)).collect();
        assert_eq!(tags, [("fqdn", "test.host"), ("source", "collectd")]);
        assert_eq!(put("put a 1 -2.5e3 k.x=v").tags[0].0, "k_x");
        assert_eq!(put("put a 1 -2.5e3 k=v").value, -2500.0);
        assert_eq!(parse_command(b"  ").unwrap(), None);
        assert_eq!(parse_command(b"version").unwrap(), Some(Command::Version));
        assert_eq!(parse_command(b"exit").unwrap(), Some(Command::Exit));
        // A tag repeated with its own value is one tag.
        assert_eq!(put("put a 1 1 k=v k=v").tags.len(), 1);
    }

    #[test]
    fn timestamps_are_seconds_or_milliseconds() {
        assert_eq!(parse_timestamp("1356998400").unwrap(), 1_356_998_400_000);
        assert_eq!(parse_timestamp("1356998400500").unwrap(), 1_356_998_400_500);
        assert_eq!(
            parse_timestamp("1356998400.500").unwrap(),
            1_356_998_400_500
        );
        for bad in [
            "0",
            "-1",
            "x",
            "1356998400.5",
            "13569984005000",
            "1.",
            ".500",
            "",
        ] {
            assert!(parse_timestamp(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn values_are_exact_or_refused() {
        assert_eq!(parse_value("42").unwrap(), 42.0);
        assert_eq!(
            parse_value("-9007199254740992").unwrap(),
            -9_007_199_254_740_992.0
        );
        for (bad, why) in [
            ("9007199254740993", "2^53"),
            ("99999999999999999999", "out of range"),
            ("NaN", "NaN or Infinite"),
            ("inf", "NaN or Infinite"),
            ("1x", "Unable to parse"),
        ] {
            let e = parse_value(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn refuses_malformed_puts_with_a_reason() {
        for (line, why) in [
            ("get a 1 1 k=v", "unknown command"),
            ("put", "not enough arguments"),
            ("put a 1 1", "at least one tag"),
            ("put a 1 x k=v", "Unable to parse"),
            ("put a x 1 k=v", "invalid timestamp"),
            ("put a 1 1 k", "expected tagk=tagv"),
            ("put a 1 1 k=", "is empty"),
            ("put a 1 1 k=v k=w", "duplicate tag"),
            ("put a 1 1 k.x=v k_x=w", "duplicate tag"),
            ("put a%b 1 1 k=v", "not allowed"),
            ("put a 1 1 k=v:w", "not allowed"),
            ("put a 1 1 __name__=v", "reserved"),
        ] {
            let e = parse_command(line.as_bytes()).unwrap_err();
            assert!(e.contains(why), "{line}: {e}");
        }
    }

    #[test]
    fn reads_json_points() {
        let v: Value = serde_json::from_str(
            r#"{"metric":"sys.cpu.nice","timestamp":1346846400,"value":"18","tags":{"host":"web01","dc":"lga"}}"#,
        )
        .unwrap();
        let p = point_from_json(&v).unwrap();
        assert_eq!(
            (p.name.as_str(), p.ts_millis, p.value),
            ("sys_cpu_nice", 1_346_846_400_000, 18.0)
        );
        assert_eq!(p.tags.len(), 2);
        for (body, why) in [
            (
                r#"{"timestamp":1,"value":1,"tags":{"a":"b"}}"#,
                "Missing metric",
            ),
            (
                r#"{"metric":"m","value":1,"tags":{"a":"b"}}"#,
                "Missing timestamp",
            ),
            (
                r#"{"metric":"m","timestamp":1,"tags":{"a":"b"}}"#,
                "Missing value",
            ),
            (
                r#"{"metric":"m","timestamp":1,"value":"NaN","tags":{"a":"b"}}"#,
                "NaN",
            ),
            (
                r#"{"metric":"m","timestamp":1,"value":1}"#,
                "at least one tag",
            ),
            (
                r#"{"metric":"m","timestamp":1.5,"value":1,"tags":{"a":"b"}}"#,
                "timestamp",
            ),
            (r#"[1]"#, "JSON object"),
        ] {
            let v: Value = serde_json::from_str(body).unwrap();
            let e = point_from_json(&v).unwrap_err();
            assert!(e.contains(why), "{body}: {e}");
        }
    }
}
