//! One buffer budget for the whole store: partitions share `refresh_rows`.

use super::PartitionedEngine;
use crate::error::Result;

impl PartitionedEngine {
    /// One refresh budget for all partitions, not one per partition: while more than
    /// `refresh_rows` points are buffered across them, the partition buffering the most is
    /// refreshed, and a partition other than the newest gives its buffer's memory back.
    /// (Each partition's engine refreshes itself at `refresh_rows` too, but seven
    /// partitions each short of it held seven buffers' worth, and kept their capacity.)
    pub(super) fn keep_buffer_budget(&mut self) -> Result<()> {
        // With background refreshes on, the refresh thread keeps the budget; this is
        // the bound on memory when it falls behind.
        let budget = self.inline_refresh_rows();
        let newest = self.parts.keys().next_back().copied();
        while self.unfrozen_rows() > budget {
            let Some(start) = self
                .parts
                .iter()
                .filter(|(_, p)| p.engine.unfrozen_rows() > 0)
                .max_by_key(|(_, p)| p.engine.unfrozen_rows())
                .map(|(s, _)| *s)
            else {
                break;
            };
            let Some(part) = self.parts.get_mut(&start) else {
                break;
            };
            part.engine.refresh()?;
            if Some(start) != newest {
                part.engine.release_buffer();
            }
        }
        Ok(())
    }
}
