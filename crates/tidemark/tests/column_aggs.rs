//! Aggregations read by column (`Index::query` with no hits and a filter on time and
//! dimensions, answered from `SeriesReader` slices a series at a time) equal the same
//! aggregations read row by row (the same request asking for one hit, which takes the
//! row path): totals, buckets, counts and values, over segments, the buffer, replaced
//! and deleted documents, a sparse metric, and every kind of filter the column path
//! takes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::json;
use tidemark::{
    Agg, BulkItem, CalendarUnit, Filter, Index, Interval, Mapping, MetricKind, SearchRequest,
};

const MIN: i64 = 60_000;
const T0: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

fn metric(kind: MetricKind, field: &str) -> Agg {
    Agg::Metric {
        kind,
        field: field.into(),
    }
}

fn leaves() -> Vec<(String, Agg)> {
    vec![
        ("avg_cpu".into(), metric(MetricKind::Avg, "cpu")),
        ("max_cpu".into(), metric(MetricKind::Max, "cpu")),
        ("sum_bytes".into(), metric(MetricKind::Sum, "bytes")),
        ("n_bytes".into(), metric(MetricKind::ValueCount, "bytes")),
        ("dcs".into(), metric(MetricKind::Cardinality, "dc")),
        ("first".into(), metric(MetricKind::Min, "@timestamp")),
    ]
}

fn aggs() -> Vec<(String, Agg)> {
    vec![
        (
            "hosts".into(),
            Agg::Terms {
                field: "host".into(),
                size: 100,
                min_doc_count: 1,
                aggs: vec![(
                    "per_hour".into(),
                    Agg::DateHistogram {
                        interval: Interval::Calendar(CalendarUnit::Hour),
                        min_doc_count: 0,
                        extended_bounds: None,
                        aggs: leaves(),
                    },
                )],
            },
        ),
        (
            "per_7m".into(),
            Agg::DateHistogram {
                interval: Interval::Fixed(7 * MIN),
                min_doc_count: 1,
                extended_bounds: None,
                aggs: leaves(),
            },
        ),
    ]
    .into_iter()
    .chain(leaves())
    .collect()
}

#[test]
fn column_aggregations_equal_the_row_path() {
    let dir = tempfile::tempdir().unwrap();
    let mapping = Mapping::from_value(json!({"mappings": {"properties": {
        "host": {"type": "keyword", "time_series_dimension": true},
        "dc": {"type": "keyword", "time_series_dimension": true},
        "cpu": {"type": "double", "time_series_metric": "gauge"},
        "bytes": {"type": "long", "time_series_metric": "counter"}}}}))
    .unwrap();
    let mut index = Index::create(dir.path(), mapping).unwrap();
    let mut x = 11u64;
    let mut next = |n: u64| {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (x >> 33) % n
    };
    for round in 0..5 {
        let mut items = Vec::new();
        for _ in 0..400 {
            let h = next(6);
            let ts = T0 + (next(300) as i64) * MIN + (next(4) as i64) * 15_000;
            // Values exact in binary, so any summation order gives the same sum.
            let mut doc = json!({"@timestamp": ts, "host": format!("h{h}"),
                "dc": format!("d{}", h % 3), "cpu": next(400) as f64 / 4.0});
            if next(3) > 0 {
                doc["bytes"] = json!(next(1 << 30));
            }
            items.push(if next(5) == 0 {
                BulkItem::index(doc)
            } else {
                BulkItem::create(doc)
            });
        }
        index.bulk(items).unwrap();
        // The last round stays in the buffer.
        if round % 2 == 0 && round < 4 {
            index.refresh().unwrap();
        }
    }
    let filters = [
        Filter::All,
        Filter::Time {
            min: T0 + 30 * MIN,
            max: T0 + 200 * MIN - 1,
        },
        Filter::Terms {
            field: "dc".into(),
            values: vec!["d1".into(), "d2".into()],
        },
        Filter::And(vec![
            Filter::Time {
                min: T0 + 61 * MIN,
                max: T0 + 299 * MIN,
            },
            Filter::Prefix {
                field: "host".into(),
                prefix: "h".into(),
            },
            Filter::Not(Box::new(Filter::Terms {
                field: "host".into(),
                values: vec!["h4".into()],
            })),
        ]),
    ];
    for filter in filters {
        let by_columns = index
            .query(&SearchRequest {
                filter: filter.clone(),
                size: 0,
                aggs: aggs(),
                ..SearchRequest::default()
            })
            .unwrap();
        let by_rows = index
            .query(&SearchRequest {
                filter: filter.clone(),
                size: 1,
                aggs: aggs(),
                ..SearchRequest::default()
            })
            .unwrap();
        assert!(by_columns.total > 100, "{filter:?}: {}", by_columns.total);
        assert_eq!(by_columns.total, by_rows.total, "{filter:?}");
        assert_eq!(by_columns.aggs, by_rows.aggs, "{filter:?}");
        assert!(by_columns.hits.is_empty() && by_rows.hits.len() == 1);
    }
}
