//! Files written through the mount.
//!
//! A new file lives in a staging file in the cache (`DATA/cache/staging/`), written in place (random writes,
//! truncation and reads of what was written work, as tools like `git` need). Each `flush` (every `close()`)
//! and `fsync` *commits* it when it changed: its bytes go through the store's put path (hashed, compressed,
//! fsynced into the cache, the catalog row committed), so it is then safe in the cache, visible to S3 and
//! persisted to the grid like an upload. The last `release` drops the staging file; the file is then
//! immutable: opening it for writing fails with `EPERM`. A crash loses only bytes neither closed nor fsynced
//! (the staging directory is emptied when the mount starts).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use permafrost_store::{CacheReservation, ObjectInfo, PutOptions, Store, StoreError};

use crate::attr::PosixMeta;
use crate::inode::NodePath;

/// Cache space is reserved for a growing file in steps of this many bytes.
const RESERVE_STEP_BYTES: u64 = 4 << 20;
/// Bytes copied per step of a commit.
const COMMIT_CHUNK_BYTES: usize = 1 << 20;

/// The staging directory under the cache directory.
pub const STAGING_DIR: &str = "staging";

pub struct Writer {
    file: File,
    staging: PathBuf,
    pub size_bytes: u64,
    /// Changed since the last commit.
    pub dirty: bool,
    /// An object holds the bytes of the last commit.
    pub committed: bool,
    /// Unlinked while open: keeps taking writes, never commits.
    pub unlinked: bool,
    pub meta: PosixMeta,
    /// When the object was last committed (S3 LastModified).
    pub committed_ms: u64,
    /// Open handles.
    pub opens: u32,
    reservation: CacheReservation,
}

impl Writer {
    /// A new empty file (its staging file created under `staging_dir`).
    pub fn create(store: &Store, meta: PosixMeta) -> std::io::Result<Writer> {
        let dir = store.cache_dir().join(STAGING_DIR);
        std::fs::create_dir_all(&dir)?;
        let staging = dir.join(uuid::Uuid::new_v4().simple().to_string());
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&staging)?;
        Ok(Writer {
            file,
            staging,
            size_bytes: 0,
            dirty: true,
            committed: false,
            unlinked: false,
            meta,
            committed_ms: permafrost_catalog::now_ms(),
            opens: 1,
            reservation: store.cache_reservation(),
        })
    }

    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), WriteError> {
        let end = offset + data.len() as u64;
        self.reservation
            .grow_to(end.max(self.size_bytes), RESERVE_STEP_BYTES)?;
        self.file.write_all_at(data, offset)?;
        self.size_bytes = self.size_bytes.max(end);
        self.dirty = true;
        Ok(())
    }

    pub fn read(&self, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
        let until = (offset + len).min(self.size_bytes);
        if until <= offset {
            return Ok(Vec::new());
        }
        let mut buf = vec![0; (until - offset) as usize];
        self.file.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }

    pub fn truncate(&mut self, size_bytes: u64) -> Result<(), WriteError> {
        self.reservation.grow_to(size_bytes, RESERVE_STEP_BYTES)?;
        self.file.set_len(size_bytes)?;
        self.size_bytes = size_bytes;
        self.dirty = true;
        Ok(())
    }

    /// Make the bytes written so far the object at `path` (when they changed since the last commit): through
    /// the store's put path, so they are durable in the cache and visible to S3 when this returns.
    pub fn commit(&mut self, store: &Store, path: &NodePath) -> Result<(), WriteError> {
        if self.unlinked || (self.committed && !self.dirty) {
            return Ok(());
        }
        let mut meta = self.meta;
        meta.mtime_ns.get_or_insert_with(crate::attr::now_ns);
        let options = PutOptions {
            user_metadata: meta.apply(&[]),
            ..Default::default()
        };
        let mut put = store.begin_put(&path.bucket, &path.key, options)?;
        let mut buf = vec![0; COMMIT_CHUNK_BYTES];
        let mut at = 0;
        while at < self.size_bytes {
            let n = (self.size_bytes - at).min(buf.len() as u64) as usize;
            self.file.read_exact_at(&mut buf[..n], at)?;
            put.write(&buf[..n])?;
            at += n as u64;
        }
        let info: ObjectInfo = put.finish()?;
        self.committed_ms = info.last_modified_ms;
        self.meta = meta;
        self.committed = true;
        self.dirty = false;
        Ok(())
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.staging) {
            tracing::warn!(
                "cannot remove the staging file {}: {e}",
                self.staging.display()
            );
        }
    }
}

/// Why a write or commit failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Store(#[from] StoreError),
}

impl WriteError {
    pub fn errno(&self) -> libc::c_int {
        match self {
            WriteError::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
            WriteError::Store(StoreError::SlowDown(_)) => libc::ENOSPC,
            WriteError::Store(StoreError::NoSuchBucket(_)) => libc::ENOENT,
            WriteError::Store(StoreError::InvalidArgument(_)) => libc::EINVAL,
            WriteError::Store(_) => libc::EIO,
        }
    }
}

/// Remove staging files left by a crash (their bytes were neither closed nor fsynced).
pub fn clear_staging(store: &Store) -> std::io::Result<usize> {
    let dir = store.cache_dir().join(STAGING_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for entry in entries {
        std::fs::remove_file(entry?.path())?;
        removed += 1;
    }
    Ok(removed)
}
