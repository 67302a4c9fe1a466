//! Types of the file system namespace the mount shows (see the `fs_*` methods of [`crate::Catalog`]).

use crate::{ContentState, ObjectRecord};

/// Longest name of one path component a file system shows (`NAME_MAX`).
pub const NAME_BYTES_MAX: usize = 255;

/// Why a namespace change was refused (maps one-to-one to an errno in the mount).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `ENOENT`
    NotFound,
    /// `EEXIST`
    Exists,
    /// `ENOTEMPTY`
    NotEmpty,
    /// `ENOTDIR`
    NotADirectory,
    /// `EISDIR`
    IsADirectory,
    /// `EINVAL`: a directory into itself, a name that cannot be a key.
    Invalid,
    /// `ENAMETOOLONG`: a key over 1024 bytes (S3's limit).
    NameTooLong,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refusal::NotFound => "no such file or directory",
            Refusal::Exists => "already exists",
            Refusal::NotEmpty => "directory not empty",
            Refusal::NotADirectory => "not a directory",
            Refusal::IsADirectory => "is a directory",
            Refusal::Invalid => "invalid argument",
            Refusal::NameTooLong => "key longer than 1024 bytes",
        })
    }
}

/// POSIX attributes of a directory row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DirAttrs {
    /// Permission bits (`0o7777` at most).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Modification time, nanoseconds since the Unix epoch.
    pub mtime_ns: i64,
}

/// A directory that exists on its own (a row of `fs_directories`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirRecord {
    pub bucket: String,
    /// The key prefix it stands for, ending with `/` (`runs/2026/`).
    pub path: String,
    pub attrs: DirAttrs,
    pub created_ms: u64,
}

/// A file of the namespace: an object with what `stat` needs of its content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsFile {
    pub object: ObjectRecord,
    /// Bytes of the stored form (what `st_blocks` reports).
    pub stored_bytes: u64,
    pub state: ContentState,
}

/// One entry of the namespace.
// Files are most entries of a listing: boxing the large variant would cost an allocation for each of them.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FsEntry {
    /// A directory; `record` is `None` for an implicit one (only keys or rows under its prefix).
    Dir {
        /// Its prefix, ending with `/`.
        path: String,
        record: Option<DirRecord>,
    },
    File(FsFile),
}

impl FsEntry {
    /// The entry's key: a directory's prefix (ending with `/`) or a file's key.
    pub fn key(&self) -> &str {
        match self {
            FsEntry::Dir { path, .. } => path,
            FsEntry::File(f) => &f.object.key,
        }
    }

    /// The entry's name within its directory (the last component, without `/`).
    pub fn name(&self) -> &str {
        let key = self.key().strip_suffix('/').unwrap_or(self.key());
        key.rsplit('/').next().unwrap_or(key)
    }
}

/// One page of [`crate::Catalog::fs_list`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FsPage {
    pub entries: Vec<FsEntry>,
    /// More entries may follow: list again with `after` = this key. (A page may hold fewer entries than asked,
    /// even none, when names were left out.)
    pub next_after: Option<String>,
}

/// A rename of the namespace (see [`crate::Catalog::fs_rename`]). Paths are keys without a trailing `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsRename {
    pub from_bucket: String,
    pub from: String,
    pub to_bucket: String,
    pub to: String,
    /// `RENAME_NOREPLACE`: refuse with `Exists` instead of replacing.
    pub no_replace: bool,
    /// Attributes of a directory row made for the source's parent (so it does not vanish) or for a renamed
    /// implicit directory.
    pub dir_attrs: DirAttrs,
}

/// The parent prefix of a key or directory prefix: `a/b/c` and `a/b/c/` → `a/b/`, `a` → `""`.
pub fn parent_of(key: &str) -> &str {
    let trimmed = key.strip_suffix('/').unwrap_or(key);
    match trimmed.rfind('/') {
        Some(at) => &trimmed[..=at],
        None => "",
    }
}

/// Whether `name` can be shown as one path component.
pub fn showable_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && name.len() <= NAME_BYTES_MAX
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_of_keys_and_prefixes() {
        assert_eq!(parent_of("a/b/c"), "a/b/");
        assert_eq!(parent_of("a/b/c/"), "a/b/");
        assert_eq!(parent_of("a"), "");
        assert_eq!(parent_of("a/"), "");
    }
}
