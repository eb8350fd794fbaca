//! The generators.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::json::write_json;
use crate::rng::{Rng, mix, unit};

/// Which dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatasetKind {
    /// Kubernetes pod metrics: 8 metrics per document, 10 s interval.
    K8s,
    /// OpenTelemetry metrics: one value per document, 60 s interval.
    Otel,
    /// Security and log events with no natural key: message text, source ip, user,
    /// action, outcome; second-precision timestamps shared by many events of a host.
    Events,
    /// Host and IoT sensor metrics as agents report them: 5 gauges written with 1 to 3
    /// decimals (CPU %, load, temperature, humidity, memory GB) and 3 integer counters
    /// per document, 10 s interval.
    Host,
}

/// How a metric behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// A reading that goes up and down (`f64`).
    Gauge,
    /// A monotonic cumulative sum (`i64`).
    Counter,
}

/// A dimension value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dim {
    /// A keyword.
    Keyword(String),
    /// An integer.
    Int(i64),
}

/// A metric value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MetricVal {
    /// Gauge reading.
    Gauge(f64),
    /// Counter reading.
    Counter(i64),
}

/// A value of a document field that is neither a dimension nor a metric (an event's
/// message, user, action...), stored per document.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Field {
    /// A keyword.
    Keyword(String),
    /// A boolean.
    Bool(bool),
}

/// Which fields of a document are what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    /// Dataset name (`k8s`, `otel`).
    pub name: &'static str,
    /// The timestamp field (epoch milliseconds, integer).
    pub timestamp_field: &'static str,
    /// Nominal interval between two points of a series.
    pub interval_millis: i64,
    /// Dimension fields (dotted paths into the nested document); a series has a subset.
    pub dimensions: Vec<&'static str>,
    /// Metric fields (dotted paths) and kinds; an OTel document has exactly one.
    pub metrics: Vec<(&'static str, MetricKind)>,
    /// Other per-document fields (events: message, source ip, user...); empty for the
    /// metric datasets.
    pub fields: Vec<&'static str>,
    /// The fields whose content identifies an event (the fingerprint of the events mode,
    /// dimensions included; the timestamp is always part of an event id, apart); empty
    /// for the metric datasets, whose identity is (dimensions, timestamp).
    pub fingerprint: Vec<&'static str>,
}

/// Generator options. Every field has a builder method; the defaults are the documented
/// dataset sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    points: Option<u64>,
    series: Option<u32>,
    seed: u64,
    dup_rate: f64,
    late_rate: f64,
    disorder: f64,
    shuffle_keys: bool,
    start_millis: i64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            points: None,
            series: None,
            seed: 42,
            dup_rate: 0.0,
            late_rate: 0.0,
            disorder: 0.0,
            shuffle_keys: false,
            start_millis: 1_764_460_800_000, // 2025-11-30T00:00:00Z
        }
    }
}

impl Options {
    /// Unique documents to generate (default: one hour: series × 360 for k8s, × 60 for otel).
    pub fn points(mut self, n: u64) -> Options {
        self.points = Some(n);
        self
    }

    /// Number of series (default 2,000 for k8s, 21,000 for otel).
    pub fn series(mut self, n: u32) -> Options {
        self.series = Some(n.max(1));
        self
    }

    /// Seed of every random choice (default 42).
    pub fn seed(mut self, seed: u64) -> Options {
        self.seed = seed;
        self
    }

    /// Fraction of documents sent a second time, a little later (retries). Default 0.
    pub fn dup_rate(mut self, rate: f64) -> Options {
        self.dup_rate = rate.clamp(0.0, 1.0);
        self
    }

    /// Fraction of documents delayed by up to two intervals of all series. Default 0.
    pub fn late_rate(mut self, rate: f64) -> Options {
        self.late_rate = rate.clamp(0.0, 1.0);
        self
    }

    /// Fraction of retries sent *before* their originals (default 0): such a copy goes
    /// out up to ten intervals' worth of documents early, ahead of earlier points of its
    /// own series, as when a shipper's retry overtakes the first attempt. The early copy
    /// is the one a store sees first; the original, on time, is then the duplicate
    /// ([`Record::duplicate`]). This is the stream that widens a series' time range in a
    /// segment past the points still to come.
    pub fn disorder(mut self, fraction: f64) -> Options {
        self.disorder = fraction.clamp(0.0, 1.0);
        self
    }

    /// Whether JSON text ([`Dataset::ndjson`]) writes object keys in a random order.
    pub fn shuffle_keys(mut self, on: bool) -> Options {
        self.shuffle_keys = on;
        self
    }

    /// Timestamp of the first interval (epoch ms, default 2025-11-30T00:00:00Z).
    pub fn start_millis(mut self, ms: i64) -> Options {
        self.start_millis = ms;
        self
    }
}

/// One generated document, typed.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Series number (0-based).
    pub series: u32,
    /// Timestamp, epoch milliseconds.
    pub ts_millis: i64,
    /// The series' dimensions (dotted path, value), shared by all its records.
    pub dims: Arc<[(&'static str, Dim)]>,
    /// Metric values (dotted path, value).
    pub metrics: Vec<(&'static str, MetricVal)>,
    /// Other fields (dotted path, value): an event's message, source ip, user...; empty
    /// in the metric datasets.
    pub fields: Vec<(&'static str, Field)>,
    /// Whether this is a re-sent copy of an earlier document.
    pub duplicate: bool,
    /// Whether this document was delayed.
    pub late: bool,
}

fn insert_path(map: &mut Map<String, Value>, path: &str, value: Value) {
    match path.split_once('.') {
        None => {
            map.insert(path.to_owned(), value);
        }
        Some((head, rest)) => {
            let child = map
                .entry(head.to_owned())
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(m) = child {
                insert_path(m, rest, value);
            }
        }
    }
}

impl Record {
    /// The document as nested JSON: `@timestamp`, then every dotted path as nested objects.
    pub fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("@timestamp".to_owned(), Value::from(self.ts_millis));
        for (path, d) in self.dims.iter() {
            let v = match d {
                Dim::Keyword(s) => Value::from(s.as_str()),
                Dim::Int(i) => Value::from(*i),
            };
            insert_path(&mut map, path, v);
        }
        for (path, m) in &self.metrics {
            let v = match m {
                MetricVal::Gauge(g) => {
                    serde_json::Number::from_f64(*g).map_or(Value::Null, Value::Number)
                }
                MetricVal::Counter(c) => Value::from(*c),
            };
            insert_path(&mut map, path, v);
        }
        for (path, f) in &self.fields {
            let v = match f {
                Field::Keyword(s) => Value::from(s.as_str()),
                Field::Bool(b) => Value::from(*b),
            };
            insert_path(&mut map, path, v);
        }
        Value::Object(map)
    }

    /// The tsid of this record's series, as `computer` (from [`Dataset::tsid_computer`])
    /// computes it for the JSON document.
    ///
    /// # Errors
    /// Those of [`tidemark_tsid::TsidComputer::tsid_from_pairs`].
    #[cfg(feature = "tsid")]
    pub fn tsid(
        &self,
        computer: &mut tidemark_tsid::TsidComputer,
    ) -> tidemark_tsid::Result<tidemark_tsid::Tsid> {
        let pairs: Vec<(&str, tidemark_tsid::DimValue<'_>)> = self
            .dims
            .iter()
            .map(|(p, d)| {
                let v = match d {
                    Dim::Keyword(s) => tidemark_tsid::DimValue::Keyword(s),
                    Dim::Int(i) => tidemark_tsid::DimValue::I64(*i),
                };
                (*p, v)
            })
            .collect();
        let names: Vec<&str> = self.metrics.iter().map(|(p, _)| *p).collect();
        computer.tsid_from_pairs(&pairs, &names)
    }
}

/// A configured dataset: cheap to create; documents are generated lazily.
#[derive(Debug, Clone)]
pub struct Dataset {
    kind: DatasetKind,
    options: Options,
    schema: Schema,
    series: u32,
    points: u64,
}

const K8S_METRICS: [(&str, MetricKind); 8] = [
    ("k8s.pod.cpu.usage_ns", MetricKind::Counter),
    ("k8s.pod.cpu.utilization", MetricKind::Gauge),
    ("k8s.pod.memory.usage_bytes", MetricKind::Gauge),
    ("k8s.pod.memory.working_set_bytes", MetricKind::Gauge),
    ("k8s.pod.memory.available_bytes", MetricKind::Gauge),
    ("k8s.pod.network.rx_bytes", MetricKind::Counter),
    ("k8s.pod.network.tx_bytes", MetricKind::Counter),
    ("k8s.container.restarts", MetricKind::Counter),
];

const K8S_DIMS: [&str; 6] = [
    "k8s.cluster.name",
    "k8s.namespace.name",
    "k8s.node.name",
    "k8s.pod.name",
    "k8s.pod.uid",
    "k8s.container.name",
];

const OTEL_DIMS: [&str; 9] = [
    "resource.attributes.service.name",
    "resource.attributes.host.name",
    "resource.attributes.cloud.region",
    "attributes.http.route",
    "attributes.http.request.method",
    "attributes.cpu",
    "attributes.state",
    "attributes.direction",
    "attributes.device",
];

/// OTel metrics: name, kind, integer-valued (for gauges), attribute sets.
struct OtelMetric {
    name: &'static str,
    kind: MetricKind,
    integral: bool,
    attrs: &'static [&'static [(&'static str, &'static str)]],
}

macro_rules! attrs {
    ($([$(($k:expr, $v:expr)),*]),* $(,)?) => { &[$(&[$(($k, $v)),*]),*] };
}

const OTEL_METRICS: [OtelMetric; 8] = [
    OtelMetric {
        name: "metrics.http.server.request.duration",
        kind: MetricKind::Gauge,
        integral: false,
        attrs: attrs![
            [
                ("attributes.http.route", "/"),
                ("attributes.http.request.method", "GET")
            ],
            [
                ("attributes.http.route", "/"),
                ("attributes.http.request.method", "POST")
            ],
            [
                ("attributes.http.route", "/api/cart"),
                ("attributes.http.request.method", "GET")
            ],
            [
                ("attributes.http.route", "/api/cart"),
                ("attributes.http.request.method", "POST")
            ],
            [
                ("attributes.http.route", "/api/checkout"),
                ("attributes.http.request.method", "GET")
            ],
            [
                ("attributes.http.route", "/api/checkout"),
                ("attributes.http.request.method", "POST")
            ],
            [
                ("attributes.http.route", "/api/products/{id}"),
                ("attributes.http.request.method", "GET")
            ],
            [
                ("attributes.http.route", "/api/products/{id}"),
                ("attributes.http.request.method", "POST")
            ],
            [
                ("attributes.http.route", "/health"),
                ("attributes.http.request.method", "GET")
            ],
            [
                ("attributes.http.route", "/health"),
                ("attributes.http.request.method", "POST")
            ],
        ],
    },
    OtelMetric {
        name: "metrics.http.server.active_requests",
        kind: MetricKind::Gauge,
        integral: true,
        attrs: attrs![[]],
    },
    OtelMetric {
        name: "metrics.system.cpu.utilization",
        kind: MetricKind::Gauge,
        integral: false,
        attrs: attrs![
            [("attributes.cpu", "cpu0"), ("attributes.state", "user")],
            [("attributes.cpu", "cpu0"), ("attributes.state", "system")],
            [("attributes.cpu", "cpu0"), ("attributes.state", "idle")],
            [("attributes.cpu", "cpu1"), ("attributes.state", "user")],
            [("attributes.cpu", "cpu1"), ("attributes.state", "system")],
            [("attributes.cpu", "cpu1"), ("attributes.state", "idle")],
            [("attributes.cpu", "cpu2"), ("attributes.state", "user")],
            [("attributes.cpu", "cpu2"), ("attributes.state", "system")],
            [("attributes.cpu", "cpu2"), ("attributes.state", "idle")],
            [("attributes.cpu", "cpu3"), ("attributes.state", "user")],
            [("attributes.cpu", "cpu3"), ("attributes.state", "system")],
            [("attributes.cpu", "cpu3"), ("attributes.state", "idle")],
        ],
    },
    OtelMetric {
        name: "metrics.system.memory.usage",
        kind: MetricKind::Gauge,
        integral: true,
        attrs: attrs![
            [("attributes.state", "used")],
            [("attributes.state", "cached")],
            [("attributes.state", "free")],
        ],
    },
    OtelMetric {
        name: "metrics.system.network.io",
        kind: MetricKind::Counter,
        integral: true,
        attrs: attrs![
            [
                ("attributes.direction", "receive"),
                ("attributes.device", "eth0")
            ],
            [
                ("attributes.direction", "transmit"),
                ("attributes.device", "eth0")
            ],
            [
                ("attributes.direction", "receive"),
                ("attributes.device", "lo")
            ],
            [
                ("attributes.direction", "transmit"),
                ("attributes.device", "lo")
            ],
        ],
    },
    OtelMetric {
        name: "metrics.system.disk.io",
        kind: MetricKind::Counter,
        integral: true,
        attrs: attrs![
            [("attributes.direction", "read")],
            [("attributes.direction", "write")]
        ],
    },
    OtelMetric {
        name: "metrics.process.runtime.gc.count",
        kind: MetricKind::Counter,
        integral: true,
        attrs: attrs![[]],
    },
    OtelMetric {
        name: "metrics.db.client.connections.usage",
        kind: MetricKind::Gauge,
        integral: true,
        attrs: attrs![
            [("attributes.state", "idle")],
            [("attributes.state", "used")]
        ],
    },
];

const HOST_METRICS: [(&str, MetricKind); 8] = [
    ("host.cpu.user_pct", MetricKind::Gauge),
    ("host.load.1m", MetricKind::Gauge),
    ("sensor.temperature_c", MetricKind::Gauge),
    ("sensor.humidity_pct", MetricKind::Gauge),
    ("host.memory.used_gb", MetricKind::Gauge),
    ("host.network.rx_bytes", MetricKind::Counter),
    ("host.disk.write_ops", MetricKind::Counter),
    ("host.uptime_s", MetricKind::Counter),
];

const HOST_DIMS: [&str; 3] = ["host.name", "host.region", "host.role"];

/// Series per OTel resource (sum of the attribute sets above).
const OTEL_VARIANTS: u32 = 35;

const NAMESPACES: [&str; 12] = [
    "default",
    "kube-system",
    "monitoring",
    "payments",
    "checkout",
    "catalog",
    "search",
    "auth",
    "ingress",
    "logging",
    "data",
    "ml",
];
const DEPLOYMENTS: [&str; 20] = [
    "api",
    "web",
    "worker",
    "cart",
    "checkout",
    "catalog",
    "search",
    "auth",
    "gateway",
    "payments",
    "orders",
    "inventory",
    "shipping",
    "email",
    "recommend",
    "ads",
    "redis",
    "postgres",
    "kafka",
    "prometheus",
];
const CLUSTERS: [&str; 3] = ["prod-eu-west-1", "prod-us-east-1", "staging-eu-west-1"];
const SERVICES: [&str; 30] = [
    "frontend",
    "cart",
    "checkout",
    "payment",
    "shipping",
    "email",
    "currency",
    "ad",
    "recommendation",
    "product-catalog",
    "quote",
    "accounting",
    "fraud-detection",
    "inventory",
    "auth",
    "gateway",
    "search",
    "orders",
    "users",
    "notifications",
    "billing",
    "reports",
    "media",
    "pricing",
    "reviews",
    "loyalty",
    "geo",
    "tax",
    "returns",
    "warehouse",
];
const REGIONS: [&str; 3] = ["eu-west-1", "us-east-1", "ap-southeast-2"];
const ALNUM: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn token(h: u64, len: usize) -> String {
    let mut h = h;
    (0..len)
        .map(|_| {
            let c = ALNUM
                .get((h % ALNUM.len() as u64) as usize)
                .copied()
                .unwrap_or(b'x');
            h = mix(h);
            char::from(c)
        })
        .collect()
}

impl Dataset {
    /// The Kubernetes pod metrics dataset.
    pub fn k8s(options: Options) -> Dataset {
        let series = options.series.unwrap_or(2_000);
        let points = options.points.unwrap_or(u64::from(series) * 360);
        Dataset {
            kind: DatasetKind::K8s,
            schema: Schema {
                name: "k8s",
                timestamp_field: "@timestamp",
                interval_millis: 10_000,
                dimensions: K8S_DIMS.to_vec(),
                metrics: K8S_METRICS.to_vec(),
                fields: Vec::new(),
                fingerprint: Vec::new(),
            },
            options,
            series,
            points,
        }
    }

    /// The OpenTelemetry metrics dataset.
    pub fn otel(options: Options) -> Dataset {
        let series = options.series.unwrap_or(21_000);
        let points = options.points.unwrap_or(u64::from(series) * 60);
        Dataset {
            kind: DatasetKind::Otel,
            schema: Schema {
                name: "otel",
                timestamp_field: "@timestamp",
                interval_millis: 60_000,
                dimensions: OTEL_DIMS.to_vec(),
                metrics: OTEL_METRICS.iter().map(|m| (m.name, m.kind)).collect(),
                fields: Vec::new(),
                fingerprint: Vec::new(),
            },
            options,
            series,
            points,
        }
    }

    /// The security/log events dataset: `series` hosts (default 100) emitting together
    /// `10 × series` events per second (at most 60,000), second-precision timestamps.
    pub fn events(options: Options) -> Dataset {
        let series = options.series.unwrap_or(100);
        let points = options
            .points
            .unwrap_or(events_per_second(series) * EVENTS_DEFAULT_SECONDS);
        let mut fingerprint = vec!["host.name"];
        fingerprint.extend(EVENT_FIELDS);
        Dataset {
            kind: DatasetKind::Events,
            schema: Schema {
                name: "events",
                timestamp_field: "@timestamp",
                interval_millis: 1_000,
                dimensions: vec!["host.name"],
                metrics: Vec::new(),
                fields: EVENT_FIELDS.to_vec(),
                fingerprint,
            },
            options,
            series,
            points,
        }
    }

    /// The host/IoT metrics dataset: `series` hosts (default 1,000), one document of 8
    /// metrics per host every 10 s (default one hour). Gauges are decimals as an agent
    /// prints them (`(x × 10^k).round() / 10^k`, k = 1 to 3), so each is the `f64` that
    /// parsing its text gives.
    pub fn host(options: Options) -> Dataset {
        let series = options.series.unwrap_or(1_000);
        let points = options.points.unwrap_or(u64::from(series) * 360);
        Dataset {
            kind: DatasetKind::Host,
            schema: Schema {
                name: "host",
                timestamp_field: "@timestamp",
                interval_millis: 10_000,
                dimensions: HOST_DIMS.to_vec(),
                metrics: HOST_METRICS.to_vec(),
                fields: Vec::new(),
                fingerprint: Vec::new(),
            },
            options,
            series,
            points,
        }
    }

    /// A dataset by name (`k8s`, `otel`, `events` or `host`).
    pub fn by_name(name: &str, options: Options) -> Option<Dataset> {
        match name {
            "k8s" => Some(Dataset::k8s(options)),
            "otel" => Some(Dataset::otel(options)),
            "events" => Some(Dataset::events(options)),
            "host" => Some(Dataset::host(options)),
            _ => None,
        }
    }

    /// The dataset names [`Dataset::by_name`] knows.
    pub const NAMES: [&'static str; 4] = ["k8s", "otel", "events", "host"];

    /// Documents per interval of the whole dataset: the series count for the metric
    /// datasets (one document per series), the events per second for `events`. Retries
    /// and late documents are delayed by up to two intervals' worth of documents.
    pub fn docs_per_interval(&self) -> u64 {
        match self.kind {
            DatasetKind::K8s | DatasetKind::Otel | DatasetKind::Host => u64::from(self.series),
            DatasetKind::Events => events_per_second(self.series),
        }
    }

    /// Which dataset.
    pub fn kind(&self) -> DatasetKind {
        self.kind
    }

    /// The options.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Which fields are dimensions and metrics.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Number of series the generator cycles through.
    pub fn series_count(&self) -> u32 {
        self.series
    }

    /// Exact number of distinct documents: distinct (series, timestamp) for the metric
    /// datasets, distinct contents for `events` (whose (series, timestamp) repeat).
    pub fn unique_docs(&self) -> u64 {
        self.points
    }

    /// Exact number of documents emitted, duplicates included.
    pub fn total_docs(&self) -> u64 {
        self.points + (0..self.points).filter(|&i| self.is_dup(i)).count() as u64
    }

    fn is_dup(&self, i: u64) -> bool {
        self.options.dup_rate > 0.0 && unit(&[self.options.seed, i, 3]) < self.options.dup_rate
    }

    /// Whether the retry of document `i` (a duplicate) is sent before it.
    fn is_early(&self, i: u64) -> bool {
        self.options.disorder > 0.0 && unit(&[self.options.seed, i, 5]) < self.options.disorder
    }

    fn is_late(&self, i: u64) -> bool {
        self.options.late_rate > 0.0 && unit(&[self.options.seed, i, 1]) < self.options.late_rate
    }

    /// Typed records in emission order (late ones delayed, duplicates re-sent).
    pub fn records(&self) -> Records {
        Records::new(self.clone())
    }

    /// JSON documents in emission order.
    pub fn docs(&self) -> impl Iterator<Item = Value> + use<> {
        self.records().map(|r| r.to_json())
    }

    /// NDJSON lines in emission order, keys shuffled when the options say so.
    pub fn ndjson(&self) -> impl Iterator<Item = String> + use<> {
        let shuffle = self.options.shuffle_keys;
        let seed = self.options.seed;
        self.records().enumerate().map(move |(i, r)| {
            let mut line = String::new();
            write_json(
                &r.to_json(),
                shuffle.then(|| mix(seed ^ i as u64)),
                &mut line,
            );
            line
        })
    }

    /// A tsid computer configured with this dataset's dimensions (metric names join the
    /// identity, `@timestamp` excluded; for `events`, the stream id, the dimensions
    /// alone), so that `computer.tsid(&doc)` equals [`Record::tsid`].
    ///
    /// # Errors
    /// Those of [`tidemark_tsid::TsidBuilder::build`].
    #[cfg(feature = "tsid")]
    pub fn tsid_computer(&self) -> tidemark_tsid::Result<tidemark_tsid::TsidComputer> {
        let builder =
            tidemark_tsid::TsidBuilder::new().dimensions(self.schema.dimensions.iter().copied());
        match self.kind {
            DatasetKind::Events => builder.metric_names(tidemark_tsid::MetricNames::Off),
            DatasetKind::K8s | DatasetKind::Otel | DatasetKind::Host => builder,
        }
        .build()
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct SeriesState {
    a: f64,
    b: f64,
    c: f64,
    d: f64,
    rate1: f64,
    rate2: f64,
    limit: f64,
    n1: i64,
    n2: i64,
    n3: i64,
    n4: i64,
    offset_ms: i64,
}

struct Pending(u64, u64, Record);

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        (self.0, self.1) == (o.0, o.1)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.0, self.1).cmp(&(o.0, o.1))
    }
}

/// The record iterator of a [`Dataset`].
pub struct Records {
    ds: Dataset,
    next: u64,
    seq: u64,
    rng: Rng,
    dims: Vec<Arc<[(&'static str, Dim)]>>,
    state: Vec<SeriesState>,
    pending: BinaryHeap<Reverse<Pending>>,
    /// Documents generated and not yet at their emission position (`next` onwards).
    ahead: VecDeque<Record>,
    /// The next document index to generate.
    generated: u64,
}

impl std::fmt::Debug for Records {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Records").field("next", &self.next).finish()
    }
}

impl Records {
    fn new(ds: Dataset) -> Records {
        let seed = ds.options.seed;
        let mut rng = Rng::new(seed);
        let n = ds.series as usize;
        let mut dims = Vec::with_capacity(n);
        let mut state = Vec::with_capacity(n);
        for s in 0..ds.series {
            let h = mix(seed ^ u64::from(s).wrapping_mul(0x2545_f491_4f6c_dd1d));
            let (d, st) = match ds.kind {
                DatasetKind::K8s => k8s_series(s, h, &mut rng),
                DatasetKind::Otel => otel_series(s, h, seed, &mut rng),
                DatasetKind::Events => event_host(s, h),
                DatasetKind::Host => host_series(s, h, &mut rng),
            };
            dims.push(d);
            state.push(st);
        }
        Records {
            ds,
            next: 0,
            seq: 0,
            rng,
            dims,
            state,
            pending: BinaryHeap::new(),
            ahead: VecDeque::new(),
            generated: 0,
        }
    }

    fn generate(&mut self, i: u64) -> Record {
        if self.ds.kind == DatasetKind::Events {
            return self.generate_event(i);
        }
        let n = u64::from(self.ds.series);
        let s = (i % n) as u32;
        let step = (i / n) as i64;
        let interval = self.ds.schema.interval_millis;
        let rng = &mut self.rng;
        let jitter = if rng.f64() < 0.1 {
            rng.below(5) as i64 - 2
        } else {
            0
        };
        let dims = self
            .dims
            .get(s as usize)
            .cloned()
            .unwrap_or_else(|| Arc::from(Vec::new()));
        let mut st = self.state.get(s as usize).copied().unwrap_or_default();
        let ts_millis = self.ds.options.start_millis + step * interval + st.offset_ms + jitter;
        let metrics = match self.ds.kind {
            DatasetKind::K8s => k8s_step(&mut st, rng),
            DatasetKind::Otel => otel_step(s, &mut st, rng),
            DatasetKind::Host => host_step(&mut st, rng),
            DatasetKind::Events => Vec::new(),
        };
        if let Some(slot) = self.state.get_mut(s as usize) {
            *slot = st;
        }
        Record {
            series: s,
            ts_millis,
            dims,
            metrics,
            fields: Vec::new(),
            duplicate: false,
            late: false,
        }
    }

    /// Event `i`: a random host, the second `i / rate`, and a message from one of four
    /// sources (sshd, sudo, a web server, a firewall). Every message carries a number
    /// `n(i) = 1024 + (i × 40503 mod 64000)`: a bijection of `i mod 64000`, so two
    /// events of the same second (fewer than 60,000 apart) never have the same text.
    fn generate_event(&mut self, i: u64) -> Record {
        let seed = self.ds.options.seed;
        let rate = events_per_second(self.ds.series);
        let s = (mix(seed ^ i.wrapping_mul(0x9e37_79b9)) % u64::from(self.ds.series)) as u32;
        let ts_millis = self.ds.options.start_millis + (i / rate) as i64 * 1_000;
        let dims = self
            .dims
            .get(s as usize)
            .cloned()
            .unwrap_or_else(|| Arc::from(Vec::new()));
        let rng = &mut self.rng;
        let n = 1024 + (i % 64_000) * 40_503 % 64_000;
        let user = pick(&USERS, rng.below(USERS.len() as u64));
        let internal = rng.f64() < 0.6;
        let ip = if internal {
            let h = rng.below(400);
            format!("10.{}.{}.{}", h % 4, h / 4 % 16, 10 + h % 200)
        } else {
            let h = rng.below(2_000);
            let net = pick(
                &["203.0.113", "198.51.100", "192.0.2", "185.220.101"],
                h % 4,
            );
            format!("{net}.{}", 1 + h % 254)
        };
        let roll = rng.f64();
        let (action, success, message) = if roll < 0.55 {
            let ok = rng.f64() < if internal { 0.95 } else { 0.3 };
            let msg = if ok {
                format!("Accepted publickey for {user} from {ip} port {n} ssh2")
            } else {
                format!("Failed password for {user} from {ip} port {n} ssh2")
            };
            ("ssh_login", ok, msg)
        } else if roll < 0.65 {
            let ok = rng.f64() < 0.97;
            let svc = pick(&DEPLOYMENTS, rng.below(DEPLOYMENTS.len() as u64));
            let tty = rng.below(8);
            let msg = if ok {
                format!(
                    "sudo[{n}]: {user} : TTY=pts/{tty} ; PWD=/home/{user} ; USER=root ; COMMAND=/usr/bin/systemctl restart {svc}"
                )
            } else {
                format!(
                    "sudo[{n}]: {user} : 3 incorrect password attempts ; TTY=pts/{tty} ; PWD=/home/{user} ; USER=root ; COMMAND=/usr/bin/systemctl restart {svc}"
                )
            };
            ("sudo", ok, msg)
        } else if roll < 0.9 {
            let route = pick(&ROUTES, rng.below(ROUTES.len() as u64));
            let status = pick(
                &[
                    "200", "200", "200", "201", "204", "302", "401", "403", "404", "500",
                ],
                rng.below(10),
            );
            let bytes = 200 + rng.below(40_000);
            let msg = format!("{ip}:{n} - {user} \"GET {route} HTTP/1.1\" {status} {bytes}");
            (
                "http_request",
                status.starts_with('2') || status.starts_with('3'),
                msg,
            )
        } else {
            let dpt = pick(
                &["22", "23", "445", "3389", "5432", "6379", "9200"],
                rng.below(7),
            );
            let msg = format!(
                "[UFW BLOCK] IN=eth0 OUT= SRC={ip} DST=10.0.0.{} PROTO=TCP SPT={n} DPT={dpt}",
                1 + s % 250
            );
            ("firewall_block", false, msg)
        };
        Record {
            series: s,
            ts_millis,
            dims,
            metrics: Vec::new(),
            fields: vec![
                ("message", Field::Keyword(message)),
                ("source.ip", Field::Keyword(ip)),
                ("source.internal", Field::Bool(internal)),
                ("user.name", Field::Keyword(user.to_owned())),
                ("event.action", Field::Keyword(action.to_owned())),
                (
                    "event.outcome",
                    Field::Keyword(if success { "success" } else { "failure" }.to_owned()),
                ),
            ],
            duplicate: false,
            late: false,
        }
    }
}

impl Records {
    /// Generates documents ahead of the emission position far enough that an early
    /// retry (see [`Options::disorder`]) can be sent before the earlier points of its
    /// series; with no disorder, nothing is generated ahead. Generation stays in index
    /// order either way, so a dataset is the same whatever the lookahead.
    fn fill(&mut self) {
        let lead = self.ds.docs_per_interval() * EARLY_INTERVALS;
        let look = if self.ds.options.disorder > 0.0 {
            lead
        } else {
            0
        };
        let until = self.ds.points.min(self.next + look + 1);
        while self.generated < until {
            let g = self.generated;
            let mut rec = self.generate(g);
            self.generated += 1;
            if self.ds.is_dup(g) && self.ds.is_early(g) {
                let delay = 1 + (unit(&[self.ds.options.seed, g, 4]) * lead as f64) as u64;
                // The early copy is the one stored; the original, on time, repeats it.
                let copy = rec.clone();
                rec.duplicate = true;
                self.seq += 1;
                let at = g.saturating_sub(delay).max(self.next);
                self.pending.push(Reverse(Pending(at, self.seq, copy)));
            }
            self.ahead.push_back(rec);
        }
    }
}

impl Iterator for Records {
    type Item = Record;

    fn next(&mut self) -> Option<Record> {
        loop {
            self.fill();
            if let Some(Reverse(top)) = self.pending.peek() {
                if top.0 <= self.next || self.next >= self.ds.points {
                    return self.pending.pop().map(|Reverse(p)| p.2);
                }
            }
            if self.next >= self.ds.points {
                return None;
            }
            let i = self.next;
            let mut rec = self.ahead.pop_front()?;
            self.next += 1;
            let spread = self.ds.docs_per_interval() * 2;
            if self.ds.is_dup(i) && !self.ds.is_early(i) {
                let delay = 1 + (unit(&[self.ds.options.seed, i, 4]) * spread as f64) as u64;
                let mut copy = rec.clone();
                copy.duplicate = true;
                self.seq += 1;
                self.pending
                    .push(Reverse(Pending(i + delay, self.seq, copy)));
            }
            if self.ds.is_late(i) {
                let delay = 1 + (unit(&[self.ds.options.seed, i, 2]) * spread as f64) as u64;
                rec.late = true;
                self.seq += 1;
                self.pending
                    .push(Reverse(Pending(i + delay, self.seq, rec)));
                continue;
            }
            return Some(rec);
        }
    }
}

/// How far ahead of its original an early retry may arrive, in intervals' worth of
/// documents (a device's buffered upload retried while an earlier one is still delayed).
const EARLY_INTERVALS: u64 = 10;

/// Events per second of the `events` dataset with `series` hosts.
fn events_per_second(series: u32) -> u64 {
    (u64::from(series) * 10).min(60_000)
}

/// Default length of the `events` dataset, in seconds.
const EVENTS_DEFAULT_SECONDS: u64 = 600;

/// The per-document fields of an event, in document order.
const EVENT_FIELDS: [&str; 6] = [
    "message",
    "source.ip",
    "source.internal",
    "user.name",
    "event.action",
    "event.outcome",
];

const USERS: [&str; 16] = [
    "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory",
    "oscar", "peggy", "root", "deploy", "backup",
];

const ROUTES: [&str; 8] = [
    "/",
    "/login",
    "/api/cart",
    "/api/checkout",
    "/api/products/42",
    "/admin",
    "/health",
    "/wp-login.php",
];

fn pick(list: &[&'static str], x: u64) -> &'static str {
    list.get((x % list.len().max(1) as u64) as usize)
        .copied()
        .unwrap_or("")
}

/// Host `s` of the events dataset: its one dimension, `host.name`.
fn event_host(s: u32, h: u64) -> (Arc<[(&'static str, Dim)]>, SeriesState) {
    let role = pick(&["bastion", "web", "db", "build", "vpn"], u64::from(s));
    let name = format!("{role}-{:03}.{}.corp.example", s, pick(&REGIONS, h));
    (
        Arc::from(vec![("host.name", Dim::Keyword(name))]),
        SeriesState::default(),
    )
}

/// `x` written with `k` decimals and parsed back: the nearest `f64` to the decimal.
fn decimal(x: f64, k: i32) -> f64 {
    let scale = 10f64.powi(k);
    (x * scale).round() / scale
}

/// Host `s` of the host dataset: its dimensions and its starting readings.
fn host_series(s: u32, h: u64, rng: &mut Rng) -> (Arc<[(&'static str, Dim)]>, SeriesState) {
    let role = pick(&["web", "db", "cache", "edge", "sensor-gw"], mix(h));
    let region = pick(&REGIONS, mix(h ^ 1));
    let dims: Vec<(&'static str, Dim)> = vec![
        ("host.name", Dim::Keyword(format!("{role}-{s:04}"))),
        ("host.region", Dim::Keyword(region.to_owned())),
        ("host.role", Dim::Keyword(role.to_owned())),
    ];
    let cores = [2.0, 4.0, 8.0, 16.0][rng.below(4) as usize];
    let st = SeriesState {
        a: 5.0 + rng.f64() * 60.0,         // CPU user %
        b: rng.f64() * cores,              // load average
        c: 18.0 + rng.f64() * 30.0,        // temperature, °C
        d: 30.0 + rng.f64() * 40.0,        // relative humidity %
        limit: cores * 4.0,                // memory, GB
        rate1: 0.2 + rng.f64() * 0.6,      // memory used, fraction of the limit
        rate2: 1e3 + rng.f64() * 1e6,      // network bytes/s
        n1: rng.below(1 << 40) as i64,     // rx bytes
        n2: rng.below(1 << 30) as i64,     // disk write ops
        n3: rng.below(30 * 86_400) as i64, // uptime, s
        n4: 0,
        offset_ms: (h % 10_000) as i64,
    };
    (Arc::from(dims), st)
}

fn host_step(st: &mut SeriesState, rng: &mut Rng) -> Vec<(&'static str, MetricVal)> {
    st.a = (st.a + rng.normal() * 2.0).clamp(0.0, 100.0);
    st.b = (st.b + rng.normal() * 0.05).clamp(0.0, st.limit);
    st.c = (st.c + rng.normal() * 0.05).clamp(-20.0, 90.0);
    st.d = (st.d + rng.normal() * 0.3).clamp(0.0, 100.0);
    st.rate1 = (st.rate1 + rng.normal() * 0.002).clamp(0.05, 0.98);
    st.n1 += (st.rate2 * 10.0 * (1.0 + 0.5 * rng.normal()).max(0.0)) as i64;
    st.n2 += rng.below(400) as i64;
    st.n3 += 10;
    vec![
        ("host.cpu.user_pct", MetricVal::Gauge(decimal(st.a, 1))),
        ("host.load.1m", MetricVal::Gauge(decimal(st.b, 2))),
        ("sensor.temperature_c", MetricVal::Gauge(decimal(st.c, 2))),
        ("sensor.humidity_pct", MetricVal::Gauge(decimal(st.d, 1))),
        (
            "host.memory.used_gb",
            MetricVal::Gauge(decimal(st.rate1 * st.limit, 3)),
        ),
        ("host.network.rx_bytes", MetricVal::Counter(st.n1)),
        ("host.disk.write_ops", MetricVal::Counter(st.n2)),
        ("host.uptime_s", MetricVal::Counter(st.n3)),
    ]
}

fn k8s_series(s: u32, h: u64, rng: &mut Rng) -> (Arc<[(&'static str, Dim)]>, SeriesState) {
    let pick = |list: &[&'static str], x: u64| {
        list.get((x % list.len() as u64) as usize)
            .copied()
            .unwrap_or("")
    };
    let cluster = pick(&CLUSTERS, u64::from(s / 700));
    let node = format!("{cluster}-node-{:03}", s / 25);
    let deployment = pick(&DEPLOYMENTS, mix(h));
    let namespace = pick(&NAMESPACES, mix(h ^ 1));
    let pod = format!(
        "{deployment}-{}-{}",
        token(mix(h ^ 2), 10),
        token(mix(h ^ 3), 5)
    );
    let u = mix(h ^ 4);
    let v = mix(h ^ 5);
    let uid = format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        u >> 32,
        (u >> 16) & 0xffff,
        u & 0xfff,
        0x8000 | (v >> 48 & 0x3fff),
        v & 0xffff_ffff_ffff
    );
    let dims: Vec<(&'static str, Dim)> = vec![
        ("k8s.cluster.name", Dim::Keyword(cluster.to_owned())),
        ("k8s.namespace.name", Dim::Keyword(namespace.to_owned())),
        ("k8s.node.name", Dim::Keyword(node)),
        ("k8s.pod.name", Dim::Keyword(pod)),
        ("k8s.pod.uid", Dim::Keyword(uid)),
        ("k8s.container.name", Dim::Keyword(deployment.to_owned())),
    ];
    let limit = [256.0, 512.0, 1024.0, 2048.0, 4096.0][rng.below(5) as usize] * 1024.0 * 1024.0;
    let st = SeriesState {
        rate1: 0.02 + rng.f64() * 1.5, // cores used
        rate2: 1e3 + rng.f64() * 2e6,  // network bytes/s
        limit,                         // memory limit, bytes
        a: (limit * (0.3 + 0.4 * rng.f64()) / 4096.0).round() * 4096.0, // memory usage
        b: (limit * 0.05 * rng.f64() / 4096.0).round() * 4096.0, // page cache
        n1: rng.below(1 << 40) as i64, // cpu ns since container start
        n2: rng.below(1 << 36) as i64, // rx bytes
        n3: rng.below(1 << 34) as i64, // tx bytes
        n4: rng.below(3) as i64,       // restarts
        offset_ms: (h % 10_000) as i64,
        ..SeriesState::default()
    };
    (Arc::from(dims), st)
}

fn k8s_step(st: &mut SeriesState, rng: &mut Rng) -> Vec<(&'static str, MetricVal)> {
    let used_cores = (st.rate1 * (1.0 + 0.3 * rng.normal())).max(0.0);
    st.n1 += (used_cores * 10.0 * 1e9) as i64;
    let limit_cores = (st.rate1 * 2.0).max(0.1);
    let utilization = used_cores / limit_cores;
    let step = (rng.normal() * 64.0).round() * 4096.0;
    st.a = (st.a + step).clamp(16.0 * 1024.0 * 1024.0, st.limit);
    st.b = (st.b + (rng.normal() * 4.0).round() * 4096.0).clamp(0.0, st.a / 2.0);
    let working_set = st.a - st.b;
    st.n2 += (st.rate2 * 10.0 * (1.0 + 0.5 * rng.normal()).max(0.0)) as i64;
    st.n3 += (st.rate2 * 3.0 * (1.0 + 0.5 * rng.normal()).max(0.0)) as i64;
    if rng.f64() < 1e-4 {
        st.n4 += 1;
    }
    vec![
        ("k8s.pod.cpu.usage_ns", MetricVal::Counter(st.n1)),
        ("k8s.pod.cpu.utilization", MetricVal::Gauge(utilization)),
        ("k8s.pod.memory.usage_bytes", MetricVal::Gauge(st.a)),
        (
            "k8s.pod.memory.working_set_bytes",
            MetricVal::Gauge(working_set),
        ),
        (
            "k8s.pod.memory.available_bytes",
            MetricVal::Gauge(st.limit - working_set),
        ),
        ("k8s.pod.network.rx_bytes", MetricVal::Counter(st.n2)),
        ("k8s.pod.network.tx_bytes", MetricVal::Counter(st.n3)),
        ("k8s.container.restarts", MetricVal::Counter(st.n4)),
    ]
}

/// The metric and attribute set of OTel series `s`.
fn otel_variant(s: u32) -> (&'static OtelMetric, &'static [(&'static str, &'static str)]) {
    let mut v = s % OTEL_VARIANTS;
    for m in &OTEL_METRICS {
        let n = m.attrs.len() as u32;
        if v < n {
            return (m, m.attrs.get(v as usize).copied().unwrap_or(&[]));
        }
        v -= n;
    }
    (&OTEL_METRICS[0], &[])
}

fn otel_series(
    s: u32,
    _h: u64,
    seed: u64,
    rng: &mut Rng,
) -> (Arc<[(&'static str, Dim)]>, SeriesState) {
    let resource = s / OTEL_VARIANTS;
    let service = SERVICES
        .get((resource % SERVICES.len() as u32) as usize)
        .copied()
        .unwrap_or("svc");
    let instance = resource / SERVICES.len() as u32;
    let rh = mix(seed ^ 0xabcd ^ u64::from(resource));
    // Unique per resource: the address spells the resource number.
    let host = format!(
        "ip-10-{}-{}-{}.ec2.internal",
        rh % 4,
        (resource >> 8) % 256,
        resource % 256
    );
    let region = REGIONS
        .get((instance % 3) as usize)
        .copied()
        .unwrap_or("eu-west-1");
    let (metric, attrs) = otel_variant(s);
    let mut dims: Vec<(&'static str, Dim)> = vec![
        (
            "resource.attributes.service.name",
            Dim::Keyword(service.to_owned()),
        ),
        ("resource.attributes.host.name", Dim::Keyword(host)),
        (
            "resource.attributes.cloud.region",
            Dim::Keyword(region.to_owned()),
        ),
    ];
    for (k, v) in attrs {
        dims.push((k, Dim::Keyword((*v).to_owned())));
    }
    let st = match (metric.kind, metric.integral) {
        (MetricKind::Gauge, false) => SeriesState {
            a: if metric.name.contains("duration") {
                5.0 + rng.f64() * 200.0
            } else {
                0.05 + rng.f64() * 0.6
            },
            ..SeriesState::default()
        },
        (MetricKind::Gauge, true) => SeriesState {
            a: if metric.name.contains("memory") {
                (rng.f64() * 8e9 / 4096.0).round() * 4096.0
            } else {
                (rng.f64() * 50.0).round()
            },
            ..SeriesState::default()
        },
        (MetricKind::Counter, _) => SeriesState {
            rate1: if metric.name.contains("gc") {
                0.5 + rng.f64() * 3.0
            } else {
                1e3 + rng.f64() * 5e6
            },
            n1: rng.below(1 << 40) as i64,
            ..SeriesState::default()
        },
    };
    let st = SeriesState {
        offset_ms: (rh % 60_000) as i64,
        ..st
    };
    (Arc::from(dims), st)
}

fn otel_step(s: u32, st: &mut SeriesState, rng: &mut Rng) -> Vec<(&'static str, MetricVal)> {
    let (metric, _) = otel_variant(s);
    let value = match (metric.kind, metric.integral) {
        (MetricKind::Gauge, false) => {
            if metric.name.contains("duration") {
                MetricVal::Gauge(st.a * (0.3 * rng.normal()).exp())
            } else {
                MetricVal::Gauge((st.a + 0.05 * rng.normal()).clamp(0.0, 1.0))
            }
        }
        (MetricKind::Gauge, true) => {
            if metric.name.contains("memory") {
                st.a = (st.a + (rng.normal() * 256.0).round() * 4096.0).max(0.0);
            } else {
                st.a = (st.a + (rng.normal() * 2.0).round()).max(0.0);
            }
            MetricVal::Gauge(st.a)
        }
        (MetricKind::Counter, _) => {
            st.n1 += (st.rate1 * 60.0 * (1.0 + 0.3 * rng.normal()).max(0.0)).round() as i64;
            MetricVal::Counter(st.n1)
        }
    };
    vec![(metric.name, value)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_add_up() {
        let n: usize = OTEL_METRICS.iter().map(|m| m.attrs.len()).sum();
        assert_eq!(n as u32, OTEL_VARIANTS);
    }
}
