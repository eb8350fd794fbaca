#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The storage target on the workspace's generated datasets: data columns at most 0.85×
//! the naive reference (k8s). The OTel figure is asserted at its measured level; the gap
//! is recorded in docs/results/segment.md.

#[path = "support/datagen_points.rs"]
mod datagen_points;

use datagen_points::TsidCache;
use tidemark_datagen::{Dataset, Options};
use tidemark_segment::report::{StorageReport, storage_report};
use tidemark_segment::{Segment, SegmentOptions, SegmentWriter};

fn build(ds: &Dataset, options: SegmentOptions) -> Segment {
    let mut w = SegmentWriter::new(options).unwrap();
    w.extend(datagen_points::unique_points(ds).unwrap())
        .unwrap();
    let (bytes, meta) = w.to_vec().unwrap();
    assert_eq!(meta.row_count, ds.unique_docs());
    Segment::from_vec(bytes).unwrap()
}

fn report(ds: &Dataset) -> StorageReport {
    let seg = build(ds, SegmentOptions::new().with_bloom(0.01));
    let r = storage_report(&seg).unwrap();
    println!("{}", r.to_markdown());
    assert_eq!(r.docs, ds.unique_docs());
    assert!(r.bloom_bytes > 0);
    // Components add up to the file minus the id sections.
    let sizes = seg.size_breakdown();
    assert_eq!(r.data_bytes(), sizes.total - sizes.bloom - sizes.id_index);
    r
}

#[test]
fn k8s_data_columns_beat_the_naive_reference() {
    let ds = Dataset::k8s(Options::default().points(2_000 * 40));
    let r = report(&ds);
    assert_eq!(r.metric_values, r.docs * 8);
    assert!(r.ratio() <= 0.85, "k8s ratio {:.3}", r.ratio());
}

#[test]
fn otel_data_columns_stay_at_their_measured_level() {
    let ds = Dataset::otel(Options::default().points(21_000 * 10));
    let r = report(&ds);
    assert_eq!(r.metric_values, r.docs);
    // The 0.85 target is missed on OTel (0.872 on the full hour, see
    // docs/results/segment.md): noisy full-precision gauges are 63% of the points and
    // leave little to gain. This pins the measured level (0.924 on this 10-interval
    // sample, where the series table weighs more) against regressions.
    assert!(r.ratio() <= 0.935, "otel ratio {:.3}", r.ratio());
    assert!(
        r.row_columns_ratio() <= 0.90,
        "otel row columns {:.3}",
        r.row_columns_ratio()
    );
}

#[test]
fn round_trips_a_generated_dataset_with_late_points() {
    let ds = Dataset::otel(
        Options::default()
            .points(20_000)
            .series(2_000)
            .late_rate(0.2)
            .dup_rate(0.05),
    );
    let seg = build(
        &ds,
        SegmentOptions::new().with_id_index(true).with_bloom(0.001),
    );
    seg.verify().unwrap();
    let mut tsids = TsidCache::new(&ds).unwrap();
    for r in ds.records() {
        let tsid = tsids.tsid(&r).unwrap();
        let row = seg.find(&tsid, r.ts_millis).unwrap().unwrap();
        let mut expected = datagen_points::to_point(&r, tsid).normalized();
        expected.dims.sort();
        let got = seg.row(row).unwrap();
        assert_eq!(got, expected);
    }
    let bloom = seg.bloom().unwrap().unwrap();
    assert!(bloom.fill_ratio() < 0.5);
}
