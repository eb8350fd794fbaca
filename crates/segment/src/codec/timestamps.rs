//! Timestamp blocks: per series run, delta-of-delta or a per-run grid.

use crate::error::{Error, Result};
use crate::le::{Reader, put_zigzag};

/// Timestamps: per series run, first value as a zigzag delta from the previous run's
/// first value, then delta, then deltas of deltas.
pub const ENC_TS_DOD: u8 = 1;

/// Timestamps: per series run, first value as a zigzag delta from the previous run's
/// first value, then the run's most common step `d`, then each value's zigzag residual
/// from a grid `anchor + k·d`; a residual larger than |d|/2 re-anchors the grid there.
pub const ENC_TS_GRID: u8 = 14;

/// Encodes timestamps of one block, split into runs (one per series part).
pub fn encode_timestamps(ts: &[i64], runs: &[usize], out: &mut Vec<u8>) {
    out.push(ENC_TS_DOD);
    let mut prev_first = 0i64;
    let mut at = 0usize;
    for &len in runs {
        let run = ts.get(at..at + len).unwrap_or(&[]);
        at += len;
        let mut prev = 0i64;
        let mut prev_delta = 0i64;
        for (i, &t) in run.iter().enumerate() {
            match i {
                0 => {
                    put_zigzag(out, t.wrapping_sub(prev_first));
                    prev_first = t;
                }
                1 => {
                    prev_delta = t.wrapping_sub(prev);
                    put_zigzag(out, prev_delta);
                }
                _ => {
                    let delta = t.wrapping_sub(prev);
                    put_zigzag(out, delta.wrapping_sub(prev_delta));
                    prev_delta = delta;
                }
            }
            prev = t;
        }
    }
}

/// The step most common between a run's neighbours, the smallest of those equally
/// common (0 for a run of one).
fn most_common_delta(run: &[i64]) -> i64 {
    // A steady series (the usual case) has one step: no counting, no allocation.
    let mut steps = run.windows(2).map(|w| w[1].wrapping_sub(w[0]));
    let Some(first) = steps.next() else {
        return 0;
    };
    if steps.all(|d| d == first) {
        return first;
    }
    let mut deltas: Vec<i64> = run.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
    deltas.sort_unstable();
    let mut best = (0usize, deltas.first().copied().unwrap_or(0));
    let mut i = 0usize;
    while let Some(&d) = deltas.get(i) {
        let n = deltas
            .get(i..)
            .map_or(0, |rest| rest.iter().take_while(|&&x| x == d).count());
        if n > best.0 {
            best = (n, d);
        }
        i += n.max(1);
    }
    best.1
}

/// Encodes timestamps of one block on a per-run grid (see [`ENC_TS_GRID`]).
pub fn encode_timestamps_grid(ts: &[i64], runs: &[usize], out: &mut Vec<u8>) {
    out.push(ENC_TS_GRID);
    let mut prev_first = 0i64;
    let mut at = 0usize;
    for &len in runs {
        let run = ts.get(at..at + len).unwrap_or(&[]);
        at += len;
        let Some((&first, rest)) = run.split_first() else {
            continue;
        };
        put_zigzag(out, first.wrapping_sub(prev_first));
        prev_first = first;
        if rest.is_empty() {
            continue;
        }
        let d = most_common_delta(run);
        put_zigzag(out, d);
        let (mut anchor, mut k) = (first, 0i64);
        for &t in rest {
            k += 1;
            let residual = t.wrapping_sub(anchor.wrapping_add(k.wrapping_mul(d)));
            put_zigzag(out, residual);
            if residual.unsigned_abs() > d.unsigned_abs() / 2 {
                anchor = t;
                k = 0;
            }
        }
    }
}

/// Decodes the values after a run's first one.
fn decode_run_rest(
    r: &mut Reader<'_>,
    enc: u8,
    first: i64,
    len: usize,
    out: &mut Vec<i64>,
) -> Result<()> {
    if len < 2 {
        return Ok(());
    }
    out.reserve(len - 1);
    let mut left = len - 1;
    if enc == ENC_TS_GRID {
        let d = r.zigzag()?;
        let (mut anchor, mut k) = (first, 0i64);
        while left > 0 {
            // Residuals of 0: on the grid, the anchor stays.
            let z = r.zero_run(left)?;
            out.extend(
                (1..=z as i64).map(|i| anchor.wrapping_add(k.wrapping_add(i).wrapping_mul(d))),
            );
            k = k.wrapping_add(z as i64);
            left -= z;
            if left == 0 {
                break;
            }
            let residual = r.zigzag()?;
            k += 1;
            let t = anchor
                .wrapping_add(k.wrapping_mul(d))
                .wrapping_add(residual);
            if residual.unsigned_abs() > d.unsigned_abs() / 2 {
                anchor = t;
                k = 0;
            }
            out.push(t);
            left -= 1;
        }
    } else {
        // The first value is the delta itself, the rest deltas of deltas.
        let mut delta = r.zigzag()?;
        let mut prev = first.wrapping_add(delta);
        out.push(prev);
        left -= 1;
        while left > 0 {
            // Deltas of deltas of 0: the same step again.
            let z = r.zero_run(left)?;
            let base = prev;
            out.extend((1..=z as i64).map(|i| base.wrapping_add(delta.wrapping_mul(i))));
            prev = base.wrapping_add(delta.wrapping_mul(z as i64));
            left -= z;
            if left == 0 {
                break;
            }
            delta = delta.wrapping_add(r.zigzag()?);
            prev = prev.wrapping_add(delta);
            out.push(prev);
            left -= 1;
        }
    }
    Ok(())
}

fn timestamp_encoding(r: &mut Reader<'_>) -> Result<u8> {
    match r.u8()? {
        enc @ (ENC_TS_DOD | ENC_TS_GRID) => Ok(enc),
        enc => Err(Error::corrupt(
            r.place(),
            format!("timestamp encoding {enc}, expected {ENC_TS_DOD} or {ENC_TS_GRID}"),
        )),
    }
}

/// Decodes a timestamp block, given its runs.
pub fn decode_timestamps(r: &mut Reader<'_>, runs: &[usize], out: &mut Vec<i64>) -> Result<()> {
    let enc = timestamp_encoding(r)?;
    let mut prev_first = 0i64;
    for &len in runs {
        if len == 0 {
            continue;
        }
        prev_first = prev_first.wrapping_add(r.zigzag()?);
        out.push(prev_first);
        decode_run_rest(r, enc, prev_first, len, out)?;
    }
    Ok(())
}

/// Decodes only run `target` of a timestamp block (skipping the varints of the runs
/// before it), as `find` needs.
pub fn decode_timestamps_run(
    r: &mut Reader<'_>,
    runs: &[usize],
    target: usize,
    out: &mut Vec<i64>,
) -> Result<()> {
    let enc = timestamp_encoding(r)?;
    let mut prev_first = 0i64;
    for (k, &len) in runs.iter().enumerate() {
        if len == 0 {
            continue;
        }
        prev_first = prev_first.wrapping_add(r.zigzag()?);
        if k < target {
            // DOD: len - 1 more varints; grid: the step and len - 1 residuals.
            let more = if enc == ENC_TS_GRID && len >= 2 {
                len
            } else {
                len - 1
            };
            r.skip_varints(more)?;
            continue;
        }
        out.push(prev_first);
        return decode_run_rest(r, enc, prev_first, len, out);
    }
    Err(Error::corrupt(r.place(), format!("run {target} missing")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The most common step by counting every one (the reference for the fast path).
    fn most_common_by_count(run: &[i64]) -> i64 {
        let deltas: Vec<i64> = run.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
        let mut best: Option<(usize, i64)> = None;
        for &d in &deltas {
            let n = deltas.iter().filter(|&&x| x == d).count();
            let better = match best {
                None => true,
                Some((bn, bd)) => n > bn || (n == bn && d < bd),
            };
            if better {
                best = Some((n, d));
            }
        }
        best.map_or(0, |(_, d)| d)
    }

    #[test]
    fn most_common_delta_is_the_smallest_most_frequent_step() {
        let runs: [&[i64]; 8] = [
            &[],
            &[5],
            &[0, 10, 20, 30],
            &[0, 10, 20, 25, 35],
            &[0, 7, 14, 24, 34],
            &[100, 90, 80, 85],
            &[i64::MIN, i64::MAX, 0],
            &[3, 3, 3, 4, 4],
        ];
        for run in runs {
            assert_eq!(most_common_delta(run), most_common_by_count(run), "{run:?}");
        }
    }
    use crate::error::Place;

    #[test]
    fn grid_takes_one_residual_per_jitter() {
        let ts = [
            0i64,
            60_000,
            120_002,
            180_000,
            240_000,
            400_000,
            460_000,
            i64::MAX,
            i64::MIN,
        ];
        let runs = [ts.len()];
        let mut out = Vec::new();
        encode_timestamps_grid(&ts, &runs, &mut out);
        let mut got = Vec::new();
        decode_timestamps(&mut Reader::new(&out, Place::Meta), &runs, &mut got).unwrap();
        assert_eq!(got, ts);
        // first, step, then residuals 0, 2, 0, 0, gap, 0, ...
        assert_eq!(&out[..3], &[ENC_TS_GRID, 0, 0xc0]);
    }

    #[test]
    fn decodes_one_run_alone() {
        let ts = [5i64, 7, 9, 100, 90, 80, 70, -3];
        let runs = [3, 4, 1];
        let mut out = Vec::new();
        encode_timestamps(&ts, &runs, &mut out);
        for (k, want) in [(0usize, &ts[0..3]), (1, &ts[3..7]), (2, &ts[7..8])] {
            let mut got = Vec::new();
            decode_timestamps_run(&mut Reader::new(&out, Place::Meta), &runs, k, &mut got).unwrap();
            assert_eq!(got, want);
        }
        assert!(
            decode_timestamps_run(
                &mut Reader::new(&out, Place::Meta),
                &runs,
                3,
                &mut Vec::new()
            )
            .is_err()
        );
    }

    #[test]
    fn timestamps_round_trip_runs() {
        let ts = [i64::MIN, i64::MAX, 0, 10, 20, 30, 5, -5, 1_700_000_000_000];
        let runs = [2, 4, 1, 2];
        for grid in [false, true] {
            let mut out = Vec::new();
            if grid {
                encode_timestamps_grid(&ts, &runs, &mut out);
            } else {
                encode_timestamps(&ts, &runs, &mut out);
            }
            let mut got = Vec::new();
            decode_timestamps(&mut Reader::new(&out, Place::Meta), &runs, &mut got).unwrap();
            assert_eq!(got, ts);
        }
    }
}
