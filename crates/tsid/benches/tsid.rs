//! Criterion benchmarks: tsid and synthetic id for 1, 6 and 20 dimensions,
//! from JSON documents and from typed pairs, and each fingerprint method.
//!
//! `cargo bench -p tidemark-tsid`; results in `docs/results/tsid.md`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::hash::{DefaultHasher, Hash, Hasher};
use std::hint::black_box;
use std::net::IpAddr;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use tidemark_tsid::{
    DimKind, DimValue, FingerprintBuilder, FingerprintMethod, SyntheticId, TimestampPrefix,
    TsidBuilder, TsidComputer,
};

const DIMS: [usize; 3] = [1, 6, 20];

/// The i-th dimension: a mix of keyword, integer, ip and boolean values,
/// keywords of realistic length.
fn dim(i: usize) -> (String, DimKind, Value) {
    let name = format!("attributes.dim{i:02}");
    match i % 5 {
        0 | 2 => (
            name,
            DimKind::Auto,
            json!(format!("value-{i}-eu-west-1a-prod")),
        ),
        1 => (name, DimKind::Auto, json!(4711 + i)),
        3 => (name, DimKind::Ip, json!(format!("10.1.2.{i}"))),
        _ => (name, DimKind::Auto, json!(i % 2 == 0)),
    }
}

/// A document with `n` dimensions, two metrics and a timestamp, nested as
/// OpenTelemetry-style documents are (`attributes.dimNN`).
fn setup(n: usize) -> (TsidComputer, Value) {
    let mut b = TsidBuilder::new();
    let mut attributes = serde_json::Map::new();
    for i in 0..n {
        let (name, kind, value) = dim(i);
        attributes.insert(name.trim_start_matches("attributes.").to_owned(), value);
        b = b.dimension_of_kind(name, kind);
    }
    let doc = json!({
        "@timestamp": 1_700_000_000_000_i64,
        "attributes": attributes,
        "metrics": {"cpu.usage": 0.42, "mem.used": 2048},
    });
    (b.build().unwrap(), doc)
}

fn bench_tsid(c: &mut Criterion) {
    let mut g = c.benchmark_group("tsid_json");
    for n in DIMS {
        let (mut comp, doc) = setup(n);
        g.bench_with_input(BenchmarkId::from_parameter(n), &doc, |b, doc| {
            b.iter(|| comp.tsid(black_box(doc)).unwrap())
        });
    }
    g.finish();

    let mut g = c.benchmark_group("synthetic_id_json");
    for n in DIMS {
        let (mut comp, doc) = setup(n);
        g.bench_with_input(BenchmarkId::from_parameter(n), &doc, |b, doc| {
            b.iter(|| {
                comp.synthetic_id(black_box(doc), 1_700_000_000_000)
                    .unwrap()
                    .to_bytes()
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("tsid_pairs");
    for n in DIMS {
        let mut comp = TsidBuilder::new().build().unwrap();
        let names: Vec<String> = (0..n).map(|i| dim(i).0).collect();
        let keywords: Vec<String> = (0..n)
            .map(|i| format!("value-{i}-eu-west-1a-prod"))
            .collect();
        let ip: IpAddr = "10.1.2.3".parse().unwrap();
        let pairs: Vec<(&str, DimValue<'_>)> = (0..n)
            .map(|i| {
                let v = match i % 5 {
                    0 | 2 => DimValue::Keyword(&keywords[i]),
                    1 => DimValue::I64(4711 + i as i64),
                    3 => DimValue::Ip(ip),
                    _ => DimValue::Bool(i % 2 == 0),
                };
                (names[i].as_str(), v)
            })
            .collect();
        let metrics = ["metrics.cpu.usage", "metrics.mem.used"];
        g.bench_with_input(BenchmarkId::from_parameter(n), &pairs, |b, pairs| {
            b.iter(|| comp.tsid_from_pairs(black_box(pairs), &metrics).unwrap())
        });
    }
    g.finish();

    // The hot path for callers that decode into a fixed schema: values in
    // declaration order, names encoded once at build time.
    let mut g = c.benchmark_group("tsid_values");
    for n in DIMS {
        let (mut comp, _) = setup(n);
        let keywords: Vec<String> = (0..n)
            .map(|i| format!("value-{i}-eu-west-1a-prod"))
            .collect();
        let ip: IpAddr = "10.1.2.3".parse().unwrap();
        let values: Vec<Option<DimValue<'_>>> = (0..n)
            .map(|i| {
                Some(match i % 5 {
                    0 | 2 => DimValue::Keyword(&keywords[i]),
                    1 => DimValue::I64(4711 + i as i64),
                    3 => DimValue::Ip(ip),
                    _ => DimValue::Bool(i % 2 == 0),
                })
            })
            .collect();
        let metrics = ["metrics.cpu.usage", "metrics.mem.used"];
        g.bench_with_input(BenchmarkId::from_parameter(n), &values, |b, values| {
            b.iter(|| comp.tsid_from_values(black_box(values), &metrics).unwrap())
        });
    }
    g.finish();

    let mut g = c.benchmark_group("batch_tsid_values");
    let (mut comp, _) = setup(6);
    let keywords: Vec<String> = (0..1000).map(|i| format!("host-{i}")).collect();
    let ip: IpAddr = "10.1.2.3".parse().unwrap();
    let rows: Vec<Vec<Option<DimValue<'_>>>> = keywords
        .iter()
        .map(|k| {
            (0..6)
                .map(|i| {
                    Some(match i % 5 {
                        0 | 2 => DimValue::Keyword(k),
                        1 => DimValue::I64(4711 + i as i64),
                        3 => DimValue::Ip(ip),
                        _ => DimValue::Bool(i % 2 == 0),
                    })
                })
                .collect()
        })
        .collect();
    let mut out = Vec::with_capacity(rows.len());
    g.throughput(criterion::Throughput::Elements(rows.len() as u64));
    g.bench_function("6_dims_x1000", |b| {
        b.iter(|| {
            out.clear();
            comp.tsid_values_batch(
                rows.iter().map(Vec::as_slice),
                &["metrics.cpu.usage", "metrics.mem.used"],
                &mut out,
            )
            .unwrap();
        })
    });
    g.finish();

    let mut g = c.benchmark_group("synthetic_id_values");
    for n in DIMS {
        let (mut comp, _) = setup(n);
        let keywords: Vec<String> = (0..n)
            .map(|i| format!("value-{i}-eu-west-1a-prod"))
            .collect();
        let ip: IpAddr = "10.1.2.3".parse().unwrap();
        let values: Vec<Option<DimValue<'_>>> = (0..n)
            .map(|i| {
                Some(match i % 5 {
                    0 | 2 => DimValue::Keyword(&keywords[i]),
                    1 => DimValue::I64(4711 + i as i64),
                    3 => DimValue::Ip(ip),
                    _ => DimValue::Bool(i % 2 == 0),
                })
            })
            .collect();
        let metrics = ["metrics.cpu.usage", "metrics.mem.used"];
        g.bench_with_input(BenchmarkId::from_parameter(n), &values, |b, values| {
            b.iter(|| {
                let t = comp.tsid_from_values(black_box(values), &metrics).unwrap();
                SyntheticId::new(t, 1_700_000_000_000).to_bytes()
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("batch_synthetic_id_json");
    let (mut comp, doc) = setup(6);
    let docs: Vec<Value> = (0..1000)
        .map(|i| {
            let mut d = doc.clone();
            d["attributes"]["dim00"] = json!(format!("host-{i}"));
            d
        })
        .collect();
    let mut out = Vec::with_capacity(docs.len());
    g.throughput(criterion::Throughput::Elements(docs.len() as u64));
    g.bench_function("6_dims_x1000", |b| {
        b.iter(|| {
            out.clear();
            comp.synthetic_id_batch(docs.iter().map(|d| (d, 1_700_000_000_000)), &mut out)
                .unwrap();
        })
    });
    g.finish();

    let mut g = c.benchmark_group("synthetic_id_text");
    let (mut comp, doc) = setup(6);
    let id = comp.synthetic_id(&doc, 1_700_000_000_000).unwrap();
    let text = id.to_string();
    g.bench_function("encode", |b| {
        let mut buf = [0u8; tidemark_tsid::SYNTHETIC_ID_TEXT_LEN];
        b.iter(|| black_box(id).encode_text(&mut buf).len())
    });
    g.bench_function("parse", |b| {
        b.iter(|| SyntheticId::parse(black_box(&text)).unwrap())
    });
    g.finish();

    // Baseline: what a naive id costs, std's SipHash-1-3 over the document's
    // JSON text (order-sensitive, so not a correct tsid).
    let mut g = c.benchmark_group("baseline_std_hash_of_json_text");
    for n in DIMS {
        let (_, doc) = setup(n);
        g.bench_with_input(BenchmarkId::from_parameter(n), &doc, |b, doc| {
            let mut text = Vec::with_capacity(4096);
            b.iter(|| {
                text.clear();
                serde_json::to_writer(&mut text, black_box(doc)).unwrap();
                let mut h = DefaultHasher::new();
                text.hash(&mut h);
                h.finish()
            })
        });
    }
    g.finish();
}

fn bench_fingerprint(c: &mut Criterion) {
    let event = json!({
        "@timestamp": 1_700_000_000_123_i64,
        "message": "user alice logged in from 10.1.2.3 using password authentication",
        "user": {"name": "alice", "id": 1001},
        "source": {"ip": "10.1.2.3", "port": 52144},
        "event": {"action": "login", "outcome": "success"},
    });
    let fields = [
        "message",
        "user.name",
        "user.id",
        "source.ip",
        "source.port",
        "event.action",
    ];
    let mut g = c.benchmark_group("fingerprint");
    for method in FingerprintMethod::ALL {
        let mut fp = FingerprintBuilder::new(method)
            .fields(fields)
            .timestamp_prefix(TimestampPrefix::Seconds)
            .build()
            .unwrap();
        let mut out = String::with_capacity(160);
        g.bench_function(method.name(), |b| {
            b.iter(|| {
                out.clear();
                fp.fingerprint_into(black_box(&event), 1_700_000_000_123, &mut out)
                    .unwrap();
                out.len()
            })
        });
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50)
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_tsid, bench_fingerprint
}
criterion_main!(benches);
