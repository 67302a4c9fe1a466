//! A grid on real block devices (loop devices over sparse files): created, written, read back, reopened; and a
//! drive that already belongs to a grid is never claimed by a new one.
//!
//! Needs root (losetup). Unprivileged, the test says so and passes; as root a missing loop driver fails it.

use std::path::{Path, PathBuf};

use permafrost_disk::LoopDevice;
use permafrost_engine::{Engine, GridConfig, WriteMode};

const DEVICE_BYTES: u64 = 8 << 20;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn attach_all(dir: &Path, count: usize) -> Option<Vec<LoopDevice>> {
    let mut devices = Vec::new();
    for i in 0..count {
        let backing = dir.join(format!("backing-{i}.img"));
        std::fs::File::create(&backing)
            .unwrap()
            .set_len(DEVICE_BYTES)
            .unwrap();
        match LoopDevice::attach(&backing) {
            Ok(device) => devices.push(device),
            Err(why) if !is_root() => {
                println!("skipped: not root, no loop devices ({why})");
                return None;
            }
            Err(why) => panic!("running as root but losetup failed: {why}"),
        }
    }
    Some(devices)
}

#[test]
fn a_grid_on_block_devices_round_trips_and_never_claims_a_drive_of_another_grid() {
    let temp = tempfile::tempdir().unwrap();
    let layout = "4x2:1+1".parse().unwrap();
    let Some(devices) = attach_all(temp.path(), 8) else {
        return;
    };
    let paths: Vec<PathBuf> = devices.iter().map(|d| d.path().to_path_buf()).collect();
    let mut config = GridConfig::with_block_devices(layout, &paths, &[]).unwrap();
    config.power = permafrost_disk::power::PowerProfile::for_tests();
    let first = temp.path().join("first");
    let engine = Engine::create(&first, config.clone()).unwrap();
    let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
    let mut promise = engine
        .write(1, 0, data.len() as u64, WriteMode::Serialized)
        .unwrap();
    promise.append(&data).unwrap();
    promise.commit().unwrap();
    engine.close().unwrap();

    let engine = Engine::open(&first).unwrap();
    let mut got = vec![0u8; data.len()];
    std::io::Read::read_exact(&mut engine.read(1, 0, data.len() as u64).unwrap(), &mut got)
        .unwrap();
    assert!(
        got == data,
        "bucket 1 did not read back from the block devices"
    );
    engine.close().unwrap();

    // A second grid on the same drives is refused, naming the drive and the grid it belongs to.
    let mut other = config.clone();
    other.grid_id = uuid::Uuid::new_v4();
    let error = Engine::create(temp.path().join("second"), other)
        .err()
        .expect("a drive of a grid must not be claimed by another")
        .to_string();
    assert!(
        error.contains(&paths[0].display().to_string())
            && error.contains("already holds disk 0")
            && error.contains(&config.grid_id.to_string()),
        "{error}"
    );
    // The first grid is untouched.
    let engine = Engine::open(&first).unwrap();
    std::io::Read::read_exact(&mut engine.read(1, 0, data.len() as u64).unwrap(), &mut got)
        .unwrap();
    assert!(got == data);
    engine.close().unwrap();

    // Device count and power controls are checked with clear messages.
    let error = GridConfig::with_block_devices(layout, &paths[..7], &[])
        .unwrap_err()
        .to_string();
    assert!(error.contains("8 disks but 7 devices"), "{error}");
    let controls = vec![permafrost_disk::power::PowerControl::Simulated; 3];
    let error = GridConfig::with_block_devices(layout, &paths, &controls)
        .unwrap_err()
        .to_string();
    assert!(error.contains("3 power controls for 8 devices"), "{error}");
}
