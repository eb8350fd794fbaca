//! Generated records as engine points, per dataset, and the engine mode each dataset
//! needs: time series for `k8s` and `otel`; events for `events`, whose id is a SHA-256
//! fingerprint of the fields the generator's schema names (the host, the message, the
//! source ip, the user, the action, the outcome) with the timestamp.

use anyhow::{Context, Result};
use tidemark_datagen::{Dataset, Field};
use tidemark_dedup::{EngineConfig, EventIds, Mode};
use tidemark_segment::Point;
use tidemark_tsid::Tsid;

use crate::storage_compare::metric_point;

/// The datasets `storage-compare` knows, in report order.
pub(crate) const DATASETS: [&str; 3] = ["k8s", "otel", "events"];

/// Every document the dataset sends (retries included), in emission order, as points.
/// Each series' tsid is computed once, with the dataset's own tsid computer.
pub(crate) fn points(ds: &Dataset) -> Result<Vec<Point>> {
    let mut computer = ds.tsid_computer().context("tsid computer")?;
    let mut tsids: Vec<Option<Tsid>> = vec![None; ds.series_count() as usize];
    let mut out = Vec::with_capacity(ds.total_docs() as usize);
    for r in ds.records() {
        let slot = tsids
            .get_mut(r.series as usize)
            .context("series number past the series count")?;
        let tsid = match slot {
            Some(t) => *t,
            None => *slot.insert(r.tsid(&mut computer).context("record tsid")?),
        };
        let mut p = metric_point(&r, tsid);
        for (name, v) in &r.fields {
            p = match v {
                Field::Keyword(s) => p.keyword(*name, s.as_str()),
                Field::Bool(b) => p.flag(*name, *b),
            };
        }
        out.push(p);
    }
    Ok(out)
}

/// The engine configuration for the dataset's documents.
pub(crate) fn with_mode(ds: &Dataset, config: EngineConfig) -> EngineConfig {
    let fingerprint = &ds.schema().fingerprint;
    if fingerprint.is_empty() {
        config
    } else {
        config.with_mode(Mode::Events(
            EventIds::new(tidemark_tsid::FingerprintMethod::Sha256)
                .fields(fingerprint.iter().copied()),
        ))
    }
}
