//! Files that survive a crash whole: the old content or the new one, never a mix or nothing.
//!
//! [`write_durable`] writes a temporary file next to the target (`NAME.tmp`), syncs it, renames it over the
//! target and syncs the directory, so that the rename itself is on the disk when it returns. [`sync_dir`] is
//! the last step alone, for a caller that created or renamed a file its own way.

use std::io::{self, Write};
use std::path::Path;

/// Write `bytes` to `path` so that a crash at any moment leaves the old file or the new one whole: a temporary
/// file next to it (`NAME.tmp`), synced, renamed over it, the directory synced. Errors name the file involved.
pub fn write_durable(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    let named = |what: &str, file: &Path, e: io::Error| {
        io::Error::new(e.kind(), format!("cannot {what} {}: {e}", file.display()))
    };
    let mut file = std::fs::File::create(&tmp).map_err(|e| named("create", &tmp, e))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| named("write", &tmp, e))?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot rename {} to {}: {e}", tmp.display(), path.display()),
        )
    })?;
    sync_dir(
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new(".")),
    )
}

/// Sync the directory `dir`, so that the names created, renamed or removed in it are durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot sync the directory {}: {e}", dir.display()),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_durable_write_replaces_the_file_whole_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("endpoint");
        write_durable(&path, b"first\n").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"first\n");
        write_durable(&path, b"second, longer\n").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second, longer\n");
        assert!(!dir.path().join("endpoint.tmp").exists());
    }

    #[test]
    fn a_durable_write_into_a_missing_directory_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing").join("f");
        let e = write_durable(&path, b"x").unwrap_err().to_string();
        assert!(e.contains("missing/f.tmp"), "{e}");
    }
}
