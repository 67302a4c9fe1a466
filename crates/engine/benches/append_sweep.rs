//! One sequential append into fresh space (what persistence does for a new dataset), swept over the write mode,
//! the engine chunk size and the chunks in flight, next to a raw O_DIRECT write measured in the same run.
//!
//! `cargo bench -p permafrost-engine --bench append_sweep -- [--mib N] [--dir SCRATCH] [--modes serialized,direct]
//!  [--chunk-mib 8,32] [--in-flight 1,3,6]`
//!
//! For each case a fresh grid `8x6:4+1` of sparse file-backed disks is created in `SCRATCH` (same file system as
//! the baseline), `N` MiB (default 256) are appended to bucket 0 with `WritePromise::with_chunks_in_flight`, and
//! the result is given against the device-bound limit: raw O_DIRECT MB/s ÷ device bytes written per user byte
//! (IDR included), i.e. how busy the engine keeps the device compared with one O_DIRECT stream (goal ≥ 0.8).

use std::fs::OpenOptions as FsOpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use permafrost_disk::power::PowerProfile;
use permafrost_engine::{Engine, GridConfig, WriteMode};

const MIB: u64 = 1 << 20;
const REQUEST_BYTES: usize = 8 << 20;

fn list<T: std::str::FromStr>(s: &str) -> Vec<T> {
    s.split(',').filter_map(|x| x.trim().parse().ok()).collect()
}

fn pattern(len: usize, seed: u64) -> (Vec<u8>, usize) {
    let mut storage = vec![0u8; len + 4096];
    let start = storage.as_ptr().align_offset(4096);
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for word in storage[start..start + len].chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        word.copy_from_slice(&x.to_le_bytes());
    }
    (storage, start)
}

fn raw_mb_s(dir: &Path, buf: &[u8], total: u64) -> f64 {
    let path = dir.join("raw-baseline.img");
    let _ = std::fs::remove_file(&path);
    let file = FsOpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .expect("open the raw baseline file");
    let started = Instant::now();
    let mut at = 0u64;
    while at < total {
        let n = (total - at).min(buf.len() as u64) as usize;
        file.write_all_at(&buf[..n], at).expect("raw write");
        at += n as u64;
    }
    file.sync_data().expect("raw sync");
    let mb_s = total as f64 / started.elapsed().as_secs_f64() / 1e6;
    drop(file);
    let _ = std::fs::remove_file(&path);
    mb_s
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn main() {
    let mut mib = 256u64;
    let mut dir: Option<PathBuf> = None;
    let mut modes = vec![WriteMode::Serialized];
    let mut chunk_mib = vec![8u64];
    let mut in_flight = vec![1usize, 3];
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().unwrap_or_default();
        match arg.as_str() {
            "--mib" => mib = value().parse().expect("--mib N"),
            "--dir" => dir = Some(PathBuf::from(value())),
            "--modes" => modes = list(&value()),
            "--chunk-mib" => chunk_mib = list(&value()),
            "--in-flight" => in_flight = list(&value()),
            _ => {}
        }
    }
    let temp;
    let scratch = match dir {
        Some(d) => {
            std::fs::create_dir_all(&d).expect("scratch directory");
            d
        }
        None => {
            temp = tempfile::tempdir().expect("temporary directory");
            temp.path().to_path_buf()
        }
    };
    let user = mib * MIB;
    let (storage, start) = pattern(REQUEST_BYTES, 1);
    let buf = &storage[start..start + REQUEST_BYTES];
    println!(
        "{:<12} {:>6} {:>6} {:>8} {:>8} {:>7} {:>8} {:>6}  load",
        "mode", "chunk", "flight", "MB/s", "raw", "dev/B", "limit", "ratio"
    );
    for &mode in &modes {
        for &chunk in &chunk_mib {
            for &n in &in_flight {
                let raw = raw_mb_s(&scratch, buf, user);
                let grid_dir = scratch.join("append-sweep-grid");
                let _ = std::fs::remove_dir_all(&grid_dir);
                let layout: permafrost_grid::Layout = "8x6:4+1".parse().unwrap();
                let mut config = GridConfig::with_file_disks(layout, user + 64 * MIB);
                config.power = PowerProfile {
                    spin_up_ms: 0,
                    idle_timeout_ms: 3_600_000,
                    ..PowerProfile::default()
                };
                config.spinning_max = layout.disks();
                config.chunk_bytes_max = chunk * MIB;
                config.delta_cache_bytes_max = 2 * user;
                let engine = Engine::create(&grid_dir, config).expect("create the grid");
                let started = Instant::now();
                let mut promise = engine
                    .write(0, 0, user, mode)
                    .expect("write promise")
                    .with_chunks_in_flight(n);
                let mut done = 0u64;
                while done < user {
                    let k = (user - done).min(buf.len() as u64) as usize;
                    promise.append(&buf[..k]).expect("append");
                    done += k as u64;
                }
                promise.commit().expect("commit");
                engine.flush().expect("flush");
                let seconds = started.elapsed().as_secs_f64();
                let device: u64 = engine
                    .io_stats()
                    .iter()
                    .map(|s| s.physical_written_bytes)
                    .sum();
                let per_byte = device as f64 / user as f64;
                let mb_s = user as f64 / seconds / 1e6;
                let limit = raw / per_byte;
                println!(
                    "{:<12} {:>6} {:>6} {:>8.1} {:>8.1} {:>7.3} {:>8.1} {:>6.3}  {}",
                    mode.to_string(),
                    chunk,
                    n,
                    mb_s,
                    raw,
                    per_byte,
                    limit,
                    mb_s / limit,
                    load_average()
                );
                engine.close().expect("close");
                let _ = std::fs::remove_dir_all(&grid_dir);
            }
        }
    }
}
