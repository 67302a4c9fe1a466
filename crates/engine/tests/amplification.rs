//! I/O amplification per write mode, measured with `io_stats()` (logical bytes read + written on all disks per
//! user byte), next to the thesis's factors (§4.3.4): 8 for a read-modify-write of data + 3 parities; merged
//! delayed writes of a whole hPG: 2·(2·hn + 2·hk)/hn = 5 for 4+1 (4.57 for 7+1).

mod common;

use common::*;
use permafrost_engine::{Engine, WriteMode};

fn factor(engine: &Engine, user_bytes: u64) -> (f64, f64) {
    let stats = engine.io_stats();
    let read: u64 = stats.iter().map(|s| s.logical_read_bytes).sum();
    let written: u64 = stats.iter().map(|s| s.logical_written_bytes).sum();
    (
        read as f64 / user_bytes as f64,
        written as f64 / user_bytes as f64,
    )
}

#[test]
fn io_amplification_per_mode_matches_the_design() {
    let dir = tempfile::tempdir().unwrap();
    let engine = create(dir.path());
    engine.pause_background(true);
    let len = 2 * MIB;
    let g = engine.geometry().clone();
    let hpg0: Vec<usize> = (0..engine.buckets())
        .filter(|&b| g.parity_targets(g.bucket_disk(b)).hp == g.parity_targets(g.bucket_disk(0)).hp)
        .collect();
    let mut rows = Vec::new();
    for (i, &mode) in [WriteMode::Direct, WriteMode::Serialized, WriteMode::Delayed]
        .iter()
        .enumerate()
    {
        // Fresh space: no reads at all (written map), 1 data + 3 parity writes.
        // Own bucket and offsets: the parity disks shared within the hPG are fresh there too.
        let (bucket, offset) = (hpg0[i], i as u64 * 4 * MIB);
        engine.reset_io_stats();
        write(&engine, bucket, offset, &pattern(1, len as usize), mode);
        engine.flush().unwrap();
        let fresh = factor(&engine, len);
        // Overwrite: read-modify-write on all four disks.
        engine.reset_io_stats();
        write(&engine, bucket, offset, &pattern(2, len as usize), mode);
        engine.flush().unwrap();
        let over = factor(&engine, len);
        rows.push((mode, fresh, over));
        assert_eq!(
            fresh.0, 0.0,
            "{mode}: appending into never-written space must not read"
        );
        assert_eq!(fresh.1, 4.0, "{mode}: fresh space writes data + 3 parities");
        assert_eq!(
            over.0 + over.1,
            8.0,
            "{mode}: overwrite is the thesis's factor 8"
        );
    }
    // Merged delayed writes of the same range on every data disk of hPG 0 (already written: full RMW).
    let merged_offset = 14 * MIB;
    for &bucket in &hpg0 {
        write(
            &engine,
            bucket,
            merged_offset,
            &pattern(20, len as usize),
            WriteMode::Serialized,
        );
    }
    engine.reset_io_stats();
    for (k, &bucket) in hpg0.iter().enumerate() {
        write(
            &engine,
            bucket,
            merged_offset,
            &pattern(10 + k as u64, len as usize),
            WriteMode::Delayed,
        );
    }
    engine.flush().unwrap();
    let merged = factor(&engine, len * hpg0.len() as u64);
    let hn = 4.0;
    let thesis = 2.0 * (2.0 * hn + 2.0) / hn;
    for (mode, fresh, over) in &rows {
        println!("{mode:>10}: fresh space read {:.2} + written {:.2}; overwrite read {:.2} + written {:.2}", fresh.0, fresh.1, over.0, over.1);
    }
    println!(
        "merged delayed hPG 4+1: read {:.2} + written {:.2} = {:.2} (thesis {thesis:.2})",
        merged.0,
        merged.1,
        merged.0 + merged.1
    );
    assert!(
        (merged.0 + merged.1 - thesis).abs() < 1e-9,
        "merged delayed writes must cost hP and vhP one RMW"
    );
    assert_parity_clean(&engine);
}
