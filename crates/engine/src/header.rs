//! The disk header: the first [`HEADER_BYTES`] of every disk (two copies, block 0 and block 16).
//!
//! Layout (little endian): `magic "PFDISK01" (8) | version u32 | grid_id (16) | layout string (32, NUL padded) |
//! disk index u32 | role u8 | capacity_bytes u64 | idr codec u8 | idr scramble u32 | crc32c u32` over the
//! preceding bytes; the rest of the 4 KiB block is zero.

use permafrost_disk::{Disk, DiskError, BLOCK_BYTES};
use permafrost_grid::{Geometry, Role};
use permafrost_idr::{CodecKind, IdrConfig};
use uuid::Uuid;

/// Bytes reserved at the start of each disk; the `IdrDisk` starts here.
pub const HEADER_BYTES: u64 = 1 << 20;
const MAGIC: &[u8; 8] = b"PFDISK01";
const VERSION: u32 = 1;
const COPY_OFFSETS: [u64; 2] = [0, 16 * BLOCK_BYTES as u64];
const ENCODED_BYTES: usize = 8 + 4 + 16 + 32 + 4 + 1 + 8 + 1 + 4 + 4;

/// What a disk header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DiskHeader {
    pub grid_id: Uuid,
    pub layout: String,
    pub disk_index: u32,
    pub role: u8,
    pub capacity_bytes: u64,
    pub idr: IdrConfig,
}

pub(crate) fn role_code(role: Role) -> u8 {
    match role {
        Role::Data { .. } => 0,
        Role::HParity { .. } => 1,
        Role::VParity { .. } => 2,
    }
}

impl DiskHeader {
    pub(crate) fn new(
        grid_id: Uuid,
        geometry: &Geometry,
        disk_index: usize,
        capacity_bytes: u64,
        idr: IdrConfig,
    ) -> Self {
        DiskHeader {
            grid_id,
            layout: geometry.layout().to_string(),
            disk_index: disk_index as u32,
            role: role_code(geometry.role(disk_index)),
            capacity_bytes,
            idr,
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(BLOCK_BYTES);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(self.grid_id.as_bytes());
        let mut layout = [0u8; 32];
        let bytes = self.layout.as_bytes();
        layout[..bytes.len().min(32)].copy_from_slice(&bytes[..bytes.len().min(32)]);
        out.extend_from_slice(&layout);
        out.extend_from_slice(&self.disk_index.to_le_bytes());
        out.push(self.role);
        out.extend_from_slice(&self.capacity_bytes.to_le_bytes());
        out.push(self.idr.codec.id());
        out.extend_from_slice(&(self.idr.scramble_groups as u32).to_le_bytes());
        let crc = crc_fast::crc32_iscsi(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(out.len(), ENCODED_BYTES);
        out.resize(BLOCK_BYTES, 0);
        out
    }

    pub(crate) fn decode(block: &[u8]) -> Option<DiskHeader> {
        if block.len() < ENCODED_BYTES || &block[..8] != MAGIC {
            return None;
        }
        let body = &block[..ENCODED_BYTES - 4];
        let crc = u32::from_le_bytes(block[ENCODED_BYTES - 4..ENCODED_BYTES].try_into().ok()?);
        if crc_fast::crc32_iscsi(body) != crc
            || u32::from_le_bytes(block[8..12].try_into().ok()?) != VERSION
        {
            return None;
        }
        let grid_id = Uuid::from_slice(&block[12..28]).ok()?;
        let layout_raw = &block[28..60];
        let layout_len = layout_raw.iter().position(|&b| b == 0).unwrap_or(32);
        let layout = String::from_utf8(layout_raw[..layout_len].to_vec()).ok()?;
        let disk_index = u32::from_le_bytes(block[60..64].try_into().ok()?);
        let role = block[64];
        let capacity_bytes = u64::from_le_bytes(block[65..73].try_into().ok()?);
        let codec = CodecKind::from_id(block[73])?;
        let scramble_groups = u32::from_le_bytes(block[74..78].try_into().ok()?) as usize;
        Some(DiskHeader {
            grid_id,
            layout,
            disk_index,
            role,
            capacity_bytes,
            idr: IdrConfig {
                codec,
                scramble_groups,
            },
        })
    }

    /// Write both copies and sync.
    pub(crate) fn write(&self, disk: &dyn Disk) -> Result<(), DiskError> {
        let block = self.encode();
        for offset in COPY_OFFSETS {
            disk.write_at(offset, &block)?;
        }
        disk.sync()
    }

    /// Read the header: the first valid copy. `Ok(None)` if neither copy is valid.
    pub(crate) fn read(disk: &dyn Disk) -> Result<Option<DiskHeader>, DiskError> {
        let mut block = vec![0u8; BLOCK_BYTES];
        let mut last_error = None;
        for offset in COPY_OFFSETS {
            match disk.read_at(offset, &mut block) {
                Ok(()) => {
                    if let Some(header) = DiskHeader::decode(&block) {
                        return Ok(Some(header));
                    }
                }
                Err(e) => last_error = Some(e),
            }
        }
        match last_error {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use permafrost_disk::MemDisk;

    #[test]
    fn header_round_trips_and_survives_one_damaged_copy() {
        let geometry = Geometry::new("8x6:4+1".parse().unwrap()).unwrap();
        let header = DiskHeader::new(
            Uuid::new_v4(),
            &geometry,
            44,
            24 << 20,
            IdrConfig::default(),
        );
        let disk = MemDisk::new("mem", 4 << 20);
        header.write(&disk).unwrap();
        assert_eq!(DiskHeader::read(&disk).unwrap(), Some(header.clone()));
        disk.write_at(0, &vec![0xAB; BLOCK_BYTES]).unwrap();
        assert_eq!(DiskHeader::read(&disk).unwrap(), Some(header));
        disk.write_at(COPY_OFFSETS[1], &vec![0xAB; BLOCK_BYTES])
            .unwrap();
        assert_eq!(DiskHeader::read(&disk).unwrap(), None);
    }
}
