//! The Parquet lake through the server: `POST /<index>/_tidemark/export` into
//! `--lake-dir`, exactly once, never outside it; and `--lake-auto`, which exports newly
//! sealed partitions without a call.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{TestServer, send};

/// 2025-01-01T00:00:00Z: the first of the three days.
const T0: i64 = 1_735_689_600_000;
const DAY: i64 = 86_400_000;
const HOUR: i64 = 3_600_000;
/// Documents on the three sealed days: two hosts, one point an hour.
const DOCS: u64 = 2 * 72;

/// Creates `name`, partitioned by day with a one-minute seal grace, and writes two hosts
/// every hour over three days, then one point on the fourth: the high-water mark is past
/// the third day by more than the grace, so the server's maintenance (every 10 s) seals
/// the three days.
fn load(s: &TestServer, name: &str) {
    let body = json!({
        "settings": {"index": {"tidemark": {"partitions": {"width": "1d", "seal_grace": "1m"}}}},
        "mappings": {"properties": {
            "@timestamp": {"type": "date"},
            "host": {"type": "keyword", "time_series_dimension": true},
            "cpu": {"type": "double", "time_series_metric": "gauge"}}}
    });
    let (status, resp) = s.put_json(&format!("/{name}"), &body);
    assert_eq!(status, 200, "{resp}");
    let mut bulk = Vec::new();
    for h in 0..72 {
        for host in ["a", "b"] {
            writeln!(bulk, "{{\"create\":{{}}}}").unwrap();
            writeln!(
                bulk,
                "{{\"@timestamp\":{},\"host\":\"{host}\",\"cpu\":{}}}",
                T0 + h * HOUR,
                h as f64 / 100.0
            )
            .unwrap();
        }
    }
    writeln!(bulk, "{{\"create\":{{}}}}").unwrap();
    writeln!(
        bulk,
        "{{\"@timestamp\":{},\"host\":\"a\",\"cpu\":1.0}}",
        T0 + 3 * DAY + HOUR
    )
    .unwrap();
    let (status, resp) = s.bulk(&format!("/{name}/_bulk"), &bulk);
    assert_eq!(status, 200, "{resp}");
    assert_eq!(resp["errors"], false, "{resp}");
}

fn export(s: &TestServer, name: &str, body: &Value) -> (u16, Value) {
    s.post_json(&format!("/{name}/_tidemark/export"), body)
}

/// Polls until `ready` says yes (at most a minute: the maintenance runs every 10 s).
fn poll<T>(what: &str, mut ready: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = ready() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The rows the Delta log's live `add` actions record (`numRecords`), and their files.
fn delta_rows(lake: &Path) -> (u64, Vec<String>) {
    let log = lake.join("_delta_log");
    let mut names: Vec<_> = std::fs::read_dir(&log)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    let (mut rows, mut files) = (0, Vec::new());
    for n in names {
        for line in std::fs::read_to_string(log.join(n)).unwrap().lines() {
            let action: Value = serde_json::from_str(line).unwrap();
            if let Some(add) = action.get("add") {
                let stats: Value = serde_json::from_str(add["stats"].as_str().unwrap()).unwrap();
                rows += stats["numRecords"].as_u64().unwrap();
                files.push(add["path"].as_str().unwrap().to_owned());
            }
        }
    }
    (rows, files)
}

/// Files per day among `files` (`partition=…/part-….parquet`): a day of two series is
/// one file (its rows ordered by shard), so this is 1.
fn files_per_day(files: &[String]) -> usize {
    let days: std::collections::BTreeSet<&str> = files
        .iter()
        .map(|f| {
            let (day, name) = f.split_once('/').unwrap();
            assert!(
                day.starts_with("partition=") && name.starts_with("part-"),
                "{f}"
            );
            day
        })
        .collect();
    assert_eq!(days.len(), files.len(), "{files:?}");
    1
}

fn assert_parquet(lake: &Path, files: &[String]) {
    for f in files {
        let bytes = std::fs::read(lake.join(f)).unwrap();
        assert!(
            bytes.starts_with(b"PAR1") && bytes.ends_with(b"PAR1"),
            "{f}"
        );
    }
}

#[test]
fn export_writes_the_sealed_days_once_and_only_inside_the_lake_dir() {
    let dir = tempfile::tempdir().unwrap();
    let lakes = dir.path().join("lakes");
    let s = TestServer::start(dir.path(), &["--lake-dir", lakes.to_str().unwrap()]);
    load(&s, "cpu");

    // The three days once sealed (the fourth stays active: never exported).
    let report = poll("the three days to be sealed", || {
        let (status, r) = export(&s, "cpu", &json!({}));
        assert_eq!(status, 200, "{r}");
        (!r["partitions"].as_array().unwrap().is_empty()).then_some(r)
    });
    let lake = lakes.join("cpu");
    assert_eq!(report["committed"], 3, "{report}");
    assert_eq!(report["skipped"], 0, "{report}");
    assert_eq!(report["rows"], DOCS, "{report}");
    let starts: Vec<i64> = report["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["start_ms"].as_i64().unwrap())
        .collect();
    assert_eq!(starts, vec![T0, T0 + DAY, T0 + 2 * DAY]);
    for p in report["partitions"].as_array().unwrap() {
        assert_eq!(p["rows"], 48, "{p}");
        assert_eq!(p["table"], ".");
    }
    assert_eq!(
        Path::new(report["lake"].as_str().unwrap()),
        lake.canonicalize().unwrap()
    );
    let (rows, files) = delta_rows(&lake);
    // One file per day, holding both hosts' series.
    assert_eq!(rows, DOCS);
    assert_eq!(report["files"], files.len(), "{report}");
    assert!(files.len() == 3 * files_per_day(&files), "{files:?}");
    assert_parquet(&lake, &files);
    for v in 0..3 {
        assert!(lake.join(format!("_delta_log/{v:020}.json")).is_file());
    }

    // Again: everything is already in the lake.
    let (status, again) = export(&s, "cpu", &json!({}));
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        (&again["committed"], &again["skipped"], &again["rows"]),
        (&json!(0), &json!(3), &json!(0)),
        "{again}"
    );
    assert!(!lake.join(format!("_delta_log/{:020}.json", 3)).exists());
    assert_eq!(delta_rows(&lake).0, DOCS);

    // One partition, named in the query string, to another lake inside the root.
    let (status, one) = send(
        "POST",
        &s.url("/cpu/_tidemark/export?to=one/day&partition=2025-01-02T00:00:00Z"),
        None,
        &[],
    );
    assert_eq!(status, 200, "{one}");
    assert_eq!((&one["committed"], &one["rows"]), (&json!(1), &json!(48)));
    let (rows, files) = delta_rows(&lakes.join("one/day"));
    assert_eq!((rows, files_per_day(&files)), (48, files.len()));
    assert_parquet(&lakes.join("one/day"), &files);

    // Never outside the lake root: absolute paths elsewhere, `..`, the root itself.
    let outside = dir.path().join("outside");
    for to in [
        outside.to_str().unwrap(),
        "../outside",
        "a/../../outside",
        lakes.to_str().unwrap(),
        "/",
    ] {
        let (status, resp) = export(&s, "cpu", &json!({"to": to}));
        assert_eq!(status, 400, "{to}: {resp}");
        assert!(
            resp["error"]["reason"]
                .as_str()
                .unwrap()
                .contains("lake_dir"),
            "{resp}"
        );
    }
    assert!(!outside.exists());
    // A partition that is not sealed, a bad body, an index without partitions, a
    // missing index.
    let (status, resp) = export(&s, "cpu", &json!({"partition": T0 + 3 * DAY}));
    assert_eq!(status, 400, "{resp}");
    let (status, resp) = export(&s, "cpu", &json!({"colour": "red"}));
    assert_eq!(status, 400, "{resp}");
    let (status, resp) = s.put_json(
        "/flat",
        &json!({"mappings": {"properties": {
            "host": {"type": "keyword", "time_series_dimension": true},
            "cpu": {"type": "double", "time_series_metric": "gauge"}}}}),
    );
    assert_eq!(status, 200, "{resp}");
    let (status, resp) = export(&s, "flat", &json!({}));
    assert_eq!(status, 400, "{resp}");
    assert!(!lakes.join("flat/_delta_log").exists());
    let (status, _) = export(&s, "nope", &json!({}));
    assert_eq!(status, 404);

    // Counted on /metrics.
    let (_, metrics) = s.get("/metrics");
    let text = metrics.as_str().unwrap_or_default().to_owned();
    assert!(
        text.contains("tidemark_lake_partitions_exported_total{mode=\"request\"} 4"),
        "{text}"
    );
}

#[test]
fn without_a_lake_dir_the_export_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    load(&s, "cpu");
    let (status, resp) = export(&s, "cpu", &json!({"to": "/tmp"}));
    assert_eq!(status, 400, "{resp}");
    assert!(resp.to_string().contains("--lake-dir"), "{resp}");
}

#[test]
fn lake_auto_exports_sealed_partitions_without_a_call() {
    let dir = tempfile::tempdir().unwrap();
    let lakes = dir.path().join("lakes");
    let config = dir.path().join("tidemark.toml");
    std::fs::write(&config, "lake_interval_secs = 1\n").unwrap();
    let s = TestServer::start(
        dir.path(),
        &[
            "--lake-dir",
            lakes.to_str().unwrap(),
            "--lake-auto",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    load(&s, "cpu");
    let lake = lakes.join("cpu");
    poll("the automatic export", || {
        lake.join(format!("_delta_log/{:020}.json", 2))
            .is_file()
            .then_some(())
    });
    let (rows, files) = delta_rows(&lake);
    assert_eq!((rows, files.len()), (DOCS, 3 * files_per_day(&files)));
    assert_parquet(&lake, &files);
    // Nothing more comes of further passes; a call finds everything there.
    std::thread::sleep(Duration::from_secs(3));
    assert!(!lake.join(format!("_delta_log/{:020}.json", 3)).exists());
    let (status, again) = export(&s, "cpu", &json!({}));
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        (&again["committed"], &again["skipped"]),
        (&json!(0), &json!(3))
    );
    let (_, metrics) = s.get("/metrics");
    let text = metrics.as_str().unwrap_or_default().to_owned();
    assert!(
        text.contains("tidemark_lake_partitions_exported_total{mode=\"auto\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("tidemark_lake_export_failures_total{mode=\"auto\"} 0"),
        "{text}"
    );
}

/// A search with hits and an hourly histogram (read from the hourly rollups where a
/// day is sealed) over `[from, to)`, and a PromQL range query over the same time: the
/// answers, `took` left out.
fn answers(s: &TestServer, from: i64, to: i64) -> Vec<Value> {
    let (status, mut search) = s.post_json(
        "/cpu/_search",
        &json!({
            "size": 200,
            "sort": [{"@timestamp": "asc"}],
            "query": {"range": {"@timestamp": {"gte": from, "lt": to}}},
            "aggs": {"hourly": {
                "date_histogram": {"field": "@timestamp", "fixed_interval": "1h"},
                "aggs": {"top": {"max": {"field": "cpu"}}, "mean": {"avg": {"field": "cpu"}}}}}
        }),
    );
    assert_eq!(status, 200, "{search}");
    search.as_object_mut().unwrap().remove("took");
    let (status, prom) = s.get(&format!(
        "/api/v1/query_range?query=max_over_time(cpu%7Bhost%3D%22a%22%7D%5B2h%5D)&start={}&end={}&step=3600",
        from / 1000,
        (to - HOUR) / 1000
    ));
    assert_eq!(status, 200, "{prom}");
    assert_eq!(prom["status"], "success", "{prom}");
    vec![search, prom["data"].clone()]
}

fn metric(s: &TestServer, line: &str) -> f64 {
    let (_, metrics) = s.get("/metrics");
    let text = metrics.as_str().unwrap_or_default().to_owned();
    text.lines()
        .find_map(|l| l.strip_prefix(line)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {line} in {text}"))
}

#[test]
fn queries_over_time_retention_removed_read_the_lakes_copy() {
    let dir = tempfile::tempdir().unwrap();
    let lakes = dir.path().join("lakes");
    let lake_dir = lakes.to_str().unwrap().to_owned();
    // A budget of one byte: every copy but the current query's is evicted.
    let mut s = TestServer::start(
        dir.path(),
        &["--lake-dir", &lake_dir, "--lake-cache-bytes", "1"],
    );
    let body = json!({
        "settings": {"index": {"tidemark": {"partitions": {
            "width": "1d", "seal_grace": "1m", "retention": "2d", "rollups": ["1h"]}}}},
        "mappings": {"properties": {
            "@timestamp": {"type": "date"},
            "host": {"type": "keyword", "time_series_dimension": true},
            "cpu": {"type": "double", "time_series_metric": "gauge"}}}
    });
    let (status, resp) = s.put_json("/cpu", &body);
    assert_eq!(status, 200, "{resp}");
    let bulk_of = |points: &[(i64, &str, f64)]| {
        let mut bulk = Vec::new();
        for (ts, host, cpu) in points {
            writeln!(bulk, "{{\"create\":{{}}}}").unwrap();
            writeln!(
                bulk,
                "{{\"@timestamp\":{ts},\"host\":\"{host}\",\"cpu\":{cpu}}}"
            )
            .unwrap();
        }
        bulk
    };
    let points: Vec<(i64, &str, f64)> = (0..72)
        .flat_map(|h| {
            ["a", "b"].map(|host| (T0 + h * HOUR, host, (h * 7 % 50) as f64 / 10.0 + 0.25))
        })
        .collect();
    let (status, resp) = s.bulk("/cpu/_bulk", &bulk_of(&points));
    assert_eq!(status, 200, "{resp}");
    assert_eq!(resp["errors"], false, "{resp}");

    // Days 0 and 1 sealed (day 2 holds the high-water mark) and exported.
    poll("days 0 and 1 to be exported", || {
        let (status, r) = export(&s, "cpu", &json!({}));
        assert_eq!(status, 200, "{r}");
        (r["committed"].as_u64().unwrap() + r["skipped"].as_u64().unwrap() >= 2).then_some(())
    });
    let day = |d: i64| (T0 + d * DAY, T0 + (d + 1) * DAY);
    let before: Vec<Vec<Value>> = (0..2).map(|d| answers(&s, day(d).0, day(d).1)).collect();
    let both_before = answers(&s, day(0).0, day(1).1);
    assert_eq!(
        before[0][0]["hits"]["hits"].as_array().unwrap().len(),
        48,
        "{}",
        before[0][0]
    );

    // A point on day 4 moves the high-water mark: retention removes days 0 and 1.
    let (status, resp) = s.bulk("/cpu/_bulk", &bulk_of(&[(T0 + 4 * DAY + HOUR, "a", 1.0)]));
    assert_eq!(status, 200, "{resp}");
    poll("retention to remove days 0 and 1", || {
        let (_, st) = s.get("/cpu/_stats");
        (st["indices"]["cpu"]["tidemark"]["dropped_partitions"] == 2).then_some(())
    });
    let copies = dir.path().join("data/lake-cache/cpu");
    // A search without a time range reads what the index holds (day 2 and the point).
    let (status, all) = s.post_json("/cpu/_search", &json!({"size": 0}));
    assert_eq!(status, 200, "{all}");
    assert_eq!(all["hits"]["total"]["value"], 49, "{all}");
    assert!(!copies.exists(), "nothing read back yet");

    // Each day answers as before, read back from the lake.
    assert_eq!(answers(&s, day(0).0, day(0).1), before[0]);
    assert!(copies.join(T0.to_string()).join("RESTORED").is_file());
    assert_eq!(answers(&s, day(1).0, day(1).1), before[1]);
    // Day 1's search evicted day 0's copy (budget), then its PromQL windows, which reach
    // into day 0, restored it: both are there. A search of day 1 alone evicts it again,
    // and the next query of day 0 restores it once more.
    assert!(copies.join(T0.to_string()).exists());
    let (status, one) = s.post_json(
        "/cpu/_search",
        &json!({"size": 0, "query": {"range": {"@timestamp": {"gte": day(1).0, "lt": day(1).1}}}}),
    );
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["hits"]["total"]["value"], 48, "{one}");
    assert!(!copies.join(T0.to_string()).exists());
    assert_eq!(metric(&s, "tidemark_lake_readback_evictions_total"), 2.0);
    assert_eq!(answers(&s, day(0).0, day(1).1), both_before);
    assert_eq!(
        metric(
            &s,
            "tidemark_lake_readback_partitions_total{how=\"restored\"}"
        ),
        4.0
    );
    assert_eq!(metric(&s, "tidemark_lake_readback_failures_total"), 0.0);
    // Kept time is not affected: day 2 is still the index's own.
    let (_, kept) = s.post_json(
        "/cpu/_search",
        &json!({"size": 0, "query": {"range": {"@timestamp": {"gte": day(2).0, "lt": day(2).1}}}}),
    );
    assert_eq!(kept["hits"]["total"]["value"], 48, "{kept}");
    // Writes into removed time are still refused, copies or not.
    let (status, resp) = s.bulk("/cpu/_bulk", &bulk_of(&[(T0 + HOUR, "c", 1.0)]));
    assert_eq!(status, 200, "{resp}");
    assert_eq!(resp["errors"], true, "{resp}");

    // After a restart the finished copies are attached again without reading the lake.
    s.terminate();
    let s = TestServer::start(dir.path(), &["--lake-dir", &lake_dir]);
    assert_eq!(answers(&s, day(0).0, day(1).1), both_before);
    assert_eq!(
        metric(
            &s,
            "tidemark_lake_readback_partitions_total{how=\"reattached\"}"
        ),
        2.0
    );
    assert_eq!(
        metric(
            &s,
            "tidemark_lake_readback_partitions_total{how=\"restored\"}"
        ),
        0.0
    );
    // Deleting the index removes its copies.
    let (status, _) = send("DELETE", &s.url("/cpu"), None, &[]);
    assert_eq!(status, 200);
    assert!(!copies.exists());
}
