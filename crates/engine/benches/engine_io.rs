//! Write throughput and measured I/O amplification per write mode, next to a raw O_DIRECT write of the same
//! bytes to one file and next to the thesis's model (§4.3.4).
//!
//! `cargo bench -p permafrost-engine --bench engine_io -- [--quick] [--dir SCRATCH] [--json OUT]`
//!
//! A grid `8x6:4+1` of sparse file-backed disks (O_DIRECT on file systems that allow it) is created in a
//! scratch directory (default: a temporary directory; give `--dir` on the file system you want to measure,
//! the same one for the raw baseline). Power timings are zero (spin-up is not what is measured) and the
//! background tasks are paused so that `io_stats()` counts only the measured writes.
//!
//! Cases (user bytes `N`, 256 MiB; 64 MiB with `--quick`):
//! - each mode, an append into never-written space (data disk and its three parities fresh): model 4;
//! - each mode, an overwrite of the same range (read-modify-write of data and three parities): model 8;
//! - delayed writes of the same range on all `hn` data disks of one hPG, merged by the drain: model
//!   2·(2·hn + 2·hk)/hn = 5 for 4+1 (the thesis: 4.57 for 7+1);
//! - raw: `N` bytes written with O_DIRECT in 8 MiB requests to one fresh file, then `fdatasync`.
//!
//! Throughput is user bytes per second from `write()` to `commit()` returning (delayed: and to `flush()`
//! returning). Every write of the engine moves its bytes to four files on the same device as the baseline,
//! so an I/O-bound engine reaches at best raw ÷ (physical bytes per user byte); the table prints that
//! "device efficiency" too.

use std::fs::{File, OpenOptions as FsOpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use permafrost_disk::power::PowerProfile;
use permafrost_engine::{Engine, GridConfig, WriteMode};

const MIB: u64 = 1 << 20;
/// Size of one request of the raw baseline and of the engine's appends.
const REQUEST_BYTES: usize = 8 << 20;

struct Args {
    quick: bool,
    dir: Option<PathBuf>,
    json: Option<PathBuf>,
}

fn parse_args() -> Args {
    let mut args = Args {
        quick: false,
        dir: None,
        json: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => args.quick = true,
            "--dir" => args.dir = it.next().map(PathBuf::from),
            "--json" => args.json = it.next().map(PathBuf::from),
            // `cargo bench` passes `--bench`; ignore it and any criterion-style flags.
            _ => {}
        }
    }
    args
}

/// A 4096-aligned buffer of `len` bytes filled with a deterministic pattern (`seed` varies it).
struct Aligned {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    fn pattern(len: usize, seed: u64) -> Aligned {
        let mut storage = vec![0u8; len + 4096];
        let start = storage.as_ptr().align_offset(4096);
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        for word in storage[start..start + len].chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            word.copy_from_slice(&x.to_le_bytes());
        }
        Aligned {
            storage,
            start,
            len,
        }
    }
    fn bytes(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }
}

/// Seconds to write `total_bytes` of `buf` (repeated) with O_DIRECT to a fresh file in `dir`, then fdatasync.
fn raw_direct_write_seconds(dir: &Path, buf: &Aligned, total_bytes: u64) -> std::io::Result<f64> {
    let path = dir.join("raw-baseline.img");
    let _ = std::fs::remove_file(&path);
    let file = FsOpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)?;
    let started = Instant::now();
    let mut at = 0u64;
    while at < total_bytes {
        let n = (total_bytes - at).min(buf.len as u64) as usize;
        file.write_all_at(&buf.bytes()[..n], at)?;
        at += n as u64;
    }
    file.sync_data()?;
    let seconds = started.elapsed().as_secs_f64();
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(seconds)
}

/// Totals of `io_stats()` over all disks, per user byte: (logical read, logical written, physical r + w).
fn amplification(engine: &Engine, user_bytes: u64) -> (f64, f64, f64) {
    let stats = engine.io_stats();
    let sum = |f: fn(&permafrost_engine::IoStats) -> u64| stats.iter().map(f).sum::<u64>() as f64;
    let user = user_bytes as f64;
    (
        sum(|s| s.logical_read_bytes) / user,
        sum(|s| s.logical_written_bytes) / user,
        (sum(|s| s.physical_read_bytes) + sum(|s| s.physical_written_bytes)) / user,
    )
}

/// Append `len` bytes (`buf` repeated) to `bucket` at `offset` in `mode`; seconds until commit returns.
fn write_range(
    engine: &Engine,
    bucket: usize,
    offset: u64,
    len: u64,
    buf: &Aligned,
    mode: WriteMode,
) -> f64 {
    let started = Instant::now();
    let mut promise = engine
        .write(bucket, offset, len, mode)
        .expect("write promise");
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(buf.len as u64) as usize;
        promise.append(&buf.bytes()[..n]).expect("append");
        done += n as u64;
    }
    promise.commit().expect("commit");
    started.elapsed().as_secs_f64()
}

struct Row {
    case: String,
    user_bytes: u64,
    seconds: f64,
    commit_seconds: f64,
    read: f64,
    written: f64,
    physical: f64,
    model: f64,
    thesis: f64,
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn main() {
    let args = parse_args();
    let user_bytes: u64 = if args.quick { 64 * MIB } else { 256 * MIB };
    let merged_bytes = user_bytes / 4;
    let temp;
    let scratch = match &args.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).expect("create the scratch directory");
            dir.clone()
        }
        None => {
            temp = tempfile::tempdir().expect("temporary directory");
            temp.path().to_path_buf()
        }
    };
    let grid_dir = scratch.join("engine-io-grid");
    let _ = std::fs::remove_dir_all(&grid_dir);

    let layout: permafrost_grid::Layout = "8x6:4+1".parse().unwrap();
    // Regions of a bucket: one per mode, then the merged case.
    let disk_bytes = 4 * user_bytes + 64 * MIB;
    let mut config = GridConfig::with_file_disks(layout, disk_bytes);
    config.power = PowerProfile {
        spin_up_ms: 0,
        idle_timeout_ms: 3_600_000,
        ..PowerProfile::default()
    };
    config.spinning_max = layout.disks();
    config.delta_cache_bytes_max = 2 * user_bytes;
    let engine = Engine::create(&grid_dir, config).expect("create the grid");
    engine.pause_background(true);
    let g = engine.geometry().clone();
    let hp_of = |b: usize| g.parity_targets(g.bucket_disk(b)).hp;
    let hpg0: Vec<usize> = (0..engine.buckets())
        .filter(|&b| hp_of(b) == hp_of(0))
        .collect();
    let (hn, hk) = (layout.hn as f64, layout.hk as f64);
    let buf = Aligned::pattern(REQUEST_BYTES, 1);
    let buf2 = Aligned::pattern(REQUEST_BYTES, 2);

    let load_before = load_average();
    let mut rows = Vec::new();
    let raw_seconds =
        raw_direct_write_seconds(&scratch, &buf, user_bytes).expect("raw O_DIRECT write");
    rows.push(Row {
        case: "raw O_DIRECT write, one file".into(),
        user_bytes,
        seconds: raw_seconds,
        commit_seconds: raw_seconds,
        read: 0.0,
        written: 1.0,
        physical: 1.0,
        model: 1.0,
        thesis: 1.0,
    });
    for (i, mode) in [WriteMode::Direct, WriteMode::Serialized, WriteMode::Delayed]
        .into_iter()
        .enumerate()
    {
        // Own bucket and region per mode: data disk and the shared parity disks are fresh there.
        let (bucket, offset) = (hpg0[i], i as u64 * user_bytes);
        for (what, data, model) in [
            ("append, fresh space", &buf, 4.0),
            ("overwrite (RMW)", &buf2, 8.0),
        ] {
            engine.reset_io_stats();
            let commit_seconds = write_range(&engine, bucket, offset, user_bytes, data, mode);
            let flush_started = Instant::now();
            engine.flush().expect("flush");
            let seconds = commit_seconds + flush_started.elapsed().as_secs_f64();
            let (read, written, physical) = amplification(&engine, user_bytes);
            rows.push(Row {
                case: format!("{mode} {what}"),
                user_bytes,
                seconds,
                commit_seconds,
                read,
                written,
                physical,
                model,
                thesis: 8.0,
            });
        }
    }
    // Merged: the same range on every data disk of hPG 0, already written (full read-modify-write).
    let merged_offset = 3 * user_bytes;
    for &bucket in &hpg0 {
        write_range(
            &engine,
            bucket,
            merged_offset,
            merged_bytes,
            &buf,
            WriteMode::Delayed,
        );
    }
    engine.flush().expect("flush");
    engine.reset_io_stats();
    let started = Instant::now();
    for &bucket in &hpg0 {
        write_range(
            &engine,
            bucket,
            merged_offset,
            merged_bytes,
            &buf2,
            WriteMode::Delayed,
        );
    }
    let commit_seconds = started.elapsed().as_secs_f64();
    engine.flush().expect("flush");
    let seconds = started.elapsed().as_secs_f64();
    let merged_user = merged_bytes * hpg0.len() as u64;
    let (read, written, physical) = amplification(&engine, merged_user);
    rows.push(Row {
        case: format!(
            "delayed overwrite of one range on all {} data disks of an hPG, merged",
            hpg0.len()
        ),
        user_bytes: merged_user,
        seconds,
        commit_seconds,
        read,
        written,
        physical,
        model: 2.0 * (2.0 * hn + 2.0 * hk) / hn,
        thesis: 2.0 * (2.0 * 7.0 + 2.0) / 7.0,
    });
    let load_after = load_average();
    let report = engine.verify_parity(&|_, _| {}).expect("verify parity");
    assert_eq!(
        report.mismatches.len(),
        0,
        "parity must verify after the benchmark"
    );
    engine.close().expect("close");
    let _ = std::fs::remove_dir_all(&grid_dir);

    let raw_mb_s = user_bytes as f64 / raw_seconds / 1e6;
    println!("\nwrite throughput and I/O amplification, grid {layout}, load average {load_before} → {load_after}");
    println!(
        "{:<72} {:>8} {:>8} {:>8} {:>6} {:>6} {:>6} {:>8} {:>6} {:>6} {:>7}",
        "case", "MiB", "MB/s", "commit", "÷raw", "read", "write", "r+w", "model", "thesis", "phys",
    );
    let mut json_rows = Vec::new();
    for r in &rows {
        let mb_s = r.user_bytes as f64 / r.seconds / 1e6;
        let commit_mb_s = r.user_bytes as f64 / r.commit_seconds / 1e6;
        // Device bytes per second relative to the raw write (1.0 = the engine keeps the device as busy as raw).
        let efficiency = mb_s * r.physical / raw_mb_s;
        println!(
            "{:<72} {:>8} {:>8.0} {:>8.0} {:>6.3} {:>6.2} {:>6.2} {:>8.2} {:>6.2} {:>6.2} {:>7.2}",
            r.case,
            r.user_bytes / MIB,
            mb_s,
            commit_mb_s,
            mb_s / raw_mb_s,
            r.read,
            r.written,
            r.read + r.written,
            r.model,
            r.thesis,
            r.physical,
        );
        json_rows.push(serde_json::json!({
            "case": r.case, "user_bytes": r.user_bytes, "seconds": r.seconds, "commit_seconds": r.commit_seconds,
            "mb_per_s": mb_s, "commit_mb_per_s": commit_mb_s, "ratio_to_raw": mb_s / raw_mb_s,
            "logical_read_per_user_byte": r.read, "logical_written_per_user_byte": r.written,
            "logical_io_per_user_byte": r.read + r.written, "model": r.model, "thesis": r.thesis,
            "physical_io_per_user_byte": r.physical, "device_efficiency": efficiency,
        }));
    }
    println!(
        "(MB/s: user bytes until commit, delayed: until flush; commit: until commit only; read/write/r+w: logical \
         bytes per user byte; phys: device bytes per user byte incl. IDR; device efficiency = MB/s × phys ÷ raw)"
    );
    for r in &rows[1..] {
        let mb_s = r.user_bytes as f64 / r.seconds / 1e6;
        println!(
            "device efficiency {:<60} {:.2}",
            r.case,
            mb_s * r.physical / raw_mb_s
        );
    }
    if let Some(path) = args.json {
        let doc = serde_json::json!({
            "layout": layout.to_string(), "load_average_before": load_before, "load_average_after": load_after,
            "raw_mb_per_s": raw_mb_s, "rows": json_rows,
        });
        let mut file = File::create(&path).expect("create the JSON output");
        writeln!(file, "{}", serde_json::to_string_pretty(&doc).unwrap())
            .expect("write the JSON output");
    }
}
