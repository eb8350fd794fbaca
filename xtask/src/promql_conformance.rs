//! `cargo xtask promql-conformance --prometheus-checkout DIR`: runs the PromQL test
//! files of a Prometheus checkout (`promql/promqltest/testdata/*.test`, read in place,
//! never copied into this repository) against `tidemark-promql` over its in-memory
//! storage, and reports passed/failed/skipped eval cases per file. A case is skipped
//! when it needs what the engine does not claim: an unsupported feature (the engine
//! answers `Unsupported`), native histograms, or warning/info annotations.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use tidemark_promql::promql_parser::label::MatchOp;
use tidemark_promql::promql_parser::parser::Expr;
use tidemark_promql::{
    Error as PromError, Labels, MemStorage, QueryOptions, QueryValue, STALE_NAN_BITS, api,
    instant_query, range_query,
};

#[derive(Default, Clone)]
struct Tally {
    passed: usize,
    failed: usize,
    skipped: usize,
    unparsed: usize,
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    let mut checkout = None;
    let mut write = None;
    let mut failures_out = None;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--prometheus-checkout" => {
                i += 1;
                checkout = args.get(i).map(PathBuf::from);
            }
            "--markdown" => {
                i += 1;
                write = args.get(i).map(PathBuf::from);
            }
            "--failures" => {
                i += 1;
                failures_out = args.get(i).map(PathBuf::from);
            }
            other => bail!("unknown option {other:?}"),
        }
        i += 1;
    }
    let Some(checkout) = checkout else {
        bail!("--prometheus-checkout DIR is required (a Prometheus source tree)");
    };
    let dir = checkout.join("promql/promqltest/testdata");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "test"))
        .collect();
    files.sort();
    let mut rows = Vec::new();
    let mut failures = String::new();
    let mut total = Tally::default();
    for f in &files {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        let name = f
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let t = run_file(&name, &text, &mut failures);
        total.passed += t.passed;
        total.failed += t.failed;
        total.skipped += t.skipped;
        total.unparsed += t.unparsed;
        rows.push((name, t));
    }
    let mut md = String::new();
    writeln!(
        md,
        "| file | passed | failed | skipped (unsupported) | not parsed | pass rate of supported |"
    )?;
    writeln!(md, "|---|---:|---:|---:|---:|---:|")?;
    let rate = |t: &Tally| {
        let run = t.passed + t.failed;
        if run == 0 {
            "–".to_owned()
        } else {
            format!("{:.1}%", 100.0 * t.passed as f64 / run as f64)
        }
    };
    for (name, t) in &rows {
        writeln!(
            md,
            "| {name} | {} | {} | {} | {} | {} |",
            t.passed,
            t.failed,
            t.skipped,
            t.unparsed,
            rate(t)
        )?;
    }
    writeln!(
        md,
        "| **total** | **{}** | **{}** | **{}** | **{}** | **{}** |",
        total.passed,
        total.failed,
        total.skipped,
        total.unparsed,
        rate(&total)
    )?;
    print!("{md}");
    if let Some(path) = write {
        std::fs::write(&path, &md).with_context(|| format!("writing {}", path.display()))?;
    }
    let failures_path = failures_out
        .unwrap_or_else(|| crate::project_root().join("target/xtask/promql-failures.txt"));
    if let Some(parent) = failures_path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&failures_path, &failures)?;
    eprintln!("failure details: {}", failures_path.display());
    Ok(())
}

/// One expected series: labels and its values (per step for range evals).
struct Expected {
    labels: Labels,
    vals: Vec<Option<f64>>,
}

enum Outcome {
    Pass,
    /// The query uses syntax `promql-parser` does not parse (Prometheus' experimental
    /// duration expressions, `anchored`/`smoothed`, ...).
    Unparsed(String),
    Fail(String),
    Skip(String),
}

struct EvalCase {
    line: usize,
    query: String,
    range: Option<(i64, i64, i64)>,
    at_ms: i64,
    should_fail: bool,
    ordered: bool,
    needs_annotations: bool,
    expected: Vec<Expected>,
    scalar: Option<f64>,
    string: Option<String>,
    unsupported_expectation: Option<String>,
}

fn run_file(name: &str, text: &str, failures: &mut String) -> Tally {
    let lines: Vec<&str> = text.lines().collect();
    let mut storage = MemStorage::new();
    // Metric names loaded with native histogram values or start timestamps
    // (`name@st`): evals naming them are skipped.
    let mut histogram_metrics: Vec<String> = Vec::new();
    let mut tally = Tally::default();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim();
        if line.is_empty() || line.starts_with('#') {
            i += 1;
            continue;
        }
        if line == "clear" {
            storage.clear();
            histogram_metrics.clear();
            i += 1;
            continue;
        }
        if let Some(rest) = line.strip_prefix("load") {
            let (nhcb, interval) = match rest.strip_prefix("_with_nhcb") {
                Some(r) => (true, r.trim()),
                None => (false, rest.trim()),
            };
            let step = duration(interval).unwrap_or(0);
            i += 1;
            while i < lines.len() && !lines[i].trim().is_empty() {
                let l = lines[i].trim();
                if !l.starts_with('#') {
                    let metric_name = l
                        .split(['{', ' ', '\t', '@'])
                        .next()
                        .unwrap_or("")
                        .to_owned();
                    match parse_series_line(l) {
                        Some((labels, vals)) => {
                            if nhcb && metric_name.ends_with("_bucket") {
                                // The classic buckets also load as a native histogram.
                                histogram_metrics
                                    .push(metric_name.trim_end_matches("_bucket").to_owned());
                            }
                            let samples = vals
                                .into_iter()
                                .enumerate()
                                .filter_map(|(j, v)| v.map(|v| (j as i64 * step, v)));
                            storage.add(labels, samples.collect::<Vec<_>>());
                        }
                        None => histogram_metrics.push(metric_name),
                    }
                }
                i += 1;
            }
            continue;
        }
        if line.starts_with("eval") {
            let start_line = i + 1;
            let mut body = Vec::new();
            i += 1;
            while i < lines.len() && !lines[i].trim().is_empty() {
                let l = lines[i].trim();
                if !l.starts_with('#') {
                    body.push(l);
                }
                i += 1;
            }
            let outcome = match parse_eval(line, &body, start_line) {
                Err(reason) => Outcome::Skip(reason),
                Ok(case) => {
                    if histogram_metrics.iter().any(|m| mentions(&case.query, m)) {
                        Outcome::Skip("native histograms or start timestamps".into())
                    } else {
                        run_case(&storage, &case)
                    }
                }
            };
            match outcome {
                Outcome::Pass => tally.passed += 1,
                Outcome::Unparsed(why) => {
                    tally.unparsed += 1;
                    let _ = writeln!(failures, "UNPARSED {name}:{start_line}: {line}: {why}");
                }
                Outcome::Skip(why) => {
                    tally.skipped += 1;
                    let _ = writeln!(failures, "SKIP {name}:{start_line}: {why}");
                }
                Outcome::Fail(why) => {
                    tally.failed += 1;
                    let _ = writeln!(failures, "{name}:{start_line}: {line}\n    {why}\n");
                }
            }
            continue;
        }
        // Other statements (e.g. `load_with_nhcb` variants) are ignored.
        i += 1;
    }
    tally
}

/// Whether `query` names the metric `name` (as a whole identifier).
fn mentions(query: &str, name: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    !name.is_empty()
        && query.match_indices(name).any(|(i, _)| {
            !query[..i].chars().next_back().is_some_and(ident)
                && !query[i + name.len()..].chars().next().is_some_and(ident)
        })
}

fn duration(s: &str) -> Option<i64> {
    let s = s.trim();
    if let Some(rest) = s.strip_prefix('-') {
        return duration(rest).map(|d| -d);
    }
    if let Ok(secs) = s.parse::<f64>() {
        return Some((secs * 1000.0).round() as i64);
    }
    api::prom_duration_ms(s)
}

fn parse_eval(line: &str, body: &[&str], line_no: usize) -> Result<EvalCase, String> {
    let (head, rest) = line.split_once(char::is_whitespace).ok_or("empty eval")?;
    let modifier = head.strip_prefix("eval").unwrap_or("");
    let mut case = EvalCase {
        line: line_no,
        query: String::new(),
        range: None,
        at_ms: 0,
        should_fail: modifier == "_fail",
        ordered: modifier == "_ordered",
        needs_annotations: matches!(modifier, "_warn" | "_info"),
        expected: Vec::new(),
        scalar: None,
        string: None,
        unsupported_expectation: None,
    };
    let rest = rest.trim();
    if let Some(r) = rest.strip_prefix("instant") {
        let r = r.trim();
        let r = if let Some(a) = r.strip_prefix("at ") {
            let a = a.trim_start();
            let (t, q) = a.split_once(char::is_whitespace).ok_or("no query")?;
            case.at_ms = duration(t).ok_or_else(|| format!("bad time {t}"))?;
            q
        } else {
            r
        };
        case.query = r.trim().to_owned();
    } else if let Some(r) = rest.strip_prefix("range from ") {
        let (from, r) = r.split_once(" to ").ok_or("bad range")?;
        let (to, r) = r.split_once(" step ").ok_or("bad range")?;
        let (step, q) = r
            .trim()
            .split_once(char::is_whitespace)
            .ok_or("bad range")?;
        let f = duration(from).ok_or("bad from")?;
        let t = duration(to).ok_or("bad to")?;
        let s = duration(step).ok_or("bad step")?;
        case.range = Some((f, t, s));
        case.query = q.trim().to_owned();
    } else {
        return Err("unknown eval form".into());
    }
    for l in body {
        if let Some(e) = l.strip_prefix("expect ") {
            let e = e.trim();
            if e.starts_with("fail") {
                case.should_fail = true;
            } else if e.starts_with("ordered") {
                case.ordered = true;
            } else if e.starts_with("warn") || e.starts_with("info") {
                case.needs_annotations = true;
            } else if let Some(s) = e.strip_prefix("string") {
                let s = s.trim();
                case.string = Some(unquote(s.trim()));
            } else if e.starts_with("range vector") {
                case.unsupported_expectation =
                    Some("range vector results of instant queries".into());
            }
            continue;
        }
        if l.starts_with("expected_fail_message") || l.starts_with("expected_fail_regexp") {
            continue;
        }
        if case.range.is_none()
            && let Some(v) = parse_number(l)
        {
            case.scalar = Some(v);
            continue;
        }
        match parse_series_line(l) {
            Some((labels, vals)) => case.expected.push(Expected { labels, vals }),
            None => case.unsupported_expectation = Some("native histogram values".into()),
        }
    }
    Ok(case)
}

/// A Go string literal's text (`"..."`, `'...'` or a raw `` `...` ``).
fn unquote(s: &str) -> String {
    for q in ['"', '\'', '`'] {
        if let Some(inner) = s.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            return inner.replace("\\\"", "\"");
        }
    }
    s.to_owned()
}

fn parse_number(s: &str) -> Option<f64> {
    match s {
        "Inf" | "+Inf" | "inf" | "+inf" => Some(f64::INFINITY),
        "-Inf" | "-inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        "stale" => Some(f64::from_bits(STALE_NAN_BITS)),
        _ => s.parse().ok(),
    }
}

/// `metric{a="b"} 1 2+3x4 _ stale`: labels and values (`None` for `_`). `None` when the
/// line holds native histogram values.
fn parse_series_line(line: &str) -> Option<(Labels, Vec<Option<f64>>)> {
    if line.contains("{{") {
        return None;
    }
    let split = match line.find('{') {
        Some(_) => line.rfind('}').map(|i| i + 1)?,
        None => line.find(char::is_whitespace).unwrap_or(line.len()),
    };
    let (metric, values) = line.split_at(split);
    let labels = parse_metric(metric.trim())?;
    let mut vals = Vec::new();
    for item in values.split_whitespace() {
        expand_item(item, &mut vals)?;
    }
    Some((labels, vals))
}

fn parse_metric(text: &str) -> Option<Labels> {
    // `{}`: a series without labels (`vector(1)`, `absent(...)`, `year()`), which is
    // not a selector the parser reads.
    if text == "{}" {
        return Some(Labels::new());
    }
    let expr = tidemark_promql::parse(text).ok()?;
    let Expr::VectorSelector(vs) = expr else {
        return None;
    };
    let mut labels: Labels = Vec::new();
    if let Some(n) = vs.name {
        labels.push(("__name__".into(), n));
    }
    for m in vs.matchers.matchers {
        if matches!(m.op, MatchOp::Equal) && !labels.iter().any(|(n, _)| *n == m.name) {
            labels.push((m.name, m.value));
        }
    }
    labels.sort();
    Some(labels)
}

/// One item of the series notation: `v`, `_`, `stale`, `vxN`, `_xN`, `a+bxN`, `a-bxN`.
fn expand_item(item: &str, out: &mut Vec<Option<f64>>) -> Option<()> {
    if let Some((head, count)) = item.rsplit_once('x')
        && let Ok(n) = count.parse::<usize>()
    {
        if head == "_" {
            out.extend(std::iter::repeat_n(None, n));
            return Some(());
        }
        // Find the sign that splits start from increment (not a leading sign or an
        // exponent's).
        let bytes = head.as_bytes();
        let mut split = None;
        for (i, &b) in bytes.iter().enumerate().skip(1) {
            if (b == b'+' || b == b'-') && !matches!(bytes.get(i - 1), Some(b'e' | b'E')) {
                split = Some(i);
            }
        }
        let (start, inc) = match split {
            Some(i) => (
                parse_number(&head[..i])?,
                parse_number(head[i..].trim_start_matches('+'))?,
            ),
            None => (parse_number(head)?, 0.0),
        };
        if head.starts_with("stale") {
            return None;
        }
        for j in 0..=n {
            out.push(Some(start + inc * j as f64));
        }
        return Some(());
    }
    if item == "_" {
        out.push(None);
        return Some(());
    }
    out.push(Some(parse_number(item)?));
    Some(())
}

fn almost_equal(a: f64, b: f64) -> bool {
    if a.is_nan() && b.is_nan() {
        return true;
    }
    if a == b {
        return true;
    }
    let diff = (a - b).abs();
    if a == 0.0 || b == 0.0 || diff < f64::MIN_POSITIVE {
        return diff < 1e-6 * f64::MIN_POSITIVE;
    }
    diff / (a.abs() + b.abs()).min(f64::MAX) < 1e-6
}

fn run_case(storage: &MemStorage, case: &EvalCase) -> Outcome {
    if case.needs_annotations {
        return Outcome::Skip("warning/info annotations".into());
    }
    if let Some(why) = &case.unsupported_expectation {
        return Outcome::Skip(why.clone());
    }
    let opts = QueryOptions::default();
    let result = match case.range {
        Some((f, t, s)) => range_query(storage, &case.query, f, t, s, &opts),
        None => instant_query(storage, &case.query, case.at_ms, &opts),
    };
    let value = match result {
        Err(PromError::Unsupported(what)) => return Outcome::Skip(what),
        Err(PromError::BadData(msg)) if !case.should_fail && msg.starts_with("parse error") => {
            return Outcome::Unparsed(msg);
        }
        Err(e) if case.should_fail => {
            let _ = e;
            return Outcome::Pass;
        }
        Err(e) => return Outcome::Fail(format!("error: {e}")),
        Ok(_) if case.should_fail => {
            return Outcome::Fail("expected an error, got a result".into());
        }
        Ok(v) => v,
    };
    let _ = case.line;
    compare(case, &value).map_or(Outcome::Pass, Outcome::Fail)
}

fn compare(case: &EvalCase, value: &QueryValue) -> Option<String> {
    match value {
        QueryValue::Scalar { v, .. } => {
            let Some(exp) = case.scalar else {
                return Some(format!(
                    "got scalar {v}, expected {} series",
                    case.expected.len()
                ));
            };
            (!almost_equal(exp, *v)).then(|| format!("expected scalar {exp}, got {v}"))
        }
        QueryValue::String { s, .. } => match &case.string {
            Some(exp) if exp == s => None,
            other => Some(format!("expected {other:?}, got string {s:?}")),
        },
        QueryValue::Vector(samples) => {
            if case.scalar.is_some() {
                return Some("expected a scalar, got a vector".into());
            }
            if samples.len() != case.expected.len() {
                return Some(format!(
                    "expected {} samples, got {}: {}",
                    case.expected.len(),
                    samples.len(),
                    samples
                        .iter()
                        .map(|s| format!("{:?}={}", s.labels, s.v))
                        .collect::<Vec<_>>()
                        .join("; ")
                ));
            }
            for (pos, e) in case.expected.iter().enumerate() {
                let Some(found) = samples.iter().position(|s| s.labels == e.labels) else {
                    return Some(format!("expected series {:?} not found", e.labels));
                };
                if case.ordered && found != pos {
                    return Some(format!(
                        "series {:?} at position {found}, expected {pos}",
                        e.labels
                    ));
                }
                let exp = e.vals.first().copied().flatten().unwrap_or(f64::NAN);
                if !almost_equal(exp, samples[found].v) {
                    return Some(format!(
                        "{:?}: expected {exp}, got {}",
                        e.labels, samples[found].v
                    ));
                }
            }
            None
        }
        QueryValue::Matrix(series) => {
            let Some((start, _, step)) = case.range else {
                return Some("got a matrix for an instant query".into());
            };
            if series.len() != case.expected.len() {
                return Some(format!(
                    "expected {} series, got {}: {:?}",
                    case.expected.len(),
                    series.len(),
                    series.iter().map(|s| &s.labels).collect::<Vec<_>>()
                ));
            }
            for e in &case.expected {
                let Some(found) = series.iter().find(|s| s.labels == e.labels) else {
                    return Some(format!("expected series {:?} not found", e.labels));
                };
                let exp: Vec<(i64, f64)> = e
                    .vals
                    .iter()
                    .enumerate()
                    .filter_map(|(i, v)| v.map(|v| (start + i as i64 * step, v)))
                    .collect();
                if exp.len() != found.points.len()
                    || exp
                        .iter()
                        .zip(&found.points)
                        .any(|(a, b)| a.0 != b.0 || !almost_equal(a.1, b.1))
                {
                    return Some(format!(
                        "{:?}: expected {exp:?}, got {:?}",
                        e.labels, found.points
                    ));
                }
            }
            None
        }
    }
}
