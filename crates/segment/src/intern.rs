//! [`DimsInterner`]: one copy of each series' dimensions across segments.

use std::collections::HashMap;
use std::sync::Arc;

use tidemark_tsid::Tsid;

use crate::hash::FoldBuildHasher;
use crate::point::Dim;

/// A series' dimensions, shared.
pub type SharedDims = Arc<[(String, Dim)]>;

/// Shares equal dimension sets between the segments opened through it (and any other
/// holder), keyed by tsid: a store's many segments then hold each series' dimensions
/// once, so memory grows with the series, not with series × segments.
#[derive(Debug, Default)]
pub struct DimsInterner {
    map: HashMap<Tsid, SharedDims, FoldBuildHasher>,
}

impl DimsInterner {
    /// An empty interner.
    pub fn new() -> DimsInterner {
        DimsInterner::default()
    }

    /// The shared copy of `dims` for `tsid`: the one already held when equal, else
    /// `dims` (which then becomes the one held).
    pub fn intern(&mut self, tsid: Tsid, dims: Vec<(String, Dim)>) -> SharedDims {
        if let Some(known) = self.map.get(&tsid) {
            if **known == *dims {
                return Arc::clone(known);
            }
        }
        let shared: SharedDims = dims.into();
        self.map.insert(tsid, Arc::clone(&shared));
        shared
    }

    /// Forgets the dimension sets nobody else holds any more (segments merged away).
    pub fn prune(&mut self) {
        self.map.retain(|_, d| Arc::strong_count(d) > 1);
    }

    /// Dimension sets held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}
