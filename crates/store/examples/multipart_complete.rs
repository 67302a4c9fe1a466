//! Times a multipart upload through the store API: the parts, then `complete_multipart`, reporting MB/s and
//! the process's CPU seconds for each phase.
//!
//! `cargo run --release -p permafrost-store --example multipart_complete -- [total MiB] [part MiB] [fsync 0|1]
//! [compressible 0|1]` (defaults: 256 MiB in 8 MiB parts, fsync off, half-compressible data).

use std::time::Instant;

use permafrost_disk::power::PowerProfile;
use permafrost_policy::WatchdogConfig;
use permafrost_store::*;
use rand::{RngCore, SeedableRng};

/// User + system CPU seconds of this process so far (`/proc/self/stat`, fields 14 and 15, in clock ticks).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("read /proc/self/stat");
    let after_name = &stat[stat.rfind(')').expect("a comm field") + 2..];
    let fields: Vec<&str> = after_name.split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

fn arg(n: usize, default: u64) -> u64 {
    std::env::args()
        .nth(n)
        .map(|a| a.parse().expect("numeric argument"))
        .unwrap_or(default)
}

fn main() {
    let total_mib = arg(1, 256);
    let part_mib = arg(2, 8);
    let fsync = arg(3, 0) == 1;
    let compressible = arg(4, 1) == 1;
    let dir = tempfile::tempdir_in(std::env::var("BENCH_DIR").unwrap_or_else(|_| ".".into()))
        .expect("a temporary directory");
    let config = StoreConfig {
        cache_bytes_max: (total_mib * 3) << 20,
        watchdog: WatchdogConfig {
            interval_ms: 50,
            max_age_ms: u64::MAX / 4,
            persist_spinning_after_ms: u64::MAX / 4,
            start_off_disk_above_bytes: u64::MAX / 4,
            persist_spinning_above_bytes: u64::MAX / 4,
            pressure_fill_percent: 100.0,
            persist_under_pressure_above_bytes: u64::MAX / 4,
        },
        fsync,
        grid: GridSetup {
            layout: "4x4:2+1".into(),
            disk_capacity_bytes: 96 << 20,
            spinning_max: 16,
            ..GridSetup::default()
        },
        power_profile: Some(PowerProfile::for_tests()),
        ..StoreConfig::default()
    };
    let store = Store::open(dir.path(), config).expect("open the store");
    store
        .create_bucket("bench", BucketSettings::default())
        .unwrap();
    let part_bytes = (part_mib << 20) as usize;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let parts = total_mib / part_mib;
    // The bodies are made before the clock starts.
    let bodies: Vec<Vec<u8>> = (0..parts)
        .map(|_| {
            let mut part = vec![0u8; part_bytes];
            rng.fill_bytes(&mut part);
            if compressible {
                // Half of every 1 KiB repeats text: zstd saves about half.
                for (i, b) in part.iter_mut().enumerate() {
                    if (i / 512) % 2 == 1 {
                        *b = b"permafrost "[i % 11];
                    }
                }
            }
            part
        })
        .collect();
    let id = store
        .create_multipart("bench", "big", PutOptions::default())
        .unwrap();
    let (wall, cpu) = (Instant::now(), cpu_seconds());
    let mut etags = Vec::new();
    for (n, body) in (1u32..).zip(&bodies) {
        let mut handle = store.upload_part(&id, n, Checksums::default()).unwrap();
        for piece in body.chunks(1 << 20) {
            handle.write(piece).unwrap();
        }
        etags.push((n, handle.finish().unwrap().etag));
    }
    let (parts_s, parts_cpu_s) = (wall.elapsed().as_secs_f64(), cpu_seconds() - cpu);
    let (wall, cpu) = (Instant::now(), cpu_seconds());
    let info = store.complete_multipart(&id, &etags).unwrap();
    let (complete_s, complete_cpu_s) = (wall.elapsed().as_secs_f64(), cpu_seconds() - cpu);
    let mb = (total_mib << 20) as f64 / 1e6;
    println!(
        "{total_mib} MiB in {parts} parts of {part_mib} MiB, fsync={fsync}, compressible={compressible}, etag {}",
        info.etag
    );
    println!(
        "parts:    {parts_s:6.2} s {:7.1} MB/s  CPU {parts_cpu_s:5.2} s",
        mb / parts_s
    );
    println!(
        "complete: {complete_s:6.2} s {:7.1} MB/s  CPU {complete_cpu_s:5.2} s",
        mb / complete_s
    );
    println!(
        "total:    {:6.2} s {:7.1} MB/s  CPU {:5.2} s",
        parts_s + complete_s,
        mb / (parts_s + complete_s),
        parts_cpu_s + complete_cpu_s
    );
    store.close().unwrap();
}
