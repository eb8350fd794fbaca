//! Storage report: the segment's data columns against a naive reference on the same data.
//!
//! The naive reference stores the same sorted columns as raw 8-byte little-endian values
//! (timestamps of every row; each metric's present values), each column compressed as one
//! zstd level-3 frame. The series table (tsids, dimensions, row counts, time ranges) and
//! the meta dictionaries have no 8-byte form; they are counted identically on both sides,
//! which makes the total ratio conservative.

use std::fmt::Write as _;

use crate::error::Result;
use crate::format::{DIR_ENTRY_LEN, FOOTER_LEN, HEADER_LEN};
use crate::reader::Segment;

/// zstd level of the naive reference.
pub const NAIVE_ZSTD_LEVEL: i32 = 3;

/// One component of the report.
#[derive(Debug, Clone, PartialEq)]
pub struct Component {
    /// Component name: `series table`, `timestamps`, a metric name or `header+footer`.
    pub name: String,
    /// Bytes in the segment (blocks plus their directory entries).
    pub bytes: u64,
    /// Bytes in the naive reference.
    pub naive_bytes: u64,
    /// Values the component stores (rows for timestamps, present values for a metric).
    pub values: u64,
}

impl Component {
    /// Segment bytes over naive bytes (`NaN` when the naive side is empty).
    pub fn ratio(&self) -> f64 {
        self.bytes as f64 / self.naive_bytes as f64
    }
}

/// The storage report of one segment.
#[derive(Debug, Clone, PartialEq)]
pub struct StorageReport {
    /// Documents (rows).
    pub docs: u64,
    /// Series.
    pub series: u64,
    /// Metric values (present cells over all metric columns).
    pub metric_values: u64,
    /// Per component, series table first, then timestamps, metrics, header+footer.
    pub components: Vec<Component>,
    /// Bytes of the bloom section.
    pub bloom_bytes: u64,
    /// Bytes of the id index section.
    pub id_index_bytes: u64,
    /// For context: a naive per-row series column (every row's 20-byte tsid, raw,
    /// zstd level 3), the form a plain columnar store would keep instead of a series table.
    pub naive_tsid_column_bytes: u64,
}

impl StorageReport {
    /// Data-column bytes of the segment (everything but bloom and id index).
    pub fn data_bytes(&self) -> u64 {
        self.components.iter().map(|c| c.bytes).sum()
    }

    /// Bytes of the naive reference.
    pub fn naive_bytes(&self) -> u64 {
        self.components.iter().map(|c| c.naive_bytes).sum()
    }

    /// `data_bytes / naive_bytes`: the target is at most 0.85.
    pub fn ratio(&self) -> f64 {
        self.data_bytes() as f64 / self.naive_bytes() as f64
    }

    /// The ratio of the per-row columns alone (timestamps and metrics, with their
    /// directory entries), leaving out the series table and fixed overhead.
    pub fn row_columns_ratio(&self) -> f64 {
        let rows: Vec<&Component> = self
            .components
            .iter()
            .filter(|c| c.name != SERIES_TABLE && c.name != FIXED)
            .collect();
        let ours: u64 = rows.iter().map(|c| c.bytes).sum();
        let naive: u64 = rows.iter().map(|c| c.naive_bytes).sum();
        ours as f64 / naive as f64
    }

    /// The ratio against a naive reference that stores the per-row tsid column
    /// ([`naive_tsid_column_bytes`](Self::naive_tsid_column_bytes)) in place of the series
    /// table. Informative only: the target is stated on [`ratio`](Self::ratio).
    pub fn ratio_with_naive_tsid_column(&self) -> f64 {
        let series: u64 = self
            .components
            .iter()
            .filter(|c| c.name == SERIES_TABLE)
            .map(|c| c.naive_bytes)
            .sum();
        self.data_bytes() as f64
            / (self.naive_bytes() - series + self.naive_tsid_column_bytes) as f64
    }

    /// The report as a Markdown table.
    pub fn to_markdown(&self) -> String {
        let mut o = String::new();
        let docs = self.docs.max(1) as f64;
        let _ = writeln!(
            o,
            "{} docs, {} series, {} metric values\n",
            self.docs, self.series, self.metric_values
        );
        let _ = writeln!(
            o,
            "| component | bytes | B/doc | B/value | naive bytes | naive B/value | ratio |"
        );
        let _ = writeln!(o, "|---|---:|---:|---:|---:|---:|---:|");
        for c in &self.components {
            let per_value = |b: u64| {
                if c.values == 0 {
                    "-".to_owned()
                } else {
                    format!("{:.3}", b as f64 / c.values as f64)
                }
            };
            let _ = writeln!(
                o,
                "| {} | {} | {:.3} | {} | {} | {} | {:.3} |",
                c.name,
                c.bytes,
                c.bytes as f64 / docs,
                per_value(c.bytes),
                c.naive_bytes,
                per_value(c.naive_bytes),
                c.ratio()
            );
        }
        let mv = self.metric_values.max(1) as f64;
        let _ = writeln!(
            o,
            "| **data columns** | {} | {:.3} | {:.3} | {} | {:.3} | **{:.3}** |",
            self.data_bytes(),
            self.data_bytes() as f64 / docs,
            self.data_bytes() as f64 / mv,
            self.naive_bytes(),
            self.naive_bytes() as f64 / mv,
            self.ratio()
        );
        let _ = writeln!(
            o,
            "\nper-row columns only (no series table, no fixed overhead): ratio {:.3}",
            self.row_columns_ratio()
        );
        let _ = writeln!(
            o,
            "for context, a naive per-row tsid column instead of the series table: {} B \
             ({:.3} B/doc), ratio {:.3}",
            self.naive_tsid_column_bytes,
            self.naive_tsid_column_bytes as f64 / docs,
            self.ratio_with_naive_tsid_column()
        );
        let _ = writeln!(
            o,
            "id/dedup sections (not data columns): bloom {} B ({:.3} B/doc), id index {} B ({:.3} B/doc)",
            self.bloom_bytes,
            self.bloom_bytes as f64 / docs,
            self.id_index_bytes,
            self.id_index_bytes as f64 / docs
        );
        o
    }
}

const SERIES_TABLE: &str = "series table + meta";
const FIXED: &str = "header + footer";

fn zstd_len(raw: &[u8]) -> Result<u64> {
    Ok(zstd::bulk::compress(raw, NAIVE_ZSTD_LEVEL)?.len() as u64)
}

/// Computes the storage report of `segment`, reading every row back to build the naive
/// reference beside it.
///
/// # Errors
/// Format errors of the blocks read; zstd errors.
pub fn storage_report(segment: &Segment) -> Result<StorageReport> {
    let ncols = segment.columns().len();
    let mut ts_raw = Vec::with_capacity(segment.row_count() as usize * 8);
    let mut col_raw: Vec<Vec<u8>> = vec![Vec::new(); ncols];
    let mut counts = vec![0u64; ncols];
    let mut tsid_raw = Vec::with_capacity(segment.row_count() as usize * 20);
    segment.scan_rows(0..segment.row_count(), |r| {
        tsid_raw.extend_from_slice(r.series.tsid.as_bytes());
        ts_raw.extend_from_slice(&r.ts_millis.to_le_bytes());
        for ((raw, count), v) in col_raw.iter_mut().zip(counts.iter_mut()).zip(r.metrics) {
            if let Some(v) = v {
                raw.extend_from_slice(&v.to_bits().to_le_bytes());
                *count += 1;
            }
        }
    })?;
    let sizes = segment.size_breakdown();
    let dir_of = |column: u32| {
        u64::from(segment.column_block_count(column).unwrap_or(0)) * DIR_ENTRY_LEN as u64
    };
    let series_bytes = sizes.series_table + sizes.meta;
    let mut components = vec![
        Component {
            name: SERIES_TABLE.to_owned(),
            bytes: series_bytes,
            naive_bytes: series_bytes,
            values: 0,
        },
        Component {
            name: "timestamps".to_owned(),
            bytes: sizes.timestamps + dir_of(0),
            naive_bytes: zstd_len(&ts_raw)?,
            values: segment.row_count(),
        },
    ];
    for (c, (((name, bytes), raw), count)) in
        sizes.metrics.iter().zip(&col_raw).zip(&counts).enumerate()
    {
        components.push(Component {
            name: name.clone(),
            bytes: bytes + dir_of(c as u32 + 1),
            naive_bytes: zstd_len(raw)?,
            values: *count,
        });
    }
    // Extra keyword/boolean columns have no 8-byte form: counted identically.
    let base = segment.columns().len() as u32 + 1;
    for (e, (name, bytes)) in sizes.extras.iter().enumerate() {
        let b = bytes + dir_of(base + e as u32);
        components.push(Component {
            name: format!("extra {name}"),
            bytes: b,
            naive_bytes: b,
            values: 0,
        });
    }
    components.push(Component {
        name: FIXED.to_owned(),
        bytes: (HEADER_LEN + FOOTER_LEN) as u64,
        naive_bytes: 0,
        values: 0,
    });
    Ok(StorageReport {
        docs: segment.row_count(),
        series: segment.series_count(),
        metric_values: counts.iter().sum(),
        components,
        bloom_bytes: sizes.bloom,
        id_index_bytes: sizes.id_index,
        naive_tsid_column_bytes: zstd_len(&tsid_raw)?,
    })
}
