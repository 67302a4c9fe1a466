//! What the POSIX mount (`crates/fuse`) needs of the store beyond S3's operations: the file system namespace
//! (catalog only, never a disk), where a content sleeps and whether its disk spins, an early spin-up, reads by
//! content (an open file keeps reading after a rename or unlink), usage for `statfs`, and cache space for files
//! being written.

use std::sync::Arc;

use permafrost_catalog::{
    CatalogError, ContentId, ContentRecord, DirAttrs, DirRecord, FsEntry, FsPage, FsRename,
    Refusal, StoredForm,
};
use permafrost_disk::power::PowerState;

use crate::read::ObjectReader;
use crate::store::{ByteRange, Inner};
use crate::{Result, Store, StoreError};

/// Errors of the namespace operations: a refusal (an errno of the mount) or a store error.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("{what}: {refusal}")]
    Refused { refusal: Refusal, what: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<CatalogError> for FsError {
    fn from(e: CatalogError) -> Self {
        match e {
            CatalogError::Refused { refusal, what } => FsError::Refused { refusal, what },
            other => FsError::Store(other.into()),
        }
    }
}

/// Where a content's bytes are and what reading them costs now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Residence {
    /// A complete copy is in the cache: a read wakes no disk.
    pub cached: bool,
    /// The grid bucket holding its extents (once placed).
    pub grid_bucket: Option<u32>,
    /// The data disk of that grid bucket and its power state.
    pub disk: Option<(usize, PowerState)>,
}

impl Residence {
    /// Whether a read would wait for a disk to spin up.
    pub fn must_wait(&self) -> bool {
        !self.cached
            && matches!(
                self.disk,
                Some((_, PowerState::Off | PowerState::SpinningUp))
            )
    }
}

/// Capacity and use for `statfs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Bytes of every data disk (grid buckets).
    pub capacity_bytes: u64,
    /// Bytes held by extents on them.
    pub used_bytes: u64,
    pub objects: u64,
}

/// Cache space held for a file being written through the mount (released on drop).
pub struct CacheReservation {
    inner: Arc<Inner>,
    bytes: u64,
}

impl CacheReservation {
    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Hold at least `bytes` (grows in steps of `step`): may wait for room as an upload does, then `SlowDown`.
    pub fn grow_to(&mut self, bytes: u64, step: u64) -> Result<()> {
        if bytes <= self.bytes {
            return Ok(());
        }
        let more = (bytes - self.bytes).div_ceil(step.max(1)) * step.max(1);
        self.inner.reserve_cache(more)?;
        self.bytes += more;
        Ok(())
    }
}

impl Drop for CacheReservation {
    fn drop(&mut self) {
        self.inner.cache.release(self.bytes);
    }
}

impl Store {
    // ---------------------------------------------------------------- namespace (catalog only)

    /// What `path` names in `bucket` (see `Catalog::fs_lookup`).
    pub fn fs_lookup(&self, bucket: &str, path: &str) -> Result<Option<FsEntry>, FsError> {
        Ok(self.inner().catalog.fs_lookup(bucket, path)?)
    }

    /// One page of the directory `dir` of `bucket` (see `Catalog::fs_list`).
    pub fn fs_list(
        &self,
        bucket: &str,
        dir: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<FsPage, FsError> {
        Ok(self.inner().catalog.fs_list(bucket, dir, after, limit)?)
    }

    pub fn fs_mkdir(&self, record: &DirRecord, parent_attrs: &DirAttrs) -> Result<(), FsError> {
        Ok(self.inner().catalog.fs_mkdir(record, parent_attrs)?)
    }

    pub fn fs_rmdir(
        &self,
        bucket: &str,
        path: &str,
        parent_attrs: &DirAttrs,
    ) -> Result<(), FsError> {
        Ok(self.inner().catalog.fs_rmdir(
            bucket,
            path,
            parent_attrs,
            permafrost_catalog::now_ms(),
        )?)
    }

    /// Remove a file (its content is collected after the grace period when unreferenced).
    pub fn fs_unlink(
        &self,
        bucket: &str,
        key: &str,
        parent_attrs: &DirAttrs,
    ) -> Result<(), FsError> {
        Ok(self.inner().catalog.fs_unlink(
            bucket,
            key,
            parent_attrs,
            permafrost_catalog::now_ms(),
        )?)
    }

    pub fn fs_rename(&self, rename: &FsRename) -> Result<(), FsError> {
        Ok(self
            .inner()
            .catalog
            .fs_rename(rename, permafrost_catalog::now_ms())?)
    }

    pub fn fs_set_dir(&self, record: &DirRecord) -> Result<(), FsError> {
        Ok(self.inner().catalog.fs_set_dir(record)?)
    }

    pub fn fs_set_metadata(
        &self,
        bucket: &str,
        key: &str,
        user_metadata: &[(String, String)],
    ) -> Result<(), FsError> {
        Ok(self
            .inner()
            .catalog
            .fs_set_metadata(bucket, key, user_metadata)?)
    }

    // ---------------------------------------------------------------- contents and disks

    /// The content record (state, encoding, grid bucket, cache file), if it still exists.
    pub fn content(&self, id: &ContentId) -> Result<Option<ContentRecord>> {
        Ok(self.inner().catalog.get_content(id)?)
    }

    /// The parts of a part-list content (a completed multipart upload), in order; empty for other contents.
    pub fn parts(&self, content: &ContentRecord) -> Result<Vec<ContentRecord>> {
        Ok(self
            .inner()
            .parts_of(content)?
            .into_iter()
            .map(|(_, c)| c)
            .collect())
    }

    /// When the content became fully persisted, if it has.
    pub fn persisted_ms(&self, id: &ContentId) -> Result<Option<u64>> {
        Ok(self.inner().catalog.persisted_ms(id)?)
    }

    /// Where the content is and whether reading it now would wait for a spin-up (catalog and power states
    /// only: never wakes a disk). A part list (a completed multipart upload) is where its parts are: cached when
    /// all of them are, on the disk of the first part a read would wait for (else of its first part).
    pub fn residence(&self, content: &ContentRecord) -> Residence {
        if content.stored_form == StoredForm::Parts {
            let parts: Vec<Residence> = match self.inner().parts_of(content) {
                Ok(parts) => parts.iter().map(|(_, c)| self.residence_of(c)).collect(),
                Err(_) => Vec::new(),
            };
            return parts
                .iter()
                .find(|r| r.must_wait())
                .or(parts.first())
                .map(|r| Residence {
                    cached: parts.iter().all(|p| p.cached),
                    ..*r
                })
                .unwrap_or_else(|| self.residence_of(content));
        }
        self.residence_of(content)
    }

    fn residence_of(&self, content: &ContentRecord) -> Residence {
        let engine = &self.inner().engine;
        let disk = content.grid_bucket.and_then(|b| {
            let b = b as usize;
            (b < engine.buckets()).then(|| {
                let disk = engine.geometry().bucket_disk(b);
                (disk, engine.power().state(disk))
            })
        });
        Residence {
            cached: content.cache_path.is_some(),
            grid_bucket: content.grid_bucket,
            disk,
        }
    }

    /// Start spinning up the disks a read of `content` will need, without waiting for them (a thread holds
    /// each disk for an instant; the idle timer runs from there). Nothing to do for what is cached or spinning.
    pub fn begin_spin_up(&self, content: &ContentRecord) {
        let mut disks = Vec::new();
        let mut note = |r: Residence| {
            if let (false, Some((disk, PowerState::Off))) = (r.cached, r.disk) {
                if !disks.contains(&disk) {
                    disks.push(disk);
                }
            }
        };
        if content.stored_form == StoredForm::Parts {
            for (_, part) in self.inner().parts_of(content).unwrap_or_default() {
                note(self.residence_of(&part));
            }
        } else {
            note(self.residence_of(content));
        }
        // The spin-up is the caller's: its wake reason (the read of a file) goes with it.
        let context = permafrost_disk::power::WakeContext::current();
        for disk in disks {
            let power = Arc::clone(self.inner().engine.power());
            let context = context.clone();
            let spawned = std::thread::Builder::new()
                .name("permafrost-spin-up".into())
                .spawn(move || {
                    let _reason = permafrost_disk::power::WakeContext::enter_opt(context);
                    drop(power.acquire(disk))
                });
            if let Err(e) = spawned {
                tracing::warn!("cannot start an early spin-up of disk {disk}: {e}");
            }
        }
    }

    /// Read a content (the whole of it or `range`, decoded), from the cache or the grid; the reader of an open
    /// file, which keeps working after its name is renamed or unlinked (until garbage collection).
    pub fn open_content(&self, id: &ContentId, range: Option<ByteRange>) -> Result<ObjectReader> {
        let content =
            self.inner()
                .catalog
                .get_content(id)?
                .ok_or_else(|| StoreError::NoSuchKey {
                    bucket: String::new(),
                    key: format!("content {id}"),
                })?;
        let parts = self.inner().parts_of(&content)?;
        let reader = ObjectReader::open(self.inner(), &content, parts, range, None, false, &[])?;
        self.inner().touch(content.id);
        Ok(reader)
    }

    /// Capacity and use of the data disks, and the number of objects.
    pub fn usage(&self) -> Result<Usage> {
        let inner = self.inner();
        let used_bytes = inner
            .catalog
            .grid_usage()?
            .iter()
            .map(|u| u.used_bytes())
            .sum();
        Ok(Usage {
            capacity_bytes: inner.engine.buckets() as u64 * inner.engine.bucket_capacity_bytes(),
            used_bytes,
            objects: inner.catalog.stats()?.objects,
        })
    }

    /// An empty reservation of cache space, for a file being written through the mount.
    pub fn cache_reservation(&self) -> CacheReservation {
        CacheReservation {
            inner: Arc::clone(self.inner()),
            bytes: 0,
        }
    }

    /// The cache directory (on flash): the mount keeps files being written in `staging/` under it.
    pub fn cache_dir(&self) -> std::path::PathBuf {
        self.inner().cache.dir.clone()
    }
}
