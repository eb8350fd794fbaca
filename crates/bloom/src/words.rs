//! Read access to a bit array, whatever holds it: owned words, atomics, or little-endian
//! bytes borrowed from a buffer or a memory map.

use std::sync::atomic::{AtomicU64, Ordering};

/// A read-only array of 64-bit words.
///
/// Indices come from probe math that is bounded by the filter's shape, which constructors
/// and decoders check against the array's length; an index out of range still reads as 0
/// rather than panicking.
pub trait Words {
    /// Number of words.
    fn num_words(&self) -> usize;
    /// The word at `i`, 0 past the end.
    fn word(&self, i: usize) -> u64;
    /// Number of set bits in the whole array.
    fn count_ones(&self) -> u64 {
        (0..self.num_words())
            .map(|i| u64::from(self.word(i).count_ones()))
            .sum()
    }
}

impl Words for [u64] {
    #[inline]
    fn num_words(&self) -> usize {
        self.len()
    }
    #[inline]
    fn word(&self, i: usize) -> u64 {
        self.get(i).copied().unwrap_or(0)
    }
    fn count_ones(&self) -> u64 {
        self.iter().map(|w| u64::from(w.count_ones())).sum()
    }
}

impl Words for [AtomicU64] {
    #[inline]
    fn num_words(&self) -> usize {
        self.len()
    }
    #[inline]
    fn word(&self, i: usize) -> u64 {
        self.get(i).map_or(0, |w| w.load(Ordering::Relaxed))
    }
}

/// Words stored little-endian in borrowed bytes (the encoded form), read without copying.
#[derive(Debug, Clone, Copy)]
pub struct LeWords<'a>(pub &'a [u8]);

impl Words for LeWords<'_> {
    #[inline]
    fn num_words(&self) -> usize {
        self.0.len() / 8
    }
    #[inline]
    fn word(&self, i: usize) -> u64 {
        let start = i.wrapping_mul(8);
        match self.0.get(start..start.wrapping_add(8)) {
            Some(chunk) => {
                let mut le = [0u8; 8];
                le.copy_from_slice(chunk);
                u64::from_le_bytes(le)
            }
            None => 0,
        }
    }
    fn count_ones(&self) -> u64 {
        self.0.iter().map(|b| u64::from(b.count_ones())).sum()
    }
}
