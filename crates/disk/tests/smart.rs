//! SMART that never wakes a disk: readings piggyback on spin-ups the power manager made for other work, through
//! the real power manager, file-backed disks and the SMART file beside each.

use permafrost_disk::power::{
    Clock, ManualClock, PowerController, PowerManager, PowerProfile, PowerState, PoweredDisk,
    SimulatedPower, WakeKind, WakeReason,
};
use permafrost_disk::smart::{
    smart_file_beside, MemoryHistory, SmartAlert, SmartEvent, SmartMonitor, SmartSettings,
};
use permafrost_disk::{Disk, FileDisk, BLOCK_BYTES};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SPIN_UP_MS: u64 = 1_000;
const IDLE_MS: u64 = 10 * 60 * 1_000;
const HOUR_MS: u64 = 3_600 * 1_000;
const EPOCH_MS: u64 = 1_780_000_000_000;

struct Rig {
    _dir: tempfile::TempDir,
    paths: Vec<PathBuf>,
    clock: Arc<ManualClock>,
    manager: Arc<PowerManager>,
    disks: Vec<Arc<PoweredDisk>>,
    monitor: SmartMonitor,
    history: Arc<MemoryHistory>,
    events: Arc<Mutex<Vec<SmartEvent>>>,
    /// While set, the reader thread waits before it looks at a disk (to let the disk turn off first).
    hold_reader: Arc<AtomicBool>,
}

/// smartctl's `--json -A` shape with the given raw values.
fn fixture(attrs: &[(u32, u64)]) -> String {
    let table: Vec<String> = attrs
        .iter()
        .map(|(id, raw)| {
            format!(
                r#"{{"id": {id}, "name": "a{id}", "value": 100, "worst": 100, "thresh": 0,
                    "raw": {{"value": {raw}, "string": "{raw}"}}}}"#
            )
        })
        .collect();
    format!(
        r#"{{"json_format_version": [1, 0], "smartctl": {{"exit_status": 0}},
            "serial_number": "FIXTURE", "smart_status": {{"passed": true}},
            "ata_smart_attributes": {{"revision": 16, "table": [{}]}}}}"#,
        table.join(",")
    )
}

fn rig(n_disks: usize, settings: SmartSettings) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..n_disks)
        .map(|i| dir.path().join(format!("disk{i}.img")))
        .collect();
    let clock = Arc::new(ManualClock::new(0));
    let profile = PowerProfile {
        spin_up_ms: SPIN_UP_MS,
        idle_timeout_ms: IDLE_MS,
        ..PowerProfile::for_tests()
    };
    let controllers = (0..n_disks)
        .map(|_| Arc::new(SimulatedPower) as Arc<dyn PowerController>)
        .collect();
    let manager = PowerManager::with_clock(
        profile,
        n_disks,
        n_disks,
        controllers,
        clock.clone() as Arc<dyn Clock>,
    )
    .unwrap();
    let disks = paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let file = FileDisk::create(p, 16 * BLOCK_BYTES as u64).unwrap();
            std::fs::write(smart_file_beside(p), fixture(&[(4, 10), (5, 0), (197, 0)])).unwrap();
            Arc::new(PoweredDisk::new(Arc::new(file), manager.clone(), i))
        })
        .collect();
    let history = Arc::new(MemoryHistory::default());
    let hold_reader = Arc::new(AtomicBool::new(false));
    let names = {
        let (paths, hold) = (paths.clone(), hold_reader.clone());
        Box::new(move |disk: usize| {
            while hold.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            paths.get(disk).map(|p| p.display().to_string())
        })
    };
    let unix = {
        let clock = clock.clone();
        Box::new(move || EPOCH_MS + clock.now_ms())
    };
    let monitor = SmartMonitor::start(settings, &manager, names, history.clone(), unix);
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    monitor.set_listener(Box::new(move |e: &SmartEvent| {
        sink.lock().unwrap().push(e.clone())
    }));
    Rig {
        _dir: dir,
        paths,
        clock,
        manager,
        disks,
        monitor,
        history,
        events,
        hold_reader,
    }
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

impl Rig {
    /// An object read from `disk` (a read reason), moving the clock through its spin-up.
    fn read(&self, disk: usize) {
        let worker = {
            let d = self.disks[disk].clone();
            std::thread::spawn(move || {
                let _why = WakeReason::read("bucket", "object").enter();
                let mut buf = vec![0u8; BLOCK_BYTES];
                d.read_at(0, &mut buf).unwrap();
            })
        };
        while !worker.is_finished() {
            self.clock.advance_ms(100);
            std::thread::sleep(Duration::from_millis(1));
        }
        worker.join().unwrap();
    }

    /// Let `ms` of simulated time pass in steps, giving the manager's and the reader's threads time to run.
    fn idle(&self, ms: u64, step_ms: u64) {
        let mut passed = 0;
        while passed < ms {
            let step = step_ms.min(ms - passed);
            self.clock.advance_ms(step);
            passed += step;
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn reads(&self, disk: usize) -> u64 {
        self.monitor.status()[disk].reads
    }

    fn settle_reader(&self) {
        wait_for("the SMART reader to catch up", || {
            self.monitor.queued() == 0
        });
    }

    fn wait_off(&self, disk: usize) {
        wait_for("the disk to turn off", || {
            self.clock.advance_ms(1_000);
            self.manager.state(disk) == PowerState::Off
        });
    }
}

#[test]
fn a_reallocated_count_that_rose_is_an_event_and_a_warning_at_the_next_spin_up() {
    let r = rig(
        2,
        SmartSettings {
            max_age_hours: 1.0,
            ..SmartSettings::default()
        },
    );
    r.read(0);
    wait_for("the first reading", || r.reads(0) == 1);
    {
        let events = r.events.lock().unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].disk, 0);
        assert!(events[0].alerts.is_empty(), "nothing rose: {:?}", events[0]);
        assert_eq!(events[0].reading.attributes[&5], 0);
    }
    assert!(!r.monitor.status()[0].warning);

    // The drive reallocates 8 sectors while it sleeps: nothing reads it until the next spin-up.
    r.wait_off(0);
    std::fs::write(
        smart_file_beside(&r.paths[0]),
        fixture(&[(4, 11), (5, 8), (197, 0)]),
    )
    .unwrap();
    r.idle(2 * HOUR_MS, 60_000);
    assert_eq!(r.manager.state(0), PowerState::Off, "SMART woke the disk");
    assert_eq!(r.reads(0), 1, "read while off");
    assert_eq!(r.manager.totals().spin_ups, 1);

    r.read(0);
    wait_for("the second reading", || r.reads(0) == 2);
    let events = r.events.lock().unwrap().clone();
    assert_eq!(events.len(), 2);
    assert_eq!(
        events[1].alerts,
        vec![SmartAlert::Rose {
            id: 5,
            from: 0,
            to: 8
        }]
    );
    let status = &r.monitor.status()[0];
    assert!(
        status.warning,
        "the dashboard's mark and the warning metric"
    );
    assert_eq!(status.alerts, 1);
    assert_eq!(status.last.as_ref().unwrap().attributes[&5], 8);
    assert_eq!(status.last_alerts, events[1].alerts);
    // Both readings are in the history; disk 1 never spun up and was never read.
    let history = r.history.all();
    assert_eq!(history.len(), 2);
    assert!(history.iter().all(|(d, _)| *d == 0));
    assert_eq!(r.reads(1), 0);
    assert_eq!(
        r.manager.totals().spin_ups,
        2,
        "one spin-up per read, none for SMART"
    );
}

#[test]
fn a_day_of_idle_with_every_reading_overdue_wakes_nothing_and_reads_at_the_spin_up_work_made() {
    let r = rig(
        4,
        SmartSettings {
            max_age_hours: 1.0,
            ..SmartSettings::default()
        },
    );
    // 24 simulated hours, every disk overdue the whole time (never read, max age 1 h), no work.
    r.idle(24 * HOUR_MS, 30_000);
    r.settle_reader();
    assert_eq!(r.manager.totals().spin_ups, 0, "SMART woke a disk");
    for disk in 0..4 {
        assert_eq!(r.manager.state(disk), PowerState::Off);
        assert_eq!(r.reads(disk), 0);
        assert!(r.manager.wake_counts(disk).is_empty());
    }
    // Work spins disk 2 up: its overdue reading piggybacks on that spin-up, and no other disk is touched.
    r.read(2);
    wait_for("the reading at the spin-up", || r.reads(2) == 1);
    r.idle(24 * HOUR_MS, 30_000);
    r.settle_reader();
    assert_eq!(r.manager.totals().spin_ups, 1);
    assert_eq!(r.manager.wake_counts(2), vec![(WakeKind::Read, 1)]);
    for disk in [0, 1, 3] {
        assert_eq!(r.manager.stats(disk).spin_ups, 0);
        assert_eq!(r.reads(disk), 0);
    }
    assert_eq!(r.reads(2), 1);
}

#[test]
fn a_disk_read_recently_is_not_read_again_and_one_off_again_is_skipped_not_woken() {
    let r = rig(
        1,
        SmartSettings {
            max_age_hours: 24.0,
            ..SmartSettings::default()
        },
    );
    r.read(0);
    wait_for("the first reading", || r.reads(0) == 1);
    r.wait_off(0);
    r.idle(HOUR_MS, 60_000);
    r.read(0); // one hour later: not due
    r.settle_reader();
    assert_eq!(r.reads(0), 1);
    r.wait_off(0);
    r.idle(24 * HOUR_MS, 60_000);

    // Due now; the disk spins up for work, but turns off before the reader gets to it.
    r.hold_reader.store(true, Ordering::SeqCst);
    r.read(0);
    r.wait_off(0);
    let ups = r.manager.totals().spin_ups;
    r.hold_reader.store(false, Ordering::SeqCst);
    r.settle_reader();
    wait_for("the skip to be counted", || {
        r.monitor.status()[0].skipped_off == 1
    });
    assert_eq!(r.reads(0), 1);
    assert_eq!(r.manager.totals().spin_ups, ups, "the reader woke the disk");
    assert_eq!(r.manager.state(0), PowerState::Off);
    // The next spin-up reads it.
    r.read(0);
    wait_for("the reading at the next spin-up", || r.reads(0) == 2);
}

#[test]
fn a_file_disk_without_a_smart_file_has_no_reading_and_says_why() {
    let r = rig(1, SmartSettings::default());
    std::fs::remove_file(smart_file_beside(&r.paths[0])).unwrap();
    r.read(0);
    wait_for("the attempt", || r.monitor.status()[0].last_error.is_some());
    let status = &r.monitor.status()[0];
    assert_eq!(status.reads, 0);
    assert_eq!(status.errors, 0, "no SMART file is not an error");
    assert!(status
        .last_error
        .as_ref()
        .unwrap()
        .contains("no SMART file"));
    assert!(r.events.lock().unwrap().is_empty());
}
