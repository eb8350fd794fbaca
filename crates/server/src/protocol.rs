//! Elasticsearch's JSON shapes: index names, create-index bodies and templates, the
//! `_bulk` wire format and response, errors, `filter_path`, and the handshake bodies.
//! Everything here is plain data in and out, testable without a socket.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use tidemark::{Action, ItemResult, ItemStatus, Mapping};

use crate::auth::glob_match;
use crate::error::{Error, Result};

/// Field types a Tidemark mapping stores (`constant_keyword` is stored as `keyword`).
const STORED_TYPES: [&str; 15] = [
    "date",
    "date_nanos",
    "keyword",
    "constant_keyword",
    "long",
    "integer",
    "short",
    "byte",
    "unsigned_long",
    "double",
    "float",
    "half_float",
    "scaled_float",
    "boolean",
    "ip",
];

/// The `settings.index.*` keys a Tidemark mapping understands; others (`lifecycle`,
/// `codec`, `refresh_interval`, ...) are accepted and dropped.
const KNOWN_SETTINGS: [&str; 6] = [
    "mode",
    "timestamp_field",
    "fingerprint",
    "routing_path",
    "number_of_shards",
    "number_of_replicas",
];

/// Checks an index name as Elasticsearch does: lowercase, none of `\ / * ? " < > | , #`,
/// space or `:`, not starting with `_`, `-` or `+`, not `.` or `..`, at most 255 bytes.
/// The name becomes a directory name, so this also keeps requests inside the data
/// directory.
///
/// # Errors
/// `400 invalid_index_name_exception`.
pub fn check_index_name(name: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::bad(
            "invalid_index_name_exception",
            format!("Invalid index name [{name}], {why}"),
        ))
    };
    if name.is_empty() || name.len() > 255 {
        return bad("must be 1 to 255 bytes long");
    }
    if name == "." || name == ".." {
        return bad("must not be '.' or '..'");
    }
    if name.starts_with(['_', '-', '+']) {
        return bad("must not start with '_', '-', or '+'");
    }
    if name.chars().any(|c| c.is_uppercase()) {
        return bad("must be lowercase");
    }
    if name.chars().any(|c| {
        matches!(
            c,
            '\\' | '/' | '*' | '?' | '"' | '<' | '>' | '|' | ',' | '#' | ' ' | ':'
        ) || c.is_control()
    }) {
        return bad(
            "must not contain the following characters [ , \", *, \\, <, |, ,, >, /, ?, #, :]",
        );
    }
    Ok(())
}

/// Reads an Elasticsearch create-index body (`settings`, `mappings`, `aliases`) into a
/// Tidemark mapping. Settings may be nested (`{"index": {"mode": ..}}`) or dotted
/// (`"index.mode"`); settings Tidemark has no use for are dropped, and so are fields of
/// types it does not store (`text`, `wildcard`, ...) and mapping options such as
/// `dynamic_templates`. `"dynamic": true` becomes `"ignore"`: a Tidemark mapping never
/// grows, undeclared fields are dropped from documents.
///
/// # Errors
/// `400 mapper_parsing_exception` naming the field or section.
pub fn mapping_from_body(body: &Value) -> Result<Mapping> {
    let empty = Map::new();
    let root = match body {
        Value::Object(o) => o,
        Value::Null => &empty,
        _ => {
            return Err(Error::bad(
                "mapper_parsing_exception",
                "the request body must be an object",
            ));
        }
    };
    for key in root.keys() {
        if !matches!(key.as_str(), "settings" | "mappings" | "aliases") {
            return Err(Error::bad(
                "parse_exception",
                format!("unknown key [{key}] for create index"),
            ));
        }
    }
    let settings = normalize_settings(root.get("settings"))?;
    let mappings = normalize_mappings(root.get("mappings").unwrap_or(&Value::Null))?;
    let source = json!({"settings": {"index": settings}, "mappings": mappings});
    Ok(Mapping::from_value(source)?)
}

fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(o) => {
            for (k, v) in o {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        other => out.push((prefix.to_owned(), other.clone())),
    }
}

fn insert_dotted(map: &mut Map<String, Value>, path: &str, v: Value) {
    match path.split_once('.') {
        None => {
            map.insert(path.to_owned(), v);
        }
        Some((head, rest)) => {
            let slot = map
                .entry(head.to_owned())
                .or_insert_with(|| Value::Object(Map::new()));
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            if let Value::Object(inner) = slot {
                insert_dotted(inner, rest, v);
            }
        }
    }
}

fn normalize_settings(settings: Option<&Value>) -> Result<Map<String, Value>> {
    let mut flat = Vec::new();
    match settings {
        None | Some(Value::Null) => {}
        Some(v @ Value::Object(_)) => flatten("", v, &mut flat),
        Some(_) => {
            return Err(Error::bad(
                "mapper_parsing_exception",
                "`settings` must be an object",
            ));
        }
    }
    let mut out = Map::new();
    for (key, v) in flat {
        let key = key.strip_prefix("index.").unwrap_or(&key);
        let head = key.split('.').next().unwrap_or(key);
        if KNOWN_SETTINGS.contains(&head) {
            // Numbers of shards may come as strings ("1"), as Elasticsearch allows.
            insert_dotted(&mut out, key, v);
        }
    }
    out.remove("number_of_shards");
    out.remove("number_of_replicas");
    Ok(out)
}

fn normalize_mappings(mappings: &Value) -> Result<Value> {
    let m = match mappings {
        Value::Null => return Ok(json!({"properties": {}})),
        Value::Object(m) => m,
        _ => {
            return Err(Error::bad(
                "mapper_parsing_exception",
                "`mappings` must be an object",
            ));
        }
    };
    let mut out = Map::new();
    match m.get("dynamic") {
        None => {}
        Some(Value::Bool(true)) => {
            out.insert("dynamic".into(), json!("ignore"));
        }
        Some(Value::String(s)) if s == "true" || s == "runtime" => {
            out.insert("dynamic".into(), json!("ignore"));
        }
        Some(other) => {
            out.insert("dynamic".into(), other.clone());
        }
    }
    let props = match m.get("properties") {
        Some(Value::Object(p)) => clean_properties(p),
        Some(_) => {
            return Err(Error::bad(
                "mapper_parsing_exception",
                "`mappings.properties` must be an object",
            ));
        }
        None => Map::new(),
    };
    out.insert("properties".into(), Value::Object(props));
    Ok(Value::Object(out))
}

/// Keeps the fields of stored types (recursing into objects), drops the rest.
fn clean_properties(props: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for (name, def) in props {
        let Value::Object(d) = def else {
            out.insert(name.clone(), def.clone());
            continue;
        };
        let ty = d.get("type").and_then(Value::as_str);
        if let Some(Value::Object(sub)) = d.get("properties") {
            if matches!(ty, None | Some("object")) {
                let sub = clean_properties(sub);
                if !sub.is_empty() {
                    out.insert(name.clone(), json!({"properties": sub}));
                }
            }
            continue;
        }
        match ty {
            Some(t) if STORED_TYPES.contains(&t) => {
                let mut d = d.clone();
                if t == "constant_keyword" {
                    d.insert("type".into(), json!("keyword"));
                } else if t == "date_nanos" {
                    d.insert("type".into(), json!("date"));
                }
                out.insert(name.clone(), Value::Object(d));
            }
            // Untyped or unknown: left to the mapping parser to name the problem.
            None => {
                out.insert(name.clone(), def.clone());
            }
            Some(_) => {}
        }
    }
    out
}

/// The `index_patterns` of an index template (a string or a list).
pub fn template_patterns(body: &Value) -> Vec<String> {
    match body.get("index_patterns") {
        Some(Value::String(s)) => s.split(',').map(|p| p.trim().to_owned()).collect(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

fn merge_into(dst: &mut Map<String, Value>, src: &Map<String, Value>) {
    for (k, v) in src {
        match (dst.get_mut(k), v) {
            (Some(Value::Object(d)), Value::Object(s)) => merge_into(d, s),
            _ => {
                dst.insert(k.clone(), v.clone());
            }
        }
    }
}

/// The create-index body for `name` from the matching index template of highest
/// `priority` (its `composed_of` component templates merged first, in order, then its
/// own `template`), or `None` when no template matches.
///
/// # Errors
/// `400` when the template names a component template that does not exist.
pub fn template_for(
    name: &str,
    templates: &BTreeMap<String, Value>,
    components: &BTreeMap<String, Value>,
) -> Result<Option<Value>> {
    let best = templates
        .iter()
        .filter(|(_, t)| template_patterns(t).iter().any(|p| glob_match(p, name)))
        .max_by_key(|(n, t)| {
            (
                t.get("priority").and_then(Value::as_i64).unwrap_or(0),
                std::cmp::Reverse((*n).clone()),
            )
        });
    let Some((tname, t)) = best else {
        return Ok(None);
    };
    let mut body = Map::new();
    let composed: Vec<&str> = t
        .get("composed_of")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for c in composed {
        let Some(ct) = components.get(c) else {
            return Err(Error::bad(
                "invalid_index_template_exception",
                format!(
                    "index template [{tname}] is composed of component template [{c}], which does not exist"
                ),
            ));
        };
        if let Some(Value::Object(inner)) = ct.get("template") {
            merge_into(&mut body, inner);
        }
    }
    if let Some(Value::Object(inner)) = t.get("template") {
        merge_into(&mut body, inner);
    }
    body.remove("aliases");
    body.remove("lifecycle");
    Ok(Some(Value::Object(body)))
}

/// An error body as Elasticsearch sends it:
/// `{"error": {"root_cause": [..], "type", "reason"}, "status"}`.
pub fn error_body(status: u16, kind: &str, reason: &str) -> Value {
    let cause = json!({"type": kind, "reason": reason});
    json!({
        "error": {"root_cause": [cause], "type": kind, "reason": reason},
        "status": status,
    })
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

/// Why an action line cannot be read: malformed (the whole request is refused with
/// `illegal_argument_exception`), or well-formed but invalid (collected, then refused
/// with `action_request_validation_exception`).
enum ActionError {
    Malformed(String),
    Invalid(String),
}

/// Reads the action line on line `n`: `(action, _index, _id)`.
fn read_action(
    n: u64,
    text: &[u8],
) -> std::result::Result<(Action, Option<String>, Option<String>), ActionError> {
    // What most shippers send: no metadata at all.
    match text.trim_ascii() {
        b"{\"create\":{}}" => return Ok((Action::Create, None, None)),
        b"{\"index\":{}}" => return Ok((Action::Index, None, None)),
        _ => {}
    }
    let malformed = |why: String| {
        ActionError::Malformed(format!("Malformed action/metadata line [{n}], {why}"))
    };
    let v: Map<String, Value> = serde_json::from_slice(text)
        .map_err(|e| malformed(format!("expected a JSON object: {e}")))?;
    let mut it = v.into_iter();
    let (Some((name, meta)), None) = (it.next(), it.next()) else {
        return Err(malformed("expected exactly one action".to_owned()));
    };
    let action = Action::parse(&name).ok_or_else(|| {
        malformed(format!(
            "expected field [create, delete, index, update] but found [{name}]"
        ))
    })?;
    let Value::Object(meta) = meta else {
        return Err(malformed(format!("[{name}] must hold an object")));
    };
    let text_of = |key: &str| -> std::result::Result<Option<String>, ActionError> {
        match meta.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(malformed(format!(
                "[{key}] must be a string, found {other}"
            ))),
        }
    };
    let index = text_of("_index")?;
    let id = text_of("_id")?;
    if id.is_none() && matches!(action, Action::Delete | Action::Update) {
        return Err(ActionError::Invalid(format!(
            "id is missing for the {name} on line {n}"
        )));
    }
    Ok((action, index, id))
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

/// Whether a line is an action line (a one-key object whose key is an action name),
/// to tell a missing document line from the next action. The first key is checked
/// without parsing the line, so a document (whose first key is rarely an action name)
/// is not parsed twice.
fn looks_like_action(line: &[u8]) -> bool {
    let first_key = || -> Option<&[u8]> {
        let start = line.iter().position(|b| !b.is_ascii_whitespace())?;
        let rest = line.get(start..)?.strip_prefix(b"{")?;
        let quote = rest.iter().position(|b| !b.is_ascii_whitespace())?;
        let rest = rest.get(quote..)?.strip_prefix(b"\"")?;
        let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
        rest.get(..end)
    };
    let is_action_name = first_key()
        .and_then(|k| std::str::from_utf8(k).ok())
        .is_some_and(|k| Action::parse(k).is_some());
    is_action_name
        && matches!(serde_json::from_slice::<Map<String, Value>>(line), Ok(m) if m.len() == 1 && m.keys().all(|k| Action::parse(k).is_some()))
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
        let (action, index, id) = match read_action(n, line) {
            Ok(read) => read,
            Err(ActionError::Malformed(reason)) => {
                return Err(Error::bad("illegal_argument_exception", reason));
            }
            Err(ActionError::Invalid(reason)) => {
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

/// The single-document answer of `PUT /<index>/_create/<id>`, `POST /<index>/_doc` and
/// `DELETE /<index>/_doc/<id>` (the bulk item's inner object), with its HTTP status.
pub fn doc_write_json(index: &str, outcome: &ItemOutcome) -> (u16, Value) {
    let (item, _) = bulk_item_json(index, outcome);
    let inner = item
        .as_object()
        .and_then(|o| o.values().next())
        .cloned()
        .unwrap_or(Value::Null);
    let status = inner
        .get("status")
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok())
        .unwrap_or(500);
    match inner.get("error") {
        Some(e) => {
            let kind = e.get("type").and_then(Value::as_str).unwrap_or("exception");
            let reason = e.get("reason").and_then(Value::as_str).unwrap_or("");
            (status, error_body(status, kind, reason))
        }
        None => {
            let mut o = inner.as_object().cloned().unwrap_or_default();
            o.remove("status");
            (status, Value::Object(o))
        }
    }
}

/// Applies Elasticsearch's `filter_path`: comma-separated dotted paths where `*`
/// matches one key and `**` any number of keys; a leading `-` excludes. Arrays are
/// transparent (`items.*.status` reaches into every item).
pub fn filter_path(value: Value, spec: &str) -> Value {
    let mut include: Vec<Vec<&str>> = Vec::new();
    let mut exclude: Vec<Vec<&str>> = Vec::new();
    for p in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match p.strip_prefix('-') {
            Some(rest) => exclude.push(rest.split('.').collect()),
            None => include.push(p.split('.').collect()),
        }
    }
    let value = if include.is_empty() {
        value
    } else {
        let refs: Vec<&[&str]> = include.iter().map(Vec::as_slice).collect();
        keep(value, &refs).unwrap_or_else(|| json!({}))
    };
    if exclude.is_empty() {
        value
    } else {
        let refs: Vec<&[&str]> = exclude.iter().map(Vec::as_slice).collect();
        drop_paths(value, &refs).unwrap_or_else(|| json!({}))
    }
}

fn seg_match(seg: &str, key: &str) -> bool {
    seg == "**" || glob_match(seg, key)
}

/// The patterns left after `key` is consumed by each pattern; `None` for a pattern
/// that ends here (keep the whole value).
fn advance<'p>(patterns: &[&'p [&'p str]], key: &str) -> (bool, Vec<&'p [&'p str]>) {
    let mut whole = false;
    let mut next = Vec::new();
    for p in patterns {
        let Some((first, rest)) = p.split_first() else {
            continue;
        };
        if *first == "**" {
            // `**` may match zero keys (try the rest here) or this key (stay on `**`).
            let (w, n) = advance(&[rest], key);
            whole |= w || rest.is_empty();
            next.extend(n);
            next.push(p);
        } else if seg_match(first, key) {
            if rest.is_empty() {
                whole = true;
            } else {
                next.push(rest);
            }
        }
    }
    (whole, next)
}

fn keep(value: Value, patterns: &[&[&str]]) -> Option<Value> {
    match value {
        Value::Object(o) => {
            let mut out = Map::new();
            for (k, v) in o {
                let (whole, next) = advance(patterns, &k);
                if whole {
                    out.insert(k, v);
                } else if !next.is_empty()
                    && let Some(kept) = keep(v, &next)
                {
                    out.insert(k, kept);
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        Value::Array(a) => {
            let kept: Vec<Value> = a.into_iter().filter_map(|v| keep(v, patterns)).collect();
            (!kept.is_empty()).then_some(Value::Array(kept))
        }
        _ => None,
    }
}

fn drop_paths(value: Value, patterns: &[&[&str]]) -> Option<Value> {
    match value {
        Value::Object(o) => {
            let mut out = Map::new();
            for (k, v) in o {
                let (whole, next) = advance(patterns, &k);
                if whole {
                    continue;
                }
                if next.is_empty() {
                    out.insert(k, v);
                } else if let Some(v) = drop_paths(v, &next) {
                    out.insert(k, v);
                }
            }
            Some(Value::Object(out))
        }
        Value::Array(a) => Some(Value::Array(
            a.into_iter()
                .filter_map(|v| drop_paths(v, patterns))
                .collect(),
        )),
        other => Some(other),
    }
}

/// `GET /`: the cluster's name, id, version and tagline, as clients check them.
pub fn info_body(node_name: &str, cluster_name: &str, cluster_uuid: &str, version: &str) -> Value {
    json!({
        "name": node_name,
        "cluster_name": cluster_name,
        "cluster_uuid": cluster_uuid,
        "version": {
            "number": version,
            "build_flavor": "default",
            "build_type": "tidemark",
            "build_hash": "tidemark",
            "build_date": "2026-01-01T00:00:00.000Z",
            "build_snapshot": false,
            "lucene_version": "10.0.0",
            "minimum_wire_compatibility_version": "8.18.0",
            "minimum_index_compatibility_version": "8.0.0",
        },
        "tagline": "You Know, for Search",
    })
}

/// `GET /_license`: an active basic license.
pub fn license_body(cluster_uuid: &str) -> Value {
    json!({"license": {
        "status": "active",
        "uid": cluster_uuid,
        "type": "basic",
        "issue_date": "2026-01-01T00:00:00.000Z",
        "issue_date_in_millis": 1_767_225_600_000_i64,
        "max_nodes": 1000,
        "max_resource_units": null,
        "issued_to": "tidemark",
        "issuer": "elasticsearch",
        "start_date_in_millis": -1,
    }})
}

/// `GET /_cluster/health`: green, one node.
pub fn health_body(cluster_name: &str, indices: usize) -> Value {
    json!({
        "cluster_name": cluster_name,
        "status": "green",
        "timed_out": false,
        "number_of_nodes": 1,
        "number_of_data_nodes": 1,
        "active_primary_shards": indices,
        "active_shards": indices,
        "relocating_shards": 0,
        "initializing_shards": 0,
        "unassigned_shards": 0,
        "unassigned_primary_shards": 0,
        "delayed_unassigned_shards": 0,
        "number_of_pending_tasks": 0,
        "number_of_in_flight_fetch": 0,
        "task_max_waiting_in_queue_millis": 0,
        "active_shards_percent_as_number": 100.0,
    })
}

/// `_source` of a stored document: the façade's rebuilt document without its `_id` and
/// `_tsid` (Elasticsearch keeps those out of `_source`).
pub fn source_of(mut doc: Value) -> Value {
    if let Value::Object(o) = &mut doc {
        o.remove("_id");
        o.remove("_tsid");
    }
    doc
}

/// `GET /<index>/_doc/<id>`.
pub fn get_body(index: &str, id: &str, source: Option<Value>) -> Value {
    match source {
        Some(s) => json!({
            "_index": index, "_id": id, "_version": 1, "_seq_no": 0, "_primary_term": 1,
            "found": true, "_source": s,
        }),
        None => json!({"_index": index, "_id": id, "found": false}),
    }
}

#[cfg(test)]
mod tests {

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
    use super::*;

    #[test]
    fn index_names_follow_elasticsearch_rules() {
        assert!(check_index_name("metrics-system.cpu-default").is_ok());
        for bad in [
            "", "Upper", "_x", "-x", "a/b", "..", "a b", "a*", "a,b", "a:b",
        ] {
            assert!(check_index_name(bad).is_err(), "{bad}");
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
    fn action_lines_are_told_from_documents() {
        assert!(looks_like_action(b" {\"create\": {\"_index\": \"a\"}}"));
        assert!(looks_like_action(b"{\"delete\":{\"_id\":\"x\"}}"));
        assert!(!looks_like_action(b"{\"@timestamp\": 1, \"create\": {}}"));
        assert!(!looks_like_action(b"{\"index\": {}, \"other\": 1}"));
        assert!(!looks_like_action(b"{\"in\\\"dex\": {}}"));
        assert!(!looks_like_action(b"not json"));
        assert_eq!(
            read_action(1, b"{\"create\":{}}\r").ok().map(|a| a.0),
            Some(Action::Create)
        );
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

    #[test]
    fn filter_path_keeps_what_beats_ask_for() {
        let v = json!({"took": 3, "errors": true, "items": [
            {"create": {"_index": "a", "status": 201, "result": "created"}},
            {"create": {"_index": "a", "status": 409, "error": {"type": "t"}}},
        ]});
        let f = filter_path(v.clone(), "errors,items.*.error,items.*.status");
        assert_eq!(
            f,
            json!({"errors": true, "items": [
                {"create": {"status": 201}},
                {"create": {"status": 409, "error": {"type": "t"}}},
            ]})
        );
        assert_eq!(filter_path(v.clone(), "took"), json!({"took": 3}));
        assert_eq!(
            filter_path(v.clone(), "**.status").pointer("/items/1/create/status"),
            Some(&json!(409))
        );
        let without = filter_path(v, "-items");
        assert_eq!(without, json!({"took": 3, "errors": true}));
    }

    #[test]
    fn templates_pick_highest_priority_and_merge_components() {
        let mut t = BTreeMap::new();
        t.insert("low".into(), json!({"index_patterns": ["metrics-*"], "priority": 1, "template": {"settings": {"index.mode": "events"}}}));
        t.insert("high".into(), json!({"index_patterns": ["metrics-*-*"], "priority": 200, "composed_of": ["c"], "template": {"mappings": {"properties": {"b": {"type": "long"}}}}}));
        let mut c = BTreeMap::new();
        c.insert(
            "c".into(),
            json!({"template": {"mappings": {"properties": {"a": {"type": "keyword"}}}}}),
        );
        let body = template_for("metrics-foo-default", &t, &c)
            .unwrap()
            .unwrap();
        assert_eq!(
            body.pointer("/mappings/properties/a/type"),
            Some(&json!("keyword"))
        );
        assert_eq!(
            body.pointer("/mappings/properties/b/type"),
            Some(&json!("long"))
        );
        assert!(template_for("logs-x", &t, &c).unwrap().is_none());
        let mut broken = BTreeMap::new();
        broken.insert(
            "x".into(),
            json!({"index_patterns": "x*", "composed_of": ["missing"]}),
        );
        assert!(template_for("xy", &broken, &c).is_err());
    }

    #[test]
    fn create_bodies_drop_what_tidemark_does_not_store() {
        let m = mapping_from_body(&json!({
            "settings": {"index.mode": "time_series", "number_of_shards": "1", "index": {"lifecycle": {"name": "p"}, "routing_path": ["host"]}},
            "mappings": {"dynamic": true, "dynamic_templates": [], "properties": {
                "host": {"type": "keyword", "time_series_dimension": true},
                "message": {"type": "text"},
                "data_stream": {"properties": {"type": {"type": "constant_keyword"}}},
                "cpu": {"type": "double", "time_series_metric": "gauge"}}}
        }))
        .unwrap();
        assert!(m.field("message").is_none());
        assert!(m.field("data_stream.type").is_some());
        assert!(m.field("cpu").is_some());
        let e =
            mapping_from_body(&json!({"mappings": {"properties": {"host": {"type": "keyword"}}}}))
                .unwrap_err();
        assert_eq!(e.status_and_kind(), (400, "mapper_parsing_exception"));
    }
}
