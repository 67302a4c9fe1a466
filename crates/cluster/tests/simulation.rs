//! Deterministic simulation of the cluster directory (whole copies) under node crashes, lost nodes, joins and
//! database outages, in the style of the engine's (`crates/engine/tests/simulation.rs`): a seeded random
//! schedule of PUTs and DELETEs through random nodes, heartbeats with their reconcile, tombstone and catch-up
//! passes, crashes at any step of any of them, nodes lost for good and new nodes joining, checked after every
//! step against a model of what was acknowledged.
//!
//! **What runs.** The directory lives in PostgreSQL only, so 10,000 schedules cannot each use one. The model
//! keeps the directory's tables (`objects`, `tombstones`, `under_replicated`, the heartbeats) in fixed arrays
//! and applies each transaction of `permafrost_catalog::cluster::ClusterDb` the sim uses as one step that mirrors
//! its SQL (publish, publish_write, mark_copy, publish_copy, record_copies, delete_everywhere, clear_tombstone,
//! retire_lost, reconcile_keys), calling the rules those transactions decide in Rust
//! (`permafrost_catalog::cluster::rules`). The node's side (the write and its copies, the copy sink, the
//! catch-up, applying tombstones, the reconcile after an outage or a restart) follows `permafrost_cluster::node`
//! and `runtime` step by step and takes its decisions from `permafrost_cluster::decide`, the functions the
//! node's code calls: who copies, to whom, how many, whether a tombstone deletes a copy. A transaction fails as
//! a whole while the database is down; the node then marks its directory as behind, as the node does.
//!
//! **Invariants** (after every step): a version whose DELETE was acknowledged is never listed again; an
//! acknowledged object stays listed (at that version or a newer one) unless a later request on its key was
//! attempted or it was lost beyond what it claimed to survive; a version listed and not recorded as
//! under-replicated has at least its copies of rows; destroying a node while every earlier loss was processed
//! never loses an object the directory did not record as short of copies. After the schedule the cluster
//! settles (database up, nodes restarted, time past `lost_after`, catch-up passes) and then: every object
//! listed has min(copies, nodes alive) copies, each row backed by its node's store, nothing recorded as
//! under-replicated when enough nodes are alive, and no store of a node holds a version whose DELETE was
//! acknowledged.
//!
//! Rerun one seed with `PERMAFROST_SIM_SEED=<seed> cargo test --workspace --test cluster_simulation -- --nocapture`
//! (`PERMAFROST_SIM_VERBOSE=1` prints every step); run more schedules with `PERMAFROST_SIM_SEEDS=<count>`.

use std::fmt::Write as _;

use permafrost_catalog::cluster::rules;
use permafrost_cluster::decide::{self, CatchUpAction};

/// Node ids are indexes; names sort as ids (`n0`, `n1`, ...).
const NODES_MAX: usize = 5;
const KEYS: usize = 3;
/// Heartbeat age (in ticks) after which a node shows as down, and as lost.
const TIMEOUT: u64 = 3;
const LOST_AFTER: u64 = 8;
/// Catch-up every third heartbeat (`runtime::CATCH_UP_BEATS`).
const CATCH_UP_BEATS: u64 = permafrost_cluster::runtime::CATCH_UP_BEATS;
const STEPS: usize = 60;
const DEFAULT_SCHEDULES: u64 = 10_000;
const LOG_LINES_MAX: usize = 60;

/// A small deterministic generator (SplitMix64): the same seed, the same schedule.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proc {
    /// Not joined yet.
    Absent,
    Running,
    Crashed,
    /// Lost for good with its store.
    Destroyed,
}

/// Why a node's procedure stopped: the database was down (the transaction failed), or the node crashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Outage,
    Crash,
}

type Step<T> = Result<T, Stop>;

#[derive(Debug, Clone, Copy)]
struct Under {
    lm: u64,
    wanted: u32,
    held: u32,
}

/// The shared tables: `objects` (per node and key, the version listed), `tombstones`, `under_replicated`,
/// the heartbeats (`None`: not joined).
#[derive(Default)]
struct Dir {
    up: bool,
    rows: [[Option<u64>; KEYS]; NODES_MAX],
    tombs: [[Option<u64>; KEYS]; NODES_MAX],
    under: [Option<Under>; KEYS],
    heartbeat: [Option<u64>; NODES_MAX],
}

struct Sim {
    seed: u64,
    rng: Rng,
    clock: u64,
    versions: u64,
    copies: u32,
    dir: Dir,
    procs: [Proc; NODES_MAX],
    stores: [[Option<u64>; KEYS]; NODES_MAX],
    behind: [bool; NODES_MAX],
    beats: [u64; NODES_MAX],
    /// Crash probability per crash point, per mille (0 while settling).
    crash_per_mille: u64,
    /// Per key: the acknowledged version the directory must keep (None: none, or a later request made it
    /// uncertain).
    acked: [Option<u64>; KEYS],
    /// Per key: acknowledged versions, and whether a DELETE was acknowledged after each.
    acked_versions: [Vec<(u64, bool)>; KEYS],
    /// Per key: requests started (a write's acknowledgement sets `acked` only when none started after it).
    touched: [u64; KEYS],
    /// Writes whose copies are on their way while other requests run: stored, published, recorded and
    /// acknowledged by a later step.
    flights: Vec<Flight>,
    log: std::collections::VecDeque<String>,
    verbose: bool,
    stats: Stats,
}

/// A write's copies on their way to `targets`: stored and published there when the flight lands.
struct Flight {
    sender: usize,
    key: usize,
    lm: u64,
    have: usize,
    targets: Vec<usize>,
    touched: u64,
}

/// Whether `versions` holds `v` as acknowledged and deleted after.
fn deleted(versions: &[(u64, bool)], v: u64) -> bool {
    versions.iter().any(|&(a, d)| a == v && d)
}

#[derive(Default, Debug, Clone, Copy)]
struct Stats {
    puts_acked: u64,
    deletes_acked: u64,
    crashes: u64,
    outages: u64,
    destroyed: u64,
    joined: u64,
    copies_made: u64,
    lost_tolerated: u64,
    flights: u64,
}

impl Sim {
    fn new(seed: u64, verbose: bool) -> Sim {
        let mut rng = Rng(seed);
        let copies = 2 + rng.below(2) as u32;
        let first = 3 + rng.below(2) as usize;
        let mut sim = Sim {
            seed,
            rng,
            clock: 100,
            versions: 0,
            copies,
            dir: Dir {
                up: true,
                ..Dir::default()
            },
            procs: [Proc::Absent; NODES_MAX],
            stores: [[None; KEYS]; NODES_MAX],
            behind: [false; NODES_MAX],
            beats: [0; NODES_MAX],
            crash_per_mille: 25,
            acked: [None; KEYS],
            acked_versions: Default::default(),
            touched: [0; KEYS],
            flights: Vec::new(),
            log: Default::default(),
            verbose,
            stats: Stats::default(),
        };
        for n in 0..first {
            sim.procs[n] = Proc::Running;
            sim.dir.heartbeat[n] = Some(sim.clock);
        }
        sim.note(format!("start: {first} nodes, copies = {copies}"));
        sim
    }

    fn note(&mut self, line: String) {
        if self.verbose {
            eprintln!("[seed {}] t={} {line}", self.seed, self.clock);
        }
        if self.log.len() == LOG_LINES_MAX {
            self.log.pop_front();
        }
        let line = format!("t={} {line}", self.clock);
        self.log.push_back(line);
    }

    // ---- the directory's transactions (each mirrors its SQL in permafrost_catalog::cluster) ----

    fn db(&self) -> Step<()> {
        if self.dir.up {
            Ok(())
        } else {
            Err(Stop::Outage)
        }
    }

    fn age(&self, n: usize) -> u64 {
        self.dir.heartbeat[n].map_or(u64::MAX, |h| self.clock.saturating_sub(h))
    }

    fn health_up(&self, n: usize) -> bool {
        self.age(n) <= TIMEOUT
    }

    fn joined(&self, n: usize) -> bool {
        self.dir.heartbeat[n].is_some()
    }

    /// `publish_in`: refused when another node lists a newer version; else older rows go and this one is set.
    fn publish_in(&mut self, n: usize, k: usize, lm: u64) -> bool {
        let newer = (0..NODES_MAX).any(|o| o != n && self.dir.rows[o][k].is_some_and(|v| v > lm));
        if newer {
            return false;
        }
        for o in 0..NODES_MAX {
            if self.dir.rows[o][k].is_some_and(|v| v < lm) {
                // The other nodes' copies of an older version: left a tombstone (as `publish_in` does), so they
                // delete them instead of keeping them unlisted.
                if o != n {
                    self.tombstone(o, k, self.dir.rows[o][k].unwrap());
                }
                self.dir.rows[o][k] = None;
            }
        }
        self.dir.rows[n][k] = Some(lm);
        true
    }

    fn tombstone(&mut self, n: usize, k: usize, lm: u64) {
        let t = &mut self.dir.tombs[n][k];
        *t = Some(t.map_or(lm, |old| old.max(lm)));
    }

    /// `record_copies_in`.
    fn record_copies_in(&mut self, k: usize, lm: u64, wanted: u32, held: u32) {
        let listed = |v: u64| (0..NODES_MAX).any(|o| self.dir.rows[o][k] == Some(v));
        let this_listed = listed(lm);
        if self.dir.under[k]
            .is_some_and(|u| u.lm == lm || (this_listed && u.lm < lm) || !listed(u.lm))
        {
            self.dir.under[k] = None;
        }
        if this_listed
            && rules::short_of_copies(i64::from(wanted), i64::from(held))
            && self.dir.under[k].is_none()
        {
            self.dir.under[k] = Some(Under { lm, wanted, held });
        }
    }

    fn publish_write(&mut self, n: usize, k: usize, lm: u64) -> Step<bool> {
        self.db()?;
        if !self.publish_in(n, k, lm) {
            return Ok(false);
        }
        self.record_copies_in(k, lm, self.copies, 1);
        Ok(true)
    }

    fn record_copies(&mut self, k: usize, lm: u64, wanted: u32, held: u32) -> Step<()> {
        self.db()?;
        self.record_copies_in(k, lm, wanted, held);
        Ok(())
    }

    /// `mark_copy`: before a received copy commits, its node's tombstone of the copy's version (its mark),
    /// unless it has one of that version or a newer one.
    fn mark_copy(&mut self, n: usize, k: usize, lm: u64) -> Step<()> {
        self.db()?;
        if rules::mark_replaces(self.dir.tombs[n][k], lm) {
            self.dir.tombs[n][k] = Some(lm);
        }
        Ok(())
    }

    /// `publish_copy`: admitted only while the copy's mark is there, its origin lists it and nothing newer is
    /// listed; the publish removes the mark.
    fn publish_copy(&mut self, n: usize, k: usize, lm: u64) -> Step<bool> {
        self.db()?;
        let marked = self.dir.tombs[n][k] == Some(lm);
        let origin = (0..NODES_MAX).any(|o| o != n && self.dir.rows[o][k] == Some(lm));
        let newer = (0..NODES_MAX).any(|o| self.dir.rows[o][k].is_some_and(|v| v > lm));
        if !rules::copy_admitted(marked, origin, newer) {
            return Ok(false);
        }
        self.dir.tombs[n][k] = None;
        self.publish_in(n, k, lm);
        Ok(true)
    }

    fn delete_everywhere(&mut self, n: usize, k: usize) -> Step<()> {
        self.db()?;
        let newest = (0..NODES_MAX).filter_map(|o| self.dir.rows[o][k]).max();
        for o in 0..NODES_MAX {
            if o == n || !self.joined(o) {
                self.dir.rows[o][k] = None;
                continue;
            }
            // The holders a tombstone of their version, every other node one of the newest.
            if let Some(lm) = self.dir.rows[o][k].or(newest) {
                self.tombstone(o, k, lm);
            }
            self.dir.rows[o][k] = None;
        }
        self.dir.under[k] = None;
        Ok(())
    }

    fn clear_tombstone(&mut self, n: usize, k: usize, lm: u64) -> Step<()> {
        self.db()?;
        if self.dir.tombs[n][k].is_some_and(|t| t <= lm) {
            self.dir.tombs[n][k] = None;
        }
        if self.dir.rows[n][k].is_some_and(|v| v <= lm) {
            self.dir.rows[n][k] = None;
        }
        Ok(())
    }

    /// `retire_lost`: each row of a lost node whose version a node that is up lists goes, its node gets a
    /// tombstone, and the object is recorded as under-replicated.
    fn retire_lost(&mut self) -> Step<usize> {
        self.db()?;
        let mut retired = 0;
        for n in 0..NODES_MAX {
            if !self.joined(n) || self.age(n) <= LOST_AFTER {
                continue;
            }
            for k in 0..KEYS {
                let Some(lm) = self.dir.rows[n][k] else {
                    continue;
                };
                let live =
                    (0..NODES_MAX).any(|o| self.dir.rows[o][k] == Some(lm) && self.health_up(o));
                if !live {
                    continue;
                }
                self.tombstone(n, k, lm);
                self.dir.rows[n][k] = None;
                let held = (0..NODES_MAX)
                    .filter(|&o| self.dir.rows[o][k] == Some(lm))
                    .count() as u32;
                if self.dir.under[k].is_some_and(|u| u.lm < lm) {
                    self.dir.under[k] = None;
                }
                if self.dir.under[k].is_none() {
                    self.dir.under[k] = Some(Under {
                        lm,
                        wanted: held + 1,
                        held,
                    });
                }
                retired += 1;
            }
        }
        Ok(retired)
    }

    /// `reconcile_keys` with the store's snapshot.
    fn reconcile_keys(&mut self, n: usize) -> Step<()> {
        self.db()?;
        let held = self.stores[n];
        for (k, local) in held.into_iter().enumerate() {
            match local {
                Some(lm) if self.dir.rows[n][k] == Some(lm) => {}
                Some(lm) if self.dir.rows[n][k].is_some_and(|r| r > lm) => {
                    // The row names a newer version than the store holds: the row goes as below, the older
                    // copy gets a tombstone.
                    self.tombstone(n, k, lm);
                    self.row_removed(n, k);
                }
                // A version this node has a tombstone for (a received copy never published keeps its mark):
                // not published, the tombstone deletes it; an older row of this node goes as one not held.
                Some(lm) if !rules::reconcile_publishes(self.dir.tombs[n][k], lm) => {
                    self.row_removed(n, k)
                }
                Some(lm) => {
                    self.dir.rows[n][k] = None;
                    if self.publish_in(n, k, lm) {
                        self.record_copies_in(k, lm, self.copies, 1);
                    } else {
                        // A newer version is listed: a tombstone of the stale copy.
                        self.tombstone(n, k, lm);
                    }
                }
                None => self.row_removed(n, k),
            }
        }
        Ok(())
    }

    /// The reconcile removes node `n`'s row of `k`, then `after_row_removed`.
    fn row_removed(&mut self, n: usize, k: usize) {
        let Some(lm) = self.dir.rows[n][k].take() else {
            return;
        };
        let held = (0..NODES_MAX)
            .filter(|&o| self.dir.rows[o][k] == Some(lm))
            .count() as u32;
        if held > 0 {
            self.record_copies_in(k, lm, self.copies, held);
        } else if (0..NODES_MAX).all(|o| self.dir.rows[o][k].is_none()) {
            for o in 0..NODES_MAX {
                if o != n && self.joined(o) {
                    self.tombstone(o, k, lm);
                }
            }
            self.dir.under[k] = None;
        }
    }

    /// Holders of `k` at version `lm` in the directory's order (node name), with whether each is up.
    fn holders_of(&self, k: usize, lm: u64) -> ([(i64, bool); NODES_MAX], usize) {
        let mut out = [(0i64, false); NODES_MAX];
        let mut len = 0;
        for n in 0..NODES_MAX {
            if self.dir.rows[n][k] == Some(lm) {
                out[len] = (n as i64, self.health_up(n));
                len += 1;
            }
        }
        (out, len)
    }

    // ---- the node's side (permafrost_cluster::node and runtime) ----

    /// A crash point: the node may die here (its store keeps what it committed).
    fn crash_point(&mut self, n: usize) -> Step<()> {
        if self.procs[n] == Proc::Running && self.rng.chance(self.crash_per_mille) {
            self.crash(n);
            return Err(Stop::Crash);
        }
        Ok(())
    }

    fn crash(&mut self, n: usize) {
        self.procs[n] = Proc::Crashed;
        self.stats.crashes += 1;
        self.note(format!("n{n} crashes"));
    }

    fn put(&mut self, n: usize, k: usize) -> Step<()> {
        self.versions += 1;
        let lm = self.clock * 1000 + self.versions;
        self.stores[n][k] = Some(lm);
        self.note(format!("PUT k{k} v{lm} on n{n}: committed locally"));
        self.acked[k] = None;
        self.touched[k] += 1;
        let touched = self.touched[k];
        self.crash_point(n)?;
        match self.publish_write(n, k, lm) {
            Ok(true) => {}
            Ok(false) => return Ok(()), // a newer version is listed: answered as refused
            Err(e) => {
                self.behind[n] = true;
                return Err(e);
            }
        }
        self.crash_point(n)?;
        if self.rng.chance(300) {
            if let Some(flight) = self.launch(n, k, lm, touched)? {
                self.note(format!(
                    "PUT k{k} v{lm} on n{n}: copies on their way to {:?}",
                    flight.targets
                ));
                self.flights.push(flight);
                self.stats.flights += 1;
                return Ok(());
            }
        }
        let held = self.replicate(n, k, None)?;
        self.ack(n, k, lm, held, touched);
        Ok(())
    }

    fn ack(&mut self, n: usize, k: usize, lm: u64, held: usize, touched: u64) {
        if self.touched[k] == touched {
            self.acked[k] = Some(lm);
        }
        self.acked_versions[k].push((lm, false));
        self.stats.puts_acked += 1;
        self.note(format!(
            "PUT k{k} v{lm} on n{n}: acknowledged with {held} copies"
        ));
    }

    /// The first half of a write's copies (`replicate_blocking` choosing its targets and sending): the copies
    /// are on their way (nothing visible on the targets yet); `None` when nothing is to be copied (the write
    /// then goes on as usual).
    fn launch(&mut self, n: usize, k: usize, lm: u64, touched: u64) -> Step<Option<Flight>> {
        self.db()?;
        let (holders, len) = self.holders_of(k, lm);
        let holders: Vec<i64> = holders[..len].iter().map(|h| h.0).collect();
        let have = holders.len().max(1);
        if have >= self.copies as usize {
            return Ok(None);
        }
        let nodes: Vec<(i64, bool)> = (0..NODES_MAX)
            .filter(|&o| self.joined(o))
            .map(|o| (o as i64, self.health_up(o)))
            .collect();
        let mut candidates = decide::copy_candidates(&(n as i64), &nodes, &holders);
        candidates.sort_by_key(|&c| permafrost_cluster::fnv1a(&[&[k as u8], b"\0", &[c as u8]]));
        let make = decide::copies_to_make(self.copies, have, candidates.len());
        let targets: Vec<usize> = candidates
            .iter()
            .map(|&c| c as usize)
            .filter(|&c| self.procs[c] == Proc::Running)
            .take(make)
            .collect();
        if targets.is_empty() {
            return Ok(None);
        }
        Ok(Some(Flight {
            sender: n,
            key: k,
            lm,
            have,
            targets,
            touched,
        }))
    }

    /// The second half: each target that is still running publishes its copy (`copy_sink`'s finish), then the
    /// sender records the copies and acknowledges the write, if it is still running.
    fn land(&mut self, f: Flight) -> Step<()> {
        let (k, lm) = (f.key, f.lm);
        let mut stored = 0;
        for &t in &f.targets {
            // The copy's pieces are written into a put that commits with the last one, then it is published.
            if self.procs[t] != Proc::Running || !decide::copy_replaces(self.stores[t][k], lm) {
                continue;
            }
            // The copy's mark before its commit (`copy_sink`), then a crash point between the commit and the
            // publish: a copy that lands after its key's DELETE was acknowledged and its node's tombstone
            // cleared, committed but never published, was published again by that node's next reconcile
            // before copies were marked (`PERMAFROST_SIM_SEED=12085273042658610450` showed it); now its mark
            // deletes it. (The node's tombstone passes skip keys whose copy is arriving: here a landing is one
            // step, so no pass runs in between.)
            if self.mark_copy(t, k, lm).is_err() {
                self.note(format!(
                    "copy of k{k} v{lm} on n{t} refused before its commit (database down)"
                ));
                continue;
            }
            self.stores[t][k] = Some(lm);
            if self.crash_point(t).is_err() {
                continue;
            }
            match self.publish_copy(t, k, lm) {
                Ok(true) => {
                    stored += 1;
                    self.stats.copies_made += 1;
                    self.note(format!("copy of k{k} v{lm} published on n{t} (landed)"));
                }
                Ok(false) => {
                    if self.stores[t][k].is_some_and(|v| decide::tombstone_deletes(v, lm)) {
                        self.stores[t][k] = None;
                    }
                    self.note(format!(
                        "copy of k{k} v{lm} on n{t} refused on landing and dropped"
                    ));
                }
                Err(_) => self.note(format!(
                    "copy of k{k} v{lm} stored on n{t}, its publish failed (database down)"
                )),
            }
        }
        let n = f.sender;
        if self.procs[n] != Proc::Running {
            return Err(Stop::Crash);
        }
        let held = f.have + stored;
        self.crash_point(n)?;
        self.record_copies(k, lm, self.copies, held as u32)?;
        self.ack(n, k, lm, held, f.touched);
        Ok(())
    }

    fn delete(&mut self, n: usize, k: usize) -> Step<()> {
        self.stores[n][k] = None;
        self.acked[k] = None;
        self.touched[k] += 1;
        self.note(format!("DELETE k{k} on n{n}: deleted locally"));
        self.crash_point(n)?;
        if let Err(e) = self.delete_everywhere(n, k) {
            self.behind[n] = true;
            return Err(e);
        }
        for v in &mut self.acked_versions[k] {
            v.1 = true;
        }
        self.stats.deletes_acked += 1;
        self.note(format!("DELETE k{k} on n{n}: acknowledged"));
        Ok(())
    }

    /// `ClusterNode::replicate_blocking` (copies): returns the holders after it.
    fn replicate(&mut self, n: usize, k: usize, expect: Option<u64>) -> Step<usize> {
        let Some(lm) = self.stores[n][k] else {
            return Ok(0);
        };
        if expect.is_some_and(|e| e != lm) {
            return Ok(0);
        }
        let wanted = self.copies;
        self.db()?;
        let (holders, len) = self.holders_of(k, lm);
        let holders: Vec<i64> = holders[..len].iter().map(|h| h.0).collect();
        let have = holders.len().max(1);
        if have >= wanted as usize {
            self.record_copies(k, lm, wanted, have as u32)?;
            return Ok(have);
        }
        let nodes: Vec<(i64, bool)> = (0..NODES_MAX)
            .filter(|&o| self.joined(o))
            .map(|o| (o as i64, self.health_up(o)))
            .collect();
        let mut candidates = decide::copy_candidates(&(n as i64), &nodes, &holders);
        // Rendezvous order of the object over the candidates (`tree_for_write` spreads by the same hash).
        candidates.sort_by_key(|&c| permafrost_cluster::fnv1a(&[&[k as u8], b"\0", &[c as u8]]));
        let make = decide::copies_to_make(wanted, have, candidates.len());
        let mut stored = 0;
        for &c in &candidates {
            if stored == make {
                break;
            }
            if self.send_copy(c as usize, k, lm)? {
                stored += 1;
                self.stats.copies_made += 1;
            }
        }
        let held = have + stored;
        if expect.is_some() && stored == 0 {
            return Ok(held);
        }
        self.crash_point(n)?;
        self.record_copies(k, lm, wanted, held as u32)?;
        Ok(held)
    }

    /// A copy of `k` at `lm` sent to node `to` (`copy_sink`): marked, stored, then published, else deleted again.
    /// Whether it was acknowledged; `Err` only when the database failed on the sender's side of the protocol
    /// (never: the sink's failures are the sender's failed acknowledgement).
    fn send_copy(&mut self, to: usize, k: usize, lm: u64) -> Step<bool> {
        if self.procs[to] != Proc::Running || !decide::copy_replaces(self.stores[to][k], lm) {
            return Ok(false);
        }
        if self.mark_copy(to, k, lm).is_err() {
            return Ok(false);
        }
        self.stores[to][k] = Some(lm);
        if self.crash_point(to).is_err() {
            return Ok(false);
        }
        match self.publish_copy(to, k, lm) {
            Ok(true) => {
                self.note(format!("copy of k{k} v{lm} stored and published on n{to}"));
                Ok(true)
            }
            Ok(false) => {
                if self.stores[to][k].is_some_and(|v| decide::tombstone_deletes(v, lm)) {
                    self.stores[to][k] = None;
                }
                self.note(format!("copy of k{k} v{lm} on n{to} refused and dropped"));
                Ok(false)
            }
            Err(_) => Ok(false),
        }
    }

    /// `runtime::apply_tombstones`.
    fn apply_tombstones(&mut self, n: usize) -> Step<()> {
        self.db()?;
        for k in 0..KEYS {
            let Some(t) = self.dir.tombs[n][k] else {
                continue;
            };
            if self.stores[n][k].is_some_and(|v| decide::tombstone_deletes(v, t)) {
                self.stores[n][k] = None;
                self.note(format!("n{n} applies the tombstone of k{k} v{t}"));
            }
            self.crash_point(n)?;
            self.clear_tombstone(n, k, t)?;
        }
        Ok(())
    }

    /// `runtime::reconcile`.
    fn reconcile(&mut self, n: usize) -> Step<()> {
        self.apply_tombstones(n)?;
        self.crash_point(n)?;
        self.reconcile_keys(n)?;
        self.behind[n] = false;
        self.note(format!("n{n} reconciled"));
        Ok(())
    }

    /// `ClusterNode::catch_up`.
    fn catch_up(&mut self, n: usize) -> Step<()> {
        let retired = self.retire_lost()?;
        if retired > 0 {
            self.note(format!("n{n} retired {retired} copies of lost nodes"));
        }
        let records = self.dir.under;
        for (k, x) in records.iter().enumerate() {
            let Some(x) = x else { continue };
            // A write of this key is making its copies on this node: it records them itself (`try_enter`).
            if self.flights.iter().any(|f| f.sender == n && f.key == k) {
                continue;
            }
            self.db()?;
            let (holders, len) = self.holders_of(k, x.lm);
            match decide::catch_up_action(n as i64, &holders[..len]) {
                CatchUpAction::Forget => self.record_copies(k, x.lm, 0, 0)?,
                CatchUpAction::Skip => {}
                CatchUpAction::Copy => {
                    self.replicate(n, k, Some(x.lm))?;
                }
            }
        }
        Ok(())
    }

    /// One heartbeat of node `n` and what follows it (`runtime::start`'s loop).
    fn beat(&mut self, n: usize) -> Step<()> {
        if self.db().is_err() {
            self.behind[n] = true;
            return Err(Stop::Outage);
        }
        self.dir.heartbeat[n] = Some(self.clock);
        self.beats[n] += 1;
        if self.behind[n] {
            return self.reconcile(n);
        }
        self.apply_tombstones(n)?;
        if self.beats[n].is_multiple_of(CATCH_UP_BEATS) {
            self.catch_up(n)?;
        }
        Ok(())
    }

    /// Start (again) or join: the heartbeat row, then the reconcile.
    fn start(&mut self, n: usize) -> Step<()> {
        self.db()?;
        self.dir.heartbeat[n] = Some(self.clock);
        self.procs[n] = Proc::Running;
        self.behind[n] = true;
        self.note(format!("n{n} starts"));
        self.reconcile(n)
    }

    fn tick(&mut self) {
        self.clock += 1;
        for n in 0..NODES_MAX {
            if self.procs[n] == Proc::Running {
                let _ = self.beat(n);
            }
        }
    }

    // ---- the schedule ----

    fn running(&mut self) -> Option<usize> {
        let pick: Vec<usize> = (0..NODES_MAX)
            .filter(|&n| self.procs[n] == Proc::Running)
            .collect();
        (!pick.is_empty()).then(|| pick[self.rng.below(pick.len() as u64) as usize])
    }

    fn alive(&self) -> usize {
        (0..NODES_MAX)
            .filter(|&n| matches!(self.procs[n], Proc::Running | Proc::Crashed))
            .count()
    }

    /// Whether destroying `x` is within what the cluster claims to survive: every other node is up or destroyed
    /// and no longer listed (its loss processed).
    fn loss_tolerated(&self, x: usize) -> bool {
        (0..NODES_MAX)
            .filter(|&n| n != x)
            .all(|n| match self.procs[n] {
                Proc::Absent => true,
                Proc::Destroyed => self.dir.rows[n].iter().all(Option::is_none),
                // A node down counts as failed until it is back: its copies may be retired meanwhile.
                Proc::Running | Proc::Crashed => self.health_up(n),
            })
    }

    /// Node `x` is lost for good with its store. Within the tolerated losses, an acknowledged object whose only
    /// copy it held must have been recorded as short of copies; beyond them, the objects no intact node lists
    /// any more may be lost.
    fn destroy(&mut self, x: usize) -> Result<(), String> {
        let tolerated = self.loss_tolerated(x);
        for k in 0..KEYS {
            let Some(v) = self.acked[k] else { continue };
            let lost = if tolerated {
                // A copy its node has a tombstone for does not survive: its node deletes it (a received copy
                // never published keeps its mark; its sender counted it as failed).
                let survivors = (0..NODES_MAX)
                    .filter(|&o| {
                        o != x
                            && self.procs[o] != Proc::Destroyed
                            && self.stores[o][k] == Some(v)
                            && rules::reconcile_publishes(self.dir.tombs[o][k], v)
                    })
                    .count();
                if self.stores[x][k] != Some(v) || survivors > 0 {
                    continue;
                }
                if self.dir.under[k].is_none_or(|u| u.lm < v) {
                    return Err(format!(
                        "destroying n{x} loses the acknowledged k{k} v{v}: its only copy, and the directory does \
                         not record it as short of copies"
                    ));
                }
                true
            } else {
                !(0..NODES_MAX).any(|o| {
                    o != x
                        && matches!(self.procs[o], Proc::Running | Proc::Crashed)
                        && self.health_up(o)
                        && self.dir.rows[o][k].is_some_and(|r| r >= v)
                })
            };
            if lost {
                self.acked[k] = None;
                self.stats.lost_tolerated += 1;
                self.note(format!(
                    "k{k} v{v} may be lost with n{x} ({})",
                    if tolerated {
                        "recorded as short of copies"
                    } else {
                        "beyond the tolerated losses"
                    }
                ));
            }
        }
        self.procs[x] = Proc::Destroyed;
        self.stores[x] = [None; KEYS];
        self.stats.destroyed += 1;
        self.note(format!(
            "n{x} destroyed{}",
            if tolerated {
                ""
            } else {
                " (beyond the tolerated losses)"
            }
        ));
        Ok(())
    }

    fn step(&mut self) -> Result<(), String> {
        let roll = self.rng.below(100);
        match roll {
            0..=29 => {
                if let Some(n) = self.running() {
                    let k = self.rng.below(KEYS as u64) as usize;
                    let _ = self.put(n, k);
                }
            }
            30..=39 => {
                if let Some(n) = self.running() {
                    let k = self.rng.below(KEYS as u64) as usize;
                    let _ = self.delete(n, k);
                }
            }
            40..=49 if !self.flights.is_empty() => {
                let i = self.rng.below(self.flights.len() as u64) as usize;
                let f = self.flights.swap_remove(i);
                let _ = self.land(f);
            }
            40..=74 => self.tick(),
            75..=79 => {
                if let Some(n) = self.running() {
                    self.crash(n);
                }
            }
            80..=87 => {
                let crashed: Vec<usize> = (0..NODES_MAX)
                    .filter(|&n| self.procs[n] == Proc::Crashed)
                    .collect();
                if !crashed.is_empty() {
                    let n = crashed[self.rng.below(crashed.len() as u64) as usize];
                    let _ = self.start(n);
                }
            }
            88..=91 => {
                if self.dir.up {
                    self.dir.up = false;
                    self.stats.outages += 1;
                    self.note("database down".into());
                } else {
                    // Back only after each running node met it on a heartbeat.
                    self.tick();
                    self.dir.up = true;
                    self.note("database back".into());
                }
            }
            92..=95 => {
                if self.alive() > 2 {
                    let candidates: Vec<usize> = (0..NODES_MAX)
                        .filter(|&n| matches!(self.procs[n], Proc::Running | Proc::Crashed))
                        .collect();
                    let n = candidates[self.rng.below(candidates.len() as u64) as usize];
                    self.destroy(n)?;
                }
            }
            _ => {
                if let Some(n) = (0..NODES_MAX).find(|&n| self.procs[n] == Proc::Absent) {
                    if self.start(n).is_ok() || self.procs[n] == Proc::Running {
                        self.stats.joined += 1;
                    }
                }
            }
        }
        self.check_always()
    }

    fn check_always(&self) -> Result<(), String> {
        for k in 0..KEYS {
            let newest = (0..NODES_MAX).filter_map(|n| self.dir.rows[n][k]).max();
            for n in 0..NODES_MAX {
                if let Some(v) = self.dir.rows[n][k] {
                    if deleted(&self.acked_versions[k], v) {
                        return Err(format!(
                            "k{k} v{v} is listed on n{n} after its DELETE was acknowledged"
                        ));
                    }
                }
            }
            if let Some(v) = self.acked[k] {
                if newest.is_none_or(|m| m < v) {
                    return Err(format!(
                        "the acknowledged k{k} v{v} is no longer listed (newest listed: {newest:?})"
                    ));
                }
            }
            if let Some(v) = newest {
                let rows = (0..NODES_MAX)
                    .filter(|&n| self.dir.rows[n][k] == Some(v))
                    .count();
                let recorded = self.dir.under[k].is_some_and(|u| u.lm == v && u.held < u.wanted);
                if rows < self.copies as usize && !recorded {
                    return Err(format!(
                        "k{k} v{v} is listed on {rows} node(s), fewer than its {} copies, and not recorded as \
                         under-replicated",
                        self.copies
                    ));
                }
            }
        }
        Ok(())
    }

    /// Everything comes back that can: the database, the crashed nodes; time passes beyond `lost_after` with
    /// catch-up passes on every node.
    fn settle(&mut self) -> Result<(), String> {
        self.crash_per_mille = 0;
        self.dir.up = true;
        self.note("settling".into());
        while let Some(f) = self.flights.pop() {
            let _ = self.land(f);
            self.check_always()?;
        }
        for n in 0..NODES_MAX {
            if self.procs[n] == Proc::Crashed {
                let _ = self.start(n);
                self.check_always()?;
            }
        }
        for _ in 0..(LOST_AFTER + 2 + CATCH_UP_BEATS * 4) {
            self.tick();
            self.check_always()?;
        }
        Ok(())
    }

    fn check_settled(&self) -> Result<(), String> {
        let alive: Vec<usize> = (0..NODES_MAX)
            .filter(|&n| self.procs[n] == Proc::Running)
            .collect();
        let full = (self.copies as usize).min(alive.len());
        for k in 0..KEYS {
            for &n in &alive {
                if let Some(v) = self.stores[n][k] {
                    if deleted(&self.acked_versions[k], v) {
                        return Err(format!(
                            "settled: n{n} still holds k{k} v{v}, whose DELETE was acknowledged"
                        ));
                    }
                }
            }
            let Some(v) = (0..NODES_MAX).filter_map(|n| self.dir.rows[n][k]).max() else {
                continue;
            };
            let holders: Vec<usize> = alive
                .iter()
                .copied()
                .filter(|&n| self.dir.rows[n][k] == Some(v))
                .collect();
            for &n in &holders {
                if self.stores[n][k] != Some(v) {
                    return Err(format!(
                        "settled: n{n} is listed with k{k} v{v} but its store holds {:?}",
                        self.stores[n][k]
                    ));
                }
            }
            if holders.is_empty() {
                // Only destroyed nodes list it: lost, which `destroy` allowed for no acknowledged version.
                if self.acked[k].is_some() {
                    return Err(format!(
                        "settled: the acknowledged k{k} v{v} is listed on destroyed nodes only (stores alive \
                         holding it: {:?})",
                        alive.iter().filter(|&&n| self.stores[n][k] == Some(v)).collect::<Vec<_>>()
                    ));
                }
                continue;
            }
            if holders.len() < full {
                return Err(format!(
                    "settled: k{k} v{v} has {} copies on nodes alive, {full} possible (copies = {})",
                    holders.len(),
                    self.copies
                ));
            }
            if holders.len() >= self.copies as usize && self.dir.under[k].is_some() {
                return Err(format!(
                    "settled: k{k} v{v} has its copies but is still recorded as under-replicated"
                ));
            }
        }
        Ok(())
    }

    /// The directory and the stores, for a failure report.
    fn state(&self) -> String {
        let mut out = String::new();
        for n in 0..NODES_MAX {
            if self.procs[n] == Proc::Absent {
                continue;
            }
            let _ = write!(
                out,
                "\n  n{n} {:?} age {} behind {}: rows {:?} tombstones {:?} store {:?}",
                self.procs[n],
                self.age(n),
                self.behind[n],
                self.dir.rows[n],
                self.dir.tombs[n],
                self.stores[n]
            );
        }
        let _ = write!(
            out,
            "\n  under-replicated {:?}, database up {}",
            self.dir.under, self.dir.up
        );
        out
    }

    fn run(&mut self) -> Result<(), String> {
        for _ in 0..STEPS {
            self.step()?;
        }
        self.settle()?;
        self.check_settled()
    }
}

fn run_seed(seed: u64, verbose: bool) -> Result<Stats, String> {
    let mut sim = Sim::new(seed, verbose);
    match sim.run() {
        Ok(()) => Ok(sim.stats),
        Err(e) => {
            let mut report = String::new();
            let _ = writeln!(report, "cluster simulation failed, seed {seed}: {e}");
            let _ = writeln!(report, "state: {}", sim.state());
            let _ = writeln!(report, "last steps:");
            for line in &sim.log {
                let _ = writeln!(report, "  {line}");
            }
            let _ = writeln!(
                report,
                "rerun: PERMAFROST_SIM_SEED={seed} cargo test --workspace --test cluster_simulation -- --nocapture \
                 (PERMAFROST_SIM_VERBOSE=1 for every step)"
            );
            Err(report)
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

#[test]
fn cluster_directory_simulation() {
    let verbose = std::env::var_os("PERMAFROST_SIM_VERBOSE").is_some();
    if let Some(seed) = env_u64("PERMAFROST_SIM_SEED") {
        let stats = run_seed(seed, verbose).unwrap_or_else(|report| panic!("{report}"));
        eprintln!("seed {seed}: {stats:?}");
        return;
    }
    let count = env_u64("PERMAFROST_SIM_SEEDS").unwrap_or(DEFAULT_SCHEDULES);
    let base = env_u64("PERMAFROST_SIM_BASE").unwrap_or(0);
    let started = std::time::Instant::now();
    let mut total = Stats::default();
    for i in 0..count {
        // Spread seeds over u64 so that a run of more schedules covers new ones.
        let seed = base.wrapping_add(i).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        match run_seed(seed, verbose) {
            Ok(s) => {
                total.puts_acked += s.puts_acked;
                total.deletes_acked += s.deletes_acked;
                total.crashes += s.crashes;
                total.outages += s.outages;
                total.destroyed += s.destroyed;
                total.joined += s.joined;
                total.copies_made += s.copies_made;
                total.lost_tolerated += s.lost_tolerated;
                total.flights += s.flights;
            }
            Err(report) => panic!("{report}(schedule {} of {count})", i + 1),
        }
    }
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "{count} schedules in {secs:.2} s ({:.0}/s): {total:?}",
        count as f64 / secs.max(1e-9)
    );
    assert!(total.puts_acked > 0 && total.deletes_acked > 0 && total.crashes > 0);
    assert!(total.outages > 0 && total.destroyed > 0 && total.joined > 0 && total.copies_made > 0);
    assert!(total.flights > 0 && total.lost_tolerated > 0);
}
