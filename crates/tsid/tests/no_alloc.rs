//! The batch API allocates nothing per call once warm. This test binary
//! counts every heap allocation (allocation-counter installs a counting
//! global allocator), so it lives apart from the other tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};
use tidemark_tsid::{DimValue, TsidBuilder};

fn docs(n: usize, dims: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let mut doc = json!({"@timestamp": i, "cpu": 0.5, "mem": {"used": 7}});
            for d in 0..dims {
                doc[format!("dim{d:02}")] = json!(format!("value-{i}-{d}"));
            }
            doc["host"] = json!({"name": format!("h{i}"), "ip": "10.0.0.1"});
            doc
        })
        .collect()
}

#[test]
fn batch_api_allocates_nothing_when_warm() {
    for dims in [1usize, 6, 20] {
        let docs = docs(1000, dims);
        let mut c = TsidBuilder::new()
            .dimensions((0..dims).map(|d| format!("dim{d:02}")))
            .dimension("host.name")
            .ip_dimension("host.ip")
            .build()
            .unwrap();
        let mut tsids = Vec::with_capacity(docs.len());
        let mut ids = Vec::with_capacity(docs.len());
        // Warm up: the computer's buffers grow to fit.
        c.tsid_batch(&docs, &mut tsids).unwrap();
        tsids.clear();
        let info = allocation_counter::measure(|| {
            c.tsid_batch(&docs, &mut tsids).unwrap();
            c.synthetic_id_batch(docs.iter().map(|d| (d, 1)), &mut ids)
                .unwrap();
        });
        assert_eq!(info.count_total, 0, "{dims} dimensions: {info:?}");
        assert_eq!(tsids.len(), 1000);
        assert_eq!(ids.len(), 1000);
    }
}

#[test]
fn typed_pairs_and_values_allocate_nothing_when_warm() {
    let mut c = TsidBuilder::new().build().unwrap();
    let names: Vec<String> = (0..20).map(|d| format!("dim{d:02}")).collect();
    let values: Vec<String> = (0..20).map(|d| format!("value-{d}")).collect();
    let pairs: Vec<(&str, DimValue<'_>)> = names
        .iter()
        .zip(&values)
        .map(|(n, v)| (n.as_str(), DimValue::Keyword(v)))
        .collect();
    c.tsid_from_pairs(&pairs, &["cpu", "mem"]).unwrap();
    let info = allocation_counter::measure(|| {
        for _ in 0..100 {
            c.tsid_from_pairs(&pairs, &["cpu", "mem"]).unwrap();
        }
    });
    assert_eq!(info.count_total, 0, "{info:?}");

    let mut c = TsidBuilder::new().dimensions(&names).build().unwrap();
    let rows: Vec<Vec<Option<DimValue<'_>>>> = (0..100)
        .map(|_| values.iter().map(|v| Some(DimValue::Keyword(v))).collect())
        .collect();
    let mut out = Vec::with_capacity(rows.len());
    c.tsid_values_batch(rows.iter().map(Vec::as_slice), &["cpu"], &mut out)
        .unwrap();
    out.clear();
    let info = allocation_counter::measure(|| {
        c.tsid_values_batch(rows.iter().map(Vec::as_slice), &["cpu"], &mut out)
            .unwrap();
    });
    assert_eq!(info.count_total, 0, "{info:?}");
    assert_eq!(out.len(), 100);
}
