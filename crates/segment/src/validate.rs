//! The rules a point must follow to be stored: the one set of checks that the segment
//! writers and the dedup engine share, so that a point the engine accepts is one a
//! segment can hold (and the two can never drift apart).

use crate::point::{Dim, Extra, Point};

/// The longest name or keyword a segment stores, in bytes: names are written with a
/// `u16` length, and keyword values (dimensions and extras) are held to the same bound.
pub const MAX_NAME_LEN: usize = u16::MAX as usize;

/// Why a point breaks the rules of [`validate_point`].
/// Deliberately exhaustive: a new rule must be mapped by every user (the engine turns
/// each into its own rejection), not fall into a catch-all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PointViolation {
    /// A name or keyword longer than [`MAX_NAME_LEN`] bytes.
    TooLong {
        /// Its length in bytes.
        len_bytes: usize,
    },
    /// Two dimensions share a name.
    DuplicateDimension {
        /// The name.
        name: String,
    },
    /// Two metrics share a name.
    DuplicateMetric {
        /// The name.
        name: String,
    },
    /// Two extra fields share a name.
    DuplicateExtra {
        /// The name.
        name: String,
    },
}

/// The length a dimension is held to [`MAX_NAME_LEN`] by: its name's, or its keyword
/// value's when longer.
pub(crate) fn dim_len(name: &str, value: &Dim) -> usize {
    match value {
        Dim::Keyword(s) => s.len().max(name.len()),
        _ => name.len(),
    }
}

/// The length an extra field is held to [`MAX_NAME_LEN`] by: its name's, or its keyword
/// value's when longer.
pub(crate) fn extra_len(name: &str, value: &Extra) -> usize {
    match value {
        Extra::Keyword(s) => s.len().max(name.len()),
        Extra::Bool(_) => name.len(),
    }
}

/// The first name given twice in `fields`, which are sorted by name.
pub(crate) fn first_duplicate<V>(fields: &[(String, V)]) -> Option<&str> {
    fields
        .windows(2)
        .find(|w| w[0].0 == w[1].0)
        .map(|w| w[0].0.as_str())
}

/// Checks a normalized point (dimensions, metrics and extras each sorted by name, as
/// [`Point::normalized`] leaves them): every name and keyword at most [`MAX_NAME_LEN`]
/// bytes, and no name given twice among its dimensions, its metrics or its extras. The
/// checks run in that order (lengths of dimensions, metric names and extras; then
/// duplicate extras, dimensions and metrics) and the first failure is returned.
///
/// ```
/// use tidemark_segment::{Dim, Point, PointViolation, validate_point};
/// use tidemark_tsid::Tsid;
///
/// let mut p = Point::new(Tsid::from_bytes([1; 20]), 0);
/// p.dims = vec![("host".into(), Dim::Keyword("a".into())); 2];
/// assert_eq!(
///     validate_point(&p),
///     Err(PointViolation::DuplicateDimension { name: "host".into() })
/// );
/// ```
///
/// # Errors
/// The first [`PointViolation`].
pub fn validate_point(p: &Point) -> Result<(), PointViolation> {
    for (name, value) in &p.dims {
        let long = dim_len(name, value);
        if long > MAX_NAME_LEN {
            return Err(PointViolation::TooLong { len_bytes: long });
        }
    }
    if let Some((name, _)) = p.metrics.iter().find(|(n, _)| n.len() > MAX_NAME_LEN) {
        return Err(PointViolation::TooLong {
            len_bytes: name.len(),
        });
    }
    for (name, value) in &p.extras {
        let long = extra_len(name, value);
        if long > MAX_NAME_LEN {
            return Err(PointViolation::TooLong { len_bytes: long });
        }
    }
    if let Some(name) = first_duplicate(&p.extras) {
        return Err(PointViolation::DuplicateExtra { name: name.into() });
    }
    if let Some(name) = first_duplicate(&p.dims) {
        return Err(PointViolation::DuplicateDimension { name: name.into() });
    }
    if let Some(name) = first_duplicate(&p.metrics) {
        return Err(PointViolation::DuplicateMetric { name: name.into() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::point::MetricValue;
    use tidemark_tsid::Tsid;

    fn point() -> Point {
        Point::new(Tsid::from_bytes([3; 20]), 5)
    }

    #[test]
    fn accepts_names_and_keywords_at_the_limit() {
        let mut p = point();
        let at_limit = "k".repeat(MAX_NAME_LEN);
        p.dims = vec![("a".into(), Dim::Keyword(at_limit.clone()))];
        p.metrics = vec![(at_limit.clone(), MetricValue::Gauge(1.0))];
        p.extras = vec![(at_limit, Extra::Bool(true))];
        assert_eq!(validate_point(&p), Ok(()));
    }

    #[test]
    fn rejects_one_byte_past_the_limit_anywhere() {
        let long = "k".repeat(MAX_NAME_LEN + 1);
        let too_long = Err(PointViolation::TooLong {
            len_bytes: MAX_NAME_LEN + 1,
        });
        let mut p = point();
        p.dims = vec![(long.clone(), Dim::Int(1))];
        assert_eq!(validate_point(&p), too_long);
        let mut p = point();
        p.metrics = vec![(long.clone(), MetricValue::Counter(1))];
        assert_eq!(validate_point(&p), too_long);
        let mut p = point();
        p.extras = vec![("e".into(), Extra::Keyword(long))];
        assert_eq!(validate_point(&p), too_long);
    }

    #[test]
    fn rejects_names_given_twice_extras_first() {
        let mut p = point();
        p.dims = vec![("d".into(), Dim::Int(1)), ("d".into(), Dim::Int(2))];
        p.metrics = vec![
            ("m".into(), MetricValue::Gauge(1.0)),
            ("m".into(), MetricValue::Gauge(2.0)),
        ];
        p.extras = vec![
            ("e".into(), Extra::Bool(true)),
            ("e".into(), Extra::Bool(false)),
        ];
        assert_eq!(
            validate_point(&p),
            Err(PointViolation::DuplicateExtra { name: "e".into() })
        );
        p.extras.pop();
        assert_eq!(
            validate_point(&p),
            Err(PointViolation::DuplicateDimension { name: "d".into() })
        );
        p.dims.pop();
        assert_eq!(
            validate_point(&p),
            Err(PointViolation::DuplicateMetric { name: "m".into() })
        );
    }
}
