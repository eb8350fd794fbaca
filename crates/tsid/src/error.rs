//! The crate's error type.

/// A `Result` whose error is this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong while computing or parsing ids.
///
/// Each variant carries the evidence: the field's name, the limit and the
/// size found, the offending text. Messages are lowercase and say what was
/// expected and what was found.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// None of the configured dimensions is present in the document (or no
    /// pair was given): a series needs at least one dimension.
    #[error("no dimension present: expected at least one of {expected} configured dimension(s)")]
    NoDimensions {
        /// How many dimension paths were configured (or pairs given).
        expected: usize,
    },

    /// The document (the root of the JSON value) is not an object.
    #[error("document is not an object: found {found}")]
    NotAnObject {
        /// The JSON type found (`array`, `string`, ...).
        found: &'static str,
    },

    /// A dimension holds an object or an array where a scalar is needed.
    #[error("dimension `{name}` must be a scalar: found {found}")]
    NotAScalar {
        /// The dimension's name (dotted path).
        name: String,
        /// The JSON type found: `object` or `array`.
        found: &'static str,
    },

    /// A dimension holds a floating-point number; floats are not allowed as
    /// dimensions because equal-looking values (`1.0`, `1`, `1e0`) would give
    /// different series.
    #[error("dimension `{name}` is a float ({value}): expected keyword, integer, boolean or ip")]
    FloatDimension {
        /// The dimension's name.
        name: String,
        /// The value found.
        value: f64,
    },

    /// A dimension holds NaN.
    #[error("dimension `{name}` is NaN: expected keyword, integer, boolean or ip")]
    NotANumber {
        /// The dimension's name.
        name: String,
    },

    /// A dimension's or a metric's name is longer than [`MAX_NAME_LEN`](crate::MAX_NAME_LEN).
    #[error("name `{name_start}...` is {len} bytes long: expected at most {max}")]
    NameTooLong {
        /// The first 64 bytes of the name (cut on a character boundary).
        name_start: String,
        /// The name's length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },

    /// A keyword value is longer than [`MAX_KEYWORD_LEN`](crate::MAX_KEYWORD_LEN).
    #[error("value of dimension `{name}` is {len} bytes long: expected at most {max}")]
    ValueTooLong {
        /// The dimension's name.
        name: String,
        /// The value's length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },

    /// The same path was configured or given twice, or a document holds the
    /// same path twice (once dotted, once nested: `{"a.b":1,"a":{"b":2}}`).
    #[error("duplicate path `{path}`")]
    DuplicatePath {
        /// The repeated path.
        path: String,
    },

    /// An empty name, or a path with an empty segment (`a..b`, `.a`, `a.`).
    #[error("invalid path `{path}`: expected non-empty, dot-separated segments")]
    InvalidPath {
        /// The path as given.
        path: String,
    },

    /// A keyword value given as bytes is not valid UTF-8.
    #[error("value of dimension `{name}` is not valid utf-8: valid up to byte {valid_up_to}")]
    InvalidUtf8 {
        /// The dimension's name.
        name: String,
        /// The length of the valid prefix.
        valid_up_to: usize,
    },

    /// An IP dimension holds something that is not an IPv4 or IPv6 address.
    #[error("dimension `{name}` is not an ip address: found `{value}`")]
    InvalidIp {
        /// The dimension's name.
        name: String,
        /// The value found (JSON text, cut to 64 bytes).
        value: String,
    },

    /// More dimensions (or metric names) than [`MAX_DIMENSIONS`](crate::MAX_DIMENSIONS).
    #[error("{count} {what}: expected at most {max}")]
    TooMany {
        /// `dimensions` or `metric names`.
        what: &'static str,
        /// How many were found.
        count: usize,
        /// The limit.
        max: usize,
    },

    /// [`TsidComputer::tsid_from_values`](crate::TsidComputer::tsid_from_values)
    /// got a different number of values than there are configured dimensions.
    #[error("{found} dimension values given: expected {expected}, one per configured dimension")]
    WrongValueCount {
        /// The number of configured dimensions.
        expected: usize,
        /// The number of values given.
        found: usize,
    },

    /// A synthetic id's text form has the wrong length.
    #[error("synthetic id text is {found} characters long: expected {expected}")]
    InvalidIdLength {
        /// The length a valid text has.
        expected: usize,
        /// The length found.
        found: usize,
    },

    /// A synthetic id's text form is not canonical unpadded base64url.
    #[error("synthetic id text `{text}` is not base64url: {reason}")]
    InvalidIdText {
        /// The text (cut to 64 bytes).
        text: String,
        /// What the decoder found wrong.
        reason: String,
    },

    /// A hex string has the wrong length or a character that is not hex.
    #[error("invalid hex `{text}`: expected {expected_len} lowercase or uppercase hex digits")]
    InvalidHex {
        /// The text (cut to 64 bytes).
        text: String,
        /// The number of hex digits expected.
        expected_len: usize,
    },

    /// A fingerprint key has a length the method cannot use.
    #[error("{method} key is {found} bytes long: expected {expected}")]
    InvalidKeyLength {
        /// The fingerprint method.
        method: &'static str,
        /// The key length the method needs.
        expected: usize,
        /// The key length given.
        found: usize,
    },

    /// A timestamp does not fit the id that needs it (negative, or too large
    /// for a fixed-width hex prefix or a UUIDv7).
    #[error("timestamp {ts_millis} ms is out of range for {what}: expected {min}..={max} {unit}")]
    TimestampOutOfRange {
        /// The timestamp given, in milliseconds since the Unix epoch.
        ts_millis: i64,
        /// What needed it.
        what: &'static str,
        /// The smallest value allowed, in `unit`.
        min: u64,
        /// The largest value allowed, in `unit`.
        max: u64,
        /// `s` or `ms`.
        unit: &'static str,
    },

    /// An error in one document of a batch.
    #[error("document {index} of the batch: {source}")]
    InBatch {
        /// The document's position in the batch.
        index: usize,
        /// What went wrong with it.
        source: Box<Error>,
    },
}

/// Cuts `s` to at most `max` bytes on a character boundary, for evidence
/// strings that must stay short.
pub(crate) fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    s.get(..end).unwrap_or_default().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_char_boundaries() {
        assert_eq!(cut("abc", 64), "abc");
        assert_eq!(cut("ééé", 3), "é");
        assert_eq!(cut("ééé", 4), "éé");
    }

    #[test]
    fn messages_are_lowercase_and_carry_evidence() {
        let e = Error::ValueTooLong {
            name: "host".into(),
            len: 2000,
            max: 1024,
        };
        assert_eq!(
            e.to_string(),
            "value of dimension `host` is 2000 bytes long: expected at most 1024"
        );
    }
}
