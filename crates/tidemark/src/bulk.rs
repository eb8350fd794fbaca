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

/// Parses a `_bulk` action line: `{"create": {"_id": "..."}}` and the like. Returns the
/// action and the `_id`, if given.
///
/// # Errors
/// [`Error::Json`], [`Error::BulkAction`].
pub fn parse_action(line: &str) -> Result<(Action, Option<String>)> {
    let v: Value = serde_json::from_str(line)?;
    let Value::Object(obj) = v else {
        return Err(Error::BulkAction {
            reason: "expected an object such as {\"create\": {}}".to_owned(),
        });
    };
    let mut it = obj.into_iter();
    let (Some((name, meta)), None) = (it.next(), it.next()) else {
        return Err(Error::BulkAction {
            reason: "expected exactly one action: create, index, delete or update".to_owned(),
        });
    };
    let Some(action) = Action::parse(&name) else {
        return Err(Error::BulkAction {
            reason: format!("unknown action `{name}`: expected create, index, delete or update"),
        });
    };
    let id = match meta.get("_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(Error::BulkAction {
                reason: format!("`_id` must be a string, found {other}"),
            });
        }
    };
    if id.is_none() && matches!(action, Action::Delete | Action::Update) {
        return Err(Error::BulkAction {
            reason: format!("`{}` needs an `_id`", action.name()),
        });
    }
    Ok((action, id))
}

/// Whether `line` looks like a `_bulk` action line (an object with one key that is an
/// action name), to resynchronise after a malformed line.
pub(crate) fn looks_like_action(line: &str) -> bool {
    match serde_json::from_str::<Map<String, Value>>(line) {
        Ok(obj) => obj.len() == 1 && obj.keys().all(|k| Action::parse(k).is_some()),
        Err(_) => false,
    }
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
