//! The read side of one engine: a series' samples over a time range, column by column,
//! from its segments and its buffer (see [`crate::SeriesReader`], which reads across
//! partitions through one of these per partition).

use tidemark_segment::{ColumnRead, ColumnSamples, SeriesCursor};
use tidemark_tsid::Tsid;

use super::{Engine, Slot};
use crate::buffer::ColumnId;
use crate::error::{Error, Result};

/// Reads series of one engine: its segments overlapping the range (each with its
/// column mapping and decoding cursor) and its buffer.
#[derive(Debug)]
pub(crate) struct EngineReader<'e> {
    engine: &'e Engine,
    from: i64,
    to: i64,
    /// Segments overlapping the range, oldest first: the slot, each wanted column's
    /// index in the segment, the segment's decoding state.
    segments: Vec<(&'e Slot, Vec<ColumnRead>, SeriesCursor)>,
    /// Each wanted column's buffer column ref.
    buffered: Vec<Option<u32>>,
    /// Whether the output after the columns gets every row's timestamp.
    rows: bool,
    /// Each column's length and last timestamp before a source appends (kept for its
    /// memory: no allocation per series and source).
    before: Vec<(usize, Option<i64>)>,
}

impl<'e> EngineReader<'e> {
    pub(crate) fn new(
        engine: &'e Engine,
        from: i64,
        to: i64,
        columns: &[&str],
        rows: bool,
    ) -> Self {
        let segments = engine
            .slots
            .iter()
            .filter(|s| s.max_ts >= from && s.min_ts <= to)
            .map(|slot| {
                let infos = slot.segment.columns();
                let mut map: Vec<ColumnRead> = columns
                    .iter()
                    .map(|name| {
                        infos
                            .binary_search_by(|c| c.name.as_str().cmp(name))
                            .map_or(ColumnRead::Absent, ColumnRead::Metric)
                    })
                    .collect();
                if rows {
                    map.push(ColumnRead::Rows);
                }
                (slot, map, SeriesCursor::default())
            })
            .collect();
        let buffered = columns
            .iter()
            .map(|name| match engine.columns.get(name) {
                Some(ColumnId::Metric(c)) => Some(c),
                _ => None,
            })
            .collect();
        EngineReader {
            engine,
            from,
            to,
            segments,
            buffered,
            rows,
            before: Vec::new(),
        }
    }

    /// Appends series `tsid`'s samples to `out` (one entry per wanted column): segments
    /// oldest first, then the buffer. Returns the rows read and whether every source's
    /// samples came after what `out` held before it, the earlier partitions' included
    /// (otherwise the caller sorts).
    pub(crate) fn read(&mut self, tsid: &Tsid, out: &mut [ColumnSamples]) -> Result<(u64, bool)> {
        let mut rows = 0u64;
        let mut ordered = true;
        for (slot, map, cursor) in &mut self.segments {
            let seg = slot.segment.as_ref();
            let Ok(index) = seg.series().binary_search_by(|s| s.tsid.cmp(tsid)) else {
                continue;
            };
            last_ts(out, &mut self.before);
            rows += seg
                .read_series_columns(
                    index,
                    self.from,
                    self.to,
                    map,
                    Some(&slot.tombstones),
                    cursor,
                    out,
                )
                .map_err(Error::Segment)?;
            ordered &= appended_after(out, &self.before);
        }
        if let Some(series) = self.engine.series.get(tsid) {
            // The frozen buffer of a refresh in flight, then the live one (newer).
            let frozen = self.engine.frozen.as_ref();
            let buffers = frozen
                .map(|f| (&*f.buffer, f.killed()))
                .into_iter()
                .chain([(&self.engine.buffer, None)]);
            for (buffer, killed) in buffers {
                last_ts(out, &mut self.before);
                let sorted = buffer.read_series(
                    series,
                    self.from,
                    self.to,
                    &self.buffered,
                    self.rows,
                    killed,
                    out,
                );
                ordered &= sorted && appended_after(out, &self.before);
                rows += out
                    .iter()
                    .zip(&self.before)
                    .map(|(o, (n, _))| (o.len() - n) as u64)
                    .max()
                    .unwrap_or(0);
            }
        }
        Ok((rows, ordered))
    }
}

/// Each column's length and last timestamp, into `into`.
fn last_ts(out: &[ColumnSamples], into: &mut Vec<(usize, Option<i64>)>) {
    into.clear();
    into.extend(out.iter().map(|o| (o.len(), o.ts.last().copied())));
}

/// Whether what was appended to each column since `before` starts after the timestamp
/// that ended it then.
fn appended_after(out: &[ColumnSamples], before: &[(usize, Option<i64>)]) -> bool {
    out.iter()
        .zip(before)
        .all(|(o, (n, last))| match (last, o.ts.get(*n)) {
            (Some(l), Some(first)) => first > l,
            _ => true,
        })
}
