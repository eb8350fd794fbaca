//! Decoding column blocks: a block's stored bytes are checked against its directory entry
//! (bounds, CRC) and decompressed, then its presence header and values are decoded into
//! one slot per row of the block. The functions here see only the block ([`BlockAt`]:
//! the file, the entry, the rows it covers and the series table) and the column's kind;
//! the reader looks the block up and caches what they decode.

use crate::codec::{
    Values, decode_extras, decode_presence, decode_timestamps, decode_timestamps_run,
    decode_values, decompress_block_into,
};
use crate::error::{Error, Place, Result};
use crate::format::directory::BlockRef;
use crate::format::series::{Presence, Series};
use crate::format::{FOOTER_LEN, HEADER_LEN};
use crate::le::Reader;
use crate::point::{Extra, ExtraKind, MetricKind, MetricValue};
use crate::validate::MAX_NAME_LEN;

/// The largest decoded size a block of `rows` rows may claim. A timestamp or metric
/// block holds at most 10 bytes per row (varints) or 8 per value (byte planes), a
/// presence bitmap and headers; an extra block (`extra`) keyword strings of up to
/// [`MAX_NAME_LEN`] bytes.
fn max_raw_len(rows: u64, extra: bool) -> u64 {
    if extra {
        rows * (10 + MAX_NAME_LEN as u64) + 8 * 1024 + 64
    } else {
        rows * 10 + 8 * 1024 + 64
    }
}

/// The stored bytes of the block of entry `e` in `file`, after checking them against the
/// entry (inside the data, CRC); `None` for an empty entry.
fn stored<'a>(file: &'a [u8], e: &BlockRef, place: Place) -> Result<Option<&'a [u8]>> {
    if e.len == 0 {
        if e.raw_len != 0 || e.crc != 0 {
            return Err(Error::corrupt(
                place,
                "empty block with a length or checksum",
            ));
        }
        return Ok(None);
    }
    let data_end = file.len() as u64 - FOOTER_LEN as u64;
    let end = e.offset.checked_add(u64::from(e.len));
    if e.offset < HEADER_LEN as u64 || end.is_none_or(|end| end > data_end) {
        return Err(Error::OutOfBounds {
            place,
            offset: e.offset,
            len: u64::from(e.len),
            start: HEADER_LEN as u64,
            end: data_end,
        });
    }
    let stored = file
        .get(e.offset as usize..(e.offset + u64::from(e.len)) as usize)
        .unwrap_or(&[]);
    Error::check_crc(place, stored, e.crc)?;
    Ok(Some(stored))
}

/// One column block to decode, as the reader found it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BlockAt<'a> {
    /// The whole segment file (the entry's offset is into it).
    pub file: &'a [u8],
    /// The block's directory entry.
    pub entry: BlockRef,
    /// The block's column number (0 = timestamps) and index, for errors.
    pub place: Place,
    /// First segment row the block covers.
    pub lo: u64,
    /// End (exclusive) of the segment rows the block covers.
    pub hi: u64,
    /// The series table, whose runs in `lo..hi` the block's encodings follow.
    pub series: &'a [Series],
}

impl BlockAt<'_> {
    /// Rows the block covers.
    fn rows(&self) -> usize {
        (self.hi - self.lo) as usize
    }

    /// Checks and decompresses the block into `out`; `false` for an empty entry. `extra`:
    /// the block is an extra column's (which bounds its decoded size differently).
    fn body(&self, extra: bool, out: &mut Vec<u8>) -> Result<bool> {
        let Some(stored) = stored(self.file, &self.entry, self.place)? else {
            out.clear();
            return Ok(false);
        };
        let max_raw = max_raw_len(self.rows() as u64, extra);
        decompress_block_into(
            stored,
            u64::from(self.entry.raw_len),
            max_raw,
            self.place,
            out,
        )?;
        Ok(true)
    }

    /// Series runs (series index, length) covering the block's rows.
    fn runs(&self) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut i = self
            .series
            .partition_point(|s| s.first_row <= self.lo)
            .saturating_sub(1);
        while let Some(s) = self.series.get(i) {
            if s.first_row >= self.hi {
                break;
            }
            let a = s.first_row.max(self.lo);
            let b = (s.first_row + s.row_count).min(self.hi);
            if b > a {
                out.push((i, (b - a) as usize));
            }
            i += 1;
        }
        out
    }

    /// Reads the block's presence header: the block-relative rows that hold a value of
    /// column index `index` (metric columns first, then extras).
    fn present_rows(&self, r: &mut Reader<'_>, index: u32) -> Result<Vec<usize>> {
        let rows = self.rows();
        let mut present: Vec<usize> = Vec::with_capacity(rows);
        match decode_presence(r, rows as u32)? {
            Some(b) => {
                // The bitmap must agree with the series table: no value for a series
                // without the column, every row of a series that has it in full (what
                // the writer writes; a reader skipping the columns a series lacks and
                // one decoding every column then read the same values).
                let runs = self.runs();
                let mut counts = vec![0usize; runs.len()];
                let (mut k, mut at) = (0usize, 0usize);
                for i in b.iter().map(|i| i as usize) {
                    while let Some(&(_, len)) = runs.get(k) {
                        if i < at + len {
                            break;
                        }
                        at += len;
                        k += 1;
                    }
                    let has = runs
                        .get(k)
                        .and_then(|&(s, _)| self.series.get(s))
                        .and_then(|s| s.presence(index));
                    if has.is_none() {
                        return Err(Error::corrupt(
                            self.place,
                            "presence bitmap holds a row of a series without the column",
                        ));
                    }
                    if let Some(n) = counts.get_mut(k) {
                        *n += 1;
                    }
                    present.push(i);
                }
                for (&(s, len), &n) in runs.iter().zip(&counts) {
                    let full =
                        self.series.get(s).and_then(|s| s.presence(index)) == Some(Presence::Full);
                    if full && n != len {
                        return Err(Error::corrupt(
                            self.place,
                            "presence bitmap misses rows of a series that has the column in full",
                        ));
                    }
                }
            }
            None => {
                let mut at = 0usize;
                for (s, len) in self.runs() {
                    match self.series.get(s).and_then(|s| s.presence(index)) {
                        Some(Presence::Full) => present.extend(at..at + len),
                        Some(Presence::Partial) => {
                            return Err(Error::corrupt(
                                self.place,
                                "partial series without a bitmap",
                            ));
                        }
                        None => {}
                    }
                    at += len;
                }
            }
        }
        Ok(present)
    }
}

/// Checks that `r` has no bytes left after a block's values.
fn check_consumed(r: &Reader<'_>, place: Place) -> Result<()> {
    if !r.is_empty() {
        return Err(Error::corrupt(
            place,
            format!("{} trailing bytes", r.remaining()),
        ));
    }
    Ok(())
}

/// Decodes timestamp block `b`, appending one timestamp per row to `out`.
pub(crate) fn timestamps(b: &BlockAt<'_>, out: &mut Vec<i64>) -> Result<()> {
    let mut body = Vec::new();
    if !b.body(false, &mut body)? {
        return Err(Error::corrupt(b.place, "timestamp block is empty"));
    }
    let lens: Vec<usize> = b.runs().iter().map(|(_, l)| *l).collect();
    let mut r = Reader::new(&body, b.place);
    decode_timestamps(&mut r, &lens, out)?;
    check_consumed(&r, b.place)
}

/// Decodes the timestamps of series `series` (index in the series table) in timestamp
/// block `b` into `out`; `body` is a reusable buffer.
pub(crate) fn series_timestamps(
    b: &BlockAt<'_>,
    series: usize,
    body: &mut Vec<u8>,
    out: &mut Vec<i64>,
) -> Result<()> {
    if !b.body(false, body)? {
        return Err(Error::corrupt(b.place, "timestamp block is empty"));
    }
    let runs = b.runs();
    let target = runs
        .iter()
        .position(|(s, _)| *s == series)
        .ok_or_else(|| Error::corrupt(b.place, "series not in block"))?;
    let lens: Vec<usize> = runs.iter().map(|(_, l)| *l).collect();
    decode_timestamps_run(&mut Reader::new(body, b.place), &lens, target, out)
}

/// Decodes block `b` of metric column `column` (0-based) of `kind` into `out`, one entry
/// per row of the block.
pub(crate) fn metric_values(
    b: &BlockAt<'_>,
    column: u32,
    kind: MetricKind,
    out: &mut Vec<Option<MetricValue>>,
) -> Result<()> {
    out.clear();
    out.resize(b.rows(), None);
    let mut body = Vec::new();
    if !b.body(false, &mut body)? {
        return Ok(());
    }
    let mut r = Reader::new(&body, b.place);
    let present = b.present_rows(&mut r, column)?;
    let (_, values) = decode_values(&mut r, present.len())?;
    check_consumed(&r, b.place)?;
    match (kind, values) {
        (MetricKind::Gauge, Values::Gauge(v)) => {
            for (&i, v) in present.iter().zip(v) {
                if let Some(slot) = out.get_mut(i) {
                    *slot = Some(MetricValue::Gauge(v));
                }
            }
        }
        (MetricKind::Counter, Values::Counter(v)) => {
            for (&i, v) in present.iter().zip(v) {
                if let Some(slot) = out.get_mut(i) {
                    *slot = Some(MetricValue::Counter(v));
                }
            }
        }
        _ => {
            return Err(Error::corrupt(
                b.place,
                "value encoding does not match the column kind",
            ));
        }
    }
    Ok(())
}

/// A metric column block decoded as `f64`s for the column reads: one slot per row of
/// the block, and which rows hold a value (empty when every row does).
#[derive(Debug, Default)]
pub(crate) struct FloatBlock {
    /// One value per row (0 where a row has none).
    pub values: Vec<f64>,
    /// Whether each row has a value; empty when all do.
    pub present: Vec<bool>,
    /// The decompressed body (kept for its memory).
    body: Vec<u8>,
}

/// Decodes block `b` of metric column `column` (0-based) of `kind` into `out`, counters
/// converted to `f64`: the same checks as [`metric_values`], without a
/// [`MetricValue`] per row.
pub(crate) fn metric_values_f64(
    b: &BlockAt<'_>,
    column: u32,
    kind: MetricKind,
    out: &mut FloatBlock,
) -> Result<()> {
    let rows = b.rows();
    out.values.clear();
    out.present.clear();
    let mut body = std::mem::take(&mut out.body);
    let filled = b.body(false, &mut body);
    let result = (|| {
        if !filled? {
            out.values.resize(rows, 0.0);
            out.present.resize(rows, false);
            return Ok(());
        }
        let mut r = Reader::new(&body, b.place);
        let present = b.present_rows(&mut r, column)?;
        let (_, values) = decode_values(&mut r, present.len())?;
        check_consumed(&r, b.place)?;
        let all = present.len() == rows;
        match (kind, values) {
            (MetricKind::Gauge, Values::Gauge(v)) if all => out.values = v,
            (MetricKind::Counter, Values::Counter(v)) if all => {
                out.values.extend(v.iter().map(|&i| i as f64));
            }
            (MetricKind::Gauge, Values::Gauge(v)) => scatter(out, rows, &present, v.into_iter()),
            (MetricKind::Counter, Values::Counter(v)) => {
                scatter(out, rows, &present, v.into_iter().map(|i| i as f64));
            }
            _ => {
                return Err(Error::corrupt(
                    b.place,
                    "value encoding does not match the column kind",
                ));
            }
        }
        Ok(())
    })();
    out.body = body;
    result
}

/// Puts `values` at the rows `present` of a block of `rows` rows.
fn scatter(
    out: &mut FloatBlock,
    rows: usize,
    present: &[usize],
    values: impl Iterator<Item = f64>,
) {
    out.values.resize(rows, 0.0);
    out.present.resize(rows, false);
    for (&i, v) in present.iter().zip(values) {
        if let (Some(slot), Some(p)) = (out.values.get_mut(i), out.present.get_mut(i)) {
            *slot = v;
            *p = true;
        }
    }
}

/// Decodes block `b` of the extra column of column index `index` (metric columns first,
/// then extras) and `kind`, one entry per row of the block; only rows in `want`
/// (relative to the block) get their values, though every value is checked.
pub(crate) fn extra_values(
    b: &BlockAt<'_>,
    index: u32,
    kind: ExtraKind,
    want: std::ops::Range<usize>,
) -> Result<Vec<Option<Extra>>> {
    let mut out = vec![None; b.rows()];
    let mut body = Vec::new();
    if !b.body(true, &mut body)? {
        return Ok(out);
    }
    let mut r = Reader::new(&body, b.place);
    let present = b.present_rows(&mut r, index)?;
    // Positions in `present` (sorted rows) of the rows wanted.
    let lo = present.partition_point(|&i| i < want.start);
    let hi = present.partition_point(|&i| i < want.end);
    let values = decode_extras(&mut r, kind, present.len(), lo..hi)?;
    check_consumed(&r, b.place)?;
    for (&i, v) in present.get(lo..hi).unwrap_or(&[]).iter().zip(values) {
        if let Some(slot) = out.get_mut(i) {
            *slot = Some(v);
        }
    }
    Ok(out)
}

/// A decoded row block: its timestamps and, row-major, its metric values, assembled
/// from the column blocks holding its rows (a metric column's block may span several
/// row blocks, so each column's last decoded block is kept).
#[derive(Debug, Default)]
pub(crate) struct DecodedBlock {
    /// Block whose timestamps are in `ts`.
    pub block: Option<u32>,
    /// Block whose metrics are in `metrics`.
    pub metrics_block: Option<u32>,
    /// Per metric column, its decoded column block (which may span several row blocks).
    pub columns: Vec<(Option<u32>, Vec<Option<MetricValue>>)>,
    /// The row block's timestamps.
    pub ts: Vec<i64>,
    /// Row-major: `rows × columns`.
    pub metrics: Vec<Option<MetricValue>>,
}

impl DecodedBlock {
    /// Replaces the timestamps with those of row block `block`, which `decode` appends
    /// to the (emptied) vector it is given.
    pub(crate) fn fill_timestamps(
        &mut self,
        block: u32,
        decode: impl FnOnce(&mut Vec<i64>) -> Result<()>,
    ) -> Result<()> {
        self.block = None;
        self.ts.clear();
        decode(&mut self.ts)?;
        self.block = Some(block);
        Ok(())
    }

    /// Fills the metric values of row block `block`, whose first row is `first_row` and
    /// whose timestamps are in `ts`, from `ncols` metric columns: column `c`'s blocks span
    /// `span(c)` rows, and `decode(c, column_block, values)` decodes one of them into
    /// `values` (called only when the column's kept block is not the one needed).
    pub(crate) fn fill_metrics(
        &mut self,
        block: u32,
        first_row: u64,
        ncols: usize,
        span: impl Fn(usize) -> u64,
        mut decode: impl FnMut(u32, u32, &mut Vec<Option<MetricValue>>) -> Result<()>,
    ) -> Result<()> {
        self.metrics_block = None;
        let rows = self.ts.len();
        self.metrics.clear();
        self.metrics.resize(rows * ncols, None);
        self.columns.resize_with(ncols, || (None, Vec::new()));
        for (c, (cached, values)) in self.columns.iter_mut().enumerate() {
            let span = span(c);
            let cb = (first_row / span) as u32;
            if *cached != Some(cb) {
                *cached = None;
                decode(c as u32, cb, values)?;
                *cached = Some(cb);
            }
            let offset = (first_row - u64::from(cb) * span) as usize;
            let part = values.get(offset..offset + rows).unwrap_or(&[]);
            for (i, v) in part.iter().enumerate() {
                if let Some(slot) = self.metrics.get_mut(i * ncols + c) {
                    *slot = *v;
                }
            }
        }
        self.metrics_block = Some(block);
        Ok(())
    }
}
