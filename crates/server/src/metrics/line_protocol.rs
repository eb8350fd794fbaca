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
    let mut rest = Some(body);
    std::iter::from_fn(move || {
        let r = rest?;
        match memchr::memchr(b'\n', r) {
            Some(at) => {
                rest = r.get(at + 1..);
                r.get(..at)
            }
            None => {
                rest = None;
                Some(r)
            }
        }
    })
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
    let measurement = p.token(COMMA | SPACE)?;
    if measurement.is_empty() {
        return Err("missing measurement".to_owned());
    }
    let mut tags = Vec::new();
    while p.peek() == Some(b',') {
        p.at += 1;
        let key = p.token(EQUALS | COMMA | SPACE)?;
        if p.peek() != Some(b'=') || key.is_empty() {
            return Err("missing tag key".to_owned());
        }
        p.at += 1;
        let value = p.token(COMMA | SPACE | EQUALS)?;
        if value.is_empty() || p.peek() == Some(b'=') {
            return Err(format!("missing tag value for tag key {key:?}"));
        }
        tags.push((key, value));
    }
    if p.peek() != Some(b' ') {
        return Err("missing fields".to_owned());
    }
    let key_len = p.at;
    let mut fields = Vec::new();
    let timestamp = parse_fields(&mut p, &mut fields)?;
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

/// The length of `line`'s series key (its measurement and tags as sent: everything
/// before the first space no backslash escapes), or `None` when it has no such space.
/// For a line that parses, this is the key [`parse_line_keyed`] gives; a line whose key
/// is not valid has a key no valid line has, so a cache of keys that parsed never holds
/// it.
pub fn series_key_len(line: &[u8]) -> Option<usize> {
    let mut from = 0;
    loop {
        let at = from + memchr::memchr(b' ', line.get(from..)?)?;
        let escapes = line
            .get(..at)?
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        if escapes % 2 == 0 {
            return Some(at);
        }
        from = at + 1;
    }
}

/// Parses what follows a line's series key (see [`series_key_len`]): its fields into
/// `fields` (cleared first) and its timestamp. The fast path of a line whose series key
/// is known: measurement and tags are not read again.
///
/// # Errors
/// As [`parse_line`].
pub fn parse_after_key<'a>(
    rest: &'a [u8],
    fields: &mut Vec<(Cow<'a, str>, FieldValue)>,
) -> Result<Option<i64>, String> {
    let text = std::str::from_utf8(rest).map_err(|e| format!("not valid UTF-8: {e}"))?;
    fields.clear();
    parse_fields(&mut Cursor { s: text, at: 0 }, fields)
}

/// The fields and timestamp, from the space after the series key on.
fn parse_fields<'a>(
    p: &mut Cursor<'a>,
    fields: &mut Vec<(Cow<'a, str>, FieldValue)>,
) -> Result<Option<i64>, String> {
    p.skip_spaces();
    loop {
        let key = p.token(EQUALS | COMMA | SPACE)?;
        if key.is_empty() || p.peek() != Some(b'=') {
            return Err("missing fields: expected field=value".to_owned());
        }
        p.at += 1;
        let value = p.field_value(&key)?;
        fields.push((key, value));
        match p.peek() {
            Some(b',') => p.at += 1,
            _ => break,
        }
    }
    p.skip_spaces();
    let rest = p.rest().trim_end();
    if rest.is_empty() {
        return Ok(None);
    }
    rest.parse::<i64>()
        .map(Some)
        .map_err(|_| format!("invalid timestamp {rest:?}: expected an integer"))
}

struct Cursor<'a> {
    s: &'a str,
    at: usize,
}

/// Byte classes of the tokenizer: a stop set is an OR of them.
const COMMA: u8 = 1;
const SPACE: u8 = 2;
const EQUALS: u8 = 4;
const BACKSLASH: u8 = 8;

/// The class of every byte (0 for the bytes a token runs over): one load and test per
/// byte where a scan of the stop list took three compares.
const CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    t[b',' as usize] = COMMA;
    t[b' ' as usize] = SPACE;
    t[b'=' as usize] = EQUALS;
    t[b'\\' as usize] = BACKSLASH;
    t
};

fn class(b: u8) -> u8 {
    CLASS[usize::from(b)]
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.at).copied()
    }

    fn rest(&self) -> &'a str {
        self.s.get(self.at..).unwrap_or("")
    }

    fn skip_spaces(&mut self) {
        while self.peek() == Some(b' ') {
            self.at += 1;
        }
    }

    /// Reads up to an unescaped byte of the classes `stops`; `\` before a stop byte (or
    /// another `\`, a space or a comma) escapes it, before anything else it is literal.
    /// Bytes, not chars: every stop and escape is ASCII, and no byte of a multi-byte
    /// UTF-8 sequence is, so the token ends on a char boundary.
    fn token(&mut self, stops: u8) -> Result<Cow<'a, str>, String> {
        let rest = self.rest();
        let bytes = rest.as_bytes();
        let escapable = stops | BACKSLASH | SPACE | COMMA;
        let mut owned: Option<String> = None;
        let (mut i, mut from) = (0, 0);
        loop {
            let Some(skip) = bytes
                .get(i..)
                .and_then(|r| r.iter().position(|&b| class(b) & (stops | BACKSLASH) != 0))
            else {
                i = bytes.len();
                break;
            };
            i += skip;
            let Some(&c) = bytes.get(i) else { break };
            if class(c) & BACKSLASH == 0 {
                break;
            }
            match bytes.get(i + 1) {
                Some(&next) if class(next) & escapable != 0 => {
                    let buf = owned.get_or_insert_with(String::new);
                    buf.push_str(rest.get(from..i).unwrap_or(""));
                    buf.push(char::from(next));
                    i += 2;
                    from = i;
                }
                // A backslash before anything else is literal.
                _ => i += 1,
            }
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
        if self.peek() == Some(b'"') {
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
        let end = memchr::memchr2(b',', b' ', rest.as_bytes()).unwrap_or(rest.len());
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
    fn the_series_key_ends_at_the_first_unescaped_space() {
        for line in [
            &br"cpu,host=a value=1 10"[..],
            br"cpu\ load,host=a\ b value=1",
            br"cpu,host=a\\ value=1",
            br"cpu,host=a\\\ b value=1",
            br"m,t=\= f=1",
        ] {
            let (_, key_len) = parse_line_keyed(line)
                .unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(line)));
            assert_eq!(series_key_len(line), Some(key_len), "{line:?}");
            let mut fields = Vec::new();
            let ts = parse_after_key(&line[key_len..], &mut fields).unwrap();
            let full = parse_line(line).unwrap();
            assert_eq!(fields, full.fields);
            assert_eq!(ts, full.timestamp);
        }
        assert_eq!(series_key_len(b"cpu"), None);
        assert_eq!(series_key_len(br"cpu\ "), None);
        assert!(parse_after_key(b" value=x", &mut Vec::new()).is_err());
        assert!(parse_after_key(b" value=1 x", &mut Vec::new()).is_err());
    }

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
