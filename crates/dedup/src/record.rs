//! WAL record payloads: one logical operation each.
//!
//! ```text
//! op u8 (1 create, 2 index, 3 delete)
//! create/index: tsid [20] | ts_millis i64 | dims u32 × (name | tag u8 | value)
//!               | metrics u32 × (name | kind u8 | bits u64)
//!               | extras u32 × (name | kind u8 | value)        (since WAL version 2)
//! delete:       synthetic id [28] (big-endian timestamp, as `SyntheticId::to_bytes`)
//! ```
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

/// A logged operation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Record {
    Create(Point),
    Index(Point),
    Delete(SyntheticId),
}

pub(crate) fn encode_point(out: &mut Vec<u8>, create: bool, p: &Point) {
    put_u8(out, if create { OP_CREATE } else { OP_INDEX });
    out.extend_from_slice(p.tsid.as_bytes());
    put_i64(out, p.ts_millis);
    put_u32(out, p.dims.len() as u32);
    for (name, value) in &p.dims {
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
    put_u32(out, p.metrics.len() as u32);
    for (name, value) in &p.metrics {
        put_bytes(out, name.as_bytes());
        put_u8(
            out,
            match value {
                MetricValue::Gauge(_) => 1,
                MetricValue::Counter(_) => 2,
            },
        );
        put_u64(out, value.to_bits());
    }
    put_u32(out, p.extras.len() as u32);
    for (name, value) in &p.extras {
        put_bytes(out, name.as_bytes());
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
            let dims = r.u32()?;
            for _ in 0..dims {
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
                p.dims.push((name, value));
            }
            let metrics = r.u32()?;
            for _ in 0..metrics {
                let name = r.string()?;
                let kind_at = r.offset();
                let kind = r.u8()?;
                let bits = r.u64()?;
                let value = match kind {
                    1 => MetricValue::Gauge(f64::from_bits(bits)),
                    2 => MetricValue::Counter(bits as i64),
                    k => return Err(r.corrupt_at(kind_at, format!("unknown metric kind {k}"))),
                };
                p.metrics.push((name, value));
            }
            let extras = r.u32()?;
            for _ in 0..extras {
                let name = r.string()?;
                let kind_at = r.offset();
                let value = match r.u8()? {
                    3 => Extra::Keyword(r.string()?),
                    4 => Extra::Bool(r.u8()? != 0),
                    k => return Err(r.corrupt_at(kind_at, format!("unknown extra kind {k}"))),
                };
                p.extras.push((name, value));
            }
            if op == OP_CREATE {
                Record::Create(p)
            } else {
                Record::Index(p)
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
