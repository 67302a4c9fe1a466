//! PowerManager and PoweredDisk: spin-up on demand, idle spin-down, the budget, FIFO queueing.

use permafrost_disk::power::{
    ManualClock, PowerController, PowerError, PowerManager, PowerProfile, PowerState, PoweredDisk,
};
use permafrost_disk::{Disk, MemDisk, BLOCK_BYTES};
use rand::{Rng, SeedableRng};
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the "drives" physically see, shared by all controllers of a test.
#[derive(Default)]
struct Physical {
    powered_now: AtomicUsize,
    powered_max: AtomicUsize,
}

/// A controller that counts calls and tracks how many drives are physically on.
struct Counting {
    physical: Arc<Physical>,
    ups: AtomicU64,
    downs: AtomicU64,
}

impl PowerController for Counting {
    fn spin_up(&self) -> io::Result<()> {
        self.ups.fetch_add(1, Ordering::SeqCst);
        let now = self.physical.powered_now.fetch_add(1, Ordering::SeqCst) + 1;
        self.physical.powered_max.fetch_max(now, Ordering::SeqCst);
        Ok(())
    }
    fn spin_down(&self) -> io::Result<()> {
        self.downs.fetch_add(1, Ordering::SeqCst);
        self.physical.powered_now.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }
    fn describe(&self) -> String {
        "counting test controller".to_string()
    }
}

struct Rig {
    manager: Arc<PowerManager>,
    disks: Vec<Arc<PoweredDisk>>,
    controllers: Vec<Arc<Counting>>,
    physical: Arc<Physical>,
}

fn rig(profile: PowerProfile, n_disks: usize, budget: usize) -> Rig {
    let physical = Arc::new(Physical::default());
    let controllers: Vec<Arc<Counting>> = (0..n_disks)
        .map(|_| {
            Arc::new(Counting {
                physical: physical.clone(),
                ups: AtomicU64::new(0),
                downs: AtomicU64::new(0),
            })
        })
        .collect();
    let dyn_controllers = controllers
        .iter()
        .map(|c| c.clone() as Arc<dyn PowerController>)
        .collect();
    let manager = PowerManager::new(profile, n_disks, budget, dyn_controllers).unwrap();
    let disks = (0..n_disks)
        .map(|i| {
            let inner = Arc::new(MemDisk::new(format!("mem{i}"), 16 * BLOCK_BYTES as u64));
            Arc::new(PoweredDisk::new(inner, manager.clone(), i))
        })
        .collect();
    Rig {
        manager,
        disks,
        controllers,
        physical,
    }
}

fn fast(spin_up_ms: u64, idle_timeout_ms: u64) -> PowerProfile {
    PowerProfile {
        spin_up_ms,
        idle_timeout_ms,
        ..PowerProfile::for_tests()
    }
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn reading_one_disk_spins_up_exactly_that_disk_after_the_spin_up_delay() {
    let r = rig(fast(40, 10_000), 4, 4);
    let start = Instant::now();
    let mut buf = vec![0u8; BLOCK_BYTES];
    r.disks[2].read_at(0, &mut buf).unwrap();
    assert!(
        start.elapsed() >= Duration::from_millis(40),
        "the read waited for the spin-up"
    );
    assert_eq!(r.manager.totals().spin_ups, 1);
    assert_eq!(r.manager.stats(2).spin_ups, 1);
    assert_eq!(r.controllers[2].ups.load(Ordering::SeqCst), 1);
    for disk in [0, 1, 3] {
        assert_eq!(r.manager.state(disk), PowerState::Off);
        assert_eq!(r.controllers[disk].ups.load(Ordering::SeqCst), 0);
    }
    assert_eq!(r.manager.state(2), PowerState::Idle);
    // A second read of the spinning disk neither waits nor spins up again.
    let start = Instant::now();
    r.disks[2].read_at(0, &mut buf).unwrap();
    assert!(start.elapsed() < Duration::from_millis(40));
    assert_eq!(r.manager.totals().spin_ups, 1);
    assert_eq!(r.manager.spinning_now(), 1);
}

#[test]
fn disks_go_off_after_the_idle_timeout_and_not_before() {
    let r = rig(fast(1, 150), 2, 2);
    let guard = r.manager.acquire(0);
    assert_eq!(r.manager.state(0), PowerState::Active);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        r.manager.state(0),
        PowerState::Active,
        "a held disk never times out"
    );
    drop(guard);
    let released = Instant::now();
    assert_eq!(r.manager.state(0), PowerState::Idle);
    wait_for("disk 0 to turn off", Duration::from_secs(2), || {
        r.controllers[0].downs.load(Ordering::SeqCst) == 1
    });
    assert!(
        released.elapsed() >= Duration::from_millis(150),
        "turned off before the idle timeout"
    );
    assert_eq!(r.manager.state(0), PowerState::Off);
    assert_eq!(r.manager.spinning_now(), 0);
    let stats = r.manager.stats(0);
    assert!(stats.ms_in_state[PowerState::Idle.index()] >= 150);
    assert!(
        stats.ms_in_state[PowerState::Idle.index()] <= 151,
        "idle time is accrued up to the timeout exactly"
    );
}

#[test]
fn budget_is_never_exceeded_by_16_threads_on_8_disks() {
    let budget = 3;
    let r = rig(fast(2, 20), 8, budget);
    let violations = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for thread in 0..16u64 {
            let (r, violations) = (&r, &violations);
            scope.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(thread);
                let mut buf = vec![0u8; BLOCK_BYTES];
                for _ in 0..30 {
                    if rng.gen_bool(0.3) {
                        // A multi-disk operation, like a write with its parity disks.
                        let set: Vec<usize> = (0..rng.gen_range(2..=budget))
                            .map(|_| rng.gen_range(0..8))
                            .collect();
                        let guards = r.manager.acquire_many(&set).unwrap();
                        for &disk in &set {
                            r.disks[disk].write_at(0, &buf).unwrap();
                        }
                        if r.manager.spinning_now() > budget {
                            violations.fetch_add(1, Ordering::SeqCst);
                        }
                        drop(guards);
                    } else {
                        let disk = rng.gen_range(0..8);
                        r.disks[disk].read_at(0, &mut buf).unwrap();
                    }
                    if r.manager.spinning_now() > budget {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
    });
    assert_eq!(violations.load(Ordering::SeqCst), 0);
    let seen = r.manager.max_spinning_seen();
    assert!(seen <= budget, "max_spinning_seen {seen} > budget {budget}");
    assert_eq!(seen, budget, "16 threads on 8 disks must fill the budget");
    let physical_max = r.physical.powered_max.load(Ordering::SeqCst);
    assert!(
        physical_max <= budget,
        "{physical_max} drives physically on at once"
    );
    // Every spin-up the model counted reached a controller.
    let ups: u64 = r
        .controllers
        .iter()
        .map(|c| c.ups.load(Ordering::SeqCst))
        .sum();
    assert_eq!(ups, r.manager.totals().spin_ups);
    assert!(
        ups > 8,
        "the budget forced disks off and on again ({ups} spin-ups)"
    );
}

#[test]
fn spin_ups_wait_in_fifo_order_for_the_budget() {
    let r = Arc::new(rig(fast(10, 10_000), 3, 1));
    let order = Arc::new(Mutex::new(Vec::new()));
    let holder = r.manager.acquire(0);
    let mut waiters = Vec::new();
    for disk in [1, 2] {
        let (r, order) = (r.clone(), order.clone());
        waiters.push(std::thread::spawn(move || {
            let guard = r.manager.acquire(disk);
            order.lock().unwrap().push(disk);
            assert_eq!(
                r.manager.spinning_now(),
                1,
                "budget 1: only this disk spins"
            );
            std::thread::sleep(Duration::from_millis(20));
            drop(guard);
        }));
        std::thread::sleep(Duration::from_millis(30)); // let it join the queue
    }
    assert!(
        order.lock().unwrap().is_empty(),
        "both wait while disk 0 is held"
    );
    drop(holder); // disk 0 turns idle; the head of the queue turns it off to make room
    for waiter in waiters {
        waiter.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![1, 2]);
    assert_eq!(r.manager.max_spinning_seen(), 1);
    assert_eq!(r.physical.powered_max.load(Ordering::SeqCst), 1);
    // The idle timeout is 10 s: disks 0 and 1 were turned off early to make room.
    assert_eq!(r.controllers[0].downs.load(Ordering::SeqCst), 1);
    assert_eq!(r.controllers[1].downs.load(Ordering::SeqCst), 1);
}

#[test]
fn acquire_many_rejects_sets_larger_than_the_budget_instead_of_hanging() {
    let r = rig(fast(1, 1_000), 4, 2);
    match r.manager.acquire_many(&[0, 1, 2]) {
        Err(PowerError::SetExceedsBudget {
            requested: 3,
            budget: 2,
        }) => {}
        other => panic!("expected SetExceedsBudget, got {other:?}"),
    }
    assert!(matches!(
        r.manager.acquire_many(&[4]),
        Err(PowerError::NoSuchDisk {
            disk: 4,
            n_disks: 4
        })
    ));
    // Duplicates count once against the budget and get one guard each.
    let guards = r.manager.acquire_many(&[1, 1, 3]).unwrap();
    assert_eq!(
        guards.iter().map(|g| g.disk()).collect::<Vec<_>>(),
        vec![1, 1, 3]
    );
    assert_eq!(r.manager.spinning_now(), 2);
    assert_eq!(r.manager.totals().spin_ups, 2);
}

#[test]
fn acquire_many_spins_up_the_whole_set_together() {
    let r = rig(fast(50, 1_000), 4, 4);
    let start = Instant::now();
    let guards = r.manager.acquire_many(&[0, 1, 2]).unwrap();
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(50) && elapsed < Duration::from_millis(140),
        "{elapsed:?}: one delay, not three"
    );
    for disk in 0..3 {
        assert_eq!(r.manager.state(disk), PowerState::Active);
    }
    assert_eq!(r.manager.state(3), PowerState::Off);
    drop(guards);
}

#[test]
fn lowering_the_budget_makes_new_spin_ups_wait() {
    let r = rig(fast(1, 60_000), 3, 3);
    let a = r.manager.acquire(0);
    let b = r.manager.acquire(1);
    assert!(matches!(
        r.manager.set_budget(0),
        Err(PowerError::InvalidBudget(0))
    ));
    r.manager.set_budget(2).unwrap();
    assert_eq!(r.manager.budget(), 2);
    assert!(matches!(
        r.manager.acquire_many(&[0, 1, 2]),
        Err(PowerError::SetExceedsBudget { .. })
    ));
    let manager = r.manager.clone();
    let waiter = std::thread::spawn(move || drop(manager.acquire(2)));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        r.manager.state(2),
        PowerState::Off,
        "must wait: two disks are held"
    );
    drop(a);
    waiter.join().unwrap();
    drop(b);
    assert_eq!(r.manager.max_spinning_seen(), 2);
}

#[test]
fn spin_up_hook_runs_once_per_spin_up_and_may_do_io_on_the_disk() {
    let r = rig(fast(5, 30), 2, 2);
    let calls = Arc::new(AtomicUsize::new(0));
    let (hook_calls, hook_disk) = (calls.clone(), Arc::downgrade(&r.disks[1]));
    r.manager.set_on_spin_up(Box::new(move |disk| {
        assert_eq!(disk, 1);
        hook_calls.fetch_add(1, Ordering::SeqCst);
        // Like the engine's scrub-on-spin-up: I/O to the disk that just came up.
        let mut buf = vec![0u8; BLOCK_BYTES];
        hook_disk.upgrade().unwrap().read_at(0, &mut buf).unwrap();
    }));
    let mut buf = vec![0u8; BLOCK_BYTES];
    r.disks[1].read_at(0, &mut buf).unwrap();
    r.disks[1].read_at(0, &mut buf).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    wait_for("disk 1 to turn off", Duration::from_secs(2), || {
        r.controllers[1].downs.load(Ordering::SeqCst) == 1
    });
    r.disks[1].read_at(0, &mut buf).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[test]
fn misaligned_io_on_a_powered_disk_fails_without_spinning_up() {
    let r = rig(fast(1, 1_000), 1, 1);
    let mut buf = vec![0u8; 100];
    assert!(r.disks[0].read_at(0, &mut buf).is_err());
    assert_eq!(r.manager.totals().spin_ups, 0);
    assert_eq!(r.manager.state(0), PowerState::Off);
}

#[test]
fn manager_rejects_a_zero_budget_and_a_wrong_controller_count() {
    assert!(matches!(
        PowerManager::simulated(PowerProfile::for_tests(), 2, 0),
        Err(PowerError::InvalidBudget(0))
    ));
    let err = PowerManager::new(PowerProfile::for_tests(), 2, 1, Vec::new())
        .err()
        .unwrap();
    assert!(
        matches!(
            err,
            PowerError::ControllerCount {
                controllers: 0,
                n_disks: 2
            }
        ),
        "{err}"
    );
    let bad = PowerProfile {
        watts_idle: -1.0,
        ..PowerProfile::for_tests()
    };
    assert!(matches!(
        PowerManager::simulated(bad, 1, 1),
        Err(PowerError::InvalidProfile(_))
    ));
}

#[test]
fn energy_counters_add_up_on_a_manual_clock() {
    let clock = Arc::new(ManualClock::new(0));
    let profile = PowerProfile {
        spin_up_ms: 0,
        idle_timeout_ms: 2_000,
        ..PowerProfile::default()
    };
    let controllers = (0..3)
        .map(|_| Arc::new(permafrost_disk::power::SimulatedPower) as Arc<dyn PowerController>)
        .collect();
    let manager =
        PowerManager::with_clock(profile.clone(), 3, 3, controllers, clock.clone()).unwrap();
    let guard = manager.acquire(0);
    clock.advance_ms(1_000);
    drop(guard);
    clock.advance_ms(3_000);
    let disk0 = manager.stats(0);
    assert_eq!(disk0.ms_in_state, [1_000, 0, 2_000, 1_000]);
    assert!(
        (disk0.joules - (1.0 * 7.5 + 2.0 * 5.23)).abs() < 1e-9,
        "{}",
        disk0.joules
    );
    let totals = manager.totals();
    assert_eq!(totals.total_ms(), 3 * 4_000);
    let expected: f64 = PowerState::ALL
        .iter()
        .map(|&s| totals.ms_in_state[s.index()] as f64 * profile.watts(s) / 1000.0)
        .sum();
    assert!((totals.joules - expected).abs() < 1e-9);
    assert_eq!(totals.spin_ups, 1);
}

#[test]
fn spin_up_delay_follows_the_injected_clock() {
    let clock = Arc::new(ManualClock::new(0));
    let controllers =
        vec![Arc::new(permafrost_disk::power::SimulatedPower) as Arc<dyn PowerController>];
    let manager =
        PowerManager::with_clock(PowerProfile::default(), 1, 1, controllers, clock.clone())
            .unwrap();
    let acquirer = {
        let manager = manager.clone();
        std::thread::spawn(move || drop(manager.acquire(0)))
    };
    std::thread::sleep(Duration::from_millis(30));
    assert!(
        !acquirer.is_finished(),
        "10 s of manual clock have not passed"
    );
    assert_eq!(manager.state(0), PowerState::SpinningUp);
    clock.advance_ms(10_000);
    acquirer.join().unwrap();
    assert_eq!(manager.state(0), PowerState::Idle);
    assert_eq!(
        manager.stats(0).ms_in_state[PowerState::SpinningUp.index()],
        10_000
    );
}

#[test]
fn a_spin_up_is_recorded_with_the_reason_of_the_work_that_caused_it() {
    use permafrost_disk::power::{WakeContext, WakeKind, WakeReason, WakeWitness};
    let r = rig(fast(30, 10_000), 3, 3);
    let mut buf = vec![0u8; BLOCK_BYTES];
    let witness = WakeWitness::new();
    {
        let _g = WakeContext {
            reason: WakeReason::read("photos", "2024/a.tif"),
            witness: Some(witness.clone()),
        }
        .enter();
        r.disks[1].read_at(0, &mut buf).unwrap();
        // On now: a second read waits for nothing.
        r.disks[1].read_at(0, &mut buf).unwrap();
    }
    assert_eq!(witness.spin_ups(), 1, "only the first read waited");
    assert!(
        witness.waited_ms() >= 30,
        "waited {} ms",
        witness.waited_ms()
    );
    let wake = r.manager.last_wake(1).expect("disk 1 woke");
    assert_eq!(wake.reason.describe(), "read of photos/2024/a.tif");
    assert!(wake.spin_up_ms >= 30);
    {
        let _g = WakeReason::about(WakeKind::Scrub, "disk 2").enter();
        r.disks[2].read_at(0, &mut buf).unwrap();
    }
    r.disks[0].write_at(0, &buf).unwrap(); // no reason given
    assert_eq!(r.manager.wake_counts(1), vec![(WakeKind::Read, 1)]);
    assert_eq!(r.manager.wake_counts(2), vec![(WakeKind::Scrub, 1)]);
    assert_eq!(r.manager.wake_counts(0), vec![(WakeKind::Unattributed, 1)]);
    let all = r.manager.wakes_since(0);
    assert_eq!(
        all.iter().map(|w| w.disk).collect::<Vec<_>>(),
        vec![1, 2, 0]
    );
    assert_eq!(r.manager.last_wake_seq(), 3);
    assert_eq!(r.manager.wakes_since(2).len(), 1);
    assert_eq!(r.manager.spin_up_histogram().count, 3);
    let snapshot = r.manager.snapshot();
    assert_eq!(snapshot.len(), 3);
    assert!(snapshot.iter().all(|(s, _)| *s != PowerState::Off));
}
