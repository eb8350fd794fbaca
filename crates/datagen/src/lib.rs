//! Deterministic dataset generators.
#![deny(missing_docs)]
#![forbid(unsafe_code)]
