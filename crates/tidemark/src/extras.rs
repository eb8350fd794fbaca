//! Extra (keyword and boolean) per-row fields: neither dimensions nor metrics.

use serde_json::{Map, Value};
use tidemark_segment::{Extra, Point};

use crate::doc::insert_path;

pub(crate) fn insert_extras(root: &mut Map<String, Value>, point: &Point) {
    for (name, e) in &point.extras {
        let v = match e {
            Extra::Keyword(s) => Value::String(s.clone()),
            Extra::Bool(b) => Value::Bool(*b),
        };
        insert_path(root, name, v);
    }
}

/// Merges the extras of an update into a stored point.
pub(crate) fn merge_extras(stored: &mut Point, update: &Point) {
    for (name, e) in &update.extras {
        match stored.extras.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = e.clone(),
            None => stored.extras.push((name.clone(), e.clone())),
        }
    }
}

/// Sets the extras read from a segment row.
pub(crate) fn set_extras(point: &mut Point, extras: Vec<(String, Extra)>) {
    point.extras = extras;
    point.extras.sort_by(|a, b| a.0.cmp(&b.0));
}
