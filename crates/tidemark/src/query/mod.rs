//! General queries: hits sorted by timestamp with paging, and nested bucket
//! aggregations (date histograms with fixed or calendar intervals, terms on a
//! dimension) with metric leaves (min, max, avg, sum, value_count, cardinality), over
//! the one filter model of [`crate::filter`]. Protocol layers (the HTTP server's query
//! DSL, the CLI's `search`) translate into these types.
//!
//! One concept a file: [`interval`] (date-histogram intervals), [`agg`] (the
//! aggregation model), `acc` (running aggregations and the bucket budget) and `run`
//! (how [`Index::query`](crate::Index::query) reads). This file holds the request and
//! its answer.

mod acc;
mod agg;
mod interval;
mod run;

pub use agg::{Agg, AggOutput, Bucket, BucketKey, MetricKind};
pub use interval::{CalendarUnit, Interval};

use serde_json::Value;

use crate::filter::Filter;
use crate::search::Order;

/// The most buckets an aggregation answer may hold unless a request sets its own
/// ([`SearchRequest::max_buckets`]): Elasticsearch's `search.max_buckets` default.
///
/// Every bucket of the answer counts, at every level of nesting: the empty buckets a
/// `date_histogram` with `min_doc_count` 0 fills in (between the data and to its
/// `extended_bounds`), the buckets with enough documents otherwise, and the kept
/// `terms` buckets (at most `size`). A request whose answer would hold more fails with
/// [`Error::TooManyBuckets`] before those buckets are built; the width of a filled
/// range comes from the arithmetic (range / interval), so a doomed answer costs no
/// memory. The answer is never cut short.
pub const DEFAULT_MAX_BUCKETS: u64 = 65_536;

/// A query: filter, paging and sort of hits, aggregations.
///
/// On a time-partitioned index with rollups, a request for aggregations only (`size`
/// 0) of date histograms with `min`, `max`, `avg`, `sum` and `value_count` of metrics,
/// filtered on dimensions and time, reads the coarsest rollup whose resolution fits
/// every histogram bucket where one exists (sealed partitions, buckets the range covers
/// whole) and raw rows elsewhere: doc counts, counts, minima and maxima equal the raw
/// answer, sums within floating-point rounding (set `raw_only` to compare).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchRequest {
    /// Which documents.
    pub filter: Filter,
    /// Hits to return (0: count and aggregate only).
    pub size: usize,
    /// Hits to skip.
    pub from: usize,
    /// Hit order by timestamp (then `_id`).
    pub order: Order,
    /// Aggregations, in request order.
    pub aggs: Vec<(String, Agg)>,
    /// Hits are the rollup documents of this resolution (milliseconds; see
    /// [`Index::search_rollup`]) instead of raw documents; `total` counts them. The
    /// filter may then look at dimensions and the time range only.
    pub rollup: Option<i64>,
    /// Aggregate raw rows only, never rollups (to compare).
    pub raw_only: bool,
    /// The most buckets the aggregations' answer may hold (see [`DEFAULT_MAX_BUCKETS`],
    /// the default); more is [`Error::TooManyBuckets`], never a shortened answer.
    pub max_buckets: u64,
    /// Hits start after this position in the hit order (Elasticsearch's
    /// `search_after`); `total` and the aggregations still cover every match.
    pub search_after: Option<SearchAfter>,
}

/// A position in the hit order, `(timestamp, _id)` ascending or descending: the hits
/// of a [`SearchRequest`] with `search_after` are those strictly after it. With `id`
/// `None` the position is before every hit at `ts_millis`, so all of them come after
/// it. Since `(timestamp, _id)` is unique, paging with the last hit of each page as the
/// next cursor neither skips nor repeats a hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchAfter {
    /// The timestamp of the position.
    pub ts_millis: i64,
    /// The `_id` at that timestamp (`None`: before every hit there).
    pub id: Option<String>,
}

impl SearchAfter {
    /// Whether a hit at `(ts, id)` comes after this position in `order`.
    pub fn admits(&self, order: Order, ts: i64, id: &str) -> bool {
        match order {
            Order::Asc => {
                ts > self.ts_millis
                    || (ts == self.ts_millis && self.id.as_deref().is_none_or(|c| id > c))
            }
            Order::Desc => {
                ts < self.ts_millis
                    || (ts == self.ts_millis && self.id.as_deref().is_none_or(|c| id < c))
            }
        }
    }
}

impl Default for SearchRequest {
    fn default() -> Self {
        SearchRequest {
            filter: Filter::All,
            size: 10,
            from: 0,
            order: Order::Asc,
            aggs: Vec::new(),
            rollup: None,
            raw_only: false,
            max_buckets: DEFAULT_MAX_BUCKETS,
            search_after: None,
        }
    }
}

/// One hit.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// The `_id`.
    pub id: String,
    /// The timestamp.
    pub ts_millis: i64,
    /// The document, rebuilt as by [`Index::get`].
    pub doc: Value,
}

/// The answer to a [`SearchRequest`].
#[derive(Debug, Clone, PartialEq)]
pub struct SearchResult {
    /// Matching documents (exact).
    pub total: u64,
    /// The requested page of hits.
    pub hits: Vec<Hit>,
    /// The aggregations, in request order.
    pub aggs: Vec<(String, AggOutput)>,
    /// Raw rows read: those of the series the filter's dimension terms select through
    /// each segment's dimension index (all rows in the time range when it has none).
    pub rows_scanned: u64,
    /// Rollup rows read (aggregations answered from rollups).
    pub rollup_rows: u64,
    /// Time ranges `[from, to]` (inclusive) the answer leaves out: their raw rows were
    /// dropped by retention and no kept rollup answers there.
    pub expired: Vec<(i64, i64)>,
}
