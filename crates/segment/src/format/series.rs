//! The series table: per series (in tsid order) its tsid, row count, time range,
//! dimensions, column presence and, for a series whose range has holes, its time slot
//! map; stored column-wise (all tsids, then all row counts, ...) in one compressed
//! block after its decoded length.

use std::net::Ipv6Addr;
use std::sync::Arc;

use tidemark_tsid::{TSID_LEN, Tsid};

use super::MAX_SECTION_RAW;
use super::footer::Footer;
use super::meta::Meta;
use crate::codec::{BlockCompressor, decompress_block};
use crate::error::{Error, Place, Result};
use crate::le::{Reader, put_u64, put_varint, put_zigzag};
use crate::point::Dim;
use crate::slots::TimeSlots;
use crate::v1;

/// Presence of a metric in all rows of a series.
pub(crate) const STATE_FULL: u8 = 1;
/// Presence of a metric in some rows of a series (a block bitmap tells which).
pub(crate) const STATE_PARTIAL: u8 = 2;

/// Dimension value tag: a keyword (varint length, UTF-8 bytes).
pub(crate) const TAG_KEYWORD: u8 = 1;
/// Dimension value tag: a signed integer (zigzag varint).
pub(crate) const TAG_INT: u8 = 2;
/// Dimension value tag: an unsigned integer (varint).
pub(crate) const TAG_UINT: u8 = 3;
/// Dimension value tag: a boolean (one byte, 0 or 1).
pub(crate) const TAG_BOOL: u8 = 4;
/// Dimension value tag: an IP address (16 bytes, IPv6 form).
pub(crate) const TAG_IP: u8 = 5;

/// A presence list shared by the series of a segment that have it.
pub(crate) type SharedPresence = Arc<[(u32, Presence)]>;

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

/// A series being written or written.
pub(crate) struct SeriesOut {
    pub(crate) tsid: Tsid,
    pub(crate) dims: crate::intern::SharedDims,
    pub(crate) row_count: u64,
    pub(crate) min_ts: i64,
    pub(crate) max_ts: i64,
    /// Declared presence per column index (metrics, then extras), sorted by index;
    /// shared with the previous series when equal (neighbours mostly declare alike).
    pub(crate) declared: SharedPresence,
    /// Values seen per declared column; empty when every declared column is full (each
    /// then has one value per row, which the writer checks).
    pub(crate) counts: Vec<u64>,
    /// The series' time slot map, built when its last row is in.
    pub(crate) slots: Option<Box<TimeSlots>>,
}

impl SeriesOut {
    /// The presence the series table records: each declared column with values, full
    /// when every row has one.
    fn observed(&self) -> impl Iterator<Item = (u32, Presence)> + '_ {
        let all_full = self.counts.is_empty();
        self.declared
            .iter()
            .enumerate()
            .map(move |(j, &(c, _))| {
                let n = if all_full {
                    self.row_count
                } else {
                    self.counts.get(j).copied().unwrap_or(0)
                };
                (c, n)
            })
            .filter(|&(_, n)| n > 0)
            .map(|(c, n)| {
                let p = if n == self.row_count {
                    Presence::Full
                } else {
                    Presence::Partial
                };
                (c, p)
            })
    }
}

/// The series table of a segment just written, as [`decode`] would read it back from
/// the file: handed to [`Segment::open_written`](crate::Segment::open_written) so that
/// opening the segment does not decode what the writer already holds.
#[derive(Debug)]
pub struct WrittenSeries {
    pub(crate) series: Vec<Series>,
}

impl WrittenSeries {
    /// The series entries of `series` (written, in tsid order) with their rows numbered
    /// from 0 and equal presence lists shared, as [`decode`] builds them.
    pub(crate) fn from_out(series: Vec<SeriesOut>) -> WrittenSeries {
        let mut lists = PresenceLists::default();
        let mut list: Vec<(u32, Presence)> = Vec::new();
        // Neighbours mostly share their list: the previous one answers without a lookup.
        let mut previous: Option<SharedPresence> = None;
        let mut next_row = 0u64;
        let series = series
            .into_iter()
            .map(|s| {
                list.clear();
                list.extend(s.observed());
                let first_row = next_row;
                next_row += s.row_count;
                let columns = match previous.as_ref().filter(|p| p[..] == list[..]) {
                    Some(p) => Arc::clone(p),
                    None => share_list(&mut lists, &list),
                };
                previous = Some(Arc::clone(&columns));
                Series {
                    tsid: s.tsid,
                    dims: s.dims,
                    first_row,
                    row_count: s.row_count,
                    min_ts: s.min_ts,
                    max_ts: s.max_ts,
                    columns,
                    slots: s.slots,
                }
            })
            .collect();
        WrittenSeries { series }
    }

    /// Series entries held.
    pub fn len(&self) -> usize {
        self.series.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }
}

/// Equal presence lists of one segment, held once.
type PresenceLists =
    std::collections::HashMap<Vec<(u32, Presence)>, SharedPresence, crate::hash::FoldBuildHasher>;

/// The shared copy of `list` in `lists`, added when new.
fn share_list(lists: &mut PresenceLists, list: &[(u32, Presence)]) -> SharedPresence {
    match lists.get(list) {
        Some(shared) => Arc::clone(shared),
        None => {
            let shared: SharedPresence = Arc::from(list);
            lists.insert(list.to_vec(), Arc::clone(&shared));
            shared
        }
    }
}

/// Decodes the series table section (its decoded length, then its block) and checks it
/// against the footer and meta section; dimension lists go through `interner`.
pub(crate) fn decode(
    section: &[u8],
    footer: &Footer,
    meta: &Meta,
    interner: &mut crate::intern::DimsInterner,
) -> Result<Vec<Series>> {
    let mut sr = Reader::new(section, Place::SeriesTable);
    let raw_len = sr.u64()?;
    let raw = decompress_block(
        section.get(8..).unwrap_or(&[]),
        raw_len,
        MAX_SECTION_RAW,
        Place::SeriesTable,
    )?;
    parse(&raw, footer, meta, interner)
}

fn parse(
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
            v1::read_span(&mut r)?
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
    let mut lists = PresenceLists::default();
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
        s.columns = share_list(&mut lists, &list);
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

/// The series table, column-wise inside one compressed frame.
pub(crate) fn encode(
    series: &[SeriesOut],
    dim_names: &[&str],
    comp: &mut BlockCompressor,
) -> Result<Vec<u8>> {
    let mut st = Vec::new();
    for s in series {
        st.extend_from_slice(s.tsid.as_bytes());
    }
    debug_assert_eq!(st.len(), series.len() * TSID_LEN);
    for s in series {
        put_varint(&mut st, s.row_count);
    }
    let mut prev = 0i64;
    for s in series {
        put_zigzag(&mut st, s.min_ts.wrapping_sub(prev));
        prev = s.min_ts;
    }
    let mut prev_span = 0u64;
    for s in series {
        let span = s.max_ts.wrapping_sub(s.min_ts) as u64;
        put_zigzag(&mut st, span.wrapping_sub(prev_span) as i64);
        prev_span = span;
    }
    for s in series {
        put_varint(&mut st, s.dims.len() as u64);
        for (name, value) in s.dims.iter() {
            // `dim_names` holds every series' names: a miss is a bug, never written
            // as another name.
            let Ok(id) = dim_names.binary_search(&name.as_str()) else {
                debug_assert!(false, "dimension `{name}` missing from the name table");
                return Err(Error::InvalidOption {
                    name: "series",
                    detail: format!("dimension `{name}` missing from the name table"),
                });
            };
            put_varint(&mut st, id as u64);
            match value {
                Dim::Keyword(k) => {
                    st.push(TAG_KEYWORD);
                    put_varint(&mut st, k.len() as u64);
                    st.extend_from_slice(k.as_bytes());
                }
                Dim::Int(v) => {
                    st.push(TAG_INT);
                    put_zigzag(&mut st, *v);
                }
                Dim::UInt(v) => {
                    st.push(TAG_UINT);
                    put_varint(&mut st, *v);
                }
                Dim::Bool(v) => {
                    st.push(TAG_BOOL);
                    st.push(u8::from(*v));
                }
                Dim::Ip(ip) => {
                    st.push(TAG_IP);
                    st.extend_from_slice(&ip.octets());
                }
            }
        }
    }
    // Presence as observed: a column declared partial may turn out full or absent
    // (its blocks carry bitmaps either way, which the reader follows).
    for s in series {
        put_varint(&mut st, s.observed().count() as u64);
        for (c, p) in s.observed() {
            put_varint(&mut st, u64::from(c));
            st.push(match p {
                Presence::Full => STATE_FULL,
                Presence::Partial => STATE_PARTIAL,
            });
        }
    }
    let maps = series.iter().filter(|s| s.slots.is_some()).count();
    put_varint(&mut st, maps as u64);
    let mut prev = 0usize;
    for (i, s) in series.iter().enumerate() {
        if let Some(m) = &s.slots {
            put_varint(&mut st, (i - prev) as u64);
            m.encode(&mut st);
            prev = i;
        }
    }
    let mut section = Vec::new();
    put_u64(&mut section, st.len() as u64);
    section.extend_from_slice(&comp.compress_block(&st)?);
    Ok(section)
}

/// The distinct dimension names of `series`, sorted: the names the series table refers to
/// by index.
pub(crate) fn dim_names(series: &[SeriesOut]) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    let mut prev: Option<&[(String, Dim)]> = None;
    for s in series {
        // Series of one kind share their names: a run of them adds them once.
        let same = prev.is_some_and(|p| {
            p.len() == s.dims.len() && p.iter().zip(s.dims.iter()).all(|(a, b)| a.0 == b.0)
        });
        if !same {
            names.extend(s.dims.iter().map(|(n, _)| n.as_str()));
            prev = Some(&s.dims);
        }
    }
    names.sort_unstable();
    names.dedup();
    names
}
