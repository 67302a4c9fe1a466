//! # permafrost-fuse: a POSIX view of the archive
//!
//! **Job.** Mount the object store as a file system (`permafrost serve --mount DIR`, docs/mount.md): top-level
//! directories are S3 buckets, the `/`-separated components of keys are directories, objects are files. Tools
//! that live in directories (`find`, `rsync`, `tar`, `cp -r`, `git`) work on the archive without an S3 client.
//!
//! **Guarantees.**
//! - Metadata comes from the catalog only: `lookup`, `getattr`, `readdir(plus)`, `getxattr` and `statfs` never
//!   wake a disk. Directories are listed a page at a time (never loaded whole); inode numbers are hashes of
//!   paths, so only the inodes the kernel holds are in memory ([`inode`]).
//! - Reads stream from the cache, or from the grid through the one disk holding the object, with read-ahead;
//!   a read waiting for a disk to spin up holds no thread (other requests go on) and ends with `EINTR` when the
//!   process is interrupted. `open()` starts the disk spinning; a read of a file opened with `O_NONBLOCK`
//!   whose disk is asleep fails with `EAGAIN` at once (and starts it).
//! - A file written through the mount is safe in the cache when `close()` or `fsync()` returns (it went
//!   through the store's put path: visible to S3, persisted like an upload) and immutable after its last
//!   close: opening it for writing then fails with `EPERM`. `rename` (files and whole directories), `unlink`,
//!   `mkdir`, `rmdir`, `chmod`, `chown`, `utimens` change only the catalog.
//! - Extended attributes `user.permafrost.*` say where each file is (state, BLAKE3, grid bucket and disk
//!   power state, encoding, when persisted); other names are `ENODATA`.
//!
//! **Not here.** Hard links, symbolic links, device nodes and FIFOs (`EPERM`), writes into a closed file
//! (`EPERM`), POSIX ACLs. Changes made through S3 reach the kernel's caches after the TTL (`ttl`).

mod attr;
pub mod bdi;
mod dir;
mod fs;
pub mod inode;
mod interrupt;
pub mod mountpoint;
mod read;
mod write;
pub mod xattr;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use permafrost_store::Store;

pub use mountpoint::{MountPointError, Prepared, FS_NAME};

/// Default kernel read-ahead of the mount: 1 MiB, so sequential reads through the page cache reach us as
/// requests of up to 1 MiB, several in flight (the kernel's 128 KiB keeps a `dd` well below an S3 GET;
/// BENCHMARKS.md).
pub const READ_AHEAD_KB: u32 = 1024;

/// How the mount presents the archive.
#[derive(Debug, Clone)]
pub struct MountConfig {
    /// How long the kernel may keep names and attributes without asking again (objects are immutable; changes
    /// made through S3 show after this).
    pub ttl: Duration,
    /// Owner, group and permission bits of entries that carry none (uploaded through S3, implicit directories).
    pub uid: u32,
    pub gid: u32,
    pub file_mode: u32,
    pub dir_mode: u32,
    /// Let every user of the machine use the mount (the kernel checks permissions against the modes).
    pub allow_other: bool,
    /// Worker threads answering FUSE requests (metadata from the catalog, writes to the staging files).
    pub threads: usize,
    /// The kernel's read-ahead of the mount in KiB, set through sysfs after mounting when the server runs as
    /// root ([`bdi`]); 0 leaves the kernel's (128 KiB).
    pub read_ahead_kb: u32,
}

impl Default for MountConfig {
    fn default() -> Self {
        // SAFETY: getuid/getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        MountConfig {
            ttl: Duration::from_secs(60),
            uid,
            gid,
            file_mode: 0o644,
            dir_mode: 0o755,
            allow_other: uid == 0,
            threads: 4,
            read_ahead_kb: READ_AHEAD_KB,
        }
    }
}

/// Errors of mounting.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error(transparent)]
    MountPoint(#[from] MountPointError),
    #[error("cannot mount on {path}: {source}")]
    Mount {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot clear the staging directory of the mount: {0}")]
    Staging(std::io::Error),
    #[error("cannot start the mount's threads: {0}")]
    Runtime(std::io::Error),
}

/// A mounted archive. Dropping it unmounts (lazily if files are still open).
pub struct Mounted {
    path: PathBuf,
    cleaned_stale: bool,
    read_ahead: bdi::ReadAhead,
    shared: Arc<fs::Shared>,
    handle: Option<fuse3::raw::MountHandle>,
    runtime: Option<tokio::runtime::Runtime>,
}

/// Mount `store` on `dir` (see [`mountpoint::prepare`]: a stale mount left by a crash is cleaned up first),
/// then set the kernel's read-ahead of the mount ([`bdi::apply`]; never fails the mount).
pub fn mount(store: Arc<Store>, dir: &Path, config: MountConfig) -> Result<Mounted, MountError> {
    let prepared = mountpoint::prepare(dir)?;
    write::clear_staging(&store).map_err(MountError::Staging)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.threads.max(1))
        .thread_name("permafrost-mount")
        .enable_all()
        .build()
        .map_err(MountError::Runtime)?;
    let shared = Arc::new(fs::Shared::new(store, config.clone()));
    let mut options = fuse3::MountOptions::default();
    options
        .fs_name(FS_NAME)
        .default_permissions(true)
        .allow_other(config.allow_other)
        .nonempty(true);
    let path = prepared.path.clone();
    let filesystem = fs::Fs(Arc::clone(&shared));
    let handle = runtime
        .block_on(async {
            let session = fuse3::raw::Session::new(options);
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } == 0 {
                session.mount(filesystem, &path).await
            } else {
                session.mount_with_unprivileged(filesystem, &path).await
            }
        })
        .map_err(|source| MountError::Mount {
            path: path.display().to_string(),
            source,
        })?;
    let read_ahead = bdi::apply(&path, config.read_ahead_kb);
    Ok(Mounted {
        path,
        cleaned_stale: prepared.cleaned_stale,
        read_ahead,
        shared,
        handle: Some(handle),
        runtime: Some(runtime),
    })
}

impl Mounted {
    /// The mount point (absolute).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A stale mount left by a crashed server was found on the mount point and unmounted first.
    pub fn cleaned_stale(&self) -> bool {
        self.cleaned_stale
    }

    /// What became of `read_ahead_kb` (its `Display` is one line for the log).
    pub fn read_ahead(&self) -> &bdi::ReadAhead {
        &self.read_ahead
    }

    /// Commit files still open for writing (their bytes so far become the objects, as a close would), then
    /// unmount; lazily when the mount is busy (open files, a shell inside it). Returns a description of what
    /// could not be committed or unmounted.
    pub fn unmount(mut self) -> Result<(), String> {
        self.unmount_inner()
    }

    fn unmount_inner(&mut self) -> Result<(), String> {
        let Some(runtime) = self.runtime.take() else {
            return Ok(());
        };
        let mut problems = self.shared.commit_all();
        if let Some(handle) = self.handle.take() {
            let unmounted = runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(10), handle.unmount()).await
            });
            let failed = match unmounted {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some("timed out".to_string()),
            };
            if let Some(why) = failed {
                if let Err(e) = mountpoint::unmount(&self.path, true) {
                    if mountpoint::mounted_at(&self.path).is_some() {
                        problems.push(format!(
                            "cannot unmount {} ({why}; lazy unmount: {e})",
                            self.path.display()
                        ));
                    }
                }
            }
        }
        runtime.shutdown_timeout(Duration::from_secs(5));
        self.shared.close();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Err(e) = self.unmount_inner() {
            tracing::warn!("{e}");
        }
    }
}
