//! Routing: each series to its virtual shard, each request's samples grouped into one
//! message (or a few, when large) per shard.

use std::collections::BTreeMap;

use tidemark::{LabelPoints, SampleValue};
use tidemark_server::metrics::line_protocol::{self, FieldValue, Precision};
use tidemark_server::metrics::remote_write;

use crate::error::{Error, Result};
use crate::message::{MessageWriter, message_id};

/// The number of virtual shards: the lake's `shard` column's
/// ([`tidemark_lake::VIRTUAL_SHARDS`]).
pub const VIRTUAL_SHARDS: u32 = tidemark_lake::VIRTUAL_SHARDS;

/// A message is closed and another begun past this size, below NATS' default 1 MiB
/// payload limit.
pub const MAX_MESSAGE_BYTES: usize = 512 * 1024;

/// The most float samples in one run (128 KiB of them).
const RUN_SAMPLES: usize = 8192;

/// The shard of the series `labels`: [`tidemark_lake::shard_of`] of the series id its
/// labels have as a float series. Routing by the float id, whatever the value type,
/// keeps a numeric series and its integer twin (`5i` by line protocol, `5.0` by remote
/// write: one sample in a single-node store) on one owner.
///
/// # Errors
/// [`Error::BadRequest`] for labels the store refuses.
pub fn shard_of_labels(points: &mut LabelPoints, labels: &[(&str, &str)]) -> Result<u32> {
    let series = points
        .series(labels, &SampleValue::F64(0.0))
        .map_err(|e| Error::BadRequest(format!("series {labels:?}: {e}")))?;
    Ok(tidemark_lake::shard_of(&series.tsid()))
}

/// One message to publish: its shard, JetStream message id and bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The shard (its subject).
    pub shard: u32,
    /// The JetStream message id (`Nats-Msg-Id`).
    pub id: String,
    /// The message ([`crate::ShardMessage`]).
    pub payload: Vec<u8>,
}

/// A request's samples grouped by shard.
///
/// ```
/// use tidemark::SampleValue;
/// let mut groups = tidemark_cluster::ShardGroups::new("metrics", true, i64::MAX)?;
/// groups.push_sample(&[("__name__", "up"), ("job", "a")], 1_000, &SampleValue::F64(1.0))?;
/// groups.push_sample(&[("__name__", "up"), ("job", "b")], 1_000, &SampleValue::F64(1.0))?;
/// let out = groups.finish();
/// assert!(!out.is_empty() && out.len() <= 2);
/// # Ok::<(), tidemark_cluster::Error>(())
/// ```
#[derive(Debug)]
pub struct ShardGroups {
    index: String,
    create: bool,
    max_ts_millis: i64,
    points: LabelPoints,
    open: BTreeMap<u32, MessageWriter>,
    done: Vec<Outgoing>,
    samples: usize,
}

impl ShardGroups {
    /// Groups for a request to `index`; samples past `max_ts_millis` (the router's clock
    /// plus `max_future_secs`) are refused.
    ///
    /// # Errors
    /// [`Error::BadRequest`] for an index name too long; [`Error::Store`] if the label
    /// mapping cannot be built.
    pub fn new(index: &str, create: bool, max_ts_millis: i64) -> Result<ShardGroups> {
        // Checks the name's length once, here.
        MessageWriter::new(index, create, 0)?;
        Ok(ShardGroups {
            index: index.to_owned(),
            create,
            max_ts_millis,
            points: LabelPoints::new().map_err(|e| Error::Store(e.to_string()))?,
            open: BTreeMap::new(),
            done: Vec::new(),
            samples: 0,
        })
    }

    /// The samples added.
    pub fn samples(&self) -> usize {
        self.samples
    }

    fn check_ts(&self, ts: i64, labels: &[(&str, &str)]) -> Result<()> {
        if ts > self.max_ts_millis {
            return Err(Error::BadRequest(format!(
                "series {labels:?}: timestamp {ts} ({}) is too far ahead of the router's clock",
                tidemark::format_time(ts)
            )));
        }
        Ok(())
    }

    fn writer(&mut self, shard: u32) -> Result<&mut MessageWriter> {
        if self
            .open
            .get(&shard)
            .is_some_and(|w| w.len_bytes() >= MAX_MESSAGE_BYTES)
            && let Some(full) = self.open.remove(&shard)
        {
            let payload = full.finish();
            self.done.push(Outgoing {
                shard,
                id: message_id(shard, &payload),
                payload,
            });
        }
        if !self.open.contains_key(&shard) {
            let w = MessageWriter::new(&self.index, self.create, shard)?;
            self.open.insert(shard, w);
        }
        self.open
            .get_mut(&shard)
            .ok_or_else(|| Error::Store("shard group vanished".to_owned()))
    }

    /// Adds float samples of one series (a remote-write timeseries).
    ///
    /// # Errors
    /// [`Error::BadRequest`] for invalid labels or a timestamp too far ahead.
    pub fn push_f64_run(&mut self, labels: &[(&str, &str)], samples: &[(i64, f64)]) -> Result<()> {
        for &(ts, _) in samples {
            self.check_ts(ts, labels)?;
        }
        let shard = shard_of_labels(&mut self.points, labels)?;
        // Runs of at most RUN_SAMPLES samples, so that no message outgrows NATS' limit.
        for chunk in samples.chunks(RUN_SAMPLES) {
            self.writer(shard)?.push_f64_run(labels, chunk)?;
        }
        self.samples += samples.len();
        Ok(())
    }

    /// Adds one sample.
    ///
    /// # Errors
    /// As [`push_f64_run`](Self::push_f64_run).
    pub fn push_sample(
        &mut self,
        labels: &[(&str, &str)],
        ts_millis: i64,
        value: &SampleValue,
    ) -> Result<()> {
        self.check_ts(ts_millis, labels)?;
        let shard = shard_of_labels(&mut self.points, labels)?;
        self.writer(shard)?.push_sample(labels, ts_millis, value)?;
        self.samples += 1;
        Ok(())
    }

    /// The messages, in shard order (a large shard's in the order they filled).
    pub fn finish(self) -> Vec<Outgoing> {
        let mut out = self.done;
        for (shard, w) in self.open {
            if w.is_empty() {
                continue;
            }
            let payload = w.finish();
            out.push(Outgoing {
                shard,
                id: message_id(shard, &payload),
                payload,
            });
        }
        out.sort_by_key(|o| o.shard);
        out
    }
}

/// Groups a Prometheus remote-write request (the snappy-decompressed `WriteRequest`)
/// with the server's decoder: every series checked as `tidemark serve` checks it;
/// series without samples are skipped.
///
/// # Errors
/// [`Error::BadRequest`] for a body that is not a `WriteRequest` or an invalid series
/// (nothing of the request is then published).
pub fn group_remote_write(raw: &[u8], groups: &mut ShardGroups) -> Result<()> {
    // The decoder's callback returns the server's error type, which this crate cannot
    // make: the first refusal of ours is kept and the rest of the body only walked.
    let mut failure: Option<Error> = None;
    let parsed = remote_write::for_each_series(raw, |ts| {
        remote_write::check_view(ts)?;
        if ts.samples.is_empty() || failure.is_some() {
            return Ok(());
        }
        if let Err(e) = groups.push_f64_run(&ts.labels, &ts.samples) {
            failure = Some(e);
        }
        Ok(())
    });
    if let Some(e) = failure {
        return Err(e);
    }
    parsed.map_err(|e| Error::BadRequest(e.reason()))
}

/// One field of a line, checked before any field of the line is added: its labels, its
/// timestamp and its value.
type LineSample = (Vec<(String, String)>, i64, SampleValue);

/// A line-protocol body's bad lines: how many, and the first one's reason.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BadLines {
    /// Lines skipped.
    pub count: u64,
    /// The first one, with its line number and reason.
    pub first: Option<String>,
}

/// Groups an Influx line-protocol body with the server's parser, as `tidemark serve`
/// stores it: one sample per field, named `<measurement>_<field>`, the tags as labels;
/// a line without a timestamp takes `now_ms`. A bad line is skipped whole and counted.
pub fn group_line_protocol(
    body: &[u8],
    precision: Precision,
    now_ms: i64,
    groups: &mut ShardGroups,
) -> BadLines {
    let mut bad = BadLines::default();
    let mut pending: Vec<LineSample> = Vec::new();
    for (n, raw) in line_protocol::lines(body) {
        pending.clear();
        let outcome = line_protocol::parse_line(raw).and_then(|line| {
            let ts = match line.timestamp {
                Some(t) => precision
                    .to_millis(t)
                    .ok_or_else(|| format!("timestamp {t} is out of range"))?,
                None => now_ms,
            };
            for (field, value) in &line.fields {
                let value = match value {
                    FieldValue::Float(v) => SampleValue::F64(*v),
                    FieldValue::Int(v) => SampleValue::I64(*v),
                    FieldValue::UInt(v) => SampleValue::I64(i64::try_from(*v).map_err(|_| {
                        format!("unsigned value {v} of field {field:?} is above the 2^63-1 Tidemark stores exactly")
                    })?),
                    FieldValue::Bool(b) => SampleValue::Bool(*b),
                    FieldValue::Str(s) => SampleValue::Str(s.clone()),
                };
                let mut labels: Vec<(String, String)> = Vec::with_capacity(line.tags.len() + 1);
                labels.push((
                    tidemark::METRIC_NAME_LABEL.to_owned(),
                    format!("{}_{}", line.measurement, field),
                ));
                labels.extend(
                    line.tags
                        .iter()
                        .map(|(k, v)| (k.as_ref().to_owned(), v.as_ref().to_owned())),
                );
                pending.push((labels, ts, value));
            }
            Ok(())
        });
        // A line's fields are checked before any is added, so a bad line adds nothing.
        let outcome = outcome.and_then(|()| {
            for (labels, ts, _) in &pending {
                let refs: Vec<(&str, &str)> = labels
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                groups.check_ts(*ts, &refs).map_err(|e| e.to_string())?;
                shard_of_labels(&mut groups.points, &refs).map_err(|e| e.to_string())?;
            }
            for (labels, ts, value) in &pending {
                let refs: Vec<(&str, &str)> = labels
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                groups
                    .push_sample(&refs, *ts, value)
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        });
        if let Err(reason) = outcome {
            bad.count += 1;
            if bad.first.is_none() {
                let text = String::from_utf8_lossy(raw);
                let shown: String = text.chars().take(200).collect();
                bad.first = Some(format!("unable to parse '{shown}' (line {n}): {reason}"));
            }
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ShardMessage;

    #[test]
    fn a_series_goes_to_the_lakes_shard_every_time() -> Result<()> {
        let mut points = LabelPoints::new().map_err(|e| Error::Store(e.to_string()))?;
        let labels = [("__name__", "cpu"), ("host", "h1")];
        let series = points
            .series(&labels, &SampleValue::F64(0.0))
            .map_err(|e| Error::Store(e.to_string()))?;
        let want = tidemark_lake::shard_of(&series.tsid());
        // Label order does not matter.
        assert_eq!(shard_of_labels(&mut points, &labels)?, want);
        assert_eq!(
            shard_of_labels(&mut points, &[("host", "h1"), ("__name__", "cpu")])?,
            want
        );
        Ok(())
    }

    #[test]
    fn line_protocol_fields_spread_over_shards_and_bad_lines_add_nothing() -> Result<()> {
        let mut g = ShardGroups::new("metrics", true, i64::MAX)?;
        let body = b"cpu,host=a user=1,sys=2i,idle=true,note=\"x\" 1000\nbroken line\nmem,host=a used=3 2000\n";
        let bad = group_line_protocol(body, Precision::Nanos, 0, &mut g);
        assert_eq!(bad.count, 1);
        assert!(bad.first.as_deref().is_some_and(|f| f.contains("line 2")));
        assert_eq!(g.samples(), 5);
        let out = g.finish();
        let mut runs = 0;
        for o in &out {
            let m = ShardMessage::decode(&o.payload)?;
            assert_eq!(m.shard, o.shard);
            m.for_each_run(|labels, samples| {
                let mut points = LabelPoints::new().map_err(|e| Error::Store(e.to_string()))?;
                assert_eq!(shard_of_labels(&mut points, labels)?, o.shard);
                runs += samples.len();
                Ok(())
            })?;
        }
        assert_eq!(runs, 5);
        Ok(())
    }

    #[test]
    fn a_far_future_sample_refuses_the_request() -> Result<()> {
        let mut g = ShardGroups::new("metrics", true, 10_000)?;
        assert!(
            g.push_sample(&[("__name__", "a")], 10_001, &SampleValue::F64(1.0))
                .is_err()
        );
        Ok(())
    }

    #[test]
    fn large_groups_split_and_ids_are_stable() -> Result<()> {
        let make = || -> Result<Vec<Outgoing>> {
            let mut g = ShardGroups::new("metrics", true, i64::MAX)?;
            let samples: Vec<(i64, f64)> = (0..100_000).map(|i| (i, i as f64)).collect();
            g.push_f64_run(&[("__name__", "big")], &samples)?;
            Ok(g.finish())
        };
        let a = make()?;
        assert_eq!(a.len(), 4, "1.6 MB of one shard in four messages");
        assert!(
            a.iter()
                .all(|o| o.payload.len() <= MAX_MESSAGE_BYTES + RUN_SAMPLES * 16 + 1024)
        );
        assert_eq!(a, make()?);
        Ok(())
    }
}
