//! Operator tasks (persist, scrub, rebuild, …): queued per lane, run one at a time per lane on a thread of
//! their own, with progress, announced as `task` events. Lanes keep a long rebuild from holding up a
//! persist: `maintenance` (scrub, rebuild) and `cache` (persist).
//!
//! The registry keeps every queued and running task and the last [`FINISHED_KEPT`] finished ones.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};
use serde::Serialize;

use crate::events::EventBus;

/// Finished tasks kept for `GET /tasks`.
pub const FINISHED_KEPT: usize = 100;
/// Progress events of one task at most this often.
const PROGRESS_EVERY_MS: u128 = 250;

/// Where a task runs: one task at a time per lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Lane {
    /// Scrub, rebuild: long reads and writes of whole disks.
    Maintenance,
    /// Persist: writing the cache to the grid.
    Cache,
}

/// A task's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    Queued,
    Running,
    Done,
    Failed,
}

/// What the registry knows of a task.
#[derive(Debug, Clone, Serialize)]
pub struct TaskInfo {
    pub id: u64,
    /// `persist`, `scrub`, `scrub_overdue`, `rebuild`.
    pub kind: String,
    /// What it works on, in words (`disk 7`, `everything waiting`).
    pub subject: String,
    /// The disk it works on, if one.
    pub disk: Option<usize>,
    pub lane: Lane,
    pub state: TaskState,
    /// Bytes done and to do (0/0 while unknown).
    pub done_bytes: u64,
    pub total_bytes: u64,
    pub queued_unix_ms: u64,
    pub started_unix_ms: Option<u64>,
    pub finished_unix_ms: Option<u64>,
    /// What the task reported when it finished.
    pub result: Option<serde_json::Value>,
    pub error: Option<String>,
}

type Work = Box<dyn FnOnce(&Progress) -> Result<serde_json::Value, String> + Send>;

/// Reports a running task's progress.
pub struct Progress {
    id: u64,
    tasks: Arc<TasksInner>,
    last_event: Mutex<Option<Instant>>,
}

impl Progress {
    /// `done` of `total` bytes.
    pub fn set(&self, done: u64, total: u64) {
        let info = {
            let mut all = self.tasks.all.lock();
            let Some(t) = all.iter_mut().find(|t| t.id == self.id) else {
                return;
            };
            t.done_bytes = done;
            t.total_bytes = total;
            t.clone()
        };
        let mut last = self.last_event.lock();
        let due = last.is_none_or(|at| at.elapsed().as_millis() >= PROGRESS_EVERY_MS);
        if due || done >= total {
            *last = Some(Instant::now());
            drop(last);
            self.tasks.announce(&info, "progress");
        }
    }
}

struct TasksInner {
    next_id: AtomicU64,
    all: Mutex<VecDeque<TaskInfo>>,
    queues: Mutex<[VecDeque<(u64, Work)>; 2]>,
    wake: Condvar,
    stop: std::sync::atomic::AtomicBool,
    events: Arc<EventBus>,
}

/// The task registry and its lane threads.
pub struct Tasks {
    inner: Arc<TasksInner>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

fn lane_index(lane: Lane) -> usize {
    match lane {
        Lane::Maintenance => 0,
        Lane::Cache => 1,
    }
}

impl Tasks {
    pub(crate) fn new(events: Arc<EventBus>) -> Tasks {
        let inner = Arc::new(TasksInner {
            next_id: AtomicU64::new(1),
            all: Mutex::new(VecDeque::new()),
            queues: Mutex::new([VecDeque::new(), VecDeque::new()]),
            wake: Condvar::new(),
            stop: Default::default(),
            events,
        });
        let threads = [Lane::Maintenance, Lane::Cache]
            .into_iter()
            .map(|lane| {
                let inner = inner.clone();
                std::thread::Builder::new()
                    .name(format!("permafrost-task-{}", lane_index(lane)))
                    .spawn(move || inner.run_lane(lane))
                    .expect("spawn a task thread")
            })
            .collect();
        Tasks {
            inner,
            threads: Mutex::new(threads),
        }
    }

    /// Queue `work` on `lane`; returns the task as queued.
    pub fn submit(
        &self,
        kind: &str,
        subject: String,
        disk: Option<usize>,
        lane: Lane,
        work: impl FnOnce(&Progress) -> Result<serde_json::Value, String> + Send + 'static,
    ) -> TaskInfo {
        let id = self.inner.next_id.fetch_add(1, Ordering::SeqCst);
        let info = TaskInfo {
            id,
            kind: kind.to_string(),
            subject,
            disk,
            lane,
            state: TaskState::Queued,
            done_bytes: 0,
            total_bytes: 0,
            queued_unix_ms: crate::unix_ms(),
            started_unix_ms: None,
            finished_unix_ms: None,
            result: None,
            error: None,
        };
        {
            let mut all = self.inner.all.lock();
            all.push_back(info.clone());
            trim_finished(&mut all);
        }
        self.inner.announce(&info, "queued");
        self.inner.queues.lock()[lane_index(lane)].push_back((id, Box::new(work)));
        self.inner.wake.notify_all();
        info
    }

    /// Every task kept: queued, running, then finished, oldest first within each.
    pub fn list(&self) -> Vec<TaskInfo> {
        let all = self.inner.all.lock();
        let mut list: Vec<TaskInfo> = all.iter().cloned().collect();
        list.sort_by_key(|t| {
            (
                t.state != TaskState::Running,
                t.state != TaskState::Queued,
                t.id,
            )
        });
        list
    }

    /// One task.
    pub fn get(&self, id: u64) -> Option<TaskInfo> {
        self.inner.all.lock().iter().find(|t| t.id == id).cloned()
    }

    /// Stop the lane threads after the tasks they are running (queued ones are dropped).
    pub(crate) fn stop(&self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        {
            let _q = self.inner.queues.lock();
            self.inner.wake.notify_all();
        }
        for t in std::mem::take(&mut *self.threads.lock()) {
            let _ = t.join();
        }
    }
}

fn trim_finished(all: &mut VecDeque<TaskInfo>) {
    let finished = |t: &TaskInfo| matches!(t.state, TaskState::Done | TaskState::Failed);
    while all.iter().filter(|t| finished(t)).count() > FINISHED_KEPT {
        let oldest = all.iter().position(finished).expect("counted above");
        all.remove(oldest);
    }
}

impl TasksInner {
    fn announce(&self, info: &TaskInfo, what: &str) {
        let text = match what {
            "progress" if info.total_bytes > 0 => format!(
                "{} of {}: {:.1}% ({} of {} bytes)",
                info.kind,
                info.subject,
                info.done_bytes as f64 * 100.0 / info.total_bytes as f64,
                info.done_bytes,
                info.total_bytes
            ),
            "failed" => format!(
                "{} of {} failed: {}",
                info.kind,
                info.subject,
                info.error.as_deref().unwrap_or("")
            ),
            _ => format!("{} of {} {what}", info.kind, info.subject),
        };
        self.events
            .emit("task", text, serde_json::to_value(info).unwrap_or_default());
    }

    fn update(&self, id: u64, f: impl FnOnce(&mut TaskInfo)) -> Option<TaskInfo> {
        let mut all = self.all.lock();
        let t = all.iter_mut().find(|t| t.id == id)?;
        f(t);
        let info = t.clone();
        trim_finished(&mut all);
        Some(info)
    }

    fn run_lane(self: Arc<Self>, lane: Lane) {
        loop {
            let (id, work) = {
                let mut queues = self.queues.lock();
                loop {
                    if self.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    if let Some(next) = queues[lane_index(lane)].pop_front() {
                        break next;
                    }
                    self.wake.wait(&mut queues);
                }
            };
            if let Some(info) = self.update(id, |t| {
                t.state = TaskState::Running;
                t.started_unix_ms = Some(crate::unix_ms());
            }) {
                self.announce(&info, "started");
            }
            let progress = Progress {
                id,
                tasks: self.clone(),
                last_event: Mutex::new(None),
            };
            let outcome =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(&progress)))
                    .unwrap_or_else(
                        |_| Err("the task panicked (a bug; see the server log)".into()),
                    );
            let failed = outcome.is_err();
            if let Some(info) = self.update(id, |t| {
                t.finished_unix_ms = Some(crate::unix_ms());
                match outcome {
                    Ok(result) => {
                        t.state = TaskState::Done;
                        t.result = Some(result);
                    }
                    Err(e) => {
                        t.state = TaskState::Failed;
                        t.error = Some(e);
                    }
                }
            }) {
                if failed {
                    tracing::warn!(
                        "task {} ({} of {}) failed: {}",
                        info.id,
                        info.kind,
                        info.subject,
                        info.error.as_deref().unwrap_or("")
                    );
                }
                self.announce(&info, if failed { "failed" } else { "done" });
            }
        }
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn wait_state(tasks: &Tasks, id: u64, state: TaskState) -> TaskInfo {
        let start = Instant::now();
        loop {
            let t = tasks.get(id).unwrap();
            if t.state == state {
                return t;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "task {id} stuck in {:?}",
                t.state
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn tasks_of_one_lane_run_in_order_and_report_progress_and_failures() {
        let events = Arc::new(EventBus::new());
        let tasks = Tasks::new(events.clone());
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let first = tasks.submit(
            "scrub",
            "disk 1".into(),
            Some(1),
            Lane::Maintenance,
            move |p| {
                p.set(5, 10);
                gate.recv().unwrap();
                p.set(10, 10);
                Ok(serde_json::json!({"bytes": 10}))
            },
        );
        let second = tasks.submit(
            "rebuild",
            "disk 2".into(),
            Some(2),
            Lane::Maintenance,
            |_| Err("disk 2 is not replaced".into()),
        );
        wait_state(&tasks, first.id, TaskState::Running);
        assert_eq!(tasks.get(second.id).unwrap().state, TaskState::Queued);
        // Another lane is not held up.
        let other = tasks.submit("persist", "all".into(), None, Lane::Cache, |_| {
            Ok(serde_json::json!(null))
        });
        wait_state(&tasks, other.id, TaskState::Done);
        release.send(()).unwrap();
        let done = wait_state(&tasks, first.id, TaskState::Done);
        assert_eq!((done.done_bytes, done.total_bytes), (10, 10));
        let failed = wait_state(&tasks, second.id, TaskState::Failed);
        assert_eq!(failed.error.as_deref(), Some("disk 2 is not replaced"));
        let texts: Vec<String> = events
            .since(0, 100)
            .iter()
            .map(|e| e.text.clone())
            .collect();
        assert!(
            texts.contains(&"scrub of disk 1: 50.0% (5 of 10 bytes)".to_string()),
            "{texts:?}"
        );
        assert!(texts.contains(&"rebuild of disk 2 failed: disk 2 is not replaced".to_string()));
    }
}
