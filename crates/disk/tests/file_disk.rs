//! FileDisk: sparse creation, O_DIRECT round trips with any caller buffer, and clear errors.

use permafrost_disk::{AlignedBuf, Disk, DiskError, FileDisk, MemDisk, BLOCK_BYTES};
use std::os::unix::fs::MetadataExt;

const MIB: u64 = 1 << 20;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn round_trip_with_o_direct_and_aligned_buffers() {
    let dir = tempfile::tempdir().unwrap();
    let disk = FileDisk::create(dir.path().join("d0"), 16 * MIB).unwrap();
    assert!(
        disk.is_direct(),
        "ext4/xfs support O_DIRECT; the test host's file system should too"
    );
    let data = AlignedBuf::copy_from(&pattern(3 * BLOCK_BYTES, 7));
    disk.write_at(5 * BLOCK_BYTES as u64, &data).unwrap();
    let mut back = AlignedBuf::zeroed(3 * BLOCK_BYTES);
    disk.read_at(5 * BLOCK_BYTES as u64, &mut back).unwrap();
    assert_eq!(&back[..], &data[..]);
    disk.sync().unwrap();
}

/// Several ranges read as one operation (two reads in flight) each land in their own buffer, aligned or not; a
/// range outside the disk fails the call before anything is read.
#[test]
fn ranges_read_together_land_in_their_own_buffers() {
    let dir = tempfile::tempdir().unwrap();
    let disk = FileDisk::create(dir.path().join("d0"), 16 * MIB).unwrap();
    let data = AlignedBuf::copy_from(&pattern(12 * MIB as usize, 5));
    disk.write_at(0, &data).unwrap();
    // Nine ranges of 257 blocks, 17 blocks apart (an IDR batch without its parity), and one unaligned buffer.
    let stride = 274 * BLOCK_BYTES;
    let len = 257 * BLOCK_BYTES;
    let mut image = AlignedBuf::zeroed(9 * stride);
    let mut unaligned_storage = vec![0u8; BLOCK_BYTES + 1];
    let mut ranges: Vec<(u64, &mut [u8])> = image
        .chunks_exact_mut(stride)
        .enumerate()
        .map(|(i, one)| ((i * stride) as u64, &mut one[..len]))
        .collect();
    ranges.push((10 * MIB, &mut unaligned_storage[1..]));
    disk.read_ranges_at(&mut ranges).unwrap();
    for (i, one) in image.chunks_exact(stride).enumerate() {
        let at = i * stride;
        assert!(
            one[..len] == data[at..at + len],
            "range {i} holds other bytes"
        );
        assert!(
            one[len..].iter().all(|&b| b == 0),
            "bytes between ranges were written"
        );
    }
    let at = 10 * MIB as usize;
    assert_eq!(&unaligned_storage[1..], &data[at..at + BLOCK_BYTES]);

    let mut a = AlignedBuf::zeroed(BLOCK_BYTES);
    let mut b = AlignedBuf::zeroed(BLOCK_BYTES);
    let mut ranges: Vec<(u64, &mut [u8])> = vec![(0, &mut a[..]), (16 * MIB, &mut b[..])];
    assert!(matches!(
        disk.read_ranges_at(&mut ranges),
        Err(DiskError::OutOfRange { .. })
    ));
    assert!(
        a.iter().all(|&x| x == 0),
        "nothing is read when a range is bad"
    );
}

#[test]
fn round_trip_with_unaligned_caller_buffers_bounces() {
    let dir = tempfile::tempdir().unwrap();
    let disk = FileDisk::create(dir.path().join("d0"), 16 * MIB).unwrap();
    // Larger than the 1 MiB bounce buffer, so the chunked path is exercised too.
    let len = 1_310_720; // 1.25 MiB
    let mut storage = vec![0u8; len + 1];
    let unaligned = if AlignedBuf::is_aligned(&storage[..]) {
        &mut storage[1..]
    } else {
        &mut storage[..len]
    };
    assert!(!AlignedBuf::is_aligned(unaligned));
    unaligned.copy_from_slice(&pattern(len, 3));
    disk.write_at(MIB, unaligned).unwrap();

    let mut storage_back = vec![0u8; len + 1];
    let back = if AlignedBuf::is_aligned(&storage_back[..]) {
        &mut storage_back[1..]
    } else {
        &mut storage_back[..len]
    };
    disk.read_at(MIB, back).unwrap();
    assert_eq!(back, &pattern(len, 3)[..]);
}

#[test]
fn reopened_disk_keeps_data_and_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d0");
    {
        let disk = FileDisk::create(&path, 8 * MIB).unwrap();
        disk.write_at(0, &pattern(BLOCK_BYTES, 1)).unwrap();
        disk.sync().unwrap();
    }
    let disk = FileDisk::open(&path).unwrap();
    assert_eq!(disk.capacity_bytes(), 8 * MIB);
    let mut back = vec![0u8; BLOCK_BYTES];
    disk.read_at(0, &mut back).unwrap();
    assert_eq!(back, pattern(BLOCK_BYTES, 1));
}

#[test]
fn new_disk_is_sparse_and_reads_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d0");
    let capacity = 1 << 30; // 1 GiB
    let disk = FileDisk::create(&path, capacity).unwrap();
    disk.write_at(capacity / 2, &pattern(BLOCK_BYTES, 9))
        .unwrap();
    disk.sync().unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.len(), capacity);
    let allocated_bytes = meta.blocks() * 512;
    assert!(
        allocated_bytes <= 1024 * 1024,
        "sparse 1 GiB disk allocated {allocated_bytes} bytes"
    );
    let mut back = vec![0xffu8; BLOCK_BYTES];
    disk.read_at(capacity - BLOCK_BYTES as u64, &mut back)
        .unwrap();
    assert!(back.iter().all(|&b| b == 0));
}

#[test]
fn create_refuses_an_existing_file_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d0");
    FileDisk::create(&path, MIB).unwrap();
    let err = FileDisk::create(&path, MIB)
        .err()
        .expect("second create must fail");
    assert!(matches!(err, DiskError::Setup { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains(&path.display().to_string()) && message.contains("exists"),
        "{message}"
    );
}

#[test]
fn create_or_replace_gives_an_empty_disk_of_the_new_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d0");
    let old = FileDisk::create(&path, MIB).unwrap();
    old.write_at(0, &pattern(BLOCK_BYTES, 5)).unwrap();
    drop(old);
    let disk = FileDisk::create_or_replace(&path, 2 * MIB).unwrap();
    assert_eq!(disk.capacity_bytes(), 2 * MIB);
    let mut back = vec![0xffu8; BLOCK_BYTES];
    disk.read_at(0, &mut back).unwrap();
    assert!(
        back.iter().all(|&b| b == 0),
        "replaced disk must not keep old data"
    );
}

#[test]
fn open_rejects_missing_and_badly_sized_files_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let message = FileDisk::open(&missing).err().unwrap().to_string();
    assert!(
        message.contains(&missing.display().to_string()),
        "{message}"
    );

    let odd = dir.path().join("odd");
    std::fs::write(&odd, vec![0u8; 5000]).unwrap();
    let message = FileDisk::open(&odd).err().unwrap().to_string();
    assert!(
        message.contains(&odd.display().to_string()) && message.contains("5000"),
        "{message}"
    );

    let message = FileDisk::create(dir.path().join("bad"), 1000)
        .err()
        .unwrap()
        .to_string();
    assert!(message.contains("1000"), "{message}");
}

#[test]
fn misaligned_io_is_rejected_on_every_backend() {
    let dir = tempfile::tempdir().unwrap();
    let file = FileDisk::create(dir.path().join("d0"), MIB).unwrap();
    let mem = MemDisk::new("mem0", MIB);
    for disk in [&file as &dyn Disk, &mem as &dyn Disk] {
        let mut buf = vec![0u8; BLOCK_BYTES];
        assert!(matches!(
            disk.read_at(100, &mut buf),
            Err(DiskError::Misaligned { offset: 100, .. })
        ));
        assert!(matches!(
            disk.write_at(0, &buf[..100]),
            Err(DiskError::Misaligned { len: 100, .. })
        ));
        let err = disk.read_at(1, &mut buf).unwrap_err().to_string();
        assert!(err.contains(&disk.describe()), "{err}");
    }
}

#[test]
fn io_outside_the_disk_is_out_of_range_not_short() {
    let dir = tempfile::tempdir().unwrap();
    let file = FileDisk::create(dir.path().join("d0"), MIB).unwrap();
    let mem = MemDisk::new("mem0", MIB);
    for disk in [&file as &dyn Disk, &mem as &dyn Disk] {
        let mut buf = vec![0u8; 2 * BLOCK_BYTES];
        let last = MIB - BLOCK_BYTES as u64;
        assert!(matches!(
            disk.read_at(last, &mut buf),
            Err(DiskError::OutOfRange { capacity: MIB, .. })
        ));
        assert!(matches!(
            disk.write_at(MIB, &buf),
            Err(DiskError::OutOfRange { .. })
        ));
        assert!(matches!(
            disk.read_at(u64::MAX - 4095, &mut buf),
            Err(DiskError::OutOfRange { .. })
        ));
        disk.read_at(last, &mut buf[..BLOCK_BYTES]).unwrap();
    }
}

#[test]
fn buffered_file_disk_is_reported_when_o_direct_is_refused() {
    // /dev/shm is tmpfs; older kernels refuse O_DIRECT there, newer accept it.
    // Either way the disk must work and say which mode it is in.
    let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
        println!("skipped: /dev/shm not available");
        return;
    };
    let disk = FileDisk::create(dir.path().join("d0"), MIB).unwrap();
    println!("tmpfs FileDisk is_direct = {}", disk.is_direct());
    let mut storage = vec![0u8; BLOCK_BYTES + 1];
    let unaligned = &mut storage[1..];
    unaligned.copy_from_slice(&pattern(BLOCK_BYTES, 2));
    disk.write_at(0, unaligned).unwrap();
    let mut back = vec![0u8; BLOCK_BYTES];
    disk.read_at(0, &mut back).unwrap();
    assert_eq!(back, pattern(BLOCK_BYTES, 2));
}
