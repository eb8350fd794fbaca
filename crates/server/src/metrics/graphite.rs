//! The Graphite plaintext protocol (carbon's "line" receiver): one sample a line,
//! `path value timestamp`, fields separated by spaces or tabs; Graphite 1.1 tagged series
//! as `path;tag1=value1;tag2=value2`. Testable without a socket.
//!
//! Mapping onto labels (docs/protocols.md):
//! - the path becomes `__name__`, sanitized to the Prometheus metric-name rule: repeated
//!   dots collapse into one and leading and trailing dots go (VictoriaMetrics'
//!   `-graphite.sanitizeMetricName`), then every character outside `[a-zA-Z0-9_:]`,
//!   dots included, becomes `_` and a leading digit gets a `_` in front
//!   (`collectd.host-1.cpu-0.cpu-idle` → `collectd_host_1_cpu_0_cpu_idle`);
//! - each tag becomes a label, its name sanitized to `[a-zA-Z0-9_]` the same way, its
//!   value kept as sent;
//! - the value is a float (`nan` and `inf` included, as carbon's `float()` reads them);
//! - the timestamp is in seconds, possibly fractional (kept to the millisecond,
//!   truncated); a line without one, or with `-1`, takes the server's time.

use std::borrow::Cow;

/// One parsed line.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphiteLine<'a> {
    /// The path as sent, tags excluded (`foo.bar`).
    pub path: &'a str,
    /// The metric name: the path sanitized (see the module docs).
    pub name: String,
    /// The tags as labels: sanitized names, values as sent.
    pub tags: Vec<(String, Cow<'a, str>)>,
    /// The value.
    pub value: f64,
    /// Milliseconds since the epoch; `None` for "now" (no timestamp, or `-1`).
    pub ts_millis: Option<i64>,
}

/// The length in bytes of a line's series key: the path and its tags, as sent, which
/// alone determine the series (for a cache of resolved series).
pub fn series_key(line: &[u8]) -> &[u8] {
    let end = line
        .iter()
        .position(|&b| b == b' ' || b == b'\t')
        .unwrap_or(line.len());
    line.get(..end).unwrap_or(line)
}

/// Parses one line (without its newline; a trailing `\r` is ignored).
///
/// # Errors
/// The reason: not UTF-8, fields missing or extra, an empty path or tag, a tag without
/// `=`, a tag named `__name__`, a value that is not a number, a timestamp that is not a
/// non-negative number of seconds.
pub fn parse_line(line: &[u8]) -> Result<GraphiteLine<'_>, String> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let text = std::str::from_utf8(line).map_err(|e| format!("not valid UTF-8: {e}"))?;
    let mut fields = text.split([' ', '\t']).filter(|f| !f.is_empty());
    let series = fields.next().ok_or("empty line")?;
    let value = fields
        .next()
        .ok_or("missing value: expected `path value timestamp`")?;
    let ts = fields.next();
    if fields.next().is_some() {
        return Err("more than three fields: expected `path value timestamp`".to_owned());
    }
    let mut parts = series.split(';');
    let path = parts.next().unwrap_or_default();
    let name = sanitize_path(path)?;
    let mut tags = Vec::new();
    for tag in parts {
        let (k, v) = tag
            .split_once('=')
            .ok_or_else(|| format!("tag {tag:?} has no '='"))?;
        if k.is_empty() || v.is_empty() {
            return Err(format!("tag {tag:?}: names and values must not be empty"));
        }
        if k.contains(['!', '^']) {
            return Err(format!("tag name {k:?}: '!' and '^' are not allowed"));
        }
        if v.starts_with('~') {
            return Err(format!("tag {k:?}: a value must not start with '~'"));
        }
        let label = crate::metrics::otlp::sanitize(k, false);
        if label == tidemark::METRIC_NAME_LABEL {
            return Err(format!(
                "tag {k:?} is reserved: the path is the metric name"
            ));
        }
        tags.push((label, Cow::Borrowed(v)));
    }
    let value = parse_value(value)?;
    let ts_millis = match ts {
        None | Some("-1") => None,
        Some(t) => Some(parse_seconds(t)?),
    };
    Ok(GraphiteLine {
        path,
        name,
        tags,
        value,
        ts_millis,
    })
}

/// The metric name of a Graphite path (see the module docs).
///
/// # Errors
/// An empty path (or only dots).
pub fn sanitize_path(path: &str) -> Result<String, String> {
    let mut collapsed = String::with_capacity(path.len());
    for segment in path.split('.').filter(|s| !s.is_empty()) {
        if !collapsed.is_empty() {
            collapsed.push('.');
        }
        collapsed.push_str(segment);
    }
    if collapsed.is_empty() {
        return Err(format!("empty metric path {path:?}"));
    }
    if path.starts_with('~') {
        return Err(format!("metric path {path:?} must not start with '~'"));
    }
    Ok(crate::metrics::otlp::sanitize(&collapsed, true))
}

/// A sample value: a float as carbon reads it (`1`, `-2.5`, `1e3`, `nan`, `inf`).
fn parse_value(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .map_err(|_| format!("value {text:?} is not a number"))
}

/// Seconds since the epoch (`1700000000`, `1700000000.25`, `1.7e9`) as milliseconds,
/// truncated. Decimal text is read exactly (no float rounding of the milliseconds).
///
/// # Errors
/// Not a number, negative, or out of range.
pub fn parse_seconds(text: &str) -> Result<i64, String> {
    let bad = || format!("timestamp {text:?} is not a non-negative number of seconds");
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if !int.is_empty() && digits(int) && digits(frac) {
        let secs: i64 = int.parse().map_err(|_| bad())?;
        let mut ms = 0i64;
        for (i, b) in frac.bytes().take(3).enumerate() {
            let place = [100, 10, 1].get(i).copied().unwrap_or(0);
            ms += i64::from(b - b'0') * place;
        }
        return secs
            .checked_mul(1000)
            .and_then(|s| s.checked_add(ms))
            .ok_or_else(bad);
    }
    // Exponent forms, as carbon's `float()` reads them.
    let f: f64 = text.parse().map_err(|_| bad())?;
    let ms = (f * 1000.0).floor();
    if !(0.0..9.0e15).contains(&ms) {
        return Err(bad());
    }
    Ok(ms as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_plain_lines_and_sanitizes_the_path() {
        let l = parse_line(b"collectd.host-1.cpu-0.cpu-idle 99.5 1700000000").unwrap();
        assert_eq!(l.path, "collectd.host-1.cpu-0.cpu-idle");
        assert_eq!(l.name, "collectd_host_1_cpu_0_cpu_idle");
        assert!(l.tags.is_empty());
        assert_eq!(l.value, 99.5);
        assert_eq!(l.ts_millis, Some(1_700_000_000_000));
        // Redundant dots collapse, a leading digit is prefixed, ':' is kept.
        let l = parse_line(b"..9lives..a:b.\xc3\xa9t\xc3\xa9. 1 1\r").unwrap();
        assert_eq!(l.name, "_9lives_a:b__t_");
        // Tabs and repeated spaces separate fields.
        let l = parse_line(b"a.b\t 2  3").unwrap();
        assert_eq!((l.value, l.ts_millis), (2.0, Some(3000)));
    }

    #[test]
    fn reads_tagged_series() {
        let l = parse_line(b"disk.used;host=web-1;mount.point=/var;dc=eu 12 1700000000.5").unwrap();
        assert_eq!(l.name, "disk_used");
        let tags: Vec<(&str, &str)> = l.tags.iter().map(|(k, v)| (k.as_str(), &**v)).collect();
        assert_eq!(
            tags,
            [("host", "web-1"), ("mount_point", "/var"), ("dc", "eu")]
        );
        assert_eq!(l.ts_millis, Some(1_700_000_000_500));
        assert_eq!(
            series_key(b"disk.used;host=a 1 2"),
            b"disk.used;host=a".as_slice()
        );
    }

    #[test]
    fn timestamps_are_seconds_possibly_fractional_or_now() {
        assert_eq!(
            parse_seconds("1700000000.123456").unwrap(),
            1_700_000_000_123
        );
        assert_eq!(parse_seconds("1700000000.1").unwrap(), 1_700_000_000_100);
        assert_eq!(parse_seconds("1.7e9").unwrap(), 1_700_000_000_000);
        assert_eq!(parse_line(b"a 1").unwrap().ts_millis, None);
        assert_eq!(parse_line(b"a 1 -1").unwrap().ts_millis, None);
        for bad in ["-5", "x", "1.2.3", "", "inf", "99999999999999999999"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn values_are_floats_as_carbon_reads_them() {
        assert!(parse_line(b"a nan 1").unwrap().value.is_nan());
        assert_eq!(parse_line(b"a -inf 1").unwrap().value, f64::NEG_INFINITY);
        assert_eq!(parse_line(b"a 1e3 1").unwrap().value, 1000.0);
    }

    #[test]
    fn refuses_malformed_lines_with_a_reason() {
        for (line, why) in [
            (&b""[..], "empty"),
            (b"a", "missing value"),
            (b"a 1 2 3", "more than three"),
            (b"a x 2", "not a number"),
            (b"a 1 yesterday", "timestamp"),
            (b"... 1 2", "empty metric path"),
            (b"a;host 1 2", "no '='"),
            (b"a;host= 1 2", "must not be empty"),
            (b"a;=v 1 2", "must not be empty"),
            (b"a;__name__=x 1 2", "reserved"),
            (b"a;k=~v 1 2", "'~'"),
            (b"a;k!=v 1 2", "'!'"),
            (b"a\xff 1 2", "UTF-8"),
        ] {
            let e = parse_line(line).unwrap_err();
            assert!(e.contains(why), "{:?}: {e}", String::from_utf8_lossy(line));
        }
    }
}
