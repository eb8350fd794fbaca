//! Time-partitioned indices through the façade and the `tidemark` binary: creation with
//! partition, retention and rollup settings, the `partitions` listing, retries stored
//! once across partitions, `agg` from rollups equal to raw, group-by and counter rates.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use assert_cmd::Command;
use serde_json::{Value, json};
use tidemark::dedup::{EngineConfig, PartitionConfig};
use tidemark::{AggQuery, BulkItem, Index, ItemStatus, Mapping};

const MIN: i64 = 60_000;
const HOUR: i64 = 60 * MIN;
const DAY: i64 = 24 * HOUR;

fn mapping_json() -> Value {
    json!({"mappings": {"properties": {
        "host": {"type": "keyword", "time_series_dimension": true},
        "region": {"type": "keyword", "time_series_dimension": true},
        "cpu": {"type": "double", "time_series_metric": "gauge"},
        "bytes": {"type": "long", "time_series_metric": "counter"}}}})
}

fn doc(host: u32, ts: i64) -> Value {
    let k = ts / MIN;
    json!({
        "@timestamp": ts,
        "host": format!("h{host}"),
        "region": if host.is_multiple_of(2) { "eu" } else { "us" },
        "cpu": ((k * 7 + i64::from(host)) % 101) as f64 / 10.0,
        // Resets every 50 minutes.
        "bytes": (k % 50) * 1000 + i64::from(host),
    })
}

fn docs(days: i64, hosts: u32) -> Vec<Value> {
    let mut out = Vec::new();
    for d in 0..days {
        for h in 0..hosts {
            for m in (0..DAY / MIN).step_by(3) {
                out.push(doc(h, d * DAY + m * MIN));
            }
        }
    }
    out
}

fn partitioned(dir: &std::path::Path) -> Index {
    let parts = PartitionConfig::new()
        .with_width_ms(DAY)
        .with_rollups(vec![5 * MIN, HOUR]);
    Index::create_partitioned(
        dir,
        Mapping::from_value(mapping_json()).unwrap(),
        EngineConfig::new().with_refresh_rows(3000),
        parts,
    )
    .unwrap()
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

fn assert_same(rolled: &tidemark::AggResult, raw: &tidemark::AggResult) {
    assert_eq!(rolled.buckets.len(), raw.buckets.len());
    for (a, b) in rolled.buckets.iter().zip(&raw.buckets) {
        assert_eq!((a.key, a.count, a.increase), (b.key, b.count, b.increase));
        assert_eq!((a.min, a.max), (b.min, b.max));
        assert!(close(a.sum, b.sum), "{} vs {}", a.sum, b.sum);
    }
    assert_eq!(rolled.groups.len(), raw.groups.len());
    for (g, h) in rolled.groups.iter().zip(&raw.groups) {
        assert_eq!(g.key, h.key);
        for (a, b) in g.buckets.iter().zip(&h.buckets) {
            assert_eq!((a.key, a.count, a.increase), (b.key, b.count, b.increase));
            assert!(close(a.sum, b.sum));
        }
    }
}

#[test]
fn agg_from_rollups_equals_raw_with_groups_and_rates() {
    let tmp = tempfile::tempdir().unwrap();
    let mut index = partitioned(tmp.path());
    let all = docs(3, 4);
    let out = index
        .bulk(all.iter().cloned().map(BulkItem::create).collect())
        .unwrap();
    assert!(out.iter().all(|r| r.status == ItemStatus::Created));
    index.refresh().unwrap();
    index.seal(0).unwrap();
    index.seal(DAY).unwrap();
    // Retries of day 0 after newer partitions and its seal: duplicates.
    let again = index
        .bulk(all[..500].iter().cloned().map(BulkItem::create).collect())
        .unwrap();
    assert!(again.iter().all(|r| r.status == ItemStatus::Duplicate));
    for (interval, metric, group_by, from) in [
        (HOUR, "cpu", vec![], None),
        (HOUR, "bytes", vec!["region".to_owned()], None),
        (2 * HOUR, "cpu", vec!["region".to_owned()], Some(90 * MIN)),
        (10 * MIN, "bytes", vec![], Some(DAY / 2)),
        (
            DAY,
            "bytes",
            vec!["host".to_owned(), "region".to_owned()],
            None,
        ),
    ] {
        let q = AggQuery {
            metric: metric.into(),
            interval_millis: interval,
            from,
            to: Some(3 * DAY - 7 * MIN),
            group_by,
            ..AggQuery::default()
        };
        let rolled = index.aggregate(&q).unwrap();
        let raw = index
            .aggregate(&AggQuery {
                raw_only: true,
                ..q.clone()
            })
            .unwrap();
        assert!(rolled.rollup_rows > 0, "{q:?}");
        assert!(rolled.raw_rows < raw.raw_rows, "{q:?}");
        assert_eq!(raw.rollup_rows, 0);
        assert_same(&rolled, &raw);
        if metric == "bytes" {
            assert!(rolled.buckets.iter().all(|b| b.increase.is_some()));
        }
    }
    // Rates: 4 hosts, +1000 every minute, a reset every 50 minutes (to `host`).
    let hourly = index
        .aggregate(&AggQuery {
            metric: "bytes".into(),
            interval_millis: HOUR,
            group_by: vec!["region".into()],
            ..AggQuery::default()
        })
        .unwrap();
    assert_eq!(hourly.groups.len(), 2);
    assert!(hourly.series.is_empty());
    let g = &hourly.groups[0];
    assert_eq!(g.key[0].0, "region");
    assert_eq!(g.series, 2);
    assert!(g.buckets[3].rate().unwrap() > 0.0);
    // A late point in sealed day 0 moves the answer, and rollups still equal raw.
    let late = json!({"@timestamp": 5 * HOUR + MIN, "host": "h1", "region": "us",
                      "cpu": 99.0, "bytes": 5});
    let out = index.bulk(vec![BulkItem::create(late)]).unwrap();
    assert_eq!(out[0].status, ItemStatus::Created);
    let q = AggQuery {
        metric: "cpu".into(),
        interval_millis: HOUR,
        ..AggQuery::default()
    };
    let rolled = index.aggregate(&q).unwrap();
    let raw = index
        .aggregate(&AggQuery {
            raw_only: true,
            ..q
        })
        .unwrap();
    assert_same(&rolled, &raw);
    assert_eq!(rolled.buckets[5].max, 99.0);
    assert!(
        index
            .aggregate(&AggQuery {
                metric: "cpu".into(),
                interval_millis: HOUR,
                group_by: vec!["cpu".into()],
                ..AggQuery::default()
            })
            .is_err()
    );
}

fn tm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tidemark"))
}

fn run(args: &[&str], stdin: Option<String>, code: i32) -> String {
    let mut cmd = tm();
    cmd.args(args);
    if let Some(s) = stdin {
        cmd.write_stdin(s);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        out.status.code(),
        Some(code),
        "tidemark {args:?}\n{stdout}\n{stderr}"
    );
    stdout
}

#[test]
fn cli_creates_lists_and_aggregates_a_partitioned_index() {
    let tmp = tempfile::tempdir().unwrap();
    let mapping = tmp.path().join("mapping.json");
    std::fs::write(&mapping, mapping_json().to_string()).unwrap();
    let dir = tmp.path().join("idx");
    let dir = dir.to_str().unwrap();
    let m = mapping.to_str().unwrap();
    run(
        &[
            "create",
            dir,
            "--mapping",
            m,
            "--partition",
            "1d",
            "--retention",
            "2d",
            "--rollups",
            "5m,1h",
            "--late-window",
            "3d",
        ],
        None,
        0,
    );
    let lines: String = docs(4, 2).iter().map(|d| format!("{d}\n")).collect();
    let summary = run(&["ingest", dir, "--json"], Some(lines.clone()), 0);
    let summary: Value = serde_json::from_str(&summary).unwrap();
    assert_eq!(summary["created"], json!(4 * 2 * 480));
    // Days 0..2 sealed by the clock (day 3 is the newest); day 0 ends 3 days before the
    // newest point, past the 2-day retention: dropped.
    let listing = run(&["partitions", dir, "--json"], None, 0);
    let parts: Vec<Value> = listing
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let starts: Vec<i64> = parts
        .iter()
        .map(|p| p["start_ms"].as_i64().unwrap())
        .collect();
    assert_eq!(starts, vec![DAY, 2 * DAY, 3 * DAY], "{listing}");
    assert_eq!(parts[0]["sealed"], json!(true));
    assert_eq!(parts[2]["sealed"], json!(false));
    assert_eq!(parts[0]["rollups"][1]["resolution"], json!("1h"));
    assert_eq!(parts[0]["rollups"][1]["rows"], json!(2 * 24));
    let text = run(&["partitions", dir], None, 0);
    assert!(
        text.contains("dropped by retention: 1 partitions, 960 rows"),
        "{text}"
    );
    let stats: Value = serde_json::from_str(&run(&["stats", dir, "--json"], None, 0)).unwrap();
    assert_eq!(stats["partitions"], json!(3));
    assert_eq!(stats["dropped_rows"], json!(960));
    assert_eq!(stats["documents"], json!(3 * 960));
    // The same stream again: the dropped day is refused as too old, the rest duplicates.
    let summary = run(&["ingest", dir, "--json"], Some(lines), 1);
    let summary: Value = serde_json::from_str(&summary).unwrap();
    assert_eq!(summary["created"], json!(0));
    assert_eq!(summary["duplicates"], json!(3 * 960));
    assert_eq!(summary["errors"], json!(960));
    assert!(
        summary["first_errors"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("too old"),
        "{summary}"
    );
    // agg from rollups equals raw; grouped output has groups, not series.
    let agg = |extra: &[&str]| -> Value {
        let mut args = vec![
            "agg",
            dir,
            "--metric",
            "cpu",
            "--interval",
            "1h",
            "--group-by",
            "region",
        ];
        args.extend_from_slice(extra);
        serde_json::from_str(&run(&args, None, 0)).unwrap()
    };
    let rolled = agg(&[]);
    let raw = agg(&["--raw"]);
    assert_eq!(rolled["groups"].as_array().unwrap().len(), 1 + 1);
    assert!(rolled["series"].as_array().unwrap().is_empty());
    assert!(rolled["read"]["rollup_rows"].as_u64().unwrap() > 0);
    assert_eq!(raw["read"]["rollup_rows"], json!(0));
    let strip = |v: &Value| -> Vec<(i64, u64)> {
        v["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| (b["key"].as_i64().unwrap(), b["count"].as_u64().unwrap()))
            .collect()
    };
    assert_eq!(strip(&rolled), strip(&raw));
    // An unpartitioned index still opens and says so.
    let plain = tmp.path().join("plain");
    run(
        &["create", plain.to_str().unwrap(), "--mapping", m],
        None,
        0,
    );
    let text = run(&["partitions", plain.to_str().unwrap()], None, 0);
    assert!(text.contains("not partitioned"), "{text}");
    let out = tm()
        .args([
            "create",
            tmp.path().join("bad").to_str().unwrap(),
            "--mapping",
            m,
            "--rollups",
            "5m",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn dimension_index_answers_terms_prefixes_regexes_and_negations() {
    use tidemark::{Filter, Query, TimeRange};
    let tmp = tempfile::tempdir().unwrap();
    let mut index = partitioned(tmp.path());
    // 300 hosts over two days; the second day stays buffered for a while.
    let docs_of = |day: i64| -> Vec<BulkItem> {
        (0..300u32)
            .map(|h| BulkItem::create(doc(h, day * DAY + i64::from(h) * 1000)))
            .collect()
    };
    index.bulk(docs_of(0)).unwrap();
    index.refresh().unwrap();
    index.bulk(docs_of(1)).unwrap();
    let series = |matchers: Vec<Filter>| -> usize {
        index
            .aggregate(&AggQuery {
                metric: "cpu".into(),
                interval_millis: DAY,
                matchers,
                ..AggQuery::default()
            })
            .unwrap()
            .series
            .len()
    };
    let m = |t: &str| Filter::parse_matcher(t).unwrap();
    assert_eq!(series(vec![m("host=h17")]), 1);
    assert_eq!(series(vec![m("region=eu")]), 150);
    assert_eq!(series(vec![m("host^=h1")]), 1 + 10 + 100);
    assert_eq!(series(vec![m("host=~h2[0-9]")]), 10);
    assert_eq!(series(vec![m("host=~h2[0-9]"), m("region!=eu")]), 5);
    assert_eq!(series(vec![m("host!~h.*")]), 0);
    assert!(
        index
            .aggregate(&AggQuery {
                metric: "cpu".into(),
                interval_millis: DAY,
                matchers: vec![m("zone!=a")],
                ..AggQuery::default()
            })
            .is_err()
    );
    assert_eq!(
        series(vec![Filter::Terms {
            field: "host".into(),
            values: vec!["h1".into(), "h2".into(), "nope".into()]
        }]),
        2
    );
    // Search goes through the same index: both days, buffered and stored.
    let hits = index
        .search(&Query {
            matchers: vec![m("host=~h29[0-9]")],
            ..Query::default()
        })
        .unwrap();
    assert_eq!(hits.len(), 20);
    assert!(Filter::parse_matcher("=x").is_err());
    assert!(
        index
            .search(&Query {
                matchers: vec![m("host=~(")],
                ..Query::default()
            })
            .is_err()
    );
    // Labels and values, in a time range.
    assert_eq!(
        index.labels(TimeRange::ALL).unwrap(),
        vec!["host", "region"]
    );
    let values = index.label_values("region", TimeRange::ALL).unwrap();
    assert_eq!(values, vec![("eu".to_owned(), 300), ("us".to_owned(), 300)]);
    let day1 = index
        .label_values("region", TimeRange::half_open(Some(DAY), None))
        .unwrap();
    assert_eq!(day1, vec![("eu".to_owned(), 150), ("us".to_owned(), 150)]);
    assert!(
        index
            .labels(TimeRange::half_open(Some(5 * DAY), None))
            .unwrap()
            .is_empty()
    );
    assert!(index.label_values("cpu", TimeRange::ALL).is_err());
}
