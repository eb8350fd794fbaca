//! Criterion benchmarks of the gauge value encodings on one block of 1,024 values:
//! encode and decode speed of each (the ALP ones next to raw, XOR and the byte planes)
//! on decimal data (host-style readings with 1 to 3 decimals) and on random doubles
//! (full 52-bit mantissas, as the k8s CPU utilisation). Codec only: the block's zstd
//! wrap, which the writer adds when it makes the block smaller, is not included.
//!
//! Where an encoding does not apply (ALP on random doubles), `try` measures what finding
//! that out costs.
//!
//! `cargo bench -p tidemark-segment --bench gauges`; criterion reports elements/s,
//! values/ns is that figure / 10^9. Results in `docs/results/segment.md`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tidemark_segment::gauge_codec::{GaugeEncoding, decode_gauges, encode_gauges};

const BLOCK: usize = 1024;

/// A deterministic xorshift stream in [0, 1).
fn uniform(seed: u64) -> impl FnMut() -> f64 {
    let mut x = seed | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Four series of 256 readings (a block holds several series), random walks written
/// with 1, 2, 2 and 3 decimals.
fn decimal_block() -> Vec<f64> {
    let mut u = uniform(42);
    let mut out = Vec::with_capacity(BLOCK);
    for (series, decimals) in [1, 2, 2, 3].into_iter().enumerate() {
        let scale = 10f64.powi(decimals);
        let mut x = 20.0 + 10.0 * series as f64;
        for _ in 0..BLOCK / 4 {
            x += (u() - 0.5) * 0.4;
            out.push((x * scale).round() / scale);
        }
    }
    out
}

/// Ratios with full-precision mantissas in (0, 1.5), as a CPU utilisation gauge.
fn random_block() -> Vec<f64> {
    let mut u = uniform(7);
    (0..BLOCK).map(|_| u() * 1.5).collect()
}

const ENCODINGS: [GaugeEncoding; 8] = [
    GaugeEncoding::Raw64,
    GaugeEncoding::Xor,
    GaugeEncoding::Raw64Split,
    GaugeEncoding::XorSplit,
    GaugeEncoding::Raw64Planes,
    GaugeEncoding::XorPlanes,
    GaugeEncoding::Alp,
    GaugeEncoding::AlpDelta,
];

fn bench_gauges(c: &mut Criterion) {
    for (data, values) in [("decimal", decimal_block()), ("random", random_block())] {
        let mut g = c.benchmark_group(format!("gauges/{data}"));
        g.measurement_time(Duration::from_secs(2));
        g.warm_up_time(Duration::from_millis(500));
        g.throughput(Throughput::Elements(values.len() as u64));
        for enc in ENCODINGS {
            let Some(bytes) = encode_gauges(&values, enc).unwrap() else {
                // Not applicable (ALP on random doubles: most values are exceptions).
                // What finding that out costs the writer, which tries every block.
                g.bench_with_input(BenchmarkId::new("try", enc.name()), &values, |b, v| {
                    b.iter(|| encode_gauges(black_box(v), enc).unwrap());
                });
                continue;
            };
            let back = decode_gauges(&bytes, values.len()).unwrap();
            assert_eq!(
                back.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                values.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
            eprintln!(
                "gauges/{data}/{}: {} bytes for {} values ({:.3} B/value before the block's zstd)",
                enc.name(),
                bytes.len(),
                values.len(),
                bytes.len() as f64 / values.len() as f64
            );
            g.bench_with_input(BenchmarkId::new("encode", enc.name()), &values, |b, v| {
                b.iter(|| encode_gauges(black_box(v), enc).unwrap());
            });
            g.bench_with_input(
                BenchmarkId::new("decode", enc.name()),
                &bytes,
                |b, bytes| {
                    b.iter(|| decode_gauges(black_box(bytes), BLOCK).unwrap());
                },
            );
        }
        g.finish();
    }
}

criterion_group!(benches, bench_gauges);
criterion_main!(benches);
