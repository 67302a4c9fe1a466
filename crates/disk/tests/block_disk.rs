//! BlockDisk on a real loop device. Skips (with a message) where losetup or
//! loop devices are unavailable, e.g. unprivileged CI.

use permafrost_disk::{AlignedBuf, BlockDisk, Disk, DiskError, LoopDevice, BLOCK_BYTES};

#[test]
fn block_disk_on_a_loop_device_round_trips_and_sizes_by_ioctl() {
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("backing.img");
    // 8 MiB + 1000 bytes: the capacity must round down to whole blocks.
    let size_bytes = 8 * 1024 * 1024 + 1000;
    std::fs::File::create(&backing)
        .unwrap()
        .set_len(size_bytes)
        .unwrap();
    let device = match LoopDevice::attach(&backing) {
        Ok(device) => device,
        Err(why) => {
            println!("skipped: no loop device available ({why})");
            return;
        }
    };
    let disk = BlockDisk::open(device.path()).unwrap();
    // The loop driver exposes whole 512-byte sectors: 8 MiB + 512.
    assert_eq!(disk.capacity_bytes(), 8 * 1024 * 1024);
    assert_eq!(disk.describe(), device.path().display().to_string());

    let data = AlignedBuf::copy_from(&vec![0xa5; 2 * BLOCK_BYTES]);
    disk.write_at(4 * BLOCK_BYTES as u64, &data).unwrap();
    disk.sync().unwrap();
    let mut unaligned_storage = vec![0u8; 2 * BLOCK_BYTES + 1];
    let back = &mut unaligned_storage[1..];
    disk.read_at(4 * BLOCK_BYTES as u64, back).unwrap();
    assert!(back.iter().all(|&b| b == 0xa5));

    let mut buf = vec![0u8; BLOCK_BYTES];
    assert!(matches!(
        disk.read_at(disk.capacity_bytes(), &mut buf),
        Err(DiskError::OutOfRange { .. })
    ));
    drop(disk);

    // The bytes really reached the backing file.
    let raw = std::fs::read(&backing).unwrap();
    assert!(raw[4 * BLOCK_BYTES..6 * BLOCK_BYTES]
        .iter()
        .all(|&b| b == 0xa5));
}

#[test]
fn block_disk_refuses_a_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plain");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let message = BlockDisk::open(&path)
        .err()
        .expect("a regular file is not a block device")
        .to_string();
    assert!(
        message.contains("not a block device") && message.contains("plain"),
        "{message}"
    );
}
