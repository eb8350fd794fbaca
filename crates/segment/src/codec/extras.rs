//! Extra-column blocks: keyword dictionaries and bit-packed booleans.

use crate::error::{Error, Result};
use crate::le::Reader;

/// Extra keyword column: a per-block dictionary (count, then length-prefixed strings in
/// order of first appearance), then each value's dictionary index.
pub const ENC_DICT: u8 = 20;
/// Extra boolean column: values bit-packed, least significant bit first.
pub const ENC_BITS: u8 = 21;

/// Encodes the values of an extra block (after the presence header).
pub fn encode_extras<'a>(
    kind: crate::point::ExtraKind,
    values: impl Iterator<Item = &'a crate::point::Extra>,
    out: &mut Vec<u8>,
) {
    use crate::point::{Extra, ExtraKind};
    match kind {
        ExtraKind::Keyword => {
            out.push(ENC_DICT);
            let mut dict: Vec<&str> = Vec::new();
            let mut index: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
            let mut ids = Vec::new();
            for v in values {
                let s = match v {
                    Extra::Keyword(s) => s.as_str(),
                    Extra::Bool(_) => "",
                };
                let id = *index.entry(s).or_insert_with(|| {
                    dict.push(s);
                    dict.len() as u64 - 1
                });
                ids.push(id);
            }
            crate::le::put_varint(out, dict.len() as u64);
            for s in dict {
                crate::le::put_varint(out, s.len() as u64);
                out.extend_from_slice(s.as_bytes());
            }
            for id in ids {
                crate::le::put_varint(out, id);
            }
        }
        ExtraKind::Bool => {
            out.push(ENC_BITS);
            let mut byte = 0u8;
            let mut n = 0usize;
            for v in values {
                if matches!(v, Extra::Bool(true)) {
                    byte |= 1 << (n % 8);
                }
                n += 1;
                if n % 8 == 0 {
                    out.push(byte);
                    byte = 0;
                }
            }
            if n % 8 != 0 {
                out.push(byte);
            }
        }
    }
}

/// Decodes `count` values of an extra block of `kind`.
pub fn decode_extras(
    r: &mut Reader<'_>,
    kind: crate::point::ExtraKind,
    count: usize,
    want: std::ops::Range<usize>,
) -> Result<Vec<crate::point::Extra>> {
    use crate::point::{Extra, ExtraKind};
    let enc = r.u8()?;
    // Every value is checked; only those at positions `want` are materialized (a
    // verification reads a few rows of a block: cloning all its strings dominated).
    let want = want.start.min(count)..want.end.min(count);
    let mut out = Vec::with_capacity(want.len().min(r.remaining().saturating_mul(8)));
    match (kind, enc) {
        (ExtraKind::Keyword, ENC_DICT) => {
            let n = r.count("dictionary size", count as u64)?;
            let mut dict: Vec<&str> = Vec::with_capacity(n.min(r.remaining()));
            for _ in 0..n {
                let len = r.count("keyword length", r.remaining() as u64)?;
                let bytes = r.take(len)?;
                dict.push(
                    std::str::from_utf8(bytes)
                        .map_err(|_| Error::corrupt(r.place(), "keyword is not UTF-8"))?,
                );
            }
            for i in 0..count {
                let id = r.varint()?;
                let s = usize::try_from(id)
                    .ok()
                    .and_then(|i| dict.get(i))
                    .ok_or_else(|| Error::corrupt(r.place(), format!("dictionary index {id}")))?;
                if want.contains(&i) {
                    out.push(Extra::Keyword((*s).to_owned()));
                }
            }
        }
        (ExtraKind::Bool, ENC_BITS) => {
            let bytes = r.take(count.div_ceil(8))?;
            for i in want {
                let byte = bytes.get(i / 8).copied().unwrap_or(0);
                out.push(Extra::Bool(byte & (1 << (i % 8)) != 0));
            }
        }
        _ => {
            return Err(Error::corrupt(
                r.place(),
                format!("encoding {enc} does not fit a {} column", kind.name()),
            ));
        }
    }
    Ok(out)
}
