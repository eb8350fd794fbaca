//! The Elasticsearch side: `_bulk` bodies, NDJSON documents read through a mapping,
//! mappings and create-index bodies, and `_search` bodies.

use std::sync::{Arc, OnceLock};

use serde_json::Value;
use tidemark::{
    Action, BulkItem, DocParser, Index, IngestOptions, InputFormat, Mapping, PreparedItem, Query,
    point_to_doc,
};
use tidemark_server::es::{bulk, dsl, protocol, source};

use crate::scratch;

/// The mapping of `fixtures/tidemark/k8s.mapping.json`: dimensions, gauges, counters,
/// keyword and boolean extras, an ip.
pub(crate) const K8S_MAPPING: &[u8] = include_bytes!("../../../fixtures/tidemark/k8s.mapping.json");
/// The mapping of `fixtures/tidemark/events.mapping.json` (events mode, fingerprints).
pub(crate) const EVENTS_MAPPING: &[u8] =
    include_bytes!("../../../fixtures/tidemark/events.mapping.json");

/// "Now" for date math in queries, fixed so that a run is reproducible
/// (2025-11-30T00:00:00Z).
const NOW_MS: i64 = 1_764_460_800_000;

fn cached(cell: &'static OnceLock<Option<Arc<Mapping>>>, json: &[u8]) -> Option<Arc<Mapping>> {
    cell.get_or_init(|| {
        let text = std::str::from_utf8(json).ok()?;
        Mapping::from_json_str(text).ok().map(Arc::new)
    })
    .clone()
}

fn k8s() -> Option<Arc<Mapping>> {
    static CELL: OnceLock<Option<Arc<Mapping>>> = OnceLock::new();
    cached(&CELL, K8S_MAPPING)
}

fn events() -> Option<Arc<Mapping>> {
    static CELL: OnceLock<Option<Arc<Mapping>>> = OnceLock::new();
    cached(&CELL, EVENTS_MAPPING)
}

/// A `_bulk` body as the server splits it ([`bulk::split_bulk`]), each action line
/// also through the façade's [`tidemark::parse_action`], each document read through the
/// k8s mapping as a bulk item ([`PreparedItem::from_item`]) and as an NDJSON line
/// (see [`doc`]).
pub fn bulk(data: &[u8]) {
    let Some(m) = k8s() else { return };
    let Ok(mut parser) = DocParser::new(m) else {
        return;
    };
    // A refused request (a malformed or invalid action line) applies nothing.
    let items = bulk::split_bulk(data, Some("fuzz")).unwrap_or_default();
    let mut last_line = 0;
    for item in items {
        assert!(item.line > last_line, "bulk items out of line order");
        last_line = item.line;
        assert!(
            item.doc.is_some() || item.action == Action::Delete,
            "an item without its document line was accepted"
        );
        let Some(doc) = item.doc else { continue };
        check_doc_line(&mut parser, doc);
        let Ok(value) = serde_json::from_slice::<Value>(doc) else {
            continue;
        };
        let _ = PreparedItem::from_item(
            &mut parser,
            BulkItem {
                line: item.line,
                action: item.action,
                id: item.id,
                doc: Some(value),
            },
        );
    }
    for line in data.split(|&b| b == b'\n') {
        if let Ok(text) = std::str::from_utf8(line)
            && let Ok((action, id)) = tidemark::parse_action(text)
        {
            assert!(
                id.is_some() || !matches!(action, Action::Delete | Action::Update),
                "a {action:?} action without an _id"
            );
        }
    }
}

/// NDJSON document lines read through the k8s and the events mapping: the streaming
/// parser ([`DocParser::parse_line`], with its hand-written fast path) must agree with
/// the `serde_json::Value` path ([`DocParser::parse_value`]) whenever both accept a
/// line, and a parsed point written back as a document ([`point_to_doc`]) must read back
/// to the same point.
pub fn doc(data: &[u8]) {
    for m in [k8s(), events()].into_iter().flatten() {
        let Ok(mut parser) = DocParser::new(m) else {
            continue;
        };
        for line in data.split(|&b| b == b'\n') {
            check_doc_line(&mut parser, line);
        }
    }
}

fn check_doc_line(parser: &mut DocParser, line: &[u8]) {
    let Ok(text) = std::str::from_utf8(line) else {
        return;
    };
    let streamed = parser.parse_line(text);
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        return;
    };
    // A key given twice in one object is refused (a `serde_json::Value` keeps the last,
    // so the walked path cannot see it; the library reads `_bulk` documents with a
    // strict reader instead).
    if has_repeated_key(text) {
        assert!(
            streamed.is_err(),
            "{text:?} repeats a key and parse_line accepts it"
        );
        return;
    }
    let walked = parser.parse_value(&value);
    let (Ok(a), Ok(b)) = (streamed, walked) else {
        return;
    };
    assert_eq!(a.tsid(), b.tsid(), "parse_line and parse_value: tsid");
    assert_eq!(
        a.ts_millis(),
        b.ts_millis(),
        "parse_line and parse_value: time"
    );
    let (Ok(pa), Ok(pb)) = (a.to_point(), b.to_point()) else {
        panic!("a parsed document has no point");
    };
    assert_eq!(
        pa.clone().normalized(),
        pb.normalized(),
        "parse_line and parse_value read {text:?} differently"
    );
    let mapping = Arc::clone(parser.mapping());
    let mut written = point_to_doc(&mapping, &pa, "id");
    // The metadata a stored document is shown with is not part of its source.
    if let Value::Object(o) = &mut written {
        o.remove("_id");
        o.remove("_tsid");
    }
    match parser.parse_value(&written) {
        Ok(back) => match back.to_point() {
            Ok(pc) => assert_eq!(
                pc.normalized(),
                pa.normalized(),
                "point → document → point differs for {written}"
            ),
            Err(e) => panic!("the document of a point has no point: {e}"),
        },
        Err(e) => panic!("the document written for a parsed point does not parse: {written}: {e}"),
    }
}

/// A mapping or create-index body: [`Mapping::from_json_str`], the server's
/// [`protocol::mapping_from_body`] and [`protocol::template_patterns`]; a mapping that
/// parses must build a [`DocParser`], read the fixture documents without panicking, and
/// parse again from its own source to the same fields.
pub fn mapping(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut found = Vec::new();
    if let Ok(m) = Mapping::from_json_str(text) {
        found.push(m);
    }
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        let _ = protocol::template_patterns(&value);
        if let Ok(m) = protocol::mapping_from_body(&value) {
            found.push(m);
        }
    }
    for m in found {
        let again = match Mapping::from_value(m.source().clone()) {
            Ok(again) => again,
            Err(e) => panic!("a mapping's own source does not parse: {e}"),
        };
        assert_eq!(again.fields(), m.fields(), "mapping source round trip");
        assert_eq!(again.timestamp_field(), m.timestamp_field());
        let Ok(mut parser) = DocParser::new(Arc::new(m)) else {
            continue;
        };
        for line in crate::seeds::K8S_NDJSON
            .split(|&b| b == b'\n')
            .chain(crate::seeds::EVENTS_NDJSON.split(|&b| b == b'\n'))
            .take(8)
        {
            check_doc_line(&mut parser, line);
        }
    }
}

/// A `_search` body translated into the façade's request against the k8s mapping
/// ([`dsl::search`]), with its `_source` filter applied to a document and an
/// optional `"filter_path"` string (taken out of the body first) applied to the body.
pub fn search_dsl(data: &[u8]) {
    let Some(m) = k8s() else { return };
    let Ok(mut body) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    if let Some(spec) = body
        .as_object_mut()
        .and_then(|o| o.remove("filter_path"))
        .and_then(|v| v.as_str().map(str::to_owned))
    {
        let _ = tidemark_server::es::respond::filter_path(body.clone(), &spec);
    }
    let filter = source::SourceFilter::from_json(body.get("_source"));
    let _ = filter.apply(body.clone());
    let first = dsl::search(&body, &m, NOW_MS);
    let second = dsl::search(&body, &m, NOW_MS);
    assert_eq!(
        format!("{first:?}"),
        format!("{second:?}"),
        "one body, two translations"
    );
}

/// A `_bulk` body written into a fresh index twice over, as the CLI's streaming
/// ingest ([`Index::ingest`], bulk format) and as the server applies it
/// ([`bulk::split_bulk`], [`Index::apply_prepared`]); then the index is closed and
/// reopened (its write-ahead log replayed), and must hold the same documents.
pub fn ingest(data: &[u8]) {
    let Some(m) = k8s() else { return };
    let Some(dir) = scratch::dir() else { return };
    let path = dir.join("index");
    let Ok(mut index) = Index::create(&path, (*m).clone()) else {
        return;
    };
    let options = IngestOptions {
        format: InputFormat::Bulk,
        threads: 1,
        chunk_lines: 16,
        ..IngestOptions::default()
    };
    if let Ok(summary) = index.ingest(data, &options, &mut |_| {}) {
        assert!(summary.items >= summary.counts.created + summary.counts.errors);
    }
    let mut parser = index.parser();
    // The server refuses a request with a malformed action line whole: nothing applied.
    let prepared: Vec<PreparedItem> = bulk::split_bulk(data, None)
        .unwrap_or_default()
        .into_iter()
        .map(|item| match item.doc {
            None => match item.id {
                Some(id) if item.action == Action::Delete => PreparedItem::delete(item.line, id),
                id => PreparedItem::failed(item.line, item.action, id, "no document".into()),
            },
            Some(doc) => match serde_json::from_slice::<Value>(doc) {
                Ok(value) => PreparedItem::from_item(
                    &mut parser,
                    BulkItem {
                        line: item.line,
                        action: item.action,
                        id: item.id,
                        doc: Some(value),
                    },
                ),
                Err(e) => PreparedItem::failed(item.line, item.action, item.id, e.to_string()),
            },
        })
        .collect();
    let count = prepared.len();
    if let Ok(results) = index.apply_prepared(prepared) {
        assert_eq!(results.len(), count, "one result per item");
    }
    let before = (
        index.engine().live_count(),
        index.search(&Query::default()).ok(),
    );
    if index.close().is_err() {
        return;
    }
    let Ok(index) = Index::open(&path) else {
        panic!("an index closed cleanly does not reopen");
    };
    let after = (
        index.engine().live_count(),
        index.search(&Query::default()).ok(),
    );
    assert_eq!(before, after, "the reopened index holds other documents");
}

/// Whether some object of the JSON `text` holds a key twice.
fn has_repeated_key(text: &str) -> bool {
    use serde::de::{Deserializer, Error, MapAccess, SeqAccess, Visitor};

    struct Unique;
    impl<'de> serde::de::DeserializeSeed<'de> for Unique {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Unique {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                if !seen.insert(key) {
                    return Err(A::Error::custom("repeated key"));
                }
                map.next_value_seed(Unique)?;
            }
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element_seed(Unique)?.is_some() {}
            Ok(())
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    serde::de::DeserializeSeed::deserialize(Unique, &mut de).is_err()
}
