//! Column encodings and block compression.
//!
//! Every block is `codec u8 | body`; the body, once decompressed, starts with an encoding
//! byte. Decoders take the expected value count and never trust a length they have not
//! checked against the input.
//!
//! One module per family, each with its tags, encoders and decoders: [`timestamps`],
//! [`gauges`], [`counters`], the byte-plane layouts both share ([`planes`]), [`extras`]
//! and [`presence`] headers. This module holds the block codec (raw or zstd) and the
//! dispatch of a metric block's encoding byte to its family.

use std::cell::RefCell;

use crate::error::{Error, Place, Result};
use crate::le::Reader;

mod alp;
mod counters;
mod extras;
mod gauges;
mod planes;
mod presence;
mod timestamps;

pub use alp::{ENC_ALP, ENC_ALP_DELTA};
pub use counters::{
    ENC_DELTA, ENC_DELTA_PLANES, ENC_DELTA_SPLIT, ENC_DOD, counter_candidates,
    counter_candidates_fast,
};
pub use extras::{ENC_BITS, ENC_DICT, decode_extras, encode_extras};
pub use gauges::{
    ENC_INT_DELTA, ENC_INT_DELTA_SPLIT, ENC_RAW64, ENC_RAW64_PLANES, ENC_RAW64_SPLIT, ENC_XOR,
    ENC_XOR_PLANES, ENC_XOR_SPLIT, gauge_candidates, gauge_candidates_fast,
};
pub use presence::{PRESENCE_ROARING, decode_presence, encode_presence};
pub use timestamps::{
    ENC_TS_DOD, ENC_TS_GRID, decode_timestamps, decode_timestamps_run, encode_timestamps,
    encode_timestamps_grid,
};

/// The gauge value encodings one at a time, for benchmarks and tools: the writer
/// itself tries every applicable one per block and keeps the smallest stored block.
pub mod gauge_codec {
    use super::{BlockCompressor, Values, alp, decode_values, gauges, planes};
    use crate::error::{Error, Place, Result};
    use crate::le::Reader;

    /// One gauge value encoding.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum GaugeEncoding {
        /// Raw 8-byte `f64` bits.
        Raw64,
        /// XOR with the previous value's bits, byte-trimmed.
        Xor,
        /// Raw bits as 8 byte planes.
        Raw64Split,
        /// XOR words as 8 byte planes.
        XorSplit,
        /// Raw bits as 8 separately coded (raw, constant or zstd level 3) planes.
        Raw64Planes,
        /// XOR words as 8 separately coded planes.
        XorPlanes,
        /// ALP integers, frame of reference and bit-packed.
        Alp,
        /// ALP integers as zigzag varint deltas.
        AlpDelta,
    }

    impl GaugeEncoding {
        /// The encoding's name, as `dump` prints it.
        pub fn name(self) -> &'static str {
            super::encoding_name(self.code())
        }

        /// The encoding byte.
        pub fn code(self) -> u8 {
            match self {
                GaugeEncoding::Raw64 => gauges::ENC_RAW64,
                GaugeEncoding::Xor => gauges::ENC_XOR,
                GaugeEncoding::Raw64Split => gauges::ENC_RAW64_SPLIT,
                GaugeEncoding::XorSplit => gauges::ENC_XOR_SPLIT,
                GaugeEncoding::Raw64Planes => gauges::ENC_RAW64_PLANES,
                GaugeEncoding::XorPlanes => gauges::ENC_XOR_PLANES,
                GaugeEncoding::Alp => alp::ENC_ALP,
                GaugeEncoding::AlpDelta => alp::ENC_ALP_DELTA,
            }
        }
    }

    /// `values` in encoding `enc` (encoding byte first); `None` when the encoding does
    /// not apply (ALP with more than half the values exceptions, or `alp` with integers
    /// spanning more than 2^51).
    ///
    /// # Errors
    /// A zstd failure of the plane encodings.
    pub fn encode_gauges(values: &[f64], enc: GaugeEncoding) -> Result<Option<Vec<u8>>> {
        let bits = || values.iter().map(|v| v.to_bits()).collect::<Vec<u64>>();
        let mut out = Vec::with_capacity(values.len() * 8 + 16);
        match enc {
            GaugeEncoding::Raw64 => {
                out.push(gauges::ENC_RAW64);
                for v in values {
                    out.extend_from_slice(&v.to_bits().to_le_bytes());
                }
            }
            GaugeEncoding::Xor => gauges::encode_xor(values, &mut out),
            GaugeEncoding::Raw64Split => {
                out.push(gauges::ENC_RAW64_SPLIT);
                planes::put_planes(&bits(), &mut out);
            }
            GaugeEncoding::XorSplit => {
                out.push(gauges::ENC_XOR_SPLIT);
                planes::put_planes(&gauges::xor_words(values), &mut out);
            }
            GaugeEncoding::Raw64Planes | GaugeEncoding::XorPlanes => {
                let mut comp = BlockCompressor::new(3)?;
                let words = if enc == GaugeEncoding::Raw64Planes {
                    bits()
                } else {
                    gauges::xor_words(values)
                };
                out = planes::put_coded_planes(&words, enc.code(), &mut comp)?;
            }
            GaugeEncoding::Alp | GaugeEncoding::AlpDelta => {
                let Some(t) = alp::transform(values) else {
                    return Ok(None);
                };
                if enc == GaugeEncoding::Alp && alp::encoded_sizes(&t).0 == usize::MAX {
                    return Ok(None);
                }
                if enc == GaugeEncoding::Alp {
                    alp::encode_for(&t, &mut out);
                } else {
                    alp::encode_delta(&t, &mut out);
                }
            }
        }
        Ok(Some(out))
    }

    /// Decodes `count` gauge values written by [`encode_gauges`] (any gauge encoding).
    ///
    /// # Errors
    /// [`Error::Corrupt`] or [`Error::Truncated`] for input no encoder wrote, trailing
    /// bytes included; [`Error::TooLarge`] for a `count` above
    /// [`MAX_BLOCK_ROWS`](crate::MAX_BLOCK_ROWS).
    pub fn decode_gauges(bytes: &[u8], count: usize) -> Result<Vec<f64>> {
        // A block holds at most MAX_BLOCK_ROWS values; the reader bounds the count by the
        // block's rows, and so must this door (some encodings hold any count in a few
        // bytes, and the output is allocated up front).
        let max = crate::format::MAX_BLOCK_ROWS;
        if count > max as usize {
            return Err(Error::TooLarge {
                what: "gauge values in one block",
                found: count as u64,
                max: u64::from(max),
            });
        }
        let mut r = Reader::new(bytes, Place::Meta);
        let (_, values) = decode_values(&mut r, count)?;
        if !r.is_empty() {
            return Err(Error::corrupt(r.place(), "trailing bytes after the values"));
        }
        match values {
            Values::Gauge(v) => Ok(v),
            Values::Counter(_) => Err(Error::corrupt(r.place(), "a counter encoding")),
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn every_encoding_round_trips_and_trailing_bytes_are_refused() {
            let values = [21.37, 21.5, f64::NAN, -0.0, 1e300, 22.0, 21.99];
            let all = [
                GaugeEncoding::Raw64,
                GaugeEncoding::Xor,
                GaugeEncoding::Raw64Split,
                GaugeEncoding::XorSplit,
                GaugeEncoding::Raw64Planes,
                GaugeEncoding::XorPlanes,
                GaugeEncoding::Alp,
                GaugeEncoding::AlpDelta,
            ];
            for enc in all {
                let mut bytes = encode_gauges(&values, enc).unwrap().unwrap();
                assert_eq!(bytes[0], enc.code(), "{}", enc.name());
                let back = decode_gauges(&bytes, values.len()).unwrap();
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&back), bits(&values), "{}", enc.name());
                bytes.push(0);
                assert!(decode_gauges(&bytes, values.len()).is_err());
            }
            // A count no block holds is refused, not allocated.
            let alp = encode_gauges(&[1.5; 4], GaugeEncoding::Alp)
                .unwrap()
                .unwrap();
            assert!(matches!(
                decode_gauges(&alp, usize::MAX),
                Err(Error::TooLarge { .. })
            ));
            // ALP does not apply when most values are exceptions.
            let noisy: Vec<f64> = (1..50).map(|i| (f64::from(i) * 0.7).sin()).collect();
            assert!(encode_gauges(&noisy, GaugeEncoding::Alp).unwrap().is_none());
        }
    }
}

/// Block codec: the body is stored as is.
pub const CODEC_RAW: u8 = 0;
/// Block codec: the body is one zstd frame.
pub const CODEC_ZSTD: u8 = 1;

/// Human name of an encoding code, for `dump`.
pub fn encoding_name(code: u8) -> &'static str {
    match code {
        ENC_TS_DOD => "ts-dod",
        ENC_TS_GRID => "ts-grid",
        ENC_DICT => "dict",
        ENC_BITS => "bits",
        ENC_DELTA => "delta",
        ENC_DOD => "dod",
        ENC_RAW64 => "raw64",
        ENC_XOR => "xor",
        ENC_INT_DELTA => "int-delta",
        ENC_RAW64_SPLIT => "raw64-split",
        ENC_XOR_SPLIT => "xor-split",
        ENC_DELTA_SPLIT => "delta-split",
        ENC_INT_DELTA_SPLIT => "int-delta-split",
        ENC_RAW64_PLANES => "raw64-planes",
        ENC_XOR_PLANES => "xor-planes",
        ENC_DELTA_PLANES => "delta-planes",
        ENC_ALP => "alp",
        ENC_ALP_DELTA => "alp-delta",
        _ => "unknown",
    }
}

/// The decoded header fields of a metric block's values (starting at their encoding
/// byte), for `dump`: empty for the encodings whose header is the byte alone.
pub fn describe_values(values: &[u8]) -> String {
    match values.split_first() {
        Some((&enc, body)) if enc == ENC_ALP || enc == ENC_ALP_DELTA => {
            match alp::describe(enc, body) {
                Ok(s) => format!(" ({s})"),
                Err(e) => format!(" (error: {e})"),
            }
        }
        _ => String::new(),
    }
}

/// A reusable zstd compression context (creating one per block costs more than
/// compressing a small block).
pub struct BlockCompressor {
    /// `None` at level 0: everything stored as it is.
    ctx: Option<zstd::bulk::Compressor<'static>>,
}

impl BlockCompressor {
    /// A context at `level`; level 0 stores every block and frame uncompressed (the
    /// codecs' own packing only), for segments that are soon merged.
    pub fn new(level: i32) -> Result<BlockCompressor> {
        let ctx = match level {
            0 => None,
            l => Some(zstd::bulk::Compressor::new(l)?),
        };
        Ok(BlockCompressor { ctx })
    }

    /// Compresses `data` as one zstd frame; `None` at level 0 (store it as it is).
    pub fn compress_frame(&mut self, data: &[u8]) -> Result<Option<Vec<u8>>> {
        match &mut self.ctx {
            Some(ctx) => Ok(Some(ctx.compress(data)?)),
            None => Ok(None),
        }
    }

    /// Wraps `raw` in a block: zstd when that is smaller, else raw.
    pub fn compress_block(&mut self, raw: &[u8]) -> Result<Vec<u8>> {
        let packed = self.compress_frame(raw)?;
        let mut out = Vec::with_capacity(1 + packed.as_ref().map_or(raw.len(), Vec::len));
        match packed {
            Some(packed) if packed.len() < raw.len() => {
                out.push(CODEC_ZSTD);
                out.extend_from_slice(&packed);
            }
            _ => {
                out.push(CODEC_RAW);
                out.extend_from_slice(raw);
            }
        }
        Ok(out)
    }
}

thread_local! {
    /// One decompression context per thread, reused by every block read.
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
}

pub(super) fn zstd_into(body: &[u8], out: &mut Vec<u8>) -> std::io::Result<usize> {
    DECOMPRESSOR.with(|cell| match cell.try_borrow_mut() {
        Ok(mut slot) => {
            if slot.is_none() {
                *slot = Some(zstd::bulk::Decompressor::new()?);
            }
            match slot.as_mut() {
                Some(d) => d.decompress_to_buffer(body, out),
                None => zstd::bulk::Decompressor::new()?.decompress_to_buffer(body, out),
            }
        }
        Err(_) => zstd::bulk::Decompressor::new()?.decompress_to_buffer(body, out),
    })
}

/// Unwraps a block into `out`; its decompressed size must be exactly `raw_len` (at most
/// `max_raw`).
pub fn decompress_block_into(
    block: &[u8],
    raw_len: u64,
    max_raw: u64,
    place: Place,
    out: &mut Vec<u8>,
) -> Result<()> {
    if raw_len > max_raw {
        return Err(Error::corrupt(
            place,
            format!("decoded length {raw_len} exceeds the limit {max_raw}"),
        ));
    }
    let raw_len = usize::try_from(raw_len)
        .map_err(|_| Error::corrupt(place, "decoded length does not fit memory"))?;
    let Some((&codec, body)) = block.split_first() else {
        return Err(Error::Truncated {
            place,
            needed: 1,
            available: 0,
        });
    };
    out.clear();
    match codec {
        CODEC_RAW => out.extend_from_slice(body),
        CODEC_ZSTD => {
            out.reserve_exact(raw_len);
            zstd_into(body, out).map_err(|e| Error::corrupt(place, format!("zstd: {e}")))?;
        }
        other => return Err(Error::corrupt(place, format!("unknown codec {other}"))),
    }
    if out.len() != raw_len {
        return Err(Error::corrupt(
            place,
            format!("decoded {} bytes, expected {raw_len}", out.len()),
        ));
    }
    Ok(())
}

/// Unwraps a block whose decompressed size must be exactly `raw_len` (at most `max_raw`).
pub fn decompress_block(block: &[u8], raw_len: u64, max_raw: u64, place: Place) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    decompress_block_into(block, raw_len, max_raw, place, &mut out)?;
    Ok(out)
}

/// Decoded values of one metric block.
#[derive(Debug, Clone, PartialEq)]
pub enum Values {
    /// Gauge readings.
    Gauge(Vec<f64>),
    /// Counter readings.
    Counter(Vec<i64>),
}

/// Decodes `count` values of the given encoding.
pub fn decode_values(r: &mut Reader<'_>, count: usize) -> Result<(u8, Values)> {
    let enc = r.u8()?;
    // Each value takes at least one byte, so a count beyond the input is corrupt (coded
    // planes excepted: a constant plane takes two bytes for any count, and callers bound
    // `count` by the block's rows; so is ALP's frame of reference, whose integers take
    // no byte at all when they are all equal).
    let planes = matches!(
        enc,
        ENC_RAW64_PLANES | ENC_XOR_PLANES | ENC_DELTA_PLANES | ENC_ALP
    );
    if !planes && count > r.remaining() {
        return Err(Error::corrupt(
            r.place(),
            format!("{count} values cannot fit in {} bytes", r.remaining()),
        ));
    }
    let values = match enc {
        ENC_DELTA | ENC_DOD | ENC_DELTA_SPLIT | ENC_DELTA_PLANES => {
            Values::Counter(counters::decode(r, enc, count)?)
        }
        ENC_RAW64 | ENC_XOR | ENC_INT_DELTA | ENC_RAW64_SPLIT | ENC_XOR_SPLIT
        | ENC_INT_DELTA_SPLIT | ENC_RAW64_PLANES | ENC_XOR_PLANES => {
            Values::Gauge(gauges::decode(r, enc, count)?)
        }
        ENC_ALP | ENC_ALP_DELTA => Values::Gauge(alp::decode(r, enc, count)?),
        other => return Err(unknown_encoding(r, other)),
    };
    Ok((enc, values))
}

/// The error for a value encoding no family knows.
fn unknown_encoding(r: &Reader<'_>, enc: u8) -> Error {
    Error::corrupt(r.place(), format!("unknown value encoding {enc}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip_gauges(values: &[f64]) {
        let mut comp = BlockCompressor::new(3).unwrap();
        for cand in gauge_candidates(values, &mut comp).unwrap() {
            let mut r = Reader::new(&cand, Place::Meta);
            let (_, got) = decode_values(&mut r, values.len()).unwrap();
            let Values::Gauge(got) = got else { panic!() };
            let a: Vec<u64> = values.iter().map(|v| v.to_bits()).collect();
            let b: Vec<u64> = got.iter().map(|v| v.to_bits()).collect();
            assert_eq!(a, b, "encoding {}", cand[0]);
            assert!(r.is_empty());
        }
    }

    #[test]
    fn gauges_round_trip_bit_exact() {
        round_trip_gauges(&[0.0, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1.5]);
        round_trip_gauges(&[1.0, 2.0, 3.0, 1e18, -1e18, 9.2e18]);
        round_trip_gauges(&[f64::MIN_POSITIVE, f64::MAX, f64::MIN, 5e-324]);
        round_trip_gauges(&[]);
    }

    #[test]
    fn constant_planes_round_trip() {
        round_trip_gauges(&[42.0; 1000]);
        let mut comp = BlockCompressor::new(3).unwrap();
        let values = vec![7i64; 1000];
        for cand in counter_candidates(&values, &mut comp).unwrap() {
            let mut r = Reader::new(&cand, Place::Meta);
            let (_, got) = decode_values(&mut r, values.len()).unwrap();
            assert_eq!(got, Values::Counter(values.clone()));
        }
    }

    #[test]
    fn counters_round_trip_extremes() {
        let values = [0, i64::MAX, i64::MIN, -1, 1, i64::MAX, 5, 10, 15];
        let mut comp = BlockCompressor::new(3).unwrap();
        for cand in counter_candidates(&values, &mut comp).unwrap() {
            let mut r = Reader::new(&cand, Place::Meta);
            let (_, got) = decode_values(&mut r, values.len()).unwrap();
            assert_eq!(got, Values::Counter(values.to_vec()));
        }
    }

    /// The smallest of `cands` by length, the first on a tie (what a fast write kept when
    /// it encoded every cheap candidate).
    fn smallest(cands: Vec<Vec<u8>>) -> Vec<u8> {
        let mut best: Option<Vec<u8>> = None;
        for c in cands {
            if best.as_ref().is_none_or(|b| c.len() < b.len()) {
                best = Some(c);
            }
        }
        best.unwrap_or_default()
    }

    /// The smaller of the ALP layouts, frame of reference on a tie.
    fn smallest_alp(cands: Vec<Vec<u8>>) -> Option<Vec<u8>> {
        if cands.is_empty() {
            None
        } else {
            Some(smallest(cands))
        }
    }

    proptest::proptest! {
        /// A fast write sizes the cheap encodings and encodes only the smallest: the bytes
        /// of the smallest of them encoded in full, for counters and for gauges (integer
        /// valued or not).
        #[test]
        fn fast_candidates_are_the_smallest_cheap_encoding(
            base in proptest::prelude::any::<i64>(),
            steps in proptest::collection::vec(-300i64..300, 0..200),
            scale in proptest::prop_oneof![proptest::strategy::Just(1.0f64), proptest::strategy::Just(0.01)],
        ) {
            let mut v = base / 4;
            let counters: Vec<i64> = steps
                .iter()
                .map(|&s| {
                    v = v.wrapping_add(s);
                    v
                })
                .collect();
            let mut comp = BlockCompressor::new(3).unwrap();
            let full = counter_candidates(&counters, &mut comp).unwrap();
            let fast = counters::counter_candidates_fast(&counters);
            proptest::prop_assert_eq!(fast.len(), 1);
            proptest::prop_assert_eq!(&fast[0], &smallest(full[..2].to_vec()));

            let gauges: Vec<f64> = steps.iter().map(|&s| s as f64 * scale).collect();
            let full = gauge_candidates(&gauges, &mut comp).unwrap();
            // The cheap ones in the fast path's tie order: XOR, integer deltas, then the
            // smaller ALP layout (frame of reference first).
            let by_enc = |enc: u8| full.iter().filter(move |c| c.first() == Some(&enc)).cloned();
            let mut cheap: Vec<Vec<u8>> = by_enc(ENC_XOR).chain(by_enc(ENC_INT_DELTA)).collect();
            cheap.extend(smallest_alp(by_enc(ENC_ALP).chain(by_enc(ENC_ALP_DELTA)).collect()));
            let fast = gauges::gauge_candidates_fast(&gauges);
            proptest::prop_assert_eq!(fast.len(), 1);
            proptest::prop_assert_eq!(&fast[0], &smallest(cheap));
        }
    }
}
