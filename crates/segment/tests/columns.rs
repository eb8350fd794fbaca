//! Column reads (`Segment::read_series_columns`) equal the rows a row scan gives, for
//! any range, with small blocks shared by series, sparse columns, irregular and regular
//! timestamps, deleted rows, and one cursor kept across series read in any order.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use tidemark_segment::{
    ColumnRead, ColumnSamples, MetricValue, Point, Segment, SegmentOptions, SegmentWriter,
    SeriesCursor, Tombstones,
};
use tidemark_tsid::Tsid;

fn tsid(s: u8) -> Tsid {
    Tsid::from_bytes([s; 20])
}

fn f(v: &MetricValue) -> f64 {
    match *v {
        MetricValue::Gauge(x) => x,
        MetricValue::Counter(i) => i as f64,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn column_reads_equal_the_row_scan(
        series in proptest::collection::vec((1u64..400, 1i64..50, any::<bool>()), 1..6),
        block_rows in 1u32..64,
        ranges in proptest::collection::vec((-100i64..20_000, 0i64..20_000), 1..12),
        deleted in proptest::collection::vec(0u64..2_000, 0..40),
    ) {
        let mut w = SegmentWriter::new(SegmentOptions::new().with_block_rows(block_rows)).unwrap();
        for (k, &(n, step, jitter)) in series.iter().enumerate() {
            let mut ts = 0i64;
            for i in 0..n {
                // Regular or with holes; the counter on every row, the gauge on some.
                ts += if jitter && i % 7 == 3 { step * 5 } else { step };
                let mut p = Point::new(tsid(k as u8 + 1), ts).counter("c", (i * 3) as i64);
                if i % 3 != 1 {
                    p = p.gauge("g", i as f64 / 4.0);
                }
                w.push(p).unwrap();
            }
        }
        let seg = Segment::from_vec(w.to_vec().unwrap().0).unwrap();
        let mut tomb = Tombstones::new(seg.row_count());
        for r in deleted {
            if r < seg.row_count() {
                tomb.delete(r).unwrap();
            }
        }
        let mut cols: Vec<ColumnRead> = ["c", "g", "none"]
            .iter()
            .map(|n| {
                seg.columns()
                    .iter()
                    .position(|c| c.name == *n)
                    .map_or(ColumnRead::Absent, ColumnRead::Metric)
            })
            .collect();
        cols.push(ColumnRead::Rows);
        // Ranges starting and ending exactly on stored timestamps too (block edges).
        let mut stamps = Vec::new();
        seg.scan_rows(0..seg.row_count(), |rv| stamps.push(rv.ts_millis)).unwrap();
        let mut all = ranges.clone();
        for (k, &(a, len)) in ranges.iter().enumerate() {
            let at = stamps[(a.unsigned_abs() as usize * 7 + k) % stamps.len()];
            let to = stamps[(len as usize * 13 + k) % stamps.len()];
            all.push((at + (k as i64 % 3) - 1, len));
            all.push((at, (to - at).max(0)));
        }
        let mut cursor = SeriesCursor::default();
        for &(from, len) in &all {
            let to = from + len;
            // Series in reverse order: the cursor must not assume ascending reads.
            for i in (0..seg.series().len()).rev() {
                let mut out = vec![ColumnSamples::default(); 4];
                let rows = seg
                    .read_series_columns(i, from, to, &cols, Some(&tomb), &mut cursor, &mut out)
                    .unwrap();
                let mut want = vec![ColumnSamples::default(); 4];
                let mut want_rows = 0u64;
                let t = seg.series()[i].tsid;
                seg.scan_series(&t, from, to, |rv| {
                    if tomb.is_deleted(rv.row) {
                        return;
                    }
                    want_rows += 1;
                    for (j, c) in cols.iter().enumerate() {
                        match *c {
                            ColumnRead::Metric(c) => {
                                if let Some(Some(v)) = rv.metrics.get(c) {
                                    want[j].push(rv.ts_millis, f(v));
                                }
                            }
                            ColumnRead::Rows => want[j].push(rv.ts_millis, 0.0),
                            ColumnRead::Absent => {}
                        }
                    }
                })
                .unwrap();
                prop_assert_eq!(&out, &want, "series {} in {}..={}", i, from, to);
                prop_assert_eq!(rows, want_rows);
            }
        }
    }
}
