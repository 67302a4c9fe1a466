//! permafrost-store (being written)
