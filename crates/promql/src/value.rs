//! Query results as the Prometheus HTTP API knows them.

use crate::storage::Labels;

/// One sample of an instant vector.
#[derive(Debug, Clone, PartialEq)]
pub struct InstantSample {
    /// The series labels.
    pub labels: Labels,
    /// Evaluation timestamp, epoch milliseconds.
    pub t_ms: i64,
    /// The value.
    pub v: f64,
}

/// One series of a range vector (matrix).
#[derive(Debug, Clone, PartialEq)]
pub struct RangeSeries {
    /// The series labels.
    pub labels: Labels,
    /// `(timestamp ms, value)`, oldest first.
    pub points: Vec<(i64, f64)>,
}

/// The value of a query: the four result types of the Prometheus API.
#[derive(Debug, Clone, PartialEq)]
pub enum QueryValue {
    /// A scalar at a time.
    Scalar {
        /// Evaluation timestamp, epoch milliseconds.
        t_ms: i64,
        /// The value.
        v: f64,
    },
    /// A string at a time.
    String {
        /// Evaluation timestamp, epoch milliseconds.
        t_ms: i64,
        /// The string.
        s: String,
    },
    /// An instant vector.
    Vector(Vec<InstantSample>),
    /// A range vector: one series per label set.
    Matrix(Vec<RangeSeries>),
}

impl QueryValue {
    /// The API's `resultType`: `scalar`, `string`, `vector` or `matrix`.
    pub fn result_type(&self) -> &'static str {
        match self {
            QueryValue::Scalar { .. } => "scalar",
            QueryValue::String { .. } => "string",
            QueryValue::Vector(_) => "vector",
            QueryValue::Matrix(_) => "matrix",
        }
    }
}
