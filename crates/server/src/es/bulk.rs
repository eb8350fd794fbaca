//! `_bulk`: each item's index resolved and checked, its document parsed through the
//! mapping on a blocking thread, then one group per index queued to its writer; the
//! answer is sent once every item is in the fsynced log.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use serde_json::{Map, Value, json};
use tidemark::{Action, ActionError, ItemResult, ItemStatus, PreparedItem, looks_like_action};

use crate::auth::Principal;
use crate::error::{Error, Result};
use crate::es::respond;
use crate::http::{self, Caller, params};
use crate::registry::{IndexHandle, Registry};
use crate::routes::Routes;
use crate::state::{St, admit, blocking};

/// The `_bulk` routes.
pub(crate) fn routes() -> Routes {
    Routes::new()
        .route("/_bulk", post(bulk).put(bulk))
        .route("/{index}/_bulk", post(bulk).put(bulk))
}

/// The bulk items of one index: the handle, the prepared items, and where each item's
/// result goes in the response (with the error type of items failed while parsing).
struct Group {
    handle: Arc<IndexHandle>,
    items: Vec<PreparedItem>,
    slots: Vec<usize>,
    kinds: Vec<Option<&'static str>>,
}

/// A bulk request read and parsed: the outcomes known before writing, and one group per
/// index for the writers.
pub(crate) struct Plan {
    outcomes: Vec<Option<(String, ItemOutcome)>>,
    names: Vec<String>,
    groups: Vec<Group>,
}

fn refuse(line: &BulkLine<'_>, e: &Error) -> ItemOutcome {
    let (status, kind) = e.status_and_kind();
    ItemOutcome::Refused {
        action: line.action,
        id: line.id.clone(),
        status,
        kind,
        reason: e.reason(),
    }
}

/// Reads and parses every item (on the calling blocking thread): resolves and checks its
/// index (creating it from a template), parses its document through the index's
/// mapping.
pub(crate) fn plan(registry: &Registry, who: &Principal, lines: Vec<BulkLine<'_>>) -> Plan {
    let scope = registry.scope(who);
    let n = lines.len();
    let mut plan = Plan {
        outcomes: (0..n).map(|_| None).collect(),
        names: vec![String::new(); n],
        groups: Vec::new(),
    };
    let mut by_index: HashMap<String, usize> = HashMap::new();
    let mut parsers: Vec<tidemark::DocParser> = Vec::new();
    for (slot, line) in lines.into_iter().enumerate() {
        let name = line.index.clone().unwrap_or_default();
        plan.names[slot] = name.clone();
        if name.is_empty() {
            let e = Error::bad(
                "action_request_validation_exception",
                "Validation Failed: 1: index is missing;",
            );
            plan.outcomes[slot] = Some((name, refuse(&line, &e)));
            continue;
        }
        let g = match by_index.get(&name) {
            Some(&g) => g,
            None => {
                let resolved = scope.get_or_create(&name);
                match resolved {
                    Ok(handle) => {
                        parsers.push(handle.parser());
                        // Most requests write one index: size for all the items once.
                        let expect = if plan.groups.is_empty() { n } else { 0 };
                        plan.groups.push(Group {
                            handle,
                            items: Vec::with_capacity(expect),
                            slots: Vec::with_capacity(expect),
                            kinds: Vec::with_capacity(expect),
                        });
                        by_index.insert(name.clone(), plan.groups.len() - 1);
                        plan.groups.len() - 1
                    }
                    Err(e) => {
                        plan.outcomes[slot] = Some((name, refuse(&line, &e)));
                        continue;
                    }
                }
            }
        };
        let (Some(group), Some(parser)) = (plan.groups.get_mut(g), parsers.get_mut(g)) else {
            continue;
        };
        let (item, kind) = prepare(parser, &line);
        group.items.push(item);
        group.slots.push(slot);
        group.kinds.push(kind);
    }
    for (group, parser) in plan.groups.iter().zip(parsers) {
        group.handle.give_back_parser(parser);
    }
    plan
}

/// One item through the mapping; a document that does not parse becomes a failed item
/// with its Elasticsearch error type.
fn prepare(
    parser: &mut tidemark::DocParser,
    line: &BulkLine<'_>,
) -> (PreparedItem, Option<&'static str>) {
    let failed = |kind: &'static str, reason: String| {
        (
            PreparedItem::failed(line.line, line.action, line.id.clone(), reason),
            Some(kind),
        )
    };
    match line.action {
        Action::Delete => (
            PreparedItem::delete(line.line, line.id.clone().unwrap_or_default()),
            None,
        ),
        Action::Update => {
            let doc: Value = match serde_json::from_slice(line.doc.unwrap_or_default()) {
                Ok(v) => v,
                Err(e) => {
                    return failed(
                        "document_parsing_exception",
                        format!("[{}:{}] failed to parse: {e}", line.line + 1, e.column()),
                    );
                }
            };
            let Some(inner) = doc.get("doc") else {
                return failed(
                    "action_request_validation_exception",
                    "Validation Failed: 1: an update needs a partial document in [doc] (scripts and upserts are not supported);".to_owned(),
                );
            };
            match PreparedItem::update(
                parser,
                line.line,
                line.id.clone().unwrap_or_default(),
                inner,
            ) {
                Ok(item) => (item, None),
                Err(e) => failed("document_parsing_exception", e.to_string()),
            }
        }
        Action::Create | Action::Index => {
            let text = match std::str::from_utf8(line.doc.unwrap_or_default()) {
                Ok(t) => t,
                Err(e) => {
                    return failed(
                        "document_parsing_exception",
                        format!("not valid UTF-8: {e}"),
                    );
                }
            };
            match parser.parse_line(text) {
                Ok(doc) => (
                    PreparedItem::store(line.line, line.action, line.id.clone(), doc),
                    None,
                ),
                Err(tidemark::Error::Json(e)) => failed(
                    "document_parsing_exception",
                    format!("[{}:{}] failed to parse: {e}", line.line + 1, e.column()),
                ),
                Err(e) => failed(
                    "document_parsing_exception",
                    format!("[{}:1] failed to parse: {e}", line.line + 1),
                ),
            }
        }
    }
}

/// Runs a planned request: every group goes to its index's writer at once, and the
/// answer waits for all of them (each fsynced).
pub(crate) async fn execute(plan: Plan) -> Result<Vec<(String, ItemOutcome)>> {
    let Plan {
        mut outcomes,
        names,
        groups,
    } = plan;
    let mut waits = Vec::new();
    for g in groups {
        let Group {
            handle,
            items,
            slots,
            kinds,
        } = g;
        let rx = handle.submit(items);
        waits.push((rx, handle, slots, kinds));
    }
    for (rx, handle, slots, kinds) in waits {
        let results: Vec<ItemResult> = handle.wait(rx?).await?;
        for ((result, slot), kind) in results.into_iter().zip(slots).zip(kinds) {
            if let Some(o) = outcomes.get_mut(slot) {
                let name = names.get(slot).cloned().unwrap_or_default();
                *o = Some((name, ItemOutcome::Done { result, kind }));
            }
        }
    }
    Ok(outcomes
        .into_iter()
        .map(|o| {
            o.unwrap_or_else(|| {
                (
                    String::new(),
                    ItemOutcome::Refused {
                        action: Action::Create,
                        id: None,
                        status: 500,
                        kind: "exception",
                        reason: "no result".to_owned(),
                    },
                )
            })
        })
        .collect())
}

/// `_bulk`: the response is sent only once every item is in the fsynced log.
async fn bulk(
    State(st): St,
    Caller(who): Caller,
    index: Option<Path<String>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    // `/_bulk` and `/{index}/_bulk` alike: the path's index, when there is one.
    let index = index.map(|Path(i)| i);
    let start = Instant::now();
    let params = params(q.as_deref());
    check_refresh(&params)?;
    // Read as sent here; gunzipped with the parsing, on a blocking thread, so a large
    // gzip body does not hold up the async workers' other connections. The write slot
    // is taken once the body is here: a slow sender holds none.
    let raw = http::read_raw_body(&st, &headers, body).await?;
    let _permit = admit(&st)?;
    let st2 = Arc::clone(&st);
    let plan = blocking(move || {
        let bytes = http::decode_body(&st2, &headers, raw)?;
        let lines = split_bulk(&bytes, index.as_deref())?;
        Ok(plan(&st2.registry, &who, lines))
    })
    .await?;
    let outcomes = execute(plan).await?;
    let took = start.elapsed().as_millis() as u64;
    match params.get("filter_path") {
        Some(spec) if !spec.is_empty() => {
            let mut errors = false;
            let items: Vec<Value> = outcomes
                .iter()
                .map(|(name, o)| {
                    let (v, failed) = bulk_item_json(name, o);
                    errors |= failed;
                    v
                })
                .collect();
            let body = json!({"errors": errors, "took": took, "items": items});
            Ok(respond(200, body, &params))
        }
        _ => Ok(http::json_bytes(200, bulk_response_bytes(took, &outcomes))),
    }
}

/// `refresh`: `true`, `wait_for` and `false` are all honoured as they are: an
/// acknowledged write is already visible to searches and gets (they read the engine's
/// buffer too).
pub(crate) fn check_refresh(params: &HashMap<String, String>) -> Result<()> {
    match params.get("refresh").map(String::as_str) {
        None | Some("") | Some("true") | Some("false") | Some("wait_for") => Ok(()),
        Some(other) => Err(Error::bad(
            "illegal_argument_exception",
            format!("Unknown value for refresh: [{other}]."),
        )),
    }
}

/// One item of a `_bulk` request, as read from the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkLine<'a> {
    /// The 1-based line of the action.
    pub line: u64,
    /// The action.
    pub action: Action,
    /// `_index` from the action, else the path's index.
    pub index: Option<String>,
    /// `_id` from the action.
    pub id: Option<String>,
    /// The document line (create, index, update).
    pub doc: Option<&'a [u8]>,
}

/// The lines of `body` (split at `\n`, the last one possibly empty), as `split` gives
/// them, with the newlines found by `memchr`'s vectorised search.
fn lines_of(body: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut start = 0;
    let mut ends = memchr::memchr_iter(b'\n', body);
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        let line = match ends.next() {
            Some(end) => {
                let l = body.get(start..end);
                start = end + 1;
                l
            }
            None => {
                done = true;
                body.get(start..)
            }
        };
        Some(line.unwrap_or_default())
    })
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// Splits a `_bulk` body into items, or refuses the whole request as Elasticsearch
/// does: a malformed action line (not a JSON object, not one of `create`, `delete`,
/// `index`, `update`, metadata of the wrong type) is a `400 illegal_argument_exception`
/// naming its line; an action without its `_id` (delete, update) or without its
/// document line is a `400 action_request_validation_exception` listing every such
/// item. Nothing of a refused request is applied. A document that cannot be parsed
/// is not the splitter's business: it fails alone, later, as its own item.
pub fn split_bulk<'a>(body: &'a [u8], default_index: Option<&str>) -> Result<Vec<BulkLine<'a>>> {
    // About 500 bytes an item (an action line and a document) for metrics documents.
    let mut out = Vec::with_capacity(body.len() / 256 + 1);
    let mut invalid: Vec<String> = Vec::new();
    let mut lines = lines_of(body)
        .enumerate()
        .map(|(i, l)| (i as u64 + 1, l.strip_suffix(b"\r").unwrap_or(l)))
        .filter(|(_, l)| !is_blank(l))
        .peekable();
    while let Some((n, line)) = lines.next() {
        let (action, index, id) = match tidemark::read_action(line) {
            Ok(a) => (a.action, a.index, a.id),
            Err(ActionError::Malformed(why)) => {
                return Err(Error::bad(
                    "illegal_argument_exception",
                    format!("Malformed action/metadata line [{n}], {why}"),
                ));
            }
            Err(ActionError::Invalid(why)) => {
                let reason = format!("{why} on line {n}");
                // Its document line, if one follows, is not an action to read.
                if lines
                    .peek()
                    .is_some_and(|(_, next)| !looks_like_action(next))
                {
                    lines.next();
                }
                invalid.push(reason);
                continue;
            }
        };
        let index = index.or_else(|| default_index.map(str::to_owned));
        let doc = if action == Action::Delete {
            None
        } else {
            match lines.peek() {
                Some((_, next)) if !looks_like_action(next) => lines.next().map(|(_, l)| l),
                _ => {
                    invalid.push(format!(
                        "the {} action on line {n} has no document line",
                        action.name()
                    ));
                    continue;
                }
            }
        };
        out.push(BulkLine {
            line: n,
            action,
            index,
            id,
            doc,
        });
    }
    if !invalid.is_empty() {
        let mut reason = String::from("Validation Failed: ");
        for (i, why) in invalid.iter().enumerate() {
            reason.push_str(&format!("{}: {why};", i + 1));
        }
        return Err(Error::bad("action_request_validation_exception", reason));
    }
    Ok(out)
}

/// The outcome of one bulk item, ready to be shaped as Elasticsearch does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemOutcome {
    /// The façade's result; `kind` overrides the error type of a failed item.
    Done {
        /// The result.
        result: ItemResult,
        /// The Elasticsearch error type for an [`ItemStatus::Error`].
        kind: Option<&'static str>,
    },
    /// Refused before reaching an index (unauthorized, no such index, malformed line).
    Refused {
        /// The action.
        action: Action,
        /// The `_id`, if given.
        id: Option<String>,
        /// HTTP status.
        status: u16,
        /// Error type.
        kind: &'static str,
        /// Reason.
        reason: String,
    },
}

fn shards() -> Value {
    json!({"total": 1, "successful": 1, "failed": 0})
}

/// One item of a bulk response: `{"create": {"_index", "_id", "_version", "result",
/// "status", ...}}`, or with `error{type, reason}`. A duplicate under `create` is `409
/// version_conflict_engine_exception` with Elasticsearch's reason text.
pub fn bulk_item_json(index: &str, outcome: &ItemOutcome) -> (Value, bool) {
    let mut inner = Map::new();
    inner.insert("_index".into(), json!(index));
    let (action, failed) = match outcome {
        ItemOutcome::Refused {
            action,
            id,
            status,
            kind,
            reason,
        } => {
            if let Some(id) = id {
                inner.insert("_id".into(), json!(id));
            }
            inner.insert("status".into(), json!(status));
            inner.insert(
                "error".into(),
                json!({"type": kind, "reason": reason, "index": index}),
            );
            (*action, true)
        }
        ItemOutcome::Done { result, kind } => {
            let id = result.id.clone().unwrap_or_default();
            inner.insert("_id".into(), json!(id));
            let status = result.http_status();
            let failed = match &result.status {
                ItemStatus::Duplicate => {
                    inner.insert(
                        "error".into(),
                        json!({
                            "type": "version_conflict_engine_exception",
                            "reason": format!("[{id}]: version conflict, document already exists (current version [1])"),
                            "index_uuid": "_na_",
                            "shard": "0",
                            "index": index,
                        }),
                    );
                    true
                }
                ItemStatus::Error(reason) => {
                    inner.insert(
                        "error".into(),
                        json!({"type": kind.unwrap_or("illegal_argument_exception"), "reason": reason, "index": index}),
                    );
                    true
                }
                ItemStatus::NotFound if result.action == Action::Update => {
                    inner.insert(
                        "error".into(),
                        json!({
                            "type": "document_missing_exception",
                            "reason": format!("[{id}]: document missing"),
                            "index_uuid": "_na_",
                            "shard": "0",
                            "index": index,
                        }),
                    );
                    true
                }
                _ => {
                    let name = match &result.status {
                        ItemStatus::Indexed { replaced: true } | ItemStatus::Updated => "updated",
                        ItemStatus::Deleted => "deleted",
                        ItemStatus::NotFound => "not_found",
                        _ => "created",
                    };
                    inner.insert("_version".into(), json!(1));
                    inner.insert("result".into(), json!(name));
                    inner.insert("_shards".into(), shards());
                    inner.insert("_seq_no".into(), json!(0));
                    inner.insert("_primary_term".into(), json!(1));
                    false
                }
            };
            inner.insert("status".into(), json!(status));
            (result.action, failed)
        }
    };
    let mut outer = Map::new();
    outer.insert(action.name().to_owned(), Value::Object(inner));
    (Value::Object(outer), failed)
}

/// A whole bulk response, `{"errors", "took", "items"}`, written straight into one
/// buffer sized for it: the same bytes as serializing [`bulk_item_json`]'s values (keys
/// in the same sorted order), without building them, since a 1,000-item response is
/// written for every request.
pub fn bulk_response_bytes(took_millis: u64, outcomes: &[(String, ItemOutcome)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + outcomes.len() * 240);
    let errors = outcomes.iter().any(|(_, o)| match o {
        ItemOutcome::Refused { .. } => true,
        ItemOutcome::Done { result, .. } => item_failed(result),
    });
    out.extend_from_slice(b"{\"errors\":");
    out.extend_from_slice(if errors { b"true" } else { b"false" });
    out.extend_from_slice(b",\"items\":[");
    for (i, (index, o)) in outcomes.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match o {
            ItemOutcome::Done { result, .. } if !item_failed(result) => {
                write_success(&mut out, index, result);
            }
            other => {
                let (v, _) = bulk_item_json(index, other);
                // Writing a Value into a Vec cannot fail.
                let _ = serde_json::to_writer(&mut out, &v);
            }
        }
    }
    out.extend_from_slice(b"],\"took\":");
    out.extend_from_slice(took_millis.to_string().as_bytes());
    out.push(b'}');
    out
}

fn item_failed(result: &ItemResult) -> bool {
    matches!(result.status, ItemStatus::Duplicate | ItemStatus::Error(_))
        || (result.status == ItemStatus::NotFound && result.action == Action::Update)
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    let _ = serde_json::to_writer(&mut *out, s);
}

/// A successful item, as [`bulk_item_json`] shapes it.
fn write_success(out: &mut Vec<u8>, index: &str, result: &ItemResult) {
    let name = match &result.status {
        ItemStatus::Indexed { replaced: true } | ItemStatus::Updated => "updated",
        ItemStatus::Deleted => "deleted",
        ItemStatus::NotFound => "not_found",
        _ => "created",
    };
    out.extend_from_slice(b"{\"");
    out.extend_from_slice(result.action.name().as_bytes());
    out.extend_from_slice(b"\":{\"_id\":");
    write_str(out, result.id.as_deref().unwrap_or_default());
    out.extend_from_slice(b",\"_index\":");
    write_str(out, index);
    out.extend_from_slice(b",\"_primary_term\":1,\"_seq_no\":0,\"_shards\":{\"failed\":0,\"successful\":1,\"total\":1},\"_version\":1,\"result\":\"");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\",\"status\":");
    out.extend_from_slice(result.http_status().to_string().as_bytes());
    out.extend_from_slice(b"}}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lines_of_splits_as_split_does() {
        for body in [
            &b""[..],
            b"\n",
            b"a",
            b"a\n",
            b"a\nb",
            b"\n\na\r\n\nbb\n",
            b"x\ny\nz\n\n",
        ] {
            let want: Vec<&[u8]> = body.split(|&b| b == b'\n').collect();
            assert_eq!(super::lines_of(body).collect::<Vec<_>>(), want, "{body:?}");
        }
    }

    #[test]
    fn splits_bulk_into_items() {
        let body = b"{\"create\":{\"_index\":\"a\"}}\n{\"x\":1}\n{\"create\":{}}\n{not json\n{\"delete\":{\"_id\":\"i\"}}\n{\"index\":{}}\n{\"z\":3}\n";
        let items = split_bulk(body, Some("p")).unwrap();
        assert_eq!(items.len(), 4);
        assert_eq!(items[0].index.as_deref(), Some("a"));
        assert_eq!(items[0].doc, Some(&b"{\"x\":1}"[..]));
        // A document that is not JSON is a document: its item fails later, alone.
        assert_eq!(items[1].doc, Some(&b"{not json"[..]));
        assert_eq!(items[2].action, Action::Delete);
        assert_eq!(items[2].index.as_deref(), Some("p"));
        assert_eq!(items[3].doc, Some(&b"{\"z\":3}"[..]));
        assert_eq!(items[3].line, 6);
    }

    #[test]
    fn a_malformed_action_line_refuses_the_request() {
        for (body, line) in [
            (
                &b"{\"create\":{}}\n{\"a\":1}\n{\"upsert\":{}}\n{\"a\":1}\n"[..],
                3,
            ),
            (b"\n{nope\n", 2),
            (b"{\"create\":{\"_id\":5}}\n{}\n", 1),
            (b"{\"create\":[]}\n{}\n", 1),
            (b"{\"create\":{},\"index\":{}}\n{}\n", 1),
        ] {
            let e = split_bulk(body, Some("p")).unwrap_err();
            assert_eq!(e.status_and_kind(), (400, "illegal_argument_exception"));
            assert!(
                e.reason().contains(&format!("line [{line}]")),
                "{}",
                e.reason()
            );
        }
    }

    #[test]
    fn fast_bulk_response_equals_the_value_one() {
        let r = |action, status, id: &str| ItemOutcome::Done {
            result: ItemResult {
                line: 1,
                action,
                id: Some(id.to_owned()),
                status,
            },
            kind: None,
        };
        let outcomes = vec![
            (
                "a".to_owned(),
                r(Action::Create, ItemStatus::Created, "x\"1"),
            ),
            (
                "a".to_owned(),
                r(Action::Create, ItemStatus::Duplicate, "x2"),
            ),
            (
                "b".to_owned(),
                r(Action::Index, ItemStatus::Indexed { replaced: true }, "x3"),
            ),
            (
                "b".to_owned(),
                r(Action::Delete, ItemStatus::NotFound, "x4"),
            ),
            (
                "b".to_owned(),
                r(Action::Update, ItemStatus::NotFound, "x5"),
            ),
            (
                "b".to_owned(),
                r(Action::Create, ItemStatus::Error("bad".into()), "x6"),
            ),
            (
                "c".to_owned(),
                ItemOutcome::Refused {
                    action: Action::Create,
                    id: None,
                    status: 403,
                    kind: "security_exception",
                    reason: "no".into(),
                },
            ),
        ];
        let fast: Value = serde_json::from_slice(&bulk_response_bytes(7, &outcomes)).unwrap();
        let items: Vec<Value> = outcomes
            .iter()
            .map(|(i, o)| bulk_item_json(i, o).0)
            .collect();
        assert_eq!(fast, json!({"errors": true, "took": 7, "items": items}));
        let ok = vec![("a".to_owned(), r(Action::Create, ItemStatus::Created, "y"))];
        let fast: Value = serde_json::from_slice(&bulk_response_bytes(0, &ok)).unwrap();
        assert_eq!(fast["errors"], false);
        assert_eq!(fast["items"][0], bulk_item_json("a", &ok[0].1).0);
    }

    #[test]
    fn actions_without_documents_or_ids_refuse_the_request_listing_each() {
        let e = split_bulk(b"{\"create\":{}}\n{\"update\":{}}\n{\"doc\":{}}\n", None).unwrap_err();
        assert_eq!(
            e.status_and_kind(),
            (400, "action_request_validation_exception")
        );
        let reason = e.reason();
        assert!(
            reason.contains("1: the create action on line 1 has no document line;"),
            "{reason}"
        );
        assert!(
            reason.contains("2: id is missing for the update on line 2;"),
            "{reason}"
        );
    }
}
