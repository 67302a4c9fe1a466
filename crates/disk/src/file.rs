//! A disk backed by a fixed-size sparse file, with O_DIRECT where the file system allows.
//!
//! Also holds the positioned-I/O helpers that [`crate::BlockDisk`] shares: both
//! read and write with `pread`/`pwrite`, bouncing through an [`AlignedBuf`] when
//! O_DIRECT is on and the caller's buffer is not 4096-aligned.

use crate::{check_io, check_ranges, AlignedBuf, Disk, DiskError, BLOCK_BYTES};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Largest bounce buffer allocated for one unaligned request; bigger requests
/// are bounced in chunks of this size.
const BOUNCE_BYTES_MAX: usize = 1 << 20;

#[cfg(target_os = "linux")]
pub(crate) const O_DIRECT: libc::c_int = libc::O_DIRECT;
#[cfg(not(target_os = "linux"))]
pub(crate) const O_DIRECT: libc::c_int = 0;

/// A disk stored in a regular file of fixed length. Blocks never written read
/// as zeros and take no space on the host (the file is sparse).
///
/// The file is opened with O_DIRECT when the host file system supports it, so
/// reads and writes bypass the page cache as they would on a raw disk; otherwise
/// it falls back to buffered I/O ([`FileDisk::is_direct`] tells which). Either
/// way [`Disk::sync`] is `fdatasync`, so durability does not depend on the mode.
pub struct FileDisk {
    io: PositionedFile,
    path: PathBuf,
    capacity_bytes: u64,
}

impl FileDisk {
    /// Create a new sparse file of `capacity_bytes` (a non-zero multiple of
    /// 4096) at `path` and open it. Fails if the file already exists.
    pub fn create(path: impl AsRef<Path>, capacity_bytes: u64) -> Result<FileDisk, DiskError> {
        FileDisk::create_with(path.as_ref(), capacity_bytes, false)
    }

    /// Like [`FileDisk::create`], but an existing file at `path` is replaced by
    /// an empty (all-zero, sparse) one: for replacement disks.
    pub fn create_or_replace(
        path: impl AsRef<Path>,
        capacity_bytes: u64,
    ) -> Result<FileDisk, DiskError> {
        FileDisk::create_with(path.as_ref(), capacity_bytes, true)
    }

    /// Open an existing disk file. Its capacity is the file length, which must
    /// be a non-zero multiple of 4096.
    pub fn open(path: impl AsRef<Path>) -> Result<FileDisk, DiskError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let (file, direct) = open_rw(path, true)?;
        let capacity_bytes = file
            .metadata()
            .map_err(|e| setup(&name, format!("cannot read file metadata: {e}")))?
            .len();
        if capacity_bytes == 0 || capacity_bytes % BLOCK_BYTES as u64 != 0 {
            return Err(setup(
                &name,
                format!("file length {capacity_bytes} bytes is not a non-zero multiple of {BLOCK_BYTES}"),
            ));
        }
        let io = PositionedFile::new(file, name, direct);
        Ok(FileDisk {
            io,
            path: path.to_path_buf(),
            capacity_bytes,
        })
    }

    fn create_with(path: &Path, capacity_bytes: u64, replace: bool) -> Result<FileDisk, DiskError> {
        let name = path.display().to_string();
        if capacity_bytes == 0 || !capacity_bytes.is_multiple_of(BLOCK_BYTES as u64) {
            return Err(setup(
                &name,
                format!(
                    "capacity {capacity_bytes} bytes is not a non-zero multiple of {BLOCK_BYTES}"
                ),
            ));
        }
        let mut options = OpenOptions::new();
        options.read(true).write(true);
        if replace {
            options.create(true).truncate(true);
        } else {
            options.create_new(true);
        }
        let file = options.open(path).map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                setup(
                    &name,
                    "file already exists; refusing to overwrite a disk".to_string(),
                )
            } else {
                setup(&name, format!("cannot create disk file: {e}"))
            }
        })?;
        // Truncating to 0 first makes a replaced file all holes, then set_len
        // extends it without allocating blocks.
        file.set_len(0)
            .and_then(|()| file.set_len(capacity_bytes))
            .and_then(|()| file.sync_all())
            .map_err(|e| {
                setup(
                    &name,
                    format!("cannot size disk file to {capacity_bytes} bytes: {e}"),
                )
            })?;
        sync_parent_dir(path)
            .map_err(|e| setup(&name, format!("cannot sync parent directory: {e}")))?;
        drop(file);
        FileDisk::open(path)
    }

    /// True when I/O bypasses the page cache (O_DIRECT); false when the file
    /// system refused O_DIRECT and buffered I/O is used.
    pub fn is_direct(&self) -> bool {
        self.io.direct
    }

    /// The path of the backing file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Disk for FileDisk {
    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        check_io(self, offset, buf.len())?;
        self.io.read_at(offset, buf)
    }
    fn read_ranges_at(&self, ranges: &mut [(u64, &mut [u8])]) -> Result<(), DiskError> {
        check_ranges(self, ranges)?;
        self.io.read_ranges_at(ranges)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        check_io(self, offset, buf.len())?;
        self.io.write_at(offset, buf)
    }
    fn sync(&self) -> Result<(), DiskError> {
        self.io.sync()
    }
    fn describe(&self) -> String {
        self.io.name.clone()
    }
}

/// A file or device read and written with pread/pwrite, possibly O_DIRECT.
pub(crate) struct PositionedFile {
    file: File,
    pub(crate) name: String,
    pub(crate) direct: bool,
}

impl PositionedFile {
    pub(crate) fn new(file: File, name: String, direct: bool) -> PositionedFile {
        PositionedFile { file, name, direct }
    }

    /// Read exactly `buf.len()` bytes at `offset` (already validated by the caller).
    pub(crate) fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        if !self.direct || AlignedBuf::is_aligned(buf) {
            return self
                .file
                .read_exact_at(buf, offset)
                .map_err(|e| self.error(offset, buf.len(), e));
        }
        let mut bounce = AlignedBuf::zeroed(buf.len().min(BOUNCE_BYTES_MAX));
        for (index, chunk) in buf.chunks_mut(BOUNCE_BYTES_MAX).enumerate() {
            let chunk_offset = offset + (index * BOUNCE_BYTES_MAX) as u64;
            let staged = &mut bounce[..chunk.len()];
            self.file
                .read_exact_at(staged, chunk_offset)
                .map_err(|e| self.error(chunk_offset, chunk.len(), e))?;
            chunk.copy_from_slice(staged);
        }
        Ok(())
    }

    /// Read each range (already validated by the caller) with two reads in flight, taken in the order given:
    /// the ranges of one call are close together (an IDR batch's stripes without their parity), and with one
    /// read in flight the device idles between them for a request's round trip. Two keep it busy, and on a
    /// rotating disk they are two neighbouring requests served in order. A failed range fails the call; the
    /// ranges after it may or may not have been read.
    pub(crate) fn read_ranges_at(&self, ranges: &mut [(u64, &mut [u8])]) -> Result<(), DiskError> {
        if ranges.len() < 2 {
            return ranges
                .iter_mut()
                .try_for_each(|(offset, buf)| self.read_at(*offset, buf));
        }
        let next = Mutex::new(ranges.iter_mut());
        let failed = AtomicBool::new(false);
        let read_some = || -> Result<(), DiskError> {
            while !failed.load(Ordering::Relaxed) {
                let Some((offset, buf)) = next.lock().unwrap_or_else(|e| e.into_inner()).next()
                else {
                    return Ok(());
                };
                if let Err(e) = self.read_at(*offset, buf) {
                    failed.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
            Ok(())
        };
        std::thread::scope(|scope| {
            let other = std::thread::Builder::new()
                .name("permafrost-disk-read".into())
                .spawn_scoped(scope, read_some);
            let mine = read_some();
            match other {
                Ok(handle) => mine.and(handle.join().unwrap_or_else(|_| {
                    Err(self.error(0, 0, io::Error::other("a read thread panicked")))
                })),
                Err(_) => mine, // no second thread: this one read every range
            }
        })
    }

    /// Write all of `buf` at `offset` (already validated by the caller).
    pub(crate) fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        if !self.direct || AlignedBuf::is_aligned(buf) {
            return self
                .file
                .write_all_at(buf, offset)
                .map_err(|e| self.error(offset, buf.len(), e));
        }
        let mut bounce = AlignedBuf::zeroed(buf.len().min(BOUNCE_BYTES_MAX));
        for (index, chunk) in buf.chunks(BOUNCE_BYTES_MAX).enumerate() {
            let chunk_offset = offset + (index * BOUNCE_BYTES_MAX) as u64;
            let staged = &mut bounce[..chunk.len()];
            staged.copy_from_slice(chunk);
            self.file
                .write_all_at(staged, chunk_offset)
                .map_err(|e| self.error(chunk_offset, chunk.len(), e))?;
        }
        Ok(())
    }

    /// `fdatasync`.
    pub(crate) fn sync(&self) -> Result<(), DiskError> {
        self.file.sync_data().map_err(|e| self.error(0, 0, e))
    }

    fn error(&self, offset: u64, len: usize, source: io::Error) -> DiskError {
        DiskError::Io {
            disk: self.name.clone(),
            offset,
            len,
            source,
        }
    }
}

/// Open `path` read-write, with O_DIRECT if `try_direct` and the file system
/// supports it. Returns the file and whether O_DIRECT is on.
fn open_rw(path: &Path, try_direct: bool) -> Result<(File, bool), DiskError> {
    let name = path.display().to_string();
    let open = |flags: libc::c_int| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(flags)
            .open(path)
    };
    if try_direct && O_DIRECT != 0 {
        match open(O_DIRECT) {
            Ok(file) => {
                // Probe: some file systems accept the flag and refuse the I/O.
                let mut probe = AlignedBuf::zeroed(BLOCK_BYTES);
                match file.read_at(&mut probe, 0) {
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                    _ => return Ok((file, true)),
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(setup(&name, format!("cannot open disk file: {e}"))),
        }
        tracing::info!(disk = %name, "file system refuses O_DIRECT; using buffered I/O");
    }
    let file = open(0).map_err(|e| setup(&name, format!("cannot open disk file: {e}")))?;
    Ok((file, false))
}

fn sync_parent_dir(path: &Path) -> io::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()
}

pub(crate) fn setup(disk: &str, message: String) -> DiskError {
    DiskError::Setup {
        disk: disk.to_string(),
        message,
    }
}
