//! Open directories: a cursor over the catalog's listing, one page at a time, so a directory of a million
//! entries is listed in bounded memory. Entry offsets: 1 and 2 follow `.` and `..`, entry `i` (from 0) of the
//! listing has offset `i + 3`. A read at the offset the cursor stands at continues the listing; any other
//! offset (a `seekdir` back) lists again from the start.
//!
//! Files being written and not yet committed are not in the catalog: the names present when the directory
//! is read from its start are merged in (POSIX leaves open whether entries created after `opendir` appear).

use permafrost_store::{BucketRecord, FsEntry, Store};

use crate::inode::NodePath;

/// Catalog entries fetched per page.
pub const PAGE_ENTRIES: usize = 512;

/// What an entry of a listing is.
#[derive(Debug, Clone)]
pub enum Listed {
    Bucket(BucketRecord),
    Entry(FsEntry),
    /// A file being written (not committed yet): its path.
    Writing(NodePath),
}

impl Listed {
    /// The key the listing is ordered by (a directory's prefix, a file's key).
    fn key(&self) -> &str {
        match self {
            Listed::Bucket(b) => &b.name,
            Listed::Entry(e) => e.key(),
            Listed::Writing(p) => &p.key,
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Listed::Bucket(b) => &b.name,
            Listed::Entry(e) => e.name(),
            Listed::Writing(p) => p.key.rsplit('/').next().unwrap_or(&p.key),
        }
    }

    pub fn is_dir(&self) -> bool {
        match self {
            Listed::Bucket(_) => true,
            Listed::Entry(FsEntry::Dir { .. }) => true,
            Listed::Entry(FsEntry::File(_)) | Listed::Writing(_) => false,
        }
    }

    /// The entry's path, as a child of the directory `parent`.
    pub fn path(&self, parent: &NodePath) -> NodePath {
        parent.child(self.name(), self.is_dir())
    }
}

/// An open directory.
pub struct DirCursor {
    dir: NodePath,
    /// The current page and the listing index of its first entry.
    page: Vec<Listed>,
    page_start: u64,
    /// Catalog cursor after the current page; `None` when the listing is complete.
    next_after: Option<String>,
    started: bool,
    /// Files being written in this directory, sorted by key, not yet merged.
    writing: Vec<NodePath>,
}

impl DirCursor {
    pub fn new(dir: NodePath) -> DirCursor {
        DirCursor {
            dir,
            page: Vec::new(),
            page_start: 0,
            next_after: None,
            started: false,
            writing: Vec::new(),
        }
    }

    pub fn dir(&self) -> &NodePath {
        &self.dir
    }

    /// Up to `max` entries from listing index `index` on, with their indexes. `writing` lists the files
    /// being written (paths of any directory; those of this one are merged when the listing starts over).
    pub fn entries_from(
        &mut self,
        store: &Store,
        index: u64,
        max: usize,
        writing: impl FnOnce() -> Vec<NodePath>,
    ) -> Result<Vec<(u64, Listed)>, permafrost_store::FsError> {
        if !self.started || index < self.page_start {
            self.restart(store, writing())?;
        }
        while index >= self.page_start + self.page.len() as u64 && self.next_after.is_some() {
            self.next_page(store)?;
        }
        let skip = (index - self.page_start) as usize;
        Ok(self
            .page
            .iter()
            .enumerate()
            .skip(skip)
            .take(max)
            .map(|(i, e)| (self.page_start + i as u64, e.clone()))
            .collect())
    }

    fn restart(
        &mut self,
        store: &Store,
        writing: Vec<NodePath>,
    ) -> Result<(), permafrost_store::FsError> {
        self.started = true;
        self.page_start = 0;
        self.page.clear();
        if self.dir.is_root() {
            self.page = store
                .list_buckets()?
                .into_iter()
                .map(Listed::Bucket)
                .collect();
            self.next_after = None;
            return Ok(());
        }
        let mut mine: Vec<NodePath> = writing
            .into_iter()
            .filter(|p| {
                p.bucket == self.dir.bucket
                    && p.key
                        .strip_prefix(&self.dir.key)
                        .is_some_and(|rest| !rest.contains('/'))
            })
            .collect();
        mine.sort_by(|a, b| a.key.as_bytes().cmp(b.key.as_bytes()));
        self.writing = mine;
        self.next_after = Some(String::new());
        self.fill(store, None)
    }

    fn next_page(&mut self, store: &Store) -> Result<(), permafrost_store::FsError> {
        self.page_start += self.page.len() as u64;
        let after = self.next_after.take();
        self.fill(store, after.filter(|a| !a.is_empty()))
    }

    fn fill(
        &mut self,
        store: &Store,
        after: Option<String>,
    ) -> Result<(), permafrost_store::FsError> {
        let page = store.fs_list(
            &self.dir.bucket,
            &self.dir.key,
            after.as_deref(),
            PAGE_ENTRIES,
        )?;
        let mut entries: Vec<Listed> = page.entries.into_iter().map(Listed::Entry).collect();
        // Merge the files being written whose keys fall into this page (all that are left, on the last page).
        let upto = page.next_after.clone();
        let take = self
            .writing
            .iter()
            .take_while(|p| upto.as_deref().is_none_or(|u| p.key.as_str() <= u))
            .count();
        for path in self.writing.drain(..take) {
            if !entries
                .iter()
                .any(|e| e.name() == path.key.rsplit('/').next().unwrap_or(""))
            {
                entries.push(Listed::Writing(path));
            }
        }
        entries.sort_by(|a, b| a.key().as_bytes().cmp(b.key().as_bytes()));
        self.page = entries;
        self.next_after = page.next_after;
        Ok(())
    }
}
