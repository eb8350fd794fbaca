//! A term filter on a dimension value that matches 100 of 100,000 series, from a merged
//! index: through the dimension index (only those series' rows are read) against a scan
//! that asks every series (the path before the index), in one run.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use tidemark::{AggQuery, BulkItem, Filter, Index, Mapping};

const SERIES: u32 = 100_000;
const TEAMS: u32 = 1_000;

fn build() -> (tempfile::TempDir, Index) {
    let tmp = tempfile::tempdir().unwrap();
    let mapping = Mapping::from_value(json!({"mappings": {"properties": {
        "host": {"type": "keyword", "time_series_dimension": true},
        "team": {"type": "keyword", "time_series_dimension": true},
        "cpu": {"type": "double", "time_series_metric": "gauge"}}}}))
    .unwrap();
    let mut index = Index::create(tmp.path(), mapping).unwrap();
    let mut items = Vec::with_capacity(10_000);
    for s in 0..SERIES {
        for t in 0..2i64 {
            items.push(BulkItem::create(json!({
                "@timestamp": t * 10_000,
                "host": format!("host-{s:06}"),
                "team": format!("t{}", s % TEAMS),
                "cpu": f64::from(s % 97) / 10.0,
            })));
        }
        if items.len() >= 10_000 {
            index.bulk(std::mem::take(&mut items)).unwrap();
        }
    }
    index.bulk(items).unwrap();
    index.merge().unwrap();
    (tmp, index)
}

fn filter(c: &mut Criterion) {
    let (_tmp, index) = build();
    let query = AggQuery {
        metric: "cpu".into(),
        interval_millis: 3_600_000,
        filters: vec![("team".into(), "t42".into())],
        ..AggQuery::default()
    };
    assert_eq!(index.aggregate(&query).unwrap().series.len(), 100);
    let mut g = c.benchmark_group("term_filter_100_of_100k_series");
    g.bench_function("dimension_index", |b| {
        b.iter(|| index.aggregate(&query).unwrap().series.len())
    });
    let regex = AggQuery {
        filters: Vec::new(),
        matchers: vec![Filter::parse_matcher("team=~t42|t43").unwrap()],
        ..query.clone()
    };
    assert_eq!(index.aggregate(&regex).unwrap().series.len(), 200);
    g.bench_function("dimension_index_regex_200", |b| {
        b.iter(|| index.aggregate(&regex).unwrap().series.len())
    });
    // The path before the index: every series asked, matching rows read.
    g.bench_function("scan_every_series", |b| {
        b.iter(|| {
            let mut rows = 0u64;
            index
                .engine()
                .search(i64::MIN, i64::MAX)
                .rows(
                    |_, dims| {
                        dims.iter().any(|(n, d)| {
                            n == "team" && *d == tidemark::segment::Dim::Keyword("t42".into())
                        })
                    },
                    |_, _| rows += 1,
                )
                .unwrap();
            rows
        })
    });
    g.finish();
}

criterion_group!(benches, filter);
criterion_main!(benches);
