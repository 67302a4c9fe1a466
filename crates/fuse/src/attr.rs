//! POSIX attributes from the catalog: directories from their rows (or defaults), files from the object and its
//! content, with `mode`, `uid`, `gid` and `mtime` kept in the object's user metadata as s3fs-fuse and rclone keep
//! them (`x-amz-meta-mode` = decimal `st_mode`, `x-amz-meta-mtime` = seconds since the epoch, fractions allowed),
//! so S3 clients and other S3 mounts see the same owners, modes and times.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuse3::raw::reply::FileAttr;
use fuse3::{FileType, Timestamp};
use permafrost_catalog::{DirAttrs, FsFile};

pub const META_MODE: &str = "mode";
pub const META_UID: &str = "uid";
pub const META_GID: &str = "gid";
pub const META_MTIME: &str = "mtime";

/// `st_blksize`: the I/O size tools should use.
const BLKSIZE: u32 = 1 << 20;

/// Owners and modes of entries that carry none (uploaded through S3, implicit directories).
#[derive(Debug, Clone, Copy)]
pub struct Defaults {
    pub uid: u32,
    pub gid: u32,
    pub file_mode: u32,
    pub dir_mode: u32,
    /// Time shown for directories without their own (the mount's start).
    pub since_ns: i64,
}

impl Defaults {
    /// Attributes a directory row gets when the mount materialises an implicit directory.
    pub fn dir_attrs(&self, now_ns: i64) -> DirAttrs {
        DirAttrs {
            mode: self.dir_mode,
            uid: self.uid,
            gid: self.gid,
            mtime_ns: now_ns,
        }
    }
}

/// POSIX metadata of a file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PosixMeta {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub mtime_ns: Option<i64>,
}

impl PosixMeta {
    /// Read what user metadata holds (unparsable values are ignored).
    pub fn from_metadata(metadata: &[(String, String)]) -> PosixMeta {
        let get = |name: &str| {
            metadata
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.trim())
        };
        PosixMeta {
            mode: get(META_MODE).and_then(|v| v.parse::<u32>().ok()),
            uid: get(META_UID).and_then(|v| v.parse().ok()),
            gid: get(META_GID).and_then(|v| v.parse().ok()),
            mtime_ns: get(META_MTIME).and_then(parse_seconds),
        }
    }

    /// `metadata` with these values in place of the old ones (other entries kept, in order).
    pub fn apply(&self, metadata: &[(String, String)]) -> Vec<(String, String)> {
        let ours = [META_MODE, META_UID, META_GID, META_MTIME];
        let mut out: Vec<(String, String)> = metadata
            .iter()
            .filter(|(k, _)| !ours.iter().any(|o| k.eq_ignore_ascii_case(o)))
            .cloned()
            .collect();
        if let Some(mode) = self.mode {
            out.push((
                META_MODE.into(),
                (libc::S_IFREG | (mode & 0o7777)).to_string(),
            ));
        }
        if let Some(uid) = self.uid {
            out.push((META_UID.into(), uid.to_string()));
        }
        if let Some(gid) = self.gid {
            out.push((META_GID.into(), gid.to_string()));
        }
        if let Some(ns) = self.mtime_ns {
            out.push((META_MTIME.into(), format_seconds(ns)));
        }
        out
    }
}

/// `"1700000000.123456789"` (or an integer) → nanoseconds.
fn parse_seconds(text: &str) -> Option<i64> {
    let (secs, frac) = text.split_once('.').unwrap_or((text, ""));
    let secs: i64 = secs.parse().ok()?;
    let digits: String = frac.chars().take(9).collect();
    if !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let nanos: i64 = format!("{digits:0<9}").parse().ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

fn format_seconds(ns: i64) -> String {
    format!(
        "{}.{:09}",
        ns.div_euclid(1_000_000_000),
        ns.rem_euclid(1_000_000_000)
    )
}

pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_nanos() as i64
}

pub fn timestamp(ns: i64) -> Timestamp {
    Timestamp::new(
        ns.div_euclid(1_000_000_000),
        ns.rem_euclid(1_000_000_000) as u32,
    )
}

/// 512-byte blocks of `stored_bytes`: never 0 for a file with bytes (`tar --sparse` would archive zeros).
fn blocks(size_bytes: u64, stored_bytes: u64) -> u64 {
    let blocks = stored_bytes.div_ceil(512);
    if size_bytes > 0 {
        blocks.max(1)
    } else {
        blocks
    }
}

pub fn dir_attr(ino: u64, attrs: Option<&DirAttrs>, defaults: &Defaults) -> FileAttr {
    let (mode, uid, gid, mtime_ns) = match attrs {
        Some(a) => (a.mode, a.uid, a.gid, a.mtime_ns),
        None => (
            defaults.dir_mode,
            defaults.uid,
            defaults.gid,
            defaults.since_ns,
        ),
    };
    FileAttr {
        ino,
        size: 4096,
        blocks: 8,
        atime: timestamp(mtime_ns),
        mtime: timestamp(mtime_ns),
        ctime: timestamp(mtime_ns),
        kind: FileType::Directory,
        perm: (mode & 0o7777) as u16,
        // 1: "unknown number of subdirectories" (tools then never skip a directory on nlink).
        nlink: 1,
        uid,
        gid,
        rdev: 0,
        blksize: BLKSIZE,
    }
}

/// Attributes of a file from its size, stored size, POSIX metadata and S3 modification time.
pub fn file_attr(
    ino: u64,
    size_bytes: u64,
    stored_bytes: u64,
    meta: &PosixMeta,
    last_modified_ms: u64,
    defaults: &Defaults,
) -> FileAttr {
    let changed_ns = last_modified_ms as i64 * 1_000_000;
    let mtime_ns = meta.mtime_ns.unwrap_or(changed_ns);
    FileAttr {
        ino,
        size: size_bytes,
        blocks: blocks(size_bytes, stored_bytes),
        atime: timestamp(mtime_ns),
        mtime: timestamp(mtime_ns),
        ctime: timestamp(changed_ns),
        kind: FileType::RegularFile,
        perm: (meta.mode.unwrap_or(defaults.file_mode) & 0o7777) as u16,
        nlink: 1,
        uid: meta.uid.unwrap_or(defaults.uid),
        gid: meta.gid.unwrap_or(defaults.gid),
        rdev: 0,
        blksize: BLKSIZE,
    }
}

pub fn object_attr(ino: u64, file: &FsFile, defaults: &Defaults) -> FileAttr {
    file_attr(
        ino,
        file.object.size_bytes,
        file.stored_bytes,
        &PosixMeta::from_metadata(&file.object.user_metadata),
        file.object.last_modified_ms,
        defaults,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posix_metadata_round_trips_in_s3fs_form() {
        let meta = PosixMeta {
            mode: Some(0o640),
            uid: Some(1000),
            gid: Some(100),
            mtime_ns: Some(1_700_000_000_123_456_789),
        };
        let stored = meta.apply(&[("keep".into(), "x".into()), ("mode".into(), "1".into())]);
        assert_eq!(stored[0], ("keep".to_string(), "x".to_string()));
        assert!(stored.contains(&("mode".to_string(), "33184".to_string())));
        assert!(stored.contains(&("mtime".to_string(), "1700000000.123456789".to_string())));
        let back = PosixMeta::from_metadata(&stored);
        assert_eq!(back.mode.map(|m| m & 0o7777), Some(0o640));
        assert_eq!(back.uid, Some(1000));
        assert_eq!(back.mtime_ns, meta.mtime_ns);
        // rclone's and s3fs's forms.
        assert_eq!(parse_seconds("1700000000"), Some(1_700_000_000_000_000_000));
        assert_eq!(parse_seconds("1.5"), Some(1_500_000_000));
        assert_eq!(parse_seconds("x"), None);
    }

    #[test]
    fn a_file_with_bytes_never_has_zero_blocks() {
        assert_eq!(blocks(10, 0), 1);
        assert_eq!(blocks(0, 0), 0);
        assert_eq!(blocks(1 << 20, 4096), 8);
    }
}
