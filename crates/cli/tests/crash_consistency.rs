//! Crash consistency: a child `permafrost grid soak` writing in each mode is killed with SIGKILL in the middle
//! of a write; after restart and replay every committed write reads back exact, the one write in flight reads
//! without error, and `verify_parity` reports zero mismatches and zero skipped groups.
//!
//! The writer never stops on its own: it prints `writing …` before each write and `committed …` after each commit
//! (the commit together with the next write's start), so from its first write on exactly one write is in flight
//! and the test knows which. Each run writes one bucket's region of four chunks, wrapping around to overwrite it with
//! the next generation of the pattern; half the runs take a fresh region (appends into never-written space), half
//! a region earlier runs wrote (overwrites of data committed before a crash and replay). Every third crash a second
//! child is killed while it opens the grid, that is while it replays the journal.
//!
//! `CRASHES_PER_MODE` kills per mode; `PERMAFROST_CRASHES` raises it.

#[path = "../src/pattern.rs"]
mod pattern;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use permafrost_engine::{Engine, WriteMode};
use rand::{Rng, SeedableRng};

const CRASHES_PER_MODE: usize = 50;
const CHUNK_BYTES: u64 = 64 << 10;
/// One bucket's region per run: four chunks, then the writer wraps around and overwrites.
const REGION_BYTES: u64 = 4 * CHUNK_BYTES;
/// Regions available per bucket (the 12 MiB disks hold 10 MiB buckets).
const REGIONS: u64 = 32;
/// The kill comes this long after the writer started its first write.
const KILL_AFTER_MS: std::ops::Range<u64> = 1..300;
const SIGKILL: i32 = 9;

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
            "--json",
        ])
        .arg("--mode")
        .arg(mode.to_string())
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .status()
        .expect("run permafrost grid init");
    assert!(status.success(), "grid init failed");
}

/// One chunk write of the soak writer, as it printed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Chunk {
    bucket: usize,
    offset: u64,
    len: u64,
    generation: u64,
}

/// What the test knows a chunk of a bucket holds.
#[derive(Debug, Clone, Copy)]
enum Content {
    /// Committed by the run seeded `seed`: must read back exact.
    Committed { seed: u64, generation: u64 },
    /// In flight when its writer was killed (old data, new data or, for direct writes, a mix): must read
    /// without error.
    Unknown,
}

/// What one killed writer did.
struct Run {
    commits: Vec<Chunk>,
    /// The write in flight when the kill landed.
    in_flight: Option<Chunk>,
    /// From spawn to the first `writing` line: opening the grid, including replay.
    open_time: Duration,
}

fn parse_line(line: &str) -> Option<(String, Chunk)> {
    let value: serde_json::Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("soak printed a line that is not JSON ({e}): {line}"));
    let field = |name: &str| {
        value[name]
            .as_u64()
            .unwrap_or_else(|| panic!("soak line without {name}: {line}"))
    };
    Some((
        value["event"].as_str()?.to_string(),
        Chunk {
            bucket: field("bucket") as usize,
            offset: field("offset"),
            len: field("len"),
            generation: field("generation"),
        },
    ))
}

/// Start a soak writer on one bucket's region, SIGKILL it `kill_after` after its first write started, and return
/// what it printed.
fn soak_and_kill(
    dir: &Path,
    mode: WriteMode,
    seed: u64,
    bucket: usize,
    start: u64,
    kill_after: Duration,
    context: &str,
) -> Run {
    let spawned = Instant::now();
    let mut child = Command::new(binary())
        .args(["grid", "soak", "--json"])
        .arg("--dir")
        .arg(dir)
        .arg("--mode")
        .arg(mode.to_string())
        .arg("--seed")
        .arg(seed.to_string())
        .arg("--chunk")
        .arg(CHUNK_BYTES.to_string())
        .arg("--region")
        .arg(REGION_BYTES.to_string())
        .arg("--start")
        .arg(start.to_string())
        .arg("--bucket")
        .arg(bucket.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn soak writer");
    let stdout = child.stdout.take().expect("stdout");
    let (sender, receiver) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(event) = parse_line(&line) {
                if sender.send((Instant::now(), event)).is_err() {
                    break;
                }
            }
        }
    });
    // The clock starts at the first write: the kill never lands while the writer is still opening the grid.
    let first = receiver.recv_timeout(Duration::from_secs(60));
    if first.is_ok() {
        std::thread::sleep(kill_after);
    }
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
    assert_eq!(
        status.signal(),
        Some(SIGKILL),
        "{context}: the soak writer was not killed by SIGKILL but ended on its own: {status:?}\n{stderr}"
    );
    let (first_at, first_event) = first.unwrap_or_else(|e| {
        panic!("{context}: the soak writer never started a write ({e}):\n{stderr}")
    });
    let mut run = Run {
        commits: Vec::new(),
        in_flight: None,
        open_time: first_at - spawned,
    };
    for (_, (event, chunk)) in std::iter::once((first_at, first_event)).chain(receiver.try_iter()) {
        match event.as_str() {
            "writing" => {
                assert!(
                    run.in_flight.is_none(),
                    "{context}: two writes in flight: {:?} and {chunk:?}",
                    run.in_flight
                );
                run.in_flight = Some(chunk);
            }
            "committed" => {
                assert_eq!(
                    run.in_flight.take(),
                    Some(chunk),
                    "{context}: a commit of a write that was not in flight"
                );
                run.commits.push(chunk);
            }
            other => panic!("{context}: unknown soak event {other:?}"),
        }
    }
    run
}

/// Start a child that opens the grid (replaying the journal the killed writer left) and SIGKILL it after
/// `kill_after`. Returns whether the kill landed before the child had opened the grid and printed its status.
fn kill_while_opening(dir: &Path, kill_after: Duration, context: &str) -> bool {
    let mut child = Command::new(binary())
        .args(["grid", "status", "--json"])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn grid status");
    std::thread::sleep(kill_after);
    let _ = child.kill();
    let status = child.wait().expect("wait for grid status");
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).ok();
    assert!(
        status.signal() == Some(SIGKILL) || status.success(),
        "{context}: grid status failed on its own: {status:?}"
    );
    status.signal() == Some(SIGKILL) && out.is_empty()
}

fn read_chunk(engine: &Engine, bucket: usize, offset: u64, len: u64) -> Result<Vec<u8>, String> {
    let mut got = vec![0u8; len as usize];
    let mut promise = engine
        .read(bucket, offset, len)
        .map_err(|e| e.to_string())?;
    promise.read_exact(&mut got).map_err(|e| e.to_string())?;
    Ok(got)
}

fn crash_mode(mode: WriteMode, crashes: usize, seed: u64) {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("grid");
    init_grid(&dir, mode);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut contents: BTreeMap<(usize, u64), Content> = BTreeMap::new();
    let mut fresh_regions = 0u64;
    let (mut commits, mut appends_crashed, mut overwrites_crashed) = (0, 0, 0);
    let (mut replay_kills, mut replay_kills_early) = (0, 0);
    for crash in 0..crashes {
        let context = format!("mode {mode} crash {crash} (seed {seed:#x})");
        let run_seed = rng.gen::<u64>();
        let bucket = rng.gen_range(0..32);
        let region = if fresh_regions == 0 || (fresh_regions < REGIONS && rng.gen_bool(0.5)) {
            fresh_regions += 1;
            fresh_regions - 1
        } else {
            rng.gen_range(0..fresh_regions)
        };
        let kill_after = Duration::from_millis(rng.gen_range(KILL_AFTER_MS));
        let run = soak_and_kill(
            &dir,
            mode,
            run_seed,
            bucket,
            region * REGION_BYTES,
            kill_after,
            &context,
        );
        for chunk in &run.commits {
            contents.insert(
                (chunk.bucket, chunk.offset),
                Content::Committed {
                    seed: run_seed,
                    generation: chunk.generation,
                },
            );
        }
        commits += run.commits.len();
        let in_flight = run
            .in_flight
            .unwrap_or_else(|| panic!("{context}: the kill landed with no write in flight"));
        match contents.insert((in_flight.bucket, in_flight.offset), Content::Unknown) {
            None => appends_crashed += 1,
            Some(_) => overwrites_crashed += 1,
        }
        if crash % 3 == 2 {
            replay_kills += 1;
            let open_ms = run.open_time.as_millis().max(2) as u64;
            let kill_after = Duration::from_millis(rng.gen_range(1..open_ms));
            if kill_while_opening(&dir, kill_after, &context) {
                replay_kills_early += 1;
            }
        }

        // Restart: open replays the journal. Every committed chunk so far reads back exact, the ones that were in
        // flight read without error.
        let engine = Engine::open(&dir).unwrap_or_else(|e| panic!("{context}: open failed: {e}"));
        for (&(bucket, offset), content) in &contents {
            let got = read_chunk(&engine, bucket, offset, CHUNK_BYTES).unwrap_or_else(|e| {
                panic!("{context}: read of bucket {bucket} @ {offset} ({content:?}): {e}")
            });
            if let Content::Committed { seed, generation } = *content {
                let want = pattern::pattern_bytes(
                    pattern::generation_seed(seed, generation),
                    bucket,
                    offset,
                    CHUNK_BYTES as usize,
                );
                assert!(
                    got == want,
                    "{context}: committed chunk bucket {bucket} @ {offset} generation {generation} differs after replay"
                );
            }
        }
        let report = engine.verify_parity(&|_, _| {}).unwrap();
        assert!(
            report.mismatches.is_empty() && report.groups_skipped == 0,
            "{context}: verify-parity found mismatches {:?}, skipped {} groups",
            report.mismatches,
            report.groups_skipped
        );
        engine.close().unwrap();
    }
    println!(
        "mode {mode}: {crashes} SIGKILLs mid-write ({appends_crashed} appends, {overwrites_crashed} overwrites), \
         {commits} commits, {} chunks checked after the last replay; {replay_kills} children killed while opening \
         ({replay_kills_early} before they had opened)",
        contents.len()
    );
    // The workload must crash both kinds of writes, or the test would check less than it says.
    let floor = (crashes / 25).max(1);
    assert!(
        appends_crashed >= floor && overwrites_crashed >= floor,
        "too few appends ({appends_crashed}) or overwrites ({overwrites_crashed}) were crashed"
    );
    assert!(
        commits >= crashes / 5,
        "the writers committed too little to mean anything: {commits}"
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
