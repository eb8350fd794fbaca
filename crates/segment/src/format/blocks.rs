//! Column blocks: each block is `codec u8 | body` (`crate::codec`), its body a presence
//! header (metric and extra columns) and the values in one of the family's encodings.
//! The writer tries each candidate encoding and keeps the smallest compressed block
//! ([`encode`]); the reader checks a block's bounds and CRC against its directory entry
//! before decoding it into one slot per row ([`decode`]).

mod decode;
mod encode;

pub(crate) use decode::{
    BlockAt, DecodedBlock, FloatBlock, extra_values, metric_values, metric_values_f64,
    series_timestamps, timestamps,
};
pub(crate) use encode::{
    best, extra_body, metric_candidates, presence_header, timestamp_candidates,
};
