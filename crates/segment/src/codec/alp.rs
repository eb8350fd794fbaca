//! ALP gauge blocks: decimal floats as small integers (Afroozeh, Kuffó, Boncz, "ALP:
//! Adaptive Lossless floating-Point Compression", SIGMOD 2024).
//!
//! Most gauges are decimals written with few digits (`21.37`, `12.5`) and sent as
//! doubles. For a block, ALP picks an exponent `e` and a factor `f` (`0 ≤ f ≤ e ≤ 18`)
//! by sampling, and stores each value as the integer `d = round(v × 10^e × 10^-f)`; the
//! decoder computes `d × 10^f × 10^-e` with the same two `f64` constants, or, in a block
//! whose mode says so, `d × 10^f / 10^e` (see [`Scale`] for why). A value whose
//! decoded bits differ from the original in any bit (full-precision doubles, NaN of any
//! payload, ±Inf, -0.0, the Prometheus stale marker) is an *exception*: its position and
//! its 8 raw bytes are stored beside the integers, and its integer slot holds the
//! previous integer so that it costs nothing there. The integers are then stored in one
//! of two layouts, both tried by the writer:
//!
//! - [`ENC_ALP`]: frame of reference (the block's smallest integer) and bit-packing of
//!   the offsets at the width of the block's range, as in the paper;
//! - [`ENC_ALP_DELTA`]: zigzag varint deltas from the previous integer, which suits a
//!   block of slowly moving series better than one frame for all of them.
//!
//! The layout after the encoding byte (`docs/format.md` has the box diagram):
//! `e u8 | f u8 | mode u8 | exceptions varint | positions varint… | values 8 B LE… |
//! integers`.
//! Every field is checked on decode; nothing read is trusted for an index or a length
//! before it is bounded.

use crate::error::{Error, Result};
use crate::le::{Reader, put_varint, put_zigzag, varint_len, zigzag};

/// Gauge: ALP integers as frame of reference and bit-packed offsets, with exceptions.
pub const ENC_ALP: u8 = 16;
/// Gauge: ALP integers as zigzag varint deltas, with exceptions.
pub const ENC_ALP_DELTA: u8 = 17;

/// The largest exponent and factor: `10^18` is the largest power of ten below `2^63`.
pub const MAX_EXPONENT: u8 = 18;

/// `10^i` for each exponent, exact as `f64`.
const F10: [f64; 19] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18,
];

/// `10^-i` for each exponent, the `f64` nearest to it (inexact from `10^-1` on: the round
/// trip check below is what makes the transform exact, not these constants).
const IF10: [f64; 19] = [
    1e0, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11, 1e-12, 1e-13, 1e-14,
    1e-15, 1e-16, 1e-17, 1e-18,
];

/// `2^52 + 2^51`: adding and subtracting it rounds an `f64` of magnitude below `2^51` to
/// the nearest integer (ties to even) in two additions, the paper's fast rounding.
const SWEET: f64 = 6_755_399_441_055_744.0;

/// Scaled values at or beyond `2^51` in magnitude are exceptions: the fast rounding is
/// exact only below it.
const ENCODE_LIMIT: f64 = 2_251_799_813_685_248.0;

/// The bits of [`SWEET`]: adding an integer below `2^51` in magnitude to them gives the
/// bits of `SWEET + integer`, so subtracting `SWEET` again converts it to `f64` exactly.
const MAGIC_BITS: u64 = 0x4338_0000_0000_0000;

/// Values sampled from a block in the first round of the exponent search (every
/// combination is tried on them).
const FIRST_SAMPLES: usize = 8;
/// Values sampled in the second round (the best few combinations are tried on them).
const SECOND_SAMPLES: usize = 32;
/// Combinations kept from the first round.
const KEPT_COMBINATIONS: usize = 5;

/// What an exception costs in the size estimate of the search, in bits: its 8 bytes and
/// about two bytes of position.
const EXCEPTION_BITS: u64 = 80;

/// A block's exponent, factor and decoding rule.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exponents {
    /// Decimal exponent: values are scaled up by `10^e`.
    pub e: u8,
    /// Factor: scaled values are divided by `10^f` again (trailing zeros).
    pub f: u8,
    /// Decode by dividing by the exact `10^e` instead of multiplying by the inexact
    /// `10^-e` (see [`Scale`]).
    pub divide: bool,
}

/// How a block's integers become values again.
///
/// The paper multiplies by `10^f` and by the `f64` nearest to `10^-e`: two
/// multiplications, but the second constant is inexact, and about 1% of the values of
/// a block with 3 or 4 decimals do not come back under any (e, f) (they become
/// exceptions). Dividing by the exact `10^e` gives the correctly rounded quotient, which
/// for a decimal of at most 15 significant digits is the very `f64` it was parsed to,
/// at the price of a division (about half the decode speed). The writer takes the
/// division only when the multiplication leaves exceptions and the division leaves
/// fewer bytes.
#[derive(Debug, Clone, Copy)]
enum Scale {
    /// `d × 10^f × 10^-e`.
    Multiply(f64, f64),
    /// `d × 10^f / 10^e`.
    Divide(f64, f64),
}

impl Scale {
    /// The value of integer `d`.
    #[inline(always)]
    fn value(self, d: i64) -> f64 {
        match self {
            Scale::Multiply(up, down) => d as f64 * up * down,
            Scale::Divide(up, div) => d as f64 * up / div,
        }
    }
}

impl Exponents {
    /// The multipliers of the encoder (`10^e`, `10^-f`); `None` out of range.
    #[inline]
    fn encode_factors(self) -> Option<(f64, f64)> {
        Some((
            *F10.get(usize::from(self.e))?,
            *IF10.get(usize::from(self.f))?,
        ))
    }

    /// The decoder's rule; `None` out of range.
    #[inline]
    fn scale(self) -> Option<Scale> {
        let up = *F10.get(usize::from(self.f))?;
        Some(if self.divide {
            Scale::Divide(up, *F10.get(usize::from(self.e))?)
        } else {
            Scale::Multiply(up, *IF10.get(usize::from(self.e))?)
        })
    }
}

/// `v`'s integer under the encoder's factors `enc` (`10^e`, `10^-f`), if it decodes back
/// to the identical bits under `dec`.
#[inline]
fn encode_one(v: f64, enc: (f64, f64), dec: Scale) -> Option<i64> {
    let scaled = v * enc.0 * enc.1;
    // NaN is not below the limit either.
    if scaled.abs().partial_cmp(&ENCODE_LIMIT) != Some(std::cmp::Ordering::Less) {
        return None;
    }
    let d = ((scaled + SWEET) - SWEET) as i64;
    (dec.value(d).to_bits() == v.to_bits()).then_some(d)
}

/// Up to `n` values of `values` (all of them when there are no more), spread over the
/// block by a golden-ratio stride rather than a regular one, which would see only one
/// phase of a block whose values alternate between integers and halves, say.
fn sample(values: &[f64], n: usize) -> Vec<f64> {
    if values.len() <= n {
        return values.to_vec();
    }
    let len = values.len() as u64;
    (0..n as u64)
        .filter_map(|k| values.get((k.wrapping_mul(0x9e37_79b9) % len) as usize))
        .copied()
        .collect()
}

/// The estimated size in bits of `sample` under `exp`: bit-packed integers at the width
/// of their range plus the exceptions.
fn estimate_bits(sample: &[f64], exp: Exponents) -> u64 {
    let (Some(enc), Some(dec)) = (exp.encode_factors(), exp.scale()) else {
        return u64::MAX;
    };
    let (mut lo, mut hi, mut exceptions, mut ok) = (i64::MAX, i64::MIN, 0u64, 0u64);
    for &v in sample {
        match encode_one(v, enc, dec) {
            Some(d) => {
                lo = lo.min(d);
                hi = hi.max(d);
                ok += 1;
            }
            None => exceptions += 1,
        }
    }
    let width = if ok == 0 {
        0
    } else {
        u64::from(width_of(lo, hi))
    };
    ok * width + exceptions * EXCEPTION_BITS
}

/// How many of `sample` do not come back under `exp`.
fn sample_exceptions(sample: &[f64], exp: Exponents) -> usize {
    let (Some(enc), Some(dec)) = (exp.encode_factors(), exp.scale()) else {
        return sample.len();
    };
    sample
        .iter()
        .filter(|&&v| encode_one(v, enc, dec).is_none())
        .count()
}

/// The exponents for `values`, chosen by sampling as in the paper: every combination on
/// a few values, then the best few on more; the smallest estimate wins (the smaller
/// exponent on a tie, so integers stay integers). Returns the best multiplying
/// combination and the best dividing exponent.
pub(crate) fn choose_exponents(values: &[f64]) -> (Exponents, Exponents) {
    let first = sample(values, FIRST_SAMPLES);
    let second = sample(values, SECOND_SAMPLES);
    let mut scored: Vec<(u64, Exponents)> = Vec::with_capacity(190);
    for e in 0..=MAX_EXPONENT {
        for f in 0..=e {
            let exp = Exponents {
                e,
                f,
                divide: false,
            };
            scored.push((estimate_bits(&first, exp), exp));
        }
    }
    // Stable: among equal estimates the order of the loops (smaller `e`, then `f`).
    scored.sort_by_key(|&(bits, _)| bits);
    scored.truncate(KEPT_COMBINATIONS);
    let best = |candidates: &mut dyn Iterator<Item = Exponents>| {
        let mut best = (u64::MAX, Exponents::default());
        for exp in candidates {
            let bits = estimate_bits(&second, exp);
            if bits < best.0 {
                best = (bits, exp);
            }
        }
        best.1
    };
    let multiply = best(&mut scored.into_iter().map(|(_, exp)| exp));
    let divide = best(&mut (0..=MAX_EXPONENT).map(|e| Exponents {
        e,
        f: 0,
        divide: true,
    }));
    (multiply, divide)
}

/// A block transformed: one integer per value (an exception's slot holds the previous
/// integer) and the exceptions as (position, bits).
#[derive(Debug, Default)]
pub(crate) struct Transformed {
    /// The exponents used.
    pub exp: Exponents,
    /// One integer per value.
    pub ints: Vec<i64>,
    /// The values that do not round-trip, by position.
    pub exceptions: Vec<(u32, u64)>,
}

/// Transforms `values` under the exponents chosen for them: the multiplying
/// combination, or the dividing one when the first leaves exceptions and the second a
/// smaller encoding. `None` when more than half of the values would be exceptions (the
/// other encodings are then smaller, and the writer need not compress this one to find
/// out; judged on the sample first) or when there are more than `u32::MAX`.
pub(crate) fn transform(values: &[f64]) -> Option<Transformed> {
    u32::try_from(values.len()).ok()?;
    let (multiply, divide) = choose_exponents(values);
    // When more than half of the sampled values are exceptions under both exponents
    // (full-precision doubles), the block would be too: not worth three passes over it.
    let sampled = sample(values, SECOND_SAMPLES);
    let too_many = |exp: Exponents| 2 * sample_exceptions(&sampled, exp) > sampled.len();
    if too_many(multiply) && too_many(divide) {
        return None;
    }
    let first = transform_with(values, multiply);
    if first.as_ref().is_some_and(|t| t.exceptions.is_empty()) {
        return first;
    }
    let size = |t: &Transformed| {
        let (a, b) = encoded_sizes(t);
        a.min(b)
    };
    let mut best = first;
    // The sample may have missed the values with the most decimals: the exponent the
    // values that fail need, tried too.
    let needed = needed_divide_exponent(values, multiply);
    for exp in [Some(divide), needed].into_iter().flatten() {
        if let Some(t) = transform_with(values, exp)
            && best.as_ref().is_none_or(|b| size(&t) < size(b))
        {
            best = Some(t);
        }
    }
    best
}

/// The dividing exponent that brings back the first few values that fail under `exp`
/// (the largest any of them needs), or `None` when none of them comes back under any.
fn needed_divide_exponent(values: &[f64], exp: Exponents) -> Option<Exponents> {
    let (enc, dec) = (exp.encode_factors()?, exp.scale()?);
    let mut needed: Option<u8> = None;
    for &v in values
        .iter()
        .filter(|&&v| encode_one(v, enc, dec).is_none())
        .take(16)
    {
        let e = (0..=MAX_EXPONENT).find(|&e| {
            let exp = Exponents {
                e,
                f: 0,
                divide: true,
            };
            matches!((exp.encode_factors(), exp.scale()), (Some(enc), Some(dec)) if encode_one(v, enc, dec).is_some())
        });
        if let Some(e) = e {
            needed = Some(needed.map_or(e, |n| n.max(e)));
        }
    }
    needed.map(|e| Exponents {
        e,
        f: 0,
        divide: true,
    })
}

/// Transforms `values` under `exp`; `None` when more than half are exceptions.
fn transform_with(values: &[f64], exp: Exponents) -> Option<Transformed> {
    let (enc, dec) = (exp.encode_factors()?, exp.scale()?);
    let mut ints = Vec::with_capacity(values.len());
    let mut exceptions = Vec::new();
    let mut prev: Option<i64> = None;
    for (i, &v) in values.iter().enumerate() {
        match encode_one(v, enc, dec) {
            Some(d) => {
                ints.push(d);
                prev = Some(d);
            }
            None => {
                exceptions.push((i as u32, v.to_bits()));
                ints.push(prev.unwrap_or(0));
                if exceptions.len() * 2 > values.len() {
                    return None;
                }
            }
        }
    }
    // Leading exceptions hold 0: give them the first integer, so that neither the frame
    // of reference nor the first delta is stretched towards 0 for them.
    let leading = exceptions
        .iter()
        .enumerate()
        .take_while(|(k, (pos, _))| *pos as usize == *k)
        .count();
    if let Some(&first) = ints.get(leading) {
        for slot in ints.iter_mut().take(leading) {
            *slot = first;
        }
    }
    Some(Transformed {
        exp,
        ints,
        exceptions,
    })
}

/// Appends the header shared by both layouts: exponents and exceptions.
fn put_header(t: &Transformed, out: &mut Vec<u8>) {
    out.push(t.exp.e);
    out.push(t.exp.f);
    out.push(u8::from(t.exp.divide));
    put_varint(out, t.exceptions.len() as u64);
    let mut next = 0u64;
    for &(pos, _) in &t.exceptions {
        // Positions increase: each is stored as its distance from the smallest position
        // the next exception may have.
        put_varint(out, u64::from(pos) - next);
        next = u64::from(pos) + 1;
    }
    for &(_, bits) in &t.exceptions {
        out.extend_from_slice(&bits.to_le_bytes());
    }
}

/// Whether a frame of `base` and `width` keeps every integer it can hold below `2^51`
/// in magnitude, what the decoder's integer-to-float conversion needs; the writer
/// stores no `alp` body whose frame does not (`alp-delta` remains).
fn frame_fits(base: i64, width: u32) -> bool {
    let top = 1i64 << 51;
    width <= 51
        && base > -top
        && base < top
        && base
            .checked_add((1i64 << width) - 1)
            .is_some_and(|max| max < top)
}

/// The bit width of offsets from `lo` up to `hi`.
fn width_of(lo: i64, hi: i64) -> u32 {
    64 - (hi.wrapping_sub(lo) as u64).leading_zeros()
}

/// Appends `ENC_ALP`: header, base as a zigzag varint, width `u8`, packed offsets.
pub(crate) fn encode_for(t: &Transformed, out: &mut Vec<u8>) {
    out.push(ENC_ALP);
    put_header(t, out);
    let lo = t.ints.iter().copied().min().unwrap_or(0);
    let hi = t.ints.iter().copied().max().unwrap_or(0);
    let width = width_of(lo, hi);
    put_zigzag(out, lo);
    out.push(width as u8);
    pack(
        t.ints.iter().map(|&d| d.wrapping_sub(lo) as u64),
        width,
        out,
    );
}

/// Appends `ENC_ALP_DELTA`: header, then each integer's zigzag varint delta from the
/// previous one (the first from 0).
pub(crate) fn encode_delta(t: &Transformed, out: &mut Vec<u8>) {
    out.push(ENC_ALP_DELTA);
    put_header(t, out);
    let mut prev = 0i64;
    for &d in &t.ints {
        put_zigzag(out, d.wrapping_sub(prev));
        prev = d;
    }
}

/// The lengths of [`encode_for`]'s and [`encode_delta`]'s output for `t`, without
/// encoding (`usize::MAX` for a frame of reference that does not fit, see
/// [`frame_fits`]).
pub(crate) fn encoded_sizes(t: &Transformed) -> (usize, usize) {
    let mut header = 4 + varint_len(t.exceptions.len() as u64) + 8 * t.exceptions.len();
    let mut next = 0u64;
    for &(pos, _) in &t.exceptions {
        header += varint_len(u64::from(pos) - next);
        next = u64::from(pos) + 1;
    }
    let lo = t.ints.iter().copied().min().unwrap_or(0);
    let hi = t.ints.iter().copied().max().unwrap_or(0);
    let width = width_of(lo, hi);
    let packed = (t.ints.len() * width as usize).div_ceil(8);
    let for_len = if frame_fits(lo, width) {
        header + varint_len(zigzag(lo)) + 1 + packed
    } else {
        usize::MAX
    };
    let mut prev = 0i64;
    let deltas: usize = t
        .ints
        .iter()
        .map(|&d| {
            let n = varint_len(zigzag(d.wrapping_sub(prev)));
            prev = d;
            n
        })
        .sum();
    (for_len, header + deltas)
}

/// Appends `words` (each below `2^width`) as a little-endian bit stream of `width` bits
/// each: `ceil(len × width / 8)` bytes.
fn pack(words: impl Iterator<Item = u64>, width: u32, out: &mut Vec<u8>) {
    if width == 0 {
        return;
    }
    let mut acc = 0u128;
    let mut bits = 0u32;
    for w in words {
        acc |= u128::from(w) << bits;
        bits += width;
        if bits >= 64 {
            out.extend_from_slice(&(acc as u64).to_le_bytes());
            acc >>= 64;
            bits -= 64;
        }
    }
    let tail = bits.div_ceil(8) as usize;
    out.extend_from_slice(&(acc as u64).to_le_bytes()[..tail]);
}

/// Reads `count` offsets of `width` bits packed by [`pack`], adds `base` to each and
/// hands the integer's value under `scale` to `out` (a closure, so that each rule gets
/// its own loop).
fn unpack_into(
    r: &mut Reader<'_>,
    count: usize,
    width: u32,
    base: i64,
    scale: impl Fn(f64) -> f64,
    out: &mut Vec<f64>,
) -> Result<()> {
    if width == 0 {
        out.resize(out.len() + count, scale(base as f64));
        return Ok(());
    }
    let len = count
        .checked_mul(width as usize)
        .map(|bits| bits.div_ceil(8))
        .ok_or_else(|| Error::corrupt(r.place(), "alp packed length overflows"))?;
    let packed = r.take(len)?;
    // Sixteen bytes of padding let every value be read as one unaligned word.
    let mut padded = Vec::with_capacity(len + 16);
    padded.extend_from_slice(packed);
    padded.resize(len + 16, 0);
    let mask = if width == 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    let word = |at: usize| -> u64 {
        padded
            .get(at..at + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map_or(0, u64::from_le_bytes)
    };
    let start = out.len();
    out.resize(start + count, 0.0);
    let dst = out.get_mut(start..).unwrap_or(&mut []);
    let width = width as usize;
    // Two passes: the offsets' bits into the output slots (as the integer bits of the
    // `f64` `2^52 × 1.5 + base + offset`, which `decode` checked stays below `2^51` in
    // magnitude), then a loop without a data-dependent index that subtracts the magic
    // number (an exact integer-to-float conversion) and scales: it vectorises.
    let magic = MAGIC_BITS.wrapping_add(base as u64);
    // Whole groups of 8 values (exactly `width` bytes) by a loop specialised for the
    // width, then the rest value by value. `decode` checked `width <= 51`, so a value
    // starts at a shift below 8 in some byte and one 8-byte word read holds it.
    let groups = count / 8;
    let done = unpack_groups(width, &padded, dst, magic);
    debug_assert!(done == 0 || done == groups * 8);
    let mut bit = done * width;
    for slot in dst.iter_mut().skip(done) {
        let v = (word(bit >> 3) >> (bit & 7)) & mask;
        *slot = f64::from_bits(magic.wrapping_add(v));
        bit += width;
    }
    for slot in dst.iter_mut() {
        *slot = scale(*slot - SWEET);
    }
    Ok(())
}

/// Unpacks the whole groups of 8 values of `padded` (`width` bytes each) into `dst` as
/// the bits of `magic + offset` with a loop specialised for `width`, and returns how many
/// values it wrote (0 for a width it has no loop for).
fn unpack_groups(width: usize, padded: &[u8], dst: &mut [f64], magic: u64) -> usize {
    macro_rules! dispatch {
        ($($w:literal)*) => {
            match width {
                $($w => unpack_fixed::<$w>(padded, dst, magic),)*
                _ => 0,
            }
        };
    }
    dispatch!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29
        30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51)
}

/// [`unpack_groups`] for width `W`: with `W` a constant, each of the 8 values of a group
/// sits at a constant byte and shift of its group's window (`W` bytes and the 8 after
/// them, which the padding of `padded` guarantees), so the reads need no check at run
/// time and the loop is straight-line code.
fn unpack_fixed<const W: usize>(padded: &[u8], dst: &mut [f64], magic: u64) -> usize {
    let mask = (1u64 << W) - 1;
    let mut n = 0;
    for (g, out) in dst.chunks_exact_mut(8).enumerate() {
        let Some(window) = padded.get(g * W..g * W + W + 8) else {
            break;
        };
        for (j, slot) in out.iter_mut().enumerate() {
            let bit = j * W;
            let at = bit / 8;
            let word = window
                .get(at..at + 8)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map_or(0, u64::from_le_bytes);
            *slot = f64::from_bits(magic.wrapping_add((word >> (bit % 8)) & mask));
        }
        n += 8;
    }
    n
}

/// Reads the header: exponents (checked) and the exceptions, whose positions must
/// increase and be below `count`.
fn read_header(r: &mut Reader<'_>, count: usize) -> Result<(Exponents, Vec<(usize, u64)>)> {
    let (e, f, mode) = (r.u8()?, r.u8()?, r.u8()?);
    if e > MAX_EXPONENT || f > e || mode > 1 {
        return Err(Error::corrupt(
            r.place(),
            format!(
                "alp exponent {e}, factor {f} and mode {mode}, expected f <= e <= {MAX_EXPONENT} and mode 0 or 1"
            ),
        ));
    }
    let n = r.count("alp exception count", count as u64)?;
    let mut exceptions = Vec::with_capacity(n);
    let mut next = 0u64;
    for _ in 0..n {
        let pos = next
            .checked_add(r.varint()?)
            .filter(|&p| p < count as u64)
            .ok_or_else(|| Error::corrupt(r.place(), "alp exception position out of range"))?;
        exceptions.push((pos as usize, 0u64));
        next = pos + 1;
    }
    for slot in &mut exceptions {
        slot.1 = r.u64()?;
    }
    let divide = mode == 1;
    Ok((Exponents { e, f, divide }, exceptions))
}

/// The header fields of an ALP body (after its encoding byte `enc`), for `dump`:
/// exponent, factor, rule, exceptions and, for the frame of reference, base and width.
pub(crate) fn describe(enc: u8, body: &[u8]) -> Result<String> {
    let mut r = Reader::new(body, crate::error::Place::Meta);
    let (exp, exceptions) = read_header(&mut r, crate::format::MAX_BLOCK_ROWS as usize)?;
    let mut s = format!(
        "e {} f {} {} exceptions {}",
        exp.e,
        exp.f,
        if exp.divide { "divide" } else { "multiply" },
        exceptions.len()
    );
    if enc == ENC_ALP {
        let (base, width) = (r.zigzag()?, r.u8()?);
        s.push_str(&format!(" base {base} width {width}"));
    }
    Ok(s)
}

/// Decodes `count` values of `ENC_ALP` or `ENC_ALP_DELTA` (the encoding byte read).
pub(crate) fn decode(r: &mut Reader<'_>, enc: u8, count: usize) -> Result<Vec<f64>> {
    let (exp, exceptions) = read_header(r, count)?;
    let scale = exp
        .scale()
        .ok_or_else(|| Error::corrupt(r.place(), "alp exponent out of range"))?;
    let mut out = Vec::with_capacity(count);
    if enc == ENC_ALP {
        let base = r.zigzag()?;
        let width = u32::from(r.u8()?);
        // Every integer the writer stores is below 2^51 in magnitude (the encoder's
        // limit), so the base, the width and the largest offset must keep them there;
        // the decoder's integer-to-float conversion and unpacking rely on it.
        if !frame_fits(base, width) {
            return Err(Error::corrupt(
                r.place(),
                format!("alp base {base} and width {width} exceed 2^51"),
            ));
        }
        match scale {
            Scale::Multiply(up, down) => {
                unpack_into(r, count, width, base, |d| d * up * down, &mut out)?;
            }
            Scale::Divide(up, div) => {
                unpack_into(r, count, width, base, |d| d * up / div, &mut out)?;
            }
        }
    } else {
        let mut prev = 0i64;
        r.zigzags(count, |z| {
            prev = prev.wrapping_add(z);
            out.push(scale.value(prev));
        })?;
    }
    for (pos, bits) in exceptions {
        if let Some(slot) = out.get_mut(pos) {
            *slot = f64::from_bits(bits);
        }
    }
    Ok(out)
}

/// The candidates of a gauge block's values in the ALP family: `[for, delta]`, or none
/// when the transform does not apply or a layout is larger than raw `f64`s (which
/// bounds every block's decoded size as before).
pub(crate) fn candidates(values: &[f64]) -> Vec<Vec<u8>> {
    let Some(t) = transform(values) else {
        return Vec::new();
    };
    let limit = 8 * values.len() + 1;
    let (for_len, delta_len) = encoded_sizes(&t);
    let mut out = Vec::with_capacity(2);
    if for_len <= limit {
        let mut b = Vec::with_capacity(for_len);
        encode_for(&t, &mut b);
        out.push(b);
    }
    if delta_len <= limit {
        let mut b = Vec::with_capacity(delta_len);
        encode_delta(&t, &mut b);
        out.push(b);
    }
    out
}

/// The smaller of the two ALP layouts of `values` before compression (frame of
/// reference on a tie) and its length, sized before encoding; `None` when neither
/// applies.
pub(crate) fn smallest(values: &[f64]) -> Option<(Vec<u8>, usize)> {
    let t = transform(values)?;
    let limit = 8 * values.len() + 1;
    let (for_len, delta_len) = encoded_sizes(&t);
    let mut b = Vec::new();
    if for_len <= delta_len && for_len <= limit {
        encode_for(&t, &mut b);
    } else if delta_len <= limit {
        encode_delta(&t, &mut b);
    } else {
        return None;
    }
    let len = b.len();
    Some((b, len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Place;

    fn bits(v: &[f64]) -> Vec<u64> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    fn round_trip(values: &[f64]) -> Vec<Vec<u8>> {
        let cands = candidates(values);
        for c in &cands {
            let mut r = Reader::new(c, Place::Meta);
            let enc = r.u8().unwrap();
            let got = decode(&mut r, enc, values.len()).unwrap();
            assert!(r.is_empty(), "encoding {enc}: trailing bytes");
            assert_eq!(bits(&got), bits(values), "encoding {enc}");
        }
        cands
    }

    #[test]
    fn decimals_become_small_integers() {
        let values: Vec<f64> = (0..1000)
            .map(|i| f64::from(2000 + i % 700) / 100.0)
            .collect();
        let t = transform(&values).unwrap();
        assert!(t.exceptions.is_empty());
        let cands = round_trip(&values);
        assert_eq!(cands.len(), 2);
        // 700 distinct centi-degrees: 10 bits a value, packed.
        assert!(cands[0].len() < 1000 * 10 / 8 + 16, "{}", cands[0].len());
    }

    #[test]
    fn every_width_unpacks_in_groups_and_in_the_tail() {
        for width in 0..=51u32 {
            for n in [1usize, 7, 8, 9, 63, 64, 65, 200] {
                let hi = if width == 0 { 0 } else { (1i64 << width) - 1 };
                let base = -(1i64 << 50) + 3;
                let ints: Vec<i64> = (0..n as i64)
                    .map(|i| base + (i * 7919) % (hi + 1))
                    .collect();
                let mut ints = ints;
                if let Some(last) = ints.last_mut() {
                    *last = base + hi;
                }
                let t = Transformed {
                    exp: Exponents::default(),
                    ints: ints.clone(),
                    exceptions: Vec::new(),
                };
                let mut body = Vec::new();
                encode_for(&t, &mut body);
                let mut r = Reader::new(&body, Place::Meta);
                let enc = r.u8().unwrap();
                let got = decode(&mut r, enc, n).unwrap();
                assert!(r.is_empty());
                let want: Vec<f64> = ints.iter().map(|&d| d as f64).collect();
                assert_eq!(got, want, "width {width} n {n}");
            }
        }
    }

    #[test]
    fn special_values_are_exceptions_and_round_trip() {
        let stale = f64::from_bits(0x7ff0_0000_0000_0002);
        let mut values: Vec<f64> = (0..64).map(|i| f64::from(i) * 0.5).collect();
        values[0] = f64::NAN;
        values[1] = -0.0;
        values[5] = f64::INFINITY;
        values[6] = f64::NEG_INFINITY;
        values[7] = stale;
        values[9] = f64::from_bits(0xfff8_dead_beef_0001);
        values[63] = 0.123_456_789_012_345_67;
        round_trip(&values);
        let t = transform(&values).unwrap();
        assert_eq!(
            t.exceptions.iter().map(|e| e.0).collect::<Vec<_>>(),
            [0, 1, 5, 6, 7, 9, 63]
        );
        // The leading exceptions' slots hold the first integer, not 0.
        assert_eq!(t.ints[0], t.ints[2]);
    }

    #[test]
    fn decimals_no_multiplication_brings_back_are_divided() {
        // 738429.1 comes back under no (e, f) of the multiplying rule.
        let values = [738_429.1, -345_601.4, 0.0, -281_930.6];
        let t = transform(&values).unwrap();
        assert!(t.exp.divide);
        assert!(t.exceptions.is_empty());
        round_trip(&values);
        // Where multiplying works, it is kept (it decodes faster).
        let t = transform(&[21.37, 21.5, 22.0]).unwrap();
        assert!(!t.exp.divide);
        assert!(t.exceptions.is_empty());
    }

    #[test]
    fn the_sample_decides_whether_a_block_is_tried() {
        // Every sampled value is a full-precision double, the rest decimals: the sample
        // says no, and it is trusted (the block is left to the other encodings).
        let mut values: Vec<f64> = (0..1000).map(|i| f64::from(i) / 10.0).collect();
        let sampled: Vec<usize> = (0..SECOND_SAMPLES as u64)
            .map(|k| (k.wrapping_mul(0x9e37_79b9) % 1000) as usize)
            .chain((0..FIRST_SAMPLES as u64).map(|k| (k.wrapping_mul(0x9e37_79b9) % 1000) as usize))
            .collect();
        for &i in &sampled {
            values[i] = (i as f64 * 0.7).sin();
        }
        assert!(transform(&values).is_none());
        // With the sample decimal, the block is transformed.
        for &i in &sampled {
            values[i] = i as f64 / 10.0;
        }
        assert!(transform(&values).unwrap().exceptions.is_empty());
    }

    #[test]
    fn mostly_random_doubles_are_not_tried() {
        let values: Vec<f64> = (1..100u64)
            .map(|i| {
                f64::from_bits(
                    0x3ff0_0000_0000_0000 | (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 12),
                )
            })
            .collect();
        assert!(transform(&values).is_none());
        assert!(candidates(&values).is_empty());
    }

    #[test]
    fn wide_integers_round_trip() {
        // Integers spanning 2^52: no frame of reference fits below 2^51 (here the two
        // wide ones are cheaper as exceptions).
        let values = [-2_251_799_813_685_247.0, 2_251_799_813_685_247.0, 0.0, 1.0];
        let cands = round_trip(&values);
        assert!(!cands.is_empty());
        let t = transform_with(
            &values,
            Exponents {
                e: 0,
                f: 0,
                divide: false,
            },
        )
        .unwrap();
        assert!(t.exceptions.is_empty());
        assert_eq!(encoded_sizes(&t).0, usize::MAX);
        // A frame reaching 2^51 is refused: base 2^51 - 1 (zigzag 2^52 - 2), width 1.
        let mut body = vec![ENC_ALP, 0, 0, 0, 0];
        crate::le::put_varint(&mut body, (1u64 << 52) - 2);
        body.extend_from_slice(&[1, 0]);
        let mut r = Reader::new(&body, Place::Meta);
        r.u8().unwrap();
        assert!(decode(&mut r, ENC_ALP, 1).is_err());
        let n = body.len();
        body[n - 2] = 0;
        let mut r = Reader::new(&body, Place::Meta);
        r.u8().unwrap();
        assert_eq!(
            decode(&mut r, ENC_ALP, 1).unwrap(),
            [2_251_799_813_685_247.0]
        );
        let values = [1e18, -1e18, 5e17, 3.0];
        round_trip(&values);
        round_trip(&[]);
        round_trip(&[7.25; 300]);
    }

    #[test]
    fn rejects_corrupt_headers() {
        let values: Vec<f64> = (0..50).map(|i| f64::from(i) * 0.25).collect();
        for c in candidates(&values) {
            for len in 0..c.len() {
                let mut r = Reader::new(&c[..len], Place::Meta);
                let enc = r.u8();
                if let Ok(enc) = enc {
                    assert!(decode(&mut r, enc, values.len()).is_err(), "cut at {len}");
                }
            }
            // Exponent beyond the table, factor above the exponent, unknown mode.
            for (at, byte) in [(1usize, 19u8), (2, 200), (3, 2)] {
                let mut b = c.clone();
                b[at] = byte;
                let mut r = Reader::new(&b, Place::Meta);
                let enc = r.u8().unwrap();
                assert!(decode(&mut r, enc, values.len()).is_err());
            }
        }
        // An exception position beyond the count.
        let body = [ENC_ALP_DELTA, 1, 0, 0, 1, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let mut r = Reader::new(&body, Place::Meta);
        r.u8().unwrap();
        assert!(decode(&mut r, ENC_ALP_DELTA, 1).is_err());
        // A bit width above 64.
        let body = [ENC_ALP, 0, 0, 0, 0, 0, 65];
        let mut r = Reader::new(&body, Place::Meta);
        r.u8().unwrap();
        assert!(decode(&mut r, ENC_ALP, 1).is_err());
    }

    proptest::proptest! {
        /// Any bits round-trip through every ALP layout the writer would try.
        #[test]
        fn random_bits_round_trip(words in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..300)) {
            let values: Vec<f64> = words.iter().map(|&w| f64::from_bits(w)).collect();
            round_trip(&values);
        }

        /// Decimal-looking values `i / 10^k` (with a few specials mixed in) round-trip,
        /// and with no specials are never exceptions for `k` up to 4 (at most 15
        /// significant digits: the dividing rule brings every one of them back).
        #[test]
        fn decimals_round_trip(
            ints in proptest::collection::vec(-10_000_000i64..10_000_000, 1..400),
            k in 0u32..=4,
            specials in proptest::collection::vec((proptest::prelude::any::<proptest::sample::Index>(), 0usize..5), 0..4),
        ) {
            let scale = 10f64.powi(k as i32);
            let mut values: Vec<f64> = ints.iter().map(|&i| i as f64 / scale).collect();
            let clean = values.clone();
            let t = transform(&clean).unwrap();
            proptest::prop_assert!(t.exceptions.is_empty(), "{} exceptions", t.exceptions.len());
            for (at, which) in specials {
                let i = at.index(values.len());
                values[i] = [f64::NAN, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::from_bits(0x7ff0_0000_0000_0002)][which];
            }
            round_trip(&clean);
            round_trip(&values);
        }
    }
}
