//! The Prometheus HTTP API's JSON shapes and parameter formats: `{"status":"success",
//! "data":{"resultType","result"}}`, values as strings, `[seconds, "value"]` pairs, and
//! `{"status":"error","errorType","error"}`.

use serde_json::{Map, Value, json};

use crate::error::{Error, Result};
use crate::storage::Labels;
use crate::value::QueryValue;

/// A value as Prometheus writes it: the shortest decimal that reads back the same
/// (Go's `FormatFloat(v, 'f', -1, 64)`), `NaN`, `+Inf`, `-Inf`.
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v == f64::INFINITY {
        "+Inf".to_owned()
    } else if v == f64::NEG_INFINITY {
        "-Inf".to_owned()
    } else {
        format!("{v}")
    }
}

/// A timestamp in milliseconds as the API's float seconds.
pub fn time_json(t_ms: i64) -> Value {
    if t_ms % 1000 == 0 {
        json!(t_ms / 1000)
    } else {
        json!(t_ms as f64 / 1000.0)
    }
}

/// A label set as a JSON object.
pub fn labels_json(labels: &Labels) -> Value {
    let mut m = Map::new();
    for (n, v) in labels {
        m.insert(n.clone(), Value::String(v.clone()));
    }
    Value::Object(m)
}

fn point_json(t_ms: i64, v: f64) -> Value {
    json!([time_json(t_ms), format_value(v)])
}

/// The `data` object of a query answer: `{"resultType", "result"}`.
pub fn data_json(value: &QueryValue) -> Value {
    let result = match value {
        QueryValue::Scalar { t_ms, v } => point_json(*t_ms, *v),
        QueryValue::String { t_ms, s } => json!([time_json(*t_ms), s]),
        QueryValue::Vector(samples) => Value::Array(
            samples
                .iter()
                .map(|s| json!({"metric": labels_json(&s.labels), "value": point_json(s.t_ms, s.v)}))
                .collect(),
        ),
        QueryValue::Matrix(series) => Value::Array(
            series
                .iter()
                .map(|s| {
                    json!({
                        "metric": labels_json(&s.labels),
                        "values": s.points.iter().map(|&(t, v)| point_json(t, v)).collect::<Vec<_>>(),
                    })
                })
                .collect(),
        ),
    };
    json!({"resultType": value.result_type(), "result": result})
}

/// A success answer around `data`.
pub fn success_json(data: Value) -> Value {
    json!({"status": "success", "data": data})
}

/// An error answer: `{"status":"error","errorType","error"}`.
pub fn error_json(err: &Error) -> Value {
    json!({"status": "error", "errorType": err.error_type(), "error": err.to_string()})
}

/// Parses a time parameter: float Unix seconds or RFC 3339, into epoch milliseconds.
///
/// # Errors
/// [`Error::BadData`] naming the parameter.
pub fn parse_time(param: &str, text: &str) -> Result<i64> {
    let bad = || {
        Error::BadData(format!(
            "invalid parameter \"{param}\": cannot parse {text:?} to a valid timestamp"
        ))
    };
    if let Ok(secs) = text.parse::<f64>() {
        if !secs.is_finite() {
            return Err(bad());
        }
        let ms = (secs * 1000.0).round();
        if ms.abs() > 9.2e18 {
            return Err(bad());
        }
        return Ok(ms as i64);
    }
    tidemark::parse_time(text).map_err(|_| bad())
}

/// Parses a duration parameter (`step`, `timeout`): float seconds or a Prometheus
/// duration such as `1m30s`, into milliseconds.
///
/// # Errors
/// [`Error::BadData`] naming the parameter.
pub fn parse_duration(param: &str, text: &str) -> Result<i64> {
    let bad = || {
        Error::BadData(format!(
            "invalid parameter \"{param}\": cannot parse {text:?} to a valid duration"
        ))
    };
    if let Ok(secs) = text.parse::<f64>() {
        if !secs.is_finite() || secs.abs() > 9.2e15 {
            return Err(bad());
        }
        return Ok((secs * 1000.0).round() as i64);
    }
    prom_duration_ms(text).ok_or_else(bad)
}

/// A Prometheus duration (`1y2w3d4h5m6s7ms`, units in that order) in milliseconds.
pub fn prom_duration_ms(text: &str) -> Option<i64> {
    const UNITS: [(&str, i64); 8] = [
        ("y", 365 * 86_400_000),
        ("w", 7 * 86_400_000),
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("ms", 1),
        ("m", 60_000),
        ("s", 1000),
        ("", 0),
    ];
    if text.is_empty() {
        return None;
    }
    let mut rest = text;
    let mut total: i64 = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let n: i64 = rest.get(..digits)?.parse().ok()?;
        rest = rest.get(digits..)?;
        let (unit, ms) = UNITS
            .iter()
            .find(|(u, _)| !u.is_empty() && rest.starts_with(u))?;
        rest = rest.get(unit.len()..)?;
        total = total.checked_add(n.checked_mul(*ms)?)?;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_format_as_prometheus() {
        assert_eq!(format_value(1.0), "1");
        assert_eq!(format_value(0.1), "0.1");
        assert_eq!(format_value(1e21), "1000000000000000000000");
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
    }

    #[test]
    fn times_and_durations_parse() {
        assert_eq!(parse_time("time", "1.5").unwrap(), 1500);
        assert_eq!(parse_time("time", "1970-01-01T00:00:02Z").unwrap(), 2000);
        assert!(parse_time("time", "soon").is_err());
        assert_eq!(parse_duration("step", "15").unwrap(), 15_000);
        assert_eq!(parse_duration("step", "1m30s").unwrap(), 90_000);
        assert_eq!(parse_duration("step", "250ms").unwrap(), 250);
        assert!(parse_duration("step", "5x").is_err());
    }
}
