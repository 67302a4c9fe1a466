//! Sequential read promise of one bucket next to a raw O_DIRECT sequential read of the same physical bytes of
//! its disk file (issue 2's goal: read promise time ≥ 0.95 × as fast as the raw read, i.e. dd time ÷ promise
//! time ≥ 0.95).
//!
//! `cargo bench -p permafrost-engine --bench read_promise -- [--quick] [--dir SCRATCH] [--repeat N]
//! [--readahead-chunks N]` (default: the engine's default configuration)
//!
//! A grid `8x6:4+1` of sparse file-backed disks (O_DIRECT where the file system allows) is created in a scratch
//! directory (default: a temporary directory; give `--dir` on the file system you want to measure). Bucket 0 is
//! filled with 1 GiB of pseudo-random data (256 MiB with `--quick`), then `--repeat` times (default 3), one after
//! the other: the whole range is read through a `ReadPromise` into an 8 MiB buffer (as `permafrost grid read`
//! does), and the physical range holding it (after the 1 MiB disk header: whole IDR stripes, 274 blocks of
//! 4 KiB per MiB of data with the default IDR layout) is read from the disk file with O_DIRECT in 4 MiB requests
//! (as `dd bs=4M iflag=direct` does). Medians are reported, and the ratio raw time ÷ promise time. The raw read
//! takes the whole physical range; the promise reads each undamaged stripe without its parity (257 of its 274
//! blocks, docs/idr.md), so it can pass 1.0 even with verification and copies.

use std::fs::OpenOptions as FsOpenOptions;
use std::io::Read as _;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::time::Instant;

use permafrost_disk::power::PowerProfile;
use permafrost_engine::{Engine, GridConfig, WriteMode, HEADER_BYTES};

const MIB: u64 = 1 << 20;
/// Physical bytes per MiB of bucket data with the default IDR layout (SPC 16+1, 16 iPGs per stripe).
const PHYSICAL_BYTES_PER_MIB: u64 = (2 + 16 * 17) * 4096;
/// Request size of the raw baseline (`dd bs=4M`).
const RAW_REQUEST_BYTES: usize = 4 << 20;
/// The reader's buffer (`permafrost grid read` uses 8 MiB).
const READER_BUFFER_BYTES: usize = 8 << 20;

struct Args {
    quick: bool,
    dir: Option<PathBuf>,
    repeat: usize,
    readahead_chunks: Option<usize>,
}

fn parse_args() -> Args {
    let mut args = Args {
        quick: false,
        dir: None,
        repeat: 3,
        readahead_chunks: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => args.quick = true,
            "--dir" => args.dir = it.next().map(PathBuf::from),
            "--repeat" => {
                args.repeat = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("--repeat takes a number")
            }
            "--readahead-chunks" => {
                args.readahead_chunks = it.next().and_then(|n| n.parse().ok());
            }
            // `cargo bench` passes `--bench`; ignore it and any criterion-style flags.
            _ => {}
        }
    }
    args
}

/// A 4096-aligned, pseudo-random buffer of `len` bytes (no all-zero blocks).
fn aligned_pattern(len: usize, seed: u64) -> (Vec<u8>, usize) {
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

/// Seconds to read all of `len` bytes of bucket 0 through a read promise.
fn promise_read_seconds(engine: &Engine, len: u64, buf: &mut [u8]) -> f64 {
    let started = Instant::now();
    let mut promise = engine.read(0, 0, len).expect("read promise");
    let mut done = 0u64;
    loop {
        let n = promise.read(buf).expect("read");
        if n == 0 {
            break;
        }
        done += n as u64;
    }
    assert_eq!(done, len, "the promise returns every byte");
    started.elapsed().as_secs_f64()
}

/// Seconds to read `[offset, offset + len)` of `path` with O_DIRECT in `RAW_REQUEST_BYTES` requests.
fn raw_direct_read_seconds(path: &std::path::Path, offset: u64, len: u64) -> f64 {
    let file = FsOpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .expect("open the disk file with O_DIRECT");
    let mut storage = vec![0u8; RAW_REQUEST_BYTES + 4096];
    let start = storage.as_ptr().align_offset(4096);
    let buf = &mut storage[start..start + RAW_REQUEST_BYTES];
    let started = Instant::now();
    let mut at = 0u64;
    while at < len {
        let n = (len - at).min(RAW_REQUEST_BYTES as u64) as usize;
        file.read_exact_at(&mut buf[..n], offset + at)
            .expect("raw read");
        at += n as u64;
    }
    started.elapsed().as_secs_f64()
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn main() {
    let args = parse_args();
    let data_mib: u64 = if args.quick { 256 } else { 1024 };
    let user_bytes = data_mib * MIB;
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
    let grid_dir = scratch.join("read-promise-grid");
    let _ = std::fs::remove_dir_all(&grid_dir);

    let layout: permafrost_grid::Layout = "8x6:4+1".parse().unwrap();
    let mut config = GridConfig::with_file_disks(layout, 2 * user_bytes);
    config.power = PowerProfile {
        spin_up_ms: 0,
        idle_timeout_ms: 3_600_000,
        ..PowerProfile::default()
    };
    config.spinning_max = layout.disks();
    // The scrub of a slice on spin-up would compete with the measured read.
    config.scrub_slice_bytes = 0;
    if let Some(chunks) = args.readahead_chunks {
        config.readahead_chunks = chunks;
    }
    let engine = Engine::create(&grid_dir, config).expect("create the grid");
    engine.pause_background(true);
    let disk = engine.geometry().bucket_disk(0);
    let disk_file = grid_dir.join(format!("disks/disk-{disk:02}.img"));

    let (data, start) = aligned_pattern(READER_BUFFER_BYTES, 7);
    let mut promise = engine
        .write(0, 0, user_bytes, WriteMode::Direct)
        .expect("write promise");
    let mut done = 0u64;
    while done < user_bytes {
        let n = (user_bytes - done).min(READER_BUFFER_BYTES as u64) as usize;
        promise
            .append(&data[start..start + n])
            .expect("append the bucket data");
        done += n as u64;
    }
    promise.commit().expect("commit the bucket data");
    drop(data);

    let raw_bytes = data_mib * PHYSICAL_BYTES_PER_MIB;
    println!(
        "read promise of bucket 0 ({data_mib} MiB) vs O_DIRECT read of its {raw_bytes} physical bytes (load {})",
        load_average()
    );
    let mut buf = vec![0u8; READER_BUFFER_BYTES];
    let (mut promise_s, mut raw_s) = (Vec::new(), Vec::new());
    for run in 1..=args.repeat {
        promise_s.push(promise_read_seconds(&engine, user_bytes, &mut buf));
        raw_s.push(raw_direct_read_seconds(&disk_file, HEADER_BYTES, raw_bytes));
        println!(
            "  run {run}: promise {:.3} s, raw {:.3} s, ratio {:.3} (load {})",
            promise_s[run - 1],
            raw_s[run - 1],
            raw_s[run - 1] / promise_s[run - 1],
            load_average()
        );
    }
    let (p, r) = (median(&mut promise_s), median(&mut raw_s));
    println!(
        "  median: promise {p:.3} s ({:.0} user MB/s), raw {r:.3} s ({:.0} MB/s)",
        user_bytes as f64 / p / 1e6,
        raw_bytes as f64 / r / 1e6
    );
    println!(
        "  ratio raw time ÷ promise time: {:.3}   [goal >= 0.95]",
        r / p
    );
    engine.close().expect("close the grid");
}
