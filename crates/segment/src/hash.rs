//! [`FoldHasher`]: the crate's fast hasher for maps keyed by hash output (tsids,
//! synthetic ids) and by column names.

/// A multiply-fold hasher for maps keyed by tsids or synthetic ids (already hash
/// output) and column names (few, not attacker-chosen): SipHash cost ~3% of ingest.
/// Not DoS-resistant: do not key it with untrusted, adversarial input.
#[derive(Debug, Default, Clone, Copy)]
pub struct FoldHasher(u64);

impl std::hash::Hasher for FoldHasher {
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in chunks.by_ref() {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
        // Byte by byte: a variable-length copy would call memmove for every string.
        let rest = chunks.remainder();
        let tail = rest
            .iter()
            .rev()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
        self.write_u64(tail ^ ((rest.len() as u64) << 59));
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(23) ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn write_i64(&mut self, v: i64) {
        self.write_u64(v as u64);
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

/// `BuildHasher` of [`FoldHasher`].
pub type FoldBuildHasher = std::hash::BuildHasherDefault<FoldHasher>;
