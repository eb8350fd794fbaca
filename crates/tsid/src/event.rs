//! Ids for events with no natural key: content fingerprints and UUIDs.
//!
//! A fingerprint hashes a canonical concatenation of chosen fields (see
//! [`Fingerprinter::canonical`] and `docs/tsid.md`), so a retried event gets
//! the same id and is recognised as a duplicate. An optional timestamp
//! prefix in fixed-width hex makes ids sort by time: a segment's min/max id
//! then bounds its time range, and a collision only matters between events
//! of the same second (or millisecond).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use md5::{Digest, Md5};
use serde_json::{Map, Value};
use sha1::Sha1;
use sha2::{Sha256, Sha512};
use siphasher::sip128::SipHasher24;
use uuid::{NoContext, Timestamp};

pub use uuid::Uuid;

use crate::error::{Error, Result};
use crate::hex;
use crate::path::{check_path, lookup};
use crate::value::{TAG_BOOL, TAG_KEYWORD, encode_int, encode_uint};

/// Tag of an absent or `null` field in the fingerprint concatenation.
const TAG_ABSENT: u8 = 0x00;
/// Tag of a float: 8 bytes big-endian IEEE 754, `-0.0` written as `0.0`.
const TAG_FLOAT: u8 = 0x07;
/// Tag of an array: `u32` count, then the items.
const TAG_ARRAY: u8 = 0x08;
/// Tag of an object: `u32` count, then `(u32 key length, key, value)`
/// sorted by key.
const TAG_OBJECT: u8 = 0x09;

/// Largest output of any method (SHA-512), in bytes.
const MAX_DIGEST_LEN: usize = 64;

/// A fingerprint hash function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FingerprintMethod {
    /// MD5, 128 bits; HMAC-MD5 with a key. Fast, not collision-resistant
    /// against an adversary.
    Md5,
    /// SHA-1, 160 bits; HMAC-SHA1 with a key.
    Sha1,
    /// SHA-256, 256 bits; HMAC-SHA256 with a key.
    Sha256,
    /// SHA-512, 512 bits; HMAC-SHA512 with a key.
    Sha512,
    /// MurmurHash3 x64 128-bit; a key must be 4 bytes, read as the
    /// little-endian `u32` seed (default seed 0). Output in the reference
    /// byte order (`h1` then `h2`, little-endian), as Python's
    /// `mmh3.hash_bytes`.
    Murmur3x64_128,
    /// SipHash-2-4 with 128-bit output; a key must be 16 bytes (default:
    /// all zeros).
    SipHash128,
}

impl FingerprintMethod {
    /// Every method, in the order of the documentation.
    pub const ALL: [FingerprintMethod; 6] = [
        FingerprintMethod::Md5,
        FingerprintMethod::Sha1,
        FingerprintMethod::Sha256,
        FingerprintMethod::Sha512,
        FingerprintMethod::Murmur3x64_128,
        FingerprintMethod::SipHash128,
    ];

    /// The method's name, as written in errors and docs.
    pub const fn name(self) -> &'static str {
        match self {
            FingerprintMethod::Md5 => "md5",
            FingerprintMethod::Sha1 => "sha1",
            FingerprintMethod::Sha256 => "sha256",
            FingerprintMethod::Sha512 => "sha512",
            FingerprintMethod::Murmur3x64_128 => "murmur3-x64-128",
            FingerprintMethod::SipHash128 => "siphash-2-4-128",
        }
    }

    /// Output length in bytes.
    pub const fn output_len(self) -> usize {
        match self {
            FingerprintMethod::Md5 => 16,
            FingerprintMethod::Sha1 => 20,
            FingerprintMethod::Sha256 => 32,
            FingerprintMethod::Sha512 => 64,
            FingerprintMethod::Murmur3x64_128 | FingerprintMethod::SipHash128 => 16,
        }
    }

    /// The key length the method needs, or `None` when any length works
    /// (HMAC).
    pub const fn key_len(self) -> Option<usize> {
        match self {
            FingerprintMethod::Murmur3x64_128 => Some(4),
            FingerprintMethod::SipHash128 => Some(16),
            _ => None,
        }
    }
}

/// How the fingerprint bytes are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum IdEncoding {
    /// Lowercase hex: two characters a byte.
    #[default]
    Hex,
    /// base64url without padding: four characters for three bytes.
    Base64Url,
}

/// An optional timestamp prefix in fixed-width lowercase hex, so that ids
/// sort by time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum TimestampPrefix {
    /// No prefix.
    #[default]
    None,
    /// Seconds since the epoch in 8 hex digits (0 to 2^32 - 1: until 2106).
    Seconds,
    /// Milliseconds since the epoch in 12 hex digits (0 to 2^48 - 1: until
    /// the year 10889).
    Millis,
}

/// Configuration of a [`Fingerprinter`].
///
/// ```
/// use tidemark_tsid::{FingerprintBuilder, FingerprintMethod, IdEncoding, TimestampPrefix};
///
/// let mut fp = FingerprintBuilder::new(FingerprintMethod::Sha256)
///     .fields(["message", "host.name"])
///     .encoding(IdEncoding::Base64Url)
///     .timestamp_prefix(TimestampPrefix::Seconds)
///     .build()?;
/// let doc = serde_json::json!({"message": "disk full", "host": {"name": "a"}});
/// let id = fp.fingerprint(&doc, 1_700_000_000_000)?;
/// assert!(id.starts_with("6553f100"));
/// # Ok::<(), tidemark_tsid::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct FingerprintBuilder {
    method: FingerprintMethod,
    key: Option<Vec<u8>>,
    encoding: IdEncoding,
    prefix: TimestampPrefix,
    fields: Vec<String>,
}

impl FingerprintBuilder {
    /// A builder for `method`, hex output, no key, no prefix and no fields
    /// (the whole document).
    pub fn new(method: FingerprintMethod) -> FingerprintBuilder {
        FingerprintBuilder {
            method,
            key: None,
            encoding: IdEncoding::default(),
            prefix: TimestampPrefix::default(),
            fields: Vec::new(),
        }
    }

    /// Sets a key: HMAC for MD5 and the SHAs, the seed for MurmurHash3,
    /// the key for SipHash.
    pub fn key(mut self, key: impl Into<Vec<u8>>) -> FingerprintBuilder {
        self.key = Some(key.into());
        self
    }

    /// Sets the output encoding.
    pub fn encoding(mut self, encoding: IdEncoding) -> FingerprintBuilder {
        self.encoding = encoding;
        self
    }

    /// Sets the timestamp prefix.
    pub fn timestamp_prefix(mut self, prefix: TimestampPrefix) -> FingerprintBuilder {
        self.prefix = prefix;
        self
    }

    /// Adds a field (a dotted path) to the fingerprint.
    pub fn field(mut self, path: impl Into<String>) -> FingerprintBuilder {
        self.fields.push(path.into());
        self
    }

    /// Adds several fields.
    pub fn fields<I, S>(mut self, paths: I) -> FingerprintBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.fields.extend(paths.into_iter().map(Into::into));
        self
    }

    /// Checks the configuration.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKeyLength`] for a MurmurHash3 key that is not 4 bytes
    /// or a SipHash key that is not 16; [`Error::InvalidPath`],
    /// [`Error::NameTooLong`] and [`Error::DuplicatePath`] for the fields.
    pub fn build(self) -> Result<Fingerprinter> {
        if let (Some(key), Some(expected)) = (&self.key, self.method.key_len())
            && key.len() != expected
        {
            return Err(Error::InvalidKeyLength {
                method: self.method.name(),
                expected,
                found: key.len(),
            });
        }
        let mut fields = self.fields;
        for f in &fields {
            check_path(f)?;
        }
        fields.sort();
        if let Some(w) = fields.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::DuplicatePath { path: w[0].clone() });
        }
        Ok(Fingerprinter {
            method: self.method,
            key: self.key,
            encoding: self.encoding,
            prefix: self.prefix,
            fields,
            canon: Vec::new(),
        })
    }
}

/// Computes content fingerprints, reusing its buffer between calls.
#[derive(Debug, Clone)]
pub struct Fingerprinter {
    method: FingerprintMethod,
    key: Option<Vec<u8>>,
    encoding: IdEncoding,
    prefix: TimestampPrefix,
    /// Sorted by path.
    fields: Vec<String>,
    canon: Vec<u8>,
}

impl Fingerprinter {
    /// The fingerprint id of `doc`. `ts_millis` is only read when a
    /// [`TimestampPrefix`] is set.
    ///
    /// # Errors
    ///
    /// See [`fingerprint_into`](Self::fingerprint_into).
    pub fn fingerprint(&mut self, doc: &Value, ts_millis: i64) -> Result<String> {
        let mut out = String::new();
        self.fingerprint_into(doc, ts_millis, &mut out)?;
        Ok(out)
    }

    /// Appends the fingerprint id of `doc` to `out` (allocation-free once
    /// `out` and the internal buffer have grown).
    ///
    /// # Errors
    ///
    /// [`Error::NotAnObject`], [`Error::DuplicatePath`] (a field held both
    /// dotted and nested), [`Error::TimestampOutOfRange`] for a prefix that
    /// cannot hold `ts_millis`.
    pub fn fingerprint_into(
        &mut self,
        doc: &Value,
        ts_millis: i64,
        out: &mut String,
    ) -> Result<()> {
        self.canonical(doc)?;
        let canon = std::mem::take(&mut self.canon);
        let result = self.fingerprint_bytes_into(&canon, ts_millis, out);
        self.canon = canon;
        result
    }

    /// Appends the fingerprint id of raw `data` (a concatenation of your
    /// own) to `out`.
    ///
    /// # Errors
    ///
    /// [`Error::TimestampOutOfRange`] for a prefix that cannot hold
    /// `ts_millis`.
    pub fn fingerprint_bytes_into(
        &self,
        data: &[u8],
        ts_millis: i64,
        out: &mut String,
    ) -> Result<()> {
        push_prefix(self.prefix, ts_millis, out)?;
        let mut digest = [0u8; MAX_DIGEST_LEN];
        let n = self.digest(data, &mut digest)?;
        let digest = digest.get(..n).unwrap_or_default();
        match self.encoding {
            IdEncoding::Hex => hex::push(digest, out),
            IdEncoding::Base64Url => {
                let mut buf = [0u8; MAX_DIGEST_LEN.div_ceil(3) * 4];
                let len = URL_SAFE_NO_PAD
                    .encode_slice(digest, &mut buf)
                    .unwrap_or_default();
                let text =
                    std::str::from_utf8(buf.get(..len).unwrap_or_default()).unwrap_or_default();
                out.push_str(text);
            }
        }
        Ok(())
    }

    /// The raw digest of `doc`'s configured fields (of the whole document when none is
    /// configured), without timestamp prefix nor text encoding: the first
    /// `out.len()` bytes of the digest go to `out` (zero-padded when the method's
    /// output is shorter). Returns the method's output length in bytes.
    ///
    /// # Errors
    ///
    /// As [`canonical`](Self::canonical).
    pub fn digest_into(&mut self, doc: &Value, out: &mut [u8]) -> Result<usize> {
        self.canonical(doc)?;
        let mut digest = [0u8; MAX_DIGEST_LEN];
        let n = self.digest(&self.canon, &mut digest)?;
        out.fill(0);
        for (o, d) in out.iter_mut().zip(digest.get(..n).unwrap_or_default()) {
            *o = *d;
        }
        Ok(n)
    }

    /// The hash method.
    pub fn method(&self) -> FingerprintMethod {
        self.method
    }

    /// The canonical concatenation of the configured fields of `doc` (of the
    /// whole document when no field is configured), as hashed: a `u32`
    /// big-endian field count, then for each field in path order its `u32`
    /// length-prefixed path and its tagged value. `docs/tsid.md` lists the
    /// tags.
    ///
    /// # Errors
    ///
    /// [`Error::NotAnObject`], [`Error::DuplicatePath`],
    /// [`Error::ValueTooLong`] for a string over 4 GiB.
    pub fn canonical(&mut self, doc: &Value) -> Result<&[u8]> {
        let Value::Object(obj) = doc else {
            return Err(Error::NotAnObject {
                found: crate::value::json_type(doc),
            });
        };
        self.canon.clear();
        if self.fields.is_empty() {
            encode_object("", obj, &mut self.canon)?;
        } else {
            push_len("", self.fields.len(), &mut self.canon)?;
            for path in &self.fields {
                push_len(path, path.len(), &mut self.canon)?;
                self.canon.extend_from_slice(path.as_bytes());
                match lookup(obj, path)? {
                    None => self.canon.push(TAG_ABSENT),
                    Some(v) => encode_any(path, v, &mut self.canon)?,
                }
            }
        }
        Ok(&self.canon)
    }

    fn digest(&self, data: &[u8], out: &mut [u8; MAX_DIGEST_LEN]) -> Result<usize> {
        macro_rules! hash {
            ($d:ty) => {
                match &self.key {
                    None => copy(&<$d>::digest(data), out),
                    Some(key) => {
                        let mut mac = <Hmac<$d>>::new_from_slice(key).map_err(|_| {
                            Error::InvalidKeyLength {
                                method: self.method.name(),
                                expected: 0,
                                found: key.len(),
                            }
                        })?;
                        mac.update(data);
                        copy(&mac.finalize().into_bytes(), out)
                    }
                }
            };
        }
        Ok(match self.method {
            FingerprintMethod::Md5 => hash!(Md5),
            FingerprintMethod::Sha1 => hash!(Sha1),
            FingerprintMethod::Sha256 => hash!(Sha256),
            FingerprintMethod::Sha512 => hash!(Sha512),
            FingerprintMethod::Murmur3x64_128 => {
                let seed = match self.key.as_deref() {
                    Some([a, b, c, d]) => u32::from_le_bytes([*a, *b, *c, *d]),
                    _ => 0,
                };
                let mut reader = data;
                // Reading from a slice cannot fail.
                let h = murmur3::murmur3_x64_128(&mut reader, seed).unwrap_or_default();
                copy(&h.to_le_bytes(), out)
            }
            FingerprintMethod::SipHash128 => {
                let mut key = [0u8; 16];
                if let Some(k) = &self.key {
                    key.copy_from_slice(k.get(..16).unwrap_or(&[0u8; 16]));
                }
                copy(&SipHasher24::new_with_key(&key).hash(data).as_bytes(), out)
            }
        })
    }
}

fn copy(digest: &[u8], out: &mut [u8; MAX_DIGEST_LEN]) -> usize {
    let n = digest.len().min(MAX_DIGEST_LEN);
    if let (Some(dst), Some(src)) = (out.get_mut(..n), digest.get(..n)) {
        dst.copy_from_slice(src);
    }
    n
}

fn push_prefix(prefix: TimestampPrefix, ts_millis: i64, out: &mut String) -> Result<()> {
    let (value, max, digits, what, unit, shown) = match prefix {
        TimestampPrefix::None => return Ok(()),
        TimestampPrefix::Seconds => {
            let secs = ts_millis.div_euclid(1000);
            (
                secs,
                u64::from(u32::MAX),
                8,
                "a seconds hex prefix",
                "s",
                secs,
            )
        }
        TimestampPrefix::Millis => (
            ts_millis,
            (1u64 << 48) - 1,
            12,
            "a milliseconds hex prefix",
            "ms",
            ts_millis,
        ),
    };
    match u64::try_from(value) {
        Ok(v) if v <= max => {
            let bytes = v.to_be_bytes();
            let mut buf = [0u8; 16];
            let text = hex::encode(&bytes, &mut buf);
            out.push_str(text.get(16 - digits..).unwrap_or_default());
            Ok(())
        }
        _ => {
            let _ = shown;
            Err(Error::TimestampOutOfRange {
                ts_millis,
                what,
                min: 0,
                max,
                unit,
            })
        }
    }
}

fn push_len(name: &str, len: usize, out: &mut Vec<u8>) -> Result<()> {
    let len32 = u32::try_from(len).map_err(|_| Error::ValueTooLong {
        name: name.to_owned(),
        len,
        max: u32::MAX as usize,
    })?;
    out.extend_from_slice(&len32.to_be_bytes());
    Ok(())
}

fn encode_any(name: &str, v: &Value, out: &mut Vec<u8>) -> Result<()> {
    match v {
        Value::Null => out.push(TAG_ABSENT),
        Value::Bool(b) => {
            out.push(TAG_BOOL);
            out.push(u8::from(*b));
        }
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                encode_int(i, out);
            } else if let Some(u) = n.as_u64() {
                encode_uint(u, out);
            } else {
                let f = n.as_f64().unwrap_or_default();
                // -0.0 == 0.0, so they fingerprint alike.
                let f = if f == 0.0 { 0.0 } else { f };
                out.push(TAG_FLOAT);
                out.extend_from_slice(&f.to_bits().to_be_bytes());
            }
        }
        Value::String(s) => {
            out.push(TAG_KEYWORD);
            push_len(name, s.len(), out)?;
            out.extend_from_slice(s.as_bytes());
        }
        Value::Array(items) => {
            out.push(TAG_ARRAY);
            push_len(name, items.len(), out)?;
            for item in items {
                encode_any(name, item, out)?;
            }
        }
        Value::Object(map) => encode_object(name, map, out)?,
    }
    Ok(())
}

fn encode_object(name: &str, map: &Map<String, Value>, out: &mut Vec<u8>) -> Result<()> {
    out.push(TAG_OBJECT);
    push_len(name, map.len(), out)?;
    // serde_json's default map is a BTreeMap and iterates sorted; with its
    // `preserve_order` feature (which another crate may enable) it keeps
    // insertion order, so sort then, at the cost of an allocation.
    if map.keys().is_sorted() {
        for (k, v) in map {
            encode_entry(k, v, out)?;
        }
    } else {
        let mut entries: Vec<(&String, &Value)> = map.iter().collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        for (k, v) in entries {
            encode_entry(k, v, out)?;
        }
    }
    Ok(())
}

fn encode_entry(key: &str, v: &Value, out: &mut Vec<u8>) -> Result<()> {
    push_len(key, key.len(), out)?;
    out.extend_from_slice(key.as_bytes());
    encode_any(key, v, out)
}

/// A random (version 4) UUID.
pub fn uuid_v4() -> Uuid {
    Uuid::new_v4()
}

/// A time-ordered (version 7) UUID for now: 48 bits of Unix milliseconds,
/// then random bits, monotonic within this process.
pub fn uuid_v7() -> Uuid {
    Uuid::now_v7()
}

/// A version 7 UUID for the event time `ts_millis`, with random low bits
/// (two ids of the same millisecond are not ordered).
///
/// # Errors
///
/// [`Error::TimestampOutOfRange`] unless `0 <= ts_millis < 2^48`.
pub fn uuid_v7_at(ts_millis: i64) -> Result<Uuid> {
    let max = (1u64 << 48) - 1;
    match u64::try_from(ts_millis) {
        Ok(ms) if ms <= max => {
            let nanos = u32::try_from(ms % 1000).unwrap_or(0) * 1_000_000;
            Ok(Uuid::new_v7(Timestamp::from_unix(
                NoContext,
                ms / 1000,
                nanos,
            )))
        }
        _ => Err(Error::TimestampOutOfRange {
            ts_millis,
            what: "a uuid v7",
            min: 0,
            max,
            unit: "ms",
        }),
    }
}
