//! Sizing math: bits and hash counts for a capacity and a false-positive rate.
//!
//! Standard filter: the optimal bit count is `m = -n·ln p / (ln 2)²`, i.e.
//! `1.4427·log2(1/p)` bits per item, and the optimal hash count is `k = (m/n)·ln 2`,
//! of which the integer neighbour with the lower rate `(1 - e^{-kn/m})^k` is taken.
//!
//! Blocked filter: all `k` probes of an item fall into one 512-bit block, so a block's
//! load varies (Poisson with mean `λ = n / blocks`) and heavily loaded blocks dominate the
//! rate. The rate is computed exactly under that model,
//! `Σ_j Pois(j; λ) · (1 - (1 - 1/512)^{k·j})^k`, and the smallest block count whose best
//! `k` reaches the target is found by bisection.

//!
//! Split-block filter (Parquet's SBBF): every item sets one bit in each of the eight
//! 32-bit words of one 256-bit block. With `λ = n / blocks` items per block (Poisson),
//! a probe's bit in one word is set with probability `1 - (31/32)^j` when the block holds
//! `j` items, so the rate is `Σ_j Pois(j; λ) · (1 - (31/32)^j)^8`, again computed exactly
//! and inverted by bisection over the block count.

use crate::error::{Error, Result};

/// The largest bit array any filter of this crate allocates: 2^40 bits (128 GiB).
///
/// Requests above it are refused with [`Error::TooLarge`] instead of trying an absurd
/// allocation.
pub const MAX_NUM_BITS: u64 = 1 << 40;

/// The largest hash count of a standard [`crate::BloomFilter`].
pub const MAX_NUM_HASHES: u32 = 1024;

/// Bits of one block of a [`crate::BlockedBloomFilter`] (one 64-byte cache line).
pub const BLOCK_BITS: u64 = 512;

/// The largest hash count of a [`crate::BlockedBloomFilter`].
pub const MAX_BLOCK_HASHES: u32 = 32;

pub(crate) fn check_capacity_and_rate(capacity: u64, fpr: f64) -> Result<()> {
    if capacity == 0 {
        return Err(Error::ZeroCapacity);
    }
    // `!(x > 0.0 && x < 1.0)` is also true for NaN.
    if !(fpr > 0.0 && fpr < 1.0) {
        return Err(Error::InvalidFalsePositiveRate(fpr));
    }
    Ok(())
}

/// Bits per item of an optimal standard filter at rate `fpr`: `-ln p / (ln 2)²`.
pub fn optimal_bits_per_item(fpr: f64) -> f64 {
    -fpr.ln() / (std::f64::consts::LN_2 * std::f64::consts::LN_2)
}

/// Rate of a standard filter with `num_bits` bits and `num_hashes` hashes holding `items`.
pub fn standard_fpr(num_bits: u64, num_hashes: u32, items: u64) -> f64 {
    if num_bits == 0 {
        return 1.0;
    }
    let k = f64::from(num_hashes);
    let fill = 1.0 - (-k * items as f64 / num_bits as f64).exp();
    fill.powf(k)
}

/// The standard filter's shape for `capacity` items at rate `fpr`: `(num_bits, num_hashes)`.
///
/// `num_bits` is the smallest bit count for which an integer hash count reaches `fpr`
/// (`m = -k·n / ln(1 - p^{1/k})`, minimised over the two integers around the ideal
/// `k = log2(1/p)`), rounded up to whole 64-bit words (never to a power of two). It is
/// within 0.1% of the real-valued optimum `-n·ln p / (ln 2)²` for the usual rates.
///
/// # Errors
/// [`Error::ZeroCapacity`], [`Error::InvalidFalsePositiveRate`], or [`Error::TooLarge`]
/// above [`MAX_NUM_BITS`].
pub fn standard_shape(capacity: u64, fpr: f64) -> Result<(u64, u32)> {
    check_capacity_and_rate(capacity, fpr)?;
    let n = capacity as f64;
    let ideal_k = -fpr.log2();
    let max = f64::from(MAX_NUM_HASHES);
    let mut best: Option<(f64, u32)> = None;
    for k in [ideal_k.floor(), ideal_k.ceil()] {
        let k = k.clamp(1.0, max);
        // Bits for which k probes at n items give exactly `fpr`.
        let bits = (-k * n / (-fpr.powf(1.0 / k)).ln_1p()).ceil();
        if best.is_none_or(|(b, _)| bits < b) {
            best = Some((bits, k as u32));
        }
    }
    let (bits, num_hashes) = best.unwrap_or((f64::INFINITY, 1));
    if !bits.is_finite() || bits > MAX_NUM_BITS as f64 {
        return Err(Error::TooLarge {
            needed_bits: if bits.is_finite() {
                bits as u128
            } else {
                u128::MAX
            },
            max_bits: MAX_NUM_BITS,
        });
    }
    let num_bits = (bits as u64).max(1).div_ceil(64) * 64;
    Ok((num_bits, num_hashes))
}

/// Rate of a blocked filter with `num_blocks` 512-bit blocks and `num_hashes` probes per
/// item holding `items` items, under the Poisson block-load model.
pub fn blocked_fpr(num_blocks: u64, num_hashes: u32, items: u64) -> f64 {
    if num_blocks == 0 {
        return 1.0;
    }
    let lambda = items as f64 / num_blocks as f64;
    if lambda == 0.0 {
        return 0.0;
    }
    let k = f64::from(num_hashes);
    // Probability that one probe leaves a given bit clear.
    let miss = 1.0 - 1.0 / BLOCK_BITS as f64;
    let ln_lambda = lambda.ln();
    let j_max = (lambda + 12.0 * lambda.sqrt() + 30.0).ceil() as u64;
    let mut ln_pmf = -lambda;
    let mut rate = 0.0;
    for j in 0..=j_max {
        if j > 0 {
            ln_pmf += ln_lambda - (j as f64).ln();
        }
        let fill = 1.0 - miss.powf(k * j as f64);
        rate += ln_pmf.exp() * fill.powf(k);
    }
    rate
}

/// Lowest-rate hash count for a blocked filter of `num_blocks` blocks and `capacity` items,
/// with that rate.
pub(crate) fn best_blocked_hashes(num_blocks: u64, capacity: u64) -> (u32, f64) {
    let ideal = (num_blocks * BLOCK_BITS) as f64 / capacity.max(1) as f64 * std::f64::consts::LN_2;
    let centre = ideal.round().clamp(1.0, f64::from(MAX_BLOCK_HASHES)) as u32;
    let first = centre.saturating_sub(3).max(1);
    let last = (centre + 3).min(MAX_BLOCK_HASHES);
    let mut best = (first, f64::INFINITY);
    for k in first..=last {
        let rate = blocked_fpr(num_blocks, k, capacity);
        if rate < best.1 {
            best = (k, rate);
        }
    }
    best
}

/// The blocked filter's shape for `capacity` items at rate `fpr`: `(num_bits, num_hashes)`,
/// with `num_bits` a multiple of 512, the smallest whose modelled rate is at most `fpr`.
///
/// # Errors
/// [`Error::ZeroCapacity`], [`Error::InvalidFalsePositiveRate`], or [`Error::TooLarge`]
/// when no block count under [`MAX_NUM_BITS`] reaches the rate.
pub fn blocked_shape(capacity: u64, fpr: f64) -> Result<(u64, u32)> {
    check_capacity_and_rate(capacity, fpr)?;
    let max_blocks = MAX_NUM_BITS / BLOCK_BITS;
    let reaches = |blocks: u64| best_blocked_hashes(blocks, capacity).1 <= fpr;
    // A blocked filter never beats the standard optimum, which gives a lower bound.
    let optimum = capacity as f64 * optimal_bits_per_item(fpr) / BLOCK_BITS as f64;
    if optimum > max_blocks as f64 {
        return Err(Error::TooLarge {
            needed_bits: (optimum * BLOCK_BITS as f64) as u128,
            max_bits: MAX_NUM_BITS,
        });
    }
    let mut lo = (optimum.floor() as u64).max(1);
    if reaches(lo) {
        return Ok((lo * BLOCK_BITS, best_blocked_hashes(lo, capacity).0));
    }
    let mut hi = lo;
    loop {
        let next = hi.saturating_mul(2).min(max_blocks);
        if next == hi {
            return Err(Error::TooLarge {
                needed_bits: u128::from(hi) * u128::from(BLOCK_BITS) * 2,
                max_bits: MAX_NUM_BITS,
            });
        }
        lo = hi;
        hi = next;
        if reaches(hi) {
            break;
        }
    }
    // Invariant: `lo` does not reach the rate, `hi` does.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if reaches(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok((hi * BLOCK_BITS, best_blocked_hashes(hi, capacity).0))
}

/// Bits of one block of a [`crate::SplitBlockBloomFilter`]: eight 32-bit words, as
/// Parquet's split-block bloom filter specifies.
pub const SPLIT_BLOCK_BITS: u64 = 256;

/// Probes (bits set) per item of a [`crate::SplitBlockBloomFilter`]: one per word.
pub const SPLIT_BLOCK_HASHES: u32 = 8;

/// The most blocks of a split-block filter: [`MAX_NUM_BITS`] / 256 = 2^32, the most that
/// Parquet's 32-bit multiply-shift block choice addresses.
pub const MAX_SPLIT_BLOCKS: u64 = MAX_NUM_BITS / SPLIT_BLOCK_BITS;

/// Rate of a split-block filter with `num_blocks` blocks holding `items` items, under the
/// Poisson block-load model: `Σ_j Pois(j; λ) · (1 - (31/32)^j)^8` with `λ = items/blocks`.
pub fn split_block_fpr(num_blocks: u64, items: u64) -> f64 {
    if num_blocks == 0 {
        return 1.0;
    }
    let lambda = items as f64 / num_blocks as f64;
    if lambda == 0.0 {
        return 0.0;
    }
    let miss: f64 = 31.0 / 32.0;
    let ln_lambda = lambda.ln();
    let j_max = (lambda + 12.0 * lambda.sqrt() + 30.0).ceil() as u64;
    let mut ln_pmf = -lambda;
    let mut rate = 0.0;
    for j in 0..=j_max {
        if j > 0 {
            ln_pmf += ln_lambda - (j as f64).ln();
        }
        let fill = 1.0 - miss.powf(j as f64);
        rate += ln_pmf.exp() * fill.powi(SPLIT_BLOCK_HASHES as i32);
    }
    rate.min(1.0)
}

/// The split-block filter's block count for `capacity` items at rate `fpr`: the smallest
/// whose modelled rate ([`split_block_fpr`]) is at most `fpr`.
///
/// # Errors
/// [`Error::ZeroCapacity`], [`Error::InvalidFalsePositiveRate`], or [`Error::TooLarge`]
/// when more than [`MAX_SPLIT_BLOCKS`] blocks would be needed.
pub fn split_block_shape(capacity: u64, fpr: f64) -> Result<u64> {
    check_capacity_and_rate(capacity, fpr)?;
    let reaches = |blocks: u64| split_block_fpr(blocks, capacity) <= fpr;
    let too_large = |blocks: f64| Error::TooLarge {
        needed_bits: (blocks * SPLIT_BLOCK_BITS as f64).min(u128::MAX as f64) as u128,
        max_bits: MAX_NUM_BITS,
    };
    // A split-block filter never beats the standard optimum: a lower bound.
    let optimum = capacity as f64 * optimal_bits_per_item(fpr) / SPLIT_BLOCK_BITS as f64;
    if optimum > MAX_SPLIT_BLOCKS as f64 {
        return Err(too_large(optimum));
    }
    let mut lo = (optimum.floor() as u64).max(1);
    if reaches(lo) {
        return Ok(lo);
    }
    let mut hi = lo;
    loop {
        let next = hi.saturating_mul(2).min(MAX_SPLIT_BLOCKS);
        if next == hi {
            return Err(too_large(hi as f64 * 2.0));
        }
        lo = hi;
        hi = next;
        if reaches(hi) {
            break;
        }
    }
    // Invariant: `lo` does not reach the rate, `hi` does.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if reaches(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(hi)
}

/// Cardinality estimate of a split-block filter from its set-bit count: a bit of a word
/// stays clear with probability `exp(-λ/32)` under the Poisson load, so
/// `n ≈ -32·ln(1 - X/m) · blocks`.
pub(crate) fn split_block_estimated_len(num_blocks: u64, ones: u64) -> u64 {
    if num_blocks == 0 {
        return 0;
    }
    let m = (num_blocks * SPLIT_BLOCK_BITS) as f64;
    let x = (ones as f64).min(m - 0.5);
    (-32.0 * (1.0 - x / m).ln() * num_blocks as f64).round() as u64
}

/// Cardinality estimate of a standard filter from its set-bit count (Swamidass & Baldi
/// 2007): `n ≈ -(m/k)·ln(1 - X/m)`.
pub(crate) fn standard_estimated_len(num_bits: u64, num_hashes: u32, ones: u64) -> u64 {
    if num_bits == 0 {
        return 0;
    }
    let m = num_bits as f64;
    // A saturated filter has no finite estimate; half a bit short of full stands in.
    let x = (ones as f64).min(m - 0.5);
    (-(m / f64::from(num_hashes)) * (1.0 - x / m).ln()).round() as u64
}

/// Cardinality estimate of a blocked filter: under the Poisson load model the expected
/// fill is `1 - exp(-λ·(1 - (1-1/512)^k))`, inverted for `λ` and scaled by the block count.
pub(crate) fn blocked_estimated_len(num_blocks: u64, num_hashes: u32, ones: u64) -> u64 {
    if num_blocks == 0 {
        return 0;
    }
    let m = (num_blocks * BLOCK_BITS) as f64;
    let x = (ones as f64).min(m - 0.5);
    let per_item = 1.0 - (1.0 - 1.0 / BLOCK_BITS as f64).powf(f64::from(num_hashes));
    let lambda = -(1.0 - x / m).ln() / per_item;
    (lambda * num_blocks as f64).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_shape_is_the_optimum_rounded_to_words() {
        let (bits, k) = standard_shape(1_000_000, 0.01).unwrap();
        assert_eq!(bits % 64, 0);
        let per_item = bits as f64 / 1e6;
        assert!((per_item / 9.585 - 1.0).abs() < 0.01, "{per_item}");
        assert_eq!(k, 7);
        assert!(standard_fpr(bits, k, 1_000_000) <= 0.01);
        assert!(standard_fpr(bits - 64, k, 1_000_000) > 0.01);
        let (bits, k) = standard_shape(1_000_000, 0.001).unwrap();
        assert!((bits as f64 / 1e6 / 14.378 - 1.0).abs() < 0.01);
        assert_eq!(k, 10);
    }

    #[test]
    fn rejects_bad_parameters() {
        assert_eq!(standard_shape(0, 0.01), Err(Error::ZeroCapacity));
        for p in [0.0, 1.0, -0.1, 1.5, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                standard_shape(10, p),
                Err(Error::InvalidFalsePositiveRate(_))
            ));
            assert!(matches!(
                blocked_shape(10, p),
                Err(Error::InvalidFalsePositiveRate(_))
            ));
        }
        assert!(matches!(
            standard_shape(u64::MAX, 0.01),
            Err(Error::TooLarge { .. })
        ));
        assert!(matches!(
            blocked_shape(u64::MAX, 1e-9),
            Err(Error::TooLarge { .. })
        ));
    }

    #[test]
    fn blocked_shape_reaches_its_modelled_rate() {
        for (n, p) in [
            (1_000u64, 0.01),
            (1_000_000, 0.01),
            (1_000_000, 0.001),
            (10, 0.1),
        ] {
            let (bits, k) = blocked_shape(n, p).unwrap();
            assert_eq!(bits % BLOCK_BITS, 0);
            let blocks = bits / BLOCK_BITS;
            assert!(blocked_fpr(blocks, k, n) <= p);
            if blocks > 1 {
                assert!(best_blocked_hashes(blocks - 1, n).1 > p);
            }
        }
    }

    #[test]
    fn blocked_model_approaches_standard_for_light_blocks() {
        // With one item per block on average, the blocked rate is far above the standard
        // one; with many blocks per item both tend to zero.
        let std = standard_fpr(512_000, 7, 50_000);
        let blk = blocked_fpr(1_000, 7, 50_000);
        assert!(blk > std);
        assert!(blk < 2.5 * std);
    }

    #[test]
    fn split_block_shape_reaches_its_modelled_rate() {
        for (n, p) in [
            (1_000u64, 0.01),
            (1_000_000, 0.01),
            (10_000_000, 0.01),
            (10, 0.1),
        ] {
            let blocks = split_block_shape(n, p).unwrap();
            assert!(split_block_fpr(blocks, n) <= p);
            if blocks > 1 {
                assert!(split_block_fpr(blocks - 1, n) > p);
            }
        }
        // Parquet's sizing table: about 10.5 bits per item at 1%.
        let per_item = split_block_shape(1_000_000, 0.01).unwrap() as f64 * 256.0 / 1e6;
        assert!((10.0..10.6).contains(&per_item), "{per_item}");
        assert!(matches!(
            split_block_shape(u64::MAX, 0.01),
            Err(Error::TooLarge { .. })
        ));
        assert_eq!(split_block_shape(0, 0.01), Err(Error::ZeroCapacity));
        assert!(split_block_shape(10, f64::NAN).is_err());
    }

    #[test]
    fn split_block_estimate_inverts_the_expected_fill() {
        let (blocks, n) = (1u64 << 14, 40_000u64);
        let m = (blocks * 256) as f64;
        let expected_ones = m * (1.0 - (-(n as f64) / blocks as f64 / 32.0).exp());
        let est = split_block_estimated_len(blocks, expected_ones as u64);
        assert!((est as f64 / n as f64 - 1.0).abs() < 0.001, "{est}");
    }

    #[test]
    fn estimates_invert_the_expected_fill() {
        let (m, k, n) = (1u64 << 20, 7u32, 100_000u64);
        let expected_ones = m as f64 * (1.0 - (-(f64::from(k)) * n as f64 / m as f64).exp());
        let est = standard_estimated_len(m, k, expected_ones as u64);
        assert!((est as f64 / n as f64 - 1.0).abs() < 0.001);
        assert_eq!(standard_estimated_len(m, k, 0), 0);
        assert!(standard_estimated_len(m, k, m) > 0);
    }
}
