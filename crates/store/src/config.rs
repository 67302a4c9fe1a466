//! `StoreConfig`: everything the store needs to know, serde-loadable (TOML in the data directory).

use permafrost_catalog::Compression;
use std::path::PathBuf;

use permafrost_disk::power::{PowerControl, PowerProfile};
use permafrost_engine::{GridConfig, WriteMode};
use permafrost_grid::Layout;
use permafrost_policy::WatchdogConfig;
use serde::{Deserialize, Serialize};

use crate::{Result, StoreError};

/// The grid created in `DATA/grid/` when the data directory is new (ignored when a grid exists).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GridSetup {
    /// Parity grid layout, e.g. `8x6:4+1` (SPEC idea 3).
    pub layout: String,
    /// Size of each sparse file-backed disk.
    pub disk_capacity_bytes: u64,
    /// At most this many disks spin at once.
    pub spinning_max: usize,
    /// Block devices, one per grid position in order (e.g. `/dev/disk/by-id/…`); empty = sparse files of
    /// `disk_capacity_bytes` in `DATA/grid/disks/`.
    pub devices: Vec<PathBuf>,
    /// What spins the devices down and up: `simulated`, `hdparm`, `scsi` or `ses:ENCLOSURE:SLOT`; one entry
    /// for all devices or one per device (empty = simulated).
    pub power_control: Vec<String>,
    /// Chunks (8 MiB each) a read of the grid keeps in flight ahead of the reader (the engine's
    /// `readahead_chunks`; empty = the engine's default, 2).
    pub readahead_chunks: Option<usize>,
}

impl Default for GridSetup {
    fn default() -> Self {
        GridSetup {
            layout: "8x6:4+1".into(),
            disk_capacity_bytes: 16 << 30,
            spinning_max: 12,
            devices: Vec::new(),
            power_control: Vec::new(),
            readahead_chunks: None,
        }
    }
}

impl GridSetup {
    /// The engine configuration of a new grid.
    pub fn grid_config(&self) -> Result<GridConfig> {
        let bad =
            |m: String| StoreError::InvalidArgument(format!("configuration [store.grid]: {m}"));
        let layout: Layout = self
            .layout
            .parse()
            .map_err(|e| bad(format!("layout {:?}: {e}", self.layout)))?;
        let mut grid = if self.devices.is_empty() {
            GridConfig::with_file_disks(layout, self.disk_capacity_bytes)
        } else {
            let controls = self
                .power_control
                .iter()
                .map(|c| {
                    c.parse::<PowerControl>()
                        .map_err(|e| bad(format!("power_control: {e}")))
                })
                .collect::<Result<Vec<_>>>()?;
            GridConfig::with_block_devices(layout, &self.devices, &controls)
                .map_err(|e| bad(e.to_string()))?
        };
        grid.spinning_max = self.spinning_max;
        if let Some(chunks) = self.readahead_chunks {
            grid.readahead_chunks = chunks;
        }
        Ok(grid)
    }
}

/// Configuration of a [`crate::Store`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// Directory of the write-back cache (put it on flash); relative paths are relative to the data directory.
    pub cache_dir: PathBuf,
    /// Upper bound of the cache directory's content (stored bytes of cached contents, parts and uploads in
    /// progress).
    pub cache_bytes_max: u64,
    /// How long a write waits for cache space before failing with `SlowDown`.
    pub cache_wait_ms_max: u64,
    /// Free space kept on the file systems of the cache and of the grid's disk files (or a twentieth of a smaller
    /// file system), so a full disk never stops the catalog, the journal or a DELETE: an upload that would go
    /// below it answers `SlowDown`, persistence waits.
    pub free_bytes_min: u64,
    /// The watchdog's thresholds (SPEC idea 6).
    pub watchdog: WatchdogConfig,
    /// Contents smaller than this (stored bytes) are packed per dataset.
    pub pack_threshold_bytes: u64,
    /// Largest extent on the grid (payload plus 32 bytes overhead, rounded to 4 KiB); also the size of a pack.
    pub extent_bytes_max: u64,
    /// Logical bytes per compressed chunk.
    pub chunk_bytes: u32,
    /// Unreferenced contents are kept this long before garbage collection.
    pub gc_grace_ms: u64,
    /// How often the garbage collector runs.
    pub gc_interval_ms: u64,
    /// Engine write mode for persistence (a bucket setting may override it).
    pub write_mode: WriteMode,
    /// `/`-separated key components after the bucket that make a dataset id (0 = the bucket is the dataset).
    pub dataset_prefix_depth: usize,
    /// Compression of new buckets created without a setting.
    pub default_compression: Compression,
    /// Placement strategy of buckets without a setting (`permafrost_policy::placement_names()`).
    pub default_placement: String,
    /// Bytes of contents persisted per write batch (bounds a persist step).
    pub persist_batch_bytes_max: u64,
    /// Engine chunks a persist step writes at the same time (`WritePromise::with_chunks_in_flight`): the disks'
    /// writes and syncs of one chunk overlap the next ones, so one sequential dataset keeps the device busy.
    /// 1 = one chunk at a time.
    pub persist_chunks_in_flight: usize,
    /// Bytes per engine chunk of a persist step (`WritePromise::with_chunk_bytes`, a multiple of the grid's
    /// `chunk_bytes_max`): each chunk is one journal transaction with one sync per disk (serialized mode: five
    /// journal steps, four disk syncs), so larger chunks spend less of the device on syncs; memory is about six
    /// buffers of it per chunk in flight. The default, 16 MiB with 3 in flight, persisted one sequential dataset
    /// 1.2x faster than 8 MiB in the same quiet minutes for ~130 MB more resident memory while persisting; 32 MiB
    /// was faster still but took the server past 512 MiB while streaming a 1 GiB object (`BENCHMARKS.md`).
    pub persist_chunk_bytes: u64,
    /// fsync cache files and commit the catalog durably before acknowledging. `false` is only for tests and
    /// benchmarks: a crash may lose acknowledged data.
    pub fsync: bool,
    /// ETags of multipart parts: `true` = the MD5 of the part, always (costs ~1.5 ns per byte of one core);
    /// `false` (default) = MD5 when the client sent `Content-MD5` for the part (and checks it), else the first
    /// 16 bytes of the part's BLAKE3, which the store computes anyway. Single-part PUTs always get their MD5.
    pub part_etag_md5: bool,
    /// The upload pipeline starts writeback of a cache file every this many bytes and waits for the window
    /// before (bounded dirty memory), and flushes the device while the upload arrives once a window was
    /// written since its last flush (a short final fsync); 0 leaves both to the final fsync. Only with `fsync`.
    pub cache_writeback_bytes: u64,
    /// Drop a cache file's pages from the page cache as soon as they are on the device (each early flush, then the
    /// final fsync; only with `fsync`: unflushed pages are dirty and stay). Uploads then reuse the same few pages
    /// instead of filling memory with fresh ones, at the price of reading recent objects (GETs, persistence) from
    /// the device. For ingest-heavy caches, and VMs whose host takes free memory back (each fresh page is faulted
    /// in by the host: 4 x 1 GiB PUTs ran 1.3-1.6x faster with it on such a VM; `BENCHMARKS.md`, "Drop-behind").
    pub cache_drop_behind: bool,
    /// Uploads whose stored bytes fit in this many bytes are cached in the catalog (in the transaction that
    /// commits the object: one group-committed fsync, no cache file) instead of a file; 0 = always files.
    pub inline_bytes_max: u64,
    /// Grid created on first start.
    pub grid: GridSetup,
    /// Power profile override for the grid's disks (tests use `PowerProfile::for_tests()`).
    pub power_profile: Option<PowerProfile>,
    /// Length of a lifecycle "day" (lifecycle rules and restore periods): 86,400,000 ms; tests make it seconds.
    pub lifecycle_day_ms: u64,
    /// When restores of each tier are read (`[store.restore]`).
    pub restore: RestoreConfig,
    /// Stored bytes a read that had to spin its data disk up reads ahead into the cache, while the disk is up:
    /// the next objects of the read's dataset on that disk, in key order (`docs/store.md`, "Prefetch and hot
    /// data"). 0 turns prefetch off.
    pub prefetch_bytes_max: u64,
    /// Objects such a prefetch reads at most.
    pub prefetch_objects_max: usize,
    /// Where the catalog lives (`[catalog]` of permafrost.toml; docs/catalog.md "Back ends").
    #[serde(skip_serializing_if = "CatalogConfig::is_default")]
    pub catalog: CatalogConfig,
}

/// When the restore thread reads the restores of each tier (`[store.restore]` of permafrost.toml; docs/archive.md,
/// "Restores"). Expedited restores are read at once, whatever these say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RestoreConfig {
    /// A disk's Standard restores are read together once the oldest of them waited this long (or sooner, when
    /// the disk spins for another reason): one spin-up for every restore asked for within the window.
    pub standard_window_ms: u64,
    /// Bulk restores whose disk did not spin for another reason are read at this hour (UTC, 0 to 23)…
    pub bulk_start_hour_utc: u8,
    /// … or once they waited this long, whichever comes first.
    pub bulk_wait_ms_max: u64,
}

impl Default for RestoreConfig {
    fn default() -> Self {
        RestoreConfig {
            standard_window_ms: 300_000,
            bulk_start_hour_utc: 2,
            bulk_wait_ms_max: 86_400_000,
        }
    }
}

impl RestoreConfig {
    /// When a restore of `tier` asked for at `requested_ms` is due to be read (its disk is read then, unless it
    /// spins earlier).
    pub fn due_ms(&self, tier: permafrost_catalog::RestoreTier, requested_ms: u64) -> u64 {
        use permafrost_catalog::RestoreTier;
        match tier {
            RestoreTier::Expedited => requested_ms,
            RestoreTier::Standard => requested_ms.saturating_add(self.standard_window_ms),
            RestoreTier::Bulk => {
                const HOUR_MS: u64 = 3_600_000;
                let day_ms = permafrost_catalog::DAY_MS;
                let start = u64::from(self.bulk_start_hour_utc) * HOUR_MS;
                // The first start of the nightly window after the request.
                let day = requested_ms / day_ms * day_ms;
                let mut nightly = day + start;
                if nightly <= requested_ms {
                    nightly += day_ms;
                }
                nightly.min(requested_ms.saturating_add(self.bulk_wait_ms_max))
            }
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: String| {
            Err(StoreError::InvalidArgument(format!(
                "configuration [store.restore]: {m}"
            )))
        };
        if self.bulk_start_hour_utc > 23 {
            return bad(format!(
                "bulk_start_hour_utc = {} must be an hour from 0 to 23",
                self.bulk_start_hour_utc
            ));
        }
        if self.standard_window_ms > self.bulk_wait_ms_max {
            return bad(format!(
                "standard_window_ms = {} must not be longer than bulk_wait_ms_max = {}",
                self.standard_window_ms, self.bulk_wait_ms_max
            ));
        }
        if self.bulk_wait_ms_max > 7 * permafrost_catalog::DAY_MS {
            return bad(format!(
                "bulk_wait_ms_max = {} must be at most 7 days (604800000)",
                self.bulk_wait_ms_max
            ));
        }
        Ok(())
    }
}

/// Where the catalog lives: the embedded SQLite file `catalog.sqlite` in the data directory (the default), or a
/// PostgreSQL database (`url = "postgresql://user:password@host:port/database"`), which several servers may share.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CatalogConfig {
    /// `None`: SQLite in the data directory; else a `postgresql://` (or `postgres://`) connection URL.
    pub url: Option<String>,
}

impl CatalogConfig {
    fn is_default(&self) -> bool {
        *self == CatalogConfig::default()
    }

    /// Open the catalog: the SQLite file in `data_dir` (`durable`: group-committed fsyncs), or the PostgreSQL
    /// database of `url` (durable by the server's own commit). An unusable URL fails here, naming it without its
    /// password.
    pub fn open(
        &self,
        data_dir: &std::path::Path,
        durable: bool,
    ) -> permafrost_catalog::Result<permafrost_catalog::SqlCatalog> {
        match &self.url {
            None => permafrost_catalog::SqlCatalog::open_with(
                &data_dir.join("catalog.sqlite"),
                permafrost_catalog::SqliteOptions { durable },
            ),
            Some(url) => permafrost_catalog::SqlCatalog::open_postgres(
                url,
                permafrost_catalog::PostgresOptions::default(),
            ),
        }
    }

    fn validate(&self) -> Result<()> {
        match &self.url {
            Some(url) if !(url.starts_with("postgresql://") || url.starts_with("postgres://")) => {
                Err(StoreError::InvalidArgument(format!(
                    "configuration: [catalog] url = {:?} must be a postgresql:// connection URL (leave it out for \
                     the embedded SQLite catalog)",
                    permafrost_catalog::redact_url(url)
                )))
            }
            _ => Ok(()),
        }
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            cache_dir: PathBuf::from("cache"),
            cache_bytes_max: 8 << 30,
            cache_wait_ms_max: 10_000,
            free_bytes_min: 1 << 30,
            part_etag_md5: false,
            cache_writeback_bytes: 8 << 20,
            cache_drop_behind: false,
            inline_bytes_max: 64 << 10,
            watchdog: WatchdogConfig::default(),
            pack_threshold_bytes: 1 << 20,
            extent_bytes_max: 1 << 30,
            chunk_bytes: 1 << 20,
            gc_grace_ms: 3_600_000,
            gc_interval_ms: 60_000,
            write_mode: WriteMode::Serialized,
            dataset_prefix_depth: 1,
            default_compression: Compression::Zstd,
            default_placement: permafrost_policy::DatasetAffinity::NAME.into(),
            persist_batch_bytes_max: 4 << 30,
            persist_chunks_in_flight: 3,
            persist_chunk_bytes: 16 << 20,
            fsync: true,
            grid: GridSetup::default(),
            power_profile: None,
            lifecycle_day_ms: permafrost_catalog::DAY_MS,
            restore: RestoreConfig::default(),
            prefetch_bytes_max: 256 << 20,
            prefetch_objects_max: 32,
            catalog: CatalogConfig::default(),
        }
    }
}

impl StoreConfig {
    /// Check values that would make the store misbehave.
    pub fn validate(&self) -> Result<()> {
        self.catalog.validate()?;
        self.restore.validate()?;
        let bad = |m: String| Err(StoreError::InvalidArgument(format!("configuration: {m}")));
        if self.extent_bytes_max < 1 << 20
            || self.extent_bytes_max & 4095 != 0
            || self.extent_bytes_max > u32::MAX as u64
        {
            return bad(format!(
                "extent_bytes_max = {} must be a multiple of 4096 between 1 MiB and 4 GiB",
                self.extent_bytes_max
            ));
        }
        if self.pack_threshold_bytes >= self.extent_bytes_max / 2 {
            return bad(format!(
                "pack_threshold_bytes = {} must be below half of extent_bytes_max = {}",
                self.pack_threshold_bytes, self.extent_bytes_max
            ));
        }
        if !(4096..=permafrost_format::CHUNK_BYTES_MAX).contains(&self.chunk_bytes) {
            return bad(format!(
                "chunk_bytes = {} must be in 4096..={}",
                self.chunk_bytes,
                permafrost_format::CHUNK_BYTES_MAX
            ));
        }
        if self.cache_drop_behind && !self.fsync {
            return bad(
                "cache_drop_behind = true needs fsync = true (unflushed pages are dirty and cannot be dropped)"
                    .into(),
            );
        }
        if self.cache_bytes_max < 16 << 20 {
            return bad(format!(
                "cache_bytes_max = {} must be at least 16 MiB",
                self.cache_bytes_max
            ));
        }
        if permafrost_policy::placement_by_name(&self.default_placement, &Default::default())
            .is_err()
        {
            return bad(format!(
                "default_placement = {:?} is unknown; known: {}",
                self.default_placement,
                permafrost_policy::placement_names().join(", ")
            ));
        }
        if self.lifecycle_day_ms < 1000 {
            return bad(format!(
                "lifecycle_day_ms = {} must be at least 1000",
                self.lifecycle_day_ms
            ));
        }
        if self.persist_batch_bytes_max < self.extent_bytes_max {
            return bad("persist_batch_bytes_max must be at least extent_bytes_max".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{GridSetup, RestoreConfig};
    use permafrost_catalog::{RestoreTier, DAY_MS};

    #[test]
    fn restores_are_due_at_once_after_the_window_or_at_the_nightly_hour() {
        let config = RestoreConfig::default();
        let day = 20_000 * DAY_MS; // a midnight UTC
        let at = day + 10 * 3_600_000; // 10:00 UTC
        assert_eq!(config.due_ms(RestoreTier::Expedited, at), at);
        assert_eq!(config.due_ms(RestoreTier::Standard, at), at + 300_000);
        // Bulk: 02:00 UTC the next day; asked at 01:00, the same night.
        assert_eq!(
            config.due_ms(RestoreTier::Bulk, at),
            day + DAY_MS + 2 * 3_600_000
        );
        assert_eq!(
            config.due_ms(RestoreTier::Bulk, day + 3_600_000),
            day + 2 * 3_600_000
        );
        // Never longer than the maximum wait.
        let short = RestoreConfig {
            bulk_wait_ms_max: 60_000,
            ..RestoreConfig::default()
        };
        assert_eq!(short.due_ms(RestoreTier::Bulk, at), at + 60_000);
        for hour in 0..24 {
            let asked = day + hour * 3_600_000 + 1;
            let due = config.due_ms(RestoreTier::Bulk, asked);
            assert!(due > asked && due - asked <= DAY_MS, "{hour}");
        }
        let parsed: RestoreConfig = toml::from_str("standard_window_ms = 2000").unwrap();
        assert_eq!(parsed.standard_window_ms, 2000);
        assert!(RestoreConfig {
            bulk_start_hour_utc: 24,
            ..RestoreConfig::default()
        }
        .validate()
        .is_err());
    }

    #[test]
    fn the_grid_setup_chooses_the_read_ahead_depth_of_a_new_grid() {
        let default = GridSetup::default().grid_config().unwrap();
        let deeper = GridSetup {
            readahead_chunks: Some(4),
            ..GridSetup::default()
        };
        let parsed: GridSetup = toml::from_str("readahead_chunks = 4").unwrap();
        assert_eq!(parsed, deeper);
        let grid = deeper.grid_config().unwrap();
        assert_eq!(grid.readahead_chunks, 4);
        grid.validate().unwrap();
        assert_eq!(
            (grid.layout, grid.spinning_max),
            (default.layout, default.spinning_max)
        );
        // The engine checks the range when the grid is created.
        let zero = GridSetup {
            readahead_chunks: Some(0),
            ..GridSetup::default()
        };
        assert!(zero.grid_config().unwrap().validate().is_err());
    }
}
