//! Writing documents as JSON text, optionally with shuffled object keys.

use serde_json::Value;

use crate::rng::Rng;

/// Appends `value` as compact JSON to `out`. With `shuffle_seed`, the keys of every object
/// are written in a pseudo-random order derived from the seed (`serde_json::Value` itself
/// keeps keys sorted, so key order only exists in text).
pub fn write_json(value: &Value, shuffle_seed: Option<u64>, out: &mut String) {
    let mut rng = shuffle_seed.map(Rng::new);
    write(value, &mut rng, out);
}

fn write(value: &Value, rng: &mut Option<Rng>, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            if let Some(r) = rng.as_mut() {
                for i in (1..entries.len()).rev() {
                    let j = r.below(i as u64 + 1) as usize;
                    entries.swap(i, j);
                }
            }
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write(v, rng, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(v, rng, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}
