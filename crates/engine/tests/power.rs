//! Spin-ups: reads wake one disk, serialized writes four, delayed writes one.

mod common;

use common::*;
use permafrost_engine::WriteMode;

fn parity_set(engine: &permafrost_engine::Engine, bucket: usize) -> Vec<usize> {
    let g = engine.geometry();
    let d = g.bucket_disk(bucket);
    let t = g.parity_targets(d);
    let mut v = vec![d, t.hp, t.vp, t.vhp];
    v.sort_unstable();
    v
}

#[test]
fn reading_one_bucket_spins_up_exactly_one_disk() {
    let dir = tempfile::tempdir().unwrap();
    let engine = create(dir.path());
    let data = pattern(1, (3 * MIB) as usize);
    write(&engine, 6, 0, &data, WriteMode::Serialized);
    wait_all_off(&engine);
    let before = spin_ups(&engine);
    assert_eq!(read(&engine, 6, 0, data.len() as u64).unwrap(), data);
    assert_eq!(
        spun_up(&before, &spin_ups(&engine)),
        vec![engine.geometry().bucket_disk(6)]
    );
}

#[test]
fn a_serialized_write_spins_up_exactly_four_disks() {
    let dir = tempfile::tempdir().unwrap();
    let engine = create(dir.path());
    wait_all_off(&engine);
    let before = spin_ups(&engine);
    write(
        &engine,
        7,
        0,
        &pattern(2, MIB as usize),
        WriteMode::Serialized,
    );
    assert_eq!(spun_up(&before, &spin_ups(&engine)), parity_set(&engine, 7));
}

#[test]
fn a_delayed_write_spins_up_one_disk_and_the_drain_waits_for_parity_to_spin() {
    let dir = tempfile::tempdir().unwrap();
    let engine = create(dir.path());
    wait_all_off(&engine);
    let before = spin_ups(&engine);
    write(&engine, 7, 0, &pattern(3, MIB as usize), WriteMode::Delayed);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(
        spun_up(&before, &spin_ups(&engine)),
        vec![engine.geometry().bucket_disk(7)]
    );
    assert!(
        engine.status().unwrap().pending_delta_bytes > 0,
        "parity disks are off: the delta stays pending"
    );
    // A serialized write to the same hPG spins hP up: the drain applies pending deltas while it is up.
    write(
        &engine,
        6,
        0,
        &pattern(4, MIB as usize),
        WriteMode::Serialized,
    );
    let hp = engine
        .geometry()
        .parity_targets(engine.geometry().bucket_disk(7))
        .hp;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while engine.status().unwrap().disks[hp].pending_delta_bytes > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "drain did not run on the spinning hP"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    engine.flush().unwrap();
    assert_parity_clean(&engine);
}

#[test]
fn a_direct_write_spins_up_exactly_four_disks() {
    let dir = tempfile::tempdir().unwrap();
    let engine = create(dir.path());
    wait_all_off(&engine);
    let before = spin_ups(&engine);
    write(&engine, 12, 0, &pattern(2, MIB as usize), WriteMode::Direct);
    assert_eq!(
        spun_up(&before, &spin_ups(&engine)),
        parity_set(&engine, 12)
    );
}
