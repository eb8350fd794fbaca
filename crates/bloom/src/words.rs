//! Bit arrays and read access to them, whatever holds them: owned cache-line-aligned
//! words, atomic words, or little-endian bytes borrowed from a buffer or a memory map.

use std::sync::atomic::{AtomicU64, Ordering};

use bytemuck::{Pod, Zeroable};

use crate::error::{Error, Result};

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

/// One 64-byte cache line of bits, aligned as one, so that a blocked filter's block never
/// straddles two lines (a plain `Vec<u64>` from the allocator is only 16-byte aligned).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C, align(64))]
pub struct Line(pub [u64; 8]);

fn lines_for(num_words: u64) -> Result<(usize, usize)> {
    let bytes = num_words.saturating_mul(8);
    let words = usize::try_from(num_words).map_err(|_| Error::Allocation { bytes })?;
    Ok((words, words.div_ceil(8)))
}

/// An owned bit array: whole cache lines, of which the first `num_words` words are used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bits {
    lines: Vec<Line>,
    num_words: usize,
}

impl Bits {
    /// `num_words` zeroed words, reporting allocation failure instead of aborting.
    pub fn zeroed(num_words: u64) -> Result<Self> {
        let (words, lines) = lines_for(num_words)?;
        let mut v = Vec::new();
        v.try_reserve_exact(lines).map_err(|_| Error::Allocation {
            bytes: num_words.saturating_mul(8),
        })?;
        v.resize(lines, Line::default());
        Ok(Bits {
            lines: v,
            num_words: words,
        })
    }

    /// A copy of `source`'s words.
    pub fn copied_from<W: Words + ?Sized>(source: &W) -> Result<Self> {
        let mut bits = Bits::zeroed(source.num_words() as u64)?;
        for (i, w) in bits.as_mut_slice().iter_mut().enumerate() {
            *w = source.word(i);
        }
        Ok(bits)
    }

    /// The used words.
    #[inline]
    pub fn as_slice(&self) -> &[u64] {
        let all: &[u64] = bytemuck::cast_slice(&self.lines);
        all.get(..self.num_words).unwrap_or(all)
    }

    /// The used words, mutable.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u64] {
        let n = self.num_words;
        let all: &mut [u64] = bytemuck::cast_slice_mut(&mut self.lines);
        let len = all.len();
        &mut all[..n.min(len)]
    }
}

/// A cache line of atomic words.
#[derive(Debug, Default)]
#[repr(C, align(64))]
pub struct AtomicLine(pub [AtomicU64; 8]);

/// A bit array that threads update with atomic OR.
#[derive(Debug)]
pub struct AtomicBits {
    lines: Box<[AtomicLine]>,
    num_words: usize,
}

impl AtomicBits {
    /// An atomic copy of `source`'s words.
    pub fn copied_from(source: &[u64]) -> Result<Self> {
        let (words, lines) = lines_for(source.len() as u64)?;
        let mut v: Vec<AtomicLine> = Vec::new();
        v.try_reserve_exact(lines).map_err(|_| Error::Allocation {
            bytes: (source.len() as u64).saturating_mul(8),
        })?;
        v.resize_with(lines, AtomicLine::default);
        for (i, w) in source.iter().enumerate() {
            if let Some(a) = v.get(i / 8).map(|l| &l.0[i % 8]) {
                a.store(*w, Ordering::Relaxed);
            }
        }
        Ok(AtomicBits {
            lines: v.into_boxed_slice(),
            num_words: words,
        })
    }

    /// The atomic word at `i`, if in range.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&AtomicU64> {
        if i >= self.num_words {
            return None;
        }
        self.lines.get(i / 8).map(|l| &l.0[i % 8])
    }

    /// A snapshot of the words.
    pub fn to_bits(&self) -> Result<Bits> {
        Bits::copied_from(self)
    }
}

impl Words for AtomicBits {
    #[inline]
    fn num_words(&self) -> usize {
        self.num_words
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_cache_line_aligned() {
        for n in [1u64, 7, 8, 9, 1000] {
            let bits = Bits::zeroed(n).unwrap();
            assert_eq!(bits.as_slice().len() as u64, n);
            assert_eq!(bits.as_slice().as_ptr() as usize % 64, 0);
            let atomic = AtomicBits::copied_from(bits.as_slice()).unwrap();
            assert_eq!(atomic.num_words() as u64, n);
            assert!(atomic.get(n as usize).is_none());
        }
    }
}
