//! The monitor: a thread that samples every disk's state from memory (never from a disk) every few hundred
//! milliseconds and turns changes into events.
//!
//! A disk's *shown* state is `failed` if the engine marked it failed, else its power state, except that a
//! disk with I/O since the previous sample is shown `active` (a read of a few milliseconds between two samples
//! is still seen). Changes become `disk` events naming the reason of the last spin-up; every spin-up becomes
//! a `wake` event; a change of a disk's defect bytes (rebuild or recovery progress) a `rebuild` event. The
//! store's restore events (`s3:ObjectRestore:Post`, `s3:ObjectRestore:Completed`) become `restore` events
//! shaped like S3's event records.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use permafrost_disk::power::{PowerState, WakeRecord};
use permafrost_store::Store;
use serde::Serialize;

use crate::events::EventBus;

/// A disk as the monitor last saw it.
#[derive(Debug, Clone, Serialize)]
pub struct DiskView {
    pub disk: usize,
    /// `off`, `spinning_up`, `idle`, `active` or `failed`.
    pub shown_state: &'static str,
    /// Since when it is shown in that state (ms since the Unix epoch).
    pub since_unix_ms: u64,
    pub defect_bytes: u64,
}

/// The name of a power state.
pub fn state_name(state: PowerState) -> &'static str {
    match state {
        PowerState::Off => "off",
        PowerState::SpinningUp => "spinning_up",
        PowerState::Idle => "idle",
        PowerState::Active => "active",
    }
}

/// A restore event as JSON: S3's event record fields (`eventName`, `s3.bucket.name`, `s3.object.key`,
/// `s3.object.versionId`, `glacierEventData.restoreEventData`) and the tier.
pub fn restore_event_json(event: &permafrost_store::RestoreEvent) -> serde_json::Value {
    let iso = |ms: u64| Some(iso_utc(ms));
    serde_json::json!({
        "eventName": event.name,
        "eventTime": iso(event.at_ms),
        "s3": {
            "bucket": { "name": event.bucket },
            "object": { "key": event.key, "versionId": event.version_id },
        },
        "glacierEventData": {
            "restoreEventData": {
                "lifecycleRestorationExpiryTime": event.expiry_ms.and_then(iso),
                "lifecycleRestoreStorageClass": "GLACIER",
            },
        },
        "tier": event.tier.as_str(),
        "seq": event.seq,
    })
}

/// `ms` since the epoch as S3's event times write it: `2026-12-09T00:00:00.000Z`.
fn iso_utc(ms: u64) -> String {
    permafrost_catalog::iso8601_utc(ms, true)
}

/// The wake record as JSON for events and the API.
pub fn wake_json(wake: &WakeRecord) -> serde_json::Value {
    serde_json::json!({
        "seq": wake.seq,
        "disk": wake.disk,
        "kind": wake.reason.kind.as_str(),
        "subject": wake.reason.subject.as_deref(),
        "reason": wake.reason.describe(),
        "at_unix_ms": wake.at_unix_ms,
        "spin_up_ms": wake.spin_up_ms,
        "ready": wake.ready,
        "controller_failed": wake.controller_failed,
    })
}

struct Shared {
    store: Arc<Store>,
    events: Arc<EventBus>,
    sample_ms: u64,
    views: Mutex<Vec<DiskView>>,
    stop: AtomicBool,
    stop_lock: Mutex<()>,
    wake: Condvar,
}

/// The sampling thread and the latest view of every disk.
pub struct Monitor {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Monitor {
    pub(crate) fn start(store: Arc<Store>, events: Arc<EventBus>, sample_ms: u64) -> Monitor {
        let shared = Arc::new(Shared {
            store,
            events,
            sample_ms: sample_ms.max(10),
            views: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            stop_lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("permafrost-monitor".into())
            .spawn(move || worker.run())
            .expect("spawn the monitor thread");
        Monitor {
            shared,
            thread: Mutex::new(Some(thread)),
        }
    }

    /// Every disk as last sampled (empty until the first sample).
    pub fn views(&self) -> Vec<DiskView> {
        self.shared.views.lock().clone()
    }

    pub(crate) fn stop(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let _g = self.shared.stop_lock.lock();
            self.shared.wake.notify_all();
        }
        if let Some(t) = self.thread.lock().take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

impl Shared {
    fn run(&self) {
        let engine = self.store.engine();
        let power = engine.power().clone();
        let mut io_before: Vec<(u64, u64)> = Vec::new();
        // Spin-ups up to this number are announced; `announced` holds those above it already announced.
        let mut wake_seq = power.last_wake_seq();
        let mut announced = std::collections::BTreeSet::new();
        // Spin-ups up to this number were seen by the state sampling.
        let mut spin_up_seq = wake_seq;
        let mut restore_seq = 0u64;
        let mut first = true;
        loop {
            // The grid may have grown since the previous sample (`POST /disks`).
            let n = engine.geometry().disks();
            io_before.resize(n, (0, 0));
            let snapshot = power.snapshot();
            let io = engine.io_stats();
            let now = crate::unix_ms();
            // Disks that spun up since the previous sample (also those whose spin-up is still under way).
            let woke: std::collections::BTreeSet<usize> = power
                .wakes_since(spin_up_seq)
                .iter()
                .map(|w| {
                    spin_up_seq = spin_up_seq.max(w.seq);
                    w.disk
                })
                .collect();
            let mut views = self.views.lock().clone();
            let mut changes = Vec::new();
            for disk in 0..n {
                let failed = engine.is_failed(disk);
                let counters = io.get(disk).map_or((0, 0), |s| {
                    (s.physical_read_bytes, s.physical_written_bytes)
                });
                let had_io = !first && counters != io_before[disk];
                io_before[disk] = counters;
                let (state, _) = snapshot[disk];
                // I/O since the previous sample shows `active` even if the disk is idle or off again by now.
                let shown = if failed {
                    "failed"
                } else if had_io && state != PowerState::SpinningUp {
                    "active"
                } else {
                    state_name(state)
                };
                let defect_bytes = engine.defect_bytes(disk);
                match views.get_mut(disk) {
                    None => views.push(DiskView {
                        disk,
                        shown_state: shown,
                        since_unix_ms: now,
                        defect_bytes,
                    }),
                    Some(view) => {
                        // A spin-up between two samples is shown, even if it was over before the second.
                        if woke.contains(&disk)
                            && view.shown_state == "off"
                            && shown != "spinning_up"
                            && shown != "failed"
                        {
                            changes.push((disk, "off", "spinning_up"));
                            view.shown_state = "spinning_up";
                        }
                        if view.shown_state != shown {
                            changes.push((disk, view.shown_state, shown));
                            view.shown_state = shown;
                            view.since_unix_ms = now;
                        }
                        if view.defect_bytes != defect_bytes {
                            self.events.emit(
                                "rebuild",
                                format!("disk {disk}: {defect_bytes} bytes left to recover"),
                                serde_json::json!({
                                    "disk": disk,
                                    "remaining_bytes": defect_bytes,
                                    "previous_bytes": view.defect_bytes,
                                }),
                            );
                            view.defect_bytes = defect_bytes;
                        }
                    }
                }
            }
            *self.views.lock() = views;
            // Spin-ups first: a state change then names a reason the client has already seen.
            for wake in power.wakes_since(wake_seq) {
                if !wake.ready {
                    continue; // announced once its spin-up completed
                }
                if announced.insert(wake.seq) {
                    self.events.emit(
                        "wake",
                        format!(
                            "disk {} woke up for {} ({} ms to spin up)",
                            wake.disk,
                            wake.reason.describe(),
                            wake.spin_up_ms
                        ),
                        wake_json(&wake),
                    );
                }
            }
            while announced.remove(&(wake_seq + 1)) {
                wake_seq += 1;
            }
            for (disk, from, to) in changes {
                let wake = power.last_wake(disk);
                let reason = match (to, &wake) {
                    ("spinning_up", Some(w)) => Some(w.reason.describe()),
                    ("idle" | "active", Some(w)) if from == "off" || from == "spinning_up" => {
                        Some(w.reason.describe())
                    }
                    ("off", _) => Some("idle timeout".to_string()),
                    _ => None,
                };
                let text = match &reason {
                    Some(r) => format!("disk {disk}: {from} -> {to} ({r})"),
                    None => format!("disk {disk}: {from} -> {to}"),
                };
                self.events.emit(
                    "disk",
                    text,
                    serde_json::json!({
                        "disk": disk,
                        "from": from,
                        "state": to,
                        "reason": reason,
                        "last_wake": wake.as_ref().map(wake_json),
                    }),
                );
            }
            for event in self.store.restore_events_since(restore_seq) {
                restore_seq = event.seq;
                let text = format!(
                    "{} {}/{} ({})",
                    event.name, event.bucket, event.key, event.tier
                );
                self.events
                    .emit("restore", text, restore_event_json(&event));
            }
            first = false;
            let mut g = self.stop_lock.lock();
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            self.wake
                .wait_for(&mut g, Duration::from_millis(self.sample_ms));
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn event_times_are_iso_8601_utc() {
        assert_eq!(super::iso_utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            super::iso_utc(1_796_774_400_000),
            "2026-12-09T00:00:00.000Z"
        );
        assert_eq!(super::iso_utc(951_827_696_789), "2000-02-29T12:34:56.789Z");
    }
}
