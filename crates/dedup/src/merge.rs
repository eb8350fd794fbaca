//! The streaming merge: a k-way merge of segments sorted by (tsid, timestamp), read
//! block by block through [`RowCursor`]s and written block by block through a
//! [`SegmentStreamWriter`]. Memory: one decoded block per column per input, the output's
//! open blocks, and the series table — never the rows merged.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use tidemark_segment::{
    AtomicFile, ColumnInfo, Extra, ExtraInfo, ExtraKind, MetricKind, MetricValue, Point, Presence,
    RowCursor, Segment, SegmentOptions, SegmentStreamWriter, Series, StreamSchema, Tombstones,
    span_shift,
};
use tidemark_tsid::{SyntheticId, Tsid};

use crate::error::{Error, Result};
use crate::events::EventKeyer;

/// What a merge wrote.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Merged {
    /// Rows of the new segment (0: nothing was written).
    pub rows: u64,
    /// Whether its bloom filter is the OR of the inputs' (`None`: no bloom section).
    pub bloom_ored: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Metric(MetricKind),
    Extra(ExtraKind),
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Metric(k) => k.name(),
            Kind::Extra(k) => k.name(),
        }
    }
}

/// One input: its cursor and where its columns go in the output.
struct Input<'a> {
    seg: &'a Segment,
    cursor: RowCursor<'a>,
    live: bool,
    /// Output metric column of each input metric column.
    metric_map: Vec<u32>,
    /// Output extra column of each input extra column.
    extra_map: Vec<u32>,
    /// Events: the id of the current row.
    id: Option<SyntheticId>,
}

/// Merges the live rows of `inputs` into a new segment at `path`, written atomically.
/// Writes nothing when no row is live.
pub(crate) fn merge_segments(
    inputs: &[(Arc<Segment>, Tombstones)],
    path: &Path,
    options: SegmentOptions,
    keyer: Option<&EventKeyer>,
    bloom_fpr: Option<f64>,
) -> Result<Merged> {
    let expected: u64 = inputs
        .iter()
        .map(|(s, t)| s.row_count().saturating_sub(t.len()))
        .sum();
    if expected == 0 {
        return Ok(Merged {
            rows: 0,
            bloom_ored: None,
        });
    }
    let schema = output_schema(inputs, expected, options.block_rows())?;
    // Time series (no event ids): runs of rows are copied column by column.
    let bulk = keyer.is_none() && !options.events();
    let mut writer = SegmentStreamWriter::new(
        AtomicFile::create(path).map_err(Error::io(path))?,
        options,
        schema.clone(),
        expected,
    )?;
    let mut bloom_ored = None;
    if let Some(fpr) = bloom_fpr {
        let ored = crate::engine::ored_bloom(inputs.iter().map(|(s, _)| s.as_ref()), fpr)?;
        bloom_ored = Some(ored.is_some());
        if let Some((filter, capacity)) = ored {
            writer.set_bloom_filter(filter, capacity);
        }
    }
    let mut ins = Vec::with_capacity(inputs.len());
    for (seg, dead) in inputs {
        let map = |name: &str, kind: Kind| -> Result<u32> {
            let found = match kind {
                Kind::Metric(_) => schema
                    .columns
                    .binary_search_by(|c| c.name.as_str().cmp(name)),
                Kind::Extra(_) => schema
                    .extras
                    .binary_search_by(|c| c.name.as_str().cmp(name)),
            };
            found.map(|i| i as u32).map_err(|_| {
                Error::Segment(tidemark_segment::Error::MetricKindConflict {
                    name: name.to_owned(),
                    expected: "a column of the merged schema",
                    found: kind.name(),
                })
            })
        };
        let metric_map = seg
            .columns()
            .iter()
            .map(|c| map(&c.name, Kind::Metric(c.kind)))
            .collect::<Result<Vec<_>>>()?;
        let extra_map = seg
            .extra_columns()
            .iter()
            .map(|e| map(&e.name, Kind::Extra(e.kind)))
            .collect::<Result<Vec<_>>>()?;
        let mut cursor = seg.cursor(Some(dead.dead()));
        let live = cursor.advance()?;
        let mut input = Input {
            seg,
            cursor,
            live,
            metric_map,
            extra_map,
            id: None,
        };
        input.id = event_id(&input, keyer)?;
        ins.push(input);
    }

    let ncols = schema.columns.len() as u32;
    let mut run = RunColumns::default();
    let mut metrics: Vec<(u32, MetricValue)> = Vec::new();
    let mut presence: Vec<(u32, Presence)> = Vec::new();
    let mut on_series: Vec<usize> = Vec::new();
    // Series in tsid order: the smallest tsid under a live cursor next.
    while let Some(tsid) = ins
        .iter()
        .filter(|i| i.live)
        .filter_map(|i| i.cursor.series().map(|s| s.tsid))
        .min()
    {
        on_series.clear();
        on_series.extend(
            ins.iter()
                .enumerate()
                .filter(|(_, i)| i.live && i.cursor.series().is_some_and(|s| s.tsid == tsid))
                .map(|(k, _)| k),
        );
        let series: Vec<&Series> = on_series
            .iter()
            .filter_map(|&k| ins.get(k).and_then(|i| i.cursor.series()))
            .collect();
        series_presence(&ins, &on_series, &series, ncols, &mut presence);
        let Some(first) = series.first() else { break };
        writer.begin_series(tsid, Arc::clone(&first.dims), &presence)?;
        // Rows of this series, in (timestamp[, id]) order across the inputs holding it.
        loop {
            let mut best: Option<usize> = None;
            for &k in &on_series {
                let Some(i) = ins.get(k) else { continue };
                if !i.live || i.cursor.series().is_none_or(|s| s.tsid != tsid) {
                    continue;
                }
                let better = match best.and_then(|b| ins.get(b)) {
                    None => true,
                    Some(b) => {
                        (i.cursor.ts_millis(), i.id.map(|id| id.to_bytes()))
                            < (b.cursor.ts_millis(), b.id.map(|id| id.to_bytes()))
                    }
                };
                if better {
                    best = Some(k);
                }
            }
            let Some(b) = best else { break };
            // The smallest key of the other inputs on this series: the chosen input's rows
            // below it come next, so a run of them is copied without choosing again
            // (segments of one series mostly hold disjoint time ranges, and choosing
            // among every input per row was a fifth of a merge's instructions).
            let mut bound: Option<(i64, Option<[u8; tidemark_tsid::SYNTHETIC_ID_LEN]>)> = None;
            for &k in &on_series {
                let Some(i) = ins.get(k) else { continue };
                if k == b || !i.live || i.cursor.series().is_none_or(|s| s.tsid != tsid) {
                    continue;
                }
                let key = (i.cursor.ts_millis(), i.id.map(|id| id.to_bytes()));
                if bound.is_none_or(|m| key < m) {
                    bound = Some(key);
                }
            }
            let Some(input) = ins.get_mut(b) else {
                break;
            };
            loop {
                if bulk && input.extra_map.is_empty() {
                    let copied = copy_run(input, bound.map(|(t, _)| t), &mut writer, &mut run)?;
                    if copied {
                        let next_in_run = input.live
                            && input.cursor.series().is_some_and(|s| s.tsid == tsid)
                            && bound.is_none_or(|(t, _)| input.cursor.ts_millis() < t);
                        if next_in_run {
                            continue;
                        }
                        break;
                    }
                }
                metrics.clear();
                for (&out, v) in input.metric_map.iter().zip(input.cursor.metrics()) {
                    if let Some(v) = v {
                        metrics.push((out, *v));
                    }
                }
                let extras: Vec<(u32, &Extra)> = input
                    .extra_map
                    .iter()
                    .enumerate()
                    .filter_map(|(e, &out)| input.cursor.extra(e).map(|v| (out, v)))
                    .collect();
                writer.push_row(
                    input.cursor.ts_millis(),
                    &metrics,
                    &extras,
                    input.id.as_ref(),
                )?;
                input.live = input.cursor.advance()?;
                input.id = event_id(input, keyer)?;
                let next_in_run = input.live
                    && input.cursor.series().is_some_and(|s| s.tsid == tsid)
                    && bound.is_none_or(|m| {
                        (input.cursor.ts_millis(), input.id.map(|id| id.to_bytes())) < m
                    });
                if !next_in_run {
                    break;
                }
            }
        }
    }
    let (file, meta) = writer.finish()?;
    file.commit().map_err(Error::io(path))?;
    Ok(Merged {
        rows: meta.row_count,
        bloom_ored,
    })
}

/// The value columns of one copied run, kept between runs so a merge allocates them once.
#[derive(Default)]
struct RunColumns {
    /// Per input metric column: its values in the run.
    values: Vec<Vec<MetricValue>>,
    /// (output column, input column) of the columns every row of the run holds, in output
    /// order.
    order: Vec<(u32, usize)>,
}

/// Copies the run of `input`'s rows that starts at its current row, stays in one block of
/// one series, holds the same metric columns in every row and has timestamps below
/// `below`, with one [`SegmentStreamWriter::push_rows`]; moves the cursor past it. Answers
/// `false` (and writes nothing) when the run is shorter than two rows, where a row by
/// row copy is as cheap. Time-series inputs without extra columns only.
fn copy_run<W: std::io::Write>(
    input: &mut Input<'_>,
    below: Option<i64>,
    writer: &mut SegmentStreamWriter<W>,
    run: &mut RunColumns,
) -> Result<bool> {
    let width = input.metric_map.len();
    let (ts, rows) = input.cursor.run(below);
    let (Some(first), true) = (rows.get(..width), ts.len() >= 2) else {
        return Ok(false);
    };
    // The run ends where a row holds other columns than the first.
    let len = if width == 0 {
        ts.len()
    } else {
        rows.chunks_exact(width)
            .take(ts.len())
            .take_while(|row| {
                row.iter()
                    .zip(first)
                    .all(|(a, b)| a.is_some() == b.is_some())
            })
            .count()
    };
    if len < 2 {
        return Ok(false);
    }
    run.values.resize_with(width, Vec::new);
    run.order.clear();
    for (c, (v, &out)) in first.iter().zip(&input.metric_map).enumerate() {
        if v.is_some() {
            run.order.push((out, c));
        }
    }
    run.order.sort_unstable();
    for &(_, c) in &run.order {
        if let Some(col) = run.values.get_mut(c) {
            col.clear();
            col.extend(
                rows.iter()
                    .skip(c)
                    .step_by(width)
                    .take(len)
                    .filter_map(|v| *v),
            );
        }
    }
    let columns: Vec<(u32, &[MetricValue])> = run
        .order
        .iter()
        .filter_map(|&(out, c)| run.values.get(c).map(|v| (out, v.as_slice())))
        .collect();
    writer.push_rows(ts.get(..len).unwrap_or(&[]), &columns)?;
    input.live = input.cursor.skip(len)?;
    input.id = None;
    Ok(true)
}

/// The merged series' presence per output column: full where every input holding the
/// series has it full, partial where some have it, absent elsewhere.
fn series_presence(
    ins: &[Input<'_>],
    on_series: &[usize],
    series: &[&Series],
    ncols: u32,
    out: &mut Vec<(u32, Presence)>,
) {
    let mut seen: BTreeMap<u32, usize> = BTreeMap::new();
    let mut full: BTreeMap<u32, usize> = BTreeMap::new();
    for (&k, s) in on_series.iter().zip(series) {
        let Some(input) = ins.get(k) else { continue };
        let nmetrics = input.metric_map.len() as u32;
        for &(c, p) in s.columns.iter() {
            let out_col = if c < nmetrics {
                input.metric_map.get(c as usize).copied()
            } else {
                input
                    .extra_map
                    .get((c - nmetrics) as usize)
                    .map(|&e| ncols + e)
            };
            let Some(o) = out_col else { continue };
            *seen.entry(o).or_default() += 1;
            if p == Presence::Full {
                *full.entry(o).or_default() += 1;
            }
        }
    }
    out.clear();
    for (c, n) in seen {
        let all_full = full.get(&c) == Some(&on_series.len()) && n == on_series.len();
        out.push((
            c,
            if all_full {
                Presence::Full
            } else {
                Presence::Partial
            },
        ));
    }
}

/// The merged schema: every input column by name (a name with two kinds is an error),
/// each with the span shift of its estimated density (series where a column is partial
/// count half their rows).
fn output_schema(
    inputs: &[(Arc<Segment>, Tombstones)],
    rows: u64,
    block_rows: u32,
) -> Result<StreamSchema> {
    let mut kinds: BTreeMap<String, (Kind, u64)> = BTreeMap::new();
    for (seg, _) in inputs {
        let names: Vec<(String, Kind)> = seg
            .columns()
            .iter()
            .map(|c| (c.name.clone(), Kind::Metric(c.kind)))
            .chain(
                seg.extra_columns()
                    .iter()
                    .map(|e| (e.name.clone(), Kind::Extra(e.kind))),
            )
            .collect();
        let mut present = vec![0u64; names.len()];
        for s in seg.series() {
            for &(c, p) in s.columns.iter() {
                if let Some(n) = present.get_mut(c as usize) {
                    *n += match p {
                        Presence::Full => s.row_count,
                        Presence::Partial => s.row_count.div_ceil(2),
                    };
                }
            }
        }
        for ((name, kind), n) in names.into_iter().zip(present) {
            match kinds.get_mut(&name) {
                Some((k, total)) => {
                    if *k != kind {
                        return Err(Error::Segment(
                            tidemark_segment::Error::MetricKindConflict {
                                name,
                                expected: k.name(),
                                found: kind.name(),
                            },
                        ));
                    }
                    *total += n;
                }
                None => {
                    kinds.insert(name, (kind, n));
                }
            }
        }
    }
    let mut schema = StreamSchema::default();
    for (name, (kind, present)) in kinds {
        let span_shift = span_shift(rows, present.min(rows), block_rows);
        match kind {
            Kind::Metric(kind) => schema.columns.push(ColumnInfo {
                name,
                kind,
                span_shift,
            }),
            Kind::Extra(kind) => schema.extras.push(ExtraInfo {
                name,
                kind,
                span_shift,
            }),
        }
    }
    Ok(schema)
}

/// Events: the id of an input's current row (its fingerprint, recomputed).
fn event_id(input: &Input<'_>, keyer: Option<&EventKeyer>) -> Result<Option<SyntheticId>> {
    let (Some(k), true) = (keyer, input.live) else {
        return Ok(None);
    };
    let Some(series) = input.cursor.series() else {
        return Ok(None);
    };
    let p = row_point(input, series.tsid, series);
    k.id_of(&p)
        .map(Some)
        .map_err(|detail| Error::EventId { detail })
}

/// The current row of an input as a point (events only: the fingerprint is computed
/// from a point's fields).
fn row_point(input: &Input<'_>, tsid: Tsid, series: &Series) -> Point {
    let mut p = Point::new(tsid, input.cursor.ts_millis());
    p.dims = series.dims.to_vec();
    p.metrics = input
        .seg
        .columns()
        .iter()
        .zip(input.cursor.metrics())
        .filter_map(|(c, v)| v.map(|v| (c.name.clone(), v)))
        .collect();
    p.extras = input
        .seg
        .extra_columns()
        .iter()
        .enumerate()
        .filter_map(|(e, info)| {
            input
                .cursor
                .extra(e)
                .map(|v| (info.name.clone(), v.clone()))
        })
        .collect();
    p
}
