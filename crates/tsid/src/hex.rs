//! Lowercase hex without allocation.

use crate::error::{Error, Result};

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Writes `bytes` as lowercase hex into `out` (which must be at least twice
/// as long; extra space is left alone) and returns the written text.
pub(crate) fn encode<'o>(bytes: &[u8], out: &'o mut [u8]) -> &'o str {
    let mut n = 0;
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        if let [hi, lo] = pair {
            *hi = DIGITS[usize::from(b >> 4)];
            *lo = DIGITS[usize::from(b & 0x0f)];
            n += 2;
        }
    }
    let written = out.get(..n).unwrap_or_default();
    // Only ASCII hex digits were written.
    std::str::from_utf8(written).unwrap_or_default()
}

/// Appends `bytes` as lowercase hex to `out`.
pub(crate) fn push(bytes: &[u8], out: &mut String) {
    out.reserve(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
}

/// Decodes exactly `out.len()` bytes of hex from `text`.
pub(crate) fn decode(text: &str, out: &mut [u8]) -> Result<()> {
    let expected_len = out.len() * 2;
    let err = || Error::InvalidHex {
        text: crate::error::cut(text, 64),
        expected_len,
    };
    if text.len() != expected_len {
        return Err(err());
    }
    for (b, pair) in out.iter_mut().zip(text.as_bytes().chunks_exact(2)) {
        match pair {
            [hi, lo] => match (nibble(*hi), nibble(*lo)) {
                (Some(hi), Some(lo)) => *b = hi << 4 | lo,
                _ => return Err(err()),
            },
            _ => return Err(err()),
        }
    }
    Ok(())
}

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut buf = [0u8; 8];
        assert_eq!(encode(&[0x01, 0xab, 0xff, 0x00], &mut buf), "01abff00");
        let mut out = [0u8; 4];
        decode("01ABff00", &mut out).unwrap();
        assert_eq!(out, [0x01, 0xab, 0xff, 0x00]);
        assert!(decode("01abff0", &mut out).is_err());
        assert!(decode("01abff0g", &mut out).is_err());
        let mut s = String::new();
        push(&[0xde, 0xad], &mut s);
        assert_eq!(s, "dead");
    }
}
