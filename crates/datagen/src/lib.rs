//! Deterministic time-series dataset generators, shared by tests, benches and
//! `cargo xtask gen`.
//!
//! Four shapes (see the README for the exact fields):
//!
//! - [`Dataset::k8s`]: Kubernetes pod metrics, ≈2,000 pod series, a document every 10 s
//!   per pod carrying 8 metrics (CPU nanosecond counters, slowly drifting memory gauges,
//!   network byte counters, restarts).
//! - [`Dataset::otel`]: OpenTelemetry metrics, ≥20,000 series, one metric value per
//!   document every 60 s, mixed gauges and monotonic sums.
//! - [`Dataset::events`]: security and log events with no natural key (message text,
//!   source ip, user, action, outcome), 100 hosts, 1,000 events per second with
//!   second-precision timestamps, for the events mode (content fingerprints).
//! - [`Dataset::host`]: host and IoT sensor metrics, 1,000 hosts, a document every 10 s
//!   carrying 5 decimal gauges (1 to 3 decimals, as agents print them) and 3 integer
//!   counters: the shape of decimal-aware float encodings (ALP).
//!
//! Everything is a pure function of the [`Options`] (seed included): the same options
//! give the same documents in the same order on every machine. Duplicates (retries) and
//! late arrivals are injected on request, and [`Dataset::unique_docs`] says exactly how
//! many distinct documents there are.
//!
//! ```
//! use tidemark_datagen::{Dataset, Options};
//!
//! let ds = Dataset::k8s(Options::default().points(1_000).dup_rate(0.1));
//! let docs: Vec<serde_json::Value> = ds.docs().collect();
//! assert_eq!(docs.len() as u64, ds.total_docs());
//! assert_eq!(ds.unique_docs(), 1_000);
//! assert_eq!(ds.schema().metrics.len(), 8);
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod dataset;
pub mod exposition;
mod json;
mod rng;

pub use dataset::{
    Dataset, DatasetKind, Dim, Field, MetricKind, MetricVal, Options, Record, Records, Schema,
};
pub use json::write_json;
