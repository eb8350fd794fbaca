#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A segment opened with the series table its writer handed back equals the same file
//! decoded; level 0 ("stored", no zstd) writes files that read back the same points.

use tidemark_segment::{
    Point, Segment, SegmentOptions, SegmentWriter, write_batch, write_batch_with_series,
};
use tidemark_tsid::Tsid;

fn tsid(i: u8) -> Tsid {
    let mut b = [0u8; 20];
    b[0] = i;
    b[19] = i.wrapping_mul(31);
    Tsid::from_bytes(b)
}

/// Series with regular and holed ranges (slot maps), full and partial metrics, and two
/// dimension layouts.
fn batch() -> SegmentWriter {
    let mut w = SegmentWriter::new(SegmentOptions::new()).unwrap();
    for s in 0..40u8 {
        for k in 0..60i64 {
            // Every fifth series misses a stretch of its slots: its range has a hole.
            if s % 5 == 0 && (20..40).contains(&k) {
                continue;
            }
            let ts = 1_700_000_000_000 + k * 10_000;
            let mut p = Point::new(tsid(s), ts)
                .dim("host", format!("h{s}"))
                .gauge("cpu", (k as f64) * 0.5 + f64::from(s));
            if s % 2 == 0 {
                p = p.dim("zone", "eu");
            }
            if k % 3 == 0 {
                p = p.counter("bytes", k * 1_000);
            }
            w.push(p).unwrap();
        }
    }
    w
}

#[test]
fn the_writers_series_table_equals_the_decoded_one() {
    let dir = tempfile::tempdir().unwrap();
    let w = batch();
    for level in [3, -1, 0] {
        let path = dir.path().join(format!("l{level}.tms"));
        let file = std::fs::File::create(&path).unwrap();
        let options = SegmentOptions::new().with_zstd_level(level);
        let (_, meta, written) = write_batch_with_series(&w, options, None, file).unwrap();
        assert_eq!(written.len() as u64, meta.series_count);
        let fast = Segment::open_written(&path, written).unwrap();
        let decoded = Segment::open(&path).unwrap();
        decoded.verify().unwrap();
        assert_eq!(fast.series(), decoded.series(), "level {level}");
        assert!(
            decoded.series().iter().any(|s| s.slots.is_some()),
            "the batch has holed series"
        );
        assert_eq!(
            fast.points(0..fast.row_count(), |_| true).unwrap(),
            decoded.points(0..decoded.row_count(), |_| true).unwrap()
        );
    }
}

#[test]
fn stored_blocks_read_back_the_same_points_in_more_bytes() {
    let w = batch();
    let mut read = Vec::new();
    let mut sizes = Vec::new();
    for level in [3, 0] {
        let options = SegmentOptions::new().with_zstd_level(level);
        let (bytes, _) = write_batch(&w, options, None, Vec::new()).unwrap();
        sizes.push(bytes.len());
        let seg = Segment::from_vec(bytes).unwrap();
        seg.verify().unwrap();
        read.push(seg.points(0..seg.row_count(), |_| true).unwrap());
    }
    assert_eq!(read[0], read[1]);
    assert!(
        sizes[1] > sizes[0],
        "stored {} vs zstd {}",
        sizes[1],
        sizes[0]
    );
}

#[test]
fn a_series_table_from_another_batch_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.tms");
    let (_, _, written) = write_batch_with_series(
        &batch(),
        SegmentOptions::new(),
        None,
        std::fs::File::create(&path).unwrap(),
    )
    .unwrap();
    let mut small = SegmentWriter::new(SegmentOptions::new()).unwrap();
    small
        .push(Point::new(tsid(1), 5).dim("host", "a").gauge("cpu", 1.0))
        .unwrap();
    let other = dir.path().join("b.tms");
    write_batch(
        &small,
        SegmentOptions::new(),
        None,
        std::fs::File::create(&other).unwrap(),
    )
    .unwrap();
    let err = Segment::open_written(&other, written).unwrap_err();
    assert!(err.to_string().contains("series written"), "{err}");
}
