//! `cargo xtask gen`: writes a generated dataset as NDJSON, with its Elasticsearch-style
//! mapping and the exact counts a dedup run must reproduce.
//!
//! Output, for dataset `<name>` in `--out DIR` (default `target/xtask/datasets`):
//! `<name>.ndjson` (one document per line, emission order: retries and late documents
//! included), `<name>.mapping.json`, and `<name>.expected.json` with `unique_docs`,
//! `total_docs`, `duplicates` and the options used.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};
use tidemark_datagen::{Dataset, DatasetKind, Dim, Field, MetricKind, Options};

struct Args {
    names: Vec<String>,
    options: Options,
    summary: Value,
    out: PathBuf,
}

fn parse(args: &[String]) -> Result<Args> {
    let mut names = Vec::new();
    let mut options = Options::default();
    let mut summary = Map::new();
    let mut out = crate::project_root().join("target/xtask/datasets");
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |flag: &str| {
            it.next()
                .with_context(|| format!("{flag} needs a value"))
                .cloned()
        };
        match arg.as_str() {
            "--points" => {
                let v: u64 = value(arg)?.parse().context("--points")?;
                options = options.points(v);
                summary.insert("points".into(), json!(v));
            }
            "--series" => {
                let v: u32 = value(arg)?.parse().context("--series")?;
                options = options.series(v);
                summary.insert("series".into(), json!(v));
            }
            "--seed" => {
                let v: u64 = value(arg)?.parse().context("--seed")?;
                options = options.seed(v);
                summary.insert("seed".into(), json!(v));
            }
            "--dup-rate" | "--late-rate" | "--disorder" => {
                let v: f64 = value(arg)?.parse().with_context(|| arg.clone())?;
                if !(0.0..=1.0).contains(&v) {
                    bail!("{arg} must be in [0, 1], found {v}");
                }
                options = match arg.as_str() {
                    "--dup-rate" => options.dup_rate(v),
                    "--late-rate" => options.late_rate(v),
                    _ => options.disorder(v),
                };
                summary.insert(arg.trim_start_matches("--").replace('-', "_"), json!(v));
            }
            "--shuffle-keys" => {
                options = options.shuffle_keys(true);
                summary.insert("shuffle_keys".into(), json!(true));
            }
            "--out" => out = PathBuf::from(value(arg)?),
            flag if flag.starts_with('-') => bail!("unknown option {flag:?}"),
            name => names.push(name.to_string()),
        }
    }
    if names.is_empty() || names.iter().any(|n| n == "all") {
        names = Dataset::NAMES.iter().map(|n| n.to_string()).collect();
    }
    Ok(Args {
        names,
        options,
        summary: Value::Object(summary),
        out,
    })
}

/// Inserts `leaf` at a dotted path of nested `properties` objects.
fn put_property(root: &mut Map<String, Value>, path: &str, leaf: Value) {
    match path.split_once('.') {
        None => {
            root.insert(path.to_string(), leaf);
        }
        Some((head, rest)) => {
            let node = root
                .entry(head.to_string())
                .or_insert_with(|| json!({ "properties": {} }));
            if let Some(Value::Object(props)) = node.get_mut("properties") {
                put_property(props, rest, leaf);
            }
        }
    }
}

/// The Elasticsearch-style mapping of a dataset: dimension types are read from the
/// generated series (a keyword or a long), metric types from the schema, other fields'
/// types from the documents (keyword or boolean). `events` gets
/// `"index": {"mode": "events", "fingerprint": {"fields": [...], "method": "sha256"}}`:
/// its documents have no natural key, so their id is a fingerprint of their content.
fn mapping(ds: &Dataset) -> Value {
    let schema = ds.schema();
    let mut dim_types: BTreeMap<&str, &str> = BTreeMap::new();
    let mut field_types: BTreeMap<&str, &str> = BTreeMap::new();
    let sample = (ds.docs_per_interval() as usize * 2).max(ds.series_count() as usize * 20);
    for record in ds.records().take(sample) {
        for (path, dim) in record.dims.iter() {
            let ty = match dim {
                Dim::Keyword(_) => "keyword",
                Dim::Int(_) => "long",
            };
            dim_types.entry(path).or_insert(ty);
        }
        for (path, field) in &record.fields {
            let ty = match field {
                Field::Keyword(_) => "keyword",
                Field::Bool(_) => "boolean",
            };
            field_types.entry(path).or_insert(ty);
        }
    }
    let mut props = Map::new();
    put_property(
        &mut props,
        schema.timestamp_field,
        json!({ "type": "date", "format": "epoch_millis" }),
    );
    for path in &schema.dimensions {
        let ty = dim_types.get(path).copied().unwrap_or("keyword");
        put_property(
            &mut props,
            path,
            json!({ "type": ty, "time_series_dimension": true }),
        );
    }
    for (path, kind) in &schema.metrics {
        let (ty, metric) = match kind {
            MetricKind::Gauge => ("double", "gauge"),
            MetricKind::Counter => ("long", "counter"),
        };
        put_property(
            &mut props,
            path,
            json!({ "type": ty, "time_series_metric": metric }),
        );
    }
    for path in &schema.fields {
        let ty = field_types.get(path).copied().unwrap_or("keyword");
        // `message` would be full text in Elasticsearch; here a keyword column (stored,
        // not analyzed), which the façade's mappings accept.
        put_property(&mut props, path, json!({ "type": ty }));
    }
    let index = match ds.kind() {
        DatasetKind::Events => json!({
            "mode": "events",
            "fingerprint": { "fields": schema.fingerprint, "method": "sha256" }
        }),
        DatasetKind::K8s | DatasetKind::Otel | DatasetKind::Host => {
            json!({ "mode": "time_series" })
        }
    };
    json!({
        "settings": { "index": index },
        "mappings": { "dynamic": "strict", "properties": props }
    })
}

fn write_dataset(name: &str, args: &Args) -> Result<()> {
    let ds = Dataset::by_name(name, args.options.clone()).with_context(|| {
        format!(
            "unknown dataset {name:?} (known: {})",
            Dataset::NAMES.join(", ")
        )
    })?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let path = |ext: &str| args.out.join(format!("{name}.{ext}"));
    let total = ds.total_docs();
    let ndjson = path("ndjson");
    let mut w = BufWriter::new(
        File::create(&ndjson).with_context(|| format!("creating {}", ndjson.display()))?,
    );
    // Progress on a terminal only; logs get the one summary line.
    let progress = std::io::stderr().is_terminal();
    let step = (total / 100).max(1);
    let mut written = 0u64;
    for line in ds.ndjson() {
        w.write_all(line.as_bytes())?;
        w.write_all(b"\n")?;
        written += 1;
        if progress && written % step == 0 {
            eprint!("\r{name}: {written}/{total} documents");
        }
    }
    w.flush()?;
    if progress {
        eprintln!();
    }
    if written != total {
        bail!("{name}: wrote {written} documents, the generator announced {total}");
    }
    write_json_file(&path("mapping.json"), &mapping(&ds))?;
    let expected = json!({
        "dataset": name,
        "unique_docs": ds.unique_docs(),
        "total_docs": total,
        "duplicates": total - ds.unique_docs(),
        "series": ds.series_count(),
        "options": args.summary,
    });
    write_json_file(&path("expected.json"), &expected)?;
    println!(
        "{name}: {} ({total} documents, {} unique, {} series), {}, {}",
        ndjson.display(),
        ds.unique_docs(),
        ds.series_count(),
        path("mapping.json").display(),
        path("expected.json").display()
    );
    Ok(())
}

fn write_json_file(path: &Path, value: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

pub fn run(args: &[String]) -> Result<()> {
    let args = parse(args)?;
    for name in &args.names {
        write_dataset(name, &args)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_nests_dotted_paths_and_types_fields() {
        let ds = Dataset::k8s(Options::default().points(100));
        let m = mapping(&ds);
        let props = &m["mappings"]["properties"];
        assert_eq!(props["@timestamp"]["type"], "date");
        let first_metric = ds.schema().metrics[0].0;
        let mut node = props;
        for seg in first_metric.split('.') {
            node = if node.get(seg).is_some() {
                &node[seg]
            } else {
                &node["properties"][seg]
            };
        }
        assert!(node["time_series_metric"].is_string(), "{node}");
    }

    #[test]
    fn events_mapping_has_a_fingerprint_and_typed_fields() {
        let ds = Dataset::events(Options::default().points(1_000));
        let m = mapping(&ds);
        assert_eq!(m["settings"]["index"]["mode"], "events");
        let fields = m["settings"]["index"]["fingerprint"]["fields"]
            .as_array()
            .unwrap();
        assert!(fields.iter().any(|f| f == "message"));
        let props = &m["mappings"]["properties"];
        assert_eq!(props["source"]["properties"]["ip"]["type"], "keyword");
        assert_eq!(props["source"]["properties"]["internal"]["type"], "boolean");
        assert_eq!(props["host"]["properties"]["name"]["type"], "keyword");
        assert_eq!(props["message"]["type"], "keyword");
        assert!(!fields.iter().any(|f| f == "@timestamp"));
    }

    #[test]
    fn writes_ndjson_that_matches_the_counts() {
        let dir = std::env::temp_dir().join(format!("tidemark-gen-test-{}", std::process::id()));
        let args = parse(&[
            "otel".into(),
            "--points".into(),
            "500".into(),
            "--dup-rate".into(),
            "0.2".into(),
            "--out".into(),
            dir.display().to_string(),
        ])
        .unwrap();
        write_dataset("otel", &args).unwrap();
        let text = std::fs::read_to_string(dir.join("otel.ndjson")).unwrap();
        let expected: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("otel.expected.json")).unwrap())
                .unwrap();
        assert_eq!(
            text.lines().count() as u64,
            expected["total_docs"].as_u64().unwrap()
        );
        assert_eq!(expected["unique_docs"], 500);
        assert!(expected["duplicates"].as_u64().unwrap() > 50);
        for line in text.lines() {
            let _: Value = serde_json::from_str(line).unwrap();
        }
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(parse(&["--dup-rate".into(), "2".into()]).is_err());
    }
}
