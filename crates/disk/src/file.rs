//! TODO (helper A): FileDisk.
/// A disk backed by a sparse file.
pub struct FileDisk;
