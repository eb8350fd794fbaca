//! Elasticsearch `_bulk` actions and per-item results.

use serde_json::{Map, Value, json};

use crate::error::{Error, Result};

/// A `_bulk` action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Store the document unless its `_id` is stored (then: a duplicate, 409).
    Create,
    /// Store the document, replacing a stored one with the same `_id`.
    Index,
    /// Delete by `_id`.
    Delete,
    /// Partial update by `_id`: the given metric and extra fields replace the stored
    /// ones (dimensions and the timestamp make the `_id` and cannot change).
    Update,
}

impl Action {
    /// `"create"`, `"index"`, `"delete"` or `"update"`.
    pub fn name(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Index => "index",
            Action::Delete => "delete",
            Action::Update => "update",
        }
    }

    /// Parses an action name.
    pub fn parse(name: &str) -> Option<Action> {
        Some(match name {
            "create" => Action::Create,
            "index" => Action::Index,
            "delete" => Action::Delete,
            "update" => Action::Update,
            _ => return None,
        })
    }
}

/// One `_bulk` item: an action, its optional `_id`, and the document (for `create` and
/// `index`) or the partial document (the `doc` of an `update`).
#[derive(Debug, Clone, PartialEq)]
pub struct BulkItem {
    /// The 1-based input line of the action (or of the document, in plain NDJSON).
    pub line: u64,
    /// The action.
    pub action: Action,
    /// The `_id` given, if any.
    pub id: Option<String>,
    /// The document (`create`, `index`) or the `doc` of an `update`; `None` for `delete`.
    pub doc: Option<Value>,
}

impl BulkItem {
    /// A `create` of `doc`.
    pub fn create(doc: Value) -> BulkItem {
        BulkItem {
            line: 0,
            action: Action::Create,
            id: None,
            doc: Some(doc),
        }
    }

    /// An `index` of `doc`.
    pub fn index(doc: Value) -> BulkItem {
        BulkItem {
            line: 0,
            action: Action::Index,
            id: None,
            doc: Some(doc),
        }
    }

    /// A `delete` of `id`.
    pub fn delete(id: impl Into<String>) -> BulkItem {
        BulkItem {
            line: 0,
            action: Action::Delete,
            id: Some(id.into()),
            doc: None,
        }
    }

    /// An `update` of `id` with the fields of `doc`.
    pub fn update(id: impl Into<String>, doc: Value) -> BulkItem {
        BulkItem {
            line: 0,
            action: Action::Update,
            id: Some(id.into()),
            doc: Some(doc),
        }
    }

    /// The same item with its input line number.
    pub fn at_line(mut self, line: u64) -> BulkItem {
        self.line = line;
        self
    }
}

/// A `_bulk` action line, read: `{"create": {"_index": "…", "_id": "…"}}` and the like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionLine {
    /// The action.
    pub action: Action,
    /// `_index`, if given.
    pub index: Option<String>,
    /// `_id`, if given.
    pub id: Option<String>,
}

/// Why an action line cannot be used, as Elasticsearch tells the two apart: a
/// malformed line (Elasticsearch refuses the whole request) or a well-formed action
/// that is invalid (collected as a validation failure). The text says what is wrong,
/// without the line number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionError {
    /// Not a JSON object with one key, not one of `create`, `delete`, `index`,
    /// `update`, or metadata of the wrong type.
    Malformed(String),
    /// A `delete` or `update` without its `_id`.
    Invalid(String),
}

impl std::fmt::Display for ActionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ActionError::Malformed(why) | ActionError::Invalid(why) => f.write_str(why),
        }
    }
}

/// Reads a `_bulk` action line, the one parser of them (the server's `_bulk` and the
/// CLI's bulk-format ingest). The two lines shippers send most (`{"create":{}}`,
/// `{"index":{}}`) are recognised without parsing.
///
/// # Errors
/// [`ActionError`] saying what is wrong.
pub fn read_action(line: &[u8]) -> std::result::Result<ActionLine, ActionError> {
    let bare = |action| ActionLine {
        action,
        index: None,
        id: None,
    };
    match line.trim_ascii() {
        b"{\"create\":{}}" => return Ok(bare(Action::Create)),
        b"{\"index\":{}}" => return Ok(bare(Action::Index)),
        _ => {}
    }
    let malformed = |why: String| ActionError::Malformed(why);
    let v: Map<String, Value> = serde_json::from_slice(line)
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
            "id is missing for the {name}"
        )));
    }
    Ok(ActionLine { action, index, id })
}

/// Parses a `_bulk` action line ([`read_action`]): the action and the `_id`, if given.
///
/// # Errors
/// [`Error::BulkAction`] with [`read_action`]'s reason.
pub fn parse_action(line: &str) -> Result<(Action, Option<String>)> {
    read_action(line.as_bytes())
        .map(|a| (a.action, a.id))
        .map_err(|e| Error::BulkAction {
            reason: e.to_string(),
        })
}

/// Whether `line` is an action line (a one-key object whose key is an action name),
/// to tell a missing document line from the next action and to resynchronise after a
/// malformed line. The first key is checked without parsing the line, so a document
/// (whose first key is rarely an action name) is not parsed twice.
pub fn looks_like_action(line: &[u8]) -> bool {
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

/// What one item did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ItemStatus {
    /// Stored (201).
    Created,
    /// Already stored: an idempotent no-op, counted apart from errors (409 "document
    /// already exists").
    Duplicate,
    /// Stored by `index` (201, or 200 when it replaced a stored document).
    Indexed {
        /// Whether a stored document was replaced.
        replaced: bool,
    },
    /// Updated (200).
    Updated,
    /// Deleted (200).
    Deleted,
    /// No such document (404).
    NotFound,
    /// Failed (400), with the reason.
    Error(String),
}

/// The result of one item, as in an Elasticsearch bulk response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemResult {
    /// The 1-based input line of the item.
    pub line: u64,
    /// The action.
    pub action: Action,
    /// The document `_id`, when known.
    pub id: Option<String>,
    /// What happened.
    pub status: ItemStatus,
}

impl ItemResult {
    /// The HTTP status Elasticsearch would give.
    pub fn http_status(&self) -> u16 {
        match &self.status {
            ItemStatus::Created | ItemStatus::Indexed { replaced: false } => 201,
            ItemStatus::Duplicate => 409,
            ItemStatus::Indexed { replaced: true } | ItemStatus::Updated | ItemStatus::Deleted => {
                200
            }
            ItemStatus::NotFound => 404,
            ItemStatus::Error(_) => 400,
        }
    }

    /// Whether the item failed (duplicates and not-found deletes are not failures).
    pub fn is_error(&self) -> bool {
        matches!(self.status, ItemStatus::Error(_))
    }

    /// `"created"`, `"duplicate"`, `"updated"`, `"deleted"`, `"not_found"` or `"error"`
    /// (an `index` that replaced a document is `"updated"`, as in Elasticsearch).
    pub fn result_name(&self) -> &'static str {
        match &self.status {
            ItemStatus::Created | ItemStatus::Indexed { replaced: false } => "created",
            ItemStatus::Duplicate => "duplicate",
            ItemStatus::Indexed { replaced: true } | ItemStatus::Updated => "updated",
            ItemStatus::Deleted => "deleted",
            ItemStatus::NotFound => "not_found",
            ItemStatus::Error(_) => "error",
        }
    }

    /// The item as in an Elasticsearch bulk response:
    /// `{"create": {"_id": .., "status": 409, "result": "duplicate", "error": {..}, "line": 3}}`.
    pub fn to_json(&self) -> Value {
        let mut inner = Map::new();
        if let Some(id) = &self.id {
            inner.insert("_id".to_owned(), Value::String(id.clone()));
        }
        inner.insert("status".to_owned(), json!(self.http_status()));
        inner.insert("result".to_owned(), json!(self.result_name()));
        match &self.status {
            ItemStatus::Duplicate => {
                inner.insert(
                    "error".to_owned(),
                    json!({"type": "version_conflict_engine_exception", "reason": "document already exists"}),
                );
            }
            ItemStatus::Error(reason) => {
                inner.insert(
                    "error".to_owned(),
                    json!({"type": "document_parsing_exception", "reason": reason}),
                );
            }
            _ => {}
        }
        inner.insert("line".to_owned(), json!(self.line));
        let mut outer = Map::new();
        outer.insert(self.action.name().to_owned(), Value::Object(inner));
        Value::Object(outer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_lines_are_told_from_documents() {
        assert!(looks_like_action(b" {\"create\": {\"_index\": \"a\"}}"));
        assert!(looks_like_action(b"{\"delete\":{\"_id\":\"x\"}}"));
        assert!(!looks_like_action(b"{\"@timestamp\": 1, \"create\": {}}"));
        assert!(!looks_like_action(b"{\"index\": {}, \"other\": 1}"));
        assert!(!looks_like_action(b"{\"in\\\"dex\": {}}"));
        assert!(!looks_like_action(b"not json"));
        assert_eq!(
            read_action(b"{\"create\":{}}\r").map(|a| a.action),
            Ok(Action::Create)
        );
        let read = read_action(b"{\"index\": {\"_index\": \"i\", \"_id\": \"x\"}}").unwrap();
        assert_eq!(
            (read.index.as_deref(), read.id.as_deref()),
            (Some("i"), Some("x"))
        );
        for (line, malformed) in [
            (&b"{\"upsert\": {}}"[..], true),
            (b"{nope", true),
            (b"{\"create\": {\"_id\": 5}}", true),
            (b"{\"create\": []}", true),
            (b"{\"delete\": {}}", false),
            (b"{\"update\": {\"_index\": \"i\"}}", false),
        ] {
            let e = read_action(line).unwrap_err();
            assert_eq!(matches!(e, ActionError::Malformed(_)), malformed, "{e}");
        }
    }
}
