//! Salvage: rebuild objects from a grid bucket without the catalog (`permafrost_format::salvage_objects`),
//! reading the bucket through the engine, or a raw disk image through its intra-disk redundancy layer.

use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

use permafrost_engine::Engine;
pub use permafrost_format::{SalvageProgress, SalvageReport};
use permafrost_idr::{IdrConfig, IdrDisk};

use crate::{Result, StoreError};

/// Bytes fetched per read of the underlying space.
const WINDOW_BYTES: usize = 4 << 20;

/// A seekable reader over a 4096-aligned logical space read in windows.
struct WindowReader<F: FnMut(u64, &mut [u8]) -> io::Result<()>> {
    read_at: F,
    len_bytes: u64,
    pos: u64,
    window: Vec<u8>,
    window_start: u64,
    window_len: usize,
}

impl<F: FnMut(u64, &mut [u8]) -> io::Result<()>> WindowReader<F> {
    fn new(read_at: F, len_bytes: u64) -> Self {
        WindowReader {
            read_at,
            len_bytes,
            pos: 0,
            window: vec![0; WINDOW_BYTES],
            window_start: 0,
            window_len: 0,
        }
    }
}

impl<F: FnMut(u64, &mut [u8]) -> io::Result<()>> Read for WindowReader<F> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.len_bytes || buf.is_empty() {
            return Ok(0);
        }
        let in_window =
            self.pos >= self.window_start && self.pos < self.window_start + self.window_len as u64;
        if !in_window {
            let start = self.pos / 4096 * 4096;
            let len = ((self.len_bytes - start) as usize).min(WINDOW_BYTES);
            (self.read_at)(start, &mut self.window[..len])?;
            self.window_start = start;
            self.window_len = len;
        }
        let at = (self.pos - self.window_start) as usize;
        let n = buf.len().min(self.window_len - at);
        buf[..n].copy_from_slice(&self.window[at..at + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl<F: FnMut(u64, &mut [u8]) -> io::Result<()>> Seek for WindowReader<F> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = match to {
            SeekFrom::Start(p) => p as i128,
            SeekFrom::Current(d) => self.pos as i128 + d as i128,
            SeekFrom::End(d) => self.len_bytes as i128 + d as i128,
        };
        if target < 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "seek before the start",
            ));
        }
        self.pos = target as u64;
        Ok(self.pos)
    }
}

/// Salvage grid bucket `grid_bucket` read through the engine (reconstructing from parity where the disk is
/// failed or damaged). Never-written ranges read as zeros without touching the disk.
pub fn salvage_through_engine(
    engine: &Engine,
    grid_bucket: usize,
    out_dir: &Path,
    progress: &mut dyn FnMut(&SalvageProgress),
) -> Result<SalvageReport> {
    if grid_bucket >= engine.buckets() {
        return Err(StoreError::InvalidArgument(format!(
            "grid bucket {grid_bucket} does not exist ({} buckets)",
            engine.buckets()
        )));
    }
    let len = engine.bucket_capacity_bytes();
    let reader = WindowReader::new(
        |offset, buf: &mut [u8]| {
            let mut promise = engine
                .read(grid_bucket, offset, buf.len() as u64)
                .map_err(io::Error::other)?;
            promise.read_exact(buf)
        },
        len,
    );
    Ok(permafrost_format::salvage_objects(
        reader, len, out_dir, progress,
    )?)
}

/// Salvage a raw disk image of a data disk (a file-backed disk or a block device) without the engine or the
/// catalog: the disk's logical space is read through its intra-disk redundancy (default configuration, after
/// the 1 MiB disk header), repairing what IDR can.
pub fn salvage_disk_image(
    image: &Path,
    out_dir: &Path,
    progress: &mut dyn FnMut(&SalvageProgress),
) -> Result<SalvageReport> {
    let disk = permafrost_disk::FileDisk::open(image).map_err(|e| {
        StoreError::InvalidArgument(format!("cannot open disk image {}: {e}", image.display()))
    })?;
    let idr = IdrDisk::new(
        Arc::new(disk),
        permafrost_engine::HEADER_BYTES,
        IdrConfig::default(),
    )
    .map_err(|e| StoreError::InvalidArgument(format!("disk image {}: {e}", image.display())))?;
    let len = idr.logical_capacity();
    let reader = WindowReader::new(
        |offset, buf: &mut [u8]| idr.read(offset, buf).map(|_| ()).map_err(io::Error::other),
        len,
    );
    Ok(permafrost_format::salvage_objects(
        reader, len, out_dir, progress,
    )?)
}
