//! A parsed document as the engine takes it: its series (the tsid, and the dimensions
//! encoded in one buffer, read only when the series is new to the index), its
//! timestamp, and its values by field of the mapping it was read through — no `String`
//! per name or dimension, so a document costs two allocations instead of one per field.

use std::net::Ipv6Addr;
use std::sync::Arc;

use tidemark_segment::{Dim, Extra, MetricValue, Point};
use tidemark_tsid::Tsid;

use crate::error::{Error, Result};
use crate::mapping::Mapping;

/// One document, read: see the module documentation.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// The mapping whose fields `values` and `extras` index.
    pub(crate) schema: Arc<Mapping>,
    pub(crate) tsid: Tsid,
    pub(crate) ts_millis: i64,
    /// The dimensions, as [`DimsWriter`] encodes them (shared by the samples of one
    /// series, for the metrics protocols).
    pub(crate) dims: Arc<[u8]>,
    /// `(field index, value)`, in field order.
    pub(crate) values: Vec<(u32, MetricValue)>,
    /// `(field index, value)`, in field order.
    pub(crate) extras: Vec<(u32, Extra)>,
}

impl PartialEq for Row {
    fn eq(&self, o: &Row) -> bool {
        self.tsid == o.tsid
            && self.ts_millis == o.ts_millis
            && self.dims == o.dims
            && self.values == o.values
            && self.extras == o.extras
            && (Arc::ptr_eq(&self.schema, &o.schema) || self.schema.fields() == o.schema.fields())
    }
}

impl Row {
    /// The field path of field `i` of the row's mapping.
    pub(crate) fn field_name(&self, i: u32) -> Result<&str> {
        self.schema
            .fields()
            .get(i as usize)
            .map(|f| f.path.as_str())
            .ok_or_else(|| Error::Query {
                reason: format!("a parsed document names field {i}, which its mapping lacks"),
            })
    }

    /// The same document as a [`Point`] (named values, dimensions decoded).
    pub(crate) fn to_point(&self) -> Result<Point> {
        let mut p = Point::new(self.tsid, self.ts_millis);
        p.dims = decode_dims(&self.dims)?;
        p.metrics.reserve(self.values.len());
        for (f, v) in &self.values {
            p.metrics.push((self.field_name(*f)?.to_owned(), *v));
        }
        for (f, e) in &self.extras {
            p.extras.push((self.field_name(*f)?.to_owned(), e.clone()));
        }
        Ok(p)
    }
}

/// A dimension value borrowed from the input, as it will be stored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum DimRef<'a> {
    Keyword(&'a str),
    Int(i64),
    UInt(u64),
    Bool(bool),
    Ip(Ipv6Addr),
}

const TAG_KEYWORD: u8 = 1;
const TAG_INT: u8 = 2;
const TAG_UINT: u8 = 3;
const TAG_BOOL: u8 = 4;
const TAG_IP: u8 = 5;

/// Encodes dimensions into one buffer: per dimension, the name (u32 LE length, bytes), a
/// tag byte, and the value (keyword: u32 LE length and bytes; integers: 8 bytes LE;
/// boolean: 1 byte; IP: 16 bytes). An in-memory form only, never stored.
#[derive(Debug, Default, Clone)]
pub(crate) struct DimsWriter {
    buf: Vec<u8>,
}

impl DimsWriter {
    pub(crate) fn clear(&mut self) {
        self.buf.clear();
    }

    pub(crate) fn push(&mut self, name: &str, v: DimRef<'_>) {
        put_bytes(&mut self.buf, name.as_bytes());
        match v {
            DimRef::Keyword(s) => {
                self.buf.push(TAG_KEYWORD);
                put_bytes(&mut self.buf, s.as_bytes());
            }
            DimRef::Int(i) => {
                self.buf.push(TAG_INT);
                self.buf.extend_from_slice(&i.to_le_bytes());
            }
            DimRef::UInt(u) => {
                self.buf.push(TAG_UINT);
                self.buf.extend_from_slice(&u.to_le_bytes());
            }
            DimRef::Bool(b) => {
                self.buf.push(TAG_BOOL);
                self.buf.push(u8::from(b));
            }
            DimRef::Ip(ip) => {
                self.buf.push(TAG_IP);
                self.buf.extend_from_slice(&ip.octets());
            }
        }
    }

    /// The encoded dimensions, copied out.
    pub(crate) fn finish(&self) -> Arc<[u8]> {
        Arc::from(&self.buf[..])
    }
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    // Names and values were checked to fit a u16 before they got here; u32 leaves room.
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// Decodes what [`DimsWriter`] wrote.
pub(crate) fn decode_dims(mut b: &[u8]) -> Result<Vec<(String, Dim)>> {
    fn bad() -> Error {
        Error::Query {
            reason: "damaged in-memory dimensions of a parsed document".to_owned(),
        }
    }
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8]> {
        if b.len() < n {
            return Err(bad());
        }
        let (head, rest) = b.split_at(n);
        *b = rest;
        Ok(head)
    }
    fn array<const N: usize>(b: &mut &[u8]) -> Result<[u8; N]> {
        take(b, N)?.try_into().map_err(|_| bad())
    }
    fn text(b: &mut &[u8]) -> Result<String> {
        let n = u32::from_le_bytes(array(b)?) as usize;
        String::from_utf8(take(b, n)?.to_vec()).map_err(|_| bad())
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let name = text(&mut b)?;
        let [tag] = array::<1>(&mut b)?;
        let dim = match tag {
            TAG_KEYWORD => Dim::Keyword(text(&mut b)?),
            TAG_INT => Dim::Int(i64::from_le_bytes(array(&mut b)?)),
            TAG_UINT => Dim::UInt(u64::from_le_bytes(array(&mut b)?)),
            TAG_BOOL => Dim::Bool(array::<1>(&mut b)? != [0]),
            TAG_IP => Dim::Ip(Ipv6Addr::from(array::<16>(&mut b)?)),
            _ => return Err(bad()),
        };
        out.push((name, dim));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_round_trip_and_truncation_is_an_error() {
        let mut w = DimsWriter::default();
        w.push("host.name", DimRef::Keyword("a-1"));
        w.push("port", DimRef::Int(-5));
        w.push("big", DimRef::UInt(u64::MAX));
        w.push("up", DimRef::Bool(true));
        w.push("ip", DimRef::Ip(Ipv6Addr::LOCALHOST));
        let b = w.finish();
        assert_eq!(
            decode_dims(&b).unwrap(),
            vec![
                ("host.name".to_owned(), Dim::Keyword("a-1".to_owned())),
                ("port".to_owned(), Dim::Int(-5)),
                ("big".to_owned(), Dim::UInt(u64::MAX)),
                ("up".to_owned(), Dim::Bool(true)),
                ("ip".to_owned(), Dim::Ip(Ipv6Addr::LOCALHOST)),
            ]
        );
        for cut in 1..b.len() {
            // Every prefix either decodes to fewer whole dimensions or fails.
            if let Ok(d) = decode_dims(&b[..cut]) {
                assert!(d.len() < 5);
            }
        }
        assert!(decode_dims(&[0, 0, 0, 0, 9]).is_err());
    }
}
