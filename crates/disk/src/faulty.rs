//! TODO (helper A): FaultyDisk.
/// A fault-injecting wrapper.
pub struct FaultyDisk;
/// Controls a FaultyDisk.
pub struct FaultHandle;
