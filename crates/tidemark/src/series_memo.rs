//! A parser's memo of the series it has recently read: from a document's raw dimension
//! values (and, for time series, which metrics it holds) to the series' tsid and its
//! encoded dimensions, so the documents of a series seen before skip the tsid hash and
//! the dimension encoding.
//!
//! Exactness does not rest on the hash: an entry is used only when its key bytes equal
//! the document's, and a key is made of everything the tsid and the encoding are a
//! function of. A sender who makes keys collide on purpose gets misses (the full
//! computation), never another series' id. Memory is bounded: [`SLOTS`] entries of at
//! most [`MAX_KEY`] key bytes.

use std::sync::Arc;

use tidemark_tsid::Tsid;

use crate::doc::Scalar;

/// Entries: a power of two; two-way, so `SLOTS / 2` sets. 4,096 holds a shipper's
/// couple of thousand active series with few misses.
const SLOTS: usize = 4096;

/// Keys longer than this (very long dimension values) are not memoised: with
/// [`SLOTS`], a memo holds at most about 5 MiB (key, encoded dimensions, entry), and
/// about 300 bytes per series of the usual few dimensions.
const MAX_KEY: usize = 512;

/// One remembered series.
struct Entry {
    key: Box<[u8]>,
    tsid: Tsid,
    dims: Arc<[u8]>,
}

/// See the module documentation. Cloning gives an empty memo (a parser's clone starts
/// cold rather than copying up to megabytes of entries).
pub(crate) struct SeriesMemo {
    slots: Vec<Option<Box<Entry>>>,
    /// Per set, the way used last (the other one is replaced on a miss).
    recent: Vec<u8>,
    /// The key of the document being read.
    key: Vec<u8>,
    /// Its hash, once the key is complete.
    hash: u64,
}

impl Default for SeriesMemo {
    fn default() -> Self {
        SeriesMemo {
            slots: Vec::new(),
            recent: Vec::new(),
            key: Vec::with_capacity(256),
            hash: 0,
        }
    }
}

impl Clone for SeriesMemo {
    fn clone(&self) -> Self {
        SeriesMemo::default()
    }
}

impl std::fmt::Debug for SeriesMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeriesMemo")
            .field(
                "entries",
                &self.slots.iter().filter(|s| s.is_some()).count(),
            )
            .finish()
    }
}

const TAG_ABSENT: u8 = 0;
const TAG_STR: u8 = 1;
const TAG_I64: u8 = 2;
const TAG_U64: u8 = 3;
const TAG_BOOL: u8 = 4;

impl SeriesMemo {
    /// Starts the key of a document.
    pub(crate) fn begin(&mut self) {
        self.key.clear();
    }

    /// Adds a dimension's raw value (`None`: absent); `false` when the value is not
    /// memoisable (a float, which no dimension type takes: the full path reports it).
    pub(crate) fn push_dim(&mut self, v: Option<&Scalar<'_>>) -> bool {
        let k = &mut self.key;
        match v {
            None => k.push(TAG_ABSENT),
            Some(Scalar::Str(s)) => {
                k.push(TAG_STR);
                k.extend_from_slice(&(s.len() as u32).to_le_bytes());
                k.extend_from_slice(s.as_bytes());
            }
            Some(Scalar::I64(i)) => {
                k.push(TAG_I64);
                k.extend_from_slice(&i.to_le_bytes());
            }
            Some(Scalar::U64(u)) => {
                k.push(TAG_U64);
                k.extend_from_slice(&u.to_le_bytes());
            }
            Some(Scalar::Bool(b)) => {
                k.push(TAG_BOOL);
                k.push(u8::from(*b));
            }
            Some(Scalar::F64(_)) => return false,
        }
        true
    }

    /// Adds the field index of a metric the document holds (after every dimension: the
    /// dimension count is fixed per parser, so the key reads back one way only).
    pub(crate) fn push_metric(&mut self, field: u32) {
        self.key.extend_from_slice(&field.to_le_bytes());
    }

    /// The remembered series of the key built, if any.
    pub(crate) fn get(&mut self) -> Option<(Tsid, Arc<[u8]>)> {
        if self.key.len() > MAX_KEY {
            return None;
        }
        self.hash = xxhash_rust::xxh3::xxh3_64(&self.key);
        if self.slots.is_empty() {
            return None;
        }
        let set = self.set();
        for way in 0..2 {
            if let Some(Some(e)) = self.slots.get(set * 2 + way)
                && *e.key == self.key[..]
            {
                if let Some(r) = self.recent.get_mut(set) {
                    *r = way as u8;
                }
                return Some((e.tsid, Arc::clone(&e.dims)));
            }
        }
        None
    }

    /// Remembers the series of the key built (after a [`get`](Self::get) that missed).
    pub(crate) fn put(&mut self, tsid: Tsid, dims: &Arc<[u8]>) {
        if self.key.len() > MAX_KEY {
            return;
        }
        if self.slots.is_empty() {
            self.slots = (0..SLOTS).map(|_| None).collect();
            self.recent = vec![0; SLOTS / 2];
        }
        let set = self.set();
        let Some(recent) = self.recent.get_mut(set) else {
            return;
        };
        // The way not used last, or an empty one.
        let way = match (self.slots.get(set * 2), self.slots.get(set * 2 + 1)) {
            (Some(None), _) => 0,
            (_, Some(None)) => 1,
            _ => usize::from(*recent == 0),
        };
        *recent = way as u8;
        if let Some(slot) = self.slots.get_mut(set * 2 + way) {
            let key = self.key.as_slice().into();
            *slot = Some(Box::new(Entry {
                key,
                tsid,
                dims: Arc::clone(dims),
            }));
        }
    }

    fn set(&self) -> usize {
        (self.hash as usize) & (SLOTS / 2 - 1)
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    fn key(m: &mut SeriesMemo, dims: &[Option<Scalar<'_>>], metrics: &[u32]) -> bool {
        m.begin();
        for d in dims {
            if !m.push_dim(d.as_ref()) {
                return false;
            }
        }
        for &f in metrics {
            m.push_metric(f);
        }
        true
    }

    fn s(v: &str) -> Option<Scalar<'_>> {
        Some(Scalar::Str(Cow::Borrowed(v)))
    }

    #[test]
    fn a_hit_needs_equal_keys_and_misses_are_recomputed() {
        let mut m = SeriesMemo::default();
        let dims: Arc<[u8]> = Arc::from(&b"a"[..]);
        let t1 = Tsid::from_bytes([1; 20]);
        assert!(key(&mut m, &[s("ab"), None], &[3]));
        assert!(m.get().is_none());
        m.put(t1, &dims);
        assert!(key(&mut m, &[s("ab"), None], &[3]));
        assert_eq!(m.get().map(|(t, _)| t), Some(t1));
        // The same bytes split otherwise, another metric set, a typed value: misses.
        assert!(key(&mut m, &[s("a"), s("b")], &[3]));
        assert!(m.get().is_none());
        assert!(key(&mut m, &[s("ab"), None], &[4]));
        assert!(m.get().is_none());
        assert!(key(&mut m, &[s("ab"), None], &[]));
        assert!(m.get().is_none());
        assert!(key(&mut m, &[Some(Scalar::I64(7)), None], &[3]));
        assert!(m.get().is_none());
        assert!(key(&mut m, &[Some(Scalar::U64(7)), None], &[3]));
        assert!(m.get().is_none());
        // A float dimension is never memoised.
        assert!(!key(&mut m, &[Some(Scalar::F64(1.0)), None], &[3]));
        // A clone starts empty.
        let mut c = m.clone();
        assert!(key(&mut c, &[s("ab"), None], &[3]));
        assert!(c.get().is_none());
    }

    #[test]
    fn memory_is_bounded_and_recent_entries_survive() {
        let mut m = SeriesMemo::default();
        let dims: Arc<[u8]> = Arc::from(&b""[..]);
        for i in 0..(SLOTS as u64 * 4) {
            let v = i.to_string();
            assert!(key(&mut m, &[s(&v)], &[]));
            if m.get().is_none() {
                m.put(Tsid::from_bytes([(i % 251) as u8; 20]), &dims);
            }
        }
        assert!(m.slots.len() == SLOTS);
        // The last key put is found again.
        let last = (SLOTS as u64 * 4 - 1).to_string();
        assert!(key(&mut m, &[s(&last)], &[]));
        assert!(m.get().is_some());
        // An oversized key is neither kept nor looked up.
        let long = "x".repeat(MAX_KEY + 1);
        assert!(key(&mut m, &[s(&long)], &[]));
        assert!(m.get().is_none());
        m.put(Tsid::from_bytes([9; 20]), &dims);
        assert!(key(&mut m, &[s(&long)], &[]));
        assert!(m.get().is_none());
    }
}
