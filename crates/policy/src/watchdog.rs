//! The watchdog policy: when cached data is persisted to a disk, and when an
//! off disk is started to take it.
//!
//! Source: thesis §4.4.4 (l. 1266–1271 of `seeds/001_*.txt`) and §5.3.3.
//! A *target* is a disk with data outstanding for it in the cache: a data disk
//! with placed-but-unpersisted objects, or (in delayed write mode) a parity
//! disk with pending parity deltas. Every `interval_ms` the caller takes a
//! snapshot ([`CacheView`]) and asks [`WatchdogPolicy::decide`]; each
//! [`PersistAction`] starts one persist (a *Cache2Disk* task) that runs until
//! the target has nothing outstanding.
//!
//! Rules, in the order they are checked for each target that is not already
//! persisting and has outstanding bytes (all thresholds in [`WatchdogConfig`]):
//!
//! 1. **Age** — its oldest outstanding byte has waited longer than
//!    `max_age_ms` (one hour): persist, starting the disk if it is off; or
//!    the disk is spinning anyway and it has waited longer than
//!    `persist_spinning_after_ms` (180 s): persist, which costs no spin-up.
//!    (The thesis starts an off disk after 180 s. Replaying the ECFS trace,
//!    that age alone made about 260,000 spin-ups in 305 days on 48 disks, 18
//!    per disk per day, over the wear of drives rated for 50,000 start/stop
//!    cycles in five years; an hour halves them: `docs/energy.md`. Data waits
//!    longer in the cache, which is durable but holds one copy.)
//! 2. **Off and large** — more than `start_off_disk_above_bytes` (5 GiB)
//!    outstanding: persist, starting the disk.
//! 3. **Spinning** — the disk is spinning and more than
//!    `persist_spinning_above_bytes` (512 MiB) is outstanding: persist.
//! 4. **Cache pressure** — at least `pressure_fill_percent` (80 %) of the
//!    cache holds data that cannot be evicted, or writers wait for room that
//!    evicting did not free: every target with more than
//!    `persist_under_pressure_above_bytes` (512 MiB) persists, on or off.
//!    Persisted copies kept in the cache for reads do not count: they are
//!    evicted (least recently used first) when room is needed, so a cache full
//!    of them has room for writes and needs no persist. (Counting them, as the
//!    cache's plain fill, kept a cache that had filled once under pressure for
//!    good, and rules 4 and 5 woke disks all the time: `docs/energy.md`.)
//! 5. **Progress under pressure** (permafrost's addition) — under pressure, if
//!    rules 1–4 chose nothing and nothing is persisting, the target with the
//!    most outstanding bytes persists, so a cache full of many small
//!    outstanding amounts still drains instead of blocking writers forever.

use serde::{Deserialize, Serialize};

/// Thresholds of the watchdog. Defaults are the thesis's values; sizes are
/// binary (MiB, GiB).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WatchdogConfig {
    /// How often the watchdog runs.
    pub interval_ms: u64,
    /// Rule 1: persist data that has waited longer than this, starting its disk if it is off.
    pub max_age_ms: u64,
    /// Rule 1: persist data that has waited longer than this when its disk is spinning anyway.
    pub persist_spinning_after_ms: u64,
    /// Rule 2: start an off disk with more than this outstanding.
    pub start_off_disk_above_bytes: u64,
    /// Rule 3: a spinning disk persists once more than this is outstanding.
    pub persist_spinning_above_bytes: u64,
    /// Rule 4: cache fill (percent of capacity) at which pressure starts.
    pub pressure_fill_percent: f64,
    /// Rule 4: under pressure, persist every target with more than this outstanding.
    pub persist_under_pressure_above_bytes: u64,
}

impl Default for WatchdogConfig {
    fn default() -> Self {
        WatchdogConfig {
            interval_ms: 1_000,
            max_age_ms: 3_600_000,
            persist_spinning_after_ms: 180_000,
            start_off_disk_above_bytes: 5 << 30,
            persist_spinning_above_bytes: 512 << 20,
            pressure_fill_percent: 80.0,
            persist_under_pressure_above_bytes: 512 << 20,
        }
    }
}

/// What the watchdog sees of one target disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetView {
    /// The disk (caller's numbering, e.g. the grid disk index).
    pub disk: usize,
    /// True while the disk is spinning up, idle or active (not off).
    pub spinning: bool,
    /// Bytes in the cache waiting to be written to this disk.
    pub outstanding_bytes: u64,
    /// When the oldest of those bytes entered the cache (caller's clock, ms).
    pub oldest_outstanding_ms: Option<u64>,
    /// A persist of this target is already running.
    pub persisting: bool,
}

/// A snapshot of the cache for one watchdog run.
#[derive(Clone, Copy, Debug)]
pub struct CacheView<'a> {
    /// Capacity of the cache.
    pub capacity_bytes: u64,
    /// Bytes the cache holds now (outstanding and persisted-but-cached data).
    pub used_bytes: u64,
    /// Of `used_bytes`, what can be evicted when room is needed: persisted
    /// copies not pinned in the cache.
    pub evictable_bytes: u64,
    /// Writers wait for room that evicting did not free.
    pub writers_waiting: bool,
    /// Targets with data outstanding; others may be omitted.
    pub targets: &'a [TargetView],
}

/// Which rule fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PersistReason {
    /// Rule 1: data waited longer than `max_age_ms`.
    Age,
    /// Rule 2: an off disk has more than `start_off_disk_above_bytes` outstanding.
    OffDiskLarge,
    /// Rule 3: a spinning disk has more than `persist_spinning_above_bytes` outstanding.
    SpinningDisk,
    /// Rule 4: the cache is under pressure.
    CachePressure,
    /// Rule 5: the cache is under pressure and this is the largest target.
    CacheProgress,
}

/// Start persisting everything outstanding for `disk`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PersistAction {
    /// The target disk.
    pub disk: usize,
    /// The disk is off: the persist starts it.
    pub spin_up: bool,
    /// Why.
    pub reason: PersistReason,
}

/// The watchdog policy: pure, configured once.
#[derive(Clone, Debug, Default)]
pub struct WatchdogPolicy {
    config: WatchdogConfig,
}

impl WatchdogPolicy {
    /// A policy with the given thresholds.
    pub fn new(config: WatchdogConfig) -> Self {
        WatchdogPolicy { config }
    }

    /// The thresholds.
    pub fn config(&self) -> &WatchdogConfig {
        &self.config
    }

    /// Whether the data that cannot be evicted fills the cache to the pressure
    /// threshold or beyond.
    pub fn under_pressure(&self, view: &CacheView<'_>) -> bool {
        let kept = view.used_bytes.saturating_sub(view.evictable_bytes);
        view.capacity_bytes == 0
            || view.writers_waiting
            || kept as f64 >= view.capacity_bytes as f64 * self.config.pressure_fill_percent / 100.0
    }

    /// The persists to start now, at most one per target, in the order of
    /// `view.targets`. Targets already persisting or with nothing outstanding
    /// are never chosen.
    pub fn decide(&self, now_ms: u64, view: &CacheView<'_>) -> Vec<PersistAction> {
        let c = &self.config;
        let pressure = self.under_pressure(view);
        let mut actions = Vec::new();
        for t in view
            .targets
            .iter()
            .filter(|t| !t.persisting && t.outstanding_bytes > 0)
        {
            let age_max = self.age_max_ms(t);
            let aged = t
                .oldest_outstanding_ms
                .is_some_and(|since| now_ms.saturating_sub(since) > age_max);
            let reason = if aged {
                Some(PersistReason::Age)
            } else if !t.spinning && t.outstanding_bytes > c.start_off_disk_above_bytes {
                Some(PersistReason::OffDiskLarge)
            } else if t.spinning && t.outstanding_bytes > c.persist_spinning_above_bytes {
                Some(PersistReason::SpinningDisk)
            } else if pressure && t.outstanding_bytes > c.persist_under_pressure_above_bytes {
                Some(PersistReason::CachePressure)
            } else {
                None
            };
            if let Some(reason) = reason {
                actions.push(PersistAction {
                    disk: t.disk,
                    spin_up: !t.spinning,
                    reason,
                });
            }
        }
        let any_persisting = view.targets.iter().any(|t| t.persisting);
        if pressure && actions.is_empty() && !any_persisting {
            let largest = view
                .targets
                .iter()
                .filter(|t| t.outstanding_bytes > 0)
                .max_by_key(|t| (t.outstanding_bytes, std::cmp::Reverse(t.disk)));
            if let Some(t) = largest {
                actions.push(PersistAction {
                    disk: t.disk,
                    spin_up: !t.spinning,
                    reason: PersistReason::CacheProgress,
                });
            }
        }
        actions
    }

    /// The earliest time at which rule 1 will fire for a target that is not
    /// persisting, if any: a caller on simulated time can sleep until then
    /// instead of ticking every `interval_ms` (the other rules only change
    /// when the view does).
    pub fn next_deadline_ms(&self, view: &CacheView<'_>) -> Option<u64> {
        view.targets
            .iter()
            .filter(|t| !t.persisting && t.outstanding_bytes > 0)
            .filter_map(|t| {
                let since = t.oldest_outstanding_ms?;
                Some(since.saturating_add(self.age_max_ms(t)).saturating_add(1))
            })
            .min()
    }

    /// How long a target's data may wait before rule 1 persists it: `max_age_ms`, or
    /// `persist_spinning_after_ms` if that is shorter and the disk is spinning.
    fn age_max_ms(&self, t: &TargetView) -> u64 {
        if t.spinning {
            self.config
                .max_age_ms
                .min(self.config.persist_spinning_after_ms)
        } else {
            self.config.max_age_ms
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn target(disk: usize, spinning: bool, outstanding_bytes: u64, since_ms: u64) -> TargetView {
        TargetView {
            disk,
            spinning,
            outstanding_bytes,
            oldest_outstanding_ms: Some(since_ms),
            persisting: false,
        }
    }

    fn decide(
        now_ms: u64,
        used_percent: u64,
        targets: &[TargetView],
    ) -> Vec<(usize, PersistReason, bool)> {
        let view = CacheView {
            capacity_bytes: 100 * GIB,
            used_bytes: used_percent * GIB,
            evictable_bytes: 0,
            writers_waiting: false,
            targets,
        };
        WatchdogPolicy::default()
            .decide(now_ms, &view)
            .into_iter()
            .map(|a| (a.disk, a.reason, a.spin_up))
            .collect()
    }

    #[test]
    fn off_disk_starts_when_its_data_is_older_than_an_hour() {
        let t = [target(3, false, MIB, 1_000)];
        assert!(
            decide(3_601_000, 10, &t).is_empty(),
            "exactly an hour is not older"
        );
        assert_eq!(
            decide(3_601_001, 10, &t),
            vec![(3, PersistReason::Age, true)]
        );
    }

    #[test]
    fn spinning_disk_persists_data_older_than_180_s() {
        let t = [target(3, true, MIB, 1_000)];
        assert!(decide(181_000, 10, &t).is_empty());
        assert_eq!(
            decide(181_001, 10, &t),
            vec![(3, PersistReason::Age, false)]
        );
        let off = [target(3, false, MIB, 1_000)];
        assert!(
            decide(181_001, 10, &off).is_empty(),
            "an off disk is not started for it"
        );
    }

    #[test]
    fn off_disk_starts_above_5_gib_outstanding() {
        assert!(decide(10, 10, &[target(1, false, 5 * GIB, 0)]).is_empty());
        assert_eq!(
            decide(10, 10, &[target(1, false, 5 * GIB + 1, 0)]),
            vec![(1, PersistReason::OffDiskLarge, true)]
        );
    }

    #[test]
    fn spinning_disk_persists_above_512_mib_but_off_disk_waits() {
        assert!(decide(10, 10, &[target(1, true, 512 * MIB, 0)]).is_empty());
        assert_eq!(
            decide(10, 10, &[target(1, true, 513 * MIB, 0)]),
            vec![(1, PersistReason::SpinningDisk, false)]
        );
        assert!(decide(10, 10, &[target(1, false, 513 * MIB, 0)]).is_empty());
    }

    #[test]
    fn a_cache_full_of_evictable_copies_is_not_under_pressure() {
        let t = [target(0, false, 600 * MIB, 0)];
        let view = |used: u64, evictable: u64| CacheView {
            capacity_bytes: 100 * GIB,
            used_bytes: used * GIB,
            evictable_bytes: evictable * GIB,
            writers_waiting: false,
            targets: &t,
        };
        let policy = WatchdogPolicy::default();
        assert!(policy.decide(10, &view(100, 21)).is_empty());
        assert!(!policy.under_pressure(&view(100, 21)));
        assert_eq!(
            policy.decide(10, &view(100, 20)),
            vec![PersistAction {
                disk: 0,
                spin_up: true,
                reason: PersistReason::CachePressure
            }]
        );
    }

    #[test]
    fn writers_waiting_for_room_put_the_cache_under_pressure_whatever_its_fill() {
        let t = [target(0, false, 600 * MIB, 0)];
        let view = |writers_waiting| CacheView {
            capacity_bytes: 100 * GIB,
            used_bytes: 10 * GIB,
            evictable_bytes: 0,
            writers_waiting,
            targets: &t,
        };
        let policy = WatchdogPolicy::default();
        assert!(policy.decide(10, &view(false)).is_empty());
        assert_eq!(
            policy.decide(10, &view(true)),
            vec![PersistAction {
                disk: 0,
                spin_up: true,
                reason: PersistReason::CachePressure
            }]
        );
    }

    #[test]
    fn cache_80_percent_full_persists_everything_above_512_mib() {
        let t = [
            target(0, false, 600 * MIB, 0),
            target(1, false, 100 * MIB, 0),
            target(2, true, 513 * MIB, 0),
        ];
        assert!(decide(10, 79, &t[..2]).is_empty());
        assert_eq!(
            decide(10, 80, &t),
            vec![
                (0, PersistReason::CachePressure, true),
                (2, PersistReason::SpinningDisk, false)
            ]
        );
    }

    #[test]
    fn pressure_with_only_small_targets_still_drains_the_largest() {
        let t = [
            target(0, false, 10 * MIB, 0),
            target(1, false, 300 * MIB, 0),
            target(2, false, 20 * MIB, 0),
        ];
        assert_eq!(
            decide(10, 95, &t),
            vec![(1, PersistReason::CacheProgress, true)]
        );
        let mut busy = t;
        busy[0].persisting = true;
        assert!(
            decide(10, 95, &busy).is_empty(),
            "a running persist is progress already"
        );
    }

    #[test]
    fn persisting_or_empty_targets_are_never_chosen_again() {
        let mut t = target(0, true, 6 * GIB, 0);
        t.persisting = true;
        let empty = TargetView {
            outstanding_bytes: 0,
            ..target(1, false, 0, 0)
        };
        assert!(decide(1_000_000, 99, &[t, empty]).is_empty());
    }

    #[test]
    fn next_deadline_is_when_the_oldest_data_turns_too_old() {
        let policy = WatchdogPolicy::default();
        let mut t = [target(0, true, MIB, 5_000), target(1, true, MIB, 2_000)];
        let view = CacheView {
            capacity_bytes: GIB,
            used_bytes: 0,
            evictable_bytes: 0,
            writers_waiting: false,
            targets: &t,
        };
        let deadline = policy.next_deadline_ms(&view).unwrap();
        assert_eq!(deadline, 182_001);
        assert!(policy.decide(deadline - 1, &view).is_empty());
        assert_eq!(policy.decide(deadline, &view).len(), 1);
        t[1].persisting = true;
        let view = CacheView {
            capacity_bytes: GIB,
            used_bytes: 0,
            evictable_bytes: 0,
            writers_waiting: false,
            targets: &t,
        };
        assert_eq!(policy.next_deadline_ms(&view), Some(185_001));
        t[0].spinning = false;
        let view = CacheView {
            capacity_bytes: GIB,
            used_bytes: 0,
            evictable_bytes: 0,
            writers_waiting: false,
            targets: &t,
        };
        assert_eq!(
            policy.next_deadline_ms(&view),
            Some(3_605_001),
            "an off disk's data waits an hour"
        );
    }

    #[test]
    fn thresholds_are_configurable_with_units_in_their_names() {
        let config: WatchdogConfig =
            serde_json::from_str(r#"{"max_age_ms": 10, "persist_spinning_above_bytes": 1}"#)
                .unwrap();
        assert_eq!(
            config.start_off_disk_above_bytes,
            5 * GIB,
            "unset fields keep the thesis's defaults"
        );
        let policy = WatchdogPolicy::new(config);
        let t = [target(0, true, 2, 100)];
        let view = CacheView {
            capacity_bytes: GIB,
            used_bytes: 0,
            evictable_bytes: 0,
            writers_waiting: false,
            targets: &t,
        };
        assert_eq!(
            policy.decide(105, &view)[0].reason,
            PersistReason::SpinningDisk
        );
        assert_eq!(policy.decide(111, &view)[0].reason, PersistReason::Age);
        assert!(serde_json::from_str::<WatchdogConfig>(r#"{"max_age": 10}"#).is_err());
    }
}
