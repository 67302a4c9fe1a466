//! IDR compute cost next to memcpy of the same bytes, on one core.
//!
//! `cargo bench -p permafrost-idr --bench idr` (add `-- --quick` style criterion flags to
//! shorten). After criterion's groups, a table prints each operation's GB/s and its ratio
//! to memcpy of the same buffers.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use permafrost_disk::{Disk, MemDisk};
use permafrost_idr::{xor, Codec, CodecKind, IdrConfig, IdrDisk, ReedSolomon, Spc};

const BLOCK: usize = 4096;
/// Logical bytes for the IdrDisk read/write paths: 8 stripes of 1 MiB.
const STRIPES: u64 = 8;

fn buffers(count: usize, len: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| (0..len).map(|b| (b * 31 + i * 7) as u8).collect())
        .collect()
}

struct Setup {
    data: Vec<Vec<u8>>,
    parity: Vec<Vec<u8>>,
    spc: Spc,
    rs: ReedSolomon,
    spc_disk: IdrDisk,
    rs_disk: IdrDisk,
    raw_disk: Arc<MemDisk>,
    logical: Vec<u8>,
    physical_bytes: usize,
}

fn idr_disk(codec: CodecKind, logical: &[u8]) -> IdrDisk {
    let config = IdrConfig {
        codec,
        scramble_groups: 16,
    };
    let probe = IdrDisk::new(Arc::new(MemDisk::new("probe", 64 << 20)), 0, config).unwrap();
    let disk = Arc::new(MemDisk::new(
        "bench",
        STRIPES * probe.physical_stripe_bytes(),
    ));
    let idr = IdrDisk::new(disk, 0, config).unwrap();
    idr.write(0, logical).unwrap();
    idr
}

fn setup() -> Setup {
    let logical = buffers(1, (STRIPES << 20) as usize).remove(0);
    let spc_disk = idr_disk(CodecKind::Spc16, &logical);
    let physical_bytes = (STRIPES * spc_disk.physical_stripe_bytes()) as usize;
    let raw_disk = Arc::new(MemDisk::new("raw", physical_bytes as u64));
    raw_disk.write_at(0, &vec![7u8; physical_bytes]).unwrap();
    Setup {
        data: buffers(16, BLOCK),
        parity: buffers(2, BLOCK),
        spc: Spc::default(),
        rs: ReedSolomon::default(),
        rs_disk: idr_disk(CodecKind::Rs16x2, &logical),
        spc_disk,
        raw_disk,
        logical,
        physical_bytes,
    }
}

/// One measured operation: name, bytes per call, the call.
type Op<'a> = (&'a str, usize, Box<dyn FnMut() + 'a>);

fn ops(s: &mut Setup) -> Vec<Op<'_>> {
    let Setup {
        data,
        parity,
        spc,
        rs,
        spc_disk,
        rs_disk,
        raw_disk,
        logical,
        physical_bytes,
    } = s;
    let data: &Vec<Vec<u8>> = data;
    let ipg_bytes = 16 * BLOCK;
    let logical_len = logical.len();
    let physical_len = *physical_bytes;
    let (p0, p1) = parity.split_at_mut(1);
    let (p0, p1) = (&mut p0[0], &mut p1[0]);
    let mut copy_target = vec![0u8; ipg_bytes];
    let copy_source: Vec<u8> = data.concat();
    let mut big_target = vec![0u8; logical_len];
    let big_source = logical.clone();
    let mut read_buf = vec![0u8; logical_len];
    let mut read_buf2 = vec![0u8; logical_len];
    let mut raw_buf = vec![0u8; physical_len];
    let xor_target = vec![0u8; BLOCK];
    let xor_source = data[0].clone();
    let mut ops: Vec<Op<'_>> = vec![
        (
            "memcpy 64 KiB (16 blocks)",
            ipg_bytes,
            Box::new(move || {
                copy_target.copy_from_slice(&copy_source);
                black_box(&copy_target);
            }),
        ),
        (
            "memcpy 8 MiB",
            logical_len,
            Box::new(move || {
                big_target.copy_from_slice(&big_source);
                black_box(&big_target);
            }),
        ),
        (
            "xor_into 4 KiB (dispatch)",
            BLOCK,
            Box::new({
                let (mut t, s) = (xor_target.clone(), xor_source.clone());
                move || xor::xor_into(black_box(&mut t), black_box(&s))
            }),
        ),
        (
            "xor_into 4 KiB portable u64",
            BLOCK,
            Box::new({
                let (mut t, s) = (xor_target.clone(), xor_source.clone());
                move || xor::xor_into_portable(black_box(&mut t), black_box(&s))
            }),
        ),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            let (mut t, s) = (xor_target.clone(), xor_source.clone());
            ops.push((
                "xor_into 4 KiB avx2",
                BLOCK,
                Box::new(move || {
                    // SAFETY: the CPU has AVX2 (checked above); t and s are clones of equal-length buffers.
                    unsafe { xor::x86::xor_into_avx2(black_box(&mut t), black_box(&s)) }
                }),
            ));
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            let (mut t, s) = (xor_target.clone(), xor_source.clone());
            ops.push((
                "xor_into 4 KiB avx512",
                BLOCK,
                Box::new(move || {
                    // SAFETY: the CPU has AVX-512F (checked above); t and s are clones of equal-length buffers.
                    unsafe { xor::x86::xor_into_avx512(black_box(&mut t), black_box(&s)) }
                }),
            ));
            let (mut t, s) = (xor_target.clone(), xor_source.clone());
            ops.push((
                "xor_into 4 KiB autovec(avx512 on)",
                BLOCK,
                Box::new(move || {
                    // SAFETY: the CPU has AVX-512F (checked above); t and s are clones of equal-length buffers.
                    unsafe { xor::xor_into_autovec_avx512(black_box(&mut t), black_box(&s)) }
                }),
            ));
        }
    }
    ops.push((
        "SPC 16+1 encode (per data byte)",
        ipg_bytes,
        Box::new({
            let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
            let spc: &Spc = spc;
            let p0: &mut Vec<u8> = p0;
            move || spc.encode(black_box(&refs), &mut [p0.as_mut_slice()])
        }),
    ));
    ops.push((
        "SPC 16+1 encode, portable xor",
        ipg_bytes,
        Box::new({
            let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
            let mut p = vec![0u8; BLOCK];
            move || xor::xor_all_into_portable(black_box(&mut p), black_box(&refs))
        }),
    ));
    ops.push((
        "RS 16+2 encode (per data byte)",
        ipg_bytes,
        Box::new({
            let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
            let rs: &ReedSolomon = rs;
            let p1: &mut Vec<u8> = p1;
            let mut other = vec![0u8; BLOCK];
            move || {
                rs.encode(
                    black_box(&refs),
                    &mut [p1.as_mut_slice(), other.as_mut_slice()],
                )
            }
        }),
    ));
    ops.push((
        "crc32c 64 KiB",
        ipg_bytes,
        Box::new({
            let bytes = data.concat();
            move || {
                black_box(crc_fast::crc32_iscsi(black_box(&bytes)));
            }
        }),
    ));
    ops.push((
        "MemDisk raw read 8.6 MiB (baseline)",
        physical_len,
        Box::new({
            let raw: &MemDisk = raw_disk;
            move || raw.read_at(0, black_box(&mut raw_buf)).unwrap()
        }),
    ));
    ops.push((
        "IdrDisk SPC check-on-read 8 MiB",
        logical_len,
        Box::new({
            let d: &IdrDisk = spc_disk;
            move || {
                d.read(0, black_box(&mut read_buf)).unwrap();
            }
        }),
    ));
    ops.push((
        "IdrDisk RS 16+2 check-on-read 8 MiB",
        logical_len,
        Box::new({
            let d: &IdrDisk = rs_disk;
            move || {
                d.read(0, black_box(&mut read_buf2)).unwrap();
            }
        }),
    ));
    ops.push((
        "IdrDisk SPC full-stripe write 8 MiB",
        logical_len,
        Box::new({
            let d: &IdrDisk = spc_disk;
            let l: &Vec<u8> = logical;
            move || d.write(0, black_box(l)).unwrap()
        }),
    ));
    ops
}

fn criterion_groups(c: &mut Criterion, setup: &mut Setup) {
    let mut group = c.benchmark_group("idr");
    for (name, bytes, mut op) in ops(setup) {
        group.throughput(Throughput::Bytes(bytes as u64));
        group.bench_function(name, |b| b.iter(&mut op));
    }
    group.finish();
}

/// GB/s of `op`, run for about `budget`.
fn rate(bytes: usize, op: &mut dyn FnMut(), budget: Duration) -> f64 {
    op();
    let start = Instant::now();
    let mut calls = 0u64;
    while start.elapsed() < budget {
        for _ in 0..8 {
            op();
        }
        calls += 8;
    }
    (calls as f64 * bytes as f64) / start.elapsed().as_secs_f64() / 1e9
}

fn ratio_table(setup: &mut Setup) {
    let budget = Duration::from_millis(400);
    let mut rows = Vec::new();
    for (name, bytes, mut op) in ops(setup) {
        rows.push((name.to_string(), rate(bytes, &mut op, budget)));
    }
    let memcpy_small = rows[0].1;
    let memcpy_big = rows[1].1;
    println!(
        "\n{:<40} {:>9} {:>16}",
        "operation (one core)", "GB/s", "÷ memcpy"
    );
    for (name, gbps) in &rows {
        // Block-sized ops compare with the in-cache memcpy, 8 MiB paths with the 8 MiB memcpy.
        let base = if name.contains("8 MiB") || name.contains("8.6 MiB") {
            memcpy_big
        } else {
            memcpy_small
        };
        println!("{name:<40} {gbps:>9.2} {:>15.2}x", gbps / base);
    }
}

fn main() {
    let mut setup = setup();
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(10)
        .configure_from_args();
    criterion_groups(&mut c, &mut setup);
    c.final_summary();
    ratio_table(&mut setup);
}
