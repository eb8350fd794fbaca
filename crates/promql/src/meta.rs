//! Series metadata queries of the Prometheus API: `/api/v1/series`, `/api/v1/labels`
//! and `/api/v1/label/<name>/values`, answered from [`Storage::series_labels`].

use std::collections::BTreeSet;

use promql_parser::parser::Expr;

use crate::error::{Error, Result};
use crate::eval::METRIC_NAME;
use crate::storage::{Labels, MatchOp, Matcher, Storage};

/// The matchers of a series selector (a `match[]` parameter such as `up{job="api"}`).
///
/// # Errors
/// [`Error::BadData`] when the text is not a vector selector or matches everything
/// (Prometheus asks for at least one matcher that does not match the empty string).
pub fn selector_matchers(text: &str) -> Result<Vec<Matcher>> {
    let expr = crate::eval::parse(text)?;
    let Expr::VectorSelector(vs) = expr else {
        return Err(Error::BadData(format!(
            "invalid parameter \"match[]\": {text:?} is not a series selector"
        )));
    };
    if !vs.matchers.or_matchers.is_empty() {
        return Err(Error::Unsupported("`or` inside a label matcher set".into()));
    }
    let mut m = vs.matchers.matchers;
    if let Some(name) = vs.name {
        m.push(Matcher::new(MatchOp::Equal, METRIC_NAME, &name));
    }
    Ok(m)
}

/// The label sets of the series matching any of `selectors` (all series when there are
/// none) with samples in `start_ms..=end_ms`, sorted and distinct, at most `limit`.
///
/// # Errors
/// Storage errors; [`Error::TooManySeries`] past `limit`.
pub fn series(
    storage: &dyn Storage,
    selectors: &[Vec<Matcher>],
    start_ms: i64,
    end_ms: i64,
    limit: usize,
) -> Result<Vec<Labels>> {
    let mut out: BTreeSet<Labels> = BTreeSet::new();
    let all = [Vec::new()];
    let selectors = if selectors.is_empty() {
        &all[..]
    } else {
        selectors
    };
    for m in selectors {
        storage.series_labels(m, start_ms, end_ms, &mut |labels| {
            out.insert(labels.clone());
            if out.len() > limit {
                return Err(Error::TooManySeries { limit });
            }
            Ok(())
        })?;
    }
    Ok(out.into_iter().collect())
}

/// The label names of those series, sorted.
///
/// # Errors
/// As [`series`].
pub fn label_names(
    storage: &dyn Storage,
    selectors: &[Vec<Matcher>],
    start_ms: i64,
    end_ms: i64,
    limit: usize,
) -> Result<Vec<String>> {
    let names: BTreeSet<String> = series(storage, selectors, start_ms, end_ms, limit)?
        .into_iter()
        .flat_map(|l| l.into_iter().map(|(n, _)| n))
        .collect();
    Ok(names.into_iter().collect())
}

/// The values of label `name` among those series, sorted.
///
/// # Errors
/// As [`series`].
pub fn label_values(
    storage: &dyn Storage,
    name: &str,
    selectors: &[Vec<Matcher>],
    start_ms: i64,
    end_ms: i64,
    limit: usize,
) -> Result<Vec<String>> {
    let values: BTreeSet<String> = series(storage, selectors, start_ms, end_ms, limit)?
        .into_iter()
        .filter_map(|l| l.into_iter().find(|(n, _)| n == name).map(|(_, v)| v))
        .collect();
    Ok(values.into_iter().collect())
}
