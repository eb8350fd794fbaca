//! Typed dimension values and their canonical byte encoding.
//!
//! The encoding is part of the `_tsid` format: changing a tag or a width
//! changes every tsid. `docs/tsid.md` documents it and the golden snapshot
//! in `tests/tsid/golden.rs` pins it.

use std::net::{IpAddr, Ipv6Addr};

use crate::error::{Error, Result};

/// Longest dimension or metric name, in bytes (as Elasticsearch's
/// `_tsid`: 512).
pub const MAX_NAME_LEN: usize = 512;

/// Longest keyword dimension value, in bytes (as Elasticsearch's
/// `_tsid`: 1024).
pub const MAX_KEYWORD_LEN: usize = 1024;

/// Most dimensions (and, separately, metric names) in one series identity.
pub const MAX_DIMENSIONS: usize = 1024;

/// Tag of a keyword (string) value: `u16` big-endian length, then UTF-8.
pub(crate) const TAG_KEYWORD: u8 = 0x01;
/// Tag of an integer in `i64` range: 8 bytes big-endian two's complement.
pub(crate) const TAG_INT: u8 = 0x02;
/// Tag of an integer above `i64::MAX`: 8 bytes big-endian unsigned.
pub(crate) const TAG_UINT: u8 = 0x03;
/// Tag of a boolean: one byte, 0 or 1.
pub(crate) const TAG_BOOL: u8 = 0x04;
/// Tag of an IP address: 16 bytes, IPv4 mapped into IPv6 (`::ffff:a.b.c.d`).
pub(crate) const TAG_IP: u8 = 0x05;

/// A typed dimension value, borrowed from the caller.
///
/// The value's *meaning* is hashed, not its Rust type: `I64(5)` and `U64(5)`
/// are the same value, as are `Ip("10.0.0.1")` and `Ip("::ffff:10.0.0.1")`.
/// Types never mix: `Keyword("5")`, `I64(5)` and `Bool(true)` are three
/// different values, and `Keyword("10.0.0.1")` differs from the IP address.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DimValue<'a> {
    /// A keyword (string) value, at most [`MAX_KEYWORD_LEN`] bytes.
    Keyword(&'a str),
    /// A keyword value as raw bytes, checked to be UTF-8 (for decoders that
    /// hand out bytes, such as protobuf readers).
    KeywordBytes(&'a [u8]),
    /// A signed integer.
    I64(i64),
    /// An unsigned integer.
    U64(u64),
    /// A boolean.
    Bool(bool),
    /// An IPv4 or IPv6 address.
    Ip(IpAddr),
    /// A float: never a valid dimension. The variant exists so that code
    /// mapping a generic value (an OpenTelemetry `double_value` attribute)
    /// gets an error naming the field instead of silently dropping it.
    F64(f64),
}

impl From<bool> for DimValue<'_> {
    fn from(v: bool) -> Self {
        DimValue::Bool(v)
    }
}

impl From<i64> for DimValue<'_> {
    fn from(v: i64) -> Self {
        DimValue::I64(v)
    }
}

impl From<u64> for DimValue<'_> {
    fn from(v: u64) -> Self {
        DimValue::U64(v)
    }
}

impl From<IpAddr> for DimValue<'_> {
    fn from(v: IpAddr) -> Self {
        DimValue::Ip(v)
    }
}

impl<'a> From<&'a str> for DimValue<'a> {
    fn from(v: &'a str) -> Self {
        DimValue::Keyword(v)
    }
}

/// Appends `v`'s canonical encoding (tag and payload) to `out`.
#[inline]
pub(crate) fn encode_value(name: &str, v: DimValue<'_>, out: &mut Vec<u8>) -> Result<()> {
    match v {
        DimValue::Keyword(s) => encode_keyword(name, s.as_bytes(), out),
        DimValue::KeywordBytes(b) => match std::str::from_utf8(b) {
            Ok(s) => encode_keyword(name, s.as_bytes(), out),
            Err(e) => Err(Error::InvalidUtf8 {
                name: name.to_owned(),
                valid_up_to: e.valid_up_to(),
            }),
        },
        DimValue::I64(i) => {
            encode_int(i, out);
            Ok(())
        }
        DimValue::U64(u) => {
            encode_uint(u, out);
            Ok(())
        }
        DimValue::Bool(b) => {
            out.push(TAG_BOOL);
            out.push(u8::from(b));
            Ok(())
        }
        DimValue::Ip(ip) => {
            encode_ip(ip, out);
            Ok(())
        }
        DimValue::F64(f) if f.is_nan() => Err(Error::NotANumber {
            name: name.to_owned(),
        }),
        DimValue::F64(f) => Err(Error::FloatDimension {
            name: name.to_owned(),
            value: f,
        }),
    }
}

#[inline]
pub(crate) fn encode_keyword(name: &str, s: &[u8], out: &mut Vec<u8>) -> Result<()> {
    let len = match u16::try_from(s.len()) {
        Ok(len) if s.len() <= MAX_KEYWORD_LEN => len,
        _ => {
            return Err(Error::ValueTooLong {
                name: name.to_owned(),
                len: s.len(),
                max: MAX_KEYWORD_LEN,
            });
        }
    };
    out.push(TAG_KEYWORD);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(s);
    Ok(())
}

#[inline]
pub(crate) fn encode_int(i: i64, out: &mut Vec<u8>) {
    out.push(TAG_INT);
    out.extend_from_slice(&i.to_be_bytes());
}

#[inline]
pub(crate) fn encode_uint(u: u64, out: &mut Vec<u8>) {
    // An unsigned value that fits `i64` is the same integer as the signed
    // one, so it takes the signed encoding; only larger ones need their own.
    match i64::try_from(u) {
        Ok(i) => encode_int(i, out),
        Err(_) => {
            out.push(TAG_UINT);
            out.extend_from_slice(&u.to_be_bytes());
        }
    }
}

#[inline]
pub(crate) fn encode_ip(ip: IpAddr, out: &mut Vec<u8>) {
    let v6: Ipv6Addr = match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    out.push(TAG_IP);
    out.extend_from_slice(&v6.octets());
}

/// Appends a name as `u16` big-endian length and UTF-8 bytes.
pub(crate) fn encode_name(name: &str, out: &mut Vec<u8>) -> Result<()> {
    let len = check_name(name)?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(name.as_bytes());
    Ok(())
}

/// Checks a name's length and returns it as `u16`.
pub(crate) fn check_name(name: &str) -> Result<u16> {
    if name.is_empty() {
        return Err(Error::InvalidPath {
            path: String::new(),
        });
    }
    match u16::try_from(name.len()) {
        Ok(len) if name.len() <= MAX_NAME_LEN => Ok(len),
        _ => Err(Error::NameTooLong {
            name_start: crate::error::cut(name, 64),
            len: name.len(),
            max: MAX_NAME_LEN,
        }),
    }
}

/// The JSON type's name, for error messages.
pub(crate) fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: DimValue<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        encode_value("f", v, &mut out).unwrap();
        out
    }

    #[test]
    fn signed_and_unsigned_encode_the_same_integer_alike() {
        assert_eq!(enc(DimValue::I64(5)), enc(DimValue::U64(5)));
        assert_ne!(enc(DimValue::I64(-1)), enc(DimValue::U64(u64::MAX)));
        assert_eq!(enc(DimValue::U64(u64::MAX))[0], TAG_UINT);
    }

    #[test]
    fn ipv4_is_mapped_into_ipv6() {
        let v4: IpAddr = "10.0.0.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(enc(DimValue::Ip(v4)), enc(DimValue::Ip(mapped)));
        assert_eq!(enc(DimValue::Ip(v4)).len(), 17);
    }

    #[test]
    fn keyword_and_number_differ() {
        assert_ne!(enc(DimValue::Keyword("1")), enc(DimValue::I64(1)));
        assert_eq!(
            enc(DimValue::Keyword("ab")),
            vec![TAG_KEYWORD, 0, 2, b'a', b'b']
        );
    }

    #[test]
    fn keyword_limit_is_inclusive() {
        let ok = "x".repeat(MAX_KEYWORD_LEN);
        assert!(encode_value("f", DimValue::Keyword(&ok), &mut Vec::new()).is_ok());
        let long = "x".repeat(MAX_KEYWORD_LEN + 1);
        assert_eq!(
            encode_value("f", DimValue::Keyword(&long), &mut Vec::new()),
            Err(Error::ValueTooLong {
                name: "f".into(),
                len: MAX_KEYWORD_LEN + 1,
                max: MAX_KEYWORD_LEN
            })
        );
    }
}
