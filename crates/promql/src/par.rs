//! Work split over threads: groups of series, each cut into one contiguous chunk per
//! worker thread, mapped on the workers while the calling thread consumes the groups'
//! results in order, so a parallel evaluation gives exactly what the sequential one
//! gives.

use crate::error::{Error, Result};

/// Fewest items a thread is given: below this a batch runs on the calling thread.
const MIN_CHUNK: usize = 8;

/// The threads a query uses by default: every core.
pub(crate) fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Groups a worker may run ahead of the consumer in [`pipeline`].
const AHEAD: usize = 2;

/// Maps `groups` (ranges of `items`) on up to `threads` worker threads while the
/// calling thread consumes the results group by group, in order: worker `w` maps the
/// `w`-th contiguous chunk of every group (`map` gets the group's index and the chunk), at most [`AHEAD`] groups ahead of the
/// consumer (so a few groups' results are held, not all of them), and `consume` gets
/// each group's results in item order. The consumer's work (folding the results in
/// order) overlaps the workers' (reading the next groups). The first error, of a
/// worker or of `consume`, stops the rest and is returned; a worker's panic is an
/// error.
pub(crate) fn pipeline<I: Sync, T: Send>(
    items: &[I],
    groups: &[std::ops::Range<usize>],
    threads: usize,
    map: impl Fn(usize, &[I]) -> Result<Vec<T>> + Sync,
    mut consume: impl FnMut(Vec<T>) -> Result<()>,
) -> Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Condvar, Mutex, mpsc};
    let group = |g: &std::ops::Range<usize>| items.get(g.clone()).unwrap_or(&[]);
    let threads = threads.max(1);
    if threads == 1 || items.len() < MIN_CHUNK * 2 {
        for (gi, g) in groups.iter().enumerate() {
            consume(map(gi, group(g))?)?;
        }
        return Ok(());
    }
    let stop = AtomicBool::new(false);
    // Groups consumed so far, and the condition workers wait on to run ahead.
    let consumed = (Mutex::new(0usize), Condvar::new());
    let (tx, rx) = mpsc::channel::<(usize, usize, Result<Vec<T>>)>();
    std::thread::scope(|s| {
        let (stop, consumed, map, group) = (&stop, &consumed, &map, &group);
        let mut handles = Vec::with_capacity(threads);
        for w in 0..threads {
            let tx = tx.clone();
            handles.push(s.spawn(move || {
                for (gi, g) in groups.iter().enumerate() {
                    {
                        let (lock, cv) = consumed;
                        let mut done = lock.lock().unwrap_or_else(|p| p.into_inner());
                        while gi >= *done + AHEAD && !stop.load(Ordering::Relaxed) {
                            done = cv.wait(done).unwrap_or_else(|p| p.into_inner());
                        }
                    }
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let items = group(g);
                    let chunk = items.len().div_ceil(threads).max(1);
                    let part = items.chunks(chunk).nth(w).unwrap_or(&[]);
                    let r =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| map(gi, part)))
                            .unwrap_or_else(|_| {
                                Err(Error::Execution("a query thread panicked".into()))
                            });
                    let failed = r.is_err();
                    if tx.send((gi, w, r)).is_err() || failed {
                        return;
                    }
                }
            }));
        }
        drop(tx);
        let mut early: std::collections::HashMap<(usize, usize), Vec<T>> =
            std::collections::HashMap::new();
        let mut result = Ok(());
        'groups: for gi in 0..groups.len() {
            let mut parts: Vec<Option<Vec<T>>> = (0..threads).map(|_| None).collect();
            for (w, slot) in parts.iter_mut().enumerate() {
                if let Some(v) = early.remove(&(gi, w)) {
                    *slot = Some(v);
                }
            }
            while parts.iter().any(Option::is_none) {
                match rx.recv() {
                    Ok((g, w, Ok(v))) if g == gi => {
                        if let Some(slot) = parts.get_mut(w) {
                            *slot = Some(v);
                        }
                    }
                    Ok((g, w, Ok(v))) => {
                        early.insert((g, w), v);
                    }
                    Ok((_, _, Err(e))) => {
                        result = Err(e);
                        break 'groups;
                    }
                    Err(_) => {
                        result = Err(Error::Execution("a query thread stopped".into()));
                        break 'groups;
                    }
                }
            }
            // A panic while consuming must still stop the workers (they may be waiting
            // for this group to be consumed): it becomes an error here.
            let batch: Vec<T> = parts.into_iter().flatten().flatten().collect();
            let consumed_ok =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| consume(batch)))
                    .unwrap_or_else(|_| Err(Error::Execution("a query step panicked".into())));
            if let Err(e) = consumed_ok {
                result = Err(e);
                break;
            }
            let (lock, cv) = consumed;
            *lock.lock().unwrap_or_else(|p| p.into_inner()) += 1;
            cv.notify_all();
        }
        stop.store(true, Ordering::Relaxed);
        consumed.1.notify_all();
        drop(rx);
        for h in handles {
            if h.join().is_err() && result.is_ok() {
                result = Err(Error::Execution("a query thread panicked".into()));
            }
        }
        result
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipelined_groups_arrive_whole_and_in_order() {
        let items: Vec<u32> = (0..5000).collect();
        let groups: Vec<std::ops::Range<usize>> = (0..5000)
            .step_by(97)
            .map(|a| a..(a + 97).min(5000))
            .collect();
        for threads in [1, 2, 3] {
            let mut seen = Vec::new();
            pipeline(
                &items,
                &groups,
                threads,
                |_, c| Ok(c.to_vec()),
                |batch| {
                    seen.push(batch);
                    Ok(())
                },
            )
            .unwrap_or_default();
            assert_eq!(seen.len(), groups.len());
            for (g, batch) in groups.iter().zip(&seen) {
                assert_eq!(batch, &items[g.clone()]);
            }
        }
        // A worker's error and the consumer's error both stop the pipeline.
        let err = pipeline(
            &items,
            &groups,
            2,
            |_, c| {
                if c.contains(&2500) {
                    Err(Error::Execution("worker".into()))
                } else {
                    Ok(c.to_vec())
                }
            },
            |_| Ok(()),
        );
        assert!(matches!(err, Err(Error::Execution(m)) if m == "worker"));
        let mut n = 0;
        let err = pipeline(
            &items,
            &groups,
            2,
            |_, c| Ok(c.to_vec()),
            |_| {
                n += 1;
                if n == 3 {
                    Err(Error::Execution("consumer".into()))
                } else {
                    Ok(())
                }
            },
        );
        assert!(matches!(err, Err(Error::Execution(m)) if m == "consumer"));
        assert_eq!(n, 3);
        // A panic in the consumer or in a worker is an error, not a hang.
        let err = pipeline(
            &items,
            &groups,
            2,
            |_, c| Ok(c.to_vec()),
            |_| -> Result<()> { panic!("consumer panics") },
        );
        assert!(matches!(err, Err(Error::Execution(_))));
        let err = pipeline(
            &items,
            &groups,
            2,
            |_, c: &[u32]| -> Result<Vec<u32>> {
                if c.contains(&4000) {
                    panic!("worker panics")
                } else {
                    Ok(c.to_vec())
                }
            },
            |_| Ok(()),
        );
        assert!(matches!(err, Err(Error::Execution(_))));
    }
}
