//! The partition manifest: a partitioned store's settings, clock and list of partitions,
//! switched atomically (docs/partitions.md has the layout).
//!
//! ```text
//! magic "TMPT" | version u32
//! | width_ms i64 | retention_ms i64 (0: none) | late_window_ms i64 (0: none)
//! | seal_grace_ms i64 | high_water_ms i64 | dropped_partitions u64 | dropped_rows u64
//! | rollups u32 | rollups × resolution_ms i64
//! | partitions u32 | partitions × (start_ms i64 | state u8)
//! | crc32 u32 of every byte before it | magic "TMPT"
//! ```
//! Written to a temporary file, fsynced, renamed over `PARTITIONS`, directory fsynced.

use std::path::Path;

use crate::error::{Error, Result};
use crate::le::{put_i64, put_u8, put_u32, put_u64};

/// Magic at both ends of the partition manifest.
pub const PARTITIONS_MAGIC: [u8; 4] = *b"TMPT";
/// Partition manifest format version written and read.
pub const PARTITIONS_VERSION: u32 = 1;
/// File name of the partition manifest in a partitioned store's directory.
pub const PARTITIONS_NAME: &str = "PARTITIONS";

/// Most partitions or rollup resolutions a manifest may list (a hard cap checked before
/// any allocation).
const MAX_ENTRIES: u32 = 1 << 20;

/// The state of a partition, as persisted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PartState {
    /// Taking writes; no rollups.
    Active,
    /// Merged, rollups built and current.
    Sealed,
    /// Sealed, but a write reached it and its rollups may be behind: rebuilt on open.
    Dirty,
}

impl PartState {
    fn tag(self) -> u8 {
        match self {
            PartState::Active => 0,
            PartState::Sealed => 1,
            PartState::Dirty => 2,
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
    pub(crate) rollups: Vec<i64>,
    /// By start, ascending.
    pub(crate) partitions: Vec<(i64, PartState)>,
}

impl PartManifest {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(80 + self.rollups.len() * 8 + self.partitions.len() * 9);
        out.extend_from_slice(&PARTITIONS_MAGIC);
        put_u32(&mut out, PARTITIONS_VERSION);
        put_i64(&mut out, self.width_ms);
        put_i64(&mut out, self.retention_ms.unwrap_or(0));
        put_i64(&mut out, self.late_window_ms.unwrap_or(0));
        put_i64(&mut out, self.seal_grace_ms);
        put_i64(&mut out, self.high_water_ms);
        put_u64(&mut out, self.dropped_partitions);
        put_u64(&mut out, self.dropped_rows);
        put_u32(&mut out, self.rollups.len() as u32);
        for r in &self.rollups {
            put_i64(&mut out, *r);
        }
        put_u32(&mut out, self.partitions.len() as u32);
        for (start, state) in &self.partitions {
            put_i64(&mut out, *start);
            put_u8(&mut out, state.tag());
        }
        let crc = crc32fast::hash(&out);
        put_u32(&mut out, crc);
        out.extend_from_slice(&PARTITIONS_MAGIC);
        out
    }

    pub(crate) fn decode(bytes: &[u8], path: &Path) -> Result<PartManifest> {
        let mut r = crate::manifest::open_frame(
            bytes,
            path,
            PARTITIONS_MAGIC,
            PARTITIONS_VERSION,
            7 * 8 + 4 + 4,
        )?;
        let width_ms = r.i64()?;
        let opt = |v: i64| (v > 0).then_some(v);
        let retention_ms = opt(r.i64()?);
        let late_window_ms = opt(r.i64()?);
        let seal_grace_ms = r.i64()?;
        let high_water_ms = r.i64()?;
        let dropped_partitions = r.u64()?;
        let dropped_rows = r.u64()?;
        let n = r.u32()?;
        if n > MAX_ENTRIES {
            return Err(r.corrupt_at(r.offset(), format!("{n} rollup resolutions")));
        }
        let mut rollups = Vec::new();
        for _ in 0..n {
            rollups.push(r.i64()?);
        }
        let n = r.u32()?;
        if n > MAX_ENTRIES {
            return Err(r.corrupt_at(r.offset(), format!("{n} partitions")));
        }
        let mut partitions = Vec::new();
        for _ in 0..n {
            let start = r.i64()?;
            let at = r.offset();
            let state = match r.u8()? {
                0 => PartState::Active,
                1 => PartState::Sealed,
                2 => PartState::Dirty,
                t => return Err(r.corrupt_at(at, format!("partition state {t}"))),
            };
            partitions.push((start, state));
        }
        if !r.is_empty() {
            return Err(r.corrupt_at(r.offset(), format!("{} trailing bytes", r.remaining())));
        }
        if width_ms <= 0 || !partitions.windows(2).all(|w| w[0].0 < w[1].0) {
            return Err(r.corrupt_at(0, "bad width or partitions out of order"));
        }
        Ok(PartManifest {
            width_ms,
            retention_ms,
            late_window_ms,
            seal_grace_ms,
            high_water_ms,
            dropped_partitions,
            dropped_rows,
            rollups,
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
            rollups: vec![300_000, 3_600_000],
            partitions: vec![
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
