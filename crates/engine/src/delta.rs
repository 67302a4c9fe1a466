//! The parity delta cache of delayed writes.
//!
//! A delayed write stores its parity delta `δ = old ⊕ new` in `DIR/deltas/<txn>.delta` (fsynced, with the
//! directory, before the data disk's finish mark) and registers it here for its three parity disks. Until a
//! parity disk has applied it (the Cache2Disk drain), the delta overlays every read of that parity disk:
//! `true(P) = raw(P) ⊕ pending deltas of P`.
//!
//! Bound: the sum of pending delta bytes (plus reservations of writers in progress) stays at most
//! `bytes_max`, except that a single delta larger than the bound is admitted when nothing else is pending.
//! Writers that would exceed it wait in [`DeltaCache::reserve`] while the drain runs.
//!
//! Concurrency rules (see docs/engine.md "Locks"): a delta is inserted while its data disk range is locked
//! exclusively; a parity disk applies and removes deltas only while its range is locked exclusively; readers of
//! a parity disk take a [`Snapshot`] after acquiring their locks and overlay only that snapshot.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

const DELTA_MAGIC: &[u8; 8] = b"PFDELTA1";
const DELTA_VERSION: u32 = 1;
/// magic 8 | version 4 | txn 8 | offset 8 | length 8 | blake3 32 | crc32c 4
const DELTA_HEADER_BYTES: usize = 72;

/// One parity delta: `data` applies at logical `offset` of each of its parity disks.
#[derive(Debug)]
pub(crate) struct Delta {
    pub txn_id: u64,
    pub offset: u64,
    pub data: Vec<u8>,
    /// The promise's disks `[data, hP, vP, vhP]` (to find a parity disk's journal slot).
    pub parities: [usize; 4],
}

impl Delta {
    pub(crate) fn end(&self) -> u64 {
        self.offset + self.data.len() as u64
    }

    /// XOR the part of this delta that overlaps `[offset, offset + buf.len())` into `buf`.
    pub(crate) fn xor_into(&self, offset: u64, buf: &mut [u8]) {
        let start = self.offset.max(offset);
        let end = self.end().min(offset + buf.len() as u64);
        if start >= end {
            return;
        }
        let src = &self.data[(start - self.offset) as usize..(end - self.offset) as usize];
        let dst = &mut buf[(start - offset) as usize..(end - offset) as usize];
        permafrost_idr::xor_into(dst, src);
    }
}

struct Entry {
    delta: Arc<Delta>,
    /// Parity disks that have not applied the delta yet.
    pending: Vec<usize>,
}

#[derive(Default)]
struct State {
    entries: BTreeMap<u64, Entry>,
    pending_bytes: u64,
    reserved_bytes: u64,
    /// Bytes writers are waiting to reserve (makes the drain run regardless of power state).
    waiting_bytes: u64,
}

/// Pending deltas of a set of parity disks, frozen at one moment.
#[derive(Default, Clone)]
pub(crate) struct Snapshot {
    by_disk: HashMap<usize, Vec<Arc<Delta>>>,
}

impl Snapshot {
    /// XOR every delta of `disk` overlapping `[offset, offset + buf.len())` into `buf`.
    pub(crate) fn overlay(&self, disk: usize, offset: u64, buf: &mut [u8]) {
        if let Some(deltas) = self.by_disk.get(&disk) {
            for delta in deltas {
                delta.xor_into(offset, buf);
            }
        }
    }
}

/// The delta cache of one grid.
pub(crate) struct DeltaCache {
    dir: PathBuf,
    bytes_max: u64,
    state: Mutex<State>,
    changed: Condvar,
}

/// Space reserved for one delta; returned to the cache on drop unless consumed by [`DeltaCache::insert`].
pub(crate) struct Reservation<'a> {
    cache: &'a DeltaCache,
    bytes: u64,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.bytes > 0 {
            let mut state = self.cache.state.lock();
            state.reserved_bytes -= self.bytes;
            self.cache.changed.notify_all();
        }
    }
}

impl DeltaCache {
    pub(crate) fn new(dir: PathBuf, bytes_max: u64) -> io::Result<DeltaCache> {
        fs::create_dir_all(&dir)?;
        Ok(DeltaCache {
            dir,
            bytes_max,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        })
    }

    fn path(&self, txn_id: u64) -> PathBuf {
        self.dir.join(format!("{txn_id:016}.delta"))
    }

    /// Txn ids of all delta files present.
    pub(crate) fn files(&self) -> io::Result<Vec<u64>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let name = entry?.file_name();
            let name = name.to_string_lossy();
            if let Some(txn) = name
                .strip_suffix(".delta")
                .and_then(|s| s.parse::<u64>().ok())
            {
                out.push(txn);
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Write the delta file of `txn_id` and make it durable (file and directory fsynced).
    pub(crate) fn write_file(&self, txn_id: u64, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut header = Vec::with_capacity(DELTA_HEADER_BYTES);
        header.extend_from_slice(DELTA_MAGIC);
        header.extend_from_slice(&DELTA_VERSION.to_le_bytes());
        header.extend_from_slice(&txn_id.to_le_bytes());
        header.extend_from_slice(&offset.to_le_bytes());
        header.extend_from_slice(&(data.len() as u64).to_le_bytes());
        header.extend_from_slice(blake3::hash(data).as_bytes());
        let crc = crc_fast::crc32_iscsi(&header);
        header.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(header.len(), DELTA_HEADER_BYTES);
        let path = self.path(txn_id);
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        file.write_all(&header)?;
        file.write_all(data)?;
        file.sync_all()?;
        File::open(&self.dir)?.sync_all()?;
        Ok(())
    }

    /// Read and verify the delta file of `txn_id`. `Ok(None)` if it is missing, truncated or corrupt.
    pub(crate) fn read_file(&self, txn_id: u64) -> io::Result<Option<Delta>> {
        let mut file = match File::open(self.path(txn_id)) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(parse_delta(&bytes).filter(|d| d.txn_id == txn_id))
    }

    pub(crate) fn remove_file(&self, txn_id: u64) -> io::Result<()> {
        match fs::remove_file(self.path(txn_id)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Wait until `bytes` fit under the bound (or nothing else is pending), or `stop()` says to give up.
    pub(crate) fn reserve(&self, bytes: u64, stop: &dyn Fn() -> bool) -> Option<Reservation<'_>> {
        let mut state = self.state.lock();
        state.waiting_bytes += bytes;
        loop {
            let used = state.pending_bytes + state.reserved_bytes;
            if used == 0 || used + bytes <= self.bytes_max {
                state.waiting_bytes -= bytes;
                state.reserved_bytes += bytes;
                return Some(Reservation { cache: self, bytes });
            }
            if stop() {
                state.waiting_bytes -= bytes;
                return None;
            }
            self.changed.wait_for(&mut state, Duration::from_millis(50));
        }
    }

    /// Register a durable delta for `parity_disks` (consuming its reservation).
    pub(crate) fn insert(
        &self,
        delta: Delta,
        parity_disks: Vec<usize>,
        mut reservation: Option<Reservation<'_>>,
    ) {
        let mut state = self.state.lock();
        if let Some(r) = reservation.as_mut() {
            state.reserved_bytes -= r.bytes;
            r.bytes = 0;
        }
        if parity_disks.is_empty() {
            return;
        }
        state.pending_bytes += delta.data.len() as u64;
        state.entries.insert(
            delta.txn_id,
            Entry {
                delta: Arc::new(delta),
                pending: parity_disks,
            },
        );
        self.changed.notify_all();
    }

    /// Pending deltas of `disks` now.
    pub(crate) fn snapshot(&self, disks: &[usize]) -> Snapshot {
        let state = self.state.lock();
        let mut by_disk: HashMap<usize, Vec<Arc<Delta>>> = HashMap::new();
        for entry in state.entries.values() {
            for &disk in &entry.pending {
                if disks.contains(&disk) {
                    by_disk
                        .entry(disk)
                        .or_default()
                        .push(Arc::clone(&entry.delta));
                }
            }
        }
        Snapshot { by_disk }
    }

    /// Pending deltas of one disk, sorted by offset.
    pub(crate) fn pending_of(&self, disk: usize) -> Vec<Arc<Delta>> {
        let mut deltas = self
            .snapshot(&[disk])
            .by_disk
            .remove(&disk)
            .unwrap_or_default();
        deltas.sort_by_key(|d| (d.offset, d.txn_id));
        deltas
    }

    /// `disk` has applied (or no longer needs) the delta of `txn_id`. Returns true when no parity disk needs it
    /// any more (the caller deletes the journal row and the file).
    pub(crate) fn complete(&self, txn_id: u64, disk: usize) -> bool {
        let mut state = self.state.lock();
        let Some(entry) = state.entries.get_mut(&txn_id) else {
            return false;
        };
        entry.pending.retain(|&d| d != disk);
        if entry.pending.is_empty() {
            let entry = state.entries.remove(&txn_id).expect("present above");
            state.pending_bytes -= entry.delta.data.len() as u64;
            self.changed.notify_all();
            true
        } else {
            false
        }
    }

    /// Parity disks still owed by `txn_id`.
    pub(crate) fn pending_disks_of(&self, txn_id: u64) -> Vec<usize> {
        self.state
            .lock()
            .entries
            .get(&txn_id)
            .map(|e| e.pending.clone())
            .unwrap_or_default()
    }

    /// Parity disks with pending deltas.
    pub(crate) fn disks_with_pending(&self) -> Vec<usize> {
        let state = self.state.lock();
        let mut disks: Vec<usize> = state
            .entries
            .values()
            .flat_map(|e| e.pending.iter().copied())
            .collect();
        disks.sort_unstable();
        disks.dedup();
        disks
    }

    pub(crate) fn pending_bytes(&self) -> u64 {
        self.state.lock().pending_bytes
    }

    pub(crate) fn pending_bytes_of(&self, disk: usize) -> u64 {
        let state = self.state.lock();
        state
            .entries
            .values()
            .filter(|e| e.pending.contains(&disk))
            .map(|e| e.delta.data.len() as u64)
            .sum()
    }

    /// True when writers wait for space: the drain must run whatever the power state.
    pub(crate) fn over_bound(&self) -> bool {
        let state = self.state.lock();
        state.waiting_bytes > 0 && state.pending_bytes > 0
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.state.lock().entries.is_empty()
    }

    /// Wait (bounded) for a change of the cache.
    pub(crate) fn wait_change(&self, timeout: Duration) {
        let mut state = self.state.lock();
        self.changed.wait_for(&mut state, timeout);
    }
}

pub(crate) fn parse_delta(bytes: &[u8]) -> Option<Delta> {
    if bytes.len() < DELTA_HEADER_BYTES || &bytes[..8] != DELTA_MAGIC {
        return None;
    }
    let header = &bytes[..DELTA_HEADER_BYTES];
    let crc = u32::from_le_bytes(header[68..72].try_into().ok()?);
    if crc_fast::crc32_iscsi(&header[..68]) != crc {
        return None;
    }
    let u64_at = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"));
    let version = u32::from_le_bytes(header[8..12].try_into().ok()?);
    if version != DELTA_VERSION {
        return None;
    }
    let txn_id = u64_at(12);
    let offset = u64_at(20);
    let length = u64_at(28) as usize;
    let data = bytes.get(DELTA_HEADER_BYTES..DELTA_HEADER_BYTES.checked_add(length)?)?;
    if blake3::hash(data).as_bytes() != &header[36..68] {
        return None;
    }
    Some(Delta {
        txn_id,
        offset,
        data: data.to_vec(),
        parities: [0; 4],
    })
}

/// Path of the delta directory of a grid directory.
pub(crate) fn delta_dir(grid_dir: &Path) -> PathBuf {
    grid_dir.join("deltas")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_files_round_trip_and_corruption_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DeltaCache::new(dir.path().join("deltas"), 1 << 20).unwrap();
        let data: Vec<u8> = (0..8192u32).map(|i| i as u8).collect();
        cache.write_file(42, 4096, &data).unwrap();
        let delta = cache.read_file(42).unwrap().unwrap();
        assert_eq!(
            (delta.txn_id, delta.offset, delta.data.as_slice()),
            (42, 4096, data.as_slice())
        );
        assert_eq!(cache.files().unwrap(), vec![42]);
        // Flip one data byte: the blake3 check rejects it.
        let path = cache.path(42);
        let mut bytes = fs::read(&path).unwrap();
        bytes[DELTA_HEADER_BYTES + 100] ^= 1;
        fs::write(&path, &bytes).unwrap();
        assert!(cache.read_file(42).unwrap().is_none());
        cache.remove_file(42).unwrap();
        assert!(cache.read_file(42).unwrap().is_none());
    }

    #[test]
    fn overlay_xors_pending_deltas_until_every_parity_completed() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DeltaCache::new(dir.path().join("deltas"), 1 << 20).unwrap();
        cache.insert(
            Delta {
                txn_id: 1,
                offset: 0,
                data: vec![0xF0; 8],
                parities: [0; 4],
            },
            vec![10, 11],
            None,
        );
        cache.insert(
            Delta {
                txn_id: 2,
                offset: 4,
                data: vec![0x0F; 8],
                parities: [0; 4],
            },
            vec![10],
            None,
        );
        let snap = cache.snapshot(&[10, 11]);
        let mut buf = vec![0u8; 16];
        snap.overlay(10, 0, &mut buf);
        assert_eq!(&buf[..4], &[0xF0; 4]);
        assert_eq!(&buf[4..8], &[0xFF; 4]);
        assert_eq!(&buf[8..12], &[0x0F; 4]);
        assert_eq!(&buf[12..], &[0; 4]);
        assert_eq!(cache.pending_bytes(), 16);
        assert!(!cache.complete(1, 10));
        assert!(cache.complete(1, 11));
        assert!(cache.complete(2, 10));
        assert!(cache.is_empty());
        assert_eq!(cache.pending_bytes(), 0);
    }

    #[test]
    fn writers_wait_while_pending_bytes_exceed_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Arc::new(DeltaCache::new(dir.path().join("deltas"), 100).unwrap());
        let r = cache.reserve(80, &|| false).unwrap();
        cache.insert(
            Delta {
                txn_id: 1,
                offset: 0,
                data: vec![1; 80],
                parities: [0; 4],
            },
            vec![5],
            Some(r),
        );
        // 80 + 40 > 100: waits until the drain completes txn 1.
        let waiter = {
            let cache = Arc::clone(&cache);
            std::thread::spawn(move || {
                let r = cache.reserve(40, &|| false);
                assert!(r.is_some());
            })
        };
        std::thread::sleep(Duration::from_millis(60));
        assert!(
            cache.over_bound(),
            "a waiting writer must make the drain run"
        );
        assert!(!waiter.is_finished());
        assert!(cache.complete(1, 5));
        waiter.join().unwrap();
        // Giving up through stop() returns None.
        cache.insert(
            Delta {
                txn_id: 2,
                offset: 0,
                data: vec![1; 80],
                parities: [0; 4],
            },
            vec![5],
            None,
        );
        assert!(cache.reserve(40, &|| true).is_none());
    }
}
