//! The read path of persisted objects: a long read keeps its disk reading across extent and part boundaries.

mod common;

use std::io::Read;
use std::time::{Duration, Instant};

use common::*;
use permafrost_disk::power::PowerProfile;
use permafrost_store::*;

/// The scrub cursor of the data disk holding `key` (where its next spin-up slice starts).
fn scrub_cursor(store: &Store, disk: usize) -> u64 {
    store.engine().status().unwrap().disks[disk].scrub_cursor_bytes
}

/// Read `key` slowly in 256 KiB pieces; after every piece the spin-up scrub slice of its disk (which waits while
/// a read promise is open on the disk) has not run: the next extent's read promise is open before the current
/// one is dropped, so the disk never looks idle in the middle of the read. Once the reader is gone, the slice
/// runs.
fn read_slowly_without_a_scrub_in_between(store: &Store, key: &str, expected: &[u8]) {
    store.evict_cache().unwrap();
    wait_all_off(store);
    let info = store.head_object("long", key).unwrap();
    let disk = store
        .engine()
        .geometry()
        .bucket_disk(info.grid_bucket.expect("persisted") as usize);
    let before = scrub_cursor(store, disk);
    let (_, mut reader) = store.open_object("long", key, None, None).unwrap();
    let mut got = Vec::new();
    let mut piece = vec![0u8; 256 << 10];
    loop {
        let n = reader.read(&mut piece).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&piece[..n]);
        assert_eq!(
            scrub_cursor(store, disk),
            before,
            "the spin-up scrub slice ran in the middle of the read, at byte {}",
            got.len()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(got == expected, "{key}: the bytes read differ");
    drop(reader);
    let deadline = Instant::now() + Duration::from_secs(20);
    while scrub_cursor(store, disk) == before {
        assert!(
            Instant::now() < deadline,
            "the spin-up scrub slice never ran after the read"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_long_read_keeps_its_disk_reading_across_extents_and_parts() {
    let dir = tempfile::tempdir().unwrap();
    // Disks stay up for a second after their last I/O: long enough for the slow reads below (a disk that went off
    // would drop its pending slice).
    let mut config = config();
    config.power_profile = Some(PowerProfile {
        idle_timeout_ms: 1000,
        ..PowerProfile::for_tests()
    });
    let store = Store::open(dir.path(), config).unwrap();
    let settings = BucketSettings {
        compression: Some(Compression::None),
        ..Default::default()
    };
    store.create_bucket("long", settings).unwrap();
    // 14 MiB in one content: four extents of at most 4 MiB (the test configuration's extent_bytes_max).
    let single = data(1, (14 << 20) + 4097, false);
    put(&store, "long", "single", &single);
    // Three parts of 5 MiB (two extents each) in a part list.
    let id = store
        .create_multipart("long", "parts", PutOptions::default())
        .unwrap();
    let mut etags = Vec::new();
    let mut whole = Vec::new();
    for n in 1u32..=3 {
        let part = data(10 + n as u64, 5 << 20, false);
        let mut h = store.upload_part(&id, n, Checksums::default()).unwrap();
        h.write(&part).unwrap();
        etags.push((n, h.finish().unwrap().etag));
        whole.extend_from_slice(&part);
    }
    store.complete_multipart(&id, &etags).unwrap();
    store.persist_now().unwrap();

    read_slowly_without_a_scrub_in_between(&store, "single", &single);
    read_slowly_without_a_scrub_in_between(&store, "parts", &whole);
}
