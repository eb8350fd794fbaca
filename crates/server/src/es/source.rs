//! `_source` filtering: `false`, includes and excludes (`*` wildcards on dotted paths),
//! from a search body or the URL.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// `_source` filtering: `false`, includes and excludes (`*` wildcards on dotted paths).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceFilter {
    /// No `_source` at all.
    pub disabled: bool,
    /// Paths to keep (all when empty).
    pub includes: Vec<String>,
    /// Paths to drop.
    pub excludes: Vec<String>,
}

impl SourceFilter {
    /// From the `_source`, `_source_includes` and `_source_excludes` query parameters.
    pub fn from_params(params: &HashMap<String, String>) -> SourceFilter {
        let list = |k: &str| -> Vec<String> {
            params
                .get(k)
                .map(|v| {
                    v.split(',')
                        .map(|s| s.trim().to_owned())
                        .filter(|s| !s.is_empty())
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut f = SourceFilter {
            disabled: false,
            includes: list("_source_includes"),
            excludes: list("_source_excludes"),
        };
        match params.get("_source").map(String::as_str) {
            Some("false") => f.disabled = true,
            Some("true") | None => {}
            Some(_) => f.includes.extend(list("_source")),
        }
        f
    }

    /// From a search body's `_source`: `false`, a path, a list, or
    /// `{"includes": [..], "excludes": [..]}`.
    pub fn from_json(v: Option<&Value>) -> SourceFilter {
        let strings = |v: Option<&Value>| -> Vec<String> {
            match v {
                Some(Value::String(s)) => vec![s.clone()],
                Some(Value::Array(a)) => a
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect(),
                _ => Vec::new(),
            }
        };
        match v {
            None | Some(Value::Bool(true)) => SourceFilter::default(),
            Some(Value::Bool(false)) => SourceFilter {
                disabled: true,
                ..SourceFilter::default()
            },
            Some(Value::Object(o)) => SourceFilter {
                disabled: false,
                includes: strings(o.get("includes").or_else(|| o.get("include"))),
                excludes: strings(o.get("excludes").or_else(|| o.get("exclude"))),
            },
            other => SourceFilter {
                disabled: false,
                includes: strings(other),
                excludes: Vec::new(),
            },
        }
    }

    /// Filters a `_source`; `Value::Null` when disabled.
    pub fn apply(&self, source: Value) -> Value {
        if self.disabled {
            return Value::Null;
        }
        if self.includes.is_empty() && self.excludes.is_empty() {
            return source;
        }
        let mut out = Map::new();
        filter_into(&source, "", self, &mut out);
        Value::Object(out)
    }
}

fn path_matches(patterns: &[String], path: &str) -> bool {
    patterns.iter().any(|p| {
        crate::auth::glob_match(p, path)
            || path
                .strip_prefix(p.as_str())
                .is_some_and(|rest| rest.starts_with('.'))
    })
}

/// Whether some include pattern could match below `prefix`.
fn may_match_below(patterns: &[String], prefix: &str) -> bool {
    patterns.iter().any(|p| {
        p.starts_with(&format!("{prefix}."))
            || p.starts_with('*')
            || crate::auth::glob_match(p, prefix)
    })
}

fn filter_into(v: &Value, prefix: &str, f: &SourceFilter, out: &mut Map<String, Value>) {
    let Value::Object(o) = v else { return };
    for (k, child) in o {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        if path_matches(&f.excludes, &path) {
            continue;
        }
        let included = f.includes.is_empty() || path_matches(&f.includes, &path);
        // Objects are walked when a pattern may still select or drop something below.
        let descend = child.is_object() && (!included || !f.excludes.is_empty());
        if descend && (included || may_match_below(&f.includes, &path)) {
            let mut sub = Map::new();
            let inner = if included {
                SourceFilter {
                    includes: Vec::new(),
                    ..f.clone()
                }
            } else {
                f.clone()
            };
            filter_into(child, &path, &inner, &mut sub);
            if !sub.is_empty() {
                out.insert(k.clone(), Value::Object(sub));
            }
        } else if !descend && included {
            out.insert(k.clone(), child.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn source_filters_include_and_exclude_paths() {
        let doc = json!({"@timestamp": 1, "k8s": {"pod": {"name": "a", "uid": "u"}, "node": "n"}, "cpu": 0.5});
        let f = SourceFilter::from_json(Some(&json!(["k8s.pod.*", "cpu"])));
        assert_eq!(
            f.apply(doc.clone()),
            json!({"k8s": {"pod": {"name": "a", "uid": "u"}}, "cpu": 0.5})
        );
        let f = SourceFilter::from_json(Some(&json!({"excludes": ["k8s.pod.uid"]})));
        assert_eq!(
            f.apply(doc.clone()),
            json!({"@timestamp": 1, "k8s": {"pod": {"name": "a"}, "node": "n"}, "cpu": 0.5})
        );
        let f = SourceFilter::from_json(Some(&json!("k8s")));
        assert_eq!(
            f.apply(doc.clone()),
            json!({"k8s": {"pod": {"name": "a", "uid": "u"}, "node": "n"}})
        );
        assert_eq!(
            SourceFilter::from_json(Some(&json!(false))).apply(doc),
            Value::Null
        );
    }
}
