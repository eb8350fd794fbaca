#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `SegmentStreamWriter::push_rows` (a series' rows at once, as columns) writes the same
//! bytes as `push_row` row by row, across block boundaries and span shifts, with and
//! without the id sections; and refuses what `push_row` refuses.

use tidemark_segment::{
    ColumnInfo, Error, MetricKind, MetricValue, Presence, Segment, SegmentOptions,
    SegmentStreamWriter, StreamSchema,
};
use tidemark_tsid::Tsid;

fn tsid(i: u32) -> Tsid {
    let mut b = [0u8; 20];
    b[..4].copy_from_slice(&i.to_be_bytes());
    b[19] = (i as u8).wrapping_mul(37);
    Tsid::from_bytes(b)
}

fn schema() -> StreamSchema {
    StreamSchema {
        columns: vec![
            ColumnInfo {
                name: "bytes".into(),
                kind: MetricKind::Counter,
                span_shift: 1,
            },
            ColumnInfo {
                name: "cpu".into(),
                kind: MetricKind::Gauge,
                span_shift: 0,
            },
        ],
        extras: vec![],
    }
}

/// One series' rows: timestamps and both columns' values.
struct Run {
    tsid: Tsid,
    ts: Vec<i64>,
    bytes: Vec<MetricValue>,
    cpu: Vec<MetricValue>,
}

/// Series of 1 to 300 rows (so that runs start and end anywhere in a 64-row block), some
/// with an irregular cadence.
fn runs() -> Vec<Run> {
    (0..30u32)
        .map(|s| {
            let n = 1 + (s as usize * 97) % 300;
            let ts: Vec<i64> = (0..n as i64)
                .map(|k| 1_700_000_000_000 + k * 10_000 + if s % 4 == 0 { k * k } else { 0 })
                .collect();
            Run {
                tsid: tsid(s),
                bytes: (0..n as i64)
                    .map(|k| MetricValue::Counter(k * 4_096 + i64::from(s)))
                    .collect(),
                cpu: (0..n)
                    .map(|k| MetricValue::Gauge((k as f64 * 0.37 + f64::from(s)).sin()))
                    .collect(),
                ts,
            }
        })
        .collect()
}

fn writer(options: SegmentOptions, rows: u64) -> SegmentStreamWriter<Vec<u8>> {
    SegmentStreamWriter::new(Vec::new(), options, schema(), rows).unwrap()
}

const FULL: [(u32, Presence); 2] = [(0, Presence::Full), (1, Presence::Full)];

fn by_rows(options: SegmentOptions, runs: &[Run]) -> Vec<u8> {
    let rows = runs.iter().map(|r| r.ts.len() as u64).sum();
    let mut w = writer(options, rows);
    for r in runs {
        w.begin_series(r.tsid, vec![("host".into(), "h".into())], &FULL)
            .unwrap();
        for k in 0..r.ts.len() {
            w.push_row(r.ts[k], &[(0, r.bytes[k]), (1, r.cpu[k])], &[], None)
                .unwrap();
        }
    }
    w.finish().unwrap().0
}

/// The same rows through `push_rows`, each run cut into pieces of `piece` rows.
fn by_runs(options: SegmentOptions, runs: &[Run], piece: usize) -> Vec<u8> {
    let rows = runs.iter().map(|r| r.ts.len() as u64).sum();
    let mut w = writer(options, rows);
    for r in runs {
        w.begin_series(r.tsid, vec![("host".into(), "h".into())], &FULL)
            .unwrap();
        let mut at = 0;
        while at < r.ts.len() {
            let end = (at + piece).min(r.ts.len());
            let cols: [(u32, &[MetricValue]); 2] = [(0, &r.bytes[at..end]), (1, &r.cpu[at..end])];
            w.push_rows(&r.ts[at..end], &cols).unwrap();
            at = end;
        }
    }
    w.finish().unwrap().0
}

#[test]
fn push_rows_writes_the_bytes_push_row_writes() {
    let runs = runs();
    let options = [
        SegmentOptions::new().with_block_rows(64),
        SegmentOptions::new()
            .with_block_rows(64)
            .with_bloom(0.01)
            .with_id_index(true),
        SegmentOptions::new()
            .with_block_rows(50)
            .with_zstd_level(0)
            .with_fast_encoding(true),
    ];
    for o in options {
        let expected = by_rows(o.clone(), &runs);
        for piece in [1, 7, 64, 1_000] {
            assert!(
                by_runs(o.clone(), &runs, piece) == expected,
                "piece {piece}, {o:?}"
            );
        }
        let seg = Segment::from_vec(expected).unwrap();
        let r = &runs[5];
        let last = *r.ts.last().unwrap();
        assert!(seg.find(&r.tsid, last).unwrap().is_some(), "{o:?}");
    }
}

#[test]
fn push_rows_refuses_what_push_row_refuses() {
    let dims = || vec![("host".to_owned(), tidemark_segment::Dim::from("h"))];
    let g = |v: f64| MetricValue::Gauge(v);
    let c = |v: i64| MetricValue::Counter(v);
    let new = || {
        let mut w = writer(SegmentOptions::new(), 10);
        w.begin_series(tsid(1), dims(), &FULL).unwrap();
        w
    };
    let ok = |w: &mut SegmentStreamWriter<Vec<u8>>, ts: &[i64]| {
        let n = ts.len();
        let bytes: Vec<_> = (0..n as i64).map(c).collect();
        let cpu: Vec<_> = (0..n).map(|k| g(k as f64)).collect();
        w.push_rows(ts, &[(0, &bytes[..]), (1, &cpu[..])])
    };
    // Timestamps out of order, repeated, or not after the previous push.
    assert!(matches!(
        ok(&mut new(), &[2, 1]),
        Err(Error::OutOfOrder { .. })
    ));
    assert!(matches!(
        ok(&mut new(), &[1, 1]),
        Err(Error::DuplicatePoint { .. })
    ));
    let mut w = new();
    ok(&mut w, &[1, 2]).unwrap();
    assert!(matches!(
        ok(&mut w, &[2, 3]),
        Err(Error::DuplicatePoint { .. })
    ));
    assert!(matches!(ok(&mut w, &[0]), Err(Error::OutOfOrder { .. })));
    ok(&mut w, &[3, 4]).unwrap();
    // A value of the wrong kind, a column of the wrong length, columns out of order.
    let err = new()
        .push_rows(&[1], &[(0, &[c(1)][..]), (1, &[c(1)][..])])
        .unwrap_err();
    assert!(matches!(err, Error::MetricKindConflict { .. }), "{err:?}");
    let err = new()
        .push_rows(&[1, 2], &[(0, &[c(1)][..]), (1, &[g(1.0), g(2.0)][..])])
        .unwrap_err();
    assert!(err.to_string().contains("values for 2 rows"), "{err}");
    let err = new()
        .push_rows(&[1], &[(1, &[g(1.0)][..]), (0, &[c(1)][..])])
        .unwrap_err();
    assert!(err.to_string().contains("ascending"), "{err}");
    // A column declared full left out; a column the series does not declare.
    let err = new().push_rows(&[1], &[(1, &[g(1.0)][..])]).unwrap_err();
    assert!(err.to_string().contains("declared full"), "{err}");
    let mut w = writer(SegmentOptions::new(), 10);
    w.begin_series(tsid(1), dims(), &[(1, Presence::Full)])
        .unwrap();
    let err = w
        .push_rows(&[1], &[(0, &[c(1)][..]), (1, &[g(1.0)][..])])
        .unwrap_err();
    assert!(err.to_string().contains("not declared"), "{err}");
    // No series yet; an event segment.
    let mut w = writer(SegmentOptions::new(), 10);
    assert!(w.push_rows(&[1], &[(0, &[c(1)][..])]).is_err());
    let mut w = writer(SegmentOptions::new().with_events(true), 10);
    w.begin_series(tsid(1), dims(), &FULL).unwrap();
    let err = w
        .push_rows(&[1], &[(0, &[c(1)][..]), (1, &[g(1.0)][..])])
        .unwrap_err();
    assert!(err.to_string().contains("event segment"), "{err}");
}

/// A directory larger than the writer keeps in memory (1 MiB: about 52,000 entries) goes
/// through its spill file and reads back whole: 600,000 rows in 8-row blocks are 75,000
/// timestamp blocks and as many metric blocks per column.
#[test]
fn a_directory_larger_than_memory_spills_and_reads_back() {
    let rows_per_series = 60_000usize;
    let mut w = writer(SegmentOptions::new().with_block_rows(8), 600_000);
    for s in 0..10u32 {
        w.begin_series(tsid(s), vec![("host".into(), "h".into())], &FULL)
            .unwrap();
        let ts: Vec<i64> = (0..rows_per_series as i64).map(|k| k * 1_000).collect();
        let bytes: Vec<_> = (0..rows_per_series as i64)
            .map(|k| MetricValue::Counter(k * 3 + i64::from(s)))
            .collect();
        let cpu: Vec<_> = (0..rows_per_series)
            .map(|k| MetricValue::Gauge(k as f64 / 8.0))
            .collect();
        w.push_rows(&ts, &[(0, &bytes[..]), (1, &cpu[..])]).unwrap();
    }
    let (bytes, meta) = w.finish().unwrap();
    assert_eq!(meta.row_count, 600_000);
    let seg = Segment::from_vec(bytes).unwrap();
    seg.verify().unwrap();
    assert_eq!(seg.column_block_count(0), Some(75_000));
    for s in [0u32, 4, 9] {
        for k in [0i64, 7, 8, 31_337, 59_999] {
            let row = seg.find(&tsid(s), k * 1_000).unwrap().unwrap();
            let p = seg.row(row).unwrap();
            let bytes = p.metrics.iter().find(|(n, _)| n == "bytes").unwrap().1;
            assert_eq!(bytes, MetricValue::Counter(k * 3 + i64::from(s)));
        }
    }
}

/// The live rows of `seg` one by one: (row, series index, timestamp, values).
type Row = (u64, usize, i64, Vec<Option<MetricValue>>);

#[test]
fn cursor_runs_and_skips_visit_the_rows_advance_visits() {
    let runs = runs();
    let seg = Segment::from_vec(by_rows(SegmentOptions::new().with_block_rows(64), &runs)).unwrap();
    // Dead rows: a few lone ones, a whole block, and the first and last rows.
    let mut dead = roaring::RoaringBitmap::new();
    dead.extend([0u32, 5, 6, 63, 64, 200, 1_000]);
    dead.insert_range(128..192);
    dead.insert(seg.row_count() as u32 - 1);
    let mut one_by_one: Vec<Row> = Vec::new();
    let mut c = seg.cursor(Some(&dead));
    assert_eq!(c.run(None).0.len(), 0, "no run before the first advance");
    while c.advance().unwrap() {
        one_by_one.push((
            c.row(),
            c.series_index(),
            c.ts_millis(),
            c.metrics().to_vec(),
        ));
    }
    assert_eq!(c.run(None).0.len(), 0, "no run at the end");
    assert!(!c.skip(3).unwrap());
    for below_every in [None, Some(40_000), Some(7 * 10_000 + 1)] {
        let mut by_runs: Vec<Row> = Vec::new();
        let mut c = seg.cursor(Some(&dead));
        let mut live = c.advance().unwrap();
        let mut longest = 0;
        while live {
            let series = c.series().unwrap();
            // A bound inside the series' time range: the run stops below it.
            let below = below_every.map(|d| series.min_ts + d);
            let (ts, values) = c.run(below);
            assert!(below.is_none_or(|b| ts.iter().all(|&t| t < b)));
            if ts.is_empty() {
                // The current row is at or past the bound: it is taken alone.
                assert!(below.is_some_and(|b| c.ts_millis() >= b));
                by_runs.push((
                    c.row(),
                    c.series_index(),
                    c.ts_millis(),
                    c.metrics().to_vec(),
                ));
                live = c.advance().unwrap();
                continue;
            }
            let width = seg.columns().len();
            assert_eq!(values.len(), ts.len() * width);
            let first = c.row();
            for (k, &t) in ts.iter().enumerate() {
                by_runs.push((
                    first + k as u64,
                    c.series_index(),
                    t,
                    values[k * width..(k + 1) * width].to_vec(),
                ));
            }
            longest = longest.max(ts.len());
            // Past the run in steps of at most 5 rows; without a bound the last step asks
            // for more than the run holds and stops at its end.
            let mut left = ts.len();
            while left > 0 {
                let step = left.min(5);
                let ask = if below.is_none() && step == left {
                    step + 100
                } else {
                    step
                };
                live = c.skip(ask).unwrap();
                left -= step;
                if left > 0 {
                    assert!(live && c.run(None).0.len() >= left);
                }
            }
        }
        assert_eq!(by_runs, one_by_one, "below {below_every:?}");
        if below_every.is_none() {
            assert!(longest > 20, "runs span many rows: {longest}");
        }
    }
}
