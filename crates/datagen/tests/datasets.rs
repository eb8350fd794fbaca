#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The generators are deterministic and their counts are exact.

use std::collections::HashSet;

use tidemark_datagen::{Dataset, DatasetKind, Field, MetricKind, MetricVal, Options, Record};

fn key(r: &Record) -> (u32, i64) {
    (r.series, r.ts_millis)
}

#[test]
fn same_options_same_documents() {
    for ds in [
        Dataset::k8s(
            Options::default()
                .points(3_000)
                .dup_rate(0.05)
                .late_rate(0.05),
        ),
        Dataset::otel(
            Options::default()
                .points(3_000)
                .dup_rate(0.05)
                .late_rate(0.05),
        ),
    ] {
        let a: Vec<String> = ds.ndjson().collect();
        let b: Vec<String> = ds.clone().ndjson().collect();
        assert_eq!(a, b);
        let other: Vec<String> = Dataset::by_name(ds.schema().name, ds.options().clone().seed(7))
            .unwrap()
            .ndjson()
            .collect();
        assert_ne!(a, other);
    }
}

#[test]
fn counts_are_exact_with_duplicates_and_late_documents() {
    for ds in [
        Dataset::k8s(
            Options::default()
                .points(5_000)
                .series(200)
                .dup_rate(0.1)
                .late_rate(0.2),
        ),
        Dataset::otel(
            Options::default()
                .points(5_000)
                .series(700)
                .dup_rate(0.1)
                .late_rate(0.2),
        ),
    ] {
        let records: Vec<Record> = ds.records().collect();
        assert_eq!(records.len() as u64, ds.total_docs());
        let unique: HashSet<(u32, i64)> = records.iter().map(key).collect();
        assert_eq!(unique.len() as u64, ds.unique_docs());
        let dups = records.iter().filter(|r| r.duplicate).count() as u64;
        assert_eq!(dups, ds.total_docs() - ds.unique_docs());
        assert!(dups > 300 && dups < 700, "{dups}");
        let late = records.iter().filter(|r| r.late).count();
        assert!(late > 700 && late < 1300, "{late}");
        // Late documents really are out of order.
        let out_of_order = records
            .windows(2)
            .filter(|w| w[1].ts_millis < w[0].ts_millis)
            .count();
        assert!(out_of_order > 100);
    }
}

#[test]
fn default_shapes_match_the_readme() {
    let k8s = Dataset::k8s(Options::default());
    assert_eq!(k8s.kind(), DatasetKind::K8s);
    assert_eq!(k8s.series_count(), 2_000);
    assert_eq!(k8s.unique_docs(), 720_000);
    assert_eq!(k8s.schema().metrics.len(), 8);
    assert_eq!(k8s.schema().interval_millis, 10_000);
    let kinds: Vec<MetricKind> = k8s.schema().metrics.iter().map(|m| m.1).collect();
    assert!(kinds.contains(&MetricKind::Gauge) && kinds.contains(&MetricKind::Counter));

    let otel = Dataset::otel(Options::default());
    assert!(otel.series_count() >= 20_000);
    assert_eq!(otel.schema().interval_millis, 60_000);
    // One full interval covers every series once, each document one metric value.
    let first: Vec<Record> = otel.records().take(otel.series_count() as usize).collect();
    assert!(first.iter().all(|r| r.metrics.len() == 1));
    let series: HashSet<u32> = first.iter().map(|r| r.series).collect();
    assert_eq!(series.len() as u32, otel.series_count());
    let dims: HashSet<Vec<(String, String)>> = first
        .iter()
        .map(|r| {
            let mut d: Vec<(String, String)> = r
                .dims
                .iter()
                .map(|(k, v)| (k.to_string(), format!("{v:?}")))
                .collect();
            d.push(("metric".into(), r.metrics[0].0.to_owned()));
            d
        })
        .collect();
    assert_eq!(
        dims.len() as u32,
        otel.series_count(),
        "series are distinct"
    );
}

#[test]
fn documents_carry_the_schema_fields_and_counters_never_decrease() {
    let ds = Dataset::k8s(Options::default().points(2_000).series(100));
    let mut last = std::collections::HashMap::new();
    for r in ds.records() {
        let doc = r.to_json();
        assert_eq!(doc["@timestamp"].as_i64(), Some(r.ts_millis));
        assert!(doc["k8s"]["pod"]["name"].is_string());
        assert!(doc["k8s"]["pod"]["memory"]["usage_bytes"].is_f64());
        let cpu = doc["k8s"]["pod"]["cpu"]["usage_ns"].as_i64().unwrap();
        if let Some(prev) = last.insert(r.series, cpu) {
            assert!(cpu >= prev);
        }
    }
}

#[test]
fn shuffled_keys_parse_to_the_same_documents() {
    let plain = Dataset::otel(Options::default().points(500));
    let shuffled = Dataset::otel(Options::default().points(500).shuffle_keys(true));
    let a: Vec<String> = plain.ndjson().collect();
    let b: Vec<String> = shuffled.ndjson().collect();
    assert_ne!(a, b);
    for (x, y) in a.iter().zip(&b) {
        let x: serde_json::Value = serde_json::from_str(x).unwrap();
        let y: serde_json::Value = serde_json::from_str(y).unwrap();
        assert_eq!(x, y);
    }
}

#[cfg(feature = "tsid")]
#[test]
fn record_tsid_equals_the_document_tsid() {
    for ds in [
        Dataset::k8s(Options::default().points(300).series(50)),
        Dataset::otel(Options::default().points(300).series(100)),
        Dataset::events(Options::default().points(300).series(10)),
    ] {
        let mut c = ds.tsid_computer().unwrap();
        let mut per_series = std::collections::HashMap::new();
        for r in ds.records() {
            let from_doc = c.tsid(&r.to_json()).unwrap();
            assert_eq!(r.tsid(&mut c).unwrap(), from_doc);
            assert_eq!(*per_series.entry(r.series).or_insert(from_doc), from_doc);
        }
        let distinct: HashSet<_> = per_series.values().collect();
        assert_eq!(distinct.len(), per_series.len());
    }
}

/// An event's identity: its host, timestamp and every field (what the events mode
/// fingerprints).
fn event_key(r: &Record) -> (u32, i64, Vec<(&'static str, Field)>) {
    (r.series, r.ts_millis, r.fields.clone())
}

#[test]
fn events_counts_are_exact_and_timestamps_are_shared() {
    let ds = Dataset::events(
        Options::default()
            .points(20_000)
            .series(20)
            .dup_rate(0.1)
            .late_rate(0.05),
    );
    assert_eq!(ds.kind(), DatasetKind::Events);
    assert_eq!(ds.docs_per_interval(), 200);
    let records: Vec<Record> = ds.records().collect();
    assert_eq!(records.len() as u64, ds.total_docs());
    let unique: HashSet<_> = records.iter().map(event_key).collect();
    assert_eq!(unique.len() as u64, ds.unique_docs());
    let dups = records.iter().filter(|r| r.duplicate).count() as u64;
    assert_eq!(dups, ds.total_docs() - ds.unique_docs());
    assert!(dups > 1_700 && dups < 2_300, "{dups}");
    // No natural key: many events share (host, timestamp).
    let streams: HashSet<(u32, i64)> = records.iter().map(key).collect();
    assert!(streams.len() * 3 < unique.len(), "{}", streams.len());
    for r in records.iter().take(100) {
        let doc = r.to_json();
        assert!(doc["message"].is_string(), "{doc}");
        assert!(doc["source"]["ip"].is_string());
        assert!(doc["source"]["internal"].is_boolean());
        assert!(doc["user"]["name"].is_string());
        assert!(doc["event"]["action"].is_string());
        assert!(doc["host"]["name"].is_string());
        assert_eq!(doc["@timestamp"].as_i64().map(|t| t % 1_000), Some(0));
        assert!(r.metrics.is_empty());
    }
    let schema = ds.schema();
    assert_eq!(schema.dimensions, vec!["host.name"]);
    assert!(schema.fingerprint.contains(&"message"));
    assert!(schema.fingerprint.contains(&"host.name"));
    assert!(!schema.fingerprint.contains(&"@timestamp"));
}

#[test]
fn events_are_deterministic_and_by_name() {
    let a: Vec<String> = Dataset::events(Options::default().points(2_000))
        .ndjson()
        .collect();
    let b: Vec<String> = Dataset::by_name("events", Options::default().points(2_000))
        .unwrap()
        .ndjson()
        .collect();
    assert_eq!(a, b);
    let c: Vec<String> = Dataset::events(Options::default().points(2_000).seed(9))
        .ndjson()
        .collect();
    assert_ne!(a, c);
    let d = Dataset::events(Options::default());
    assert_eq!(d.series_count(), 100);
    assert_eq!(d.unique_docs(), 600_000);
}

#[test]
fn disordered_retries_overtake_earlier_points_of_their_series() {
    let base = Options::default()
        .points(20_000)
        .series(100)
        .dup_rate(0.1)
        .late_rate(0.02);
    let plain: Vec<Record> = Dataset::k8s(base.clone()).records().collect();
    let ds = Dataset::k8s(base.clone().disorder(0.5));
    let records: Vec<Record> = ds.records().collect();
    assert_eq!(records.len() as u64, ds.total_docs());
    // The same documents, in another order: disorder moves copies, never content.
    let mut a: Vec<String> = plain.iter().map(|r| r.to_json().to_string()).collect();
    let mut b: Vec<String> = records.iter().map(|r| r.to_json().to_string()).collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
    // The first arrival of each key is the one not marked duplicate (unless the
    // original was also delayed as a late document).
    let late: HashSet<(u32, i64)> = records.iter().filter(|r| r.late).map(key).collect();
    let mut seen = HashSet::new();
    for r in records.iter().filter(|r| !late.contains(&key(r))) {
        assert_eq!(!seen.insert(key(r)), r.duplicate, "{:?}", key(r));
    }
    // Early copies arrive ahead of earlier points of their own series.
    let mut last_ts: std::collections::HashMap<u32, i64> = Default::default();
    let mut overtaken = 0;
    for r in &records {
        let last = last_ts.entry(r.series).or_insert(i64::MIN);
        if !r.duplicate && !r.late && r.ts_millis < *last {
            overtaken += 1;
        }
        *last = (*last).max(r.ts_millis);
    }
    let dups = records.iter().filter(|r| r.duplicate).count();
    assert!(overtaken * 5 > dups, "{overtaken} of {dups}");
}

/// FNV-1a of a dataset's NDJSON stream.
fn stream_hash(ds: &Dataset) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325_u64;
    for line in ds.ndjson() {
        for b in line.bytes().chain([b'\n']) {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}

#[test]
fn streams_without_disorder_are_unchanged() {
    // Hashes of the streams as generated before the disorder option existed (the
    // lookahead it needs must not change what an undisordered dataset is).
    let opts = || {
        Options::default()
            .points(4_000)
            .dup_rate(0.1)
            .late_rate(0.05)
    };
    let got = [
        stream_hash(&Dataset::k8s(opts().series(300))),
        stream_hash(&Dataset::otel(opts().series(500))),
        stream_hash(&Dataset::events(opts().series(20))),
    ];
    assert_eq!(got, GOLDEN_STREAM_HASHES);
}

const GOLDEN_STREAM_HASHES: [u64; 3] = [
    0x7029_fdfe_173f_fccf,
    0xb452_9327_5b93_8356,
    0x173e_45f9_1079_7f25,
];

#[test]
fn host_gauges_are_short_decimals_and_by_name() {
    let ds = Dataset::by_name("host", Options::default().points(5_000)).unwrap();
    assert_eq!(ds.kind(), DatasetKind::Host);
    assert_eq!(ds.series_count(), 1_000);
    assert_eq!(ds.schema().metrics.len(), 8);
    let mut gauges = 0;
    for r in ds.records() {
        assert_eq!(r.metrics.len(), 8);
        for (name, v) in &r.metrics {
            if let MetricVal::Gauge(g) = v {
                // Printed with at most 3 decimals and parsed back, the same bits.
                let text = format!("{g:.3}");
                assert_eq!(
                    text.parse::<f64>().unwrap().to_bits(),
                    g.to_bits(),
                    "{name} {g}"
                );
                assert!(g.is_finite());
                gauges += 1;
            }
        }
    }
    assert_eq!(gauges, 5 * 5_000);
    // Deterministic.
    let again: Vec<_> = ds.records().map(|r| (r.series, r.ts_millis)).collect();
    let first: Vec<_> = ds.records().map(|r| (r.series, r.ts_millis)).collect();
    assert_eq!(again, first);
}
