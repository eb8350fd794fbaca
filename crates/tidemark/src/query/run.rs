//! [`Index::query`]: picks the cheapest path for a request (by column, by row, over
//! rollup pieces, or a `search_after` page) and feeds the accumulators.

use std::collections::BTreeMap;

use tidemark_dedup::Piece;
use tidemark_segment::{Dim, Point};

use super::acc::{Aggs, check_agg, metric_fields};
use super::{
    Agg, CalendarUnit, Hit, Interval, MetricKind, SearchAfter, SearchRequest, SearchResult,
};
use crate::doc::point_to_doc;
use crate::error::{Error, Result};
use crate::filter::{Compiled, TimeRange, compile};
use crate::index::Index;
use crate::mapping::{FieldRole, IndexMode, Mapping};
use crate::read::rollup_step;
use crate::search::Order;

impl Index {
    /// Runs a [`SearchRequest`]: the exact number of matches, a page of hits sorted by
    /// timestamp (then `_id`), and the aggregations.
    ///
    /// ```
    /// use serde_json::json;
    /// use tidemark::{Agg, BulkItem, Filter, Index, Interval, Mapping, MetricKind, SearchRequest};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let mapping = Mapping::from_value(json!({"mappings": {"properties": {
    ///     "host": {"type": "keyword", "time_series_dimension": true},
    ///     "cpu": {"type": "double", "time_series_metric": "gauge"}}}}))?;
    /// let mut index = Index::create(dir.path(), mapping)?;
    /// index.bulk(vec![
    ///     BulkItem::create(json!({"@timestamp": 0, "host": "a", "cpu": 1.0})),
    ///     BulkItem::create(json!({"@timestamp": 60_000, "host": "a", "cpu": 3.0})),
    ///     BulkItem::create(json!({"@timestamp": 0, "host": "b", "cpu": 5.0})),
    /// ])?;
    /// let avg = Agg::Metric { kind: MetricKind::Avg, field: "cpu".into() };
    /// let result = index.query(&SearchRequest {
    ///     filter: Filter::Terms { field: "host".into(), values: vec!["a".into()] },
    ///     size: 0,
    ///     aggs: vec![("per_minute".into(), Agg::DateHistogram {
    ///         interval: Interval::Fixed(60_000), min_doc_count: 1, extended_bounds: None,
    ///         aggs: vec![("avg".into(), avg)],
    ///     })],
    ///     ..SearchRequest::default()
    /// })?;
    /// assert_eq!(result.total, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Query`] for a filter or aggregation on a field it cannot apply to;
    /// [`Error::TooManyBuckets`] when the aggregations' answer would hold more than
    /// [`SearchRequest::max_buckets`] buckets; segment read errors.
    pub fn query(&self, req: &SearchRequest) -> Result<SearchResult> {
        if let Some(after) = &req.search_after {
            return self.query_after(req, after);
        }
        let mapping = self.mapping();
        let filter = compile(&req.filter, mapping)?;
        for (_, a) in &req.aggs {
            check_agg(a, mapping)?;
        }
        let range = filter.time_bounds();
        let (from, to) = (range.first_ms, range.last_ms);
        if range.is_empty() {
            return Ok(SearchResult {
                total: 0,
                hits: Vec::new(),
                aggs: Aggs::new(req, mapping)?.finish()?,
                rows_scanned: 0,
                rollup_rows: 0,
                expired: Vec::new(),
            });
        }
        if let Some(res) = req.rollup {
            return self.query_rollup_docs(req, &filter, res, from, to);
        }
        if let Some(align) = rollup_alignment(req, &filter, mapping) {
            let pieces = self.read_plan(from, to, align);
            if pieces.iter().any(|p| matches!(p, Piece::Rollup { .. })) {
                return self.query_pieces(req, &filter, pieces);
            }
        }
        let want_hits = req.size > 0;
        if !want_hits && !filter.needs_id() && filter.on_time_and_dims() {
            return self.query_columns(req, &filter, from, to);
        }
        self.query_rows(req, &filter, from, to, None)
    }

    /// A `search_after` page: `total` and the aggregations from the whole query (read
    /// as a query without hits, by column where it can), the hits from the part of the
    /// time range at and beyond the cursor only, so paging through a range reads each
    /// row about once for its hits.
    fn query_after(&self, req: &SearchRequest, after: &SearchAfter) -> Result<SearchResult> {
        if req.rollup.is_some() {
            return Err(Error::Query {
                reason: "search_after pages raw documents: page rollup hits with from and size"
                    .into(),
            });
        }
        let head = SearchRequest {
            size: 0,
            from: 0,
            search_after: None,
            ..req.clone()
        };
        let mut out = self.query(&head)?;
        if req.size == 0 {
            return Ok(out);
        }
        let filter = compile(&req.filter, self.mapping())?;
        let range = filter.time_bounds();
        let (mut from, mut to) = (range.first_ms, range.last_ms);
        match req.order {
            Order::Asc => from = from.max(after.ts_millis),
            Order::Desc => to = to.min(after.ts_millis),
        }
        if from <= to {
            let tail = SearchRequest {
                aggs: Vec::new(),
                search_after: None,
                ..req.clone()
            };
            let page = self.query_rows(&tail, &filter, from, to, Some(after))?;
            out.hits = page.hits;
            out.rows_scanned = out.rows_scanned.saturating_add(page.rows_scanned);
        }
        Ok(out)
    }

    /// The row-by-row query over `[from, to]`: every matching row counted and
    /// aggregated, the page of hits kept (those after `cursor` only, when given).
    fn query_rows(
        &self,
        req: &SearchRequest,
        filter: &Compiled,
        from: i64,
        to: i64,
        cursor: Option<&SearchAfter>,
    ) -> Result<SearchResult> {
        let mapping = self.mapping();
        let want_hits = req.size > 0;
        let keep = req.from.saturating_add(req.size);
        let needs_id = filter.needs_id() || want_hits;
        // An event's `_id` is a fingerprint of all its fields, extras included: they are
        // read before the id is; otherwise only for the hits kept.
        let extras_first = needs_id && matches!(mapping.mode(), IndexMode::Events(_));
        let mut aggs = Aggs::new(req, mapping)?;
        let mut total = 0u64;
        let mut hits: Vec<(i64, String, Point)> = Vec::new();
        let mut failure: Option<Error> = None;
        let sort = |hits: &mut Vec<(i64, String, Point)>, order: Order| match order {
            Order::Asc => hits.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1))),
            Order::Desc => hits.sort_by(|a, b| (b.0, &b.1).cmp(&(a.0, &a.1))),
        };
        let mut rows_scanned = 0u64;
        let mut on_row =
            |mut p: Point,
             stored: Option<(&tidemark_segment::Segment, tidemark_segment::RowId)>| {
                if failure.is_some() {
                    return;
                }
                rows_scanned += 1;
                if extras_first && let Err(e) = load_extras(&mut p, stored) {
                    failure = Some(e);
                    return;
                }
                let id = if needs_id {
                    match self.id_of(&p) {
                        Ok(id) => self.format_id(&id),
                        Err(e) => {
                            failure = Some(e);
                            return;
                        }
                    }
                } else {
                    String::new()
                };
                if !filter.matches(&p, &id) {
                    return;
                }
                total += 1;
                if let Err(e) = aggs.add(&p, mapping) {
                    failure = Some(e);
                    return;
                }
                if want_hits && cursor.is_none_or(|c| c.admits(req.order, p.ts_millis, &id)) {
                    if !extras_first && let Err(e) = load_extras(&mut p, stored) {
                        failure = Some(e);
                        return;
                    }
                    hits.push((p.ts_millis, id, p));
                    // Keep memory bounded by the page, not the matches.
                    if hits.len() >= keep.saturating_mul(2).max(1024) {
                        sort(&mut hits, req.order);
                        hits.truncate(keep);
                    }
                }
            };
        self.scan_compiled(filter, from, to, &mut on_row)?;
        if let Some(e) = failure {
            return Err(e);
        }
        sort(&mut hits, req.order);
        hits.truncate(keep);
        let hits = hits
            .into_iter()
            .skip(req.from)
            .map(|(ts, id, p)| Hit {
                doc: point_to_doc(mapping, &p, &id),
                id,
                ts_millis: ts,
            })
            .collect();
        Ok(SearchResult {
            total,
            hits,
            aggs: aggs.finish()?,
            rows_scanned,
            rollup_rows: 0,
            expired: self.expired_in(from, to),
        })
    }

    /// Aggregations (no hits) under a filter on time and dimensions only, read by
    /// column: the matching series are chosen through each segment's dimension index
    /// (no row read), then each series' documents and the metric columns the
    /// aggregations use are read as slices ([`Index::series_reader`] with rows) and
    /// added a series at a time ([`Acc::add_series`]), not as one `Point` per document.
    fn query_columns(
        &self,
        req: &SearchRequest,
        filter: &Compiled,
        from: i64,
        to: i64,
    ) -> Result<SearchResult> {
        let mapping = self.mapping();
        let mut fields: Vec<&str> = Vec::new();
        for (_, a) in &req.aggs {
            metric_fields(a, mapping, &mut fields);
        }
        let series = self.matching_series(filter, from, to)?;
        let mut aggs = Aggs::new(req, mapping)?;
        let mut reader = self
            .engine()
            .search(from, to)
            .series_reader_with_rows(&fields);
        let mut out = Vec::new();
        let mut total = 0u64;
        for (tsid, dims) in &series {
            reader.read(tsid, &mut out)?;
            let Some((rows, cols)) = out.split_last() else {
                continue;
            };
            if rows.is_empty() {
                continue;
            }
            total += rows.len() as u64;
            let named: Vec<(&str, &tidemark_segment::ColumnSamples)> =
                fields.iter().copied().zip(cols).collect();
            aggs.add_series(dims, &rows.ts, &named, mapping)?;
        }
        Ok(SearchResult {
            total,
            hits: Vec::new(),
            aggs: aggs.finish()?,
            rows_scanned: reader.rows_read(),
            rollup_rows: 0,
            expired: self.expired_in(from, to),
        })
    }

    /// The series with documents in `[from, to]` whose dimensions `filter` accepts
    /// (a filter on dimensions and time), in tsid order, with their dimensions: from
    /// each live segment's dimension index and series table, and the buffered series.
    fn matching_series(
        &self,
        filter: &Compiled,
        from: i64,
        to: i64,
    ) -> Result<BTreeMap<tidemark_tsid::Tsid, Vec<(String, Dim)>>> {
        let mut chosen = BTreeMap::new();
        self.select_series(
            from,
            to,
            |p| filter.select(p),
            |hit| {
                if !chosen.contains_key(hit.tsid) && filter.may_match(hit.dims) {
                    chosen.insert(*hit.tsid, hit.dims.to_vec());
                }
            },
        )?;
        Ok(chosen)
    }

    /// Scans raw rows in `[from, to]` (narrowed to what the filter's `_id` prefixes
    /// allow): the series are chosen through each segment's dimension index (only their
    /// rows read), unless nothing filters by dimension, and by what `_id` prefixes say
    /// about them.
    pub(crate) fn scan_compiled(
        &self,
        filter: &Compiled,
        from: i64,
        to: i64,
        on_row: RowSink<'_>,
    ) -> Result<()> {
        let range = TimeRange::new(from, to).intersect(filter.row_bounds());
        if range.is_empty() {
            return Ok(());
        }
        let (from, to) = (range.first_ms, range.last_ms);
        if filter.narrows() {
            self.engine().search(from, to).rows_indexed(
                |tsid, dims| filter.may_match(dims) && filter.may_match_series(tsid),
                |p| filter.select(p),
                on_row,
            )?;
        } else {
            self.engine()
                .search(from, to)
                .rows(|tsid, _| filter.may_match_series(tsid), on_row)?;
        }
        Ok(())
    }

    /// Aggregations (no hits) over planned pieces: rollup rows where a rollup answers,
    /// raw rows elsewhere (see [`rollup_alignment`]).
    fn query_pieces(
        &self,
        req: &SearchRequest,
        filter: &Compiled,
        pieces: Vec<Piece>,
    ) -> Result<SearchResult> {
        let mapping = self.mapping();
        let mut aggs = Aggs::new(req, mapping)?;
        let (mut total, mut rows_scanned, mut rollup_rows) = (0u64, 0u64, 0u64);
        let mut expired = Vec::new();
        let mut failure: Option<Error> = None;
        for piece in pieces {
            // A rollup built before rollups counted their rows cannot give doc counts:
            // its partition's raw rows answer instead (retention rebuilds such rollups
            // before it drops the raw rows; an empty rollup has nothing to count).
            let piece = match piece {
                Piece::Rollup { from, to, .. } if !self.rollup_counts_rows(&piece) => {
                    Piece::Raw { from, to }
                }
                other => other,
            };
            match piece {
                Piece::Raw { from, to } => {
                    self.scan_compiled(filter, from, to, &mut |p, _| {
                        if failure.is_some() {
                            return;
                        }
                        rows_scanned += 1;
                        if filter.matches(&p, "") {
                            total += 1;
                            if let Err(e) = aggs.add(&p, mapping) {
                                failure = Some(e);
                            }
                        }
                    })?;
                }
                Piece::Rollup { .. } => {
                    self.read_rollup(
                        &piece,
                        |_, dims| filter.may_match(dims),
                        |p| filter.select(p),
                        |row| {
                            if failure.is_some() {
                                return;
                            }
                            rollup_rows += 1;
                            let n = row.doc_count.unwrap_or(0);
                            total += n;
                            if let Err(e) = aggs.add_rollup(row.bucket_ms, n, &row.metrics) {
                                failure = Some(e);
                            }
                        },
                    )?;
                }
                Piece::Expired { from, to } => expired.push((from, to)),
            }
            if let Some(e) = failure {
                return Err(e);
            }
        }
        Ok(SearchResult {
            total,
            hits: Vec::new(),
            aggs: aggs.finish()?,
            rows_scanned,
            rollup_rows,
            expired,
        })
    }

    /// A search whose hits are rollup documents (see [`SearchRequest::rollup`]).
    fn query_rollup_docs(
        &self,
        req: &SearchRequest,
        filter: &Compiled,
        res: i64,
        from: i64,
        to: i64,
    ) -> Result<SearchResult> {
        let (found, keys) = self.rollup_docs(
            TimeRange::new(from, to),
            res,
            filter,
            req.order,
            Some(req.from.saturating_add(req.size)),
        )?;
        let aggs = if req.aggs.is_empty() {
            SearchResult {
                total: 0,
                hits: Vec::new(),
                aggs: Vec::new(),
                rows_scanned: 0,
                rollup_rows: 0,
                expired: Vec::new(),
            }
        } else {
            self.query(&SearchRequest {
                rollup: None,
                size: 0,
                from: 0,
                ..req.clone()
            })?
        };
        let hits = found
            .docs
            .into_iter()
            .zip(keys)
            .skip(req.from)
            .map(|(doc, (ts_millis, id))| Hit { id, ts_millis, doc })
            .collect();
        Ok(SearchResult {
            total: found.total,
            hits,
            aggs: aggs.aggs,
            rows_scanned: aggs.rows_scanned,
            rollup_rows: aggs.rollup_rows,
            expired: found.expired,
        })
    }
}

/// A callback given each raw row read (and where it is stored).
pub(crate) type RowSink<'a> =
    &'a mut dyn FnMut(Point, Option<(&tidemark_segment::Segment, tidemark_segment::RowId)>);

/// Sets a stored row's extra fields (keyword and boolean extras) on its point.
fn load_extras(
    p: &mut Point,
    stored: Option<(&tidemark_segment::Segment, tidemark_segment::RowId)>,
) -> Result<()> {
    if let Some((segment, row)) = stored
        && !segment.extra_columns().is_empty()
    {
        crate::extras::set_extras(p, segment.row_extras(row)?);
    }
    Ok(())
}

/// When rollups can answer a request: no hits wanted, a filter on dimensions and the
/// time range only, and aggregations that are all date histograms of min, max, avg, sum
/// and value_count of metrics. Returns the span every rollup bucket must fit in whole
/// (so that it lies inside one histogram bucket): the gcd of the fixed intervals, a day
/// for calendar days, weeks, months, quarters and years (they start at midnight UTC).
fn rollup_alignment(req: &SearchRequest, filter: &Compiled, m: &Mapping) -> Option<i64> {
    if req.raw_only || req.size > 0 || req.aggs.is_empty() || !filter.on_time_and_dims() {
        return None;
    }
    let mut widths = Vec::with_capacity(req.aggs.len());
    for (_, a) in &req.aggs {
        let Agg::DateHistogram { interval, aggs, .. } = a else {
            return None;
        };
        let w = match interval {
            Interval::Fixed(w) => *w,
            Interval::Calendar(CalendarUnit::Minute) => 60_000,
            Interval::Calendar(CalendarUnit::Hour) => 3_600_000,
            Interval::Calendar(_) => 86_400_000,
        };
        for (_, sub) in aggs {
            let Agg::Metric { kind, field } = sub else {
                return None;
            };
            let metric = matches!(
                m.field(field).map(|f| f.role),
                Some(FieldRole::Metric(_) | FieldRole::Value)
            );
            let kind_ok = matches!(
                kind,
                MetricKind::Min
                    | MetricKind::Max
                    | MetricKind::Avg
                    | MetricKind::Sum
                    | MetricKind::ValueCount
            );
            if !metric || !kind_ok {
                return None;
            }
        }
        widths.push(w);
    }
    rollup_step(widths)
}
