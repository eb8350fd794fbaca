//! The crate's error type.

/// Everything that can go wrong when building, combining or decoding a filter.
///
/// Variants carry the evidence (the value that was refused, the sizes that did not
/// match), so that a message alone tells the user what to change.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The requested capacity was zero.
    #[error("capacity must be at least 1, found 0")]
    ZeroCapacity,
    /// The requested false-positive rate is not strictly between 0 and 1 (or is NaN).
    #[error("false-positive rate must be in (0, 1), found {0}")]
    InvalidFalsePositiveRate(f64),
    /// An explicit bit count was zero or not a multiple of the filter's granule.
    #[error("number of bits must be a positive multiple of {granule}, found {found}")]
    InvalidNumBits {
        /// The bit count that was given.
        found: u64,
        /// The multiple the filter type requires (64 for words, 512 for blocks).
        granule: u64,
    },
    /// An explicit hash count was outside the supported range.
    #[error("number of hashes must be in 1..={max}, found {found}")]
    InvalidNumHashes {
        /// The hash count that was given.
        found: u32,
        /// The largest hash count this filter type supports.
        max: u32,
    },
    /// The filter would need more memory than the crate allows ([`crate::MAX_NUM_BITS`]).
    #[error("filter would need {needed_bits} bits, more than the limit of {max_bits}")]
    TooLarge {
        /// Bits the requested shape needs.
        needed_bits: u128,
        /// The hard limit.
        max_bits: u64,
    },
    /// The allocator could not provide the bit array.
    #[error("could not allocate {bytes} bytes for the bit array")]
    Allocation {
        /// Bytes requested.
        bytes: u64,
    },
    /// Two filters combined by `union` differ in shape or hash seed.
    #[error("cannot combine filters of different shape: {reason}")]
    IncompatibleFilters {
        /// Which parameter differs, with both values.
        reason: String,
    },
    /// The scalable filter's expansion factor is zero for a scaling filter.
    #[error("expansion must be at least 1 for a scaling filter, found {0}")]
    InvalidExpansion(u32),
    /// An insert into a full non-scaling filter.
    #[error("non scaling filter is full (capacity {capacity})")]
    Full {
        /// The filter's capacity.
        capacity: u64,
    },
    /// A scalable filter cannot add another layer (layer limit or capacity overflow).
    #[error("scalable filter cannot grow past {layers} layers")]
    CannotGrow {
        /// Number of layers the filter holds.
        layers: usize,
    },
    /// Encoded bytes end before a field.
    #[error("truncated {section}: needed {needed} bytes, {available} available")]
    Truncated {
        /// The part of the format being read.
        section: &'static str,
        /// Bytes needed.
        needed: u64,
        /// Bytes present.
        available: u64,
    },
    /// Encoded bytes do not start or end with the magic number.
    #[error("not a tidemark bloom filter: bad magic {found:02x?}")]
    BadMagic {
        /// The four bytes found instead.
        found: [u8; 4],
    },
    /// The format version is not one this crate reads.
    #[error("unsupported format version {found} (this build reads {min}..={max})")]
    UnsupportedVersion {
        /// Version in the file.
        found: u32,
        /// Oldest readable version.
        min: u32,
        /// Newest readable version.
        max: u32,
    },
    /// The encoded filter is of another kind than the one asked for.
    #[error("expected a {expected} filter, found kind code {found}")]
    WrongKind {
        /// Kind the caller asked for.
        expected: &'static str,
        /// Kind code in the bytes.
        found: u8,
    },
    /// The checksum stored in the trailer does not match the bytes.
    #[error("checksum mismatch: stored {expected:#010x}, computed {got:#010x}")]
    ChecksumMismatch {
        /// CRC32 stored in the trailer.
        expected: u32,
        /// CRC32 of the bytes.
        got: u32,
    },
    /// A decoded field has a value no writer produces.
    #[error("corrupt {field}: {detail}")]
    Corrupt {
        /// The field that is wrong.
        field: &'static str,
        /// What is wrong with it.
        detail: String,
    },
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
