//! The replacement policies of thesis §2.7 as byte-capacity caches of variable-size objects.
//!
//! Common rules (the thesis simulator's): a `GET` of an absent object is a miss and loads the
//! object; a `PUT` always loads the new version (dropping an old one); `DEL` drops the object;
//! `RENAME` moves a cached object to its new name, keeping its place. An object larger than the
//! whole cache is never loaded (it passes by). Objects are dense numbers `0..objects`.

use crate::lists::Lists;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeSet;

/// `next_ms` value meaning "never read again".
pub const NEVER: u64 = u64::MAX;

/// A replacement policy.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum, serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Evict the least recently used object.
    Lru,
    /// Evict the most recently used object.
    Mru,
    /// Evict in order of loading; hits do not count.
    Fifo,
    /// Evict a uniformly random object.
    Random,
    /// Adaptive Replacement Cache (Megiddo & Modha), size-aware (see [`ArcCache`]).
    Arc,
    /// Evict the object whose next read is furthest in the future (needs next-access times).
    Belady,
}

impl Policy {
    /// All policies, in the order the thesis lists them.
    pub const ALL: [Policy; 6] = [
        Policy::Lru,
        Policy::Mru,
        Policy::Fifo,
        Policy::Random,
        Policy::Arc,
        Policy::Belady,
    ];

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Lru => "lru",
            Policy::Mru => "mru",
            Policy::Fifo => "fifo",
            Policy::Random => "random",
            Policy::Arc => "arc",
            Policy::Belady => "belady",
        }
    }
}

/// A cache of whole objects with a capacity in bytes.
pub trait Cache: Send {
    /// A read: `true` on a hit. On a miss the object is loaded (unless larger than the cache).
    /// `next_ms` is when the object is next read ([`NEVER`] if not); only Bélády uses it.
    fn get(&mut self, object: u32, size_bytes: u64, next_ms: u64) -> bool;
    /// A write: the new version is loaded, an old one dropped.
    fn put(&mut self, object: u32, size_bytes: u64, next_ms: u64);
    /// Drops the object if cached.
    fn remove(&mut self, object: u32);
    /// Renames `from` to `to` (a cached `to` is dropped first).
    fn rename(&mut self, from: u32, to: u32, next_ms: u64);
    /// Bytes held.
    fn used_bytes(&self) -> u64;
    /// Whether `object` is cached.
    fn contains(&self, object: u32) -> bool;
}

/// A new, empty cache of `policy` for objects `0..objects`; `seed` drives RANDOM.
pub fn new_cache(policy: Policy, capacity_bytes: u64, objects: usize, seed: u64) -> Box<dyn Cache> {
    match policy {
        Policy::Lru => Box::new(QueueCache::new(QueueKind::Lru, capacity_bytes, objects)),
        Policy::Mru => Box::new(QueueCache::new(QueueKind::Mru, capacity_bytes, objects)),
        Policy::Fifo => Box::new(QueueCache::new(QueueKind::Fifo, capacity_bytes, objects)),
        Policy::Random => Box::new(RandomCache::new(capacity_bytes, objects, seed)),
        Policy::Arc => Box::new(ArcCache::new(capacity_bytes, objects)),
        Policy::Belady => Box::new(BeladyCache::new(capacity_bytes, objects)),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum QueueKind {
    Lru,
    Mru,
    Fifo,
}

/// LRU, MRU and FIFO: one list, head = most recent.
struct QueueCache {
    kind: QueueKind,
    capacity_bytes: u64,
    list: Lists<1>,
}

impl QueueCache {
    fn new(kind: QueueKind, capacity_bytes: u64, objects: usize) -> QueueCache {
        QueueCache {
            kind,
            capacity_bytes,
            list: Lists::new(objects),
        }
    }

    fn load(&mut self, object: u32, size_bytes: u64) {
        if size_bytes > self.capacity_bytes {
            return;
        }
        while self.list.bytes(0) + size_bytes > self.capacity_bytes {
            let evicted = match self.kind {
                QueueKind::Mru => self.list.pop_front(0),
                QueueKind::Lru | QueueKind::Fifo => self.list.pop_back(0),
            };
            debug_assert!(evicted.is_some(), "a non-empty cache while over capacity");
        }
        self.list.push_front(0, object, size_bytes);
    }
}

impl Cache for QueueCache {
    fn get(&mut self, object: u32, size_bytes: u64, _next_ms: u64) -> bool {
        if self.list.find(object).is_some() {
            if self.kind != QueueKind::Fifo {
                self.list.move_to_front(object, 0);
            }
            return true;
        }
        self.load(object, size_bytes);
        false
    }

    fn put(&mut self, object: u32, size_bytes: u64, _next_ms: u64) {
        self.list.remove(object);
        self.load(object, size_bytes);
    }

    fn remove(&mut self, object: u32) {
        self.list.remove(object);
    }

    fn rename(&mut self, from: u32, to: u32, _next_ms: u64) {
        self.list.remove(to);
        self.list.rename(from, to);
    }

    fn used_bytes(&self) -> u64 {
        self.list.bytes(0)
    }

    fn contains(&self, object: u32) -> bool {
        self.list.find(object).is_some()
    }
}

/// RANDOM: evicts uniformly random objects until the new one fits.
struct RandomCache {
    capacity_bytes: u64,
    used_bytes: u64,
    resident: Vec<u32>,
    /// object → position in `resident` + 1 (0 = absent).
    position: Vec<u32>,
    size_bytes: Vec<u64>,
    rng: ChaCha8Rng,
}

impl RandomCache {
    fn new(capacity_bytes: u64, objects: usize, seed: u64) -> RandomCache {
        RandomCache {
            capacity_bytes,
            used_bytes: 0,
            resident: Vec::new(),
            position: vec![0; objects],
            size_bytes: vec![0; objects],
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    fn take_out(&mut self, object: u32) -> bool {
        let position = std::mem::take(&mut self.position[object as usize]);
        if position == 0 {
            return false;
        }
        let last = self.resident.pop().expect("a resident object");
        if last != object {
            self.resident[position as usize - 1] = last;
            self.position[last as usize] = position;
        }
        self.used_bytes -= self.size_bytes[object as usize];
        true
    }

    fn load(&mut self, object: u32, size_bytes: u64) {
        if size_bytes > self.capacity_bytes {
            return;
        }
        while self.used_bytes + size_bytes > self.capacity_bytes {
            let victim = self.resident[self.rng.gen_range(0..self.resident.len())];
            self.take_out(victim);
        }
        self.resident.push(object);
        self.position[object as usize] = self.resident.len() as u32;
        self.size_bytes[object as usize] = size_bytes;
        self.used_bytes += size_bytes;
    }
}

impl Cache for RandomCache {
    fn get(&mut self, object: u32, size_bytes: u64, _next_ms: u64) -> bool {
        if self.position[object as usize] != 0 {
            return true;
        }
        self.load(object, size_bytes);
        false
    }

    fn put(&mut self, object: u32, size_bytes: u64, _next_ms: u64) {
        self.take_out(object);
        self.load(object, size_bytes);
    }

    fn remove(&mut self, object: u32) {
        self.take_out(object);
    }

    fn rename(&mut self, from: u32, to: u32, _next_ms: u64) {
        self.take_out(to);
        let position = std::mem::take(&mut self.position[from as usize]);
        if position != 0 {
            self.resident[position as usize - 1] = to;
            self.position[to as usize] = position;
            self.size_bytes[to as usize] = self.size_bytes[from as usize];
        }
    }

    fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    fn contains(&self, object: u32) -> bool {
        self.position[object as usize] != 0
    }
}

/// Bélády's algorithm for variable sizes: on overflow evict the objects read furthest in the
/// future (never-read-again first). The newly loaded object competes too, so an object whose
/// next read is further away than everything cached is not kept (it passes by). Not optimal
/// for variable sizes (that problem is NP-hard), as the thesis notes, but a near-perfect bound.
struct BeladyCache {
    capacity_bytes: u64,
    used_bytes: u64,
    /// (next read time, object) of every cached object.
    by_next: BTreeSet<(u64, u32)>,
    /// object → (next read time, size); `None` = absent.
    entry: Vec<Option<(u64, u64)>>,
}

impl BeladyCache {
    fn new(capacity_bytes: u64, objects: usize) -> BeladyCache {
        BeladyCache {
            capacity_bytes,
            used_bytes: 0,
            by_next: BTreeSet::new(),
            entry: vec![None; objects],
        }
    }

    fn take_out(&mut self, object: u32) -> Option<(u64, u64)> {
        let (next_ms, size_bytes) = self.entry[object as usize].take()?;
        self.by_next.remove(&(next_ms, object));
        self.used_bytes -= size_bytes;
        Some((next_ms, size_bytes))
    }

    fn load(&mut self, object: u32, size_bytes: u64, next_ms: u64) {
        if size_bytes > self.capacity_bytes || next_ms == NEVER {
            return;
        }
        self.entry[object as usize] = Some((next_ms, size_bytes));
        self.by_next.insert((next_ms, object));
        self.used_bytes += size_bytes;
        while self.used_bytes > self.capacity_bytes {
            let &(_, victim) = self
                .by_next
                .last()
                .expect("a cached object while over capacity");
            self.take_out(victim);
        }
    }
}

impl Cache for BeladyCache {
    fn get(&mut self, object: u32, size_bytes: u64, next_ms: u64) -> bool {
        match self.take_out(object) {
            Some((_, cached_bytes)) => {
                self.load(object, cached_bytes, next_ms);
                true
            }
            None => {
                self.load(object, size_bytes, next_ms);
                false
            }
        }
    }

    fn put(&mut self, object: u32, size_bytes: u64, next_ms: u64) {
        self.take_out(object);
        self.load(object, size_bytes, next_ms);
    }

    fn remove(&mut self, object: u32) {
        self.take_out(object);
    }

    fn rename(&mut self, from: u32, to: u32, next_ms: u64) {
        self.take_out(to);
        if let Some((_, size_bytes)) = self.take_out(from) {
            self.load(to, size_bytes, next_ms);
        }
    }

    fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    fn contains(&self, object: u32) -> bool {
        self.entry[object as usize].is_some()
    }
}

const T1: usize = 0;
const T2: usize = 1;
const B1: usize = 2;
const B2: usize = 3;

/// ARC (Megiddo & Modha, FAST 2003) with byte sizes. The original counts pages; here every
/// quantity is in bytes, with these choices:
/// - `T1`/`T2` hold cached objects seen once/at least twice recently; `B1`/`B2` are ghost lists
///   (ids and sizes only). `p` is the target size of `T1` in bytes, `0 ≤ p ≤ c`.
/// - A ghost hit in `B1` of an object of size `s` raises `p` by `s · max(1, |B2|/|B1|)` (sizes in
///   bytes); one in `B2` lowers it by `s · max(1, |B1|/|B2|)`. (The original's step is one page.)
/// - REPLACE evicts, until the new object fits, the LRU object of `T1` into `B1` while
///   `|T1| > p` (or `|T1| = p` and the miss was in `B2`, or `T2` is empty), otherwise the LRU of
///   `T2` into `B2`.
/// - Directory bounds: `|T1| + |B1| ≤ c` and `|T1| + |T2| + |B1| + |B2| ≤ 2c` (bytes), kept by
///   dropping the LRU ghosts of `B1` and `B2`; when `T1` alone fills `c`, its LRU object is
///   dropped without a ghost (case IV.A of the paper).
/// - A `PUT` is a new object: any old copy or ghost is dropped and the new version enters `T1`.
pub struct ArcCache {
    capacity_bytes: u64,
    p_bytes: u64,
    lists: Lists<4>,
}

impl ArcCache {
    /// An empty ARC of `capacity_bytes` for objects `0..objects`.
    pub fn new(capacity_bytes: u64, objects: usize) -> ArcCache {
        ArcCache {
            capacity_bytes,
            p_bytes: 0,
            lists: Lists::new(objects),
        }
    }

    /// The current target size of `T1`, in bytes (the adapted parameter `p`).
    pub fn p_bytes(&self) -> u64 {
        self.p_bytes
    }

    /// Bytes in `T1`, `T2`, `B1`, `B2`.
    pub fn list_bytes(&self) -> [u64; 4] {
        [
            self.lists.bytes(T1),
            self.lists.bytes(T2),
            self.lists.bytes(B1),
            self.lists.bytes(B2),
        ]
    }

    fn resident_bytes(&self) -> u64 {
        self.lists.bytes(T1) + self.lists.bytes(T2)
    }

    fn total_bytes(&self) -> u64 {
        self.resident_bytes() + self.lists.bytes(B1) + self.lists.bytes(B2)
    }

    fn replace(&mut self, size_bytes: u64, miss_in_b2: bool) {
        while self.resident_bytes() + size_bytes > self.capacity_bytes {
            let t1 = self.lists.bytes(T1);
            let from_t1 = !self.lists.is_empty(T1)
                && (t1 > self.p_bytes
                    || (miss_in_b2 && t1 == self.p_bytes)
                    || self.lists.is_empty(T2));
            let (source, ghost) = if from_t1 { (T1, B1) } else { (T2, B2) };
            let (object, bytes) = self
                .lists
                .pop_back(source)
                .expect("a resident object while over capacity");
            self.lists.push_front(ghost, object, bytes);
        }
        self.trim_ghosts();
    }

    fn trim_ghosts(&mut self) {
        let c = self.capacity_bytes;
        while self.lists.bytes(T1) + self.lists.bytes(B1) > c && self.lists.pop_back(B1).is_some() {
        }
        while self.total_bytes() > 2 * c {
            if self.lists.pop_back(B2).is_none() && self.lists.pop_back(B1).is_none() {
                break;
            }
        }
    }

    fn load_new(&mut self, object: u32, size_bytes: u64) {
        let c = self.capacity_bytes;
        if size_bytes > c {
            return;
        }
        if self.lists.bytes(T1) + self.lists.bytes(B1) + size_bytes > c {
            while self.lists.bytes(T1) + self.lists.bytes(B1) + size_bytes > c
                && self.lists.pop_back(B1).is_some()
            {}
            while self.lists.bytes(T1) + size_bytes > c && self.lists.pop_back(T1).is_some() {}
        } else {
            while self.total_bytes() + size_bytes > 2 * c && self.lists.pop_back(B2).is_some() {}
        }
        self.replace(size_bytes, false);
        self.lists.push_front(T1, object, size_bytes);
    }
}

fn ratio_at_least_one(numerator: u64, denominator: u64) -> f64 {
    if denominator == 0 {
        1.0
    } else {
        (numerator as f64 / denominator as f64).max(1.0)
    }
}

impl Cache for ArcCache {
    fn get(&mut self, object: u32, size_bytes: u64, _next_ms: u64) -> bool {
        let c = self.capacity_bytes;
        match self.lists.find(object) {
            Some(T1) | Some(T2) => {
                self.lists.move_to_front(object, T2);
                true
            }
            Some(ghost) => {
                let in_b1 = ghost == B1;
                let (_, ghost_bytes) = self.lists.remove(object).expect("listed");
                let delta = if in_b1 {
                    ratio_at_least_one(self.lists.bytes(B2), self.lists.bytes(B1) + ghost_bytes)
                } else {
                    ratio_at_least_one(self.lists.bytes(B1), self.lists.bytes(B2) + ghost_bytes)
                } * size_bytes as f64;
                self.p_bytes = if in_b1 {
                    (self.p_bytes + delta as u64).min(c)
                } else {
                    self.p_bytes.saturating_sub(delta as u64)
                };
                if size_bytes <= c {
                    self.replace(size_bytes, !in_b1);
                    self.lists.push_front(T2, object, size_bytes);
                }
                false
            }
            None => {
                self.load_new(object, size_bytes);
                false
            }
        }
    }

    fn put(&mut self, object: u32, size_bytes: u64, _next_ms: u64) {
        self.lists.remove(object);
        self.load_new(object, size_bytes);
    }

    fn remove(&mut self, object: u32) {
        self.lists.remove(object);
    }

    fn rename(&mut self, from: u32, to: u32, _next_ms: u64) {
        self.lists.remove(to);
        self.lists.rename(from, to);
    }

    fn used_bytes(&self) -> u64 {
        self.resident_bytes()
    }

    fn contains(&self, object: u32) -> bool {
        matches!(self.lists.find(object), Some(T1) | Some(T2))
    }
}
