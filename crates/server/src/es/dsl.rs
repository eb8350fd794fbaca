//! The query DSL subset, translated into the façade's [`tidemark::SearchRequest`].
//! Anything outside it is a `400` naming the clause, never a silent wrong answer.

use serde_json::{Map, Value};
use tidemark::{
    Agg, CalendarUnit, Filter, Interval, Mapping, MetricKind, Order, SearchRequest, parse_time,
};

use crate::error::{Error, Result};

fn unsupported(what: impl std::fmt::Display) -> Error {
    Error::bad(
        "parsing_exception",
        format!("{what} is not supported by Tidemark"),
    )
}

fn bad(reason: impl Into<String>) -> Error {
    Error::bad("parsing_exception", reason)
}

/// The only entry of a one-key object: `{"term": {...}}` → `("term", {...})`.
fn single(v: &Value, context: &str) -> Result<(String, Value)> {
    match v {
        Value::Object(o) if o.len() == 1 => o
            .iter()
            .next()
            .map(|(k, v)| (k.clone(), v.clone()))
            .ok_or_else(|| bad(format!("[{context}] malformed"))),
        _ => Err(bad(format!(
            "[{context}] malformed query, expected an object with one key"
        ))),
    }
}

/// A time: epoch milliseconds (number or digits), RFC 3339, or date math from `now`
/// (`now-1h`, `now-7d/d`).
pub fn parse_date(v: &Value, now_ms: i64) -> Result<i64> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .ok_or_else(|| bad(format!("invalid date [{n}]"))),
        Value::String(s) => {
            let s = s.trim();
            if let Some(rest) = s.strip_prefix("now") {
                return date_math(now_ms, rest);
            }
            if let Some((anchor, math)) = s.split_once("||") {
                let base = parse_time(anchor).map_err(|e| bad(e.to_string()))?;
                return date_math(base, math);
            }
            if let Ok(d) = s.parse::<i64>() {
                return Ok(d);
            }
            // Date-only ISO forms (2025-11-30) are midnight UTC.
            if s.len() == 10 && s.as_bytes().get(4) == Some(&b'-') {
                return parse_time(&format!("{s}T00:00:00Z")).map_err(|e| bad(e.to_string()));
            }
            parse_time(s).map_err(|e| bad(e.to_string()))
        }
        other => Err(bad(format!("invalid date [{other}]"))),
    }
}

fn unit_millis(u: char) -> Option<i64> {
    Some(match u {
        's' => 1000,
        'm' => 60_000,
        'h' | 'H' => 3_600_000,
        'd' => 86_400_000,
        'w' => 7 * 86_400_000,
        _ => return None,
    })
}

fn calendar_of(u: &str) -> Option<CalendarUnit> {
    Some(match u {
        "m" | "1m" | "minute" => CalendarUnit::Minute,
        "h" | "1h" | "hour" => CalendarUnit::Hour,
        "d" | "1d" | "day" => CalendarUnit::Day,
        "w" | "1w" | "week" => CalendarUnit::Week,
        "M" | "1M" | "month" => CalendarUnit::Month,
        "q" | "1q" | "quarter" => CalendarUnit::Quarter,
        "y" | "1y" | "year" => CalendarUnit::Year,
        _ => return None,
    })
}

/// `+1h`, `-7d`, `/d` steps applied to `base`.
fn date_math(mut t: i64, mut rest: &str) -> Result<i64> {
    while !rest.is_empty() {
        let op = rest.as_bytes().first().copied();
        rest = rest.get(1..).unwrap_or("");
        match op {
            Some(b'/') => {
                let unit: String = rest.chars().take(1).collect();
                rest = rest.get(unit.len()..).unwrap_or("");
                let cal = calendar_of(&unit)
                    .ok_or_else(|| bad(format!("unknown rounding unit [{unit}] in date math")))?;
                t = Interval::Calendar(cal).bucket_start(t);
            }
            Some(sign @ (b'+' | b'-')) => {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                rest = rest.get(digits.len()..).unwrap_or("");
                let n: i64 = if digits.is_empty() {
                    1
                } else {
                    digits
                        .parse()
                        .map_err(|_| bad("date math amount too large"))?
                };
                let unit = rest
                    .chars()
                    .next()
                    .ok_or_else(|| bad("date math needs a unit"))?;
                rest = rest.get(unit.len_utf8()..).unwrap_or("");
                let delta = match unit_millis(unit) {
                    Some(ms) => n.checked_mul(ms).ok_or_else(|| bad("date math overflow"))?,
                    None => {
                        let cal = calendar_of(&unit.to_string())
                            .ok_or_else(|| bad(format!("unknown unit [{unit}] in date math")))?;
                        // Months, quarters and years: step bucket starts.
                        let mut x = t;
                        for _ in 0..n.min(10_000) {
                            x = if sign == b'+' {
                                Interval::Calendar(cal).next_start(x)
                            } else {
                                Interval::Calendar(cal).bucket_start(x.saturating_sub(1))
                            };
                        }
                        t = x;
                        continue;
                    }
                };
                t = if sign == b'+' {
                    t.saturating_add(delta)
                } else {
                    t.saturating_sub(delta)
                };
            }
            _ => return Err(bad(format!("malformed date math [{rest}]"))),
        }
    }
    Ok(t)
}

fn strings(v: &Value, context: &str) -> Result<Vec<String>> {
    let one = |v: &Value| -> Result<String> {
        match v {
            Value::String(s) => Ok(s.clone()),
            Value::Number(n) => Ok(n.to_string()),
            Value::Bool(b) => Ok(b.to_string()),
            other => Err(bad(format!(
                "[{context}] expects strings or numbers, found {other}"
            ))),
        }
    };
    match v {
        Value::Array(a) => a.iter().map(one).collect(),
        other => Ok(vec![one(other)?]),
    }
}

fn clauses(v: Option<&Value>) -> Vec<Value> {
    match v {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(other) => vec![other.clone()],
    }
}

/// Translates a `query` object.
///
/// # Errors
/// `400 parsing_exception` naming the unsupported clause.
pub fn query(v: &Value, mapping: &Mapping, now_ms: i64) -> Result<Filter> {
    let (kind, body) = single(v, "query")?;
    let ts = mapping.timestamp_field();
    Ok(match kind.as_str() {
        "match_all" => Filter::All,
        "match_none" => Filter::Not(Box::new(Filter::All)),
        "bool" => {
            let Value::Object(b) = &body else {
                return Err(bad("[bool] expects an object"));
            };
            for k in b.keys() {
                if !matches!(
                    k.as_str(),
                    "filter" | "must" | "must_not" | "should" | "minimum_should_match" | "boost"
                ) {
                    return Err(unsupported(format!("[bool.{k}]")));
                }
            }
            let mut all = Vec::new();
            for key in ["filter", "must"] {
                for c in clauses(b.get(key)) {
                    all.push(query(&c, mapping, now_ms)?);
                }
            }
            for c in clauses(b.get("must_not")) {
                all.push(Filter::Not(Box::new(query(&c, mapping, now_ms)?)));
            }
            let should = clauses(b.get("should"));
            if !should.is_empty() {
                let msm = match b.get("minimum_should_match") {
                    None => {
                        if all.is_empty() {
                            1
                        } else {
                            0
                        }
                    }
                    Some(Value::Number(n)) => n.as_u64().unwrap_or(1),
                    Some(Value::String(s)) => s
                        .parse()
                        .map_err(|_| unsupported(format!("[minimum_should_match] = {s}")))?,
                    Some(other) => {
                        return Err(unsupported(format!("[minimum_should_match] = {other}")));
                    }
                };
                match msm {
                    // Scoring only: without scores, optional clauses change nothing.
                    0 => {}
                    1 => all.push(Filter::Or(
                        should
                            .iter()
                            .map(|c| query(c, mapping, now_ms))
                            .collect::<Result<_>>()?,
                    )),
                    n => return Err(unsupported(format!("[minimum_should_match] = {n}"))),
                }
            }
            if all.is_empty() {
                Filter::All
            } else {
                Filter::And(all)
            }
        }
        "range" => {
            let (field, spec) = single(&body, "range")?;
            if field != ts {
                return Err(unsupported(format!(
                    "[range] on [{field}] (only on the timestamp field [{ts}])"
                )));
            }
            let Value::Object(spec) = spec else {
                return Err(bad("[range] expects an object"));
            };
            let (mut min, mut max) = (i64::MIN, i64::MAX);
            for (k, v) in &spec {
                match k.as_str() {
                    "gte" | "from" => min = min.max(parse_date(v, now_ms)?),
                    "gt" => min = min.max(parse_date(v, now_ms)?.saturating_add(1)),
                    "lte" | "to" => max = max.min(parse_date(v, now_ms)?),
                    "lt" => max = max.min(parse_date(v, now_ms)?.saturating_sub(1)),
                    "format" => {
                        let f = v.as_str().unwrap_or("");
                        if !f.split("||").all(|f| {
                            matches!(
                                f,
                                "epoch_millis"
                                    | "strict_date_optional_time"
                                    | "date_optional_time"
                                    | "strict_date_time"
                            )
                        }) {
                            return Err(unsupported(format!("[range] format [{f}]")));
                        }
                    }
                    "time_zone" => {
                        if !matches!(v.as_str(), Some("UTC" | "Z" | "+00:00" | "Etc/UTC")) {
                            return Err(unsupported(format!("[range] time_zone {v} (only UTC)")));
                        }
                    }
                    "boost" => {}
                    other => return Err(unsupported(format!("[range.{other}]"))),
                }
            }
            Filter::Time { min, max }
        }
        "term" | "terms" | "match" | "match_phrase" => {
            let Value::Object(o) = &body else {
                return Err(bad(format!("[{kind}] expects an object")));
            };
            let mut it = o.iter().filter(|(k, _)| k.as_str() != "boost");
            let (Some((field, v)), None) = (it.next(), it.next()) else {
                return Err(bad(format!("[{kind}] expects exactly one field")));
            };
            let v = match v {
                Value::Object(inner) if kind != "terms" => inner
                    .get("value")
                    .or_else(|| inner.get("query"))
                    .cloned()
                    .ok_or_else(|| bad(format!("[{kind}] on [{field}] has no value")))?,
                other => other.clone(),
            };
            if kind == "terms" && !v.is_array() {
                return Err(bad("[terms] expects a list of values"));
            }
            if field == "_id" {
                Filter::Ids(strings(&v, &kind)?)
            } else {
                Filter::Terms {
                    field: field.clone(),
                    values: strings(&v, &kind)?,
                }
            }
        }
        "ids" => {
            let values = body
                .get("values")
                .ok_or_else(|| bad("[ids] needs [values]"))?;
            Filter::Ids(strings(values, "ids")?)
        }
        "prefix" | "regexp" | "wildcard" => {
            let (field, v) = single(&body, &kind)?;
            let v = match v {
                Value::Object(o) => {
                    for (k, x) in &o {
                        match k.as_str() {
                            "value" | "wildcard" | "boost" | "rewrite" => {}
                            "case_insensitive" if x == &Value::Bool(false) => {}
                            "flags" if kind == "regexp" && x.as_str() == Some("ALL") => {}
                            "max_determinized_states" if kind == "regexp" => {}
                            other => {
                                return Err(unsupported(format!("[{kind}.{other}] = {x}")));
                            }
                        }
                    }
                    o.get("value")
                        .or_else(|| o.get("wildcard"))
                        .cloned()
                        .unwrap_or(Value::Null)
                }
                other => other,
            };
            let Value::String(v) = v else {
                return Err(bad(format!("[{kind}] expects a string, found {v}")));
            };
            match (kind.as_str(), field == "_id") {
                ("prefix", true) => Filter::IdPrefix(v),
                (_, true) => {
                    return Err(unsupported(format!("[{kind}] on [_id] (only [prefix])")));
                }
                ("prefix", false) => Filter::Prefix { field, prefix: v },
                ("regexp", false) => Filter::Regex { field, pattern: v },
                _ => Filter::Wildcard { field, pattern: v },
            }
        }
        "exists" => match body.get("field") {
            Some(Value::String(f)) => Filter::Exists(f.clone()),
            _ => return Err(bad("[exists] needs [field]")),
        },
        "constant_score" => match body.get("filter") {
            Some(f) => query(f, mapping, now_ms)?,
            None => return Err(bad("[constant_score] needs [filter]")),
        },
        other => return Err(unsupported(format!("the [{other}] query"))),
    })
}

fn interval_of(spec: &Map<String, Value>) -> Result<Interval> {
    if let Some(v) = spec.get("fixed_interval") {
        let s = v
            .as_str()
            .ok_or_else(|| bad("[fixed_interval] must be a string"))?;
        return Ok(Interval::Fixed(
            tidemark::parse_interval(s).map_err(|e| bad(e.to_string()))?,
        ));
    }
    if let Some(v) = spec
        .get("calendar_interval")
        .or_else(|| spec.get("interval"))
    {
        let s = v
            .as_str()
            .ok_or_else(|| bad("[calendar_interval] must be a string"))?;
        if let Some(c) = calendar_of(s) {
            return Ok(Interval::Calendar(c));
        }
        if spec.contains_key("interval") {
            return Ok(Interval::Fixed(
                tidemark::parse_interval(s).map_err(|e| bad(e.to_string()))?,
            ));
        }
        return Err(bad(format!(
            "The supplied interval [{s}] could not be parsed as a calendar interval."
        )));
    }
    Err(bad(
        "[date_histogram] needs [fixed_interval] or [calendar_interval]",
    ))
}

/// Translates an `aggs` object.
///
/// # Errors
/// `400 parsing_exception` naming the unsupported aggregation or option.
pub fn aggs(v: &Value, mapping: &Mapping, now_ms: i64) -> Result<Vec<(String, Agg)>> {
    let Value::Object(o) = v else {
        return Err(bad("[aggs] expects an object"));
    };
    let mut out = Vec::new();
    for (name, def) in o {
        let Value::Object(def) = def else {
            return Err(bad(format!("aggregation [{name}] expects an object")));
        };
        let subs = match def.get("aggs").or_else(|| def.get("aggregations")) {
            Some(s) => aggs(s, mapping, now_ms)?,
            None => Vec::new(),
        };
        let mut kinds = def
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "aggs" | "aggregations" | "meta"));
        let (Some((kind, spec)), None) = (kinds.next(), kinds.next()) else {
            return Err(bad(format!(
                "aggregation [{name}] must name exactly one type"
            )));
        };
        let Value::Object(spec) = spec else {
            return Err(bad(format!("[{kind}] in [{name}] expects an object")));
        };
        let field = || -> Result<String> {
            match spec.get("field") {
                Some(Value::String(f)) => Ok(f.clone()),
                _ => Err(bad(format!("[{kind}] in [{name}] needs a [field]"))),
            }
        };
        let agg = match kind.as_str() {
            "date_histogram" => {
                let f = field()?;
                if f != mapping.timestamp_field() {
                    return Err(unsupported(format!(
                        "[date_histogram] on [{f}] (only on the timestamp field)"
                    )));
                }
                for k in spec.keys() {
                    if !matches!(
                        k.as_str(),
                        "field"
                            | "fixed_interval"
                            | "calendar_interval"
                            | "interval"
                            | "min_doc_count"
                            | "extended_bounds"
                            | "format"
                            | "time_zone"
                            | "order"
                            | "keyed"
                    ) {
                        return Err(unsupported(format!("[date_histogram.{k}]")));
                    }
                }
                if let Some(tz) = spec.get("time_zone")
                    && !matches!(tz.as_str(), Some("UTC" | "Z" | "+00:00" | "Etc/UTC"))
                {
                    return Err(unsupported(format!(
                        "[date_histogram] time_zone {tz} (only UTC)"
                    )));
                }
                if spec.get("keyed").is_some_and(|k| k != &Value::Bool(false)) {
                    return Err(unsupported("[date_histogram] keyed: true"));
                }
                if let Some(order) = spec.get("order")
                    && order != &serde_json::json!({"_key": "asc"})
                {
                    return Err(unsupported(format!("[date_histogram] order {order}")));
                }
                let bounds = match spec.get("extended_bounds") {
                    None => None,
                    Some(b) => {
                        let lo = b
                            .get("min")
                            .ok_or_else(|| bad("[extended_bounds] needs [min]"))?;
                        let hi = b
                            .get("max")
                            .ok_or_else(|| bad("[extended_bounds] needs [max]"))?;
                        Some((parse_date(lo, now_ms)?, parse_date(hi, now_ms)?))
                    }
                };
                Agg::DateHistogram {
                    interval: interval_of(spec)?,
                    min_doc_count: spec
                        .get("min_doc_count")
                        .and_then(Value::as_u64)
                        .unwrap_or(0),
                    extended_bounds: bounds,
                    aggs: subs,
                }
            }
            "terms" => {
                for k in spec.keys() {
                    if !matches!(
                        k.as_str(),
                        "field" | "size" | "min_doc_count" | "order" | "shard_size"
                    ) {
                        return Err(unsupported(format!("[terms.{k}]")));
                    }
                }
                // Orders other than `_count` desc are sorted by `crate::es::multi`.
                crate::es::multi::TermsOrder::parse(spec.get("order"))?;
                let size = spec.get("size").and_then(Value::as_u64).unwrap_or(10);
                Agg::Terms {
                    field: field()?,
                    size: usize::try_from(size).unwrap_or(usize::MAX),
                    min_doc_count: spec
                        .get("min_doc_count")
                        .and_then(Value::as_u64)
                        .unwrap_or(1),
                    aggs: subs,
                }
            }
            metric @ ("min" | "max" | "avg" | "sum" | "value_count" | "cardinality") => {
                if !subs.is_empty() {
                    return Err(bad(format!(
                        "aggregation [{name}] of type [{metric}] cannot accept sub-aggregations"
                    )));
                }
                for k in spec.keys() {
                    if !matches!(k.as_str(), "field" | "precision_threshold") {
                        return Err(unsupported(format!("[{metric}.{k}]")));
                    }
                }
                let kind = match metric {
                    "min" => MetricKind::Min,
                    "max" => MetricKind::Max,
                    "avg" => MetricKind::Avg,
                    "sum" => MetricKind::Sum,
                    "value_count" => MetricKind::ValueCount,
                    _ => MetricKind::Cardinality,
                };
                Agg::Metric {
                    kind,
                    field: field()?,
                }
            }
            other => return Err(unsupported(format!("the [{other}] aggregation"))),
        };
        out.push((name.clone(), agg));
    }
    Ok(out)
}

/// The most hits `from + size` may reach (Elasticsearch's `index.max_result_window`).
pub const MAX_RESULT_WINDOW: usize = 10_000;

/// Translates a `_search` body (and URL parameters already merged into it).
///
/// # Errors
/// `400 parsing_exception` naming the unsupported part.
pub fn search(body: &Value, mapping: &Mapping, now_ms: i64) -> Result<SearchRequest> {
    let empty = Map::new();
    let o = match body {
        Value::Null => &empty,
        Value::Object(o) => o,
        _ => return Err(bad("the search body must be an object")),
    };
    let mut req = SearchRequest::default();
    for (k, v) in o {
        match k.as_str() {
            "query" => req.filter = query(v, mapping, now_ms)?,
            "size" => req.size = as_usize(v, "size")?,
            "from" => req.from = as_usize(v, "from")?,
            "aggs" | "aggregations" => req.aggs = aggs(v, mapping, now_ms)?,
            "sort" => req.order = sort(v, mapping)?,
            // Tidemark's own: hits are the rollup documents of this resolution.
            "rollup" => {
                let text = v
                    .as_str()
                    .ok_or_else(|| bad("[rollup] must be a resolution such as \"1h\""))?;
                req.rollup = Some(tidemark::parse_interval(text).map_err(|e| bad(e.to_string()))?);
            }
            "_source"
            | "track_total_hits"
            | "timeout"
            | "version"
            | "seq_no_primary_term"
            | "rest_total_hits_as_int"
            | "stored_fields" => {}
            other => return Err(unsupported(format!("the search option [{other}]"))),
        }
    }
    // Hits are never cut silently: a page past the window is refused, as
    // Elasticsearch does at `index.max_result_window`.
    let window = req.from.saturating_add(req.size);
    if window > MAX_RESULT_WINDOW {
        return Err(crate::error::Error::bad(
            "illegal_argument_exception",
            format!(
                "Result window is too large, from + size must be less than or equal to: [{MAX_RESULT_WINDOW}] but was [{window}] (index.max_result_window); aggregate, or page by time with a range query"
            ),
        ));
    }
    Ok(req)
}

fn as_usize(v: &Value, what: &str) -> Result<usize> {
    let n = match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    };
    n.and_then(|n| usize::try_from(n).ok()).ok_or_else(|| {
        bad(format!(
            "[{what}] must be a non-negative integer, found {v}"
        ))
    })
}

/// `sort`: by the timestamp (`"@timestamp"`, `{"@timestamp": "desc"}`,
/// `{"@timestamp": {"order": "desc"}}`, `"field:desc"`), or `_doc`.
///
/// # Errors
/// `400` for any other sort.
pub fn sort(v: &Value, mapping: &Mapping) -> Result<Order> {
    let ts = mapping.timestamp_field();
    let list = match v {
        Value::Array(a) => a.clone(),
        other => vec![other.clone()],
    };
    let mut order = Order::Asc;
    for (i, s) in list.iter().enumerate() {
        let (field, dir) = match s {
            Value::String(s) => match s.split_once(':') {
                Some((f, d)) => (f.to_owned(), d.to_owned()),
                None => (s.clone(), "asc".to_owned()),
            },
            Value::Object(o) if o.len() == 1 => {
                let Some((f, d)) = o.iter().next() else {
                    return Err(bad("[sort] malformed"));
                };
                let dir = match d {
                    Value::String(d) => d.clone(),
                    Value::Object(x) => x
                        .get("order")
                        .and_then(Value::as_str)
                        .unwrap_or("asc")
                        .to_owned(),
                    _ => return Err(bad("[sort] malformed")),
                };
                (f.clone(), dir)
            }
            _ => return Err(bad("[sort] malformed")),
        };
        if field == "_doc" || (field == "_id" && i > 0) {
            continue;
        }
        if field != ts {
            return Err(unsupported(format!(
                "[sort] by [{field}] (only by the timestamp field [{ts}])"
            )));
        }
        order = match dir.as_str() {
            "asc" => Order::Asc,
            "desc" => Order::Desc,
            other => return Err(bad(format!("[sort] order [{other}]: expected asc or desc"))),
        };
    }
    Ok(order)
}
