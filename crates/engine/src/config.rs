//! `GridConfig`: the grid's configuration, stored in `DIR/grid.toml`.

use std::path::{Path, PathBuf};

use std::sync::Arc;

use permafrost_disk::power::{PowerControl, PowerController, PowerProfile, SimulatedPower};
use permafrost_grid::Layout;
use permafrost_idr::IdrConfig;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{Error, Result};

/// Name of the configuration file inside a grid directory.
pub const CONFIG_FILE: &str = "grid.toml";

/// How a write promise updates parity (docs/engine.md "Write promises").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// Data disk and all three parity disks at once; `commit()` returns with parity durable. Has the write hole.
    Direct,
    /// Data disk, then `hP`, `vP`, `vhP` one after the other: at most one disk undefined at any moment.
    #[default]
    Serialized,
    /// Data disk now; parity deltas to the delta cache, applied later by the drain.
    Delayed,
}

impl WriteMode {
    pub(crate) fn code(self) -> u8 {
        match self {
            WriteMode::Direct => 0,
            WriteMode::Serialized => 1,
            WriteMode::Delayed => 2,
        }
    }
    pub(crate) fn from_code(code: u8) -> Option<WriteMode> {
        match code {
            0 => Some(WriteMode::Direct),
            1 => Some(WriteMode::Serialized),
            2 => Some(WriteMode::Delayed),
            _ => None,
        }
    }
}

impl std::fmt::Display for WriteMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WriteMode::Direct => "direct",
            WriteMode::Serialized => "serialized",
            WriteMode::Delayed => "delayed",
        })
    }
}

impl std::str::FromStr for WriteMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "direct" => Ok(WriteMode::Direct),
            "serialized" => Ok(WriteMode::Serialized),
            "delayed" => Ok(WriteMode::Delayed),
            other => Err(format!(
                "unknown write mode {other:?}: expected direct, serialized or delayed"
            )),
        }
    }
}

/// Where one disk of the grid lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DiskSpec {
    /// A sparse file (relative paths are relative to the grid directory), created by `Engine::create`.
    File { path: PathBuf, capacity_bytes: u64 },
    /// A block device (its size is the device's size), with what controls its motor (simulated unless the
    /// operator configured a real controller: `hdparm`, SCSI START STOP UNIT or SES slot power).
    Block {
        path: PathBuf,
        #[serde(default)]
        power_control: PowerControl,
    },
}

impl DiskSpec {
    /// The path, resolved against the grid directory.
    pub fn resolved_path(&self, dir: &Path) -> PathBuf {
        let path = match self {
            DiskSpec::File { path, .. } | DiskSpec::Block { path, .. } => path,
        };
        if path.is_absolute() {
            path.clone()
        } else {
            dir.join(path)
        }
    }

    /// The controller of this disk's motor: simulated for files; for a block device the configured one, which
    /// fails here with a clear message when its tool is not installed.
    pub fn power_controller(&self, dir: &Path) -> Result<Arc<dyn PowerController>> {
        match self {
            DiskSpec::File { .. } => Ok(Arc::new(SimulatedPower)),
            DiskSpec::Block { power_control, .. } => power_control
                .controller(&self.resolved_path(dir))
                .map_err(|e| Error::Config(e.to_string())),
        }
    }
}

/// Default [`GridConfig::recovery_chunk_bytes_max`]: 61 MiB = 63,963,136 bytes, at most the thesis's 64 MB
/// (64,000,000 bytes; 64 MiB would exceed it) and a whole number of default IDR stripes.
pub const RECOVERY_CHUNK_BYTES_DEFAULT: u64 = 61 << 20;

fn scrub_overdue_after_ms_default() -> u64 {
    30 * 24 * 3600 * 1000
}

/// The evacuation's priority over client reads of the disk being evacuated (`[evacuation]` in `grid.toml`; docs/grid.md
/// "Evacuating a disk"). While a disk is evacuated, reads of its position (from the old disk or the replacement) are
/// admitted in bytes: `reader_share` of the bytes the evacuation moved so far plus `reader_floor_bytes_per_s` since
/// it started; a read beyond that waits for its turn, in arrival order, at most `reader_wait_ms_max`. The disk may
/// fail at any moment, so its copy comes first; no reader starves. Without an evacuation reads are not held.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvacuationConfig {
    /// Bytes readers of the disk may read per byte the evacuation copies or reconstructs (default 0.05: an
    /// evacuation of 10 GiB while 8 clients read took 1.13× an O_DIRECT copy, 1.33× with 0.1, BENCHMARKS.md;
    /// 0: only the floor).
    pub reader_share: f64,
    /// Bytes per second readers of the disk may read however slowly the evacuation moves (default 8 MB/s).
    pub reader_floor_bytes_per_s: u64,
    /// The longest a read of the disk waits for its turn (default 5000 ms; a read chunk is `chunk_bytes_max`;
    /// 0: reads never wait, the evacuation has no priority).
    pub reader_wait_ms_max: u64,
}

impl Default for EvacuationConfig {
    fn default() -> Self {
        EvacuationConfig {
            reader_share: 0.05,
            reader_floor_bytes_per_s: 8_000_000,
            reader_wait_ms_max: 5000,
        }
    }
}

/// Configuration of one grid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GridConfig {
    /// Identifies the grid; written into every disk header.
    pub grid_id: Uuid,
    /// The parity grid, e.g. `8x6:4+1`.
    pub layout: Layout,
    /// Intra-disk redundancy of every disk.
    #[serde(default)]
    pub idr: IdrConfig,
    /// Power model of the disks.
    #[serde(default)]
    pub power: PowerProfile,
    /// At most this many disks spin at once (must be at least 6 so a vertical group can be read).
    pub spinning_max: usize,
    /// Mode used by callers that do not choose one.
    #[serde(default)]
    pub write_mode_default: WriteMode,
    /// Largest unit of work (one journal transaction) of a promise.
    pub chunk_bytes_max: u64,
    /// Bound on pending parity delta bytes; writers wait while the drain runs when it is exceeded.
    pub delta_cache_bytes_max: u64,
    /// Largest range recovered at once by the background recovery and rebuild: the thesis's "defect range of up
    /// to 64 MB" (§4.3.5). Default 61 MiB (63.96 MB), the most whole default stripes (1 MiB) within 64 MB.
    pub recovery_chunk_bytes_max: u64,
    /// Chunks a read promise keeps in flight ahead of the reader.
    pub readahead_chunks: usize,
    /// Bytes scrubbed on each spin-up of a disk.
    pub scrub_slice_bytes: u64,
    /// The scheduled deliberate scrub: written ranges not known good (scrubbed or written) for this long are
    /// scrubbed in the background, spinning their disks up if need be (0 = only on request,
    /// `Engine::scrub_overdue`). Default 30 days.
    #[serde(default = "scrub_overdue_after_ms_default")]
    pub scrub_overdue_after_ms: u64,
    /// The evacuation's priority over reads of the disk being evacuated.
    #[serde(default)]
    pub evacuation: EvacuationConfig,
    /// The disks, in grid order (disk index = position).
    pub disks: Vec<DiskSpec>,
}

impl GridConfig {
    /// Defaults for a layout with `disks` given; a fresh `grid_id`.
    pub fn new(layout: Layout, disks: Vec<DiskSpec>) -> GridConfig {
        GridConfig {
            grid_id: Uuid::new_v4(),
            layout,
            idr: IdrConfig::default(),
            power: PowerProfile::default(),
            spinning_max: 12,
            write_mode_default: WriteMode::Serialized,
            chunk_bytes_max: 8 << 20,
            delta_cache_bytes_max: 256 << 20,
            recovery_chunk_bytes_max: RECOVERY_CHUNK_BYTES_DEFAULT,
            readahead_chunks: 2,
            scrub_slice_bytes: 64 << 20,
            scrub_overdue_after_ms: scrub_overdue_after_ms_default(),
            evacuation: EvacuationConfig::default(),
            disks,
        }
    }

    /// File-backed disks `disks/disk-NN.img` of `capacity_bytes` each, for every disk of `layout`.
    pub fn with_file_disks(layout: Layout, capacity_bytes: u64) -> GridConfig {
        let disks = (0..layout.disks())
            .map(|i| DiskSpec::File {
                path: PathBuf::from(format!("disks/disk-{i:02}.img")),
                capacity_bytes,
            })
            .collect();
        GridConfig::new(layout, disks)
    }

    /// Block devices in grid order, one per position, and what spins them down and up: `controls` holds one
    /// entry for every drive, one per drive (same order), or none (simulated: only the power model runs).
    pub fn with_block_devices(
        layout: Layout,
        devices: &[PathBuf],
        controls: &[PowerControl],
    ) -> Result<GridConfig> {
        if devices.len() != layout.disks() {
            return Err(Error::Config(format!(
                "layout {layout} has {} disks but {} devices were given",
                layout.disks(),
                devices.len()
            )));
        }
        let control_of = |i: usize| match controls.len() {
            0 => Ok(PowerControl::Simulated),
            1 => Ok(controls[0].clone()),
            n if n == devices.len() => Ok(controls[i].clone()),
            n => Err(Error::Config(format!(
                "{n} power controls for {} devices: give one for all drives or one per drive",
                devices.len()
            ))),
        };
        let disks = devices
            .iter()
            .enumerate()
            .map(|(i, path)| {
                Ok(DiskSpec::Block {
                    path: path.clone(),
                    power_control: control_of(i)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(GridConfig::new(layout, disks))
    }

    /// Check values that would make the engine misbehave.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::Config(msg));
        // More: data disks added after the grid was created (`Engine::add_disk`; the journal holds the geometry).
        if self.disks.len() < self.layout.disks() {
            return bad(format!(
                "layout {} has {} disks but {} are configured",
                self.layout,
                self.layout.disks(),
                self.disks.len()
            ));
        }
        if self.spinning_max < self.layout.y.max(self.layout.hn + self.layout.hk).max(4) {
            return bad(format!(
                "spinning_max = {} is too small: a write needs 4 disks and a recovery needs a whole parity group ({} and {} disks)",
                self.spinning_max,
                self.layout.hn + self.layout.hk,
                self.layout.y
            ));
        }
        for (name, value) in [
            ("chunk_bytes_max", self.chunk_bytes_max),
            ("delta_cache_bytes_max", self.delta_cache_bytes_max),
            ("recovery_chunk_bytes_max", self.recovery_chunk_bytes_max),
        ] {
            if value == 0 || value % 4096 != 0 {
                return bad(format!(
                    "{name} = {value} must be a non-zero multiple of 4096"
                ));
            }
        }
        if self.readahead_chunks == 0 || self.readahead_chunks > 64 {
            return bad(format!(
                "readahead_chunks = {} must be between 1 and 64",
                self.readahead_chunks
            ));
        }
        let share = self.evacuation.reader_share;
        if !share.is_finite() || share < 0.0 {
            return bad(format!(
                "evacuation.reader_share = {share} must be a number of at least 0"
            ));
        }
        self.power.validate().map_err(Error::Config)?;
        Ok(())
    }

    /// Read `DIR/grid.toml`.
    pub fn load(dir: &Path) -> Result<GridConfig> {
        let path = dir.join(CONFIG_FILE);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::Config(format!("cannot read {}: {e}", path.display())))?;
        let config: GridConfig =
            toml::from_str(&text).map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
        config.validate()?;
        Ok(config)
    }

    /// Write `DIR/grid.toml` durably (write a temporary file, fsync, rename).
    pub fn save(&self, dir: &Path) -> Result<()> {
        let text = toml::to_string_pretty(self)
            .map_err(|e| Error::Config(format!("cannot encode configuration: {e}")))?;
        let path = dir.join(CONFIG_FILE);
        let tmp = dir.join(format!("{CONFIG_FILE}.tmp"));
        let io = |e: std::io::Error| Error::Io(format!("cannot write {}: {e}", path.display()));
        {
            use std::io::Write;
            let mut file = std::fs::File::create(&tmp).map_err(io)?;
            file.write_all(text.as_bytes()).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        std::fs::rename(&tmp, &path).map_err(io)?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_recovery_chunk_is_at_most_64_mb_and_whole_stripes() {
        let config = GridConfig::with_file_disks("8x6:4+1".parse().unwrap(), 1 << 30);
        assert!(config.recovery_chunk_bytes_max <= 64_000_000);
        let stripe = 16 * 64 * 1024; // the default IDR stripe: s = 16 iPGs of 64 KiB
        assert_eq!(config.recovery_chunk_bytes_max % stripe, 0);
        assert!(
            config.recovery_chunk_bytes_max + stripe > 64_000_000,
            "the largest such chunk"
        );
    }

    #[test]
    fn block_disks_are_simulated_unless_a_controller_is_configured() {
        // A grid.toml written before power control existed still reads, as simulated.
        let old: DiskSpec = toml::from_str("kind = \"block\"\npath = \"/dev/sdb\"\n").unwrap();
        assert_eq!(
            old,
            DiskSpec::Block {
                path: PathBuf::from("/dev/sdb"),
                power_control: PowerControl::Simulated,
            }
        );
        let ses = DiskSpec::Block {
            path: PathBuf::from("/dev/disk/by-id/ata-X"),
            power_control: PowerControl::SesSlot {
                enclosure: PathBuf::from("/dev/sg7"),
                slot: 4,
            },
        };
        let text = toml::to_string(&ses).unwrap();
        assert_eq!(toml::from_str::<DiskSpec>(&text).unwrap(), ses, "{text}");
        let file = DiskSpec::File {
            path: PathBuf::from("disk-00"),
            capacity_bytes: 1 << 30,
        };
        assert!(file
            .power_controller(Path::new("/grid"))
            .unwrap()
            .describe()
            .contains("simulated"));
    }
}
