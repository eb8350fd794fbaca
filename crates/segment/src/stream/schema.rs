//! [`StreamSchema`]: the columns a streamed segment declares before its first row, and
//! the span shift of a column's blocks.

use crate::error::{Error, Result};
use crate::format::meta::{ColumnInfo, ExtraInfo};
use crate::format::{MAX_BLOCK_ROWS, MAX_COLUMNS};
use crate::validate::MAX_NAME_LEN;

/// The columns of a streamed segment, declared before the first row: metric columns and
/// extra columns, each sorted by name (names unique across both), with the span shift of
/// their blocks (a block of a column with shift `s` covers `block_rows << s` rows; see
/// [`span_shift`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamSchema {
    /// Metric columns, by name.
    pub columns: Vec<ColumnInfo>,
    /// Extra (keyword/boolean) columns, by name.
    pub extras: Vec<ExtraInfo>,
}

impl StreamSchema {
    pub(super) fn check(&self, block_rows: u32) -> Result<()> {
        let max_shift = max_shift(block_rows);
        let all = self.columns.len() + self.extras.len();
        if all > MAX_COLUMNS as usize {
            return Err(Error::TooLarge {
                what: "columns",
                found: all as u64,
                max: u64::from(MAX_COLUMNS),
            });
        }
        let bad = |detail: String| Error::InvalidOption {
            name: "schema",
            detail,
        };
        for w in self.columns.windows(2) {
            if w[0].name >= w[1].name {
                return Err(bad(format!(
                    "metric columns not sorted and unique: `{}` then `{}`",
                    w[0].name, w[1].name
                )));
            }
        }
        for w in self.extras.windows(2) {
            if w[0].name >= w[1].name {
                return Err(bad(format!(
                    "extra columns not sorted and unique: `{}` then `{}`",
                    w[0].name, w[1].name
                )));
            }
        }
        for e in &self.extras {
            if self
                .columns
                .binary_search_by(|c| c.name.as_str().cmp(&e.name))
                .is_ok()
            {
                return Err(bad(format!("`{}` is both a metric and an extra", e.name)));
            }
        }
        let shifts = self
            .columns
            .iter()
            .map(|c| (&c.name, c.span_shift))
            .chain(self.extras.iter().map(|e| (&e.name, e.span_shift)));
        for (name, shift) in shifts {
            if u32::from(shift) > max_shift {
                return Err(bad(format!(
                    "column `{name}`: span shift {shift}, at most {max_shift} for blocks of \
                     {block_rows} rows"
                )));
            }
            if name.len() > MAX_NAME_LEN {
                return Err(Error::TooLarge {
                    what: "name bytes",
                    found: name.len() as u64,
                    max: MAX_NAME_LEN as u64,
                });
            }
        }
        Ok(())
    }
}

fn max_shift(block_rows: u32) -> u32 {
    (MAX_BLOCK_ROWS / block_rows.max(1))
        .checked_ilog2()
        .unwrap_or(0)
}

/// The span shift the writers give a column present in `present` of `rows` rows: a column
/// present in 1/k of the rows gets blocks of `block_rows << floor(log2 k)` rows (at most
/// [`MAX_BLOCK_ROWS`]), so that each of its blocks holds about `block_rows` values.
pub fn span_shift(rows: u64, present: u64, block_rows: u32) -> u8 {
    let k = rows / present.max(1);
    k.max(1).ilog2().min(max_shift(block_rows)) as u8
}
