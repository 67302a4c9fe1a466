//! The power model of one disk: states, timings, watts, and the energy it accrues.

use serde::{Deserialize, Serialize};

/// Power state of one disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PowerState {
    /// Not spinning: powered off (slot power) or in standby (`hdparm -y`).
    Off,
    /// Motor accelerating; I/O waits until it is done.
    SpinningUp,
    /// Spinning, no I/O in flight; turns Off after the idle timeout.
    Idle,
    /// Spinning with I/O in flight.
    Active,
}

impl PowerState {
    /// All states, in the order of [`PowerStats::ms_in_state`].
    pub const ALL: [PowerState; 4] = [
        PowerState::Off,
        PowerState::SpinningUp,
        PowerState::Idle,
        PowerState::Active,
    ];

    /// Index of this state in [`PowerStats::ms_in_state`].
    pub fn index(self) -> usize {
        match self {
            PowerState::Off => 0,
            PowerState::SpinningUp => 1,
            PowerState::Idle => 2,
            PowerState::Active => 3,
        }
    }

    /// Lower-case name, e.g. `"spinning_up"`.
    pub fn name(self) -> &'static str {
        match self {
            PowerState::Off => "off",
            PowerState::SpinningUp => "spinning_up",
            PowerState::Idle => "idle",
            PowerState::Active => "active",
        }
    }
}

impl std::fmt::Display for PowerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Timings and power draw of one kind of disk.
///
/// `Default` is a 3.5-inch drive as described in the LoneStar thesis
/// (`seeds/001`, line numbers in `docs/power.md`): spin-up 10 s, idle timeout
/// 50 s, 5.23 W idle, 24 W while spinning up (the thesis says "more than 20 W"),
/// 0 W off. `watts_active` (7.5 W) is an assumption: the thesis gives no figure.
///
/// `watts_off` is what the configured controller achieves: 0 W when the slot
/// is powered off, 2.19 W (the thesis's sleeping disk) when the drive is only
/// put in standby, as `hdparm -y` and SCSI STOP do.
///
/// In a config file every field is optional; missing ones take the default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PowerProfile {
    /// Time from the start of a spin-up until the disk can serve I/O.
    pub spin_up_ms: u64,
    /// Time a disk stays Idle (spinning, no I/O) before it is turned Off.
    pub idle_timeout_ms: u64,
    /// Draw while Off.
    pub watts_off: f64,
    /// Draw while SpinningUp.
    pub watts_spinning_up: f64,
    /// Draw while Idle.
    pub watts_idle: f64,
    /// Draw while Active.
    pub watts_active: f64,
}

impl Default for PowerProfile {
    fn default() -> Self {
        PowerProfile {
            spin_up_ms: 10_000,
            idle_timeout_ms: 50_000,
            watts_off: 0.0,
            watts_spinning_up: 24.0,
            watts_idle: 5.23,
            watts_active: 7.5,
        }
    }
}

impl PowerProfile {
    /// The default watts with millisecond timings (spin-up 20 ms, idle timeout
    /// 100 ms), so tests exercise every transition quickly.
    pub fn for_tests() -> Self {
        PowerProfile {
            spin_up_ms: 20,
            idle_timeout_ms: 100,
            ..PowerProfile::default()
        }
    }

    /// The default profile for a drive that is only put in standby
    /// (`hdparm -y`, SCSI STOP), which still draws 2.19 W.
    pub fn standby() -> Self {
        PowerProfile {
            watts_off: 2.19,
            ..PowerProfile::default()
        }
    }

    /// Draw in `state`, in watts.
    pub fn watts(&self, state: PowerState) -> f64 {
        match state {
            PowerState::Off => self.watts_off,
            PowerState::SpinningUp => self.watts_spinning_up,
            PowerState::Idle => self.watts_idle,
            PowerState::Active => self.watts_active,
        }
    }

    /// Check that every wattage is finite and non-negative.
    pub fn validate(&self) -> Result<(), String> {
        for state in PowerState::ALL {
            let watts = self.watts(state);
            if !watts.is_finite() || watts < 0.0 {
                return Err(format!(
                    "watts_{state} = {watts} is not a finite, non-negative number"
                ));
            }
        }
        Ok(())
    }
}

/// Counters of one disk (or, summed, of many).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PowerStats {
    /// Off → SpinningUp transitions.
    pub spin_ups: u64,
    /// Milliseconds spent in each state, indexed by [`PowerState::index`].
    pub ms_in_state: [u64; 4],
    /// Energy used, in joules.
    pub joules: f64,
}

impl PowerStats {
    /// Milliseconds accounted in all states together.
    pub fn total_ms(&self) -> u64 {
        self.ms_in_state.iter().sum()
    }

    /// Add `other`'s counters to these.
    pub fn add(&mut self, other: &PowerStats) {
        self.spin_ups += other.spin_ups;
        for (mine, theirs) in self.ms_in_state.iter_mut().zip(other.ms_in_state) {
            *mine += theirs;
        }
        self.joules += other.joules;
    }
}

/// The power state machine of one disk, over a clock the caller supplies.
///
/// Transitions (all lazy: applied by the next call, at the exact time they are due):
/// - `Off --begin_io--> SpinningUp` (counts a spin-up); ready `spin_up_ms` later.
/// - `SpinningUp --ready--> Active` if I/O is in flight, else `Idle`.
/// - `Idle --begin_io--> Active`; `Active --last end_io--> Idle`.
/// - `Idle --idle_timeout_ms without I/O--> Off`; or at once by [`PowerModel::spin_down`].
///
/// Time is accrued per state exactly up to each transition, so the counters do
/// not depend on how often the model is advanced. Times earlier than the last
/// one seen are treated as the last one (time never runs backwards here).
#[derive(Clone, Debug)]
pub struct PowerModel {
    profile: PowerProfile,
    state: PowerState,
    /// Time up to which the stats are accrued.
    accounted_ms: u64,
    /// In SpinningUp: when it ends. In Idle: when the idle period began.
    since_ms: u64,
    io_in_flight: u64,
    stats: PowerStats,
}

impl PowerModel {
    /// A disk that is Off at `now_ms`.
    pub fn new(profile: PowerProfile, now_ms: u64) -> Self {
        PowerModel {
            profile,
            state: PowerState::Off,
            accounted_ms: now_ms,
            since_ms: now_ms,
            io_in_flight: 0,
            stats: PowerStats::default(),
        }
    }

    /// The profile this model runs.
    pub fn profile(&self) -> &PowerProfile {
        &self.profile
    }

    /// Change this disk's idle timeout (a caller adapting it per disk). It
    /// applies to the current idle period too, counted from its start.
    pub fn set_idle_timeout_ms(&mut self, idle_timeout_ms: u64) {
        self.profile.idle_timeout_ms = idle_timeout_ms;
    }

    /// State as of the last call (call [`PowerModel::advance`] first for "now").
    pub fn state(&self) -> PowerState {
        self.state
    }

    /// I/Os begun and not yet ended.
    pub fn io_in_flight(&self) -> u64 {
        self.io_in_flight
    }

    /// Counters accrued up to the last call's time.
    pub fn stats(&self) -> PowerStats {
        self.stats
    }

    /// The time up to which the counters are accrued.
    pub fn accounted_ms(&self) -> u64 {
        self.accounted_ms
    }

    /// When the next lazy transition is due, if one is pending: the end of a
    /// spin-up, or the idle timeout.
    pub fn next_transition_ms(&self) -> Option<u64> {
        match self.state {
            PowerState::SpinningUp => Some(self.since_ms),
            PowerState::Idle => Some(self.since_ms.saturating_add(self.profile.idle_timeout_ms)),
            PowerState::Off | PowerState::Active => None,
        }
    }

    /// Apply every transition due by `now_ms` and accrue time up to `now_ms`.
    pub fn advance(&mut self, now_ms: u64) {
        let now_ms = now_ms.max(self.accounted_ms);
        while let Some(due_ms) = self.next_transition_ms() {
            if due_ms > now_ms {
                break;
            }
            self.accrue(due_ms);
            match self.state {
                PowerState::SpinningUp => {
                    self.state = if self.io_in_flight > 0 {
                        PowerState::Active
                    } else {
                        PowerState::Idle
                    };
                    self.since_ms = due_ms;
                }
                PowerState::Idle => self.state = PowerState::Off,
                PowerState::Off | PowerState::Active => {
                    unreachable!("no transition is due in {}", self.state)
                }
            }
        }
        self.accrue(now_ms);
    }

    /// An I/O starts at `now_ms`. Starts a spin-up if the disk is Off. Returns
    /// the time from which the disk can serve it (`now_ms` if spinning).
    pub fn begin_io(&mut self, now_ms: u64) -> u64 {
        self.advance(now_ms);
        let now_ms = self.accounted_ms;
        self.io_in_flight += 1;
        match self.state {
            PowerState::Off => {
                self.state = PowerState::SpinningUp;
                self.since_ms = now_ms.saturating_add(self.profile.spin_up_ms);
                self.stats.spin_ups += 1;
                let ready_ms = self.since_ms;
                self.advance(now_ms); // a zero-length spin-up completes at once
                ready_ms
            }
            PowerState::SpinningUp => self.since_ms,
            PowerState::Idle => {
                self.state = PowerState::Active;
                now_ms
            }
            PowerState::Active => now_ms,
        }
    }

    /// An I/O begun with [`PowerModel::begin_io`] ends at `now_ms`. When it was
    /// the last one, an Active disk becomes Idle and its idle timer starts.
    ///
    /// # Panics
    /// If no I/O is in flight: the caller's begin/end pairing is broken (a bug).
    pub fn end_io(&mut self, now_ms: u64) {
        assert!(self.io_in_flight > 0, "end_io without a matching begin_io");
        self.advance(now_ms);
        self.io_in_flight -= 1;
        if self.io_in_flight == 0 && self.state == PowerState::Active {
            self.state = PowerState::Idle;
            self.since_ms = self.accounted_ms;
            self.advance(self.accounted_ms); // a zero idle timeout turns it off at once
        }
    }

    /// Turn an Idle disk Off at `now_ms` without waiting for the idle timeout
    /// (used to make room in a power budget). Returns false, changing nothing
    /// but the accrual, unless the disk is Idle at `now_ms`.
    pub fn spin_down(&mut self, now_ms: u64) -> bool {
        self.advance(now_ms);
        if self.state != PowerState::Idle {
            return false;
        }
        self.state = PowerState::Off;
        true
    }

    fn accrue(&mut self, to_ms: u64) {
        debug_assert!(to_ms >= self.accounted_ms);
        let ms = to_ms - self.accounted_ms;
        self.stats.ms_in_state[self.state.index()] += ms;
        self.stats.joules += ms as f64 * self.profile.watts(self.state) / 1000.0;
        self.accounted_ms = to_ms;
    }
}
