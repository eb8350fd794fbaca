//! Shaping Elasticsearch answers: a JSON response through `filter_path`, and
//! `filter_path` itself.

use std::collections::HashMap;

use axum::response::Response;
use serde_json::{Map, Value};

use crate::auth::glob_match;
use crate::http::json;

/// A JSON response, through `filter_path` when asked.
pub(crate) fn respond(status: u16, body: Value, params: &HashMap<String, String>) -> Response {
    let body = match params.get("filter_path") {
        Some(spec) if !spec.is_empty() => crate::es::respond::filter_path(body, spec),
        _ => body,
    };
    json(status, &body)
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
        keep(value, &refs).unwrap_or_else(|| serde_json::json!({}))
    };
    if exclude.is_empty() {
        value
    } else {
        let refs: Vec<&[&str]> = exclude.iter().map(Vec::as_slice).collect();
        drop_paths(value, &refs).unwrap_or_else(|| serde_json::json!({}))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_path_keeps_what_beats_ask_for() {
        let v = serde_json::json!({"took": 3, "errors": true, "items": [
            {"create": {"_index": "a", "status": 201, "result": "created"}},
            {"create": {"_index": "a", "status": 409, "error": {"type": "t"}}},
        ]});
        let f = filter_path(v.clone(), "errors,items.*.error,items.*.status");
        assert_eq!(
            f,
            serde_json::json!({"errors": true, "items": [
                {"create": {"status": 201}},
                {"create": {"status": 409, "error": {"type": "t"}}},
            ]})
        );
        assert_eq!(
            filter_path(v.clone(), "took"),
            serde_json::json!({"took": 3})
        );
        assert_eq!(
            filter_path(v.clone(), "**.status").pointer("/items/1/create/status"),
            Some(&serde_json::json!(409))
        );
        let without = filter_path(v, "-items");
        assert_eq!(without, serde_json::json!({"took": 3, "errors": true}));
    }
}
