//! VictoriaMetrics' bulk formats, data in and out, written from its documentation (see
//! `docs/protocols.md`): the JSON line format of `/api/v1/export` and `/api/v1/import`
//! (one series per line: `{"metric":{...},"values":[...],"timestamps":[...]}`), the
//! Prometheus text exposition format of `/api/v1/import/prometheus`, and the CSV of
//! `/api/v1/import/csv` with its `format` of column rules.
//!
//! Parsers take one line (the caller splits the body and bounds the line length) and
//! answer its samples or the reason it is refused; they never panic on input. The
//! writer appends one JSON line per run of a series' samples. No socket is needed to
//! test any of it.

use std::io::Write as _;

/// A label set as `(name, value)` pairs.
pub type Labels = Vec<(String, String)>;

/// The metric name label.
const NAME: &str = "__name__";

/// One JSON line: a series' labels and its samples (timestamps in milliseconds).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct JsonLine {
    /// The labels (`metric`), as sent.
    pub labels: Labels,
    /// The values, one per timestamp.
    pub values: Vec<f64>,
    /// The timestamps, unix milliseconds.
    pub timestamps: Vec<i64>,
}

/// A cursor over one line's bytes (valid UTF-8: the caller checked it).
struct Cursor<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(text: &'a str) -> Cursor<'a> {
        Cursor { text, pos: 0 }
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn at_end(&self) -> bool {
        self.pos >= self.text.len()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.pos += 1;
        }
    }

    fn err(&self, what: &str) -> String {
        match self.peek() {
            Some(_) => {
                let rest: String = self
                    .text
                    .get(self.pos..)
                    .unwrap_or("")
                    .chars()
                    .take(16)
                    .collect();
                format!("{what} at byte {}, found {rest:?}", self.pos + 1)
            }
            None => format!("{what} at byte {}, found the end of the line", self.pos + 1),
        }
    }

    fn eat(&mut self, b: u8) -> Result<(), String> {
        self.skip_ws();
        if self.peek() == Some(b) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err(&format!("expected '{}'", char::from(b))))
        }
    }

    /// A JSON string, unescaped.
    fn string(&mut self) -> Result<String, String> {
        self.eat(b'"')?;
        let mut out = String::new();
        loop {
            let start = self.pos;
            let bytes = self.text.as_bytes();
            while let Some(&b) = bytes.get(self.pos) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            // `start` and `pos` sit next to ASCII bytes (or the ends): char boundaries.
            out.push_str(self.text.get(start..self.pos).unwrap_or(""));
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let esc = self.peek().ok_or_else(|| self.err("unfinished escape"))?;
                    self.pos += 1;
                    match esc {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => out.push(self.unicode_escape()?),
                        _ => return Err(self.err("invalid escape in a string")),
                    }
                }
                Some(_) => return Err(self.err("control character in a string")),
                None => return Err(self.err("unterminated string")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let digits = self
            .text
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.err("expected four hex digits after \\u"))?;
        let n = u32::from_str_radix(digits, 16)
            .map_err(|_| self.err("expected four hex digits after \\u"))?;
        self.pos += 4;
        Ok(n)
    }

    /// The character of a `\uXXXX` escape (the `\u` read), a surrogate pair joined.
    fn unicode_escape(&mut self) -> Result<char, String> {
        let hi = self.hex4()?;
        let code = if (0xD800..0xDC00).contains(&hi) {
            if self.text.get(self.pos..self.pos + 2) != Some("\\u") {
                return Err(self.err("a lone UTF-16 surrogate in \\u escapes"));
            }
            self.pos += 2;
            let lo = self.hex4()?;
            if !(0xDC00..0xE000).contains(&lo) {
                return Err(self.err("a lone UTF-16 surrogate in \\u escapes"));
            }
            0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
        } else {
            hi
        };
        char::from_u32(code).ok_or_else(|| self.err("a lone UTF-16 surrogate in \\u escapes"))
    }

    /// The text of a bare token: a number, or VictoriaMetrics' `NaN`, `Inf`, `+Inf`, `-Inf`.
    fn token(&mut self) -> &'a str {
        let start = self.pos;
        while matches!(
            self.peek(),
            Some(b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z' | b'+' | b'-' | b'.')
        ) {
            self.pos += 1;
        }
        self.text.get(start..self.pos).unwrap_or("")
    }

    /// A comma-separated array of items read by `item`.
    fn array(
        &mut self,
        mut item: impl FnMut(&mut Self) -> Result<(), String>,
    ) -> Result<(), String> {
        self.eat(b'[')?;
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            self.skip_ws();
            item(self)?;
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(self.err("expected ',' or ']'")),
            }
        }
    }
}

/// A sample value as VictoriaMetrics writes it: a JSON number, or `NaN`, `Inf`, `+Inf`,
/// `-Inf` (not JSON, but what its export writes and its import reads).
fn parse_value(text: &str) -> Option<f64> {
    match text {
        "NaN" => Some(f64::NAN),
        "Inf" | "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ if text
            .bytes()
            .any(|b| b.is_ascii_alphabetic() && b != b'e' && b != b'E') =>
        {
            None
        }
        _ => text.parse::<f64>().ok(),
    }
}

/// Parses one JSON line into `out` (cleared first): `metric` (an object of string
/// label values), `values` and `timestamps` (arrays of equal length; integer
/// milliseconds), each exactly once, in any order.
///
/// # Errors
/// The reason, naming the byte, the key or the array position.
pub fn parse_json_line(line: &str, out: &mut JsonLine) -> Result<(), String> {
    out.labels.clear();
    out.values.clear();
    out.timestamps.clear();
    let mut c = Cursor::new(line);
    let (mut metric, mut values, mut timestamps) = (false, false, false);
    c.eat(b'{')?;
    c.skip_ws();
    if c.peek() == Some(b'}') {
        c.pos += 1;
    } else {
        loop {
            c.skip_ws();
            let key = c.string()?;
            c.eat(b':')?;
            c.skip_ws();
            let seen = match key.as_str() {
                "metric" => &mut metric,
                "values" => &mut values,
                "timestamps" => &mut timestamps,
                other => {
                    return Err(format!(
                        "unknown key {other:?}: a line holds \"metric\", \"values\" and \"timestamps\""
                    ));
                }
            };
            if *seen {
                return Err(format!("key {key:?} given twice"));
            }
            *seen = true;
            match key.as_str() {
                "metric" => {
                    c.eat(b'{')?;
                    c.skip_ws();
                    if c.peek() == Some(b'}') {
                        c.pos += 1;
                    } else {
                        loop {
                            c.skip_ws();
                            let name = c.string()?;
                            c.eat(b':')?;
                            c.skip_ws();
                            if c.peek() != Some(b'"') {
                                return Err(c.err(&format!(
                                    "the value of label {name:?} must be a string"
                                )));
                            }
                            let value = c.string()?;
                            out.labels.push((name, value));
                            c.skip_ws();
                            match c.peek() {
                                Some(b',') => c.pos += 1,
                                Some(b'}') => {
                                    c.pos += 1;
                                    break;
                                }
                                _ => return Err(c.err("expected ',' or '}' in \"metric\"")),
                            }
                        }
                    }
                }
                "values" => {
                    let vals = &mut out.values;
                    c.array(|c| {
                        let at = vals.len();
                        let t = c.token();
                        let v = parse_value(t).ok_or_else(|| {
                            if t.is_empty() {
                                c.err(&format!("values[{at}] is not a number"))
                            } else {
                                format!("values[{at}] = {t:?} is not a number")
                            }
                        })?;
                        vals.push(v);
                        Ok(())
                    })?;
                }
                _ => {
                    let ts = &mut out.timestamps;
                    c.array(|c| {
                        let at = ts.len();
                        let t = c.token();
                        let v = t.parse::<i64>().map_err(|_| {
                            if t.is_empty() {
                                c.err(&format!("timestamps[{at}] is not an integer"))
                            } else {
                                format!(
                                    "timestamps[{at}] = {t:?} is not an integer number of milliseconds"
                                )
                            }
                        })?;
                        ts.push(v);
                        Ok(())
                    })?;
                }
            }
            c.skip_ws();
            match c.peek() {
                Some(b',') => c.pos += 1,
                Some(b'}') => {
                    c.pos += 1;
                    break;
                }
                _ => return Err(c.err("expected ',' or '}'")),
            }
        }
    }
    c.skip_ws();
    if !c.at_end() {
        return Err(c.err("unexpected text after the object"));
    }
    for (seen, key) in [
        (metric, "metric"),
        (values, "values"),
        (timestamps, "timestamps"),
    ] {
        if !seen {
            return Err(format!("missing key {key:?}"));
        }
    }
    if out.values.len() != out.timestamps.len() {
        return Err(format!(
            "{} values but {} timestamps: they must pair up",
            out.values.len(),
            out.timestamps.len()
        ));
    }
    Ok(())
}

/// Appends `s` as a JSON string.
fn write_json_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for b in s.bytes() {
        let esc: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            _ => None,
        };
        match esc {
            Some(e) => out.extend_from_slice(e),
            None if b < 0x20 => {
                let _ = write!(out, "\\u{b:04x}");
            }
            None => out.push(b),
        }
    }
    out.push(b'"');
}

/// Appends a value the way VictoriaMetrics' export writes it: the shortest decimal that
/// reads back as the same `f64` (an integral value without `.0`), or `NaN`, `+Inf`,
/// `-Inf`.
pub fn write_value(out: &mut Vec<u8>, v: f64) {
    if v.is_nan() {
        out.extend_from_slice(b"NaN");
    } else if v == f64::INFINITY {
        out.extend_from_slice(b"+Inf");
    } else if v == f64::NEG_INFINITY {
        out.extend_from_slice(b"-Inf");
    } else {
        let start = out.len();
        // `{:?}` is Rust's shortest round-trip form, with an exponent for very large
        // and very small magnitudes.
        let _ = write!(out, "{v:?}");
        if out.ends_with(b".0") && out.len() >= start + 2 {
            out.truncate(out.len() - 2);
        }
    }
}

/// Appends one JSON line (with its `\n`): `labels` (the metric name first), then the
/// samples `ts`/`values` (equal lengths; the shorter one bounds the line).
pub fn write_json_line(out: &mut Vec<u8>, labels: &[(String, String)], ts: &[i64], values: &[f64]) {
    out.extend_from_slice(b"{\"metric\":{");
    let mut first = true;
    let named = labels.iter().filter(|(n, _)| n == NAME);
    let others = labels.iter().filter(|(n, _)| n != NAME);
    for (n, v) in named.chain(others) {
        if !first {
            out.push(b',');
        }
        first = false;
        write_json_str(out, n);
        out.push(b':');
        write_json_str(out, v);
    }
    out.extend_from_slice(b"},\"values\":[");
    let n = ts.len().min(values.len());
    for (i, v) in values.iter().take(n).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_value(out, *v);
    }
    out.extend_from_slice(b"],\"timestamps\":[");
    for (i, t) in ts.iter().take(n).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let _ = write!(out, "{t}");
    }
    out.extend_from_slice(b"]}\n");
}

/// One sample of the Prometheus text format.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct PromSample {
    /// The labels, the metric name first as `__name__`.
    pub labels: Labels,
    /// The value.
    pub value: f64,
    /// The timestamp in milliseconds, when the line has one.
    pub ts_millis: Option<i64>,
}

fn is_name_start(b: u8, colon: bool) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || (colon && b == b':')
}

fn is_name_char(b: u8, colon: bool) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || (colon && b == b':')
}

impl Cursor<'_> {
    fn skip_blanks(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
    }

    /// A metric name (`colon`: `:` allowed) or a label name.
    fn name(&mut self, colon: bool, what: &str) -> Result<String, String> {
        let start = self.pos;
        match self.peek() {
            Some(b) if is_name_start(b, colon) => self.pos += 1,
            _ => return Err(self.err(&format!("expected a {what}"))),
        }
        while self.peek().is_some_and(|b| is_name_char(b, colon)) {
            self.pos += 1;
        }
        Ok(self.text.get(start..self.pos).unwrap_or("").to_owned())
    }

    /// A label value of the text format: `"..."` with `\\`, `\"` and `\n` escapes.
    fn label_value(&mut self) -> Result<String, String> {
        if self.peek() != Some(b'"') {
            return Err(self.err("expected '\"' opening a label value"));
        }
        self.pos += 1;
        let mut out = String::new();
        loop {
            let start = self.pos;
            let bytes = self.text.as_bytes();
            while let Some(&b) = bytes.get(self.pos) {
                if b == b'"' || b == b'\\' {
                    break;
                }
                self.pos += 1;
            }
            out.push_str(self.text.get(start..self.pos).unwrap_or(""));
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(_) => {
                    self.pos += 1;
                    match self.peek() {
                        Some(b'\\') => out.push('\\'),
                        Some(b'"') => out.push('"'),
                        Some(b'n') => out.push('\n'),
                        _ => {
                            return Err(self.err(
                                "invalid escape in a label value (the text format has \\\\, \\\" and \\n)",
                            ));
                        }
                    }
                    self.pos += 1;
                }
                None => return Err(self.err("unterminated label value")),
            }
        }
    }

    /// A blank-separated field.
    fn field(&mut self) -> &str {
        let start = self.pos;
        while self.peek().is_some_and(|b| b != b' ' && b != b'\t') {
            self.pos += 1;
        }
        self.text.get(start..self.pos).unwrap_or("")
    }
}

/// A value of the text format (Go's `ParseFloat` spellings: `NaN`, `+Inf`, `-Inf`, `Inf`
/// in any case, decimal numbers with an optional exponent).
fn parse_prom_value(text: &str) -> Option<f64> {
    let lower = text.to_ascii_lowercase();
    match lower.trim_start_matches(['+', '-']) {
        "nan" => return Some(f64::NAN),
        "inf" | "infinity" => {
            return Some(if lower.starts_with('-') {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            });
        }
        _ => {}
    }
    if text
        .bytes()
        .any(|b| b.is_ascii_alphabetic() && b != b'e' && b != b'E')
    {
        return None;
    }
    text.parse::<f64>().ok()
}

/// Parses one line of the Prometheus text exposition format into `out`: `false` for a
/// line that holds no sample (empty, `# HELP`, `# TYPE`, any comment).
///
/// # Errors
/// The reason, naming the byte.
pub fn parse_prom_line(line: &str, out: &mut PromSample) -> Result<bool, String> {
    out.labels.clear();
    let mut c = Cursor::new(line);
    c.skip_blanks();
    if c.at_end()
        || c.peek() == Some(b'#')
        || c.text.get(c.pos..).is_some_and(|r| r.trim().is_empty())
    {
        return Ok(false);
    }
    let name = c.name(true, "metric name")?;
    out.labels.push((NAME.to_owned(), name));
    c.skip_blanks();
    if c.peek() == Some(b'{') {
        c.pos += 1;
        loop {
            c.skip_blanks();
            if c.peek() == Some(b'}') {
                c.pos += 1;
                break;
            }
            let label = c.name(false, "label name")?;
            c.skip_blanks();
            c.eat(b'=')?;
            c.skip_blanks();
            let value = c.label_value()?;
            out.labels.push((label, value));
            c.skip_blanks();
            match c.peek() {
                Some(b',') => c.pos += 1,
                Some(b'}') => {
                    c.pos += 1;
                    break;
                }
                _ => return Err(c.err("expected ',' or '}' after a label")),
            }
        }
    }
    c.skip_blanks();
    let at = c.pos;
    let v = c.field();
    if v.is_empty() {
        return Err(c.err("expected a value"));
    }
    out.value = parse_prom_value(v)
        .ok_or_else(|| format!("value {v:?} at byte {} is not a number", at + 1))?;
    c.skip_blanks();
    out.ts_millis = None;
    if !c.at_end() && c.text.get(c.pos..).is_some_and(|r| !r.trim().is_empty()) {
        let at = c.pos;
        let t = c.field();
        out.ts_millis = Some(t.parse::<i64>().map_err(|_| {
            format!(
                "timestamp {t:?} at byte {} is not an integer number of milliseconds",
                at + 1
            )
        })?);
        c.skip_blanks();
        if c.text.get(c.pos..).is_some_and(|r| !r.trim().is_empty()) {
            return Err(c.err("unexpected text after the timestamp (exemplars are not supported)"));
        }
    }
    Ok(true)
}

/// How a CSV time column is written (`time:<format>` in a `format` rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeFormat {
    /// `unix_s`: unix seconds (a fraction allowed).
    UnixS,
    /// `unix_ms`: unix milliseconds.
    UnixMs,
    /// `unix_ns`: unix nanoseconds, rounded to milliseconds.
    UnixNs,
    /// `rfc3339`: `2006-01-02T15:04:05Z`, with an optional fraction and offset.
    Rfc3339,
}

/// What a CSV column holds (the `<type>:<context>` of a `format` rule).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CsvColumn {
    /// `metric:<name>`: a value of metric `<name>`.
    Metric(String),
    /// `label:<name>`: the value of label `<name>` for every metric of the line.
    Label(String),
    /// `time:<format>`: the time of every metric of the line.
    Time(TimeFormat),
}

/// A parsed `format` argument: which column (0-based) holds what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvFormat {
    /// `(column, kind)`, in the order given.
    pub columns: Vec<(usize, CsvColumn)>,
}

/// Most columns a `format` may name (a bound on the work per line).
const MAX_CSV_COLUMN: usize = 10_000;

/// Parses VictoriaMetrics' CSV `format` argument: comma-separated rules
/// `<column_pos>:<type>:<context>` (positions from 1), `<type>` being `metric`, `label`
/// or `time` (`unix_s`, `unix_ms`, `unix_ns`, `rfc3339`). At least one metric column,
/// at most one time column, each position once.
///
/// # Errors
/// The rule refused and why; `custom:<layout>` times (Go layouts) are refused by name.
pub fn parse_csv_format(spec: &str) -> Result<CsvFormat, String> {
    let mut columns: Vec<(usize, CsvColumn)> = Vec::new();
    if spec.trim().is_empty() {
        return Err("the format query arg is required: comma-separated <column_pos>:<type>:<context> rules, e.g. 1:time:unix_s,2:label:host,3:metric:cpu".into());
    }
    for rule in spec.split(',') {
        let mut parts = rule.splitn(3, ':');
        let (pos, ty, ctx) = match (parts.next(), parts.next(), parts.next()) {
            (Some(p), Some(t), Some(c)) => (p.trim(), t.trim(), c),
            _ => {
                return Err(format!(
                    "format rule {rule:?}: expected <column_pos>:<type>:<context>"
                ));
            }
        };
        let pos: usize = pos
            .parse()
            .ok()
            .filter(|p| (1..=MAX_CSV_COLUMN).contains(p))
            .ok_or_else(|| {
                format!(
                    "format rule {rule:?}: column_pos must be a number from 1 to {MAX_CSV_COLUMN}"
                )
            })?;
        let kind = match ty {
            "metric" | "label" if ctx.is_empty() => {
                return Err(format!("format rule {rule:?}: the {ty} name is empty"));
            }
            "metric" => CsvColumn::Metric(ctx.to_owned()),
            "label" => CsvColumn::Label(ctx.to_owned()),
            "time" => CsvColumn::Time(match ctx {
                "unix_s" => TimeFormat::UnixS,
                "unix_ms" => TimeFormat::UnixMs,
                "unix_ns" => TimeFormat::UnixNs,
                "rfc3339" => TimeFormat::Rfc3339,
                c if c.starts_with("custom:") => {
                    return Err(format!(
                        "format rule {rule:?}: time format {c:?} (a Go time layout) is not supported: use unix_s, unix_ms, unix_ns or rfc3339"
                    ));
                }
                c => {
                    return Err(format!(
                        "format rule {rule:?}: unknown time format {c:?}: expected unix_s, unix_ms, unix_ns or rfc3339"
                    ));
                }
            }),
            other => {
                return Err(format!(
                    "format rule {rule:?}: unknown column type {other:?}: expected metric, label or time"
                ));
            }
        };
        if columns.iter().any(|(p, _)| *p == pos - 1) {
            return Err(format!("format rule {rule:?}: column {pos} is given twice"));
        }
        columns.push((pos - 1, kind));
    }
    if !columns
        .iter()
        .any(|(_, k)| matches!(k, CsvColumn::Metric(_)))
    {
        return Err("the format has no metric column (<pos>:metric:<name>)".into());
    }
    if columns
        .iter()
        .filter(|(_, k)| matches!(k, CsvColumn::Time(_)))
        .count()
        > 1
    {
        return Err("the format has more than one time column".into());
    }
    Ok(CsvFormat { columns })
}

/// Splits a CSV line into `fields` (cleared first): commas separate, a field in double
/// quotes may hold commas and `""` for a quote.
///
/// # Errors
/// An unterminated quoted field, or text after a closing quote.
pub fn split_csv(line: &str, fields: &mut Vec<String>) -> Result<(), String> {
    fields.clear();
    let mut c = Cursor::new(line);
    loop {
        if c.peek() == Some(b'"') {
            c.pos += 1;
            let mut f = String::new();
            loop {
                let start = c.pos;
                while c.peek().is_some_and(|b| b != b'"') {
                    c.pos += 1;
                }
                f.push_str(c.text.get(start..c.pos).unwrap_or(""));
                if c.at_end() {
                    return Err(format!("field {} has no closing quote", fields.len() + 1));
                }
                c.pos += 1;
                if c.peek() == Some(b'"') {
                    f.push('"');
                    c.pos += 1;
                } else {
                    break;
                }
            }
            fields.push(f);
        } else {
            let start = c.pos;
            while c.peek().is_some_and(|b| b != b',') {
                c.pos += 1;
            }
            fields.push(c.text.get(start..c.pos).unwrap_or("").to_owned());
        }
        match c.peek() {
            None => return Ok(()),
            Some(b',') => c.pos += 1,
            Some(_) => {
                return Err(format!(
                    "field {} has text after its closing quote",
                    fields.len()
                ));
            }
        }
    }
}

/// The time of a CSV field in `format`, in milliseconds.
///
/// # Errors
/// The field is not a time of that format.
pub fn csv_time(text: &str, format: TimeFormat) -> Result<i64, String> {
    let t = text.trim();
    let bad = |what: &str| format!("time {t:?} is not {what}");
    let from_f64 = |ms: f64| {
        if ms.is_finite() && ms.abs() < 9.2e18 {
            Ok(ms.round() as i64)
        } else {
            Err(bad("in range"))
        }
    };
    match format {
        TimeFormat::UnixS => match t.parse::<i64>() {
            Ok(s) => s.checked_mul(1000).ok_or_else(|| bad("in range")),
            Err(_) => from_f64(t.parse::<f64>().map_err(|_| bad("unix seconds"))? * 1000.0),
        },
        TimeFormat::UnixMs => match t.parse::<i64>() {
            Ok(ms) => Ok(ms),
            Err(_) => from_f64(t.parse::<f64>().map_err(|_| bad("unix milliseconds"))?),
        },
        TimeFormat::UnixNs => {
            let ns = t
                .parse::<i64>()
                .map_err(|_| bad("integer unix nanoseconds"))?;
            // Rounded to the nearest millisecond, halves away from zero.
            let (q, r) = (ns.div_euclid(1_000_000), ns.rem_euclid(1_000_000));
            Ok(if r >= 500_000 { q + 1 } else { q })
        }
        TimeFormat::Rfc3339 => {
            if t.bytes().all(|b| b.is_ascii_digit() || b == b'-') {
                return Err(bad("an RFC 3339 time"));
            }
            tidemark::parse_time(t).map_err(|_| bad("an RFC 3339 time"))
        }
    }
}

/// One CSV line read through a [`CsvFormat`].
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CsvRow {
    /// The line's labels (from its label columns; empty values left out).
    pub labels: Labels,
    /// `(metric name, value)` of each metric column that holds a value.
    pub metrics: Vec<(String, f64)>,
    /// The line's time, when the format has a time column.
    pub ts_millis: Option<i64>,
}

/// Reads one CSV line through `format` into `out` (cleared first); `fields` is scratch.
/// An empty metric field is no sample (CSV gaps); a missing column is an error.
///
/// # Errors
/// The column and the reason.
pub fn parse_csv_line(
    format: &CsvFormat,
    line: &str,
    fields: &mut Vec<String>,
    out: &mut CsvRow,
) -> Result<(), String> {
    out.labels.clear();
    out.metrics.clear();
    out.ts_millis = None;
    split_csv(line, fields)?;
    for (pos, kind) in &format.columns {
        let field = fields.get(*pos).ok_or_else(|| {
            format!(
                "column {} is missing: the line has {} columns",
                pos + 1,
                fields.len()
            )
        })?;
        match kind {
            CsvColumn::Metric(name) => {
                let v = field.trim();
                if v.is_empty() {
                    continue;
                }
                let value = parse_prom_value(v)
                    .ok_or_else(|| format!("column {} ({name}): {v:?} is not a number", pos + 1))?;
                out.metrics.push((name.clone(), value));
            }
            CsvColumn::Label(name) => {
                if !field.is_empty() {
                    out.labels.push((name.clone(), field.clone()));
                }
            }
            CsvColumn::Time(f) => {
                out.ts_millis =
                    Some(csv_time(field, *f).map_err(|e| format!("column {}: {e}", pos + 1))?);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(line: &str) -> Result<JsonLine, String> {
        let mut out = JsonLine::default();
        parse_json_line(line, &mut out).map(|()| out)
    }

    #[test]
    fn reads_a_json_line_and_writes_it_back() {
        let l = json(r#"{"metric":{"__name__":"up","job":"a\"b\u00e9\ud83d\ude00"},"values":[1,2.5,-3e-7,NaN,+Inf,-Inf],"timestamps":[1,2,3,4,5,6]}"#).unwrap();
        assert_eq!(
            l.labels,
            vec![
                ("__name__".to_owned(), "up".to_owned()),
                ("job".to_owned(), "a\"bé😀".to_owned())
            ]
        );
        assert_eq!(l.timestamps, vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(&l.values[..3], &[1.0, 2.5, -3e-7]);
        assert!(l.values[3].is_nan());
        let mut out = Vec::new();
        write_json_line(&mut out, &l.labels, &l.timestamps, &l.values);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "{\"metric\":{\"__name__\":\"up\",\"job\":\"a\\\"bé😀\"},\"values\":[1,2.5,-3e-7,NaN,+Inf,-Inf],\"timestamps\":[1,2,3,4,5,6]}\n"
        );
        let back = json(text.trim_end()).unwrap();
        assert_eq!(back.labels, l.labels);
        assert_eq!(back.timestamps, l.timestamps);
    }

    #[test]
    fn written_values_read_back_bit_for_bit() {
        for v in [
            0.1,
            1e300,
            -1e-300,
            123456789.123,
            2f64.powi(60),
            5e-324,
            -0.0,
        ] {
            let mut out = Vec::new();
            write_value(&mut out, v);
            let text = String::from_utf8(out).unwrap();
            assert_eq!(parse_value(&text).unwrap().to_bits(), v.to_bits(), "{text}");
        }
    }

    #[test]
    fn rejects_malformed_json_lines_with_a_reason() {
        for (line, why) in [
            (
                r#"{"metric":{"__name__":"x"},"values":[1,2],"timestamps":[1]}"#,
                "pair up",
            ),
            (
                r#"{"metric":{"__name__":"x"},"values":[1]}"#,
                "missing key \"timestamps\"",
            ),
            (
                r#"{"metric":{"__name__":"x"},"values":["1"],"timestamps":[1]}"#,
                "values[0]",
            ),
            (
                r#"{"metric":{"__name__":"x"},"values":[null],"timestamps":[1]}"#,
                "values[0]",
            ),
            (
                r#"{"metric":{"__name__":"x"},"values":[1],"timestamps":[1.5]}"#,
                "timestamps[0]",
            ),
            (
                r#"{"metric":{"__name__":1},"values":[1],"timestamps":[1]}"#,
                "must be a string",
            ),
            (
                r#"{"metric":{"__name__":"x"},"values":[1],"timestamps":[1]"#,
                "expected ',' or '}'",
            ),
            (
                r#"{"metric":{"__name__":"x"},"values":[1],"timestamps":[1]} x"#,
                "unexpected text",
            ),
            (
                r#"{"metric":{"__name__":"x\q"},"values":[1],"timestamps":[1]}"#,
                "invalid escape",
            ),
            (
                r#"{"metric":{"__name__":"\ud800"},"values":[1],"timestamps":[1]}"#,
                "surrogate",
            ),
            (
                r#"{"metric":{},"metric":{},"values":[],"timestamps":[]}"#,
                "twice",
            ),
            (r#"{"other":1}"#, "unknown key"),
            ("", "expected '{'"),
        ] {
            let e = json(line).unwrap_err();
            assert!(e.contains(why), "{line}: {e}");
        }
        // Every prefix of a good line is refused, never a panic.
        let good =
            r#"{"metric":{"__name__":"up","a":"\u00e9"},"values":[1.5,-Inf],"timestamps":[1,2]}"#;
        for n in 0..good.len() {
            if let Some(p) = good.get(..n) {
                assert!(json(p).is_err(), "{p}");
            }
        }
        assert!(json(good).is_ok());
    }

    fn prom(line: &str) -> Result<Option<PromSample>, String> {
        let mut out = PromSample::default();
        parse_prom_line(line, &mut out).map(|s| s.then_some(out))
    }

    #[test]
    fn reads_the_prometheus_text_format() {
        assert_eq!(prom("# HELP x y").unwrap(), None);
        assert_eq!(prom("   ").unwrap(), None);
        let s = prom(r#"http_requests_total{method="post",code="200",} 1027 1395066363000"#)
            .unwrap()
            .unwrap();
        assert_eq!(s.labels.len(), 3);
        assert_eq!(s.value, 1027.0);
        assert_eq!(s.ts_millis, Some(1395066363000));
        let s = prom(r#"msdos_file_access_time_seconds{path="C:\\DIR\\FILE.TXT",error="Cannot find file:\n\"FILE.TXT\""} 1.458255915e9"#)
            .unwrap()
            .unwrap();
        assert_eq!(s.labels[1].1, "C:\\DIR\\FILE.TXT");
        assert_eq!(s.labels[2].1, "Cannot find file:\n\"FILE.TXT\"");
        assert_eq!(s.ts_millis, None);
        assert_eq!(prom("x -Inf").unwrap().unwrap().value, f64::NEG_INFINITY);
        assert!(prom("x NaN 5").unwrap().unwrap().value.is_nan());
        for (bad, why) in [
            ("x", "expected a value"),
            ("x{a=\"1\" 2", "expected ',' or '}'"),
            ("x{a=1} 2", "opening a label value"),
            ("x 1 2.5", "not an integer"),
            ("x 1 2 # {} 1", "exemplars"),
            ("x abc", "not a number"),
            ("9x 1", "metric name"),
            ("x{a=\"\\t\"} 1", "invalid escape"),
        ] {
            let e = prom(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn reads_csv_through_a_format() {
        let f = parse_csv_format(
            "2:metric:ask,3:metric:bid,1:label:ticker,4:label:market,5:time:unix_s",
        )
        .unwrap();
        let mut fields = Vec::new();
        let mut row = CsvRow::default();
        parse_csv_line(
            &f,
            "GOOG,1.23,4.56,\"NY,\"\"SE\"\"\",1700000000.5",
            &mut fields,
            &mut row,
        )
        .unwrap();
        assert_eq!(
            row.metrics,
            vec![("ask".into(), 1.23), ("bid".into(), 4.56)]
        );
        assert_eq!(
            row.labels,
            vec![
                ("ticker".into(), "GOOG".into()),
                ("market".into(), "NY,\"SE\"".into())
            ]
        );
        assert_eq!(row.ts_millis, Some(1_700_000_000_500));
        parse_csv_line(&f, "GOOG,,4.56,NYSE,1", &mut fields, &mut row).unwrap();
        assert_eq!(row.metrics, vec![("bid".into(), 4.56)]);
        let e = parse_csv_line(&f, "GOOG,1,2", &mut fields, &mut row).unwrap_err();
        assert!(e.contains("column 4 is missing"), "{e}");
        let e = parse_csv_line(&f, "GOOG,x,2,N,1", &mut fields, &mut row).unwrap_err();
        assert!(e.contains("column 2 (ask)"), "{e}");
        assert_eq!(
            csv_time("1700000000123456789", TimeFormat::UnixNs),
            Ok(1_700_000_000_123)
        );
        assert_eq!(
            csv_time("1700000000123500000", TimeFormat::UnixNs),
            Ok(1_700_000_000_124)
        );
        assert_eq!(
            csv_time("2023-11-14T22:13:20Z", TimeFormat::Rfc3339),
            Ok(1_700_000_000_000)
        );
        assert!(csv_time("1700000000", TimeFormat::Rfc3339).is_err());
        for (bad, why) in [
            ("1:time:custom:2006-01-02", "not supported"),
            ("1:metric:x,2:gauge:y", "unknown column type \"gauge\""),
            ("1:label:x", "no metric column"),
            ("0:metric:x", "column_pos"),
            ("1:metric:x,1:metric:y", "twice"),
            ("1:metric:", "name is empty"),
            (
                "1:time:unix_s,2:time:unix_ms,3:metric:x",
                "more than one time",
            ),
            ("1:time:unix_h,2:metric:x", "unknown time format"),
            ("", "required"),
        ] {
            let e = parse_csv_format(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
