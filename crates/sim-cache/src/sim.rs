//! Running caches over a compact trace: one combined cache, or one cache per size class.

use crate::policy::{new_cache, Cache, Policy};
use crate::trace::CompactTrace;
use permafrost_trace::{Op, SizeClass};
use serde::Serialize;

/// Hits and requests of one group of GETs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct HitCounts {
    /// GETs counted (after warm-up).
    pub gets: u64,
    /// Of them, hits.
    pub hits: u64,
    /// Bytes of the counted GETs.
    pub get_bytes: u64,
    /// Bytes of the hits.
    pub hit_bytes: u64,
}

impl HitCounts {
    /// Hits / GETs (0 without GETs).
    pub fn request_hit_ratio(&self) -> f64 {
        if self.gets == 0 {
            0.0
        } else {
            self.hits as f64 / self.gets as f64
        }
    }

    /// Hit bytes / GET bytes (0 without bytes).
    pub fn byte_hit_ratio(&self) -> f64 {
        if self.get_bytes == 0 {
            0.0
        } else {
            self.hit_bytes as f64 / self.get_bytes as f64
        }
    }

    fn add(&mut self, other: &HitCounts) {
        self.gets += other.gets;
        self.hits += other.hits;
        self.get_bytes += other.get_bytes;
        self.hit_bytes += other.hit_bytes;
    }
}

/// How the capacity is organised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// One cache for all objects.
    Combined,
    /// One cache per size class, the capacity split in proportion to each class's footprint
    /// (summed size of its distinct objects).
    BySizeClass,
}

/// The result of one simulation.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunResult {
    /// The policy.
    pub policy: Policy,
    /// The layout.
    pub layout: Layout,
    /// Total capacity in bytes.
    pub capacity_bytes: u64,
    /// Seed (RANDOM only; other policies ignore it).
    pub seed: u64,
    /// Per size class (by the size of each GET), smallest first.
    pub by_class: [HitCounts; 6],
    /// All classes.
    pub total: HitCounts,
}

/// The capacities of the six class caches for a total of `capacity_bytes`: in proportion to
/// each class's footprint (each at least 1 byte if the class has objects).
pub fn class_capacities(trace: &CompactTrace, capacity_bytes: u64) -> [u64; 6] {
    let total = trace.footprint_total_bytes().max(1) as f64;
    let mut capacities = [0u64; 6];
    for (capacity, footprint) in capacities.iter_mut().zip(trace.footprint_bytes) {
        *capacity = (capacity_bytes as f64 * footprint as f64 / total) as u64;
    }
    capacities
}

/// Runs `policy` over `trace` with `capacity_bytes` in `layout`. `on_progress` is called with the
/// number of requests done every 2^20 requests.
pub fn simulate(
    trace: &CompactTrace,
    policy: Policy,
    layout: Layout,
    capacity_bytes: u64,
    seed: u64,
    mut on_progress: impl FnMut(u64),
) -> RunResult {
    let mut caches: Vec<Box<dyn Cache>> = match layout {
        Layout::Combined => vec![new_cache(policy, capacity_bytes, trace.objects, seed)],
        Layout::BySizeClass => class_capacities(trace, capacity_bytes)
            .iter()
            .enumerate()
            .map(|(class, capacity)| {
                new_cache(
                    policy,
                    *capacity,
                    trace.objects,
                    seed.wrapping_add(class as u64),
                )
            })
            .collect(),
    };
    let by_class_layout = layout == Layout::BySizeClass;
    // Which class cache may hold each object (its class at its last GET/PUT).
    let mut home: Vec<u8> = if by_class_layout {
        vec![0; trace.objects]
    } else {
        Vec::new()
    };
    let mut by_class = [HitCounts::default(); 6];
    const PROGRESS_STEP: usize = 1 << 20;
    for (index, request) in trace.requests.iter().enumerate() {
        if index % PROGRESS_STEP == PROGRESS_STEP - 1 {
            on_progress(PROGRESS_STEP as u64);
        }
        let object = request.object as usize;
        let class = SizeClass::of(request.size_bytes).index();
        let cache_index = if by_class_layout {
            match request.op {
                Op::Get | Op::Put => {
                    let old = home[object] as usize;
                    if old != class {
                        caches[old].remove(request.object);
                        home[object] = class as u8;
                    }
                    class
                }
                Op::Del | Op::Rename => home[object] as usize,
            }
        } else {
            0
        };
        let cache = &mut caches[cache_index];
        match request.op {
            Op::Get => {
                let hit = cache.get(request.object, request.size_bytes, request.next_ms);
                if index >= trace.warmup_requests {
                    let counts = &mut by_class[class];
                    counts.gets += 1;
                    counts.get_bytes += request.size_bytes;
                    if hit {
                        counts.hits += 1;
                        counts.hit_bytes += request.size_bytes;
                    }
                }
            }
            Op::Put => cache.put(request.object, request.size_bytes, request.next_ms),
            Op::Del => cache.remove(request.object),
            Op::Rename => {
                if by_class_layout {
                    let target_home = home[request.target as usize] as usize;
                    if target_home != cache_index {
                        caches[target_home].remove(request.target);
                    }
                    home[request.target as usize] = cache_index as u8;
                }
                caches[cache_index].rename(request.object, request.target, request.next_ms);
            }
        }
    }
    on_progress((trace.requests.len() % PROGRESS_STEP) as u64);
    let mut total = HitCounts::default();
    for counts in &by_class {
        total.add(counts);
    }
    RunResult {
        policy,
        layout,
        capacity_bytes,
        seed,
        by_class,
        total,
    }
}
