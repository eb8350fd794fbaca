//! Seed inputs: real, valid examples of every format, made by the code that writes them
//! (the remote-write and OTLP messages, the segment writer, the engine, bloomd's
//! persistence) or taken from the committed fixtures.

use std::path::Path;

use prost::Message;
use serde_json::json;
use tidemark_bloom::{
    BlockedBloomFilter, BloomFilter, Hash64, ScalableBloomFilter, SplitBlockBloomFilter,
};
use tidemark_bloomd::persist;
use tidemark_dedup::{
    AppendBatch, ColumnKind, Engine, EngineConfig, Op, PartitionConfig, PartitionedEngine,
};
use tidemark_segment::{MetricValue, Point, SegmentOptions, SegmentWriter, Tombstones};
use tidemark_server::metrics::otlp;
use tidemark_server::metrics::remote_write::{self, Label, Sample, TimeSeries, WriteRequest};
use tidemark_tsid::{SyntheticId, Tsid};

use crate::files::Template;

pub(crate) const K8S_NDJSON: &[u8] = include_bytes!("../../../fixtures/tidemark/k8s.ndjson");
pub(crate) const EVENTS_NDJSON: &[u8] = include_bytes!("../../../fixtures/tidemark/events.ndjson");
const K8S_VARIANTS: &[u8] = include_bytes!("../../../fixtures/tidemark/k8s-variants.ndjson");
const MALFORMED: &[u8] = include_bytes!("../../../fixtures/tidemark/malformed.ndjson");
const K8S_BULK: &[u8] = include_bytes!("../../../fixtures/tidemark/k8s.bulk");
const K8S_DATAGEN_MAPPING: &[u8] =
    include_bytes!("../../../fixtures/tidemark/k8s-datagen.mapping.json");
const SEGMENTS: [&[u8]; 5] = [
    include_bytes!("../../../fixtures/segment/v1-tiny.tms"),
    include_bytes!("../../../fixtures/segment/v2-tiny.tms"),
    include_bytes!("../../../fixtures/segment/v3-tiny.tms"),
    include_bytes!("../../../fixtures/segment/v4-tiny.tms"),
    include_bytes!("../../../fixtures/segment/v5-tiny.tms"),
];
const BLOOMS: [&[u8]; 5] = [
    include_bytes!("../../../fixtures/bloom/v1-standard.bin"),
    include_bytes!("../../../fixtures/bloom/v1-blocked.bin"),
    include_bytes!("../../../fixtures/bloom/v1-scalable.bin"),
    include_bytes!("../../../fixtures/bloom/v2-split-block.bin"),
    include_bytes!("../../../fixtures/bloom/v2-scalable-split-block.bin"),
];

/// The seeds of target `name` (empty for an unknown name).
pub fn seeds(name: &str) -> Vec<Vec<u8>> {
    match name {
        "remote_write" => write_requests().iter().map(remote_write::encode).collect(),
        "remote_write_proto" => write_requests()
            .iter()
            .map(Message::encode_to_vec)
            .collect(),
        "line_protocol" => line_protocol(),
        "otlp_proto" => vec![otlp_request().encode_to_vec()],
        "otlp_json" => otlp_json(),
        "bulk" | "ingest" => bulk(),
        "doc" => vec![
            K8S_NDJSON.to_vec(),
            K8S_VARIANTS.to_vec(),
            EVENTS_NDJSON.to_vec(),
            MALFORMED.to_vec(),
        ],
        "mapping" => mappings(),
        "search_dsl" => searches(),
        "promql" => promql(),
        "resp" => resp(),
        "segment" => segments(),
        "tombstones" => tombstones(),
        "wal" => file_of(crate::files::engine_template(), "wal-"),
        "manifest" => file_of(crate::files::engine_template(), "MANIFEST"),
        "partitions" => file_of(crate::files::partitions_template(), "PARTITIONS"),
        "bloom" => blooms(),
        "bloomd_snapshot" => snapshot().into_iter().collect(),
        "bloomd_aof" => aof().into_iter().collect(),
        _ => Vec::new(),
    }
}

fn file_of(template: &Template, prefix: &str) -> Vec<Vec<u8>> {
    template
        .file(prefix)
        .map(<[u8]>::to_vec)
        .into_iter()
        .collect()
}

fn labels(pairs: &[(&str, &str)]) -> Vec<Label> {
    pairs
        .iter()
        .map(|(n, v)| Label {
            name: (*n).to_owned(),
            value: (*v).to_owned(),
        })
        .collect()
}

/// What Prometheus sends: series with samples (one a stale marker), metadata, an
/// exemplar; and a request with a native histogram, which the server refuses.
fn write_requests() -> Vec<WriteRequest> {
    let series = |name: &str, job: &str, samples: Vec<Sample>| TimeSeries {
        labels: labels(&[
            ("__name__", name),
            ("job", job),
            ("instance", "localhost:9090"),
        ]),
        samples,
        exemplars: Vec::new(),
        histograms: Vec::new(),
    };
    let at = |t: i64, v: f64| Sample {
        value: v,
        timestamp: 1_764_460_800_000 + t,
    };
    let mut with_exemplar = series(
        "http_requests_total",
        "api",
        vec![at(0, 7.0), at(15_000, 9.0)],
    );
    with_exemplar
        .exemplars
        .push(vec![0x0a, 0x00, 0x11, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f]);
    let mut histogram = series("latency", "api", Vec::new());
    histogram.histograms.push(vec![0x08, 0x03]);
    vec![
        WriteRequest {
            timeseries: vec![
                series("up", "prometheus", vec![at(0, 1.0), at(15_000, 1.0)]),
                series(
                    "go_goroutines",
                    "prometheus",
                    vec![
                        at(0, 42.0),
                        at(15_000, f64::from_bits(otlp::STALE_NAN_BITS)),
                    ],
                ),
                with_exemplar,
            ],
            metadata: vec![b"\x08\x01\x12\x02up\x1a\x04help".to_vec()],
        },
        WriteRequest {
            timeseries: vec![histogram],
            metadata: Vec::new(),
        },
    ]
}

fn line_protocol() -> Vec<Vec<u8>> {
    vec![
        b"cpu,host=a,region=eu usage=0.5,idle=99i 1700000000000000000\n\
          mem,host=a used=1024u,ok=t,msg=\"fine\" 1700000000000000000\n"
            .to_vec(),
        br#"cpu\ load,host=a\,b,region=eu\ west usage=1.5,n=3i,u=4u,ok=t,msg="say \"hi\", ok" 1700000000000000000"#
            .to_vec(),
        b"# comment\r\n\r\nweather,station=x\\=y temp=-2e3,wet=FALSE\r\nweather temp=1\n".to_vec(),
    ]
}

/// An OTLP request with each kind of metric and of attribute value.
fn otlp_request() -> otlp::ExportMetricsServiceRequest {
    use otlp::*;
    let kv = |key: &str, value: AnyValue| KeyValue {
        key: key.to_owned(),
        value: Some(value),
    };
    let text = |s: &str| AnyValue {
        string_value: Some(s.to_owned()),
        ..AnyValue::default()
    };
    let t = 1_764_460_800_000_000_000u64;
    let number = |v: f64, attrs: Vec<KeyValue>| NumberDataPoint {
        attributes: attrs,
        time_unix_nano: t,
        as_double: Some(v),
        as_int: None,
        flags: 0,
    };
    let metric = |name: &str| Metric {
        name: name.to_owned(),
        unit: "1".to_owned(),
        ..Metric::default()
    };
    let mut gauge = metric("temperature");
    gauge.gauge = Some(Gauge {
        data_points: vec![
            number(21.5, vec![kv("room", text("a"))]),
            NumberDataPoint {
                flags: 1,
                ..number(0.0, Vec::new())
            },
        ],
    });
    let mut sum = metric("requests");
    sum.sum = Some(Sum {
        data_points: vec![NumberDataPoint {
            as_double: None,
            as_int: Some(42),
            ..number(
                0.0,
                vec![kv(
                    "code",
                    AnyValue {
                        int_value: Some(200),
                        ..AnyValue::default()
                    },
                )],
            )
        }],
        aggregation_temporality: 2,
        is_monotonic: true,
    });
    let mut histogram = metric("latency");
    histogram.histogram = Some(Histogram {
        data_points: vec![HistogramDataPoint {
            attributes: vec![kv(
                "ok",
                AnyValue {
                    bool_value: Some(true),
                    ..AnyValue::default()
                },
            )],
            time_unix_nano: t,
            count: 3,
            sum: Some(0.6),
            bucket_counts: vec![1, 2, 0],
            explicit_bounds: vec![0.1, 0.5],
            flags: 0,
        }],
        aggregation_temporality: 2,
    });
    let mut summary = metric("rpc");
    summary.summary = Some(Summary {
        data_points: vec![SummaryDataPoint {
            attributes: vec![kv(
                "ratio",
                AnyValue {
                    double_value: Some(0.25),
                    ..AnyValue::default()
                },
            )],
            time_unix_nano: t,
            count: 10,
            sum: 2.5,
            quantile_values: vec![ValueAtQuantile {
                quantile: 0.5,
                value: 0.2,
            }],
            flags: 0,
        }],
    });
    let mut expo = metric("expo");
    expo.exponential_histogram = Some(Histogram {
        data_points: vec![HistogramDataPoint::default()],
        aggregation_temporality: 1,
    });
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", text("api")),
                    kv(
                        "raw",
                        AnyValue {
                            bytes_value: Some(vec![1, 2, 3]),
                            ..AnyValue::default()
                        },
                    ),
                ],
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "lib".to_owned(),
                    version: "1.0".to_owned(),
                }),
                metrics: vec![gauge, sum, histogram, summary, expo],
            }],
        }],
    }
}

fn otlp_json() -> Vec<Vec<u8>> {
    let body = json!({"resourceMetrics": [{
    "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "api"}},
        {"key": "list", "value": {"arrayValue": {"values": [{"intValue": "1"}]}}}]},
    "scopeMetrics": [{"scope": {"name": "lib", "version": "2"}, "metrics": [
        {"name": "temp", "unit": "Cel", "gauge": {"dataPoints": [{"timeUnixNano": "1764460800000000000",
            "asDouble": 21.5, "attributes": [{"key": "room", "value": {"stringValue": "a"}}]},
            {"timeUnixNano": "1764460800000000000", "asDouble": "NaN", "flags": 1}]}},
        {"name": "requests", "sum": {"isMonotonic": true, "aggregationTemporality": 2,
            "dataPoints": [{"timeUnixNano": 1764460800000000000u64, "asInt": "42",
            "attributes": [{"key": "ok", "value": {"boolValue": true}}]}]}},
        {"name": "latency", "histogram": {"aggregationTemporality": "AGGREGATION_TEMPORALITY_CUMULATIVE",
            "dataPoints": [{"timeUnixNano": "1764460800000000000", "count": "3", "sum": 0.6,
            "bucketCounts": ["1", "2", "0"], "explicitBounds": [0.1, 0.5]}]}},
        {"name": "rpc", "summary": {"dataPoints": [{"time_unix_nano": "1764460800000000000",
            "count": 10, "sum": 2.5, "quantileValues": [{"quantile": 0.5, "value": "Infinity"}]}]}},
        {"name": "nope", "exponentialHistogram": {"dataPoints": [{}]}}
    ]}]}]});
    vec![
        body.to_string().into_bytes(),
        br#"{"resourceMetrics": []}"#.to_vec(),
    ]
}

fn bulk() -> Vec<Vec<u8>> {
    let actions = concat!(
        r#"{"create":{"_index":"metrics","_id":"x"}}"#,
        "\n",
        r#"{"@timestamp":"2025-11-30T00:00:00Z","k8s":{"cluster":{"name":"c"},"namespace":{"name":"n"},"pod":{"name":"p","cpu":{"utilization":0.25},"restarts":3}}}"#,
        "\n",
        r#"{"index":{}}"#,
        "\n",
        r#"{"@timestamp":1764460800000,"k8s.cluster.name":"c","k8s.namespace.name":"n","k8s.pod.name":"q","k8s.pod.ready":false}"#,
        "\n\n",
        r#"{"update":{"_id":"AAAA"}}"#,
        "\n",
        r#"{"doc":{"k8s":{"pod":{"cpu":{"utilization":0.5}}}}}"#,
        "\n",
        r#"{"delete":{"_id":"AAAA"}}"#,
        "\r\n",
        r#"{"create" {}"#,
        "\n",
        r#"{"skipped": true}"#,
        "\n",
        r#"{"create":{}}"#,
        "\n",
    );
    vec![K8S_BULK.to_vec(), actions.as_bytes().to_vec()]
}

fn mappings() -> Vec<Vec<u8>> {
    let es = json!({
        "settings": {"index.mode": "time_series", "index": {"routing_path": ["host"], "number_of_shards": 1}},
        "mappings": {"dynamic": true, "dynamic_templates": [], "properties": {
            "@timestamp": {"type": "date_nanos"},
            "host": {"type": "keyword", "time_series_dimension": true},
            "port": {"type": "long", "time_series_dimension": true},
            "addr": {"type": "ip", "time_series_dimension": true},
            "load": {"type": "scaled_float", "scaling_factor": 100, "time_series_metric": "gauge"},
            "bytes": {"type": "unsigned_long", "time_series_metric": "counter"},
            "note": {"type": "text"},
            "up": {"type": "boolean"}}},
        "aliases": {"m": {}}
    });
    let template = json!({"index_patterns": ["metrics-*", "logs-*"], "template": es.clone()});
    vec![
        crate::es::K8S_MAPPING.to_vec(),
        crate::es::EVENTS_MAPPING.to_vec(),
        K8S_DATAGEN_MAPPING.to_vec(),
        es.to_string().into_bytes(),
        template.to_string().into_bytes(),
    ]
}

fn searches() -> Vec<Vec<u8>> {
    let bodies = [
        json!({"query": {"bool": {
            "filter": [{"term": {"k8s.pod.name": "web-1"}},
                {"range": {"@timestamp": {"gte": "now-1d/d", "lt": "2025-11-30T12:00:00Z", "format": "strict_date_optional_time"}}}],
            "must_not": [{"exists": {"field": "k8s.pod.ready"}}],
            "should": [{"terms": {"k8s.cluster.name": ["prod", "dev"]}}, {"prefix": {"k8s.pod.name": "web"}}],
            "minimum_should_match": 1}},
            "size": 5, "from": "1", "sort": [{"@timestamp": {"order": "desc"}}], "_source": ["k8s.pod.*"],
            "track_total_hits": true}),
        json!({"size": 0, "query": {"constant_score": {"filter": {"match": {"k8s.namespace.name": "shop"}}}},
            "aggs": {"per_hour": {"date_histogram": {"field": "@timestamp", "fixed_interval": "1h",
                "min_doc_count": 0, "extended_bounds": {"min": 1764460800000i64, "max": "now"}},
                "aggs": {"cpu": {"avg": {"field": "k8s.pod.cpu.utilization"}},
                    "pods": {"terms": {"field": "k8s.pod.name", "size": 3},
                        "aggs": {"restarts": {"max": {"field": "k8s.pod.restarts"}}}}}},
                "months": {"date_histogram": {"field": "@timestamp", "calendar_interval": "1M"}},
                "n": {"cardinality": {"field": "k8s.pod.name"}}},
            "filter_path": "aggregations.*.buckets,-took"}),
        json!({"query": {"regexp": {"k8s.pod.name": {"value": "web-[0-9]+"}}}, "sort": "@timestamp:asc",
            "rollup": "1h"}),
        json!({"query": {"ids": {"values": ["AAAA"]}}, "_source": false}),
        json!({"query": {"match_none": {}}}),
    ];
    bodies.iter().map(|b| b.to_string().into_bytes()).collect()
}

fn promql() -> Vec<Vec<u8>> {
    [
        "up",
        r#"sum by (job) (rate(http_requests_total{job=~"api|db", code!="500"}[5m]))"#,
        "histogram_quantile(0.9, sum by (le) (rate(latency_seconds_bucket[10m])))",
        "max_over_time(temperature[30m:1m] offset 5m) > bool 20",
        r#"label_replace(up, "host", "$1", "instance", "(.*):.*") or vector(1)"#,
        "topk(2, avg_over_time(up[1h] @ 3600)) / on(job) group_left count(up) * -1 ^ 2",
        r#"{__name__=~"up|temperature", room!~"x.*"} unless absent(nothing)"#,
        "quantile_over_time(0.5, http_requests_total[15m]) + scalar(time() - 1e3)",
        "count_values(\"v\", up) % 2 and on() clamp(sort_desc(up), 0, 1)",
        "# a comment\n  round(predict_linear(temperature[20m], 600), 0.1)",
    ]
    .iter()
    .map(|q| q.as_bytes().to_vec())
    .collect()
}

fn resp() -> Vec<Vec<u8>> {
    let mut dump = b"TMBDDUMP".to_vec();
    let filter = ScalableBloomFilter::new(100, 0.01)
        .map(|mut f| {
            let _ = f.add(b"a");
            f.to_bytes()
        })
        .unwrap_or_default();
    dump.extend_from_slice(&(filter.len() as u64).to_le_bytes());
    let mut multibulk = Vec::new();
    for cmd in [
        vec![
            &b"BF.RESERVE"[..],
            b"f",
            b"0.01",
            b"100",
            b"EXPANSION",
            b"2",
        ],
        vec![b"BF.MADD", b"f", b"a", b"b", b"c"],
        vec![
            b"BF.INSERT",
            b"g",
            b"CAPACITY",
            b"50",
            b"ERROR",
            b"0.001",
            b"NONSCALING",
            b"ITEMS",
            b"x",
        ],
        vec![b"BF.MEXISTS", b"f", b"a", b"z"],
        vec![b"BF.INFO", b"f", b"CAPACITY"],
        vec![b"BF.SCANDUMP", b"f", b"0"],
        vec![b"BF.LOADCHUNK", b"h", b"1", &dump],
        vec![b"BF.LOADCHUNK", b"h", b"17", &filter],
        vec![b"BF.CARD", b"h"],
        vec![b"BF.MERGE", b"f", b"g"],
        vec![b"BF.DEBUG", b"f"],
    ] {
        tidemark_bloomd::resp::encode_command(&cmd, &mut multibulk);
    }
    vec![
        multibulk,
        b"BF.ADD f item\r\nBF.EXISTS f item\nPING\r\n*0\r\n\r\n".to_vec(),
    ]
}

fn tsid(n: u8) -> Tsid {
    let mut b = [0u8; 20];
    b[0] = n;
    b[19] = n.wrapping_mul(7);
    Tsid::from_bytes(b)
}

fn point(series: u8, ts_millis: i64) -> Point {
    Point::new(tsid(series), ts_millis)
        .dim("host", format!("h{series}"))
        .dim("port", i64::from(series) + 8000)
        .gauge("cpu", f64::from(series) / 4.0 + ts_millis as f64 / 1e9)
        .counter("requests", ts_millis / 1000)
}

fn segments() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = SEGMENTS.iter().map(|s| s.to_vec()).collect();
    let write = |options: SegmentOptions, events: bool| -> Option<Vec<u8>> {
        let mut w = SegmentWriter::new(options).ok()?;
        for s in 0..3u8 {
            for i in 0..40i64 {
                let ts = 1_764_460_800_000 + i * 10_000 + if s == 2 { i * i } else { 0 };
                let p = point(s, ts);
                let p = if i % 3 == 0 {
                    p.keyword("status", "ok").flag("ready", i % 2 == 0)
                } else {
                    p
                };
                if events {
                    // Event ids are fingerprints; any distinct ids will do here.
                    w.push_with_id(p.clone(), SyntheticId::new(tsid(100 + s), ts))
                        .ok()?;
                    w.push_with_id(p, SyntheticId::new(tsid(200 + s), ts))
                        .ok()?;
                } else {
                    let extras = p.extras.clone();
                    let mut p = p;
                    p.extras.clear();
                    w.push_with_extras(p, extras).ok()?;
                }
            }
        }
        w.to_vec().ok().map(|(bytes, _)| bytes)
    };
    let options = SegmentOptions::new().with_block_rows(16);
    out.extend(write(options.clone(), false));
    out.extend(write(
        options.clone().with_bloom(0.01).with_id_index(true),
        false,
    ));
    out.extend(write(options.with_events(true).with_bloom(0.05), true));
    out
}

fn tombstones() -> Vec<Vec<u8>> {
    let mut t = Tombstones::new(1000);
    for row in [0, 3, 4, 5, 999] {
        let _ = t.delete(row);
    }
    let next = t.next_generation();
    [t.to_bytes().ok(), next.to_bytes().ok()]
        .into_iter()
        .flatten()
        .collect()
}

/// A real engine directory: points created, indexed and deleted, a refresh (a segment
/// and a new log), then appends by ref and more deletes in the new log, never refreshed.
pub(crate) fn engine_dir() -> Option<Template> {
    let tmp = tempfile::tempdir().ok()?;
    let dir = tmp.path().join("engine");
    let mut engine = Engine::create(&dir, EngineConfig::default()).ok()?;
    let ops = (0..3u8)
        .flat_map(|s| (0..5).map(move |i| Op::Create(point(s, 1_764_460_800_000 + i * 1000))))
        .collect::<Vec<_>>();
    engine.batch(ops).ok()?;
    engine.refresh().ok()?;
    engine
        .batch([
            Op::Index(point(0, 1_764_460_800_000).keyword("status", "replaced")),
            Op::Delete(SyntheticId::new(tsid(1), 1_764_460_801_000)),
            Op::Create(point(4, 1_764_460_900_000).flag("ready", true)),
        ])
        .ok()?;
    let series = engine
        .series(tsid(5), vec![("host".into(), "h5".into())])
        .ok()?;
    let cpu = engine.column("cpu", ColumnKind::Gauge).ok()?;
    let requests = engine.column("requests", ColumnKind::Counter).ok()?;
    let mut batch = AppendBatch::new();
    for i in 0..4 {
        batch.create(
            series,
            1_764_460_800_000 + i * 500,
            &[
                (cpu, MetricValue::Gauge(0.5)),
                (requests, MetricValue::Counter(i)),
            ],
        );
    }
    engine.append(&batch).ok()?;
    drop(engine);
    Some(Template::of_dir(&dir))
}

/// A real partitioned store: hourly partitions with 5-minute rollups over three hours
/// of points, the first hour sealed.
pub(crate) fn partitioned_dir() -> Option<Template> {
    const HOUR: i64 = 3_600_000;
    let tmp = tempfile::tempdir().ok()?;
    let dir = tmp.path().join("store");
    let config = PartitionConfig::new()
        .with_width_ms(HOUR)
        .with_rollups(vec![300_000])
        .with_seal_grace_ms(0);
    let mut store = PartitionedEngine::create(&dir, EngineConfig::default(), config).ok()?;
    let start = 1_764_460_800_000;
    let ops = (0..2u8)
        .flat_map(|s| (0..18).map(move |i| Op::Create(point(s, start + i * 600_000))))
        .collect::<Vec<_>>();
    store.batch(ops).ok()?;
    store.seal(start).ok()?;
    store.refresh().ok()?;
    store.close().ok()?;
    Some(Template::of_dir(&dir))
}

fn blooms() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = BLOOMS.iter().map(|b| b.to_vec()).collect();
    let items: Vec<Vec<u8>> = (0..50u32).map(|i| i.to_le_bytes().to_vec()).collect();
    if let Ok(mut f) = BloomFilter::with_capacity(100, 0.01) {
        items.iter().for_each(|i| _ = f.insert(i));
        out.push(f.to_bytes());
    }
    if let Ok(mut f) = BlockedBloomFilter::with_capacity(100, 0.01) {
        items.iter().for_each(|i| _ = f.insert(i));
        out.push(f.to_bytes());
    }
    if let Ok(mut f) = SplitBlockBloomFilter::with_rate(100, 0.01) {
        items.iter().for_each(|i| _ = f.insert(i));
        out.push(f.to_bytes());
    }
    let standard = ScalableBloomFilter::builder(8, 0.01).expansion(2).build();
    let split = ScalableBloomFilter::builder(8, 0.01)
        .expansion(2)
        .split_block(Hash64::PARQUET)
        .build();
    for mut f in [standard, split].into_iter().flatten() {
        items.iter().for_each(|i| _ = f.add(i));
        out.push(f.to_bytes());
    }
    out
}

fn snapshot() -> Option<Vec<u8>> {
    let tmp = tempfile::tempdir().ok()?;
    let mut filter = ScalableBloomFilter::new(20, 0.01).ok()?;
    for i in 0..30u32 {
        filter.add(&i.to_le_bytes()).ok()?;
    }
    let image = persist::Image {
        entries: vec![
            persist::SavedEntry {
                key: b"filter".to_vec(),
                expire_ms: i64::MAX,
                kind: 1,
                bytes: filter.to_bytes(),
            },
            persist::SavedEntry {
                key: b"greeting".to_vec(),
                expire_ms: 1_764_460_800_000,
                kind: 2,
                bytes: b"hello".to_vec(),
            },
        ],
        aof_id: 7,
        aof_offset: 16,
    };
    let path = tmp.path().join("dump.tmbd");
    persist::write_snapshot(&image, &path).ok()?;
    std::fs::read(&path).ok()
}

fn aof() -> Option<Vec<u8>> {
    let tmp = tempfile::tempdir().ok()?;
    let path = tmp.path().join("appendonly.tmbd");
    let aof = persist::Aof::open(&path, tidemark_bloomd::AppendFsync::No, None).ok()?;
    aof.append(&[b"BF.RESERVE", b"f", b"0.01", b"100"]);
    aof.append(&[b"BF.MADD", b"f", b"a", b"b"]);
    aof.append(&[b"SET", b"k", b"v"]);
    aof.append(&[b"DEL", b"k"]);
    aof.flush().ok()?;
    drop(aof);
    read(&path)
}

fn read(path: &Path) -> Option<Vec<u8>> {
    std::fs::read(path).ok()
}
