//! Criterion benchmarks of the segment format on the k8s dataset of `tidemark-datagen`:
//! write throughput, `find` latency for present and absent (tsid, ts) with blocks of 1024
//! and 4096 rows, the id paths (bloom, FST) beside it, scan throughput, column reads
//! (every series as slices), and the cost of reading tombstone bitmaps through the
//! checked reader.
//!
//! `cargo bench -p tidemark-segment`; results in `docs/results/segment.md`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
#[path = "../tests/support/datagen_points.rs"]
mod datagen_points;

use tidemark_datagen::{Dataset, Options};
use tidemark_segment::{
    ColumnRead, ColumnSamples, Point, Segment, SegmentOptions, SegmentWriter, SeriesCursor,
};
use tidemark_tsid::{SyntheticId, Tsid};

fn points(ds: &Dataset) -> Vec<Point> {
    datagen_points::unique_points(ds).unwrap()
}

fn segment(points: &[Point], options: SegmentOptions) -> Segment {
    let mut w = SegmentWriter::new(options).unwrap();
    w.extend(points.iter().cloned()).unwrap();
    Segment::from_vec(w.to_vec().unwrap().0).unwrap()
}

/// Deterministic probe indexes.
fn probes(n: usize, count: usize) -> Vec<usize> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..count)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        })
        .collect()
}

fn bench_write(c: &mut Criterion) {
    let ds = Dataset::k8s(Options::default().points(2_000 * 50));
    let pts = points(&ds);
    let mut g = c.benchmark_group("write");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(8));
    g.throughput(Throughput::Elements(pts.len() as u64));
    for (name, opts) in [
        ("k8s_100k/plain", SegmentOptions::new()),
        ("k8s_100k/bloom", SegmentOptions::new().with_bloom(0.01)),
    ] {
        g.bench_function(name, |b| {
            b.iter_batched(
                || pts.clone(),
                |p| {
                    let mut w = SegmentWriter::new(opts.clone()).unwrap();
                    w.extend(p).unwrap();
                    black_box(w.to_vec().unwrap())
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

fn bench_read(c: &mut Criterion) {
    let ds = Dataset::k8s(Options::default());
    let pts = points(&ds);
    let n = pts.len();
    let idx = probes(n, 4096);
    let mut g = c.benchmark_group("find");
    g.measurement_time(Duration::from_secs(3));
    g.warm_up_time(Duration::from_secs(1));
    for block_rows in [1024u32, 4096] {
        let seg = segment(
            &pts,
            SegmentOptions::new()
                .with_block_rows(block_rows)
                .with_bloom(0.01)
                .with_id_index(block_rows == 1024),
        );
        g.bench_with_input(BenchmarkId::new("present", block_rows), &seg, |b, seg| {
            let mut i = 0usize;
            b.iter(|| {
                let p = &pts[idx[i % idx.len()]];
                i += 1;
                black_box(seg.find(&p.tsid, p.ts_millis).unwrap())
            })
        });
        // Known series, a timestamp between two points: decodes a block, finds nothing.
        g.bench_with_input(
            BenchmarkId::new("absent_in_range", block_rows),
            &seg,
            |b, seg| {
                let mut i = 0usize;
                b.iter(|| {
                    let p = &pts[idx[i % idx.len()]];
                    i += 1;
                    black_box(seg.find(&p.tsid, p.ts_millis + 5_000).unwrap())
                })
            },
        );
        if block_rows == 1024 {
            g.bench_with_input(
                BenchmarkId::new("absent_series", block_rows),
                &seg,
                |b, seg| {
                    let mut i = 0u64;
                    b.iter(|| {
                        i += 1;
                        let mut t = [0u8; 20];
                        t[..8].copy_from_slice(&i.to_le_bytes());
                        black_box(seg.find(&Tsid::from_bytes(t), 1_764_460_800_000).unwrap())
                    })
                },
            );
            g.bench_with_input(
                BenchmarkId::new("bloom_absent", block_rows),
                &seg,
                |b, seg| {
                    let mut i = 0usize;
                    b.iter(|| {
                        let p = &pts[idx[i % idx.len()]];
                        i += 1;
                        black_box(
                            seg.may_contain_id(&SyntheticId::new(p.tsid, p.ts_millis + 5_000))
                                .unwrap(),
                        )
                    })
                },
            );
            g.bench_with_input(
                BenchmarkId::new("fst_present", block_rows),
                &seg,
                |b, seg| {
                    let mut i = 0usize;
                    b.iter(|| {
                        let p = &pts[idx[i % idx.len()]];
                        i += 1;
                        black_box(
                            seg.lookup_id(&SyntheticId::new(p.tsid, p.ts_millis))
                                .unwrap(),
                        )
                    })
                },
            );
        }
    }
    g.finish();

    let seg = segment(&pts, SegmentOptions::new());
    let mut g = c.benchmark_group("scan");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(6));
    g.throughput(Throughput::Elements(n as u64));
    g.bench_function("all_rows_k8s_720k", |b| {
        b.iter(|| {
            let mut sum = 0i64;
            seg.scan_rows(0..seg.row_count(), |r| sum = sum.wrapping_add(r.ts_millis))
                .unwrap();
            black_box(sum)
        })
    });
    let (lo, hi) = (seg.min_timestamp().unwrap(), seg.max_timestamp().unwrap());
    let tenth = lo + (hi - lo) / 10;
    g.throughput(Throughput::Elements(n as u64 / 10));
    g.bench_function("time_range_tenth_k8s_720k", |b| {
        b.iter(|| {
            let mut count = 0u64;
            seg.scan_time_range(lo, tenth, |_| count += 1).unwrap();
            black_box(count)
        })
    });
    g.finish();

    // Column reads (`read_series_columns`): every series' every metric column as
    // slices, the physical limit a query's read side compares against.
    let mut g = c.benchmark_group("columns");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(6));
    let cols: Vec<ColumnRead> = (0..seg.columns().len()).map(ColumnRead::Metric).collect();
    let values: u64 = count_columns(&seg, &cols);
    g.throughput(Throughput::Elements(values));
    g.bench_function("all_series_all_columns_k8s_720k", |b| {
        b.iter(|| black_box(count_columns(&seg, &cols)))
    });
    // The promql-bench shape: integer-valued counters as remote write sends them
    // (doubles), one sample every 10 s, increments of 1 to 5.
    let mut w = SegmentWriter::new(SegmentOptions::new()).unwrap();
    for i in 0..1_000u64 {
        let mut id = [0u8; 20];
        id[..8].copy_from_slice(&i.to_be_bytes());
        for k in 0..1_000u64 {
            let v = (k * 3 + (k * (i + 1)) % 5) as f64;
            w.push(Point::new(Tsid::from_bytes(id), (k * 10_000) as i64).gauge("value", v))
                .unwrap();
        }
    }
    let counters = Segment::from_vec(w.to_vec().unwrap().0).unwrap();
    let one = [ColumnRead::Metric(0)];
    g.throughput(Throughput::Elements(count_columns(&counters, &one)));
    g.bench_function("regular_counters_1000x1000", |b| {
        b.iter(|| black_box(count_columns(&counters, &one)))
    });
    g.finish();
}

/// Values read by column from every series of `seg`.
fn count_columns(seg: &Segment, cols: &[ColumnRead]) -> u64 {
    let mut cursor = SeriesCursor::default();
    let mut out = vec![ColumnSamples::default(); cols.len()];
    let mut n = 0u64;
    for i in 0..seg.series().len() {
        out.iter_mut().for_each(ColumnSamples::clear);
        seg.read_series_columns(i, i64::MIN, i64::MAX, cols, None, &mut cursor, &mut out)
            .unwrap();
        n += out.iter().map(|c| c.len() as u64).sum::<u64>();
    }
    n
}

/// Reading tombstone bitmaps: `Tombstones::from_bytes` (CRC, header, and the checked
/// roaring reader of `bitmap.rs`, which walks every value to refuse containers out of
/// order, repeated, empty or in the wrong form) against roaring's own
/// `deserialize_from` of the same bitmap, which checks none of that.
fn bench_bitmaps(c: &mut Criterion) {
    let mut g = c.benchmark_group("tombstones_read");
    for (name, rows, step) in [
        ("1k_of_4k_rows", 4_096u64, 4u64),
        ("100k_of_1m_rows", 1_000_000, 10),
        ("500k_of_1m_rows_dense", 1_000_000, 2),
    ] {
        let mut t = tidemark_segment::Tombstones::new(rows);
        for row in (0..rows).step_by(step as usize) {
            t.delete(row).unwrap();
        }
        let file = t.to_bytes().unwrap();
        let mut raw = Vec::new();
        t.dead().serialize_into(&mut raw).unwrap();
        g.throughput(Throughput::Elements(t.len()));
        g.bench_function(BenchmarkId::new("checked_from_bytes", name), |b| {
            b.iter(|| black_box(tidemark_segment::Tombstones::from_bytes(&file).unwrap()))
        });
        g.bench_function(BenchmarkId::new("roaring_deserialize_from", name), |b| {
            b.iter(|| black_box(roaring::RoaringBitmap::deserialize_from(&raw[..]).unwrap()))
        });
    }
    g.finish();
}

criterion_group!(benches, bench_write, bench_read, bench_bitmaps);
criterion_main!(benches);
