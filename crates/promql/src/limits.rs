//! Size limits on query text, checked before the parser sees it.
//!
//! The parser, the expression tree's `Drop`, and the evaluator all recurse once per
//! level of the tree, and a tokio worker has a 2 MiB stack: `1+1+…` with 5,000 terms,
//! 60,000 `(` or 10,000 nested `abs(` used to overflow it and abort the process. The
//! tree's depth is bounded by the nesting of brackets plus the number of operators
//! (a chain of `n` binary operators is a tree `n` deep; a unary minus adds a level),
//! so a linear scan of the text, one pass with no recursion and no allocation, bounds
//! the depth of everything that follows before any of it runs. Limits are generous
//! next to real dashboards (VictoriaMetrics caps a query at 16 KiB of text by default)
//! and each is named in the error.

use crate::error::{Error, Result};

/// Longest query text accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 128 * 1024;

/// Deepest nesting of `(`, `[` and `{` (function calls, aggregations, subqueries and
/// parentheses each open one).
pub const MAX_NESTING: usize = 256;

/// Most operators (`+ - * / % ^`, comparisons, `and`/`or`/`unless`/`atan2`) in one
/// query, unary minus included.
pub const MAX_OPERATORS: usize = 2_000;

/// Longest duration written as a plain number of seconds (`x[300]`, `x offset 1e3`):
/// the range of a signed 64-bit count of nanoseconds, about 292 years, as Prometheus's
/// own parser allows.
pub const MAX_NUMERIC_DURATION_SECS: f64 = 9_223_372_036.854_775;

/// Checks `query` against [`MAX_QUERY_BYTES`], [`MAX_NESTING`] and [`MAX_OPERATORS`],
/// then its numeric durations against [`MAX_NUMERIC_DURATION_SECS`].
///
/// The scan skips string literals (`"…"`, `'…'`, `` `…` ``) and comments, and does not
/// count `=`, `!=`, `=~`, `!~` inside a selector's braces. It over-counts where the text
/// is ambiguous without parsing (a sign in `1e-3`), which only makes it stricter.
///
/// # Errors
/// [`Error::BadData`] naming the limit that was passed.
pub fn check(query: &str) -> Result<()> {
    check_size(query)?;
    check_numeric_durations(query)
}

fn check_size(query: &str) -> Result<()> {
    if query.len() > MAX_QUERY_BYTES {
        return Err(Error::BadData(format!(
            "query is {} bytes, more than the limit of {MAX_QUERY_BYTES} bytes (max query length)",
            query.len()
        )));
    }
    let bytes = query.as_bytes();
    let mut depth = 0usize;
    let mut braces = 0usize;
    let mut operators = 0usize;
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        i += 1;
        match b {
            b'"' | b'\'' | b'`' => i = skip_string(bytes, i, b),
            b'#' => {
                while bytes.get(i).is_some_and(|&c| c != b'\n') {
                    i += 1;
                }
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                if b == b'{' {
                    braces += 1;
                }
                if depth > MAX_NESTING {
                    return Err(Error::BadData(format!(
                        "query nests brackets more than {MAX_NESTING} deep (max nesting depth)"
                    )));
                }
            }
            b')' | b']' | b'}' => {
                // An unbalanced closer is the parser's to report.
                depth = depth.saturating_sub(1);
                if b == b'}' {
                    braces = braces.saturating_sub(1);
                }
            }
            b'+' | b'-' | b'*' | b'/' | b'%' | b'^' => operators += 1,
            b'=' | b'!' | b'<' | b'>' if braces == 0 => {
                operators += 1;
                // A two-character operator (`==`, `!=`, `<=`, `>=`) is one operator.
                if bytes.get(i) == Some(&b'=') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i - 1;
                while bytes
                    .get(i)
                    .is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
                {
                    i += 1;
                }
                let word = &bytes[start..i];
                if braces == 0
                    && ["and", "or", "unless", "atan2"]
                        .iter()
                        .any(|k| word.eq_ignore_ascii_case(k.as_bytes()))
                {
                    operators += 1;
                }
            }
            _ => {}
        }
        if operators > MAX_OPERATORS {
            return Err(Error::BadData(format!(
                "query has more than {MAX_OPERATORS} operators (max operators per query)"
            )));
        }
    }
    Ok(())
}

/// Refuses a duration written as a number (`x[5m:1e20]`, `x offset Inf`,
/// `x[18446744073709551616]`) that is not finite or longer than
/// [`MAX_NUMERIC_DURATION_SECS`]. promql-parser 0.11 turns such a number into a
/// `Duration` with `Duration::from_secs_f64`, which panics on it (found by
/// `cargo xtask fuzz`, docs/results/fuzz.md), so it must not reach the parser.
///
/// Durations stand inside `[…]` (ranges and subqueries) and after `offset` (with an
/// optional sign); numbers elsewhere are values, where `1e300` and `Inf` are fine.
fn check_numeric_durations(query: &str) -> Result<()> {
    let bytes = query.as_bytes();
    let mut squares = 0usize;
    let mut braces = 0usize;
    // Just after `offset`, a sign and then the duration may follow.
    let mut after_offset = false;
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let start = i;
        i += 1;
        let mut offset_word = false;
        match b {
            b'"' | b'\'' | b'`' => i = skip_string(bytes, i, b),
            b'#' => {
                while bytes.get(i).is_some_and(|&c| c != b'\n') {
                    i += 1;
                }
            }
            b'[' => squares += 1,
            b']' => squares = squares.saturating_sub(1),
            b'{' => braces += 1,
            b'}' => braces = braces.saturating_sub(1),
            c if c.is_ascii_whitespace() || ((c == b'-' || c == b'+') && after_offset) => {
                continue;
            }
            c if c.is_ascii_alphanumeric() || c == b'_' || c == b'.' => {
                // One token: a word, a number (`1.5e+3`, `0x1F`) or a duration (`5m30s`).
                while let Some(&c) = bytes.get(i) {
                    let sign_of_exponent = (c == b'+' || c == b'-')
                        && matches!(bytes.get(i - 1), Some(b'e' | b'E'))
                        && bytes
                            .get(start)
                            .is_some_and(|d| d.is_ascii_digit() || *d == b'.')
                        && !bytes[start..].starts_with(b"0x");
                    if c.is_ascii_alphanumeric()
                        || c == b'_'
                        || c == b'.'
                        || c == b':'
                        || sign_of_exponent
                    {
                        i += 1;
                    } else {
                        break;
                    }
                }
                let token = &query[start..i];
                offset_word = braces == 0 && token.eq_ignore_ascii_case("offset");
                if braces == 0 && (squares > 0 || after_offset) {
                    // Inside `[a:b]` the tokenizer above takes `a:b` as one token.
                    for part in token.split(':') {
                        numeric_duration_in_range(part)?;
                    }
                }
            }
            _ => {}
        }
        after_offset = offset_word;
    }
    Ok(())
}

/// Errs when `token` is a plain number of seconds (not `5m`) that is not finite or
/// longer than [`MAX_NUMERIC_DURATION_SECS`].
fn numeric_duration_in_range(token: &str) -> Result<()> {
    let lower = token.to_ascii_lowercase();
    let value = if let Some(hex) = lower.strip_prefix("0x") {
        // Hexadecimal digits that overflow `u64` are out of range too.
        u64::from_str_radix(hex, 16).map_or(Some(f64::INFINITY), |v| Some(v as f64))
    } else if matches!(lower.as_str(), "inf" | "nan") {
        Some(f64::INFINITY)
    } else if lower.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        lower.parse::<f64>().ok()
    } else {
        None
    };
    match value {
        Some(v) if !v.is_finite() || v > MAX_NUMERIC_DURATION_SECS => Err(Error::BadData(format!(
            "duration {token} is out of range: a number of seconds must be finite and at most {MAX_NUMERIC_DURATION_SECS} (about 292 years)"
        ))),
        _ => Ok(()),
    }
}

/// The index just past the string literal opened by `quote` before `i`; the end of the
/// text if it is unterminated (the parser reports that).
fn skip_string(bytes: &[u8], mut i: usize, quote: u8) -> usize {
    while let Some(&c) = bytes.get(i) {
        i += 1;
        if c == quote {
            return i;
        }
        // Backquoted strings have no escapes.
        if c == b'\\' && quote != b'`' {
            i += 1;
        }
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(query: &str) -> Option<String> {
        check(query).err().map(|e| e.to_string())
    }

    #[test]
    fn real_queries_pass() {
        for q in [
            r#"sum by (job) (rate(http_requests_total{code=~"5..", a!="b"}[5m])) / 2"#,
            r#"histogram_quantile(0.99, sum by (le) (rate(x_bucket[5m]))) > bool 1e-3"#,
            "up == 1 and on(job) (up offset 5m) unless down # a comment with ((((",
            r#"label_replace(up, "a", "$1", "b", "(((((((.*)")"#,
        ] {
            assert_eq!(refusal(q), None, "{q}");
        }
    }

    #[test]
    fn operators_are_counted_up_to_the_limit() {
        let at = vec!["1"; MAX_OPERATORS + 1].join("+");
        assert_eq!(refusal(&at), None);
        let over = vec!["1"; MAX_OPERATORS + 2].join("+");
        assert!(refusal(&over).unwrap().contains("max operators per query"));
        let words = vec!["up"; MAX_OPERATORS + 2].join(" or ");
        assert!(refusal(&words).unwrap().contains("max operators"));
        let unary = format!("{}1", "-".repeat(MAX_OPERATORS + 1));
        assert!(refusal(&unary).unwrap().contains("max operators"));
        // Two-character comparisons count once; matchers inside braces not at all.
        let cmp = vec!["up"; MAX_OPERATORS + 1].join(" >= ");
        assert_eq!(refusal(&cmp), None);
        let matchers = format!("up{{{}}}", vec![r#"a!="x""#; 3 * MAX_OPERATORS].join(","));
        assert_eq!(refusal(&matchers), None);
    }

    #[test]
    fn nesting_is_counted_up_to_the_limit() {
        let at = format!("{}1{}", "(".repeat(MAX_NESTING), ")".repeat(MAX_NESTING));
        assert_eq!(refusal(&at), None);
        let over = format!(
            "{}up{}",
            "abs(".repeat(MAX_NESTING + 1),
            ")".repeat(MAX_NESTING + 1)
        );
        assert!(refusal(&over).unwrap().contains("max nesting depth"));
        assert!(
            refusal(&"(".repeat(60_000))
                .unwrap()
                .contains("max nesting depth")
        );
        // Brackets in strings and comments do not count.
        let quoted = format!(
            "label_replace(up, \"a\", \"{}\", \"b\", \"c\")",
            "(".repeat(1000)
        );
        assert_eq!(refusal(&quoted), None);
        let escaped = format!(r#"up{{a="\"{}"}}"#, "[".repeat(1000));
        assert_eq!(refusal(&escaped), None);
    }

    #[test]
    fn numeric_durations_are_range_checked() {
        for q in [
            "x offset Inf",
            "x offset -inf",
            "x offset -1e20",
            "x offset - NaN",
            "x[5m:1e20]",
            "x[1e20:5m]",
            "x[18446744073709551616]",
            "x offset -1E+20",
            "x[0xFFFFFFFFFFFFFFFFFF]",
            "rate(x[1e10])",
        ] {
            assert!(refusal(q).unwrap().contains("out of range"), "{q}");
        }
        for q in [
            "x[5m:1e3]",
            "x[300]",
            "x[5m:]",
            "rate(x[1h]) * 1e300",
            "x offset 5m * Inf",
            "x offset 1e9",
            "x @ 1e20",
            r#"x{a="[1e30]"}"#,
            "offset_total[5m]",
        ] {
            assert_eq!(refusal(q), None, "{q}");
        }
    }

    #[test]
    fn length_is_limited() {
        let long = format!("up{{a=\"{}\"}}", "x".repeat(MAX_QUERY_BYTES));
        assert!(refusal(&long).unwrap().contains("max query length"));
    }
}
