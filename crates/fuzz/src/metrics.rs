//! The metrics protocols: Prometheus remote write (snappy, then protobuf), Influx line
//! protocol, OTLP as protobuf and as JSON.

use prost::Message;
use tidemark_server::metrics::line_protocol::{self, FieldValue, Line, Precision};
use tidemark_server::metrics::otlp::{self, ExportMetricsServiceRequest};
use tidemark_server::metrics::remote_write::{self, SeriesView, WriteRequest};

/// The decompressed size a remote-write body may claim here: the server's default
/// `http.max_content_length` is larger, a small cap keeps a run's memory bounded and
/// still reaches the `413` refusal.
const DECOMPRESSED_LIMIT: u64 = 1 << 20;

/// A remote-write body as the server reads it: snappy block decompression bounded by a
/// limit, then the protobuf layer ([`remote_write_proto`]).
pub fn remote_write(data: &[u8]) {
    let Ok(raw) = remote_write::decompress(data, DECOMPRESSED_LIMIT) else {
        return;
    };
    assert!(
        raw.len() as u64 <= DECOMPRESSED_LIMIT,
        "decompress returned {} bytes past its limit",
        raw.len()
    );
    remote_write_proto(&raw);
}

/// One series as [`remote_write::for_each_series`] saw it, owned: labels, sample
/// timestamps and value bits, native histogram count.
type SeenSeries = (Vec<(String, String)>, Vec<(i64, u64)>, usize);

/// A decompressed `prometheus.WriteRequest`: the server's allocation-free walk
/// ([`remote_write::for_each_series`], [`remote_write::check_view`]) checked against the
/// prost decoder as an oracle (same series, labels and sample bits whenever both accept
/// the bytes), and a prost encode → decode → encode round trip.
pub fn remote_write_proto(raw: &[u8]) {
    let mut seen: Vec<SeenSeries> = Vec::new();
    let mut checks = Vec::new();
    let walked = remote_write::for_each_series(raw, |view: &SeriesView<'_>| {
        checks.push(remote_write::check_view(view).is_ok());
        let _ = remote_write::view_text(view);
        seen.push((
            view.labels
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
            view.samples
                .iter()
                .map(|(t, v)| (*t, v.to_bits()))
                .collect(),
            view.histograms,
        ));
        Ok(())
    });
    // The metadata walk never panics, and sees no more entries than field 3 holds.
    let mut metadata = 0usize;
    let meta_walked = remote_write::for_each_metadata(raw, |m| {
        metadata += 1;
        assert!(
            !m.family.is_empty(),
            "an entry without a family name was passed on"
        );
    });
    let Ok(req) = WriteRequest::decode(raw) else {
        return;
    };
    if meta_walked.is_ok() {
        assert!(
            metadata <= req.metadata.len(),
            "more metadata entries than field 3 holds"
        );
    }
    if walked.is_ok() {
        assert_eq!(seen.len(), req.timeseries.len(), "series count differs");
        for ((ts, got), ok) in req.timeseries.iter().zip(&seen).zip(&checks) {
            let labels: Vec<(String, String)> = ts
                .labels
                .iter()
                .map(|l| (l.name.clone(), l.value.clone()))
                .collect();
            let samples: Vec<(i64, u64)> = ts
                .samples
                .iter()
                .map(|s| (s.timestamp, s.value.to_bits()))
                .collect();
            assert_eq!(
                (&labels, &samples, ts.histograms.len()),
                (&got.0, &got.1, got.2),
                "for_each_series differs from prost"
            );
            assert_eq!(
                remote_write::check_series(ts).is_ok(),
                *ok,
                "check_series and check_view disagree on {labels:?}"
            );
        }
    }
    for ts in &req.timeseries {
        let _ = remote_write::series_text(ts);
    }
    let once = req.encode_to_vec();
    let again = WriteRequest::decode(once.as_slice())
        .map(|r| r.encode_to_vec())
        .ok();
    assert_eq!(
        again.as_ref(),
        Some(&once),
        "WriteRequest encode/decode round trip"
    );
    let body = remote_write::encode(&req);
    let back = remote_write::decompress(&body, u64::MAX)
        .ok()
        .and_then(|raw| WriteRequest::decode(raw.as_slice()).ok())
        .map(|r| r.encode_to_vec());
    assert_eq!(back.as_ref(), Some(&once), "snappy round trip");
}

/// A line-protocol body: every line the server would read, parsed; each parsed line
/// written back (escapes and all) and parsed again to the same line; its series key
/// alone parses to the same measurement and tags; timestamps through every precision.
pub fn line_protocol(data: &[u8]) {
    for (_, text) in line_protocol::lines(data) {
        let Ok((line, key_len)) = line_protocol::parse_line_keyed(text) else {
            continue;
        };
        assert!(key_len <= text.len(), "series key past the line");
        let written = write_line(&line);
        match line_protocol::parse_line(written.as_bytes()) {
            Ok(again) => assert_eq!(again, line, "line protocol round trip of {written:?}"),
            Err(e) => panic!("{written:?}, written from a parsed line, does not parse: {e}"),
        }
        if let Some(key) = text.get(..key_len) {
            let mut probe = key.to_vec();
            probe.extend_from_slice(b" f=1");
            match line_protocol::parse_line(&probe) {
                Ok(k) => assert_eq!(
                    (&k.measurement, &k.tags),
                    (&line.measurement, &line.tags),
                    "the series key alone parses to another series"
                ),
                Err(e) => panic!("the series key of a parsed line does not parse: {e}"),
            }
        }
        if let Some(t) = line.timestamp {
            for p in ["ns", "us", "ms", "s", "m", "h"] {
                if let Some(p) = Precision::parse(p, true) {
                    let _ = p.to_millis(t);
                }
            }
        }
    }
}

/// Writes `line` in line protocol, escaping what the parser treats as special.
fn write_line(line: &Line<'_>) -> String {
    let mut out = String::new();
    escape_into(&mut out, &line.measurement, &[',', ' ', '\\']);
    for (k, v) in &line.tags {
        out.push(',');
        escape_into(&mut out, k, &[',', '=', ' ', '\\']);
        out.push('=');
        escape_into(&mut out, v, &[',', '=', ' ', '\\']);
    }
    out.push(' ');
    for (i, (k, v)) in line.fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        escape_into(&mut out, k, &[',', '=', ' ', '\\']);
        out.push('=');
        match v {
            FieldValue::Float(f) => out.push_str(&f.to_string()),
            FieldValue::Int(n) => out.push_str(&format!("{n}i")),
            FieldValue::UInt(n) => out.push_str(&format!("{n}u")),
            FieldValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            FieldValue::Str(s) => {
                out.push('"');
                escape_into(&mut out, s, &['"', '\\']);
                out.push('"');
            }
        }
    }
    if let Some(t) = line.timestamp {
        out.push_str(&format!(" {t}"));
    }
    out
}

fn escape_into(out: &mut String, text: &str, special: &[char]) {
    for c in text.chars() {
        if special.contains(&c) {
            out.push('\\');
        }
        out.push(c);
    }
}

/// An OTLP/HTTP protobuf body: prost decode, the translation into samples, and a
/// round trip (the re-encoded request decodes and translates to the same samples).
pub fn otlp_proto(data: &[u8]) {
    let Ok(req) = ExportMetricsServiceRequest::decode(data) else {
        return;
    };
    check_translation(&req);
}

/// An OTLP/HTTP JSON body: serde_json, [`otlp::from_json`], then as [`otlp_proto`].
pub fn otlp_json(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Ok(req) = otlp::from_json(&value) else {
        return;
    };
    check_translation(&req);
}

fn check_translation(req: &ExportMetricsServiceRequest) {
    let max_labels = tidemark_server::Config::default().max_labels_per_series;
    let out = otlp::translate(req, max_labels);
    for point in &out.points {
        for s in point {
            assert_eq!(
                s.labels.first().map(|l| l.0.as_str()),
                Some(tidemark::METRIC_NAME_LABEL),
                "a sample whose first label is not the metric name"
            );
        }
    }
    assert!(out.rejected >= 0);
    assert_eq!(out.rejected > 0, out.first_error.is_some());
    let bytes = req.encode_to_vec();
    let Ok(again) = ExportMetricsServiceRequest::decode(bytes.as_slice()) else {
        panic!("an encoded ExportMetricsServiceRequest does not decode");
    };
    assert_eq!(
        again.encode_to_vec(),
        bytes,
        "OTLP encode/decode round trip"
    );
    // Values may differ after the round trip, and only as protobuf allows (a non-optional
    // -0.0 is not written, so it decodes as 0.0); the samples' shape and names may not.
    let twice = otlp::translate(&again, max_labels);
    assert_eq!(
        shape(&twice),
        shape(&out),
        "the round-tripped request translates to other samples"
    );
}

/// Per data point, each sample's label names and timestamp.
type Shape<'a> = Vec<Vec<(Vec<&'a str>, i64)>>;

/// What a translation must keep across an encode/decode round trip: per data point, the
/// samples' label names and timestamps; the rejected count.
fn shape(t: &otlp::Translated) -> (Shape<'_>, i64) {
    let points = t
        .points
        .iter()
        .map(|p| {
            p.iter()
                .map(|s| {
                    let names = s.labels.iter().map(|(k, _)| k.as_str()).collect();
                    (names, s.ts_millis)
                })
                .collect()
        })
        .collect();
    (points, t.rejected)
}
