//! The checks of [`SegmentStreamWriter`]'s input: a row's order in its series, its values
//! against the schema, and the columns it holds against the series' declared presence.

use std::io::Write;

use tidemark_tsid::{SyntheticId, Tsid};

use super::{SegmentStreamWriter, StreamSchema};
use crate::error::{Error, Result};
use crate::format::MAX_ROWS;
use crate::format::series::Presence;
use crate::point::{Extra, MetricValue};
use crate::validate::MAX_NAME_LEN;

impl<W: Write> SegmentStreamWriter<W> {
    /// The checks of [`push_rows`](Self::push_rows): order, room, kinds, lengths and
    /// the series' declared presence (counted for the rows).
    pub(super) fn check_run<C: AsRef<[MetricValue]>>(
        &mut self,
        ts: &[i64],
        values: &[(u32, C)],
    ) -> Result<()> {
        let bad = |detail: String| Error::InvalidOption {
            name: "rows",
            detail,
        };
        if self.options.events() {
            return Err(bad("an event segment takes rows one by one".into()));
        }
        if ts.is_empty() {
            return Ok(());
        }
        if self.rows + ts.len() as u64 > MAX_ROWS {
            return Err(Error::TooLarge {
                what: "rows",
                found: self.rows + ts.len() as u64,
                max: MAX_ROWS,
            });
        }
        let Some(series) = self.series.last() else {
            return Err(bad("a row before any series".into()));
        };
        let tsid = series.tsid;
        let mut before = (series.row_count > 0).then_some(self.prev_ts);
        for &t in ts {
            if let Some(p) = before {
                if let Some(e) = order_error(t.cmp(&p), tsid, t, p) {
                    return Err(e);
                }
            }
            before = Some(t);
        }
        if !values.windows(2).all(|w| w[0].0 < w[1].0) {
            return Err(bad("column indexes must be ascending".into()));
        }
        for (c, vals) in values {
            let (c, vals) = (*c, vals.as_ref());
            let info = self.schema.columns.get(c as usize);
            let Some(info) = info else {
                return Err(bad(format!("no metric column {c} in the schema")));
            };
            if vals.len() != ts.len() {
                return Err(bad(format!(
                    "column `{}`: {} values for {} rows",
                    info.name,
                    vals.len(),
                    ts.len()
                )));
            }
            if let Some(v) = vals.iter().find(|v| v.kind() != info.kind) {
                return Err(kind_error(
                    Some((info.name.as_str(), info.kind.name())),
                    v.kind().name(),
                    "metric",
                    c,
                ));
            }
        }
        // Every row has exactly the listed columns.
        self.check_presence(values.iter().map(|(c, _)| *c), ts.len() as u64)
    }

    /// Step 1 of [`push_row`](Self::push_row): checks that there is a current series and
    /// room for a row, and that the row (timestamp, and id in an event segment) sorts
    /// after the series' previous one; returns the row's id bytes.
    pub(super) fn check_order(&self, ts_millis: i64, id: Option<&SyntheticId>) -> Result<[u8; 28]> {
        let events = self.options.events();
        let Some(series) = self.series.last() else {
            return Err(Error::InvalidOption {
                name: "row",
                detail: "a row before any series".into(),
            });
        };
        let tsid = series.tsid;
        if self.rows >= MAX_ROWS {
            return Err(Error::TooLarge {
                what: "rows",
                found: self.rows + 1,
                max: MAX_ROWS,
            });
        }
        let id_bytes = match (events, id) {
            (false, _) => SyntheticId::new(tsid, ts_millis).to_bytes(),
            (true, Some(id)) => id.to_bytes(),
            (true, None) => {
                return Err(Error::InvalidOption {
                    name: "row",
                    detail: "an event row needs its id".into(),
                });
            }
        };
        let order = if series.row_count == 0 {
            std::cmp::Ordering::Greater
        } else if events {
            (ts_millis, Some(id_bytes)).cmp(&(self.prev_ts, self.prev_id))
        } else {
            ts_millis.cmp(&self.prev_ts)
        };
        match order_error(order, tsid, ts_millis, self.prev_ts) {
            Some(e) => Err(e),
            None => Ok(id_bytes),
        }
    }

    /// Step 2 of [`push_row`](Self::push_row): checks the row's values against the schema
    /// (ascending column indexes, kinds, keyword lengths) and the series' declared
    /// presence, counting them.
    pub(super) fn check_values(
        &mut self,
        metrics: &[(u32, MetricValue)],
        extras: &[(u32, &Extra)],
    ) -> Result<()> {
        let sorted = metrics.windows(2).all(|w| w[0].0 < w[1].0)
            && extras.windows(2).all(|w| w[0].0 < w[1].0);
        if !sorted {
            return Err(Error::InvalidOption {
                name: "row",
                detail: "column indexes must be ascending".into(),
            });
        }
        for &(c, v) in metrics {
            match self.schema.columns.get(c as usize) {
                Some(i) if i.kind == v.kind() => {}
                info => {
                    return Err(kind_error(
                        info.map(|i| (i.name.as_str(), i.kind.name())),
                        v.kind().name(),
                        "metric",
                        c,
                    ));
                }
            }
        }
        for &(e, v) in extras {
            match self.schema.extras.get(e as usize) {
                Some(i) if i.kind == v.kind() => {}
                info => {
                    return Err(kind_error(
                        info.map(|i| (i.name.as_str(), i.kind.name())),
                        v.kind().name(),
                        "extra",
                        e,
                    ));
                }
            }
            if let Extra::Keyword(k) = v {
                if k.len() > MAX_NAME_LEN {
                    return Err(Error::TooLarge {
                        what: "extra keyword bytes",
                        found: k.len() as u64,
                        max: MAX_NAME_LEN as u64,
                    });
                }
            }
        }
        let ncols = self.schema.columns.len() as u32;
        let present = metrics
            .iter()
            .map(|&(c, _)| c)
            .chain(extras.iter().map(|&(e, _)| ncols + e));
        self.check_presence(present, 1)
    }

    /// Checks the columns (metric columns `0..C`, then extra columns `C..`) that `rows`
    /// rows all have values in against their series' declared presence, and counts them.
    fn check_presence(&mut self, present: impl Iterator<Item = u32>, rows: u64) -> Result<()> {
        let ncols = self.schema.columns.len() as u32;
        let Some(s) = self.series.last_mut() else {
            return Ok(());
        };
        let mut j = 0usize;
        let name = |schema: &StreamSchema, c: u32| -> String {
            if c < ncols {
                schema.columns.get(c as usize).map(|i| i.name.clone())
            } else {
                schema
                    .extras
                    .get((c - ncols) as usize)
                    .map(|i| i.name.clone())
            }
            .unwrap_or_default()
        };
        for c in present {
            while s.declared.get(j).is_some_and(|&(d, _)| d < c) {
                if let Some(&(d, Presence::Full)) = s.declared.get(j) {
                    return Err(Error::InvalidOption {
                        name: "row",
                        detail: format!(
                            "series {}: column `{}` declared full has no value",
                            s.tsid,
                            name(&self.schema, d)
                        ),
                    });
                }
                j += 1;
            }
            match s.declared.get(j) {
                Some(&(d, _)) if d == c => {
                    if let Some(n) = s.counts.get_mut(j) {
                        *n += rows;
                    }
                    j += 1;
                }
                _ => {
                    return Err(Error::InvalidOption {
                        name: "row",
                        detail: format!(
                            "series {}: column `{}` not declared for it has a value",
                            s.tsid,
                            name(&self.schema, c)
                        ),
                    });
                }
            }
        }
        if let Some(&(d, _)) = s
            .declared
            .get(j..)
            .unwrap_or(&[])
            .iter()
            .find(|(_, p)| *p == Presence::Full)
        {
            return Err(Error::InvalidOption {
                name: "row",
                detail: format!(
                    "series {}: column `{}` declared full has no value",
                    s.tsid,
                    name(&self.schema, d)
                ),
            });
        }
        Ok(())
    }
}

fn order_error(
    order: std::cmp::Ordering,
    tsid: Tsid,
    ts_millis: i64,
    prev_ts: i64,
) -> Option<Error> {
    match order {
        std::cmp::Ordering::Greater => None,
        std::cmp::Ordering::Equal => Some(Error::DuplicatePoint {
            tsid: tsid.to_string(),
            ts_millis,
        }),
        std::cmp::Ordering::Less => Some(Error::OutOfOrder {
            detail: format!("series {tsid}: row at {ts_millis} ms after one at {prev_ts} ms"),
        }),
    }
}

/// The error of a row's value that its schema column (`(name, kind name)`, if any) does
/// not take.
fn kind_error(
    column: Option<(&str, &'static str)>,
    found: &'static str,
    what: &str,
    index: u32,
) -> Error {
    match column {
        Some((name, expected)) => Error::MetricKindConflict {
            name: name.to_owned(),
            expected,
            found,
        },
        None => Error::InvalidOption {
            name: "row",
            detail: format!("{what} column {index} is not in the schema"),
        },
    }
}
