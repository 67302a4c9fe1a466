//! `IdrDisk`: a logical byte space on a disk, every block protected by its iPG and its crc.
//!
//! Logical stripe `t` (`stripe_bytes()` bytes at logical offset `t · stripe_bytes()`) lives
//! in physical stripe `t` at `base_offset + t · physical_stripe_bytes()`. See `layout.rs` and
//! docs/idr.md for the layout, and the crate docs for the guarantees.

use std::sync::{Arc, Mutex};

use permafrost_disk::{AlignedBuf, Disk, DiskError, BLOCK_BYTES};

use crate::layout::{
    build_check_block, parse_check_block, table_crc, CheckState, Geometry, MAX_SCRAMBLED_BLOCKS,
};
use crate::{Codec, IdrConfig, IdrError, ReadReport, ReencodeReport, ScrubReport};

const BLOCK: u64 = BLOCK_BYTES as u64;
/// Largest physical I/O (and buffer) one read or write issues: bounds memory per call. 10 MiB holds the
/// 8 MiB of data of an engine chunk with its parity and check blocks (8.6 MiB with SPC 16+1, 9.1 MiB with
/// RS 16+2), so a chunk read is one disk I/O instead of two.
const BATCH_BYTES_MAX: usize = 10 << 20;
/// Batch buffers kept for reuse, process-wide (at most 8 × 10 MiB): allocating and
/// page-faulting a fresh 8 MiB buffer per call costs about as much as verifying its contents.
const POOL_BUFFERS_MAX: usize = 8;

static BUFFER_POOL: Mutex<Vec<AlignedBuf>> = Mutex::new(Vec::new());

/// A `BATCH_BYTES_MAX` buffer from the pool, returned to it on drop. Its contents are stale:
/// users overwrite what they use.
struct BatchBuf(Option<AlignedBuf>);

impl BatchBuf {
    fn take() -> BatchBuf {
        let pooled = BUFFER_POOL.lock().unwrap_or_else(|e| e.into_inner()).pop();
        BatchBuf(Some(
            pooled.unwrap_or_else(|| AlignedBuf::zeroed(BATCH_BYTES_MAX)),
        ))
    }
    fn get(&mut self, len: usize) -> &mut [u8] {
        &mut self.0.as_mut().expect("present until drop")[..len]
    }
}

impl Drop for BatchBuf {
    fn drop(&mut self) {
        let mut pool = BUFFER_POOL.lock().unwrap_or_else(|e| e.into_inner());
        if pool.len() < POOL_BUFFERS_MAX {
            pool.extend(self.0.take());
        }
    }
}

/// A logical byte space `[0, logical_capacity())` on a region of a [`Disk`], with
/// intra-disk redundancy, check-on-read and in-place repair. See the crate docs.
pub struct IdrDisk {
    disk: Arc<dyn Disk>,
    name: String,
    base_offset: u64,
    config: IdrConfig,
    codec: Box<dyn Codec>,
    geometry: Geometry,
    stripe_count: u64,
}

/// Result of verifying one stripe image in memory.
struct StripeOutcome {
    /// Per iPG: its data is verified (possibly after repair in the image).
    ipg_ok: Vec<bool>,
    /// Per physical position: repaired in the image, to be written back.
    dirty: Vec<bool>,
    blocks_repaired: u64,
    check_blocks_repaired: u64,
    never_written: bool,
}

/// A partial stripe merged with new data, ready to be written.
struct PreparedStripe {
    stripe: u64,
    image: AlignedBuf,
    dirty: Vec<bool>,
}

/// Logical ranges `(offset, len)`, adjacent ones merged.
#[derive(Default)]
struct Ranges(Vec<(u64, u64)>);

impl Ranges {
    fn push(&mut self, offset: u64, len: u64) {
        if let Some(last) = self.0.last_mut() {
            if last.0 + last.1 == offset {
                last.1 += len;
                return;
            }
        }
        self.0.push((offset, len));
    }
}

fn block(image: &[u8], position: usize) -> &[u8] {
    &image[position * BLOCK_BYTES..(position + 1) * BLOCK_BYTES]
}

fn block_mut(image: &mut [u8], position: usize) -> &mut [u8] {
    &mut image[position * BLOCK_BYTES..(position + 1) * BLOCK_BYTES]
}

fn is_io_error(error: &DiskError) -> bool {
    matches!(error, DiskError::Io { .. })
}

impl IdrDisk {
    /// An IDR space on `disk` from `base_offset` (a multiple of 4096) to the end of the disk,
    /// in whole stripes. Nothing is read or written: a fresh (zeroed) disk is a valid, empty
    /// IDR space, and an existing one is verified as it is read.
    pub fn new(
        disk: Arc<dyn Disk>,
        base_offset: u64,
        config: IdrConfig,
    ) -> Result<IdrDisk, IdrError> {
        let name = disk.describe();
        let config_error = |message: String| IdrError::Config {
            disk: name.clone(),
            message,
        };
        let codec = config.codec.codec();
        let s = config.scramble_groups;
        let scrambled = s.saturating_mul(codec.data_blocks() + codec.parity_blocks());
        if s == 0 || scrambled > MAX_SCRAMBLED_BLOCKS {
            return Err(config_error(format!(
                "scramble_groups = {s}: must be at least 1, and s·(n+k) = {scrambled} at most {MAX_SCRAMBLED_BLOCKS} \
                 (one crc per block must fit in the check block)"
            )));
        }
        if base_offset % BLOCK != 0 {
            return Err(config_error(format!(
                "base offset {base_offset} is not a multiple of 4096"
            )));
        }
        let geometry = Geometry {
            n: codec.data_blocks(),
            k: codec.parity_blocks(),
            s,
            codec_id: config.codec.id(),
        };
        let physical_stripe_bytes = geometry.physical_blocks() as u64 * BLOCK;
        let capacity = disk.capacity_bytes();
        let region = capacity.saturating_sub(base_offset);
        let stripe_count = region / physical_stripe_bytes;
        if stripe_count == 0 {
            return Err(config_error(format!(
                "{region} bytes from base offset {base_offset} (disk capacity {capacity}) hold no whole stripe \
                 of {physical_stripe_bytes} bytes"
            )));
        }
        Ok(IdrDisk {
            disk,
            name,
            base_offset,
            config,
            codec,
            geometry,
            stripe_count,
        })
    }

    /// The configuration this space was opened with.
    pub fn config(&self) -> IdrConfig {
        self.config
    }

    /// The code protecting each iPG.
    pub fn codec(&self) -> &dyn Codec {
        self.codec.as_ref()
    }

    /// The underlying disk's name.
    pub fn describe(&self) -> String {
        self.name.clone()
    }

    /// Logical bytes per stripe: `s · n · 4 KiB` (1 MiB by default). The unit of
    /// read-modify-write, and the unit callers should lock.
    pub fn stripe_bytes(&self) -> u64 {
        self.geometry.logical_blocks() as u64 * BLOCK
    }

    /// Physical bytes per stripe: `(2 + s · (n + k)) · 4 KiB`.
    pub fn physical_stripe_bytes(&self) -> u64 {
        self.geometry.physical_blocks() as u64 * BLOCK
    }

    /// Usable logical bytes: whole stripes only.
    pub fn logical_capacity(&self) -> u64 {
        self.stripe_count * self.stripe_bytes()
    }

    /// Read `buf.len()` logical bytes at `offset` (both multiples of 4096), verifying every
    /// block and repairing (in place on the disk) whatever the code can. Ranges that cannot be
    /// verified make the whole call fail with [`IdrError::Unrecoverable`] listing them; their
    /// bytes in `buf` are zeroed, never filled with unverified data (other bytes of `buf` are
    /// verified data). A stripe whose data blocks all match their crcs in its first check block is
    /// read without its parity and second check block ([`IdrDisk::scrub`] checks those); any
    /// other goes through the full check and repair.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<ReadReport, IdrError> {
        let len = buf.len() as u64;
        self.check_request(offset, len)?;
        if len == 0 {
            return Ok(ReadReport::default());
        }
        let stripe_bytes = self.stripe_bytes();
        let end = offset + len;
        let mut report = ReadReport::default();
        let mut bad = Ranges::default();
        let visited = self.for_each_read_stripe(
            offset / stripe_bytes,
            (end - 1) / stripe_bytes,
            |stripe, image, outcome| {
                report.blocks_repaired += outcome.blocks_repaired;
                report.check_blocks_repaired += outcome.check_blocks_repaired;
                let stripe_start = stripe * stripe_bytes;
                let from = offset.max(stripe_start);
                let to = end.min(stripe_start + stripe_bytes);
                for logical_block in
                    ((from - stripe_start) / BLOCK) as usize..((to - stripe_start) / BLOCK) as usize
                {
                    let logical_offset = stripe_start + logical_block as u64 * BLOCK;
                    let at = (logical_offset - offset) as usize;
                    let target = &mut buf[at..at + BLOCK_BYTES];
                    if outcome.ipg_ok[logical_block / self.geometry.n] {
                        crate::copy::copy_block(
                            target,
                            block(image, self.geometry.logical_position(logical_block)),
                        );
                    } else {
                        target.fill(0);
                        bad.push(logical_offset, BLOCK);
                    }
                }
            },
        );
        crate::copy::copies_done();
        visited?;
        if bad.0.is_empty() {
            Ok(report)
        } else {
            Err(IdrError::Unrecoverable { ranges: bad.0 })
        }
    }

    /// Write `data` at logical `offset` (both multiples of 4096). Whole stripes are encoded
    /// and written without reading anything. A partially covered stripe is read, verified and
    /// repaired, merged, re-encoded, and only its changed blocks are written; if an iPG of it
    /// cannot be verified and the write does not replace all of that iPG's data, the call
    /// fails with [`IdrError::Unrecoverable`] before writing anything.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), IdrError> {
        let len = data.len() as u64;
        self.check_request(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let stripe_bytes = self.stripe_bytes();
        let end = offset + len;
        let first = offset / stripe_bytes;
        let last = (end - 1) / stripe_bytes;
        let covers_whole =
            |stripe: u64| offset <= stripe * stripe_bytes && (stripe + 1) * stripe_bytes <= end;
        // Partial stripes first (at most two), so a refusal writes nothing.
        let head = (!covers_whole(first))
            .then(|| self.prepare_partial(first, offset, data))
            .transpose()?;
        let tail = (last != first && !covers_whole(last))
            .then(|| self.prepare_partial(last, offset, data))
            .transpose()?;

        if let Some(prepared) = &head {
            self.write_back(prepared.stripe, &prepared.image, &prepared.dirty)?;
        }
        let full_first = if head.is_some() { first + 1 } else { first };
        let full_end = if tail.is_some() { last } else { last + 1 };
        if full_first < full_end {
            let at = (full_first * stripe_bytes - offset) as usize;
            let bytes = ((full_end - full_first) * stripe_bytes) as usize;
            self.write_full_stripes(full_first, &data[at..at + bytes])?;
        }
        if let Some(prepared) = &tail {
            self.write_back(prepared.stripe, &prepared.image, &prepared.dirty)?;
        }
        Ok(())
    }

    /// Make the stripes touching `[offset, offset + len)` consistent again after an
    /// interrupted write (the engine's crash replay): data blocks inside the range are taken
    /// exactly as they read (zeros where unreadable), data blocks outside it as verified
    /// (repaired if possible, else as they read), then parity and check blocks are recomputed
    /// and the changed blocks written.
    pub fn reencode(&self, offset: u64, len: u64) -> Result<ReencodeReport, IdrError> {
        self.check_request(offset, len)?;
        let mut report = ReencodeReport::default();
        if len == 0 {
            return Ok(report);
        }
        let stripe_bytes = self.stripe_bytes();
        let end = offset + len;
        let physical_blocks = self.geometry.physical_blocks();
        let mut image = AlignedBuf::zeroed(self.physical_stripe_bytes() as usize);
        let mut unreadable = vec![false; physical_blocks];
        for stripe in offset / stripe_bytes..=(end - 1) / stripe_bytes {
            self.read_stripes(stripe, &mut image, &mut unreadable)?;
            let raw = image.clone();
            let outcome = self.decode_stripe(stripe, &mut image, &unreadable);
            let stripe_start = stripe * stripe_bytes;
            let range = ((offset.max(stripe_start) - stripe_start) / BLOCK) as usize
                ..((end.min(stripe_start + stripe_bytes) - stripe_start) / BLOCK) as usize;
            for logical_block in 0..self.geometry.logical_blocks() {
                let position = self.geometry.logical_position(logical_block);
                if range.contains(&logical_block)
                    || !outcome.ipg_ok[logical_block / self.geometry.n]
                {
                    block_mut(&mut image, position).copy_from_slice(block(&raw, position));
                    report.blocks_zeroed += unreadable[position] as u64;
                }
            }
            self.encode_stripe(stripe, &mut image);
            let dirty = self.changed_blocks(&raw, &image, &unreadable);
            self.write_back(stripe, &image, &dirty)?;
            report.stripes += 1;
        }
        Ok(report)
    }

    /// Verify and repair `[offset, offset + len)` rounded out to whole stripes. Unlike
    /// [`IdrDisk::read`], ranges that cannot be verified (whole iPGs) are listed in the
    /// report instead of failing the call; an error means the disk itself failed.
    pub fn scrub(&self, offset: u64, len: u64) -> Result<ScrubReport, IdrError> {
        self.check_request(offset, len)?;
        let mut report = ScrubReport::default();
        if len == 0 {
            return Ok(report);
        }
        let stripe_bytes = self.stripe_bytes();
        let ipg_bytes = self.geometry.n as u64 * BLOCK;
        let mut bad = Ranges::default();
        self.for_each_verified_stripe(
            offset / stripe_bytes,
            (offset + len - 1) / stripe_bytes,
            |stripe, _, outcome| {
                report.bytes_verified += stripe_bytes;
                report.stripes_never_written += outcome.never_written as u64;
                report.blocks_repaired += outcome.blocks_repaired;
                report.check_blocks_repaired += outcome.check_blocks_repaired;
                for (ipg, ok) in outcome.ipg_ok.iter().enumerate() {
                    if !ok {
                        bad.push(stripe * stripe_bytes + ipg as u64 * ipg_bytes, ipg_bytes);
                    }
                }
            },
        )?;
        report.unrecoverable = bad.0;
        Ok(report)
    }

    /// Make every completed write (including repairs) durable.
    pub fn sync(&self) -> Result<(), IdrError> {
        Ok(self.disk.sync()?)
    }

    fn check_request(&self, offset: u64, len: u64) -> Result<(), IdrError> {
        if offset % BLOCK != 0 || len % BLOCK != 0 {
            return Err(IdrError::Misaligned {
                disk: self.name.clone(),
                offset,
                len,
            });
        }
        let capacity = self.logical_capacity();
        if offset.checked_add(len).is_none_or(|end| end > capacity) {
            return Err(IdrError::OutOfRange {
                disk: self.name.clone(),
                offset,
                len,
                capacity,
            });
        }
        Ok(())
    }

    fn stripe_offset(&self, stripe: u64) -> u64 {
        self.base_offset + stripe * self.physical_stripe_bytes()
    }

    /// Stripes per batched I/O (at least one).
    fn batch_stripes(&self) -> u64 {
        (BATCH_BYTES_MAX as u64 / self.physical_stripe_bytes()).max(1)
    }

    /// Read, verify and repair stripes `first..=last` in batches, then hand each verified
    /// image to `visit`.
    fn for_each_verified_stripe(
        &self,
        first: u64,
        last: u64,
        mut visit: impl FnMut(u64, &[u8], &StripeOutcome),
    ) -> Result<(), IdrError> {
        let physical_blocks = self.geometry.physical_blocks();
        let physical_stripe_bytes = self.physical_stripe_bytes() as usize;
        let batch = self.batch_stripes().min(last - first + 1);
        let mut image = BatchBuf::take();
        let mut unreadable = vec![false; batch as usize * physical_blocks];
        let mut stripe = first;
        while stripe <= last {
            let count = batch.min(last - stripe + 1) as usize;
            let images = image.get(count * physical_stripe_bytes);
            let flags = &mut unreadable[..count * physical_blocks];
            self.read_stripes(stripe, images, flags)?;
            for (i, (one_image, one_flags)) in images
                .chunks_exact_mut(physical_stripe_bytes)
                .zip(flags.chunks_exact(physical_blocks))
                .enumerate()
            {
                let index = stripe + i as u64;
                let outcome = self.decode_stripe(index, one_image, one_flags);
                self.write_back(index, one_image, &outcome.dirty)?;
                visit(index, one_image, &outcome);
            }
            stripe += count as u64;
        }
        Ok(())
    }

    /// [`IdrDisk::for_each_verified_stripe`] for a read, without the parity when nothing is wrong: per stripe,
    /// the first check block and the data blocks (one range, `1 + s·n` blocks; the batch's ranges in one disk
    /// operation). A stripe whose first check block is valid and whose data blocks all match their crcs in it
    /// is handed to `visit` as read: its data is verified, and its parity and second check block are neither
    /// read nor checked (scrub does). Any other stripe (a check block not valid, a block that does not match,
    /// an I/O error in the batch) is read whole, verified and repaired by the full path.
    fn for_each_read_stripe(
        &self,
        first: u64,
        last: u64,
        mut visit: impl FnMut(u64, &[u8], &StripeOutcome),
    ) -> Result<(), IdrError> {
        let geometry = self.geometry;
        let physical_stripe_bytes = self.physical_stripe_bytes() as usize;
        let data_end = 1 + geometry.logical_blocks(); // check block A, then the data blocks
        let batch = self.batch_stripes().min(last - first + 1);
        let verified = StripeOutcome {
            ipg_ok: vec![true; geometry.s],
            dirty: vec![false; geometry.physical_blocks()],
            blocks_repaired: 0,
            check_blocks_repaired: 0,
            never_written: false,
        };
        let mut image = BatchBuf::take();
        let mut stripe = first;
        while stripe <= last {
            let count = batch.min(last - stripe + 1) as usize;
            let images = image.get(count * physical_stripe_bytes);
            let mut ranges: Vec<(u64, &mut [u8])> = images
                .chunks_exact_mut(physical_stripe_bytes)
                .enumerate()
                .map(|(i, one_image)| {
                    (
                        self.stripe_offset(stripe + i as u64),
                        &mut one_image[..data_end * BLOCK_BYTES],
                    )
                })
                .collect();
            let read = match self.disk.read_ranges_at(&mut ranges) {
                Ok(()) => true,
                Err(e) if is_io_error(&e) => false,
                Err(e) => return Err(e.into()),
            };
            drop(ranges);
            for (i, one_image) in images.chunks_exact(physical_stripe_bytes).enumerate() {
                let index = stripe + i as u64;
                if read && self.data_matches_first_check_block(index, one_image) {
                    visit(index, one_image, &verified);
                } else {
                    self.for_each_verified_stripe(index, index, &mut visit)?;
                }
            }
            stripe += count as u64;
        }
        Ok(())
    }

    /// The stripe image's first check block is valid for this stripe and every data block matches its crc.
    fn data_matches_first_check_block(&self, stripe: u64, image: &[u8]) -> bool {
        let table = block(image, 0);
        parse_check_block(&self.geometry, stripe, table) == CheckState::Valid
            && (1..=self.geometry.logical_blocks())
                .all(|p| crc_fast::crc32_iscsi(block(image, p)) == table_crc(table, p - 1))
    }

    /// Read consecutive stripes from `first` into `image` (a whole number of stripes), one
    /// disk I/O when all goes well. Blocks the disk cannot read are zeroed and flagged in
    /// `unreadable` (they are erasures); any other disk error fails the call.
    fn read_stripes(
        &self,
        first: u64,
        image: &mut [u8],
        unreadable: &mut [bool],
    ) -> Result<(), IdrError> {
        unreadable.fill(false);
        let offset = self.stripe_offset(first);
        match self.disk.read_at(offset, image) {
            Ok(()) => return Ok(()),
            Err(e) if is_io_error(&e) => {}
            Err(e) => return Err(e.into()),
        }
        // Narrow down: stripe by stripe, then block by block.
        let physical_stripe_bytes = self.physical_stripe_bytes() as usize;
        let several = image.len() > physical_stripe_bytes;
        for (i, (one_image, flags)) in image
            .chunks_exact_mut(physical_stripe_bytes)
            .zip(unreadable.chunks_exact_mut(self.geometry.physical_blocks()))
            .enumerate()
        {
            let stripe_offset = offset + (i * physical_stripe_bytes) as u64;
            if several {
                match self.disk.read_at(stripe_offset, one_image) {
                    Ok(()) => continue,
                    Err(e) if is_io_error(&e) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            for (b, (one_block, flag)) in one_image
                .chunks_exact_mut(BLOCK_BYTES)
                .zip(flags.iter_mut())
                .enumerate()
            {
                match self
                    .disk
                    .read_at(stripe_offset + b as u64 * BLOCK, one_block)
                {
                    Ok(()) => {}
                    Err(e) if is_io_error(&e) => {
                        one_block.fill(0);
                        *flag = true;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }

    /// Verify one stripe image in memory and repair what the code can, in the image.
    fn decode_stripe(&self, stripe: u64, image: &mut [u8], unreadable: &[bool]) -> StripeOutcome {
        let geometry = self.geometry;
        let mut outcome = StripeOutcome {
            ipg_ok: vec![true; geometry.s],
            dirty: vec![false; geometry.physical_blocks()],
            blocks_repaired: 0,
            check_blocks_repaired: 0,
            never_written: false,
        };
        let check_positions = [0, geometry.check_b()];
        let states = check_positions.map(|position| {
            if unreadable[position] {
                CheckState::Unreadable
            } else {
                parse_check_block(&geometry, stripe, block(image, position))
            }
        });
        let valid: Vec<usize> = (0..2).filter(|&c| states[c] == CheckState::Valid).collect();

        if valid.is_empty() {
            if let Some(reason) = states.iter().find_map(|s| match s {
                CheckState::Foreign(reason) => Some(reason),
                _ => None,
            }) {
                // The stripe holds data that belongs elsewhere: its own parity would agree
                // with it, so nothing here can be trusted.
                tracing::warn!(disk = %self.name, stripe, %reason, "misdirected write: stripe unrecoverable");
                outcome.ipg_ok.fill(false);
                return outcome;
            }
            if states.iter().all(|s| *s == CheckState::Zero)
                && !unreadable.contains(&true)
                && crate::xor::is_zero(image)
            {
                outcome.never_written = true;
                return outcome;
            }
            // Both check blocks lost: fall back to the parity of each iPG.
            for ipg in 0..geometry.s {
                outcome.ipg_ok[ipg] =
                    self.verify_by_parity_only(image, unreadable, ipg, &mut outcome);
            }
            if outcome.ipg_ok.iter().all(|&ok| ok) {
                self.write_check_blocks(stripe, image);
                for position in check_positions {
                    outcome.dirty[position] = true;
                }
                outcome.check_blocks_repaired += 2;
                tracing::info!(disk = %self.name, stripe, "both check blocks lost; rebuilt from verified parity");
            } else {
                tracing::warn!(disk = %self.name, stripe, "both check blocks lost and parity does not verify");
            }
            return outcome;
        }

        // Two valid copies that disagree (an interrupted update): trust the one more blocks agree with.
        let chosen = if valid.len() == 2
            && block(image, check_positions[0]) != block(image, check_positions[1])
        {
            let matches = |c: usize| {
                let table = block(image, check_positions[c]);
                (1..=geometry.scrambled_blocks())
                    .filter(|&p| {
                        !unreadable[p]
                            && crc_fast::crc32_iscsi(block(image, p)) == table_crc(table, p - 1)
                    })
                    .count()
            };
            if matches(1) > matches(0) {
                1
            } else {
                0
            }
        } else {
            valid[0]
        };
        let table_block = block(image, check_positions[chosen]).to_vec();

        // iPG by iPG, so its blocks are still in cache for the parity check after their crcs.
        for ipg in 0..geometry.s {
            let erased: Vec<usize> = (0..geometry.width())
                .filter(|&j| {
                    let position = geometry.position(ipg, j);
                    unreadable[position]
                        || crc_fast::crc32_iscsi(block(image, position))
                            != table_crc(&table_block, position - 1)
                })
                .collect();
            outcome.ipg_ok[ipg] = if erased.is_empty() {
                let ok = self.codec.verify(&self.ipg_shards(image, ipg));
                if !ok {
                    tracing::error!(disk = %self.name, stripe, ipg, "every block matches its crc but parity does not verify");
                }
                ok
            } else if erased.len() > geometry.k {
                false
            } else {
                let rebuilt = self
                    .codec
                    .reconstruct(&mut self.ipg_shards_mut(image, ipg), &erased)
                    .is_ok()
                    && erased.iter().all(|&j| {
                        let position = geometry.position(ipg, j);
                        crc_fast::crc32_iscsi(block(image, position))
                            == table_crc(&table_block, position - 1)
                    });
                if rebuilt {
                    for &j in &erased {
                        outcome.dirty[geometry.position(ipg, j)] = true;
                    }
                    outcome.blocks_repaired += erased.len() as u64;
                }
                rebuilt
            };
        }
        for position in check_positions {
            if block(image, position) != table_block.as_slice() {
                block_mut(image, position).copy_from_slice(&table_block);
                outcome.dirty[position] = true;
                outcome.check_blocks_repaired += 1;
            }
        }
        if outcome.blocks_repaired + outcome.check_blocks_repaired > 0 {
            tracing::info!(
                disk = %self.name, stripe,
                blocks = outcome.blocks_repaired, check_blocks = outcome.check_blocks_repaired,
                "repaired"
            );
        }
        outcome
    }

    /// Without crcs: an iPG is verified when its parity matches and at least one redundant
    /// block is left to check it (so with `k` parity blocks, up to `k - 1` unreadable blocks
    /// are rebuilt and then verified).
    fn verify_by_parity_only(
        &self,
        image: &mut [u8],
        unreadable: &[bool],
        ipg: usize,
        outcome: &mut StripeOutcome,
    ) -> bool {
        let geometry = self.geometry;
        let erased: Vec<usize> = (0..geometry.width())
            .filter(|&j| unreadable[geometry.position(ipg, j)])
            .collect();
        if erased.len() >= geometry.k && !erased.is_empty() {
            return false;
        }
        if !erased.is_empty()
            && self
                .codec
                .reconstruct(&mut self.ipg_shards_mut(image, ipg), &erased)
                .is_err()
        {
            return false;
        }
        if !self.codec.verify(&self.ipg_shards(image, ipg)) {
            return false;
        }
        for &j in &erased {
            outcome.dirty[geometry.position(ipg, j)] = true;
        }
        outcome.blocks_repaired += erased.len() as u64;
        true
    }

    /// The `n + k` blocks of an iPG in the stripe image, data then parity.
    fn ipg_shards<'a>(&self, image: &'a [u8], ipg: usize) -> Vec<&'a [u8]> {
        (0..self.geometry.width())
            .map(|j| block(image, self.geometry.position(ipg, j)))
            .collect()
    }

    /// As [`Self::ipg_shards`], mutable.
    fn ipg_shards_mut<'a>(&self, image: &'a mut [u8], ipg: usize) -> Vec<&'a mut [u8]> {
        let geometry = self.geometry;
        // Positions 1 + j·s + ipg ascend with j, so walking the blocks in order yields j order.
        image
            .chunks_exact_mut(BLOCK_BYTES)
            .enumerate()
            .filter_map(|(position, b)| {
                matches!(geometry.ipg_of(position), Some((g, _)) if g == ipg).then_some(b)
            })
            .collect()
    }

    /// Recompute every iPG's parity and both check blocks from the image's data blocks.
    fn encode_stripe(&self, stripe: u64, image: &mut [u8]) {
        let n = self.geometry.n;
        for ipg in 0..self.geometry.s {
            let mut shards = self.ipg_shards_mut(image, ipg);
            let (data, parity) = shards.split_at_mut(n);
            let data: Vec<&[u8]> = data.iter().map(|d| &**d).collect();
            self.codec.encode(&data, parity);
        }
        self.write_check_blocks(stripe, image);
    }

    /// Compute the crc table of the image's scrambled blocks into both check blocks.
    fn write_check_blocks(&self, stripe: u64, image: &mut [u8]) {
        let geometry = self.geometry;
        let crcs: Vec<u32> = (1..=geometry.scrambled_blocks())
            .map(|position| crc_fast::crc32_iscsi(block(image, position)))
            .collect();
        let mut check = vec![0u8; BLOCK_BYTES];
        build_check_block(&geometry, stripe, &crcs, &mut check);
        // Validate before it goes to disk, as it will be validated after it comes back.
        debug_assert_eq!(
            parse_check_block(&geometry, stripe, &check),
            CheckState::Valid
        );
        block_mut(image, 0).copy_from_slice(&check);
        block_mut(image, geometry.check_b()).copy_from_slice(&check);
    }

    /// Blocks that differ between what was read and the new image (unreadable ones always).
    fn changed_blocks(&self, raw: &[u8], image: &[u8], unreadable: &[bool]) -> Vec<bool> {
        (0..self.geometry.physical_blocks())
            .map(|position| unreadable[position] || block(raw, position) != block(image, position))
            .collect()
    }

    /// Write the dirty blocks of a stripe image, each run of adjacent blocks in one I/O.
    fn write_back(&self, stripe: u64, image: &[u8], dirty: &[bool]) -> Result<(), IdrError> {
        let offset = self.stripe_offset(stripe);
        let mut position = 0;
        while position < dirty.len() {
            if !dirty[position] {
                position += 1;
                continue;
            }
            let start = position;
            while position < dirty.len() && dirty[position] {
                position += 1;
            }
            self.disk.write_at(
                offset + start as u64 * BLOCK,
                &image[start * BLOCK_BYTES..position * BLOCK_BYTES],
            )?;
        }
        Ok(())
    }

    /// Read a partially written stripe, verify it, and merge the new data into it.
    fn prepare_partial(
        &self,
        stripe: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<PreparedStripe, IdrError> {
        let geometry = self.geometry;
        let mut image = AlignedBuf::zeroed(self.physical_stripe_bytes() as usize);
        let mut unreadable = vec![false; geometry.physical_blocks()];
        self.read_stripes(stripe, &mut image, &mut unreadable)?;
        let raw = image.clone();
        let outcome = self.decode_stripe(stripe, &mut image, &unreadable);

        let stripe_bytes = self.stripe_bytes();
        let stripe_start = stripe * stripe_bytes;
        let end = offset + data.len() as u64;
        let first_block = ((offset.max(stripe_start) - stripe_start) / BLOCK) as usize;
        let end_block = ((end.min(stripe_start + stripe_bytes) - stripe_start) / BLOCK) as usize;
        let mut bad = Ranges::default();
        for (ipg, &ok) in outcome.ipg_ok.iter().enumerate() {
            let replaced = first_block <= ipg * geometry.n && (ipg + 1) * geometry.n <= end_block;
            if !ok && !replaced {
                let ipg_bytes = geometry.n as u64 * BLOCK;
                bad.push(stripe_start + ipg as u64 * ipg_bytes, ipg_bytes);
            }
        }
        if !bad.0.is_empty() {
            return Err(IdrError::Unrecoverable { ranges: bad.0 });
        }
        for logical_block in first_block..end_block {
            let at = (stripe_start + logical_block as u64 * BLOCK - offset) as usize;
            block_mut(&mut image, geometry.logical_position(logical_block))
                .copy_from_slice(&data[at..at + BLOCK_BYTES]);
        }
        self.encode_stripe(stripe, &mut image);
        let dirty = self.changed_blocks(&raw, &image, &unreadable);
        Ok(PreparedStripe {
            stripe,
            image,
            dirty,
        })
    }

    /// Encode and write whole stripes from `first`, `data` holding their logical bytes, in
    /// batches of one disk I/O each. Reads nothing.
    fn write_full_stripes(&self, first: u64, data: &[u8]) -> Result<(), IdrError> {
        let stripe_bytes = self.stripe_bytes() as usize;
        let physical_stripe_bytes = self.physical_stripe_bytes() as usize;
        let count = (data.len() / stripe_bytes) as u64;
        debug_assert_eq!(data.len() % stripe_bytes, 0);
        let batch = self.batch_stripes().min(count);
        let mut image = BatchBuf::take();
        let mut done = 0u64;
        while done < count {
            let n_stripes = batch.min(count - done) as usize;
            let images = image.get(n_stripes * physical_stripe_bytes);
            for (i, one_image) in images.chunks_exact_mut(physical_stripe_bytes).enumerate() {
                let stripe = first + done + i as u64;
                let logical = &data[(done as usize + i) * stripe_bytes..][..stripe_bytes];
                for (logical_block, source) in logical.chunks_exact(BLOCK_BYTES).enumerate() {
                    block_mut(one_image, self.geometry.logical_position(logical_block))
                        .copy_from_slice(source);
                }
                self.encode_stripe(stripe, one_image);
            }
            self.disk
                .write_at(self.stripe_offset(first + done), images)?;
            done += n_stripes as u64;
        }
        Ok(())
    }
}
