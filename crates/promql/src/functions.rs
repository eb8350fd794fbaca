//! PromQL functions: over range vectors (`rate`, `*_over_time`, ...), over instant
//! vectors (`abs`, `histogram_quantile`, `label_replace`, ...) and the aggregation
//! kernels.

use promql_parser::parser::{Call, Expr, MatrixSelector};

use crate::error::{Error, Result};
use crate::eval::{
    Ctx, METRIC_NAME, Row, Slices, Subquery, Val, WindowInput, is_valid_label_name, nan_last,
    set_label, window_ranges, without_name,
};
use crate::storage::{Labels, WindowAgg};

/// Evaluates a function call.
pub(crate) fn call(ctx: &mut Ctx<'_>, c: &Call) -> Result<Val> {
    let name = c.func.name;
    let args: Vec<&Expr> = c.args.args.iter().map(|b| b.as_ref()).collect();
    if let Some(f) = range_function(name) {
        return eval_range_function(ctx, name, f, &args);
    }
    match name {
        "abs" | "ceil" | "floor" | "exp" | "ln" | "log2" | "log10" | "sqrt" | "sgn" | "sin"
        | "cos" | "tan" | "asin" | "acos" | "atan" | "sinh" | "cosh" | "tanh" | "asinh"
        | "acosh" | "atanh" | "deg" | "rad" => {
            let rows = vector_arg(ctx, &args, 0, name)?;
            Ok(Val::Vector(map_values(rows, |v| simple_math(name, v))))
        }
        "round" => {
            let rows = vector_arg(ctx, &args, 0, name)?;
            let to = match args.get(1) {
                Some(e) => ctx.eval_scalar_arg(e, "round's to_nearest")?,
                None => vec![1.0; ctx.n],
            };
            Ok(Val::Vector(map_values_at(rows, |i, v| {
                let inv = 1.0 / to.get(i).copied().unwrap_or(1.0);
                (v * inv + 0.5).floor() / inv
            })))
        }
        "clamp" | "clamp_min" | "clamp_max" => {
            let rows = vector_arg(ctx, &args, 0, name)?;
            let a = scalar_arg(ctx, &args, 1, name)?;
            let b = match name {
                "clamp" => scalar_arg(ctx, &args, 2, name)?,
                _ => Vec::new(),
            };
            let mut out = Vec::new();
            for mut r in rows {
                for (i, slot) in r.vals.iter_mut().enumerate() {
                    let Some(v) = *slot else { continue };
                    let x = a.get(i).copied().unwrap_or(f64::NAN);
                    *slot = match name {
                        "clamp_min" => Some(v.max(x)),
                        "clamp_max" => Some(v.min(x)),
                        _ => {
                            let y = b.get(i).copied().unwrap_or(f64::NAN);
                            // Prometheus: min > max gives nothing; NaN bounds give NaN.
                            if x > y { None } else { Some(v.max(x).min(y)) }
                        }
                    };
                }
                r.drop_name = true;
                if r.vals.iter().any(Option::is_some) {
                    out.push(r);
                }
            }
            Ok(Val::Vector(out))
        }
        "time" => Ok(Val::Scalar(
            (0..ctx.n).map(|i| ctx.ts(i) as f64 / 1000.0).collect(),
        )),
        "pi" => Ok(Val::Scalar(vec![std::f64::consts::PI; ctx.n])),
        "timestamp" => {
            let rows = vector_arg(ctx, &args, 0, name)?;
            let ts: Vec<f64> = (0..ctx.n).map(|i| ctx.ts(i) as f64 / 1000.0).collect();
            Ok(Val::Vector(map_values_at(rows, |i, _| {
                ts.get(i).copied().unwrap_or(f64::NAN)
            })))
        }
        "vector" => {
            let s = scalar_arg(ctx, &args, 0, name)?;
            Ok(Val::Vector(vec![Row {
                labels: Vec::new(),
                drop_name: false,
                vals: s.into_iter().map(Some).collect(),
            }]))
        }
        "scalar" => {
            let rows = vector_arg(ctx, &args, 0, name)?;
            Ok(Val::Scalar(
                (0..ctx.n)
                    .map(|i| {
                        let mut present =
                            rows.iter().filter_map(|r| r.vals.get(i).copied().flatten());
                        match (present.next(), present.next()) {
                            (Some(v), None) => v,
                            _ => f64::NAN,
                        }
                    })
                    .collect(),
            ))
        }
        "sort" | "sort_desc" => {
            let mut rows = vector_arg(ctx, &args, 0, name)?;
            if ctx.n == 1 {
                let desc = name == "sort_desc";
                rows.sort_by(|a, b| {
                    let x = a.vals.first().copied().flatten().unwrap_or(f64::NAN);
                    let y = b.vals.first().copied().flatten().unwrap_or(f64::NAN);
                    nan_last(x, y, desc)
                });
            }
            Ok(Val::Vector(rows))
        }
        "absent" => {
            let e = args.first().copied().ok_or_else(|| arity(name))?;
            let rows = vector_arg(ctx, &args, 0, name)?;
            Ok(Val::Vector(absent_rows(ctx.n, &rows, e)))
        }
        "absent_over_time" => {
            let e = args.first().copied().ok_or_else(|| arity(name))?;
            let present = range_function("present_over_time").ok_or_else(|| arity(name))?;
            let mut rows = Vec::new();
            eval_range_function_each(ctx, "present_over_time", present, &args, &mut |r| {
                rows.push(r);
                Ok(())
            })?;
            Ok(Val::Vector(absent_rows(ctx.n, &rows, e)))
        }
        "minute" | "hour" | "day_of_week" | "day_of_month" | "day_of_year" | "days_in_month"
        | "month" | "year" => {
            if args.is_empty() {
                // `vector(time())`: the step's time, in whole seconds as Go's `Ts/1000`.
                let vals = (0..ctx.n)
                    .map(|i| Some(date_field(name, GoTime::from_unix(ctx.ts(i) / 1000))))
                    .collect();
                return Ok(Val::Vector(vec![Row {
                    labels: Vec::new(),
                    drop_name: false,
                    vals,
                }]));
            }
            let rows = vector_arg(ctx, &args, 0, name)?;
            Ok(Val::Vector(map_values(rows, |v| {
                date_field(name, GoTime::from_unix(go_int64(v)))
            })))
        }
        "label_replace" => label_replace(ctx, &args),
        "label_join" => label_join(ctx, &args),
        "histogram_quantile" => histogram_quantile(ctx, &args),
        other => Err(Error::Unsupported(format!("function `{other}`"))),
    }
}

fn arity(name: &str) -> Error {
    Error::BadData(format!("wrong number of arguments for {name}"))
}

fn vector_arg(ctx: &mut Ctx<'_>, args: &[&Expr], i: usize, name: &str) -> Result<Vec<Row>> {
    let e = args.get(i).ok_or_else(|| arity(name))?;
    ctx.eval_vector_arg(e, name)
}

fn scalar_arg(ctx: &mut Ctx<'_>, args: &[&Expr], i: usize, name: &str) -> Result<Vec<f64>> {
    let e = args.get(i).ok_or_else(|| arity(name))?;
    ctx.eval_scalar_arg(e, name)
}

fn map_values(rows: Vec<Row>, f: impl Fn(f64) -> f64) -> Vec<Row> {
    map_values_at(rows, |_, v| f(v))
}

fn map_values_at(rows: Vec<Row>, f: impl Fn(usize, f64) -> f64) -> Vec<Row> {
    rows.into_iter()
        .map(|mut r| {
            for (i, v) in r.vals.iter_mut().enumerate() {
                if let Some(x) = v {
                    *x = f(i, *x);
                }
            }
            r.drop_name = true;
            r
        })
        .collect()
}

fn simple_math(name: &str, v: f64) -> f64 {
    match name {
        "abs" => v.abs(),
        "ceil" => v.ceil(),
        "floor" => v.floor(),
        "exp" => v.exp(),
        "ln" => v.ln(),
        "log2" => v.log2(),
        "log10" => v.log10(),
        "sqrt" => v.sqrt(),
        "sgn" => {
            if v > 0.0 {
                1.0
            } else if v < 0.0 {
                -1.0
            } else {
                v
            }
        }
        "sin" => v.sin(),
        "cos" => v.cos(),
        "tan" => v.tan(),
        "asin" => v.asin(),
        "acos" => v.acos(),
        "atan" => v.atan(),
        "sinh" => v.sinh(),
        "cosh" => v.cosh(),
        "tanh" => v.tanh(),
        "asinh" => v.asinh(),
        "acosh" => v.acosh(),
        "atanh" => v.atanh(),
        "deg" => v.to_degrees(),
        "rad" => v.to_radians(),
        _ => f64::NAN,
    }
}

/// Go's `int64(f)` on amd64 (where Prometheus is built): truncation toward zero, and
/// the "integer indefinite" `i64::MIN` for NaN, ±Inf and values out of range.
fn go_int64(f: f64) -> i64 {
    // 2^63, the first value above `i64::MAX`; below `-2^63` `as` saturates to `i64::MIN`.
    if f.is_nan() || f >= 9_223_372_036_854_775_808.0 {
        i64::MIN
    } else {
        f as i64
    }
}

/// The UTC calendar fields of Go's `time.Unix(sec, 0).UTC()`, computed as Go's `time`
/// package does (Go 1.23+): seconds since its "absolute zero" (March 1 of year
/// -292277022400) in wrapping unsigned arithmetic, so that even `i64::MIN` (a NaN
/// sample) gives the same date Prometheus answers.
struct GoTime {
    year: i64,
    month: u64,
    day: u64,
    yday: u64,
    weekday: u64,
    hour: u64,
    minute: u64,
}

/// Go's `absoluteYears`.
const GO_ABSOLUTE_YEARS: u64 = 292_277_022_400;
/// Go's `unixToAbsolute`: Unix seconds to seconds since the absolute zero.
const GO_UNIX_TO_ABSOLUTE: i64 =
    62_135_596_800 + (292_277_022_400 * 3_652_425 / 10_000 + 306) * 86_400;

impl GoTime {
    fn from_unix(sec: i64) -> GoTime {
        let abs = sec.wrapping_add(GO_UNIX_TO_ABSOLUTE) as u64;
        let days = abs / 86_400;
        let clock = abs % 86_400;
        // Go's `absDays.split`: century, year in century, day in the March-based year.
        let d = days.wrapping_mul(4).wrapping_add(3);
        let century = d / 146_097;
        let cd = (d % 146_097) / 4 * 4 + 3;
        let cyear = cd / 1461;
        let ayday = cd % 1461 / 4;
        let m = 2141 * ayday + 197_913;
        let (amonth, day) = (m >> 16, 1 + (m & 0xffff) / 2141);
        let jan_feb = u64::from(ayday >= 306);
        let year = (century.wrapping_mul(100).wrapping_sub(GO_ABSOLUTE_YEARS) as i64)
            .wrapping_add(cyear as i64)
            .wrapping_add(jan_feb as i64);
        let yday = if jan_feb == 1 {
            ayday - 306 + 1
        } else {
            ayday + 1 + 31 + 28 + u64::from(is_leap(year))
        };
        GoTime {
            year,
            month: amonth - 12 * jan_feb,
            day,
            yday,
            // March 1 of the absolute year was a Wednesday.
            weekday: (days + 3) % 7,
            hour: clock / 3600,
            minute: clock % 3600 / 60,
        }
    }
}

fn is_leap(year: i64) -> bool {
    year.rem_euclid(4) == 0 && (year.rem_euclid(100) != 0 || year.rem_euclid(400) == 0)
}

/// A date function's value (`minute`, `hour`, ..., `year`) of a time.
fn date_field(name: &str, t: GoTime) -> f64 {
    match name {
        "minute" => t.minute as f64,
        "hour" => t.hour as f64,
        "day_of_week" => t.weekday as f64,
        "day_of_month" => t.day as f64,
        "day_of_year" => t.yday as f64,
        "days_in_month" => match t.month {
            2 if is_leap(t.year) => 29.0,
            2 => 28.0,
            4 | 6 | 9 | 11 => 30.0,
            _ => 31.0,
        },
        "month" => t.month as f64,
        "year" => t.year as f64,
        _ => f64::NAN,
    }
}

/// `absent(v)`: 1 where `v` has no sample, with the labels its equality matchers fix.
fn absent_rows(n: usize, rows: &[Row], e: &Expr) -> Vec<Row> {
    let vals: Vec<Option<f64>> = (0..n)
        .map(|i| {
            let present = rows
                .iter()
                .any(|r| r.vals.get(i).copied().flatten().is_some());
            (!present).then_some(1.0)
        })
        .collect();
    if vals.iter().all(Option::is_none) {
        return Vec::new();
    }
    vec![Row {
        labels: absent_labels(e),
        drop_name: false,
        vals,
    }]
}

fn absent_labels(e: &Expr) -> Labels {
    let vs = match e {
        Expr::VectorSelector(vs) => vs,
        Expr::MatrixSelector(ms) => &ms.vs,
        _ => return Vec::new(),
    };
    let mut labels = Labels::new();
    let mut seen_twice: Vec<String> = Vec::new();
    for m in &vs.matchers.matchers {
        if m.name == METRIC_NAME {
            continue;
        }
        if vs
            .matchers
            .matchers
            .iter()
            .filter(|o| o.name == m.name)
            .count()
            > 1
        {
            seen_twice.push(m.name.clone());
        }
        if let promql_parser::label::MatchOp::Equal = m.op {
            set_label(&mut labels, &m.name, &m.value);
        }
    }
    labels.retain(|(n, _)| !seen_twice.contains(n));
    labels
}

fn label_replace(ctx: &mut Ctx<'_>, args: &[&Expr]) -> Result<Val> {
    let name = "label_replace";
    let rows = vector_arg(ctx, args, 0, name)?;
    let mut s = Vec::new();
    for i in 1..5 {
        let e = args.get(i).ok_or_else(|| arity(name))?;
        s.push(ctx.eval_string_arg(e, name)?);
    }
    let (dst, repl, src, re) = (&s[0], &s[1], &s[2], &s[3]);
    let regex = regex::Regex::new(&format!("^(?s:{re})$")).map_err(|e| {
        Error::BadData(format!(
            "invalid regular expression in label_replace(): {re} ({e})"
        ))
    })?;
    if !is_valid_label_name(dst) {
        return Err(Error::BadData(format!(
            "invalid destination label name in label_replace(): {dst}"
        )));
    }
    let mut out = Vec::with_capacity(rows.len());
    for mut r in rows {
        let value = r
            .labels
            .iter()
            .find(|(n, _)| n == src)
            .map_or(String::new(), |(_, v)| v.clone());
        if let Some(caps) = regex.captures(&value) {
            let mut res = String::new();
            // Go's `$1`/`${name}` templates read as the regex crate's do.
            caps.expand(repl, &mut res);
            set_label(&mut r.labels, dst, &res);
            if dst == METRIC_NAME {
                r.drop_name = false;
            }
        }
        out.push(r);
    }
    Ok(Val::Vector(out))
}

fn label_join(ctx: &mut Ctx<'_>, args: &[&Expr]) -> Result<Val> {
    let name = "label_join";
    let rows = vector_arg(ctx, args, 0, name)?;
    let mut s = Vec::new();
    for i in 1..args.len() {
        let e = args.get(i).ok_or_else(|| arity(name))?;
        s.push(ctx.eval_string_arg(e, name)?);
    }
    if s.len() < 2 {
        return Err(arity(name));
    }
    let (dst, sep, srcs) = (&s[0], &s[1], &s[2..]);
    if !is_valid_label_name(dst) {
        return Err(Error::BadData(format!(
            "invalid destination label name in label_join(): {dst}"
        )));
    }
    let mut out = Vec::with_capacity(rows.len());
    for mut r in rows {
        let parts: Vec<String> = srcs
            .iter()
            .map(|src| {
                r.labels
                    .iter()
                    .find(|(n, _)| n == src)
                    .map_or(String::new(), |(_, v)| v.clone())
            })
            .collect();
        set_label(&mut r.labels, dst, &parts.join(sep));
        if dst == METRIC_NAME {
            r.drop_name = false;
        }
        out.push(r);
    }
    Ok(Val::Vector(out))
}

fn histogram_quantile(ctx: &mut Ctx<'_>, args: &[&Expr]) -> Result<Val> {
    let name = "histogram_quantile";
    let q = scalar_arg(ctx, args, 0, name)?;
    let rows = vector_arg(ctx, args, 1, name)?;
    // Group the bucket series by their labels without `le` (and the name).
    let mut groups: Vec<(Labels, Vec<(f64, usize)>)> = Vec::new();
    let mut index: std::collections::HashMap<Labels, usize> = std::collections::HashMap::new();
    for (ri, r) in rows.iter().enumerate() {
        let Some(le) = r.labels.iter().find(|(n, _)| n == "le").map(|(_, v)| v) else {
            continue;
        };
        let Some(upper) = parse_go_float(le) else {
            continue;
        };
        let key: Labels = without_name(&r.labels)
            .into_iter()
            .filter(|(n, _)| n != "le")
            .collect();
        let g = *index.entry(key.clone()).or_insert_with(|| {
            groups.push((key, Vec::new()));
            groups.len() - 1
        });
        if let Some(grp) = groups.get_mut(g) {
            grp.1.push((upper, ri));
        }
    }
    let mut out = Vec::new();
    for (labels, buckets) in groups {
        let mut vals = vec![None; ctx.n];
        for (i, slot) in vals.iter_mut().enumerate() {
            let mut bs: Vec<(f64, f64)> = buckets
                .iter()
                .filter_map(|&(u, ri)| {
                    rows.get(ri)
                        .and_then(|r| r.vals.get(i).copied().flatten())
                        .map(|c| (u, c))
                })
                .collect();
            if bs.is_empty() {
                continue;
            }
            *slot = Some(bucket_quantile(
                q.get(i).copied().unwrap_or(f64::NAN),
                &mut bs,
            ));
        }
        if vals.iter().any(Option::is_some) {
            out.push(Row {
                labels,
                drop_name: false,
                vals,
            });
        }
    }
    Ok(Val::Vector(out))
}

/// Parses a float as Go's `strconv.ParseFloat` does for bucket bounds (`+Inf`, `Inf`).
pub(crate) fn parse_go_float(s: &str) -> Option<f64> {
    match s.to_ascii_lowercase().as_str() {
        "+inf" | "inf" => Some(f64::INFINITY),
        "-inf" => Some(f64::NEG_INFINITY),
        "nan" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

/// The quantile of classic histogram buckets `(upper bound, cumulative count)`, as
/// Prometheus' `bucketQuantile`.
fn bucket_quantile(q: f64, buckets: &mut [(f64, f64)]) -> f64 {
    if q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    match buckets.last() {
        Some(&(u, _)) if u == f64::INFINITY => {}
        _ => return f64::NAN,
    }
    // Coalesce equal bounds, then force monotonic counts.
    let mut merged: Vec<(f64, f64)> = Vec::with_capacity(buckets.len());
    for &(u, c) in buckets.iter() {
        match merged.last_mut() {
            Some(last) if last.0 == u => last.1 += c,
            _ => merged.push((u, c)),
        }
    }
    let mut max = f64::NEG_INFINITY;
    for b in merged.iter_mut() {
        if b.1 > max {
            max = b.1;
        } else if b.1 < max {
            b.1 = max;
        }
    }
    if merged.len() < 2 {
        return f64::NAN;
    }
    let last = merged.len() - 1;
    let observations = merged[last].1;
    if observations == 0.0 || observations.is_nan() {
        return f64::NAN;
    }
    let mut rank = q * observations;
    let b = merged.partition_point(|x| x.1 < rank).min(last);
    if b == last {
        return merged[last - 1].0;
    }
    if b == 0 && merged[0].0 <= 0.0 {
        return merged[0].0;
    }
    let (mut start, end, mut count) = (0.0, merged[b].0, merged[b].1);
    if b > 0 {
        start = merged[b - 1].0;
        count -= merged[b - 1].1;
        rank -= merged[b - 1].1;
    }
    start + (end - start) * (rank / count)
}

// ---- range-vector functions ----

/// A range function: samples of the window, the window's start and end (ms), the range
/// (seconds) and the function's scalar parameter at this step.
type RangeFn = fn(Slices<'_>, i64, i64, f64, f64) -> Option<f64>;

fn range_function(name: &str) -> Option<RangeFn> {
    Some(match name {
        "rate" => |s, a, b, r, _| extrapolated(s, a, b, r, true, true),
        "increase" => |s, a, b, r, _| extrapolated(s, a, b, r, true, false),
        "delta" => |s, a, b, r, _| extrapolated(s, a, b, r, false, false),
        "irate" => |s, _, _, _, _| instant_delta(s, true),
        "idelta" => |s, _, _, _, _| instant_delta(s, false),
        "resets" => |s, _, _, _, _| {
            (!s.is_empty()).then(|| s.vs.windows(2).filter(|w| w[1] < w[0]).count() as f64)
        },
        "changes" => |s, _, _, _, _| {
            (!s.is_empty()).then(|| {
                s.vs.windows(2)
                    .filter(|w| w[1] != w[0] && !(w[1].is_nan() && w[0].is_nan()))
                    .count() as f64
            })
        },
        "deriv" => |s, _, _, _, _| {
            let t0 = s.first()?.0;
            (s.len() >= 2).then(|| linear_regression(s, t0).0)
        },
        "predict_linear" => |s, _, end, _, p| {
            (s.len() >= 2).then(|| {
                let (slope, intercept) = linear_regression(s, end);
                slope * p + intercept
            })
        },
        "avg_over_time" => |s, _, _, _, _| avg(s.values()),
        "min_over_time" => |s, _, _, _, _| aggregate_values("min", s.values()),
        "max_over_time" => |s, _, _, _, _| aggregate_values("max", s.values()),
        "sum_over_time" => |s, _, _, _, _| aggregate_values("sum", s.values()),
        "count_over_time" => |s, _, _, _, _| (!s.is_empty()).then_some(s.len() as f64),
        "last_over_time" => |s, _, _, _, _| s.vs.last().copied(),
        "first_over_time" => |s, _, _, _, _| s.vs.first().copied(),
        "present_over_time" => |s, _, _, _, _| (!s.is_empty()).then_some(1.0),
        "stddev_over_time" => |s, _, _, _, _| variance(s.values()).map(f64::sqrt),
        "stdvar_over_time" => |s, _, _, _, _| variance(s.values()),
        "quantile_over_time" => |s, _, _, _, q| {
            (!s.is_empty()).then(|| {
                let mut xs: Vec<f64> = s.values().collect();
                quantile(q, &mut xs)
            })
        },
        _ => return None,
    })
}

fn eval_range_function(ctx: &mut Ctx<'_>, name: &str, f: RangeFn, args: &[&Expr]) -> Result<Val> {
    let mut rows = Vec::new();
    eval_range_function_each(ctx, name, f, args, &mut |r| {
        rows.push(r);
        Ok(())
    })?;
    Ok(Val::Vector(rows))
}

/// A range function's result rows, each handed to `sink` as soon as its series is read
/// (one series' samples in memory at a time), or `None` when `c` is not a call of a
/// range function.
pub(crate) fn range_call_each(
    ctx: &mut Ctx<'_>,
    c: &Call,
    sink: &mut dyn FnMut(Row) -> Result<()>,
) -> Result<Option<()>> {
    let name = c.func.name;
    let Some(f) = range_function(name) else {
        return Ok(None);
    };
    let args: Vec<&Expr> = c.args.args.iter().map(|b| b.as_ref()).collect();
    eval_range_function_each(ctx, name, f, &args, sink).map(Some)
}

fn eval_range_function_each(
    ctx: &mut Ctx<'_>,
    name: &str,
    f: RangeFn,
    args: &[&Expr],
    sink: &mut dyn FnMut(Row) -> Result<()>,
) -> Result<()> {
    // The range vector is the first argument, except for quantile_over_time.
    let (matrix_pos, param_pos) = match name {
        "quantile_over_time" => (1, Some(0)),
        "predict_linear" => (0, Some(1)),
        _ => (0, None),
    };
    let param = match param_pos {
        Some(p) => scalar_arg(ctx, args, p, name)?,
        None => vec![0.0; ctx.n],
    };
    let arg = match args.get(matrix_pos).copied().map(unwrap_parens) {
        Some(Expr::MatrixSelector(ms)) => RangeArg::Selector(ms),
        Some(Expr::Subquery(sq)) => RangeArg::Subquery(ctx.eval_subquery(sq)?),
        _ => {
            return Err(Error::BadData(format!(
                "expected type range vector in call to function {name:?}"
            )));
        }
    };
    let (range_ms, ends) = match &arg {
        RangeArg::Selector(ms) => (
            i64::try_from(ms.range.as_millis()).unwrap_or(i64::MAX),
            ctx.window_ends(ms),
        ),
        RangeArg::Subquery(sub) => (sub.range, sub.ends.clone()),
    };
    let range_s = range_ms as f64 / 1000.0;
    if let Some(need) = window_aggregate_needs(name) {
        let ends = &ends;
        let map = |windows: &[WindowInput<'_>]| {
            // Sums of raw windows four at a time (the same operations per window).
            let sums =
                matches!(name, "sum_over_time" | "avg_over_time").then(|| window_sums(windows));
            let vals: Vec<Option<f64>> = windows
                .iter()
                .zip(ends)
                .enumerate()
                .map(
                    |(i, (w, &end))| match (w, sums.as_ref().and_then(|s| s.get(i))) {
                        (WindowInput::Samples(s), Some(&(sum, n))) if n > 0 => {
                            if name == "sum_over_time" {
                                Some(sum)
                            } else if sum.is_infinite() {
                                avg(s.values())
                            } else {
                                Some(sum / n as f64)
                            }
                        }
                        (WindowInput::Samples(s), _) => {
                            f(*s, end.saturating_sub(range_ms), end, range_s, 0.0)
                        }
                        (WindowInput::Agg(a), _) => window_agg_value(name, a),
                    },
                )
                .collect();
            Some(vals)
        };
        return match &arg {
            // Through `select_windows`: a store with rollups answers whole buckets there.
            RangeArg::Selector(ms) => ctx.map_window_aggs(ms, need, true, map, sink),
            RangeArg::Subquery(sub) => each_subquery_series(sub, true, sink, |s, windows| {
                let inputs: Vec<WindowInput<'_>> = windows
                    .iter()
                    .map(|&(a, b)| WindowInput::Samples(s.window(a, b)))
                    .collect();
                map(&inputs).filter(|vals| vals.iter().any(Option::is_some))
            }),
        };
    }
    let keep_name = matches!(name, "last_over_time" | "first_over_time");
    let change = match name {
        "rate" => Some((true, true)),
        "increase" => Some((true, false)),
        "delta" => Some((false, false)),
        _ => None,
    };
    // predict_linear predicts from the evaluation time, whatever `@` and `offset` say
    // (Prometheus' `enh.Ts`); the other functions here read only their window.
    let at: Vec<i64> = if name == "predict_linear" {
        (0..ctx.n).map(|i| ctx.ts(i)).collect()
    } else {
        ends.clone()
    };
    let (ends, param, at) = (&ends, &param, &at);
    let map = |samples: Slices<'_>, windows: &[(usize, usize)]| {
        let vals: Vec<Option<f64>> = match change {
            // The counter resets found once per series, not once per window.
            Some((counter, rate)) => {
                let resets: Vec<usize> = if counter {
                    samples
                        .vs
                        .windows(2)
                        .enumerate()
                        .filter(|(_, w)| w[1] < w[0])
                        .map(|(j, _)| j + 1)
                        .collect()
                } else {
                    Vec::new()
                };
                // Two passes: each window's change (resets added, in order), then
                // the extrapolation in a loop of its own, whose divisions the CPU
                // overlaps across windows.
                let changes: Vec<Option<Change>> = windows
                    .iter()
                    .map(|&(a, b)| {
                        let w = samples.window(a, b);
                        if w.len() < 2 {
                            return None;
                        }
                        let (first, last) = (w.first()?, w.last()?);
                        let mut result = last.1 - first.1;
                        // Resets inside the window: pairs (j - 1, j) with a < j < b, in order.
                        let r0 = resets.partition_point(|&j| j <= a);
                        for &j in resets.get(r0..).unwrap_or(&[]) {
                            if j >= b {
                                break;
                            }
                            result += samples.vs.get(j - 1).copied().unwrap_or(0.0);
                        }
                        Some((first, last, w.len(), result))
                    })
                    .collect();
                changes
                    .iter()
                    .zip(ends)
                    .map(|(c, &end)| {
                        let (first, last, n, result) = (*c)?;
                        Some(extrapolate_change(
                            first,
                            last,
                            n,
                            result,
                            end.saturating_sub(range_ms),
                            end,
                            range_s,
                            counter,
                            rate,
                        ))
                    })
                    .collect()
            }
            None => windows
                .iter()
                .zip(at)
                .zip(param)
                .map(|((&(a, b), &end), &p)| {
                    f(
                        samples.window(a, b),
                        end.saturating_sub(range_ms),
                        end,
                        range_s,
                        p,
                    )
                })
                .collect(),
        };
        vals.iter().any(Option::is_some).then_some(vals)
    };
    match &arg {
        RangeArg::Selector(ms) => ctx.map_windows(ms, !keep_name, |_, s, w| map(s, w), sink),
        RangeArg::Subquery(sub) => each_subquery_series(sub, !keep_name, sink, map),
    }
}

/// The range vector a range function reads: a range selector's series, read from the
/// storage, or a subquery's, evaluated.
enum RangeArg<'e> {
    Selector(&'e MatrixSelector),
    Subquery(Subquery),
}

/// Maps each series of a subquery's result as `map_windows` maps a selector's: `map`
/// gets its samples and, per outer step, the index range of its window; each row that
/// has a value goes to `sink` (its name dropped when `drop_name` or when the inner
/// expression dropped it).
fn each_subquery_series(
    sub: &Subquery,
    drop_name: bool,
    sink: &mut dyn FnMut(Row) -> Result<()>,
    map: impl Fn(Slices<'_>, &[(usize, usize)]) -> Option<Vec<Option<f64>>>,
) -> Result<()> {
    for s in &sub.series {
        let windows = window_ranges(&s.ts, &sub.ends, sub.range);
        if let Some(vals) = map(Slices::new(&s.ts, &s.vs), &windows) {
            sink(Row {
                labels: s.labels.clone(),
                drop_name: drop_name || s.drop_name,
                vals,
            })?;
        }
    }
    Ok(())
}

/// For the functions a window's aggregates answer: whether they use its `(sum, min,
/// max)` (`count` always).
fn window_aggregate_needs(name: &str) -> Option<(bool, bool, bool)> {
    Some(match name {
        "count_over_time" => (false, false, false),
        "sum_over_time" | "avg_over_time" => (true, false, false),
        "min_over_time" => (false, true, false),
        "max_over_time" => (false, false, true),
        _ => return None,
    })
}

/// A window function's value from the window's aggregates.
fn window_agg_value(name: &str, a: &WindowAgg) -> Option<f64> {
    if a.count == 0 {
        return None;
    }
    Some(match name {
        "count_over_time" => a.count as f64,
        "sum_over_time" => a.sum,
        "avg_over_time" => a.sum / a.count as f64,
        "min_over_time" => a.min,
        "max_over_time" => a.max,
        _ => return None,
    })
}

fn unwrap_parens(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => unwrap_parens(&p.expr),
        other => other,
    }
}

/// `rate`, `increase` and `delta`: the change over the window, corrected for counter
/// resets and extrapolated towards the window's edges as Prometheus does.
fn extrapolated(
    s: Slices<'_>,
    range_start: i64,
    range_end: i64,
    range_s: f64,
    counter: bool,
    rate: bool,
) -> Option<f64> {
    if s.len() < 2 {
        return None;
    }
    let (first, last) = (s.first()?, s.last()?);
    let mut result = last.1 - first.1;
    if counter {
        for w in s.vs.windows(2) {
            if w[1] < w[0] {
                result += w[0];
            }
        }
    }
    Some(extrapolate(
        s,
        result,
        range_start,
        range_end,
        range_s,
        counter,
        rate,
    ))
}

/// The extrapolation of [`extrapolated`]: `result`, the change over the window's
/// samples `s` (at least two), corrected for counter resets, extended towards the
/// window's edges.
fn extrapolate(
    s: Slices<'_>,
    result: f64,
    range_start: i64,
    range_end: i64,
    range_s: f64,
    counter: bool,
    rate: bool,
) -> f64 {
    let (first, last) = match (s.first(), s.last()) {
        (Some(f), Some(l)) => (f, l),
        _ => return result,
    };
    extrapolate_change(
        first,
        last,
        s.len(),
        result,
        range_start,
        range_end,
        range_s,
        counter,
        rate,
    )
}

/// A window's change as [`extrapolate_change`] takes it: its first and last samples,
/// their count and the change between them.
type Change = ((i64, f64), (i64, f64), usize, f64);

/// [`extrapolate`] from what it uses of the window: its first and last samples, their
/// count (at least two) and the change between them.
#[allow(clippy::too_many_arguments)]
#[inline]
fn extrapolate_change(
    first: (i64, f64),
    last: (i64, f64),
    n: usize,
    result: f64,
    range_start: i64,
    range_end: i64,
    range_s: f64,
    counter: bool,
    rate: bool,
) -> f64 {
    let mut to_start = (first.0 as f64 - range_start as f64) / 1000.0;
    let mut to_end = (range_end as f64 - last.0 as f64) / 1000.0;
    let sampled = (last.0 - first.0) as f64 / 1000.0;
    let avg_gap = sampled / (n - 1) as f64;
    let threshold = avg_gap * 1.1;
    if to_start >= threshold {
        to_start = avg_gap / 2.0;
    }
    if counter {
        let mut to_zero = to_start;
        if result > 0.0 && first.1 >= 0.0 {
            to_zero = sampled * (first.1 / result);
        }
        if to_zero < to_start {
            to_start = to_zero;
        }
    }
    if to_end >= threshold {
        to_end = avg_gap / 2.0;
    }
    let mut factor = if sampled != 0.0 {
        (sampled + to_start + to_end) / sampled
    } else {
        1.0
    };
    if rate {
        factor /= range_s;
    }
    result * factor
}

/// `irate` and `idelta`: from the last two samples.
fn instant_delta(s: Slices<'_>, rate: bool) -> Option<f64> {
    if s.len() < 2 {
        return None;
    }
    let (prev, last) = (s.get(s.len() - 2)?, s.last()?);
    let mut d = last.1 - prev.1;
    if rate && last.1 < prev.1 {
        d = last.1;
    }
    if !rate {
        return Some(d);
    }
    let gap = (last.0 - prev.0) as f64 / 1000.0;
    if gap == 0.0 {
        return None;
    }
    Some(d / gap)
}

/// Least-squares slope (per second) and intercept at `intercept_ms`.
fn linear_regression(s: Slices<'_>, intercept_ms: i64) -> (f64, f64) {
    let (mut n, mut sx, mut sy, mut sxy, mut sxx) = (0.0, 0.0, 0.0, 0.0, 0.0);
    let first_y = s.vs.first().copied().unwrap_or(0.0);
    let mut const_y = true;
    for (t, v) in s.iter() {
        if v != first_y {
            const_y = false;
        }
        let x = (t as f64 - intercept_ms as f64) / 1000.0;
        n += 1.0;
        sx += x;
        sy += v;
        sxy += x * v;
        sxx += x * x;
    }
    if const_y && first_y.is_finite() {
        return (0.0, first_y);
    }
    let cov = sxy - sx * sy / n;
    let var = sxx - sx * sx / n;
    let slope = cov / var;
    let intercept = sy / n - slope * sx / n;
    (slope, intercept)
}

/// Kahan-compensated sum (Prometheus sums with compensation).
fn kahan_sum(xs: impl Iterator<Item = f64>) -> (f64, usize) {
    let (mut sum, mut c, mut n) = (0.0f64, 0.0f64, 0usize);
    for x in xs {
        n += 1;
        // The branches `if sum.abs() >= x.abs() { .. } else { .. }` as selects: a
        // window's sum takes no mispredicted branch per sample.
        kahan_step(&mut sum, &mut c, x);
    }
    if sum.is_infinite() {
        (sum, n)
    } else {
        (sum + c, n)
    }
}

/// The Kahan sum and count ([`kahan_sum`]) of each window's samples (zero for a
/// window of aggregates), four windows at a time: each window's sum is the same
/// sequence of operations as `kahan_sum` over it, so the same bits, and the four
/// independent chains of additions overlap in the CPU instead of waiting on one another.
fn window_sums(windows: &[WindowInput<'_>]) -> Vec<(f64, usize)> {
    let mut out = Vec::with_capacity(windows.len());
    for quad in windows.chunks(4) {
        let mut lanes: [&[f64]; 4] = [&[]; 4];
        for (lane, w) in lanes.iter_mut().zip(quad) {
            if let WindowInput::Samples(s) = w {
                *lane = s.vs;
            }
        }
        // The common length in lock step (registers, no branch per sample), then
        // each lane's tail.
        let common = lanes.iter().map(|l| l.len()).min().unwrap_or(0);
        let [l0, l1, l2, l3] = lanes;
        let (mut s0, mut s1, mut s2, mut s3) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
        let (mut c0, mut c1, mut c2, mut c3) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
        for (((&x0, &x1), &x2), &x3) in l0.iter().zip(l1).zip(l2).zip(l3).take(common) {
            finite_step(&mut s0, &mut c0, x0);
            finite_step(&mut s1, &mut c1, x1);
            finite_step(&mut s2, &mut c2, x2);
            finite_step(&mut s3, &mut c3, x3);
        }
        let mut sums = [(s0, c0), (s1, c1), (s2, c2), (s3, c3)];
        for (lane, (s, c)) in lanes.iter().zip(sums.iter_mut()) {
            for &x in lane.get(common..).unwrap_or(&[]) {
                finite_step(s, c, x);
            }
        }
        for (lane, (s, c)) in lanes.iter().zip(sums).take(quad.len()) {
            // A sum that never left the finite numbers took the same steps as
            // `kahan_sum` (whose reset at an infinite partial sum never fired: once
            // infinite, a sum stays infinite or NaN); otherwise it is taken again.
            out.push(if s.is_finite() {
                (s + c, lane.len())
            } else {
                kahan_sum(lane.iter().copied())
            });
        }
    }
    out
}

/// [`kahan_step`] for a sum that stays finite (the caller checks the end result).
#[inline(always)]
fn finite_step(sum: &mut f64, c: &mut f64, x: f64) {
    let t = *sum + x;
    let (big, small) = if sum.abs() >= x.abs() {
        (*sum, x)
    } else {
        (x, *sum)
    };
    *c += (big - t) + small;
    *sum = t;
}

/// One addition of [`kahan_sum`], branch-free.
#[inline(always)]
fn kahan_step(sum: &mut f64, c: &mut f64, x: f64) {
    let t = *sum + x;
    let (big, small) = if sum.abs() >= x.abs() {
        (*sum, x)
    } else {
        (x, *sum)
    };
    let corr = (big - t) + small;
    *c = if t.is_infinite() { 0.0 } else { *c + corr };
    *sum = t;
}

fn avg(xs: impl Iterator<Item = f64> + Clone) -> Option<f64> {
    let (sum, n) = kahan_sum(xs.clone());
    if n == 0 {
        return None;
    }
    if sum.is_infinite() && xs.clone().all(f64::is_finite) {
        // Overflowed: an incremental mean stays finite where the values are.
        let mut mean = 0.0;
        for (i, x) in xs.enumerate() {
            mean += x / (i + 1) as f64 - mean / (i + 1) as f64;
        }
        return Some(mean);
    }
    Some(sum / n as f64)
}

/// Population variance (Welford).
fn variance(xs: impl Iterator<Item = f64>) -> Option<f64> {
    let (mut n, mut mean, mut m2) = (0.0, 0.0, 0.0);
    for x in xs {
        n += 1.0;
        let d = x - mean;
        mean += d / n;
        m2 += d * (x - mean);
    }
    (n > 0.0).then(|| m2 / n)
}

/// The φ-quantile of `xs` with linear interpolation, as Prometheus' `quantile`.
pub(crate) fn quantile(q: f64, xs: &mut [f64]) -> f64 {
    if xs.is_empty() || q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    // Go's sort.Float64s puts NaN first.
    xs.sort_by(|a, b| match (a.is_nan(), b.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Less,
        (false, true) => std::cmp::Ordering::Greater,
        _ => a.total_cmp(b),
    });
    let n = xs.len() as f64;
    let rank = q * (n - 1.0);
    let lower = rank.floor().max(0.0) as usize;
    let upper = (lower + 1).min(xs.len() - 1);
    let weight = rank - rank.floor();
    xs[lower] * (1.0 - weight) + xs[upper] * weight
}

/// The aggregation kernels shared by `sum`/`avg`/... and `*_over_time`.
pub(crate) fn aggregate_values(op: &str, xs: impl Iterator<Item = f64> + Clone) -> Option<f64> {
    let mut it = xs.clone().peekable();
    it.peek()?;
    match op {
        "sum" => Some(kahan_sum(xs).0),
        "avg" => avg(xs),
        "count" => Some(xs.count() as f64),
        "group" => Some(1.0),
        "min" => xs.reduce(|m, x| if x < m || m.is_nan() { x } else { m }),
        "max" => xs.reduce(|m, x| if x > m || m.is_nan() { x } else { m }),
        "stddev" => variance(xs).map(f64::sqrt),
        "stdvar" => variance(xs),
        _ => None,
    }
}

#[cfg(test)]
mod sum_tests {
    use super::{kahan_sum, window_sums};
    use crate::eval::{Slices, WindowInput};

    /// Four-lane window sums equal `kahan_sum` over each window bit for bit, with
    /// large, tiny, infinite and NaN values and windows of unequal lengths.
    #[test]
    fn window_sums_equal_kahan_sum_per_window() {
        let mut x = 5u64;
        let mut next = |n: u64| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (x >> 33) % n
        };
        let specials = [
            1e300,
            -1e300,
            1e-300,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            1e16,
            1.0,
        ];
        for case in 0..200 {
            let vs: Vec<f64> = (0..next(300))
                .map(|_| match next(10) {
                    0 if case % 3 == 0 => specials[next(specials.len() as u64) as usize],
                    _ => next(1 << 20) as f64 / 7.0 - 70_000.0,
                })
                .collect();
            let ts: Vec<i64> = (0..vs.len() as i64).collect();
            let all = Slices::new(&ts, &vs);
            let windows: Vec<WindowInput<'_>> = (0..next(40))
                .map(|_| {
                    let a = next(vs.len() as u64 + 1) as usize;
                    let b = a + next(40) as usize;
                    WindowInput::Samples(all.window(a, b))
                })
                .collect();
            let got = window_sums(&windows);
            for (w, (sum, n)) in windows.iter().zip(got) {
                let WindowInput::Samples(s) = w else { continue };
                let (want, wn) = kahan_sum(s.values());
                assert_eq!(n, wn);
                assert!(
                    sum.to_bits() == want.to_bits() || (sum.is_nan() && want.is_nan()),
                    "case {case}: {sum} vs {want}"
                );
            }
        }
    }
}
