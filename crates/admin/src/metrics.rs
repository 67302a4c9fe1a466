//! Prometheus metrics at [`crate::METRICS_PATH`], in the Prometheus text format (`prometheus-client`'s
//! encoder), named by Prometheus's rules: base units (`_bytes`, `_seconds`, `_joules`, `_watts`), counters end
//! in `_total`.
//!
//! Two sources:
//! - S3 requests, recorded as they finish by the server ([`Metrics::observe_request`]): duration and
//!   time to first byte by operation and by whether the request waited for a disk to spin up. The time to first
//!   byte of reads (`GetObject`) is also kept as quantiles ([`FirstByteQuantiles`]: p50 and p99 of all reads
//!   and of the reads that woke a disk) for the API's state and the dashboard.
//! - Everything else is read at scrape time from [`crate::api::state`] — the same figures the API shows — and
//!   the power manager's spin-up log. A scrape reads memory and the catalog only: it never wakes a disk.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http::{HeaderValue, Response, StatusCode};
use permafrost_disk::power::SPIN_UP_BUCKETS_S;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use s3s::Body;

use crate::api::State;
use crate::Admin;

/// Labels of an S3 request's histograms.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The S3 operation (`GetObject`, `PutObject`, …).
    pub operation: String,
    /// `true` if the request waited for a disk to spin up.
    pub spin_up: String,
}

/// Labels of the request counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestStatusLabels {
    pub operation: String,
    /// HTTP status code.
    pub status: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Request latency buckets (seconds): milliseconds for cached data, one spin-up (10–20 s), up to ten minutes
/// for reads queued behind other disks' spin-ups under a full power budget.
fn request_histogram() -> Histogram {
    Histogram::new([
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0,
        30.0, 60.0, 120.0, 300.0, 600.0,
    ])
}

/// Longest time to first byte the quantiles resolve (an hour); longer ones count as an hour.
const FIRST_BYTE_MAX_MS: u64 = 3_600_000;

/// Quantiles of one set of reads' times to first byte.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Quantiles {
    /// Reads counted.
    pub count: u64,
    /// Median, seconds (`null` without reads).
    pub p50_seconds: Option<f64>,
    /// 99th percentile, seconds (`null` without reads).
    pub p99_seconds: Option<f64>,
}

/// Time to first byte of the reads (`GetObject`) this server answered since it started.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct FirstByteQuantiles {
    /// Every read.
    pub reads: Quantiles,
    /// The reads that waited for a disk to spin up.
    pub reads_that_woke_a_disk: Quantiles,
}

/// Millisecond histograms (3 significant digits) behind [`FirstByteQuantiles`].
struct FirstByteHistograms {
    reads: hdrhistogram::Histogram<u64>,
    woke: hdrhistogram::Histogram<u64>,
}

impl FirstByteHistograms {
    fn new() -> FirstByteHistograms {
        let make = || {
            hdrhistogram::Histogram::new_with_bounds(1, FIRST_BYTE_MAX_MS, 3)
                .expect("constant bounds are valid")
        };
        FirstByteHistograms {
            reads: make(),
            woke: make(),
        }
    }

    fn record(&mut self, seconds: f64, woke: bool) {
        let ms = ((seconds * 1000.0).round() as u64).clamp(1, FIRST_BYTE_MAX_MS);
        self.reads.saturating_record(ms);
        if woke {
            self.woke.saturating_record(ms);
        }
    }

    fn quantiles(&self) -> FirstByteQuantiles {
        let of = |h: &hdrhistogram::Histogram<u64>| {
            let at = |q: f64| (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1000.0);
            Quantiles {
                count: h.len(),
                p50_seconds: at(0.5),
                p99_seconds: at(0.99),
            }
        };
        FirstByteQuantiles {
            reads: of(&self.reads),
            reads_that_woke_a_disk: of(&self.woke),
        }
    }
}

/// The server's metrics (cheap to clone: shared).
#[derive(Clone)]
pub struct Metrics {
    duration: HistogramFamily<RequestLabels>,
    first_byte: HistogramFamily<RequestLabels>,
    requests: Family<RequestStatusLabels, Counter>,
    requests_total: Arc<AtomicU64>,
    read_first_bytes: Arc<parking_lot::Mutex<FirstByteHistograms>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics {
            duration: Family::new_with_constructor(request_histogram as fn() -> Histogram),
            first_byte: Family::new_with_constructor(request_histogram as fn() -> Histogram),
            requests: Family::default(),
            requests_total: Arc::default(),
            read_first_bytes: Arc::new(parking_lot::Mutex::new(FirstByteHistograms::new())),
        }
    }

    /// Record a finished S3 request: its operation, HTTP status, whether it waited for a spin-up, its duration
    /// and (for responses with a body) the time until its first byte was ready.
    pub fn observe_request(
        &self,
        operation: &str,
        status: u16,
        spin_up: bool,
        seconds: f64,
        first_byte_seconds: Option<f64>,
    ) {
        let labels = RequestLabels {
            operation: operation.to_string(),
            spin_up: spin_up.to_string(),
        };
        self.duration.get_or_create(&labels).observe(seconds);
        if let Some(s) = first_byte_seconds {
            self.first_byte.get_or_create(&labels).observe(s);
            if operation == "GetObject" && status < 300 {
                self.read_first_bytes.lock().record(s, spin_up);
            }
        }
        self.requests_total.fetch_add(1, Ordering::Relaxed);
        self.requests
            .get_or_create(&RequestStatusLabels {
                operation: operation.to_string(),
                status: status.to_string(),
            })
            .inc();
    }

    /// Time to first byte of the reads answered since the server started: p50 and p99.
    pub fn first_byte_quantiles(&self) -> FirstByteQuantiles {
        self.read_first_bytes.lock().quantiles()
    }

    /// S3 requests answered since the server started.
    pub fn requests_total(&self) -> u64 {
        self.requests_total.load(Ordering::Relaxed)
    }

    /// The metrics text now.
    pub fn render(&self, admin: &Admin) -> Result<String, crate::ApiError> {
        let state = crate::api::state(admin)?;
        let power = admin.store().engine().power();
        let snapshot = Snapshot {
            spin_ups: state
                .disks
                .iter()
                .map(|d| {
                    power
                        .wake_counts(d.disk)
                        .into_iter()
                        .map(|(k, n)| (k.as_str(), n))
                        .collect()
                })
                .collect(),
            histogram: power.spin_up_histogram(),
            state,
        };
        let mut registry = Registry::default();
        registry.register(
            "permafrost_s3_request_duration_seconds",
            "S3 requests: time from the request to the end of the response, by operation and by whether a disk had to spin up",
            self.duration.clone(),
        );
        registry.register(
            "permafrost_s3_time_to_first_byte_seconds",
            "S3 responses with a body: time from the request until the first byte of the body was ready",
            self.first_byte.clone(),
        );
        registry.register(
            "permafrost_s3_requests",
            "S3 requests answered, by operation and HTTP status",
            self.requests.clone(),
        );
        registry.register_collector(Box::new(snapshot));
        if let Some(smart) = admin.smart() {
            registry.register_collector(Box::new(crate::smart::Figures::of(smart)));
        }
        if let Some(source) = admin.cluster_source() {
            match source() {
                Ok(figures) => registry.register_collector(Box::new(figures)),
                Err(e) => tracing::debug!("metrics: the cluster's figures are unavailable: {e}"),
            }
        }
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)
            .map_err(|e| crate::ApiError::internal(format!("encoding the metrics: {e}")))?;
        Ok(text)
    }

    /// `GET /_permafrost/metrics`.
    pub(crate) async fn scrape(&self, admin: &Admin) -> Response<Body> {
        let metrics = self.clone();
        let admin = admin.clone();
        match crate::blocking(move || metrics.render(&admin)).await {
            Ok(text) => {
                let mut response = Response::new(Body::from(text));
                response.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                *response.status_mut() = StatusCode::OK;
                response
            }
            Err(e) => e.into_response(),
        }
    }
}

/// The figures read at scrape time.
#[derive(Debug)]
struct Snapshot {
    state: State,
    /// Per disk: spin-ups of this server's life by reason.
    spin_ups: Vec<Vec<(&'static str, u64)>>,
    histogram: permafrost_disk::power::SpinUpHistogram,
}

pub(crate) type Labels = Vec<(&'static str, String)>;

pub(crate) fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (Labels, f64)>,
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in series {
        ConstGauge::new(value).encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

/// `name` is written with `_total` appended.
pub(crate) fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (Labels, f64)>,
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, value) in series {
        ConstCounter::new(value).encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

fn disk_label(disk: usize) -> Labels {
    vec![("disk", disk.to_string())]
}

impl Collector for Snapshot {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.state;
        let disks = &s.disks;
        let per_disk = |f: &dyn Fn(&crate::api::DiskState) -> f64| -> Vec<(Labels, f64)> {
            disks.iter().map(|d| (disk_label(d.disk), f(d))).collect()
        };
        let states = ["off", "spinning_up", "idle", "active", "failed"];
        gauge(
            &mut e,
            "permafrost_disks",
            "Disks by shown state (failed, else power state; active = I/O since the last sample)",
            states.iter().map(|st| {
                (
                    vec![("state", st.to_string())],
                    s.disks_by_state.get(st).copied().unwrap_or(0) as f64,
                )
            }),
        )?;
        gauge(
            &mut e,
            "permafrost_disk_info",
            "One series per disk naming its position, role and device (value 1)",
            disks.iter().map(|d| {
                (
                    vec![
                        ("disk", d.disk.to_string()),
                        ("name", d.name.clone()),
                        ("role", d.role.to_string()),
                        ("column", d.column.to_string()),
                        ("row", d.row.to_string()),
                    ],
                    1.0,
                )
            }),
        )?;
        gauge(
            &mut e,
            "permafrost_disk_power_state",
            "1 for a disk's current power state, 0 for the others",
            disks.iter().flat_map(|d| {
                ["off", "spinning_up", "idle", "active"].map(|st| {
                    (
                        vec![("disk", d.disk.to_string()), ("state", st.to_string())],
                        f64::from(u8::from(d.power_state == st)),
                    )
                })
            }),
        )?;
        counter(
            &mut e,
            "permafrost_disk_power_state_seconds",
            "Seconds each disk spent in each power state since the grid was created",
            disks.iter().flat_map(|d| {
                d.seconds_in_state.iter().map(|(st, secs)| {
                    (
                        vec![("disk", d.disk.to_string()), ("state", st.to_string())],
                        *secs,
                    )
                })
            }),
        )?;
        gauge(
            &mut e,
            "permafrost_disk_failed",
            "1 if the disk is marked failed",
            per_disk(&|d| f64::from(u8::from(d.failed))),
        )?;
        counter(
            &mut e,
            "permafrost_disk_spinups",
            "Spin-ups of each disk by reason, since this server started",
            disks.iter().flat_map(|d| {
                self.spin_ups[d.disk].iter().map(|(reason, n)| {
                    (
                        vec![("disk", d.disk.to_string()), ("reason", reason.to_string())],
                        *n as f64,
                    )
                })
            }),
        )?;
        gauge(
            &mut e,
            "permafrost_disk_spinups_last_day",
            "Spin-ups of each disk in the last 24 hours (this server's), to compare with permafrost_disk_spinups_per_day_max",
            per_disk(&|d| d.spin_ups_last_day as f64),
        )?;
        if let Some(max) = s.spin_ups_per_day_max {
            gauge(
                &mut e,
                "permafrost_disk_spinups_per_day_max",
                "The wear budget: spin-ups a disk may make in any 24 hours; a disk that made them keeps spinning",
                [(vec![], f64::from(max))],
            )?;
        }
        gauge(
            &mut e,
            "permafrost_disk_idle_timeout_seconds",
            "How long each disk stays up with nothing to do now (adapted to its recent gaps between requests)",
            per_disk(&|d| d.idle_timeout_seconds),
        )?;
        counter(
            &mut e,
            "permafrost_disk_spinups_lifetime",
            "Spin-ups of each disk since the grid was created (all servers)",
            per_disk(&|d| d.spin_ups as f64),
        )?;
        {
            let h = &self.histogram;
            let mut metric = e.encode_descriptor(
                "permafrost_disk_spinup_duration_seconds",
                "Time from granting a spin-up until the disk could serve I/O, since this server started",
                None,
                MetricType::Histogram,
            )?;
            let buckets: Vec<(f64, u64)> = SPIN_UP_BUCKETS_S
                .iter()
                .copied()
                .chain(std::iter::once(f64::INFINITY))
                .zip(h.counts.iter().copied())
                .collect();
            metric.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                h.sum_seconds,
                h.count,
                &buckets,
                None,
            )?;
        }
        gauge(
            &mut e,
            "permafrost_disk_power_watts",
            "Power each disk draws now, by the power model of its state",
            per_disk(&|d| d.energy.watts),
        )?;
        counter(
            &mut e,
            "permafrost_disk_energy_joules",
            "Energy each disk used since the grid was created",
            per_disk(&|d| d.energy.joules),
        )?;
        gauge(
            &mut e,
            "permafrost_power_watts",
            "Power all disks draw now",
            [(vec![], s.energy.watts)],
        )?;
        counter(
            &mut e,
            "permafrost_energy_joules",
            "Energy all disks used since the grid was created",
            [(vec![], s.energy.joules)],
        )?;
        gauge(
            &mut e,
            "permafrost_grid_disks",
            "Disks of the grid, the added ones included",
            [(vec![], disks.len() as f64)],
        )?;
        gauge(
            &mut e,
            "permafrost_grid_buckets",
            "Buckets (data disks) of the grid",
            [(vec![], s.buckets as f64)],
        )?;
        gauge(
            &mut e,
            "permafrost_grid_capacity_bytes",
            "Logical bytes all buckets of the grid hold",
            [(vec![], s.capacity_bytes as f64)],
        )?;
        gauge(
            &mut e,
            "permafrost_grid_geometry_version",
            "Data disks added to the grid since it was created",
            [(vec![], s.geometry_version as f64)],
        )?;
        gauge(
            &mut e,
            "permafrost_disk_capacity_bytes",
            "Logical bytes each disk holds",
            per_disk(&|d| d.capacity_bytes as f64),
        )?;
        gauge(
            &mut e,
            "permafrost_disk_written_bytes",
            "Logical bytes written on each disk",
            per_disk(&|d| d.written_bytes as f64),
        )?;
        gauge(
            &mut e,
            "permafrost_disk_rebuild_remaining_bytes",
            "Bytes of each disk waiting for recovery (what a rebuild still has to write)",
            per_disk(&|d| d.defect_bytes as f64),
        )?;
        gauge(
            &mut e,
            "permafrost_disk_pending_parity_bytes",
            "Parity delta bytes waiting to be written to each parity disk",
            per_disk(&|d| d.pending_parity_bytes as f64),
        )?;
        counter(
            &mut e,
            "permafrost_disk_read_bytes",
            "Physical bytes read from each disk since this server started",
            per_disk(&|d| d.read_bytes as f64),
        )?;
        counter(
            &mut e,
            "permafrost_disk_written_physical_bytes",
            "Physical bytes written to each disk since this server started",
            per_disk(&|d| d.written_physical_bytes as f64),
        )?;
        gauge(
            &mut e,
            "permafrost_disk_last_scrub_timestamp_seconds",
            "When the last full scrub pass of each disk ended (Unix time; disks never scrubbed are absent)",
            disks.iter().filter_map(|d| {
                d.last_scrub_unix_ms
                    .map(|ms| (disk_label(d.disk), ms as f64 / 1000.0))
            }),
        )?;
        gauge(
            &mut e,
            "permafrost_cache_capacity_bytes",
            "Upper bound of the write-back cache",
            [(vec![], s.cache.capacity_bytes as f64)],
        )?;
        gauge(
            &mut e,
            "permafrost_cache_used_bytes",
            "Bytes in the write-back cache",
            [(vec![], s.cache.used_bytes as f64)],
        )?;
        gauge(
            &mut e,
            "permafrost_cache_dirty_bytes",
            "Stored bytes in the cache not yet persisted to the grid",
            [(vec![], s.cache.dirty_bytes as f64)],
        )?;
        gauge(
            &mut e,
            "permafrost_cache_oldest_unpersisted_age_seconds",
            "Age of the oldest content waiting to be persisted (0 when nothing waits)",
            [(
                vec![],
                s.cache.oldest_unpersisted_age_seconds.unwrap_or(0.0),
            )],
        )?;
        gauge(
            &mut e,
            "permafrost_cache_waiting_bytes",
            "Stored bytes waiting to be persisted, per grid bucket",
            s.cache.waiting_bytes_per_grid_bucket.iter().map(|g| {
                (
                    vec![("grid_bucket", g.grid_bucket.to_string())],
                    g.bytes as f64,
                )
            }),
        )?;
        let reads = &s.cache_reads;
        counter(
            &mut e,
            "permafrost_cache_reads",
            "Object reads by where they were served from: the cache or the grid",
            [
                (
                    vec![("source", "cache".to_string())],
                    reads.from_cache as f64,
                ),
                (vec![("source", "grid".to_string())], reads.from_grid as f64),
            ],
        )?;
        gauge(
            &mut e,
            "permafrost_cache_hit_ratio",
            "Object reads served from the cache, of all object reads (0 before any read)",
            [(vec![], reads.hit_ratio)],
        )?;
        counter(
            &mut e,
            "permafrost_cache_prefetches",
            "Reads that woke their data disk and queued a prefetch of their dataset's next objects",
            [(vec![], reads.prefetches as f64)],
        )?;
        counter(
            &mut e,
            "permafrost_cache_prefetched_contents",
            "Contents read into the cache by prefetch",
            [(vec![], reads.prefetched_contents as f64)],
        )?;
        counter(
            &mut e,
            "permafrost_cache_prefetched_bytes",
            "Stored bytes read into the cache by prefetch",
            [(vec![], reads.prefetched_bytes as f64)],
        )?;
        counter(
            &mut e,
            "permafrost_cache_prefetch_hits",
            "Prefetched contents read afterwards from the cache",
            [(vec![], reads.prefetch_hits as f64)],
        )?;
        counter(
            &mut e,
            "permafrost_cache_hot_read_bytes",
            "Stored bytes read back into the cache for hot prefixes",
            [(vec![], reads.hot_read_bytes as f64)],
        )?;
        gauge(
            &mut e,
            "permafrost_disks_spinning",
            "Disks counted against the spin-up budget now",
            [(vec![], s.spinning_now as f64)],
        )?;
        gauge(
            &mut e,
            "permafrost_disks_spinning_max",
            "The budget: most disks allowed to spin at once",
            [(vec![], s.spinning_max as f64)],
        )?;
        let mut by_state = std::collections::BTreeMap::new();
        for t in &s.tasks {
            let name = serde_json::to_value(t.state)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            *by_state.entry(name).or_insert(0u64) += 1;
        }
        gauge(
            &mut e,
            "permafrost_tasks",
            "Operator tasks kept, by state",
            ["queued", "running", "done", "failed"].map(|st| {
                (
                    vec![("state", st.to_string())],
                    by_state.get(st).copied().unwrap_or(0) as f64,
                )
            }),
        )?;
        gauge(
            &mut e,
            "permafrost_objects",
            "Objects in the catalog",
            [(vec![], s.cache.objects as f64)],
        )?;
        Ok(())
    }
}
