//! Timestamps: RFC 3339 text or epoch milliseconds, without a date-time dependency.

use crate::error::{Error, Result};

/// Parses a time given as epoch milliseconds (`1764460800000`, also as a JSON string) or
/// RFC 3339 (`2025-11-30T00:00:00Z`, `2025-11-30T01:00:00.250+01:00`; a space may replace
/// the `T`; fractions beyond milliseconds are truncated). A year outside 0000–9999 is
/// written ISO 8601's expanded way, a sign and up to nine digits (`+57883-07-16T…`,
/// `-0001-…`), as [`format_time`] writes it.
///
/// # Errors
/// [`Error::InvalidTime`].
pub fn parse_time(text: &str) -> Result<i64> {
    let t = text.trim();
    let digits = t.strip_prefix('-').unwrap_or(t);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse::<i64>().map_err(|_| invalid(text));
    }
    parse_rfc3339(t).ok_or_else(|| invalid(text))
}

fn invalid(text: &str) -> Error {
    Error::InvalidTime {
        input: text.to_owned(),
    }
}

fn num(b: &[u8]) -> Option<i64> {
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    b.iter().try_fold(0i64, |acc, &d| {
        acc.checked_mul(10)?.checked_add(i64::from(d - b'0'))
    })
}

fn parse_rfc3339(t: &str) -> Option<i64> {
    let (year, b) = parse_year(t.as_bytes())?;
    // -MM-DDTHH:MM:SS after the year
    if b.len() < 16 || b.first() != Some(&b'-') || b.get(3) != Some(&b'-') {
        return None;
    }
    if !matches!(b.get(6), Some(b'T' | b't' | b' ')) || b.get(9) != Some(&b':') {
        return None;
    }
    if b.get(12) != Some(&b':') {
        return None;
    }
    let month = num(b.get(1..3)?)?;
    let day = num(b.get(4..6)?)?;
    let hour = num(b.get(7..9)?)?;
    let minute = num(b.get(10..12)?)?;
    let second = num(b.get(13..15)?)?;
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = b.get(15..)?;
    let mut millis = 0i64;
    if rest.first() == Some(&b'.') {
        let frac_len = rest
            .get(1..)?
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if frac_len == 0 {
            return None;
        }
        let frac = rest.get(1..1 + frac_len)?;
        for i in 0..3 {
            millis = millis * 10 + frac.get(i).map_or(0, |&d| i64::from(d - b'0'));
        }
        rest = rest.get(1 + frac_len..)?;
    }
    let offset_secs = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let h = num(&[*h1, *h2])?;
            let m = num(&[*m1, *m2])?;
            if h > 23 || m > 59 {
                return None;
            }
            let s = h * 3600 + m * 60;
            if *sign == b'-' { -s } else { s }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second.min(59) - offset_secs;
    // In i128: the floor of i64::MIN's seconds, times 1000, is below i64::MIN until
    // its milliseconds are added.
    i64::try_from(i128::from(secs) * 1000 + i128::from(millis)).ok()
}

/// The year at the start of `b` and what follows it: four digits, or a sign and four to
/// nine (ISO 8601 expanded years; nine digits keep every date within `i64`
/// milliseconds' arithmetic, and epoch milliseconds reach about 292 million years).
fn parse_year(b: &[u8]) -> Option<(i64, &[u8])> {
    let (sign, body) = match b.first() {
        Some(b'+') => (Some(1), b.get(1..)?),
        Some(b'-') => (Some(-1), b.get(1..)?),
        _ => (None, b),
    };
    let len = body.iter().take_while(|c| c.is_ascii_digit()).count();
    let ok = match sign {
        None => len == 4,
        Some(_) => (4..=9).contains(&len),
    };
    if !ok {
        return None;
    }
    let year = num(body.get(..len)?)? * sign.unwrap_or(1);
    Some((year, body.get(len..)?))
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if is_leap(y) => 29,
        _ => 28,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub(crate) fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian `(year, month, day)` of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
pub(crate) fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Formats epoch milliseconds as RFC 3339 in UTC with milliseconds
/// (`2025-11-30T00:00:01.234Z`); a year outside 0000–9999, which RFC 3339 cannot write,
/// gets ISO 8601's expanded form (`+57883-07-16T16:53:20.000Z`), which [`parse_time`]
/// reads back.
pub fn format_time(ts_millis: i64) -> String {
    let secs = ts_millis.div_euclid(1000);
    let millis = ts_millis.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let year = match y {
        0..=9999 => format!("{y:04}"),
        10_000.. => format!("+{y}"),
        _ => format!("-{:04}", y.unsigned_abs()),
    };
    format!(
        "{year}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

/// Parses an interval: a positive integer followed by `ms`, `s`, `m`, `h` or `d`
/// (`10s`, `1m`, `1h`); a bare integer is milliseconds.
///
/// # Errors
/// [`Error::Query`] for anything else.
pub fn parse_interval(text: &str) -> Result<i64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let factor = match unit {
        "" | "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => 0,
    };
    let n: i64 = n.parse().unwrap_or(0);
    match n.checked_mul(factor) {
        Some(v) if v > 0 => Ok(v),
        _ => Err(Error::Query {
            reason: format!(
                "invalid interval `{text}`: expected a positive number with ms, s, m, h or d (1m)"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rfc3339_and_epoch_millis() {
        assert_eq!(parse_time("1764460800000").unwrap(), 1_764_460_800_000);
        assert_eq!(
            parse_time("2025-11-30T00:00:00Z").unwrap(),
            1_764_460_800_000
        );
        assert_eq!(
            parse_time("2025-11-30T00:00:01.234Z").unwrap(),
            1_764_460_801_234
        );
        assert_eq!(
            parse_time("2025-11-30T01:00:00.5+01:00").unwrap(),
            1_764_460_800_500
        );
        assert_eq!(parse_time("1970-01-01T00:00:00Z").unwrap(), 0);
        assert_eq!(parse_time("1969-12-31T23:59:59.999Z").unwrap(), -1);
        assert!(parse_time("2025-02-30T00:00:00Z").is_err());
        assert!(parse_time("yesterday").is_err());
        assert!(parse_time("2025-11-30T00:00:00").is_err());
    }

    #[test]
    fn formats_round_trip() {
        for ts in [
            0,
            -1,
            1_764_460_801_234,
            951_782_400_000,
            -62_135_596_800_000,
        ] {
            assert_eq!(
                parse_time(&format_time(ts)).unwrap(),
                ts,
                "{}",
                format_time(ts)
            );
        }
        assert_eq!(format_time(1_764_460_801_234), "2025-11-30T00:00:01.234Z");
    }

    #[test]
    fn years_outside_rfc3339_round_trip_in_expanded_form() {
        // Found by the `doc` fuzz target: such timestamps were stored, then written back
        // as text the parser refused.
        assert_eq!(
            format_time(1_764_460_800_000_000),
            "+57883-07-16T00:00:00.000Z"
        );
        assert_eq!(
            format_time(-62_167_219_200_001),
            "-0001-12-31T23:59:59.999Z"
        );
        for ts in [
            i64::MIN,
            i64::MIN + 1,
            i64::MAX,
            253_402_300_799_999,
            253_402_300_800_000,
            -62_167_219_200_000,
            -62_167_219_200_001,
            1_764_460_800_000_000,
        ] {
            assert_eq!(
                parse_time(&format_time(ts)).ok(),
                Some(ts),
                "{}",
                format_time(ts)
            );
        }
        assert_eq!(
            parse_time("+10000-01-01T00:00:00Z").ok(),
            Some(253_402_300_800_000)
        );
        for bad in [
            "10000-01-01T00:00:00Z",
            "+999-01-01T00:00:00Z",
            "+1234567890-01-01T00:00:00Z",
            "-+2025-01-01T00:00:00Z",
            "+2025",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn parses_intervals() {
        assert_eq!(parse_interval("1m").unwrap(), 60_000);
        assert_eq!(parse_interval("10s").unwrap(), 10_000);
        assert_eq!(parse_interval("250").unwrap(), 250);
        assert!(parse_interval("0s").is_err());
        assert!(parse_interval("1w").is_err());
    }
}
