//! Metric metadata Prometheus sends with remote write (type, help, unit per metric
//! family), kept per label-keyed index in `<index dir>/prom-metadata.json` (rewritten
//! atomically, only when an entry is new or changed; Prometheus resends it every
//! minute) and answered by `GET /api/v1/metadata`.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Mutex;

use serde_json::{Value, json};

use crate::error::{Error, Result};

/// The file in an index directory.
pub const METADATA_FILE: &str = "prom-metadata.json";

/// Families an index keeps metadata for (past it, new families are not recorded).
const MAX_FAMILIES: usize = 100_000;

/// One family's metadata: (type, help, unit).
pub(crate) type Entry = (String, String, String);

/// The metadata of every index, loaded from its file on first use.
#[derive(Debug, Default)]
pub(crate) struct MetadataStore {
    by_index: Mutex<HashMap<String, BTreeMap<String, Entry>>>,
}

fn load(dir: &Path) -> BTreeMap<String, Entry> {
    let Ok(text) = std::fs::read_to_string(dir.join(METADATA_FILE)) else {
        return BTreeMap::new();
    };
    let Ok(Value::Object(m)) = serde_json::from_str::<Value>(&text) else {
        return BTreeMap::new();
    };
    m.into_iter()
        .map(|(k, v)| {
            let s = |f: &str| v[f].as_str().unwrap_or_default().to_owned();
            (k, (s("type"), s("help"), s("unit")))
        })
        .collect()
}

impl MetadataStore {
    /// Records `entries` for the index `name` in `dir`; writes its file when one is new
    /// or changed.
    ///
    /// # Errors
    /// `500` when the file cannot be written.
    pub(crate) fn record(
        &self,
        name: &str,
        dir: &Path,
        entries: Vec<(String, Entry)>,
    ) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut all = self
            .by_index
            .lock()
            .map_err(|_| Error::status(500, "exception", "metadata lock poisoned"))?;
        let map = all.entry(name.to_owned()).or_insert_with(|| load(dir));
        let mut changed = false;
        for (family, e) in entries {
            if map.get(&family) == Some(&e)
                || (map.len() >= MAX_FAMILIES && !map.contains_key(&family))
            {
                continue;
            }
            map.insert(family, e);
            changed = true;
        }
        if !changed {
            return Ok(());
        }
        let doc: serde_json::Map<String, Value> = map
            .iter()
            .map(|(k, (t, h, u))| (k.clone(), json!({"type": t, "help": h, "unit": u})))
            .collect();
        let path = dir.join(METADATA_FILE);
        tidemark::segment::AtomicFile::write_all_to(
            &path,
            Value::Object(doc).to_string().as_bytes(),
        )
        .map_err(|e| Error::status(500, "exception", format!("writing {}: {e}", path.display())))
    }

    /// The metadata of the index `name` in `dir`, by family.
    pub(crate) fn get(&self, name: &str, dir: &Path) -> BTreeMap<String, Entry> {
        match self.by_index.lock() {
            Ok(mut all) => all
                .entry(name.to_owned())
                .or_insert_with(|| load(dir))
                .clone(),
            Err(_) => load(dir),
        }
    }
}
