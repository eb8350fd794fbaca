//! Paging with `SearchRequest::search_after`: the pages, each started after the last
//! hit of the one before, hold every hit of the query exactly once and in order, in
//! both orders, with many series at each timestamp (the tie the `_id` breaks), with
//! part of the data still in the write buffer; `total` and the aggregations of every
//! page cover the whole query.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::json;
use tidemark::{
    Agg, AggOutput, BulkItem, Filter, Index, Mapping, MetricKind, Order, SearchAfter, SearchRequest,
};

fn index(dir: &std::path::Path) -> Index {
    let mapping = Mapping::from_value(json!({"mappings": {"properties": {
        "host": {"type": "keyword", "time_series_dimension": true},
        "cpu": {"type": "double", "time_series_metric": "gauge"}}}}))
    .unwrap();
    let mut index = Index::create(dir, mapping).unwrap();
    // 30 hosts × 40 timestamps; the first half refreshed into a segment, the rest in
    // the buffer.
    for half in 0..2 {
        let items = (0..30)
            .flat_map(|h| {
                (half * 20..half * 20 + 20).map(move |t| {
                    BulkItem::create(json!({
                        "@timestamp": 1_700_000_000_000i64 + t * 10_000,
                        "host": format!("h{h}"),
                        "cpu": f64::from(h as u32) + t as f64 / 100.0,
                    }))
                })
            })
            .collect();
        index.bulk(items).unwrap();
        if half == 0 {
            index.refresh().unwrap();
        }
    }
    index
}

fn sum_agg() -> Vec<(String, Agg)> {
    vec![(
        "s".into(),
        Agg::Metric {
            kind: MetricKind::Sum,
            field: "cpu".into(),
        },
    )]
}

fn sum_of(aggs: &[(String, AggOutput)]) -> f64 {
    match aggs {
        [(_, AggOutput::Value(Some(v)))] => *v,
        other => panic!("one sum expected: {other:?}"),
    }
}

fn pages(index: &Index, order: Order, filter: Filter, size: usize) -> Vec<(i64, String)> {
    let all = index
        .query(&SearchRequest {
            filter: filter.clone(),
            size: 0,
            aggs: sum_agg(),
            ..SearchRequest::default()
        })
        .unwrap();
    let mut out = Vec::new();
    let mut after: Option<SearchAfter> = None;
    loop {
        let page = index
            .query(&SearchRequest {
                filter: filter.clone(),
                size,
                order,
                aggs: sum_agg(),
                search_after: after.clone(),
                ..SearchRequest::default()
            })
            .unwrap();
        assert_eq!(page.total, all.total, "every page counts the whole query");
        // The same sum, up to the order the rows were added in.
        let (got, want) = (sum_of(&page.aggs), sum_of(&all.aggs));
        assert!((got - want).abs() <= 1e-9 * want.abs(), "{got} vs {want}");
        let Some(last) = page.hits.last() else { break };
        after = Some(SearchAfter {
            ts_millis: last.ts_millis,
            id: Some(last.id.clone()),
        });
        out.extend(page.hits.iter().map(|h| (h.ts_millis, h.id.clone())));
    }
    assert_eq!(out.len() as u64, all.total);
    out
}

#[test]
fn pages_hold_every_hit_once_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let index = index(dir.path());
    for order in [Order::Asc, Order::Desc] {
        for size in [1, 7, 30, 500] {
            let got = pages(&index, order, Filter::All, size);
            assert_eq!(got.len(), 1200, "{order:?} {size}");
            let mut want = got.clone();
            want.sort();
            if order == Order::Desc {
                want.reverse();
            }
            want.dedup();
            assert_eq!(got, want, "{order:?} size {size}: in order, no repeats");
        }
    }
    let filter = Filter::Terms {
        field: "host".into(),
        values: vec!["h3".into(), "h17".into()],
    };
    assert_eq!(pages(&index, Order::Asc, filter, 9).len(), 80);
}

#[test]
fn a_cursor_without_an_id_starts_before_its_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let index = index(dir.path());
    let ts = 1_700_000_000_000i64 + 5 * 10_000;
    let page = |order, id: Option<String>| {
        index
            .query(&SearchRequest {
                size: 100,
                order,
                search_after: Some(SearchAfter { ts_millis: ts, id }),
                ..SearchRequest::default()
            })
            .unwrap()
            .hits
    };
    let asc = page(Order::Asc, None);
    assert!(asc.iter().take(30).all(|h| h.ts_millis == ts));
    assert!(asc.iter().skip(30).all(|h| h.ts_millis > ts));
    let desc = page(Order::Desc, None);
    assert!(desc.iter().take(30).all(|h| h.ts_millis == ts));
    assert!(desc.iter().skip(30).all(|h| h.ts_millis < ts));
    // With the id of the 10th hit at `ts`, the page starts at the 11th.
    let tenth = asc[9].id.clone();
    assert_eq!(page(Order::Asc, Some(tenth))[0].id, asc[10].id);
}
