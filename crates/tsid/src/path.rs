//! Dotted paths into JSON documents.
//!
//! `{"host":{"name":"a"}}`, `{"host.name":"a"}` and mixes such as
//! `{"a.b":{"c":1}}` all hold the field `a.b.c` (`host.name` above): a path
//! names a leaf, not a nesting style.

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::value::check_name;

/// Checks a configured path: a valid name made of non-empty dot-separated
/// segments.
pub(crate) fn check_path(path: &str) -> Result<()> {
    check_name(path).map_err(|e| match e {
        Error::InvalidPath { .. } => Error::InvalidPath {
            path: path.to_owned(),
        },
        other => other,
    })?;
    // A byte scan instead of `split('.')`: this runs for every typed pair.
    let b = path.as_bytes();
    let bad_end = b.first() == Some(&b'.') || b.last() == Some(&b'.');
    if bad_end || b.windows(2).any(|w| w == b"..") {
        return Err(Error::InvalidPath {
            path: path.to_owned(),
        });
    }
    Ok(())
}

/// Finds the value of the field `path` in `obj`, however the document nests
/// it. `null` counts as absent.
///
/// # Errors
///
/// [`Error::DuplicatePath`] when the document holds the field more than once
/// (`{"a.b":1,"a":{"b":2}}`): which value is meant would be a guess.
pub(crate) fn lookup<'v>(obj: &'v Map<String, Value>, path: &str) -> Result<Option<&'v Value>> {
    lookup_rest(obj, path, path)
}

fn lookup_rest<'v>(
    obj: &'v Map<String, Value>,
    rest: &str,
    full: &str,
) -> Result<Option<&'v Value>> {
    let mut found = obj.get(rest).filter(|v| !v.is_null());
    // Each dot may also be a nesting boundary. Paths are short, so trying
    // every split costs a few map lookups and no allocation.
    for (i, _) in rest.match_indices('.') {
        let (Some(head), Some(tail)) = (rest.get(..i), rest.get(i + 1..)) else {
            continue;
        };
        if let Some(Value::Object(inner)) = obj.get(head)
            && let Some(v) = lookup_rest(inner, tail, full)?
        {
            if found.is_some() {
                return Err(Error::DuplicatePath {
                    path: full.to_owned(),
                });
            }
            found = Some(v);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn dotted_and_nested_are_the_same_field() {
        let a = obj(json!({"host": {"name": "a"}}));
        let b = obj(json!({"host.name": "a"}));
        let c = obj(json!({"x.y": {"z": 1}}));
        assert_eq!(lookup(&a, "host.name").unwrap(), Some(&json!("a")));
        assert_eq!(lookup(&b, "host.name").unwrap(), Some(&json!("a")));
        assert_eq!(lookup(&c, "x.y.z").unwrap(), Some(&json!(1)));
        assert_eq!(lookup(&a, "host").unwrap(), Some(&json!({"name": "a"})));
        assert_eq!(lookup(&a, "host.ip").unwrap(), None);
    }

    #[test]
    fn null_is_absent() {
        let a = obj(json!({"a": null, "b": {"c": null}}));
        assert_eq!(lookup(&a, "a").unwrap(), None);
        assert_eq!(lookup(&a, "b.c").unwrap(), None);
    }

    #[test]
    fn a_field_held_twice_is_an_error() {
        let a = obj(json!({"a.b": 1, "a": {"b": 2}}));
        assert_eq!(
            lookup(&a, "a.b"),
            Err(Error::DuplicatePath { path: "a.b".into() })
        );
    }

    #[test]
    fn paths_need_non_empty_segments() {
        for bad in ["", ".a", "a.", "a..b"] {
            assert_eq!(
                check_path(bad),
                Err(Error::InvalidPath { path: bad.into() })
            );
        }
        assert!(check_path("a.b").is_ok());
    }
}
