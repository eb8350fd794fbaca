//! The keyspace: a map from keys to entries, each entry behind its own lock, so that
//! commands on different keys never wait for each other.
//!
//! Ordering rules that keep the append-only log faithful:
//! * a command that changes a key logs itself while it holds that key's lock;
//! * a key is removed from the map first and then marked [`Slot::Dead`] under its lock, so a
//!   command that found the entry before the removal either ran (and logged) before it, or
//!   sees `Dead` and looks the key up again;
//! * commands that touch several keys at once (`RENAME`, `BF.MERGE`, `FLUSHALL`) hold the
//!   write side of [`Db::gate`], which every single-key write holds for reading.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use tidemark_bloom::ScalableBloomFilter;

use crate::persist::Aof;

/// Bytes counted per key on top of its name and value (map slot, entry, locks).
const PER_KEY_OVERHEAD: u64 = 96;

/// Expiry value meaning "no expiry".
pub const NO_EXPIRY: i64 = i64::MAX;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A stored value.
#[derive(Debug, Clone)]
pub enum Value {
    /// A scalable bloom filter (`TYPE` answers `MBbloom--`).
    Bloom(Box<ScalableBloomFilter>),
    /// A plain string (`SET`/`GET`), so that `WRONGTYPE` has something to refer to.
    Str(Vec<u8>),
    /// A filter being restored by `BF.LOADCHUNK`: the bytes so far and the expected total.
    Loading {
        /// The dump bytes received so far.
        bytes: Vec<u8>,
        /// Length of the complete dump.
        total: u64,
    },
}

impl Value {
    /// Bytes this value holds, as counted against `maxmemory`.
    pub fn mem_bytes(&self) -> u64 {
        match self {
            // RedisBloom's accounting shape: 32 for the chain, 64 per link, the bit arrays.
            Value::Bloom(f) => 32 + 64 * f.num_layers() as u64 + f.size_bytes(),
            Value::Str(s) => s.len() as u64,
            Value::Loading { bytes, .. } => bytes.capacity() as u64,
        }
    }

    /// The name `TYPE` answers.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Bloom(_) | Value::Loading { .. } => "MBbloom--",
            Value::Str(_) => "string",
        }
    }
}

/// The state of one entry.
#[derive(Debug)]
pub enum Slot {
    /// Just created by a command that is about to fill it; others treat it as missing.
    Vacant,
    /// Holds a value.
    Live(Value),
    /// Removed from the map; whoever finds it looks the key up again.
    Dead,
}

/// One key's entry.
#[derive(Debug)]
pub struct Entry {
    key: Vec<u8>,
    slot: Mutex<Slot>,
    expire_ms: AtomicI64,
    mem: AtomicU64,
}

impl Entry {
    fn new(key: &[u8], slot: Slot, expire_ms: i64) -> Self {
        Entry {
            key: key.to_vec(),
            slot: Mutex::new(slot),
            expire_ms: AtomicI64::new(expire_ms),
            mem: AtomicU64::new(0),
        }
    }

    /// The key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// Locks the entry (a poisoned lock is still used: values stay consistent because no
    /// command panics halfway through a change).
    pub fn lock(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes counted for this key (value, name and per-key overhead; `MEMORY USAGE`).
    pub fn mem_bytes(&self) -> u64 {
        self.mem.load(Ordering::Relaxed)
    }

    /// Expiry in Unix milliseconds, or [`NO_EXPIRY`].
    pub fn expire_ms(&self) -> i64 {
        self.expire_ms.load(Ordering::Relaxed)
    }

    /// Sets the expiry ([`NO_EXPIRY`] to persist).
    pub fn set_expire_ms(&self, at: i64) {
        self.expire_ms.store(at, Ordering::Relaxed);
    }
}

/// The whole keyspace (database 0, the only one).
#[derive(Debug)]
pub struct Db {
    map: RwLock<HashMap<Vec<u8>, Arc<Entry>>>,
    /// Held for reading by every write command, for writing by multi-key commands and by
    /// the snapshot's copy phase.
    gate: RwLock<()>,
    used: AtomicU64,
    /// Changes since the last snapshot.
    pub dirty: AtomicU64,
    /// True while the append-only log is replayed: keys do not expire then.
    pub loading: AtomicBool,
    /// The append-only log, when enabled (set once loading is done).
    pub aof: RwLock<Option<Arc<Aof>>>,
    /// The memory limit (0: none).
    pub maxmemory: u64,
    /// Layout and hash of the filters this server creates.
    pub bloom_layout: tidemark_bloom::ScalableLayout,
}

impl Db {
    /// An empty keyspace.
    pub fn new(maxmemory: u64, bloom_layout: tidemark_bloom::ScalableLayout) -> Self {
        Db {
            map: RwLock::new(HashMap::new()),
            gate: RwLock::new(()),
            used: AtomicU64::new(0),
            dirty: AtomicU64::new(0),
            loading: AtomicBool::new(false),
            aof: RwLock::new(None),
            bloom_layout,
            maxmemory,
        }
    }

    fn map_read(&self) -> RwLockReadGuard<'_, HashMap<Vec<u8>, Arc<Entry>>> {
        self.map.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn map_write(&self) -> RwLockWriteGuard<'_, HashMap<Vec<u8>, Arc<Entry>>> {
        self.map.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Shared side of the gate: held by single-key writes.
    pub fn gate_shared(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Exclusive side of the gate: no other write runs while it is held.
    pub fn gate_exclusive(&self) -> RwLockWriteGuard<'_, ()> {
        self.gate.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes held by values, keys and per-key overhead.
    pub fn used_memory(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// True when `extra` more bytes would pass `maxmemory`. Never while loading: data that
    /// was accepted once is not refused on restart (as in Redis).
    pub fn over_limit(&self, extra: u64) -> bool {
        self.maxmemory > 0
            && !self.loading.load(Ordering::Relaxed)
            && self.used_memory().saturating_add(extra) > self.maxmemory
    }

    /// Appends a write to the append-only log, if there is one. Call it with the key's lock
    /// held (or the gate held exclusively).
    pub fn log(&self, args: &[&[u8]]) {
        let aof = self.aof.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(aof) = aof.as_ref() {
            aof.append(args);
        }
    }

    /// Counts one change toward the save points.
    pub fn touch(&self) {
        self.dirty.fetch_add(1, Ordering::Relaxed);
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.map_read().len()
    }

    /// True when no key exists.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The live entry of `key`, expiring it first if its time has passed.
    pub fn lookup(&self, key: &[u8]) -> Option<Arc<Entry>> {
        let entry = self.map_read().get(key).cloned()?;
        let at = entry.expire_ms();
        if at != NO_EXPIRY && at <= now_ms() && !self.loading.load(Ordering::Relaxed) {
            self.remove_entry(&entry, true);
            return None;
        }
        Some(entry)
    }

    /// Removes `entry` from the map (if it is still the one under its key) and marks it
    /// dead. Logs a `DEL` when `log` is true and the entry held a value.
    fn remove_entry(&self, entry: &Arc<Entry>, log: bool) -> bool {
        {
            let mut map = self.map_write();
            if map.get(entry.key()).is_some_and(|e| Arc::ptr_eq(e, entry)) {
                map.remove(entry.key());
            }
        }
        let mut slot = entry.lock();
        let was_live = matches!(*slot, Slot::Live(_));
        *slot = Slot::Dead;
        self.account(entry, &slot);
        if was_live {
            if log {
                self.log(&[b"DEL", entry.key()]);
            }
            self.touch();
        }
        was_live
    }

    /// Deletes `key`; true when it existed. Logs the `DEL`.
    pub fn delete(&self, key: &[u8]) -> bool {
        match self.lookup(key) {
            Some(entry) => self.remove_entry(&entry, true),
            None => false,
        }
    }

    /// Brings the memory count of `entry` up to date with `slot`.
    pub fn account(&self, entry: &Entry, slot: &Slot) {
        let new = match slot {
            Slot::Live(v) => v.mem_bytes() + entry.key.len() as u64 + PER_KEY_OVERHEAD,
            _ => 0,
        };
        let old = entry.mem.swap(new, Ordering::Relaxed);
        if new >= old {
            self.used.fetch_add(new - old, Ordering::Relaxed);
        } else {
            self.used.fetch_sub(old - new, Ordering::Relaxed);
        }
    }

    /// Runs `f` on the slot of `key` with the key's lock held.
    ///
    /// A missing key is presented as [`Slot::Vacant`]; with `create`, an entry is made for it
    /// first, so that what `f` stores there becomes the key's value. When `f` leaves the slot
    /// vacant, the entry is dropped again. With `write`, memory accounting is updated after
    /// `f`.
    pub fn access<R>(
        &self,
        key: &[u8],
        create: bool,
        write: bool,
        f: impl FnOnce(&mut Slot, Option<&Entry>) -> R,
    ) -> R {
        loop {
            let entry = match self.lookup(key) {
                Some(e) => e,
                None if create => {
                    let mut map = self.map_write();
                    map.entry(key.to_vec())
                        .or_insert_with(|| Arc::new(Entry::new(key, Slot::Vacant, NO_EXPIRY)))
                        .clone()
                }
                None => return f(&mut Slot::Vacant, None),
            };
            let mut slot = entry.lock();
            if matches!(*slot, Slot::Dead) {
                drop(slot);
                std::thread::yield_now();
                continue;
            }
            if matches!(*slot, Slot::Vacant) && !create {
                return f(&mut Slot::Vacant, None);
            }
            let result = f(&mut slot, Some(&entry));
            if write {
                self.account(&entry, &slot);
            }
            if matches!(*slot, Slot::Vacant) {
                *slot = Slot::Dead;
                drop(slot);
                let mut map = self.map_write();
                if map.get(key).is_some_and(|e| Arc::ptr_eq(e, &entry)) {
                    map.remove(key);
                }
            }
            return result;
        }
    }

    /// Every key with its entry, unordered.
    pub fn entries(&self) -> Vec<Arc<Entry>> {
        self.map_read().values().cloned().collect()
    }

    /// Inserts or replaces `key` with `value` (snapshot load, `RENAME`, `BF.MERGE` into a new
    /// key). Call with the gate held exclusively, or while loading.
    pub fn put(&self, key: &[u8], value: Value, expire_ms: i64) {
        let entry = Arc::new(Entry::new(key, Slot::Live(value), expire_ms));
        let old = self.map_write().insert(key.to_vec(), entry.clone());
        if let Some(old) = old {
            let mut slot = old.lock();
            *slot = Slot::Dead;
            self.account(&old, &slot);
        }
        let slot = entry.lock();
        self.account(&entry, &slot);
    }

    /// Removes every key (call with the gate held exclusively). Returns how many there were.
    pub fn clear(&self) -> usize {
        let old = std::mem::take(&mut *self.map_write());
        let n = old.len();
        for entry in old.values() {
            let mut slot = entry.lock();
            *slot = Slot::Dead;
            self.account(entry, &slot);
        }
        n
    }

    /// Removes the keys whose time has passed (the active expiry cycle).
    pub fn expire_due(&self) -> usize {
        if self.loading.load(Ordering::Relaxed) {
            return 0;
        }
        let now = now_ms();
        let due: Vec<Arc<Entry>> = self
            .map_read()
            .values()
            .filter(|e| e.expire_ms() <= now)
            .cloned()
            .collect();
        let _gate = self.gate_shared();
        due.iter().filter(|e| self.remove_entry(e, true)).count()
    }

    /// Number of keys with an expiry.
    pub fn expiring_keys(&self) -> usize {
        self.map_read()
            .values()
            .filter(|e| e.expire_ms() != NO_EXPIRY)
            .count()
    }
}
