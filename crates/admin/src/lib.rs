//! # permafrost-admin: the operator's view of a running archive
//!
//! **Job.** Let an operator of a few hundred mostly sleeping disks see what each disk does and *why it woke
//! up*, what waits in the cache, how much energy the array uses and what is at risk, and act on it — without
//! ever waking a disk to find out. Mounted in the S3 server (`permafrost-s3`) under `/_permafrost/`:
//!
//! | path | what |
//! |---|---|
//! | [`API_PREFIX`] (`/_permafrost/api/v1/`) | the admin API, JSON ([`api`]; `GET /_permafrost/api/v1/` lists every endpoint) |
//! | `/_permafrost/api/v1/events` | server-sent events ([`events`]) |
//! | [`METRICS_PATH`] (`/_permafrost/metrics`) | Prometheus text format ([`metrics`]) |
//! | [`UI_PREFIX`] (`/_permafrost/ui/`) | the dashboard: static HTML/CSS/JS compiled into the binary ([`ui`]) |
//!
//! Authentication ([`auth`]): the root user's AWS Signature V4 (checked by s3s, as for S3), the bearer token
//! [`api_token`] derived from the root credentials, or a dashboard session cookie. The dashboard's files need
//! none (they hold no data).
//!
//! **Invariants.**
//! - *Monitoring never wakes a disk.* Everything the API, the metrics, the events and the dashboard show comes
//!   from memory (the power manager's models and spin-up log, the engine's counters and maps) and the catalog:
//!   no read of a grid disk, no `ActivityGuard`, so no idle timer is reset. SMART figures would be read only
//!   while a disk spins anyway (file-backed disks have none; see `docs/admin.md`).
//! - A sampling thread ([`monitor`]) turns state changes into events every [`AdminOptions::sample_ms`]; it
//!   shows a disk `active` when it had I/O since the previous sample, so short reads are not missed.
//! - Long operator actions are tasks ([`tasks`]), queued per lane, with progress.
//!
//! Other crates add endpoints with [`Admin::route`] and [`router::handler`], in files of their own.

#![forbid(unsafe_code)]

pub mod api;
pub mod auth;
pub mod cluster;
pub mod config;
pub mod evacuate;
pub mod events;
mod grow;
pub mod history;
pub mod keys;
pub mod metrics;
pub mod monitor;
pub mod router;
pub mod smart;
pub mod tasks;
pub mod ui;
pub mod webhooks;

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use parking_lot::RwLock;
use permafrost_store::Store;
use s3s::Body;

pub use auth::{api_token, is_sigv4, Caller};
pub use cluster::{ClusterFigures, ClusterSource};
pub use events::{Event, EventBus};
pub use metrics::Metrics;
pub use router::{blocking, handler, json, json_status, ApiError, ApiRequest, ApiResult, Handler};
pub use tasks::{Lane, TaskInfo, TaskState, Tasks};

/// Endpoints an access key may use (each checks the key's permission on the bucket it names); everything else
/// under [`API_PREFIX`] is the root user's.
pub const SCOPED_ENDPOINTS: [&str; 3] = ["/wait", "/datasets", "/restores"];

/// The admin API's paths start here.
pub const API_PREFIX: &str = "/_permafrost/api/v1";
/// Prometheus metrics.
pub const METRICS_PATH: &str = "/_permafrost/metrics";
/// The dashboard.
pub const UI_PREFIX: &str = "/_permafrost/ui";

/// Settings of the admin side of a server.
#[derive(Debug, Clone)]
pub struct AdminOptions {
    /// The configuration file run-time changes are written to (`None`: they last until the server stops).
    pub config_path: Option<PathBuf>,
    /// How often the monitor samples disk states (ms).
    pub sample_ms: u64,
    /// How often a history sample is kept in the catalog (ms).
    pub history_interval_ms: u64,
    /// History samples kept (the oldest go first).
    pub history_keep: u64,
    /// How often pending webhooks are checked (ms).
    pub webhook_poll_ms: u64,
    /// SMART, read only at spin-ups made for other work (`[smart]`, docs/smart.md).
    pub smart: permafrost_disk::smart::SmartSettings,
}

impl Default for AdminOptions {
    fn default() -> Self {
        AdminOptions {
            config_path: None,
            sample_ms: 200,
            history_interval_ms: 60_000,
            history_keep: 10_080, // a week of minutes
            webhook_poll_ms: 500,
            smart: Default::default(),
        }
    }
}

/// The admin side of one server: cheap to clone (shared).
#[derive(Clone)]
pub struct Admin {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<Store>,
    access: Arc<permafrost_access::Access>,
    auth: auth::Auth,
    router: RwLock<router::Router>,
    events: Arc<EventBus>,
    tasks: Arc<Tasks>,
    metrics: Metrics,
    options: AdminOptions,
    monitor: monitor::Monitor,
    /// The SMART reader (`None`: off in the configuration).
    smart: Option<permafrost_disk::smart::SmartMonitor>,
    /// History samples and webhook deliveries (holds only a weak reference to this).
    background: parking_lot::Mutex<Option<std::thread::JoinHandle<()>>>,
    stopping: std::sync::atomic::AtomicBool,
    /// The server stopped accepting connections and drains the requests in flight ([`Admin::begin_drain`]).
    draining: std::sync::atomic::AtomicBool,
    /// The cluster's figures for the metrics, when the server is a node of a cluster.
    cluster: RwLock<Option<cluster::ClusterSource>>,
}

impl Admin {
    /// The admin side of `store`, whose keys (the root user's among them) are `access`; starts the monitor and
    /// the task threads (stopped by [`Admin::stop`] or when the last clone drops).
    pub fn start(
        store: Arc<Store>,
        access: Arc<permafrost_access::Access>,
        options: AdminOptions,
    ) -> Admin {
        let root = access
            .root()
            .cloned()
            .expect("a server's access table knows its root user");
        let events = Arc::new(EventBus::new());
        let metrics = Metrics::new();
        let monitor = monitor::Monitor::start(store.clone(), events.clone(), options.sample_ms);
        let tasks = Arc::new(Tasks::new(events.clone()));
        let smart = (options.smart.enabled)
            .then(|| smart::start(&store, events.clone(), tasks.clone(), options.smart.clone()));
        let admin = Admin {
            inner: Arc::new(Inner {
                store,
                access,
                auth: auth::Auth::new(&root.access_key, &root.secret_key),
                router: RwLock::new(router::Router::default()),
                tasks,
                events,
                metrics,
                options,
                monitor,
                smart,
                background: parking_lot::Mutex::new(None),
                stopping: std::sync::atomic::AtomicBool::new(false),
                draining: std::sync::atomic::AtomicBool::new(false),
                cluster: RwLock::new(None),
            }),
        };
        api::add_routes(&admin);
        keys::add_routes(&admin);
        let weak = Arc::downgrade(&admin.inner);
        let thread = std::thread::Builder::new()
            .name("permafrost-ops".into())
            .spawn(move || background(weak))
            .expect("spawn the admin's background thread");
        *admin.inner.background.lock() = Some(thread);
        admin
    }

    /// Add an endpoint: `pattern` is a path below [`API_PREFIX`] such as `/datasets/{id}`.
    ///
    /// # Panics
    /// If the same method and pattern were added before.
    pub fn route(&self, method: Method, pattern: &str, handler: Handler) {
        self.inner.router.write().add(method, pattern, handler);
    }

    /// The server is a node of a cluster: its figures join the metrics (read at each scrape).
    pub fn set_cluster_source(&self, source: cluster::ClusterSource) {
        *self.inner.cluster.write() = Some(source);
    }

    /// The cluster's figures source, when the server is a node of a cluster.
    pub fn cluster_source(&self) -> Option<cluster::ClusterSource> {
        self.inner.cluster.read().clone()
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.inner.store
    }
    /// The keys and bucket access of this server.
    pub fn access(&self) -> &Arc<permafrost_access::Access> {
        &self.inner.access
    }
    pub fn events(&self) -> &Arc<EventBus> {
        &self.inner.events
    }
    pub fn tasks(&self) -> &Tasks {
        &self.inner.tasks
    }
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }
    pub fn options(&self) -> &AdminOptions {
        &self.inner.options
    }
    pub fn monitor(&self) -> &monitor::Monitor {
        &self.inner.monitor
    }
    /// The SMART reader, when SMART is on.
    pub fn smart(&self) -> Option<&permafrost_disk::smart::SmartMonitor> {
        self.inner.smart.as_ref()
    }

    /// Whether the admin side answers `path` (the API, the metrics, the dashboard).
    pub fn owns_path(path: &str) -> bool {
        under(path, API_PREFIX) || under(path, UI_PREFIX) || path == METRICS_PATH
    }

    /// End the event streams (the server is shutting down; a draining server must not wait for them).
    pub fn close_streams(&self) {
        self.inner.events.close();
    }

    /// The server is shutting down: it accepts no more connections and finishes the requests in flight. From
    /// now on the readiness probe answers `503` ("shutting down") and event streams end.
    pub fn begin_drain(&self) {
        self.inner
            .draining
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.close_streams();
    }

    /// Whether [`Admin::begin_drain`] was called.
    pub fn is_draining(&self) -> bool {
        self.inner
            .draining
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Stop the monitor, the background and the task threads (after the tasks running now).
    pub fn stop(&self) {
        self.inner.stop();
    }

    /// Answer a request for one of [`Admin::owns_path`]'s paths. `signer`: s3s checked its AWS signature, made
    /// by this principal; otherwise the bearer token or session cookie (the root user's) is checked here. Only
    /// the root user may use the API, except the endpoints [`SCOPED_ENDPOINTS`] that check a bucket permission
    /// themselves.
    pub async fn handle(
        &self,
        request: Request<Body>,
        signer: Option<permafrost_access::Principal>,
    ) -> Response<Body> {
        let (parts, body) = request.into_parts();
        let path = parts.uri.path().to_string();
        if under(&path, UI_PREFIX) {
            return ui::serve(&parts.method, &path);
        }
        let public = ["/login", "/logout", "/session"]
            .iter()
            .any(|p| path.strip_prefix(API_PREFIX) == Some(p));
        let signed = signer.is_some();
        let principal = signer.unwrap_or(permafrost_access::Principal::Root);
        let caller = if signed {
            Ok(Caller::Signed)
        } else if public {
            Ok(Caller::Token) // answered below without touching anything
        } else {
            self.inner.auth.check(&parts.method, &parts.headers)
        };
        if let Err(e) = caller {
            let unauthorized = e.status == StatusCode::UNAUTHORIZED;
            let mut response = e.into_response();
            if unauthorized {
                response.headers_mut().insert(
                    http::header::WWW_AUTHENTICATE,
                    http::HeaderValue::from_static("Bearer realm=\"permafrost\""),
                );
            }
            return response;
        }
        if path == METRICS_PATH {
            return match parts.method {
                Method::GET | Method::HEAD => self.inner.metrics.scrape(self).await,
                ref m => method_not_allowed(m, &path, &[Method::GET]),
            };
        }
        let below = path[API_PREFIX.len()..].to_string();
        let below = if below.is_empty() {
            "/".to_string()
        } else {
            below
        };
        let found = self.inner.router.read().find(&parts.method, &below);
        let (handler, params) = match found {
            router::Found::Handler(h, p) => (h, p),
            router::Found::WrongMethod(methods) => {
                return method_not_allowed(&parts.method, &path, &methods)
            }
            router::Found::Missing => {
                return ApiError::not_found(format!(
                    "no such endpoint: {path} (GET {API_PREFIX}/ lists them)"
                ))
                .into_response()
            }
        };
        let body = match read_body(body).await {
            Ok(b) => b,
            Err(e) => return e.into_response(),
        };
        if !principal.is_root() && !SCOPED_ENDPOINTS.contains(&below.as_str()) {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "AccessDenied",
                format!(
                    "access key {} may not use {path}: the admin API is the root user's (keys may use {})",
                    principal.name(),
                    SCOPED_ENDPOINTS
                        .iter()
                        .map(|p| format!("{API_PREFIX}{p}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
            .into_response();
        }
        let request = ApiRequest {
            principal,
            method: parts.method,
            path: below,
            params,
            query: router::parse_query(parts.uri.query()),
            headers: parts.headers,
            body,
        };
        match handler(self.clone(), request).await {
            Ok(r) => r,
            Err(e) => e.into_response(),
        }
    }

    /// Every endpoint, `METHOD /pattern`.
    pub fn endpoints(&self) -> Vec<String> {
        self.inner.router.read().describe()
    }

    pub(crate) fn auth(&self) -> &auth::Auth {
        &self.inner.auth
    }
}

impl Inner {
    fn stop(&self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.events.close();
        self.monitor.stop();
        self.tasks.stop();
        if let Some(t) = self.background.lock().take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The background thread: history samples and webhook deliveries, until the admin stops or is dropped.
fn background(weak: std::sync::Weak<Inner>) {
    let mut deliverer = webhooks::Deliverer::default();
    let mut next_history = std::time::Instant::now();
    let mut next_webhooks = std::time::Instant::now();
    loop {
        let Some(inner) = weak.upgrade() else { return };
        if inner.stopping.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let admin = Admin { inner };
        let now = std::time::Instant::now();
        if now >= next_history {
            next_history = now
                + std::time::Duration::from_millis(admin.options().history_interval_ms.max(100));
            if let Err(e) = history::record(&admin) {
                tracing::warn!("history: cannot keep a sample: {e}");
            }
        }
        if now >= next_webhooks {
            next_webhooks =
                now + std::time::Duration::from_millis(admin.options().webhook_poll_ms.max(10));
            deliverer.run_once(&admin);
        }
        let sleep = next_history
            .min(next_webhooks)
            .saturating_duration_since(std::time::Instant::now());
        drop(admin); // never keep the admin alive while sleeping
        std::thread::sleep(sleep.min(std::time::Duration::from_millis(100)));
    }
}

/// `path` is `prefix` or below it.
fn under(path: &str, prefix: &str) -> bool {
    path.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

fn method_not_allowed(method: &Method, path: &str, allowed: &[Method]) -> Response<Body> {
    let list = allowed
        .iter()
        .map(Method::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    let mut response = ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        format!("{method} {path}: use {list}"),
    )
    .into_response();
    if let Ok(v) = http::HeaderValue::from_str(&list) {
        response.headers_mut().insert(http::header::ALLOW, v);
    }
    response
}

async fn read_body(mut body: Body) -> Result<Bytes, ApiError> {
    body.store_all_limited(router::BODY_BYTES_MAX)
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "BadRequest",
                format!(
                    "cannot read the request body (at most {} bytes): {e}",
                    router::BODY_BYTES_MAX
                ),
            )
        })
}

/// Wall-clock milliseconds since the Unix epoch.
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admin_side_owns_the_api_the_metrics_and_the_ui() {
        assert!(Admin::owns_path("/_permafrost/api/v1"));
        assert!(Admin::owns_path("/_permafrost/api/v1/disks/3"));
        assert!(Admin::owns_path("/_permafrost/metrics"));
        assert!(Admin::owns_path("/_permafrost/ui/"));
        assert!(Admin::owns_path("/_permafrost/ui/app.js"));
        assert!(!Admin::owns_path("/_permafrost/api/v10"));
        assert!(!Admin::owns_path("/_permafrost/status"));
        assert!(!Admin::owns_path("/_permafrost/metricsx"));
        assert!(!Admin::owns_path("/bucket/_permafrost/metrics"));
    }
}
