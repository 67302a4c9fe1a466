//! The floor a recorder is measured against: a plain loop that receives datagrams with `recvmmsg` and writes
//! them to a file, nothing else (no checks, no hashing, no catalog). `bench/record.sh` runs it in the same run
//! as the recorder and prints the recorder's CPU per Gbit/s next to it.

use std::fs::File;
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::net::{bind_receiver, BatchReceiver, Datagram, BATCH_MAX};

/// What the loop did.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct FloorReport {
    pub datagrams: u64,
    pub bytes: u64,
    /// Datagrams the kernel dropped on the socket (`SO_RXQ_OVFL`).
    pub kernel_drops: u64,
    /// From the first datagram to the last.
    pub seconds: f64,
    /// CPU time of the receiving thread (user + system).
    pub cpu_seconds: f64,
}

/// CPU time of the calling thread.
pub fn thread_cpu_seconds() -> f64 {
    // SAFETY: rusage is plain C data; all-zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage into the live, writable struct it is given; RUSAGE_THREAD is a valid
    // `who` on Linux (on failure the struct stays zero).
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(usage.ru_utime) + t(usage.ru_stime)
}

/// Receive datagrams of `datagram_bytes` on `listen` into `out` until `datagrams_max` arrived, or `idle_ms`
/// passed without one after the first.
pub fn run(
    listen: SocketAddr,
    rcvbuf_bytes: usize,
    datagram_bytes: usize,
    out: &Path,
    datagrams_max: u64,
    idle_ms: u64,
) -> anyhow::Result<FloorReport> {
    let (socket, report) = bind_receiver(listen, rcvbuf_bytes)?;
    if report.capped {
        eprintln!("floor: {}", report.describe());
    }
    let mut receiver = BatchReceiver::new(socket);
    let mut file = File::create(out)?;
    let mut buf = vec![0u8; BATCH_MAX * datagram_bytes];
    let mut got: Vec<Datagram> = Vec::with_capacity(BATCH_MAX);
    let (mut datagrams, mut bytes) = (0u64, 0u64);
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let cpu_start = thread_cpu_seconds();
    while datagrams < datagrams_max {
        receiver.receive(&mut buf, datagram_bytes, &mut got)?;
        if got.is_empty() {
            if first.is_some() && last.elapsed() >= Duration::from_millis(idle_ms) {
                break;
            }
            continue;
        }
        first.get_or_insert_with(Instant::now);
        last = Instant::now();
        file.write_all(&buf[..got.len() * datagram_bytes])?;
        datagrams += got.len() as u64;
        bytes += got.iter().map(|d| d.len as u64).sum::<u64>();
    }
    file.sync_data()?;
    Ok(FloorReport {
        datagrams,
        bytes,
        kernel_drops: receiver.kernel_drops(),
        seconds: first.map_or(0.0, |f| (last - f).as_secs_f64()),
        cpu_seconds: thread_cpu_seconds() - cpu_start,
    })
}
