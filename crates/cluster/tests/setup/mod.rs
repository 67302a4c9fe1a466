//! The store a node of these tests runs on: a small file-backed grid, simulated disk power, no fsync.

use permafrost_disk::power::PowerProfile;
use permafrost_store::{GridSetup, StoreConfig};

pub fn config() -> StoreConfig {
    StoreConfig {
        cache_bytes_max: 64 << 20,
        fsync: false,
        grid: GridSetup {
            layout: "4x4:2+1".into(),
            disk_capacity_bytes: 32 << 20,
            ..GridSetup::default()
        },
        power_profile: Some(PowerProfile::for_tests()),
        ..StoreConfig::default()
    }
}
