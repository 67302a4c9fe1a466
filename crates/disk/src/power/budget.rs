//! The power budget: N disks' power models on the caller's clock, and who may
//! spin up when. Pure: no threads, no locks, no controllers, no clock.

use super::{PowerModel, PowerProfile, PowerState, PowerStats};
use std::collections::VecDeque;

/// Errors of the power budget and the power manager. All are caller errors,
/// reported, never hung on.
#[derive(Debug, thiserror::Error)]
pub enum PowerError {
    #[error("spinning budget must allow at least 1 disk, got {0}")]
    InvalidBudget(usize),
    #[error(
        "{controllers} power controllers given for {n_disks} disks: need exactly one per disk"
    )]
    ControllerCount { controllers: usize, n_disks: usize },
    #[error("invalid power profile: {0}")]
    InvalidProfile(String),
    #[error("disk {disk} does not exist: the power manager has {n_disks} disks")]
    NoSuchDisk { disk: usize, n_disks: usize },
    #[error("cannot keep {requested} disks spinning at once: the budget allows {budget}")]
    SetExceedsBudget { requested: usize, budget: usize },
}

/// A place in the FIFO of requests waiting for room in the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(u64);

/// The outcome of one [`PowerBudget::try_acquire`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// The set is on: one I/O was begun per requested entry.
    Granted(Grant),
    /// Idle disks were turned off to make room. Power them down
    /// ([`PowerBudget::settle`], [`PowerBudget::powered_down`]) and try again.
    MadeRoom,
    /// Not now: try again after a change (an I/O ended, a drive finished
    /// powering down, the budget rose, a model transition came due). The
    /// request keeps its place in the queue if it took one.
    Wait,
}

/// What a granted request got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// When every disk of the set can serve I/O (the grant time if all were spinning).
    pub ready_ms: u64,
    /// Disks that were Off and started spinning up with this grant: their
    /// drives must be told to spin up.
    pub spun_up: Vec<usize>,
}

/// N disks' [`PowerModel`]s against a clock the caller supplies, with a budget
/// of at most `spinning_max` disks spinning at once. The policy both the server
/// ([`super::PowerManager`], which adds the lock, the controllers, real
/// sleeping and the idle thread) and the trace simulators use:
///
/// - A request for a set of disks all of which are on (and settled) is
///   granted at once: it needs no budget and never queues.
/// - Otherwise it takes a [`Ticket`] in a FIFO queue. Only the head of the
///   queue may take budget; it is granted when the set's Off disks fit in the
///   free budget. If they do not, Idle disks outside the set are turned Off at
///   once, least recently used (earliest idle deadline) first, to make room.
/// - A disk counts against the budget while its model is not Off *or* its
///   drive is still powered: from the grant that spins it up until the caller
///   reports [`PowerBudget::powered_down`]. A caller without drives (a
///   simulator) reports it as soon as [`PowerBudget::settle`] names the disk.
/// - [`PowerBudget::max_spinning_seen`] is the peak count, taken at each grant.
///
/// Lowering the budget turns nothing off: new spin-ups wait until fewer than
/// `spinning_max` disks spin.
#[derive(Clone, Debug)]
pub struct PowerBudget {
    profile: PowerProfile,
    disks: Vec<Slot>,
    spinning_max: usize,
    max_spinning_seen: usize,
    /// Requests waiting for budget, served strictly in order.
    queue: VecDeque<Ticket>,
    next_ticket: u64,
}

#[derive(Clone, Debug)]
struct Slot {
    model: PowerModel,
    /// The drive was told to spin up and has not finished powering down.
    powered: bool,
    /// [`PowerBudget::settle`] asked for the drive to be powered down and the
    /// caller has not yet reported [`PowerBudget::powered_down`].
    powering_down: bool,
    /// Not turned off to make room before this time ([`PowerBudget::keep_on_until`]).
    keep_until_ms: u64,
}

impl Slot {
    fn counts_as_spinning(&self) -> bool {
        self.model.state() != PowerState::Off || self.powered
    }
}

impl PowerBudget {
    /// `n_disks` disks, all Off at `now_ms`, at most `spinning_max` spinning at once.
    pub fn new(
        profile: PowerProfile,
        n_disks: usize,
        spinning_max: usize,
        now_ms: u64,
    ) -> Result<PowerBudget, PowerError> {
        if spinning_max == 0 {
            return Err(PowerError::InvalidBudget(spinning_max));
        }
        profile.validate().map_err(PowerError::InvalidProfile)?;
        let disks = (0..n_disks)
            .map(|_| Slot {
                model: PowerModel::new(profile.clone(), now_ms),
                powered: false,
                powering_down: false,
                keep_until_ms: 0,
            })
            .collect();
        Ok(PowerBudget {
            profile,
            disks,
            spinning_max,
            max_spinning_seen: 0,
            queue: VecDeque::new(),
            next_ticket: 0,
        })
    }

    /// One more disk, Off at `now_ms`, numbered after the others (a grid grown by a disk); returns its index.
    pub fn add_disk(&mut self, now_ms: u64) -> usize {
        self.disks.push(Slot {
            model: PowerModel::new(self.profile.clone(), now_ms),
            powered: false,
            powering_down: false,
            keep_until_ms: 0,
        });
        self.disks.len() - 1
    }

    /// Number of disks.
    pub fn n_disks(&self) -> usize {
        self.disks.len()
    }

    /// The profile every disk's model runs.
    pub fn profile(&self) -> &PowerProfile {
        &self.profile
    }

    /// The most disks that may spin at once.
    pub fn budget(&self) -> usize {
        self.spinning_max
    }

    /// Change the budget (see the type's documentation for lowering it).
    pub fn set_budget(&mut self, spinning_max: usize) -> Result<(), PowerError> {
        if spinning_max == 0 {
            return Err(PowerError::InvalidBudget(spinning_max));
        }
        self.spinning_max = spinning_max;
        Ok(())
    }

    /// The model of `disk` as of the last call that advanced it.
    ///
    /// # Panics
    /// If `disk >= n_disks()`, as every method taking a disk index does.
    pub fn model(&self, disk: usize) -> &PowerModel {
        &self.disks[disk].model
    }

    /// Set `disk`'s idle timeout ([`PowerModel::set_idle_timeout_ms`]); the
    /// other disks keep theirs.
    pub fn set_idle_timeout_ms(&mut self, disk: usize, idle_timeout_ms: u64) {
        self.disks[disk].model.set_idle_timeout_ms(idle_timeout_ms);
    }

    /// Do not turn `disk` off to make room before `until_ms` (its idle timeout
    /// still applies): work that paused between two I/Os keeps its disk. A
    /// caller that never calls this (the simulators) sees no difference.
    pub fn keep_on_until(&mut self, disk: usize, until_ms: u64) {
        self.disks[disk].keep_until_ms = until_ms;
    }

    /// A copy of `disk`'s model advanced to `now_ms` (this budget is unchanged).
    pub fn model_at(&self, disk: usize, now_ms: u64) -> PowerModel {
        let mut model = self.disks[disk].model.clone();
        model.advance(now_ms);
        model
    }

    /// Advance `disk`'s model alone to `now_ms` and return its state. A disk
    /// that turns Off here still counts against the budget until the next
    /// [`PowerBudget::settle`] and [`PowerBudget::powered_down`].
    pub fn state_at(&mut self, disk: usize, now_ms: u64) -> PowerState {
        let model = &mut self.disks[disk].model;
        model.advance(now_ms);
        model.state()
    }

    /// Counters of all disks summed, up to `now_ms` (this budget is unchanged).
    pub fn totals_at(&self, now_ms: u64) -> PowerStats {
        let mut totals = PowerStats::default();
        for disk in 0..self.disks.len() {
            totals.add(&self.model_at(disk, now_ms).stats());
        }
        totals
    }

    /// Disks counted against the budget, as of the last [`PowerBudget::settle`].
    pub fn spinning(&self) -> usize {
        self.disks.iter().filter(|s| s.counts_as_spinning()).count()
    }

    /// The most disks ever counted against the budget at once (taken at each grant).
    pub fn max_spinning_seen(&self) -> usize {
        self.max_spinning_seen
    }

    /// The earliest pending model transition of any disk (end of a spin-up, an
    /// idle timeout): when the budget may change without a call.
    pub fn next_transition_ms(&self) -> Option<u64> {
        self.disks
            .iter()
            .filter_map(|s| s.model.next_transition_ms())
            .min()
    }

    /// The waiting requests' tickets, in queue order (the head first).
    pub fn waiting(&self) -> impl Iterator<Item = Ticket> + '_ {
        self.queue.iter().copied()
    }

    /// The ticket at the head of the queue: the one request that may take budget.
    pub fn queue_head(&self) -> Option<Ticket> {
        self.queue.front().copied()
    }

    /// Advance every model to `now_ms`. Returns the disks whose model is Off
    /// while their drive is still powered (idle timeout or eviction): the
    /// caller powers each down and then calls [`PowerBudget::powered_down`].
    /// Until then they count against the budget. A disk is named once.
    pub fn settle(&mut self, now_ms: u64) -> Vec<usize> {
        let mut victims = Vec::new();
        for (disk, slot) in self.disks.iter_mut().enumerate() {
            slot.model.advance(now_ms);
            if slot.model.state() == PowerState::Off && slot.powered && !slot.powering_down {
                slot.powering_down = true;
                victims.push(disk);
            }
        }
        victims
    }

    /// The drive of `disk`, named by [`PowerBudget::settle`], is powered down:
    /// it no longer counts against the budget.
    ///
    /// # Panics
    /// If `disk` was not being powered down (a bug in the caller).
    pub fn powered_down(&mut self, disk: usize) {
        let slot = &mut self.disks[disk];
        assert!(
            slot.powering_down,
            "disk {disk} reported powered down, but settle did not ask for it"
        );
        slot.powering_down = false;
        slot.powered = false;
    }

    /// The fast path: if every disk of `disks` is on and stays on at `now_ms`,
    /// begin one I/O per entry and return the grant (nothing spins up, no other
    /// disk is looked at). Otherwise change nothing and return `None`; the
    /// caller then settles and uses [`PowerBudget::try_acquire`].
    pub fn acquire_on(&mut self, disks: &[usize], now_ms: u64) -> Option<Grant> {
        let stays_on = |model: &PowerModel| match model.state() {
            PowerState::Off => false,
            PowerState::Idle => model
                .next_transition_ms()
                .is_some_and(|due_ms| due_ms > now_ms),
            PowerState::SpinningUp | PowerState::Active => true,
        };
        if !disks.iter().all(|&d| stays_on(&self.disks[d].model)) {
            return None;
        }
        let mut ready_ms = now_ms;
        for &disk in disks {
            ready_ms = ready_ms.max(self.disks[disk].model.begin_io(now_ms));
        }
        Some(Grant {
            ready_ms,
            spun_up: Vec::new(),
        })
    }

    /// One attempt to keep every disk of `disks` on at `now_ms`, after
    /// [`PowerBudget::settle`]`(now_ms)`. `ticket` is the request's place in the
    /// queue: `None` for a new request; taken when the request must wait for
    /// budget; cleared when it is granted or fails. On a grant, one I/O is
    /// begun per entry of `disks` (duplicates allowed; they count once against
    /// the budget); end each with [`PowerBudget::release`].
    ///
    /// Errors, leaving the queue, if the set is larger than the budget.
    pub fn try_acquire(
        &mut self,
        disks: &[usize],
        ticket: &mut Option<Ticket>,
        now_ms: u64,
    ) -> Result<Admission, PowerError> {
        debug_assert!(
            self.disks.iter().all(|s| s.model.accounted_ms() >= now_ms),
            "try_acquire at {now_ms} ms without settle({now_ms}) first"
        );
        let mut set = disks.to_vec();
        set.sort_unstable();
        set.dedup();
        if set.len() > self.spinning_max {
            self.cancel(ticket);
            return Err(PowerError::SetExceedsBudget {
                requested: set.len(),
                budget: self.spinning_max,
            });
        }
        let settling = set.iter().any(|&d| self.disks[d].powering_down);
        if settling {
            // A drive of the set is still powering down: wait for it, without
            // taking a place in the queue.
            return Ok(Admission::Wait);
        }
        let off = set
            .iter()
            .filter(|&&d| self.disks[d].model.state() == PowerState::Off)
            .count();
        if off == 0 {
            // Everything is on or spinning up: no budget needed, no queue.
            self.cancel(ticket);
            return Ok(Admission::Granted(self.grant(disks, now_ms)));
        }
        let my_ticket = *ticket.get_or_insert_with(|| {
            let t = Ticket(self.next_ticket);
            self.next_ticket += 1;
            self.queue.push_back(t);
            t
        });
        if self.queue.front() != Some(&my_ticket) {
            return Ok(Admission::Wait);
        }
        let free = self.spinning_max.saturating_sub(self.spinning());
        if off <= free {
            self.cancel(ticket);
            return Ok(Admission::Granted(self.grant(disks, now_ms)));
        }
        if self.evict_idle(&set, off - free, now_ms) > 0 {
            return Ok(Admission::MadeRoom);
        }
        Ok(Admission::Wait)
    }

    /// [`PowerBudget::try_acquire`] for a caller whose drives stop the moment they are told to (the simulator):
    /// settle, powering down at once every disk that turned off, try, and after making room settle and try
    /// again. `Ok(None)`: the request waits (in the queue when `ticket` is set).
    pub fn acquire_stopping_at_once(
        &mut self,
        disks: &[usize],
        ticket: &mut Option<Ticket>,
        now_ms: u64,
    ) -> Result<Option<Grant>, PowerError> {
        loop {
            for disk in self.settle(now_ms) {
                self.powered_down(disk);
            }
            match self.try_acquire(disks, ticket, now_ms)? {
                Admission::Granted(grant) => return Ok(Some(grant)),
                Admission::MadeRoom => continue,
                Admission::Wait => return Ok(None),
            }
        }
    }

    /// Give up a place in the queue (if `ticket` holds one). Returns whether it did.
    pub fn cancel(&mut self, ticket: &mut Option<Ticket>) -> bool {
        match ticket.take() {
            Some(t) => {
                self.queue.retain(|&q| q != t);
                true
            }
            None => false,
        }
    }

    /// An I/O begun by a grant on `disk` ends at `now_ms`. Returns true when it
    /// was the disk's last one: the disk is now Idle (or will be, once its
    /// spin-up completes) and may be turned off to make room.
    pub fn release(&mut self, disk: usize, now_ms: u64) -> bool {
        let model = &mut self.disks[disk].model;
        model.end_io(now_ms);
        model.io_in_flight() == 0
    }

    /// Begin one I/O per entry of `disks` at `now_ms`; mark the drives of Off
    /// disks powered. The caller has checked the budget.
    fn grant(&mut self, disks: &[usize], now_ms: u64) -> Grant {
        let mut spun_up = Vec::new();
        let mut ready_ms = now_ms;
        for &disk in disks {
            let slot = &mut self.disks[disk];
            if slot.model.state() == PowerState::Off {
                slot.powered = true;
                spun_up.push(disk);
            }
            ready_ms = ready_ms.max(slot.model.begin_io(now_ms));
        }
        self.max_spinning_seen = self.max_spinning_seen.max(self.spinning());
        Grant { ready_ms, spun_up }
    }

    /// Turn up to `want` Idle disks outside `keep` (sorted) Off at `now_ms`,
    /// least recently used (earliest idle deadline) first. Returns how many.
    fn evict_idle(&mut self, keep: &[usize], want: usize, now_ms: u64) -> usize {
        let mut idle: Vec<(u64, usize)> = self
            .disks
            .iter()
            .enumerate()
            .filter(|(disk, slot)| {
                slot.model.state() == PowerState::Idle
                    && slot.keep_until_ms <= now_ms
                    && keep.binary_search(disk).is_err()
            })
            .map(|(disk, slot)| (slot.model.next_transition_ms().unwrap_or(0), disk))
            .collect();
        idle.sort_unstable();
        let mut evicted = 0;
        for &(_, disk) in idle.iter().take(want) {
            if self.disks[disk].model.spin_down(now_ms) {
                evicted += 1;
            }
        }
        evicted
    }
}
