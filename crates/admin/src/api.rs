//! The built-in endpoints of the admin API (below [`crate::API_PREFIX`]):
//!
//! | endpoint | answers |
//! |---|---|
//! | `GET /` | every endpoint |
//! | `POST /login`, `POST /logout`, `GET /session` | dashboard session (`{"access_key", "secret_key"}`; `/session` says whether the caller's is valid) |
//! | `GET /state` | everything at once: disks, cache, tasks, energy ([`state`]) |
//! | `GET /disks`, `GET /disks/{disk}` | the disks |
//! | `POST /disks` | grow the grid by a data disk (`{"device"}` or `{"size"}`, optional `"row"`, `"column"`) (`grow.rs`) |
//! | `POST /disks/{disk}/scrub` | task: verify the disk's written ranges |
//! | `POST /disks/{disk}/fail` | mark it failed now |
//! | `POST /disks/{disk}/replace` | a fresh disk in its place; `{"rebuild": true}` (default) queues its rebuild |
//! | `POST /disks/{disk}/rebuild` | task: recover its defect ranges |
//! | `POST /disks/{disk}/evacuate` | task: copy the disk to a replacement (`{"to": "/dev/sdX"}`; default a new file beside a file-backed disk) while it still reads, then retire it ([`crate::evacuate`]) |
//! | `POST /scrub` | task: scrub what is overdue (`{"max_age_hours": H}`, default the grid's setting) |
//! | `POST /persist` | task: persist everything waiting (every version, part list and upload part); fails naming what is still not on the grid after the run |
//! | `POST /cache/evict` | drop persisted contents from the cache now |
//! | `GET /tasks`, `GET /tasks/{id}` | queued, running and recent tasks |
//! | `GET /wakes` | recent spin-ups with their reasons |
//! | `GET /events` | server-sent events ([`crate::events`]) |
//! | `GET /wait` | block until every version of an object, prefix or bucket is persisted, noncurrent ones included (`?bucket=B&key=K` or `&prefix=P`, `&timeout_ms=`, `&persist_now=true` to persist at once instead of when the watchdog decides); `objects` counts the versions |
//! | `GET /verify/persisted` | check every claim of the catalog that a version is persisted against the grid (bytes read back and verified, never from the cache); lists false claims and versions not persisted yet ([`permafrost_store::PersistedReport`]) |
//! | `GET`/`PUT /watchdog` | the watchdog's thresholds; a `PUT` changes the given ones at once and writes them into the configuration file |
//! | `GET /history` | samples over time with rates (`?since_ms=`, `&limit=`, default 1440) ([`crate::history`]) |
//! | `GET`/`POST /webhooks`, `DELETE /webhooks/{id}` | webhooks fired once when an object, prefix or bucket is persisted ([`crate::webhooks`]) |
//! | `GET`/`PUT /buckets/{bucket}/placement` | a bucket's placement strategy |
//! | `GET`/`PUT /buckets/{bucket}/hot` | key prefixes kept in the cache (`{"prefixes": ["", "raw/"]}`; `[]` = none); a `PUT` pins and unpins at once and queues a `keep_hot` task reading back what is not cached |
//!
//! Disk numbers are grid positions (`row · x + column`); an unknown one is a 400 naming the valid range.

use std::time::{Duration, Instant};

use http::{HeaderValue, Method, StatusCode};
use permafrost_disk::power::PowerState;
use permafrost_grid::Role;
use permafrost_store::{StatusReport, StoreError};
use serde::{Deserialize, Serialize};

use crate::monitor::{state_name, wake_json, DiskView};
use crate::router::{blocking, handler, json, json_status, ApiError, ApiRequest, ApiResult};
use crate::tasks::Lane;
use crate::Admin;

pub(crate) fn add_routes(admin: &Admin) {
    admin.route(Method::GET, "/", handler(index));
    admin.route(Method::POST, "/login", handler(login));
    admin.route(Method::POST, "/logout", handler(logout));
    admin.route(Method::GET, "/session", handler(session));
    admin.route(Method::GET, "/state", handler(get_state));
    admin.route(Method::GET, "/disks", handler(get_disks));
    admin.route(Method::POST, "/disks", handler(crate::grow::add_disk));
    admin.route(Method::GET, "/disks/{disk}", handler(get_disk));
    admin.route(Method::POST, "/disks/{disk}/scrub", handler(scrub_disk));
    admin.route(Method::POST, "/disks/{disk}/fail", handler(fail_disk));
    admin.route(Method::POST, "/disks/{disk}/replace", handler(replace_disk));
    admin.route(Method::POST, "/disks/{disk}/rebuild", handler(rebuild_disk));
    admin.route(
        Method::POST,
        "/disks/{disk}/evacuate",
        handler(crate::evacuate::evacuate_disk),
    );
    admin.route(Method::POST, "/scrub", handler(scrub_overdue));
    admin.route(Method::POST, "/persist", handler(persist));
    admin.route(Method::POST, "/cache/evict", handler(evict));
    admin.route(Method::GET, "/tasks", handler(get_tasks));
    admin.route(Method::GET, "/tasks/{id}", handler(get_task));
    admin.route(Method::GET, "/wakes", handler(get_wakes));
    admin.route(Method::GET, "/events", handler(get_events));
    admin.route(Method::GET, "/audit", handler(get_audit));
    admin.route(Method::GET, "/wait", handler(wait));
    admin.route(Method::GET, "/verify/persisted", handler(verify_persisted));
    admin.route(Method::GET, "/history", handler(get_history));
    admin.route(Method::GET, "/watchdog", handler(get_watchdog));
    admin.route(Method::PUT, "/watchdog", handler(put_watchdog));
    admin.route(Method::GET, "/webhooks", handler(get_webhooks));
    admin.route(Method::POST, "/webhooks", handler(add_webhook));
    admin.route(Method::DELETE, "/webhooks/{id}", handler(remove_webhook));
    admin.route(
        Method::GET,
        "/buckets/{bucket}/placement",
        handler(get_placement),
    );
    admin.route(
        Method::PUT,
        "/buckets/{bucket}/placement",
        handler(put_placement),
    );
    admin.route(Method::GET, "/buckets/{bucket}/hot", handler(get_hot));
    admin.route(Method::PUT, "/buckets/{bucket}/hot", handler(put_hot));
}

async fn index(admin: Admin, _: ApiRequest) -> ApiResult {
    json(&serde_json::json!({ "prefix": crate::API_PREFIX, "endpoints": admin.endpoints() }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Login {
    access_key: String,
    secret_key: String,
}

async fn login(admin: Admin, request: ApiRequest) -> ApiResult {
    let login: Login = request.json()?;
    let session = admin.auth().login(&login.access_key, &login.secret_key)?;
    let mut response = json_status(StatusCode::OK, &serde_json::json!({ "logged_in": true }));
    let cookie = format!(
        "{}={session}; Path=/_permafrost/; HttpOnly; SameSite=Strict; Max-Age={}",
        crate::auth::SESSION_COOKIE,
        crate::auth::SESSION_TTL.as_secs()
    );
    response.headers_mut().insert(
        http::header::SET_COOKIE,
        HeaderValue::from_str(&cookie).map_err(|e| ApiError::internal(e.to_string()))?,
    );
    Ok(response)
}

/// Whether the request's session cookie is valid (no credentials needed: the dashboard asks before logging in).
async fn session(admin: Admin, request: ApiRequest) -> ApiResult {
    let logged_in = admin.auth().check(&Method::GET, &request.headers).is_ok();
    json(&serde_json::json!({ "logged_in": logged_in }))
}

async fn logout(admin: Admin, request: ApiRequest) -> ApiResult {
    admin.auth().logout(&request.headers);
    let mut response = json_status(StatusCode::OK, &serde_json::json!({ "logged_in": false }));
    let cookie = format!(
        "{}=; Path=/_permafrost/; HttpOnly; SameSite=Strict; Max-Age=0",
        crate::auth::SESSION_COOKIE
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(http::header::SET_COOKIE, v);
    }
    Ok(response)
}

// ---------------------------------------------------------------- state

/// Energy of one disk or all.
#[derive(Debug, Clone, Serialize)]
pub struct Energy {
    /// Power drawn now, by the power model of the current state.
    pub watts: f64,
    /// Energy since the grid was created (counters kept in the journal across restarts).
    pub joules: f64,
    pub kwh: f64,
}

/// One disk as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct DiskState {
    pub disk: usize,
    pub name: String,
    pub column: usize,
    pub row: usize,
    /// `data`, `hp` (horizontal parity), `vp` (vertical parity of its column).
    pub role: &'static str,
    /// Grid bucket of a data disk, parity group of an `hp`, column of a `vp`.
    pub role_index: usize,
    /// A `vp` whose column holds `hp` disks is also their `vhP` (the parity of parity).
    pub vhp: bool,
    /// `off`, `spinning_up`, `idle`, `active` (the power model now).
    pub power_state: &'static str,
    /// What the dashboard shows: `failed`, else the power state, `active` when there was I/O in the last sample.
    pub shown_state: &'static str,
    pub shown_since_unix_ms: Option<u64>,
    pub failed: bool,
    /// `ok`, `degraded` (ranges waiting for recovery), `failed`.
    pub health: &'static str,
    pub capacity_bytes: u64,
    pub written_bytes: u64,
    pub fill: f64,
    /// Bytes of ranges waiting for recovery (what a rebuild still has to do).
    pub defect_bytes: u64,
    pub pending_parity_bytes: u64,
    pub read_bytes: u64,
    pub written_physical_bytes: u64,
    /// Spin-ups since the grid was created.
    pub spin_ups: u64,
    /// Spin-ups of this server's life by reason (`read`, `persist`, `scrub`, …).
    pub spin_ups_by_reason: std::collections::BTreeMap<&'static str, u64>,
    /// Spin-ups in the last 24 hours (this server's), against the grid's `spin_ups_per_day_max`.
    pub spin_ups_last_day: u64,
    /// How long the disk stays up with nothing to do now (adapted to its recent gaps, or the profile's).
    pub idle_timeout_seconds: f64,
    /// Seconds in each power state since the grid was created.
    pub seconds_in_state: std::collections::BTreeMap<&'static str, f64>,
    pub energy: Energy,
    /// The last spin-up of this server's life and why (`null`: none yet).
    pub last_wake: Option<serde_json::Value>,
    /// When the last full scrub pass ended (ms since the epoch, `null` = never).
    pub last_scrub_unix_ms: Option<u64>,
    /// When the longest-unverified written range was last known good (`null` = nothing written).
    pub verified_oldest_unix_ms: Option<u64>,
    /// SMART figures: read only while a disk spins anyway, served with their age.
    pub smart: serde_json::Value,
    /// Datasets whose data lives on this disk (data disks; at most [`DATASETS_SHOWN`], then `datasets_more`).
    pub datasets: Vec<String>,
    pub datasets_more: usize,
    /// The disk's last evacuation (`null`: never evacuated): `state` (`copying`, `stopped`, `retired`), old and new disk,
    /// bytes copied and reconstructed, and the running task's id and progress ([`crate::evacuate`]).
    pub evacuation: Option<serde_json::Value>,
}

/// Datasets named per disk in the state.
pub const DATASETS_SHOWN: usize = 8;

/// Everything at once.
#[derive(Debug, Clone, Serialize)]
pub struct State {
    pub at_unix_ms: u64,
    /// The server is a node of a cluster: `GET /cluster` answers (the dashboard shows its Cluster section).
    pub cluster_node: bool,
    pub grid_id: String,
    pub layout: String,
    /// The layout and the disks added to it (`8x6:4+1 +1 disk (hPG 0 col 5)`), and how many were added.
    pub geometry: String,
    pub geometry_version: u64,
    pub columns: usize,
    /// Rows of the drawing: the layout's, and more where disks were added to a column.
    pub rows: usize,
    /// Buckets (data disks) and the logical bytes of each and of all.
    pub buckets: usize,
    pub bucket_capacity_bytes: u64,
    pub capacity_bytes: u64,
    pub disks: Vec<DiskState>,
    pub disks_by_state: std::collections::BTreeMap<&'static str, usize>,
    pub spinning_now: usize,
    pub spinning_max: usize,
    /// The wear budget: spin-ups per disk in any 24 hours (`null`: not enforced).
    pub spin_ups_per_day_max: Option<u32>,
    /// The read scheduler: `deadline` or `fifo`.
    pub scheduler: &'static str,
    pub cache: CacheState,
    pub energy: Energy,
    /// Time to first byte of the reads this server answered: p50/p99 of all, and of those that woke a disk.
    pub first_byte: crate::metrics::FirstByteQuantiles,
    /// Reads served from the cache and from the grid, prefetches and their hits, keep-hot read-backs.
    pub cache_reads: permafrost_store::CacheReads,
    pub tasks: Vec<crate::TaskInfo>,
    pub last_background_error: Option<String>,
}

/// The write-back cache.
#[derive(Debug, Clone, Serialize)]
pub struct CacheState {
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    /// Stored bytes not yet persisted (cached, placed or persisting).
    pub dirty_bytes: u64,
    /// Age of the oldest content waiting to be persisted (`null`: nothing waits).
    pub oldest_unpersisted_age_seconds: Option<f64>,
    pub waiting_bytes_per_grid_bucket: Vec<GridBucketBytes>,
    pub objects: u64,
    pub buckets: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct GridBucketBytes {
    pub grid_bucket: u32,
    /// The data disk of that grid bucket.
    pub disk: usize,
    pub bytes: u64,
    pub contents: u64,
    pub oldest_unix_ms: u64,
}

fn role_of(role: Role) -> (&'static str, usize) {
    match role {
        Role::Data { bucket } => ("data", bucket),
        Role::HParity { hpg } => ("hp", hpg),
        Role::VParity { column } => ("vp", column),
    }
}

/// The state from memory and the catalog; touches no disk.
pub fn state(admin: &Admin) -> Result<State, ApiError> {
    let store = admin.store();
    let report: StatusReport = store.status()?;
    let outstanding = store.catalog_outstanding()?;
    let engine = store.engine();
    let power = engine.power();
    let geometry = engine.geometry();
    let profile = power.profile().clone();
    let views: Vec<DiskView> = admin.monitor().views();
    let layout = geometry.layout();
    let now = crate::unix_ms();
    let mut datasets_of: Vec<Vec<String>> = vec![Vec::new(); geometry.disks()];
    for d in store.catalog().datasets()? {
        if let Some(b) = d.grid_bucket.filter(|&b| (b as usize) < geometry.buckets()) {
            datasets_of[geometry.bucket_disk(b as usize)].push(d.id);
        }
    }
    let evacuations = crate::evacuate::evacuation_states(admin);
    let mut disks_by_state = std::collections::BTreeMap::new();
    let mut total_watts = 0.0;
    let mut total_joules = 0.0;
    let disks: Vec<DiskState> = report
        .engine
        .disks
        .iter()
        .map(|d| {
            let (role, role_index) = role_of(d.role);
            let vhp = role == "vp"
                && (0..geometry.disks()).any(|o| {
                    geometry.column(o) == geometry.column(d.index)
                        && matches!(geometry.role(o), Role::HParity { .. })
                });
            let view = views.get(d.index);
            let shown_state = if d.failed {
                "failed"
            } else {
                view.map_or(state_name(d.power_state), |v| v.shown_state)
            };
            *disks_by_state.entry(shown_state).or_insert(0) += 1;
            let watts = profile.watts(d.power_state);
            total_watts += watts;
            total_joules += d.power.joules;
            let seconds_in_state = [
                PowerState::Off,
                PowerState::SpinningUp,
                PowerState::Idle,
                PowerState::Active,
            ]
            .iter()
            .map(|&s| {
                (
                    state_name(s),
                    d.power.ms_in_state[s.index()] as f64 / 1000.0,
                )
            })
            .collect();
            let spin_ups_by_reason = power
                .wake_counts(d.index)
                .into_iter()
                .map(|(k, n)| (k.as_str(), n))
                .collect();
            DiskState {
                disk: d.index,
                name: d.name.clone(),
                column: geometry.column(d.index),
                row: geometry.row(d.index),
                role,
                role_index,
                vhp,
                power_state: state_name(d.power_state),
                shown_state,
                shown_since_unix_ms: view.map(|v| v.since_unix_ms),
                failed: d.failed,
                health: if d.failed {
                    "failed"
                } else if d.defect_bytes > 0 {
                    "degraded"
                } else {
                    "ok"
                },
                capacity_bytes: report.engine.bucket_capacity_bytes,
                written_bytes: d.written_bytes,
                fill: if report.engine.bucket_capacity_bytes == 0 {
                    0.0
                } else {
                    d.written_bytes as f64 / report.engine.bucket_capacity_bytes as f64
                },
                defect_bytes: d.defect_bytes,
                pending_parity_bytes: d.pending_delta_bytes,
                read_bytes: d.io.physical_read_bytes,
                written_physical_bytes: d.io.physical_written_bytes,
                spin_ups: d.power.spin_ups,
                spin_ups_by_reason,
                spin_ups_last_day: power.spin_ups_last_day(d.index),
                idle_timeout_seconds: power.idle_timeout_ms(d.index) as f64 / 1000.0,
                seconds_in_state,
                energy: Energy {
                    watts,
                    joules: d.power.joules,
                    kwh: d.power.joules / 3.6e6,
                },
                last_wake: power.last_wake(d.index).as_ref().map(wake_json),
                last_scrub_unix_ms: (d.last_scrub_pass_ms > 0).then_some(d.last_scrub_pass_ms),
                verified_oldest_unix_ms: d.verified_oldest_ms,
                smart: crate::smart::disk_json(admin.smart(), d.index, &d.name),
                datasets_more: datasets_of[d.index].len().saturating_sub(DATASETS_SHOWN),
                datasets: datasets_of[d.index]
                    .iter()
                    .take(DATASETS_SHOWN)
                    .cloned()
                    .collect(),
                evacuation: evacuations.get(&d.index).cloned(),
            }
        })
        .collect();
    let dirty_bytes = report
        .catalog
        .contents_by_state
        .iter()
        .filter(|(s, _, _)| s.as_str() != "persisted")
        .map(|(_, _, bytes)| *bytes)
        .sum();
    let oldest = outstanding.iter().map(|o| o.oldest_ms).min();
    Ok(State {
        at_unix_ms: now,
        cluster_node: admin.cluster_source().is_some(),
        grid_id: report.engine.grid_id.clone(),
        layout: report.engine.layout.clone(),
        geometry: report.engine.geometry.clone(),
        geometry_version: report.engine.geometry_version,
        columns: layout.x,
        rows: (0..geometry.disks())
            .map(|d| geometry.row(d) + 1)
            .max()
            .unwrap_or(layout.y),
        buckets: report.engine.buckets,
        bucket_capacity_bytes: report.engine.bucket_capacity_bytes,
        capacity_bytes: report.engine.buckets as u64 * report.engine.bucket_capacity_bytes,
        disks,
        disks_by_state,
        spinning_now: report.engine.spinning_now,
        spinning_max: power.budget(),
        spin_ups_per_day_max: power.spinups_per_day_max(),
        scheduler: power.scheduler_config().strategy.name(),
        cache: CacheState {
            capacity_bytes: report.cache_capacity_bytes,
            used_bytes: report.cache_used_bytes,
            dirty_bytes,
            oldest_unpersisted_age_seconds: oldest.map(|ms| now.saturating_sub(ms) as f64 / 1000.0),
            waiting_bytes_per_grid_bucket: outstanding
                .iter()
                .map(|o| GridBucketBytes {
                    grid_bucket: o.grid_bucket,
                    disk: geometry.bucket_disk(o.grid_bucket as usize),
                    bytes: o.stored_bytes,
                    contents: o.contents,
                    oldest_unix_ms: o.oldest_ms,
                })
                .collect(),
            objects: report.catalog.objects,
            buckets: report.catalog.buckets,
        },
        energy: Energy {
            watts: total_watts,
            joules: total_joules,
            kwh: total_joules / 3.6e6,
        },
        first_byte: admin.metrics().first_byte_quantiles(),
        cache_reads: store.cache_reads(),
        tasks: admin.tasks().list(),
        last_background_error: report.last_background_error.clone(),
    })
}

async fn get_state(admin: Admin, _: ApiRequest) -> ApiResult {
    let state = blocking(move || state(&admin)).await?;
    json(&state)
}

async fn get_disks(admin: Admin, _: ApiRequest) -> ApiResult {
    let state = blocking(move || state(&admin)).await?;
    json(&serde_json::json!({
        "disks": state.disks,
        "geometry": state.geometry,
        "geometry_version": state.geometry_version,
        "buckets": state.buckets,
        "bucket_capacity_bytes": state.bucket_capacity_bytes,
        "capacity_bytes": state.capacity_bytes,
    }))
}

/// The disk named by the request's `{disk}`, checked against the grid.
pub(crate) fn disk_param(admin: &Admin, request: &ApiRequest) -> Result<usize, ApiError> {
    let text = request.param("disk");
    let n = admin.store().engine().geometry().disks();
    match text.parse::<usize>() {
        Ok(d) if d < n => Ok(d),
        _ => Err(ApiError::bad_request(format!(
            "unknown disk {text:?}: this grid has disks 0 to {}",
            n - 1
        ))),
    }
}

async fn get_disk(admin: Admin, request: ApiRequest) -> ApiResult {
    let disk = disk_param(&admin, &request)?;
    let state = blocking(move || state(&admin)).await?;
    json(&state.disks[disk])
}

pub(crate) fn accepted(task: &crate::TaskInfo) -> ApiResult {
    Ok(json_status(
        StatusCode::ACCEPTED,
        &serde_json::json!({ "task": task }),
    ))
}

async fn scrub_disk(admin: Admin, request: ApiRequest) -> ApiResult {
    let disk = disk_param(&admin, &request)?;
    if admin.store().engine().is_failed(disk) {
        return Err(ApiError::conflict(format!(
            "disk {disk} has failed: replace it instead of scrubbing it"
        )));
    }
    let store = admin.store().clone();
    let task = admin.tasks().submit(
        "scrub",
        format!("disk {disk}"),
        Some(disk),
        Lane::Maintenance,
        move |progress| {
            let engine = store.engine();
            let len = engine.bucket_capacity_bytes();
            progress.set(0, len);
            let _reason = permafrost_disk::power::WakeReason::about(
                permafrost_disk::power::WakeKind::Scrub,
                format!("disk {disk} (operator)"),
            )
            .enter();
            let report = engine.scrub(disk, 0, len).map_err(|e| e.to_string())?;
            progress.set(len, len);
            Ok(serde_json::json!({
                "bytes_verified": report.bytes_verified,
                "blocks_repaired": report.blocks_repaired,
                "check_blocks_repaired": report.check_blocks_repaired,
                "unrecoverable": report.unrecoverable,
            }))
        },
    );
    accepted(&task)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ScrubOverdue {
    max_age_hours: Option<f64>,
}

async fn scrub_overdue(admin: Admin, request: ApiRequest) -> ApiResult {
    let body: ScrubOverdue = request.json()?;
    let max_age = match body.max_age_hours {
        Some(h) if !(h.is_finite() && h >= 0.0) => {
            return Err(ApiError::bad_request(format!(
                "max_age_hours {h}: must be a number of hours, 0 or more"
            )))
        }
        Some(h) => Duration::from_secs_f64(h * 3600.0),
        None => Duration::from_millis(admin.store().engine().config().scrub_overdue_after_ms),
    };
    let store = admin.store().clone();
    let task = admin.tasks().submit(
        "scrub_overdue",
        format!(
            "everything not verified for {:.1} h",
            max_age.as_secs_f64() / 3600.0
        ),
        None,
        Lane::Maintenance,
        move |_| {
            let _reason = permafrost_disk::power::WakeReason::about(
                permafrost_disk::power::WakeKind::Scrub,
                "overdue ranges (operator)",
            )
            .enter();
            let report = store
                .engine()
                .scrub_overdue(max_age)
                .map_err(|e| e.to_string())?;
            Ok(serde_json::to_value(&report).unwrap_or_default())
        },
    );
    accepted(&task)
}

async fn fail_disk(admin: Admin, request: ApiRequest) -> ApiResult {
    let disk = disk_param(&admin, &request)?;
    let store = admin.store().clone();
    blocking(move || Ok(store.engine().fail_disk(disk)?)).await?;
    admin.events().emit(
        "disk",
        format!("disk {disk} marked failed by the operator"),
        serde_json::json!({ "disk": disk, "state": "failed", "reason": "failed by the operator" }),
    );
    json(&serde_json::json!({ "disk": disk, "failed": true }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Replace {
    #[serde(default = "yes")]
    rebuild: bool,
}

fn yes() -> bool {
    true
}

async fn replace_disk(admin: Admin, request: ApiRequest) -> ApiResult {
    let disk = disk_param(&admin, &request)?;
    let body: Replace = request.json()?;
    if !admin.store().engine().is_failed(disk) {
        return Err(ApiError::conflict(format!(
            "disk {disk} has not failed: mark it failed first (POST .../disks/{disk}/fail)"
        )));
    }
    let store = admin.store().clone();
    blocking(move || Ok(store.engine().replace_disk(disk, None)?)).await?;
    admin.events().emit(
        "disk",
        format!("disk {disk} replaced by a fresh disk"),
        serde_json::json!({ "disk": disk, "replaced": true }),
    );
    let task = body.rebuild.then(|| submit_rebuild(&admin, disk));
    json(&serde_json::json!({ "disk": disk, "replaced": true, "rebuild_task": task }))
}

fn submit_rebuild(admin: &Admin, disk: usize) -> crate::TaskInfo {
    let store = admin.store().clone();
    admin.tasks().submit(
        "rebuild",
        format!("disk {disk}"),
        Some(disk),
        Lane::Maintenance,
        move |progress| {
            let _reason = permafrost_disk::power::WakeReason::about(
                permafrost_disk::power::WakeKind::Rebuild,
                format!("disk {disk}"),
            )
            .enter();
            progress.set(0, store.engine().defect_bytes(disk));
            let report = store
                .engine()
                .rebuild(disk, &|done, total| progress.set(done, total))
                .map_err(|e| e.to_string())?;
            Ok(serde_json::to_value(&report).unwrap_or_default())
        },
    )
}

async fn rebuild_disk(admin: Admin, request: ApiRequest) -> ApiResult {
    let disk = disk_param(&admin, &request)?;
    if admin.store().engine().is_failed(disk) {
        return Err(ApiError::conflict(format!(
            "disk {disk} has failed: replace it first (POST .../disks/{disk}/replace)"
        )));
    }
    accepted(&submit_rebuild(&admin, disk))
}

async fn persist(admin: Admin, _: ApiRequest) -> ApiResult {
    let store = admin.store().clone();
    let task = admin.tasks().submit(
        "persist",
        "everything waiting in the cache".into(),
        None,
        Lane::Cache,
        move |_| {
            store.persist_now().map_err(|e| e.to_string())?;
            Ok(serde_json::json!({ "persisted": true }))
        },
    );
    accepted(&task)
}

async fn evict(admin: Admin, _: ApiRequest) -> ApiResult {
    let store = admin.store().clone();
    let evicted_bytes = blocking(move || Ok(store.evict_cache()?)).await?;
    json(&serde_json::json!({ "evicted_bytes": evicted_bytes }))
}

async fn get_tasks(admin: Admin, _: ApiRequest) -> ApiResult {
    json(&serde_json::json!({ "tasks": admin.tasks().list() }))
}

async fn get_task(admin: Admin, request: ApiRequest) -> ApiResult {
    let text = request.param("id");
    let task = text
        .parse()
        .ok()
        .and_then(|id| admin.tasks().get(id))
        .ok_or_else(|| ApiError::not_found(format!("no such task: {text}")))?;
    json(&task)
}

async fn get_wakes(admin: Admin, request: ApiRequest) -> ApiResult {
    let after: u64 = request.query_parse("after", 0)?;
    let wakes: Vec<_> = admin
        .store()
        .engine()
        .power()
        .wakes_since(after)
        .iter()
        .map(wake_json)
        .collect();
    json(&serde_json::json!({ "wakes": wakes }))
}

async fn get_events(admin: Admin, request: ApiRequest) -> ApiResult {
    let last_id = request
        .headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok());
    let last_id = match request.query("after") {
        Some(_) => Some(request.query_parse("after", 0u64)?),
        None => last_id,
    };
    let key = request
        .query("key")
        .filter(|k| !k.is_empty())
        .map(str::to_string);
    Ok(admin.events().sse(last_id, key))
}

/// The audit trail still in the event ring, oldest first: `request` events (a request that changed something or
/// was refused) and `key` events (changes to keys); `?key=NAME` keeps those about one access key (`root`,
/// `anonymous` or a key's name), `?after=ID` those after an event id.
async fn get_audit(admin: Admin, request: ApiRequest) -> ApiResult {
    let after: u64 = request.query_parse("after", 0)?;
    let key = request.query("key").filter(|k| !k.is_empty());
    let events: Vec<_> = admin
        .events()
        .since(after, crate::events::RECENT_MAX)
        .into_iter()
        .filter(|e| matches!(e.kind, "request" | "key"))
        .filter(|e| key.is_none_or(|k| crate::events::about_key(e, k)))
        .map(|e| (*e).clone())
        .collect();
    json(&events)
}

/// Longest a wait may block.
pub const WAIT_MS_MAX: u64 = 3_600_000;

async fn wait(admin: Admin, request: ApiRequest) -> ApiResult {
    let bucket = request
        .query("bucket")
        .filter(|b| !b.is_empty())
        .ok_or_else(|| ApiError::bad_request("wait: give bucket= (and key= or prefix=)"))?
        .to_string();
    let key = request.query("key").map(str::to_string);
    let prefix = request.query("prefix").unwrap_or("").to_string();
    if key.is_some() && !prefix.is_empty() {
        return Err(ApiError::bad_request(
            "wait: give key= or prefix=, not both",
        ));
    }
    let timeout_ms: u64 = request.query_parse("timeout_ms", 60_000)?;
    let persist_now: bool = request.query_parse("persist_now", false)?;
    request.authorize(&admin, scoped("WaitPersisted"), &bucket)?;
    if persist_now && !request.principal.is_root() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "AccessDenied",
            format!(
                "access key {} may wait for persistence but not start it (persist_now is the root user's)",
                request.principal.name()
            ),
        ));
    }
    if timeout_ms > WAIT_MS_MAX {
        return Err(ApiError::bad_request(format!(
            "timeout_ms={timeout_ms}: at most {WAIT_MS_MAX}"
        )));
    }
    let store = admin.store().clone();
    let answer = blocking(move || {
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        if persist_now {
            store.head_bucket(&bucket)?;
            match store.persist_now() {
                // Something elsewhere is not persisted: the wait below says whether what it covers is.
                Ok(()) | Err(StoreError::NotPersisted(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // Every version the answer covers: noncurrent ones and those under a delete marker too.
        let (objects, persisted) = store.wait_versions_persisted(
            &bucket,
            &prefix,
            key.as_deref(),
            deadline.saturating_duration_since(Instant::now()),
        )?;
        Ok(serde_json::json!({
            "bucket": bucket,
            "key": request.query("key"),
            "prefix": prefix,
            "objects": objects,
            "persisted": persisted,
        }))
    })
    .await?;
    json(&answer)
}

/// Check the catalog's persistence claims against the grid (reads every persisted byte back: long on a large
/// archive, and it spins up the disks holding data).
async fn verify_persisted(admin: Admin, _: ApiRequest) -> ApiResult {
    let store = admin.store().clone();
    let report = blocking(move || Ok(store.verify_persisted(&mut |_| {})?)).await?;
    json(&report)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Placement {
    placement: Option<String>,
}

async fn get_placement(admin: Admin, request: ApiRequest) -> ApiResult {
    let bucket = request.param("bucket").to_string();
    let store = admin.store().clone();
    let report = blocking(move || Ok(store.bucket_settings(&bucket)?)).await?;
    json(&serde_json::json!({
        "bucket": report.bucket,
        "placement": report.chosen.placement,
        "effective": report.effective.placement,
    }))
}

async fn put_placement(admin: Admin, request: ApiRequest) -> ApiResult {
    let bucket = request.param("bucket").to_string();
    let body: Placement = request.json()?;
    if let Some(name) = &body.placement {
        let names = permafrost_policy::placement_names();
        if !names.contains(&name.as_str()) {
            return Err(ApiError::bad_request(format!(
                "unknown placement strategy {name:?}: use one of {}",
                names.join(", ")
            )));
        }
    }
    let store = admin.store().clone();
    let report = blocking(move || {
        let mut settings = store.bucket_settings(&bucket)?.chosen;
        settings.placement = body.placement;
        Ok(store.set_bucket_settings(&bucket, settings)?)
    })
    .await?;
    json(&serde_json::json!({
        "bucket": report.bucket,
        "placement": report.chosen.placement,
        "effective": report.effective.placement,
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Hot {
    prefixes: Vec<String>,
}

async fn get_hot(admin: Admin, request: ApiRequest) -> ApiResult {
    let bucket = request.param("bucket").to_string();
    let store = admin.store().clone();
    let name = bucket.clone();
    let prefixes = blocking(move || Ok(store.hot_prefixes(&name)?)).await?;
    json(&serde_json::json!({ "bucket": bucket, "prefixes": prefixes }))
}

/// Replace a bucket's hot prefixes: pinned and unpinned at once (catalog only); what is under them and not in the
/// cache is read back by a `keep_hot` task (lane `cache`), whose id the answer gives.
async fn put_hot(admin: Admin, request: ApiRequest) -> ApiResult {
    let bucket = request.param("bucket").to_string();
    let body: Hot = request.json()?;
    let store = admin.store().clone();
    let name = bucket.clone();
    let change = blocking(move || Ok(store.set_hot_prefixes(&name, body.prefixes)?)).await?;
    let task = (change.to_read_contents > 0).then(|| {
        let store = admin.store().clone();
        let name = bucket.clone();
        admin.tasks().submit(
            "keep_hot",
            format!(
                "{bucket}: {} contents ({} bytes) back into the cache",
                change.to_read_contents, change.to_read_bytes
            ),
            None,
            Lane::Cache,
            move |progress| {
                let report = store
                    .keep_hot(&name, &mut |done, total| progress.set(done, total))
                    .map_err(|e| e.to_string())?;
                Ok(serde_json::to_value(&report).unwrap_or_default())
            },
        )
    });
    json(&serde_json::json!({
        "bucket": change.bucket,
        "prefixes": change.prefixes,
        "pinned": change.pinned,
        "unpinned": change.unpinned,
        "to_read_contents": change.to_read_contents,
        "to_read_bytes": change.to_read_bytes,
        "task": task,
    }))
}

/// Most history points one request returns.
pub const HISTORY_LIMIT_MAX: usize = 100_000;

async fn get_history(admin: Admin, request: ApiRequest) -> ApiResult {
    let since: u64 = request.query_parse("since_ms", 0)?;
    let limit: usize = request.query_parse("limit", 1440)?;
    if limit == 0 || limit > HISTORY_LIMIT_MAX {
        return Err(ApiError::bad_request(format!(
            "limit={limit}: between 1 and {HISTORY_LIMIT_MAX}"
        )));
    }
    let interval_ms = admin.options().history_interval_ms;
    let samples =
        blocking(move || Ok(admin.store().catalog().history_since(since, limit)?)).await?;
    json(&serde_json::json!({
        "interval_ms": interval_ms,
        "points": crate::history::points(&samples),
    }))
}

fn webhook_json(hook: &permafrost_catalog::WebhookRecord) -> serde_json::Value {
    serde_json::json!({
        "id": hook.id,
        "url": hook.url,
        "bucket": hook.bucket,
        "key": hook.key,
        "prefix": if hook.key.is_none() { Some(&hook.prefix) } else { None },
        "target": crate::webhooks::target(hook),
        "created_unix_ms": hook.created_ms,
        "delivered_unix_ms": hook.delivered_ms,
        "attempts": hook.attempts,
        "last_error": hook.last_error,
    })
}

async fn get_webhooks(admin: Admin, _: ApiRequest) -> ApiResult {
    let hooks = blocking(move || Ok(admin.store().catalog().webhooks()?)).await?;
    json(&serde_json::json!({ "webhooks": hooks.iter().map(webhook_json).collect::<Vec<_>>() }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewWebhook {
    url: String,
    bucket: String,
    key: Option<String>,
    prefix: Option<String>,
}

async fn add_webhook(admin: Admin, request: ApiRequest) -> ApiResult {
    let body: NewWebhook = request.json()?;
    let valid_url = body
        .url
        .strip_prefix("http://")
        .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/'));
    if !valid_url {
        return Err(ApiError::bad_request(format!(
            "webhook url {:?}: give an http://HOST[:PORT]/PATH URL (the server sends no https)",
            body.url
        )));
    }
    if body.key.is_some() && body.prefix.is_some() {
        return Err(ApiError::bad_request(
            "webhook: give key or prefix, not both",
        ));
    }
    if body.key.as_deref() == Some("") {
        return Err(ApiError::bad_request(
            "webhook: key is empty (leave it out to wait for the whole bucket)",
        ));
    }
    let hook = blocking(move || {
        let store = admin.store();
        store.head_bucket(&body.bucket)?;
        Ok(store.catalog().webhook_add(
            &body.url,
            &body.bucket,
            body.key.as_deref(),
            body.prefix.as_deref().unwrap_or(""),
            crate::unix_ms(),
        )?)
    })
    .await?;
    Ok(json_status(StatusCode::CREATED, &webhook_json(&hook)))
}

async fn remove_webhook(admin: Admin, request: ApiRequest) -> ApiResult {
    let text = request.param("id").to_string();
    let id: u64 = text
        .parse()
        .map_err(|_| ApiError::bad_request(format!("webhook id {text:?} is not a number")))?;
    let removed = blocking(move || Ok(admin.store().catalog().webhook_remove(id)?)).await?;
    if !removed {
        return Err(ApiError::not_found(format!("no such webhook: {id}")));
    }
    json(&serde_json::json!({ "id": id, "removed": true }))
}

async fn get_watchdog(admin: Admin, _: ApiRequest) -> ApiResult {
    json(&serde_json::json!({
        "watchdog": admin.store().watchdog(),
        "config_path": admin.options().config_path,
    }))
}

/// A change of some watchdog thresholds (absent = unchanged).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WatchdogChange {
    interval_ms: Option<u64>,
    max_age_ms: Option<u64>,
    persist_spinning_after_ms: Option<u64>,
    start_off_disk_above_bytes: Option<u64>,
    persist_spinning_above_bytes: Option<u64>,
    pressure_fill_percent: Option<f64>,
    persist_under_pressure_above_bytes: Option<u64>,
}

async fn put_watchdog(admin: Admin, request: ApiRequest) -> ApiResult {
    let change: WatchdogChange = request.json()?;
    let mut w = admin.store().watchdog();
    w.interval_ms = change.interval_ms.unwrap_or(w.interval_ms);
    w.max_age_ms = change.max_age_ms.unwrap_or(w.max_age_ms);
    w.persist_spinning_after_ms = change
        .persist_spinning_after_ms
        .unwrap_or(w.persist_spinning_after_ms);
    w.start_off_disk_above_bytes = change
        .start_off_disk_above_bytes
        .unwrap_or(w.start_off_disk_above_bytes);
    w.persist_spinning_above_bytes = change
        .persist_spinning_above_bytes
        .unwrap_or(w.persist_spinning_above_bytes);
    w.pressure_fill_percent = change
        .pressure_fill_percent
        .unwrap_or(w.pressure_fill_percent);
    w.persist_under_pressure_above_bytes = change
        .persist_under_pressure_above_bytes
        .unwrap_or(w.persist_under_pressure_above_bytes);
    let path = admin.options().config_path.clone();
    let store = admin.store().clone();
    let saved = w.clone();
    blocking(move || {
        store.set_watchdog(saved.clone())?;
        if let Some(path) = &path {
            crate::config::save_watchdog(path, &saved)?;
        }
        Ok(())
    })
    .await?;
    admin.events().emit(
        "config",
        "watchdog thresholds changed by the operator",
        serde_json::to_value(&w).unwrap_or_default(),
    );
    json(&serde_json::json!({
        "watchdog": w,
        "config_path": admin.options().config_path,
    }))
}

/// An operation of `permafrost_access::ARCHIVE_OPERATIONS` by name.
pub fn scoped(name: &str) -> &'static permafrost_access::Operation {
    permafrost_access::classify(name).expect("the archive's operations are classified")
}
