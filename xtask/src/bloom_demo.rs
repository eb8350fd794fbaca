//! `cargo xtask bloom-demo`: builds every filter type from the same time-series keys and
//! reports size, bits per item and the measured false-positive rate.

use std::time::Instant;

use anyhow::{Context, Result, bail};
use tidemark_bloom::{BlockedBloomFilter, BloomFilter, ScalableBloomFilter};

struct Options {
    items: u64,
    fpr: f64,
    absent: u64,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut opts = Options {
        items: 1_000_000,
        fpr: 0.01,
        absent: 1_000_000,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--items" => opts.items = value.parse().context("--items")?,
            "--fpr" => opts.fpr = value.parse().context("--fpr")?,
            "--absent" => opts.absent = value.parse().context("--absent")?,
            _ => bail!("unknown option {flag:?}"),
        }
    }
    if opts.items == 0 || opts.absent == 0 {
        bail!("--items and --absent must be at least 1");
    }
    Ok(opts)
}

/// SplitMix64, so that every run measures the same keys.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A time-series key: 8-byte series hash, then the big-endian timestamp.
fn key(state: &mut u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&splitmix(state).to_le_bytes());
    let ts = 1_700_000_000_000i64 + (splitmix(state) % 86_400_000) as i64;
    k[8..].copy_from_slice(&ts.to_be_bytes());
    k
}

struct Row {
    name: &'static str,
    bytes: u64,
    insert_ns: f64,
    rate: f64,
}

fn measure(
    name: &'static str,
    opts: &Options,
    mut insert: impl FnMut(&[u8]) -> Result<()>,
    contains: impl Fn(&[u8]) -> bool,
    bytes: impl Fn() -> u64,
) -> Result<Row> {
    let mut present = 1u64;
    let start = Instant::now();
    for _ in 0..opts.items {
        insert(&key(&mut present))?;
    }
    let insert_ns = start.elapsed().as_nanos() as f64 / opts.items as f64;
    let mut absent = 2u64;
    let hits = (0..opts.absent)
        .filter(|_| contains(&key(&mut absent)))
        .count();
    Ok(Row {
        name,
        bytes: bytes(),
        insert_ns,
        rate: hits as f64 / opts.absent as f64,
    })
}

pub fn run(args: &[String]) -> Result<()> {
    let opts = parse(args)?;
    println!(
        "{} time-series keys (16 bytes), target rate {}, measured over {} absent keys\n",
        opts.items, opts.fpr, opts.absent
    );
    let mut rows = Vec::new();

    let std = std::cell::RefCell::new(BloomFilter::with_capacity(opts.items, opts.fpr)?);
    rows.push(measure(
        "BloomFilter",
        &opts,
        |k| {
            std.borrow_mut().insert(k);
            Ok(())
        },
        |k| std.borrow().contains(k),
        || std.borrow().size_bytes(),
    )?);

    let blk = std::cell::RefCell::new(BlockedBloomFilter::with_capacity(opts.items, opts.fpr)?);
    rows.push(measure(
        "BlockedBloomFilter",
        &opts,
        |k| {
            blk.borrow_mut().insert(k);
            Ok(())
        },
        |k| blk.borrow().contains(k),
        || blk.borrow().size_bytes(),
    )?);

    let reserved = std::cell::RefCell::new(
        ScalableBloomFilter::builder(opts.items, opts.fpr)
            .nonscaling(true)
            .build()?,
    );
    rows.push(measure(
        "Scalable, reserved (NONSCALING)",
        &opts,
        |k| {
            reserved.borrow_mut().add(k)?;
            Ok(())
        },
        |k| reserved.borrow().contains(k),
        || reserved.borrow().size_bytes(),
    )?);

    let grown = std::cell::RefCell::new(ScalableBloomFilter::new(100, opts.fpr)?);
    rows.push(measure(
        "Scalable, grown from 100",
        &opts,
        |k| {
            grown.borrow_mut().add(k)?;
            Ok(())
        },
        |k| grown.borrow().contains(k),
        || grown.borrow().size_bytes(),
    )?);

    println!(
        "{:<32} {:>12} {:>10} {:>10} {:>12} {:>10}",
        "filter", "bytes", "bits/item", "ns/insert", "measured", "vs target"
    );
    for r in &rows {
        println!(
            "{:<32} {:>12} {:>10.2} {:>10.1} {:>11.4}% {:>9.2}x",
            r.name,
            r.bytes,
            r.bytes as f64 * 8.0 / opts.items as f64,
            r.insert_ns,
            r.rate * 100.0,
            r.rate / opts.fpr
        );
    }
    println!(
        "\noptimum for a classic filter: {:.2} bits/item; grown filter: {} layers",
        tidemark_bloom::math::optimal_bits_per_item(opts.fpr),
        grown.borrow().num_layers()
    );
    Ok(())
}
