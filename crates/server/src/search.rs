//! Reads: `_mget`, `_search` and `_count`, with `_source` filtering.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::{Map, Value, json};

use crate::api::{AppState, blocking};
use crate::auth::Principal;
use crate::error::{Error, Result};
use crate::http::{self, Caller, json, params, read_body};
use crate::protocol;

/// `_source` filtering: `false`, includes and excludes (`*` wildcards on dotted paths).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceFilter {
    /// No `_source` at all.
    pub disabled: bool,
    /// Paths to keep (all when empty).
    pub includes: Vec<String>,
    /// Paths to drop.
    pub excludes: Vec<String>,
}

impl SourceFilter {
    /// From the `_source`, `_source_includes` and `_source_excludes` query parameters.
    pub fn from_params(params: &HashMap<String, String>) -> SourceFilter {
        let list = |k: &str| -> Vec<String> {
            params
                .get(k)
                .map(|v| {
                    v.split(',')
                        .map(|s| s.trim().to_owned())
                        .filter(|s| !s.is_empty())
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut f = SourceFilter {
            disabled: false,
            includes: list("_source_includes"),
            excludes: list("_source_excludes"),
        };
        match params.get("_source").map(String::as_str) {
            Some("false") => f.disabled = true,
            Some("true") | None => {}
            Some(_) => f.includes.extend(list("_source")),
        }
        f
    }

    /// From a search body's `_source`: `false`, a path, a list, or
    /// `{"includes": [..], "excludes": [..]}`.
    pub fn from_json(v: Option<&Value>) -> SourceFilter {
        let strings = |v: Option<&Value>| -> Vec<String> {
            match v {
                Some(Value::String(s)) => vec![s.clone()],
                Some(Value::Array(a)) => a
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect(),
                _ => Vec::new(),
            }
        };
        match v {
            None | Some(Value::Bool(true)) => SourceFilter::default(),
            Some(Value::Bool(false)) => SourceFilter {
                disabled: true,
                ..SourceFilter::default()
            },
            Some(Value::Object(o)) => SourceFilter {
                disabled: false,
                includes: strings(o.get("includes").or_else(|| o.get("include"))),
                excludes: strings(o.get("excludes").or_else(|| o.get("exclude"))),
            },
            other => SourceFilter {
                disabled: false,
                includes: strings(other),
                excludes: Vec::new(),
            },
        }
    }

    /// Filters a `_source`; `Value::Null` when disabled.
    pub fn apply(&self, source: Value) -> Value {
        if self.disabled {
            return Value::Null;
        }
        if self.includes.is_empty() && self.excludes.is_empty() {
            return source;
        }
        let mut out = Map::new();
        filter_into(&source, "", self, &mut out);
        Value::Object(out)
    }
}

fn path_matches(patterns: &[String], path: &str) -> bool {
    patterns.iter().any(|p| {
        crate::auth::glob_match(p, path)
            || path
                .strip_prefix(p.as_str())
                .is_some_and(|rest| rest.starts_with('.'))
    })
}

/// Whether some include pattern could match below `prefix`.
fn may_match_below(patterns: &[String], prefix: &str) -> bool {
    patterns.iter().any(|p| {
        p.starts_with(&format!("{prefix}."))
            || p.starts_with('*')
            || crate::auth::glob_match(p, prefix)
    })
}

fn filter_into(v: &Value, prefix: &str, f: &SourceFilter, out: &mut Map<String, Value>) {
    let Value::Object(o) = v else { return };
    for (k, child) in o {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        if path_matches(&f.excludes, &path) {
            continue;
        }
        let included = f.includes.is_empty() || path_matches(&f.includes, &path);
        // Objects are walked when a pattern may still select or drop something below.
        let descend = child.is_object() && (!included || !f.excludes.is_empty());
        if descend && (included || may_match_below(&f.includes, &path)) {
            let mut sub = Map::new();
            let inner = if included {
                SourceFilter {
                    includes: Vec::new(),
                    ..f.clone()
                }
            } else {
                f.clone()
            };
            filter_into(child, &path, &inner, &mut sub);
            if !sub.is_empty() {
                out.insert(k.clone(), Value::Object(sub));
            }
        } else if !descend && included {
            out.insert(k.clone(), child.clone());
        }
    }
}

/// The read routes.
pub fn routes() -> crate::api::Routes {
    crate::api::Routes::new()
        .route("/_mget", get(mget).post(mget))
        .route("/{index}/_mget", get(mget).post(mget))
        .route("/_search", get(search_handler).post(search_handler))
        .route("/{index}/_search", get(search_handler).post(search_handler))
        .route("/_count", get(count_handler).post(count_handler))
        .route("/_resolve/index/{expr}", get(resolve_index))
        .route("/_msearch", get(msearch).post(msearch))
        .route("/{index}/_msearch", get(msearch).post(msearch))
        .route("/{index}/_count", get(count_handler).post(count_handler))
        .route("/{index}/_delete_by_query", post(delete_by_query))
        .merge(crate::pit::routes())
}

type St = State<Arc<AppState>>;
/// `_mget`: `{"docs": [{"_index", "_id", "_source"}]}` or `{"ids": [..]}` with the
/// path's index.
async fn mget(
    State(st): St,
    Caller(who): Caller,
    index: Option<Path<String>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    // `/_mget` and `/{index}/_mget` alike: the path's index, when there is one.
    let index = index.map(|Path(i)| i);
    let params = params(q.as_deref());
    let default_filter = SourceFilter::from_params(&params);
    let bytes = read_body(&st, &headers, body).await?;
    let v = http::json_body(&bytes)?;
    let mut wanted: Vec<(String, String, SourceFilter)> = Vec::new();
    if let Some(docs) = v.get("docs").and_then(Value::as_array) {
        for d in docs {
            let idx = d
                .get("_index")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or_else(|| index.clone())
                .ok_or_else(|| {
                    Error::bad(
                        "action_request_validation_exception",
                        "Validation Failed: 1: index is missing for doc 0;",
                    )
                })?;
            let id = match d.get("_id") {
                Some(Value::String(s)) => s.clone(),
                _ => {
                    return Err(Error::bad(
                        "action_request_validation_exception",
                        "Validation Failed: 1: id is missing;",
                    ));
                }
            };
            let filter = match d.get("_source") {
                None => default_filter.clone(),
                some => SourceFilter::from_json(some),
            };
            wanted.push((idx, id, filter));
        }
    } else if let Some(ids) = v.get("ids").and_then(Value::as_array) {
        let idx = index.ok_or_else(|| {
            Error::bad(
                "action_request_validation_exception",
                "Validation Failed: 1: index is missing;",
            )
        })?;
        for id in ids {
            let Some(id) = id.as_str() else {
                return Err(Error::bad("parse_exception", "ids must be strings"));
            };
            wanted.push((idx.clone(), id.to_owned(), default_filter.clone()));
        }
    } else {
        return Err(Error::bad(
            "action_request_validation_exception",
            "Validation Failed: 1: no documents to get;",
        ));
    }
    let docs = blocking(move || {
        let mut out = Vec::with_capacity(wanted.len());
        for (idx, id, filter) in wanted {
            let h = match st.registry.scope(&who).get(&idx) {
                Ok(h) => h,
                Err(e) => {
                    out.push(json!({"_index": idx, "_id": id, "error": {"type": "security_exception", "reason": e.reason()}}));
                    continue;
                }
            };
            let Some(h) = h else {
                out.push(json!({"_index": idx, "_id": id, "error": {"type": "index_not_found_exception", "reason": format!("no such index [{idx}]")}}));
                continue;
            };
            let doc = h.read(|i| match i.get(&id) {
                Ok(d) => Ok(d),
                Err(tidemark::Error::InvalidId { .. }) => Ok(None),
                Err(e) => Err(e.into()),
            })?;
            let source = doc.map(|d| filter.apply(protocol::source_of(d)));
            out.push(protocol::get_body(&idx, &id, source));
        }
        Ok(out)
    })
    .await?;
    Ok(json(200, &json!({"docs": docs})))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn source_filters_include_and_exclude_paths() {
        let doc = json!({"@timestamp": 1, "k8s": {"pod": {"name": "a", "uid": "u"}, "node": "n"}, "cpu": 0.5});
        let f = SourceFilter::from_json(Some(&json!(["k8s.pod.*", "cpu"])));
        assert_eq!(
            f.apply(doc.clone()),
            json!({"k8s": {"pod": {"name": "a", "uid": "u"}}, "cpu": 0.5})
        );
        let f = SourceFilter::from_json(Some(&json!({"excludes": ["k8s.pod.uid"]})));
        assert_eq!(
            f.apply(doc.clone()),
            json!({"@timestamp": 1, "k8s": {"pod": {"name": "a"}, "node": "n"}, "cpu": 0.5})
        );
        let f = SourceFilter::from_json(Some(&json!("k8s")));
        assert_eq!(
            f.apply(doc.clone()),
            json!({"k8s": {"pod": {"name": "a", "uid": "u"}, "node": "n"}})
        );
        assert_eq!(
            SourceFilter::from_json(Some(&json!(false))).apply(doc),
            Value::Null
        );
    }
}

/// The query DSL subset, translated into the façade's [`tidemark::SearchRequest`].
/// Anything outside it is a `400` naming the clause, never a silent wrong answer.
pub mod dsl {
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
                    let cal = calendar_of(&unit).ok_or_else(|| {
                        bad(format!("unknown rounding unit [{unit}] in date math"))
                    })?;
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
                            let cal = calendar_of(&unit.to_string()).ok_or_else(|| {
                                bad(format!("unknown unit [{unit}] in date math"))
                            })?;
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
                        "filter"
                            | "must"
                            | "must_not"
                            | "should"
                            | "minimum_should_match"
                            | "boost"
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
                                return Err(unsupported(format!(
                                    "[range] time_zone {v} (only UTC)"
                                )));
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
                    // Orders other than `_count` desc are sorted by `crate::multi`.
                    crate::multi::TermsOrder::parse(spec.get("order"))?;
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
                    req.rollup =
                        Some(tidemark::parse_interval(text).map_err(|e| bad(e.to_string()))?);
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
}

/// Elasticsearch's JSON for an aggregation result.
pub fn agg_json(out: &tidemark::AggOutput) -> Value {
    use tidemark::{AggOutput, BucketKey};
    match out {
        AggOutput::Value(v) => json!({"value": v}),
        AggOutput::Buckets {
            buckets,
            sum_other_doc_count,
        } => {
            let is_terms = buckets
                .first()
                .is_some_and(|b| matches!(b.key, BucketKey::Term(_)));
            let list: Vec<Value> = buckets
                .iter()
                .map(|b| {
                    let mut o = Map::new();
                    match &b.key {
                        BucketKey::Time(t) => {
                            o.insert("key_as_string".into(), json!(tidemark::format_time(*t)));
                            o.insert("key".into(), json!(t));
                        }
                        BucketKey::Term(v) => {
                            o.insert("key".into(), v.clone());
                        }
                    }
                    o.insert("doc_count".into(), json!(b.doc_count));
                    for (n, a) in &b.aggs {
                        o.insert(n.clone(), agg_json(a));
                    }
                    Value::Object(o)
                })
                .collect();
            if is_terms || *sum_other_doc_count > 0 {
                json!({"doc_count_error_upper_bound": 0, "sum_other_doc_count": sum_other_doc_count, "buckets": list})
            } else {
                json!({"buckets": list})
            }
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Merges the URL parameters `size`, `from`, `sort` into a search body; refuses `q`.
pub(crate) fn merge_params(mut body: Value, params: &HashMap<String, String>) -> Result<Value> {
    if params.contains_key("scroll") {
        return Err(Error::bad(
            "illegal_argument_exception",
            "[scroll] is not supported by Tidemark: page by time instead (a range on @timestamp, sorted by @timestamp), or with from and size up to 10,000 hits",
        ));
    }
    if params.contains_key("q") {
        return Err(Error::bad(
            "parsing_exception",
            "the [q] URL parameter (query string syntax) is not supported by Tidemark: send a query body",
        ));
    }
    if body.is_null() {
        body = json!({});
    }
    if let Value::Object(o) = &mut body {
        if let Some(r) = params.get("rollup") {
            o.insert("rollup".into(), json!(r));
        }
        for k in ["size", "from"] {
            if let Some(v) = params.get(k) {
                o.insert(k.into(), json!(v));
            }
        }
        if let Some(s) = params.get("sort") {
            o.insert("sort".into(), json!(s.split(',').collect::<Vec<_>>()));
        }
    }
    Ok(body)
}

/// The one index a request names (patterns must resolve to exactly one).
fn one_index(st: &AppState, who: &Principal, name: &str) -> Result<Arc<crate::IndexHandle>> {
    let handles = st.registry.scope(who).resolve(name)?;
    match handles.len() {
        1 => handles
            .into_iter()
            .next()
            .ok_or_else(|| Error::no_index(name)),
        0 => Err(Error::no_index(name)),
        n => Err(Error::bad(
            "illegal_argument_exception",
            format!("[{name}] matches {n} indices: this request takes one index in Tidemark"),
        )),
    }
}

/// The indices a search or count names, through the caller's scope: a comma list,
/// wildcards and `_all` (visible indices only). With `ignore_unavailable`, a part that
/// names a missing or forbidden index is skipped. An expression over several indices
/// may match none (an empty answer); an explicit name must exist.
fn search_indices(
    st: &AppState,
    who: &Principal,
    expr: &str,
    params: &HashMap<String, String>,
) -> Result<Vec<Arc<crate::IndexHandle>>> {
    let scope = st.registry.scope(who);
    let lenient = params
        .get("ignore_unavailable")
        .is_some_and(|v| v != "false");
    let handles = if lenient {
        let mut out = std::collections::BTreeMap::new();
        for part in expr.split(',') {
            if let Ok(hs) = scope.resolve(part) {
                for h in hs {
                    out.insert(h.name().to_owned(), h);
                }
            }
        }
        out.into_values().collect()
    } else {
        scope.resolve(expr)?
    };
    if handles.is_empty() && !lenient && !crate::registry::Scope::is_multi(expr) {
        return Err(Error::no_index(expr));
    }
    Ok(handles)
}

/// The indices `expr` names for `who` (see [`search_indices`]), for the point-in-time
/// and scroll routes.
pub(crate) fn indices_of(
    st: &AppState,
    who: &Principal,
    expr: &str,
    params: &HashMap<String, String>,
) -> Result<Vec<Arc<crate::IndexHandle>>> {
    search_indices(st, who, expr, params)
}

/// The index expression of a route: the path's, or every index the caller may see.
fn expr_of(index: Option<Path<String>>) -> String {
    index.map_or_else(|| "_all".to_owned(), |Path(i)| i)
}

async fn search_handler(
    State(st): St,
    Caller(who): Caller,
    index: Option<Path<String>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    let index = expr_of(index);
    let params = params(q.as_deref());
    // The indices are resolved before the body is read: an unknown or foreign index is
    // a 404 (or 403) whatever the body.
    search_indices(&st, &who, &index, &params)?;
    let bytes = read_body(&st, &headers, body).await?;
    let body = http::json_body(&bytes)?;
    let out = match params.get("scroll") {
        Some(keep) => {
            let keep = crate::pit::keep_alive(keep)?;
            crate::pit::scroll_first(&st, &who, &index, &params, body, keep).await?
        }
        None => search_value(&st, &who, &index, &params, body).await?,
    };
    Ok(crate::api::respond(200, out, &params))
}

/// A hit's JSON. With `tiebreak` (a point in time or `search_after` search) its `sort`
/// is `[timestamp, "<index>/<_id>"]`, the total order to send back as `search_after`.
fn hit_json(index: &str, hit: tidemark::Hit, filter: &SourceFilter, tiebreak: bool) -> Value {
    let mut o = Map::new();
    o.insert("_index".into(), json!(index));
    let sort = if tiebreak {
        json!([hit.ts_millis, format!("{index}/{}", hit.id)])
    } else {
        json!([hit.ts_millis])
    };
    o.insert("_id".into(), json!(hit.id));
    o.insert("_score".into(), Value::Null);
    let source = filter.apply(protocol::source_of(hit.doc));
    if !source.is_null() {
        o.insert("_source".into(), source);
    }
    o.insert("sort".into(), sort);
    Value::Object(o)
}

/// A `search_after` position as a request sends it back: `(timestamp, index, _id)`.
type After = (i64, String, String);

/// Reads `search_after`: `[timestamp, "<index>/<_id>"]`, as the hits of a point in time
/// or `search_after` search carry in `sort`.
fn read_search_after(v: &Value) -> Result<After> {
    let bad = |why: &str| {
        Error::bad(
            "illegal_argument_exception",
            format!(
                "[search_after] {why}: send back the [sort] values of the last hit, [timestamp, \"<index>/<_id>\"] (hits of a search with a point in time or search_after carry both; the _id breaks ties between series at one timestamp, so a page neither skips nor repeats a hit)"
            ),
        )
    };
    let Some(list) = v.as_array() else {
        return Err(bad("must be an array"));
    };
    let [ts, key] = list.as_slice() else {
        return Err(bad(&format!("has {} values, 2 expected", list.len())));
    };
    let ts = match ts {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
    .ok_or_else(|| bad("must start with the timestamp in epoch milliseconds"))?;
    let (index, id) = key
        .as_str()
        .and_then(|k| k.split_once('/'))
        .ok_or_else(|| bad("must end with \"<index>/<_id>\""))?;
    Ok((ts, index.to_owned(), id.to_owned()))
}

/// The façade's cursor for index `name` from a cursor over several indices, whose hits
/// are ordered by `(timestamp, index, _id)`: in the cursor's own index, after its
/// `_id`; in an index that sorts before it, after its whole timestamp; after it,
/// from its timestamp on (mirrored for a descending order).
fn cursor_for(name: &str, order: tidemark::Order, after: &After) -> tidemark::SearchAfter {
    use std::cmp::Ordering::{Equal, Greater, Less};
    use tidemark::{Order, SearchAfter};
    let (ts, index, id) = after;
    let at = |ts_millis: i64, id: Option<&String>| SearchAfter {
        ts_millis,
        id: id.cloned(),
    };
    match (order, name.cmp(index.as_str())) {
        (_, Equal) => at(*ts, Some(id)),
        (Order::Asc, Less) => at(ts.saturating_add(1), None),
        (Order::Asc, Greater) | (Order::Desc, Less) => at(*ts, None),
        (Order::Desc, Greater) => at(ts.saturating_sub(1), None),
    }
}

/// What the indices of one search answered, merged.
struct Answer {
    shards: usize,
    total: u64,
    hits: Vec<(String, tidemark::Hit)>,
    aggs: Vec<(String, tidemark::AggOutput)>,
    expired: Vec<(i64, i64)>,
}

/// One search of the indices `index` names with the URL `params` and the request
/// `body`: the response body of `_search`, or of one item of `_msearch`. A body with a
/// `pit` reads that point in time's copies instead (and may not name indices).
async fn search_value(
    st: &Arc<AppState>,
    who: &Principal,
    index: &str,
    params: &HashMap<String, String>,
    body: Value,
) -> Result<Value> {
    let body = merge_params(body, params)?;
    match body.get("pit") {
        Some(pit) => {
            if index != "_all" {
                return Err(Error::bad(
                    "action_request_validation_exception",
                    "Validation Failed: 1: [indices] cannot be used with point in time. Do not specify any index with point in time.;",
                ));
            }
            let id = pit
                .get("id")
                .and_then(Value::as_str)
                .ok_or_else(|| Error::bad("parsing_exception", "[pit] needs an [id]"))?;
            let keep = pit
                .get("keep_alive")
                .and_then(Value::as_str)
                .map(crate::pit::keep_alive)
                .transpose()?;
            let id = id.to_owned();
            let pit = st.pits.get(&id, who, keep)?;
            search_on(&pit.indices, params, body, Some(&id)).await
        }
        None => {
            let handles = search_indices(st, who, index, params)?;
            search_on(&handles, params, body, None).await
        }
    }
}

/// The search of `body` (URL parameters already merged in) over `handles`; `pit_id`
/// names the point in time they belong to, if any, answered back as `pit_id`.
/// One index is asked the request as it is; several (or a `terms` order the façade
/// does not sort by) go through [`crate::multi`].
pub(crate) async fn search_on(
    handles: &[Arc<crate::IndexHandle>],
    params: &HashMap<String, String>,
    mut body: Value,
    pit_id: Option<&str>,
) -> Result<Value> {
    let mut after = None;
    if let Value::Object(o) = &mut body {
        o.remove("pit");
        if let Some(v) = o.remove("search_after") {
            after = Some(read_search_after(&v)?);
            let from = o.get("from").map(|f| match f {
                Value::String(t) => t.parse::<i64>().ok(),
                other => other.as_i64(),
            });
            if from.is_some_and(|f| f != Some(0) && f != Some(-1)) {
                return Err(Error::bad(
                    "illegal_argument_exception",
                    "[from] parameter must be set to 0 when [search_after] is used",
                ));
            }
            o.remove("from");
        }
    }
    let tiebreak = pit_id.is_some() || after.is_some();
    let start = std::time::Instant::now();
    let filter = match params.get("_source") {
        Some(_) => SourceFilter::from_params(params),
        None => SourceFilter::from_json(body.get("_source")),
    };
    let total_as_int = params
        .get("rest_total_hits_as_int")
        .is_some_and(|v| v != "false");
    let now = now_ms();
    let aggs_json = body.get("aggs").or_else(|| body.get("aggregations"));
    let answer = match handles {
        [] => {
            // No index: the request is still checked, and its aggregations answer empty.
            let mapping = tidemark::label_mapping()?;
            let req = dsl::search(&body, &mapping, now)?;
            let plan = crate::multi::plan(&req.aggs, aggs_json)?;
            Answer {
                shards: 0,
                total: 0,
                hits: Vec::new(),
                aggs: crate::multi::merge(&plan, &[])?,
                expired: Vec::new(),
            }
        }
        [one] => {
            let mut req = dsl::search(&body, one.mapping(), now)?;
            req.search_after = after.as_ref().map(|a| cursor_for(one.name(), req.order, a));
            let plan = crate::multi::plan(&req.aggs, aggs_json)?;
            if crate::multi::needs_merge(&plan) {
                several(handles, &body, plan, now, after.as_ref()).await?
            } else {
                let handle = Arc::clone(one);
                let name = handle.name().to_owned();
                let result = blocking(move || handle.read(|i| Ok(i.query(&req)?))).await?;
                Answer {
                    shards: 1,
                    total: result.total,
                    hits: result.hits.into_iter().map(|h| (name.clone(), h)).collect(),
                    aggs: result.aggs,
                    expired: result.expired,
                }
            }
        }
        [first, ..] => {
            let req = dsl::search(&body, first.mapping(), now)?;
            let plan = crate::multi::plan(&req.aggs, aggs_json)?;
            several(handles, &body, plan, now, after.as_ref()).await?
        }
    };
    let hits: Vec<Value> = answer
        .hits
        .into_iter()
        .map(|(name, h)| hit_json(&name, h, &filter, tiebreak))
        .collect();
    let total = if total_as_int {
        json!(answer.total)
    } else {
        json!({"value": answer.total, "relation": "eq"})
    };
    let mut out = json!({
        "took": start.elapsed().as_millis() as u64,
        "timed_out": false,
        "_shards": {"total": answer.shards, "successful": answer.shards, "skipped": 0, "failed": 0},
        "hits": {"total": total, "max_score": null, "hits": hits},
    });
    if !answer.expired.is_empty() {
        // Not Elasticsearch's: time the answer leaves out because retention dropped its
        // raw documents and no kept rollup answers there.
        out["tidemark_expired"] = json!(answer
            .expired
            .iter()
            .map(|(a, b)| json!({"from": tidemark::format_time(*a), "to": tidemark::format_time(*b), "from_ms": a, "to_ms": b}))
            .collect::<Vec<_>>());
    }
    if let Some(id) = pit_id {
        out["pit_id"] = json!(id);
    }
    if !answer.aggs.is_empty() {
        let mut aggs = Map::new();
        for (n, a) in &answer.aggs {
            aggs.insert(n.clone(), agg_json(a));
        }
        out["aggregations"] = Value::Object(aggs);
    }
    Ok(out)
}

/// The search over `handles` (one or more), merged: each index asked the same request
/// parsed against its own mapping, widened for an exact merge; hits merged in the
/// request's order (by timestamp, then index name, then `_id`), `from` and `size`
/// applied after the merge.
async fn several(
    handles: &[Arc<crate::IndexHandle>],
    body: &Value,
    plan: Vec<(String, crate::multi::Spec)>,
    now: i64,
    after: Option<&After>,
) -> Result<Answer> {
    let many = handles.len() > 1;
    let mut asks = Vec::with_capacity(handles.len());
    let (mut from, mut size, mut order) = (0, 0, tidemark::Order::Asc);
    for h in handles {
        let mut req = dsl::search(body, h.mapping(), now)?;
        if many {
            req.filter = crate::multi::prune(req.filter, h.mapping());
        }
        req.aggs = crate::multi::widen(&req.aggs, h.mapping(), many)?;
        req.search_after = after.map(|a| cursor_for(h.name(), req.order, a));
        (from, size, order) = (req.from, req.size, req.order);
        req.size = req.from.saturating_add(req.size);
        req.from = 0;
        asks.push((Arc::clone(h), req));
    }
    let results = blocking(move || {
        asks.into_iter()
            .map(|(h, req)| Ok((h.name().to_owned(), h.read(|i| Ok(i.query(&req)?))?)))
            .collect::<Result<Vec<_>>>()
    })
    .await?;
    let mut total = 0u64;
    let mut hits = Vec::new();
    let mut aggs = Vec::with_capacity(results.len());
    let mut expired = Vec::new();
    for (name, r) in results {
        total = total.saturating_add(r.total);
        hits.extend(r.hits.into_iter().map(|h| (name.clone(), h)));
        aggs.push(r.aggs);
        expired.extend(r.expired);
    }
    let key = |(n, h): &(String, tidemark::Hit)| (h.ts_millis, n.clone(), h.id.clone());
    match order {
        tidemark::Order::Asc => hits.sort_by_key(key),
        tidemark::Order::Desc => hits.sort_by_key(|x| std::cmp::Reverse(key(x))),
    }
    let hits = hits.into_iter().skip(from).take(size).collect();
    expired.sort_unstable();
    expired.dedup();
    Ok(Answer {
        shards: handles.len(),
        total,
        hits,
        aggs: crate::multi::merge(&plan, &aggs)?,
        expired,
    })
}

/// `_msearch` (`POST /_msearch`, `POST /<index>/_msearch`): NDJSON pairs of a header
/// (`{"index": "…"}` — a name, a comma list, wildcards, a list — or `{}` for the path's
/// index, or every index the caller may see; `ignore_unavailable`) and a search body,
/// as Grafana's Elasticsearch data source sends them; each search answers in
/// `responses`, in order, with its own `status`, and one that fails answers its error
/// there without failing the others, as Elasticsearch does.
async fn msearch(
    State(st): St,
    Caller(who): Caller,
    default_index: Option<Path<String>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    let default_index = expr_of(default_index);
    let params = params(q.as_deref());
    let bytes = read_body(&st, &headers, body).await?;
    let start = std::time::Instant::now();
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| Error::bad("parse_exception", format!("the body is not UTF-8: {e}")))?;
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let mut responses = Vec::new();
    while let Some(header_line) = lines.next() {
        let header = http::json_body(header_line.as_bytes())?;
        let Some(body_line) = lines.next() else {
            return Err(Error::bad(
                "illegal_argument_exception",
                "the last _msearch header has no search body after it (each search is a header line, then a body line)",
            ));
        };
        let body = http::json_body(body_line.as_bytes())?;
        let index = match header.get("index") {
            Some(Value::String(i)) => i.clone(),
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(","),
            _ => default_index.clone(),
        };
        let mut item_params = params.clone();
        if let Some(v) = header.get("ignore_unavailable") {
            let on = v == &Value::Bool(true) || v.as_str() == Some("true");
            item_params.insert("ignore_unavailable".into(), on.to_string());
        }
        let answer = search_value(&st, &who, &index, &item_params, body).await;
        responses.push(match answer {
            Ok(mut v) => {
                v["status"] = json!(200);
                v
            }
            Err(e) => {
                let (status, kind) = e.status_and_kind();
                protocol::error_body(status, kind, &e.reason())
            }
        });
    }
    let out = json!({"took": start.elapsed().as_millis() as u64, "responses": responses});
    Ok(crate::api::respond(200, out, &params))
}

/// `_count` over the indices the path names (or every index the caller may see): the
/// query parsed against each index's own mapping, the counts summed.
async fn count_handler(
    State(st): St,
    Caller(who): Caller,
    index: Option<Path<String>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    let index = expr_of(index);
    let params = params(q.as_deref());
    let handles = search_indices(&st, &who, &index, &params)?;
    let bytes = read_body(&st, &headers, body).await?;
    let body = http::json_body(&bytes)?;
    if params.contains_key("q") {
        return Err(Error::bad(
            "parsing_exception",
            "the [q] URL parameter is not supported by Tidemark: send a query body",
        ));
    }
    let now = now_ms();
    let many = handles.len() > 1;
    let mut asks = Vec::with_capacity(handles.len());
    for h in &handles {
        let mut req = tidemark::SearchRequest {
            size: 0,
            ..tidemark::SearchRequest::default()
        };
        if let Value::Object(o) = &body {
            for (k, v) in o {
                match k.as_str() {
                    "query" => req.filter = dsl::query(v, h.mapping(), now)?,
                    other => {
                        return Err(Error::bad(
                            "parsing_exception",
                            format!("request does not support [{other}]"),
                        ));
                    }
                }
            }
        }
        if many {
            req.filter = crate::multi::prune(req.filter, h.mapping());
        }
        asks.push((Arc::clone(h), req));
    }
    let n = asks.len();
    let count = blocking(move || {
        let mut total = 0u64;
        for (h, req) in asks {
            total = total.saturating_add(h.read(|i| Ok(i.query(&req)?))?.total);
        }
        Ok(total)
    })
    .await?;
    Ok(crate::api::respond(
        200,
        json!({"count": count, "_shards": {"total": n, "successful": n, "skipped": 0, "failed": 0}}),
        &params,
    ))
}

/// `GET /_resolve/index/<expr>`: the caller's indices the expression names, as
/// Elasticsearch lists them (no aliases or data streams in Tidemark).
async fn resolve_index(
    State(st): St,
    Caller(who): Caller,
    Path(expr): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response> {
    let params = params(q.as_deref());
    let handles = search_indices(&st, &who, &expr, &params)?;
    let indices: Vec<Value> = handles
        .iter()
        .map(|h| json!({"name": h.name(), "attributes": ["open"]}))
        .collect();
    Ok(crate::api::respond(
        200,
        json!({"indices": indices, "aliases": [], "data_streams": []}),
        &params,
    ))
}

/// Documents found, then deleted, per round of `_delete_by_query`.
const DELETE_BATCH: usize = 10_000;

/// `POST /<index>/_delete_by_query` with `{"query": …}` (and `max_docs`): the matching
/// documents found 10,000 at a time under the read lock and deleted by `_id` under the
/// write lock (tombstones in the fsynced log, purged by merges), until none match.
/// Answers in Elasticsearch's shape (`total`, `deleted`, `batches`, `failures`). A
/// document written while it runs and matching is deleted too if a later round finds
/// it, as Elasticsearch's scroll-based delete may or may not.
async fn delete_by_query(
    State(st): St,
    Caller(who): Caller,
    Path(index): Path<String>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    let params = params(q.as_deref());
    let handle = one_index(&st, &who, &index)?;
    let bytes = read_body(&st, &headers, body).await?;
    let body = http::json_body(&bytes)?;
    let mut filter = None;
    let mut max_docs = u64::MAX;
    if let Value::Object(o) = &body {
        for (k, v) in o {
            match k.as_str() {
                "query" => filter = Some(dsl::query(v, handle.mapping(), now_ms())?),
                "max_docs" => {
                    max_docs = v.as_u64().filter(|n| *n > 0).ok_or_else(|| {
                        Error::bad("parsing_exception", "[max_docs] must be a positive integer")
                    })?;
                }
                other => {
                    return Err(Error::bad(
                        "parsing_exception",
                        format!("request does not support [{other}]"),
                    ));
                }
            }
        }
    }
    let Some(filter) = filter else {
        return Err(Error::bad(
            "action_request_validation_exception",
            "Validation Failed: 1: query is missing;",
        ));
    };
    let start = std::time::Instant::now();
    let (total, deleted, batches) = blocking(move || {
        let (mut total, mut deleted, mut batches) = (None, 0u64, 0u64);
        while deleted < max_docs {
            let size = usize::try_from(max_docs - deleted)
                .unwrap_or(usize::MAX)
                .min(DELETE_BATCH);
            let req = tidemark::SearchRequest {
                filter: filter.clone(),
                size,
                ..tidemark::SearchRequest::default()
            };
            let found = handle.read(|i| Ok(i.query(&req)?))?;
            total.get_or_insert(found.total.min(max_docs));
            if found.hits.is_empty() {
                break;
            }
            let items = found
                .hits
                .into_iter()
                .map(|h| tidemark::BulkItem::delete(h.id))
                .collect();
            let results = handle.exclusive(|i| Ok(i.bulk(items)?))?;
            batches += 1;
            let n = results
                .iter()
                .filter(|r| matches!(r.status, tidemark::ItemStatus::Deleted))
                .count() as u64;
            if n == 0 {
                break;
            }
            deleted += n;
        }
        Ok((total.unwrap_or(0), deleted, batches))
    })
    .await?;
    Ok(crate::api::respond(
        200,
        json!({
            "took": start.elapsed().as_millis() as u64,
            "timed_out": false,
            "total": total,
            "deleted": deleted,
            "batches": batches,
            "version_conflicts": 0,
            "noops": 0,
            "retries": {"bulk": 0, "search": 0},
            "throttled_millis": 0,
            "requests_per_second": -1.0,
            "throttled_until_millis": 0,
            "failures": [],
        }),
        &params,
    ))
}
