//! Query plans: a time range cut into pieces read from raw rows or from a sealed
//! partition's rollup (see [`PartitionSearch::plan`]).

use super::manifest::PartState;
use super::{PartitionSearch, RollupSlot};

/// A time slice of a query plan: read raw rows, or a partition's rollup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece {
    /// Raw rows with timestamps in `[from, to]`.
    Raw {
        /// First millisecond.
        from: i64,
        /// Last millisecond (inclusive).
        to: i64,
    },
    /// The rollup at `resolution_ms` of the partition starting at `partition`, buckets
    /// starting in `[from, to]`.
    Rollup {
        /// The partition's start.
        partition: i64,
        /// The resolution.
        resolution_ms: i64,
        /// First bucket start.
        from: i64,
        /// Last millisecond covered (inclusive).
        to: i64,
    },
    /// `[from, to]` lies in partitions whose raw rows retention dropped, and no kept
    /// rollup answers it (the interval is not a multiple of one, or a bucket is cut by
    /// the range): nothing there can be read.
    Expired {
        /// First millisecond.
        from: i64,
        /// Last millisecond (inclusive).
        to: i64,
    },
}

impl PartitionSearch<'_> {
    /// Plans a read of the range for buckets of `interval_ms` (0: raw rows only), the one
    /// rollup planner of the store: each sealed partition
    /// reads its coarsest rollup whose resolution divides the interval, over the buckets
    /// the range covers whole; everything else (active partitions, edges, no dividing
    /// rollup) reads raw rows. A partition past the raw retention reads its kept rollups
    /// the same way, and what they cannot answer is a [`Piece::Expired`]; an attached
    /// partition reads see (see
    /// [`PartitionedEngine::attach_read_only`](super::PartitionedEngine::attach_read_only)) plans as a
    /// sealed one. Pieces come in time order.
    pub fn plan(&self, interval_ms: i64) -> Vec<Piece> {
        let (from, to) = (self.from, self.to);
        let mut out = Vec::new();
        if from > to {
            return out;
        }
        let raw = |out: &mut Vec<Piece>, a: i64, b: i64| {
            if a > b {
                return;
            }
            match out.last_mut() {
                Some(Piece::Raw { to, .. }) if to.checked_add(1) == Some(a) => *to = b,
                _ => out.push(Piece::Raw { from: a, to: b }),
            }
        };
        let mut cursor = from;
        // Live and expired partitions, in time order: (start, end, kept rollups or the
        // sealed ones, whether raw rows remain).
        let mut spans: Vec<(i64, i64, &[RollupSlot], bool)> = self
            .store
            .parts
            .values()
            .chain(self.store.readable_attached())
            .map(|p| {
                let rollups: &[RollupSlot] = if p.state == PartState::Sealed {
                    &p.rollups
                } else {
                    &[]
                };
                (p.start, p.end, rollups, true)
            })
            .chain(
                self.store
                    .expired
                    .values()
                    .filter(|p| self.store.readable_attached_at(p.start).is_none())
                    .map(|p| (p.start, p.end, p.rollups.as_slice(), false)),
            )
            .collect();
        spans.sort_by_key(|s| s.0);
        for (start, end, rollups, has_raw) in spans {
            if end <= from || start > to {
                continue;
            }
            let lo = from.max(start);
            let hi = to.min(end.saturating_sub(1));
            // Time between partitions holds no rows: planned raw (empty) to stay whole.
            raw(&mut out, cursor, lo.saturating_sub(1));
            cursor = hi.saturating_add(1);
            // What reads what a rollup cannot: raw rows, or nothing (expired).
            let rest = |out: &mut Vec<Piece>, a: i64, b: i64| {
                if has_raw {
                    raw(out, a, b);
                } else if a <= b {
                    match out.last_mut() {
                        Some(Piece::Expired { to, .. }) if to.checked_add(1) == Some(a) => *to = b,
                        _ => out.push(Piece::Expired { from: a, to: b }),
                    }
                }
            };
            let res = rollups
                .iter()
                .map(|(r, _)| *r)
                .filter(|r| interval_ms > 0 && interval_ms % r == 0)
                .max();
            match res {
                Some(r) => {
                    let a = lo.div_euclid(r) * r + if lo.rem_euclid(r) == 0 { 0 } else { r };
                    let b = (hi.saturating_add(1)).div_euclid(r) * r; // exclusive
                    if a < b {
                        rest(&mut out, lo, a - 1);
                        out.push(Piece::Rollup {
                            partition: start,
                            resolution_ms: r,
                            from: a,
                            to: b - 1,
                        });
                        rest(&mut out, b, hi);
                    } else {
                        rest(&mut out, lo, hi);
                    }
                }
                None => rest(&mut out, lo, hi),
            }
        }
        raw(&mut out, cursor, to);
        out
    }
}
