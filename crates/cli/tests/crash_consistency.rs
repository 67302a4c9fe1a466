//! Crash consistency: a child `permafrost grid soak` writing in each mode is killed with SIGKILL
//! at random moments; after restart and replay every committed write reads back exact and
//! `verify-parity` reports zero mismatches.
//!
//! Short variant (always on): `CRASHES_PER_MODE` kills per mode. `PERMAFROST_CRASHES` raises it.

#[path = "../src/pattern.rs"]
mod pattern;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use permafrost_engine::{Engine, WriteMode};
use rand::{Rng, SeedableRng};

const CRASHES_PER_MODE: usize = 50;
const REGION_BYTES: u64 = 128 << 10;

fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_permafrost")
}

fn init_grid(dir: &Path, mode: WriteMode) {
    let status = Command::new(binary())
        .args([
            "grid",
            "init",
            "--layout",
            "8x6:4+1",
            "--disk-size",
            "12MiB",
            "--spin-up-ms",
            "2",
            "--idle-timeout-ms",
            "200",
        ])
        .arg("--mode")
        .arg(mode.to_string())
        .arg("--dir")
        .arg(dir)
        .status()
        .expect("run permafrost grid init");
    assert!(status.success(), "grid init failed");
}

/// One crash: start a soak writer, kill -9 it after `kill_after`, return the commits it printed.
fn soak_and_kill(
    dir: &Path,
    mode: WriteMode,
    seed: u64,
    start: u64,
    kill_after: Duration,
) -> Vec<(usize, u64, u64)> {
    let mut child = Command::new(binary())
        .args([
            "grid", "soak", "--writes", "10000", "--chunk", "64KiB", "--region", "128KiB",
        ])
        .arg("--dir")
        .arg(dir)
        .arg("--mode")
        .arg(mode.to_string())
        .arg("--seed")
        .arg(seed.to_string())
        .arg("--start")
        .arg(start.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn soak writer");
    let stdout = child.stdout.take().expect("stdout");
    let (sender, receiver) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() == 4 && fields[0] == "committed" {
                let commit = (
                    fields[1].parse().unwrap(),
                    fields[2].parse().unwrap(),
                    fields[3].parse().unwrap(),
                );
                if sender.send(commit).is_err() {
                    break;
                }
            }
        }
    });
    std::thread::sleep(kill_after);
    // SIGKILL (Child::kill sends SIGKILL on Unix): no destructor, no flush, no close.
    let _ = child.kill();
    let status = child.wait().expect("wait for soak writer");
    reader.join().expect("reader thread");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .ok();
    assert!(
        status.code().is_none() || status.success(),
        "soak writer failed on its own (not killed): {status:?}\n{stderr}"
    );
    receiver.try_iter().collect()
}

fn crash_mode(mode: WriteMode, crashes: usize, seed: u64) {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("grid");
    init_grid(&dir, mode);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut committed: Vec<(u64, usize, u64, u64)> = Vec::new(); // (seed, bucket, offset, len)
    for crash in 0..crashes {
        let run_seed = rng.gen::<u64>();
        let start = crash as u64 * REGION_BYTES;
        let kill_after = Duration::from_millis(rng.gen_range(20..400));
        let commits = soak_and_kill(&dir, mode, run_seed, start, kill_after);
        committed.extend(
            commits
                .into_iter()
                .map(|(bucket, offset, len)| (run_seed, bucket, offset, len)),
        );

        // Restart: open replays the journal. Every committed chunk so far must read back exact.
        let engine = Engine::open(&dir).unwrap_or_else(|e| {
            panic!("mode {mode} crash {crash} (seed {seed}): open failed: {e}")
        });
        for &(run_seed, bucket, offset, len) in &committed {
            let mut got = vec![0u8; len as usize];
            let mut promise = engine.read(bucket, offset, len).unwrap_or_else(|e| {
                panic!(
                    "mode {mode} crash {crash} (seed {seed}): read bucket {bucket} @ {offset}: {e}"
                )
            });
            promise.read_exact(&mut got).unwrap_or_else(|e| {
                panic!(
                    "mode {mode} crash {crash} (seed {seed}): read bucket {bucket} @ {offset}: {e}"
                )
            });
            let want = pattern::pattern_bytes(run_seed, bucket, offset, len as usize);
            assert!(got == want, "mode {mode} crash {crash} (seed {seed}): committed chunk bucket {bucket} @ {offset} differs after replay");
        }
        let report = engine.verify_parity(&|_, _| {}).unwrap();
        assert!(
            report.mismatches.is_empty(),
            "mode {mode} crash {crash} (seed {seed}): verify-parity found mismatches {:?}",
            report.mismatches
        );
        engine.close().unwrap();
    }
    assert!(
        committed.len() > crashes,
        "the writer committed too little to mean anything: {}",
        committed.len()
    );
    println!(
        "mode {mode}: {crashes} SIGKILLs, {} committed chunks verified after replay",
        committed.len()
    );
}

fn crashes() -> usize {
    std::env::var("PERMAFROST_CRASHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CRASHES_PER_MODE)
}

#[test]
fn committed_serialized_writes_survive_sigkill() {
    crash_mode(WriteMode::Serialized, crashes(), 0x5e51);
}

#[test]
fn committed_direct_writes_survive_sigkill() {
    crash_mode(WriteMode::Direct, crashes(), 0xd1ec);
}

#[test]
fn committed_delayed_writes_survive_sigkill() {
    crash_mode(WriteMode::Delayed, crashes(), 0xde1a);
}
