//! WAL record payloads: one logical operation each.
//!
//! ```text
//! op u8 (1 create, 2 index, 3 delete)
//! create/index: tsid [20] | ts_millis i64 | dims u32 × (name | tag u8 | value)
//!               | metrics u32 × (name | kind u8 | bits u64)
//!               | extras u32 × (name | kind u8 | value)        (since WAL version 2)
//! delete:       synthetic id [28] (big-endian timestamp, as `SyntheticId::to_bytes`)
//! series (4):   ref u32 | tsid [20] | dims u32 × (name | tag u8 | value)  (since version 3)
//! column (5):   ref u32 (bit 31 set: an extra column) | kind u8 | name       (since version 3)
//! create_ref (6) / index_ref (7):                                             (since version 3)
//!               series ref u32 | ts_millis i64 | metrics u32 × (column ref u32 | kind u8 | bits u64)
//!               | extras u32 × (column ref u32 | kind u8 | value)
//! ```
//! A ref record names a series and columns by refs that `series` and `column` records
//! earlier in the same file define (a later definition of a ref replaces the earlier one
//! from there on): a point's dimensions and names are logged once per file, not per point.
//! Names and keywords are `len u32 | UTF-8`; integers little-endian. Dimension tags:
//! 1 keyword, 2 int, 3 uint, 4 bool, 5 ip (16 bytes); metric kinds: 1 gauge, 2 counter;
//! extra kinds: 3 keyword (`len u32 | UTF-8`), 4 bool (u8).

use std::net::Ipv6Addr;
use std::path::Path;

use tidemark_segment::{Dim, Extra, MetricValue, Point};
use tidemark_tsid::{SYNTHETIC_ID_LEN, SyntheticId, TSID_LEN, Tsid};

use crate::error::Result;
use crate::le::{Reader, put_bytes, put_i64, put_u8, put_u32, put_u64};

const OP_CREATE: u8 = 1;
const OP_INDEX: u8 = 2;
const OP_DELETE: u8 = 3;
const OP_SERIES: u8 = 4;
const OP_COLUMN: u8 = 5;
const OP_CREATE_REF: u8 = 6;
const OP_INDEX_REF: u8 = 7;

/// Bit of a logged column ref that marks an extra column.
pub(crate) const EXTRA_REF_BIT: u32 = 1 << 31;

/// A logged operation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Record {
    Create(Point),
    Index(Point),
    Delete(SyntheticId),
    /// Defines a series ref for the records after it.
    Series {
        series: u32,
        tsid: Tsid,
        dims: Vec<(String, Dim)>,
    },
    /// Defines a column ref (`EXTRA_REF_BIT` set: an extra column).
    Column {
        column: u32,
        kind: crate::buffer::ColumnKind,
        name: String,
    },
    /// A create (or index) of a point by refs.
    Append {
        create: bool,
        series: u32,
        ts_millis: i64,
        metrics: Vec<(u32, MetricValue)>,
        extras: Vec<(u32, Extra)>,
    },
}

fn put_dims(out: &mut Vec<u8>, dims: &[(String, Dim)]) {
    put_u32(out, dims.len() as u32);
    for (name, value) in dims {
        put_bytes(out, name.as_bytes());
        match value {
            Dim::Keyword(s) => {
                put_u8(out, 1);
                put_bytes(out, s.as_bytes());
            }
            Dim::Int(v) => {
                put_u8(out, 2);
                put_i64(out, *v);
            }
            Dim::UInt(v) => {
                put_u8(out, 3);
                put_u64(out, *v);
            }
            Dim::Bool(v) => {
                put_u8(out, 4);
                put_u8(out, u8::from(*v));
            }
            Dim::Ip(ip) => {
                put_u8(out, 5);
                out.extend_from_slice(&ip.octets());
            }
        }
    }
}

fn put_extra(out: &mut Vec<u8>, value: &Extra) {
    match value {
        Extra::Keyword(s) => {
            put_u8(out, 3);
            put_bytes(out, s.as_bytes());
        }
        Extra::Bool(b) => {
            put_u8(out, 4);
            put_u8(out, u8::from(*b));
        }
    }
}

fn metric_kind_code(value: &MetricValue) -> u8 {
    match value {
        MetricValue::Gauge(_) => 1,
        MetricValue::Counter(_) => 2,
    }
}

pub(crate) fn encode_series(out: &mut Vec<u8>, series: u32, tsid: &Tsid, dims: &[(String, Dim)]) {
    put_u8(out, OP_SERIES);
    put_u32(out, series);
    out.extend_from_slice(tsid.as_bytes());
    put_dims(out, dims);
}

pub(crate) fn encode_column(
    out: &mut Vec<u8>,
    column: u32,
    kind: crate::buffer::ColumnKind,
    name: &str,
) {
    use crate::buffer::ColumnKind;
    put_u8(out, OP_COLUMN);
    put_u32(out, column);
    put_u8(
        out,
        match kind {
            ColumnKind::Gauge => 1,
            ColumnKind::Counter => 2,
            ColumnKind::Keyword => 3,
            ColumnKind::Bool => 4,
        },
    );
    put_bytes(out, name.as_bytes());
}

pub(crate) fn encode_append(
    out: &mut Vec<u8>,
    create: bool,
    series: u32,
    ts_millis: i64,
    metrics: &[(u32, MetricValue)],
    extras: &[(u32, Extra)],
) {
    // The hot record of every ingest path: sized once, written in fixed-size pieces.
    out.reserve(17 + metrics.len() * 13 + 4);
    let mut head = [0u8; 17];
    head[0] = if create { OP_CREATE_REF } else { OP_INDEX_REF };
    head[1..5].copy_from_slice(&series.to_le_bytes());
    head[5..13].copy_from_slice(&ts_millis.to_le_bytes());
    head[13..17].copy_from_slice(&(metrics.len() as u32).to_le_bytes());
    out.extend_from_slice(&head);
    for (c, v) in metrics {
        let mut m = [0u8; 13];
        m[..4].copy_from_slice(&c.to_le_bytes());
        m[4] = metric_kind_code(v);
        m[5..].copy_from_slice(&v.to_bits().to_le_bytes());
        out.extend_from_slice(&m);
    }
    put_u32(out, extras.len() as u32);
    for (c, v) in extras {
        put_u32(out, *c | EXTRA_REF_BIT);
        put_extra(out, v);
    }
}

/// A version-2 point record (still read; written only by tests since version 3).
#[cfg(test)]
pub(crate) fn encode_point(out: &mut Vec<u8>, create: bool, p: &Point) {
    put_u8(out, if create { OP_CREATE } else { OP_INDEX });
    out.extend_from_slice(p.tsid.as_bytes());
    put_i64(out, p.ts_millis);
    put_dims(out, &p.dims);
    put_u32(out, p.metrics.len() as u32);
    for (name, value) in &p.metrics {
        put_bytes(out, name.as_bytes());
        put_u8(out, metric_kind_code(value));
        put_u64(out, value.to_bits());
    }
    put_u32(out, p.extras.len() as u32);
    for (name, value) in &p.extras {
        put_bytes(out, name.as_bytes());
        put_extra(out, value);
    }
}

pub(crate) fn encode_delete(out: &mut Vec<u8>, id: &SyntheticId) {
    put_u8(out, OP_DELETE);
    out.extend_from_slice(&id.to_bytes());
}

/// Decodes one payload whose CRC matched; `base` is its file offset for errors.
pub(crate) fn decode(bytes: &[u8], base: u64, path: &Path) -> Result<Record> {
    let mut r = Reader::new(bytes, base, path);
    let at = r.offset();
    let op = r.u8()?;
    let record = match op {
        OP_CREATE | OP_INDEX => {
            let tsid = Tsid::from_bytes(r.array::<TSID_LEN>()?);
            let ts_millis = r.i64()?;
            let mut p = Point::new(tsid, ts_millis);
            p.dims = read_dims(&mut r)?;
            let metrics = r.u32()?;
            for _ in 0..metrics {
                let name = r.string()?;
                p.metrics.push((name, read_metric(&mut r)?));
            }
            let extras = r.u32()?;
            for _ in 0..extras {
                let name = r.string()?;
                p.extras.push((name, read_extra(&mut r)?));
            }
            if op == OP_CREATE {
                Record::Create(p)
            } else {
                Record::Index(p)
            }
        }
        OP_SERIES => {
            let series = r.u32()?;
            let tsid = Tsid::from_bytes(r.array::<TSID_LEN>()?);
            let dims = read_dims(&mut r)?;
            Record::Series { series, tsid, dims }
        }
        OP_COLUMN => {
            use crate::buffer::ColumnKind;
            let column = r.u32()?;
            let kind_at = r.offset();
            let kind = match r.u8()? {
                1 => ColumnKind::Gauge,
                2 => ColumnKind::Counter,
                3 => ColumnKind::Keyword,
                4 => ColumnKind::Bool,
                k => return Err(r.corrupt_at(kind_at, format!("unknown column kind {k}"))),
            };
            let extra = column & EXTRA_REF_BIT != 0;
            if extra != matches!(kind, ColumnKind::Keyword | ColumnKind::Bool) {
                return Err(r.corrupt_at(kind_at, "column ref and kind disagree"));
            }
            let name = r.string()?;
            Record::Column { column, kind, name }
        }
        OP_CREATE_REF | OP_INDEX_REF => {
            let series = r.u32()?;
            let ts_millis = r.i64()?;
            let n = r.u32()?;
            let mut metrics = Vec::with_capacity((n as usize).min(r.remaining() / 13));
            for _ in 0..n {
                let c = r.u32()?;
                metrics.push((c, read_metric(&mut r)?));
            }
            let n = r.u32()?;
            let mut extras = Vec::new();
            for _ in 0..n {
                let at = r.offset();
                let c = r.u32()?;
                if c & EXTRA_REF_BIT == 0 {
                    return Err(r.corrupt_at(at, "extra value with a metric column ref"));
                }
                extras.push((c & !EXTRA_REF_BIT, read_extra(&mut r)?));
            }
            Record::Append {
                create: op == OP_CREATE_REF,
                series,
                ts_millis,
                metrics,
                extras,
            }
        }
        OP_DELETE => {
            let id_at = r.offset();
            let bytes = r.take(SYNTHETIC_ID_LEN)?;
            let id = SyntheticId::from_bytes(bytes)
                .map_err(|e| r.corrupt_at(id_at, format!("synthetic id: {e}")))?;
            Record::Delete(id)
        }
        other => return Err(r.corrupt_at(at, format!("unknown operation {other}"))),
    };
    if !r.is_empty() {
        return Err(r.corrupt_at(
            r.offset(),
            format!("{} trailing bytes after the record", r.remaining()),
        ));
    }
    Ok(record)
}

fn read_dims(r: &mut Reader<'_>) -> Result<Vec<(String, Dim)>> {
    let n = r.u32()?;
    let mut dims = Vec::new();
    for _ in 0..n {
        let name = r.string()?;
        let tag_at = r.offset();
        let value = match r.u8()? {
            1 => Dim::Keyword(r.string()?),
            2 => Dim::Int(r.i64()?),
            3 => Dim::UInt(r.u64()?),
            4 => Dim::Bool(r.u8()? != 0),
            5 => Dim::Ip(Ipv6Addr::from(r.array::<16>()?)),
            t => return Err(r.corrupt_at(tag_at, format!("unknown dimension tag {t}"))),
        };
        dims.push((name, value));
    }
    Ok(dims)
}

fn read_metric(r: &mut Reader<'_>) -> Result<MetricValue> {
    let kind_at = r.offset();
    let kind = r.u8()?;
    let bits = r.u64()?;
    match kind {
        1 => Ok(MetricValue::Gauge(f64::from_bits(bits))),
        2 => Ok(MetricValue::Counter(bits as i64)),
        k => Err(r.corrupt_at(kind_at, format!("unknown metric kind {k}"))),
    }
}

fn read_extra(r: &mut Reader<'_>) -> Result<Extra> {
    let kind_at = r.offset();
    match r.u8()? {
        3 => Ok(Extra::Keyword(r.string()?)),
        4 => Ok(Extra::Bool(r.u8()? != 0)),
        k => Err(r.corrupt_at(kind_at, format!("unknown extra kind {k}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_value_kind() {
        let p = Point::new(Tsid::from_bytes([7; 20]), -5)
            .dim("k", "v")
            .dim("i", -3i64)
            .dim("b", true)
            .gauge("g", f64::NAN)
            .counter("c", i64::MIN)
            .keyword("msg", "disk full")
            .flag("ok", false);
        let mut p = p;
        p.dims.push(("u".into(), Dim::UInt(u64::MAX)));
        p.dims.push(("ip".into(), Dim::Ip(Ipv6Addr::LOCALHOST)));
        let mut buf = Vec::new();
        encode_point(&mut buf, false, &p);
        let path = Path::new("wal");
        assert_eq!(decode(&buf, 0, path).unwrap(), Record::Index(p));
        let id = SyntheticId::new(Tsid::from_bytes([1; 20]), 42);
        buf.clear();
        encode_delete(&mut buf, &id);
        assert_eq!(decode(&buf, 0, path).unwrap(), Record::Delete(id));
    }

    #[test]
    fn ref_records_round_trip() {
        use crate::buffer::ColumnKind;
        let path = Path::new("wal");
        let mut buf = Vec::new();
        let dims = vec![("host".to_owned(), Dim::Keyword("a".into()))];
        encode_series(&mut buf, 3, &Tsid::from_bytes([2; 20]), &dims);
        assert_eq!(
            decode(&buf, 0, path).unwrap(),
            Record::Series {
                series: 3,
                tsid: Tsid::from_bytes([2; 20]),
                dims
            }
        );
        buf.clear();
        encode_column(&mut buf, 1 | EXTRA_REF_BIT, ColumnKind::Keyword, "msg");
        assert_eq!(
            decode(&buf, 0, path).unwrap(),
            Record::Column {
                column: 1 | EXTRA_REF_BIT,
                kind: ColumnKind::Keyword,
                name: "msg".into()
            }
        );
        buf.clear();
        let metrics = vec![
            (0, MetricValue::Gauge(f64::NAN)),
            (2, MetricValue::Counter(-1)),
        ];
        let extras = vec![(1, Extra::Keyword("x".into()))];
        encode_append(&mut buf, true, 3, -7, &metrics, &extras);
        let full = buf.clone();
        assert_eq!(
            decode(&buf, 0, path).unwrap(),
            Record::Append {
                create: true,
                series: 3,
                ts_millis: -7,
                metrics,
                extras
            }
        );
        for len in 0..full.len() {
            assert!(decode(&full[..len], 0, path).is_err(), "len {len}");
        }
    }

    #[test]
    fn rejects_every_truncation_without_panicking() {
        let p = Point::new(Tsid::from_bytes([7; 20]), 9)
            .dim("k", "v")
            .gauge("g", 1.5)
            .keyword("m", "x");
        let mut buf = Vec::new();
        encode_point(&mut buf, true, &p);
        for len in 0..buf.len() {
            assert!(
                decode(&buf[..len], 0, Path::new("wal")).is_err(),
                "len {len}"
            );
        }
    }
}
