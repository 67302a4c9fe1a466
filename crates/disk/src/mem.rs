//! A disk held in memory: for simulations and unit tests of the layers above.

use crate::{check_io, Disk, DiskError};
use parking_lot::RwLock;

/// A disk whose blocks live in RAM. Fresh blocks read as zeros, as on a sparse file.
pub struct MemDisk {
    name: String,
    bytes: RwLock<Vec<u8>>,
}

impl MemDisk {
    /// A zeroed disk of `capacity_bytes` (rounded down to whole blocks).
    pub fn new(name: impl Into<String>, capacity_bytes: u64) -> MemDisk {
        let capacity = capacity_bytes - capacity_bytes % crate::BLOCK_BYTES as u64;
        MemDisk {
            name: name.into(),
            bytes: RwLock::new(vec![0; capacity as usize]),
        }
    }
}

impl Disk for MemDisk {
    fn capacity_bytes(&self) -> u64 {
        self.bytes.read().len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        check_io(self, offset, buf.len())?;
        let bytes = self.bytes.read();
        buf.copy_from_slice(&bytes[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        check_io(self, offset, buf.len())?;
        let mut bytes = self.bytes.write();
        bytes[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
        Ok(())
    }
    fn sync(&self) -> Result<(), DiskError> {
        Ok(())
    }
    fn describe(&self) -> String {
        self.name.clone()
    }
}
