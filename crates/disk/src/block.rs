//! A disk backed by a block device (`/dev/sdX`, `/dev/loopN`), always O_DIRECT.

use crate::file::{setup, PositionedFile, O_DIRECT};
use crate::{check_io, check_ranges, Disk, DiskError, BLOCK_BYTES};
use std::fs::OpenOptions;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// `BLKGETSIZE64 = _IOR(0x12, 114, size_t)`: device size in bytes (not in libc).
#[cfg(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc64"
))]
const BLKGETSIZE64: u64 = 0x4008_1272;
#[cfg(not(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc64"
)))]
const BLKGETSIZE64: u64 = 0x8008_1272;

/// A whole block device used as one disk. I/O is O_DIRECT (unaligned caller
/// buffers are bounced); the capacity is the device size rounded down to whole
/// 4096-byte blocks; [`Disk::sync`] is `fdatasync`, which flushes the drive cache.
pub struct BlockDisk {
    io: PositionedFile,
    path: PathBuf,
    capacity_bytes: u64,
}

impl BlockDisk {
    /// Open the block device at `path` read-write with O_DIRECT.
    pub fn open(path: impl AsRef<Path>) -> Result<BlockDisk, DiskError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(O_DIRECT)
            .open(path)
            .map_err(|e| {
                setup(
                    &name,
                    format!("cannot open block device with O_DIRECT: {e}"),
                )
            })?;
        let metadata = file
            .metadata()
            .map_err(|e| setup(&name, format!("cannot read metadata: {e}")))?;
        if !metadata.file_type().is_block_device() {
            return Err(setup(
                &name,
                "not a block device (use FileDisk for files)".to_string(),
            ));
        }
        let mut size_bytes: u64 = 0;
        // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which is valid.
        let rc = unsafe {
            libc::ioctl(
                file.as_raw_fd(),
                BLKGETSIZE64 as _,
                &mut size_bytes as *mut u64,
            )
        };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            return Err(setup(&name, format!("ioctl BLKGETSIZE64 failed: {e}")));
        }
        let capacity_bytes = size_bytes - size_bytes % BLOCK_BYTES as u64;
        if capacity_bytes == 0 {
            return Err(setup(
                &name,
                format!("device is smaller than one block ({size_bytes} bytes)"),
            ));
        }
        Ok(BlockDisk {
            io: PositionedFile::new(file, name, true),
            path: path.to_path_buf(),
            capacity_bytes,
        })
    }

    /// The device path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Disk for BlockDisk {
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
