//! PowerBudget: the budget policy the server's PowerManager and the energy
//! simulator share, driven here on a hand-moved clock without threads.

use permafrost_disk::power::{
    Admission, Grant, PowerBudget, PowerError, PowerProfile, PowerState, Ticket,
};

const SPIN_UP_MS: u64 = 10_000;
const IDLE_TIMEOUT_MS: u64 = 50_000;

fn budget(n_disks: usize, spinning_max: usize) -> PowerBudget {
    let profile = PowerProfile {
        spin_up_ms: SPIN_UP_MS,
        idle_timeout_ms: IDLE_TIMEOUT_MS,
        ..PowerProfile::default()
    };
    PowerBudget::new(profile, n_disks, spinning_max, 0).unwrap()
}

/// What a caller whose drives stop at once does (the simulator): settle,
/// try, and after making room settle and try again.
fn acquire(
    b: &mut PowerBudget,
    disks: &[usize],
    ticket: &mut Option<Ticket>,
    now_ms: u64,
) -> Option<Grant> {
    b.acquire_stopping_at_once(disks, ticket, now_ms).unwrap()
}

#[track_caller]
fn granted(b: &mut PowerBudget, disks: &[usize], now_ms: u64) -> Grant {
    acquire(b, disks, &mut None, now_ms).expect("granted")
}

#[test]
fn a_grant_spins_up_the_off_disks_of_the_set_together() {
    let mut b = budget(4, 4);
    let grant = granted(&mut b, &[2, 0, 2], 5);
    assert_eq!(
        grant.ready_ms,
        5 + SPIN_UP_MS,
        "one delay for the whole set"
    );
    assert_eq!(grant.spun_up, vec![2, 0], "each Off disk once");
    assert_eq!(b.model(2).io_in_flight(), 2, "one I/O per entry");
    assert_eq!(b.spinning(), 2);
    assert_eq!(b.max_spinning_seen(), 2);
    assert_eq!(b.model(1).state(), PowerState::Off);
}

#[test]
fn a_set_whose_disks_are_on_needs_no_budget_and_skips_the_queue() {
    let mut b = budget(3, 1);
    granted(&mut b, &[0], 0);
    let mut waiting = None;
    assert_eq!(acquire(&mut b, &[1], &mut waiting, 1), None);
    assert!(waiting.is_some(), "disk 1 needs budget: it queues");
    // Disk 0 is on: both paths grant at once, ahead of the queue.
    let fast = b.acquire_on(&[0], 2).expect("fast path");
    assert_eq!(
        fast.ready_ms, SPIN_UP_MS,
        "waits for the running spin-up only"
    );
    assert!(fast.spun_up.is_empty());
    let mut fresh = None;
    assert!(acquire(&mut b, &[0, 0], &mut fresh, 3).is_some());
    assert_eq!(fresh, None, "never took a place in the queue");
    assert_eq!(b.waiting().collect::<Vec<_>>(), vec![waiting.unwrap()]);
}

#[test]
fn the_fast_path_refuses_a_disk_that_is_due_to_turn_off() {
    let mut b = budget(1, 1);
    granted(&mut b, &[0], 0);
    b.release(0, SPIN_UP_MS); // Idle from 10 s, off at 60 s
    let off_at = SPIN_UP_MS + IDLE_TIMEOUT_MS;
    assert!(b.clone().acquire_on(&[0], off_at - 1).is_some());
    assert!(b.acquire_on(&[0], off_at).is_none(), "Off at its deadline");
    let grant = granted(&mut b, &[0], off_at);
    assert_eq!(grant.spun_up, vec![0], "a second spin-up");
    assert_eq!(b.model(0).stats().spin_ups, 2);
}

#[test]
fn only_the_head_of_the_queue_takes_budget() {
    let mut b = budget(3, 1);
    granted(&mut b, &[0], 0);
    let (mut first, mut second) = (None, None);
    assert_eq!(acquire(&mut b, &[1], &mut first, 1), None);
    assert_eq!(acquire(&mut b, &[2], &mut second, 2), None);
    assert_eq!(b.queue_head(), first);
    // Disk 0 goes idle: room could be made, but not for the second in line.
    assert!(b.release(0, 20_000));
    assert_eq!(acquire(&mut b, &[2], &mut second, 20_000), None);
    assert_eq!(
        b.model(0).state(),
        PowerState::Idle,
        "nothing evicted for it"
    );
    let grant = acquire(&mut b, &[1], &mut first, 20_000).expect("the head goes");
    assert_eq!(grant.spun_up, vec![1]);
    assert_eq!(first, None, "left the queue");
    assert_eq!(
        b.model(0).state(),
        PowerState::Off,
        "turned off to make room"
    );
    assert_eq!(b.queue_head(), second);
    assert_eq!(b.max_spinning_seen(), 1);
}

#[test]
fn idle_disks_are_turned_off_least_recently_used_first() {
    let mut b = budget(5, 3);
    for disk in 0..3 {
        granted(&mut b, &[disk], 0);
    }
    // Idle since 30 s, 10 s and 20 s: disk 1 is the least recently used.
    b.release(0, 30_000);
    b.release(1, 10_000);
    b.release(2, 20_000);
    granted(&mut b, &[3], 31_000);
    assert_eq!(b.model(1).state(), PowerState::Off);
    assert_eq!(b.model(2).state(), PowerState::Idle);
    granted(&mut b, &[4], 32_000);
    assert_eq!(b.model(2).state(), PowerState::Off);
    assert_eq!(b.model(0).state(), PowerState::Idle);
    // A disk of the requested set is never the one turned off.
    b.release(3, 45_000);
    b.release(4, 46_000);
    let grant = granted(&mut b, &[0, 3, 1], 47_000);
    assert_eq!(grant.spun_up, vec![1]);
    assert_eq!(
        b.model(4).state(),
        PowerState::Off,
        "the only Idle disk outside the set"
    );
    assert_eq!(b.model(0).state(), PowerState::Active);
}

#[test]
fn a_disk_counts_against_the_budget_until_its_drive_is_powered_down() {
    let mut b = budget(3, 1);
    granted(&mut b, &[0], 0);
    b.release(0, 20_000);
    let mut ticket = None;
    assert_eq!(b.settle(20_000), Vec::<usize>::new());
    assert_eq!(
        b.try_acquire(&[1], &mut ticket, 20_000).unwrap(),
        Admission::MadeRoom
    );
    // The model is Off, the drive is not yet: still no room.
    assert_eq!(b.settle(20_000), vec![0], "named once");
    assert_eq!(b.settle(20_000), Vec::<usize>::new());
    assert_eq!(b.spinning(), 1);
    assert_eq!(
        b.try_acquire(&[1], &mut ticket, 20_000).unwrap(),
        Admission::Wait
    );
    // Disk 0 itself waits for its drive to stop, without queueing.
    let mut again = None;
    assert_eq!(
        b.try_acquire(&[0], &mut again, 20_000).unwrap(),
        Admission::Wait
    );
    assert_eq!(again, None);
    b.powered_down(0);
    assert_eq!(b.spinning(), 0);
    assert_eq!(b.settle(20_001), Vec::<usize>::new());
    match b.try_acquire(&[1], &mut ticket, 20_001).unwrap() {
        Admission::Granted(grant) => assert_eq!(grant.spun_up, vec![1]),
        other => panic!("expected a grant, got {other:?}"),
    }
}

#[test]
fn the_idle_timeout_turns_a_disk_off_and_frees_its_place() {
    let mut b = budget(2, 1);
    granted(&mut b, &[0], 0);
    b.release(0, SPIN_UP_MS);
    let off_at = SPIN_UP_MS + IDLE_TIMEOUT_MS;
    assert_eq!(b.next_transition_ms(), Some(off_at));
    assert_eq!(b.settle(off_at - 1), Vec::<usize>::new());
    assert_eq!(b.settle(off_at), vec![0]);
    b.powered_down(0);
    assert_eq!(b.spinning(), 0);
    assert_eq!(b.next_transition_ms(), None);
    let stats = b.model(0).stats();
    assert_eq!(
        stats.ms_in_state,
        [0, SPIN_UP_MS, IDLE_TIMEOUT_MS, 0],
        "Off, SpinningUp, Idle, Active"
    );
}

#[test]
fn a_waiting_request_goes_without_budget_once_its_disks_are_on() {
    let mut b = budget(4, 2);
    granted(&mut b, &[0], 0);
    let (mut a, mut c, mut d) = (None, None, None);
    assert_eq!(acquire(&mut b, &[1, 2], &mut a, 1), None, "needs 2, 1 free");
    assert_eq!(acquire(&mut b, &[3], &mut c, 2), None, "behind a");
    assert_eq!(acquire(&mut b, &[1], &mut d, 3), None, "behind c");
    b.release(0, 20_000);
    assert_eq!(
        acquire(&mut b, &[1, 2], &mut a, 20_000).unwrap().spun_up,
        vec![1, 2]
    );
    // c is the head now and has no room (1 and 2 are active); d's disk is on,
    // so d goes at once, ahead of c.
    assert_eq!(acquire(&mut b, &[3], &mut c, 20_000), None);
    let grant = acquire(&mut b, &[1], &mut d, 20_000).expect("no budget needed");
    assert!(grant.spun_up.is_empty());
    assert_eq!(grant.ready_ms, 20_000 + SPIN_UP_MS, "the running spin-up");
    assert_eq!(b.waiting().collect::<Vec<_>>(), vec![c.unwrap()]);
}

#[test]
fn sets_larger_than_the_budget_are_refused_and_leave_the_queue() {
    let mut b = budget(4, 3);
    granted(&mut b, &[0, 1, 2], 0);
    let mut ticket = None;
    assert_eq!(acquire(&mut b, &[3, 0], &mut ticket, 1), None);
    assert!(ticket.is_some());
    b.set_budget(1).unwrap();
    b.settle(2);
    assert!(matches!(
        b.try_acquire(&[3, 0], &mut ticket, 2),
        Err(PowerError::SetExceedsBudget {
            requested: 2,
            budget: 1
        })
    ));
    assert_eq!(ticket, None);
    assert_eq!(b.queue_head(), None);
    assert!(matches!(b.set_budget(0), Err(PowerError::InvalidBudget(0))));
    assert!(matches!(
        PowerBudget::new(PowerProfile::default(), 1, 0, 0),
        Err(PowerError::InvalidBudget(0))
    ));
}

#[test]
fn a_lowered_budget_turns_nothing_off_but_holds_back_new_spin_ups() {
    let mut b = budget(4, 3);
    granted(&mut b, &[0, 1, 2], 0);
    b.set_budget(2).unwrap();
    assert_eq!(b.spinning(), 3, "nothing turned off");
    b.release(0, 20_000);
    let mut ticket = None;
    // One Idle disk turned off leaves 2 spinning: still no room under 2.
    assert_eq!(acquire(&mut b, &[3], &mut ticket, 20_000), None);
    assert_eq!(b.model(0).state(), PowerState::Off);
    b.release(1, 21_000);
    assert_eq!(
        acquire(&mut b, &[3], &mut ticket, 21_000).unwrap().spun_up,
        vec![3]
    );
    assert_eq!(b.spinning(), 2);
    assert_eq!(b.max_spinning_seen(), 3, "the peak before the budget fell");
}
