//! The promises of IdrDisk on a healthy disk: bytes round-trip, unwritten space is zeros,
//! whole-stripe writes never read, large reads are batched, requests are checked.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::*;
use permafrost_disk::MemDisk;
use permafrost_idr::{CodecKind, IdrConfig, IdrDisk, IdrError};
use proptest::collection::vec;
use proptest::prelude::*;

#[test]
fn idr_disk_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<IdrDisk>();
}

#[test]
fn unwritten_space_reads_as_zeros_without_writing() {
    let (disk, idr, _) = setup(spc(16), 3);
    let mut buf = vec![0xFFu8; idr.logical_capacity() as usize];
    assert_eq!(idr.read(0, &mut buf).unwrap(), Default::default());
    assert!(buf.iter().all(|&b| b == 0));
    let scrub = idr.scrub(0, idr.logical_capacity()).unwrap();
    assert_eq!(scrub.stripes_never_written, 3);
    assert_eq!(
        disk.io_counts().1,
        0,
        "reading never-written space must not write"
    );
}

#[test]
fn default_layout_is_16_plus_1_scrambled_by_16_in_1_mib_stripes() {
    let config = IdrConfig::default();
    assert_eq!(
        config,
        IdrConfig {
            codec: CodecKind::Spc16,
            scramble_groups: 16
        }
    );
    let (_, idr, _) = setup(config, 2);
    assert_eq!(idr.stripe_bytes(), 1 << 20);
    assert_eq!(idr.physical_stripe_bytes(), 274 * 4096);
    assert_eq!(idr.codec().name(), "spc-16+1");
    let (_, rs_idr, _) = setup(rs(16), 2);
    assert_eq!(rs_idr.physical_stripe_bytes(), 290 * 4096);
}

#[test]
fn config_serialises_with_readable_names() {
    let toml = serde_json::to_string(&rs(8)).unwrap();
    assert_eq!(toml, r#"{"codec":"rs16x2","scramble_groups":8}"#);
    assert_eq!(
        CodecKind::from_id(CodecKind::Rs16x2.id()),
        Some(CodecKind::Rs16x2)
    );
    assert_eq!(CodecKind::from_id(0), None);
}

#[test]
fn invalid_configurations_are_refused_with_a_reason() {
    let disk = Arc::new(MemDisk::new("small", 2 << 20));
    let err = |config, base| match IdrDisk::new(disk.clone(), base, config) {
        Err(IdrError::Config { message, .. }) => message,
        other => panic!("expected a config error, got {:?}", other.map(|_| ())),
    };
    assert!(err(spc(0), 0).contains("scramble_groups = 0"));
    assert!(err(spc(60), 0).contains("at most 1015"));
    assert!(err(spc(16), 100).contains("not a multiple of 4096"));
    assert!(err(spc(16), 1 << 20).contains("no whole stripe"));
    assert!(err(spc(16), 4 << 20).contains("no whole stripe"));
    assert!(IdrDisk::new(disk.clone(), 0, spc(59)).is_err()); // 59·17 fits, but the disk is too small
    assert!(IdrDisk::new(disk, 0, spc(1)).is_ok());
}

#[test]
fn misaligned_or_out_of_range_requests_are_errors() {
    let (_, idr, _) = setup(spc(4), 2);
    let cap = idr.logical_capacity();
    let mut buf = vec![0u8; 4096];
    assert!(matches!(
        idr.read(1, &mut buf),
        Err(IdrError::Misaligned { .. })
    ));
    assert!(matches!(
        idr.read(0, &mut buf[..100]),
        Err(IdrError::Misaligned { .. })
    ));
    assert!(matches!(
        idr.write(cap, &buf),
        Err(IdrError::OutOfRange { .. })
    ));
    assert!(matches!(
        idr.read(u64::MAX - 4095, &mut buf),
        Err(IdrError::OutOfRange { .. })
    ));
    assert!(matches!(
        idr.scrub(0, cap + 4096),
        Err(IdrError::OutOfRange { .. })
    ));
    assert!(matches!(
        idr.reencode(4096, 1),
        Err(IdrError::Misaligned { .. })
    ));
    assert_eq!(idr.read(cap, &mut []).unwrap(), Default::default());
}

#[test]
fn whole_stripe_writes_never_read_and_large_io_is_batched() {
    let (disk, idr, shape) = setup(spc(16), 20);
    let data = pattern(idr.logical_capacity() as usize, 3);
    idr.write(0, &data).unwrap();
    let (reads, writes) = disk.io_counts();
    assert_eq!(reads, 0, "whole-stripe writes must not read");
    // 20 stripes of 1.07 MiB in batches of at most 10 MiB (9 stripes): 3 writes.
    assert_eq!(writes, 3);
    let mut buf = vec![0u8; data.len()];
    idr.read(0, &mut buf).unwrap();
    assert_eq!(buf, data);
    assert_eq!(disk.io_counts(), (3, 3));
    assert_eq!(shape.physical_blocks(), 274);
    // A read of undamaged stripes reads each one's first check block and data, not its parity and second
    // check block: 257 of its 274 blocks.
    assert_eq!(
        disk.bytes_read.load(Ordering::SeqCst),
        20 * 257 * B,
        "bytes read for 20 undamaged stripes"
    );
}

#[test]
fn partial_write_writes_only_changed_blocks() {
    let (disk, idr, shape) = setup(spc(16), 2);
    let data = pattern(idr.logical_capacity() as usize, 4);
    idr.write(0, &data).unwrap();
    let before = disk.snapshot();
    // One 4 KiB block: the data block, its iPG's parity and the two check blocks change.
    idr.write(5 * B, &pattern(B as usize, 99)).unwrap();
    let after = disk.snapshot();
    let changed: Vec<u64> = (0..before.len() as u64 / B)
        .filter(|&b| {
            before[(b * B) as usize..((b + 1) * B) as usize]
                != after[(b * B) as usize..((b + 1) * B) as usize]
        })
        .collect();
    let expected = vec![
        shape.disk_block(0, 0),
        shape.ipg_block(0, 0, 5),
        shape.ipg_block(0, 0, 16),
        shape.disk_block(0, shape.physical_blocks() - 1),
    ];
    assert_eq!(changed, expected);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn any_sequence_of_writes_reads_back_byte_exact(
        s in prop_oneof![Just(16usize), 1usize..=8],
        rs_code in any::<bool>(),
        writes in vec((0.0..1.0f64, 0.0..1.0f64, any::<u64>()), 1..6),
    ) {
        let config = if rs_code { rs(s) } else { spc(s) };
        let (_, idr, _) = setup(config, 3);
        let cap_blocks = idr.logical_capacity() / B;
        let mut model = vec![0u8; idr.logical_capacity() as usize];
        for (start_fraction, len_fraction, seed) in writes {
            let start = (cap_blocks as f64 * start_fraction) as u64 % cap_blocks;
            let len = 1 + ((cap_blocks - start - 1) as f64 * len_fraction) as u64;
            let bytes = pattern((len * B) as usize, seed);
            idr.write(start * B, &bytes).unwrap();
            model[(start * B) as usize..((start + len) * B) as usize].copy_from_slice(&bytes);
        }
        let mut buf = vec![0u8; model.len()];
        prop_assert_eq!(idr.read(0, &mut buf).unwrap(), Default::default());
        prop_assert!(buf == model);
        // A small read in the middle agrees too.
        let mut small = vec![0u8; 3 * B as usize];
        idr.read(5 * B, &mut small).unwrap();
        prop_assert!(small[..] == model[5 * B as usize..8 * B as usize]);
        let scrub = idr.scrub(0, idr.logical_capacity()).unwrap();
        prop_assert_eq!(scrub.blocks_repaired + scrub.check_blocks_repaired, 0);
    }
}

#[test]
fn concurrent_calls_on_disjoint_stripes_are_safe() {
    let (_, idr, shape) = setup(spc(4), 8);
    let idr = Arc::new(idr);
    let sb = shape.stripe_bytes();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let idr = idr.clone();
            std::thread::spawn(move || {
                // Thread t owns stripes 2t and 2t+1.
                for round in 0..20u64 {
                    let bytes = pattern((sb + B) as usize, t * 1000 + round);
                    let at = 2 * t * sb + (round % 4) * B;
                    idr.write(at, &bytes).unwrap();
                    let mut back = vec![0u8; bytes.len()];
                    idr.read(at, &mut back).unwrap();
                    assert_eq!(back, bytes);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
