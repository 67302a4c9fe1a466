//! A loop device over a file (`losetup`), so tests and benchmarks can run [`crate::BlockDisk`] on a real block
//! device without spare drives. Needs root.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A loop device attached to a backing file; detached when dropped (whether the user passed or panicked).
#[derive(Debug)]
pub struct LoopDevice {
    path: PathBuf,
}

impl LoopDevice {
    /// Attach the first free loop device to `backing`. The error says why (no `losetup`, not root, no loop
    /// driver).
    pub fn attach(backing: &Path) -> Result<LoopDevice, String> {
        let output = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(backing)
            .output()
            .map_err(|e| format!("cannot run losetup: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "losetup failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(LoopDevice {
            path: PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()),
        })
    }

    /// The device node, e.g. `/dev/loop3`.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let status = Command::new("losetup").arg("-d").arg(&self.path).status();
        if !matches!(status, Ok(s) if s.success()) {
            eprintln!(
                "warning: could not detach {}: {status:?}",
                self.path.display()
            );
        }
    }
}
