//! The shard message: what a router publishes to a shard's subject and its owner applies.
//!
//! One message holds samples of one shard for one index, as runs of one series' samples:
//!
//! ```text
//! header   MAGIC "TMCS" (4) | FORMAT_VERSION u32 | shard u32 | create u8
//!          | index length u16 | index (UTF-8)
//! runs     kind u8 (0 f64, 1 i64, 2 bool, 3 string) | labels u16
//!          | per label: name length u16, name, value length u32, value
//!          | samples u32 | per sample: timestamp i64, value
//!          (f64: its bits as u64; i64; bool: u8; string: length u32, bytes)
//! footer   runs u32 | CRC32 of every byte before it u32
//! ```
//!
//! Integers are little-endian. The bytes of a message are a pure function of what the
//! request held, so a router's retry of the same request makes the same messages and
//! the same message ids ([`message_id`]), which JetStream's dedup window drops.

use tidemark::bloom::le::{self, LeReader};
use tidemark::{LabelPoints, SampleBatch, SampleValue};

use crate::error::{Error, Result};

/// The first bytes of every shard message.
pub const MAGIC: [u8; 4] = *b"TMCS";
/// The format version written (and the only one read).
pub const FORMAT_VERSION: u32 = 1;
/// Bytes after the runs: their count and the checksum.
const FOOTER_LEN: usize = 8;

/// The JetStream message id of a message of `shard`: the shard and the XXH3-128 of the
/// message's bytes, so that the same samples published again (a router retry, another
/// router given the same request) are one message within the dedup window.
pub fn message_id(shard: u32, payload: &[u8]) -> String {
    format!("{shard}-{:032x}", xxhash_rust::xxh3::xxh3_128(payload))
}

fn kind_of(v: &SampleValue) -> u8 {
    match v {
        SampleValue::F64(_) => 0,
        SampleValue::I64(_) => 1,
        SampleValue::Bool(_) => 2,
        SampleValue::Str(_) => 3,
    }
}

/// Builds one shard message run by run.
#[derive(Debug, Clone)]
pub struct MessageWriter {
    buf: Vec<u8>,
    runs: u32,
}

impl MessageWriter {
    /// A message of `shard` for `index`; `create` on makes a stored sample win over a
    /// retry (the store's `create`), off makes the retry replace it (`index`).
    ///
    /// # Errors
    /// [`Error::BadRequest`] for an index name longer than 65,535 bytes.
    pub fn new(index: &str, create: bool, shard: u32) -> Result<MessageWriter> {
        let len = u16::try_from(index.len())
            .map_err(|_| Error::BadRequest(format!("index name of {} bytes", index.len())))?;
        let mut buf = Vec::with_capacity(4096);
        buf.extend_from_slice(&MAGIC);
        le::put_u32(&mut buf, FORMAT_VERSION);
        le::put_u32(&mut buf, shard);
        buf.push(u8::from(create));
        le::put_u16(&mut buf, len);
        buf.extend_from_slice(index.as_bytes());
        Ok(MessageWriter { buf, runs: 0 })
    }

    /// The message's size so far, in bytes.
    pub fn len_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Whether no run was added.
    pub fn is_empty(&self) -> bool {
        self.runs == 0
    }

    fn run_header(&mut self, kind: u8, labels: &[(&str, &str)], samples: usize) -> Result<()> {
        let n = u16::try_from(labels.len())
            .map_err(|_| Error::BadRequest(format!("a series of {} labels", labels.len())))?;
        let samples = u32::try_from(samples)
            .map_err(|_| Error::BadRequest(format!("a run of {samples} samples")))?;
        self.buf.push(kind);
        le::put_u16(&mut self.buf, n);
        for (name, value) in labels {
            let nl = u16::try_from(name.len())
                .map_err(|_| Error::BadRequest(format!("a label name of {} bytes", name.len())))?;
            let vl = u32::try_from(value.len()).map_err(|_| {
                Error::BadRequest(format!("a label value of {} bytes", value.len()))
            })?;
            le::put_u16(&mut self.buf, nl);
            self.buf.extend_from_slice(name.as_bytes());
            le::put_u32(&mut self.buf, vl);
            self.buf.extend_from_slice(value.as_bytes());
        }
        le::put_u32(&mut self.buf, samples);
        self.runs = self.runs.saturating_add(1);
        Ok(())
    }

    /// Adds float samples of the series `labels`.
    ///
    /// # Errors
    /// [`Error::BadRequest`] for a label longer than the format holds.
    pub fn push_f64_run(&mut self, labels: &[(&str, &str)], samples: &[(i64, f64)]) -> Result<()> {
        self.run_header(0, labels, samples.len())?;
        for &(ts, v) in samples {
            le::put_i64(&mut self.buf, ts);
            le::put_u64(&mut self.buf, v.to_bits());
        }
        Ok(())
    }

    /// Adds one sample of the series `labels`.
    ///
    /// # Errors
    /// As [`push_f64_run`](Self::push_f64_run).
    pub fn push_sample(
        &mut self,
        labels: &[(&str, &str)],
        ts_millis: i64,
        value: &SampleValue,
    ) -> Result<()> {
        self.run_header(kind_of(value), labels, 1)?;
        le::put_i64(&mut self.buf, ts_millis);
        match value {
            SampleValue::F64(v) => le::put_u64(&mut self.buf, v.to_bits()),
            SampleValue::I64(v) => le::put_i64(&mut self.buf, *v),
            SampleValue::Bool(b) => self.buf.push(u8::from(*b)),
            SampleValue::Str(s) => {
                let len = u32::try_from(s.len())
                    .map_err(|_| Error::BadRequest(format!("a string of {} bytes", s.len())))?;
                le::put_u32(&mut self.buf, len);
                self.buf.extend_from_slice(s.as_bytes());
            }
        }
        Ok(())
    }

    /// The message's bytes, footer included.
    pub fn finish(mut self) -> Vec<u8> {
        le::put_u32(&mut self.buf, self.runs);
        let crc = crc32fast::hash(&self.buf);
        le::put_u32(&mut self.buf, crc);
        self.buf
    }
}

/// A decoded message's header, over the message's bytes.
#[derive(Debug, Clone, Copy)]
pub struct ShardMessage<'a> {
    /// The shard the router computed.
    pub shard: u32,
    /// Whether a stored sample wins over a retry (`create`) or is replaced.
    pub create: bool,
    /// The label-keyed index the samples go to.
    pub index: &'a str,
    runs: u32,
    body: &'a [u8],
}

fn truncated(what: &str) -> impl Fn(le::Truncated) -> Error + '_ {
    move |e| Error::Message(format!("{what}: {e}"))
}

fn utf8<'a>(bytes: &'a [u8], what: &str) -> Result<&'a str> {
    std::str::from_utf8(bytes).map_err(|_| Error::Message(format!("{what} is not UTF-8")))
}

impl<'a> ShardMessage<'a> {
    /// Checks the footer's checksum, the magic and the version, and reads the header.
    ///
    /// # Errors
    /// [`Error::ChecksumMismatch`], [`Error::Message`] for a short message, another
    /// magic or an unsupported version.
    pub fn decode(bytes: &'a [u8]) -> Result<ShardMessage<'a>> {
        let split = bytes.len().checked_sub(FOOTER_LEN).ok_or_else(|| {
            Error::Message(format!("{} bytes, shorter than a footer", bytes.len()))
        })?;
        let (covered, footer) = bytes.split_at(split);
        let mut f = LeReader::new(footer);
        let runs = f.u32().map_err(truncated("footer"))?;
        let expected = f.u32().map_err(truncated("footer"))?;
        let got = crc32fast::hash(bytes.get(..split + 4).unwrap_or_default());
        if expected != got {
            return Err(Error::ChecksumMismatch { expected, got });
        }
        let mut r = LeReader::new(covered);
        let magic: [u8; 4] = r.array().map_err(truncated("magic"))?;
        if magic != MAGIC {
            return Err(Error::Message(format!(
                "magic {magic:?}, expected {MAGIC:?}"
            )));
        }
        let version = r.u32().map_err(truncated("version"))?;
        if version != FORMAT_VERSION {
            return Err(Error::Message(format!(
                "format version {version}, this build reads {FORMAT_VERSION}"
            )));
        }
        let shard = r.u32().map_err(truncated("shard"))?;
        let create = r.u8().map_err(truncated("create flag"))? != 0;
        let len = usize::from(r.u16().map_err(truncated("index length"))?);
        let index = utf8(r.take(len).map_err(truncated("index"))?, "the index name")?;
        Ok(ShardMessage {
            shard,
            create,
            index,
            runs,
            body: r.rest(),
        })
    }

    /// Calls `f` with each run: the series' labels and its samples.
    ///
    /// # Errors
    /// [`Error::Message`] where the runs are malformed; `f`'s error.
    pub fn for_each_run(
        &self,
        mut f: impl FnMut(&[(&'a str, &'a str)], &[(i64, SampleValue)]) -> Result<()>,
    ) -> Result<()> {
        let mut r = LeReader::new(self.body);
        let mut labels: Vec<(&'a str, &'a str)> = Vec::new();
        let mut samples: Vec<(i64, SampleValue)> = Vec::new();
        for _ in 0..self.runs {
            let kind = r.u8().map_err(truncated("run kind"))?;
            let n = r.u16().map_err(truncated("label count"))?;
            labels.clear();
            for _ in 0..n {
                let nl = usize::from(r.u16().map_err(truncated("label name length"))?);
                let name = utf8(r.take(nl).map_err(truncated("label name"))?, "a label name")?;
                let vl = usize::try_from(r.u32().map_err(truncated("label value length"))?)
                    .map_err(|_| Error::Message("label value length".to_owned()))?;
                let value = utf8(
                    r.take(vl).map_err(truncated("label value"))?,
                    "a label value",
                )?;
                labels.push((name, value));
            }
            let count = r.u32().map_err(truncated("sample count"))?;
            samples.clear();
            for _ in 0..count {
                let ts = r.i64().map_err(truncated("timestamp"))?;
                let value = match kind {
                    0 => SampleValue::F64(f64::from_bits(r.u64().map_err(truncated("value"))?)),
                    1 => SampleValue::I64(r.i64().map_err(truncated("value"))?),
                    2 => SampleValue::Bool(r.u8().map_err(truncated("value"))? != 0),
                    3 => {
                        let len = usize::try_from(r.u32().map_err(truncated("string length"))?)
                            .map_err(|_| Error::Message("string length".to_owned()))?;
                        SampleValue::Str(
                            utf8(r.take(len).map_err(truncated("string"))?, "a string value")?
                                .to_owned(),
                        )
                    }
                    k => return Err(Error::Message(format!("value kind {k}, expected 0 to 3"))),
                };
                samples.push((ts, value));
            }
            f(&labels, &samples)?;
        }
        if !r.is_empty() {
            return Err(Error::Message(format!(
                "{} bytes after the last run",
                r.remaining()
            )));
        }
        Ok(())
    }

    /// Adds the message's samples to `batch`, resolving each run's series with
    /// `points` (the labels are checked and hashed as `tidemark serve` does).
    ///
    /// # Errors
    /// [`Error::Message`] for a malformed message or labels the store refuses.
    pub fn append_to(&self, points: &mut LabelPoints, batch: &mut SampleBatch) -> Result<()> {
        self.for_each_run(|labels, samples| {
            let Some((_, like)) = samples.first() else {
                return Ok(());
            };
            let series = points
                .series(labels, like)
                .map_err(|e| Error::Message(format!("series {labels:?}: {e}")))?;
            for (ts, v) in samples {
                batch
                    .push(&series, *ts, v.clone())
                    .map_err(|e| Error::Message(format!("series {labels:?}: {e}")))?;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_message() -> Result<Vec<u8>> {
        let mut w = MessageWriter::new("metrics", true, 7)?;
        w.push_f64_run(
            &[("__name__", "up"), ("job", "a")],
            &[(1, 1.0), (2, f64::NAN)],
        )?;
        w.push_sample(&[("__name__", "m_i")], 3, &SampleValue::I64(-5))?;
        w.push_sample(&[("__name__", "m_b")], 4, &SampleValue::Bool(true))?;
        w.push_sample(&[("__name__", "m_s")], 5, &SampleValue::Str("é".to_owned()))?;
        Ok(w.finish())
    }

    #[test]
    fn round_trips_every_value_kind() -> Result<()> {
        let bytes = sample_message()?;
        let m = ShardMessage::decode(&bytes)?;
        assert_eq!((m.shard, m.create, m.index), (7, true, "metrics"));
        let mut seen = Vec::new();
        m.for_each_run(|labels, samples| {
            seen.push((labels.len(), samples.to_vec()));
            Ok(())
        })?;
        assert_eq!(seen.len(), 4);
        assert_eq!(seen[0].0, 2);
        assert!(matches!(seen[0].1[1].1, SampleValue::F64(v) if v.is_nan()));
        assert_eq!(seen[1].1, vec![(3, SampleValue::I64(-5))]);
        assert_eq!(seen[2].1, vec![(4, SampleValue::Bool(true))]);
        assert_eq!(seen[3].1, vec![(5, SampleValue::Str("é".to_owned()))]);
        Ok(())
    }

    #[test]
    fn same_samples_same_id() -> Result<()> {
        let a = sample_message()?;
        let b = sample_message()?;
        assert_eq!(message_id(7, &a), message_id(7, &b));
        let mut w = MessageWriter::new("metrics", true, 7)?;
        w.push_f64_run(&[("__name__", "up")], &[(1, 1.0)])?;
        assert_ne!(message_id(7, &a), message_id(7, &w.finish()));
        Ok(())
    }

    #[test]
    fn rejects_every_truncation_and_flipped_byte() -> Result<()> {
        let bytes = sample_message()?;
        for len in 0..bytes.len() {
            let cut = bytes.get(..len).unwrap_or_default();
            let ok = ShardMessage::decode(cut).and_then(|m| m.for_each_run(|_, _| Ok(())));
            assert!(ok.is_err(), "truncated to {len}");
        }
        for at in 0..bytes.len() {
            let mut b = bytes.clone();
            if let Some(x) = b.get_mut(at) {
                *x ^= 0x40;
            }
            let ok = ShardMessage::decode(&b).and_then(|m| m.for_each_run(|_, _| Ok(())));
            assert!(ok.is_err(), "byte {at} flipped");
        }
        Ok(())
    }
}
