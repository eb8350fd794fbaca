//! The aggregation model a request names and an answer carries: nested
//! `date_histogram` and `terms` buckets with metric leaves.

use serde_json::Value;

use super::Interval;

/// A metric aggregation kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Smallest value.
    Min,
    /// Largest value.
    Max,
    /// Mean.
    Avg,
    /// Sum.
    Sum,
    /// Number of values.
    ValueCount,
    /// Number of distinct values (exact).
    Cardinality,
}

/// An aggregation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Agg {
    /// Buckets by timestamp.
    DateHistogram {
        /// The bucket width.
        interval: Interval,
        /// Buckets with fewer documents are left out; 0 fills the gaps (and the
        /// `extended_bounds`) with empty buckets.
        min_doc_count: u64,
        /// Buckets to show at least from `min` to `max` (with `min_doc_count` 0).
        extended_bounds: Option<(i64, i64)>,
        /// Sub-aggregations per bucket.
        aggs: Vec<(String, Agg)>,
    },
    /// Buckets by the value of a dimension, largest first.
    Terms {
        /// The dimension.
        field: String,
        /// At most this many buckets.
        size: usize,
        /// Buckets with fewer documents are left out.
        min_doc_count: u64,
        /// Sub-aggregations per bucket.
        aggs: Vec<(String, Agg)>,
    },
    /// One value over the documents.
    Metric {
        /// What to compute.
        kind: MetricKind,
        /// The metric or numeric field (any field for `cardinality` and `value_count`).
        field: String,
    },
}

/// A bucket key.
#[derive(Debug, Clone, PartialEq)]
pub enum BucketKey {
    /// A date-histogram bucket start (epoch milliseconds).
    Time(i64),
    /// A dimension value, as JSON (string, number or boolean).
    Term(Value),
}

/// One bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    /// The key.
    pub key: BucketKey,
    /// Documents in the bucket.
    pub doc_count: u64,
    /// The sub-aggregations, in request order.
    pub aggs: Vec<(String, AggOutput)>,
}

/// The result of an [`Agg`].
#[derive(Debug, Clone, PartialEq)]
pub enum AggOutput {
    /// Buckets (date histogram, terms), with the documents in buckets left out by `size`.
    Buckets {
        /// The buckets.
        buckets: Vec<Bucket>,
        /// Documents in terms buckets beyond `size`.
        sum_other_doc_count: u64,
    },
    /// A metric value; `None` for min/max/avg over no value.
    Value(Option<f64>),
}
