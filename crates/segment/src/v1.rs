//! Decoding of the version-1 meta section and series table.

use std::net::Ipv6Addr;
use std::sync::Arc;

use tidemark_tsid::{TSID_LEN, Tsid};

use crate::error::{Error, Place, Result};
use crate::format::Footer;
use crate::le::Reader;
use crate::point::{Dim, ExtraKind, MetricKind};
use crate::slots::TimeSlots;
use crate::writer::{STATE_FULL, STATE_PARTIAL, TAG_BOOL, TAG_INT, TAG_IP, TAG_KEYWORD, TAG_UINT};

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

/// A presence list shared by the series of a segment that have it.
type SharedPresence = Arc<[(u32, Presence)]>;

/// How a series holds one metric column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Presence {
    /// Every row of the series has a value.
    Full,
    /// Some rows have a value; block bitmaps say which.
    Partial,
}

/// One entry of the series table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Series {
    /// The series id.
    pub tsid: Tsid,
    /// Dimensions, sorted by name.
    pub dims: crate::intern::SharedDims,
    /// First row of the series.
    pub first_row: u64,
    /// Number of rows.
    pub row_count: u64,
    /// Smallest timestamp.
    pub min_ts: i64,
    /// Largest timestamp.
    pub max_ts: i64,
    /// Metric columns the series has (by column number), absent ones omitted; shared by
    /// the series of a segment that have the same list.
    pub columns: Arc<[(u32, Presence)]>,
    /// Which timestamps of [`min_ts`](Self::min_ts)..=[`max_ts`](Self::max_ts) the
    /// segment holds, for a series whose range has holes (format version 4; see
    /// [`TimeSlots`]).
    pub slots: Option<Box<TimeSlots>>,
}

impl Series {
    /// Whether the segment may hold a row of this series at `ts`: inside its range and,
    /// where it has a slot map, in an occupied slot. `false` is certain.
    pub fn may_hold(&self, ts: i64) -> bool {
        (self.min_ts..=self.max_ts).contains(&ts)
            && self
                .slots
                .as_ref()
                .is_none_or(|m| m.may_hold(self.min_ts, ts))
    }

    /// How the series holds metric column `column`, `None` when it never has it.
    pub fn presence(&self, column: u32) -> Option<Presence> {
        self.columns
            .binary_search_by_key(&column, |(c, _)| *c)
            .ok()
            .and_then(|i| self.columns.get(i))
            .map(|(_, p)| *p)
    }
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
    if span_shift > 16
        || u64::from(footer.block_rows) << span_shift > u64::from(crate::format::MAX_BLOCK_ROWS)
    {
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

pub(crate) fn parse_meta(bytes: &[u8], footer: &Footer) -> Result<Meta> {
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
    if u64::from(nextras) + u64::from(ncols) > u64::from(crate::format::MAX_COLUMNS) {
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

pub(crate) fn parse_series(
    raw: &[u8],
    footer: &Footer,
    meta: &Meta,
    interner: &mut crate::intern::DimsInterner,
) -> Result<Vec<Series>> {
    let place = Place::SeriesTable;
    let n = usize::try_from(footer.series_count)
        .map_err(|_| Error::corrupt(place, "series count too large"))?;
    let mut r = Reader::new(raw, place);
    let tsid_bytes = r.take(
        n.checked_mul(TSID_LEN)
            .ok_or_else(|| Error::corrupt(place, "series count too large"))?,
    )?;
    // Every remaining per-series field takes at least one byte.
    if n > r.remaining() {
        return Err(Error::corrupt(place, format!("{n} series cannot fit")));
    }
    let mut out: Vec<Series> = Vec::with_capacity(n);
    let mut prev_tsid: Option<Tsid> = None;
    for chunk in tsid_bytes.chunks_exact(TSID_LEN) {
        let tsid = Tsid::try_from_slice(chunk).map_err(|e| Error::corrupt(place, e.to_string()))?;
        if prev_tsid.is_some_and(|p| p >= tsid) {
            return Err(Error::corrupt(place, format!("tsid {tsid} out of order")));
        }
        prev_tsid = Some(tsid);
        out.push(Series {
            tsid,
            dims: Vec::new().into(),
            first_row: 0,
            row_count: 0,
            min_ts: 0,
            max_ts: 0,
            columns: Arc::from(Vec::new()),
            slots: None,
        });
    }
    let mut next_row = 0u64;
    for s in &mut out {
        let count = r.varint()?;
        if count == 0 {
            return Err(Error::corrupt(
                place,
                format!("series {} has no rows", s.tsid),
            ));
        }
        s.first_row = next_row;
        s.row_count = count;
        next_row = next_row
            .checked_add(count)
            .filter(|&v| v <= footer.row_count)
            .ok_or_else(|| Error::corrupt(place, "row counts exceed the footer's"))?;
    }
    if next_row != footer.row_count {
        return Err(Error::corrupt(
            place,
            format!(
                "row counts sum to {next_row}, footer says {}",
                footer.row_count
            ),
        ));
    }
    let mut prev = 0i64;
    for s in &mut out {
        prev = prev.wrapping_add(r.zigzag()?);
        s.min_ts = prev;
    }
    // Version 1 stores each span as a varint; version 2 as the zigzag difference from
    // the previous series' span (regular series share one span: one byte each).
    let mut prev_span = 0u64;
    for s in &mut out {
        let span = if footer.version >= 2 {
            prev_span.wrapping_add(r.zigzag()? as u64)
        } else {
            r.varint()?
        };
        prev_span = span;
        s.max_ts = s.min_ts.wrapping_add(span as i64);
        if s.max_ts < s.min_ts || (s.row_count == 1 && span != 0) {
            return Err(Error::corrupt(
                place,
                format!("series {} has a bad time span", s.tsid),
            ));
        }
        if s.min_ts < footer.min_ts || s.max_ts > footer.max_ts {
            return Err(Error::corrupt(
                place,
                format!("series {} time range outside the segment's", s.tsid),
            ));
        }
    }
    for s in &mut out {
        let count = r.count("dimension count", r.remaining() as u64)?;
        let mut dims = Vec::with_capacity(count);
        for _ in 0..count {
            let id = r.varint()?;
            let name = usize::try_from(id)
                .ok()
                .and_then(|i| meta.dim_names.get(i))
                .ok_or_else(|| Error::corrupt(place, format!("dimension name id {id}")))?;
            let value = match r.u8()? {
                TAG_KEYWORD => {
                    let len = r.count("keyword length", r.remaining() as u64)?;
                    let bytes = r.take(len)?;
                    Dim::Keyword(
                        String::from_utf8(bytes.to_vec())
                            .map_err(|_| Error::corrupt(place, "keyword is not UTF-8"))?,
                    )
                }
                TAG_INT => Dim::Int(r.zigzag()?),
                TAG_UINT => Dim::UInt(r.varint()?),
                TAG_BOOL => match r.u8()? {
                    0 => Dim::Bool(false),
                    1 => Dim::Bool(true),
                    b => return Err(Error::corrupt(place, format!("boolean byte {b}"))),
                },
                TAG_IP => {
                    let mut octets = [0u8; 16];
                    octets.copy_from_slice(r.take(16)?);
                    Dim::Ip(Ipv6Addr::from(octets))
                }
                tag => return Err(Error::corrupt(place, format!("dimension tag {tag}"))),
            };
            dims.push((name.clone(), value));
        }
        s.dims = interner.intern(s.tsid, dims);
    }
    let ncols = (meta.columns.len() + meta.extras.len()) as u64;
    // Series of one kind share one presence list: kept once per segment.
    let mut lists: std::collections::HashMap<Vec<(u32, Presence)>, SharedPresence> =
        std::collections::HashMap::new();
    let mut list: Vec<(u32, Presence)> = Vec::new();
    for s in &mut out {
        let count = r.count("presence entries", ncols)?;
        let mut prev: Option<u32> = None;
        list.clear();
        for _ in 0..count {
            let c = r.varint()?;
            let c = u32::try_from(c)
                .ok()
                .filter(|&c| u64::from(c) < ncols && prev.is_none_or(|p| p < c))
                .ok_or_else(|| Error::corrupt(place, format!("presence column {c}")))?;
            prev = Some(c);
            let p = match r.u8()? {
                STATE_FULL => Presence::Full,
                STATE_PARTIAL => Presence::Partial,
                b => return Err(Error::corrupt(place, format!("presence state {b}"))),
            };
            list.push((c, p));
        }
        s.columns = match lists.get(&list) {
            Some(shared) => Arc::clone(shared),
            None => {
                let shared: Arc<[(u32, Presence)]> = Arc::from(list.as_slice());
                lists.insert(list.clone(), Arc::clone(&shared));
                shared
            }
        };
    }
    if footer.version >= 4 {
        let maps = r.count("time slot maps", n as u64)?;
        let mut next = 0u64;
        for i in 0..maps {
            let delta = r.varint()?;
            let index = next
                .checked_add(delta)
                .filter(|&v| v < n as u64 && (i == 0 || delta > 0))
                .ok_or_else(|| Error::corrupt(place, format!("time slots of series {delta}")))?;
            next = index;
            if let Some(s) = out.get_mut(index as usize) {
                s.slots = Some(Box::new(TimeSlots::decode(
                    &mut r,
                    s.min_ts,
                    s.max_ts,
                    s.row_count,
                )?));
            }
        }
    }
    if !r.is_empty() {
        return Err(Error::corrupt(
            place,
            format!("{} trailing bytes", r.remaining()),
        ));
    }
    Ok(out)
}
