//! # permafrost-record: an e-VLBI instrument recorder on the archive
//!
//! **Job.** Record what a radio telescope sends — VDIF frames over UDP, 1–8 Gbit/s per antenna — into scans of
//! the archive (`BUCKET/EXPERIMENT/STATION/SCAN.vdif`), each checked (BLAKE3), protected by the grid's parity
//! and readable while it is being recorded; count what was lost the way VLBI recorders do; start and stop scans
//! on command or from a schedule file. docs/record.md tells the whole story.
//!
//! | module | what |
//! |---|---|
//! | [`vdif`] | the VDIF header and jive5ab's `udps` sequence prefix (property-tested) |
//! | [`net`] | UDP: large receive buffers (reporting a kernel cap), `recvmmsg`/`sendmmsg` batches, drop counters |
//! | [`loss`] | loss accounting: expected, received, missing, out of order, duplicates, gaps with byte offsets |
//! | `scan` | one scan: receiving, writing and sealing threads around a bounded ring |
//! | [`recorder`] | the scans of a server: start, stop, status, the schedule, restart after a crash |
//! | [`schedule`] | the schedule file |
//! | [`stream`] | a deterministic VDIF stream: the paced sender and the verifier of recorded bytes |
//! | [`floor`] | the floor of the benchmark: a plain `recvmmsg`-to-file loop |
//!
//! **Invariants.**
//! - The receiving thread never waits for the writer, the cache or the catalog: between them is a ring of up
//!   to `ring_bytes` in blocks of `block_bytes` (grown while the writer is behind); when it is full, frames
//!   are received and dropped, and counted (`record-frames-dropped-writer-behind`), never silently.
//! - Frames are never invented: a scan holds the frames received, in arrival order; missing ones are recorded
//!   as gaps (first missing position, count, byte offset), stored with the scan.
//! - A scan's metadata always describes its durable prefix: it is committed with each durable point in the
//!   same catalog transaction (`Store::begin_growing`, `GrowingObject::append`). A SIGKILL keeps every durable
//!   point; the next start finishes such a scan as `interrupted`, saying where it stops.
//! - Every rejected datagram is counted by reason and the first ones are logged with what was wrong.
//!
//! **Not here.** HTTP, routing and authentication (the admin API's router: [`api::add_endpoints`] adds the
//! recorder's endpoints to it), the CLI (crates/cli).

pub mod api;
pub mod floor;
pub mod loss;
pub(crate) mod meta;
pub mod net;
pub mod recorder;
mod scan;
pub mod schedule;
pub mod stream;
pub mod vdif;

pub use recorder::{Recorder, RecorderStatus};
pub use scan::{ScanSpec, ScanState, ScanStatus, ThreadCpu, WriterView};

/// Settings of the recorder (`[record]` in permafrost.toml).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecordConfig {
    /// S3 bucket of the scans (created by the first scan if missing, with compression `none`: VDIF samples do not
    /// compress).
    pub bucket: String,
    /// Socket receive buffer asked for; the kernel caps it at `net.core.rmem_max` (reported).
    pub rcvbuf_bytes: usize,
    /// Ring between the receiving and the writing thread, at most: it starts with an eighth of this (at most
    /// 256 MiB) and grows while the writer is behind, e.g. while the cache disk writes more slowly than the
    /// stream arrives (this VM's disk: ~200 MB/s, 2 Gbit/s is 250 MB/s: 60 s take ~3 GB).
    pub ring_bytes: usize,
    /// Bytes of one ring block.
    pub block_bytes: usize,
    /// A durable point at least this often (what readers and a crash see).
    pub seal_interval_ms: u64,
    /// A piece is sealed at this size at the latest.
    pub piece_bytes_max: u64,
    /// Days a scan is kept: its `record-expires` date, and the lifecycle rule (`record-retention`) of the bucket
    /// when the recorder creates it (0: none).
    pub retention_days: u32,
    /// Gaps listed in a scan's metadata; more go into `KEY.gaps.json`.
    pub gaps_in_metadata_max: usize,
    /// Scans that ended, kept in `status` (most recent).
    pub history_max: usize,
}

impl Default for RecordConfig {
    fn default() -> Self {
        RecordConfig {
            bucket: "vlbi".into(),
            rcvbuf_bytes: 256 << 20,
            ring_bytes: 4 << 30,
            block_bytes: 4 << 20,
            seal_interval_ms: 2_000,
            piece_bytes_max: 1 << 30,
            retention_days: 100,
            gaps_in_metadata_max: 20,
            history_max: 100,
        }
    }
}

impl RecordConfig {
    /// Check the settings; the error names the one that is wrong.
    pub fn validate(&self) -> anyhow::Result<()> {
        use anyhow::bail;
        if self.block_bytes < 64 * (vdif::FRAME_BYTES_MAX + vdif::UDPS_PREFIX_BYTES) {
            bail!(
                "record.block_bytes = {} must hold a batch of 64 of the largest frames ({} bytes)",
                self.block_bytes,
                64 * (vdif::FRAME_BYTES_MAX + vdif::UDPS_PREFIX_BYTES)
            );
        }
        if self.ring_bytes < 2 * self.block_bytes {
            bail!(
                "record.ring_bytes = {} must hold at least two blocks of record.block_bytes = {}",
                self.ring_bytes,
                self.block_bytes
            );
        }
        if self.seal_interval_ms == 0 || self.piece_bytes_max == 0 {
            bail!("record.seal_interval_ms and record.piece_bytes_max must be positive");
        }
        Ok(())
    }
}
