//! Prometheus remote write 1.0: the protobuf messages (prost derives written from the
//! field numbers of the remote-write specification, `prometheus.WriteRequest`), the
//! snappy block decoding, and the checks that turn a request into labelled samples.
//! Testable without a socket.

use crate::error::{Error, Result};

/// `prometheus.WriteRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    /// Field 1: the series and their samples.
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
    /// Field 3: metric metadata (type, help, unit); accepted and not stored.
    #[prost(bytes = "vec", repeated, tag = "3")]
    pub metadata: Vec<Vec<u8>>,
}

/// `prometheus.TimeSeries`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    /// Field 1: the labels, `__name__` among them.
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    /// Field 2: the samples.
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
    /// Field 3: exemplars; accepted and not stored.
    #[prost(bytes = "vec", repeated, tag = "3")]
    pub exemplars: Vec<Vec<u8>>,
    /// Field 4: native histograms; refused (`400`), not silently dropped.
    #[prost(bytes = "vec", repeated, tag = "4")]
    pub histograms: Vec<Vec<u8>>,
}

/// `prometheus.Label`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    /// Field 1.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Field 2.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `prometheus.Sample`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// Field 1: the value (a stale marker is a NaN with payload `0x7ff0000000000002`).
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Field 2: milliseconds since the epoch.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// The content type of remote write 1.0 (`application/x-protobuf`, optionally with
/// `proto=prometheus.WriteRequest`).
///
/// # Errors
/// `415` for remote write 2.0 (`proto=io.prometheus.write.v2.Request`) or another
/// content type, as the specification asks of a receiver that does not speak it.
pub fn check_content_type(value: Option<&str>) -> Result<()> {
    let Some(v) = value else { return Ok(()) };
    let v = v.trim().to_ascii_lowercase();
    let mut parts = v.split(';').map(str::trim);
    let media = parts.next().unwrap_or_default();
    if media != "application/x-protobuf" {
        return Err(unsupported(format!(
            "unsupported Content-Type [{v}]: remote write needs application/x-protobuf"
        )));
    }
    for p in parts {
        if let Some(proto) = p.strip_prefix("proto=")
            && proto != "prometheus.writerequest"
        {
            return Err(unsupported(format!(
                "unsupported remote write message [{proto}]: this receiver speaks remote write 1.0 (prometheus.WriteRequest) only"
            )));
        }
    }
    Ok(())
}

fn unsupported(reason: String) -> Error {
    Error::status(415, "media_type_header_exception", reason)
}

/// Decodes a snappy-compressed (block format) `WriteRequest`, refusing a body whose
/// decompressed length exceeds `limit` before allocating it.
///
/// # Errors
/// `400` naming the problem (not snappy, truncated, not a `WriteRequest`, invalid
/// UTF-8 in a label); `413` past `limit`.
pub fn decode(body: &[u8], limit: u64) -> Result<WriteRequest> {
    let len = snap::raw::decompress_len(body).map_err(|e| {
        Error::bad(
            "parse_exception",
            format!("the body is not snappy block-compressed: {e}"),
        )
    })?;
    if len as u64 > limit {
        return Err(Error::status(
            413,
            "content_too_long_exception",
            format!(
                "the decompressed body of {len} bytes is larger than http.max_content_length [{limit} bytes]"
            ),
        ));
    }
    let raw = snap::raw::Decoder::new()
        .decompress_vec(body)
        .map_err(|e| {
            Error::bad(
                "parse_exception",
                format!("the snappy body is corrupt or truncated: {e}"),
            )
        })?;
    <WriteRequest as prost::Message>::decode(raw.as_slice()).map_err(|e| {
        Error::bad(
            "parse_exception",
            format!("the body is not a valid prometheus.WriteRequest: {e}"),
        )
    })
}

/// Whether `name` is a valid Prometheus label name (`[a-zA-Z_][a-zA-Z0-9_]*`).
pub fn valid_label_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z' | b'A'..=b'Z' | b'_'))
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Checks one series: a `__name__`, valid label names, no native histograms.
///
/// # Errors
/// `400` naming the series and the problem.
pub fn check_series(ts: &TimeSeries) -> Result<()> {
    let bad = |reason: String| Error::bad("illegal_argument_exception", reason);
    if !ts.histograms.is_empty() {
        return Err(bad(format!(
            "series {} holds native histograms, which this receiver does not store",
            series_text(ts)
        )));
    }
    if !ts
        .labels
        .iter()
        .any(|l| l.name == "__name__" && !l.value.is_empty())
    {
        return Err(bad(format!(
            "series {} has no metric name (label __name__)",
            series_text(ts)
        )));
    }
    for l in &ts.labels {
        if !valid_label_name(&l.name) {
            return Err(bad(format!(
                "series {} has an invalid label name {:?}: expected [a-zA-Z_][a-zA-Z0-9_]*",
                series_text(ts),
                l.name
            )));
        }
    }
    Ok(())
}

/// A series as Prometheus prints it: `name{a="b", ...}` (cut after 200 characters).
pub fn series_text(ts: &TimeSeries) -> String {
    let name = ts
        .labels
        .iter()
        .find(|l| l.name == "__name__")
        .map_or("", |l| l.value.as_str());
    let rest: Vec<String> = ts
        .labels
        .iter()
        .filter(|l| l.name != "__name__")
        .map(|l| format!("{}={:?}", l.name, l.value))
        .collect();
    let mut text = format!("{name}{{{}}}", rest.join(", "));
    if text.len() > 200 {
        let mut cut = 200;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// Encodes `req` as a snappy-compressed body (for tests and load generators).
pub fn encode(req: &WriteRequest) -> Vec<u8> {
    let raw = prost::Message::encode_to_vec(req);
    snap::raw::Encoder::new()
        .compress_vec(&raw)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> WriteRequest {
        WriteRequest {
            timeseries: vec![TimeSeries {
                labels: vec![
                    Label {
                        name: "__name__".into(),
                        value: "up".into(),
                    },
                    Label {
                        name: "job".into(),
                        value: "x".into(),
                    },
                ],
                samples: vec![Sample {
                    value: f64::from_bits(0x7ff0_0000_0000_0002),
                    timestamp: 1000,
                }],
                ..TimeSeries::default()
            }],
            ..WriteRequest::default()
        }
    }

    #[test]
    fn round_trips_and_keeps_nan_bits() {
        let body = encode(&req());
        let back = decode(&body, 1 << 20).unwrap();
        assert_eq!(
            back.timeseries[0].samples[0].value.to_bits(),
            0x7ff0_0000_0000_0002
        );
        check_series(&back.timeseries[0]).unwrap();
    }

    #[test]
    fn rejects_truncated_and_foreign_bodies() {
        let body = encode(&req());
        for cut in 0..body.len() {
            // Every prefix is an error or (for a prefix ending on a message boundary, if
            // snappy allowed it) a smaller request: never a panic.
            let _ = decode(&body[..cut], 1 << 20);
        }
        let e = decode(&body[..body.len() - 2], 1 << 20).unwrap_err();
        assert_eq!(e.status_and_kind().0, 400, "{e}");
        let e = decode(b"not snappy at all", 1 << 20).unwrap_err();
        assert!(e.to_string().contains("snappy"), "{e}");
        // Uncompressed protobuf sent without snappy.
        let raw = prost::Message::encode_to_vec(&req());
        assert_eq!(decode(&raw, 1 << 20).unwrap_err().status_and_kind().0, 400);
        // Invalid UTF-8 in a label value.
        let mut bad = raw.clone();
        let at = bad.windows(2).position(|w| w == b"up").unwrap();
        bad[at] = 0xff;
        let body = snap::raw::Encoder::new().compress_vec(&bad).unwrap();
        let e = decode(&body, 1 << 20).unwrap_err().to_string();
        assert!(e.contains("UTF-8"), "{e}");
        // A decompressed size above the limit is refused before allocating.
        assert_eq!(
            decode(&encode(&req()), 4).unwrap_err().status_and_kind().0,
            413
        );
    }

    #[test]
    fn checks_series_and_content_types() {
        let mut ts = req().timeseries.remove(0);
        ts.labels[1].name = "bad-name".into();
        assert!(
            check_series(&ts)
                .unwrap_err()
                .to_string()
                .contains("bad-name")
        );
        ts.labels.remove(0);
        assert!(
            check_series(&ts)
                .unwrap_err()
                .to_string()
                .contains("__name__")
        );
        check_content_type(Some("application/x-protobuf")).unwrap();
        check_content_type(Some("application/x-protobuf;proto=prometheus.WriteRequest")).unwrap();
        let e = check_content_type(Some(
            "application/x-protobuf;proto=io.prometheus.write.v2.Request",
        ))
        .unwrap_err();
        assert_eq!(e.status_and_kind().0, 415);
        assert_eq!(
            check_content_type(Some("application/json"))
                .unwrap_err()
                .status_and_kind()
                .0,
            415
        );
    }
}
