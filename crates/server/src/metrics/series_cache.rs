//! Label-keyed series already resolved, shared by every request of the metrics protocols.
//!
//! Resolving a series (sorting and checking its labels, hashing them into the series id,
//! encoding its dimensions) cost 3.7k instructions per sample of Influx line protocol,
//! where a sender repeats the same few thousand series in every request. The cache keys a
//! resolved [`LabelSeries`] by the bytes of the request that determine it (for line
//! protocol: the measurement-and-tags text as sent, the field key and the value type), so
//! a repeated series costs one hash of those bytes. Two spellings of one series (tags in
//! another order, other escapes) are two entries holding the same series: never a wrong
//! one, since equal bytes always parse to equal labels.
//!
//! Line protocol keys one entry per line instead ([`LineSeries`]): the measurement and
//! tags are hashed once, and the line's fields are found in the entry by name, where a
//! key per field hashed and locked once per sample (8 times per line of the k8s data).
//!
//! Memory is bounded: each of [`SHARDS`] shards holds at most [`SHARD_ENTRIES`] entries and
//! is emptied when full (a sender's working set is re-resolved once, then hits again).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex};

use tidemark::LabelSeries;

/// Shards, so that concurrent requests rarely wait for one another.
pub(crate) const SHARDS: usize = 16;
/// Series per shard before it is emptied: 16 × 8,192 = 131,072 series, about 40 MB at
/// most with typical label sets.
pub(crate) const SHARD_ENTRIES: usize = 8_192;

/// The entries' map is keyed by the xxh3 hash of the key bytes, already uniform: no
/// second hashing.
#[derive(Default)]
struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type Shard<V> = HashMap<u64, (Box<[u8]>, V), BuildHasherDefault<Identity>>;

/// A cache of resolved series by the request bytes that determine them (see the module
/// docs): [`SeriesCache`] holds one series per key, [`LineCache`] a line's series.
pub(crate) struct KeyCache<V> {
    shards: Vec<Mutex<Shard<V>>>,
    /// The hash seed, random per process: the key bytes come from senders, and with a
    /// known seed one could send keys whose hashes collide and make every lookup of a
    /// shard a scan.
    seed: u64,
}

/// One series per key (remote write, the VictoriaMetrics imports, OTLP).
pub(crate) type SeriesCache = KeyCache<LabelSeries>;

/// One entry per line-protocol series key: the measurement and tags as sent.
pub(crate) type LineCache = KeyCache<Arc<LineSeries>>;

/// The series of one line-protocol series key, by field name and value type.
#[derive(Debug, Default)]
pub(crate) struct LineSeries {
    fields: Vec<(Box<str>, u8, LabelSeries)>,
}

impl LineSeries {
    /// The series of field `name` with values of type `tag`, if resolved before.
    pub(crate) fn field(&self, name: &str, tag: u8) -> Option<&LabelSeries> {
        self.fields
            .iter()
            .find(|(n, t, _)| *t == tag && **n == *name)
            .map(|(_, _, s)| s)
    }

    /// This entry with the series of `added` too (a line with fields not seen before
    /// under its key).
    pub(crate) fn with(&self, added: Vec<(Box<str>, u8, LabelSeries)>) -> LineSeries {
        let mut fields = self.fields.clone();
        fields.extend(added);
        LineSeries { fields }
    }
}

impl<V> std::fmt::Debug for KeyCache<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyCache").field("shards", &SHARDS).finish()
    }
}

impl<V> Default for KeyCache<V> {
    fn default() -> Self {
        use std::hash::BuildHasher;
        KeyCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            seed: std::collections::hash_map::RandomState::new()
                .hash_one(0x7469_6465_6d61_726b_u64),
        }
    }
}

impl<V: Clone> KeyCache<V> {
    fn shard(&self, hash: u64) -> Option<&Mutex<Shard<V>>> {
        // The high bits choose the shard; the map uses the whole hash.
        self.shards.get((hash >> 60) as usize % SHARDS)
    }

    /// The entry stored under `key`, if any.
    pub(crate) fn get(&self, key: &[u8]) -> Option<V> {
        let hash = xxhash_rust::xxh3::xxh3_64_with_seed(key, self.seed);
        let shard = self.shard(hash)?.lock().ok()?;
        match shard.get(&hash) {
            Some((k, series)) if **k == *key => Some(series.clone()),
            _ => None,
        }
    }

    /// Stores `series` under `key` (replacing another key of the same hash).
    pub(crate) fn put(&self, key: &[u8], series: &V) {
        let hash = xxhash_rust::xxh3::xxh3_64_with_seed(key, self.seed);
        let Some(Ok(mut shard)) = self.shard(hash).map(Mutex::lock) else {
            return;
        };
        if shard.len() >= SHARD_ENTRIES && !shard.contains_key(&hash) {
            shard.clear();
        }
        shard.insert(hash, (key.into(), series.clone()));
    }

    /// Series held, over all shards.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().map_or(0, |s| s.len()))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark::{LabelPoints, SampleValue};

    #[test]
    fn a_key_finds_its_series_and_only_its_own() {
        let mut points = LabelPoints::new().unwrap();
        let a = points
            .series(&[("__name__", "a"), ("host", "x")], &SampleValue::F64(0.0))
            .unwrap();
        let b = points
            .series(&[("__name__", "b"), ("host", "x")], &SampleValue::F64(0.0))
            .unwrap();
        let cache = SeriesCache::default();
        assert!(cache.get(b"a,host=x").is_none());
        cache.put(b"a,host=x", &a);
        cache.put(b"b,host=x", &b);
        assert_eq!(cache.get(b"a,host=x").unwrap().tsid(), a.tsid());
        assert_eq!(cache.get(b"b,host=x").unwrap().tsid(), b.tsid());
        assert!(cache.get(b"a,host=y").is_none());
        assert!(cache.get(b"").is_none());
    }

    #[test]
    fn a_full_shard_is_emptied_so_memory_stays_bounded() {
        let mut points = LabelPoints::new().unwrap();
        let s = points
            .series(&[("__name__", "a")], &SampleValue::F64(0.0))
            .unwrap();
        let cache = SeriesCache::default();
        for i in 0..(SHARDS * SHARD_ENTRIES * 3) {
            cache.put(format!("key{i}").as_bytes(), &s);
            assert!(cache.len() <= SHARDS * SHARD_ENTRIES);
        }
        let last = format!("key{}", SHARDS * SHARD_ENTRIES * 3 - 1);
        assert!(cache.get(last.as_bytes()).is_some());
    }
}
