//! The promises of IdrDisk under damage: what the code can repair comes back byte-exact
//! (and is repaired on the disk); what it cannot is an error, never data.

mod common;

use std::sync::atomic::Ordering;

use common::*;
use permafrost_idr::{IdrConfig, IdrDisk, IdrError};
use proptest::collection::vec;
use proptest::prelude::*;

#[derive(Debug, Clone, Copy)]
enum Fault {
    /// A silent bit flip.
    FlipBit { byte: u16, bit: u8 },
    /// The disk reports a read error (latent sector error).
    Eio,
    /// The block holds other bytes (a misplaced or garbled write).
    Garbage(u64),
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        (0..4096u16, 0..8u8).prop_map(|(byte, bit)| Fault::FlipBit { byte, bit }),
        Just(Fault::Eio),
        any::<u64>().prop_map(Fault::Garbage),
    ]
}

fn apply(disk: &TestDisk, block: u64, fault: Fault) {
    match fault {
        Fault::FlipBit { byte, bit } => disk.flip_bit(block * B + byte as u64, bit),
        Fault::Eio => disk.inject_eio(block),
        Fault::Garbage(seed) => disk.raw_write(block, &pattern(B as usize, seed)),
    }
}

/// Write `stripes` stripes of pseudo-random data; return it and the pristine disk image.
fn write_all(disk: &TestDisk, idr: &IdrDisk, seed: u64) -> (Vec<u8>, Vec<u8>) {
    let data = pattern(idr.logical_capacity() as usize, seed);
    idr.write(0, &data).unwrap();
    (data, disk.snapshot())
}

/// The bytes of the IDR region (slack and base excluded).
fn region(snapshot: &[u8], shape: Shape, stripes: u64) -> &[u8] {
    &snapshot[BASE_OFFSET as usize..(BASE_OFFSET + stripes * shape.physical_blocks() * B) as usize]
}

const STRIPES: u64 = 3;

fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        cases: n,
        ..ProptestConfig::default()
    }
}

/// Damage up to `per_ipg` distinct blocks of each iPG (and optionally one check block per
/// stripe), then check: read is byte-exact; what it repaired and what a scrub after it repaired
/// add up to the damage (a read leaves a stripe whose data all match their crcs to scrub), the
/// disk is then restored to its pristine bytes, and a second read repairs nothing.
fn check_repairs_within_reach(
    config: IdrConfig,
    seed: u64,
    picks: Vec<Vec<(u64, Fault)>>,
    check_faults: Vec<Option<(bool, Fault)>>,
) -> Result<(), TestCaseError> {
    let (disk, idr, shape) = setup(config, STRIPES);
    let (data, pristine) = write_all(&disk, &idr, seed);
    let mut damaged_blocks = 0;
    for (i, faults) in picks.iter().enumerate() {
        let (stripe, ipg) = (i as u64 / shape.s, i as u64 % shape.s);
        let mut used = Vec::new();
        for &(j, f) in faults {
            let j = j % (shape.n + shape.k);
            if used.contains(&j) {
                continue;
            }
            used.push(j);
            apply(&disk, shape.ipg_block(stripe, ipg, j), f);
            damaged_blocks += 1;
        }
    }
    let mut damaged_checks = 0;
    for (stripe, check) in check_faults.iter().enumerate() {
        if let Some((second, f)) = check {
            let position = if *second {
                shape.physical_blocks() - 1
            } else {
                0
            };
            apply(&disk, shape.disk_block(stripe as u64, position), *f);
            damaged_checks += 1;
        }
    }

    let mut buf = vec![0u8; data.len()];
    let report = idr
        .read(0, &mut buf)
        .map_err(|e| TestCaseError::fail(format!("read failed: {e}")))?;
    prop_assert!(buf == data, "read returned wrong bytes");
    let scrub = idr.scrub(0, idr.logical_capacity()).unwrap();
    prop_assert!(scrub.unrecoverable.is_empty());
    prop_assert_eq!(
        report.blocks_repaired + scrub.blocks_repaired,
        damaged_blocks
    );
    prop_assert_eq!(
        report.check_blocks_repaired + scrub.check_blocks_repaired,
        damaged_checks
    );
    prop_assert!(
        region(&disk.snapshot(), shape, STRIPES) == region(&pristine, shape, STRIPES),
        "repairs did not restore the disk"
    );
    let again = idr.read(0, &mut buf).unwrap();
    prop_assert_eq!(again, Default::default());
    prop_assert!(buf == data);
    Ok(())
}

proptest! {
    #![proptest_config(cases(24))]

    #[test]
    fn spc_repairs_one_bad_block_in_every_ipg_byte_exact(
        seed in any::<u64>(),
        picks in vec(proptest::option::of((0..17u64, fault())), 48),
        check_faults in vec(proptest::option::of((any::<bool>(), fault())), 3),
    ) {
        let picks = picks.into_iter().map(|p| p.into_iter().collect()).collect();
        check_repairs_within_reach(spc(16), seed, picks, check_faults)?;
    }

    #[test]
    fn rs_repairs_two_bad_blocks_in_every_ipg_byte_exact(
        seed in any::<u64>(),
        picks in vec(vec((0..18u64, fault()), 0..=2), 48),
        check_faults in vec(proptest::option::of((any::<bool>(), fault())), 3),
    ) {
        check_repairs_within_reach(rs(16), seed, picks, check_faults)?;
    }

    #[test]
    fn any_burst_of_up_to_s_adjacent_blocks_is_repaired_byte_exact(
        seed in any::<u64>(),
        s in prop_oneof![Just(16usize), 1usize..=20],
        start_fraction in 0.0..1.0f64,
        len_fraction in 0.0..1.0f64,
        kind in fault(),
        rs_code in any::<bool>(),
    ) {
        let config = if rs_code { rs(s) } else { spc(s) };
        let (disk, idr, shape) = setup(config, STRIPES);
        let (data, pristine) = write_all(&disk, &idr, seed);
        // A run of 1..=s blocks anywhere in the region, across stripe boundaries and over check blocks.
        let len = 1 + ((shape.s as f64 * len_fraction) as u64).min(shape.s - 1);
        let region_blocks = STRIPES * shape.physical_blocks();
        let start = BASE_OFFSET / B + ((region_blocks - len) as f64 * start_fraction) as u64;
        for block in start..start + len {
            let f = match kind {
                Fault::Garbage(x) => Fault::Garbage(x ^ block),
                other => other,
            };
            apply(&disk, block, f);
        }
        let mut buf = vec![0u8; data.len()];
        let report = idr.read(0, &mut buf).map_err(|e| TestCaseError::fail(format!("burst {start}+{len}: {e}")))?;
        prop_assert!(buf == data, "burst {}+{}: wrong bytes", start, len);
        // What the read left (damage outside the data and first check block of a stripe) scrub repairs.
        let scrub = idr.scrub(0, idr.logical_capacity()).unwrap();
        prop_assert_eq!(
            report.blocks_repaired + report.check_blocks_repaired
                + scrub.blocks_repaired + scrub.check_blocks_repaired,
            len
        );
        prop_assert!(region(&disk.snapshot(), shape, STRIPES) == region(&pristine, shape, STRIPES));
    }

    #[test]
    fn damage_beyond_the_code_is_an_error_never_data(
        seed in any::<u64>(),
        stripe in 0..STRIPES,
        ipg in 0..16u64,
        js in proptest::sample::subsequence((0..18u64).collect::<Vec<_>>(), 3),
        faults in vec(fault(), 3),
        rs_code in any::<bool>(),
    ) {
        // SPC: two bad blocks of one iPG; RS 16+2: three.
        let (config, count) = if rs_code { (rs(16), 3) } else { (spc(16), 2) };
        let (disk, idr, shape) = setup(config, STRIPES);
        let (data, _) = write_all(&disk, &idr, seed);
        let js: Vec<u64> = js.into_iter().filter(|&j| j < shape.n + shape.k).take(count).collect();
        prop_assume!(js.len() == count);
        for (&j, &f) in js.iter().zip(&faults) {
            apply(&disk, shape.ipg_block(stripe, ipg, j), f);
        }
        let bad = (stripe * shape.stripe_bytes() + ipg * shape.ipg_bytes(), shape.ipg_bytes());
        let mut buf = vec![0xEEu8; data.len()];
        match idr.read(0, &mut buf) {
            Err(IdrError::Unrecoverable { ranges }) => prop_assert_eq!(ranges, vec![bad]),
            other => return Err(TestCaseError::fail(format!("expected Unrecoverable, got {other:?}"))),
        }
        // Nothing unverified came back: the bad range is zeroed, everything else is right.
        let (lo, hi) = (bad.0 as usize, (bad.0 + bad.1) as usize);
        prop_assert!(buf[lo..hi].iter().all(|&b| b == 0));
        prop_assert!(buf[..lo] == data[..lo] && buf[hi..] == data[hi..]);
        // Reads that avoid the bad iPG succeed.
        let mut before = vec![0u8; lo];
        idr.read(0, &mut before).unwrap();
        prop_assert!(before == data[..lo]);
        // Scrub reports it instead of failing.
        let scrub = idr.scrub(0, idr.logical_capacity()).unwrap();
        prop_assert_eq!(scrub.unrecoverable, vec![bad]);
    }
}

#[test]
fn misdirected_stripe_write_is_detected_not_returned() {
    let (disk, idr, shape) = setup(spc(16), STRIPES);
    let (data, _) = write_all(&disk, &idr, 7);
    // The drive wrote stripe 0's blocks over stripe 1.
    for position in 0..shape.physical_blocks() {
        disk.raw_write(
            shape.disk_block(1, position),
            &disk.raw_read(shape.disk_block(0, position)),
        );
    }
    let sb = shape.stripe_bytes();
    let mut buf = vec![0u8; (STRIPES * sb) as usize];
    match idr.read(0, &mut buf) {
        Err(IdrError::Unrecoverable { ranges }) => assert_eq!(ranges, vec![(sb, sb)]),
        other => panic!("expected Unrecoverable for stripe 1, got {other:?}"),
    }
    let mut first = vec![0u8; sb as usize];
    idr.read(0, &mut first).unwrap();
    assert_eq!(first, data[..sb as usize]);
    // A partial write cannot build on it; a full-stripe write replaces it.
    assert!(matches!(
        idr.write(sb, &data[..B as usize]),
        Err(IdrError::Unrecoverable { .. })
    ));
    idr.write(sb, &data[sb as usize..2 * sb as usize]).unwrap();
    idr.read(0, &mut buf).unwrap();
    assert_eq!(buf, data);
}

#[test]
fn a_misdirected_check_block_copy_is_repaired_from_the_other() {
    let (disk, idr, shape) = setup(spc(16), STRIPES);
    let (data, pristine) = write_all(&disk, &idr, 8);
    disk.raw_write(
        shape.disk_block(2, 0),
        &disk.raw_read(shape.disk_block(1, 0)),
    );
    let mut buf = vec![0u8; data.len()];
    let report = idr.read(0, &mut buf).unwrap();
    assert_eq!(buf, data);
    assert_eq!(report.check_blocks_repaired, 1);
    assert_eq!(disk.snapshot(), pristine);
}

#[test]
fn lost_check_blocks_fall_back_to_parity_and_are_rewritten() {
    let (disk, idr, shape) = setup(spc(16), STRIPES);
    let (data, pristine) = write_all(&disk, &idr, 9);
    disk.raw_write(shape.disk_block(1, 0), &pattern(B as usize, 1));
    disk.inject_eio(shape.disk_block(1, shape.physical_blocks() - 1));
    let mut buf = vec![0u8; data.len()];
    let report = idr.read(0, &mut buf).unwrap();
    assert_eq!(buf, data);
    assert_eq!(report.check_blocks_repaired, 2);
    assert_eq!(disk.snapshot(), pristine);
}

#[test]
fn lost_check_blocks_and_a_silent_flip_is_an_error_for_that_ipg_only() {
    let (disk, idr, shape) = setup(spc(16), STRIPES);
    let (data, pristine) = write_all(&disk, &idr, 10);
    disk.raw_write(shape.disk_block(1, 0), &[0u8; B as usize]);
    disk.raw_write(
        shape.disk_block(1, shape.physical_blocks() - 1),
        &pattern(B as usize, 2),
    );
    disk.flip_bit(shape.ipg_block(1, 5, 3) * B + 17, 2);
    let mut buf = vec![0u8; data.len()];
    let bad = (
        shape.stripe_bytes() + 5 * shape.ipg_bytes(),
        shape.ipg_bytes(),
    );
    match idr.read(0, &mut buf) {
        Err(IdrError::Unrecoverable { ranges }) => assert_eq!(ranges, vec![bad]),
        other => panic!("expected Unrecoverable, got {other:?}"),
    }
    // Check blocks are not rewritten over unverified data.
    let after = disk.snapshot();
    let check_a = (shape.disk_block(1, 0) * B) as usize;
    assert_eq!(after[check_a..check_a + B as usize], [0u8; B as usize]);
    assert_ne!(after, pristine);
}

#[test]
fn rs_without_check_blocks_still_rebuilds_one_unreadable_block_per_ipg() {
    let (disk, idr, shape) = setup(rs(16), STRIPES);
    let (data, pristine) = write_all(&disk, &idr, 11);
    disk.inject_eio(shape.disk_block(0, 0));
    disk.inject_eio(shape.disk_block(0, shape.physical_blocks() - 1));
    for ipg in 0..shape.s {
        disk.inject_eio(shape.ipg_block(0, ipg, ipg % 18));
    }
    let mut buf = vec![0u8; data.len()];
    let report = idr.read(0, &mut buf).unwrap();
    assert_eq!(buf, data);
    assert_eq!(
        (report.blocks_repaired, report.check_blocks_repaired),
        (16, 2)
    );
    assert_eq!(disk.snapshot(), pristine);
}

#[test]
fn partial_write_over_an_unrecoverable_ipg_is_refused_and_writes_nothing() {
    let (disk, idr, shape) = setup(spc(16), STRIPES);
    let (data, _) = write_all(&disk, &idr, 12);
    disk.inject_eio(shape.ipg_block(0, 2, 0));
    disk.inject_eio(shape.ipg_block(0, 2, 1));
    let before = disk.snapshot();
    let (_, writes_before) = disk.io_counts();
    // Touches iPG 7 only, but the stripe holds unrecoverable iPG 2: refused.
    let err = idr
        .write(7 * shape.ipg_bytes(), &pattern(B as usize, 5))
        .unwrap_err();
    let bad = (2 * shape.ipg_bytes(), shape.ipg_bytes());
    assert!(
        matches!(&err, IdrError::Unrecoverable { ranges } if ranges == &vec![bad]),
        "{err}"
    );
    assert_eq!(disk.io_counts().1, writes_before);
    assert_eq!(disk.snapshot(), before);
    // Replacing all of iPG 2 (and a bit more) is allowed and heals it.
    let new = pattern(2 * shape.ipg_bytes() as usize, 6);
    idr.write(2 * shape.ipg_bytes(), &new).unwrap();
    let mut expected = data.clone();
    expected[2 * shape.ipg_bytes() as usize..4 * shape.ipg_bytes() as usize].copy_from_slice(&new);
    let mut buf = vec![0u8; data.len()];
    assert_eq!(idr.read(0, &mut buf).unwrap(), Default::default());
    assert_eq!(buf, expected);
}

#[test]
fn reencode_trusts_the_data_blocks_of_its_range_and_verifies_the_rest() {
    let (disk, idr, shape) = setup(spc(16), STRIPES);
    let (data, _) = write_all(&disk, &idr, 13);
    // An interrupted write left new data in logical blocks 20..40 of stripe 1 but no parity
    // or check blocks; meanwhile a latent error hit a block outside that range.
    let sb = shape.stripe_bytes();
    let mut expected = data.clone();
    for block in 20..40u64 {
        let bytes = pattern(B as usize, 1000 + block);
        let (ipg, j) = (block / shape.n, block % shape.n);
        disk.raw_write(shape.ipg_block(1, ipg, j), &bytes);
        expected[(sb + block * B) as usize..(sb + (block + 1) * B) as usize]
            .copy_from_slice(&bytes);
    }
    disk.inject_eio(shape.ipg_block(1, 9, 4)); // logical block 148 of stripe 1: outside the range.
    let mut buf = vec![0u8; data.len()];
    assert!(
        idr.read(0, &mut buf).is_err(),
        "torn stripe must not verify"
    );
    let report = idr.reencode(sb + 20 * B, 20 * B).unwrap();
    assert_eq!((report.stripes, report.blocks_zeroed), (1, 0));
    assert_eq!(idr.read(0, &mut buf).unwrap(), Default::default());
    assert_eq!(buf, expected);
}

#[test]
fn reencode_zeroes_unreadable_blocks_in_its_range() {
    let (disk, idr, shape) = setup(spc(16), STRIPES);
    let (data, _) = write_all(&disk, &idr, 14);
    disk.inject_eio(shape.ipg_block(0, 0, 3));
    let report = idr.reencode(0, shape.ipg_bytes()).unwrap();
    assert_eq!(report.blocks_zeroed, 1);
    let mut expected = data[..shape.ipg_bytes() as usize].to_vec();
    expected[3 * B as usize..4 * B as usize].fill(0);
    let mut buf = vec![0u8; shape.ipg_bytes() as usize];
    idr.read(0, &mut buf).unwrap();
    assert_eq!(buf, expected);
}

/// A stripe whose data blocks all match their crcs in its first check block is read without its parity and
/// second check block: damage there does not fail or slow the read, and scrub repairs it.
#[test]
fn a_read_leaves_parity_and_the_second_check_block_to_scrub() {
    let (disk, idr, shape) = setup(spc(16), STRIPES);
    let data = pattern(shape.stripe_bytes() as usize, 21);
    idr.write(0, &data).unwrap();
    let pristine = disk.snapshot();
    disk.flip_bit(shape.ipg_block(0, 5, 16) * B, 3); // a parity block
    disk.flip_bit(
        shape.disk_block(0, shape.physical_blocks() - 1) * B + 100,
        0,
    ); // check block B
    disk.inject_eio(shape.ipg_block(0, 9, 16)); // another parity block, unreadable
    let before = disk.bytes_read.load(Ordering::SeqCst);
    let mut buf = vec![0u8; data.len()];
    let report = idr.read(0, &mut buf).unwrap();
    assert!(buf == data, "read returned wrong bytes");
    assert_eq!(report, Default::default(), "the read repaired nothing");
    assert_eq!(
        disk.bytes_read.load(Ordering::SeqCst) - before,
        257 * B,
        "one stripe read as its first check block and 256 data blocks"
    );
    let scrub = idr.scrub(0, shape.stripe_bytes()).unwrap();
    assert_eq!((scrub.blocks_repaired, scrub.check_blocks_repaired), (2, 1));
    assert!(region(&disk.snapshot(), shape, 1) == region(&pristine, shape, 1));
}

/// A data block that does not match its crc sends the stripe through the full check: the block is rebuilt
/// from its iPG's parity and written back, and the damaged second check block with it.
#[test]
fn a_read_of_a_damaged_data_block_repairs_its_whole_stripe() {
    let (disk, idr, shape) = setup(spc(16), STRIPES);
    let data = pattern(shape.stripe_bytes() as usize, 22);
    idr.write(shape.stripe_bytes(), &data).unwrap();
    let pristine = disk.snapshot();
    disk.flip_bit(shape.ipg_block(1, 2, 7) * B + 9, 1); // a data block
    disk.flip_bit(
        shape.disk_block(1, shape.physical_blocks() - 1) * B + 100,
        0,
    ); // check block B
    let mut buf = vec![0u8; data.len()];
    let report = idr.read(shape.stripe_bytes(), &mut buf).unwrap();
    assert!(buf == data, "read returned wrong bytes");
    assert_eq!(
        (report.blocks_repaired, report.check_blocks_repaired),
        (1, 1)
    );
    assert!(region(&disk.snapshot(), shape, 2) == region(&pristine, shape, 2));
}

#[test]
fn scrub_repairs_and_counts() {
    let (disk, idr, shape) = setup(spc(16), STRIPES);
    let data = pattern(shape.stripe_bytes() as usize, 15);
    idr.write(shape.stripe_bytes(), &data).unwrap(); // only stripe 1 written
    disk.flip_bit(shape.ipg_block(1, 3, 16) * B, 0); // a parity block
    disk.inject_eio(shape.disk_block(1, 0));
    let report = idr.scrub(B, 2 * shape.stripe_bytes()).unwrap(); // rounds out to stripes 0..=2
    assert_eq!(report.bytes_verified, 3 * shape.stripe_bytes());
    assert_eq!(report.stripes_never_written, 2);
    assert_eq!(
        (report.blocks_repaired, report.check_blocks_repaired),
        (1, 1)
    );
    assert!(report.unrecoverable.is_empty());
    assert_eq!(
        idr.scrub(0, idr.logical_capacity())
            .unwrap()
            .blocks_repaired,
        0
    );
}

#[test]
fn whole_disk_failure_is_a_disk_error() {
    let (disk, idr, _) = setup(spc(16), STRIPES);
    write_all(&disk, &idr, 16);
    disk.fail();
    let mut buf = vec![0u8; B as usize];
    assert!(matches!(
        idr.read(0, &mut buf),
        Err(IdrError::Disk(permafrost_disk::DiskError::Failed { .. }))
    ));
    assert!(matches!(idr.write(0, &buf), Err(IdrError::Disk(_))));
    assert!(matches!(idr.scrub(0, B), Err(IdrError::Disk(_))));
}

proptest! {
    #![proptest_config(cases(1000))]

    /// Long variant of the SPC and RS repair properties (run with `--ignored`).
    #[test]
    #[ignore]
    fn long_repairs_within_reach_of_the_code(
        seed in any::<u64>(),
        rs_code in any::<bool>(),
        picks in vec(vec((0..18u64, fault()), 0..=2), 48),
        check_faults in vec(proptest::option::of((any::<bool>(), fault())), 3),
    ) {
        let (config, per_ipg) = if rs_code { (rs(16), 2) } else { (spc(16), 1) };
        let picks = picks.into_iter().map(|p| p.into_iter().take(per_ipg).collect()).collect();
        check_repairs_within_reach(config, seed, picks, check_faults)?;
    }
}

proptest! {
    #![proptest_config(cases(32))]

    /// Verified iPGs are copied into the caller's buffer as they are verified: any block-aligned window (not
    /// aligned to iPGs or stripes) into a buffer full of stale bytes comes back byte-exact, with one repairable
    /// block in one iPG and one iPG beyond repair; the unrepairable part of the window is reported clipped to
    /// the window and zeroed, never stale or unverified bytes. The window starts at a cache line's start (the
    /// blocks are copied with streaming stores where the CPU has them) or 16 bytes past one (copied plainly).
    #[test]
    fn a_window_into_a_stale_buffer_is_exact_and_damage_is_zeroed_and_reported(
        seed in any::<u64>(),
        cache_line_aligned in any::<bool>(),
        first_block in 0..(STRIPES * 256),
        blocks in 1..(STRIPES * 256),
        repaired_at in (0..STRIPES, 0..16u64, 0..17u64),
        lost_at in (0..STRIPES, 0..16u64),
        lost_js in proptest::sample::subsequence((0..17u64).collect::<Vec<_>>(), 2),
    ) {
        let (disk, idr, shape) = setup(spc(16), STRIPES);
        let (data, _) = write_all(&disk, &idr, seed);
        let (rs, ri, rj) = repaired_at;
        let (ls, li) = lost_at;
        prop_assume!((rs, ri) != (ls, li));
        disk.flip_bit(shape.ipg_block(rs, ri, rj) * B + 17, 3);
        for &j in &lost_js {
            disk.inject_eio(shape.ipg_block(ls, li, j));
        }
        let offset = first_block * B;
        let len = (blocks * B).min(idr.logical_capacity() - offset);
        let mut space = vec![0xA5u8; len as usize + 128];
        let at = space.as_ptr().align_offset(64) + if cache_line_aligned { 0 } else { 16 };
        let buf = &mut space[at..at + len as usize];
        let lost = ls * shape.stripe_bytes() + li * shape.ipg_bytes();
        let (lo, hi) = (lost.max(offset), (lost + shape.ipg_bytes()).min(offset + len));
        let result = idr.read(offset, buf);
        let window = &data[offset as usize..(offset + len) as usize];
        if lo < hi {
            match result {
                Err(IdrError::Unrecoverable { ranges }) => prop_assert_eq!(ranges, vec![(lo, hi - lo)]),
                other => return Err(TestCaseError::fail(format!("expected Unrecoverable, got {other:?}"))),
            }
            let (a, b) = ((lo - offset) as usize, (hi - offset) as usize);
            prop_assert!(buf[a..b].iter().all(|&x| x == 0), "unverified bytes came back");
            prop_assert!(buf[..a] == window[..a] && buf[b..] == window[b..], "wrong bytes around the damage");
        } else {
            prop_assert!(result.is_ok(), "read failed: {:?}", result);
            prop_assert!(buf == window, "wrong bytes");
        }
    }
}
