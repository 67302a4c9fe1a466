//! Free space kept on the file systems the store writes to, so that a full disk never stops the catalog, the
//! journal or a DELETE: uploads answer `SlowDown` and persistence waits before the last bytes are gone. On the
//! embedded default the cache, the catalog and the grid's sparse disk files share one file system, and the grid
//! grows by about 4.3 bytes per byte persisted.
//!
//! **Invariant.** Neither an upload nor a persist batch starts when it would leave less than the reserve free:
//! [`StoreConfig::free_bytes_min`](crate::StoreConfig), or a twentieth of a smaller file system.

use std::path::Path;

/// `Err` (saying what is short, in words) when writing `bytes` more under `dir` would leave less than the
/// reserve free on its file system. A file system whose free space cannot be read counts as having room.
pub(crate) fn check_room(
    dir: &Path,
    bytes: u64,
    reserve_min: u64,
    what: &str,
) -> Result<(), String> {
    let Some((free, total)) = free_and_total(dir) else {
        return Ok(());
    };
    let reserve = reserve_min.min(total / 20);
    if free >= bytes.saturating_add(reserve) {
        return Ok(());
    }
    Err(format!(
        "the file system of {} has {free} bytes free: {what} of {bytes} bytes would leave less than the {reserve} \
         bytes kept free for the catalog, the journal and deletes",
        dir.display()
    ))
}

/// Bytes available to this process and the size of the file system holding `dir`.
pub(crate) fn free_and_total(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain C data; all-zero is a valid value.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a valid C string and `stat` a writable statvfs.
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    let unit = stat.f_frsize as u64;
    Some((stat.f_bavail as u64 * unit, stat.f_blocks as u64 * unit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_refused_only_below_the_reserve() {
        let dir = tempfile::tempdir().unwrap();
        let (free, total) = free_and_total(dir.path()).unwrap();
        assert!(free > 0 && total >= free);
        assert!(check_room(dir.path(), 4096, 0, "an upload").is_ok());
        // More than the file system has free: refused, and the message names the directory and the need.
        let e = check_room(dir.path(), free + (1 << 30), 0, "an upload").unwrap_err();
        assert!(
            e.contains(&dir.path().display().to_string()) && e.contains("an upload of"),
            "{e}"
        );
        // A reserve larger than a twentieth of the file system is capped there.
        assert!(check_room(dir.path(), 0, u64::MAX, "x").is_ok() == (free >= total / 20));
        // A directory that does not exist: free space unknown, not an error.
        assert!(check_room(&dir.path().join("gone"), u64::MAX / 2, 0, "x").is_ok());
    }
}
