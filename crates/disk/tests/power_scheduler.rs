//! The power manager runs the read scheduler (`permafrost_policy::Scheduler`): who takes a full budget next,
//! the maximum wait, `fifo` as before, persistence yielding to reads, the wear budget and spin-ups per day.
//! Every test runs on a manual clock: time moves only when the test says so.

use permafrost_disk::power::{
    ActivityGuard, Clock, ManualClock, PowerController, PowerManager, PowerProfile, PowerState,
    SimulatedPower, WakeContext, WakeReason,
};
use permafrost_policy::{IdleConfig, SchedulerConfig, SchedulerStrategy};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SPIN_UP_MS: u64 = 1_000;
const DAY_MS: u64 = 24 * 3_600 * 1_000;

fn manager(
    n_disks: usize,
    budget: usize,
    strategy: Option<SchedulerStrategy>,
) -> (Arc<PowerManager>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(0));
    let profile = PowerProfile {
        spin_up_ms: SPIN_UP_MS,
        idle_timeout_ms: 3_600_000,
        ..PowerProfile::for_tests()
    };
    let controllers = (0..n_disks)
        .map(|_| Arc::new(SimulatedPower) as Arc<dyn PowerController>)
        .collect();
    let m = PowerManager::with_clock(
        profile,
        n_disks,
        budget,
        controllers,
        clock.clone() as Arc<dyn Clock>,
    )
    .unwrap();
    if let Some(strategy) = strategy {
        m.set_scheduler(SchedulerConfig {
            strategy,
            max_wait_ms: 5_000,
            persist_yield_max_ms: 5_000,
        });
    }
    (m, clock)
}

/// Acquire `disk` through its spin-up (moving the clock), for the current thread's reason.
fn acquire_now(m: &Arc<PowerManager>, clock: &ManualClock, disk: usize) -> ActivityGuard {
    let worker = {
        let m = m.clone();
        let context = WakeContext::current();
        std::thread::spawn(move || {
            let _reason = WakeContext::enter_opt(context);
            m.acquire(disk)
        })
    };
    while !worker.is_finished() {
        clock.advance_ms(100);
        std::thread::sleep(Duration::from_millis(1));
    }
    worker.join().unwrap()
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A reader thread: acquires `disk` as a read, notes the order in which reads got their disk, holds it until
/// `release` says so.
fn read(
    m: &Arc<PowerManager>,
    disk: usize,
    order: &Arc<Mutex<Vec<usize>>>,
    release: &Arc<Mutex<bool>>,
) -> std::thread::JoinHandle<()> {
    let (m, order, release) = (m.clone(), order.clone(), release.clone());
    std::thread::spawn(move || {
        let _reason = WakeReason::read("b", &format!("disk{disk}")).enter();
        let _on = m.acquire(disk);
        order.lock().unwrap().push(disk);
        while !*release.lock().unwrap() {
            std::thread::sleep(Duration::from_millis(1));
        }
    })
}

/// Budget 1, held on disk 0; a read of disk 1 arrives, then two of disk 2; disk 0 is let go at `release_at_ms`.
/// Returns the order in which the disks spun up for the reads.
fn contention(strategy: Option<SchedulerStrategy>, release_at_ms: u64) -> Vec<usize> {
    let (m, clock) = manager(4, 1, strategy);
    let busy = acquire_now(&m, &clock, 0);
    let order = Arc::new(Mutex::new(Vec::new()));
    let release = Arc::new(Mutex::new(false));
    let mut threads = Vec::new();
    for (i, disk) in [1, 2, 2].into_iter().enumerate() {
        clock.advance_ms(10);
        threads.push(read(&m, disk, &order, &release));
        wait_for("the read to wait", || m.budget_waiting() == i + 1);
        assert_eq!(m.reads_waiting(disk), if disk == 2 { i } else { 1 });
    }
    drop(busy);
    clock.advance_ms(release_at_ms);
    // The first disk set granted spins up; its reads return once it is ready.
    wait_for("a spin-up", || {
        m.state(1) != PowerState::Off || m.state(2) != PowerState::Off
    });
    clock.advance_ms(SPIN_UP_MS);
    let first_disk = if m.state(1) != PowerState::Off { 1 } else { 2 };
    let first_count = if first_disk == 2 { 2 } else { 1 };
    wait_for("the first reads", || {
        order.lock().unwrap().len() == first_count
    });
    *release.lock().unwrap() = true;
    // The rest spins up after the first set's disk fell idle and was turned off to make room.
    // (A disk whose work just paused is kept a moment before it is turned off to make room.)
    wait_for("the first reads to end", || {
        m.reads_waiting(first_disk) == 0
    });
    clock.advance_ms(300);
    wait_for("the last spin-up", || m.totals().spin_ups == 3);
    while !threads.iter().all(|t| t.is_finished()) {
        clock.advance_ms(100);
        std::thread::sleep(Duration::from_millis(1));
    }
    for t in threads {
        t.join().unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(
        m.spin_ups_last_day(2),
        1,
        "one spin-up served both reads of disk 2"
    );
    assert_eq!(m.max_spinning_seen(), 1);
    order
}

#[test]
fn under_a_full_budget_the_disk_with_the_most_waiting_reads_spins_next() {
    assert_eq!(
        contention(Some(SchedulerStrategy::Deadline), 1_000),
        vec![2, 2, 1]
    );
}

#[test]
fn a_read_that_waited_max_wait_goes_first() {
    assert_eq!(
        contention(Some(SchedulerStrategy::Deadline), 5_000),
        vec![1, 2, 2],
        "the read of disk 1 waited 5 s (max_wait_ms)"
    );
}

#[test]
fn fifo_serves_the_budget_in_arrival_order_as_before() {
    assert_eq!(
        contention(None, 1_000),
        vec![1, 2, 2],
        "a bare manager is fifo"
    );
    assert_eq!(
        contention(Some(SchedulerStrategy::Fifo), 1_000),
        vec![1, 2, 2]
    );
}

#[test]
fn no_read_waits_longer_than_max_wait_plus_what_is_under_way() {
    // Budget 1; a stream of reads of disk 2 would keep it the most wanted, but the read of disk 1 goes once it
    // has waited max_wait_ms (5 s): its disk is on within max_wait + one spin-up.
    let (m, clock) = manager(4, 1, Some(SchedulerStrategy::Deadline));
    let busy = acquire_now(&m, &clock, 0);
    let order = Arc::new(Mutex::new(Vec::new()));
    let release = Arc::new(Mutex::new(false));
    let lonely = read(&m, 1, &order, &release);
    wait_for("the read of disk 1 to wait", || m.budget_waiting() == 1);
    let arrived_ms = clock.now_ms();
    let mut others = Vec::new();
    for _ in 0..3 {
        others.push(read(&m, 2, &order, &release));
    }
    wait_for("the reads of disk 2 to wait", || m.budget_waiting() == 4);
    drop(busy);
    clock.advance_ms(300);
    wait_for("disk 2 spins", || m.state(2) != PowerState::Off);
    clock.advance_ms(SPIN_UP_MS);
    wait_for("the reads of disk 2", || order.lock().unwrap().len() == 3);
    // Disk 2 stays busy with new reads as long as they come, while the read of disk 1 waits.
    let mut more = Vec::new();
    let hold = Arc::new(Mutex::new(false));
    while clock.now_ms() + 500 - arrived_ms < 5_000 {
        clock.advance_ms(500);
        more.push(read(&m, 2, &order, &hold));
        wait_for("a read of spinning disk 2", || {
            order.lock().unwrap().len() == 3 + more.len()
        });
    }
    assert_eq!(m.state(1), PowerState::Off);
    // Now the read of disk 1 has waited 5 s: reads of disk 2 that start now wait, and disk 2 drains.
    clock.advance_ms(500);
    let late = read(&m, 2, &order, &hold);
    wait_for("the late read to wait", || {
        m.reads_waiting(2) > 3 + more.len()
    });
    *release.lock().unwrap() = true;
    *hold.lock().unwrap() = true;
    std::thread::sleep(Duration::from_millis(20));
    clock.advance_ms(300); // disk 2 is kept a moment after its last read
    wait_for("disk 1 spins", || m.state(1) != PowerState::Off);
    assert!(clock.now_ms() - arrived_ms <= 5_000 + 500 + 300);
    clock.advance_ms(SPIN_UP_MS);
    lonely.join().unwrap();
    for t in others.into_iter().chain(more) {
        t.join().unwrap();
    }
    while !late.is_finished() {
        clock.advance_ms(100);
        std::thread::sleep(Duration::from_millis(1));
    }
    late.join().unwrap();
    let order = order.lock().unwrap().clone();
    let one = order.iter().position(|&d| d == 1).unwrap();
    assert_eq!(
        one,
        order.len() - 2,
        "disk 1 before the late read of disk 2: {order:?}"
    );
}

#[test]
fn a_persist_pauses_between_chunks_while_its_disk_is_read_within_its_bound() {
    let (m, clock) = manager(4, 4, Some(SchedulerStrategy::Deadline));
    let mut persist = m.yield_to_reads(&[0, 1]);
    assert_eq!(persist.between_chunks(), 0, "nobody reads: no pause");
    let reading = {
        let _reason = WakeReason::read("b", "k").enter();
        acquire_now(&m, &clock, 0)
    };
    assert!(m.reads_want(&[0]));
    assert!(!m.reads_want(&[2]));
    let worker = {
        let m = m.clone();
        std::thread::spawn(move || {
            let mut persist = m.yield_to_reads(&[0, 1]);
            let first = persist.between_chunks();
            (first, persist)
        })
    };
    std::thread::sleep(Duration::from_millis(20));
    clock.advance_ms(1_000);
    drop(reading);
    std::thread::sleep(Duration::from_millis(20));
    clock.advance_ms(300); // past the moment a read is still counted after it ended
    let (paused, mut persist) = worker.join().unwrap();
    assert!((1_000..5_000).contains(&paused), "paused {paused} ms");
    assert_eq!(persist.pauses(), 1);

    // A read storm: the persist pauses at most persist_yield_max_ms (5 s) more than the chunk time it got.
    let _reason = WakeReason::read("b", "storm").enter();
    let storm = m.acquire(0); // on: no spin-up
    let worker = std::thread::spawn(move || {
        let long = persist.between_chunks();
        let at_once = persist.between_chunks();
        (long, at_once)
    });
    while !worker.is_finished() {
        clock.advance_ms(100);
        std::thread::sleep(Duration::from_millis(2));
    }
    let (long, at_once) = worker.join().unwrap();
    assert!((5_000 - paused..=5_000).contains(&long), "paused {long} ms");
    assert!(
        at_once <= 200,
        "its yield is spent until it writes: paused {at_once} ms"
    );
    drop(storm);

    let (fifo, _clock) = manager(2, 2, Some(SchedulerStrategy::Fifo));
    let _reason = WakeReason::read("b", "k").enter();
    let _on = acquire_now(&fifo, &_clock, 0);
    assert!(!fifo.reads_want(&[0]), "fifo: a persist never yields");
}

#[test]
fn a_disk_that_spent_its_wear_budget_stays_up() {
    let (m, clock) = manager(2, 2, Some(SchedulerStrategy::Deadline));
    let profile_timeout_ms = m.profile().idle_timeout_ms;
    m.set_idle(Some(IdleConfig {
        adaptive: false,
        enforce_wear_budget: true,
        spinups_per_day_max: Some(2),
        ..IdleConfig::default()
    }));
    assert_eq!(m.spinups_per_day_max(), Some(2));
    drop(acquire_now(&m, &clock, 0));
    assert_eq!(m.idle_timeout_ms(0), profile_timeout_ms);
    clock.advance_ms(profile_timeout_ms + 1);
    wait_for("disk 0 off", || m.state(0) == PowerState::Off);
    drop(acquire_now(&m, &clock, 0));
    assert_eq!(m.spin_ups_last_day(0), 2);
    assert!(m.idle_timeout_ms(0) > profile_timeout_ms);
    clock.advance_ms(profile_timeout_ms + 1);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        m.state(0),
        PowerState::Idle,
        "two spin-ups today: it stays up"
    );
    clock.advance_ms(DAY_MS);
    wait_for("disk 0 off after the day", || m.state(0) == PowerState::Off);
    assert_eq!(m.spin_ups_last_day(0), 0);
    assert_eq!(m.spin_ups_last_day(1), 0);
}
