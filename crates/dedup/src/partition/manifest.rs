//! The partition manifest: a partitioned store's settings, clock and list of partitions,
//! switched atomically (docs/partitions.md has the layout).
//!
//! ```text
//! magic "TMPT" | version u32 (2)
//! | width_ms i64 | retention_ms i64 (0: none) | late_window_ms i64 (0: none)
//! | seal_grace_ms i64 | high_water_ms i64 | dropped_partitions u64 | dropped_rows u64
//! | expired_partitions u64 | expired_rows u64
//! | rollups u32 (<= 32) | rollups × (resolution_ms i64 | retention_ms i64 (0: the raw one))
//! | partitions u32 | partitions × (start_ms i64 | state u8 | kept_rollups u32)
//! | crc32 u32 of every byte before it | magic "TMPT"
//! ```
//! Version 1 (still read) lacks the two `expired_*` counters, the rollup retentions and
//! `kept_rollups`. Written to a temporary file, fsynced, renamed over `PARTITIONS`,
//! directory fsynced.

use std::path::Path;

use crate::error::{Error, Result};
use crate::le::{put_i64, put_u8, put_u32, put_u64};

/// Magic at both ends of the partition manifest.
pub const PARTITIONS_MAGIC: [u8; 4] = *b"TMPT";
/// Partition manifest format version written and read.
pub const PARTITIONS_VERSION: u32 = 2;
/// The oldest partition manifest version read.
const OLDEST_VERSION: u32 = 1;
/// File name of the partition manifest in a partitioned store's directory.
pub const PARTITIONS_NAME: &str = "PARTITIONS";

/// Most partitions or rollup resolutions a manifest may list (a hard cap checked before
/// any allocation).
const MAX_ENTRIES: u32 = 1 << 20;

/// Most rollup resolutions (a partition's kept rollups are a 32-bit mask over them).
pub(crate) const MAX_ROLLUPS: usize = 32;

/// The state of a partition, as persisted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PartState {
    /// Taking writes; no rollups.
    Active,
    /// Merged, rollups built and current.
    Sealed,
    /// Sealed, but a write reached it and its rollups may be behind: rebuilt on open.
    Dirty,
    /// Past the raw retention but within a rollup's: its raw rows are dropped, only the
    /// rollups in `kept` remain (bit `i`: the manifest's `i`-th resolution).
    RawExpired {
        /// Mask of the rollups kept (never 0: the partition is dropped then).
        kept: u32,
    },
}

impl PartState {
    fn tag(self) -> u8 {
        match self {
            PartState::Active => 0,
            PartState::Sealed => 1,
            PartState::Dirty => 2,
            PartState::RawExpired { .. } => 3,
        }
    }

    fn kept(self) -> u32 {
        match self {
            PartState::RawExpired { kept } => kept,
            _ => 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartManifest {
    pub(crate) width_ms: i64,
    pub(crate) retention_ms: Option<i64>,
    pub(crate) late_window_ms: Option<i64>,
    pub(crate) seal_grace_ms: i64,
    pub(crate) high_water_ms: i64,
    pub(crate) dropped_partitions: u64,
    pub(crate) dropped_rows: u64,
    /// Partitions whose raw rows retention dropped while a rollup was kept, ever.
    pub(crate) expired_partitions: u64,
    /// Raw rows those held.
    pub(crate) expired_rows: u64,
    pub(crate) rollups: Vec<i64>,
    /// Per rollup (same order): how long it outlives the raw rows (`None`: it does not).
    pub(crate) rollup_retention_ms: Vec<Option<i64>>,
    /// By start, ascending.
    pub(crate) partitions: Vec<(i64, PartState)>,
}

impl PartManifest {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(100 + self.rollups.len() * 16 + self.partitions.len() * 13);
        out.extend_from_slice(&PARTITIONS_MAGIC);
        put_u32(&mut out, PARTITIONS_VERSION);
        put_i64(&mut out, self.width_ms);
        put_i64(&mut out, self.retention_ms.unwrap_or(0));
        put_i64(&mut out, self.late_window_ms.unwrap_or(0));
        put_i64(&mut out, self.seal_grace_ms);
        put_i64(&mut out, self.high_water_ms);
        put_u64(&mut out, self.dropped_partitions);
        put_u64(&mut out, self.dropped_rows);
        put_u64(&mut out, self.expired_partitions);
        put_u64(&mut out, self.expired_rows);
        put_u32(&mut out, self.rollups.len() as u32);
        for (i, r) in self.rollups.iter().enumerate() {
            put_i64(&mut out, *r);
            let kept = self.rollup_retention_ms.get(i).copied().flatten();
            put_i64(&mut out, kept.unwrap_or(0));
        }
        put_u32(&mut out, self.partitions.len() as u32);
        for (start, state) in &self.partitions {
            put_i64(&mut out, *start);
            put_u8(&mut out, state.tag());
            put_u32(&mut out, state.kept());
        }
        let crc = crc32fast::hash(&out);
        put_u32(&mut out, crc);
        out.extend_from_slice(&PARTITIONS_MAGIC);
        out
    }

    pub(crate) fn decode(bytes: &[u8], path: &Path) -> Result<PartManifest> {
        let fields_min = 7 * 8 + 4 + 4;
        let (mut r, version) = match crate::manifest::open_frame(
            bytes,
            path,
            PARTITIONS_MAGIC,
            PARTITIONS_VERSION,
            fields_min,
        ) {
            Ok(r) => (r, PARTITIONS_VERSION),
            Err(Error::UnsupportedVersion { found, .. })
                if (OLDEST_VERSION..PARTITIONS_VERSION).contains(&found) =>
            {
                let r =
                    crate::manifest::open_frame(bytes, path, PARTITIONS_MAGIC, found, fields_min)?;
                (r, found)
            }
            Err(e) => return Err(e),
        };
        let v2 = version >= 2;
        let width_ms = r.i64()?;
        let opt = |v: i64| (v > 0).then_some(v);
        let retention_ms = opt(r.i64()?);
        let late_window_ms = opt(r.i64()?);
        let seal_grace_ms = r.i64()?;
        let high_water_ms = r.i64()?;
        let dropped_partitions = r.u64()?;
        let dropped_rows = r.u64()?;
        let (expired_partitions, expired_rows) = if v2 { (r.u64()?, r.u64()?) } else { (0, 0) };
        let n = r.u32()?;
        let cap = if v2 { MAX_ROLLUPS as u32 } else { MAX_ENTRIES };
        if n > cap {
            return Err(r.corrupt_at(r.offset(), format!("{n} rollup resolutions")));
        }
        let mut rollups = Vec::new();
        let mut rollup_retention_ms = Vec::new();
        for _ in 0..n {
            rollups.push(r.i64()?);
            rollup_retention_ms.push(if v2 { opt(r.i64()?) } else { None });
        }
        let n = r.u32()?;
        if n > MAX_ENTRIES {
            return Err(r.corrupt_at(r.offset(), format!("{n} partitions")));
        }
        // Bits of rollups that exist (a version-1 manifest may list more than 32, and
        // keeps none of them).
        let all_kept = u32::MAX
            .checked_shr(32u32.saturating_sub(rollups.len() as u32))
            .unwrap_or(0);
        let mut partitions = Vec::new();
        for _ in 0..n {
            let start = r.i64()?;
            let at = r.offset();
            let tag = r.u8()?;
            let kept = if v2 { r.u32()? } else { 0 };
            let state = match (tag, kept) {
                (0, 0) => PartState::Active,
                (1, 0) => PartState::Sealed,
                (2, 0) => PartState::Dirty,
                (3, k) if k != 0 && k & !all_kept == 0 => PartState::RawExpired { kept: k },
                (t, k) => {
                    return Err(r.corrupt_at(at, format!("partition state {t} keeping {k:#x}")));
                }
            };
            partitions.push((start, state));
        }
        if !r.is_empty() {
            return Err(r.corrupt_at(r.offset(), format!("{} trailing bytes", r.remaining())));
        }
        if width_ms <= 0 || !partitions.windows(2).all(|w| w[0].0 < w[1].0) {
            return Err(r.corrupt_at(0, "bad width or partitions out of order"));
        }
        // As the configuration requires: rollups bucket by their resolution, and a
        // resolution of 0 (found by the `partitions` fuzz target) divided by zero.
        if let Some(bad) = rollups.iter().find(|&&res| res <= 0 || width_ms % res != 0) {
            return Err(r.corrupt_at(
                0,
                format!("rollup resolution {bad} ms does not divide the width {width_ms} ms"),
            ));
        }
        Ok(PartManifest {
            width_ms,
            retention_ms,
            late_window_ms,
            seal_grace_ms,
            high_water_ms,
            dropped_partitions,
            dropped_rows,
            expired_partitions,
            expired_rows,
            rollups,
            rollup_retention_ms,
            partitions,
        })
    }

    /// `Ok(None)` when the directory has no partition manifest.
    pub(crate) fn read(dir: &Path) -> Result<Option<PartManifest>> {
        let path = dir.join(PARTITIONS_NAME);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(&path)(e)),
        };
        PartManifest::decode(&bytes, &path).map(Some)
    }

    pub(crate) fn write(&self, dir: &Path) -> Result<()> {
        crate::fsutil::write_atomic(&dir.join(PARTITIONS_NAME), &self.encode())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> PartManifest {
        PartManifest {
            width_ms: 86_400_000,
            retention_ms: Some(30 * 86_400_000),
            late_window_ms: None,
            seal_grace_ms: 3_600_000,
            high_water_ms: 1_764_460_800_000,
            dropped_partitions: 2,
            dropped_rows: 77,
            expired_partitions: 3,
            expired_rows: 99,
            rollups: vec![300_000, 3_600_000],
            rollup_retention_ms: vec![None, Some(365 * 86_400_000)],
            partitions: vec![
                (-2 * 86_400_000, PartState::RawExpired { kept: 2 }),
                (-86_400_000, PartState::Sealed),
                (0, PartState::Dirty),
                (86_400_000, PartState::Active),
            ],
        }
    }

    #[test]
    fn round_trips() {
        let m = sample();
        assert_eq!(
            PartManifest::decode(&m.encode(), Path::new("P")).unwrap(),
            m
        );
    }

    /// A version 1 manifest, as written before rollup retention existed.
    fn v1_bytes() -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&PARTITIONS_MAGIC);
        put_u32(&mut out, 1);
        for v in [86_400_000i64, 0, 0, 3_600_000, 7_200_000] {
            put_i64(&mut out, v);
        }
        put_u64(&mut out, 1);
        put_u64(&mut out, 10);
        put_u32(&mut out, 1);
        put_i64(&mut out, 3_600_000);
        put_u32(&mut out, 2);
        for (s, t) in [(0i64, 1u8), (86_400_000, 0)] {
            put_i64(&mut out, s);
            put_u8(&mut out, t);
        }
        let crc = crc32fast::hash(&out);
        put_u32(&mut out, crc);
        out.extend_from_slice(&PARTITIONS_MAGIC);
        out
    }

    #[test]
    fn reads_version_1() {
        let m = PartManifest::decode(&v1_bytes(), Path::new("P")).unwrap();
        assert_eq!(m.rollups, vec![3_600_000]);
        assert_eq!(m.rollup_retention_ms, vec![None]);
        assert_eq!((m.dropped_partitions, m.dropped_rows), (1, 10));
        assert_eq!((m.expired_partitions, m.expired_rows), (0, 0));
        assert_eq!(
            m.partitions,
            vec![(0, PartState::Sealed), (86_400_000, PartState::Active)]
        );
        // Rewritten as the current version, it reads back equal.
        assert_eq!(
            PartManifest::decode(&m.encode(), Path::new("P")).unwrap(),
            m
        );
    }

    #[test]
    fn rejects_resolutions_that_do_not_divide_the_width() {
        for res in [0, -300_000, 7_000_000] {
            let mut m = sample();
            m.rollups[0] = res;
            assert!(
                PartManifest::decode(&m.encode(), Path::new("P")).is_err(),
                "{res}"
            );
        }
    }

    #[test]
    fn reads_a_version_1_manifest_of_many_rollups() {
        let mut m = sample();
        m.rollups = (1..=40)
            .map(|i| 86_400_000 / i64::from(2u32.pow(i % 8)))
            .collect();
        m.rollup_retention_ms = vec![None; 40];
        m.partitions = vec![(0, PartState::Sealed)];
        // Version 1 (no expired counters, rollup retentions or kept masks) had no cap of
        // 32 rollups; the kept mask's width was computed as 32 minus their count.
        let mut v1 = Vec::new();
        v1.extend_from_slice(&PARTITIONS_MAGIC);
        put_u32(&mut v1, 1);
        for v in [m.width_ms, 0, 0, m.seal_grace_ms, m.high_water_ms] {
            put_i64(&mut v1, v);
        }
        put_u64(&mut v1, 0);
        put_u64(&mut v1, 0);
        put_u32(&mut v1, 40);
        for r in &m.rollups {
            put_i64(&mut v1, *r);
        }
        put_u32(&mut v1, 1);
        put_i64(&mut v1, 0);
        put_u8(&mut v1, 1);
        let crc = crc32fast::hash(&v1);
        put_u32(&mut v1, crc);
        v1.extend_from_slice(&PARTITIONS_MAGIC);
        assert_eq!(
            PartManifest::decode(&v1, Path::new("P")).unwrap().rollups,
            m.rollups
        );
    }

    #[test]
    fn rejects_a_kept_mask_naming_no_rollup() {
        let mut m = sample();
        m.partitions[0].1 = PartState::RawExpired { kept: 4 };
        assert!(PartManifest::decode(&m.encode(), Path::new("P")).is_err());
    }

    #[test]
    fn rejects_every_truncation_and_flipped_byte() {
        let bytes = sample().encode();
        for len in 0..bytes.len() {
            assert!(PartManifest::decode(&bytes[..len], Path::new("P")).is_err());
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(
                PartManifest::decode(&b, Path::new("P")).is_err(),
                "byte {i}"
            );
        }
    }
}
