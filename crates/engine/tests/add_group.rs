//! Adding a parity group (`Engine::add_group`): three data disks added to hPG 0 (now 7+1 wide) move into a new hPG
//! under a new parity disk; its parity, the old hP's and the vPs concerned are computed; every object stays
//! byte-exact, the parity verifies clean, the new group rebuilds a lost member, and a crash after any step (or in
//! the middle of the computation) resumes to the same end.

mod common;

use std::path::Path;

use common::*;
use permafrost_engine::{
    AddDisk, AddGroup, AddGroupStep, CrashPoint, DiskSpec, Engine, Error, OpenOptions, WriteMode,
};
use permafrost_grid::{GroupId, Role};

const MEMBERS: [usize; 3] = [48, 49, 50];

fn parity_disk() -> DiskSpec {
    DiskSpec::File {
        path: "disks/group-parity.img".into(),
        capacity_bytes: DISK_BYTES,
    }
}

/// A grid grown by disks 48, 49, 50 (buckets 32, 33, 34) in hPG 0, columns 5, 6, 7, with objects on them (12 MiB
/// on two, three recovery chunks) and elsewhere, and a delayed write to bucket 33 whose parity delta is still
/// pending when the grid closes.
fn setup(dir: &Path) -> Vec<(usize, u64, Vec<u8>)> {
    let engine = create(dir);
    let mut held = Vec::new();
    let mut put = |engine: &Engine, bucket: usize, offset: u64, len: u64, mode: WriteMode| {
        let data = pattern(500 + held.len() as u64, len as usize);
        write(engine, bucket, offset, &data, mode);
        held.push((bucket, offset, data));
    };
    put(&engine, 0, 0, 3 * MIB, WriteMode::Serialized);
    put(&engine, 20, 0, 2 * MIB, WriteMode::Serialized);
    engine.close().unwrap();
    for column in [5, 6, 7] {
        let index = 48 + column - 5;
        Engine::add_disk(
            dir,
            AddDisk {
                spec: DiskSpec::File {
                    path: format!("disks/disk-{index:02}.img").into(),
                    capacity_bytes: DISK_BYTES,
                },
                hpg: Some(0),
                column: Some(column),
            },
        )
        .unwrap();
    }
    let engine = Engine::open(dir).unwrap();
    assert_eq!(
        engine.geometry().group_members(GroupId::Horizontal(0)),
        &[0, 1, 2, 3, 48, 49, 50, 4]
    );
    put(&engine, 32, 0, 12 * MIB, WriteMode::Serialized);
    put(&engine, 33, 2 * MIB, 12 * MIB, WriteMode::Direct);
    put(&engine, 34, 0, 4 * MIB, WriteMode::Serialized);
    put(&engine, 1, 4 * MIB, 2 * MIB, WriteMode::Serialized);
    put(&engine, 33, 16 * MIB, 3 * MIB, WriteMode::Delayed);
    engine.close().unwrap();
    held
}

fn add_group(
    dir: &Path,
    crash_after: Option<AddGroupStep>,
) -> permafrost_engine::Result<permafrost_engine::AddedGroupReport> {
    Engine::add_group(
        dir,
        AddGroup {
            members: MEMBERS.to_vec(),
            spec: parity_disk(),
            column: None,
            crash_after,
        },
        OpenOptions::default(),
        &|_, _, _| {},
    )
}

fn assert_held(engine: &Engine, held: &[(usize, u64, Vec<u8>)], when: &str) {
    for (bucket, offset, data) in held {
        let back = read(engine, *bucket, *offset, data.len() as u64).unwrap();
        assert!(back == *data, "bucket {bucket} at {offset} differs {when}");
    }
}

/// The end state: hPG 8 = disks 48, 49, 50 under parity disk 51 in column 0, hPG 0 back to 4+1, no defect, objects
/// byte-exact, parity clean; a write to a member keeps it clean; a lost member is rebuilt through the new group.
fn assert_grouped(dir: &Path, held: &[(usize, u64, Vec<u8>)], when: &str) {
    let engine = Engine::open(dir).unwrap();
    let g = engine.geometry().clone();
    assert_eq!((g.disks(), g.hpgs(), g.version()), (52, 9, 4), "{when}");
    assert_eq!(g.role(51), Role::HParity { hpg: 8 }, "{when}");
    assert_eq!(
        g.group_members(GroupId::Horizontal(0)),
        &[0, 1, 2, 3, 4],
        "{when}"
    );
    assert_eq!(
        g.group_members(GroupId::Horizontal(8)),
        &[48, 49, 50, 51],
        "{when}"
    );
    assert_eq!(g.column(51), 0, "{when}");
    assert_eq!(engine.config().disks[51], parity_disk(), "{when}");
    assert_eq!(
        permafrost_engine::GridConfig::load(dir)
            .unwrap()
            .disks
            .len(),
        52,
        "{when}: grid.toml lists the new parity disk"
    );
    let status = engine.status().unwrap();
    assert!(
        status
            .disks
            .iter()
            .all(|d| !d.failed && d.defect_bytes == 0),
        "{when}: {:?}",
        status
            .disks
            .iter()
            .filter(|d| d.failed || d.defect_bytes > 0)
            .collect::<Vec<_>>()
    );
    assert_eq!(status.disks[51].written_bytes, 17 * MIB, "{when}");
    assert_held(&engine, held, when);
    assert_parity_clean(&engine);
    let fresh = pattern(999, (5 * MIB) as usize);
    write(&engine, 34, 8 * MIB, &fresh, WriteMode::Serialized);
    assert_parity_clean(&engine);
    // Member 49 lost: rebuilt from its groups (the new hPG or its column), byte-exact.
    engine.fail_disk(49).unwrap();
    engine.replace_disk(49, None).unwrap();
    engine.rebuild(49, &|_, _| {}).unwrap();
    assert_held(&engine, held, when);
    assert_eq!(
        read(&engine, 34, 8 * MIB, 5 * MIB).unwrap(),
        fresh,
        "{when}"
    );
    assert_parity_clean(&engine);
    engine.close().unwrap();
}

#[test]
fn three_added_disks_move_into_a_new_group_whose_parity_is_computed() {
    let dir = tempfile::tempdir().unwrap();
    let held = setup(dir.path());
    let report = add_group(dir.path(), None).unwrap();
    assert_eq!(
        (report.hpg, report.parity, report.column, report.resumed),
        (8, 51, 0, false)
    );
    assert_eq!(report.members, MEMBERS.to_vec());
    // The old hP of hPG 0 (disk 4), the vP of its column (44) and the vP of the new parity's column (40).
    assert_eq!(report.recomputed, vec![4, 40, 44]);
    // Four disks over the members' 17 MiB written: 0..14 MiB and 16..19 MiB.
    assert_eq!(report.bytes_to_compute, 4 * 17 * MIB);
    assert!(report.bytes_computed > 0 && report.bytes_computed <= report.bytes_to_compute);
    assert_eq!(
        report.geometry,
        "8x6:4+1 +3 disks (hPG 0 col 5, hPG 0 col 6, hPG 0 col 7) +1 group (hPG 8: disks 48, 49, 50, hP 51 col 0)"
    );
    assert_grouped(dir.path(), &held, "after an uninterrupted add");
    // Three failures of the new geometry that need its new row: member 48, the new parity 51 and disk 5 (in 48's
    // column): 5 comes back from hPG 1, then 48 from its column, then 51 from hPG 8. Every object reads.
    let engine = Engine::open(dir.path()).unwrap();
    for disk in [48, 51, 5] {
        engine.fail_disk(disk).unwrap();
    }
    assert_held(&engine, &held, "with disks 48, 51 and 5 failed");
    engine.close().unwrap();
}

#[test]
fn the_new_row_takes_added_disks_like_any_other() {
    let dir = tempfile::tempdir().unwrap();
    let held = setup(dir.path());
    add_group(dir.path(), None).unwrap();
    let report = Engine::add_disk(
        dir.path(),
        AddDisk {
            spec: DiskSpec::File {
                path: "disks/disk-52.img".into(),
                capacity_bytes: DISK_BYTES,
            },
            hpg: Some(8),
            column: None,
        },
    )
    .unwrap();
    assert_eq!((report.disk, report.hpg, report.hp), (52, 8, 51));
    let engine = Engine::open(dir.path()).unwrap();
    assert_eq!(
        engine.geometry().group_members(GroupId::Horizontal(8)),
        &[48, 49, 50, 52, 51]
    );
    assert_parity_clean(&engine);
    let data = pattern(77, (6 * MIB) as usize);
    write(&engine, report.bucket, MIB, &data, WriteMode::Serialized);
    assert_parity_clean(&engine);
    assert_held(&engine, &held, "after a disk joined the new row");
    assert_eq!(read(&engine, report.bucket, MIB, 6 * MIB).unwrap(), data);
    engine.close().unwrap();
}

#[test]
fn a_crash_after_any_step_resumes_to_the_same_end() {
    for step in [
        AddGroupStep::HeaderWritten,
        AddGroupStep::Committed,
        AddGroupStep::Computing,
    ] {
        let when = format!("after a crash at {step:?}");
        let dir = tempfile::tempdir().unwrap();
        let held = setup(dir.path());
        match add_group(dir.path(), Some(step)) {
            Err(Error::SimulatedCrash(CrashPoint::AddGroup(at))) => assert_eq!(at, step),
            other => panic!("{when}: expected the simulated crash, got {other:?}"),
        }
        // The grid opens and reads in between; the geometry has the group once it is committed.
        {
            let engine = Engine::open_paused(dir.path(), OpenOptions::default()).unwrap();
            let committed = step != AddGroupStep::HeaderWritten;
            assert_eq!(
                engine.geometry().disks(),
                if committed { 52 } else { 51 },
                "{when}"
            );
            if committed {
                let defects: u64 = engine
                    .status()
                    .unwrap()
                    .disks
                    .iter()
                    .map(|d| d.defect_bytes)
                    .sum();
                assert!(defects > 0, "{when}: the computation is left to do");
            }
            assert_held(&engine, &held, &when);
            engine.close().unwrap();
        }
        let report = add_group(dir.path(), None).unwrap();
        assert_eq!(
            report.resumed,
            step != AddGroupStep::HeaderWritten,
            "{when}"
        );
        assert_eq!((report.hpg, report.parity), (8, 51), "{when}");
        assert_grouped(dir.path(), &held, &when);
    }
}

#[test]
fn refusals_name_the_rule_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let refused = |members: Vec<usize>, column: Option<usize>| {
        let err = Engine::add_group(
            dir.path(),
            AddGroup {
                members,
                spec: parity_disk(),
                column,
                crash_after: None,
            },
            OpenOptions::default(),
            &|_, _, _| {},
        )
        .unwrap_err();
        err.to_string()
    };
    assert!(
        refused(vec![3, 48], None).contains("not a data disk added"),
        "a layout disk"
    );
    assert!(
        refused(vec![48, 49], Some(5)).contains("column 5"),
        "the parity's column holds a member"
    );
    let too_small = Engine::add_group(
        dir.path(),
        AddGroup {
            members: MEMBERS.to_vec(),
            spec: DiskSpec::File {
                path: "disks/small.img".into(),
                capacity_bytes: DISK_BYTES / 2,
            },
            column: None,
            crash_after: None,
        },
        OpenOptions::default(),
        &|_, _, _| {},
    )
    .unwrap_err();
    assert!(too_small.to_string().contains("smaller"), "{too_small}");
    assert_eq!(Engine::stored_geometry(dir.path()).unwrap().disks(), 51);
}
