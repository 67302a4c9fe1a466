//! The cache study of the LoneStar thesis §2.7 as a library: replay a workload trace against
//! byte-capacity caches of variable-size objects under LRU, MRU, FIFO, RANDOM, ARC and Bélády,
//! as one combined cache or one cache per size class (thesis Table 2.1), and report request and
//! byte hit ratios over a sweep of capacities after a warm-up period.
//!
//! Semantics follow the thesis's simulator: every `GET` of an absent object is a miss and loads
//! it; every `PUT` loads the new version; `DEL` drops; `RENAME` moves the cached object. Only
//! `GET`s after the warm-up count. Bélády needs next-read times: taken from the trace when every
//! record has one, else computed in one forward pass ([`fill_next_access`]).
//!
//! Guarantees: a cache never holds more bytes than its capacity (objects larger than the cache
//! pass by); runs are deterministic (RANDOM from its seed); results do not depend on the number
//! of threads. Memory: the trace is held compactly (32 bytes per request) plus, per running
//! cache, a few bytes per distinct object.

#![forbid(unsafe_code)]

pub mod cli;
mod lists;
mod policy;
mod sim;
mod trace;

pub use policy::{new_cache, ArcCache, Cache, Policy, NEVER};
pub use sim::{class_capacities, simulate, HitCounts, Layout, RunResult};
pub use trace::{fill_next_access, CompactTrace, Request};

use serde::Serialize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// What to sweep.
#[derive(Clone, Debug)]
pub struct SweepOptions {
    /// Policies to run.
    pub policies: Vec<Policy>,
    /// Total cache capacities, bytes.
    pub capacities_bytes: Vec<u64>,
    /// Also run one cache per size class (besides the combined cache).
    pub by_size_class: bool,
    /// RANDOM is run with this many seeds and averaged (≥ 1).
    pub random_seeds: u64,
    /// Worker threads (≥ 1).
    pub threads: usize,
}

/// One point of the sweep: a policy, a layout and a capacity, summed over RANDOM's seeds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SweepPoint {
    /// The policy.
    pub policy: Policy,
    /// Combined or per size class.
    pub layout: Layout,
    /// Total capacity, bytes.
    pub capacity_bytes: u64,
    /// Number of runs summed (seeds for RANDOM, else 1); ratios of the sums are the means.
    pub runs: u64,
    /// Per size class of the GETs.
    pub by_class: [HitCounts; 6],
    /// All GETs.
    pub total: HitCounts,
}

/// Runs every (policy, layout, capacity[, seed]) over `trace` on `options.threads` threads.
/// `on_progress` receives the number of requests simulated since its last call.
pub fn sweep(
    trace: &CompactTrace,
    options: &SweepOptions,
    on_progress: &(dyn Fn(u64) + Sync),
) -> Vec<SweepPoint> {
    let mut layouts = vec![Layout::Combined];
    if options.by_size_class {
        layouts.push(Layout::BySizeClass);
    }
    let mut jobs = Vec::new();
    for &policy in &options.policies {
        for &layout in &layouts {
            for &capacity in &options.capacities_bytes {
                let seeds = if policy == Policy::Random {
                    options.random_seeds.max(1)
                } else {
                    1
                };
                for seed in 0..seeds {
                    jobs.push((policy, layout, capacity, seed));
                }
            }
        }
    }
    let next_job = AtomicUsize::new(0);
    let results = Mutex::new(Vec::with_capacity(jobs.len()));
    std::thread::scope(|scope| {
        for _ in 0..options.threads.max(1) {
            scope.spawn(|| loop {
                let job = next_job.fetch_add(1, Ordering::Relaxed);
                let Some(&(policy, layout, capacity, seed)) = jobs.get(job) else {
                    break;
                };
                let result = simulate(trace, policy, layout, capacity, seed, on_progress);
                results
                    .lock()
                    .expect("no worker panics while holding the lock")
                    .push(result);
            });
        }
    });
    let mut results = results.into_inner().expect("workers finished");
    results.sort_by_key(|r| (r.policy, r.layout, r.capacity_bytes, r.seed));
    let mut points: Vec<SweepPoint> = Vec::new();
    for result in results {
        match points.last_mut() {
            Some(point)
                if (point.policy, point.layout, point.capacity_bytes)
                    == (result.policy, result.layout, result.capacity_bytes) =>
            {
                point.runs += 1;
                for (sum, counts) in point.by_class.iter_mut().zip(result.by_class.iter()) {
                    add_counts(sum, counts);
                }
                add_counts(&mut point.total, &result.total);
            }
            _ => points.push(SweepPoint {
                policy: result.policy,
                layout: result.layout,
                capacity_bytes: result.capacity_bytes,
                runs: 1,
                by_class: result.by_class,
                total: result.total,
            }),
        }
    }
    points
}

fn add_counts(sum: &mut HitCounts, counts: &HitCounts) {
    sum.gets += counts.gets;
    sum.hits += counts.hits;
    sum.get_bytes += counts.get_bytes;
    sum.hit_bytes += counts.hit_bytes;
}
