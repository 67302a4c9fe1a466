//! Test disk: a `MemDisk` with injectable I/O errors, whole-disk failure, raw access and
//! I/O counters. Writing a block with an injected read error heals it (a drive remaps a
//! sector on write).

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use permafrost_disk::{check_io, Disk, DiskError, MemDisk, BLOCK_BYTES};
use permafrost_idr::{CodecKind, IdrConfig, IdrDisk};

pub const B: u64 = BLOCK_BYTES as u64;
/// Non-zero base offset, as the engine uses (its disk header lives below).
pub const BASE_OFFSET: u64 = 3 * B;

pub struct TestDisk {
    inner: MemDisk,
    bad_blocks: Mutex<BTreeSet<u64>>,
    failed: AtomicBool,
    /// Read operations: one per `read_at`, one per `read_ranges_at` however many ranges it has.
    pub reads: AtomicU64,
    pub bytes_read: AtomicU64,
    pub writes: AtomicU64,
}

impl TestDisk {
    pub fn new(capacity_bytes: u64) -> TestDisk {
        TestDisk {
            inner: MemDisk::new("test-disk", capacity_bytes),
            bad_blocks: Mutex::new(BTreeSet::new()),
            failed: AtomicBool::new(false),
            reads: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        }
    }
    /// Reads touching this physical block fail with an I/O error until it is written.
    pub fn inject_eio(&self, block: u64) {
        self.bad_blocks.lock().insert(block);
    }
    pub fn fail(&self) {
        self.failed.store(true, Ordering::SeqCst);
    }
    pub fn raw_read(&self, block: u64) -> Vec<u8> {
        let mut buf = vec![0; BLOCK_BYTES];
        self.inner.read_at(block * B, &mut buf).unwrap();
        buf
    }
    pub fn raw_write(&self, block: u64, bytes: &[u8]) {
        self.inner.write_at(block * B, bytes).unwrap();
    }
    pub fn flip_bit(&self, byte_offset: u64, bit: u8) {
        let block = byte_offset / B;
        let mut buf = self.raw_read(block);
        buf[(byte_offset % B) as usize] ^= 1 << bit;
        self.raw_write(block, &buf);
    }
    /// Every byte of the disk (for comparing before/after).
    pub fn snapshot(&self) -> Vec<u8> {
        let mut buf = vec![0; self.inner.capacity_bytes() as usize];
        self.inner.read_at(0, &mut buf).unwrap();
        buf
    }
    fn read_one(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        if self.failed.load(Ordering::SeqCst) {
            return Err(DiskError::Failed {
                disk: self.describe(),
            });
        }
        check_io(self, offset, buf.len())?;
        self.bytes_read
            .fetch_add(buf.len() as u64, Ordering::SeqCst);
        let first = offset / B;
        let end = first + buf.len() as u64 / B;
        if self.bad_blocks.lock().range(first..end).next().is_some() {
            return Err(DiskError::Io {
                disk: self.describe(),
                offset,
                len: buf.len(),
                source: std::io::Error::other("injected latent sector error"),
            });
        }
        self.inner.read_at(offset, buf)
    }
    pub fn io_counts(&self) -> (u64, u64) {
        (
            self.reads.load(Ordering::SeqCst),
            self.writes.load(Ordering::SeqCst),
        )
    }
}

impl Disk for TestDisk {
    fn capacity_bytes(&self) -> u64 {
        self.inner.capacity_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.read_one(offset, buf)
    }
    fn read_ranges_at(&self, ranges: &mut [(u64, &mut [u8])]) -> Result<(), DiskError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        for (offset, buf) in ranges.iter_mut() {
            self.read_one(*offset, buf)?;
        }
        Ok(())
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        if self.failed.load(Ordering::SeqCst) {
            return Err(DiskError::Failed {
                disk: self.describe(),
            });
        }
        check_io(self, offset, buf.len())?;
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.inner.write_at(offset, buf)?;
        let first = offset / B;
        let end = first + buf.len() as u64 / B;
        let mut bad = self.bad_blocks.lock();
        let healed: Vec<u64> = bad.range(first..end).copied().collect();
        for block in healed {
            bad.remove(&block);
        }
        Ok(())
    }
    fn sync(&self) -> Result<(), DiskError> {
        Ok(())
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// The layout as docs/idr.md describes it, re-derived independently of the crate.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub n: u64,
    pub k: u64,
    pub s: u64,
}

impl Shape {
    pub fn of(config: IdrConfig) -> Shape {
        let (n, k) = match config.codec {
            CodecKind::Spc16 => (16, 1),
            CodecKind::Rs16x2 => (16, 2),
        };
        Shape {
            n,
            k,
            s: config.scramble_groups as u64,
        }
    }
    pub fn physical_blocks(&self) -> u64 {
        2 + self.s * (self.n + self.k)
    }
    pub fn stripe_bytes(&self) -> u64 {
        self.s * self.n * B
    }
    pub fn ipg_bytes(&self) -> u64 {
        self.n * B
    }
    /// Absolute disk block of position `position` of stripe `stripe`.
    pub fn disk_block(&self, stripe: u64, position: u64) -> u64 {
        BASE_OFFSET / B + stripe * self.physical_blocks() + position
    }
    /// Absolute disk block of block `j` (data then parity) of iPG `ipg` of `stripe`.
    pub fn ipg_block(&self, stripe: u64, ipg: u64, j: u64) -> u64 {
        self.disk_block(stripe, 1 + j * self.s + ipg)
    }
    /// (stripe, iPG) of an absolute disk block, None for check blocks and blocks outside.
    pub fn ipg_of_disk_block(&self, block: u64) -> Option<(u64, u64)> {
        let rel = block.checked_sub(BASE_OFFSET / B)?;
        let (stripe, position) = (rel / self.physical_blocks(), rel % self.physical_blocks());
        if position == 0 || position == self.physical_blocks() - 1 {
            return None;
        }
        Some((stripe, (position - 1) % self.s))
    }
}

/// A fresh disk with room for `stripes` stripes plus some slack that must go unused.
pub fn setup(config: IdrConfig, stripes: u64) -> (Arc<TestDisk>, IdrDisk, Shape) {
    let shape = Shape::of(config);
    let capacity = BASE_OFFSET + stripes * shape.physical_blocks() * B + 5 * B;
    let disk = Arc::new(TestDisk::new(capacity));
    let idr = IdrDisk::new(disk.clone(), BASE_OFFSET, config).expect("valid config");
    assert_eq!(idr.logical_capacity(), stripes * shape.stripe_bytes());
    (disk, idr, shape)
}

/// Deterministic pseudo-random bytes.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

pub fn spc(s: usize) -> IdrConfig {
    IdrConfig {
        codec: CodecKind::Spc16,
        scramble_groups: s,
    }
}

pub fn rs(s: usize) -> IdrConfig {
    IdrConfig {
        codec: CodecKind::Rs16x2,
        scramble_groups: s,
    }
}
