#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The committed fixture, the dump snapshot, and corruption: every damaged file is an
//! `Err` or reads back identical, never a panic.

use std::path::PathBuf;

use proptest::prelude::*;
use tidemark_segment::{
    Dim, Error, Extra, FOOTER_LEN, FORMAT_VERSION, Point, Segment, SegmentOptions, SegmentWriter,
    dump,
};
use tidemark_tsid::{SyntheticId, Tsid};

fn fixture_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/segment/v5-tiny.tms")
}

/// The same input as written by format version 4 (no ALP gauge encodings).
fn v4_fixture_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/segment/v4-tiny.tms")
}

/// The older input as written by format version 3 (no time slot maps).
fn v3_fixture_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/segment/v3-tiny.tms")
}

/// The same input as written by format version 2 (blocks column-major in the file).
fn v2_fixture_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/segment/v2-tiny.tms")
}

/// The same input as written by format version 1 (spans as plain varints).
fn v1_fixture_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/segment/v1-tiny.tms")
}

/// The older fixtures hold the first three series of the input (11 rows); the fourth,
/// with holes in its time range, came with format version 4.
const OLD_SERIES: usize = 3;
const OLD_ROWS: u64 = 11;

#[test]
fn a_version_4_segment_still_reads_identically() {
    let v4 = Segment::open(v4_fixture_path()).unwrap();
    let v5 = Segment::from_vec(tiny_bytes()).unwrap();
    assert_eq!(v4.footer().version, 4);
    assert_eq!(v5.footer().version, 5);
    v4.verify().unwrap();
    assert_eq!(v4.series(), v5.series());
    assert_eq!(
        v4.points(0..v4.row_count(), |_| true).unwrap(),
        v5.points(0..v5.row_count(), |_| true).unwrap()
    );
    for row in 0..v4.row_count() {
        assert_eq!(v4.row_extras(row).unwrap(), v5.row_extras(row).unwrap());
    }
    // Version 5 stores the decimal gauge `temp` (41.5, 42.0, ...) as ALP integers,
    // which version 4 did not have.
    let v4_dump = dump(&std::fs::read(v4_fixture_path()).unwrap()).unwrap();
    let v5_dump = dump(&tiny_bytes()).unwrap();
    assert!(!v4_dump.contains("enc alp"));
    assert!(v5_dump.contains("temp block 0 rows 0+8"));
    assert!(
        v5_dump
            .lines()
            .any(|l| l.contains("temp block") && l.contains("enc alp")),
        "{v5_dump}"
    );
}

#[test]
fn a_version_3_segment_still_reads_identically() {
    let v3 = Segment::open(v3_fixture_path()).unwrap();
    let v4 = Segment::from_vec(tiny_bytes()).unwrap();
    assert_eq!(v3.footer().version, 3);
    v3.verify().unwrap();
    assert_eq!(v3.series(), &v4.series()[..OLD_SERIES]);
    assert!(
        v4.series()
            .iter()
            .all(|s| s.slots.is_some() == (s.tsid == holes_tsid()))
    );
    assert_eq!(
        v3.points(0..v3.row_count(), |_| true).unwrap(),
        v4.points(0..OLD_ROWS, |_| true).unwrap()
    );
    for row in 0..v3.row_count() {
        assert_eq!(v3.row_extras(row).unwrap(), v4.row_extras(row).unwrap());
    }
}

#[test]
fn a_version_2_segment_still_reads_identically() {
    let v2 = Segment::open(v2_fixture_path()).unwrap();
    let v3 = Segment::from_vec(tiny_bytes()).unwrap();
    assert_eq!(v2.footer().version, 2);
    v2.verify().unwrap();
    assert_eq!(v2.series(), &v3.series()[..OLD_SERIES]);
    // The same columns (spans of sparse columns follow the row count).
    let names = |s: &Segment| -> Vec<_> {
        s.columns()
            .iter()
            .map(|c| (c.name.clone(), c.kind))
            .collect()
    };
    assert_eq!(names(&v2), names(&v3));
    assert_eq!(
        v2.points(0..v2.row_count(), |_| true).unwrap(),
        v3.points(0..OLD_ROWS, |_| true).unwrap()
    );
    for row in 0..v2.row_count() {
        assert_eq!(v2.row_extras(row).unwrap(), v3.row_extras(row).unwrap());
    }
    // Version 2 holds a cache-blocked bloom filter, version 3 a split-block one: both
    // answer for every id.
    assert_eq!(v2.bloom().unwrap().unwrap().layout(), "blocked");
    assert_eq!(v3.bloom().unwrap().unwrap().layout(), "split-block");
    for (p, _) in tiny_input()
        .into_iter()
        .filter(|(p, _)| p.tsid != holes_tsid())
    {
        let id = SyntheticId::new(p.tsid, p.ts_millis);
        assert!(v2.may_contain_id(&id).unwrap());
        assert!(v3.may_contain_id(&id).unwrap());
    }
}

#[test]
fn a_version_1_segment_still_reads_identically() {
    let v1 = Segment::open(v1_fixture_path()).unwrap();
    let v2 = Segment::from_vec(tiny_bytes()).unwrap();
    assert_eq!(v1.footer().version, 1);
    assert_eq!(v2.footer().version, FORMAT_VERSION);
    v1.verify().unwrap();
    assert_eq!(v1.series(), &v2.series()[..OLD_SERIES]);
    assert_eq!(
        v1.points(0..v1.row_count(), |_| true).unwrap(),
        v2.points(0..OLD_ROWS, |_| true).unwrap()
    );
}

/// The series of the input whose range has holes (sorted last).
fn holes_tsid() -> Tsid {
    let mut bytes = [0u8; 20];
    bytes[0] = 0x5f;
    bytes[1] = 0x40;
    bytes[19] = 0xa3;
    Tsid::from_bytes(bytes)
}

/// The tiny fixture: 4 series, 16 rows in blocks of 4, a counter, a gauge, a sparse
/// gauge, a very sparse counter (a longer column block) and two extra columns, with
/// bloom and id index; the fourth series has holes in its time range (a time slot map,
/// format version 4); the sparse gauge's decimals are ALP blocks (format version 5).
/// Tsids are fixed bytes, not computed, so that the fixture does not change with
/// `tidemark-tsid`'s hashing.
fn tiny_input() -> Vec<(Point, Vec<(String, Extra)>)> {
    let mut points = Vec::new();
    for (k, (pod, node, n)) in [
        ("web-1", "node-a", 5),
        ("web-2", "node-a", 4),
        ("db-0", "node-b", 2),
    ]
    .into_iter()
    .enumerate()
    {
        let mut bytes = [0u8; 20];
        bytes[0] = 0x5f;
        bytes[1] = 0x10 * (k as u8 + 1);
        bytes[19] = 0xa0 + k as u8;
        let tsid = Tsid::from_bytes(bytes);
        for i in 0..n {
            let mut p = Point::new(tsid, 1_700_000_000_000 + i * 10_000)
                .dim("pod", pod)
                .dim("node", node)
                .dim("restarts_allowed", Dim::Bool(pod != "db-0"))
                .counter("cpu_ns", 1_000_000 * i + 17)
                .gauge("mem_bytes", 2.5e8 + (i * 4096) as f64);
            if i % 2 == 0 {
                p = p.gauge("temp", 41.5 + i as f64 * 0.25);
            }
            // Extra columns: a keyword on every row, a flag on one series.
            let phase = if i == 0 { "Pending" } else { "Running" };
            let mut extras = vec![("phase".to_owned(), Extra::Keyword(phase.to_owned()))];
            if pod == "web-1" {
                extras.push(("ready".to_owned(), Extra::Bool(i % 2 == 1)));
            }
            // A sparse counter: its column spans 4 << 3 = 32 rows per block.
            if pod == "web-2" && i == 3 {
                p = p.counter("oom_kills", 1);
            }
            points.push((p, extras));
        }
    }
    // Rows at 0, 10, 20, 60 and 70 s: slots 3, 4 and 5 are empty.
    for i in [0i64, 1, 2, 6, 7] {
        let p = Point::new(holes_tsid(), 1_700_000_000_000 + i * 10_000)
            .dim("pod", "batch-7")
            .dim("node", "node-b")
            .dim("restarts_allowed", Dim::Bool(false))
            .counter("cpu_ns", 5_000 * i)
            .gauge("mem_bytes", 1e8);
        points.push((
            p,
            vec![("phase".to_owned(), Extra::Keyword("Running".to_owned()))],
        ));
    }
    points.reverse();
    points
}

fn tiny_bytes() -> Vec<u8> {
    let mut w = SegmentWriter::new(
        SegmentOptions::new()
            .with_block_rows(4)
            .with_bloom(0.01)
            .with_id_index(true),
    )
    .unwrap();
    for (p, extras) in tiny_input() {
        w.push_with_extras(p, extras).unwrap();
    }
    w.to_vec().unwrap().0
}

#[test]
fn committed_fixture_matches_the_writer_and_opens() {
    let fresh = tiny_bytes();
    let path = fixture_path();
    if std::env::var_os("TIDEMARK_UPDATE_FIXTURES").is_some() {
        std::fs::write(&path, &fresh).unwrap();
    }
    let committed = std::fs::read(&path).unwrap();
    assert_eq!(
        committed, fresh,
        "the writer's output changed: bump FORMAT_VERSION or rerun with TIDEMARK_UPDATE_FIXTURES=1"
    );
    let seg = Segment::open(&path).unwrap();
    seg.verify().unwrap();
    assert_eq!(seg.row_count(), 16);
    assert_eq!(seg.series_count(), 4);
    let holes = seg.series_by_tsid(&holes_tsid()).unwrap();
    let slots = holes.slots.as_ref().unwrap();
    assert_eq!(
        (slots.quantum(), slots.slots(), slots.occupied()),
        (10_000, 8, 5)
    );
    for i in 0..8 {
        let ts = 1_700_000_000_000 + i * 10_000;
        assert_eq!(holes.may_hold(ts), ![3, 4, 5].contains(&i), "{i}");
    }
    for (p, mut extras) in tiny_input() {
        let row = seg.find(&p.tsid, p.ts_millis).unwrap().unwrap();
        extras.sort_by(|a, b| a.0.cmp(&b.0));
        let mut with_extras = p.clone();
        with_extras.extras = extras.clone();
        assert_eq!(seg.row(row).unwrap(), with_extras.normalized());
        assert_eq!(seg.row_extras(row).unwrap(), extras);
        assert_eq!(
            seg.lookup_id(&SyntheticId::new(p.tsid, p.ts_millis))
                .unwrap(),
            Some(row)
        );
    }
}

#[test]
fn dump_of_the_fixture() {
    let bytes = std::fs::read(fixture_path()).unwrap();
    insta::assert_snapshot!(dump(&bytes).unwrap());
}

type Row = (Point, Vec<(String, Extra)>);

fn read_all(bytes: Vec<u8>) -> tidemark_segment::Result<Vec<Row>> {
    let seg = Segment::from_vec(bytes)?;
    let mut out = Vec::new();
    for row in 0..seg.row_count() {
        out.push((seg.row(row)?, seg.row_extras(row)?));
    }
    // The id paths must not panic either.
    for (p, _) in &out {
        let id = SyntheticId::new(p.tsid, p.ts_millis);
        seg.may_contain_id(&id)?;
        seg.lookup_id(&id)?;
        seg.find(&p.tsid, p.ts_millis)?;
    }
    seg.find(&Tsid::from_bytes([0xab; 20]), 5)?;
    let mut n = 0u64;
    seg.scan_time_range(i64::MIN, i64::MAX, |_| n += 1)?;
    seg.verify()?;
    Ok(out)
}

/// Damaged bytes must give an error somewhere or the very same points.
fn check_damaged(bytes: Vec<u8>, expected: &[Row]) {
    let dumped = dump(&bytes);
    if let Ok(points) = read_all(bytes) {
        assert_eq!(points, expected);
        assert!(dumped.is_ok());
    }
}

#[test]
fn rejects_every_truncation_and_every_flipped_byte() {
    let bytes = tiny_bytes();
    let expected = read_all(bytes.clone()).unwrap();
    for len in 0..bytes.len() {
        let cut = bytes[..len].to_vec();
        assert!(Segment::from_vec(cut).is_err(), "truncated to {len}");
    }
    for at in 0..bytes.len() {
        for mask in [0x01u8, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[at] ^= mask;
            check_damaged(b, &expected);
        }
    }
}

#[test]
fn names_the_block_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("damaged.tms");
    let mut bytes = tiny_bytes();
    let seg = Segment::from_vec(bytes.clone()).unwrap();
    let e = seg.block_ref(2, 1).unwrap();
    bytes[e.offset as usize + 1] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    let seg = Segment::open(&path).unwrap();
    // Errors of a segment opened from a path name the file by themselves.
    let err = seg.row(5).unwrap_err().to_string();
    assert!(err.contains("damaged.tms"), "{err}");
    assert!(err.contains("block 1 of metric column 1"), "{err}");
    assert!(err.contains("checksum mismatch"), "{err}");
}

#[test]
fn rejects_foreign_files_and_unknown_versions() {
    let mut bytes = tiny_bytes();
    let n = bytes.len();
    assert!(matches!(
        Segment::from_vec(vec![0u8; 400]),
        Err(Error::BadMagic { .. })
    ));
    // A version from the future with a valid footer CRC: a clear unsupported-version
    // error.
    let next = FORMAT_VERSION + 1;
    bytes[n - FOOTER_LEN + 152..n - FOOTER_LEN + 156].copy_from_slice(&next.to_le_bytes());
    let crc = crc32(&bytes[n - FOOTER_LEN..n - 8]);
    bytes[n - 8..n - 4].copy_from_slice(&crc.to_le_bytes());
    let err = Segment::from_vec(bytes).unwrap_err();
    assert!(
        matches!(err, Error::UnsupportedVersion { found, .. } if found == next),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains(&format!("unsupported format version {next}"))
    );
}

fn crc32(b: &[u8]) -> u32 {
    // The same IEEE CRC32 as crc32fast, bit by bit, so the test has no extra dependency.
    let mut crc = !0u32;
    for &byte in b {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_damage_is_an_error_or_identical(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..6),
        cut in proptest::option::of(any::<prop::sample::Index>()),
    ) {
        let mut bytes = tiny_bytes();
        let expected = read_all(bytes.clone()).unwrap();
        for (at, mask) in flips {
            let i = at.index(bytes.len());
            bytes[i] ^= mask;
        }
        if let Some(cut) = cut {
            bytes.truncate(cut.index(bytes.len()));
        }
        check_damaged(bytes, &expected);
    }
}

#[test]
fn tombstones_reject_every_truncation_and_flipped_byte() {
    let mut t = tidemark_segment::Tombstones::new(10_000);
    for row in (0..10_000).step_by(7) {
        t.delete(row).unwrap();
    }
    let t = t.next_generation().next_generation();
    let bytes = t.to_bytes().unwrap();
    assert_eq!(tidemark_segment::Tombstones::from_bytes(&bytes).unwrap(), t);
    for len in 0..bytes.len() {
        assert!(tidemark_segment::Tombstones::from_bytes(&bytes[..len]).is_err());
    }
    for at in 0..bytes.len() {
        let mut b = bytes.clone();
        b[at] ^= 0x41;
        if let Ok(back) = tidemark_segment::Tombstones::from_bytes(&b) {
            assert_eq!(back, t);
        }
    }
}

#[test]
fn series_range_bytes_follow_the_format_version() {
    // At least a byte per column per series, in either version.
    let v1 = Segment::open(v1_fixture_path()).unwrap();
    let v2 = Segment::from_vec(tiny_bytes()).unwrap();
    assert!(v1.series_range_bytes() >= 2 * v1.series_count());
    assert!(v2.series_range_bytes() >= 2 * v2.series_count());
    // Regular series of one span: one byte per span after the first.
    let mut w = SegmentWriter::new(SegmentOptions::new()).unwrap();
    for s in 0..100u8 {
        for t in 0..60i64 {
            w.push(Point::new(
                Tsid::from_bytes([s; 20]),
                1_700_000_000_000 + t * 60_000,
            ))
            .unwrap();
        }
    }
    let seg = Segment::from_vec(w.to_vec().unwrap().0).unwrap();
    // min_ts: 6 bytes for the first, then 1; spans: 4 bytes for the first, then 1; no
    // time slot map (one byte: their count).
    assert_eq!(seg.series_range_bytes(), 6 + 99 + 4 + 99 + 1);
}
