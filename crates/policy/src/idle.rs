//! How long a disk stays spinning once it has nothing to do: an idle timeout
//! per disk, adapted to its recent gaps between requests, and a wear budget
//! of spin-ups per disk per day (issue 30).
//!
//! A spin-up costs energy (`spin_up_ms` at `watts_spinning_up`) and a
//! start/stop cycle of the drive's rated few ten thousand. Turning a disk off
//! pays when the next request comes later than the *break-even* time, where
//! idling would have cost as much as the spin-up. A fixed timeout equal to the
//! break-even time costs at most twice the best possible (the classic
//! rent-or-buy rule). Knowing the disk's recent gaps does better:
//! [`IdleTimeouts::timeout_ms`] picks, among the recent gaps, the timeout that
//! would have cost least over them (energy of idling, plus a spin-up and its
//! wear for every gap longer than the timeout), so a disk whose requests come
//! every few minutes stays up between them, and one that is read once a day
//! turns off after the break-even time.
//!
//! The wear budget, when enforced, is a hard rule on top: a disk that has spun up
//! `spinups_per_day_max` times in the last 24 hours is kept spinning until
//! the oldest of them is 24 hours old, so it never spins up more often than
//! that in any 24 hours (unless the power budget turns it off to make room).
//!
//! Pure, like the rest of the crate: time comes in as `now_ms`.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

const DAY_MS: u64 = 24 * 3_600 * 1_000;

/// Settings of the idle timeouts and the wear budget. The defaults price a
/// start/stop cycle at 900 J and enforce the wear budget (27 spin-ups a day
/// from 50,000 rated cycles over five years): a disk that has spent it keeps
/// spinning rather than stop and start again. `docs/energy.md` measures the
/// trade-off (on ECFS, with the watchdog's one-hour age for off disks, the
/// budget costs 42 against 21 kWh in 305 days and holds every disk to 27).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IdleConfig {
    /// Adapt each disk's idle timeout to its recent gaps (else the power
    /// profile's fixed timeout).
    pub adaptive: bool,
    /// How many recent gaps between requests a disk remembers.
    pub gaps_remembered: usize,
    /// The shortest adapted timeout.
    pub timeout_min_ms: u64,
    /// The longest adapted timeout.
    pub timeout_max_ms: u64,
    /// The drive's rated start/stop cycles.
    pub rated_start_stop_cycles: u64,
    /// The service life the cycles must last.
    pub service_life_years: f64,
    /// Enforce the wear budget: keep a disk that has spent it spinning.
    pub enforce_wear_budget: bool,
    /// Spin-ups per disk in any 24 hours; `None`: from the rated cycles and
    /// the service life (50,000 over 5 years: 27 a day).
    pub spinups_per_day_max: Option<u32>,
    /// The wear of one start/stop cycle, counted as this much energy when the
    /// timeout is chosen (0: energy alone decides).
    pub spin_up_wear_joules: f64,
}

impl Default for IdleConfig {
    fn default() -> Self {
        IdleConfig {
            adaptive: true,
            gaps_remembered: 32,
            timeout_min_ms: 10_000,
            timeout_max_ms: 2 * 3_600 * 1_000,
            rated_start_stop_cycles: 50_000,
            service_life_years: 5.0,
            enforce_wear_budget: true,
            spinups_per_day_max: None,
            spin_up_wear_joules: 900.0,
        }
    }
}

impl IdleConfig {
    /// The wear budget in spin-ups per disk per day (at least 1).
    pub fn spinups_per_day(&self) -> u32 {
        self.spinups_per_day_max.unwrap_or_else(|| {
            let days = (self.service_life_years * 365.0).max(1.0);
            ((self.rated_start_stop_cycles as f64 / days).floor() as u32).max(1)
        })
    }
}

/// What a disk costs, from its power profile.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DiskCosts {
    /// The fixed idle timeout (the profile's), used without adaptation and
    /// before a disk has gaps to learn from.
    pub default_timeout_ms: u64,
    /// Draw while idle, W.
    pub watts_idle: f64,
    /// Energy of one spin-up, J (spin-up time × its draw).
    pub spin_up_joules: f64,
}

impl DiskCosts {
    /// Idle time that costs as much as a spin-up (and its wear, `wear_joules`).
    pub fn break_even_ms(&self, wear_joules: f64) -> u64 {
        if self.watts_idle <= 0.0 {
            return u64::MAX;
        }
        ((self.spin_up_joules + wear_joules) / self.watts_idle * 1_000.0) as u64
    }
}

#[derive(Clone, Debug, Default)]
struct DiskHistory {
    /// Recent gaps from the end of a disk's activity to its next request.
    gaps: VecDeque<u64>,
    /// When the disk last went idle, if it has not had a request since.
    idle_since_ms: Option<u64>,
    /// Spin-ups in the last 24 hours.
    spin_ups: VecDeque<u64>,
    /// The most spin-ups seen in any 24 hours.
    spin_ups_per_day_peak: usize,
}

/// Per-disk idle timeouts and the wear budget.
#[derive(Clone, Debug)]
pub struct IdleTimeouts {
    config: IdleConfig,
    costs: DiskCosts,
    per_day: u32,
    disks: Vec<DiskHistory>,
}

impl IdleTimeouts {
    /// Timeouts for `n_disks` disks of the given costs.
    pub fn new(config: IdleConfig, costs: DiskCosts, n_disks: usize) -> IdleTimeouts {
        IdleTimeouts {
            per_day: config.spinups_per_day(),
            config,
            costs,
            disks: vec![DiskHistory::default(); n_disks],
        }
    }

    /// One more disk (a grid grown by a disk), numbered after the others, with no history.
    pub fn add_disk(&mut self) {
        self.disks.push(DiskHistory::default());
    }

    /// The settings.
    pub fn config(&self) -> &IdleConfig {
        &self.config
    }

    /// The wear budget, spin-ups per disk per day.
    pub fn spinups_per_day(&self) -> u32 {
        self.per_day
    }

    /// A request for `disk` arrived at `now_ms`.
    pub fn request(&mut self, disk: usize, now_ms: u64) {
        let h = &mut self.disks[disk];
        if let Some(since) = h.idle_since_ms.take() {
            if h.gaps.len() == self.config.gaps_remembered.max(1) {
                h.gaps.pop_front();
            }
            h.gaps.push_back(now_ms.saturating_sub(since));
        }
    }

    /// `disk` started spinning up at `now_ms`.
    pub fn spun_up(&mut self, disk: usize, now_ms: u64) {
        let h = &mut self.disks[disk];
        while h
            .spin_ups
            .front()
            .is_some_and(|&t| t.saturating_add(DAY_MS) <= now_ms)
        {
            h.spin_ups.pop_front();
        }
        h.spin_ups.push_back(now_ms);
        h.spin_ups_per_day_peak = h.spin_ups_per_day_peak.max(h.spin_ups.len());
    }

    /// The most spin-ups `disk` made in any 24 hours.
    pub fn spin_ups_per_day_peak(&self, disk: usize) -> usize {
        self.disks[disk].spin_ups_per_day_peak
    }

    /// `disk` went idle at `now_ms` (its next request ends a gap): the idle
    /// timeout to give it now. A caller whose disks start the idle period as
    /// the last I/O ends sets [`IdleTimeouts::timeout_ms`] before that.
    pub fn went_idle(&mut self, disk: usize, now_ms: u64) -> u64 {
        self.disks[disk].idle_since_ms = Some(now_ms);
        self.timeout_ms(disk, now_ms)
    }

    /// The idle timeout of `disk` for an idle period starting at `now_ms`.
    pub fn timeout_ms(&self, disk: usize, now_ms: u64) -> u64 {
        let h = &self.disks[disk];
        let in_window = h
            .spin_ups
            .iter()
            .filter(|&&t| t.saturating_add(DAY_MS) > now_ms)
            .count();
        let adapted = if self.config.adaptive && !h.gaps.is_empty() {
            self.cheapest(h)
        } else {
            self.costs.default_timeout_ms
        };
        if self.config.enforce_wear_budget && in_window >= self.per_day as usize {
            // The wear budget is spent: stay up until the oldest spin-up of
            // the window is a day old.
            let oldest = h
                .spin_ups
                .iter()
                .copied()
                .find(|&t| t.saturating_add(DAY_MS) > now_ms)
                .expect("a spin-up in the window");
            let until = oldest.saturating_add(DAY_MS).saturating_sub(now_ms);
            return adapted.max(until);
        }
        adapted
    }

    /// The timeout, among the profile's and the recent gaps (within the
    /// minimum and the maximum), that would have cost least over the recent gaps.
    fn cheapest(&self, h: &DiskHistory) -> u64 {
        let p = self.costs.watts_idle / 1_000.0; // J per ms
        let cycle = self.costs.spin_up_joules + self.config.spin_up_wear_joules;
        let (min, max) = (
            self.config.timeout_min_ms,
            self.config.timeout_max_ms.max(self.config.timeout_min_ms),
        );
        let mut candidates: Vec<u64> = h.gaps.iter().map(|&g| g.clamp(min, max)).collect();
        candidates.push(self.costs.default_timeout_ms.clamp(min, max));
        let mut best = (f64::INFINITY, self.costs.default_timeout_ms);
        for &t in &candidates {
            let cost: f64 = h
                .gaps
                .iter()
                .map(|&g| {
                    if g <= t {
                        p * g as f64
                    } else {
                        p * t as f64 + cycle
                    }
                })
                .sum();
            if cost < best.0 || (cost == best.0 && t < best.1) {
                best = (cost, t);
            }
        }
        best.1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60_000;

    fn costs() -> DiskCosts {
        DiskCosts {
            default_timeout_ms: 50_000,
            watts_idle: 5.23,
            spin_up_joules: 240.0,
        }
    }

    fn timeouts(config: IdleConfig) -> IdleTimeouts {
        IdleTimeouts::new(config, costs(), 2)
    }

    #[test]
    fn break_even_is_a_spin_ups_energy_spent_idling() {
        assert_eq!(costs().break_even_ms(0.0), 45_889);
        assert_eq!(costs().break_even_ms(240.0), 91_778);
    }

    #[test]
    fn with_a_price_on_wear_a_disk_asked_every_few_minutes_stays_up_between() {
        let run = |wear: f64| {
            let mut t = timeouts(IdleConfig {
                spin_up_wear_joules: wear,
                ..IdleConfig::default()
            });
            let mut now = 0;
            for _ in 0..10 {
                t.went_idle(0, now);
                now += 3 * MIN;
                t.request(0, now);
                t.went_idle(1, now);
                t.request(1, now + 600 * MIN);
            }
            (t.timeout_ms(0, now), t.timeout_ms(1, now))
        };
        // Idling 3 min costs 941 J: more than a spin-up's 240 J, less than a
        // spin-up and 1,200 J of wear.
        assert_eq!(run(0.0), (50_000, 50_000));
        assert_eq!(run(1_200.0), (3 * MIN, 50_000), "gaps of 10 h: off early");
    }

    #[test]
    fn the_cheapest_timeout_is_chosen_over_recent_gaps() {
        let mut t = timeouts(IdleConfig {
            spin_up_wear_joules: 0.0,
            ..IdleConfig::default()
        });
        // Nine gaps of 30 s and one of 10 h: staying up 30 s saves nine
        // spin-ups; staying up 10 h would cost far more.
        for i in 0..10u64 {
            t.went_idle(0, i * 100 * MIN);
            let gap = if i == 0 { 600 * MIN } else { 30_000 };
            t.request(0, i * 100 * MIN + gap);
        }
        assert_eq!(t.timeout_ms(0, 0), 30_000);
        let fixed = timeouts(IdleConfig {
            adaptive: false,
            ..IdleConfig::default()
        });
        assert_eq!(fixed.timeout_ms(0, 0), 50_000);
    }

    #[test]
    fn a_disk_that_spent_its_wear_budget_stays_up_until_the_day_is_over() {
        let mut t = timeouts(IdleConfig {
            spinups_per_day_max: Some(3),
            enforce_wear_budget: true,
            adaptive: false,
            ..IdleConfig::default()
        });
        assert_eq!(t.spinups_per_day(), 3);
        t.spun_up(0, 1_000);
        t.spun_up(0, 2_000);
        assert_eq!(t.went_idle(0, 3_000), 50_000);
        t.spun_up(0, 10_000);
        assert_eq!(
            t.went_idle(0, 20_000),
            DAY_MS + 1_000 - 20_000,
            "three in a day: up until the first is a day old"
        );
        assert_eq!(t.timeout_ms(0, DAY_MS + 1_000), 50_000);
        assert_eq!(t.spin_ups_per_day_peak(0), 3);
        assert_eq!(IdleConfig::default().spinups_per_day(), 27);
        let mut free = timeouts(IdleConfig {
            spinups_per_day_max: Some(3),
            enforce_wear_budget: false,
            adaptive: false,
            ..IdleConfig::default()
        });
        for t in 0..5 {
            free.spun_up(0, t);
        }
        assert_eq!(free.went_idle(0, 10), 50_000, "not enforced: the profile's");
    }
}
