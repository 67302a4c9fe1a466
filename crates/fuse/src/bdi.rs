//! The kernel's read-ahead of the mount: the `read_ahead_kb` of its backing device (`/sys/class/bdi/MAJ:MIN`,
//! the major:minor of the mount's `st_dev`).
//!
//! A FUSE mount starts with the kernel's default of 128 KiB. The `max_readahead` of the `init` reply can only
//! lower it: the kernel offers its current value and keeps the smaller of the two (fuse3 answers with the
//! kernel's own offer, so `init` leaves 128 KiB). Only a write to sysfs raises it, and only after `init` was
//! answered (the answer would lower it again) and before files are opened (each open file copies the value).
//! [`apply`] therefore first stats the mount's root, which waits for `init`, then writes sysfs; it needs root.

use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Where the device files of the kernel's backing devices are.
const SYSFS_BDI: &str = "/sys/class/bdi";

/// What became of `[mount] read_ahead_kb` (one log line in words).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadAhead {
    /// `read_ahead_kb = 0`: the kernel's value stays.
    Left,
    /// Written (or already had that value).
    Set {
        file: PathBuf,
        from_kb: Option<u32>,
        to_kb: u32,
    },
    /// Not written; `why` says why (not root, sysfs missing, the write failed).
    NotSet {
        wanted_kb: u32,
        current_kb: Option<u32>,
        why: String,
    },
}

impl fmt::Display for ReadAhead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadAhead::Left => write!(
                f,
                "the kernel's read-ahead of the mount left as it is ([mount] read_ahead_kb = 0)"
            ),
            ReadAhead::Set {
                file,
                from_kb: Some(from),
                to_kb,
            } if from == to_kb => write!(
                f,
                "the kernel's read-ahead of the mount is {to_kb} KiB ({} already said so)",
                file.display()
            ),
            ReadAhead::Set {
                file,
                from_kb,
                to_kb,
            } => {
                let was = from_kb.map_or_else(|| "unknown".to_string(), |kb| format!("{kb} KiB"));
                write!(
                    f,
                    "set the kernel's read-ahead of the mount to {to_kb} KiB (was {was}; {})",
                    file.display()
                )
            }
            ReadAhead::NotSet {
                wanted_kb,
                current_kb,
                why,
            } => {
                let now = current_kb.map_or_else(
                    || "the kernel's default".to_string(),
                    |kb| format!("{kb} KiB"),
                );
                write!(
                    f,
                    "the kernel's read-ahead of the mount stays at {now}, not the {wanted_kb} KiB of [mount] \
                     read_ahead_kb: {why}"
                )
            }
        }
    }
}

/// The sysfs file of the read-ahead of the file system mounted on `mount_point`. Stats the mount's root: on a
/// FUSE mount this waits until `init` was answered.
pub fn read_ahead_file(mount_point: &Path) -> std::io::Result<PathBuf> {
    let dev = std::fs::metadata(mount_point)?.dev();
    Ok(Path::new(SYSFS_BDI)
        .join(format!("{}:{}", libc::major(dev), libc::minor(dev)))
        .join("read_ahead_kb"))
}

/// The value of a `read_ahead_kb` file.
pub fn read_kb(file: &Path) -> Option<u32> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// Set the read-ahead of the mount on `mount_point` to `kb` KiB (0: leave it). Never fails: the outcome says
/// what happened.
pub fn apply(mount_point: &Path, kb: u32) -> ReadAhead {
    if kb == 0 {
        return ReadAhead::Left;
    }
    let file = match read_ahead_file(mount_point) {
        Ok(file) => file,
        Err(e) => {
            return ReadAhead::NotSet {
                wanted_kb: kb,
                current_kb: None,
                why: format!("cannot stat {}: {e}", mount_point.display()),
            }
        }
    };
    let from_kb = read_kb(&file);
    let not_set = |why: String| ReadAhead::NotSet {
        wanted_kb: kb,
        current_kb: from_kb,
        why,
    };
    if !file.exists() {
        return not_set(format!(
            "{} is missing (sysfs not mounted?)",
            file.display()
        ));
    }
    if from_kb == Some(kb) {
        return ReadAhead::Set {
            file,
            from_kb,
            to_kb: kb,
        };
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return not_set(format!(
            "the server does not run as root (root may: echo {kb} > {})",
            file.display()
        ));
    }
    match std::fs::write(&file, format!("{kb}\n")) {
        Ok(()) => ReadAhead::Set {
            to_kb: read_kb(&file).unwrap_or(kb),
            file,
            from_kb,
        },
        Err(e) => not_set(format!("cannot write {}: {e}", file.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_leaves_the_kernels_value_and_says_so() {
        let outcome = apply(Path::new("/nonexistent"), 0);
        assert_eq!(outcome, ReadAhead::Left);
        assert!(outcome.to_string().contains("left as it is"));
    }

    #[test]
    fn a_mount_point_that_cannot_be_stated_is_reported_not_fatal() {
        let outcome = apply(Path::new("/nonexistent/permafrost-mount"), 1024);
        match &outcome {
            ReadAhead::NotSet { wanted_kb, why, .. } => {
                assert_eq!(*wanted_kb, 1024);
                assert!(why.contains("cannot stat"), "{why}");
            }
            other => panic!("expected NotSet, got {other:?}"),
        }
        assert!(outcome.to_string().contains("1024 KiB"));
    }

    #[test]
    fn the_file_is_named_after_the_device_of_the_mount() {
        let dir = tempfile::tempdir().unwrap();
        let dev = std::fs::metadata(dir.path()).unwrap().dev();
        let file = read_ahead_file(dir.path()).unwrap();
        assert_eq!(
            file,
            PathBuf::from(format!(
                "/sys/class/bdi/{}:{}/read_ahead_kb",
                libc::major(dev),
                libc::minor(dev)
            ))
        );
    }
}
