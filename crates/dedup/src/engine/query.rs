//! Read-only queries over the engine's live data (segments, scans), kept apart from the
//! write path in `engine.rs`.

use std::path::Path;

use tidemark_segment::Segment;

use super::Engine;

impl Engine {
    /// The live segments, oldest first, with their file paths and deleted-row counts.
    pub fn segments(&self) -> Vec<(&Path, &Segment, u64)> {
        self.slots
            .iter()
            .map(|s| (s.path.as_path(), s.segment.as_ref(), s.tombstones.len()))
            .collect()
    }
}
