#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod api;
mod error;
mod eval;
mod functions;
mod index;
pub mod limits;
mod meta;
mod par;
mod storage;
mod value;
mod windows;

pub use error::{Error, Result};
pub use eval::{METRIC_NAME, QueryOptions, instant_query, parse, range_query};
pub use index::{GROUP_POINTS, GROUP_SERIES, IndexStorage, ReadStats, label_safe};
pub use limits::{MAX_NESTING, MAX_OPERATORS, MAX_QUERY_BYTES};
pub use meta::{label_names, label_values, selector_matchers, series};
pub use storage::{
    BATCH_SERIES, Labels, MatchOp, Matcher, MemStorage, Prepare, STALE_NAN_BITS, Series, Storage,
    Window, WindowAgg, WindowRequest, WindowSeries, is_stale_nan, matches_all, window_span,
};
pub use value::{InstantSample, QueryValue, RangeSeries};

/// The PromQL parser this crate evaluates (`promql-parser`).
pub use promql_parser;
