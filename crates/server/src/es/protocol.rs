//! Elasticsearch index definitions: index names, create-index bodies (mappings and
//! settings normalised to what Tidemark stores), index and component templates, and
//! the error body every Elasticsearch route answers with. Plain data in and out,
//! testable without a socket.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use tidemark::Mapping;

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
