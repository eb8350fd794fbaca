//! The one rule only version-1 files follow: the series table stores each series' time
//! span (max - min timestamp) as a plain varint. Version 2 on stores it as the zigzag
//! difference from the previous series' span (`crate::format::series`).

use crate::error::Result;
use crate::le::Reader;

/// Reads a version-1 series span.
pub(crate) fn read_span(r: &mut Reader<'_>) -> Result<u64> {
    r.varint()
}
