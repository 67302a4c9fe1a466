//! The evacuation comes before client reads of the disk being evacuated (`[evacuation]` in `grid.toml`): readers
//! get their share of the bytes it moves, in arrival order, and no read waits longer than the limit.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::*;
use permafrost_engine::{Engine, EvacuationConfig, GridConfig, WriteMode};
use permafrost_grid::Role;

/// Bytes on the evacuated disk: enough for the copy to take a while.
const HELD: u64 = 96 * MIB;

fn create_with(dir: &std::path::Path, evacuation: EvacuationConfig) -> Engine {
    let config = GridConfig {
        evacuation,
        disks: GridConfig::with_file_disks("8x6:4+1".parse().unwrap(), 128 * MIB).disks,
        ..test_config()
    };
    Engine::create(dir, config).expect("create grid")
}

/// The first data disk, its bucket and what it holds.
fn filled(engine: &Engine) -> (usize, usize, Vec<u8>) {
    let (disk, bucket) = (0..engine.geometry().disks())
        .find_map(|d| match engine.geometry().role(d) {
            Role::Data { bucket } => Some((d, bucket)),
            _ => None,
        })
        .expect("a data disk");
    let data = pattern(5, HELD as usize);
    write(engine, bucket, 0, &data, WriteMode::Serialized);
    engine.flush().unwrap();
    (disk, bucket, data)
}

/// Evacuate `disk` while `readers` threads read `bucket` whole in a loop (each read checked); the report and the
/// bytes the readers got while the evacuation copied (the replacement had defect ranges before and after).
fn evacuate_while_reading(
    engine: &Engine,
    disk: usize,
    bucket: usize,
    data: &[u8],
    readers: usize,
) -> (permafrost_engine::EvacuationReport, u64) {
    let stop = AtomicBool::new(false);
    let bytes = AtomicU64::new(0);
    let during = AtomicU64::new(0);
    let running = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..readers {
            scope.spawn(|| {
                running.fetch_add(1, Ordering::SeqCst);
                while !stop.load(Ordering::SeqCst) {
                    let mut promise = engine.read(bucket, 0, HELD).unwrap();
                    let mut at = 0;
                    let mut piece = vec![0u8; MIB as usize];
                    while at < HELD as usize && !stop.load(Ordering::SeqCst) {
                        let copying = engine.defect_bytes(disk) > 0;
                        std::io::Read::read_exact(&mut promise, &mut piece).unwrap();
                        assert!(
                            piece == data[at..at + piece.len()],
                            "a read differs at {at}"
                        );
                        at += piece.len();
                        if copying && engine.defect_bytes(disk) > 0 {
                            during.fetch_add(MIB, Ordering::SeqCst);
                        }
                        bytes.fetch_add(MIB, Ordering::SeqCst);
                    }
                }
            });
        }
        while running.load(Ordering::SeqCst) < readers as u64 || bytes.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        let report = engine.evacuate(disk, None, &|_, _| {}).unwrap();
        stop.store(true, Ordering::SeqCst);
        (report, during.load(Ordering::SeqCst))
    })
}

#[test]
fn readers_of_a_disk_being_evacuated_get_only_their_share_of_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let engine = create_with(
        dir.path(),
        EvacuationConfig {
            reader_share: 0.1,
            reader_floor_bytes_per_s: 0,
            reader_wait_ms_max: 60_000,
        },
    );
    let (disk, bucket, data) = filled(&engine);
    let (report, during) = evacuate_while_reading(&engine, disk, bucket, &data, 4);
    assert!(report.retired, "{report:?}");
    let moved = report.bytes_copied + report.bytes_reconstructed;
    // A tenth of what the evacuation moved, plus the chunks each reader had in flight when it began.
    let in_flight = 4 * 2 * engine.config().chunk_bytes_max;
    assert!(
        during <= moved / 10 + in_flight,
        "readers read {during} bytes while the evacuation moved {moved}: {report:?}"
    );
    assert!(report.reads_waited > 0, "{report:?}");
    assert_held(&engine, bucket, &data);
    engine.close().unwrap();
}

#[test]
fn no_read_of_a_disk_being_evacuated_waits_longer_than_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    // Readers get nothing of the evacuation's bytes and no floor: only the wait limit lets them read.
    let engine = create_with(
        dir.path(),
        EvacuationConfig {
            reader_share: 0.0,
            reader_floor_bytes_per_s: 0,
            reader_wait_ms_max: 200,
        },
    );
    let (disk, bucket, data) = filled(&engine);
    let (report, _) = evacuate_while_reading(&engine, disk, bucket, &data, 2);
    assert!(report.retired, "{report:?}");
    assert!(report.reads_waited > 0, "{report:?}");
    // The timer's precision and the scheduler of a loaded machine (CI) on top of the limit.
    assert!(
        report.read_wait_ms_longest <= 200 + 250,
        "a read waited {} ms: {report:?}",
        report.read_wait_ms_longest
    );
    assert_held(&engine, bucket, &data);
    engine.close().unwrap();
}

fn assert_held(engine: &Engine, bucket: usize, data: &[u8]) {
    let back = read(engine, bucket, 0, data.len() as u64).unwrap();
    assert!(back == data, "bucket {bucket} differs after the evacuation");
}
