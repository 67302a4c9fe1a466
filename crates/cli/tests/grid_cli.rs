//! The `permafrost grid` operator CLI through the real binary, every subcommand with `--json` and its output
//! parsed: init, write, flush, read (byte-exact, also degraded), status (per-disk power and energy), fail, replace,
//! rebuild, scrub (all disks, one disk, overdue ranges), verify-parity (exit 0 when clean; exit 2 naming the
//! parity disk and group after a parity disk's data area is overwritten behind the engine's back; clean again
//! after the operator's repair: fail, replace and rebuild that disk) and soak.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use permafrost_disk::power::{PowerProfile, PowerState};
use permafrost_disk::FileDisk;
use permafrost_grid::Geometry;
use permafrost_idr::{IdrConfig, IdrDisk};
use rand::{RngCore, SeedableRng};
use serde_json::Value;

fn permafrost(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_permafrost"))
        .arg("grid")
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .expect("run permafrost")
}

/// Run a subcommand that must succeed and print one JSON document on stdout.
fn json(dir: &Path, args: &[&str]) -> Value {
    let output = permafrost(dir, args);
    assert!(
        output.status.success(),
        "grid {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    parse(&output, args)
}

fn parse(output: &Output, args: &[&str]) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "grid {args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

fn random(seed: u64, len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    rand_chacha::ChaCha8Rng::seed_from_u64(seed).fill_bytes(&mut bytes);
    bytes
}

fn read_stdout(dir: &Path, bucket: usize, offset: u64, len: u64) -> Vec<u8> {
    let args = [
        "read",
        "--bucket",
        &bucket.to_string(),
        "--offset",
        &offset.to_string(),
        "--length",
        &len.to_string(),
    ];
    let output = permafrost(dir, &args);
    assert!(
        output.status.success(),
        "grid {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

fn verify_parity(dir: &Path) -> (Option<i32>, Value) {
    let args = ["verify-parity", "--json"];
    let output = permafrost(dir, &args);
    (output.status.code(), parse(&output, &args))
}

fn assert_parity_clean(dir: &Path, context: &str) {
    let (code, report) = verify_parity(dir);
    assert_eq!(code, Some(0), "{context}: verify-parity exit code");
    assert_eq!(report["mismatches"], serde_json::json!([]), "{context}");
    assert_eq!(report["groups_skipped"], 0, "{context}");
    assert!(report["bytes_checked"].as_u64().unwrap() > 0, "{context}");
}

fn disk_status(status: &Value, disk: usize) -> &Value {
    &status["disks"][disk]
}

#[test]
fn every_grid_subcommand_works_and_speaks_json() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("grid");
    let init = json(
        &dir,
        &[
            "init",
            "--layout",
            "8x6:4+1",
            "--disk-size",
            "4MiB",
            "--spin-up-ms",
            "1",
            "--idle-timeout-ms",
            "50",
            "--mode",
            "serialized",
            "--json",
        ],
    );
    assert_eq!(init["disks"], 48);
    assert_eq!(init["buckets"], 32);
    let capacity = init["bucket_capacity_bytes"].as_u64().unwrap();
    assert_eq!(capacity, 2 << 20);
    let geometry = Geometry::new("8x6:4+1".parse().unwrap()).unwrap();

    // Write: a serialized write to bucket 3 (its length not a multiple of 4096: padded with zeros) and a delayed
    // one to bucket 7, whose parity deltas stay pending until a flush.
    let data3 = random(3, (1 << 20) + 1000);
    let mut padded3 = data3.clone();
    padded3.resize(data3.len().next_multiple_of(4096), 0);
    std::fs::write(temp.path().join("in3"), &data3).unwrap();
    let in3 = temp.path().join("in3").display().to_string();
    let written = json(
        &dir,
        &[
            "write", "--bucket", "3", "--offset", "0", "--input", &in3, "--json",
        ],
    );
    assert_eq!(written["bytes"], padded3.len() as u64);
    assert_eq!(written["mode"], "serialized");
    let data7 = random(7, 512 << 10);
    std::fs::write(temp.path().join("in7"), &data7).unwrap();
    let in7 = temp.path().join("in7").display().to_string();
    let written = json(
        &dir,
        &[
            "write", "--bucket", "7", "--offset", "1MiB", "--input", &in7, "--mode", "delayed",
            "--json",
        ],
    );
    assert_eq!(written["mode"], "delayed");
    let flushed = json(&dir, &["flush", "--json"]);
    assert!(
        flushed["applied_delta_bytes"].as_u64().unwrap() > 0,
        "{flushed}"
    );
    assert_eq!(flushed["pending_delta_bytes"], 0);

    // Read: to a file with a JSON report, and to stdout; both byte-exact.
    let out3 = temp.path().join("out3");
    let length3 = padded3.len().to_string();
    let read = json(
        &dir,
        &[
            "read",
            "--bucket",
            "3",
            "--offset",
            "0",
            "--length",
            &length3,
            "--output",
            &out3.display().to_string(),
            "--json",
        ],
    );
    assert_eq!(read["bytes"], padded3.len() as u64);
    assert!(std::fs::read(&out3).unwrap() == padded3, "bucket 3 differs");
    assert!(
        read_stdout(&dir, 7, 1 << 20, data7.len() as u64) == data7,
        "bucket 7 differs"
    );

    // Status: per-disk power and energy accumulate over the processes that opened the grid.
    let status = json(&dir, &["status", "--json"]);
    assert_eq!(status["disks"].as_array().unwrap().len(), 48);
    let data_disk = geometry.bucket_disk(3);
    let targets = geometry.parity_targets(data_disk);
    let profile = PowerProfile::default();
    let touched: Vec<usize> = [3, 7]
        .iter()
        .flat_map(|&bucket| {
            let disk = geometry.bucket_disk(bucket);
            let t = geometry.parity_targets(disk);
            [disk, t.hp, t.vp, t.vhp]
        })
        .collect();
    for disk in 0..48 {
        let power = &disk_status(&status, disk)["power"];
        let spin_ups = power["spin_ups"].as_u64().unwrap();
        let joules = power["joules"].as_f64().unwrap();
        let ms: Vec<f64> = power["ms_in_state"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        // Energy is the time in each state times its draw.
        let expected: f64 = [
            PowerState::Off,
            PowerState::SpinningUp,
            PowerState::Idle,
            PowerState::Active,
        ]
        .iter()
        .map(|&state| ms[state.index()] / 1000.0 * profile.watts(state))
        .sum();
        assert!(
            (joules - expected).abs() <= 1e-6 * expected.max(1.0),
            "disk {disk}: {joules} J, its states say {expected} J"
        );
        if touched.contains(&disk) {
            assert!(
                spin_ups >= 1 && joules > 0.0,
                "disk {disk} was written: {power}"
            );
        } else {
            assert_eq!(spin_ups, 0, "disk {disk} was never used: {power}");
        }
    }
    assert!(
        disk_status(&status, data_disk)["written_bytes"]
            .as_u64()
            .unwrap()
            >= padded3.len() as u64
    );
    assert_eq!(disk_status(&status, data_disk)["role"]["data"]["bucket"], 3);

    // Verify-parity and scrub: clean.
    assert_parity_clean(&dir, "after the writes");
    let scrub = json(&dir, &["scrub", "--json"]);
    let rows = scrub.as_array().unwrap();
    assert_eq!(rows.len(), 48);
    for row in rows {
        assert_eq!(row["blocks_repaired"], 0, "{row}");
        assert_eq!(row["unrecoverable"], serde_json::json!([]), "{row}");
    }
    let verified: u64 = rows
        .iter()
        .map(|r| r["bytes_verified"].as_u64().unwrap())
        .sum();
    assert!(verified > 0);
    let one = json(&dir, &["scrub", "--disk", &data_disk.to_string(), "--json"]);
    assert_eq!(one.as_array().unwrap().len(), 1);
    assert_eq!(one[0]["disk"], data_disk);
    assert!(one[0]["bytes_verified"].as_u64().unwrap() >= padded3.len() as u64);
    // Overdue ranges: everything is older than 0 hours; right after, nothing is older than an hour.
    let overdue = json(&dir, &["scrub", "--overdue-hours", "0", "--json"]);
    assert!(
        !overdue["ranges"].as_array().unwrap().is_empty(),
        "{overdue}"
    );
    assert!(overdue["bytes_verified"].as_u64().unwrap() >= padded3.len() as u64);
    let overdue = json(&dir, &["scrub", "--overdue-hours", "1", "--json"]);
    assert_eq!(overdue["ranges"], serde_json::json!([]), "{overdue}");

    // Overwrite the hP of bucket 3 behind the engine's back with data IDR accepts (it is re-encoded): only the
    // parity check can see it. verify-parity exits 2 and names the disk.
    let hp = targets.hp;
    {
        let path = dir.join(format!("disks/disk-{hp:02}.img"));
        let disk = Arc::new(FileDisk::open(&path).unwrap());
        let idr =
            IdrDisk::new(disk, permafrost_engine::HEADER_BYTES, IdrConfig::default()).unwrap();
        idr.write(64 << 10, &random(99, 64 << 10)).unwrap();
        idr.sync().unwrap();
    }
    let (code, report) = verify_parity(&dir);
    assert_eq!(
        code,
        Some(2),
        "verify-parity must fail on a corrupted parity disk: {report}"
    );
    // Both groups the disk belongs to disagree: its own hPG (named by the disk itself) and its column, whose vP
    // no longer matches this member.
    let column = geometry.column(hp);
    let column_vp = geometry.group_parity(permafrost_grid::GroupId::Vertical(column));
    let hpg = match geometry.role(hp) {
        permafrost_grid::Role::HParity { hpg } => hpg,
        role => panic!("disk {hp} is {role:?}"),
    };
    let mismatches: Vec<(u64, String, u64, u64)> = report["mismatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["parity_disk"].as_u64().unwrap(),
                m["group"].as_str().unwrap().to_string(),
                m["offset"].as_u64().unwrap(),
                m["len"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        mismatches,
        vec![
            (hp as u64, format!("hPG {hpg}"), 64 << 10, 64 << 10),
            (
                column_vp as u64,
                format!("vPG {column}"),
                64 << 10,
                64 << 10
            ),
        ],
        "{report}"
    );

    // The repair: fail the disk, replace it by a fresh one, rebuild it from its group.
    let failed = json(&dir, &["fail", "--disk", &hp.to_string(), "--json"]);
    assert_eq!(failed["failed"], true);
    assert_eq!(
        disk_status(&json(&dir, &["status", "--json"]), hp)["failed"],
        true
    );
    let (code, report) = verify_parity(&dir);
    assert_eq!(code, Some(0), "{report}");
    assert!(
        report["groups_skipped"].as_u64().unwrap() > 0,
        "a failed member's groups are skipped"
    );
    let replaced = json(&dir, &["replace", "--disk", &hp.to_string(), "--json"]);
    assert_eq!(replaced["replaced"], true);
    assert!(
        replaced["defect_bytes"].as_u64().unwrap() >= padded3.len() as u64,
        "{replaced}"
    );
    let rebuilt = json(&dir, &["rebuild", "--disk", &hp.to_string(), "--json"]);
    assert_eq!(rebuilt["disk"], hp);
    // (The background recovery of the `replace` process may have recovered part of it already.)
    assert!(rebuilt["report"]["bytes_recovered"].is_u64(), "{rebuilt}");
    assert_eq!(rebuilt["report"]["unrecoverable"], serde_json::json!([]));
    let status = json(&dir, &["status", "--json"]);
    assert_eq!(disk_status(&status, hp)["failed"], false);
    assert_eq!(disk_status(&status, hp)["defect_bytes"], 0);
    assert_parity_clean(&dir, "after rebuilding the corrupted hP");

    // A failed data disk: its bucket reads back exact from the grid, and a rebuild restores it.
    let disk7 = geometry.bucket_disk(7);
    json(&dir, &["fail", "--disk", &disk7.to_string(), "--json"]);
    assert!(
        read_stdout(&dir, 7, 1 << 20, data7.len() as u64) == data7,
        "degraded read differs"
    );
    json(&dir, &["replace", "--disk", &disk7.to_string(), "--json"]);
    let rebuilt = json(&dir, &["rebuild", "--disk", &disk7.to_string(), "--json"]);
    assert_eq!(rebuilt["report"]["unrecoverable"], serde_json::json!([]));
    let status = json(&dir, &["status", "--json"]);
    assert_eq!(disk_status(&status, disk7)["failed"], false);
    assert_eq!(disk_status(&status, disk7)["defect_bytes"], 0);
    assert_parity_clean(&dir, "after rebuilding bucket 7's disk");
    assert!(
        read_stdout(&dir, 7, 1 << 20, data7.len() as u64) == data7,
        "rebuilt bucket 7 differs"
    );

    // soak (the crash test's writer), bounded here: one JSON object per write and per commit.
    let output = permafrost(
        &dir,
        &[
            "soak", "--mode", "direct", "--seed", "5", "--writes", "3", "--start", "0", "--region",
            "128KiB", "--bucket", "9", "--json",
        ],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let events: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "writing",
            "committed",
            "writing",
            "committed",
            "writing",
            "committed"
        ]
    );
    assert_eq!(
        events[4]["generation"], 1,
        "the third write wraps around: {events:?}"
    );
    assert_eq!(events[4]["offset"], 0);
    assert_parity_clean(&dir, "after the soak");
}
