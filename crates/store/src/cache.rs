//! The write-back cache directory: file naming, durable file operations and space accounting.
//!
//! `used_bytes` counts the stored bytes of cached contents, multipart parts, and the space reserved by uploads
//! in progress. Writers reserve before they write ([`Cache::try_reserve`]); the store frees room by evicting
//! persisted contents and waking the persistence manager while a writer waits (bounded by `cache_wait_ms_max`).

use std::fs::File;
use std::path::{Path, PathBuf};

use parking_lot::{Condvar, Mutex};

use crate::{io_error, Result};

pub(crate) const CONTENTS_DIR: &str = "contents";
pub(crate) const PARTS_DIR: &str = "parts";
pub(crate) const TMP_DIR: &str = "tmp";

pub(crate) struct Cache {
    pub dir: PathBuf,
    pub capacity_bytes: u64,
    pub fsync: bool,
    used_bytes: Mutex<u64>,
    /// Signalled whenever space is released.
    freed: Condvar,
}

impl Cache {
    pub fn open(dir: &Path, capacity_bytes: u64, fsync: bool) -> Result<Cache> {
        for sub in [CONTENTS_DIR, PARTS_DIR, TMP_DIR] {
            let path = dir.join(sub);
            std::fs::create_dir_all(&path)
                .map_err(|e| io_error(format!("cannot create {}", path.display()), e))?;
        }
        Ok(Cache {
            dir: dir.to_path_buf(),
            capacity_bytes,
            fsync,
            used_bytes: Mutex::new(0),
            freed: Condvar::new(),
        })
    }

    /// A new unique relative path in `sub` (one of the directories above).
    pub fn new_path(sub: &str) -> String {
        format!("{sub}/{}", uuid::Uuid::new_v4().simple())
    }

    pub fn absolute(&self, relative: &str) -> PathBuf {
        self.dir.join(relative)
    }

    pub fn used_bytes(&self) -> u64 {
        *self.used_bytes.lock()
    }

    /// Set the accounting (at open, from the catalog).
    pub fn set_used(&self, bytes: u64) {
        *self.used_bytes.lock() = bytes;
    }

    /// Reserve `bytes` if they fit now.
    pub fn try_reserve(&self, bytes: u64) -> bool {
        let mut used = self.used_bytes.lock();
        if *used + bytes <= self.capacity_bytes {
            *used += bytes;
            true
        } else {
            false
        }
    }

    /// Reserve `bytes` even beyond the capacity (space the cache already holds, e.g. a completed multipart
    /// object being assembled from its parts).
    pub fn force_reserve(&self, bytes: u64) {
        *self.used_bytes.lock() += bytes;
    }

    /// Wait up to `ms` for space to be released; returns whether `bytes` now fit (and reserves them if so).
    pub fn wait_reserve(&self, bytes: u64, ms: u64) -> bool {
        let mut used = self.used_bytes.lock();
        if *used + bytes > self.capacity_bytes {
            self.freed
                .wait_for(&mut used, std::time::Duration::from_millis(ms));
        }
        if *used + bytes <= self.capacity_bytes {
            *used += bytes;
            true
        } else {
            false
        }
    }

    pub fn release(&self, bytes: u64) {
        let mut used = self.used_bytes.lock();
        assert!(
            *used >= bytes,
            "cache accounting: releasing {bytes} bytes of {} used",
            *used
        );
        *used -= bytes;
        self.freed.notify_all();
    }

    /// Remove a cache file (a missing file is fine: the removal may be a redo after a crash).
    pub fn remove(&self, relative: &str) -> Result<()> {
        let path = self.absolute(relative);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error(
                format!("cannot remove cache file {}", path.display()),
                e,
            )),
        }
    }

    /// fsync a file (when configured).
    pub fn sync_file(&self, file: &File, path: &Path) -> Result<()> {
        if self.fsync {
            file.sync_all()
                .map_err(|e| io_error(format!("cannot fsync {}", path.display()), e))?;
        }
        Ok(())
    }

    /// Rename `from` to `to` (relative paths) and make the rename durable.
    pub fn rename_durable(&self, from: &str, to: &str) -> Result<()> {
        let (source, target) = (self.absolute(from), self.absolute(to));
        std::fs::rename(&source, &target).map_err(|e| {
            io_error(
                format!("cannot rename {} to {}", source.display(), target.display()),
                e,
            )
        })?;
        if self.fsync {
            let parent = target.parent().expect("cache files live in a subdirectory");
            File::open(parent)
                .and_then(|d| d.sync_all())
                .map_err(|e| io_error(format!("cannot fsync directory {}", parent.display()), e))?;
        }
        Ok(())
    }

    /// Every file under the cache (relative paths), for the restart sweep.
    pub fn all_files(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for sub in [CONTENTS_DIR, PARTS_DIR, TMP_DIR] {
            let dir = self.dir.join(sub);
            let entries = std::fs::read_dir(&dir)
                .map_err(|e| io_error(format!("cannot list {}", dir.display()), e))?;
            for entry in entries {
                let entry =
                    entry.map_err(|e| io_error(format!("cannot list {}", dir.display()), e))?;
                out.push(format!("{sub}/{}", entry.file_name().to_string_lossy()));
            }
        }
        Ok(out)
    }
}
