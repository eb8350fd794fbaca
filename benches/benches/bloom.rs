//! Bloom filters with 16-byte time-series keys (8-byte series hash + 8-byte big-endian
//! timestamp): insert, lookup of present keys, lookup of absent keys, at 1M and 10M items
//! and rates 1% and 0.1%, for tidemark-bloom beside fastbloom, bloomfilter and
//! growable-bloom-filter.
//!
//! Before the timings, a size-and-rate table (bits per item, measured false-positive
//! rate over 1M absent keys, scalable memory) is printed and written to
//! `target/criterion/bloom-sizes.md`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use growable_bloom_filter::GrowableBloomBuilder;
use tidemark_bloom::{BlockedBloomFilter, BloomFilter, Filter, Layout, ScalableBloomFilter};

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn keys(seed: u64, n: usize) -> Vec<[u8; 16]> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            let mut k = [0u8; 16];
            k[..8].copy_from_slice(&splitmix(&mut state).to_le_bytes());
            let ts = 1_700_000_000_000i64 + (splitmix(&mut state) % 86_400_000) as i64;
            k[8..].copy_from_slice(&ts.to_be_bytes());
            k
        })
        .collect()
}

/// A filter under test, behind one interface.
trait Subject {
    fn insert(&mut self, key: &[u8; 16]);
    fn contains(&self, key: &[u8; 16]) -> bool;
    /// Bits of the filter's arrays, when the crate reports them.
    fn bits(&self) -> Option<u64>;
    /// Many lookups; the peers have no batch API, so by default one by one.
    fn contains_batch(&self, keys: &[[u8; 16]], out: &mut Vec<bool>) {
        out.clear();
        out.extend(keys.iter().map(|k| self.contains(k)));
    }
}

/// Both tidemark layouts, behind one impl.
struct Tidemark<L: Layout>(Filter<L>);
struct TidemarkScalable(ScalableBloomFilter);
struct FastBloom(fastbloom::BloomFilter);
struct BloomfilterCrate(bloomfilter::Bloom<[u8; 16]>);
struct Growable(growable_bloom_filter::GrowableBloom);

impl<L: Layout> Subject for Tidemark<L> {
    fn insert(&mut self, key: &[u8; 16]) {
        self.0.insert(key);
    }
    fn contains(&self, key: &[u8; 16]) -> bool {
        self.0.contains(key)
    }
    fn bits(&self) -> Option<u64> {
        Some(self.0.num_bits())
    }
    fn contains_batch(&self, keys: &[[u8; 16]], out: &mut Vec<bool>) {
        self.0.contains_batch(keys, out);
    }
}
impl Subject for TidemarkScalable {
    fn insert(&mut self, key: &[u8; 16]) {
        // A reserved filter never needs to grow within its capacity; past it (the insert
        // bench cycles) a non-scaling filter says Full, which is ignored here.
        let _ = self.0.add(key);
    }
    fn contains(&self, key: &[u8; 16]) -> bool {
        self.0.contains(key)
    }
    fn bits(&self) -> Option<u64> {
        Some(self.0.size_bytes() * 8)
    }
}
impl Subject for FastBloom {
    fn insert(&mut self, key: &[u8; 16]) {
        self.0.insert(key);
    }
    fn contains(&self, key: &[u8; 16]) -> bool {
        self.0.contains(key)
    }
    fn bits(&self) -> Option<u64> {
        Some(self.0.num_bits() as u64)
    }
}
impl Subject for BloomfilterCrate {
    fn insert(&mut self, key: &[u8; 16]) {
        self.0.set(key);
    }
    fn contains(&self, key: &[u8; 16]) -> bool {
        self.0.check(key)
    }
    fn bits(&self) -> Option<u64> {
        Some(self.0.len())
    }
}
impl Subject for Growable {
    fn insert(&mut self, key: &[u8; 16]) {
        self.0.insert(key);
    }
    fn contains(&self, key: &[u8; 16]) -> bool {
        self.0.contains(key)
    }
    fn bits(&self) -> Option<u64> {
        None
    }
}

type Make = Box<dyn Fn() -> Box<dyn Subject>>;

/// The subjects for `n` items at rate `p`. fastbloom gets exactly the bits of our
/// blocked filter, so that the lookup comparison is at equal bits per item.
fn subjects(n: usize, p: f64) -> Vec<(&'static str, Make)> {
    let n64 = n as u64;
    let blocked_bits = BlockedBloomFilter::with_capacity(n64, p)
        .unwrap()
        .num_bits() as usize;
    vec![
        (
            "tidemark-standard",
            Box::new(move || {
                Box::new(Tidemark(BloomFilter::with_capacity(n64, p).unwrap())) as Box<dyn Subject>
            }) as Make,
        ),
        (
            "tidemark-blocked",
            Box::new(move || {
                Box::new(Tidemark(BlockedBloomFilter::with_capacity(n64, p).unwrap()))
                    as Box<dyn Subject>
            }),
        ),
        (
            "tidemark-scalable-reserved",
            Box::new(move || {
                Box::new(TidemarkScalable(
                    ScalableBloomFilter::builder(n64, p)
                        .nonscaling(true)
                        .build()
                        .unwrap(),
                )) as Box<dyn Subject>
            }),
        ),
        (
            "fastbloom-equal-bits",
            Box::new(move || {
                Box::new(FastBloom(
                    fastbloom::BloomFilter::with_num_bits(blocked_bits).expected_items(n),
                )) as Box<dyn Subject>
            }),
        ),
        (
            "bloomfilter",
            Box::new(move || {
                Box::new(BloomfilterCrate(
                    bloomfilter::Bloom::new_for_fp_rate(n, p).unwrap(),
                )) as Box<dyn Subject>
            }),
        ),
        (
            "growable-reserved",
            Box::new(move || {
                Box::new(Growable(
                    GrowableBloomBuilder::new()
                        .estimated_insertions(n)
                        .desired_error_ratio(p)
                        .build(),
                )) as Box<dyn Subject>
            }),
        ),
    ]
}

fn label(n: usize) -> String {
    if n >= 1_000_000 {
        format!("{}M", n / 1_000_000)
    } else {
        format!("{}k", n / 1_000)
    }
}

struct Measured {
    config: String,
    name: &'static str,
    bits_per_item: Option<f64>,
    rate: f64,
}

/// `BLOOM_BENCH_INTERLEAVED_ONLY=1` skips the criterion groups (sizes, rates and the
/// interleaved table only: a quicker run).
fn criterion_enabled() -> bool {
    std::env::var_os("BLOOM_BENCH_INTERLEAVED_ONLY").is_none()
}

fn bench_config(
    c: &mut Criterion,
    n: usize,
    p: f64,
    present: &[[u8; 16]],
    absent: &[[u8; 16]],
    out: &mut Vec<Measured>,
) {
    let config = format!("{}/{}", label(n), p);
    let timed = criterion_enabled();
    for (name, make) in subjects(n, p) {
        let mut s = make();
        for k in present {
            s.insert(k);
        }
        let hits = absent.iter().filter(|k| s.contains(k)).count();
        out.push(Measured {
            config: config.clone(),
            name,
            bits_per_item: s.bits().map(|b| b as f64 / n as f64),
            rate: hits as f64 / absent.len() as f64,
        });
        if !timed {
            continue;
        }
        let mut group = c.benchmark_group(format!("insert/{config}"));
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut done = 0u64;
                while done < iters {
                    let mut s = make();
                    let chunk = (iters - done).min(n as u64) as usize;
                    let start = Instant::now();
                    for k in &present[..chunk] {
                        s.insert(black_box(k));
                    }
                    total += start.elapsed();
                    done += chunk as u64;
                }
                total
            });
        });
        group.finish();

        for (what, keys) in [("lookup-present", present), ("lookup-absent", absent)] {
            let mut group = c.benchmark_group(format!("{what}/{config}"));
            let mut cursor = 0usize;
            group.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        black_box(s.contains(black_box(&keys[cursor])));
                        cursor += 1;
                        if cursor == keys.len() {
                            cursor = 0;
                        }
                    }
                    start.elapsed()
                });
            });
            group.finish();
        }
    }
}

type BatchLookup<'a> = dyn Fn(&[[u8; 16]], &mut Vec<bool>) + 'a;

/// Batch lookups (`contains_batch`) of the two tidemark filters, per key.
fn bench_batch(c: &mut Criterion, n: usize, p: f64, present: &[[u8; 16]], absent: &[[u8; 16]]) {
    let config = format!("{}/{}", label(n), p);
    let mut standard = BloomFilter::with_capacity(n as u64, p).unwrap();
    let mut blocked = BlockedBloomFilter::with_capacity(n as u64, p).unwrap();
    for k in present {
        standard.insert(k);
        blocked.insert(k);
    }
    const WINDOW: usize = 1024;
    for (what, keys) in [
        ("lookup-present-batch", present),
        ("lookup-absent-batch", absent),
    ] {
        let mut group = c.benchmark_group(format!("{what}/{config}"));
        let mut run = |name: &str, lookup: &BatchLookup<'_>| {
            let mut cursor = 0usize;
            let mut out = Vec::with_capacity(WINDOW);
            group.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    let mut done = 0u64;
                    while done < iters {
                        let len = WINDOW.min((iters - done) as usize).min(keys.len() - cursor);
                        lookup(&keys[cursor..cursor + len], &mut out);
                        black_box(&out);
                        done += len as u64;
                        cursor += len;
                        if cursor == keys.len() {
                            cursor = 0;
                        }
                    }
                    start.elapsed()
                });
            });
        };
        run("tidemark-standard", &|k, out| {
            standard.contains_batch(k, out)
        });
        run("tidemark-blocked", &|k, out| blocked.contains_batch(k, out));
        group.finish();
    }
}

/// Interleaved timing: every subject measured once per round (20,000 operations, about a
/// millisecond, short enough that most passes are not preempted), 31 rounds, medians.
/// A burst of noise on the shared machine then hits every subject alike, so the ratios
/// are trustworthy even when the absolute figures move.
fn interleaved(n: usize, p: f64, present: &[[u8; 16]], absent: &[[u8; 16]], md: &mut String) {
    const ROUNDS: usize = 31;
    const OPS: usize = 20_000;
    let subjects = subjects(n, p);
    let filled: Vec<Box<dyn Subject>> = subjects
        .iter()
        .map(|(_, make)| {
            let mut s = make();
            for k in present {
                s.insert(k);
            }
            s
        })
        .collect();
    // [subject][op] -> samples in ns/op
    let mut samples: Vec<Vec<Vec<f64>>> = (0..subjects.len())
        .map(|_| (0..5).map(|_| Vec::with_capacity(ROUNDS)).collect())
        .collect();
    let mut out = Vec::with_capacity(1024);
    let ops = OPS.min(n);
    let window = |round: usize| {
        let start_at = (round * ops) % (present.len() - ops + 1);
        let miss_len = ops.min(absent.len());
        let absent_at = (round * ops) % (absent.len() - miss_len + 1);
        (
            &present[start_at..start_at + ops],
            &absent[absent_at..absent_at + miss_len],
        )
    };
    // Lookups first, with no filter allocated or freed between them, each timed pass
    // preceded by an untimed pass over the same keys so that every filter is measured
    // from the same cache state.
    for round in 0..ROUNDS {
        let (keys, misses) = window(round);
        for (i, s) in filled.iter().enumerate() {
            // Each op: an untimed pass, then the faster of two timed passes (a pass hit
            // by preemption or another process's cache sweep is dropped).
            for (op, set) in [(1, keys), (2, misses)] {
                for k in set {
                    black_box(s.contains(k));
                }
                let best = (0..2)
                    .map(|_| {
                        let t = Instant::now();
                        for k in set {
                            black_box(s.contains(black_box(k)));
                        }
                        t.elapsed().as_nanos() as f64 / set.len() as f64
                    })
                    .fold(f64::INFINITY, f64::min);
                samples[i][op].push(best);
            }
            for (op, set) in [(3, keys), (4, misses)] {
                for k in set {
                    black_box(s.contains(k));
                }
                let best = (0..2)
                    .map(|_| {
                        let t = Instant::now();
                        for chunk in set.chunks(1024) {
                            s.contains_batch(chunk, &mut out);
                            black_box(&out);
                        }
                        t.elapsed().as_nanos() as f64 / set.len() as f64
                    })
                    .fold(f64::INFINITY, f64::min);
                samples[i][op].push(best);
            }
        }
    }
    drop(filled);
    // Inserts go into a fresh filter whose pages were first touched by other keys
    // (untimed), so that no filter pays its allocator's lazy page faults in the timed
    // loop and none is spared them.
    for round in 0..ROUNDS {
        let (keys, misses) = window(round);
        for (i, (_, make)) in subjects.iter().enumerate() {
            let mut fresh = make();
            for k in misses {
                fresh.insert(k);
            }
            let t = Instant::now();
            for k in keys {
                fresh.insert(black_box(k));
            }
            samples[i][0].push(t.elapsed().as_nanos() as f64 / keys.len() as f64);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let _ = writeln!(
        md,
        "\n#### {} items at {p}: interleaved medians of {ROUNDS} rounds, ns per operation\n",
        label(n)
    );
    let _ = writeln!(
        md,
        "| filter | insert | lookup present | lookup absent | present, batch API | absent, batch API |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|");
    let mut medians = Vec::new();
    for ((name, _), cols) in subjects.iter().zip(samples.iter_mut()) {
        let m: Vec<f64> = cols.iter_mut().map(median).collect();
        let _ = writeln!(
            md,
            "| {name} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
            m[0], m[1], m[2], m[3], m[4]
        );
        medians.push((*name, m));
    }
    let find = |want: &str| {
        medians
            .iter()
            .find(|(n, _)| *n == want)
            .map(|(_, m)| m.clone())
    };
    if let (Some(ours), Some(theirs)) = (find("tidemark-blocked"), find("fastbloom-equal-bits")) {
        let _ = writeln!(
            md,
            "\ntidemark-blocked vs fastbloom at equal bits per item (their time / ours; > 1: ours \
             faster): insert {:.2}×, present {:.2}×, absent {:.2}×; with our batch API: present \
             {:.2}×, absent {:.2}×.",
            theirs[0] / ours[0],
            theirs[1] / ours[1],
            theirs[2] / ours[2],
            theirs[1] / ours[3],
            theirs[2] / ours[4]
        );
    }
}

/// Memory and measured rate of scalable filters grown from 100 items, and reserved up
/// front, at 1%.
fn scalable_report(n: usize, absent: &[[u8; 16]], present: &[[u8; 16]], md: &mut String) {
    let rate = |contains: &dyn Fn(&[u8; 16]) -> bool| {
        absent.iter().filter(|k| contains(k)).count() as f64 / absent.len() as f64
    };
    let _ = writeln!(
        md,
        "\n| scalable filter, {} items at 1% | bytes | layers | measured rate |",
        label(n)
    );
    let _ = writeln!(md, "|---|---|---|---|");
    let mut grown = ScalableBloomFilter::new(100, 0.01).unwrap();
    for k in present {
        grown.add(k).unwrap();
    }
    let _ = writeln!(
        md,
        "| tidemark, grown from 100 (expansion 2) | {} | {} | {:.4}% |",
        grown.size_bytes(),
        grown.num_layers(),
        100.0 * rate(&|k| grown.contains(k))
    );
    drop(grown);
    let mut reserved = ScalableBloomFilter::builder(n as u64, 0.01)
        .nonscaling(true)
        .build()
        .unwrap();
    for k in present {
        reserved.add(k).unwrap();
    }
    let _ = writeln!(
        md,
        "| tidemark, reserved up front (NONSCALING) | {} | 1 | {:.4}% |",
        reserved.size_bytes(),
        100.0 * rate(&|k| reserved.contains(k))
    );
    drop(reserved);
    let mut scaling = ScalableBloomFilter::new(n as u64, 0.01).unwrap();
    for k in present {
        scaling.add(k).unwrap();
    }
    let _ = writeln!(
        md,
        "| tidemark, reserved up front, scaling (first layer at 0.5%) | {} | {} | {:.4}% |",
        scaling.size_bytes(),
        scaling.num_layers(),
        100.0 * rate(&|k| scaling.contains(k))
    );
    drop(scaling);
    let mut growable = GrowableBloomBuilder::new()
        .estimated_insertions(100)
        .desired_error_ratio(0.01)
        .build();
    for k in present {
        growable.insert(k);
    }
    let _ = writeln!(
        md,
        "| growable-bloom-filter, grown from 100 | (not reported) | — | {:.4}% |",
        100.0 * rate(&|k| growable.contains(k))
    );
}

fn main() {
    let test_mode = std::env::args().any(|a| a == "--test");
    // `BLOOM_BENCH_ITEMS=1000000` limits the run to one size.
    let sizes: Vec<usize> = match std::env::var("BLOOM_BENCH_ITEMS") {
        Ok(v) => vec![v.parse().expect("BLOOM_BENCH_ITEMS is a number")],
        Err(_) if test_mode => vec![10_000],
        Err(_) => vec![1_000_000, 10_000_000],
    };
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(15)
        .configure_from_args();
    let absent = keys(2, if test_mode { 10_000 } else { 1_000_000 });
    let mut measured = Vec::new();
    let mut md = String::new();
    let mut timing = String::new();
    for &n in &sizes {
        let present = keys(1, n);
        for p in [0.01, 0.001] {
            bench_config(&mut c, n, p, &present, &absent, &mut measured);
            if criterion_enabled() {
                bench_batch(&mut c, n, p, &present, &absent);
            }
            interleaved(n, p, &present, &absent, &mut timing);
        }
        if n == *sizes.last().unwrap_or(&n) {
            let _ = writeln!(
                md,
                "| config | filter | bits/item | measured rate | vs target |"
            );
            let _ = writeln!(md, "|---|---|---|---|---|");
            for m in &measured {
                let target: f64 = m.config.rsplit('/').next().unwrap().parse().unwrap();
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {:.4}% | {:.2}× |",
                    m.config,
                    m.name,
                    m.bits_per_item
                        .map_or("—".to_string(), |b| format!("{b:.2}")),
                    100.0 * m.rate,
                    m.rate / target
                );
            }
            scalable_report(n, &absent, &present, &mut md);
        }
    }
    md.push_str(&timing);
    println!("\n{md}");
    // A `--test` run (CI) must not overwrite the figures of a real run.
    if !test_mode {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/criterion");
        if std::fs::create_dir_all(&dir).is_ok() {
            let _ = std::fs::write(dir.join("bloom-sizes.md"), &md);
        }
    }
    c.final_summary();
}
