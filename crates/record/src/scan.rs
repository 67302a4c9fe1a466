//! One scan being recorded: a receiving thread, a writing thread and a sealing thread around a bounded ring.
//!
//! ```text
//! socket ──recvmmsg──▶ receiver ──full blocks──▶ writer ──pieces──▶ sealer ──▶ store (growing object)
//!                         ▲                        │
//!                         └──────free blocks───────┘
//! ```
//! - The **receiver** owns the socket. It receives batches straight into a free block of the ring, checks
//!   every datagram (a whole VDIF frame of the scan's frame size), compacts the accepted frames (dropping the
//!   `udps` prefix) and hands full blocks to the writer. It never waits for the writer, the cache or the
//!   catalog: when no block is free it allocates one more, up to `ring_bytes` (the ring starts with an eighth
//!   of that, at most [`RING_PREALLOCATED_BYTES_MAX`]: memory is taken only while the writer is behind, e.g.
//!   while the cache disk writes more slowly than the stream arrives); when the ring is at `ring_bytes` it
//!   keeps receiving into a scratch block and counts every frame so dropped (`ring_dropped_frames`), which
//!   the scan's metadata reports; the frames become gaps.
//! - The **writer** writes blocks into the current piece of the growing object (hashing, cache) and keeps the
//!   loss accounting of exactly the frames it stored, then hands each piece to the sealer every
//!   `seal_interval_ms` (or `piece_bytes_max`).
//! - The **sealer** makes each piece durable (fsync, catalog) and commits it as a durable point with the
//!   metadata of that moment (`GrowingObject::append`): what a crash keeps and what readers see.
//!
//! When the scan ends (stop, duration, server shutdown) the last piece is sealed and the object finished with
//! its final metadata. When writing fails (cache full past its wait, I/O error, the object deleted) the scan
//! stops and is finished with the metadata of its last durable point and the error.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use permafrost_store::{GrowingObject, ObjectInfo, Piece, Store};
use serde::Serialize;

use crate::loss::{Accounting, GapRecord, LossTotals, Numbering, Position};
use crate::net::{self, BatchReceiver, Datagram, RcvbufReport, BATCH_MAX};
use crate::vdif::{check_frame, FrameError, Header, FRAME_BYTES_MAX, UDPS_PREFIX_BYTES};
use crate::{meta, RecordConfig};

/// A block is handed to the writer at the latest this long after its first frame.
const BLOCK_FLUSH_MS: u64 = 100;
/// The ring is allocated (and touched) with an eighth of `ring_bytes`, at most this many bytes and at least two
/// blocks, when a scan starts; it grows block by block up to `ring_bytes` while the writer is behind, and keeps
/// what it grew to until the scan ends.
pub const RING_PREALLOCATED_BYTES_MAX: usize = 256 << 20;
/// Rejected datagrams logged one by one at most per scan (then every [`REJECT_LOG_EVERY`]th).
const REJECTS_LOGGED_MAX: u64 = 10;
const REJECT_LOG_EVERY: u64 = 100_000;

/// What to record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ScanSpec {
    pub experiment: String,
    pub station: String,
    pub scan: String,
    /// Where to receive (`0.0.0.0:PORT`, `127.0.0.1:PORT`, …).
    pub listen: SocketAddr,
    /// Each datagram starts with jive5ab's 64-bit `udps` sequence number.
    #[serde(default)]
    pub udps: bool,
    /// Frame size; `None` = from the first frame's header.
    #[serde(default)]
    pub frame_bytes: Option<usize>,
    /// Frames per second per thread (VDIF time accounting); `None` = learned from the first second.
    #[serde(default)]
    pub frames_per_second: Option<u64>,
    /// Stop after this long; `None` = until stopped.
    #[serde(default)]
    pub duration_ms: Option<u64>,
}

impl ScanSpec {
    /// `experiment/station/scan`, the scan's id.
    pub fn id(&self) -> String {
        format!("{}/{}/{}", self.experiment, self.station, self.scan)
    }
    /// The object key: `experiment/station/scan.vdif`.
    pub fn key(&self) -> String {
        format!("{}.vdif", self.id())
    }
}

/// Life of a scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScanState {
    Recording,
    /// Stopped; the last piece is being sealed.
    Finishing,
    Complete,
    /// Writing failed; finished with what its last durable point holds.
    Failed,
    /// The server stopped (or crashed) during the scan; finished with its last durable point.
    Interrupted,
}

impl ScanState {
    pub fn as_str(self) -> &'static str {
        match self {
            ScanState::Recording => "recording",
            ScanState::Finishing => "finishing",
            ScanState::Complete => "complete",
            ScanState::Failed => "failed",
            ScanState::Interrupted => "interrupted",
        }
    }
    pub fn is_over(self) -> bool {
        matches!(
            self,
            ScanState::Complete | ScanState::Failed | ScanState::Interrupted
        )
    }
}

/// Counters of the receiving thread (live).
#[derive(Debug, Default)]
pub(crate) struct ReceiverCounters {
    pub datagrams: AtomicU64,
    pub bytes: AtomicU64,
    pub accepted_frames: AtomicU64,
    pub ring_dropped_frames: AtomicU64,
    /// Ring blocks allocated, and the most of them holding frames at once (received, not yet written).
    pub ring_blocks_allocated: AtomicU64,
    pub ring_blocks_in_use: AtomicU64,
    pub ring_blocks_in_use_max: AtomicU64,
    pub kernel_drops: AtomicU64,
    pub rejected: Mutex<BTreeMap<String, u64>>,
    pub first_rejection: Mutex<Option<String>>,
    pub cpu_receiver: CpuCounter,
    pub cpu_writer: CpuCounter,
    pub cpu_sealer: CpuCounter,
}

/// What the writer and sealer know (live).
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct WriterView {
    /// Loss accounting of the frames stored so far.
    pub loss: LossTotals,
    pub bytes_written: u64,
    /// Size of the durable prefix (what readers see and a crash keeps).
    pub durable_bytes: u64,
    pub durable_pieces: u32,
    pub durable_at_ms: Option<u64>,
    pub first: Option<Position>,
    pub last: Option<Position>,
    pub frames_per_second: Option<u64>,
    pub frames_per_second_learned: bool,
    /// The first gaps (at most `gaps_in_metadata_max`).
    pub gaps: Vec<GapRecord>,
}

/// A scan's status, as `permafrost record status` and the API show it.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ScanStatus {
    pub id: String,
    pub bucket: String,
    pub key: String,
    pub state: ScanState,
    pub listen: SocketAddr,
    pub numbering: Numbering,
    pub frame_bytes: Option<usize>,
    pub started_ms: u64,
    pub ended_ms: Option<u64>,
    pub duration_ms: Option<u64>,
    pub rcvbuf: Option<RcvbufReport>,
    pub datagrams_received: u64,
    pub bytes_received: u64,
    pub frames_accepted: u64,
    /// Rejected datagrams by reason (`truncated`, `wrong-frame-size`, …).
    pub frames_rejected: BTreeMap<String, u64>,
    pub first_rejection: Option<String>,
    /// Frames received but dropped because the writer fell behind (the ring was full).
    pub ring_dropped_frames: u64,
    /// Bytes of the ring allocated so far (it grows while the writer is behind, up to `ring_bytes`).
    #[serde(default)]
    pub ring_bytes_allocated: u64,
    /// The most bytes of the ring that held frames not yet written, at once: how far the writer fell behind.
    #[serde(default)]
    pub ring_bytes_used_max: u64,
    /// Datagrams the kernel dropped on this socket (its buffer was full; `SO_RXQ_OVFL`).
    pub kernel_drops: u64,
    /// `/proc/net/snmp` Udp RcvbufErrors since the scan started (system-wide: every socket of the host).
    pub udp_rcvbuf_errors_system: Option<u64>,
    pub writer: WriterView,
    /// CPU time (user + system) of the scan's threads so far.
    pub cpu_seconds: ThreadCpu,
    pub error: Option<String>,
}

/// CPU seconds of a scan's threads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct ThreadCpu {
    pub receiver: f64,
    pub writer: f64,
    pub sealer: f64,
}

impl ThreadCpu {
    pub fn total(&self) -> f64 {
        self.receiver + self.writer + self.sealer
    }
}

/// A thread's CPU seconds, kept as microseconds.
#[derive(Debug, Default)]
pub(crate) struct CpuCounter(AtomicU64);

impl CpuCounter {
    /// Record the calling thread's CPU time.
    fn update(&self) {
        let micros = (crate::floor::thread_cpu_seconds() * 1e6) as u64;
        self.0.store(micros, Ordering::Relaxed);
    }
    fn seconds(&self) -> f64 {
        self.0.load(Ordering::Relaxed) as f64 / 1e6
    }
}

pub(crate) struct Shared {
    pub spec: ScanSpec,
    pub bucket: String,
    pub stop: AtomicBool,
    pub counters: ReceiverCounters,
    pub writer: Mutex<WriterView>,
    pub state: Mutex<ScanState>,
    pub error: Mutex<Option<String>>,
    pub frame_bytes: Mutex<Option<usize>>,
    pub rcvbuf: Option<RcvbufReport>,
    pub started_ms: u64,
    pub started: Instant,
    pub ended_ms: Mutex<Option<u64>>,
    pub snmp_at_start: Option<u64>,
    pub retention_days: u32,
    pub config: RecordConfig,
    /// Every gap of a scan that ended well (written by the writer when it ends).
    pub all_gaps: Mutex<Vec<GapRecord>>,
    /// Why the scan was cut short when not by a stop request (the server stopping).
    pub interrupted: Mutex<Option<String>>,
}

impl Shared {
    fn fail(&self, message: String) {
        tracing::warn!("scan {}: {message}; the scan stops", self.spec.id());
        self.error.lock().get_or_insert(message);
        self.stop.store(true, Ordering::SeqCst);
    }

    pub fn status(&self) -> ScanStatus {
        let c = &self.counters;
        ScanStatus {
            id: self.spec.id(),
            bucket: self.bucket.clone(),
            key: self.spec.key(),
            state: *self.state.lock(),
            listen: self.spec.listen,
            numbering: numbering(&self.spec),
            frame_bytes: *self.frame_bytes.lock(),
            started_ms: self.started_ms,
            ended_ms: *self.ended_ms.lock(),
            duration_ms: self.spec.duration_ms,
            rcvbuf: self.rcvbuf,
            datagrams_received: c.datagrams.load(Ordering::Relaxed),
            bytes_received: c.bytes.load(Ordering::Relaxed),
            frames_accepted: c.accepted_frames.load(Ordering::Relaxed),
            frames_rejected: c.rejected.lock().clone(),
            first_rejection: c.first_rejection.lock().clone(),
            ring_dropped_frames: c.ring_dropped_frames.load(Ordering::Relaxed),
            ring_bytes_allocated: c.ring_blocks_allocated.load(Ordering::Relaxed)
                * self.config.block_bytes as u64,
            ring_bytes_used_max: c.ring_blocks_in_use_max.load(Ordering::Relaxed)
                * self.config.block_bytes as u64,
            kernel_drops: c.kernel_drops.load(Ordering::Relaxed),
            udp_rcvbuf_errors_system: self.snmp_errors_since_start(),
            writer: self.writer.lock().clone(),
            cpu_seconds: ThreadCpu {
                receiver: c.cpu_receiver.seconds(),
                writer: c.cpu_writer.seconds(),
                sealer: c.cpu_sealer.seconds(),
            },
            error: self.error.lock().clone(),
        }
    }

    fn snmp_errors_since_start(&self) -> Option<u64> {
        let start = self.snmp_at_start?;
        Some(net::udp_drop_counters()?.0.saturating_sub(start))
    }
}

pub(crate) fn numbering(spec: &ScanSpec) -> Numbering {
    if spec.udps {
        Numbering::UdpsSequence
    } else {
        Numbering::VdifTime
    }
}

/// A frame stored in a block: its header and `udps` sequence number.
#[derive(Debug, Clone, Copy)]
struct FrameInfo {
    header: Header,
    seq: Option<u64>,
}

/// A ring block: accepted frames back to back.
struct Block {
    buf: Vec<u8>,
    len: usize,
    frames: Vec<FrameInfo>,
}

impl Block {
    /// A new block of `bytes`; `touch` faults its pages in now rather than in the first receive.
    fn new(bytes: usize, touch: bool) -> Block {
        let mut buf = vec![0u8; bytes];
        if touch {
            for i in (0..buf.len()).step_by(4096) {
                buf[i] = 1;
            }
        }
        Block {
            buf,
            len: 0,
            frames: Vec::new(),
        }
    }
}

/// How far the ring may grow (the receiver's side).
struct RingGrowth {
    block_bytes: usize,
    blocks: usize,
    blocks_max: usize,
}

enum ToWriter {
    Block(Block),
    End,
}

/// A running scan: its threads and shared state.
pub(crate) struct Recording {
    pub shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl Recording {
    /// Bind the socket and start the threads. The object is created first (a duplicate key is refused).
    pub fn start(
        store: &Arc<Store>,
        spec: ScanSpec,
        bucket: &str,
        config: &RecordConfig,
        retention_days: u32,
    ) -> anyhow::Result<Recording> {
        let (socket, rcvbuf) = net::bind_receiver(spec.listen, config.rcvbuf_bytes)?;
        if rcvbuf.capped {
            tracing::warn!("scan {}: {}", spec.id(), rcvbuf.describe());
        }
        let started_ms = permafrost_store_now_ms();
        let shared = Arc::new(Shared {
            bucket: bucket.to_string(),
            stop: AtomicBool::new(false),
            counters: ReceiverCounters::default(),
            writer: Mutex::new(WriterView::default()),
            state: Mutex::new(ScanState::Recording),
            error: Mutex::new(None),
            frame_bytes: Mutex::new(spec.frame_bytes),
            rcvbuf: Some(rcvbuf),
            started_ms,
            started: Instant::now(),
            ended_ms: Mutex::new(None),
            snmp_at_start: net::udp_drop_counters().map(|c| c.0),
            retention_days,
            config: config.clone(),
            all_gaps: Mutex::new(Vec::new()),
            interrupted: Mutex::new(None),
            spec,
        });
        let options = permafrost_store::GrowingOptions {
            user_metadata: meta::metadata(&shared, &WriterView::default(), ScanState::Recording),
            content_type: Some(meta::CONTENT_TYPE.into()),
            compression: Some(permafrost_store::Compression::None),
        };
        let object = store.begin_growing(bucket, &shared.spec.key(), options)?;
        Ok(Recording::run(
            shared,
            Arc::clone(store),
            object,
            Some(socket),
        ))
    }

    /// Finish a growing object left by a server that stopped during the scan: its last durable point is what it
    /// keeps, and its metadata says it was interrupted and where it stops.
    pub fn finish_interrupted(object: &GrowingObject) -> anyhow::Result<ObjectInfo> {
        let mut metadata = object.user_metadata();
        meta::set(&mut metadata, meta::STATE, ScanState::Interrupted.as_str());
        meta::set(
            &mut metadata,
            meta::ENDED,
            &meta::rfc3339(permafrost_store_now_ms()),
        );
        meta::set(
            &mut metadata,
            meta::ERROR,
            "the server stopped during the scan; the scan holds what was received before its last durable point",
        );
        Ok(object.finish(metadata)?)
    }

    fn run(
        shared: Arc<Shared>,
        store: Arc<Store>,
        object: GrowingObject,
        socket: Option<UdpSocket>,
    ) -> Recording {
        let config = &shared.config;
        let blocks_max = (config.ring_bytes / config.block_bytes).max(2);
        let preallocated = (config.ring_bytes / 8).min(RING_PREALLOCATED_BYTES_MAX);
        let blocks = (preallocated / config.block_bytes).clamp(2, blocks_max);
        let (free_tx, free_rx) = mpsc::sync_channel::<Block>(blocks_max);
        for _ in 0..blocks {
            free_tx
                .send(Block::new(config.block_bytes, true))
                .expect("the ring has room for all its blocks");
        }
        shared
            .counters
            .ring_blocks_allocated
            .store(blocks as u64, Ordering::Relaxed);
        let growth = RingGrowth {
            block_bytes: config.block_bytes,
            blocks,
            blocks_max,
        };
        let (full_tx, full_rx) = mpsc::sync_channel::<ToWriter>(blocks_max + 1);
        let (piece_tx, piece_rx) = mpsc::channel::<SealWork>();
        let id = shared.spec.id();
        let mut threads = Vec::new();
        if let Some(socket) = socket {
            let s = Arc::clone(&shared);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("record-rx {}", shared.spec.listen.port()))
                    .spawn(move || {
                        receive(&s, BatchReceiver::new(socket), growth, free_rx, full_tx)
                    })
                    .expect("spawn the receiving thread"),
            );
        }
        let s = Arc::clone(&shared);
        let o = object.clone();
        threads.push(
            std::thread::Builder::new()
                .name("record-write".into())
                .spawn(move || write(&s, &o, full_rx, free_tx, piece_tx))
                .expect("spawn the writing thread"),
        );
        let s = Arc::clone(&shared);
        threads.push(
            std::thread::Builder::new()
                .name("record-seal".into())
                .spawn(move || seal(&s, &store, &object, piece_rx))
                .expect("spawn the sealing thread"),
        );
        tracing::info!(
            "scan {id}: recording on {} into {}/{}",
            shared.spec.listen,
            shared.bucket,
            shared.spec.key()
        );
        Recording { shared, threads }
    }

    /// Ask the scan to stop (returns at once).
    pub fn request_stop(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
    }

    /// Whether every thread has ended.
    pub fn is_done(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    /// Wait for the threads.
    pub fn join(&mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

pub(crate) fn permafrost_store_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Why a datagram of `len` bytes (`truncated` by the kernel) is not a frame of `frame_bytes`, if it is not.
fn check_datagram(
    data: &[u8],
    truncated: bool,
    prefix: usize,
    frame_bytes: usize,
) -> Result<Header, FrameError> {
    if truncated {
        return Err(FrameError::Oversize {
            len: data.len(),
            max: prefix + frame_bytes,
        });
    }
    if data.len() < prefix {
        return Err(FrameError::Truncated { len: data.len() });
    }
    let header = check_frame(&data[prefix..])?;
    if header.frame_bytes() != frame_bytes {
        return Err(FrameError::WrongFrameSize {
            len: header.frame_bytes(),
            expected: frame_bytes,
        });
    }
    Ok(header)
}

fn reject(shared: &Shared, error: &FrameError) {
    let c = &shared.counters;
    let total = {
        let mut rejected = c.rejected.lock();
        *rejected.entry(error.kind().to_string()).or_default() += 1;
        rejected.values().sum::<u64>()
    };
    c.first_rejection
        .lock()
        .get_or_insert_with(|| error.to_string());
    if total <= REJECTS_LOGGED_MAX || total % REJECT_LOG_EVERY == 0 {
        tracing::warn!(
            "scan {}: datagram rejected ({total} so far): {error}",
            shared.spec.id()
        );
    }
}

/// The frame size of the scan: configured, or from the first datagram that is a whole VDIF frame.
fn learn_frame_bytes(
    shared: &Shared,
    receiver: &mut BatchReceiver,
    prefix: usize,
) -> Option<usize> {
    if let Some(n) = *shared.frame_bytes.lock() {
        return Some(n);
    }
    let mut head = vec![0u8; prefix + FRAME_BYTES_MAX];
    while !stop_due(shared) {
        match receiver.peek(&mut head) {
            Ok(None) => continue,
            Ok(Some(len)) => {
                let seen = len.min(head.len());
                let result = if len > head.len() {
                    Err(FrameError::Oversize {
                        len,
                        max: head.len(),
                    })
                } else if len < prefix {
                    Err(FrameError::Truncated { len })
                } else {
                    check_frame(&head[prefix..seen])
                };
                match result {
                    Ok(h) => {
                        *shared.frame_bytes.lock() = Some(h.frame_bytes());
                        tracing::info!(
                            "scan {}: frames of {} bytes (from the first frame's header)",
                            shared.spec.id(),
                            h.frame_bytes()
                        );
                        return Some(h.frame_bytes());
                    }
                    Err(e) => {
                        shared.counters.datagrams.fetch_add(1, Ordering::Relaxed);
                        reject(shared, &e);
                        let _ = receiver.discard();
                    }
                }
            }
            Err(e) => {
                shared.fail(format!("receiving failed: {e}"));
                return None;
            }
        }
    }
    None
}

fn stop_due(shared: &Shared) -> bool {
    shared.stop.load(Ordering::Relaxed)
        || shared
            .spec
            .duration_ms
            .is_some_and(|ms| shared.started.elapsed() >= Duration::from_millis(ms))
}

fn receive(
    shared: &Shared,
    mut receiver: BatchReceiver,
    mut ring: RingGrowth,
    free: Receiver<Block>,
    full: SyncSender<ToWriter>,
) {
    let prefix = if shared.spec.udps {
        UDPS_PREFIX_BYTES
    } else {
        0
    };
    let Some(frame_bytes) = learn_frame_bytes(shared, &mut receiver, prefix) else {
        let _ = full.send(ToWriter::End);
        return;
    };
    let stride = prefix + frame_bytes;
    let c = &shared.counters;
    let mut scratch = vec![0u8; BATCH_MAX * stride];
    let mut datagrams: Vec<Datagram> = Vec::with_capacity(BATCH_MAX);
    let mut current: Option<(Block, Instant)> = None;
    let mut dropping_since: Option<(Instant, u64)> = None;
    let mut iterations = 0u64;
    loop {
        if stop_due(shared) {
            break;
        }
        if current.is_none() {
            let block = free.try_recv().ok().or_else(|| grow(shared, &mut ring));
            if let Some(mut block) = block {
                block.len = 0;
                block.frames.clear();
                let in_use = c.ring_blocks_in_use.fetch_add(1, Ordering::Relaxed) + 1;
                c.ring_blocks_in_use_max
                    .fetch_max(in_use, Ordering::Relaxed);
                current = Some((block, Instant::now()));
                if let Some((since, dropped)) = dropping_since.take() {
                    tracing::warn!(
                        "scan {}: the writer fell behind: {dropped} frames dropped in {} ms (ring full)",
                        shared.spec.id(),
                        since.elapsed().as_millis()
                    );
                }
            }
        }
        match current.as_mut() {
            None => {
                // No free block: receive anyway (the kernel must not drop silently) and count what is dropped.
                if let Err(e) = receiver.receive(&mut scratch, stride, &mut datagrams) {
                    shared.fail(format!("receiving failed: {e}"));
                    break;
                }
                let mut dropped = 0;
                for (j, d) in datagrams.iter().enumerate() {
                    let data = &scratch[j * stride..j * stride + d.len];
                    c.datagrams.fetch_add(1, Ordering::Relaxed);
                    c.bytes.fetch_add(d.len as u64, Ordering::Relaxed);
                    match check_datagram(data, d.truncated, prefix, frame_bytes) {
                        Ok(_) => dropped += 1,
                        Err(e) => reject(shared, &e),
                    }
                }
                c.ring_dropped_frames.fetch_add(dropped, Ordering::Relaxed);
                let entry = dropping_since.get_or_insert((Instant::now(), 0));
                entry.1 += dropped;
            }
            Some((block, first_at)) => {
                let base = block.len;
                if let Err(e) = receiver.receive(&mut block.buf[base..], stride, &mut datagrams) {
                    shared.fail(format!("receiving failed: {e}"));
                    break;
                }
                for (j, d) in datagrams.iter().enumerate() {
                    let at = base + j * stride;
                    c.datagrams.fetch_add(1, Ordering::Relaxed);
                    c.bytes.fetch_add(d.len as u64, Ordering::Relaxed);
                    match check_datagram(
                        &block.buf[at..at + d.len],
                        d.truncated,
                        prefix,
                        frame_bytes,
                    ) {
                        Ok(header) => {
                            let seq = (prefix > 0).then(|| {
                                u64::from_le_bytes(
                                    block.buf[at..at + 8].try_into().expect("8 bytes"),
                                )
                            });
                            if block.len != at + prefix {
                                block.buf.copy_within(at + prefix..at + stride, block.len);
                            }
                            block.len += frame_bytes;
                            block.frames.push(FrameInfo { header, seq });
                            c.accepted_frames.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => reject(shared, &e),
                    }
                }
                if block.frames.is_empty() {
                    *first_at = Instant::now();
                }
                let room = (block.buf.len() - block.len) / stride;
                let old = first_at.elapsed() >= Duration::from_millis(BLOCK_FLUSH_MS);
                if room < BATCH_MAX || (old && !block.frames.is_empty()) {
                    let (block, _) = current.take().expect("a current block");
                    if full.send(ToWriter::Block(block)).is_err() {
                        break; // the writer is gone (it failed and said why)
                    }
                }
            }
        }
        c.kernel_drops
            .store(receiver.kernel_drops(), Ordering::Relaxed);
        iterations += 1;
        if iterations.is_multiple_of(256) {
            c.cpu_receiver.update();
        }
    }
    c.cpu_receiver.update();
    if let Some((block, _)) = current.take() {
        if !block.frames.is_empty() {
            let _ = full.send(ToWriter::Block(block));
        }
    }
    let _ = full.send(ToWriter::End);
}

/// One more block for the ring when it may still grow (its pages are faulted in as frames arrive).
fn grow(shared: &Shared, ring: &mut RingGrowth) -> Option<Block> {
    if ring.blocks >= ring.blocks_max {
        return None;
    }
    ring.blocks += 1;
    shared
        .counters
        .ring_blocks_allocated
        .store(ring.blocks as u64, Ordering::Relaxed);
    if ring.blocks.is_power_of_two() || ring.blocks == ring.blocks_max {
        tracing::info!(
            "scan {}: the writer is behind: the ring grows to {} MiB (at most {} MiB)",
            shared.spec.id(),
            (ring.blocks * ring.block_bytes) >> 20,
            (ring.blocks_max * ring.block_bytes) >> 20
        );
    }
    Some(Block::new(ring.block_bytes, false))
}

/// A piece to seal, with the metadata and view of its durable point.
type SealWork = (Piece, Vec<(String, String)>, WriterView);
type ToSealer = mpsc::Sender<SealWork>;

fn write(
    shared: &Shared,
    object: &GrowingObject,
    full: Receiver<ToWriter>,
    free: SyncSender<Block>,
    sealer: ToSealer,
) {
    let config = &shared.config;
    let mut accounting = Accounting::new(numbering(&shared.spec), shared.spec.frames_per_second);
    let mut piece: Option<(Piece, Instant)> = None;
    let mut written = 0u64;
    let mut failed = false;
    let hand_off = |piece: Piece, accounting: &Accounting, written: u64| -> bool {
        let view = writer_view(shared, accounting, written);
        let metadata = meta::metadata(shared, &view, ScanState::Recording);
        sealer.send((piece, metadata, view)).is_ok()
    };
    while let Ok(message) = full.recv() {
        let block = match message {
            ToWriter::Block(block) => block,
            ToWriter::End => break,
        };
        if !failed {
            let result = (|| -> permafrost_store::Result<()> {
                if piece.is_none() {
                    piece = Some((object.piece()?, Instant::now()));
                }
                let (p, _) = piece.as_mut().expect("a piece");
                p.write(&block.buf[..block.len])
            })();
            match result {
                Ok(()) => {
                    let frame_bytes = block.len / block.frames.len().max(1);
                    for (k, f) in block.frames.iter().enumerate() {
                        accounting.record(&f.header, f.seq, written + (k * frame_bytes) as u64);
                    }
                    written += block.len as u64;
                    *shared.writer.lock() = writer_view(shared, &accounting, written);
                    shared.counters.cpu_writer.update();
                }
                Err(e) => {
                    failed = true;
                    if let Some((p, _)) = piece.take() {
                        p.abort();
                    }
                    shared.fail(format!("writing to the archive failed: {e}"));
                }
            }
        }
        shared
            .counters
            .ring_blocks_in_use
            .fetch_sub(1, Ordering::Relaxed);
        let _ = free.send(block);
        let due = piece.as_ref().is_some_and(|(p, since)| {
            p.len_bytes() >= config.piece_bytes_max
                || since.elapsed() >= Duration::from_millis(config.seal_interval_ms)
        });
        if due {
            let (p, _) = piece.take().expect("a piece");
            if !hand_off(p, &accounting, written) {
                failed = true;
            }
        }
    }
    if let Some((p, _)) = piece.take() {
        if !failed {
            hand_off(p, &accounting, written);
        } else {
            p.abort();
        }
    }
    *shared.all_gaps.lock() = accounting.gaps(usize::MAX);
    shared.counters.cpu_writer.update();
    // Dropping `sealer` tells the sealer there is no more.
}

fn writer_view(shared: &Shared, accounting: &Accounting, written: u64) -> WriterView {
    let previous = shared.writer.lock().clone();
    let fps = accounting.frames_per_second();
    WriterView {
        loss: accounting.totals(),
        bytes_written: written,
        first: accounting.first_position(),
        last: accounting.last_position(),
        frames_per_second: fps.map(|f| f.0),
        frames_per_second_learned: fps.is_some_and(|f| f.1),
        gaps: accounting.gaps(shared.config.gaps_in_metadata_max),
        ..previous
    }
}

fn seal(shared: &Shared, store: &Store, object: &GrowingObject, pieces: Receiver<SealWork>) {
    let id = shared.spec.id();
    let mut last_durable = object.user_metadata();
    let mut last_view = WriterView::default();
    let mut failed = false;
    while let Ok((piece, metadata, view)) = pieces.recv() {
        if failed {
            piece.abort();
            continue;
        }
        let number = piece.number();
        let result = piece
            .seal()
            .and_then(|sealed| object.append(sealed, metadata.clone()));
        match result {
            Ok(len) => {
                let now = permafrost_store_now_ms();
                let mut w = shared.writer.lock();
                w.durable_bytes = len;
                w.durable_pieces = number;
                w.durable_at_ms = Some(now);
                drop(w);
                last_durable = metadata;
                last_view = view;
                shared.counters.cpu_sealer.update();
                tracing::debug!("scan {id}: durable point {number}: {len} bytes");
            }
            Err(e) => {
                failed = true;
                shared.fail(format!("making piece {number} durable failed: {e}"));
            }
        }
    }
    shared.counters.cpu_sealer.update();
    // Every piece is sealed (or the scan failed): finish the object.
    *shared.state.lock() = ScanState::Finishing;
    let ended = permafrost_store_now_ms();
    *shared.ended_ms.lock() = Some(ended);
    let error = shared.error.lock().clone();
    let interrupted = shared.interrupted.lock().clone();
    let (state, mut metadata, view) = match error {
        None => {
            let view = shared.writer.lock().clone();
            let state = match interrupted {
                Some(_) => ScanState::Interrupted,
                None => ScanState::Complete,
            };
            let mut m = meta::metadata(shared, &view, state);
            if let Some(why) = interrupted {
                meta::set(&mut m, meta::ERROR, &why);
            }
            (state, m, view)
        }
        Some(e) => {
            let mut m = last_durable;
            meta::set(&mut m, meta::STATE, ScanState::Failed.as_str());
            meta::set(&mut m, meta::ERROR, &e);
            (ScanState::Failed, m, last_view)
        }
    };
    meta::set(&mut metadata, meta::ENDED, &meta::rfc3339(ended));
    let result = meta::store_gap_list(store, shared, &view, &mut metadata)
        .and_then(|()| object.finish(metadata).map_err(anyhow::Error::from));
    match result {
        Ok(info) => {
            tracing::info!(
                "scan {id}: {} ({} bytes in {}/{})",
                state.as_str(),
                info.size_bytes,
                info.bucket,
                info.key
            );
            *shared.state.lock() = state;
        }
        Err(e) => {
            shared
                .error
                .lock()
                .get_or_insert(format!("finishing the scan failed: {e}"));
            tracing::warn!(
                "scan {id}: finishing failed: {e}; a restart finishes it as interrupted"
            );
            *shared.state.lock() = ScanState::Failed;
        }
    }
}
