//! Work split over threads: a batch of series cut into one contiguous chunk per thread,
//! each chunk mapped on its own (scoped) thread, the results put back in the batch's
//! order, so a parallel evaluation gives exactly what the sequential one gives.

use crate::error::{Error, Result};

/// Fewest items a thread is given: below this a batch runs on the calling thread.
const MIN_CHUNK: usize = 8;

/// The threads a query uses by default: every core.
pub(crate) fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Maps `items` by chunks on up to `threads` threads: `f` gets one contiguous chunk and
/// returns one result per item; the results come back in the order of `items`. The
/// first error (in item order) is returned.
pub(crate) fn map_chunks<I: Sync, T: Send>(
    items: &[I],
    threads: usize,
    f: impl Fn(&[I]) -> Result<Vec<T>> + Sync,
) -> Result<Vec<T>> {
    let threads = threads.clamp(1, (items.len() / MIN_CHUNK).max(1));
    if threads == 1 {
        return f(items);
    }
    let chunk = items.len().div_ceil(threads);
    let parts: Vec<Result<Vec<T>>> = std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = items.chunks(chunk).map(|c| s.spawn(move || f(c))).collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Execution("a query thread panicked".into())))
            })
            .collect()
    });
    let mut out = Vec::with_capacity(items.len());
    for p in parts {
        out.extend(p?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_the_order_of_the_items_and_the_first_error() {
        let items: Vec<u32> = (0..1000).collect();
        for threads in [1, 2, 3, 7] {
            let out = map_chunks(&items, threads, |c| Ok(c.iter().map(|x| x * 2).collect()))
                .unwrap_or_default();
            assert_eq!(out, items.iter().map(|x| x * 2).collect::<Vec<_>>());
        }
        let err = map_chunks(&items, 4, |c| {
            if c.contains(&600) {
                Err(Error::Execution(format!("at {}", c[0])))
            } else {
                Ok(c.to_vec())
            }
        });
        assert!(matches!(err, Err(Error::Execution(m)) if m == "at 500"));
    }
}
