//! `GET /api/v1/status/tsdb` (Prometheus' cardinality view, with VictoriaMetrics'
//! `topN` and `match[]`): over the label-keyed indices the caller may see, the number of
//! series, the series count by metric name, by label name (distinct values) and by
//! label-value pair, the `limit` (or `topN`, default 10) largest of each. Read from
//! each index's dimension index, never its rows; each series counted once however many
//! segments hold it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::{Value, json};

use crate::error::Error;
use crate::http::{Caller, json as json_response};
use crate::state::{AppState, blocking};

/// Largest `limit` asked for.
const MAX_LIMIT: usize = 10_000;

#[derive(Default)]
struct Tally {
    series: u64,
    by_metric: HashMap<String, u64>,
    values_by_label: HashMap<String, HashSet<String>>,
    by_pair: HashMap<String, u64>,
}

fn top(map: impl IntoIterator<Item = (String, u64)>, limit: usize) -> Value {
    let mut v: Vec<(String, u64)> = map.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.truncate(limit);
    Value::Array(
        v.into_iter()
            .map(|(name, value)| json!({"name": name, "value": value}))
            .collect(),
    )
}

/// The handler.
pub(crate) async fn status_tsdb(
    State(st): State<Arc<AppState>>,
    Caller(who): Caller,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let result = async {
        let bad = |m: String| Error::bad("bad_data", m);
        let params = crate::prom::all_params(&st, raw, &headers, body)
            .await
            .map_err(|e| bad(e.to_string()))?;
        let limit = match crate::prom::param(&params, "limit")
            .or_else(|| crate::prom::param(&params, "topN"))
        {
            None | Some("") => 10,
            Some(t) => t
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_LIMIT).contains(n))
                .ok_or_else(|| bad(format!("limit {t:?} is not a number from 1 to {MAX_LIMIT}")))?,
        };
        let (selectors, _, _) =
            crate::prom::selection(&params, false).map_err(|e| bad(e.to_string()))?;
        let handles: Vec<_> = st
            .registry
            .scope(&who)
            .list()
            .into_iter()
            .filter(|h| h.mapping().is_label_keyed())
            .collect();
        blocking(move || {
            let mut t = Tally::default();
            for h in handles {
                h.read(|index| {
                    let mut seen = HashSet::new();
                    index
                        .select_series(
                            i64::MIN / 2,
                            i64::MAX / 2,
                            |p| p.all(),
                            |hit| {
                                if !seen.insert(*hit.tsid) {
                                    return;
                                }
                                let labels: Vec<(String, String)> = hit
                                    .dims
                                    .iter()
                                    .map(|(n, d)| (n.clone(), tidemark::dedup::dim_value_text(d)))
                                    .filter(|(_, v)| !v.is_empty())
                                    .collect();
                                if !selectors.is_empty()
                                    && !selectors
                                        .iter()
                                        .any(|s| tidemark_promql::matches_all(&labels, s))
                                {
                                    return;
                                }
                                t.series += 1;
                                for (n, v) in &labels {
                                    if n == "__name__" {
                                        *t.by_metric.entry(v.clone()).or_default() += 1;
                                    }
                                    t.values_by_label
                                        .entry(n.clone())
                                        .or_default()
                                        .insert(v.clone());
                                    *t.by_pair.entry(format!("{n}={v}")).or_default() += 1;
                                }
                            },
                        )
                        .map_err(|e| Error::status(500, "exception", e.to_string()))?;
                    Ok(())
                })?;
            }
            Ok(json!({
                "headStats": {"numSeries": t.series},
                "seriesCountByMetricName": top(t.by_metric, limit),
                "labelValueCountByLabelName": top(
                    t.values_by_label.into_iter().map(|(k, v)| (k, v.len() as u64)),
                    limit,
                ),
                "seriesCountByLabelValuePair": top(t.by_pair, limit),
                "memoryInBytesByLabelName": [],
            }))
        })
        .await
    }
    .await;
    match result {
        Ok(data) => json_response(200, &json!({"status": "success", "data": data})),
        Err(e) => json_response(
            e.status_and_kind().0,
            &json!({"status": "error", "errorType": "bad_data", "error": e.reason()}),
        ),
    }
}
