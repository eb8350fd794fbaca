//! The blocks of a streamed segment: each column's open block, written (its smallest
//! encoding, compressed) as soon as the rows pass its end, and the output that counts
//! and checksums every byte written.

use std::io::{self, Write};

use super::SegmentStreamWriter;
use crate::error::Result;
use crate::format::blocks::{self, extra_body, metric_candidates, timestamp_candidates};
use crate::format::directory::{BlockRef, EMPTY_ENTRY};
use crate::format::len_u32;
use crate::format::series::Presence;
use crate::point::{MetricKind, MetricValue};

/// A `Write` that counts the bytes it forwards and computes their CRC32.
pub(super) struct Counting<W> {
    pub(super) inner: W,
    pub(super) pos: u64,
    pub(super) crc: crc32fast::Hasher,
}

impl<W: Write> Counting<W> {
    pub(super) fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.inner.write_all(bytes)?;
        self.crc.update(bytes);
        self.pos += bytes.len() as u64;
        Ok(())
    }
}

/// The open block of one metric or extra column.
pub(super) struct ColumnBuf<V> {
    pub(super) span: u64,
    /// Index of the open block.
    pub(super) block: u64,
    /// Block-relative rows with a value, ascending.
    pub(super) rows: Vec<u32>,
    pub(super) values: Vec<V>,
    /// A series declared partial for this column has rows in the open block.
    partial: bool,
}

impl<V> ColumnBuf<V> {
    /// The open block's rows, values and partial flag when its span ends at `rows` (or,
    /// with `all`, when it holds any row), moving on to the next block.
    fn take_due(&mut self, rows: u64, all: bool) -> Option<(Vec<u32>, Vec<V>, bool)> {
        let due = if all {
            rows > self.block * self.span
        } else {
            rows % self.span == 0
        };
        if !due {
            return None;
        }
        self.block += 1;
        Some((
            std::mem::take(&mut self.rows),
            std::mem::take(&mut self.values),
            std::mem::replace(&mut self.partial, false),
        ))
    }

    /// Records a written block and takes its buffers back, emptied, for the next one.
    fn finish_block(&mut self, mut rows: Vec<u32>, mut values: Vec<V>) {
        rows.clear();
        values.clear();
        self.rows = rows;
        self.values = values;
    }

    pub(super) fn new(span: u64) -> Self {
        ColumnBuf {
            span,
            block: 0,
            rows: Vec::new(),
            values: Vec::new(),
            partial: false,
        }
    }
}

impl<W: Write> SegmentStreamWriter<W> {
    /// Step 3 of [`push_row`](Self::push_row): at a block boundary, writes the timestamp
    /// block and the column blocks whose span ends there; on the first row of a series in
    /// a timestamp block, starts its run and marks its partial columns in the open blocks.
    pub(super) fn open_blocks(&mut self) -> Result<()> {
        if self.rows > 0 && self.rows % self.block_rows == 0 {
            self.flush_ts_block()?;
            self.flush_column_blocks(false)?;
            self.run_marked = false;
        }
        if !self.run_marked {
            self.ts_runs.push(0);
            self.mark_partial();
            self.run_marked = true;
        }
        Ok(())
    }

    /// The current series' partial columns get presence bitmaps in their open blocks.
    fn mark_partial(&mut self) {
        let Some(s) = self.series.last() else {
            return;
        };
        let ncols = self.metrics.len() as u32;
        for &(c, p) in s.declared.iter() {
            if p != Presence::Partial {
                continue;
            }
            if c < ncols {
                if let Some(col) = self.metrics.get_mut(c as usize) {
                    col.partial = true;
                }
            } else if let Some(col) = self.extras.get_mut((c - ncols) as usize) {
                col.partial = true;
            }
        }
    }

    fn write_block(&mut self, block: &[u8], raw_len: usize) -> Result<BlockRef> {
        let entry = BlockRef {
            offset: self.out.pos,
            len: len_u32(block.len(), "block bytes")?,
            raw_len: len_u32(raw_len, "decoded block bytes")?,
            crc: crc32fast::hash(block),
        };
        self.out.put(block)?;
        Ok(entry)
    }

    /// Writes the smallest compressed block of `header` and a candidate body (see
    /// [`blocks::best`]); the empty entry without candidates.
    fn write_best(&mut self, header: &[u8], candidates: Vec<Vec<u8>>) -> Result<BlockRef> {
        let fast = self.options.fast_encoding();
        match blocks::best(header, candidates, fast, &mut self.comp, &mut self.raw)? {
            Some((block, raw_len)) => self.write_block(&block, raw_len),
            None => Ok(EMPTY_ENTRY),
        }
    }

    pub(super) fn flush_ts_block(&mut self) -> Result<()> {
        if self.ts_block.is_empty() {
            return Ok(());
        }
        let candidates = timestamp_candidates(&self.ts_block, &self.ts_runs);
        let entry = self.write_best(&[], candidates)?;
        self.dir.push(0, &entry)?;
        self.ts_block.clear();
        self.ts_runs.clear();
        Ok(())
    }

    /// Writes the open block of every column whose span ends at the current row count
    /// (all of them when `all`, at the end).
    pub(super) fn flush_column_blocks(&mut self, all: bool) -> Result<()> {
        let rows = self.rows;
        for c in 0..self.metrics.len() {
            let Some((block_rows, values, partial)) = self
                .metrics
                .get_mut(c)
                .and_then(|col| col.take_due(rows, all))
            else {
                continue;
            };
            // One open block per schema column, built from the schema.
            debug_assert_eq!(self.metrics.len(), self.schema.columns.len());
            let kind = self.schema.columns[c].kind;
            let entry = self.encode_metric_block(kind, &block_rows, &values, partial)?;
            self.dir.push(1 + c, &entry)?;
            if let Some(col) = self.metrics.get_mut(c) {
                col.finish_block(block_rows, values);
            }
        }
        for e in 0..self.extras.len() {
            let Some((block_rows, values, partial)) = self
                .extras
                .get_mut(e)
                .and_then(|col| col.take_due(rows, all))
            else {
                continue;
            };
            debug_assert_eq!(self.extras.len(), self.schema.extras.len());
            let kind = self.schema.extras[e].kind;
            let entry = if block_rows.is_empty() {
                EMPTY_ENTRY
            } else {
                let raw = extra_body(kind, &block_rows, &values, partial)?;
                self.write_best(&[], vec![raw])?
            };
            self.dir.push(1 + self.metrics.len() + e, &entry)?;
            if let Some(col) = self.extras.get_mut(e) {
                col.finish_block(block_rows, values);
            }
        }
        Ok(())
    }

    fn encode_metric_block(
        &mut self,
        kind: MetricKind,
        rows: &[u32],
        values: &[MetricValue],
        partial: bool,
    ) -> Result<BlockRef> {
        if rows.is_empty() {
            return Ok(EMPTY_ENTRY);
        }
        let mut header = Vec::new();
        blocks::presence_header(partial, rows, &mut header)?;
        let fast = self.options.fast_encoding();
        let candidates = metric_candidates(kind, values, fast, &mut self.comp)?;
        self.write_best(&header, candidates)
    }
}
