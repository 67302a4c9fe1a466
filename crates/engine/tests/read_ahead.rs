//! The read promise's read-ahead (several threads, reused chunk buffers) returns exactly the committed bytes, in
//! order, whatever the number of read-ahead threads, the start offset and the reader's buffer size; its threads
//! read the disk in order, one read at a time.

mod common;

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use parking_lot::Mutex;
use permafrost_disk::{Disk, DiskError};
use permafrost_engine::{Engine, OpenOptions, WriteMode};

/// Everything `promise` yields, read `step` bytes at a time.
fn read_all(engine: &Engine, offset: u64, len: u64, step: usize) -> Vec<u8> {
    let mut promise = engine.read(0, offset, len).expect("read promise");
    let mut back = Vec::new();
    let mut buf = vec![0u8; step];
    loop {
        let n = promise.read(&mut buf).expect("read");
        if n == 0 {
            break;
        }
        back.extend_from_slice(&buf[..n]);
    }
    back
}

#[test]
fn read_ahead_returns_committed_bytes_in_order_and_zeros_where_never_written() {
    for readahead_chunks in [1, 2, 3, 4] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = test_config();
        config.readahead_chunks = readahead_chunks;
        let engine = Engine::create(dir.path(), config).expect("create grid");
        // Chunks are 2 MiB: [0, 3 MiB) and [5, 6 MiB) written, the rest never written, so chunk buffers that held
        // data are reused for chunks with unwritten gaps (their old bytes must not show).
        let mut expected = vec![0u8; (8 * MIB) as usize];
        let head = pattern(1, (3 * MIB) as usize);
        let tail = pattern(2, MIB as usize);
        write(&engine, 0, 0, &head, WriteMode::Serialized);
        write(&engine, 0, 5 * MIB, &tail, WriteMode::Serialized);
        expected[..head.len()].copy_from_slice(&head);
        expected[(5 * MIB) as usize..(6 * MIB) as usize].copy_from_slice(&tail);

        for (offset, len, step) in [
            (0, 8 * MIB, 8 << 20),
            (0, 8 * MIB, 12_345),
            // A short first chunk (chunks stay aligned to 2 MiB) and a range ending inside a chunk.
            (MIB + 4096, 5 * MIB, 1 << 20),
            (6 * MIB - 4096, 8192, 100),
        ] {
            let back = read_all(&engine, offset, len, step);
            assert_eq!(
                back.len() as u64,
                len,
                "readahead {readahead_chunks}, {offset}+{len}"
            );
            assert!(
                back == expected[offset as usize..(offset + len) as usize],
                "readahead {readahead_chunks}, {offset}+{len} by {step}: bytes differ from the committed ones"
            );
        }
        engine.close().unwrap();
    }
}

/// Read in place ([`std::io::BufRead`]): the same bytes as `Read`, in order, whatever the amounts consumed; and
/// promises dropped in the middle (their chunk buffers go back to the shared pool with other data in them) leave
/// the next promises' bytes exact, zeros included.
#[test]
fn read_in_place_returns_committed_bytes_and_pooled_buffers_never_leak_old_bytes() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::create(dir.path(), test_config()).expect("create grid");
    let mut expected = vec![0u8; (8 * MIB) as usize];
    let head = pattern(3, (3 * MIB) as usize);
    let tail = pattern(4, MIB as usize);
    write(&engine, 0, 0, &head, WriteMode::Serialized);
    write(&engine, 0, 5 * MIB, &tail, WriteMode::Serialized);
    expected[..head.len()].copy_from_slice(&head);
    expected[(5 * MIB) as usize..(6 * MIB) as usize].copy_from_slice(&tail);
    for round in 0..3 {
        // Half read, then dropped: its buffers (full of data) go back to the pool.
        let mut dropped = engine.read(0, 0, 8 * MIB).expect("read promise");
        let mut half = vec![0u8; (3 * MIB) as usize + 17];
        dropped.read_exact(&mut half).unwrap();
        assert!(half == expected[..half.len()], "round {round}: dropped one");
        drop(dropped);
        for (offset, len, step) in [(0, 8 * MIB, 1 << 20), (MIB + 4096, 5 * MIB, 4097)] {
            let mut promise = engine.read(0, offset, len).expect("read promise");
            let mut back = Vec::new();
            loop {
                let available = promise.fill_buf().unwrap();
                if available.is_empty() {
                    break;
                }
                let n = available.len().min(step);
                back.extend_from_slice(&available[..n]);
                promise.consume(n);
            }
            assert!(
                back == expected[offset as usize..(offset + len) as usize],
                "round {round}: {offset}+{len} consumed by {step}"
            );
            // At the end it stays at the end.
            assert!(promise.fill_buf().unwrap().is_empty());
            assert_eq!(promise.read(&mut [0u8; 8]).unwrap(), 0);
        }
    }
    engine.close().unwrap();
}

/// Reads of a read promise's threads as the disk sees them: how many were in flight at most, and their offsets
/// in the order they started.
#[derive(Default)]
struct PromiseReads {
    in_flight: usize,
    in_flight_max: usize,
    offsets: Vec<u64>,
}

/// A disk that records the reads of read-ahead threads and makes each take 20 ms (long enough for any other
/// thread to start one meanwhile).
struct SlowReads {
    inner: Arc<dyn Disk>,
    reads: Arc<Mutex<PromiseReads>>,
}

impl Disk for SlowReads {
    fn capacity_bytes(&self) -> u64 {
        self.inner.capacity_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        let promise_thread = std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with("permafrost-read-"));
        if !promise_thread {
            return self.inner.read_at(offset, buf);
        }
        {
            let mut r = self.reads.lock();
            r.in_flight += 1;
            r.in_flight_max = r.in_flight_max.max(r.in_flight);
            r.offsets.push(offset);
        }
        std::thread::sleep(Duration::from_millis(20));
        let result = self.inner.read_at(offset, buf);
        self.reads.lock().in_flight -= 1;
        result
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        self.inner.write_at(offset, buf)
    }
    fn sync(&self) -> Result<(), DiskError> {
        self.inner.sync()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// However many read-ahead threads a promise has, the disk reads its range front to back, one read at a time
/// (as a sequential reader would; concurrent reads of one range are slower on a disk and finish together, late),
/// and the bytes are the committed ones.
#[test]
fn read_ahead_threads_read_the_disk_in_order_one_read_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, reads) = engine_with_slow_reads(dir.path(), 3);
    let data = pattern(5, (12 * MIB) as usize);
    write(&engine, 0, 0, &data, WriteMode::Serialized);
    *reads.lock() = PromiseReads::default();

    let back = read_all(&engine, 0, 12 * MIB, 1 << 20);
    assert!(back == data, "bytes differ from the committed ones");
    assert_in_order_one_at_a_time(&reads.lock(), "the promise's threads");
    engine.close().unwrap();
}

/// The recorded reads of 12 MiB in 2 MiB chunks went to the disk front to back, one at a time.
fn assert_in_order_one_at_a_time(reads: &PromiseReads, whose: &str) {
    assert!(
        reads.offsets.len() >= 6,
        "six chunks of 2 MiB need six disk reads, {} recorded",
        reads.offsets.len()
    );
    assert_eq!(
        reads.in_flight_max, 1,
        "{whose} had reads in flight at the same time: {:?}",
        reads.offsets
    );
    assert!(
        reads.offsets.windows(2).all(|w| w[0] < w[1]),
        "disk reads out of order: {:?}",
        reads.offsets
    );
}

/// An engine whose disks record the reads of read-ahead threads (each taking 20 ms), with `readahead_chunks`
/// threads per promise and 2 MiB chunks.
fn engine_with_slow_reads(
    dir: &std::path::Path,
    readahead_chunks: usize,
) -> (Engine, Arc<Mutex<PromiseReads>>) {
    let mut config = test_config();
    config.readahead_chunks = readahead_chunks;
    Engine::create(dir, config)
        .expect("create grid")
        .close()
        .unwrap();
    let reads = Arc::new(Mutex::new(PromiseReads::default()));
    let recorded = Arc::clone(&reads);
    let options = OpenOptions {
        wrap_disk: Some(Box::new(move |_, disk| {
            Arc::new(SlowReads {
                inner: disk,
                reads: Arc::clone(&recorded),
            }) as Arc<dyn Disk>
        })),
        power_profile: None,
    };
    (Engine::open_with(dir, options).expect("open grid"), reads)
}

/// A promise opened while the one before it in the bucket is still read (as the store opens an object's next
/// part ahead) reads after it: the disk reads both ranges front to back, one read at a time, instead of
/// serving the two promises at once.
#[test]
fn a_promise_opened_where_another_ends_reads_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, reads) = engine_with_slow_reads(dir.path(), 2);
    let data = pattern(6, (12 * MIB) as usize);
    write(&engine, 0, 0, &data, WriteMode::Serialized);
    *reads.lock() = PromiseReads::default();

    let mut first = engine.read(0, 0, 6 * MIB).expect("read promise");
    let mut back = vec![0u8; (6 * MIB) as usize];
    first.read_exact(&mut back[..MIB as usize]).unwrap();
    // The next range's promise opens while the first one's threads read its last chunks.
    let mut second = engine.read(0, 6 * MIB, 6 * MIB).expect("read promise");
    first.read_exact(&mut back[MIB as usize..]).unwrap();
    drop(first);
    back.resize((12 * MIB) as usize, 0);
    second.read_exact(&mut back[(6 * MIB) as usize..]).unwrap();
    assert!(back == data, "bytes differ from the committed ones");
    drop(second);
    assert_in_order_one_at_a_time(&reads.lock(), "the two promises");
    engine.close().unwrap();
}

/// A promise opened where another one ends does not wait for that one's reader: when the first promise's
/// threads hold the chunks they read and its reader takes none, the second promise reads on.
#[test]
fn a_promise_after_one_whose_reader_stopped_reads_on() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _reads) = engine_with_slow_reads(dir.path(), 2);
    let data = pattern(7, (16 * MIB) as usize);
    write(&engine, 0, 0, &data, WriteMode::Serialized);
    let engine = Arc::new(engine);

    let stalled = engine.read(0, 0, 12 * MIB).expect("read promise");
    let (done, finished) = std::sync::mpsc::channel();
    let reader = {
        let engine = Arc::clone(&engine);
        std::thread::spawn(move || {
            let back = read_all(&engine, 12 * MIB, 4 * MIB, 1 << 20);
            let _ = done.send(());
            back
        })
    };
    let waited = finished.recv_timeout(Duration::from_secs(20));
    // Dropping the stalled promise lets the reader go on even when it waited for it.
    drop(stalled);
    let back = reader.join().unwrap();
    assert!(
        waited.is_ok(),
        "the promise after one whose reader stopped did not finish while that one stayed open"
    );
    assert!(back == data[(12 * MIB) as usize..], "bytes differ");
    Arc::try_unwrap(engine)
        .ok()
        .expect("the only handle")
        .close()
        .unwrap();
}
