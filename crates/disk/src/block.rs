//! TODO (helper A): BlockDisk.
/// A disk backed by a block device.
pub struct BlockDisk;
