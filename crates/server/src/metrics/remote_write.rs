//! Prometheus remote write 1.0: the snappy block decoding, the one reader of a request
//! ([`for_each_series`], which walks the protobuf bytes in place, series by series,
//! without building the message), and the checks that turn it into labelled samples.
//! The prost messages (derives written from the field numbers of the remote-write
//! specification, `prometheus.WriteRequest`) are for senders: [`encode`] builds a body
//! for clients, tests and benchmarks, and the fuzz targets use prost's decoder as an
//! oracle for the reader. Testable without a socket.

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

/// Decompresses a snappy block body, refusing one whose decompressed length exceeds
/// `limit` before allocating it.
///
/// # Errors
/// `400` naming the problem (not snappy, truncated); `413` past `limit`.
pub fn decompress(body: &[u8], limit: u64) -> Result<Vec<u8>> {
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
    snap::raw::Decoder::new().decompress_vec(body).map_err(|e| {
        Error::bad(
            "parse_exception",
            format!("the snappy body is corrupt or truncated: {e}"),
        )
    })
}

/// One series of a `WriteRequest`, its labels borrowed from the request's bytes (see
/// [`for_each_series`]).
#[derive(Debug, Default)]
pub struct SeriesView<'a> {
    /// The labels, in the order sent (empty until decoded under
    /// [`for_each_series_by_key`]: see [`decode_labels`](Self::decode_labels)).
    pub labels: Vec<(&'a str, &'a str)>,
    /// The series key: every label entry's bytes as sent, each after its length (so
    /// two label lists never give one key). Equal keys decode to equal labels.
    pub key: Vec<u8>,
    /// The label entries' bytes, decoded by [`decode_labels`](Self::decode_labels).
    raw_labels: Vec<&'a [u8]>,
    /// The samples: (milliseconds since the epoch, value).
    pub samples: Vec<(i64, f64)>,
    /// How many native histograms the series holds (refused by [`check_view`]).
    pub histograms: usize,
}

/// Reads the series of a decompressed `prometheus.WriteRequest` one by one, without
/// allocating a string per label as a generated decoder does (that was a quarter of a
/// remote-write sample's cost): field numbers from the specification, unknown fields
/// skipped, the last value of a repeated scalar field kept, as protobuf decoders do.
/// `f` sees every series, its labels decoded, before the next is read; the first error
/// stops the walk.
///
/// # Errors
/// `400` for bytes that are not a `WriteRequest` (truncated, a wrong wire type, a label
/// that is not UTF-8); what `f` returns.
pub fn for_each_series<'a>(
    raw: &'a [u8],
    mut f: impl FnMut(&SeriesView<'a>) -> Result<()>,
) -> Result<()> {
    for_each_series_by_key(raw, |view| {
        view.decode_labels()?;
        f(view)
    })
}

/// As [`for_each_series`], but the labels are left undecoded: `f` gets the series' key
/// ([`SeriesView::key`]) and decodes the labels ([`SeriesView::decode_labels`]) only
/// when the key is not one it knows. A sender repeats the same series in every
/// request, and decoding and checking the UTF-8 of every label of every series was
/// four fifths of a remote-write sample's parsing.
///
/// # Errors
/// As [`for_each_series`] (a label's UTF-8 is checked when it is decoded).
pub fn for_each_series_by_key<'a>(
    raw: &'a [u8],
    mut f: impl FnMut(&mut SeriesView<'a>) -> Result<()>,
) -> Result<()> {
    let mut view = SeriesView::default();
    let mut req = Pb::new(raw);
    while let Some((field, wire)) = req.key().map_err(not_a_request)? {
        match (field, wire) {
            (1, WIRE_LEN) => {
                let series = req.bytes().map_err(not_a_request)?;
                read_series(series, &mut view).map_err(not_a_request)?;
                f(&mut view)?;
            }
            (1, _) => {
                return Err(not_a_request(
                    "field timeseries has the wrong wire type".into(),
                ));
            }
            _ => req.skip(wire).map_err(not_a_request)?,
        }
    }
    Ok(())
}

/// `400` for bytes that are not a `WriteRequest`.
fn not_a_request(why: String) -> Error {
    Error::bad(
        "parse_exception",
        format!("the body is not a valid prometheus.WriteRequest: {why}"),
    )
}

impl<'a> SeriesView<'a> {
    /// Decodes the label entries into [`labels`](Self::labels) (once).
    ///
    /// # Errors
    /// `400` for a label entry that is not a `Label` or not UTF-8.
    pub fn decode_labels(&mut self) -> Result<()> {
        if self.labels.len() == self.raw_labels.len() {
            return Ok(());
        }
        self.labels.clear();
        for entry in &self.raw_labels {
            self.labels.push(decode_label(entry)?);
        }
        Ok(())
    }
}

/// One `Label` entry's name and value.
fn decode_label(entry: &[u8]) -> Result<(&str, &str)> {
    let mut l = Pb::new(entry);
    let (mut name, mut value) = ("", "");
    while let Some((f, w)) = l.key().map_err(not_a_request)? {
        match (f, w) {
            (1, WIRE_LEN) => name = l.text("label name").map_err(not_a_request)?,
            (2, WIRE_LEN) => value = l.text("label value").map_err(not_a_request)?,
            (1 | 2, _) => {
                return Err(not_a_request(
                    "a label field has the wrong wire type".into(),
                ));
            }
            _ => l.skip(w).map_err(not_a_request)?,
        }
    }
    Ok((name, value))
}

/// One `prometheus.MetricMetadata` (field 3 of a `WriteRequest`): the metric family's
/// type, help and unit, as Prometheus sends them beside the samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataView<'a> {
    /// Field 2: the metric family name.
    pub family: &'a str,
    /// Field 1: the type as Prometheus names it (`counter`, `gauge`, `histogram`,
    /// `gaugehistogram`, `summary`, `info`, `stateset`, `unknown`).
    pub kind: &'static str,
    /// Field 4.
    pub help: &'a str,
    /// Field 5.
    pub unit: &'a str,
}

/// Calls `f` for each metadata entry (field 3) of `raw`, a decompressed `WriteRequest`;
/// entries without a family name are skipped.
///
/// # Errors
/// `400` for bytes that are not a `WriteRequest`.
pub fn for_each_metadata<'a>(raw: &'a [u8], mut f: impl FnMut(MetadataView<'a>)) -> Result<()> {
    let bad = |why: String| {
        Error::bad(
            "parse_exception",
            format!("the body is not a valid prometheus.WriteRequest: {why}"),
        )
    };
    let mut req = Pb::new(raw);
    while let Some((field, wire)) = req.key().map_err(bad)? {
        if (field, wire) != (3, WIRE_LEN) {
            req.skip(wire).map_err(bad)?;
            continue;
        }
        let mut m = Pb::new(req.bytes().map_err(bad)?);
        let mut view = MetadataView {
            family: "",
            kind: "unknown",
            help: "",
            unit: "",
        };
        while let Some((field, wire)) = m.key().map_err(bad)? {
            match (field, wire) {
                (1, WIRE_VARINT) => {
                    view.kind = match m.varint().map_err(bad)? {
                        1 => "counter",
                        2 => "gauge",
                        3 => "histogram",
                        4 => "gaugehistogram",
                        5 => "summary",
                        6 => "info",
                        7 => "stateset",
                        _ => "unknown",
                    };
                }
                (2, WIRE_LEN) => view.family = m.text("metric_family_name").map_err(bad)?,
                (4, WIRE_LEN) => view.help = m.text("help").map_err(bad)?,
                (5, WIRE_LEN) => view.unit = m.text("unit").map_err(bad)?,
                _ => m.skip(wire).map_err(bad)?,
            }
        }
        if !view.family.is_empty() {
            f(view);
        }
    }
    Ok(())
}

/// How many `timeseries` entries (field 1) `raw` holds, found by skipping each by its
/// length: one varint read per series, nothing inside them decoded.
///
/// # Errors
/// `400` for bytes that are not a `WriteRequest` at the top level.
pub fn series_entries(raw: &[u8]) -> Result<usize> {
    let bad = |why: String| {
        Error::bad(
            "parse_exception",
            format!("the body is not a valid prometheus.WriteRequest: {why}"),
        )
    };
    let mut n = 0usize;
    let mut req = Pb::new(raw);
    while let Some((field, wire)) = req.key().map_err(bad)? {
        if field == 1 && wire != WIRE_LEN {
            return Err(bad("field timeseries has the wrong wire type".into()));
        }
        req.skip(wire).map_err(bad)?;
        if field == 1 {
            n += 1;
        }
    }
    Ok(n)
}

const WIRE_VARINT: u64 = 0;
const WIRE_I64: u64 = 1;
const WIRE_LEN: u64 = 2;
const WIRE_I32: u64 = 5;

fn read_series<'a>(bytes: &'a [u8], view: &mut SeriesView<'a>) -> std::result::Result<(), String> {
    view.labels.clear();
    view.raw_labels.clear();
    view.key.clear();
    view.samples.clear();
    view.histograms = 0;
    let mut m = Pb::new(bytes);
    while let Some((field, wire)) = m.key()? {
        match (field, wire) {
            (1, WIRE_LEN) => {
                let entry = m.bytes()?;
                put_varint(&mut view.key, entry.len() as u64);
                view.key.extend_from_slice(entry);
                view.raw_labels.push(entry);
            }
            (2, WIRE_LEN) => {
                let mut s = Pb::new(m.bytes()?);
                let (mut ts, mut v) = (0i64, 0f64);
                while let Some((f, w)) = s.key()? {
                    match (f, w) {
                        (1, WIRE_I64) => v = f64::from_bits(s.fixed64()?),
                        (2, WIRE_VARINT) => ts = s.varint()? as i64,
                        (1 | 2, _) => return Err("a sample field has the wrong wire type".into()),
                        _ => s.skip(w)?,
                    }
                }
                view.samples.push((ts, v));
            }
            (4, WIRE_LEN) => {
                m.bytes()?;
                view.histograms += 1;
            }
            (1 | 2 | 4, _) => return Err("a series field has the wrong wire type".into()),
            _ => m.skip(wire)?,
        }
    }
    Ok(())
}

/// Appends `v` as a protobuf varint.
fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A protobuf reader over one message's bytes.
struct Pb<'a> {
    buf: &'a [u8],
}

impl<'a> Pb<'a> {
    fn new(buf: &'a [u8]) -> Pb<'a> {
        Pb { buf }
    }

    fn varint(&mut self) -> std::result::Result<u64, String> {
        let mut v = 0u64;
        for i in 0..10 {
            let Some((&b, rest)) = self.buf.split_first() else {
                return Err("truncated varint".into());
            };
            self.buf = rest;
            if i == 9 && b > 1 {
                return Err("varint overflows 64 bits".into());
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint overflows 64 bits".into())
    }

    /// The next field's (number, wire type), or `None` at the end.
    fn key(&mut self) -> std::result::Result<Option<(u64, u64)>, String> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let k = self.varint()?;
        let field = k >> 3;
        if field == 0 {
            return Err("field number 0".into());
        }
        Ok(Some((field, k & 7)))
    }

    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        if n > self.buf.len() {
            return Err(format!(
                "a field of {n} bytes runs past the end of its message ({} left)",
                self.buf.len()
            ));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn bytes(&mut self) -> std::result::Result<&'a [u8], String> {
        let n = self.varint()?;
        self.take(usize::try_from(n).unwrap_or(usize::MAX))
    }

    fn text(&mut self, what: &str) -> std::result::Result<&'a str, String> {
        std::str::from_utf8(self.bytes()?).map_err(|e| format!("{what} is not valid UTF-8: {e}"))
    }

    fn fixed64(&mut self) -> std::result::Result<u64, String> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn skip(&mut self, wire: u64) -> std::result::Result<(), String> {
        match wire {
            WIRE_VARINT => self.varint().map(drop),
            WIRE_I64 => self.take(8).map(drop),
            WIRE_LEN => self.bytes().map(drop),
            WIRE_I32 => self.take(4).map(drop),
            other => Err(format!("unsupported wire type {other}")),
        }
    }
}

/// [`check_series`] on a [`SeriesView`].
///
/// # Errors
/// As [`check_series`].
pub fn check_view(ts: &SeriesView<'_>) -> Result<()> {
    let bad = |reason: String| Error::bad("illegal_argument_exception", reason);
    if ts.histograms > 0 {
        return Err(bad(format!(
            "series {} holds native histograms, which this receiver does not store",
            view_text(ts)
        )));
    }
    check_labels(&ts.labels, &|| view_text(ts))
}

/// Checks a series' labels: a `__name__`, valid label names.
fn check_labels(labels: &[(&str, &str)], text: &dyn Fn() -> String) -> Result<()> {
    let bad = |reason: String| Error::bad("illegal_argument_exception", reason);
    if !labels.iter().any(|l| l.0 == "__name__" && !l.1.is_empty()) {
        return Err(bad(format!(
            "series {} has no metric name (label __name__)",
            text()
        )));
    }
    for (name, _) in labels {
        if !valid_label_name(name) {
            return Err(bad(format!(
                "series {} has an invalid label name {name:?}: expected [a-zA-Z_][a-zA-Z0-9_]*",
                text()
            )));
        }
    }
    Ok(())
}

/// [`series_text`] of a [`SeriesView`].
pub fn view_text(ts: &SeriesView<'_>) -> String {
    if ts.labels.len() == ts.raw_labels.len() {
        return labels_text(&ts.labels);
    }
    // Not decoded (a series known by its key): its entries decode, or it would not be.
    let labels: Vec<(&str, &str)> = ts
        .raw_labels
        .iter()
        .filter_map(|e| decode_label(e).ok())
        .collect();
    labels_text(&labels)
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
    let labels: Vec<(&str, &str)> = ts
        .labels
        .iter()
        .map(|l| (l.name.as_str(), l.value.as_str()))
        .collect();
    check_labels(&labels, &|| series_text(ts))
}

/// A series as Prometheus prints it: `name{a="b", ...}` (cut after 200 characters).
pub fn series_text(ts: &TimeSeries) -> String {
    let labels: Vec<(&str, &str)> = ts
        .labels
        .iter()
        .map(|l| (l.name.as_str(), l.value.as_str()))
        .collect();
    labels_text(&labels)
}

fn labels_text(labels: &[(&str, &str)]) -> String {
    let name = labels
        .iter()
        .find(|l| l.0 == "__name__")
        .map_or("", |l| l.1);
    let rest: Vec<String> = labels
        .iter()
        .filter(|l| l.0 != "__name__")
        .map(|(n, v)| format!("{n}={v:?}"))
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

    /// The production path: snappy, then the streaming reader.
    fn read(body: &[u8], limit: u64) -> Result<Seen> {
        view_of(&decompress(body, limit)?)
    }

    #[test]
    fn keys_name_label_lists_and_labels_decode_only_when_asked() {
        let mut two = req();
        let mut other = two.timeseries[0].clone();
        other.labels[1].value = "y".into();
        two.timeseries.push(other);
        let raw = prost::Message::encode_to_vec(&two);
        let mut keys = Vec::new();
        for_each_series_by_key(&raw, |v| {
            assert!(v.labels.is_empty());
            let text = view_text(v);
            v.decode_labels()?;
            assert!(!v.labels.is_empty());
            assert_eq!(text, view_text(v));
            keys.push(v.key.clone());
            Ok(())
        })
        .unwrap();
        let mut distinct = keys.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 2);
        assert_eq!(keys.len(), 2);
        // A label whose value is not UTF-8 is found when it is decoded.
        let mut bad = req();
        bad.timeseries[0].labels[0].value = "x".into();
        let mut raw = prost::Message::encode_to_vec(&bad);
        let at = raw.iter().position(|&b| b == b'x').unwrap();
        raw[at] = 0xff;
        let mut seen = 0;
        let decoded = for_each_series_by_key(&raw, |v| {
            seen += 1;
            v.decode_labels()
        });
        assert!(decoded.is_err());
        assert_eq!(seen, 1);
    }

    #[test]
    fn round_trips_and_keeps_nan_bits() {
        let body = encode(&req());
        let back = read(&body, 1 << 20).unwrap();
        assert_eq!(back[0].1, vec![(1000, 0x7ff0_0000_0000_0002)]);
        assert_eq!(back[0].0[0], ("__name__".to_owned(), "up".to_owned()));
    }

    #[test]
    fn rejects_truncated_and_foreign_bodies() {
        let body = encode(&req());
        for cut in 0..body.len() {
            // Every prefix is an error or (for a prefix ending on a message boundary, if
            // snappy allowed it) a smaller request: never a panic.
            let _ = read(&body[..cut], 1 << 20);
        }
        let e = read(&body[..body.len() - 2], 1 << 20).unwrap_err();
        assert_eq!(e.status_and_kind().0, 400, "{e}");
        let e = read(b"not snappy at all", 1 << 20).unwrap_err();
        assert!(e.to_string().contains("snappy"), "{e}");
        // Uncompressed protobuf sent without snappy.
        let raw = prost::Message::encode_to_vec(&req());
        assert_eq!(read(&raw, 1 << 20).unwrap_err().status_and_kind().0, 400);
        // Invalid UTF-8 in a label value.
        let mut bad = raw.clone();
        let at = bad.windows(2).position(|w| w == b"up").unwrap();
        bad[at] = 0xff;
        let body = snap::raw::Encoder::new().compress_vec(&bad).unwrap();
        let e = read(&body, 1 << 20).unwrap_err().to_string();
        assert!(e.contains("UTF-8"), "{e}");
        // A decompressed size above the limit is refused before allocating.
        assert_eq!(
            read(&encode(&req()), 4).unwrap_err().status_and_kind().0,
            413
        );
    }

    /// Per series: labels, (timestamp, value bits), histograms.
    type Seen = Vec<(Vec<(String, String)>, Vec<(i64, u64)>, usize)>;

    fn view_of(raw: &[u8]) -> Result<Seen> {
        let mut out = Vec::new();
        for_each_series(raw, |v| {
            out.push((
                v.labels
                    .iter()
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .collect(),
                v.samples.iter().map(|&(t, x)| (t, x.to_bits())).collect(),
                v.histograms,
            ));
            Ok(())
        })?;
        Ok(out)
    }

    fn prost_of(raw: &[u8]) -> Option<Seen> {
        let req = <WriteRequest as prost::Message>::decode(raw).ok()?;
        Some(
            req.timeseries
                .into_iter()
                .map(|ts| {
                    (
                        ts.labels.into_iter().map(|l| (l.name, l.value)).collect(),
                        ts.samples
                            .iter()
                            .map(|s| (s.timestamp, s.value.to_bits()))
                            .collect(),
                        ts.histograms.len(),
                    )
                })
                .collect(),
        )
    }

    fn varied(seed: u64) -> WriteRequest {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let series = (next() % 5) as usize;
        WriteRequest {
            timeseries: (0..series)
                .map(|i| TimeSeries {
                    labels: (0..(next() % 4) as usize)
                        .map(|j| Label {
                            name: if j == 0 {
                                "__name__".into()
                            } else {
                                format!("l{j}")
                            },
                            value: if next() % 5 == 0 {
                                String::new()
                            } else {
                                format!("v{i}é{}", next() % 100)
                            },
                        })
                        .collect(),
                    samples: (0..(next() % 4) as usize)
                        .map(|_| Sample {
                            value: f64::from_bits(next()),
                            timestamp: next() as i64,
                        })
                        .collect(),
                    exemplars: if next() % 3 == 0 {
                        vec![vec![1, 2, 3]]
                    } else {
                        vec![]
                    },
                    histograms: if next() % 7 == 0 {
                        vec![vec![]]
                    } else {
                        vec![]
                    },
                })
                .collect(),
            metadata: if next() % 2 == 0 {
                vec![vec![8, 1]]
            } else {
                vec![]
            },
        }
    }

    #[test]
    fn the_borrowing_reader_reads_what_prost_reads() {
        for seed in 0..500 {
            let raw = prost::Message::encode_to_vec(&varied(seed));
            assert_eq!(view_of(&raw).ok(), prost_of(&raw), "seed {seed}");
            // Every prefix and every flipped byte: the two agree on what they accept
            // (prost may refuse what is valid wire format but not the message, so only
            // a success of ours that prost refuses is compared), and nothing panics.
            for cut in 0..raw.len() {
                if let (Ok(v), Some(p)) = (view_of(&raw[..cut]), prost_of(&raw[..cut])) {
                    assert_eq!(v, p, "seed {seed} cut {cut}");
                }
            }
            for at in 0..raw.len() {
                let mut bad = raw.clone();
                bad[at] ^= 0x5a;
                if let (Ok(v), Some(p)) = (view_of(&bad), prost_of(&bad)) {
                    assert_eq!(v, p, "seed {seed} flip {at}");
                }
            }
        }
    }

    #[test]
    fn the_borrowing_reader_rejects_what_is_not_a_write_request() {
        let raw = prost::Message::encode_to_vec(&req());
        assert!(view_of(&raw[..raw.len() - 1]).is_err());
        let mut bad = raw.clone();
        let at = bad.windows(2).position(|w| w == b"up").unwrap();
        bad[at] = 0xff;
        assert!(view_of(&bad).unwrap_err().to_string().contains("UTF-8"));
        assert!(view_of(&[0x0a, 0x80]).is_err());
        assert!(view_of(&[0x00, 0x00]).is_err());
        assert!(view_of(&[0x0b]).is_err()); // field 1 as a group
        let mut ts = req().timeseries.remove(0);
        ts.histograms.push(vec![]);
        let raw = prost::Message::encode_to_vec(&WriteRequest {
            timeseries: vec![ts],
            ..WriteRequest::default()
        });
        let mut refused = None;
        for_each_series(&raw, |v| {
            refused = Some(check_view(v).unwrap_err().to_string());
            Ok(())
        })
        .unwrap();
        assert!(refused.unwrap().contains("native histograms"));
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
