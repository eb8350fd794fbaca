//! The buffer of points not yet in a segment, held per series as Prometheus' head holds
//! a chunk per series: each series' run keeps its timestamps and, while every point of
//! the run has values in the same metric columns and no extras, one vector per column.
//! A refresh writes such a run's columns as they are instead of gathering its rows from
//! an arrival-ordered log. A run whose timestamps arrive in ascending order is searched
//! by timestamp, so the live version map holds only the points of runs that arrived out
//! of order, and events (keyed by their id).

use std::collections::HashMap;

use tidemark_segment::{Extra, MetricValue, Point};
use tidemark_tsid::{SyntheticId, Tsid};

use super::{ColumnId, ColumnTable, FastHash, Key, SeriesTable};

/// A buffered point: its run and its place in the run. Valid until the buffer is
/// cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Row {
    pub(super) run: u32,
    pub(super) off: u32,
}

/// Rows of a frozen buffer deleted since it froze: the buffer itself is shared with the
/// refresh writing it, so it is never changed (see `Frozen` in the engine).
pub(crate) type KilledRows = std::collections::HashSet<Row, FastHash>;

impl Row {
    /// Its run's index in [`Buffer::runs`].
    pub(crate) fn run(self) -> usize {
        self.run as usize
    }

    /// Its place in the run.
    pub(crate) fn off(self) -> usize {
        self.off as usize
    }
}

/// `run_of` entry of a series with no run.
const NO_RUN: u32 = u32::MAX;

/// Bounds of the rows a run makes room for at a fill's first point.
const MIN_ROOM: usize = 8;
const MAX_ROOM: usize = 1024;

/// A run's values.
#[derive(Debug)]
pub(crate) enum Values {
    /// Every row has a value in each of `cols` (metric column refs, ascending) and no
    /// extras: `columns[j]` holds column `cols[j]`'s values, one per row.
    Dense {
        cols: Vec<u32>,
        columns: Vec<Vec<MetricValue>>,
    },
    /// Rows as `(column, value)` lists: row `i`'s are `values[value_end[i-1]..value_end[i]]`.
    Rows {
        values: Vec<(u32, MetricValue)>,
        value_end: Vec<u32>,
        extras: Vec<(u32, Extra)>,
        extra_end: Vec<u32>,
    },
}

/// The most rows a late point may be inserted before in a sorted run (see
/// `Run::insert_late`); further back, the run goes to the live map as before.
const LATE_INSERT_MAX_SHIFT: usize = 64;

/// The buffered points of one series, in arrival order.
#[derive(Debug)]
pub(crate) struct Run {
    pub series: u32,
    /// The series' tsid as its sort key: runs are written in this order.
    pub key: (u128, u32),
    pub ts: Vec<i64>,
    /// Killed rows, a bit each (empty while none is).
    dead_bits: Vec<u64>,
    /// Rows killed since the last clear.
    pub dead: u32,
    /// Timestamps strictly ascending and no event ids: a point is found by binary search,
    /// and the live map holds none of the run's points.
    pub sorted: bool,
    pub values: Values,
    /// Events: each row's id.
    pub ids: Vec<SyntheticId>,
}

impl Run {
    fn new(series: u32, tsid: &Tsid) -> Run {
        Run {
            series,
            key: tsid.sort_key(),
            ts: Vec::new(),
            dead_bits: Vec::new(),
            dead: 0,
            sorted: true,
            values: Values::Dense {
                cols: Vec::new(),
                columns: Vec::new(),
            },
            ids: Vec::new(),
        }
    }

    /// Whether row `off` is live (pushed and not killed).
    pub fn is_alive(&self, off: usize) -> bool {
        off < self.ts.len()
            && self
                .dead_bits
                .get(off / 64)
                .is_none_or(|w| (w >> (off % 64)) & 1 == 0)
    }

    /// The live rows' offsets, ascending.
    pub fn alive(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.ts.len()).filter(|&o| self.is_alive(o))
    }

    /// Kills row `off`; false if it was not live.
    fn kill(&mut self, off: usize) -> bool {
        if !self.is_alive(off) {
            return false;
        }
        let words = self.ts.len().div_ceil(64);
        if self.dead_bits.len() < words {
            self.dead_bits.resize(words, 0);
        }
        if let Some(w) = self.dead_bits.get_mut(off / 64) {
            *w |= 1 << (off % 64);
        }
        self.dead += 1;
        true
    }

    /// Rows pushed since the last clear, live or not.
    pub fn rows(&self) -> usize {
        self.ts.len()
    }

    /// Live rows.
    pub fn live(&self) -> usize {
        self.ts.len() - self.dead as usize
    }

    /// Empties the run, keeping its vectors' memory unless it is far more than what this
    /// fill used (a series that was busy once does not keep that much for ever).
    fn clear(&mut self) {
        let used = self.ts.len();
        let trim = |cap: usize| cap > 4 * used.max(16);
        fn reset<T>(v: &mut Vec<T>, shrink: bool) {
            v.clear();
            if shrink {
                v.shrink_to(0);
            }
        }
        let shrink = trim(self.ts.capacity());
        reset(&mut self.ts, shrink);
        reset(&mut self.dead_bits, shrink);
        reset(&mut self.ids, shrink);
        match &mut self.values {
            Values::Dense { columns, .. } => {
                for c in columns.iter_mut() {
                    reset(c, shrink);
                }
            }
            Values::Rows {
                values,
                value_end,
                extras,
                extra_end,
            } => {
                let wide = trim(values.capacity() / 8);
                reset(values, wide);
                reset(value_end, shrink);
                reset(extras, wide);
                reset(extra_end, shrink);
            }
        }
        self.dead = 0;
        self.sorted = true;
    }

    /// Row `off`'s metric values, `(column ref, value)` ascending, into `out`.
    pub fn metrics_into(&self, off: usize, out: &mut Vec<(u32, MetricValue)>) {
        out.clear();
        match &self.values {
            Values::Dense { cols, columns } => {
                out.extend(
                    cols.iter()
                        .zip(columns)
                        .filter_map(|(&c, vals)| vals.get(off).map(|&v| (c, v))),
                );
            }
            Values::Rows {
                values, value_end, ..
            } => {
                let (lo, hi) = range(value_end, off);
                out.extend_from_slice(values.get(lo..hi).unwrap_or(&[]));
            }
        }
    }

    /// Row `off`'s extras, `(extra column ref, value)` ascending.
    pub fn extras_of(&self, off: usize) -> &[(u32, Extra)] {
        match &self.values {
            Values::Dense { .. } => &[],
            Values::Rows {
                extras, extra_end, ..
            } => {
                let (lo, hi) = range(extra_end, off);
                extras.get(lo..hi).unwrap_or(&[])
            }
        }
    }

    /// Puts a late point in its place in a sorted run, keeping the run sorted, when that
    /// is cheap and safe: a dense run with no killed row, the point's columns the run's,
    /// no row at that timestamp already, and at most [`LATE_INSERT_MAX_SHIFT`] rows after
    /// it (a sender replaying a series backwards must not make each insert move the
    /// whole run). `false`: nothing changed, the caller takes the map path.
    fn insert_late(
        &mut self,
        ts: i64,
        values: &[(u32, MetricValue)],
        extras: &[(u32, Extra)],
    ) -> bool {
        if !self.sorted || self.dead != 0 || !extras.is_empty() || !self.ids.is_empty() {
            return false;
        }
        let Values::Dense { cols, columns } = &mut self.values else {
            return false;
        };
        if !same_columns(cols, values) {
            return false;
        }
        let at = self.ts.partition_point(|&t| t < ts);
        if self.ts.get(at) == Some(&ts) || self.ts.len() - at > LATE_INSERT_MAX_SHIFT {
            return false;
        }
        if columns.iter().any(|c| c.len() != self.ts.len()) {
            return false;
        }
        self.ts.insert(at, ts);
        for (col, &(_, v)) in columns.iter_mut().zip(values) {
            col.insert(at, v);
        }
        true
    }

    /// Adds a row's values (its timestamp, liveness and id are the caller's).
    /// `room`: the rows to make room for at a fill's first point.
    fn push_values(&mut self, values: &[(u32, MetricValue)], extras: &[(u32, Extra)], room: usize) {
        let first = self.ts.is_empty();
        if first {
            self.ts.reserve(room);
        }
        if let Values::Dense { cols, columns } = &mut self.values {
            if first && extras.is_empty() {
                // A new fill takes the first point's columns, reusing the vectors.
                if !same_columns(cols, values) {
                    cols.clear();
                    cols.extend(values.iter().map(|&(c, _)| c));
                    columns.resize_with(cols.len(), Vec::new);
                }
                for c in columns.iter_mut() {
                    c.reserve(room);
                }
            }
            if extras.is_empty() && same_columns(cols, values) {
                for (col, &(_, v)) in columns.iter_mut().zip(values) {
                    col.push(v);
                }
                return;
            }
            self.unpack_rows();
        } else if first && extras.is_empty() {
            self.values = Values::Dense {
                cols: values.iter().map(|&(c, _)| c).collect(),
                columns: values.iter().map(|&(_, v)| vec![v]).collect(),
            };
            return;
        }
        if let Values::Rows {
            values: vs,
            value_end,
            extras: es,
            extra_end,
        } = &mut self.values
        {
            vs.extend_from_slice(values);
            value_end.push(vs.len() as u32);
            es.extend(extras.iter().cloned());
            extra_end.push(es.len() as u32);
        }
    }

    /// Turns dense columns into row lists (a point with other columns or extras came).
    fn unpack_rows(&mut self) {
        let Values::Dense { cols, columns } = &self.values else {
            return;
        };
        let n = self.ts.len();
        let mut values = Vec::with_capacity(n * cols.len());
        let mut value_end = Vec::with_capacity(n);
        for off in 0..n {
            values.extend(
                cols.iter()
                    .zip(columns)
                    .filter_map(|(&c, vals)| vals.get(off).map(|&v| (c, v))),
            );
            value_end.push(values.len() as u32);
        }
        self.values = Values::Rows {
            values,
            value_end,
            extras: Vec::new(),
            extra_end: vec![0; n],
        };
    }
}

fn same_columns(cols: &[u32], values: &[(u32, MetricValue)]) -> bool {
    cols.len() == values.len() && cols.iter().zip(values).all(|(&c, &(v, _))| c == v)
}

fn range(ends: &[u32], i: usize) -> (usize, usize) {
    let hi = ends.get(i).copied().unwrap_or(0) as usize;
    let lo = match i.checked_sub(1) {
        Some(j) => ends.get(j).copied().unwrap_or(0) as usize,
        None => 0,
    };
    (lo, hi.max(lo))
}

/// Buffered points, one run per series.
#[derive(Debug)]
pub(crate) struct Buffer {
    runs: Vec<Run>,
    /// Each series' run by series ref (`NO_RUN`: none).
    run_of: Vec<u32>,
    /// Rows pushed since the last clear, live or not.
    rows: usize,
    /// Live rows.
    live: usize,
    /// The live points of unsorted runs and events.
    map: HashMap<Key, Row, FastHash>,
    /// The rows a run makes room for at its first point: the last fill's rows per run,
    /// or before any fill the caller's estimate (growing a run's vectors one doubling at
    /// a time costs a reallocation each).
    room: usize,
    /// Whether `room` was measured on a fill.
    measured: bool,
    /// Before that: the rows runs may still reserve in this fill.
    budget: usize,
    /// The indexes of `runs[..order.len()]` in tsid order (runs created since the last
    /// clear come after them).
    order: Vec<u32>,
    /// Late points put in their place in a sorted run (none of them in `map`).
    late_inserts: u64,
}

impl Default for Buffer {
    fn default() -> Buffer {
        Buffer {
            runs: Vec::new(),
            run_of: Vec::new(),
            rows: 0,
            live: 0,
            map: HashMap::default(),
            late_inserts: 0,
            room: MIN_ROOM,
            measured: false,
            budget: 0,
            order: Vec::new(),
        }
    }
}

impl Buffer {
    /// Live points.
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Points pushed since the last clear, live or not (what the memory holds).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The runs, in no particular order (some may hold no live row).
    pub fn runs(&self) -> &[Run] {
        &self.runs
    }

    fn run(&self, row: Row) -> Option<&Run> {
        self.runs.get(row.run as usize)
    }

    /// Before the first fill is measured: each run will hold about `rows` rows (e.g. a
    /// fill spread over the series known so far), and the runs together at most
    /// `fill` rows. Ignored once a fill measured it.
    pub fn expect_rows_per_run(&mut self, rows: usize, fill: usize) {
        if !self.measured {
            self.room = rows.clamp(MIN_ROOM, MAX_ROOM);
            self.budget = fill;
        }
    }

    /// The rows a run makes room for at its first point of a fill. Before a fill has been
    /// measured, the estimate comes out of a budget of one fill's rows: series registered
    /// as their points come make the first estimates far too large, and the budget keeps
    /// what they reserve to a fill.
    fn take_room(&mut self) -> usize {
        if self.measured {
            return self.room;
        }
        let room = self.room.min(self.budget).max(MIN_ROOM);
        self.budget = self.budget.saturating_sub(room);
        room
    }

    /// Where the live point of `key` is, if buffered.
    pub fn lookup(&self, key: &Key) -> Option<Row> {
        if let Key::Point(s, ts) = *key {
            let r = self.run_of.get(s as usize).copied().unwrap_or(NO_RUN);
            let run = self.runs.get(r as usize)?;
            if run.sorted {
                let off = run.ts.binary_search(&ts).ok()?;
                return run.is_alive(off).then_some(Row {
                    run: r,
                    off: off as u32,
                });
            }
        }
        self.map.get(key).copied()
    }

    /// Adds a point (the caller checked its key is not live).
    pub fn push(
        &mut self,
        key: Key,
        series: u32,
        tsid: &Tsid,
        ts: i64,
        values: &[(u32, MetricValue)],
        extras: &[(u32, Extra)],
    ) {
        let idx = series as usize;
        if self.run_of.len() <= idx {
            self.run_of.resize(idx + 1, NO_RUN);
        }
        let mut r = self.run_of[idx];
        if r == NO_RUN {
            r = self.runs.len() as u32;
            self.runs.push(Run::new(series, tsid));
            self.run_of[idx] = r;
        }
        let first = self
            .runs
            .get(r as usize)
            .is_some_and(|run| run.ts.is_empty());
        let room = if first { self.take_room() } else { 0 };
        let Some(run) = self.runs.get_mut(r as usize) else {
            return;
        };
        let event = matches!(key, Key::Event(_));
        let late = run.ts.last().is_some_and(|&last| ts <= last);
        if late && !event && run.insert_late(ts, values, extras) {
            self.late_inserts += 1;
            self.rows += 1;
            self.live += 1;
            return;
        }
        if run.sorted && (event || late) {
            // From here on the run's live points are found through the map.
            run.sorted = false;
            for (off, &t) in run.ts.iter().enumerate() {
                if run.is_alive(off) {
                    let row = Row {
                        run: r,
                        off: off as u32,
                    };
                    self.map.insert(Key::Point(series, t), row);
                }
            }
        }
        run.push_values(values, extras, room);
        let off = run.ts.len() as u32;
        run.ts.push(ts);
        if let Key::Event(id) = key {
            run.ids.push(id);
        }
        if !run.sorted {
            self.map.insert(key, Row { run: r, off });
        }
        self.rows += 1;
        self.live += 1;
    }

    /// Removes a live point.
    pub fn kill(&mut self, key: &Key) {
        let Some(row) = self.lookup(key) else { return };
        self.map.remove(key);
        if let Some(run) = self.runs.get_mut(row.run as usize) {
            if run.kill(row.off as usize) {
                self.live -= 1;
            }
        }
    }

    /// Empties the buffer. Runs that held rows keep their memory (and their tsid order)
    /// for the next fill; series that sent nothing since the last clear lose their run.
    pub fn clear(&mut self) {
        let order = self.tsid_order();
        // Each run's index once the idle ones are gone (NO_RUN: dropped).
        let mut kept = 0u32;
        let index: Vec<u32> = self
            .runs
            .iter()
            .map(|run| {
                if run.rows() > 0 {
                    kept += 1;
                    kept - 1
                } else {
                    NO_RUN
                }
            })
            .collect();
        let Buffer { runs, run_of, .. } = self;
        runs.retain_mut(|run| {
            let keep = run.rows() > 0;
            if let Some(slot) = run_of.get_mut(run.series as usize) {
                *slot = NO_RUN;
            }
            run.clear();
            keep
        });
        for (r, run) in runs.iter().enumerate() {
            if let Some(slot) = run_of.get_mut(run.series as usize) {
                *slot = r as u32;
            }
        }
        self.order = order
            .into_iter()
            .filter_map(|r| index.get(r as usize).copied().filter(|&i| i != NO_RUN))
            .collect();
        if !self.runs.is_empty() {
            self.room = (self.rows / self.runs.len()).clamp(MIN_ROOM, MAX_ROOM);
            self.measured = true;
        }
        self.rows = 0;
        self.live = 0;
        self.map.clear();
    }

    /// Every run's index, in tsid order: the order kept since the last clear, merged
    /// with the runs created since, sorted (a few, once series are known). Runs stay
    /// where they were created, so appends, which come in the shipper's series order,
    /// do not jump around in memory.
    pub fn tsid_order(&self) -> Vec<u32> {
        let key = |r: u32| self.runs.get(r as usize).map(|run| run.key);
        let mut fresh: Vec<u32> = (self.order.len() as u32..self.runs.len() as u32).collect();
        fresh.sort_unstable_by_key(|&r| key(r));
        let mut out = Vec::with_capacity(self.runs.len());
        let (mut a, mut b) = (self.order.iter().peekable(), fresh.iter().peekable());
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(&&x), Some(&&y)) => {
                    if key(x) <= key(y) {
                        a.next()
                    } else {
                        b.next()
                    }
                }
                (Some(_), None) => a.next(),
                (None, Some(_)) => b.next(),
                (None, None) => break,
            };
            out.extend(next.copied());
        }
        out
    }

    /// Live points, in no particular order.
    pub fn live(&self) -> impl Iterator<Item = Row> + '_ {
        self.runs.iter().enumerate().flat_map(|(r, run)| {
            run.alive().map(move |off| Row {
                run: r as u32,
                off: off as u32,
            })
        })
    }

    /// The run of a row.
    pub fn run_of_row(&self, row: Row) -> Option<&Run> {
        self.run(row)
    }

    pub fn series_of(&self, row: Row) -> u32 {
        self.run(row).map_or(0, |r| r.series)
    }

    pub fn ts_of(&self, row: Row) -> i64 {
        self.run(row)
            .and_then(|r| r.ts.get(row.off as usize).copied())
            .unwrap_or(0)
    }

    /// Appends the live buffered rows of series `series` (a series ref) whose timestamp
    /// is in `from..=to`, column by column: the values of metric column ref `columns[j]`
    /// go to `out[j]` (`None`: a column the buffer does not have). Returns whether they
    /// were appended in ascending timestamp order (a run that arrived out of order is
    /// not: the caller sorts). With `rows`, `out[columns.len()]` gets every row's
    /// timestamp (value 0.0). Rows in `killed` (a frozen buffer's rows deleted since it
    /// froze) are left out as dead ones are.
    #[allow(clippy::too_many_arguments)]
    pub fn read_series(
        &self,
        series: u32,
        from: i64,
        to: i64,
        columns: &[Option<u32>],
        rows: bool,
        killed: Option<&KilledRows>,
        out: &mut [tidemark_segment::ColumnSamples],
    ) -> bool {
        let Some((r, run)) = self
            .run_of
            .get(series as usize)
            .filter(|&&r| r != NO_RUN)
            .and_then(|&r| Some((r, self.runs.get(r as usize)?)))
        else {
            return true;
        };
        let (lo, hi) = if run.sorted {
            (
                run.ts.partition_point(|&t| t < from),
                run.ts.partition_point(|&t| t <= to),
            )
        } else {
            (0, run.ts.len())
        };
        let value = |v: &MetricValue| match *v {
            MetricValue::Gauge(f) => f,
            MetricValue::Counter(i) => i as f64,
        };
        let in_range = |off: usize| {
            run.ts
                .get(off)
                .is_some_and(|&t| t >= from && t <= to && run.is_alive(off))
                && killed.is_none_or(|k| {
                    !k.contains(&Row {
                        run: r,
                        off: off as u32,
                    })
                })
        };
        if rows && let Some(o) = out.get_mut(columns.len()) {
            for off in (lo..hi).filter(|&o| in_range(o)) {
                if let Some(&t) = run.ts.get(off) {
                    o.push(t, 0.0);
                }
            }
        }
        match &run.values {
            Values::Dense {
                cols,
                columns: vals,
            } => {
                for (j, c) in columns.iter().enumerate() {
                    let (Some(c), Some(o)) = (c, out.get_mut(j)) else {
                        continue;
                    };
                    let Some(vs) = cols.iter().position(|x| x == c).and_then(|k| vals.get(k))
                    else {
                        continue;
                    };
                    for off in lo..hi {
                        if let (true, Some(v), Some(&t)) =
                            (in_range(off), vs.get(off), run.ts.get(off))
                        {
                            o.push(t, value(v));
                        }
                    }
                }
            }
            Values::Rows {
                values, value_end, ..
            } => {
                for off in (lo..hi).filter(|&o| in_range(o)) {
                    let Some(&t) = run.ts.get(off) else { continue };
                    let (a, b) = range(value_end, off);
                    for (c, v) in values.get(a..b).unwrap_or(&[]) {
                        if let Some(o) = columns
                            .iter()
                            .position(|x| *x == Some(*c))
                            .and_then(|j| out.get_mut(j))
                        {
                            o.push(t, value(v));
                        }
                    }
                }
            }
        }
        run.sorted
    }

    /// Buffered point `row` as a [`Point`], names sorted as a segment returns them.
    pub fn point(&self, row: Row, series: &SeriesTable, columns: &ColumnTable) -> Option<Point> {
        let run = self.run(row)?;
        let off = row.off as usize;
        let e = series.entry(run.series)?;
        let mut p = Point::new(e.tsid, *run.ts.get(off)?);
        p.dims = e.dims.to_vec();
        let mut values = Vec::new();
        run.metrics_into(off, &mut values);
        for (c, v) in values {
            let name = columns.name(ColumnId::Metric(c))?;
            p.metrics.push((name.to_owned(), v));
        }
        for (c, v) in run.extras_of(off) {
            let name = columns.name(ColumnId::Extra(*c))?;
            p.extras.push((name.to_owned(), v.clone()));
        }
        Some(p.normalized())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tsid(s: u32) -> Tsid {
        let mut b = [0u8; 20];
        b[..4].copy_from_slice(&s.to_be_bytes());
        Tsid::from_bytes(b)
    }

    fn reserved(b: &Buffer) -> usize {
        b.runs.iter().map(|r| r.ts.capacity()).sum()
    }

    /// Series registered as their points come: the first estimate (a whole fill for the
    /// one series known) must not be reserved for every run.
    #[test]
    fn the_first_fill_reserves_at_most_a_fill() {
        let mut b = Buffer::default();
        b.expect_rows_per_run(1_000, 1_000);
        let values = [(0u32, MetricValue::Gauge(1.0))];
        for s in 0..500u32 {
            b.push(Key::Point(s, 10), s, &tsid(s), 10, &values, &[]);
        }
        assert!(reserved(&b) <= 1_000 + 500 * MIN_ROOM, "{}", reserved(&b));
        assert_eq!(b.len(), 500);
    }

    /// After a fill, runs make room for what a run held on average, and a run that
    /// reserved far more than it used gives it back at the clear.
    #[test]
    fn later_fills_reserve_the_measured_rows_per_run() {
        let mut b = Buffer::default();
        b.expect_rows_per_run(MAX_ROOM, MAX_ROOM);
        let values = [(0u32, MetricValue::Gauge(1.0))];
        for s in 0..4u32 {
            for t in 0..20i64 {
                b.push(Key::Point(s, t), s, &tsid(s), t, &values, &[]);
            }
        }
        b.clear();
        assert!(b.measured);
        assert_eq!(b.room, 20);
        // The first run reserved MAX_ROOM for 20 rows: shrunk.
        assert!(reserved(&b) <= 4 * 2 * 20, "{}", reserved(&b));
        // A series new in this fill gets the measured room.
        b.push(Key::Point(9, 0), 9, &tsid(9), 0, &values, &[]);
        let run = b
            .runs
            .iter()
            .find(|r| r.series == 9)
            .map(|r| r.ts.capacity());
        assert!(run.is_some_and(|c| (20..40).contains(&c)), "{run:?}");
    }
    /// A late point goes to its place in a sorted run (found by binary search, nothing
    /// in the map); one too far back, at a timestamp already held, or after a kill
    /// flips the run to the map as before, and every point is still found.
    #[test]
    fn late_points_keep_a_run_sorted_when_cheap() {
        let mut b = Buffer::default();
        let v = |x: f64| [(0u32, MetricValue::Gauge(x))];
        for t in [10i64, 20, 30, 40] {
            b.push(Key::Point(1, t), 1, &tsid(1), t, &v(t as f64), &[]);
        }
        b.push(Key::Point(1, 25), 1, &tsid(1), 25, &v(25.0), &[]);
        b.push(Key::Point(1, 5), 1, &tsid(1), 5, &v(5.0), &[]);
        assert_eq!(b.late_inserts, 2);
        let run = &b.runs[0];
        assert!(run.sorted && b.map.is_empty());
        assert_eq!(run.ts, [5, 10, 20, 25, 30, 40]);
        let mut out = Vec::new();
        for (off, &t) in run.ts.iter().enumerate() {
            run.metrics_into(off, &mut out);
            assert_eq!(out, v(t as f64), "row {off}");
            assert!(b.lookup(&Key::Point(1, t)).is_some());
        }
        // Further back than the shift bound: the map path.
        let mut far = Buffer::default();
        for t in 0..=(LATE_INSERT_MAX_SHIFT as i64 + 1) {
            far.push(Key::Point(2, 10 + t), 2, &tsid(2), 10 + t, &v(1.0), &[]);
        }
        far.push(Key::Point(2, 0), 2, &tsid(2), 0, &v(1.0), &[]);
        assert_eq!(far.late_inserts, 0);
        assert!(!far.runs[0].sorted);
        for t in std::iter::once(0).chain(10..=(LATE_INSERT_MAX_SHIFT as i64 + 11)) {
            assert!(far.lookup(&Key::Point(2, t)).is_some(), "{t}");
        }
        // After a kill: the map path.
        b.kill(&Key::Point(1, 20));
        b.push(Key::Point(1, 15), 1, &tsid(1), 15, &v(15.0), &[]);
        assert_eq!(b.late_inserts, 2);
        assert!(!b.runs[0].sorted);
        assert!(b.lookup(&Key::Point(1, 15)).is_some());
        assert!(b.lookup(&Key::Point(1, 20)).is_none());
        assert_eq!(b.len(), 6);
    }
}
