//! Placement: which grid bucket a new object is persisted to.
//!
//! A grid bucket is one data disk (SPEC idea 1): an object lives whole on it,
//! so reading the object spins up exactly that disk. Placement therefore
//! decides how many disks a later read of related data wakes. The default,
//! [`DatasetAffinity`], keeps a dataset on one bucket.
//!
//! Add a strategy by implementing [`Placement`] and adding one line to
//! [`PLACEMENTS`]; the server and the simulator both find it by name through
//! [`placement_by_name`].

use std::collections::{HashMap, VecDeque};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// An object that needs a grid bucket.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectToPlace<'a> {
    /// S3 bucket name (or the top-level directory for POSIX access).
    pub s3_bucket: &'a str,
    /// Object key or path inside `s3_bucket`, `/`-separated.
    pub key: &'a str,
    /// Explicit dataset id, when the client or a lifecycle rule named one. It
    /// takes precedence over the bucket-and-prefix rule.
    pub dataset: Option<&'a str>,
    /// Bytes the object will occupy on the disk (stored size).
    pub size_bytes: u64,
    /// User tags (`key=value`), available to strategies.
    pub tags: &'a [(&'a str, &'a str)],
    /// Owner (access key or user), available to strategies.
    pub owner: &'a str,
}

/// Health of a grid bucket's data disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BucketHealth {
    /// Readable and writable.
    Ok,
    /// Failed: never a placement target.
    Failed,
    /// Being rebuilt: never a placement target until the rebuild finishes.
    Rebuilding,
}

/// What placement sees of one grid bucket. `buckets[i]` describes bucket `i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BucketView {
    /// Usable bytes of the bucket.
    pub capacity_bytes: u64,
    /// Bytes already persisted or allocated on it.
    pub used_bytes: u64,
    /// Bytes placed on it but still waiting in the cache.
    pub waiting_bytes: u64,
    /// True while the data disk is spinning up, idle or active (not off).
    pub spinning: bool,
    /// Health of the data disk.
    pub health: BucketHealth,
    /// The horizontal parity group of the bucket's data disk, when the caller knows the grid's geometry. The
    /// members of one group share two of their three parity disks (`hP` and `vhP`), so delayed writes to them
    /// at the same offsets merge their parity deltas (thesis §4.3.5); [`DatasetAffinity`] uses it.
    pub parity_group: Option<usize>,
    /// The bucket's data disk was added to the grid after it was created (a grown grid): the operator added
    /// it for new data, so [`DatasetAffinity`] sends new datasets there while it is among the emptiest.
    pub added: bool,
}

impl BucketView {
    /// Bytes still free for new placements (used and waiting bytes both count).
    pub fn free_bytes(&self) -> u64 {
        self.capacity_bytes
            .saturating_sub(self.used_bytes.saturating_add(self.waiting_bytes))
    }

    /// Fill fraction in `[0, 1]` counting waiting bytes; a zero-capacity bucket is full.
    pub fn fill(&self) -> f64 {
        if self.capacity_bytes == 0 {
            return 1.0;
        }
        let taken = self.used_bytes.saturating_add(self.waiting_bytes);
        (taken as f64 / self.capacity_bytes as f64).min(1.0)
    }

    /// Whether `size_bytes` may go here: healthy and with room.
    pub fn accepts(&self, size_bytes: u64) -> bool {
        self.health == BucketHealth::Ok && self.free_bytes() >= size_bytes
    }
}

/// Why placement could not choose a bucket.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlacementError {
    /// No healthy bucket has room for the object.
    #[error("no healthy grid bucket has {size_bytes} bytes free ({buckets} buckets considered)")]
    NoRoom { size_bytes: u64, buckets: usize },
    /// The name given to [`placement_by_name`] is not registered.
    #[error("unknown placement strategy {name:?}; known: {known}")]
    Unknown { name: String, known: String },
}

/// A placement strategy. Implementations may keep state (a dataset map, a
/// cursor, a seeded generator); they must be deterministic given their
/// construction and the sequence of calls.
pub trait Placement: Send {
    /// The registry name, e.g. `dataset-affinity`.
    fn name(&self) -> &'static str;

    /// Choose the grid bucket (an index into `buckets`) for `object`. The
    /// result must satisfy `buckets[i].accepts(object.size_bytes)`.
    fn place(
        &mut self,
        object: &ObjectToPlace<'_>,
        buckets: &[BucketView],
    ) -> Result<usize, PlacementError>;

    /// Tell the strategy about an object placed earlier (e.g. by a previous run
    /// of the server, read back from the catalog), so it can keep affinities
    /// across restarts. Default: ignored.
    fn remember(&mut self, _object: &ObjectToPlace<'_>, _bucket: usize) {}
}

/// Settings for the strategies that have any; one struct so a config file or a
/// CLI can carry them all.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlacementConfig {
    /// Seed of [`RandomPlacement`].
    pub seed: u64,
    /// Settings of [`DatasetAffinity`].
    pub dataset_affinity: DatasetAffinityConfig,
}

impl Default for PlacementConfig {
    fn default() -> Self {
        PlacementConfig {
            seed: 1,
            dataset_affinity: DatasetAffinityConfig::default(),
        }
    }
}

/// One registered strategy.
pub struct PlacementEntry {
    /// Name used on the command line and in config files.
    pub name: &'static str,
    /// One line for `--help` and docs.
    pub description: &'static str,
    /// Constructor.
    pub build: fn(&PlacementConfig) -> Box<dyn Placement>,
}

/// The registry. The first entry is the default.
pub static PLACEMENTS: &[PlacementEntry] = &[
    PlacementEntry {
        name: DatasetAffinity::NAME,
        description: "keep a dataset (S3 bucket + key prefix) on one grid bucket; balance fill; prefer spinning disks",
        build: |c| Box::new(DatasetAffinity::new(c.dataset_affinity.clone())),
    },
    PlacementEntry {
        name: RandomPlacement::NAME,
        description: "a uniformly random healthy bucket with room (seeded)",
        build: |c| Box::new(RandomPlacement::new(c.seed)),
    },
    PlacementEntry {
        name: RoundRobin::NAME,
        description: "the next healthy bucket with room, in turn",
        build: |_| Box::new(RoundRobin::default()),
    },
    PlacementEntry {
        name: LeastFull::NAME,
        description: "the healthy bucket with the lowest fill",
        build: |_| Box::new(LeastFull),
    },
];

/// Names of all registered strategies, default first.
pub fn placement_names() -> Vec<&'static str> {
    PLACEMENTS.iter().map(|e| e.name).collect()
}

/// Build the strategy registered under `name`.
pub fn placement_by_name(
    name: &str,
    config: &PlacementConfig,
) -> Result<Box<dyn Placement>, PlacementError> {
    PLACEMENTS
        .iter()
        .find(|e| e.name == name)
        .map(|e| (e.build)(config))
        .ok_or_else(|| PlacementError::Unknown {
            name: name.to_string(),
            known: placement_names().join(", "),
        })
}

fn no_room(object: &ObjectToPlace<'_>, buckets: &[BucketView]) -> PlacementError {
    PlacementError::NoRoom {
        size_bytes: object.size_bytes,
        buckets: buckets.len(),
    }
}

/// Lowest fill among accepting buckets; ties go to the lowest index.
fn least_full(size_bytes: u64, buckets: &[BucketView], only_spinning: bool) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, b) in buckets.iter().enumerate() {
        if !b.accepts(size_bytes) || (only_spinning && !b.spinning) {
            continue;
        }
        let fill = b.fill();
        if best.is_none_or(|(_, f)| fill < f) {
            best = Some((i, fill));
        }
    }
    best.map(|(i, _)| i)
}

/// The accepting added bucket ([`BucketView::added`]) of the least fill, if that fill is at most `fill_min` (the
/// least fill of every accepting bucket); ties go to the latest added (the highest index).
fn emptiest_added(size_bytes: u64, buckets: &[BucketView], fill_min: f64) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, b) in buckets.iter().enumerate() {
        if !b.added || !b.accepts(size_bytes) {
            continue;
        }
        let fill = b.fill();
        if best.is_none_or(|(_, f)| fill <= f) {
            best = Some((i, fill));
        }
    }
    best.filter(|&(_, fill)| fill <= fill_min).map(|(i, _)| i)
}

/// An accepting bucket with nothing waiting and a fill of at most `fill_max`, in a horizontal parity group where
/// another bucket has bytes waiting: the one whose used bytes are nearest such a bucket's (ties: lower fill, then
/// lower index). `None` when no group has data waiting or no member qualifies.
fn merge_partner(size_bytes: u64, buckets: &[BucketView], fill_max: f64) -> Option<usize> {
    let mut best: Option<(usize, u64, f64)> = None;
    for (i, b) in buckets.iter().enumerate() {
        let Some(group) = b.parity_group else {
            continue;
        };
        if b.waiting_bytes > 0 || !b.accepts(size_bytes) || b.fill() > fill_max {
            continue;
        }
        let distance = buckets
            .iter()
            .filter(|o| o.parity_group == Some(group) && o.waiting_bytes > 0)
            .map(|o| o.used_bytes.abs_diff(b.used_bytes))
            .min();
        let Some(distance) = distance else {
            continue;
        };
        let better = match best {
            None => true,
            Some((_, d, f)) => distance < d || (distance == d && b.fill() < f),
        };
        if better {
            best = Some((i, distance, b.fill()));
        }
    }
    best.map(|(i, _, _)| i)
}

/// Settings of [`DatasetAffinity`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatasetAffinityConfig {
    /// How many `/`-separated key components after the S3 bucket name make
    /// the dataset: with 1, `runs/2024-05-01/cam0.bin` in bucket `robot`
    /// belongs to dataset `robot/runs`; with 0, the whole S3 bucket is one dataset.
    pub prefix_depth: usize,
    /// A new dataset goes to a spinning bucket when that bucket's fill is at
    /// most this many percentage points above the least-full bucket's:
    /// saving a spin-up is worth a little imbalance, not much.
    pub spinning_fill_slack_percent: f64,
    /// Bound on remembered dataset → bucket assignments; the oldest is
    /// forgotten first (its dataset then starts over on a balanced choice).
    pub datasets_max: usize,
}

impl Default for DatasetAffinityConfig {
    fn default() -> Self {
        DatasetAffinityConfig {
            prefix_depth: 1,
            spinning_fill_slack_percent: 10.0,
            datasets_max: 1_000_000,
        }
    }
}

/// The default strategy: keep each dataset on one grid bucket while it has
/// room, so reading the dataset back spins up one disk.
///
/// For a dataset seen before, its bucket is chosen again if it still accepts
/// the object. Otherwise (a new dataset, or its bucket is full, failed or
/// rebuilding) the dataset moves to a new bucket for its *future* objects,
/// the first of:
/// 0. an *added* bucket ([`BucketView::added`], a disk the grid grew by) whose fill is the least of all
///    accepting buckets (ties: the latest added). Without this rule a new disk would wait behind spinning
///    buckets and merge partners within the fill slack, and an operator who grew the grid because the old
///    disks fill would see new datasets go on filling them;
/// 1. a *merge partner*: a bucket with nothing waiting in a horizontal parity
///    group where another bucket has data waiting to be persisted, the one
///    whose used bytes are nearest that bucket's (so both are written at about
///    the same offsets, and the parity deltas of the shared `hP` and `vhP`
///    merge in the drain: thesis §4.3.5, "sequential delayed writes to all
///    disks of a horizontal parity group"). Datasets persisted at the same time
///    thus fill one group side by side instead of spreading over groups;
/// 2. a spinning accepting bucket whose fill is within
///    [`DatasetAffinityConfig::spinning_fill_slack_percent`] of the least-full one;
/// 3. the least-full accepting bucket.
///
/// Every choice keeps the balance: a merge partner too must be within the fill
/// slack of the least-full bucket.
#[derive(Debug)]
pub struct DatasetAffinity {
    config: DatasetAffinityConfig,
    bucket_of: HashMap<String, usize>,
    /// Insertion order of `bucket_of` keys, to forget the oldest first.
    order: VecDeque<String>,
}

impl DatasetAffinity {
    /// Registry name.
    pub const NAME: &'static str = "dataset-affinity";

    /// A strategy with no remembered datasets.
    pub fn new(config: DatasetAffinityConfig) -> Self {
        DatasetAffinity {
            config,
            bucket_of: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// The dataset an object belongs to: its explicit dataset id, else the S3
    /// bucket plus the first `prefix_depth` key components (the last key
    /// component, the object's own name, never counts).
    pub fn dataset_key(&self, object: &ObjectToPlace<'_>) -> String {
        if let Some(dataset) = object.dataset {
            return format!("#{dataset}");
        }
        let mut key = object.s3_bucket.to_string();
        let mut parts: Vec<&str> = object.key.split('/').collect();
        parts.pop(); // the object's own name
        for part in parts
            .into_iter()
            .filter(|p| !p.is_empty())
            .take(self.config.prefix_depth)
        {
            key.push('/');
            key.push_str(part);
        }
        key
    }

    fn assign(&mut self, dataset: String, bucket: usize) {
        if let Some(b) = self.bucket_of.get_mut(&dataset) {
            *b = bucket;
            return;
        }
        while self.bucket_of.len() >= self.config.datasets_max.max(1) {
            match self.order.pop_front() {
                Some(old) => {
                    self.bucket_of.remove(&old);
                }
                None => break,
            }
        }
        self.order.push_back(dataset.clone());
        self.bucket_of.insert(dataset, bucket);
    }
}

impl Placement for DatasetAffinity {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn place(
        &mut self,
        object: &ObjectToPlace<'_>,
        buckets: &[BucketView],
    ) -> Result<usize, PlacementError> {
        let dataset = self.dataset_key(object);
        if let Some(&b) = self.bucket_of.get(&dataset) {
            if buckets.get(b).is_some_and(|v| v.accepts(object.size_bytes)) {
                return Ok(b);
            }
        }
        let coldest = least_full(object.size_bytes, buckets, false)
            .ok_or_else(|| no_room(object, buckets))?;
        let slack = self.config.spinning_fill_slack_percent / 100.0;
        let fill_max = buckets[coldest].fill() + slack;
        let chosen = match emptiest_added(object.size_bytes, buckets, buckets[coldest].fill()) {
            Some(a) => a,
            None => match merge_partner(object.size_bytes, buckets, fill_max) {
                Some(m) => m,
                None => match least_full(object.size_bytes, buckets, true) {
                    Some(s) if buckets[s].fill() <= fill_max => s,
                    _ => coldest,
                },
            },
        };
        self.assign(dataset, chosen);
        Ok(chosen)
    }

    fn remember(&mut self, object: &ObjectToPlace<'_>, bucket: usize) {
        let dataset = self.dataset_key(object);
        self.assign(dataset, bucket);
    }
}

/// A uniformly random accepting bucket from a seeded generator: the
/// "no semantics" baseline.
#[derive(Debug)]
pub struct RandomPlacement {
    rng: ChaCha8Rng,
}

impl RandomPlacement {
    /// Registry name.
    pub const NAME: &'static str = "random";

    /// A generator seeded with `seed`; the same seed gives the same choices.
    pub fn new(seed: u64) -> Self {
        RandomPlacement {
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }
}

impl Placement for RandomPlacement {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn place(
        &mut self,
        object: &ObjectToPlace<'_>,
        buckets: &[BucketView],
    ) -> Result<usize, PlacementError> {
        let accepting = buckets
            .iter()
            .filter(|b| b.accepts(object.size_bytes))
            .count();
        if accepting == 0 {
            return Err(no_room(object, buckets));
        }
        let nth = self.rng.gen_range(0..accepting);
        let (i, _) = buckets
            .iter()
            .enumerate()
            .filter(|(_, b)| b.accepts(object.size_bytes))
            .nth(nth)
            .expect("nth < count");
        Ok(i)
    }
}

/// The next accepting bucket after the previous choice, cyclically.
#[derive(Debug, Default)]
pub struct RoundRobin {
    next: usize,
}

impl RoundRobin {
    /// Registry name.
    pub const NAME: &'static str = "round-robin";
}

impl Placement for RoundRobin {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn place(
        &mut self,
        object: &ObjectToPlace<'_>,
        buckets: &[BucketView],
    ) -> Result<usize, PlacementError> {
        let n = buckets.len();
        for step in 0..n {
            let i = (self.next + step) % n;
            if buckets[i].accepts(object.size_bytes) {
                self.next = (i + 1) % n;
                return Ok(i);
            }
        }
        Err(no_room(object, buckets))
    }
}

/// The accepting bucket with the lowest fill (waiting bytes included).
#[derive(Debug, Default, Clone, Copy)]
pub struct LeastFull;

impl LeastFull {
    /// Registry name.
    pub const NAME: &'static str = "least-full";
}

impl Placement for LeastFull {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn place(
        &mut self,
        object: &ObjectToPlace<'_>,
        buckets: &[BucketView],
    ) -> Result<usize, PlacementError> {
        least_full(object.size_bytes, buckets, false).ok_or_else(|| no_room(object, buckets))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: u64 = 1_000_000_000;

    fn bucket(used_bytes: u64) -> BucketView {
        BucketView {
            capacity_bytes: 100 * GB,
            used_bytes,
            waiting_bytes: 0,
            spinning: false,
            health: BucketHealth::Ok,
            parity_group: None,
            added: false,
        }
    }

    fn obj<'a>(s3_bucket: &'a str, key: &'a str, size_bytes: u64) -> ObjectToPlace<'a> {
        ObjectToPlace {
            s3_bucket,
            key,
            size_bytes,
            ..Default::default()
        }
    }

    #[test]
    fn dataset_affinity_keeps_a_dataset_on_one_bucket() {
        let mut p = DatasetAffinity::new(DatasetAffinityConfig::default());
        let mut buckets = vec![bucket(10 * GB), bucket(0), bucket(5 * GB)];
        let first = p
            .place(&obj("robot", "run1/cam0.bin", GB), &buckets)
            .unwrap();
        assert_eq!(first, 1, "a new dataset goes to the least-full bucket");
        for i in 0..20 {
            buckets[first].used_bytes += GB; // it fills up past the others
            let key = format!("run1/cam{i}.bin");
            assert_eq!(p.place(&obj("robot", &key, GB), &buckets).unwrap(), first);
        }
        // Another dataset balances onto the now least-full bucket.
        assert_eq!(
            p.place(&obj("robot", "run2/cam0.bin", GB), &buckets)
                .unwrap(),
            2
        );
    }

    #[test]
    fn dataset_affinity_moves_on_when_the_bucket_is_full_or_failed() {
        let mut p = DatasetAffinity::new(DatasetAffinityConfig::default());
        let mut buckets = vec![bucket(0), bucket(50 * GB), bucket(60 * GB)];
        assert_eq!(p.place(&obj("s", "d/a", GB), &buckets).unwrap(), 0);
        buckets[0].used_bytes = 100 * GB - 1; // no room for 1 GB
        assert_eq!(p.place(&obj("s", "d/b", GB), &buckets).unwrap(), 1);
        buckets[1].health = BucketHealth::Rebuilding;
        assert_eq!(p.place(&obj("s", "d/c", GB), &buckets).unwrap(), 2);
        buckets[2].health = BucketHealth::Failed;
        assert_eq!(
            p.place(&obj("s", "d/d", GB), &buckets),
            Err(PlacementError::NoRoom {
                size_bytes: GB,
                buckets: 3
            })
        );
    }

    #[test]
    fn dataset_affinity_prefers_a_spinning_disk_within_the_fill_slack() {
        let mut p = DatasetAffinity::new(DatasetAffinityConfig::default());
        let mut buckets = vec![bucket(0), bucket(5 * GB), bucket(30 * GB)];
        buckets[1].spinning = true;
        buckets[2].spinning = true;
        // bucket 1 is 5 points fuller than bucket 0 (within 10): chosen.
        assert_eq!(p.place(&obj("s", "a/x", GB), &buckets).unwrap(), 1);
        buckets[1].used_bytes = 40 * GB; // now 40 points fuller: balance wins
        assert_eq!(p.place(&obj("s", "b/x", GB), &buckets).unwrap(), 0);
    }

    #[test]
    fn new_datasets_go_to_an_added_disk_while_it_is_the_emptiest() {
        let mut p = DatasetAffinity::new(DatasetAffinityConfig::default());
        // An empty grid that grew by bucket 3; bucket 1 spins, bucket 0's group has data waiting.
        let mut buckets: Vec<BucketView> = (0..4)
            .map(|i| BucketView {
                parity_group: Some(i / 2),
                ..bucket(0)
            })
            .collect();
        buckets[1].spinning = true;
        buckets[0].waiting_bytes = GB / 1000;
        buckets[3].added = true;
        assert_eq!(
            p.place(&obj("s", "new/x", GB), &buckets).unwrap(),
            3,
            "the added bucket ties for the emptiest: it wins over the spinning bucket and the merge partner"
        );
        assert_eq!(
            p.place(&obj("s", "new/y", GB), &buckets).unwrap(),
            3,
            "affinity"
        );
        // Once it holds more than another bucket, the usual rules decide again.
        buckets[3].used_bytes = 2 * GB;
        assert_eq!(p.place(&obj("s", "other/x", GB), &buckets).unwrap(), 1);
        // Two added buckets: the emptier; equally empty: the latest added.
        let mut grown: Vec<BucketView> = (0..5).map(|_| bucket(50 * GB)).collect();
        grown[3].added = true;
        grown[4].added = true;
        grown[3].used_bytes = GB;
        grown[4].used_bytes = 2 * GB;
        assert_eq!(p.place(&obj("s", "g/x", GB), &grown).unwrap(), 3);
        grown[4].used_bytes = GB;
        assert_eq!(p.place(&obj("s", "h/x", GB), &grown).unwrap(), 4);
        // A failed or full added bucket is never chosen.
        grown[4].health = BucketHealth::Failed;
        grown[3].used_bytes = 100 * GB;
        assert_eq!(p.place(&obj("s", "i/x", GB), &grown).unwrap(), 0);
    }

    #[test]
    fn a_dataset_whose_bucket_is_full_moves_to_the_added_disk() {
        let mut p = DatasetAffinity::new(DatasetAffinityConfig::default());
        let mut buckets = vec![bucket(8 * GB), bucket(99 * GB), bucket(5 * GB)];
        buckets[0].spinning = true;
        p.remember(&obj("s", "d/old", GB), 1);
        assert_eq!(p.place(&obj("s", "d/a", GB), &buckets).unwrap(), 1);
        buckets[1].used_bytes = 100 * GB;
        // Full: without an added disk the dataset goes to the spinning bucket within the fill slack ...
        let mut plain = DatasetAffinity::new(DatasetAffinityConfig::default());
        plain.remember(&obj("s", "d/old", GB), 1);
        assert_eq!(plain.place(&obj("s", "d/b", GB), &buckets).unwrap(), 0);
        // ... and to the added disk, the emptiest, with one.
        buckets[2].added = true;
        assert_eq!(p.place(&obj("s", "d/b", GB), &buckets).unwrap(), 2);
        assert_eq!(p.place(&obj("s", "d/c", GB), &buckets).unwrap(), 2);
    }

    #[test]
    fn dataset_affinity_puts_datasets_persisted_together_into_one_parity_group() {
        let mut p = DatasetAffinity::new(DatasetAffinityConfig::default());
        // Two groups of three buckets, all empty.
        let mut buckets: Vec<BucketView> = (0..6)
            .map(|i| BucketView {
                parity_group: Some(i / 3),
                ..bucket(0)
            })
            .collect();
        let mut place = |key: &str, buckets: &mut Vec<BucketView>| {
            let b = p.place(&obj("s", key, GB), buckets).unwrap();
            buckets[b].waiting_bytes += GB;
            b
        };
        let first = place("a/x", &mut buckets);
        assert_eq!(first, 0, "nothing waits anywhere: the least-full bucket");
        let second = place("b/x", &mut buckets);
        let third = place("c/x", &mut buckets);
        assert_eq!(
            (second, third),
            (1, 2),
            "new datasets join the group where data waits"
        );
        let fourth = place("d/x", &mut buckets);
        assert_eq!(fourth, 3, "a full group: the next least-full bucket");
        assert_eq!(place("a/y", &mut buckets), first, "affinity still holds");
        // Persisted: nothing waits; the next new dataset balances again.
        for b in buckets.iter_mut() {
            b.used_bytes += b.waiting_bytes;
            b.waiting_bytes = 0;
        }
        assert_eq!(place("e/x", &mut buckets), 4);
    }

    #[test]
    fn a_merge_partner_is_the_member_nearest_in_fill_and_within_the_slack() {
        let mut p = DatasetAffinity::new(DatasetAffinityConfig::default());
        // Group 0: buckets 0, 2, 3, 4; group 1: bucket 1. Data waits on bucket 0 (20 GB used).
        let mut buckets: Vec<BucketView> = [20, 15, 19, 22, 30]
            .iter()
            .enumerate()
            .map(|(i, &used)| BucketView {
                parity_group: Some(usize::from(i == 1)),
                ..bucket(used * GB)
            })
            .collect();
        buckets[0].waiting_bytes = GB;
        // Within 10 points of the least-full bucket (15 GB): buckets 2 and 3; 19 GB is nearest 20 GB.
        assert_eq!(p.place(&obj("s", "n/x", GB), &buckets).unwrap(), 2);
        // Every member of group 0 is beyond the slack over the least-full bucket: balance wins.
        buckets[1].used_bytes = 0;
        assert_eq!(p.place(&obj("s", "m/x", GB), &buckets).unwrap(), 1);
        // Without group information nothing changes.
        buckets[1].used_bytes = 15 * GB;
        let plain: Vec<BucketView> = buckets
            .iter()
            .map(|b| BucketView {
                parity_group: None,
                ..*b
            })
            .collect();
        assert_eq!(p.place(&obj("s", "o/x", GB), &plain).unwrap(), 1);
    }

    #[test]
    fn dataset_key_uses_the_prefix_depth_and_explicit_ids() {
        let cfg = |prefix_depth| DatasetAffinityConfig {
            prefix_depth,
            ..Default::default()
        };
        let o = obj("b", "x/y/z/file", 1);
        assert_eq!(DatasetAffinity::new(cfg(0)).dataset_key(&o), "b");
        assert_eq!(DatasetAffinity::new(cfg(1)).dataset_key(&o), "b/x");
        assert_eq!(DatasetAffinity::new(cfg(2)).dataset_key(&o), "b/x/y");
        assert_eq!(
            DatasetAffinity::new(cfg(9)).dataset_key(&o),
            "b/x/y/z",
            "the file name never counts"
        );
        let explicit = ObjectToPlace {
            dataset: Some("scan-42"),
            ..o
        };
        assert_eq!(
            DatasetAffinity::new(cfg(1)).dataset_key(&explicit),
            "#scan-42"
        );
    }

    #[test]
    fn dataset_affinity_remembers_placements_from_a_previous_run() {
        let mut p = DatasetAffinity::new(DatasetAffinityConfig::default());
        let buckets = vec![bucket(0), bucket(50 * GB)];
        p.remember(&obj("s", "d/old", GB), 1);
        assert_eq!(p.place(&obj("s", "d/new", GB), &buckets).unwrap(), 1);
    }

    #[test]
    fn dataset_affinity_forgets_oldest_dataset_beyond_its_bound() {
        let cfg = DatasetAffinityConfig {
            datasets_max: 2,
            ..Default::default()
        };
        let mut p = DatasetAffinity::new(cfg);
        for d in ["a", "b", "c"] {
            p.remember(&obj("s", &format!("{d}/f"), 1), 1);
        }
        assert_eq!(p.bucket_of.len(), 2);
        assert!(!p.bucket_of.contains_key("s/a"));
    }

    #[test]
    fn random_is_reproducible_from_its_seed_and_skips_unusable_buckets() {
        let mut buckets: Vec<BucketView> = (0..8).map(|_| bucket(0)).collect();
        buckets[3].health = BucketHealth::Failed;
        buckets[5].used_bytes = 100 * GB;
        let run = |seed| {
            let mut p = RandomPlacement::new(seed);
            (0..200)
                .map(|_| p.place(&obj("s", "k", GB), &buckets).unwrap())
                .collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7));
        assert_ne!(a, run(8));
        assert!(a.iter().all(|&b| b != 3 && b != 5));
        for b in [0, 1, 2, 4, 6, 7] {
            assert!(a.contains(&b), "bucket {b} never chosen in 200 draws");
        }
    }

    #[test]
    fn round_robin_cycles_over_accepting_buckets() {
        let mut buckets: Vec<BucketView> = (0..4).map(|_| bucket(0)).collect();
        buckets[2].health = BucketHealth::Rebuilding;
        let mut p = RoundRobin::default();
        let got: Vec<usize> = (0..6)
            .map(|_| p.place(&obj("s", "k", GB), &buckets).unwrap())
            .collect();
        assert_eq!(got, vec![0, 1, 3, 0, 1, 3]);
    }

    #[test]
    fn least_full_counts_waiting_bytes() {
        let mut buckets = vec![bucket(10 * GB), bucket(5 * GB), bucket(8 * GB)];
        buckets[1].waiting_bytes = 6 * GB;
        assert_eq!(LeastFull.place(&obj("s", "k", GB), &buckets).unwrap(), 2);
    }

    #[test]
    fn registry_builds_every_strategy_by_its_name() {
        let config = PlacementConfig::default();
        for name in placement_names() {
            assert_eq!(placement_by_name(name, &config).unwrap().name(), name);
        }
        assert_eq!(placement_names()[0], "dataset-affinity");
        let err = placement_by_name("nearest", &config).err().unwrap();
        assert!(err.to_string().contains("nearest") && err.to_string().contains("round-robin"));
    }

    #[test]
    fn placement_config_reads_from_toml_with_defaults() {
        let c: PlacementConfig =
            toml::from_str("seed = 9\n[dataset_affinity]\nprefix_depth = 2\n").unwrap();
        assert_eq!(c.seed, 9);
        assert_eq!(c.dataset_affinity.prefix_depth, 2);
        assert_eq!(
            c.dataset_affinity.datasets_max,
            DatasetAffinityConfig::default().datasets_max
        );
        assert!(
            toml::from_str::<PlacementConfig>("sed = 9").is_err(),
            "typos are rejected"
        );
    }
}
