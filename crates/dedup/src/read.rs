//! The read side of the store: [`SeriesReader`] hands over a series' samples over a
//! time range as per-column slices (timestamps and values), gathered from every
//! partition's segments and buffer, sorted and unique. It is what queries read through
//! (PromQL's selectors, the façade's series reads), in place of row-by-row scans: no
//! value is looked up by name, hashed or boxed per row.
//!
//! A reader is cheap to create and not shared: a query that reads on several threads
//! creates one per thread, each reading its own series in ascending tsid order (so the
//! blocks that neighbouring series share are decoded once per thread).

use tidemark_segment::ColumnSamples;
use tidemark_tsid::Tsid;

use crate::engine::read::EngineReader;
use crate::error::Result;
use crate::partition::PartitionedEngine;

/// Reads series of a [`PartitionedEngine`] over `from..=to`, column by column.
#[derive(Debug)]
pub struct SeriesReader<'e> {
    parts: Vec<EngineReader<'e>>,
    columns: usize,
    rows: u64,
}

impl<'e> SeriesReader<'e> {
    /// A reader of the metric columns `columns` (by name) over `from..=to` (inclusive,
    /// milliseconds), across the partitions of `store` that overlap it; with `rows`, one
    /// more output after the columns: every row's timestamp (value 0.0). Made by
    /// [`PartitionSearch::series_reader`](crate::PartitionSearch::series_reader).
    pub(crate) fn new(
        store: &'e PartitionedEngine,
        from: i64,
        to: i64,
        columns: &[&str],
        rows: bool,
    ) -> SeriesReader<'e> {
        SeriesReader {
            parts: store
                .engines_overlapping(from, to)
                .map(|e| EngineReader::new(e, from, to, columns, rows))
                .collect(),
            columns: columns.len() + usize::from(rows),
            rows: 0,
        }
    }
}

impl SeriesReader<'_> {
    /// Fills `out` with series `tsid`'s samples in range: `out[j]` gets column `j`'s
    /// timestamps and values (counters as `f64`), ascending and unique, rows without a
    /// value of that column left out (and, for a reader with rows, the last entry every
    /// row's timestamp). `out` is resized to the column count and cleared
    /// first, so its vectors are reused from one series to the next. A series the store
    /// does not hold leaves every column empty. Read series in ascending tsid order for
    /// best effect.
    ///
    /// # Errors
    /// Segment read errors, naming the segment.
    pub fn read(&mut self, tsid: &Tsid, out: &mut Vec<ColumnSamples>) -> Result<()> {
        out.resize_with(self.columns, ColumnSamples::default);
        out.iter_mut().for_each(ColumnSamples::clear);
        let mut ordered = true;
        // Each partition checks its sources against everything read before them.
        for part in &mut self.parts {
            let (rows, in_order) = part.read(tsid, out)?;
            self.rows += rows;
            ordered &= in_order;
        }
        if !ordered {
            out.iter_mut().for_each(sort_unique);
        }
        Ok(())
    }

    /// Rows read so far (before per-column filtering).
    pub fn rows_read(&self) -> u64 {
        self.rows
    }
}

/// Sorts a column's samples by timestamp, keeping the first of equal timestamps (the
/// older source: a segment before the buffer, an older segment before a newer one).
fn sort_unique(c: &mut ColumnSamples) {
    let mut pairs: Vec<(i64, f64)> = c.ts.iter().copied().zip(c.values.iter().copied()).collect();
    pairs.sort_by_key(|p| p.0);
    pairs.dedup_by_key(|p| p.0);
    c.clear();
    for (t, v) in pairs {
        c.push(t, v);
    }
}
