//! The meta section: bloom parameters, the dimension names, and the metric and extra
//! columns (name, kind, span shift).

use super::footer::Footer;
use super::{MAX_BLOCK_ROWS, MAX_COLUMNS, len_u32};
use crate::error::{Error, Place, Result};
use crate::le::{Reader, put_u16, put_u32, put_u64};
use crate::point::{ExtraKind, MetricKind};

/// A metric column: its name and kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnInfo {
    /// Metric name.
    pub name: String,
    /// Gauge or counter.
    pub kind: MetricKind,
    /// The column's blocks span `block_rows << span_shift` rows (sparse columns get
    /// longer blocks, so that each holds about `block_rows` values).
    pub span_shift: u8,
}

/// An extra column (keyword or boolean fields that are neither dimensions nor metrics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraInfo {
    /// Field name.
    pub name: String,
    /// Keyword or boolean.
    pub kind: ExtraKind,
    /// The column's blocks span `block_rows << span_shift` rows.
    pub span_shift: u8,
}

/// The decoded meta section.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Meta {
    pub bloom_fpr: f64,
    pub bloom_capacity: u64,
    pub dim_names: Vec<String>,
    pub columns: Vec<ColumnInfo>,
    pub extras: Vec<ExtraInfo>,
}

/// A column's span shift: its blocks span `block_rows << shift` rows, at most
/// `MAX_BLOCK_ROWS`.
fn read_span_shift(r: &mut Reader<'_>, footer: &Footer) -> Result<u8> {
    let span_shift = r.u8()?;
    if span_shift > 16 || u64::from(footer.block_rows) << span_shift > u64::from(MAX_BLOCK_ROWS) {
        return Err(Error::corrupt(
            Place::Meta,
            format!("span shift {span_shift} exceeds the block limit"),
        ));
    }
    Ok(span_shift)
}

fn read_str(r: &mut Reader<'_>) -> Result<String> {
    let len = r.u16()? as usize;
    let bytes = r.take(len)?;
    String::from_utf8(bytes.to_vec()).map_err(|_| Error::corrupt(r.place(), "name is not UTF-8"))
}

/// Decodes and checks the meta section against the footer.
pub(crate) fn decode(bytes: &[u8], footer: &Footer) -> Result<Meta> {
    let mut r = Reader::new(bytes, Place::Meta);
    let bloom_fpr = r.f64()?;
    let bloom_capacity = r.u64()?;
    let count = r.u32()? as usize;
    // Each name takes at least two bytes: a count beyond that is corrupt.
    if count > r.remaining() / 2 {
        return Err(Error::corrupt(
            Place::Meta,
            format!("{count} dimension names"),
        ));
    }
    let mut dim_names = Vec::with_capacity(count);
    for _ in 0..count {
        dim_names.push(read_str(&mut r)?);
    }
    let ncols = r.u32()?;
    if ncols != footer.column_count {
        return Err(Error::corrupt(
            Place::Meta,
            format!("{ncols} columns, footer says {}", footer.column_count),
        ));
    }
    let mut columns = Vec::with_capacity((ncols as usize).min(r.remaining() / 4));
    for _ in 0..ncols {
        let code = r.u8()?;
        let kind = MetricKind::from_code(code)
            .ok_or_else(|| Error::corrupt(Place::Meta, format!("unknown metric kind {code}")))?;
        let span_shift = read_span_shift(&mut r, footer)?;
        let name = read_str(&mut r)?;
        columns.push(ColumnInfo {
            name,
            kind,
            span_shift,
        });
    }
    let nextras = r.u32()?;
    if u64::from(nextras) + u64::from(ncols) > u64::from(MAX_COLUMNS) {
        return Err(Error::corrupt(
            Place::Meta,
            format!("{nextras} extra columns"),
        ));
    }
    let mut extras = Vec::with_capacity((nextras as usize).min(r.remaining() / 4));
    for _ in 0..nextras {
        let code = r.u8()?;
        let kind = ExtraKind::from_code(code)
            .ok_or_else(|| Error::corrupt(Place::Meta, format!("unknown extra kind {code}")))?;
        let span_shift = read_span_shift(&mut r, footer)?;
        let name = read_str(&mut r)?;
        extras.push(ExtraInfo {
            name,
            kind,
            span_shift,
        });
    }
    if !r.is_empty() {
        return Err(Error::corrupt(
            Place::Meta,
            format!("{} trailing bytes", r.remaining()),
        ));
    }
    Ok(Meta {
        bloom_fpr,
        bloom_capacity,
        dim_names,
        columns,
        extras,
    })
}

/// Encodes the meta section: the bloom parameters (rate 0 and capacity 0 without a
/// filter), the dimension names the series table refers to by index, then the metric
/// and extra columns with their kinds and span shifts.
pub(crate) fn encode(
    bloom: Option<(f64, u64)>,
    dim_names: &[&str],
    columns: &[ColumnInfo],
    extras: &[ExtraInfo],
) -> Result<Vec<u8>> {
    let mut meta = Vec::new();
    let (fpr, capacity) = bloom.unwrap_or((0.0, 0));
    meta.extend_from_slice(&fpr.to_bits().to_le_bytes());
    put_u64(&mut meta, capacity);
    put_u32(&mut meta, len_u32(dim_names.len(), "dimension names")?);
    for name in dim_names {
        put_str(&mut meta, name)?;
    }
    put_u32(&mut meta, len_u32(columns.len(), "metric columns")?);
    for c in columns {
        meta.push(c.kind.code());
        meta.push(c.span_shift);
        put_str(&mut meta, &c.name)?;
    }
    put_u32(&mut meta, len_u32(extras.len(), "extra columns")?);
    for e in extras {
        meta.push(e.kind.code());
        meta.push(e.span_shift);
        put_str(&mut meta, &e.name)?;
    }
    Ok(meta)
}

/// Appends a name: its length as a `u16`, then its bytes.
fn put_str(out: &mut Vec<u8>, s: &str) -> Result<()> {
    let len = u16::try_from(s.len()).map_err(|_| Error::TooLarge {
        what: "name bytes",
        found: s.len() as u64,
        max: u64::from(u16::MAX),
    })?;
    put_u16(out, len);
    out.extend_from_slice(s.as_bytes());
    Ok(())
}
