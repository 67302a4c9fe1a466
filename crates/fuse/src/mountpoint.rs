//! The mount point: found in `/proc/self/mountinfo`, cleaned up when a crashed server left it mounted (every
//! access then fails with `ENOTCONN`, "Transport endpoint is not connected"), refused when someone else mounted
//! something there.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The source name of permafrost's mounts (the first field `mount` and `/proc/mounts` show).
pub const FS_NAME: &str = "permafrost";

/// Why a mount point cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum MountPointError {
    #[error("mount point {path}: {message}")]
    Refused { path: String, message: String },
    #[error("mount point {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// One line of `/proc/self/mountinfo` that matters here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    pub mount_point: PathBuf,
    pub fs_type: String,
    pub source: String,
}

/// Undo the octal escapes of mountinfo (`\040` for a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let code =
                (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(code);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parse mountinfo: `id parent major:minor root mount_point options [optional…] - fs_type source super_options`.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let dash = fields.iter().position(|f| *f == "-")?;
            Some(MountEntry {
                mount_point: PathBuf::from(unescape(fields.get(4)?)),
                fs_type: fields.get(dash + 1)?.to_string(),
                source: unescape(fields.get(dash + 2)?),
            })
        })
        .collect()
}

/// What is mounted at `path` (the last mount there wins, as the kernel shows it).
pub fn mounted_at(path: &Path) -> Option<MountEntry> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    parse_mountinfo(&text)
        .into_iter()
        .rev()
        .find(|m| m.mount_point == path)
}

/// A mount point made ready by [`prepare`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// Absolute, symbolic links resolved.
    pub path: PathBuf,
    /// A stale mount left by a server that stopped without unmounting was found there and unmounted.
    pub cleaned_stale: bool,
}

/// Make `dir` ready to mount on: created if missing; a stale permafrost mount left by a crash is unmounted (the
/// caller says so); any live mount there is refused.
pub fn prepare(dir: &Path) -> Result<Prepared, MountPointError> {
    let shown = dir.display().to_string();
    let io = |source| MountPointError::Io {
        path: shown.clone(),
        source,
    };
    let absolute = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir().map_err(io)?.join(dir)
    };
    // A stale FUSE mount fails every access with ENOTCONN, canonicalize included: look it up as given first.
    let lookup = std::fs::canonicalize(&absolute).unwrap_or_else(|_| absolute.clone());
    let mut cleaned_stale = false;
    if let Some(entry) = mounted_at(&lookup) {
        let stale = statfs_errno(&lookup) == Some(libc::ENOTCONN);
        let ours = entry.fs_type.starts_with("fuse") && entry.source == FS_NAME;
        if !ours {
            return Err(MountPointError::Refused {
                path: shown,
                message: format!(
                    "something else is mounted there ({} from {}); choose another directory",
                    entry.fs_type, entry.source
                ),
            });
        }
        if !stale {
            return Err(MountPointError::Refused {
                path: shown,
                message: "another running permafrost server has it mounted; stop it or choose another directory".into(),
            });
        }
        unmount(&lookup, true).map_err(io)?;
        cleaned_stale = true;
    }
    match std::fs::metadata(&lookup) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(MountPointError::Refused {
                path: shown,
                message: "not a directory".into(),
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(&lookup).map_err(io)?
        }
        Err(e) => return Err(io(e)),
    }
    Ok(Prepared {
        path: std::fs::canonicalize(&lookup).unwrap_or(lookup),
        cleaned_stale,
    })
}

/// The errno of a `statfs` of `path`, if it fails. A dead FUSE server shows as `ENOTCONN` here: `statfs`
/// always reaches the file system's server, while a `stat` of the mount's root may be answered from the
/// kernel's attribute cache (the mount's TTL) after the server died.
fn statfs_errno(path: &Path) -> Option<i32> {
    let c_path = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statfs is a valid value of this plain C struct.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: c_path is NUL-terminated and buf is a valid statfs, both alive for the call.
    if unsafe { libc::statfs(c_path.as_ptr(), &mut buf) } == 0 {
        return None;
    }
    std::io::Error::last_os_error().raw_os_error()
}

/// Unmount `path`: `umount2` as root (`MNT_DETACH` when `lazy`: gone from the namespace at once, finished
/// when the last user lets go), else `fusermount3 -u` (`-z` when lazy).
pub fn unmount(path: &Path, lazy: bool) -> std::io::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let c_path = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        let flags = if lazy { libc::MNT_DETACH } else { 0 };
        // SAFETY: c_path is a valid NUL-terminated string for the duration of the call.
        if unsafe { libc::umount2(c_path.as_ptr(), flags) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        return Ok(());
    }
    let mut command = std::process::Command::new("fusermount3");
    command.arg(if lazy { "-uz" } else { "-u" }).arg(path);
    let status = command.status()?;
    if !status.success() {
        return Err(std::io::Error::other(format!(
            "fusermount3 -u {} failed ({status})",
            path.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_give_mount_point_type_and_source() {
        let text =
            "36 35 98:0 /mnt1 /mnt/a\\040b rw,noatime master:1 - fuse permafrost rw,user_id=0\n\
                    40 25 0:45 / /proc rw - proc proc rw\n";
        let entries = parse_mountinfo(text);
        assert_eq!(
            entries[0],
            MountEntry {
                mount_point: PathBuf::from("/mnt/a b"),
                fs_type: "fuse".into(),
                source: "permafrost".into(),
            }
        );
        assert_eq!(entries[1].fs_type, "proc");
    }
}
