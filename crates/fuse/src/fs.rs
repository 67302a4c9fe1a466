//! The FUSE operations (fuse3's raw, inode-based interface).
//!
//! Each request runs as a tokio task. Work that may block (catalog queries, staging files, the put path) runs
//! on tokio's blocking pool, so the few request workers are never stuck; reads wait for the read-ahead window
//! asynchronously. Errors: refusals of the namespace map to their errno; anything unexpected is logged in one
//! line and answered `EIO`.

use std::collections::{HashMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use fuse3::raw::prelude::*;
use fuse3::{Errno, Result};
use futures_util::stream::{self, Stream};
use parking_lot::Mutex;
use permafrost_disk::power::WakeReason;
use permafrost_store::{
    ByteRange, ContentId, DirRecord, FsEntry, FsError, FsRename, Refusal, Store, StoreError,
};

use crate::attr::{self, Defaults, PosixMeta};
use crate::dir::{DirCursor, Listed};
use crate::inode::{Inodes, NodePath, ROOT};
use crate::interrupt::Interrupts;
use crate::read::{Miss, ReadAhead};
use crate::write::Writer;
use crate::{xattr, MountConfig};

/// `FOPEN_DIRECT_IO`: bypass the page cache (reads reach us with the caller's size; errors reach the caller).
const FOPEN_DIRECT_IO: u32 = 1 << 0;
/// `FOPEN_KEEP_CACHE`: keep the page cache of an immutable file across opens.
const FOPEN_KEEP_CACHE: u32 = 1 << 1;
/// Largest write the kernel sends at once.
const MAX_WRITE_BYTES: u32 = 1 << 20;
/// Longest key, in bytes (S3's; the store refuses longer ones).
const KEY_BYTES_MAX: usize = 1024;
/// Entries produced per readdir request (the kernel's buffer takes fewer; the rest are produced again).
const DIR_BATCH: usize = 128;

fn errno(code: libc::c_int) -> Errno {
    Errno::from(code)
}

fn refusal_errno(refusal: Refusal) -> Errno {
    errno(match refusal {
        Refusal::NotFound => libc::ENOENT,
        Refusal::Exists => libc::EEXIST,
        Refusal::NotEmpty => libc::ENOTEMPTY,
        Refusal::NotADirectory => libc::ENOTDIR,
        Refusal::IsADirectory => libc::EISDIR,
        Refusal::Invalid => libc::EINVAL,
        Refusal::NameTooLong => libc::ENAMETOOLONG,
    })
}

/// The errno of a store error; unexpected ones are logged (one line, naming the operation).
fn store_errno(what: &str, e: &StoreError) -> Errno {
    match e {
        StoreError::NoSuchBucket(_) | StoreError::NoSuchKey { .. } => errno(libc::ENOENT),
        StoreError::BucketNotEmpty(_) => errno(libc::ENOTEMPTY),
        StoreError::BucketAlreadyOwnedByYou(_) => errno(libc::EEXIST),
        StoreError::InvalidArgument(_) => errno(libc::EINVAL),
        // Object Lock (legal hold, retention) refused a change: permission, not an I/O failure.
        StoreError::AccessDenied(_) => errno(libc::EPERM),
        StoreError::SlowDown(_) => errno(libc::ENOSPC),
        other => {
            tracing::warn!("mount: {what}: {other}");
            errno(libc::EIO)
        }
    }
}

fn fs_errno(what: &str, e: &FsError) -> Errno {
    match e {
        FsError::Refused { refusal, .. } => refusal_errno(*refusal),
        FsError::Store(e) => store_errno(what, e),
    }
}

/// A file name from the kernel as a key component.
fn name_str(name: &OsStr) -> Result<&str> {
    let name = name.to_str().ok_or_else(|| errno(libc::EINVAL))?;
    if name.len() > permafrost_catalog::NAME_BYTES_MAX {
        return Err(errno(libc::ENAMETOOLONG));
    }
    if !permafrost_catalog::showable_name(name) || name.contains('/') {
        return Err(errno(libc::EINVAL));
    }
    Ok(name)
}

/// Keys are at most 1024 bytes (S3's limit).
fn check_key(path: &NodePath) -> Result<()> {
    if path.path().len() > KEY_BYTES_MAX {
        return Err(errno(libc::ENAMETOOLONG));
    }
    Ok(())
}

/// Run blocking work on the blocking pool; a panic there is an `EIO`, never a crash of the mount.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        Err(e) => {
            tracing::warn!("mount: a request failed unexpectedly: {e}");
            Err(errno(libc::EIO))
        }
    }
}

/// `len` bytes of `content` from `offset` (fewer at its end), read on their own (not through a stream).
fn read_range(store: &Store, content: &ContentId, offset: u64, len: u64) -> Result<Bytes> {
    let failed = |e: &dyn std::fmt::Display| {
        tracing::warn!("mount: read of content {content} failed: {e}");
        errno(libc::EIO)
    };
    let range = ByteRange::FromTo(offset, offset + len.max(1) - 1);
    let mut reader = store
        .open_content(content, Some(range))
        .map_err(|e| failed(&e))?;
    let mut out = Vec::with_capacity(len as usize);
    std::io::Read::read_to_end(&mut reader, &mut out).map_err(|e| failed(&e))?;
    out.truncate(len as usize);
    Ok(Bytes::from(out))
}

/// An open regular file.
enum Handle {
    Read(Arc<ReadHandle>),
    /// A file being written (any access mode): the writer is shared by its handles.
    Write {
        ino: u64,
        writer: Arc<Mutex<Writer>>,
    },
}

struct ReadHandle {
    content: ContentId,
    /// The read of this file's bucket/key: the reason of every spin-up it causes.
    reason: WakeReason,
    size_bytes: u64,
    nonblock: bool,
    stream: Mutex<Option<Arc<ReadAhead>>>,
}

/// State of the mount shared by every request.
pub struct Shared {
    store: Arc<Store>,
    config: MountConfig,
    defaults: Defaults,
    inodes: Mutex<Inodes>,
    handles: Mutex<HashMap<u64, Handle>>,
    dirs: Mutex<HashMap<u64, Arc<Mutex<DirCursor>>>>,
    /// Files being written, by inode.
    writers: Mutex<HashMap<u64, Arc<Mutex<Writer>>>>,
    next_fh: AtomicU64,
    interrupts: Interrupts,
}

impl Shared {
    pub fn new(store: Arc<Store>, config: MountConfig) -> Shared {
        let defaults = Defaults {
            uid: config.uid,
            gid: config.gid,
            file_mode: config.file_mode,
            dir_mode: config.dir_mode,
            since_ns: attr::now_ns(),
        };
        Shared {
            store,
            config,
            defaults,
            inodes: Mutex::new(Inodes::default()),
            handles: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            writers: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            interrupts: Interrupts::default(),
        }
    }

    fn new_fh(&self) -> u64 {
        self.next_fh.fetch_add(1, Ordering::Relaxed)
    }

    fn node(&self, ino: u64) -> Result<(NodePath, bool)> {
        self.inodes
            .lock()
            .path(ino)
            .ok_or_else(|| errno(libc::ENOENT))
    }

    fn dir_node(&self, ino: u64) -> Result<NodePath> {
        let (path, detached) = self.node(ino)?;
        if detached {
            return Err(errno(libc::ENOENT));
        }
        if !path.is_dir() {
            return Err(errno(libc::ENOTDIR));
        }
        Ok(path)
    }

    fn writer_of(&self, ino: u64) -> Option<Arc<Mutex<Writer>>> {
        self.writers.lock().get(&ino).cloned()
    }

    /// Paths of the files being written and not committed yet. A writer busy committing counts as not
    /// committed (the listing then finds it in the catalog too, and shows it once); no lock is held while
    /// another is taken, and none waits for a commit.
    fn writing_paths(&self) -> Vec<NodePath> {
        let writers: Vec<(u64, Arc<Mutex<Writer>>)> = self
            .writers
            .lock()
            .iter()
            .map(|(i, w)| (*i, Arc::clone(w)))
            .collect();
        let uncommitted: Vec<u64> = writers
            .into_iter()
            .filter(|(_, w)| w.try_lock().is_none_or(|w| !w.committed && !w.unlinked))
            .map(|(ino, _)| ino)
            .collect();
        let inodes = self.inodes.lock();
        uncommitted
            .into_iter()
            .filter_map(|ino| match inodes.path(ino) {
                Some((p, false)) => Some(p),
                _ => None,
            })
            .collect()
    }

    fn now_dir_attrs(&self) -> permafrost_store::DirAttrs {
        self.defaults.dir_attrs(attr::now_ns())
    }

    fn writer_attr(&self, ino: u64, w: &Writer) -> FileAttr {
        attr::file_attr(
            ino,
            w.size_bytes,
            w.size_bytes,
            &PosixMeta {
                mtime_ns: w.meta.mtime_ns.or(Some(attr::now_ns())),
                ..w.meta
            },
            w.committed_ms,
            &self.defaults,
        )
    }

    /// Attributes of the bucket `name` (its top directory).
    fn bucket_attr(&self, ino: u64, name: &str) -> Result<FileAttr> {
        let bucket = self
            .store
            .head_bucket(name)
            .map_err(|e| store_errno("stat of a bucket", &e))?;
        let mut a = attr::dir_attr(ino, None, &self.defaults);
        let ns = bucket.created_ms as i64 * 1_000_000;
        (a.mtime, a.ctime, a.atime) = (
            attr::timestamp(ns),
            attr::timestamp(ns),
            attr::timestamp(ns),
        );
        Ok(a)
    }

    fn entry_attr(&self, ino: u64, entry: &FsEntry) -> FileAttr {
        match entry {
            FsEntry::Dir { record, .. } => {
                attr::dir_attr(ino, record.as_ref().map(|r| &r.attrs), &self.defaults)
            }
            FsEntry::File(f) => attr::object_attr(ino, f, &self.defaults),
        }
    }

    /// What `path` is now: its attributes (with inode `ino`) and whether it is a directory. Catalog only.
    fn stat_path(&self, ino: u64, path: &NodePath) -> Result<FileAttr> {
        if path.is_root() {
            return Ok(attr::dir_attr(ROOT, None, &self.defaults));
        }
        if path.is_bucket() {
            return self.bucket_attr(ino, &path.bucket);
        }
        if let Some(w) = self.writer_of(ino) {
            return Ok(self.writer_attr(ino, &w.lock()));
        }
        match self.store.fs_lookup(&path.bucket, path.path()) {
            Ok(Some(entry)) if matches!(entry, FsEntry::Dir { .. }) == path.is_dir() => {
                Ok(self.entry_attr(ino, &entry))
            }
            Ok(_) => Err(errno(libc::ENOENT)),
            Err(e) => Err(fs_errno("stat", &e)),
        }
    }

    /// Look up `name` in directory `parent`: the child's path and attributes, remembered (one more kernel
    /// reference).
    fn lookup_child(&self, parent: &NodePath, name: &str) -> Result<(NodePath, FileAttr)> {
        let (path, attr_of) = if parent.is_root() {
            let path = parent.child(name, true);
            (path, None)
        } else {
            let as_file = parent.child(name, false);
            let live = self.inodes.lock().live_ino(&as_file);
            if let Some(w) = live.and_then(|ino| self.writer_of(ino)) {
                if !w.lock().unlinked {
                    let ino = self.inodes.lock().remember(&as_file);
                    let a = self.writer_attr(ino, &w.lock());
                    return Ok((as_file, a));
                }
            }
            match self.store.fs_lookup(&parent.bucket, as_file.path()) {
                Ok(Some(entry)) => {
                    let is_dir = matches!(entry, FsEntry::Dir { .. });
                    (parent.child(name, is_dir), Some(entry))
                }
                Ok(None) => return Err(errno(libc::ENOENT)),
                Err(e) => return Err(fs_errno("lookup", &e)),
            }
        };
        let ino = self.inodes.lock().ino_of(&path);
        let a = match &attr_of {
            Some(entry) => self.entry_attr(ino, entry),
            None => self.bucket_attr(ino, &path.bucket)?,
        };
        let remembered = self.inodes.lock().remember(&path);
        Ok((
            path,
            FileAttr {
                ino: remembered,
                ..a
            },
        ))
    }

    fn entry_reply(&self, attr: FileAttr) -> ReplyEntry {
        ReplyEntry {
            ttl: self.config.ttl,
            attr,
            generation: 0,
        }
    }

    /// Commit every file still being written (shutdown); descriptions of failures.
    pub fn commit_all(&self) -> Vec<String> {
        let writers: Vec<(u64, Arc<Mutex<Writer>>)> = self
            .writers
            .lock()
            .iter()
            .map(|(i, w)| (*i, Arc::clone(w)))
            .collect();
        let mut problems = Vec::new();
        for (ino, writer) in writers {
            let Some((path, false)) = self.inodes.lock().path(ino) else {
                continue;
            };
            if let Err(e) = writer.lock().commit(&self.store, &path) {
                problems.push(format!("cannot save {path} at shutdown: {e}"));
            }
        }
        problems
    }

    /// Drop open handles and writers (after the unmount): read-ahead threads stop, staging files go.
    pub fn close(&self) {
        self.handles.lock().clear();
        self.dirs.lock().clear();
        self.writers.lock().clear();
    }

    fn commit(&self, ino: u64, writer: &Arc<Mutex<Writer>>) -> Result<()> {
        let path = match self.inodes.lock().path(ino) {
            Some((p, false)) => p,
            _ => return Ok(()), // unlinked: nothing to save
        };
        writer.lock().commit(&self.store, &path).map_err(|e| {
            let code = e.errno();
            if code == libc::EIO {
                tracing::warn!("mount: cannot save {path}: {e}");
            }
            errno(code)
        })
    }

    fn release_writer(&self, ino: u64, writer: &Arc<Mutex<Writer>>) {
        let last = {
            let mut w = writer.lock();
            w.opens = w.opens.saturating_sub(1);
            w.opens == 0
        };
        if last {
            if let Err(e) = self.commit(ino, writer) {
                tracing::warn!("mount: the last close of inode {ino} could not save it ({e:?})");
            }
            let mut writers = self.writers.lock();
            if writers.get(&ino).is_some_and(|w| Arc::ptr_eq(w, writer)) {
                writers.remove(&ino);
            }
        }
    }
}

/// The file system handed to fuse3.
pub struct Fs(pub Arc<Shared>);

/// Entries of a readdirplus reply. Each entry produced counts as a lookup; fuse3 stops taking entries when the
/// reply is full and drops the stream, and the one produced last was then not sent: its lookup is undone.
struct PlusEntries {
    shared: Arc<Shared>,
    entries: VecDeque<(NodePath, DirectoryEntryPlus)>,
    last_counted: Option<u64>,
    exhausted: bool,
}

impl Stream for PlusEntries {
    type Item = Result<DirectoryEntryPlus>;

    fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.entries.pop_front() {
            Some((path, mut entry)) => {
                let counted = if path.is_root() || entry.name == "." || entry.name == ".." {
                    None
                } else {
                    let ino = self.shared.inodes.lock().remember(&path);
                    entry.inode = ino;
                    entry.attr.ino = ino;
                    Some(ino)
                };
                self.last_counted = counted;
                Poll::Ready(Some(Ok(entry)))
            }
            None => {
                self.exhausted = true;
                Poll::Ready(None)
            }
        }
    }
}

impl Drop for PlusEntries {
    fn drop(&mut self) {
        if !self.exhausted {
            if let Some(ino) = self.last_counted {
                self.shared.inodes.lock().forget(ino, 1);
            }
        }
    }
}

impl Fs {
    /// The entries of the open directory `fh` from `offset` on, with their paths and attributes (plus) or
    /// without.
    async fn dir_entries(
        &self,
        dir_ino: u64,
        fh: u64,
        offset: u64,
        plus: bool,
    ) -> Result<Vec<(NodePath, u64, FileType, String, u64, Option<FileAttr>)>> {
        let shared = Arc::clone(&self.0);
        blocking(move || {
            let cursor = shared
                .dirs
                .lock()
                .get(&fh)
                .cloned()
                .ok_or_else(|| errno(libc::EBADF))?;
            let mut cursor = cursor.lock();
            let dir = cursor.dir().clone();
            let mut out = Vec::new();
            let dot_attr = |ino| plus.then(|| attr::dir_attr(ino, None, &shared.defaults));
            if offset == 0 {
                out.push((
                    NodePath::root(),
                    dir_ino,
                    FileType::Directory,
                    ".".into(),
                    1,
                    dot_attr(dir_ino),
                ));
            }
            if offset <= 1 {
                out.push((
                    NodePath::root(),
                    ROOT,
                    FileType::Directory,
                    "..".into(),
                    2,
                    dot_attr(ROOT),
                ));
            }
            let index = offset.saturating_sub(2);
            let store = Arc::clone(&shared.store);
            let listed = cursor
                .entries_from(&store, index, DIR_BATCH, || shared.writing_paths())
                .map_err(|e| fs_errno("readdir", &e))?;
            for (i, entry) in listed {
                let path = entry.path(&dir);
                let ino = shared.inodes.lock().ino_of(&path);
                let kind = if entry.is_dir() {
                    FileType::Directory
                } else {
                    FileType::RegularFile
                };
                let a = if plus {
                    Some(match &entry {
                        Listed::Bucket(b) => {
                            let mut a = attr::dir_attr(ino, None, &shared.defaults);
                            let ns = attr::timestamp(b.created_ms as i64 * 1_000_000);
                            (a.mtime, a.ctime, a.atime) = (ns, ns, ns);
                            a
                        }
                        Listed::Entry(e) => shared.entry_attr(ino, e),
                        Listed::Writing(_) => match shared.writer_of(ino) {
                            Some(w) => shared.writer_attr(ino, &w.lock()),
                            None => continue, // committed and closed meanwhile: listed next time
                        },
                    })
                } else {
                    None
                };
                out.push((path, ino, kind, entry.name().to_string(), i + 3, a));
            }
            Ok(out)
        })
        .await
    }

    async fn rename_entry(
        &self,
        req: Request,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
        flags: u32,
    ) -> Result<()> {
        let _ = req;
        if flags & libc::RENAME_EXCHANGE != 0 || flags & libc::RENAME_WHITEOUT != 0 {
            return Err(errno(libc::EINVAL));
        }
        let no_replace = flags & libc::RENAME_NOREPLACE != 0;
        let from_dir = self.0.dir_node(parent)?;
        let to_dir = self.0.dir_node(new_parent)?;
        if from_dir.is_root() || to_dir.is_root() {
            // Buckets cannot be renamed (S3 has no such operation).
            return Err(errno(libc::EPERM));
        }
        let name = name_str(name)?.to_string();
        let new_name = name_str(new_name)?.to_string();
        let shared = Arc::clone(&self.0);
        blocking(move || {
            let from_file = from_dir.child(&name, false);
            // A file being written is committed first so that the catalog holds it.
            let live = shared.inodes.lock().live_ino(&from_file);
            if let Some(ino) = live {
                if let Some(w) = shared.writer_of(ino) {
                    shared.commit(ino, &w)?;
                }
            }
            let rename = FsRename {
                from_bucket: from_dir.bucket.clone(),
                from: from_file.path().to_string(),
                to_bucket: to_dir.bucket.clone(),
                to: to_dir.child(&new_name, false).path().to_string(),
                no_replace,
                dir_attrs: shared.now_dir_attrs(),
            };
            shared
                .store
                .fs_rename(&rename)
                .map_err(|e| fs_errno("rename", &e))?;
            let mut inodes = shared.inodes.lock();
            let from_as_dir = from_dir.child(&name, true);
            if inodes.live_ino(&from_as_dir).is_some() {
                inodes.rename(&from_as_dir, &to_dir.child(&new_name, true));
            } else {
                inodes.rename(&from_file, &to_dir.child(&new_name, false));
            }
            Ok(())
        })
        .await
    }
}

impl Filesystem for Fs {
    async fn init(&self, _req: Request) -> Result<ReplyInit> {
        Ok(ReplyInit::new(
            std::num::NonZeroU32::new(MAX_WRITE_BYTES).expect("non-zero"),
        ))
    }

    async fn destroy(&self, _req: Request) {}

    async fn lookup(&self, _req: Request, parent: u64, name: &OsStr) -> Result<ReplyEntry> {
        let parent = self.0.dir_node(parent)?;
        let name = match name_str(name) {
            Ok(n) => n.to_string(),
            Err(e) if e == errno(libc::ENAMETOOLONG) => return Err(e),
            Err(_) => return Err(errno(libc::ENOENT)),
        };
        let shared = Arc::clone(&self.0);
        let (_, a) = blocking(move || shared.lookup_child(&parent, &name)).await?;
        Ok(self.0.entry_reply(a))
    }

    async fn forget(&self, _req: Request, inode: u64, nlookup: u64) {
        self.0.inodes.lock().forget(inode, nlookup);
    }

    async fn batch_forget(&self, _req: Request, inodes: &[(u64, u64)]) {
        let mut table = self.0.inodes.lock();
        for (ino, n) in inodes {
            table.forget(*ino, *n);
        }
    }

    async fn getattr(
        &self,
        _req: Request,
        inode: u64,
        fh: Option<u64>,
        _flags: u32,
    ) -> Result<ReplyAttr> {
        let (path, detached) = self.0.node(inode)?;
        if detached {
            // Unlinked or replaced but still open: answer from the open file.
            let handle = fh.and_then(|fh| match self.0.handles.lock().get(&fh) {
                Some(Handle::Read(r)) => Some(r.size_bytes),
                _ => None,
            });
            if let Some(w) = self.0.writer_of(inode) {
                let mut a = self.0.writer_attr(inode, &w.lock());
                a.nlink = 0;
                return Ok(ReplyAttr {
                    ttl: self.0.config.ttl,
                    attr: a,
                });
            }
            let Some(size) = handle else {
                return Err(errno(libc::ENOENT));
            };
            let mut a = attr::file_attr(
                inode,
                size,
                size,
                &PosixMeta::default(),
                0,
                &self.0.defaults,
            );
            a.nlink = 0;
            return Ok(ReplyAttr {
                ttl: self.0.config.ttl,
                attr: a,
            });
        }
        let shared = Arc::clone(&self.0);
        let a = blocking(move || shared.stat_path(inode, &path)).await?;
        Ok(ReplyAttr {
            ttl: self.0.config.ttl,
            attr: a,
        })
    }

    async fn setattr(
        &self,
        _req: Request,
        inode: u64,
        _fh: Option<u64>,
        set_attr: SetAttr,
    ) -> Result<ReplyAttr> {
        let (path, detached) = self.0.node(inode)?;
        let shared = Arc::clone(&self.0);
        let a = blocking(move || {
            let mtime_ns = set_attr
                .mtime
                .map(|t| t.sec * 1_000_000_000 + t.nsec as i64);
            if let Some(w) = shared.writer_of(inode) {
                let mut w = w.lock();
                if let Some(size) = set_attr.size {
                    if size != w.size_bytes {
                        w.truncate(size).map_err(|e| errno(e.errno()))?;
                    }
                }
                w.meta.mode = set_attr.mode.map(|m| m & 0o7777).or(w.meta.mode);
                w.meta.uid = set_attr.uid.or(w.meta.uid);
                w.meta.gid = set_attr.gid.or(w.meta.gid);
                w.meta.mtime_ns = mtime_ns.or(w.meta.mtime_ns);
                if w.committed && !w.unlinked && !detached {
                    shared
                        .store
                        .fs_set_metadata(&path.bucket, &path.key, &w.meta.apply(&[]))
                        .map_err(|e| fs_errno("chmod", &e))?;
                }
                return Ok(shared.writer_attr(inode, &w));
            }
            if detached {
                return Err(errno(libc::ENOENT));
            }
            if path.is_root() || path.is_bucket() {
                if set_attr.mode.is_some() || set_attr.uid.is_some() || set_attr.gid.is_some() {
                    return Err(errno(libc::EPERM));
                }
                return shared.stat_path(inode, &path);
            }
            if path.is_dir() {
                let current = match shared.store.fs_lookup(&path.bucket, path.path()) {
                    Ok(Some(FsEntry::Dir { record, .. })) => record.map(|r| r.attrs),
                    Ok(_) => return Err(errno(libc::ENOENT)),
                    Err(e) => return Err(fs_errno("chmod", &e)),
                };
                let mut attrs =
                    current.unwrap_or_else(|| shared.defaults.dir_attrs(shared.defaults.since_ns));
                if let Some(mode) = set_attr.mode {
                    attrs.mode = mode & 0o7777;
                }
                attrs.uid = set_attr.uid.unwrap_or(attrs.uid);
                attrs.gid = set_attr.gid.unwrap_or(attrs.gid);
                attrs.mtime_ns = mtime_ns.unwrap_or(attrs.mtime_ns);
                let record = DirRecord {
                    bucket: path.bucket.clone(),
                    path: path.key.clone(),
                    attrs,
                    created_ms: permafrost_catalog::now_ms(),
                };
                shared
                    .store
                    .fs_set_dir(&record)
                    .map_err(|e| fs_errno("chmod", &e))?;
                return shared.stat_path(inode, &path);
            }
            let file = match shared.store.fs_lookup(&path.bucket, &path.key) {
                Ok(Some(FsEntry::File(f))) => f,
                Ok(_) => return Err(errno(libc::ENOENT)),
                Err(e) => return Err(fs_errno("chmod", &e)),
            };
            if let Some(size) = set_attr.size {
                if size != file.object.size_bytes {
                    // Closed files are immutable.
                    return Err(errno(libc::EPERM));
                }
            }
            let mut meta = PosixMeta::from_metadata(&file.object.user_metadata);
            let before = meta;
            if let Some(mode) = set_attr.mode {
                meta.mode = Some(mode & 0o7777);
            }
            meta.uid = set_attr.uid.or(meta.uid);
            meta.gid = set_attr.gid.or(meta.gid);
            meta.mtime_ns = mtime_ns.or(meta.mtime_ns);
            if meta != before {
                shared
                    .store
                    .fs_set_metadata(
                        &path.bucket,
                        &path.key,
                        &meta.apply(&file.object.user_metadata),
                    )
                    .map_err(|e| fs_errno("chmod", &e))?;
            }
            shared.stat_path(inode, &path)
        })
        .await?;
        Ok(ReplyAttr {
            ttl: self.0.config.ttl,
            attr: a,
        })
    }

    async fn symlink(
        &self,
        _req: Request,
        _parent: u64,
        _name: &OsStr,
        _link: &OsStr,
    ) -> Result<ReplyEntry> {
        Err(errno(libc::EPERM))
    }

    async fn mknod(
        &self,
        _req: Request,
        _parent: u64,
        _name: &OsStr,
        _mode: u32,
        _rdev: u32,
    ) -> Result<ReplyEntry> {
        Err(errno(libc::EPERM))
    }

    async fn link(
        &self,
        _req: Request,
        _inode: u64,
        _new_parent: u64,
        _new_name: &OsStr,
    ) -> Result<ReplyEntry> {
        Err(errno(libc::EPERM))
    }

    async fn mkdir(
        &self,
        req: Request,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
    ) -> Result<ReplyEntry> {
        let parent = self.0.dir_node(parent)?;
        let name = name_str(name)?.to_string();
        let shared = Arc::clone(&self.0);
        let a = blocking(move || {
            let path = parent.child(&name, true);
            check_key(&path)?;
            if parent.is_root() {
                shared
                    .store
                    .create_bucket(&name, Default::default())
                    .map_err(|e| store_errno("mkdir of a bucket", &e))?;
            } else {
                let record = DirRecord {
                    bucket: parent.bucket.clone(),
                    path: path.key.clone(),
                    attrs: permafrost_store::DirAttrs {
                        mode: mode & 0o7777,
                        uid: req.uid,
                        gid: req.gid,
                        mtime_ns: attr::now_ns(),
                    },
                    created_ms: permafrost_catalog::now_ms(),
                };
                shared
                    .store
                    .fs_mkdir(&record, &shared.now_dir_attrs())
                    .map_err(|e| fs_errno("mkdir", &e))?;
            }
            let (_, a) = shared.lookup_child(&parent, &name)?;
            Ok(a)
        })
        .await?;
        Ok(self.0.entry_reply(a))
    }

    async fn unlink(&self, _req: Request, parent: u64, name: &OsStr) -> Result<()> {
        let parent = self.0.dir_node(parent)?;
        if parent.is_root() {
            return Err(errno(libc::EISDIR));
        }
        let name = name_str(name)?.to_string();
        let shared = Arc::clone(&self.0);
        blocking(move || {
            let path = parent.child(&name, false);
            let live = shared.inodes.lock().live_ino(&path);
            if let Some(w) = live.and_then(|ino| shared.writer_of(ino)) {
                let committed = {
                    let mut w = w.lock();
                    w.unlinked = true;
                    w.committed
                };
                if committed {
                    shared
                        .store
                        .fs_unlink(&path.bucket, &path.key, &shared.now_dir_attrs())
                        .map_err(|e| fs_errno("unlink", &e))?;
                }
            } else {
                match shared.store.fs_lookup(&path.bucket, &path.key) {
                    Ok(Some(FsEntry::File(_))) => {}
                    Ok(Some(FsEntry::Dir { .. })) => return Err(errno(libc::EISDIR)),
                    Ok(None) => return Err(errno(libc::ENOENT)),
                    Err(e) => return Err(fs_errno("unlink", &e)),
                }
                shared
                    .store
                    .fs_unlink(&path.bucket, &path.key, &shared.now_dir_attrs())
                    .map_err(|e| fs_errno("unlink", &e))?;
            }
            shared.inodes.lock().detach(&path);
            Ok(())
        })
        .await
    }

    async fn rmdir(&self, _req: Request, parent: u64, name: &OsStr) -> Result<()> {
        let parent = self.0.dir_node(parent)?;
        let name = name_str(name)?.to_string();
        let shared = Arc::clone(&self.0);
        blocking(move || {
            let path = parent.child(&name, true);
            let writing = shared
                .writing_paths()
                .iter()
                .any(|p| p.bucket == path.bucket && p.key.starts_with(&path.key));
            if writing {
                return Err(errno(libc::ENOTEMPTY));
            }
            if parent.is_root() {
                let page = shared
                    .store
                    .fs_list(&name, "", None, 1)
                    .map_err(|e| fs_errno("rmdir of a bucket", &e))?;
                if !page.entries.is_empty() || page.next_after.is_some() {
                    return Err(errno(libc::ENOTEMPTY));
                }
                shared
                    .store
                    .delete_bucket(&name)
                    .map_err(|e| store_errno("rmdir of a bucket", &e))?;
            } else {
                match shared.store.fs_lookup(&path.bucket, path.path()) {
                    Ok(Some(FsEntry::Dir { .. })) => {}
                    Ok(Some(FsEntry::File(_))) => return Err(errno(libc::ENOTDIR)),
                    Ok(None) => return Err(errno(libc::ENOENT)),
                    Err(e) => return Err(fs_errno("rmdir", &e)),
                }
                shared
                    .store
                    .fs_rmdir(&path.bucket, &path.key, &shared.now_dir_attrs())
                    .map_err(|e| fs_errno("rmdir", &e))?;
            }
            shared.inodes.lock().detach(&path);
            Ok(())
        })
        .await
    }

    async fn rename(
        &self,
        req: Request,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
    ) -> Result<()> {
        self.rename_entry(req, parent, name, new_parent, new_name, 0)
            .await
    }

    async fn rename2(
        &self,
        req: Request,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
        flags: u32,
    ) -> Result<()> {
        self.rename_entry(req, parent, name, new_parent, new_name, flags)
            .await
    }

    async fn open(&self, _req: Request, inode: u64, flags: u32) -> Result<ReplyOpen> {
        let (path, detached) = self.0.node(inode)?;
        if path.is_dir() {
            return Err(errno(libc::EISDIR));
        }
        let flags = flags as i32;
        let wants_write = flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
        let nonblock = flags & libc::O_NONBLOCK != 0;
        let direct = flags & libc::O_DIRECT != 0;
        let shared = Arc::clone(&self.0);
        blocking(move || {
            if let Some(writer) = shared.writer_of(inode) {
                {
                    let mut w = writer.lock();
                    if flags & libc::O_TRUNC != 0 {
                        w.truncate(0).map_err(|e| errno(e.errno()))?;
                    }
                    w.opens += 1;
                }
                let fh = shared.new_fh();
                shared
                    .handles
                    .lock()
                    .insert(fh, Handle::Write { ino: inode, writer });
                return Ok(ReplyOpen { fh, flags: 0 });
            }
            if detached {
                return Err(errno(libc::ENOENT));
            }
            let file = match shared.store.fs_lookup(&path.bucket, &path.key) {
                Ok(Some(FsEntry::File(f))) => f,
                Ok(_) => return Err(errno(libc::ENOENT)),
                Err(e) => return Err(fs_errno("open", &e)),
            };
            if wants_write {
                // Closed files are immutable (docs/mount.md).
                return Err(errno(libc::EPERM));
            }
            // Start the disk spinning now: the first read will need it. Such a file is read without the page
            // cache: its reads are then the caller's own requests, which a signal interrupts (read-ahead of the
            // page cache runs in the background, where Ctrl-C in a program that handles SIGINT cannot end it).
            let mut sleeping = false;
            if let Ok(Some(content)) = shared.store.content(&file.object.content) {
                if shared.store.residence(&content).must_wait() {
                    let _reason = WakeReason::read(&path.bucket, &path.key).enter();
                    shared.store.begin_spin_up(&content);
                    sleeping = true;
                }
            }
            let handle = ReadHandle {
                content: file.object.content,
                reason: WakeReason::read(&path.bucket, &path.key),
                size_bytes: file.object.size_bytes,
                nonblock,
                stream: Mutex::new(None),
            };
            let fh = shared.new_fh();
            shared
                .handles
                .lock()
                .insert(fh, Handle::Read(Arc::new(handle)));
            let open_flags = if nonblock || direct || sleeping {
                FOPEN_DIRECT_IO
            } else {
                FOPEN_KEEP_CACHE
            };
            Ok(ReplyOpen {
                fh,
                flags: open_flags,
            })
        })
        .await
    }

    async fn read(
        &self,
        req: Request,
        _inode: u64,
        fh: u64,
        offset: u64,
        size: u32,
    ) -> Result<ReplyData> {
        let handle = match self.0.handles.lock().get(&fh) {
            Some(Handle::Read(r)) => Ok(Arc::clone(r)),
            Some(Handle::Write { writer, .. }) => Err(Arc::clone(writer)),
            None => return Err(errno(libc::EBADF)),
        };
        let handle = match handle {
            Ok(h) => h,
            Err(writer) => {
                let data = blocking(move || {
                    writer
                        .lock()
                        .read(offset, size as u64)
                        .map_err(|e| errno(e.raw_os_error().unwrap_or(libc::EIO)))
                })
                .await?;
                return Ok(ReplyData {
                    data: Bytes::from(data),
                });
            }
        };
        if offset >= handle.size_bytes || size == 0 {
            return Ok(ReplyData { data: Bytes::new() });
        }
        let len = (size as u64).min(handle.size_bytes - offset);
        let registration = self.0.interrupts.register(req.unique);
        // A restart replaces the stream; reads that were waiting on the old one go on with the new one (several
        // requests of the kernel's read-ahead race here). After a few restarts, or for a late request just
        // before the window, the bytes are read on their own.
        for _attempt in 0..3 {
            let stream = {
                let current = handle.stream.lock().clone();
                match current {
                    Some(s) => s,
                    None => {
                        if handle.nonblock {
                            let shared = Arc::clone(&self.0);
                            let content = handle.content;
                            let reason = handle.reason.clone();
                            blocking(move || {
                                let record = shared
                                    .store
                                    .content(&content)
                                    .map_err(|e| store_errno("read", &e))?
                                    .ok_or_else(|| errno(libc::ENOENT))?;
                                if shared.store.residence(&record).must_wait() {
                                    let _reason = reason.enter();
                                    shared.store.begin_spin_up(&record);
                                    return Err(errno(libc::EAGAIN));
                                }
                                Ok(())
                            })
                            .await?;
                        }
                        // Started under the lock: two requests that both found no stream must not both
                        // start one (the one overwritten would never be closed: its producer thread and the
                        // store it holds would outlive the file).
                        let mut slot = handle.stream.lock();
                        match &*slot {
                            Some(s) => Arc::clone(s),
                            None => {
                                let s = ReadAhead::start(
                                    Arc::clone(&self.0.store),
                                    handle.content,
                                    handle.size_bytes,
                                    offset,
                                    handle.reason.clone(),
                                );
                                *slot = Some(Arc::clone(&s));
                                s
                            }
                        }
                    }
                }
            };
            let outcome = tokio::select! {
                outcome = stream.read(offset, len) => outcome,
                _ = registration.interrupted() => return Err(errno(libc::EINTR)),
            };
            match outcome {
                Ok(data) => return Ok(ReplyData { data }),
                Err(Miss::Restart) => {
                    let mut current = handle.stream.lock();
                    if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &stream)) {
                        *current = None;
                    }
                    stream.close();
                }
                Err(Miss::Behind) => break,
                Err(Miss::Failed(message)) => {
                    tracing::warn!(
                        "mount: read of content {} failed: {message}",
                        handle.content
                    );
                    *handle.stream.lock() = None;
                    return Err(errno(libc::EIO));
                }
            }
        }
        let shared = Arc::clone(&self.0);
        let (content, reason) = (handle.content, handle.reason.clone());
        let single = blocking(move || {
            let _reason = reason.enter();
            read_range(&shared.store, &content, offset, len)
        });
        tokio::select! {
            data = single => data.map(|data| ReplyData { data }),
            _ = registration.interrupted() => Err(errno(libc::EINTR)),
        }
    }

    async fn write(
        &self,
        _req: Request,
        _inode: u64,
        fh: u64,
        offset: u64,
        data: &[u8],
        _write_flags: u32,
        _flags: u32,
    ) -> Result<ReplyWrite> {
        let writer = match self.0.handles.lock().get(&fh) {
            Some(Handle::Write { writer, .. }) => Arc::clone(writer),
            Some(Handle::Read(_)) => return Err(errno(libc::EBADF)),
            None => return Err(errno(libc::EBADF)),
        };
        let data = data.to_vec();
        let written = data.len() as u32;
        blocking(move || {
            writer
                .lock()
                .write(offset, &data)
                .map_err(|e| errno(e.errno()))
        })
        .await?;
        Ok(ReplyWrite { written })
    }

    async fn statfs(&self, _req: Request, _inode: u64) -> Result<ReplyStatFs> {
        let shared = Arc::clone(&self.0);
        let usage =
            blocking(move || shared.store.usage().map_err(|e| store_errno("statfs", &e))).await?;
        const BLOCK: u64 = 4096;
        let blocks = usage.capacity_bytes / BLOCK;
        let free = usage.capacity_bytes.saturating_sub(usage.used_bytes) / BLOCK;
        Ok(ReplyStatFs {
            blocks,
            bfree: free,
            bavail: free,
            files: usage.objects,
            ffree: u32::MAX as u64,
            bsize: BLOCK as u32,
            namelen: permafrost_catalog::NAME_BYTES_MAX as u32,
            frsize: BLOCK as u32,
        })
    }

    async fn release(
        &self,
        _req: Request,
        _inode: u64,
        fh: u64,
        _flags: u32,
        _lock_owner: u64,
        _flush: bool,
    ) -> Result<()> {
        let handle = self.0.handles.lock().remove(&fh);
        match handle {
            Some(Handle::Write { ino, writer }) => {
                let shared = Arc::clone(&self.0);
                blocking(move || {
                    shared.release_writer(ino, &writer);
                    Ok(())
                })
                .await
            }
            Some(Handle::Read(r)) => {
                if let Some(s) = r.stream.lock().take() {
                    s.close();
                }
                Ok(())
            }
            None => Ok(()),
        }
    }

    async fn fsync(&self, _req: Request, _inode: u64, fh: u64, _datasync: bool) -> Result<()> {
        self.flush(_req, _inode, fh, 0).await
    }

    async fn flush(&self, _req: Request, _inode: u64, fh: u64, _lock_owner: u64) -> Result<()> {
        let writer = match self.0.handles.lock().get(&fh) {
            Some(Handle::Write { ino, writer }) => (*ino, Arc::clone(writer)),
            _ => return Ok(()),
        };
        let shared = Arc::clone(&self.0);
        blocking(move || shared.commit(writer.0, &writer.1)).await
    }

    async fn setxattr(
        &self,
        _req: Request,
        _inode: u64,
        name: &OsStr,
        _value: &[u8],
        _flags: u32,
        _position: u32,
    ) -> Result<()> {
        if name.to_str().is_some_and(|n| xattr::NAMES.contains(&n)) {
            return Err(errno(libc::EPERM));
        }
        Err(errno(libc::ENOTSUP))
    }

    async fn getxattr(
        &self,
        _req: Request,
        inode: u64,
        name: &OsStr,
        size: u32,
    ) -> Result<ReplyXAttr> {
        let Some(name) = name
            .to_str()
            .filter(|n| xattr::NAMES.contains(n))
            .map(str::to_string)
        else {
            return Err(errno(libc::ENODATA));
        };
        let (path, detached) = self.0.node(inode)?;
        if path.is_dir() || detached {
            return Err(errno(libc::ENODATA));
        }
        let shared = Arc::clone(&self.0);
        let value = blocking(move || {
            if let Some(w) = shared.writer_of(inode) {
                let w = w.lock();
                if !w.committed || w.dirty {
                    return Ok(match name.as_str() {
                        xattr::STATE => Some("writing".to_string()),
                        _ => None,
                    });
                }
            }
            let file = match shared.store.fs_lookup(&path.bucket, &path.key) {
                Ok(Some(FsEntry::File(f))) => f,
                Ok(_) => return Err(errno(libc::ENOENT)),
                Err(e) => return Err(fs_errno("getxattr", &e)),
            };
            let content = shared
                .store
                .content(&file.object.content)
                .map_err(|e| store_errno("getxattr", &e))?
                .ok_or_else(|| errno(libc::ENOENT))?;
            Ok(xattr::value(&shared.store, &content, &name))
        })
        .await?;
        let value = value.ok_or_else(|| errno(libc::ENODATA))?;
        xattr_reply(value.into_bytes(), size)
    }

    async fn listxattr(&self, _req: Request, inode: u64, size: u32) -> Result<ReplyXAttr> {
        let (path, _) = self.0.node(inode)?;
        let mut list = Vec::new();
        if !path.is_dir() {
            for name in xattr::NAMES {
                list.extend_from_slice(name.as_bytes());
                list.push(0);
            }
        }
        xattr_reply(list, size)
    }

    async fn removexattr(&self, _req: Request, _inode: u64, name: &OsStr) -> Result<()> {
        if name.to_str().is_some_and(|n| xattr::NAMES.contains(&n)) {
            return Err(errno(libc::EPERM));
        }
        Err(errno(libc::ENODATA))
    }

    async fn opendir(&self, _req: Request, inode: u64, _flags: u32) -> Result<ReplyOpen> {
        let path = self.0.dir_node(inode)?;
        let fh = self.0.new_fh();
        self.0
            .dirs
            .lock()
            .insert(fh, Arc::new(Mutex::new(DirCursor::new(path))));
        Ok(ReplyOpen { fh, flags: 0 })
    }

    async fn readdir<'a>(
        &'a self,
        _req: Request,
        parent: u64,
        fh: u64,
        offset: i64,
    ) -> Result<ReplyDirectory<impl Stream<Item = Result<DirectoryEntry>> + Send + 'a>> {
        let entries = self
            .dir_entries(parent, fh, offset.max(0) as u64, false)
            .await?;
        let entries: Vec<Result<DirectoryEntry>> = entries
            .into_iter()
            .map(|(_, ino, kind, name, next, _)| {
                Ok(DirectoryEntry {
                    inode: ino,
                    kind,
                    name: OsString::from(name),
                    offset: next as i64,
                })
            })
            .collect();
        Ok(ReplyDirectory {
            entries: stream::iter(entries),
        })
    }

    async fn readdirplus<'a>(
        &'a self,
        _req: Request,
        parent: u64,
        fh: u64,
        offset: u64,
        _lock_owner: u64,
    ) -> Result<ReplyDirectoryPlus<impl Stream<Item = Result<DirectoryEntryPlus>> + Send + 'a>>
    {
        let ttl = self.0.config.ttl;
        let entries = self.dir_entries(parent, fh, offset, true).await?;
        let entries = entries
            .into_iter()
            .map(|(path, ino, kind, name, next, a)| {
                let attr = a.expect("plus entries carry attributes");
                (
                    path,
                    DirectoryEntryPlus {
                        inode: ino,
                        generation: 0,
                        kind,
                        name: OsString::from(name),
                        offset: next as i64,
                        attr,
                        entry_ttl: ttl,
                        attr_ttl: ttl,
                    },
                )
            })
            .collect();
        Ok(ReplyDirectoryPlus {
            entries: PlusEntries {
                shared: Arc::clone(&self.0),
                entries,
                last_counted: None,
                exhausted: false,
            },
        })
    }

    async fn releasedir(&self, _req: Request, _inode: u64, fh: u64, _flags: u32) -> Result<()> {
        self.0.dirs.lock().remove(&fh);
        Ok(())
    }

    async fn fsyncdir(&self, _req: Request, _inode: u64, _fh: u64, _datasync: bool) -> Result<()> {
        // Every namespace change is committed (durably) before it is answered.
        Ok(())
    }

    async fn access(&self, _req: Request, _inode: u64, _mask: u32) -> Result<()> {
        // The kernel checks permissions (mounted with default_permissions).
        Ok(())
    }

    async fn create(
        &self,
        req: Request,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: u32,
    ) -> Result<ReplyCreated> {
        let parent = self.0.dir_node(parent)?;
        if parent.is_root() {
            // Files live in buckets; the root holds only buckets.
            return Err(errno(libc::EPERM));
        }
        let name = name_str(name)?.to_string();
        let shared = Arc::clone(&self.0);
        let (a, fh) = blocking(move || {
            let path = parent.child(&name, false);
            check_key(&path)?;
            let exists = shared
                .inodes
                .lock()
                .live_ino(&path)
                .and_then(|i| shared.writer_of(i))
                .is_some()
                || match shared.store.fs_lookup(&path.bucket, &path.key) {
                    Ok(found) => found.is_some(),
                    Err(e) => return Err(fs_errno("create", &e)),
                };
            if exists {
                // The kernel creates only names it found missing; another writer won the race.
                return Err(errno(if (flags as i32) & libc::O_EXCL != 0 {
                    libc::EEXIST
                } else {
                    libc::EPERM
                }));
            }
            let meta = PosixMeta {
                mode: Some(mode & 0o7777),
                uid: Some(req.uid),
                gid: Some(req.gid),
                mtime_ns: None,
            };
            let writer = Writer::create(&shared.store, meta).map_err(|e| {
                tracing::warn!("mount: cannot create a staging file for {path}: {e}");
                errno(libc::EIO)
            })?;
            let writer = Arc::new(Mutex::new(writer));
            let ino = shared.inodes.lock().remember(&path);
            shared.writers.lock().insert(ino, Arc::clone(&writer));
            let fh = shared.new_fh();
            shared.handles.lock().insert(
                fh,
                Handle::Write {
                    ino,
                    writer: Arc::clone(&writer),
                },
            );
            let a = shared.writer_attr(ino, &writer.lock());
            Ok((a, fh))
        })
        .await?;
        Ok(ReplyCreated {
            ttl: self.0.config.ttl,
            attr: a,
            generation: 0,
            fh,
            flags: 0,
        })
    }

    async fn interrupt(&self, _req: Request, unique: u64) -> Result<()> {
        self.0.interrupts.interrupt(unique);
        Ok(())
    }

    async fn fallocate(
        &self,
        _req: Request,
        _inode: u64,
        _fh: u64,
        _offset: u64,
        _length: u64,
        _mode: u32,
    ) -> Result<()> {
        Err(errno(libc::EOPNOTSUPP))
    }
}

/// `size == 0` asks for the length; a buffer too small is `ERANGE`.
fn xattr_reply(value: Vec<u8>, size: u32) -> Result<ReplyXAttr> {
    if size == 0 {
        return Ok(ReplyXAttr::Size(value.len() as u32));
    }
    if value.len() > size as usize {
        return Err(errno(libc::ERANGE));
    }
    Ok(ReplyXAttr::Data(Bytes::from(value)))
}
