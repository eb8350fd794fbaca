//! Reading back what was exported, through the public API: an index with retention
//! exports three sealed days, retention then removes the oldest, and the lake's copy of
//! that day, restored into a fresh index of the same mapping (a local cache), answers
//! aggregations and searches exactly as the index did before the eviction.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tidemark::dedup::{EngineConfig, PartitionConfig};
use tidemark::{AggQuery, BulkItem, Index, Mapping, Query};
use tidemark_lake::{ExportOptions, LakeStore, export, lake_partitions, restore};

const MIN: i64 = 60_000;
const DAY: i64 = 24 * 60 * MIN;
const HOSTS: u32 = 4;

fn mapping() -> Mapping {
    Mapping::from_value(json!({"mappings": {"properties": {
        "host": {"type": "keyword", "time_series_dimension": true},
        "rack": {"type": "long", "time_series_dimension": true},
        "addr": {"type": "ip", "time_series_dimension": true},
        "k8s": {"properties": {"pod": {"properties": {
            "cpu": {"type": "double", "time_series_metric": "gauge"}}}}},
        "temp": {"type": "double", "time_series_metric": "gauge"},
        "bytes": {"type": "long", "time_series_metric": "counter"},
        "status": {"type": "keyword"},
        "up": {"type": "boolean"}}}}))
    .unwrap()
}

fn doc(host: u32, ts: i64) -> Value {
    let k = ts / MIN;
    let mut d = json!({
        "@timestamp": ts,
        "host": format!("h{host}"),
        "rack": i64::from(host % 2) - 1,
        "addr": format!("10.0.0.{host}"),
        "k8s": {"pod": {"cpu": ((k * 7 + i64::from(host)) % 101) as f64 / 10.0 + 0.01}},
        "bytes": k * 1000 + i64::from(host),
        "status": if k % 3 == 0 { "ok" } else { "degraded" },
        "up": k % 2 == 0,
    });
    if k % 4 == 0 {
        d["temp"] = json!(20.0 + (k % 13) as f64 / 4.0);
    }
    d
}

fn partitions(retention: Option<i64>) -> PartitionConfig {
    let p = PartitionConfig::new()
        .with_width_ms(DAY)
        .with_rollups(vec![60 * MIN]);
    match retention {
        Some(r) => p.with_retention_ms(Some(r)),
        None => p,
    }
}

/// Per (tsid, hour) of `[from, to)`: count, min, max, sum of `metric` from the index's
/// raw rows.
fn answers(index: &Index, metric: &str, from: i64, to: i64) -> BTreeMap<(Vec<u8>, i64), Vec<f64>> {
    let result = index
        .aggregate(&AggQuery {
            metric: metric.to_owned(),
            interval_millis: 60 * MIN,
            from: Some(from),
            to: Some(to),
            raw_only: true,
            ..AggQuery::default()
        })
        .unwrap();
    let mut out = BTreeMap::new();
    for s in &result.series {
        for b in &s.buckets {
            if b.count > 0 {
                out.insert(
                    (s.tsid.as_bytes().to_vec(), b.key),
                    vec![b.count as f64, b.min, b.max, b.sum],
                );
            }
        }
    }
    out
}

/// The documents of `[from, to)`, by `_id`, as a search returns them.
fn documents(index: &Index, from: i64, to: i64) -> BTreeMap<String, Value> {
    index
        .search(&Query {
            from: Some(from),
            to: Some(to),
            ..Query::default()
        })
        .unwrap()
        .into_iter()
        .map(|d| (d["_id"].as_str().unwrap().to_owned(), d))
        .collect()
}

#[test]
fn an_evicted_partition_restored_from_the_lake_answers_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    // Retention of two days: the fourth day's points evict the first.
    let mut index = Index::create_partitioned(
        dir.path().join("index"),
        mapping(),
        EngineConfig::new().with_refresh_rows(1000),
        partitions(Some(2 * DAY)),
    )
    .unwrap();
    let docs = (0..3)
        .flat_map(|d| {
            (0..HOSTS).flat_map(move |h| {
                (0..DAY / MIN)
                    .step_by(5)
                    .map(move |m| BulkItem::create(doc(h, d * DAY + m * MIN)))
            })
        })
        .collect();
    assert!(
        index
            .bulk(docs)
            .unwrap()
            .iter()
            .all(|o| o.http_status() == 201)
    );
    for d in 0..3 {
        index.seal(d * DAY).unwrap();
    }
    let day0 = (0, DAY);
    let before: Vec<_> = ["k8s.pod.cpu", "temp", "bytes"]
        .iter()
        .map(|m| answers(&index, m, day0.0, day0.1))
        .collect();
    let before_docs = documents(&index, day0.0, day0.1);
    assert_eq!(before_docs.len() as u64, u64::from(HOSTS) * 288);
    export(&index, &lake, &ExportOptions::default(), &mut |_| {}).unwrap();

    // A point of day 4 moves the high-water mark: retention drops day 0.
    let late = index
        .bulk(vec![BulkItem::create(doc(0, 3 * DAY + 5 * MIN))])
        .unwrap();
    assert_eq!(late[0].http_status(), 201);
    index.maintain().unwrap();
    assert!(
        documents(&index, day0.0, day0.1).is_empty(),
        "day 0 was evicted"
    );

    // The lake still holds it.
    let store = LakeStore::local(&lake).unwrap();
    let held = lake_partitions(&store).unwrap();
    assert_eq!(
        held.iter()
            .map(|p| (p.start_ms, p.rows))
            .collect::<Vec<_>>(),
        [0, DAY, 2 * DAY].map(|s| (s, u64::from(HOSTS) * 288))
    );
    assert!(
        held.iter()
            .all(|p| p.generation.is_some() && p.files.len() == 1)
    );

    // Restored into a cache index of the same mapping (no retention there).
    let mut cache = Index::create_partitioned(
        dir.path().join("cache"),
        Mapping::from_value(index.mapping().source().clone()).unwrap(),
        EngineConfig::new(),
        partitions(None),
    )
    .unwrap();
    let mut seen = 0;
    let report = restore(&store, &[0], &mut cache, &mut |_, n| seen = n).unwrap();
    assert_eq!(report.partitions, [(0, u64::from(HOSTS) * 288)]);
    assert_eq!(
        (report.created, report.duplicates),
        (u64::from(HOSTS) * 288, 0)
    );
    assert_eq!(seen, u64::from(HOSTS) * 288);
    // Sealed as it was: one merged segment with its rollups.
    let sealed = cache.sealed_partitions().unwrap();
    assert_eq!(sealed.len(), 1);
    assert_eq!(sealed[0].rows(), u64::from(HOSTS) * 288);
    assert_eq!(sealed[0].rollups().len(), 1);
    for (m, b) in ["k8s.pod.cpu", "temp", "bytes"].iter().zip(&before) {
        assert_eq!(&answers(&cache, m, day0.0, day0.1), b, "{m}");
    }
    assert_eq!(documents(&cache, day0.0, day0.1), before_docs);
    // The rollups the seal rebuilt answer as the raw rows do.
    let rolled = cache
        .aggregate(&AggQuery {
            metric: "bytes".to_owned(),
            interval_millis: 60 * MIN,
            from: Some(day0.0),
            to: Some(day0.1),
            ..AggQuery::default()
        })
        .unwrap();
    assert!(rolled.rollup_rows > 0 && rolled.raw_rows == 0);
    let total: u64 = rolled
        .series
        .iter()
        .flat_map(|s| s.buckets.iter().map(|b| b.count))
        .sum();
    assert_eq!(total, u64::from(HOSTS) * 288);

    // Again: every row is there already.
    let again = restore(&store, &[0], &mut cache, &mut |_, _| {}).unwrap();
    assert_eq!(
        (again.created, again.duplicates),
        (0, u64::from(HOSTS) * 288)
    );
}

#[test]
fn a_restore_refuses_an_unknown_partition_and_another_mapping() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    let mut index = Index::create_partitioned(
        dir.path().join("index"),
        mapping(),
        EngineConfig::new(),
        partitions(None),
    )
    .unwrap();
    let docs = (0..HOSTS)
        .map(|h| BulkItem::create(doc(h, 10 * MIN)))
        .collect();
    index.bulk(docs).unwrap();
    index.seal(0).unwrap();
    export(&index, &lake, &ExportOptions::default(), &mut |_| {}).unwrap();
    let store = LakeStore::local(&lake).unwrap();

    let fresh = |name: &str, mapping: Mapping| {
        Index::create_partitioned(
            dir.path().join(name),
            mapping,
            EngineConfig::new(),
            partitions(None),
        )
        .unwrap()
    };
    let mut cache = fresh("cache", mapping());
    let e = restore(&store, &[DAY], &mut cache, &mut |_, _| {}).unwrap_err();
    assert!(
        e.to_string().contains("no sealed partition starts at"),
        "{e}"
    );
    // `rack` a keyword instead of a long: other series ids, refused.
    let mut other = mapping().source().clone();
    other["mappings"]["properties"]["rack"]["type"] = json!("keyword");
    let mut wrong = fresh("wrong", Mapping::from_value(other).unwrap());
    let e = restore(&store, &[0], &mut wrong, &mut |_, _| {}).unwrap_err();
    assert!(
        matches!(e, tidemark_lake::Error::RestoreMismatch { .. }),
        "{e}"
    );
    // A single-engine index has no partitions to restore into.
    let mut single = Index::create(dir.path().join("single"), mapping()).unwrap();
    assert!(matches!(
        restore(&store, &[0], &mut single, &mut |_, _| {}),
        Err(tidemark_lake::Error::NotPartitioned { .. })
    ));
}

#[test]
fn a_lake_file_downloads_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    std::fs::create_dir_all(lake.join("partition=0")).unwrap();
    let bytes: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(lake.join("partition=0/f.parquet"), &bytes).unwrap();
    let store = LakeStore::open(&format!("file://{}", lake.display())).unwrap();
    let dest = dir.path().join("copy");
    store.download("partition=0/f.parquet", &dest).unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), bytes);
    assert!(store.download("partition=0/none.parquet", &dest).is_err());
    assert_eq!(
        store.local_path("partition=0/f.parquet").as_deref(),
        Some(lake.join("partition=0/f.parquet").as_path())
    );
}
