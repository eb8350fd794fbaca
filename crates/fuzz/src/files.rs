//! The file formats: segments and their tombstones, the engine's write-ahead log and
//! manifests, bloom filters, and bloomd's snapshot and append-only log. Each target reads
//! its input as given and with its checksums repaired (see [`crate::checksums`]).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tidemark_bloom::{
    BlockedBloomFilter, BlockedBloomFilterRef, BloomFilter, BloomFilterRef, Hash64,
    ScalableBloomFilter, ScalableBloomFilterRef, SplitBlockBloomFilter, SplitBlockBloomFilterRef,
};
use tidemark_bloomd::persist;
use tidemark_dedup::{Engine, EngineConfig, PartitionedEngine};
use tidemark_segment::{
    Point, Segment, SegmentBloom, SegmentBloomRef, SegmentOptions, SegmentWriter, Tombstones,
};

use crate::{checksums, scratch};

/// Rows past which a segment is only opened and sampled: a few kilobytes of zstd can
/// legitimately describe millions of rows, and reading them all is not what a fuzzer
/// should spend its time on.
const FULL_READ_ROWS: u64 = 20_000;

/// The input as given, then with its checksums repaired when that changes it.
fn with_repaired(data: &[u8], repair: impl Fn(&[u8]) -> Option<Vec<u8>>, mut f: impl FnMut(&[u8])) {
    f(data);
    if let Some(fixed) = repair(data) {
        f(&fixed);
    }
}

/// A segment file read from memory ([`Segment::from_vec`]): every accessor, a sample of
/// rows (all of them in a small segment), the bloom and id sections, [`Segment::verify`],
/// [`tidemark_segment::dump`]; a small time-series segment that verifies is written back
/// with the segment writer and must read back to the same points, twice over.
///
/// `fst` 0.4 does not check an FST's structure, and a forged id index (its CRCs
/// recomputed) makes its lookups index out of bounds; `Segment::lookup_id` and `verify`
/// catch that panic as an error. libFuzzer's panic hook aborts before any unwinding, so
/// under libFuzzer the repaired input's ids are not looked up (see `docs/results/fuzz.md`).
pub fn segment(data: &[u8]) {
    read_segment(data, true);
    if let Some(fixed) = checksums::segment(data) {
        read_segment(&fixed, !cfg!(feature = "libfuzzer"));
    }
}

fn read_segment(bytes: &[u8], lookups: bool) {
    let _ = tidemark_segment::dump(bytes);
    let Ok(seg) = Segment::from_vec(bytes.to_vec()) else {
        return;
    };
    let rows = seg.row_count();
    let _ = (seg.series_count(), seg.min_timestamp(), seg.max_timestamp());
    let _ = (seg.columns(), seg.extra_columns(), seg.size_breakdown());
    let _ = (
        seg.bloom_params(),
        seg.series_range_bytes(),
        seg.is_events(),
    );
    let sample: Vec<u64> = if rows <= FULL_READ_ROWS {
        (0..rows).collect()
    } else {
        (0..64).chain(rows - 64..rows).collect()
    };
    for &row in &sample {
        if let Ok(p) = seg.row(row) {
            let _ = seg.find(&p.tsid, p.ts_millis);
            let _ = seg.find_all(&p.tsid, p.ts_millis);
            let id = tidemark_tsid::SyntheticId::new(p.tsid, p.ts_millis);
            let _ = (seg.may_contain_id(&id), seg.contains_id(&id));
            if lookups {
                let _ = seg.lookup_id(&id);
            }
        }
        let _ = seg.series_of_row(row);
        let _ = seg.row_extras(row);
    }
    // Column reads (what queries read through), the whole series and a middle part.
    let mut read: Vec<tidemark_segment::ColumnRead> = (0..seg.columns().len())
        .map(tidemark_segment::ColumnRead::Metric)
        .collect();
    read.push(tidemark_segment::ColumnRead::Rows);
    let mut cursor = tidemark_segment::SeriesCursor::default();
    let mut out = vec![tidemark_segment::ColumnSamples::default(); read.len()];
    for (i, s) in seg.series().iter().enumerate().take(64) {
        let _ = seg.series_by_tsid(&s.tsid);
        let _ = seg.scan_series(&s.tsid, s.min_ts, s.max_ts, |_| {});
        let mid = s.min_ts / 2 + s.max_ts / 2;
        for (from, to) in [(s.min_ts, s.max_ts), (mid, s.max_ts), (i64::MIN, mid)] {
            out.iter_mut()
                .for_each(tidemark_segment::ColumnSamples::clear);
            let _ = seg.read_series_columns(i, from, to, &read, None, &mut cursor, &mut out);
        }
    }
    for c in 0..=seg.columns().len() as u32 + seg.extra_columns().len() as u32 {
        let _ = (seg.column_block_count(c), seg.column_span_rows(c));
        let _ = seg.block_ref(c, 0);
    }
    if let Ok(Some(bloom)) = seg.bloom() {
        let _ = (bloom.contains(b"x"), bloom.fill_ratio(), bloom.verify());
    }
    let _ = seg.bloom_filter();
    let _ = seg.id_index();
    if rows > FULL_READ_ROWS {
        return;
    }
    let _ = seg.scan_rows(0..rows, |_| {});
    if let (Some(lo), Some(hi)) = (seg.min_timestamp(), seg.max_timestamp()) {
        let _ = seg.scan_time_range(lo, hi, |_| {});
    }
    let mut cursor = seg.cursor(None);
    while let Ok(true) = cursor.advance() {
        let _ = (cursor.row(), cursor.ts_millis(), cursor.metrics().len());
    }
    if seg.verify().is_err() || seg.is_events() {
        return;
    }
    // A verified segment: the column reads equal the row scan, series by series.
    let mut cursor = tidemark_segment::SeriesCursor::default();
    for (i, s) in seg.series().iter().enumerate() {
        let mut out = vec![tidemark_segment::ColumnSamples::default(); read.len()];
        let mut want = vec![tidemark_segment::ColumnSamples::default(); read.len()];
        if seg
            .read_series_columns(i, i64::MIN, i64::MAX, &read, None, &mut cursor, &mut out)
            .is_err()
        {
            panic!("a column read of a verified segment failed");
        }
        let scanned = seg.scan_series(&s.tsid, i64::MIN, i64::MAX, |rv| {
            for (c, v) in want.iter_mut().zip(rv.metrics) {
                match v {
                    Some(tidemark_segment::MetricValue::Gauge(f)) => c.push(rv.ts_millis, *f),
                    Some(tidemark_segment::MetricValue::Counter(n)) => {
                        c.push(rv.ts_millis, *n as f64);
                    }
                    None => {}
                }
            }
            if let Some(rows) = want.last_mut() {
                rows.push(rv.ts_millis, 0.0);
            }
        });
        if scanned.is_ok() {
            let same = out.iter().zip(&want).all(|(a, b)| {
                a.ts == b.ts
                    && a.values.len() == b.values.len()
                    && a.values
                        .iter()
                        .zip(&b.values)
                        .all(|(x, y)| x.to_bits() == y.to_bits())
            });
            assert!(
                same,
                "the column read of series {i} differs from its row scan"
            );
        }
    }
    let Ok(points) = seg.points(0..rows, |_| true) else {
        return;
    };
    let Some((first, again)) = rewrite(&points) else {
        return;
    };
    let Some((second, _)) = rewrite(&again) else {
        panic!("the points read from a written segment are refused by the writer");
    };
    assert_eq!(first, second, "segment write → read → write is not stable");
}

/// Writes `points` as a segment (`None` when the writer refuses them) and reads it back:
/// the bytes and the points read.
fn rewrite(points: &[Point]) -> Option<(Vec<u8>, Vec<Point>)> {
    let options = SegmentOptions::new().with_bloom(0.01).with_id_index(true);
    let mut w = SegmentWriter::new(options).ok()?;
    for p in points {
        let mut p = p.clone();
        let extras = std::mem::take(&mut p.extras);
        w.push_with_extras(p, extras).ok()?;
    }
    let (bytes, _) = w.to_vec().ok()?;
    let seg = match Segment::from_vec(bytes.clone()) {
        Ok(seg) => seg,
        Err(e) => panic!("the segment writer wrote a segment the reader refuses: {e}"),
    };
    if let Err(e) = seg.verify() {
        panic!("the segment writer wrote a segment that does not verify: {e}");
    }
    match seg.points(0..seg.row_count(), |_| true) {
        Ok(back) => Some((bytes, back)),
        Err(e) => panic!("a written segment's rows do not read: {e}"),
    }
}

/// A tombstone file ([`Tombstones::from_bytes`]); one that decodes encodes back to
/// bytes that decode to the same dead rows.
pub fn tombstones(data: &[u8]) {
    with_repaired(
        data,
        |b| checksums::trailer(b, 4),
        |bytes| {
            let Ok(t) = Tombstones::from_bytes(bytes) else {
                return;
            };
            let _ = (t.generation(), t.len(), t.is_deleted(0));
            let Ok(again) = t.to_bytes() else { return };
            match Tombstones::from_bytes(&again) {
                Ok(back) => assert_eq!(back.dead(), t.dead(), "tombstone round trip"),
                Err(e) => panic!("encoded tombstones do not decode: {e}"),
            }
        },
    );
}

/// The files of a real engine or partitioned store, to rebuild a directory around the
/// one file a target fuzzes.
#[derive(Debug, Default)]
pub(crate) struct Template {
    files: Vec<(PathBuf, Vec<u8>)>,
}

impl Template {
    /// Every file under `root`, by path relative to it.
    pub(crate) fn of_dir(root: &Path) -> Template {
        let mut files = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if let (Ok(rel), Ok(bytes)) = (path.strip_prefix(root), std::fs::read(&path))
                {
                    files.push((rel.to_path_buf(), bytes));
                }
            }
        }
        files.sort();
        Template { files }
    }

    /// The bytes of the file whose name starts with `prefix`.
    pub(crate) fn file(&self, prefix: &str) -> Option<&[u8]> {
        self.files
            .iter()
            .find(|(p, _)| p.to_str().is_some_and(|s| s.starts_with(prefix)))
            .map(|(_, b)| b.as_slice())
    }

    /// Writes the template into `dir`, the file whose name starts with `prefix` replaced
    /// by `bytes`.
    fn restore(&self, dir: &Path, prefix: &str, bytes: &[u8]) -> Option<()> {
        for (rel, content) in &self.files {
            let path = dir.join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).ok()?;
            }
            let replaced = rel.to_str().is_some_and(|s| s.starts_with(prefix));
            std::fs::write(&path, if replaced { bytes } else { content }).ok()?;
        }
        Some(())
    }
}

/// An engine directory with a segment (from a refresh) and a write-ahead log holding
/// records of every kind: creates, indexes, deletes, and series, column and by-ref
/// appends.
pub(crate) fn engine_template() -> &'static Template {
    static CELL: OnceLock<Template> = OnceLock::new();
    CELL.get_or_init(|| crate::seeds::engine_dir().unwrap_or_default())
}

/// A partitioned store: hourly partitions with 5-minute rollups, one sealed.
pub(crate) fn partitions_template() -> &'static Template {
    static CELL: OnceLock<Template> = OnceLock::new();
    CELL.get_or_init(|| crate::seeds::partitioned_dir().unwrap_or_default())
}

/// The engine's write-ahead log: the template engine's current log replaced by the
/// input, then [`Engine::open`] (manifest, segment, replay, torn-tail truncation). An
/// engine that opens must open again (the log now truncated) with the same points.
pub fn wal(data: &[u8]) {
    with_repaired(data, checksums::wal, |bytes| {
        open_engine_with(engine_template(), "wal-", bytes);
    });
}

/// The engine's manifest: the template engine's `MANIFEST` replaced by the input, then
/// as [`wal`].
pub fn manifest(data: &[u8]) {
    with_repaired(
        data,
        |b| checksums::trailer(b, 4),
        |bytes| {
            open_engine_with(engine_template(), "MANIFEST", bytes);
        },
    );
}

fn open_engine_with(template: &Template, prefix: &str, bytes: &[u8]) {
    let Some(dir) = scratch::dir() else { return };
    if template.restore(&dir, prefix, bytes).is_none() {
        return;
    }
    let first = match Engine::open(&dir, EngineConfig::default()) {
        Ok(engine) => engine.points().ok(),
        Err(_) => return,
    };
    let second = match Engine::open(&dir, EngineConfig::default()) {
        Ok(engine) => engine.points().ok(),
        Err(e) => panic!("an engine that opened does not open a second time: {e}"),
    };
    assert_eq!(
        first, second,
        "two opens of one engine replay different points"
    );
}

/// The partition manifest (`PARTITIONS`) of the template store replaced by the input,
/// then [`PartitionedEngine::open`]; a store that opens must open again with the same
/// partitions and point count.
pub fn partitions(data: &[u8]) {
    with_repaired(
        data,
        |b| checksums::trailer(b, 4),
        |bytes| {
            let Some(dir) = scratch::dir() else { return };
            if partitions_template()
                .restore(&dir, "PARTITIONS", bytes)
                .is_none()
            {
                return;
            }
            let summary = |e: &PartitionedEngine| {
                (
                    format!("{:?}", e.partitions()),
                    e.live_count(),
                    e.high_water_ms(),
                )
            };
            let first = match PartitionedEngine::open(&dir, EngineConfig::default()) {
                Ok(e) => summary(&e),
                Err(_) => return,
            };
            match PartitionedEngine::open(&dir, EngineConfig::default()) {
                Ok(e) => assert_eq!(summary(&e), first, "two opens of one store differ"),
                Err(e) => panic!("a partitioned store that opened does not open again: {e}"),
            }
        },
    );
}

/// Any bloom filter encoding: every decoder of `tidemark-bloom` (owned filters with
/// their checksum, borrowed views without it), `dump`, and the segment's bloom
/// section. A filter that decodes re-encodes to bytes that decode and re-encode to
/// the same bytes.
pub fn bloom(data: &[u8]) {
    with_repaired(data, |b| checksums::trailer(b, 4), read_bloom);
}

fn read_bloom(bytes: &[u8]) {
    let _ = tidemark_bloom::dump(bytes);
    let probes: [&[u8]; 3] = [b"", b"a", b"tidemark"];
    fn stable<F>(f: &F, to: impl Fn(&F) -> Vec<u8>, from: impl Fn(&[u8]) -> Option<F>) {
        let once = to(f);
        match from(&once) {
            Some(back) => assert_eq!(to(&back), once, "bloom filter re-encoding differs"),
            None => panic!("a re-encoded bloom filter does not decode"),
        }
    }
    if let Ok(f) = BloomFilter::from_bytes(bytes) {
        probes.iter().for_each(|p| _ = f.contains(p));
        stable(&f, BloomFilter::to_bytes, |b| {
            BloomFilter::from_bytes(b).ok()
        });
    }
    if let Ok(f) = BlockedBloomFilter::from_bytes(bytes) {
        probes.iter().for_each(|p| _ = f.contains(p));
        stable(&f, BlockedBloomFilter::to_bytes, |b| {
            BlockedBloomFilter::from_bytes(b).ok()
        });
    }
    if let Ok(f) = SplitBlockBloomFilter::from_bytes(bytes) {
        probes.iter().for_each(|p| _ = f.contains(p));
        stable(&f, SplitBlockBloomFilter::to_bytes, |b| {
            SplitBlockBloomFilter::from_bytes(b).ok()
        });
    }
    if let Ok(f) = ScalableBloomFilter::from_bytes(bytes) {
        probes.iter().for_each(|p| _ = f.contains(p));
        let _ = (f.layers(), f.estimated_fpr(), f.size_bytes());
        stable(&f, ScalableBloomFilter::to_bytes, |b| {
            ScalableBloomFilter::from_bytes(b).ok()
        });
    }
    if let Ok(v) = BloomFilterRef::new_without_checksum(bytes) {
        probes.iter().for_each(|p| _ = v.contains(p));
        let _ = (
            v.fill_ratio(),
            v.estimated_len(),
            v.estimated_fpr(),
            v.verify(),
        );
    }
    if let Ok(v) = BlockedBloomFilterRef::new_without_checksum(bytes) {
        probes.iter().for_each(|p| _ = v.contains(p));
        let _ = (
            v.fill_ratio(),
            v.estimated_len(),
            v.estimated_fpr(),
            v.verify(),
        );
    }
    if let Ok(v) = ScalableBloomFilterRef::new_without_checksum(bytes) {
        probes.iter().for_each(|p| _ = v.contains(p));
        let _ = (v.layers(), v.error_rate(), v.capacity(), v.verify());
    }
    if let Ok(v) = SplitBlockBloomFilterRef::new_without_checksum(bytes) {
        probes.iter().for_each(|p| _ = v.contains(p));
        let _ = (v.verify(), v.to_owned());
    }
    if let Ok(f) = SegmentBloom::from_bytes(bytes) {
        let back = SegmentBloom::from_bytes(&f.to_bytes());
        assert!(back.is_ok(), "a segment bloom filter's bytes do not decode");
    }
    if let Ok(v) = SegmentBloomRef::new(bytes, false) {
        probes.iter().for_each(|p| _ = v.contains(p));
        let _ = (v.fill_ratio(), v.estimated_fpr(), v.verify());
    }
    // A Parquet bitset: any length is allowed in, only multiples of 32 bytes come out.
    let _ = SplitBlockBloomFilter::from_bitset_bytes(bytes, Hash64::PARQUET);
}

/// A bloomd snapshot ([`persist::decode_snapshot`]); one that decodes is written again
/// ([`persist::write_snapshot`]) and must decode to the same keys, expiries and values.
pub fn bloomd_snapshot(data: &[u8]) {
    with_repaired(
        data,
        |b| checksums::trailer(b, 8),
        |bytes| {
            let Ok(loaded) = persist::decode_snapshot(bytes) else {
                return;
            };
            let Some(dir) = scratch::dir() else { return };
            let image = persist::Image {
                entries: loaded
                    .entries
                    .iter()
                    .map(|(key, expire_ms, value)| {
                        let (kind, bytes) = match value {
                            tidemark_bloomd::store::Value::Bloom(f) => (1, f.to_bytes()),
                            tidemark_bloomd::store::Value::Str(s) => (2, s.clone()),
                            tidemark_bloomd::store::Value::Loading { bytes, .. } => {
                                (2, bytes.clone())
                            }
                        };
                        persist::SavedEntry {
                            key: key.clone(),
                            expire_ms: *expire_ms,
                            kind,
                            bytes,
                        }
                    })
                    .collect(),
                aof_id: loaded.aof_id,
                aof_offset: loaded.aof_offset,
            };
            let path = dir.join("dump.tmbd");
            if persist::write_snapshot(&image, &path).is_err() {
                return;
            }
            let again = std::fs::read(&path).unwrap_or_default();
            match persist::decode_snapshot(&again) {
                Ok(back) => {
                    let key = |s: &persist::LoadedSnapshot| {
                        let entries: Vec<_> = s
                            .entries
                            .iter()
                            .map(|(k, e, v)| (k.clone(), *e, value_bytes(v)))
                            .collect();
                        (entries, s.aof_id, s.aof_offset)
                    };
                    assert_eq!(key(&back), key(&loaded), "snapshot round trip");
                }
                Err(e) => panic!("a written snapshot does not decode: {e}"),
            }
        },
    );
}

fn value_bytes(v: &tidemark_bloomd::store::Value) -> Vec<u8> {
    match v {
        tidemark_bloomd::store::Value::Bloom(f) => f.to_bytes(),
        tidemark_bloomd::store::Value::Str(s) => s.clone(),
        tidemark_bloomd::store::Value::Loading { bytes, .. } => bytes.clone(),
    }
}

/// A bloomd append-only log read from a file ([`persist::read_aof`]) from its start and
/// from an offset; the commands read are written to a new log
/// ([`persist::Aof::append`]) that must read back to the same commands.
pub fn bloomd_aof(data: &[u8]) {
    with_repaired(data, checksums::aof, |bytes| {
        let Some(dir) = scratch::dir() else { return };
        let path = dir.join("appendonly.tmbd");
        if std::fs::write(&path, bytes).is_err() {
            return;
        }
        let id = bytes
            .get(8..16)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map_or(0, u64::from_le_bytes);
        let _ = persist::read_aof(&path, id, bytes.len() as u64 / 2);
        let Ok(Some(replay)) = persist::read_aof(&path, id.wrapping_add(1), 0) else {
            return;
        };
        assert!(replay.valid_len + replay.dropped == bytes.len() as u64);
        let copy = dir.join("copy.tmbd");
        let Ok(aof) = persist::Aof::open(&copy, tidemark_bloomd::AppendFsync::No, None) else {
            return;
        };
        for c in &replay.commands {
            let args: Vec<&[u8]> = c.iter().map(Vec::as_slice).collect();
            aof.append(&args);
        }
        if aof.flush().is_err() {
            return;
        }
        drop(aof);
        match persist::read_aof(&copy, u64::MAX, 0) {
            Ok(Some(back)) => assert_eq!(back.commands, replay.commands, "AOF round trip"),
            other => panic!("a written append-only log does not read back: {other:?}"),
        }
    });
}

#[cfg(test)]
mod tests {
    use tidemark_segment::Segment;

    /// A segment with an id index, its FST section mutated byte by byte and every CRC
    /// recomputed: opening, looking every id up and verifying never panic, and a forged
    /// FST that `fst` cannot walk is reported as a corrupt id index.
    #[test]
    fn forged_id_indexes_are_errors_not_panics() {
        let seed = crate::seeds("segment")
            .into_iter()
            .find(|s| {
                Segment::from_vec(s.clone())
                    .is_ok_and(|seg| seg.id_index().is_ok_and(|m| m.is_some()))
            })
            .expect("a segment seed with an id index");
        let seg = Segment::from_vec(seed.clone()).unwrap();
        let ids: Vec<_> = (0..seg.row_count())
            .map(|r| {
                let p = seg.row(r).unwrap();
                tidemark_tsid::SyntheticId::new(p.tsid, p.ts_millis)
            })
            .collect();
        // The id-index section (number 4) from the footer's section table.
        let footer = seed.len() - tidemark_segment::FOOTER_LEN;
        let at = footer + 48 + 4 * 20;
        let word = |i: usize| u64::from_le_bytes(seed[i..i + 8].try_into().unwrap()) as usize;
        let (start, len) = (word(at), word(at + 8));
        assert!(len > 0);
        let (mut opened, mut guarded) = (0, 0);
        for i in start..start + len {
            for x in [0x01u8, 0x80, 0xff] {
                let mut forged = seed.clone();
                forged[i] ^= x;
                let forged = crate::checksums::segment(&forged).unwrap_or(forged);
                let Ok(seg) = Segment::from_vec(forged) else {
                    continue;
                };
                opened += 1;
                for id in &ids {
                    if let Err(e) = seg.lookup_id(id) {
                        assert!(e.to_string().contains("id index"), "{e}");
                        guarded += 1;
                    }
                }
                let _ = seg.verify();
            }
        }
        eprintln!("{opened} forged segments opened, {guarded} lookups refused");
        assert!(
            opened > 0 && guarded > 0,
            "{opened} opened, {guarded} refused"
        );
    }
}
