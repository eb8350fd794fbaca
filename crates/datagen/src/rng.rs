//! A small deterministic generator (SplitMix64): no dependency, same stream everywhere.

/// SplitMix64.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// Uniform in [0, 1).
    pub(crate) fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n) (n > 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Approximately standard normal (sum of four uniforms, rescaled).
    pub(crate) fn normal(&mut self) -> f64 {
        let s: f64 = (0..4).map(|_| self.f64()).sum();
        (s - 2.0) * (3.0f64).sqrt()
    }
}

/// The SplitMix64 finalizer: a good 64-bit mix of `x`.
pub(crate) fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A uniform [0, 1) value from a hash of `parts`.
pub(crate) fn unit(parts: &[u64]) -> f64 {
    let mut h = 0x243f_6a88_85a3_08d3u64;
    for p in parts {
        h = mix(h ^ p);
    }
    (h >> 11) as f64 / (1u64 << 53) as f64
}
