//! Bad input fails with a clear message naming what was wrong, through the real binary:
//! an invalid layout, a missing disk (runs degraded), a disk of the wrong size, a corrupt journal, a bad power
//! control, a catalog database URL that leads nowhere.

use std::path::Path;
use std::process::{Command, Output};

fn permafrost(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_permafrost"))
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .expect("run permafrost")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn init(dir: &Path) {
    let output = permafrost(
        &[
            "grid",
            "init",
            "--layout",
            "8x6:4+1",
            "--disk-size",
            "8MiB",
            "--spin-up-ms",
            "1",
            "--idle-timeout-ms",
            "100",
        ],
        dir,
    );
    assert!(output.status.success(), "init failed: {}", stderr(&output));
}

#[test]
fn an_invalid_layout_is_refused_with_the_rule_it_breaks() {
    let temp = tempfile::tempdir().unwrap();
    let output = permafrost(
        &["grid", "init", "--layout", "4x6:4+1", "--disk-size", "8MiB"],
        &temp.path().join("g"),
    );
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(
        message.contains("4x6:4+1") && message.contains("hn + hk"),
        "unclear error: {message}"
    );
    assert!(!message.contains("panicked"), "{message}");
}

#[test]
fn a_missing_disk_runs_degraded_and_a_wrong_size_disk_is_named() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("g");
    init(&dir);
    std::fs::remove_file(dir.join("disks/disk-07.img")).unwrap();
    let output = permafrost(&["grid", "status", "--json"], &dir);
    assert!(
        output.status.success(),
        "a missing disk must not stop the grid: {}",
        stderr(&output)
    );
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        status["disks"][7]["failed"], true,
        "the missing disk is reported failed"
    );

    std::fs::write(dir.join("disks/disk-07.img"), vec![0u8; 4 << 20]).unwrap();
    let output = permafrost(&["grid", "status"], &dir);
    assert!(
        !output.status.success(),
        "a wrong-size disk must be refused"
    );
    let message = stderr(&output);
    assert!(
        message.contains("disk-07.img") && message.contains("size"),
        "unclear error: {message}"
    );
}

#[test]
fn a_corrupt_journal_is_reported_not_a_crash() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("g");
    init(&dir);
    for name in ["journal.sqlite-wal", "journal.sqlite-shm"] {
        let _ = std::fs::remove_file(dir.join(name));
    }
    std::fs::write(
        dir.join("journal.sqlite"),
        b"this is not a journal, it was overwritten by mistake".repeat(200),
    )
    .unwrap();
    let output = permafrost(&["grid", "status"], &dir);
    assert!(
        !output.status.success(),
        "a corrupt journal must not be used"
    );
    let message = stderr(&output);
    assert!(
        message.contains("journal"),
        "the error must name the journal: {message}"
    );
    assert!(!message.contains("panicked"), "{message}");
}

#[test]
fn a_bad_power_control_is_refused_before_any_drive_is_touched() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("g");
    let mut args = vec!["grid", "init", "--layout", "8x6:4+1"];
    for _ in 0..48 {
        args.extend(["--device", "/dev/null"]);
    }
    let mut unknown = args.clone();
    unknown.extend(["--power-control", "smart"]);
    let message = stderr(&permafrost(&unknown, &dir));
    assert!(
        message.contains("unknown power control \"smart\""),
        "unclear error: {message}"
    );
    let mut two = args.clone();
    two.extend(["--power-control", "hdparm", "--power-control", "scsi"]);
    let output = permafrost(&two, &dir);
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(
        message.contains("2 power controls for 48 devices"),
        "unclear error: {message}"
    );
    assert!(!dir.join("grid.toml").exists(), "nothing was created");
}

/// `permafrost serve` on a data directory whose `[catalog] url` names no usable PostgreSQL.
fn serve_with_catalog_url(url: &str) -> Output {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(
        data.join("permafrost.toml"),
        format!("[server]\nlisten = \"127.0.0.1:0\"\n\n[catalog]\nurl = \"{url}\"\n"),
    )
    .unwrap();
    Command::new(env!("CARGO_BIN_EXE_permafrost"))
        .args(["serve", "--data-dir"])
        .arg(&data)
        .output()
        .expect("run permafrost")
}

#[test]
fn an_unreachable_catalog_database_is_named_at_start_without_its_password() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let started = std::time::Instant::now();
    let output = serve_with_catalog_url(&format!("postgresql://me:hunter2@127.0.0.1:{port}/db"));
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(
        message.contains(&format!("postgresql://me@127.0.0.1:{port}/db"))
            && message.contains("cannot connect"),
        "unclear error: {message}"
    );
    assert!(
        !message.contains("hunter2"),
        "shows the password: {message}"
    );
    assert!(!message.contains("panicked"), "{message}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));

    let output = serve_with_catalog_url("mysql://me:hunter2@127.0.0.1/db");
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(
        message.contains("mysql://me@127.0.0.1/db") && message.contains("postgresql://"),
        "unclear error: {message}"
    );
    assert!(
        !message.contains("hunter2"),
        "shows the password: {message}"
    );
}
