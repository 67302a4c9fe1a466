//! The upload pipeline: one request's bytes are cut into chunks and handed, as shared buffers, to *lanes* that
//! run on threads of their own at the same time: hash lanes (BLAKE3 and the checksums the client announced in
//! one, MD5 in another when it is needed) and the write lane (compression, the cache file, early writeback).
//! The caller only copies bytes into the current chunk.
//!
//! Back of the envelope (this VM, AMD EPYC with SHA-NI and AVX-512, per byte of one core): MD5 ≈ 1.5 ns, SHA-256
//! ≈ 0.6 ns, BLAKE3 ≈ 0.25 ns, CRC32/CRC32C ≈ 0.1 ns, zstd-3 on text ≈ 2–3 ns, a write into the page cache
//! ≈ 0.3–0.5 ns. One thread doing all of it caps a request near 200 MB/s; in lanes, the slowest lane sets the pace.
//!
//! **Invariants.**
//! - Memory is bounded: per request at most [`LANE_QUEUE_CHUNKS`] chunks queued per lane plus the one being
//!   filled, and in total at most [`CHUNKS_IN_FLIGHT_MAX`] chunk buffers across all requests (a request waits for
//!   a permit before it queues a chunk).
//! - Lanes see the chunks in order; a lane that fails stops taking chunks and its error is what the request
//!   gets. Nothing becomes visible here: the caller renames and commits only after [`Pipeline::finish`].
//! - Compression is decided from the first chunk: if it does not save 12.5 %, the whole body is stored raw and
//!   the compressor is never called again; otherwise every chunk is compressed (a chunk that does not save
//!   12.5 % is stored raw inside the chunked form).
//! - Small bodies (one chunk or less) never start a thread: the lanes run on the caller at `finish`.
//! - With writeback on (the cache's fsync policy), a *flusher* thread of the upload `fdatasync`s the cache file
//!   while the body still arrives, so the device drains the upload as it comes and the caller's final fsync has
//!   only the last window left. The final fsync stays the durability point; an error of an early flush fails the
//!   upload at `finish` (the flusher shares the file description, so its error would otherwise be consumed).

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};
use permafrost_format::{Algorithm, ChunkCompressor, ChunkEntry, ChunkIndex};

use crate::checksum::{ChecksumAlgorithm, Hasher};

/// Chunks queued between the caller and each lane of one request.
pub const LANE_QUEUE_CHUNKS: usize = 3;
/// Chunk buffers in flight across all requests.
pub const CHUNKS_IN_FLIGHT_MAX: usize = 192;

static IN_FLIGHT: Mutex<usize> = Mutex::new(0);
static IN_FLIGHT_FREED: Condvar = Condvar::new();

/// Buffers handed back by chunks the lanes are done with, for the request's next chunks (a fresh 1 MiB buffer
/// costs page faults and clearing, a tenth of a PUT's CPU when measured).
type BufferPool = Arc<Mutex<Vec<Vec<u8>>>>;

/// A chunk buffer counted against [`CHUNKS_IN_FLIGHT_MAX`] until dropped (when the last lane is done with it);
/// then its buffer goes back to the request's pool.
struct Chunk {
    data: Vec<u8>,
    pool: BufferPool,
}

impl Chunk {
    fn new(data: Vec<u8>, pool: &BufferPool) -> Chunk {
        let mut n = IN_FLIGHT.lock();
        while *n >= CHUNKS_IN_FLIGHT_MAX {
            IN_FLIGHT_FREED.wait(&mut n);
        }
        *n += 1;
        Chunk {
            data,
            pool: Arc::clone(pool),
        }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        let mut buf = std::mem::take(&mut self.data);
        buf.clear();
        let mut pool = self.pool.lock();
        if pool.len() < LANE_QUEUE_CHUNKS + 2 {
            pool.push(buf);
        }
        drop(pool);
        *IN_FLIGHT.lock() -= 1;
        IN_FLIGHT_FREED.notify_one();
    }
}

/// What the hash lanes computed.
pub(crate) struct Hashed {
    pub blake3: [u8; 32],
    /// When MD5 was asked for.
    pub md5: Option<[u8; 16]>,
    /// The other checksums asked for, in the order asked.
    pub checksums: Vec<(ChecksumAlgorithm, Vec<u8>)>,
}

/// Where the write lane put the stored bytes.
pub(crate) enum Stored {
    /// The cache file (at the spec's path).
    File(File),
    /// In memory: the body stayed within `inline_bytes_max` (its stored bytes go into the catalog).
    Inline(Vec<u8>),
}

/// What the write lane wrote.
pub(crate) struct Written {
    pub stored: Stored,
    pub stored_bytes: u64,
    /// The chunk index when the body is stored compressed in chunks; `None` when stored raw.
    pub index: Option<ChunkIndex>,
    /// Device flushes made while the body arrived (before the caller's final fsync); the tests read it.
    #[cfg_attr(not(test), allow(dead_code))]
    pub early_flushes: u64,
}

/// One sequential consumer of the chunks.
enum Lane {
    Hash(Box<HashLane>),
    Write(Box<WriteLane>),
}

/// Hashers fed in chunk order.
struct HashLane {
    blake3: Option<blake3::Hasher>,
    hashers: Vec<(ChecksumAlgorithm, Hasher)>,
}

impl HashLane {
    fn take(&mut self, data: &[u8]) {
        if let Some(b) = self.blake3.as_mut() {
            b.update(data);
        }
        for (_, h) in &mut self.hashers {
            h.update(data);
        }
    }
}

/// The cache file: chunks compressed (or not) and written in order, with writeback started as it goes. The stored
/// bytes stay in memory while they fit in `inline_bytes_max`; the file is created when they do not.
struct WriteLane {
    file: Option<File>,
    memory: Vec<u8>,
    inline_bytes_max: u64,
    path: PathBuf,
    compressor: Option<ChunkCompressor>,
    /// `None` until the first chunk decided; then whether the body is stored in compressed chunks.
    chunked: Option<bool>,
    entries: Vec<ChunkEntry>,
    logical_bytes: u64,
    stored_bytes: u64,
    compressed: Vec<u8>,
    /// Start writeback every this many bytes (0: never) and wait for the window before the last one.
    writeback_bytes: u64,
    /// Stored bytes up to which writeback was started.
    writeback_started: u64,
    /// Pages on the device are dropped from the page cache by the flusher.
    drop_behind: bool,
    /// Started with the first writeback window.
    flusher: Option<Flusher>,
}

impl WriteLane {
    fn take(&mut self, chunk: &[u8]) -> io::Result<()> {
        let decided = match (self.chunked, self.compressor.as_mut()) {
            (Some(chunked), _) => chunked,
            (None, None) => {
                self.chunked = Some(false);
                false
            }
            (None, Some(c)) => {
                // The sample: compress the first chunk; if it does not save enough, nothing will be compressed.
                let saves = c.compress(chunk, &mut self.compressed)?;
                self.chunked = Some(saves);
                if !saves {
                    self.compressor = None;
                }
                return self.put(chunk, saves);
            }
        };
        if decided {
            let saves = self
                .compressor
                .as_mut()
                .expect("chunked bodies have a compressor")
                .compress(chunk, &mut self.compressed)?;
            self.put(chunk, saves)
        } else {
            self.put(chunk, false)
        }
    }

    /// Write one chunk: its compressed form (in `self.compressed`) when `compressed`, else as it is.
    fn put(&mut self, chunk: &[u8], compressed: bool) -> io::Result<()> {
        let stored: &[u8] = if compressed { &self.compressed } else { chunk };
        if self.file.is_none()
            && self.memory.len() as u64 + stored.len() as u64 <= self.inline_bytes_max
        {
            self.memory.extend_from_slice(stored);
        } else {
            if self.file.is_none() {
                let mut file =
                    File::create(&self.path).map_err(|e| with_path(e, "create", &self.path))?;
                file.write_all(&self.memory)
                    .map_err(|e| with_path(e, "write", &self.path))?;
                self.memory = Vec::new();
                self.file = Some(file);
            }
            self.file
                .as_mut()
                .expect("created above")
                .write_all(stored)
                .map_err(|e| with_path(e, "write", &self.path))?;
        }
        if self.chunked == Some(true) {
            self.entries.push(ChunkEntry {
                logical_offset: self.logical_bytes,
                logical_len: chunk.len() as u64,
                stored_offset: self.stored_bytes,
                stored_len: stored.len() as u64,
                algorithm: if compressed {
                    self.compressor
                        .as_ref()
                        .expect("compressed chunks have a compressor")
                        .algorithm()
                } else {
                    Algorithm::None
                },
            });
        }
        self.logical_bytes += chunk.len() as u64;
        self.stored_bytes += stored.len() as u64;
        self.write_behind()
    }

    /// Start writeback of each full window as it is written and wait for the window before it, so dirty pages
    /// stay bounded per upload and the final fsync has only the last windows left to write.
    fn write_behind(&mut self) -> io::Result<()> {
        let window = self.writeback_bytes;
        let Some(file) = self.file.as_ref() else {
            return Ok(());
        };
        if window == 0 || self.stored_bytes < self.writeback_started + window {
            return Ok(());
        }
        let start = self.writeback_started;
        let end = self.stored_bytes / window * window;
        sync_range(file, start, end - start, false)
            .map_err(|e| with_path(e, "start writeback of", &self.path))?;
        if start >= window {
            sync_range(file, start - window, window, true)
                .map_err(|e| with_path(e, "write back", &self.path))?;
        }
        self.writeback_started = end;
        if self.flusher.is_none() {
            self.flusher = Some(Flusher::start(file, &self.path, self.drop_behind)?);
        }
        self.flusher.as_ref().expect("started above").written(end);
        Ok(())
    }

    fn finish(mut self) -> io::Result<Written> {
        let early_flushes = match self.flusher.take() {
            Some(flusher) => flusher.finish()?,
            None => 0,
        };
        let index = (self.chunked == Some(true)).then(|| {
            ChunkIndex::from_entries(self.entries).expect("chunks written in order form an index")
        });
        Ok(Written {
            stored: match self.file {
                Some(file) => Stored::File(file),
                None => Stored::Inline(self.memory),
            },
            stored_bytes: self.stored_bytes,
            index,
            early_flushes,
        })
    }
}

/// Device flushes of one upload's cache file while it is written. On a drive with a volatile write cache (and on
/// a VM, whose virtual disk completes writes into the host's memory) the data reaches the medium only at a
/// flush, and a flush costs about as long as writing what is dirty: one fsync at the end of a 64 MiB part waited
/// 70–90 ms for the whole part, a flusher running alongside leaves ~10 ms (BENCHMARKS.md, "early flushes").
struct Flusher {
    state: Arc<(Mutex<FlushState>, Condvar)>,
    /// Ends with the number of flushes it made.
    thread: Option<JoinHandle<io::Result<u64>>>,
}

#[derive(Default)]
struct FlushState {
    /// Stored bytes written so far (the flusher flushes when it is ahead of what was flushed).
    written: u64,
    done: bool,
}

impl Flusher {
    fn start(file: &File, path: &std::path::Path, drop_behind: bool) -> io::Result<Flusher> {
        let file = file
            .try_clone()
            .map_err(|e| with_path(e, "share the descriptor of", path))?;
        let named = path.to_path_buf();
        let state = Arc::new((Mutex::new(FlushState::default()), Condvar::new()));
        let shared = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name("permafrost-flush".into())
            .spawn(move || -> io::Result<u64> {
                let (lock, wake) = &*shared;
                let (mut flushed, mut flushes) = (0, 0);
                loop {
                    let target = {
                        let mut s = lock.lock();
                        while !s.done && s.written <= flushed {
                            wake.wait(&mut s);
                        }
                        if s.done {
                            return Ok(flushes);
                        }
                        s.written
                    };
                    file.sync_data()
                        .map_err(|e| with_path(e, "flush", &named))?;
                    if drop_behind {
                        drop_cached_pages(&file, flushed, target - flushed);
                    }
                    flushed = target;
                    flushes += 1;
                }
            })
            .map_err(|e| with_path(e, "start the flusher of", path))?;
        Ok(Flusher {
            state,
            thread: Some(thread),
        })
    }

    fn written(&self, bytes: u64) {
        let (lock, wake) = &*self.state;
        lock.lock().written = bytes;
        wake.notify_one();
    }

    fn stop(&self) {
        let (lock, wake) = &*self.state;
        lock.lock().done = true;
        wake.notify_one();
    }

    /// Stop after the flush in progress: the number of flushes made, or the error of one.
    fn finish(mut self) -> io::Result<u64> {
        self.stop();
        match self.thread.take().expect("joined once").join() {
            Ok(result) => result,
            Err(_) => Err(io::Error::other("the cache flusher panicked")),
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        // Abandoned upload: the thread ends after its flush in progress, on its own.
        self.stop();
    }
}

fn with_path(e: io::Error, what: &str, path: &std::path::Path) -> io::Error {
    io::Error::new(e.kind(), format!("cannot {what} {}: {e}", path.display()))
}

/// Ask the kernel to drop the clean cached pages of `[offset, offset + len)` (`POSIX_FADV_DONTNEED`). Advice
/// only: a page still dirty stays, and an error changes nothing that was written, so none is reported.
pub(crate) fn drop_cached_pages(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    // SAFETY: plain syscall on an open descriptor; no memory is passed.
    unsafe {
        libc::posix_fadvise(
            file.as_raw_fd(),
            offset as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        )
    };
}

/// `sync_file_range` of `[offset, offset + len)`: start writeback, or (`wait`) start it and wait for it.
fn sync_range(file: &File, offset: u64, len: u64, wait: bool) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let flags = if wait {
        libc::SYNC_FILE_RANGE_WAIT_BEFORE
            | libc::SYNC_FILE_RANGE_WRITE
            | libc::SYNC_FILE_RANGE_WAIT_AFTER
    } else {
        libc::SYNC_FILE_RANGE_WRITE
    };
    // SAFETY: plain syscall on an open descriptor; no memory is passed.
    let r = unsafe { libc::sync_file_range(file.as_raw_fd(), offset as i64, len as i64, flags) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// How a pipeline is set up.
pub(crate) struct PipelineSpec {
    /// The cache file to create when the stored bytes exceed `inline_bytes_max`.
    pub path: PathBuf,
    /// Stored bytes kept in memory at most (0: always a file).
    pub inline_bytes_max: u64,
    /// Compress chunks with this algorithm (decided on the first chunk); `None`: store as received.
    pub compression: Option<Algorithm>,
    pub chunk_bytes: usize,
    /// Compute MD5 (single-part ETag, `Content-MD5`).
    pub md5: bool,
    /// Other checksums to compute (announced by the client).
    pub checksums: Vec<ChecksumAlgorithm>,
    /// Writeback window of the write lane (0: leave writeback to the kernel and the final fsync).
    pub writeback_bytes: u64,
    /// Drop the file's pages from the page cache after each early flush (`cache_drop_behind`).
    pub drop_behind: bool,
}

/// A lane's queue and thread.
type LaneThread = (SyncSender<Arc<Chunk>>, JoinHandle<io::Result<Lane>>);

enum Run {
    /// No thread yet: the lanes are here and run on the caller.
    Inline(Vec<Lane>),
    /// One thread per lane, each fed through its own bounded queue.
    Threads(Vec<LaneThread>),
    /// A lane failed or the pipeline was taken apart.
    Done,
}

/// One request's pipeline. [`Pipeline::push`] the body, then [`Pipeline::finish`].
pub(crate) struct Pipeline {
    chunk_bytes: usize,
    pending: Vec<u8>,
    pool: BufferPool,
    run: Run,
}

impl Pipeline {
    pub fn new(spec: PipelineSpec) -> io::Result<Pipeline> {
        let mut lanes = vec![Lane::Hash(Box::new(HashLane {
            blake3: Some(blake3::Hasher::new()),
            hashers: spec
                .checksums
                .iter()
                .filter(|a| **a != ChecksumAlgorithm::Md5)
                .map(|&a| (a, a.hasher()))
                .collect(),
        }))];
        if spec.md5 {
            lanes.push(Lane::Hash(Box::new(HashLane {
                blake3: None,
                hashers: vec![(ChecksumAlgorithm::Md5, ChecksumAlgorithm::Md5.hasher())],
            })));
        }
        let compressor = spec
            .compression
            .filter(|a| *a != Algorithm::None)
            .map(ChunkCompressor::new)
            .transpose()
            .map_err(io::Error::other)?;
        lanes.push(Lane::Write(Box::new(WriteLane {
            file: None,
            memory: Vec::new(),
            inline_bytes_max: spec.inline_bytes_max,
            path: spec.path,
            compressor,
            chunked: None,
            entries: Vec::new(),
            logical_bytes: 0,
            stored_bytes: 0,
            compressed: Vec::new(),
            writeback_bytes: spec.writeback_bytes,
            writeback_started: 0,
            drop_behind: spec.drop_behind,
            flusher: None,
        })));
        Ok(Pipeline {
            chunk_bytes: spec.chunk_bytes,
            // Grows with the first chunk: a small object never allocates a whole chunk.
            pending: Vec::new(),
            pool: BufferPool::default(),
            run: Run::Inline(lanes),
        })
    }

    /// Take the next bytes of the body.
    pub fn push(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let take = (self.chunk_bytes - self.pending.len()).min(data.len());
            self.pending.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.pending.len() == self.chunk_bytes {
                let next = self
                    .pool
                    .lock()
                    .pop()
                    .unwrap_or_else(|| Vec::with_capacity(self.chunk_bytes));
                let full = std::mem::replace(&mut self.pending, next);
                self.dispatch(full)?;
            }
        }
        Ok(())
    }

    fn dispatch(&mut self, data: Vec<u8>) -> io::Result<()> {
        if let Run::Inline(_) = self.run {
            self.start_threads();
        }
        let chunk = Arc::new(Chunk::new(data, &self.pool));
        let Run::Threads(lanes) = &self.run else {
            return Err(io::Error::other("the upload pipeline has stopped"));
        };
        for (tx, _) in lanes {
            if tx.send(Arc::clone(&chunk)).is_err() {
                // The lane stopped on an error: finishing collects it.
                return Err(self.stop().err().unwrap_or_else(|| {
                    io::Error::other("an upload lane stopped without an error")
                }));
            }
        }
        Ok(())
    }

    fn start_threads(&mut self) {
        let Run::Inline(lanes) = std::mem::replace(&mut self.run, Run::Done) else {
            return;
        };
        let threads = lanes
            .into_iter()
            .map(|mut lane| {
                let (tx, rx): (SyncSender<Arc<Chunk>>, Receiver<Arc<Chunk>>) =
                    sync_channel(LANE_QUEUE_CHUNKS);
                let name = match lane {
                    Lane::Hash(_) => "permafrost-hash",
                    Lane::Write(_) => "permafrost-write",
                };
                let handle = std::thread::Builder::new()
                    .name(name.into())
                    .spawn(move || -> io::Result<Lane> {
                        for chunk in rx {
                            take(&mut lane, &chunk.data)?;
                        }
                        Ok(lane)
                    })
                    .expect("spawn an upload lane");
                (tx, handle)
            })
            .collect();
        self.run = Run::Threads(threads);
    }

    /// Close the queues and collect the lanes (the first error of any lane).
    fn stop(&mut self) -> io::Result<Vec<Lane>> {
        match std::mem::replace(&mut self.run, Run::Done) {
            Run::Inline(lanes) => Ok(lanes),
            Run::Done => Err(io::Error::other("the upload pipeline has stopped")),
            Run::Threads(threads) => {
                let mut lanes = Vec::with_capacity(threads.len());
                let mut first_error = None;
                for (tx, handle) in threads {
                    drop(tx);
                    match handle.join() {
                        Ok(Ok(lane)) => lanes.push(lane),
                        Ok(Err(e)) => {
                            first_error.get_or_insert(e);
                        }
                        Err(_) => {
                            first_error.get_or_insert(io::Error::other("an upload lane panicked"));
                        }
                    }
                }
                match first_error {
                    Some(e) => Err(e),
                    None => Ok(lanes),
                }
            }
        }
    }

    /// The last (short) chunk, then every lane's result.
    pub fn finish(mut self) -> io::Result<(Hashed, Written)> {
        let last = std::mem::take(&mut self.pending);
        let mut lanes = match self.run {
            Run::Threads(_) if !last.is_empty() => {
                self.dispatch(last)?;
                self.stop()?
            }
            _ => {
                let mut lanes = self.stop()?;
                if !last.is_empty() {
                    for lane in &mut lanes {
                        take(lane, &last)?;
                    }
                }
                lanes
            }
        };
        let mut hashed = Hashed {
            blake3: [0; 32],
            md5: None,
            checksums: Vec::new(),
        };
        let mut written = None;
        for lane in lanes.drain(..) {
            match lane {
                Lane::Hash(h) => {
                    if let Some(b) = h.blake3 {
                        hashed.blake3 = *b.finalize().as_bytes();
                    }
                    for (algorithm, hasher) in h.hashers {
                        let digest = hasher.finish();
                        if algorithm == ChecksumAlgorithm::Md5 {
                            hashed.md5 = Some(digest.try_into().expect("an MD5 is 16 bytes"));
                        } else {
                            hashed.checksums.push((algorithm, digest));
                        }
                    }
                }
                Lane::Write(w) => written = Some(w.finish()?),
            }
        }
        Ok((hashed, written.expect("a pipeline has a write lane")))
    }
}

fn take(lane: &mut Lane, data: &[u8]) -> io::Result<()> {
    match lane {
        Lane::Hash(h) => {
            h.take(data);
            Ok(())
        }
        Lane::Write(w) => w.take(data),
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        // Abandoned (an error or an abort): let the lane threads end.
        let _ = self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use md5::Digest as _;
    use std::io::Read;

    fn run(
        body: &[u8],
        compression: Option<Algorithm>,
        piece: usize,
    ) -> (Hashed, Written, Vec<u8>) {
        run_inline(body, compression, piece, 0)
    }

    fn run_inline(
        body: &[u8],
        compression: Option<Algorithm>,
        piece: usize,
        inline_bytes_max: u64,
    ) -> (Hashed, Written, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut p = Pipeline::new(PipelineSpec {
            path: path.clone(),
            inline_bytes_max,
            compression,
            chunk_bytes: 64 << 10,
            md5: true,
            checksums: vec![ChecksumAlgorithm::Crc32c, ChecksumAlgorithm::Sha256],
            writeback_bytes: 256 << 10,
            drop_behind: false,
        })
        .unwrap();
        for part in body.chunks(piece.max(1)) {
            p.push(part).unwrap();
        }
        let (hashed, written) = p.finish().unwrap();
        let stored = match &written.stored {
            Stored::File(_) => std::fs::read(&path).unwrap(),
            Stored::Inline(bytes) => {
                assert!(!path.exists(), "an inline body has no file");
                bytes.clone()
            }
        };
        (hashed, written, stored)
    }

    fn noise(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn every_lane_sees_every_byte_in_order_whatever_the_sizes() {
        for len in [0, 1, 65_535, 65_536, 65_537, 1 << 20, (1 << 20) + 12_345] {
            for piece in [1000, 65_536, 1 << 20] {
                let body = noise(len, len as u64 + 1);
                let (hashed, written, stored) = run(&body, None, piece);
                assert_eq!(
                    hashed.blake3,
                    *blake3::hash(&body).as_bytes(),
                    "{len}/{piece}"
                );
                assert_eq!(hashed.md5.unwrap()[..], md5::Md5::digest(&body)[..]);
                assert_eq!(
                    hashed.checksums[0].1,
                    crc_fast::crc32_iscsi(&body).to_be_bytes()
                );
                assert_eq!(hashed.checksums[1].1[..], sha2::Sha256::digest(&body)[..]);
                assert!(written.index.is_none());
                assert_eq!(written.stored_bytes, len as u64);
                assert!(stored == body);
            }
        }
    }

    #[test]
    fn compression_is_decided_by_the_first_chunk() {
        let text: Vec<u8> = (0..(1 << 20)).map(|i| b"permafrost "[i % 11]).collect();
        // Noise first: stored raw, the text after it is never compressed.
        let mixed = [noise(64 << 10, 3), text.clone()].concat();
        let (_, written, stored) = run(&mixed, Some(Algorithm::Zstd), 10_000);
        assert!(written.index.is_none());
        assert!(stored == mixed);
        // Text first: chunked; a noisy chunk later is stored raw inside the chunked form.
        let mixed = [text.clone(), noise(64 << 10, 4)].concat();
        for algorithm in [Algorithm::Zstd, Algorithm::Lz4] {
            let (hashed, written, stored) = run(&mixed, Some(algorithm), 10_000);
            let index = written.index.expect("chunked");
            assert!(written.stored_bytes < mixed.len() as u64 / 4);
            let last = index.entries().last().unwrap();
            assert_eq!(last.algorithm, Algorithm::None);
            let mut decoded = Vec::new();
            permafrost_format::decode_range(
                &index,
                std::io::Cursor::new(stored),
                0,
                mixed.len() as u64,
            )
            .unwrap()
            .read_to_end(&mut decoded)
            .unwrap();
            assert!(decoded == mixed);
            assert_eq!(hashed.blake3, *blake3::hash(&mixed).as_bytes());
        }
    }

    #[test]
    fn a_small_body_stays_in_memory_and_a_larger_one_spills_to_its_file() {
        for len in [0, 1000, 32 << 10, (32 << 10) + 1, 200_000] {
            let body = noise(len, 9);
            let (hashed, written, stored) = run_inline(&body, None, 7000, 32 << 10);
            assert_eq!(
                matches!(written.stored, Stored::Inline(_)),
                len <= 32 << 10,
                "{len}"
            );
            assert!(stored == body);
            assert_eq!(hashed.blake3, *blake3::hash(&body).as_bytes());
        }
        // Compressible: what counts is the stored (compressed) size.
        let text: Vec<u8> = (0..(60 << 10)).map(|i| b"permafrost "[i % 11]).collect();
        let (_, written, _) = run_inline(&text, Some(Algorithm::Lz4), 7000, 32 << 10);
        assert!(matches!(written.stored, Stored::Inline(_)) && written.index.is_some());
    }

    #[test]
    fn a_body_of_several_writeback_windows_is_flushed_while_it_arrives_and_a_small_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let spec = |name: &str, writeback_bytes| PipelineSpec {
            path: dir.path().join(name),
            inline_bytes_max: 0,
            compression: None,
            chunk_bytes: 64 << 10,
            md5: false,
            checksums: Vec::new(),
            writeback_bytes,
            drop_behind: false,
        };
        let body = noise(2 << 20, 5);
        let mut p = Pipeline::new(spec("large", 256 << 10)).unwrap();
        for window in body.chunks(256 << 10) {
            p.push(window).unwrap();
            // Arriving over a network: the flusher gets its turn between windows (0.35 s in all, so a loaded
            // test machine still schedules it).
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let (_, written) = p.finish().unwrap();
        assert!(written.early_flushes >= 1, "no flush while 2 MiB arrived");
        assert!(std::fs::read(dir.path().join("large")).unwrap() == body);

        // Smaller than one window, or writeback off (fsync = false): no flusher.
        for (name, len, writeback) in [("small", 200 << 10, 256 << 10), ("off", 2 << 20, 0)] {
            let mut p = Pipeline::new(spec(name, writeback)).unwrap();
            p.push(&body[..len]).unwrap();
            let (_, written) = p.finish().unwrap();
            assert_eq!(written.early_flushes, 0, "{name}");
        }
    }

    #[test]
    fn a_failing_write_lane_fails_the_upload_without_hanging() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the file should be created: the write lane cannot create it.
        let path = dir.path().join("f");
        std::fs::create_dir(&path).unwrap();
        let mut p = Pipeline::new(PipelineSpec {
            path,
            inline_bytes_max: 0,
            compression: None,
            chunk_bytes: 4096,
            md5: false,
            checksums: Vec::new(),
            writeback_bytes: 0,
            drop_behind: false,
        })
        .unwrap();
        let chunk = vec![7u8; 4096];
        let mut error = None;
        for _ in 0..64 {
            if let Err(e) = p.push(&chunk) {
                error = Some(e);
                break;
            }
        }
        let error = match error {
            Some(e) => e,
            None => p
                .finish()
                .err()
                .expect("a read-only file cannot be written"),
        };
        assert!(error.to_string().contains("cannot create"), "{error}");
    }
}
