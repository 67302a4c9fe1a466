//! FaultyDisk: every fault it promises, and its counters.

use permafrost_disk::{Disk, DiskError, FaultyDisk, MemDisk, BLOCK_BYTES};
use std::sync::Arc;

const B: u64 = BLOCK_BYTES as u64;

fn faulty() -> (Arc<MemDisk>, FaultyDisk, permafrost_disk::FaultHandle) {
    let inner = Arc::new(MemDisk::new("mem0", 64 * B));
    let (disk, handle) = FaultyDisk::new(inner.clone());
    (inner, disk, handle)
}

#[test]
fn failed_disk_fails_every_io_until_healed() {
    let (_, disk, handle) = faulty();
    let mut buf = vec![0u8; BLOCK_BYTES];
    disk.write_at(0, &[7u8; BLOCK_BYTES]).unwrap();
    handle.fail_disk();
    assert!(handle.is_failed());
    assert!(
        matches!(disk.read_at(0, &mut buf), Err(DiskError::Failed { ref disk }) if disk == "mem0")
    );
    assert!(matches!(
        disk.write_at(0, &buf),
        Err(DiskError::Failed { .. })
    ));
    assert!(matches!(disk.sync(), Err(DiskError::Failed { .. })));
    handle.heal();
    disk.read_at(0, &mut buf).unwrap();
    assert_eq!(buf, [7u8; BLOCK_BYTES]);
}

#[test]
fn eio_range_fails_reads_and_writes_that_touch_it_only() {
    let (inner, disk, handle) = faulty();
    inner.write_at(10 * B, &[1u8; BLOCK_BYTES]).unwrap();
    handle.eio_range(10 * B + 100, 1); // one byte inside block 10
    let mut buf = vec![0u8; BLOCK_BYTES];
    let err = disk.read_at(10 * B, &mut buf).unwrap_err();
    match &err {
        DiskError::Io { source, offset, .. } => {
            assert_eq!(source.raw_os_error(), Some(libc_eio()));
            assert_eq!(*offset, 10 * B);
        }
        other => panic!("expected Io, got {other:?}"),
    }
    // A multi-block request overlapping the range fails too.
    let mut big = vec![0u8; 4 * BLOCK_BYTES];
    assert!(matches!(
        disk.read_at(8 * B, &mut big),
        Err(DiskError::Io { .. })
    ));
    assert!(matches!(
        disk.write_at(10 * B, &[2u8; BLOCK_BYTES]),
        Err(DiskError::Io { .. })
    ));
    // Neighbours are fine, and the failed write did not change the inner disk.
    disk.read_at(9 * B, &mut buf).unwrap();
    disk.read_at(11 * B, &mut buf).unwrap();
    inner.read_at(10 * B, &mut buf).unwrap();
    assert_eq!(buf, [1u8; BLOCK_BYTES]);

    handle.clear_eio();
    disk.read_at(10 * B, &mut buf).unwrap();
    assert_eq!(buf, [1u8; BLOCK_BYTES]);
}

fn libc_eio() -> i32 {
    5 // EIO on Linux
}

#[test]
fn flip_bit_really_corrupts_the_inner_disk() {
    let (inner, disk, handle) = faulty();
    disk.write_at(3 * B, &[0u8; BLOCK_BYTES]).unwrap();
    handle.flip_bit(3 * B + 17, 6).unwrap();
    let mut buf = vec![0u8; BLOCK_BYTES];
    inner.read_at(3 * B, &mut buf).unwrap();
    assert_eq!(buf[17], 0b0100_0000);
    assert_eq!(buf.iter().filter(|&&b| b != 0).count(), 1);
    handle.flip_bit(3 * B + 17, 6).unwrap();
    disk.read_at(3 * B, &mut buf).unwrap();
    assert!(
        buf.iter().all(|&b| b == 0),
        "flipping twice restores the byte"
    );
    assert!(handle.flip_bit(0, 8).is_err());
    assert!(handle.flip_bit(64 * B, 0).is_err(), "beyond the disk");
}

#[test]
fn counters_count_calls_and_bytes() {
    let (_, disk, handle) = faulty();
    let mut buf = vec![0u8; 2 * BLOCK_BYTES];
    disk.read_at(0, &mut buf).unwrap();
    disk.read_at(0, &mut buf[..BLOCK_BYTES]).unwrap();
    disk.write_at(0, &buf).unwrap();
    assert_eq!((handle.reads(), handle.writes()), (2, 1));
    assert_eq!(
        (handle.bytes_read(), handle.bytes_written()),
        (3 * B, 2 * B)
    );
    // Faulted calls count (the disk was asked); misaligned ones do not.
    handle.fail_disk();
    let _ = disk.read_at(0, &mut buf);
    let _ = disk.read_at(1, &mut buf);
    assert_eq!(handle.reads(), 3);
    let clone = handle.clone();
    clone.reset_counters();
    assert_eq!(
        (
            handle.reads(),
            handle.writes(),
            handle.bytes_read(),
            handle.bytes_written()
        ),
        (0, 0, 0, 0)
    );
}

#[test]
fn fault_handle_works_from_another_thread() {
    let (_, disk, handle) = faulty();
    std::thread::spawn(move || handle.fail_disk())
        .join()
        .unwrap();
    assert!(disk.sync().is_err());
}
