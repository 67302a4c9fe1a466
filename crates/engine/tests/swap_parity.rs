//! Parity swap: a disk twice the size of a parity disk takes its place, the old parity disk becomes a data disk that
//! reads as zeros, every object stays byte-exact and the parity clean, and a crash after any step (or in the middle
//! of the rebuild, or inside the replacement) resumes to the same end.

mod common;

use std::path::Path;

use common::*;
use permafrost_engine::{
    AddDisk, CrashPoint, DiskSpec, Engine, Error, GridConfig, OpenOptions, SwapParity, SwapState,
    SwapStep, WriteMode,
};
use permafrost_grid::Role;

/// The parity disk swapped in these tests: the hP of horizontal parity group 0.
fn hp0(engine: &Engine) -> usize {
    (0..engine.geometry().disks())
        .find(|&d| engine.geometry().role(d) == Role::HParity { hpg: 0 })
        .expect("hP of hPG 0")
}

fn big_disk() -> DiskSpec {
    DiskSpec::File {
        path: "disks/big-parity.img".into(),
        capacity_bytes: 2 * DISK_BYTES,
    }
}

/// A grid with objects: 12 MiB (three recovery chunks) in two buckets of hPG 0, 4 MiB in a bucket elsewhere, and
/// a delayed write to hPG 0 whose parity delta is still pending when the grid closes.
fn setup(dir: &Path) -> (usize, Vec<(usize, u64, Vec<u8>)>) {
    let engine = create(dir);
    let parity = hp0(&engine);
    let buckets: Vec<usize> = engine
        .geometry()
        .group_members(permafrost_grid::GroupId::Horizontal(0))
        .iter()
        .filter_map(|&d| engine.geometry().disk_bucket(d))
        .collect();
    assert!(buckets.len() >= 2);
    let mut held = Vec::new();
    for (i, &(bucket, offset, len, mode)) in [
        (buckets[0], 0, 12 * MIB, WriteMode::Serialized),
        (buckets[1], 2 * MIB, 12 * MIB, WriteMode::Direct),
        (20, 0, 4 * MIB, WriteMode::Serialized),
        (buckets[0], 16 * MIB, 3 * MIB, WriteMode::Delayed),
    ]
    .iter()
    .enumerate()
    {
        let data = pattern(700 + i as u64, len as usize);
        write(&engine, bucket, offset, &data, mode);
        held.push((bucket, offset, data));
    }
    engine.close().unwrap();
    (parity, held)
}

fn assert_held(engine: &Engine, held: &[(usize, u64, Vec<u8>)], when: &str) {
    for (bucket, offset, data) in held {
        let back = read(engine, *bucket, *offset, data.len() as u64).unwrap();
        assert!(back == *data, "bucket {bucket} at {offset} differs {when}");
    }
}

fn swap(
    dir: &Path,
    parity: Option<usize>,
    crash: Option<SwapStep>,
) -> permafrost_engine::Result<permafrost_engine::ParitySwapReport> {
    Engine::swap_parity(
        dir,
        SwapParity {
            parity,
            new: parity.map(|_| big_disk()),
            hpg: None,
            column: None,
            crash_after: crash,
        },
        OpenOptions::default(),
        &|_, _, _| {},
    )
}

/// The end state of every swap: the big disk is the parity, the old one data disk 48 (bucket 32) that reads as
/// zeros, objects byte-exact, parity clean, and a write to the new bucket keeps it clean.
fn assert_swapped(dir: &Path, parity: usize, held: &[(usize, u64, Vec<u8>)], when: &str) {
    let engine = Engine::open(dir).unwrap();
    assert_eq!(engine.geometry().disks(), 49, "{when}");
    assert_eq!(engine.geometry().version(), 1, "{when}");
    let config = engine.config();
    assert_eq!(config.disks[parity], big_disk(), "{when}");
    assert_eq!(
        config.disks[48],
        DiskSpec::File {
            path: format!("disks/disk-{parity:02}.img").into(),
            capacity_bytes: DISK_BYTES,
        },
        "{when}"
    );
    assert_eq!(
        engine.geometry().role(48),
        Role::Data { bucket: 32 },
        "{when}"
    );
    let status = engine.status().unwrap();
    assert!(
        status
            .disks
            .iter()
            .all(|d| !d.failed && d.defect_bytes == 0),
        "{when}"
    );
    assert_eq!(status.disks[48].written_bytes, 0, "{when}");
    assert_eq!(status.parity_swaps.len(), 1, "{when}");
    assert_eq!(status.parity_swaps[0].state, SwapState::Done, "{when}");
    assert_eq!(status.parity_swaps[0].data_disk, Some(48), "{when}");
    assert_held(&engine, held, when);
    assert_parity_clean(&engine);
    // The old parity disk reads as zeros (its bytes are the old parity, never trusted) and takes new data.
    assert_eq!(
        read(&engine, 32, 0, MIB).unwrap(),
        vec![0u8; MIB as usize],
        "{when}"
    );
    let fresh = pattern(999, (5 * MIB) as usize);
    write(&engine, 32, MIB, &fresh, WriteMode::Serialized);
    assert_parity_clean(&engine);
    engine.close().unwrap();
    let engine = Engine::open(dir).unwrap();
    assert_eq!(read(&engine, 32, MIB, 5 * MIB).unwrap(), fresh, "{when}");
    assert_held(&engine, held, when);
    engine.close().unwrap();
}

#[test]
fn a_disk_twice_the_size_becomes_the_parity_and_the_old_parity_a_data_disk() {
    let dir = tempfile::tempdir().unwrap();
    let (parity, held) = setup(dir.path());
    // add-disk refuses the larger disk and names the parity disk and the command.
    let err = Engine::add_disk(
        dir.path(),
        AddDisk {
            spec: DiskSpec::File {
                path: "disks/too-big.img".into(),
                capacity_bytes: 2 * DISK_BYTES,
            },
            hpg: Some(0),
            column: None,
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains(&format!("than disk {parity} "))
            && err.contains(&format!("grid swap-parity --dir {}", dir.path().display()))
            && err.contains(&format!("--parity {parity} --size {}", 2 * DISK_BYTES)),
        "{err}"
    );
    let states = std::sync::Mutex::new(Vec::new());
    let report = Engine::swap_parity(
        dir.path(),
        SwapParity {
            parity: Some(parity),
            new: Some(big_disk()),
            ..Default::default()
        },
        OpenOptions::default(),
        &|state, done, total| {
            assert!(done <= total || total == 0);
            let mut s = states.lock().unwrap();
            if s.last() != Some(&state) {
                s.push(state);
            }
        },
    )
    .unwrap();
    assert_eq!(
        *states.lock().unwrap(),
        [
            SwapState::Replacing,
            SwapState::Rebuilding,
            SwapState::Moving
        ]
    );
    assert_eq!(report.parity, parity);
    assert_eq!(report.data_disk, 48);
    assert_eq!(report.bucket, 32);
    assert_eq!(report.new_capacity_bytes, 2 * DISK_BYTES);
    assert_eq!(report.old_capacity_bytes, DISK_BYTES);
    assert!(!report.resumed);
    // The parity holds what its members wrote: 0..14 MiB and 16..19 MiB = 17 MiB.
    assert_eq!(report.bytes_rebuilt, 17 * MIB, "{report:?}");
    assert_eq!(report.geometry_version, 1);
    assert_swapped(dir.path(), parity, &held, "after the swap");
    // Nothing is left to resume.
    let err = swap(dir.path(), None, None).unwrap_err().to_string();
    assert!(err.contains("no parity swap is in progress"), "{err}");
}

/// A crash after every step: the grid opens and reads every object right after it, and the swap run again
/// finishes it.
#[test]
fn a_crash_after_any_step_resumes_and_every_object_reads() {
    for step in [
        SwapStep::Recorded,
        SwapStep::Replaced,
        SwapStep::Rebuilding,
        SwapStep::Rebuilt,
        SwapStep::HeaderWritten,
        SwapStep::Added,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (parity, held) = setup(dir.path());
        let err = swap(dir.path(), Some(parity), Some(step)).unwrap_err();
        assert!(
            matches!(err, Error::SimulatedCrash(CrashPoint::ParitySwap(s)) if s == step),
            "{step:?}: {err}"
        );
        let when = format!("after a crash at {step:?}");
        {
            // Opened before the swap resumes (any command may do that): every object reads.
            let engine = Engine::open_paused(dir.path(), OpenOptions::default()).unwrap();
            assert_held(&engine, &held, &when);
            let status = engine.status().unwrap();
            assert_eq!(status.parity_swaps.len(), 1);
            assert_ne!(status.parity_swaps[0].state, SwapState::Done, "{when}");
            if step == SwapStep::Rebuilding {
                let left = engine.defect_bytes(parity);
                assert!(
                    left > 0 && left < 17 * MIB,
                    "{when}: the first chunk is journaled, {left} left"
                );
            }
            engine.close().unwrap();
        }
        // Another swap cannot start; the same one with another disk is refused too.
        let other = Engine::swap_parity(
            dir.path(),
            SwapParity {
                parity: Some(parity),
                new: Some(DiskSpec::File {
                    path: "disks/other.img".into(),
                    capacity_bytes: 3 * DISK_BYTES,
                }),
                ..Default::default()
            },
            OpenOptions::default(),
            &|_, _, _| {},
        );
        assert!(other.is_err(), "{when}");
        let report = swap(dir.path(), None, None).unwrap();
        assert!(report.resumed, "{when}");
        assert_eq!(report.data_disk, 48, "{when}");
        assert_swapped(dir.path(), parity, &held, &when);
    }
}

/// The replacement cut off between `grid.toml` naming the new disk and the journal's defects (the old parity is
/// marked failed first), and the added disk's `grid.toml` entry lost after the journal committed it.
#[test]
fn a_crash_inside_the_replacement_or_the_add_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let (parity, held) = setup(dir.path());
    swap(dir.path(), Some(parity), Some(SwapStep::Recorded)).unwrap_err();
    {
        let engine = Engine::open(dir.path()).unwrap();
        engine.fail_disk(parity).unwrap();
        engine.close().unwrap();
        let mut config = GridConfig::load(dir.path()).unwrap();
        config.disks[parity] = big_disk();
        config.save(dir.path()).unwrap();
        std::fs::write(dir.path().join("disks/big-parity.img"), b"").unwrap();
        std::fs::File::options()
            .write(true)
            .open(dir.path().join("disks/big-parity.img"))
            .unwrap()
            .set_len(2 * DISK_BYTES)
            .unwrap();
        let engine = Engine::open_paused(dir.path(), OpenOptions::default()).unwrap();
        assert!(engine.is_failed(parity));
        assert_held(&engine, &held, "with the replacement cut off");
        engine.close().unwrap();
    }
    swap(dir.path(), None, Some(SwapStep::Added)).unwrap_err();
    let mut config = GridConfig::load(dir.path()).unwrap();
    assert_eq!(config.disks.len(), 49);
    config.disks.pop();
    config.save(dir.path()).unwrap();
    {
        // The journal's row is the geometry: the grid has the disk anyway.
        let engine = Engine::open(dir.path()).unwrap();
        assert_eq!(engine.geometry().disks(), 49);
        assert_held(&engine, &held, "with grid.toml behind the journal");
        engine.close().unwrap();
    }
    let report = swap(dir.path(), None, None).unwrap();
    assert!(report.resumed);
    assert_eq!(GridConfig::load(dir.path()).unwrap().disks.len(), 49);
    assert_swapped(dir.path(), parity, &held, "after crashes inside the steps");
}

/// Two crashes in a row, and a place chosen for the old parity disk.
#[test]
fn crashes_in_a_row_and_a_chosen_place() {
    let dir = tempfile::tempdir().unwrap();
    let (parity, held) = setup(dir.path());
    let request = |crash| SwapParity {
        parity: Some(parity),
        new: Some(big_disk()),
        hpg: Some(1),
        column: None,
        crash_after: crash,
    };
    Engine::swap_parity(
        dir.path(),
        request(Some(SwapStep::Rebuilding)),
        OpenOptions::default(),
        &|_, _, _| {},
    )
    .unwrap_err();
    Engine::swap_parity(
        dir.path(),
        request(Some(SwapStep::HeaderWritten)),
        OpenOptions::default(),
        &|_, _, _| {},
    )
    .unwrap_err();
    let report = Engine::swap_parity(
        dir.path(),
        request(None),
        OpenOptions::default(),
        &|_, _, _| {},
    )
    .unwrap();
    assert!(report.resumed);
    assert_eq!(report.hpg, 1);
    let engine = Engine::open(dir.path()).unwrap();
    assert_held(&engine, &held, "after two crashes");
    assert_parity_clean(&engine);
    engine.close().unwrap();
}

#[test]
fn what_a_swap_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let (parity, held) = setup(dir.path());
    let try_swap = |p: usize, new: DiskSpec| {
        Engine::swap_parity(
            dir.path(),
            SwapParity {
                parity: Some(p),
                new: Some(new),
                ..Default::default()
            },
            OpenOptions::default(),
            &|_, _, _| {},
        )
        .unwrap_err()
        .to_string()
    };
    let err = try_swap(0, big_disk());
    assert!(err.contains("disk 0 is not a parity disk"), "{err}");
    let err = try_swap(
        parity,
        DiskSpec::File {
            path: "disks/small.img".into(),
            capacity_bytes: DISK_BYTES / 2,
        },
    );
    assert!(err.contains("smaller"), "{err}");
    let err = try_swap(
        parity,
        DiskSpec::File {
            path: "disks/disk-00.img".into(),
            capacity_bytes: 2 * DISK_BYTES,
        },
    );
    assert!(err.contains("already disk 0"), "{err}");
    // No place for the old parity disk as a data disk: a row that does not exist.
    let err = Engine::swap_parity(
        dir.path(),
        SwapParity {
            parity: Some(parity),
            new: Some(big_disk()),
            hpg: Some(99),
            ..Default::default()
        },
        OpenOptions::default(),
        &|_, _, _| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains(&format!("parity disk {parity} cannot become a data disk")),
        "{err}"
    );
    {
        let engine = Engine::open(dir.path()).unwrap();
        engine.fail_disk(0).unwrap();
        engine.close().unwrap();
    }
    let err = try_swap(parity, big_disk());
    assert!(err.contains("before a parity swap"), "{err}");
    // Nothing was recorded, and the grid is as it was.
    assert!(Engine::parity_swaps(dir.path()).unwrap().is_empty());
    let engine = Engine::open(dir.path()).unwrap();
    assert_eq!(engine.geometry().disks(), 48);
    assert_held(&engine, &held, "after refused swaps");
    engine.close().unwrap();
}

/// `replace` with a larger disk keeps working: a data disk replaced by one twice the size is rebuilt and reads.
#[test]
fn replacing_a_data_disk_by_a_larger_one_still_works() {
    let dir = tempfile::tempdir().unwrap();
    let (_, held) = setup(dir.path());
    let engine = Engine::open(dir.path()).unwrap();
    let disk = engine.geometry().bucket_disk(held[0].0);
    engine.fail_disk(disk).unwrap();
    engine
        .replace_disk(
            disk,
            Some(DiskSpec::File {
                path: "disks/bigger-data.img".into(),
                capacity_bytes: 2 * DISK_BYTES,
            }),
        )
        .unwrap();
    let report = engine.rebuild(disk, &|_, _| {}).unwrap();
    assert!(report.unrecoverable.is_empty());
    engine.close().unwrap();
    let engine = Engine::open(dir.path()).unwrap();
    assert_eq!(engine.defect_bytes(disk), 0);
    assert_held(
        &engine,
        &held,
        "after replacing a data disk by a larger one",
    );
    assert_parity_clean(&engine);
    engine.close().unwrap();
}

/// On block devices (loop devices; needs root, skipped otherwise) the old parity disk is not wiped when it becomes
/// a data disk: its bytes still hold the old parity, and the grid reads it as zeros anyway (the written map), with
/// the parity of its new group and column valid. A crash after its header was rewritten resumes on devices too.
#[test]
fn on_block_devices_the_old_parity_bytes_are_never_read_as_data() {
    use permafrost_disk::{Disk, LoopDevice};
    const DEVICE_BYTES: u64 = 8 << 20;
    let temp = tempfile::tempdir().unwrap();
    let mut devices = Vec::new();
    for i in 0..10 {
        let backing = temp.path().join(format!("backing-{i}.img"));
        let size = if i == 9 {
            2 * DEVICE_BYTES
        } else {
            DEVICE_BYTES
        };
        std::fs::File::create(&backing)
            .unwrap()
            .set_len(size)
            .unwrap();
        match LoopDevice::attach(&backing) {
            Ok(device) => devices.push(device),
            // SAFETY: geteuid has no preconditions.
            Err(why) if unsafe { libc::geteuid() } != 0 => {
                println!("skipped: not root, no loop devices ({why})");
                return;
            }
            Err(why) => panic!("running as root but losetup failed: {why}"),
        }
    }
    let paths: Vec<std::path::PathBuf> = devices.iter().map(|d| d.path().to_path_buf()).collect();
    // 4x2:1+1: row 0 is b0 hP0 b1 hP1, row 1 the four vP.
    let mut config =
        GridConfig::with_block_devices("4x2:1+1".parse().unwrap(), &paths[..8], &[]).unwrap();
    config.power = permafrost_disk::power::PowerProfile::for_tests();
    let dir = temp.path().join("grid");
    let engine = Engine::create(&dir, config).unwrap();
    let parity = 1;
    assert_eq!(engine.geometry().role(parity), Role::HParity { hpg: 0 });
    let data = pattern(31, (3 * MIB) as usize);
    write(&engine, 0, 0, &data, WriteMode::Serialized);
    let other = pattern(32, (2 * MIB) as usize);
    write(&engine, 1, MIB, &other, WriteMode::Serialized);
    engine.close().unwrap();
    let held = vec![(0, 0, data), (1, MIB, other)];

    let request = |crash| SwapParity {
        parity: Some(parity),
        new: Some(DiskSpec::Block {
            path: paths[9].clone(),
            power_control: Default::default(),
        }),
        hpg: Some(1),
        column: None,
        crash_after: crash,
    };
    let err = Engine::swap_parity(
        &dir,
        request(Some(SwapStep::HeaderWritten)),
        OpenOptions::default(),
        &|_, _, _| {},
    )
    .unwrap_err();
    assert!(matches!(err, Error::SimulatedCrash(_)), "{err}");
    let engine = Engine::open(&dir).unwrap();
    assert_held(
        &engine,
        &held,
        "after a crash with the old parity's header rewritten",
    );
    engine.close().unwrap();
    let report =
        Engine::swap_parity(&dir, request(None), OpenOptions::default(), &|_, _, _| {}).unwrap();
    assert!(report.resumed);
    assert_eq!((report.data_disk, report.hpg), (8, 1));

    // The old parity's bytes are still on the device (the parity of b0's 3 MiB)...
    let old = permafrost_disk::BlockDisk::open(&paths[parity]).unwrap();
    let mut raw = vec![0u8; MIB as usize];
    old.read_at(2 * MIB, &mut raw).unwrap();
    assert!(raw.iter().any(|&b| b != 0), "the old parity disk was wiped");
    drop(old);
    // ...and the grid reads its bucket as zeros, with every object and the parity intact.
    let engine = Engine::open(&dir).unwrap();
    let bucket = report.bucket;
    assert_eq!(
        read(&engine, bucket, 0, 4 * MIB).unwrap(),
        vec![0u8; (4 * MIB) as usize]
    );
    assert_held(&engine, &held, "after the swap on devices");
    assert_parity_clean(&engine);
    let fresh = pattern(33, (MIB / 2) as usize);
    write(&engine, bucket, MIB + 8192, &fresh, WriteMode::Serialized);
    assert_parity_clean(&engine);
    let back = read(&engine, bucket, MIB, 2 * MIB).unwrap();
    assert!(back[..8192].iter().all(|&b| b == 0));
    assert_eq!(&back[8192..8192 + fresh.len()], &fresh[..]);
    assert!(back[8192 + fresh.len()..].iter().all(|&b| b == 0));
    engine.close().unwrap();
}

/// Bytes read and written beyond the header, by disk file (the wrapper of `OpenOptions::wrap_disk`, around the
/// grid's real file disks).
type Io = std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, (u64, u64)>>>;

struct Counted {
    inner: std::sync::Arc<dyn permafrost_disk::Disk>,
    io: Io,
}

impl permafrost_disk::Disk for Counted {
    fn capacity_bytes(&self) -> u64 {
        self.inner.capacity_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), permafrost_disk::DiskError> {
        if offset >= permafrost_engine::HEADER_BYTES {
            let mut io = self.io.lock().unwrap();
            io.entry(self.inner.describe()).or_default().0 += buf.len() as u64;
        }
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), permafrost_disk::DiskError> {
        if offset >= permafrost_engine::HEADER_BYTES {
            let mut io = self.io.lock().unwrap();
            io.entry(self.inner.describe()).or_default().1 += buf.len() as u64;
        }
        self.inner.write_at(offset, buf)
    }
    fn sync(&self) -> Result<(), permafrost_disk::DiskError> {
        self.inner.sync()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

fn counted(io: &Io) -> OpenOptions {
    let io = std::sync::Arc::clone(io);
    OpenOptions {
        wrap_disk: Some(Box::new(
            move |_, inner: std::sync::Arc<dyn permafrost_disk::Disk>| {
                std::sync::Arc::new(Counted {
                    inner,
                    io: std::sync::Arc::clone(&io),
                }) as std::sync::Arc<dyn permafrost_disk::Disk>
            },
        )),
        power_profile: None,
    }
}

/// Spin-ups of every disk position, as the grid records them across opens.
fn recorded_spin_ups(dir: &Path) -> Vec<u64> {
    let engine = Engine::open_paused(dir, OpenOptions::default()).unwrap();
    let counts = engine
        .status()
        .unwrap()
        .disks
        .iter()
        .map(|d| d.power.spin_ups)
        .collect();
    engine.close().unwrap();
    counts
}

/// Unraid's point: a parity swap copies the old parity disk onto the new one, so only those two disks work. Every
/// other disk is neither read nor written nor spun up (a rebuild from the groups reads the four members of hPG 0
/// over 17 MiB); the pending parity delta is drained onto the old parity disk before it is copied.
#[test]
fn a_swap_reads_and_writes_only_the_old_and_the_new_parity_disk() {
    let dir = tempfile::tempdir().unwrap();
    let (parity, held) = setup(dir.path());
    let before = recorded_spin_ups(dir.path());
    let io: Io = Default::default();
    let started = std::time::Instant::now();
    let report = Engine::swap_parity(
        dir.path(),
        SwapParity {
            parity: Some(parity),
            new: Some(big_disk()),
            ..Default::default()
        },
        counted(&io),
        &|_, _, _| {},
    )
    .unwrap();
    let millis = started.elapsed().as_millis();
    let after = recorded_spin_ups(dir.path());
    let old = dir
        .path()
        .join(format!("disks/disk-{parity:02}.img"))
        .display()
        .to_string();
    let new = dir
        .path()
        .join("disks/big-parity.img")
        .display()
        .to_string();
    let io = io.lock().unwrap().clone();
    println!("swap of parity disk {parity} in {millis} ms: {report:?}; bytes (read, written) by disk: {io:?}");
    assert_eq!(report.bytes_copied, 17 * MIB, "{report:?}");
    assert_eq!(report.bytes_reconstructed, 0, "{report:?}");
    assert_eq!(report.bytes_rebuilt, 17 * MIB, "{report:?}");
    let others: Vec<_> = io
        .iter()
        .filter(|(name, &(read, written))| {
            **name != old && **name != new && (read > 0 || written > 0)
        })
        .collect();
    assert!(
        others.is_empty(),
        "disks other than the old and the new parity were read or written: {others:?}"
    );
    assert!(
        io.get(&old).is_some_and(|&(read, _)| read >= 17 * MIB),
        "{io:?}"
    );
    assert!(
        io.get(&new)
            .is_some_and(|&(_, written)| written >= 17 * MIB),
        "{io:?}"
    );
    let spun: Vec<usize> = (0..before.len())
        .filter(|&d| after[d] != before[d])
        .collect();
    assert_eq!(
        spun,
        [parity],
        "spin-ups by position: {before:?} -> {after:?}"
    );
    assert_eq!(
        after[48], 0,
        "the old parity disk as data disk 48 was not spun up"
    );
    let swaps = Engine::parity_swaps(dir.path()).unwrap();
    assert_eq!(
        (swaps[0].bytes_copied, swaps[0].bytes_reconstructed),
        (17 * MIB, 0)
    );
    assert_swapped(dir.path(), parity, &held, "after a swap by copy");
}

/// Ranges the old parity disk does not vouch for come from the grid: its defects when it was replaced, and what it
/// cannot read back (garbage over more than IDR repairs). Everything else is still copied.
#[test]
fn what_the_old_parity_disk_cannot_vouch_for_is_reconstructed() {
    use std::io::{Seek, SeekFrom, Write};
    let dir = tempfile::tempdir().unwrap();
    let (parity, held) = setup(dir.path());
    swap(dir.path(), Some(parity), Some(SwapStep::Replaced)).unwrap_err();
    let swaps = Engine::parity_swaps(dir.path()).unwrap();
    let copy = swaps[0]
        .copy
        .clone()
        .expect("the old parity disk's contents noted");
    assert!(copy.untrusted.is_empty(), "{copy:?}");
    // 512 KiB of garbage on the old parity disk at 5 MiB: its IDR stripes there no longer verify.
    let old = dir.path().join(format!("disks/disk-{parity:02}.img"));
    let mut file = std::fs::OpenOptions::new().write(true).open(&old).unwrap();
    file.seek(SeekFrom::Start(permafrost_engine::HEADER_BYTES + 5 * MIB))
        .unwrap();
    file.write_all(&pattern(98, (MIB / 2) as usize)).unwrap();
    file.sync_all().unwrap();
    drop(file);
    let report = swap(dir.path(), None, None).unwrap();
    assert!(report.resumed);
    assert!(
        report.bytes_reconstructed >= MIB / 2
            && report.bytes_copied >= 15 * MIB
            && report.bytes_copied + report.bytes_reconstructed == 17 * MIB,
        "{report:?}"
    );
    assert_swapped(
        dir.path(),
        parity,
        &held,
        "with garbage on the old parity disk",
    );
}

/// A write between a crash and the resumed swap changes the parity: the old parity disk no longer holds it, so
/// the rest of the new parity is reconstructed from the grid, not copied, and the parity stays clean.
#[test]
fn a_write_between_a_crash_and_the_resume_stops_the_copy() {
    let dir = tempfile::tempdir().unwrap();
    let (parity, mut held) = setup(dir.path());
    swap(dir.path(), Some(parity), Some(SwapStep::Rebuilding)).unwrap_err();
    let left = {
        let engine = Engine::open_paused(dir.path(), OpenOptions::default()).unwrap();
        let bucket = held[0].0;
        let data = pattern(4242, (2 * MIB) as usize);
        write(&engine, bucket, 10 * MIB, &data, WriteMode::Serialized);
        let mut whole = held[0].2.clone();
        whole[(10 * MIB) as usize..(12 * MIB) as usize].copy_from_slice(&data);
        held[0].2 = whole;
        let left = engine.defect_bytes(parity);
        engine.close().unwrap();
        left
    };
    assert!(left > 0);
    let report = swap(dir.path(), None, None).unwrap();
    assert!(report.resumed);
    assert_eq!(report.bytes_copied, 0, "{report:?}");
    assert!(report.bytes_reconstructed > 0, "{report:?}");
    assert_swapped(dir.path(), parity, &held, "with a write before the resume");
}
