//! Spin-ups: reads wake one disk, serialized writes four, delayed writes one; the budget holds under concurrent load.

mod common;

use common::*;
use permafrost_engine::{Engine, WriteMode};

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

/// Many threads reading and writing different buckets in all modes with the smallest budget the layout allows:
/// spin-ups queue, the budget is never exceeded, and everything completes with the data intact.
#[test]
fn the_budget_holds_under_concurrent_reads_and_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config();
    config.spinning_max = 6; // a column (vPG) must fit: the smallest valid budget for 8x6
    let engine = Engine::create(dir.path(), config).unwrap();
    let threads = 8;
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        for t in 0..threads {
            let engine = &engine;
            let done_tx = done_tx.clone();
            scope.spawn(move || {
                let mode = [WriteMode::Serialized, WriteMode::Direct, WriteMode::Delayed][t % 3];
                let buckets = [t, t + threads, t + 2 * threads];
                for round in 0..2u64 {
                    for &bucket in &buckets {
                        let data = pattern(bucket as u64 * 10 + round, MIB as usize);
                        write(engine, bucket, round * MIB, &data, mode);
                        assert_eq!(read(engine, bucket, round * MIB, MIB).unwrap(), data);
                    }
                }
                done_tx.send(t).unwrap();
            });
        }
        drop(done_tx);
        // Deadlock guard: every thread must finish in time (a hang fails here, not in CI's timeout).
        for _ in 0..threads {
            done_rx
                .recv_timeout(std::time::Duration::from_secs(120))
                .expect("a worker is stuck: the budget deadlocked");
        }
    });
    engine.flush().unwrap();
    for t in 0..threads {
        for bucket in [t, t + threads, t + 2 * threads] {
            for round in 0..2u64 {
                let want = pattern(bucket as u64 * 10 + round, MIB as usize);
                assert_eq!(read(&engine, bucket, round * MIB, MIB).unwrap(), want);
            }
        }
    }
    assert_parity_clean(&engine);
    let seen = engine.status().unwrap().max_spinning_seen;
    assert!(seen <= 6, "{seen} disks spun at once with a budget of 6");
    assert!(
        seen >= 4,
        "the load never filled the budget: the test checked nothing ({seen})"
    );
}
