//! A record as the metrics protocols name it, shared by everything that sends the
//! datasets as line protocol or remote write (`cargo xtask peers`, `tidemark demo`):
//! label names and metric fields sanitized to `[A-Za-z0-9_]`, labels sorted with empty
//! values left out (as Prometheus does), line-protocol tag escaping.

use crate::dataset::{Dim, Record};

/// `s` with every character outside `[A-Za-z0-9]` replaced by `_`.
pub fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// A metric path as a line-protocol field: `k8s.pod.cpu.usage_ns` → `pod_cpu_usage_ns`
/// (the measurement, the dataset name, is the metric name's prefix:
/// `k8s_pod_cpu_usage_ns`).
pub fn field_name(path: &str) -> String {
    let p = path
        .strip_prefix("k8s.")
        .or_else(|| path.strip_prefix("metrics."))
        .unwrap_or(path);
    sanitize(p)
}

/// The record's labels: its dimensions, names sanitized, sorted, empty values left out.
pub fn labels(r: &Record) -> Vec<(String, String)> {
    let mut l: Vec<(String, String)> = r
        .dims
        .iter()
        .map(|(p, d)| {
            let v = match d {
                Dim::Keyword(s) => s.clone(),
                Dim::Int(i) => i.to_string(),
            };
            (sanitize(p), v)
        })
        .filter(|(_, v)| !v.is_empty())
        .collect();
    l.sort();
    l
}

/// Appends `s` escaped as a line-protocol tag key or value (`,`, `=`, space, `\`).
pub fn escape_tag(s: &str, out: &mut String) {
    for c in s.chars() {
        if matches!(c, ',' | '=' | ' ' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitized_and_tags_escaped() {
        assert_eq!(field_name("k8s.pod.cpu.usage_ns"), "pod_cpu_usage_ns");
        assert_eq!(field_name("metrics.a-b"), "a_b");
        let mut out = String::new();
        escape_tag("a b,c=d\\", &mut out);
        assert_eq!(out, "a\\ b\\,c\\=d\\\\");
    }
}
