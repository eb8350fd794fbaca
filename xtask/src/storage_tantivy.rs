//! `storage-compare --with-tantivy` (xtask feature `tantivy`): an external anchor for the
//! inverted baseline. The dataset's unique documents are indexed into tantivy twice, with
//! and without an `_id` string field (indexed, not stored: what Elasticsearch keeps for
//! `_id` lookups), each merged into one segment; the difference in directory bytes per
//! document is what the `_id` index costs there.
//!
//! Documents: dimensions as untokenized indexed strings, the timestamp as a fast indexed
//! i64, metrics as fast f64/i64 columns, event fields as untokenized strings (booleans
//! as fast bools). The `_id` is the synthetic id's base64url text (`_tsid ‖ timestamp`,
//! 38 characters) for time series, as Elasticsearch's time-series `_id`; for events, a
//! content fingerprint (MD5 of the fingerprint fields, base64url, behind a 12-hex-digit
//! millisecond prefix: 34 characters, close to the length of Elasticsearch's generated
//! ids).

use std::path::Path;

use anyhow::{Context, Result, anyhow};
use serde_json::{Value, json};
use tantivy::schema::{FAST, Field, INDEXED, STRING, Schema};
use tantivy::{Index, IndexWriter, TantivyDocument};
use tidemark_datagen::{Dataset, Dim as GenDim, Field as GenField, MetricVal};
use tidemark_tsid::{FingerprintBuilder, FingerprintMethod, IdEncoding, TimestampPrefix};
use tidemark_tsid::{SyntheticId, Tsid};

struct Fields {
    schema: Schema,
    id: Option<Field>,
    ts: Field,
    by_name: Vec<(String, Field)>,
}

fn fields(ds: &Dataset, with_id: bool) -> Fields {
    let mut b = Schema::builder();
    let id = with_id.then(|| b.add_text_field("_id", STRING));
    let ts = b.add_i64_field("@timestamp", INDEXED | FAST);
    let s = ds.schema();
    let mut by_name = Vec::new();
    for d in &s.dimensions {
        by_name.push((d.to_string(), b.add_text_field(d, STRING | FAST)));
    }
    for (m, kind) in &s.metrics {
        let f = match kind {
            tidemark_datagen::MetricKind::Gauge => b.add_f64_field(m, FAST),
            tidemark_datagen::MetricKind::Counter => b.add_i64_field(m, FAST),
        };
        by_name.push((m.to_string(), f));
    }
    for f in &s.fields {
        let field = if f.ends_with("internal") {
            b.add_bool_field(f, FAST)
        } else {
            b.add_text_field(f, STRING)
        };
        by_name.push((f.to_string(), field));
    }
    Fields {
        schema: b.build(),
        id,
        ts,
        by_name,
    }
}

fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let meta = entry?.metadata()?;
        if meta.is_file() {
            total += meta.len();
        }
    }
    Ok(total)
}

/// Indexes the unique documents; returns the index directory's bytes after a merge to
/// one segment.
fn index_bytes(ds: &Dataset, with_id: bool) -> Result<u64> {
    let dir = tempfile::Builder::new()
        .prefix("tidemark-tantivy-")
        .tempdir()?;
    let f = fields(ds, with_id);
    let index = Index::create_in_dir(dir.path(), f.schema.clone())?;
    let mut writer: IndexWriter<TantivyDocument> = index.writer_with_num_threads(1, 64_000_000)?;
    let mut computer = ds.tsid_computer().context("tsid computer")?;
    let mut tsids: Vec<Option<Tsid>> = vec![None; ds.series_count() as usize];
    let field_of = |name: &str| {
        f.by_name
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, f)| *f)
            .ok_or_else(|| anyhow!("no tantivy field {name}"))
    };
    let mut fingerprinter = if ds.schema().fingerprint.is_empty() {
        None
    } else {
        let fields = ds
            .schema()
            .fingerprint
            .iter()
            .filter(|f| **f != "@timestamp");
        Some(
            FingerprintBuilder::new(FingerprintMethod::Md5)
                .encoding(IdEncoding::Base64Url)
                .timestamp_prefix(TimestampPrefix::Millis)
                .fields(fields.copied())
                .build()?,
        )
    };
    for r in ds.records().filter(|r| !r.duplicate) {
        let mut doc = TantivyDocument::default();
        doc.add_i64(f.ts, r.ts_millis);
        for (name, v) in r.dims.iter() {
            let text = match v {
                GenDim::Keyword(s) => s.clone(),
                GenDim::Int(i) => i.to_string(),
            };
            doc.add_text(field_of(name)?, text);
        }
        for (name, v) in &r.metrics {
            match v {
                MetricVal::Gauge(g) => doc.add_f64(field_of(name)?, *g),
                MetricVal::Counter(c) => doc.add_i64(field_of(name)?, *c),
            }
        }
        for (name, v) in &r.fields {
            match v {
                GenField::Keyword(s) => doc.add_text(field_of(name)?, s),
                GenField::Bool(b) => doc.add_bool(field_of(name)?, *b),
            }
        }
        if let Some(id) = f.id {
            let slot = tsids
                .get_mut(r.series as usize)
                .context("series number past the series count")?;
            let tsid = match slot {
                Some(t) => *t,
                None => *slot.insert(r.tsid(&mut computer)?),
            };
            let text = match fingerprinter.as_mut() {
                None => SyntheticId::new(tsid, r.ts_millis).to_text(),
                // Events: no natural key; the content fingerprint with its timestamp.
                Some(fp) => fp.fingerprint(&r.to_json(), r.ts_millis)?,
            };
            doc.add_text(id, text);
        }
        writer.add_document(doc)?;
    }
    writer.commit()?;
    let ids = index.searchable_segment_ids()?;
    if ids.len() > 1 {
        writer.merge(&ids).wait()?;
    }
    writer.wait_merging_threads()?;
    let writer: IndexWriter<TantivyDocument> = index.writer_with_num_threads(1, 15_000_000)?;
    writer.garbage_collect_files().wait()?;
    drop(writer);
    dir_bytes(dir.path())
}

/// The tantivy figures of one dataset, as JSON (`bytes_without_id`, `bytes_with_id`,
/// `bytes_per_doc_without_id`, `bytes_per_doc_with_id`, `id_bytes_per_doc`).
pub(crate) fn measure(ds: &Dataset, name: &str) -> Result<Value> {
    let docs = ds.unique_docs().max(1) as f64;
    let without = index_bytes(ds, false).with_context(|| format!("{name}: tantivy without _id"))?;
    let with = index_bytes(ds, true).with_context(|| format!("{name}: tantivy with _id"))?;
    Ok(json!({
        "documents": ds.unique_docs(),
        "bytes_without_id": without,
        "bytes_with_id": with,
        "bytes_per_doc_without_id": without as f64 / docs,
        "bytes_per_doc_with_id": with as f64 / docs,
        "id_bytes_per_doc": (with as f64 - without as f64) / docs,
    }))
}
