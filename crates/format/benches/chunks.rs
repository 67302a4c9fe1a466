//! Chunk encode/decode throughput (MB/s) next to memcpy, on 8 MiB of
//! text-like data in 1 MiB chunks. Short: `cargo bench -p permafrost-format`.

use std::hint::black_box;
use std::io::{Cursor, Read};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use permafrost_format::{decode_range, encode_chunks, Algorithm, DEFAULT_CHUNK_BYTES};

fn sample(len: usize) -> Vec<u8> {
    let words: [&[u8]; 6] = [
        b"permafrost ",
        b"archive ",
        b"disk ",
        b"parity ",
        b"extent ",
        b"\n",
    ];
    let mut v = Vec::with_capacity(len + 16);
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(words[(x % 6) as usize]);
        if x.is_multiple_of(5) {
            v.extend_from_slice(&x.to_le_bytes()); // some entropy
        }
    }
    v.truncate(len);
    v
}

fn bench(c: &mut Criterion) {
    let data = sample(8 << 20);
    let mut group = c.benchmark_group("chunks");
    group.throughput(Throughput::Bytes(data.len() as u64));
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1));
    group.bench_function("memcpy", |b| b.iter(|| black_box(data.clone())));
    for algorithm in [Algorithm::Zstd, Algorithm::Lz4] {
        let (index, stored) = encode_chunks(&data, algorithm, DEFAULT_CHUNK_BYTES).unwrap();
        eprintln!(
            "{algorithm}: ratio {:.3}",
            stored.len() as f64 / data.len() as f64
        );
        group.bench_function(format!("encode_{algorithm}"), |b| {
            b.iter(|| encode_chunks(black_box(&data), algorithm, DEFAULT_CHUNK_BYTES).unwrap())
        });
        group.bench_function(format!("decode_{algorithm}"), |b| {
            b.iter(|| {
                let mut out = Vec::with_capacity(data.len());
                decode_range(&index, Cursor::new(&stored), 0, data.len() as u64)
                    .unwrap()
                    .read_to_end(&mut out)
                    .unwrap();
                out
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
