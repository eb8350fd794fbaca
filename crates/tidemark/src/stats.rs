//! Index statistics and disk usage (like Elasticsearch's `_stats` and `_disk_usage`).

use serde_json::{Map, Value, json};

use crate::counters::Counters;
use crate::error::{Error, Result};
use crate::index::Index;

/// What an index holds and has done.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexStats {
    /// Live documents.
    pub documents: u64,
    /// Distinct series.
    pub series: u64,
    /// Live segments.
    pub segments: u64,
    /// Documents in the in-memory buffer (in the write-ahead log, not yet in a segment).
    pub buffered: u64,
    /// Deleted rows still in segments (dropped by merges).
    pub deleted_rows: u64,
    /// Bytes of every file in the index directory.
    pub bytes: u64,
    /// `bytes / documents`.
    pub bytes_per_document: f64,
    /// Cumulative counters (see [`Counters`]).
    pub counters: Counters,
    /// Time partitions (1 for an unpartitioned index).
    pub partitions: u64,
    /// Partitions dropped by retention, and the rows they held (cumulative), and documents
    /// refused this session as older than the late window or the retention.
    pub partition_stats: tidemark_dedup::PartitionStats,
}

impl IndexStats {
    /// The statistics as JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "documents": self.documents,
            "series": self.series,
            "segments": self.segments,
            "buffered": self.buffered,
            "deleted_rows": self.deleted_rows,
            "bytes": self.bytes,
            "bytes_per_document": (self.bytes_per_document * 100.0).round() / 100.0,
            "counters": self.counters.to_json(),
            "partitions": self.partitions,
            "dropped_partitions": self.partition_stats.dropped_partitions,
            "dropped_rows": self.partition_stats.dropped_rows,
            "expired_partitions": self.partition_stats.expired_partitions,
            "expired_rows": self.partition_stats.expired_rows,
            "rejected_too_old": self.partition_stats.rejected_too_old,
            "rollup_rebuilds": self.partition_stats.rollup_rebuilds,
        })
    }
}

/// Bytes of one component or field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentUsage {
    /// Component (`timestamps`, `series_table`, `bloom`, ...) or field name.
    pub name: String,
    /// Bytes.
    pub bytes: u64,
}

/// Disk usage of an index: segment components, per field, and the other files.
#[derive(Debug, Clone, PartialEq)]
pub struct DiskUsage {
    /// Live documents.
    pub documents: u64,
    /// Bytes of all files.
    pub total_bytes: u64,
    /// Bytes of the segment files.
    pub segment_bytes: u64,
    /// Segment sections summed over the segments: header, meta, series_table (the
    /// dimensions and `_tsid`s, stored once per series), timestamps, metrics, extras,
    /// directory, bloom, id_index, footer.
    pub components: Vec<ComponentUsage>,
    /// Per field: the timestamp column, each metric and extra column, and the dimensions
    /// (together, in the series table).
    pub fields: Vec<ComponentUsage>,
    /// Other files: write-ahead log, tombstones, manifest, mapping, counters.
    pub files: Vec<ComponentUsage>,
}

impl DiskUsage {
    /// Bytes per live document (all files).
    pub fn bytes_per_document(&self) -> f64 {
        if self.documents == 0 {
            0.0
        } else {
            self.total_bytes as f64 / self.documents as f64
        }
    }

    /// The disk usage as JSON, with bytes per document for every entry.
    pub fn to_json(&self) -> Value {
        let docs = self.documents.max(1) as f64;
        let list = |v: &[ComponentUsage]| {
            let mut m = Map::new();
            for c in v {
                m.insert(
                    c.name.clone(),
                    json!({"bytes": c.bytes, "bytes_per_doc": (c.bytes as f64 / docs * 100.0).round() / 100.0}),
                );
            }
            Value::Object(m)
        };
        json!({
            "documents": self.documents,
            "total_bytes": self.total_bytes,
            "bytes_per_doc": (self.bytes_per_document() * 100.0).round() / 100.0,
            "segment_bytes": self.segment_bytes,
            "components": list(&self.components),
            "fields": list(&self.fields),
            "files": list(&self.files),
        })
    }
}

fn add(list: &mut Vec<ComponentUsage>, name: &str, bytes: u64) {
    match list.iter_mut().find(|c| c.name == name) {
        Some(c) => c.bytes += bytes,
        None => list.push(ComponentUsage {
            name: name.to_owned(),
            bytes,
        }),
    }
}

impl Index {
    fn dir_bytes(&self) -> Result<Vec<(String, u64)>> {
        let mut out = Vec::new();
        // Partition directories (`p-*/engine`) included: files are named by file name.
        let mut dirs = vec![self.dir().to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).map_err(Error::io(&dir))? {
                let entry = entry.map_err(Error::io(&dir))?;
                let meta = entry.metadata().map_err(Error::io(entry.path()))?;
                if meta.is_file() {
                    out.push((entry.file_name().to_string_lossy().into_owned(), meta.len()));
                } else if meta.is_dir() {
                    dirs.push(entry.path());
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Documents, series, segments, bytes and the cumulative counters.
    ///
    /// # Errors
    /// I/O errors listing the directory.
    pub fn stats(&self) -> Result<IndexStats> {
        let e = self.engine();
        let documents = e.live_count();
        let bytes: u64 = self.dir_bytes()?.iter().map(|(_, b)| b).sum();
        Ok(IndexStats {
            documents,
            series: e.series_count(),
            segments: e.segment_count() as u64,
            buffered: e.buffered() as u64,
            deleted_rows: e.deleted_rows(),
            bytes,
            bytes_per_document: if documents == 0 {
                0.0
            } else {
                bytes as f64 / documents as f64
            },
            counters: self.counters(),
            partitions: e.partitions().len() as u64,
            partition_stats: e.partition_stats(),
        })
    }

    /// Bytes per component, per field and per file. Buffered documents are only in the
    /// write-ahead log: refresh first to see them in segments.
    ///
    /// # Errors
    /// I/O errors listing the directory.
    pub fn disk_usage(&self) -> Result<DiskUsage> {
        let mut components = Vec::new();
        let mut fields = Vec::new();
        let mut segment_bytes = 0;
        let ts = self.mapping().timestamp_field().to_owned();
        for (_, segment, _) in self.engine().segments() {
            let b = segment.size_breakdown();
            segment_bytes += b.total;
            add(&mut components, "header", b.header);
            add(&mut components, "meta", b.meta);
            add(&mut components, "series_table", b.series_table);
            add(&mut components, "timestamps", b.timestamps);
            add(
                &mut components,
                "metrics",
                b.metrics.iter().map(|m| m.1).sum(),
            );
            add(
                &mut components,
                "extras",
                b.extras.iter().map(|m| m.1).sum(),
            );
            add(&mut components, "directory", b.directory);
            add(&mut components, "bloom", b.bloom);
            add(&mut components, "id_index", b.id_index);
            add(&mut components, "footer", b.footer);
            add(&mut fields, &ts, b.timestamps);
            add(
                &mut fields,
                "_tsid and dimensions (series table)",
                b.series_table,
            );
            for (name, bytes) in b.metrics.iter().chain(&b.extras) {
                add(&mut fields, name, *bytes);
            }
        }
        let mut files = Vec::new();
        let mut total = 0;
        for (name, bytes) in self.dir_bytes()? {
            total += bytes;
            let kind = if name.starts_with("seg-") && name.contains(".del.") {
                "tombstones"
            } else if name.starts_with("seg-") {
                "segments"
            } else if name.starts_with("wal-") {
                "write-ahead log"
            } else if name.starts_with("rollup-") {
                "rollups"
            } else if name == "MANIFEST" {
                "manifests"
            } else {
                name.as_str()
            };
            add(&mut files, kind, bytes);
        }
        Ok(DiskUsage {
            documents: self.engine().live_count(),
            total_bytes: total,
            segment_bytes,
            components,
            fields,
            files,
        })
    }
}
