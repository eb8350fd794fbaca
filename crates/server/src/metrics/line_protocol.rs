//! Influx line protocol: `measurement[,tag=value...] field=value[,field=value...]
//! [timestamp]`, with InfluxDB's escapes (`\,` `\ ` in measurements; `\,` `\=` `\ ` in
//! tag keys, tag values and field keys; `\"` `\\` in string fields) and value types
//! (floats, `i` integers, `u` unsigned, booleans, quoted strings). Testable without a
//! socket.

use std::borrow::Cow;

/// A field value.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    /// A float (`1`, `1.5`, `-2e3`).
    Float(f64),
    /// A signed integer (`12i`).
    Int(i64),
    /// An unsigned integer (`12u`).
    UInt(u64),
    /// A boolean (`t`, `true`, `F`, ...).
    Bool(bool),
    /// A string (`"text"`).
    Str(String),
}

/// One parsed line.
#[derive(Debug, Clone, PartialEq)]
pub struct Line<'a> {
    /// The measurement.
    pub measurement: Cow<'a, str>,
    /// The tags, as given.
    pub tags: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    /// The fields, at least one.
    pub fields: Vec<(Cow<'a, str>, FieldValue)>,
    /// The timestamp in the request's precision, if given.
    pub timestamp: Option<i64>,
}

/// A timestamp precision (`precision=` of the write APIs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// Nanoseconds (the default).
    Nanos,
    /// Microseconds.
    Micros,
    /// Milliseconds.
    Millis,
    /// Seconds.
    Seconds,
    /// Minutes (v1 only).
    Minutes,
    /// Hours (v1 only).
    Hours,
}

impl Precision {
    /// Parses `precision`: `ns`/`n`, `us`/`u`/`µ`, `ms`, `s`, and for v1 `m`, `h`.
    pub fn parse(text: &str, v1: bool) -> Option<Precision> {
        Some(match text {
            "" | "ns" | "n" => Precision::Nanos,
            "us" | "u" | "µ" => Precision::Micros,
            "ms" => Precision::Millis,
            "s" => Precision::Seconds,
            "m" if v1 => Precision::Minutes,
            "h" if v1 => Precision::Hours,
            _ => return None,
        })
    }

    /// `t` in this precision as epoch milliseconds (finer precisions truncated towards
    /// the past: Tidemark stores milliseconds), or `None` when out of range.
    pub fn to_millis(self, t: i64) -> Option<i64> {
        match self {
            Precision::Nanos => Some(t.div_euclid(1_000_000)),
            Precision::Micros => Some(t.div_euclid(1_000)),
            Precision::Millis => Some(t),
            Precision::Seconds => t.checked_mul(1_000),
            Precision::Minutes => t.checked_mul(60_000),
            Precision::Hours => t.checked_mul(3_600_000),
        }
    }
}

/// Splits `body` into lines, skipping blank lines and `#` comments: `(1-based line
/// number, text)`.
pub fn lines(body: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    body.split(|&b| b == b'\n')
        .enumerate()
        .map(|(i, l)| (i + 1, l.strip_suffix(b"\r").unwrap_or(l)))
        .filter(|(_, l)| {
            let t = l.trim_ascii_start();
            !t.is_empty() && !t.starts_with(b"#")
        })
}

/// Parses one line.
///
/// # Errors
/// The reason, InfluxDB-style (`missing fields`, `invalid number`, `invalid boolean`,
/// `unbalanced quotes`, `invalid timestamp`, `not valid UTF-8`, ...).
pub fn parse_line(line: &[u8]) -> Result<Line<'_>, String> {
    parse_line_keyed(line).map(|(l, _)| l)
}

/// As [`parse_line`], and the length in bytes of the line's series key: the measurement
/// and tags as sent (escapes included), which alone determine them.
///
/// # Errors
/// As [`parse_line`].
pub fn parse_line_keyed(line: &[u8]) -> Result<(Line<'_>, usize), String> {
    let text = std::str::from_utf8(line).map_err(|e| format!("not valid UTF-8: {e}"))?;
    let mut p = Cursor { s: text, at: 0 };
    let measurement = p.token(b", ")?;
    if measurement.is_empty() {
        return Err("missing measurement".to_owned());
    }
    let mut tags = Vec::new();
    while p.peek() == Some(',') {
        p.at += 1;
        let key = p.token(b"=, ")?;
        if p.peek() != Some('=') || key.is_empty() {
            return Err("missing tag key".to_owned());
        }
        p.at += 1;
        let value = p.token(b", =")?;
        if value.is_empty() || p.peek() == Some('=') {
            return Err(format!("missing tag value for tag key {key:?}"));
        }
        tags.push((key, value));
    }
    if p.peek() != Some(' ') {
        return Err("missing fields".to_owned());
    }
    let key_len = p.at;
    p.skip_spaces();
    let mut fields = Vec::new();
    loop {
        let key = p.token(b"=, ")?;
        if key.is_empty() || p.peek() != Some('=') {
            return Err("missing fields: expected field=value".to_owned());
        }
        p.at += 1;
        let value = p.field_value(&key)?;
        fields.push((key, value));
        match p.peek() {
            Some(',') => p.at += 1,
            _ => break,
        }
    }
    p.skip_spaces();
    let rest = p.rest().trim_end();
    let timestamp = if rest.is_empty() {
        None
    } else {
        Some(
            rest.parse::<i64>()
                .map_err(|_| format!("invalid timestamp {rest:?}: expected an integer"))?,
        )
    };
    Ok((
        Line {
            measurement,
            tags,
            fields,
            timestamp,
        },
        key_len,
    ))
}

struct Cursor<'a> {
    s: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<char> {
        self.s.get(self.at..).and_then(|r| r.chars().next())
    }

    fn rest(&self) -> &'a str {
        self.s.get(self.at..).unwrap_or("")
    }

    fn skip_spaces(&mut self) {
        while self.peek() == Some(' ') {
            self.at += 1;
        }
    }

    /// Reads up to an unescaped stop byte; `\` before a stop byte (or another `\`, a
    /// space or a comma) escapes it, before anything else it is literal. Bytes, not
    /// chars: every stop and escape is ASCII, and no byte of a multi-byte UTF-8
    /// sequence is.
    fn token(&mut self, stops: &[u8]) -> Result<Cow<'a, str>, String> {
        let rest = self.rest();
        let bytes = rest.as_bytes();
        let mut owned: Option<String> = None;
        let (mut i, mut from) = (0, 0);
        while let Some(&c) = bytes.get(i) {
            if c == b'\\'
                && let Some(&next) = bytes.get(i + 1)
                && (stops.contains(&next) || next == b'\\' || next == b' ' || next == b',')
            {
                let buf = owned.get_or_insert_with(String::new);
                buf.push_str(rest.get(from..i).unwrap_or(""));
                buf.push(char::from(next));
                i += 2;
                from = i;
                continue;
            }
            if stops.contains(&c) {
                break;
            }
            i += 1;
        }
        self.at += i;
        Ok(match owned {
            Some(mut s) => {
                s.push_str(rest.get(from..i).unwrap_or(""));
                Cow::Owned(s)
            }
            None => Cow::Borrowed(rest.get(..i).unwrap_or("")),
        })
    }

    fn field_value(&mut self, key: &str) -> Result<FieldValue, String> {
        if self.peek() == Some('"') {
            self.at += 1;
            let rest = self.rest();
            let mut out = String::new();
            let mut chars = rest.char_indices();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => match chars.next() {
                        Some((_, n @ ('"' | '\\'))) => out.push(n),
                        Some((_, n)) => {
                            out.push('\\');
                            out.push(n);
                        }
                        None => break,
                    },
                    '"' => {
                        self.at += i + 1;
                        return Ok(FieldValue::Str(out));
                    }
                    c => out.push(c),
                }
            }
            return Err(format!("unbalanced quotes in the value of field {key:?}"));
        }
        let rest = self.rest();
        let end = rest.find([',', ' ']).unwrap_or(rest.len());
        let raw = rest.get(..end).unwrap_or("");
        self.at += end;
        let bad = |what: &str| format!("invalid {what} {raw:?} for field {key:?}");
        if raw.is_empty() {
            return Err(format!("missing value for field {key:?}"));
        }
        match raw {
            "t" | "T" | "true" | "True" | "TRUE" => return Ok(FieldValue::Bool(true)),
            "f" | "F" | "false" | "False" | "FALSE" => return Ok(FieldValue::Bool(false)),
            _ => {}
        }
        if let Some(n) = raw.strip_suffix('i') {
            return n.parse().map(FieldValue::Int).map_err(|_| bad("integer"));
        }
        if let Some(n) = raw.strip_suffix('u') {
            return n
                .parse()
                .map(FieldValue::UInt)
                .map_err(|_| bad("unsigned integer"));
        }
        // Rust also parses `inf` and `NaN`, which line protocol does not allow.
        if !raw
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
        {
            return Err(bad("number"));
        }
        match raw.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(FieldValue::Float(v)),
            _ => Err(bad("number")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_types_escapes_and_timestamps() {
        let l = parse_line(
            br#"cpu\ load,host=a\,b,region=eu\ west usage=1.5,n=3i,u=4u,ok=t,msg="say \"hi\", ok" 1700000000000000000"#,
        )
        .unwrap();
        assert_eq!(l.measurement, "cpu load");
        assert_eq!(l.tags[0], ("host".into(), "a,b".into()));
        assert_eq!(l.tags[1].1, "eu west");
        assert_eq!(l.fields[0].1, FieldValue::Float(1.5));
        assert_eq!(l.fields[1].1, FieldValue::Int(3));
        assert_eq!(l.fields[2].1, FieldValue::UInt(4));
        assert_eq!(l.fields[3].1, FieldValue::Bool(true));
        assert_eq!(l.fields[4].1, FieldValue::Str("say \"hi\", ok".into()));
        assert_eq!(l.timestamp, Some(1_700_000_000_000_000_000));
        let l = parse_line(b"m v=-2e3").unwrap();
        assert_eq!(
            (l.fields[0].1.clone(), l.timestamp),
            (FieldValue::Float(-2000.0), None)
        );
        assert_eq!(
            Precision::Nanos.to_millis(1_700_000_000_123_456_789),
            Some(1_700_000_000_123)
        );
        assert_eq!(Precision::parse("h", false), None);
    }

    #[test]
    fn rejects_bad_lines_with_a_reason() {
        let bad: [(&[u8], &str); 9] = [
            (b"cpu", "missing fields"),
            (b"cpu,host usage=1", "tag"),
            (b"cpu usage=", "missing value"),
            (b"cpu usage=abc", "invalid number"),
            (b"cpu usage=NaN", "invalid number"),
            (b"cpu usage=inf", "invalid number"),
            (b"cpu usage=\"open", "unbalanced"),
            (b"cpu usage=1 12x", "invalid timestamp"),
            (b"cpu,h=\xff usage=1", "UTF-8"),
        ];
        for (line, needle) in bad {
            let e = parse_line(line).unwrap_err();
            assert!(e.contains(needle), "{e} lacks {needle}");
        }
        for cut in 0..40 {
            let line = br#"cpu,host=a usage=1.5,msg="x" 1700000000"#;
            let _ = parse_line(&line[..cut.min(line.len())]);
        }
    }

    #[test]
    fn skips_comments_and_blank_lines() {
        let body = b"# c\n\ncpu v=1\r\n  \nmem v=2";
        let got: Vec<usize> = lines(body).map(|(n, _)| n).collect();
        assert_eq!(got, vec![3, 5]);
    }
}
