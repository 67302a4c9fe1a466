//! Scrubbing: a slice of each disk that spins up (the cursor advances, a planted latent error is found and
//! repaired), and the deliberate scrub of overdue ranges — on request, only what is overdue, and on the background
//! schedule, spinning disks up for it.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use permafrost_engine::{Engine, WriteMode};

fn byte_at(dir: &Path, disk: usize, offset: u64) -> u8 {
    use std::os::unix::fs::FileExt;
    let mut byte = [0u8];
    std::fs::File::open(disk_path(dir, disk))
        .unwrap()
        .read_exact_at(&mut byte, offset)
        .unwrap();
    byte[0]
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn each_spin_up_scrubs_a_slice_and_repairs_a_latent_error() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let data = pattern(4, (6 * MIB) as usize);
    let disk = {
        let engine = create(dir);
        // The write spins disks up too: no spin-up scrub in this session, the cursor stays at 0.
        engine.pause_background(true);
        write(&engine, 4, 0, &data, WriteMode::Serialized);
        let disk = engine.geometry().bucket_disk(4);
        engine.close().unwrap();
        disk
    };
    // In the first slice (scrub_slice_bytes = 2 MiB), which the reads below never touch.
    let (offset, original) = plant_bit_flip(dir, disk, 1);
    let engine = Engine::open(dir).unwrap();
    let cursor = |engine: &Engine| engine.status().unwrap().disks[disk].scrub_cursor_bytes;
    assert_eq!(cursor(&engine), 0);
    let before = spin_ups(&engine);

    // A read of the bucket's fourth MiB spins the disk up; the spin-up scrubs [0, 2 MiB) from the cursor.
    assert_eq!(
        read(&engine, 4, 4 * MIB, MIB).unwrap(),
        data[4 << 20..5 << 20]
    );
    wait_for("the spin-up scrub of the first slice", || {
        cursor(&engine) == 2 * MIB
    });
    assert_eq!(
        byte_at(dir, disk, offset),
        original,
        "the scrub did not repair the latent error"
    );
    assert_eq!(
        spun_up(&before, &spin_ups(&engine)),
        vec![disk],
        "IDR repairs without waking other disks"
    );

    // The next spin-up scrubs the next slice.
    wait_all_off(&engine);
    assert_eq!(
        read(&engine, 4, 5 * MIB, MIB).unwrap(),
        data[5 << 20..6 << 20]
    );
    wait_for("the spin-up scrub of the second slice", || {
        cursor(&engine) == 4 * MIB
    });
    assert_eq!(read(&engine, 4, 0, data.len() as u64).unwrap(), data);
    engine.close().unwrap();
}

#[test]
fn scrub_overdue_verifies_only_ranges_not_verified_for_long_enough() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let old = pattern(1, MIB as usize);
    let young = pattern(2, MIB as usize);
    let max_age = Duration::from_millis(1500);
    let (disk, targets) = {
        let engine = create(dir);
        // No spin-up scrubs: the writes alone say when each range was last known good.
        engine.pause_background(true);
        write(&engine, 4, 0, &old, WriteMode::Serialized);
        std::thread::sleep(max_age + Duration::from_millis(500));
        write(&engine, 4, 4 * MIB, &young, WriteMode::Serialized);
        let disk = engine.geometry().bucket_disk(4);
        let targets = engine.geometry().parity_targets(disk);
        engine.close().unwrap();
        (disk, targets)
    };
    // A latent error in each range; the journal remembers when each range was written.
    let (old_at, old_byte) = plant_bit_flip(dir, disk, 0);
    let (young_at, young_byte) = plant_bit_flip(dir, disk, 4);
    let engine = Engine::open(dir).unwrap();
    // The deliberate scrub spins disks up: keep their spin-up scrubs out of this test.
    engine.pause_background(true);
    let status = engine.status().unwrap();
    assert!(status.disks[disk].verified_oldest_ms.unwrap() > 0);
    assert_eq!(status.disks[0].verified_oldest_ms, None, "nothing written");

    let report = engine.scrub_overdue(max_age).unwrap();
    let mut want = vec![
        (disk, 0, MIB),
        (targets.hp, 0, MIB),
        (targets.vp, 0, MIB),
        (targets.vhp, 0, MIB),
    ];
    want.sort_unstable();
    assert_eq!(
        report.ranges, want,
        "exactly the old range of the data disk and of its three parity disks"
    );
    assert_eq!(report.bytes_verified, 4 * MIB);
    assert!(report.blocks_repaired + report.check_blocks_repaired >= 1);
    assert!(report.unrecoverable.is_empty());
    assert_eq!(
        byte_at(dir, disk, old_at),
        old_byte,
        "the old range was repaired"
    );
    assert_ne!(
        byte_at(dir, disk, young_at),
        young_byte,
        "the young range was not overdue, so not scrubbed"
    );
    // Everything is young now.
    assert_eq!(engine.scrub_overdue(max_age).unwrap().ranges, vec![]);
    let all = engine.scrub_overdue(Duration::ZERO).unwrap();
    assert_eq!(all.bytes_verified, 8 * MIB);
    assert_eq!(byte_at(dir, disk, young_at), young_byte);
    assert_eq!(read(&engine, 4, 4 * MIB, MIB).unwrap(), young);
    engine.close().unwrap();
}

#[test]
fn overdue_ranges_are_scrubbed_on_schedule_spinning_their_disks_up() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let mut config = test_config();
    config.scrub_overdue_after_ms = 500;
    let data = pattern(3, (2 * MIB) as usize);
    let (disk, written_ms) = {
        let engine = Engine::create(dir, config).unwrap();
        write(&engine, 9, 0, &data, WriteMode::Serialized);
        let disk = engine.geometry().bucket_disk(9);
        let written_ms = engine.status().unwrap().disks[disk]
            .verified_oldest_ms
            .unwrap();
        engine.close().unwrap();
        (disk, written_ms)
    };
    let (offset, original) = plant_bit_flip(dir, disk, 1);
    let engine = Engine::open(dir).unwrap();
    // Nobody reads or writes: the schedule alone spins the disk up, scrubs and repairs.
    wait_for("the scheduled scrub to repair the latent error", || {
        byte_at(dir, disk, offset) == original
    });
    let status = engine.status().unwrap();
    assert!(status.disks[disk].power.spin_ups >= 1);
    wait_for("the scheduled scrub to record its pass", || {
        engine.status().unwrap().disks[disk]
            .verified_oldest_ms
            .unwrap()
            > written_ms
    });
    assert_eq!(read(&engine, 9, 0, data.len() as u64).unwrap(), data);
    engine.close().unwrap();
}
