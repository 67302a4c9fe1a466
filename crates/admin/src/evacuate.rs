//! `POST /disks/{disk}/evacuate`: evacuate a disk of the running server's grid ([`permafrost_engine::Engine::evacuate`],
//! docs/grid.md "Evacuating a disk") as a task of the maintenance lane, and the evacuation state `GET /disks` shows.
//!
//! The body is optional: `{"to": "/dev/sdX"}` names the replacement block device (its motor controlled as the old
//! disk's, or `"power_control"`); without it a file-backed disk is evacuated to a new file beside it. The answer
//! is `202` with the task (`GET /tasks/{id}` for its progress). The task emits `disk` events when the evacuation
//! starts, when it ends and when the old disk is retired (or why it is not); a run that stops (an error, a
//! restart of the server) is resumed by asking again, from what the journal says is still to copy.
//!
//! While the task runs, readers keep reading the disk: what is not copied yet comes from the old disk, and the
//! evacuation goes first (readers get a share of its bytes, `[evacuation]` in `grid.toml`).
//!
//! **Invariants.** One evacuation task per disk is queued or running at a time (a second request is a 409); a
//! failed disk is refused (it is replaced and rebuilt instead); the engine runs on the task's thread, never on the
//! server's runtime.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use permafrost_disk::power::PowerControl;
use permafrost_engine::{DiskSpec, EvacuationState};
use permafrost_store::Store;
use serde::Deserialize;

use crate::api::{accepted, disk_param};
use crate::events::EventBus;
use crate::router::{ApiError, ApiRequest, ApiResult};
use crate::tasks::{Lane, TaskState, Tasks};
use crate::Admin;

/// The kind of the evacuation tasks.
pub const TASK_KIND: &str = "evacuate";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EvacuateBody {
    /// The replacement block device [default for a file-backed disk: a new file beside it].
    to: Option<PathBuf>,
    /// What spins the replacement down and up [default: the old disk's].
    power_control: Option<PowerControl>,
}

/// The queued or running evacuation task of `disk`, if any.
fn active_task(tasks: &Tasks, disk: usize) -> Option<crate::TaskInfo> {
    tasks.list().into_iter().find(|t| {
        t.kind == TASK_KIND
            && t.disk == Some(disk)
            && matches!(t.state, TaskState::Queued | TaskState::Running)
    })
}

pub(crate) async fn evacuate_disk(admin: Admin, request: ApiRequest) -> ApiResult {
    let disk = disk_param(&admin, &request)?;
    let body: EvacuateBody = request.json()?;
    let engine = admin.store().engine();
    if body.power_control.is_some() && body.to.is_none() {
        return Err(ApiError::bad_request(
            "power_control names the replacement device's controller: give \"to\" too",
        ));
    }
    let to = body.to.map(|path| {
        let previous = match engine.config().disks.get(disk) {
            Some(DiskSpec::Block { power_control, .. }) => power_control.clone(),
            _ => PowerControl::Simulated,
        };
        DiskSpec::Block {
            path,
            power_control: body.power_control.unwrap_or(previous),
        }
    });
    let task = start_evacuation(admin.tasks(), admin.store(), admin.events(), disk, to, "")?;
    accepted(&task)
}

/// Queue the evacuation task of `disk` to `to` (default: a new file beside a file-backed disk); `why` is said in
/// its events after the disk (e.g. " because SMART says it is failing"). Refused (409) for a failed disk and
/// while the disk's evacuation task is queued or running.
pub(crate) fn start_evacuation(
    tasks: &Tasks,
    store: &Arc<Store>,
    events: &Arc<EventBus>,
    disk: usize,
    to: Option<DiskSpec>,
    why: &str,
) -> Result<crate::TaskInfo, ApiError> {
    // A running evacuation first: while its replacement takes the disk's place, the disk shows as failed.
    if let Some(task) = active_task(tasks, disk) {
        return Err(ApiError::conflict(format!(
            "disk {disk} is already being evacuated (task {})",
            task.id
        )));
    }
    if store.engine().is_failed(disk) {
        return Err(ApiError::conflict(format!(
            "disk {disk} has failed and cannot be read: replace and rebuild it (POST .../disks/{disk}/replace)"
        )));
    }
    let why = why.to_string();
    let store = Arc::clone(store);
    let events = Arc::clone(events);
    let task = tasks.submit(
        TASK_KIND,
        format!("disk {disk}"),
        Some(disk),
        Lane::Maintenance,
        move |progress| {
            let _reason = permafrost_disk::power::WakeReason::about(
                permafrost_disk::power::WakeKind::Rebuild,
                format!("evacuation of disk {disk}"),
            )
            .enter();
            events.emit(
                "disk",
                format!("evacuation of disk {disk} started{why}"),
                serde_json::json!({ "disk": disk, "evacuation": "started" }),
            );
            let started = std::time::Instant::now();
            let result = store
                .engine()
                .evacuate(disk, to, &|done, total| progress.set(done, total));
            let report = match result {
                Ok(report) => report,
                Err(e) => {
                    events.emit(
                        "disk",
                        format!("evacuation of disk {disk} stopped: {e}; ask again to resume it"),
                        serde_json::json!({ "disk": disk, "evacuation": "stopped", "error": e.to_string() }),
                    );
                    return Err(e.to_string());
                }
            };
            let seconds = started.elapsed().as_secs_f64();
            events.emit(
                "disk",
                format!(
                    "evacuation of disk {disk} finished in {seconds:.1} s: {} bytes copied from the old disk, {} \
                     reconstructed from the grid, {} served to readers from the old disk; {} of {} reads of the \
                     disk waited for their turn behind it, the longest {} ms",
                    report.bytes_copied,
                    report.bytes_reconstructed,
                    report.bytes_served_to_readers,
                    report.reads_waited,
                    report.reads_admitted,
                    report.read_wait_ms_longest
                ),
                serde_json::json!({
                    "disk": disk,
                    "evacuation": "finished",
                    "seconds": seconds,
                    "report": report,
                }),
            );
            if report.retired {
                events.emit(
                    "disk",
                    format!("disk {disk} evacuated: the old disk is retired"),
                    serde_json::json!({ "disk": disk, "evacuation": "retired", "state": "retired" }),
                );
            } else {
                events.emit(
                    "disk",
                    format!(
                        "disk {disk} is not fully evacuated ({} ranges not recoverable now); ask again to resume",
                        report.recovery.unrecoverable.len()
                    ),
                    serde_json::json!({ "disk": disk, "evacuation": "incomplete" }),
                );
            }
            let mut value = serde_json::to_value(&report).unwrap_or_default();
            value["seconds"] = serde_json::json!(seconds);
            if !report.retired {
                return Err(format!(
                    "disk {disk} is not fully evacuated: {} ranges are not recoverable now; ask again to resume",
                    report.recovery.unrecoverable.len()
                ));
            }
            Ok(value)
        },
    );
    Ok(task)
}

/// The last evacuation of each disk that has one, as `GET /disks` shows it (reads the grid directory's small
/// record file, never a disk; an unreadable record shows as none, with a warning).
pub(crate) fn evacuation_states(admin: &Admin) -> HashMap<usize, serde_json::Value> {
    let records = match admin.store().engine().evacuations() {
        Ok(records) => records,
        Err(e) => {
            tracing::warn!("cannot read the evacuation record: {e}");
            return HashMap::new();
        }
    };
    let tasks = admin.tasks().list();
    let mut out = HashMap::new();
    for record in records {
        let task = tasks
            .iter()
            .filter(|t| t.kind == TASK_KIND && t.disk == Some(record.disk))
            .filter(|t| matches!(t.state, TaskState::Queued | TaskState::Running))
            .map(|t| {
                serde_json::json!({ "id": t.id, "done_bytes": t.done_bytes, "total_bytes": t.total_bytes })
            })
            .next();
        let state = match record.state {
            EvacuationState::Copying if task.is_some() => "copying",
            // Recorded as copying with no task running: stopped (an error or a restart) until asked again.
            EvacuationState::Copying => "stopped",
            EvacuationState::Retired => "retired",
        };
        let path = |spec: &DiskSpec| match spec {
            DiskSpec::File { path, .. } | DiskSpec::Block { path, .. } => path.clone(),
        };
        out.insert(
            record.disk,
            serde_json::json!({
                "state": state,
                "source": path(&record.source),
                "target": path(&record.target),
                "bytes_copied": record.bytes_copied,
                "bytes_reconstructed": record.bytes_reconstructed,
                "started_unix_ms": record.started_ms,
                "finished_unix_ms": record.finished_ms,
                "task": task,
            }),
        );
    }
    out
}
