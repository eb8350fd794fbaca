//! Issue 17's table in one run: tidemark's split-block filters beside sbbf-rs-safe 0.3
//! (Parquet's split-block filter with AVX2), fastbloom 0.17 and xorf's static
//! BinaryFuse8, and tidemark's older filters, with 16-byte time-series keys at 1%.
//!
//! Timing is interleaved: each round measures every subject once (50,000 operations
//! over a window of the key set that moves each round, so the filter is read from
//! wherever it lives in the cache hierarchy, not from a warmed window), 31 rounds,
//! medians; each round starts with the next subject. Noise from the shared machine then
//! hits all subjects alike and the ratios hold. Inserts go into fresh filters, all made and their pages touched (untimed)
//! before any is timed;
//! the grown scalable filters and xorf report their whole build divided by the items.
//!
//! `cargo bench -p tidemark-benches --bench split_block` (both sizes, ~5 minutes);
//! `SPLIT_BENCH_ITEMS=1000000` for one size; `--test` (CI) runs a 20,000-item check that
//! also asserts that tidemark's bits equal sbbf-rs-safe's for the same hashes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::Instant;

use tidemark_bloom::{
    BlockedBloomFilter, BloomFilter, Hash64, ScalableBloomFilter, Seed, SplitBlockBloomFilter,
};
use xorf::Filter as _;
use xxhash_rust::xxh3::xxh3_64;

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// 8-byte series hash + 8-byte big-endian timestamp, as the benches of `bloom.rs`.
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

trait Subject {
    fn insert(&mut self, key: &[u8; 16]);
    fn contains(&self, key: &[u8; 16]) -> bool;
    fn bits(&self) -> u64;
    /// Items in the newest layer, for layered filters.
    fn newest_layer_items(&self) -> Option<u64> {
        None
    }
    /// Many lookups; peers without a batch API look up one by one.
    fn contains_batch(&self, keys: &[[u8; 16]], out: &mut Vec<bool>) {
        out.clear();
        out.extend(keys.iter().map(|k| self.contains(k)));
    }
}

struct Split(SplitBlockBloomFilter);
struct SplitHash(SplitBlockBloomFilter);
impl Subject for SplitHash {
    fn insert(&mut self, key: &[u8; 16]) {
        self.0.insert_hash(xxh3_64(key));
    }
    fn contains(&self, key: &[u8; 16]) -> bool {
        self.0.contains_hash(xxh3_64(key))
    }
    fn bits(&self) -> u64 {
        self.0.num_bits()
    }
}
struct Sbbf(sbbf_rs_safe::Filter);
struct Fast(fastbloom::BloomFilter);
struct Blocked(BlockedBloomFilter);
struct Standard(BloomFilter);
struct Scalable(ScalableBloomFilter);
struct Fuse(xorf::BinaryFuse8);

impl Subject for Split {
    fn insert(&mut self, key: &[u8; 16]) {
        self.0.insert(key);
    }
    fn contains(&self, key: &[u8; 16]) -> bool {
        self.0.contains(key)
    }
    fn bits(&self) -> u64 {
        self.0.num_bits()
    }
    fn contains_batch(&self, keys: &[[u8; 16]], out: &mut Vec<bool>) {
        self.0.contains_batch(keys, out);
    }
}
impl Subject for Sbbf {
    fn insert(&mut self, key: &[u8; 16]) {
        self.0.insert_hash(xxh3_64(key));
    }
    fn contains(&self, key: &[u8; 16]) -> bool {
        self.0.contains_hash(xxh3_64(key))
    }
    fn bits(&self) -> u64 {
        self.0.as_bytes().len() as u64 * 8
    }
}
impl Subject for Fast {
    fn insert(&mut self, key: &[u8; 16]) {
        self.0.insert(key);
    }
    fn contains(&self, key: &[u8; 16]) -> bool {
        self.0.contains(key)
    }
    fn bits(&self) -> u64 {
        self.0.num_bits() as u64
    }
}
impl Subject for Blocked {
    fn insert(&mut self, key: &[u8; 16]) {
        self.0.insert(key);
    }
    fn contains(&self, key: &[u8; 16]) -> bool {
        self.0.contains(key)
    }
    fn bits(&self) -> u64 {
        self.0.num_bits()
    }
}
impl Subject for Standard {
    fn insert(&mut self, key: &[u8; 16]) {
        self.0.insert(key);
    }
    fn contains(&self, key: &[u8; 16]) -> bool {
        self.0.contains(key)
    }
    fn bits(&self) -> u64 {
        self.0.num_bits()
    }
}
impl Subject for Scalable {
    fn insert(&mut self, key: &[u8; 16]) {
        // A reserved non-scaling filter says Full past its capacity; ignored here.
        let _ = self.0.add(key);
    }
    fn contains(&self, key: &[u8; 16]) -> bool {
        self.0.contains(key)
    }
    fn contains_batch(&self, keys: &[[u8; 16]], out: &mut Vec<bool>) {
        self.0.contains_batch(keys, out);
    }
    fn bits(&self) -> u64 {
        self.0.size_bytes() * 8
    }
    fn newest_layer_items(&self) -> Option<u64> {
        self.0.layers().last().map(|l| l.items)
    }
}
impl Subject for Fuse {
    fn insert(&mut self, _key: &[u8; 16]) {
        // Static: built once from all keys (its build time is reported instead).
    }
    fn contains(&self, key: &[u8; 16]) -> bool {
        self.0.contains(&xxh3_64(key))
    }
    fn bits(&self) -> u64 {
        self.0.len() as u64 * 8
    }
}

type MakeFresh = Box<dyn Fn() -> Box<dyn Subject>>;
type MakeBuilt = Box<dyn Fn(&[[u8; 16]]) -> Box<dyn Subject>>;

/// How a subject is made: a fresh (empty) filter per round, or one static build.
enum Make {
    Fresh(MakeFresh),
    /// Built once from all present keys; the build is timed as its insert cost.
    Built(MakeBuilt),
}

fn subjects(n: usize, p: f64) -> Vec<(&'static str, Make)> {
    let n64 = n as u64;
    let split_bytes = SplitBlockBloomFilter::with_rate(n64, p)
        .unwrap()
        .size_bytes() as usize;
    let fresh = |f: MakeFresh| Make::Fresh(f);
    let built = |f: MakeBuilt| Make::Built(f);
    let sip = Hash64::Sip13 { key: Seed::DEFAULT };
    vec![
        (
            "sbbf-rs-safe 0.3 (XXH3-64, equal bits)",
            fresh(Box::new(move || {
                Box::new(Sbbf(
                    sbbf_rs_safe::Filter::from_bytes(&vec![0u8; split_bytes]).unwrap(),
                ))
            })),
        ),
        (
            "tidemark SplitBlockBloomFilter (XXH3-64)",
            fresh(Box::new(move || {
                Box::new(Split(SplitBlockBloomFilter::with_rate(n64, p).unwrap()))
            })),
        ),
        (
            "tidemark SplitBlockBloomFilter (caller's XXH3-64, contains_hash)",
            fresh(Box::new(move || {
                Box::new(SplitHash(SplitBlockBloomFilter::with_rate(n64, p).unwrap()))
            })),
        ),
        (
            "tidemark SplitBlockBloomFilter (XXH64, Parquet)",
            fresh(Box::new(move || {
                Box::new(Split(
                    SplitBlockBloomFilter::with_rate(n64, p)
                        .unwrap()
                        .with_hasher(Hash64::PARQUET),
                ))
            })),
        ),
        (
            "tidemark SplitBlockBloomFilter (SipHash-1-3-64)",
            fresh(Box::new(move || {
                Box::new(Split(
                    SplitBlockBloomFilter::with_rate(n64, p)
                        .unwrap()
                        .with_hasher(sip),
                ))
            })),
        ),
        (
            "xorf BinaryFuse8 (static, XXH3-64)",
            built(Box::new(|keys| {
                let hashes: Vec<u64> = keys.iter().map(|k| xxh3_64(k)).collect();
                Box::new(Fuse(xorf::BinaryFuse8::try_from(&hashes).unwrap()))
            })),
        ),
        (
            "fastbloom 0.17",
            fresh(Box::new(move || {
                Box::new(Fast(
                    fastbloom::BloomFilter::with_false_pos(p).expected_items(n),
                ))
            })),
        ),
        (
            "tidemark BlockedBloomFilter",
            fresh(Box::new(move || {
                Box::new(Blocked(BlockedBloomFilter::with_capacity(n64, p).unwrap()))
            })),
        ),
        (
            "tidemark BloomFilter",
            fresh(Box::new(move || {
                Box::new(Standard(BloomFilter::with_capacity(n64, p).unwrap()))
            })),
        ),
        (
            "tidemark scalable split-block, reserved (NONSCALING)",
            fresh(Box::new(move || {
                Box::new(Scalable(
                    ScalableBloomFilter::builder(n64, p)
                        .nonscaling(true)
                        .split_block(Hash64::XXH3)
                        .build()
                        .unwrap(),
                ))
            })),
        ),
        (
            "tidemark scalable split-block, grown from 100",
            built(Box::new(move |keys| {
                let mut f = ScalableBloomFilter::builder(100, p)
                    .split_block(Hash64::XXH3)
                    .build()
                    .unwrap();
                for k in keys {
                    f.add(k).unwrap();
                }
                Box::new(Scalable(f))
            })),
        ),
        (
            "tidemark scalable standard, grown from 100",
            built(Box::new(move |keys| {
                let mut f = ScalableBloomFilter::new(100, p).unwrap();
                for k in keys {
                    f.add(k).unwrap();
                }
                Box::new(Scalable(f))
            })),
        ),
    ]
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn label(n: usize) -> String {
    if n >= 1_000_000 {
        format!("{}M", n / 1_000_000)
    } else {
        format!("{}k", n / 1_000)
    }
}

/// Times `f` over `keys`, in ns per key. One pass: a second pass over the same window
/// would find its blocks in cache, which a real lookup stream does not.
fn per_key(keys: &[[u8; 16]], mut f: impl FnMut(&[u8; 16])) -> f64 {
    let t = Instant::now();
    for k in keys {
        f(black_box(k));
    }
    t.elapsed().as_nanos() as f64 / keys.len() as f64
}

/// Times batch lookups over `keys` (1,024 per call), in ns per key.
fn per_key_batch(keys: &[[u8; 16]], s: &dyn Subject, out: &mut Vec<bool>) -> f64 {
    let t = Instant::now();
    for chunk in keys.chunks(1024) {
        s.contains_batch(black_box(chunk), out);
        black_box(&*out);
    }
    t.elapsed().as_nanos() as f64 / keys.len() as f64
}

fn run(n: usize, rounds: usize, ops: usize, absent: &[[u8; 16]], md: &mut String) {
    let p = 0.01;
    let present = keys(1, n);
    let subjects = subjects(n, p);
    let mut filled: Vec<Box<dyn Subject>> = Vec::new();
    let mut build_ns: Vec<Option<f64>> = Vec::new();
    for (_, make) in &subjects {
        match make {
            Make::Fresh(make) => {
                let mut s = make();
                for k in &present {
                    s.insert(k);
                }
                filled.push(s);
                build_ns.push(None);
            }
            Make::Built(build) => {
                let t = Instant::now();
                let s = build(&present);
                build_ns.push(Some(t.elapsed().as_nanos() as f64 / n as f64));
                filled.push(s);
            }
        }
    }
    // No false negatives, and the rate over the absent keys.
    let mut rates = Vec::new();
    for ((name, _), s) in subjects.iter().zip(&filled) {
        assert!(
            present.iter().all(|k| s.contains(k)),
            "{name}: false negative"
        );
        let hits = absent.iter().filter(|k| s.contains(k)).count();
        rates.push(hits as f64 / absent.len() as f64);
    }
    // Keys in the newest layer of every grown filter: the last ones added, fewer than
    // its item count (false positives at add time are not added, so stay 2% inside).
    let newest_items = filled
        .iter()
        .filter_map(|s| s.newest_layer_items())
        .filter(|&items| items < n as u64)
        .min()
        .unwrap_or(n as u64 / 4);
    let newest = &present[n - (newest_items as usize * 49 / 50).max(1)..];
    let ops = ops.min(newest.len()).min(absent.len());
    // [subject][insert, present, absent, present in the newest layer, present batch]
    let mut samples: Vec<Vec<Vec<f64>>> = (0..subjects.len())
        .map(|_| (0..5).map(|_| Vec::with_capacity(rounds)).collect())
        .collect();
    let mut out = Vec::with_capacity(1024);
    for round in 0..rounds {
        let at = (round * 7919 * ops) % (n - ops + 1);
        let keys = &present[at..at + ops];
        let at_absent = (round * ops) % (absent.len() - ops + 1);
        let misses = &absent[at_absent..at_absent + ops];
        let at_newest = (round * ops) % (newest.len() - ops + 1);
        let recent = &newest[at_newest..at_newest + ops];
        // The batch pass reads another window than the single lookups, so that neither
        // finds the other's blocks in cache.
        let at_batch = (at + n / 2) % (n - ops + 1);
        let batch = &present[at_batch..at_batch + ops];
        // Each round starts with another subject, so that none always runs right after
        // the same neighbour (whose cache and TLB footprint it would inherit).
        let count = filled.len();
        for i in (0..count).map(|j| (j + round) % count) {
            let s = &filled[i];
            samples[i][1].push(per_key(keys, |k| {
                black_box(s.contains(k));
            }));
            samples[i][2].push(per_key(misses, |k| {
                black_box(s.contains(k));
            }));
            samples[i][3].push(per_key(recent, |k| {
                black_box(s.contains(k));
            }));
            samples[i][4].push(per_key_batch(batch, s.as_ref(), &mut out));
        }
        // Every fresh filter is made and its pages touched before any is timed, so that
        // no timed pass follows an allocation or a free of another subject's filter.
        let mut fresh: Vec<(usize, Box<dyn Subject>)> = subjects
            .iter()
            .enumerate()
            .filter_map(|(i, (_, make))| match make {
                Make::Fresh(make) => Some((i, make())),
                Make::Built(_) => None,
            })
            .collect();
        for (_, f) in &mut fresh {
            for k in misses {
                f.insert(k);
            }
        }
        let count = fresh.len();
        for j in 0..count {
            let (i, f) = &mut fresh[(j + round) % count];
            samples[*i][0].push(per_key(keys, |k| f.insert(k)));
        }
    }
    let _ = writeln!(
        md,
        "\n#### {} keys at 1%: medians of {rounds} interleaved rounds of {ops} operations, ns per operation\n",
        label(n)
    );
    let _ = writeln!(
        md,
        "| filter | insert | lookup present | lookup absent | present, newest layer | present, batch API | bits/key | measured FPR |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|");
    let mut table = Vec::new();
    for (i, (name, _)) in subjects.iter().enumerate() {
        let insert = match build_ns[i] {
            Some(ns) => ns,
            None => median(&mut samples[i][0]),
        };
        let m = [
            insert,
            median(&mut samples[i][1]),
            median(&mut samples[i][2]),
            median(&mut samples[i][3]),
            median(&mut samples[i][4]),
        ];
        let built = if build_ns[i].is_some() {
            " (build)"
        } else {
            ""
        };
        let _ = writeln!(
            md,
            "| {name} | {:.1}{built} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.3}% |",
            m[0],
            m[1],
            m[2],
            m[3],
            m[4],
            filled[i].bits() as f64 / n as f64,
            100.0 * rates[i]
        );
        table.push((*name, m, filled[i].bits()));
    }
    let find = |prefix: &str| table.iter().find(|(n, _, _)| n.starts_with(prefix));
    if let (Some(ours), Some(sbbf)) = (
        find("tidemark SplitBlockBloomFilter (XXH3"),
        find("sbbf-rs-safe"),
    ) {
        let _ = writeln!(
            md,
            "\nsplit-block (XXH3) / sbbf-rs-safe, time ratio (≤ 1.2 lookups, ≤ 1.5 insert is the \
             target): insert {:.2}×, present {:.2}×, absent {:.2}×.",
            ours.1[0] / sbbf.1[0],
            ours.1[1] / sbbf.1[1],
            ours.1[2] / sbbf.1[2]
        );
    }
    if let (Some(grown), Some(reserved)) = (
        find("tidemark scalable split-block, grown"),
        find("tidemark SplitBlockBloomFilter (XXH3"),
    ) {
        let _ = writeln!(
            md,
            "scalable split-block grown from 100 / reserved split-block filter, lookups of keys \
             in the newest layer: {:.2}× (target ≤ 2); memory {:.1} MB.",
            grown.1[3] / reserved.1[3],
            grown.2 as f64 / 8e6
        );
    }
}

fn check_bits_equal_sbbf_rs() {
    // Same block count, same hashes: Parquet's layout means the same bytes.
    let n = 20_000;
    let ours = {
        let mut f = SplitBlockBloomFilter::with_rate(n as u64, 0.01).unwrap();
        for k in keys(5, n) {
            f.insert_hash(xxh3_64(&k));
        }
        f
    };
    let mut theirs =
        sbbf_rs_safe::Filter::from_bytes(&vec![0u8; ours.size_bytes() as usize]).unwrap();
    for k in keys(5, n) {
        theirs.insert_hash(xxh3_64(&k));
    }
    assert_eq!(
        ours.to_bitset_bytes(),
        theirs.as_bytes(),
        "layout differs from sbbf-rs"
    );
}

fn main() {
    let test_mode = std::env::args().any(|a| a == "--test");
    check_bits_equal_sbbf_rs();
    let sizes: Vec<usize> = match std::env::var("SPLIT_BENCH_ITEMS") {
        Ok(v) => vec![v.parse().expect("SPLIT_BENCH_ITEMS is a number")],
        Err(_) if test_mode => vec![20_000],
        Err(_) => vec![1_000_000, 10_000_000],
    };
    let (rounds, ops) = if test_mode { (3, 2_000) } else { (31, 50_000) };
    let absent = keys(2, if test_mode { 20_000 } else { 1_000_000 });
    let mut md = String::new();
    for n in sizes {
        run(n, rounds, ops, &absent, &mut md);
    }
    println!("{md}");
    if !test_mode {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/criterion");
        if std::fs::create_dir_all(&dir).is_ok() {
            let _ = std::fs::write(dir.join("split-block.md"), &md);
        }
    }
}
