//! The library API: bulk items, events-mode updates, reopen, and the lock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::json;
use tidemark::{AggQuery, BulkItem, Error, Index, ItemStatus, Mapping, Query, SearchRequest};

fn ts_mapping() -> Mapping {
    Mapping::from_value(json!({"mappings": {"properties": {
        "host": {"type": "keyword", "time_series_dimension": true},
        "cpu": {"type": "double", "time_series_metric": "gauge"},
        "requests": {"type": "long", "time_series_metric": "counter"},
        "note": {"type": "keyword"}
    }}}))
    .unwrap()
}

#[test]
fn bulk_results_reopen_and_duplicates_do_not_skew_averages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ix");
    let mut index = Index::create(&path, ts_mapping()).unwrap();
    let doc = |host: &str, ts: i64, cpu: f64| json!({"@timestamp": ts, "host": host, "cpu": cpu, "requests": ts / 1000});
    let items: Vec<BulkItem> = (0..6)
        .map(|i| BulkItem::create(doc("a", 1_000 * i, i as f64)).at_line(i as u64 + 1))
        .collect();
    let out = index.bulk(items.clone()).unwrap();
    assert!(
        out.iter()
            .all(|r| r.status == ItemStatus::Created && r.http_status() == 201)
    );
    // A shipper retries the last three: duplicates, and the average does not move.
    let again = index.bulk(items[3..].to_vec()).unwrap();
    assert!(
        again
            .iter()
            .all(|r| r.status == ItemStatus::Duplicate && r.http_status() == 409)
    );
    assert_eq!(
        again[0].to_json()["create"]["error"]["reason"],
        json!("document already exists")
    );
    let agg = index
        .aggregate(&AggQuery {
            metric: "cpu".into(),
            interval_millis: 60_000,
            from: None,
            to: None,
            filters: vec![],
            ..AggQuery::default()
        })
        .unwrap();
    assert_eq!((agg.buckets[0].count, agg.buckets[0].avg()), (6, 2.5));

    let id = out[2].id.clone().unwrap();
    let upd = index
        .bulk(vec![BulkItem::update(
            &id,
            json!({"doc": {"cpu": 9.5, "note": "fixed"}}),
        )])
        .unwrap();
    assert_eq!(upd[0].status, ItemStatus::Updated);
    index.close().unwrap();

    // Reopened: the mapping comes from the directory, the log is replayed.
    let mut index = Index::open(&path).unwrap();
    let got = index.get(&id).unwrap().unwrap();
    assert_eq!(
        (
            got["cpu"].clone(),
            got["note"].clone(),
            got["requests"].clone()
        ),
        (json!(9.5), json!("fixed"), json!(2))
    );
    assert!(index.delete(&id).unwrap());
    assert!(!index.delete(&id).unwrap());
    assert_eq!(index.search(&Query::default()).unwrap().len(), 5);
    let c = index.counters();
    assert_eq!(
        (
            c.items.created,
            c.items.duplicates,
            c.items.updated,
            c.items.deleted,
            c.items.not_found
        ),
        (6, 3, 1, 1, 1)
    );

    // A second open in this process is refused as the lock is held.
    assert!(matches!(Index::open(&path), Err(Error::Locked { .. })));
    drop(index);
    assert!(Index::open(&path).is_ok());
}

#[test]
fn events_updates_may_not_change_the_fingerprint() {
    let dir = tempfile::tempdir().unwrap();
    let mapping = Mapping::from_value(json!({
        "settings": {"index": {"mode": "events", "fingerprint": {"fields": ["message"], "method": "md5"}}},
        "mappings": {"properties": {"message": {"type": "keyword"}, "level": {"type": "keyword"}, "bytes": {"type": "long"}}}
    }))
    .unwrap();
    let mut index = Index::create(dir.path().join("ev"), mapping).unwrap();
    let out = index
        .bulk(vec![
            BulkItem::create(json!({"@timestamp": 5, "message": "a", "level": "info"})),
            BulkItem::create(json!({"@timestamp": 5, "message": "b", "level": "info"})),
            BulkItem::create(json!({"@timestamp": 5, "message": "a", "level": "warn"})),
        ])
        .unwrap();
    let st: Vec<&ItemStatus> = out.iter().map(|r| &r.status).collect();
    assert_eq!(
        st,
        [
            &ItemStatus::Created,
            &ItemStatus::Created,
            &ItemStatus::Duplicate
        ]
    );
    let id = out[0].id.clone().unwrap();
    // `level` is not fingerprinted: an update is fine.
    let ok = index
        .bulk(vec![BulkItem::update(
            &id,
            json!({"doc": {"level": "error", "bytes": 3}}),
        )])
        .unwrap();
    assert_eq!(ok[0].status, ItemStatus::Updated);
    let bad = index
        .bulk(vec![BulkItem::update(
            &id,
            json!({"doc": {"message": "c"}}),
        )])
        .unwrap();
    assert!(
        matches!(&bad[0].status, ItemStatus::Error(r) if r.contains("fingerprint")),
        "{bad:?}"
    );
    let got = index.get(&id).unwrap().unwrap();
    assert_eq!(
        (
            got["message"].clone(),
            got["level"].clone(),
            got["bytes"].clone()
        ),
        (json!("a"), json!("error"), json!(3))
    );
}

/// Every query path reads a stored event's extras before it computes the event's `_id`
/// (a fingerprint of its fields, extras included): the hits of `_search`-style requests
/// and of the CLI's search carry the ids the writes answered, before and after the
/// events are written to a segment.
#[test]
fn event_hits_carry_their_written_ids() {
    let dir = tempfile::tempdir().unwrap();
    let mapping = Mapping::from_value(json!({
        "settings": {"index": {"mode": "events", "fingerprint": {"fields": ["message"], "method": "md5"}}},
        "mappings": {"properties": {"message": {"type": "keyword"}, "level": {"type": "keyword"}}}
    }))
    .unwrap();
    let mut index = Index::create(dir.path().join("ev"), mapping).unwrap();
    let out = index
        .bulk(vec![
            BulkItem::create(json!({"@timestamp": 5, "message": "a", "level": "info"})),
            BulkItem::create(json!({"@timestamp": 7, "message": "b", "level": "warn"})),
        ])
        .unwrap();
    let written: Vec<String> = out.iter().map(|r| r.id.clone().unwrap()).collect();
    for refreshed in [false, true] {
        if refreshed {
            index.refresh().unwrap();
        }
        let hits = index
            .query(&SearchRequest {
                size: 10,
                ..SearchRequest::default()
            })
            .unwrap()
            .hits;
        let ids: Vec<&str> = hits.iter().map(|h| h.id.as_str()).collect();
        assert_eq!(ids, written, "refreshed: {refreshed}");
        let docs = index.search(&Query::default()).unwrap();
        let ids: Vec<&str> = docs.iter().filter_map(|d| d["_id"].as_str()).collect();
        assert_eq!(ids, written, "refreshed: {refreshed}");
        // An `_id` prefix of the second event (its timestamp part) finds it alone.
        let by_prefix = index
            .search(&Query {
                id_prefix: Some(written[1][..16].to_owned()),
                ..Query::default()
            })
            .unwrap();
        assert_eq!(by_prefix.len(), 1, "refreshed: {refreshed}");
        assert_eq!(by_prefix[0]["_id"], json!(written[1]));
    }
}
