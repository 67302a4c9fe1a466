//! `DATA/permafrost.toml`, read in one place: every table the binary knows, typed, with its defaults.
//!
//! ```toml
//! [server]   # listen, block_public_access
//! [store]    # permafrost_store::StoreConfig, with [store.grid], [store.watchdog], [store.restore], …
//! [catalog]  # url = "postgresql://…" (the SQLite file in the data directory without)
//! [cluster]  # permafrost_cluster::runtime::ClusterSection (docs/cluster.md "Nodes")
//! [mount]    # permafrost serve --mount (docs/mount.md)
//! [power]    # [power.scheduler] and [power.idle] (docs/energy.md)
//! [record]   # permafrost_record::RecordConfig
//! ```
//!
//! A missing file or table takes the defaults; so does a missing key. The store's keys may also stand at the
//! top level instead of in `[store]` (the first form of the file). Anything else is refused with a message that
//! names the file, the key and what is wrong with it: a key no table knows, a value of the wrong type, values
//! that cannot work together. The first start of a server writes the file ([`first_start_text`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use permafrost_catalog::cluster;
use permafrost_cluster::runtime::ClusterSection;
use permafrost_record::RecordConfig;
use permafrost_store::{CatalogConfig, StoreConfig};
use serde::Deserialize;

/// The configuration file of a data directory.
pub const CONFIG_FILE: &str = "permafrost.toml";
/// Address the S3 endpoint listens on unless told otherwise.
pub const LISTEN_DEFAULT: &str = "127.0.0.1:9000";

/// The tables of the file; the store's keys may stand at the top level next to them.
const TABLES: [&str; 8] = [
    "server", "store", "catalog", "cluster", "mount", "power", "record", "smart",
];

/// A data directory's configuration: each table, its defaults where the file says nothing.
#[derive(Debug, Clone)]
pub struct Config {
    /// `DATA/permafrost.toml`.
    pub path: PathBuf,
    /// Whether the file exists (a server writes it on first start).
    pub exists: bool,
    pub server: ServerSection,
    /// The store, with the catalog of `[catalog]`; for a node of a cluster, the catalog URL names the node's own
    /// schema (every opener of the data directory uses it, so catalogs of nodes never mix).
    pub store: StoreConfig,
    /// `[cluster]`, checked: a valid node name, copies ≥ 1, heartbeat < timeout ≤ lost after.
    pub cluster: Option<ClusterSection>,
    pub mount: MountSection,
    pub power: PowerSection,
    /// `[record]`, checked.
    pub record: RecordConfig,
    /// `[smart]`: SMART read only at spin-ups made for other work (docs/smart.md).
    pub smart: permafrost_disk::smart::SmartSettings,
}

/// What the `[server]` table may hold.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSection {
    /// Address of the S3 endpoint (`--listen` overrides it) [127.0.0.1:9000].
    pub listen: Option<String>,
    /// Block every public ACL and bucket policy on every bucket (docs/security.md); on unless set to false.
    pub block_public_access: Option<bool>,
}

impl ServerSection {
    /// The address to listen on: the flag, else the file, else [`LISTEN_DEFAULT`].
    pub fn listen(&self, flag: Option<&str>) -> String {
        flag.map(str::to_owned)
            .or_else(|| self.listen.clone())
            .unwrap_or_else(|| LISTEN_DEFAULT.to_owned())
    }

    /// Whether public access is blocked server-wide [true].
    pub fn block_public_access(&self) -> bool {
        self.block_public_access.unwrap_or(true)
    }
}

/// What the `[mount]` table may hold (docs/mount.md).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MountSection {
    /// How long the kernel caches names and attributes (changes made through S3 show after this).
    pub ttl_ms: Option<u64>,
    /// Owner, group and modes of entries that carry none (S3 uploads, implicit directories).
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub file_mode: Option<u32>,
    pub dir_mode: Option<u32>,
    /// Let every user of the machine use the mount (default: when the server runs as root).
    pub allow_other: Option<bool>,
    /// The kernel's read-ahead of the mount in KiB, set after mounting when the server runs as root (default
    /// 1024; 0 leaves the kernel's 128).
    pub read_ahead_kb: Option<u32>,
}

impl MountSection {
    /// The mount's settings: these values over `permafrost_fuse::MountConfig::default()`.
    pub fn mount_config(&self) -> permafrost_fuse::MountConfig {
        let default = permafrost_fuse::MountConfig::default();
        permafrost_fuse::MountConfig {
            ttl: self
                .ttl_ms
                .map(Duration::from_millis)
                .unwrap_or(default.ttl),
            uid: self.uid.unwrap_or(default.uid),
            gid: self.gid.unwrap_or(default.gid),
            file_mode: self.file_mode.unwrap_or(default.file_mode) & 0o7777,
            dir_mode: self.dir_mode.unwrap_or(default.dir_mode) & 0o7777,
            allow_other: self.allow_other.unwrap_or(default.allow_other),
            read_ahead_kb: self.read_ahead_kb.unwrap_or(default.read_ahead_kb),
            ..default
        }
    }
}

/// What the `[power]` table may hold: the read scheduler and the idle timeouts the server's power manager runs
/// (the code `permafrost sim energy` runs; docs/energy.md).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PowerSection {
    /// `[power.scheduler]`: `strategy` = "deadline" (default) | "fifo", `max_wait_ms`, `persist_yield_max_ms`.
    pub scheduler: permafrost_policy::SchedulerConfig,
    /// `[power.idle]` (with the deadline scheduler): adaptive per-disk idle timeouts and the wear budget
    /// (`spinups_per_day_max`, `enforce_wear_budget`, `rated_start_stop_cycles`, `service_life_years`, …).
    pub idle: permafrost_policy::IdleConfig,
}

/// The file as written: every table optional, no key unknown.
#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct File {
    server: ServerSection,
    store: StoreConfig,
    catalog: Option<CatalogConfig>,
    cluster: Option<ClusterSection>,
    mount: MountSection,
    power: PowerSection,
    record: RecordConfig,
    smart: permafrost_disk::smart::SmartSettings,
}

impl Config {
    /// The configuration of `data_dir` (every default when it has no `permafrost.toml`).
    pub fn load(data_dir: &Path) -> Result<Config> {
        let path = data_dir.join(CONFIG_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => Config::parse(&text, &path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config {
                exists: false,
                ..Config::parse("", &path)?
            }),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// The configuration in `text`, the content of the file `path` (named in every error).
    pub fn parse(text: &str, path: &Path) -> Result<Config> {
        let shown = path.display();
        let table: toml::Table =
            toml::from_str(text).with_context(|| format!("{shown} is not valid TOML"))?;
        // The store's keys at the top level (no [store] table): read as if they were in one. The errors then
        // name keys without line numbers (the lines are those of the rewritten text).
        let loose: Vec<&String> = table
            .keys()
            .filter(|k| !TABLES.contains(&k.as_str()))
            .collect();
        let (file, store_has_catalog) = if table.contains_key("store") || loose.is_empty() {
            let file: File = toml::from_str(text).map_err(|e| describe(&e, text, path, true))?;
            let store_has_catalog = table
                .get("store")
                .and_then(|s| s.as_table())
                .is_some_and(|s| s.contains_key("catalog"));
            (file, store_has_catalog)
        } else {
            let mut top = toml::Table::new();
            let mut store = toml::Table::new();
            for (k, v) in table {
                if TABLES.contains(&k.as_str()) {
                    top.insert(k, v);
                } else {
                    store.insert(k, v);
                }
            }
            let store_has_catalog = false;
            top.insert("store".into(), toml::Value::Table(store));
            let rewritten = toml::to_string(&top)
                .with_context(|| format!("{shown}: cannot read the store's keys"))?;
            let file: File =
                toml::from_str(&rewritten).map_err(|e| describe(&e, &rewritten, path, false))?;
            (file, store_has_catalog)
        };
        let File {
            server,
            mut store,
            catalog,
            cluster,
            mount,
            power,
            record,
            smart,
        } = file;
        // `[catalog]` is a table of its own in the file (docs/catalog.md); one inside `[store]` comes first.
        if let Some(catalog) = catalog {
            if !store_has_catalog {
                store.catalog = catalog;
            }
        }
        if let Some(section) = &cluster {
            check_cluster(section, path)?;
            // A node of a cluster keeps its store catalog in a schema of its own (docs/cluster.md "Nodes").
            if let Some(url) = store.catalog.url.as_deref() {
                store.catalog.url =
                    Some(cluster::node_store_url(url, &section.node).map_err(|e| anyhow!("{e}"))?);
            }
        }
        record
            .validate()
            .with_context(|| format!("{shown}: [record]"))?;
        Ok(Config {
            path: path.to_path_buf(),
            exists: true,
            server,
            store,
            cluster,
            mount,
            power,
            record,
            smart,
        })
    }

    /// The PostgreSQL URL a cluster needs ([`cluster_database_url`] of this file's store).
    pub fn cluster_database_url(&self) -> Result<String> {
        cluster_database_url(self.store.catalog.url.as_deref(), &self.path)
    }
}

/// The PostgreSQL URL a cluster needs (`catalog_url`, from `source`: a file or a flag), or the one-line error
/// for the SQLite catalog.
pub fn cluster_database_url(catalog_url: Option<&str>, source: &Path) -> Result<String> {
    match catalog_url {
        Some(url) if url.starts_with("postgresql://") || url.starts_with("postgres://") => {
            Ok(url.to_owned())
        }
        _ => bail!(
            "{}: [cluster] needs the shared PostgreSQL catalog: add [catalog] url = \"postgresql://…\" (the \
             SQLite catalog belongs to one server)",
            source.display()
        ),
    }
}

/// Values of `[cluster]` that cannot work together, named.
fn check_cluster(section: &ClusterSection, path: &Path) -> Result<()> {
    if !cluster::valid_node_name(&section.node) {
        bail!(
            "{}: [cluster] node = {:?}: use 1–40 of a-z, 0-9 and _",
            path.display(),
            section.node
        );
    }
    if section.copies == 0 {
        bail!(
            "{}: [cluster] copies = 0: every object needs at least one holder (1 = no copies)",
            path.display()
        );
    }
    if section.heartbeat_ms == 0 || section.timeout_ms <= section.heartbeat_ms {
        bail!(
            "{}: [cluster] needs heartbeat_ms > 0 and timeout_ms > heartbeat_ms",
            path.display()
        );
    }
    if section.lost_after_ms < section.timeout_ms {
        bail!(
            "{}: [cluster] lost_after_ms = {} is shorter than timeout_ms = {}: a node is lost (its copies made \
             again elsewhere) only after it is down; set lost_after_ms ≥ timeout_ms",
            path.display(),
            section.lost_after_ms,
            section.timeout_ms
        );
    }
    Ok(())
}

/// A value the typed tables refuse, as one line: the file, the key (`store.grid.layout`, or the table
/// `[cluster]` for a key it misses), what is wrong, and the line when it is the file's own.
fn describe(e: &toml::de::Error, text: &str, path: &Path, own_lines: bool) -> anyhow::Error {
    let message = e.message().trim();
    let Some((table, key, line)) = e.span().map(|span| place_of(text, span.start)) else {
        return anyhow!("{}: {message}", path.display());
    };
    let what = match (table.is_empty(), key) {
        (true, Some(key)) => key,
        (false, Some(key)) => format!("{table}.{key}"),
        (_, None) if table.is_empty() => "the top level".to_owned(),
        (_, None) => format!("[{table}]"),
    };
    let line = if own_lines {
        format!(" (line {line})")
    } else {
        String::new()
    };
    anyhow!("{}: {what}: {message}{line}", path.display())
}

/// Where byte `offset` of a TOML text is: the table header above it (`""` at the top level), the key of its
/// line (`None` on a header or a continuation line) and the line number (from 1).
fn place_of(text: &str, offset: usize) -> (String, Option<String>, usize) {
    let mut table = String::new();
    let mut start = 0;
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let end = start + line.len();
        let trimmed = line.trim();
        let header = trimmed.starts_with('[');
        if header {
            table = trimmed
                .trim_start_matches('[')
                .split(']')
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned();
        }
        if offset < end || end == text.len() {
            let key = (!header)
                .then(|| trimmed.split_once('='))
                .flatten()
                .map(|(k, _)| k.trim().trim_matches('"').to_owned())
                .filter(|k| !k.is_empty() && !k.starts_with('#'));
            return (table, key, index + 1);
        }
        start = end;
    }
    (table, None, 1)
}

/// The configuration file a server writes on first start: every value, with what it means.
pub fn first_start_text(listen: &str, config: &StoreConfig) -> Result<String> {
    // Serialized as the table `store`, so that its own tables come out as `[store.watchdog]`, `[store.grid]`,
    // `[store.restore]` (not as top-level tables the server would not read back).
    #[derive(serde::Serialize)]
    struct File<'a> {
        store: &'a StoreConfig,
    }
    let store =
        toml::to_string(&File { store: config }).context("serializing the store configuration")?;
    Ok(format!(
        r#"# permafrost configuration, written on first start; edit and restart to change.
# Sizes are in bytes, times in milliseconds. Missing keys take their defaults.

[server]
# Address of the S3 endpoint (overridden by --listen).
listen = "{listen}"
# Nothing can be made public (public ACLs and bucket policies are refused, anonymous requests get nothing)
# unless this is set to false; each bucket may then block public access itself (docs/security.md).
block_public_access = true

# The object store (docs/store.md):
#   cache_dir                 the write-back cache: put it on flash (relative to the data directory)
#   cache_bytes_max           upper bound of the write-back cache
#   cache_wait_ms_max         how long an upload waits for cache space before 503 SlowDown
#   free_bytes_min            free space kept on the cache's and the grid's file systems (at most a
#                             twentieth of each): uploads answer 503 SlowDown and persistence waits below it
#   pack_threshold_bytes      smaller objects are packed into shared extents per dataset
#   extent_bytes_max          largest extent on the grid (also the size of a pack)
#   chunk_bytes               logical bytes per independently compressed chunk
#   gc_grace_ms               unreferenced contents are kept this long before garbage collection
#   write_mode                engine write mode: serialized | delayed | direct
#   dataset_prefix_depth      key components after the bucket that make a dataset (kept on one grid bucket)
#   default_compression       zstd | lz4 | none for buckets that did not choose (`permafrost settings`)
#   default_placement         placement strategy of buckets that did not choose: dataset-affinity | random |
#                             round-robin | least-full
#   fsync                     false only for benchmarks: a crash may then lose acknowledged data
#   cache_drop_behind         true: an upload leaves the page cache once flushed, so ingest does not fill
#                             memory; GETs of recent objects and persistence then read the cache device
#   prefetch_bytes_max        a GET that spun its disk up reads up to this many bytes of the next objects of
#                             its dataset on that disk into the cache (docs/store.md "Prefetch"); 0 = off
#   prefetch_objects_max      … and at most this many objects
#   [store.watchdog]          when cached data is persisted (SPEC idea 6): max_age_ms, byte thresholds
#   [store.grid]              the grid created on first start (ignored once DATA/grid exists):
#                             layout XxY:hn+hk, spinning_max, and either disk_capacity_bytes (sparse files)
#                             or devices = ["/dev/disk/by-id/…", …] (one block device per position, in
#                             grid order) with power_control = ["hdparm"] (one for all, or one per device;
#                             simulated | hdparm | scsi | ses:ENCLOSURE:SLOT)
#   [store.power_profile]     optional: disk power timings (spin_up_ms, idle_timeout_ms, watts_*)
#   [store.restore]           when restores are read (docs/archive.md "Restores"): a disk's Standard restores
#                             together once the oldest waited standard_window_ms; Bulk ones when the disk spins
#                             anyway, at bulk_start_hour_utc, or after bulk_wait_ms_max; Expedited at once
# Disk power scheduling (docs/energy.md), optional tables at the top level:
#   [power.scheduler]         strategy = "deadline" (the disk set with the most waiting reads spins next, none
#                             waits longer than max_wait_ms; persistence yields to reads up to
#                             persist_yield_max_ms) | "fifo" (first come, first served)
#   [power.idle]              idle timeouts adapted per disk (adaptive, timeout_min_ms, timeout_max_ms) and the
#                             wear budget (spinups_per_day_max, or rated_start_stop_cycles over
#                             service_life_years; enforce_wear_budget)
# Real disks and a separate flash cache device: see README ("Real disks and a flash cache").
# The catalog is the SQLite file DATA/catalog.sqlite unless a [catalog] table names a PostgreSQL database
# (docs/catalog.md "Back ends"), e.g.:
#   [catalog]
#   url = "postgresql://permafrost:secret@db.example:5432/permafrost"
{store}"#
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config> {
        Config::parse(text, Path::new("D/permafrost.toml"))
    }

    fn error(text: &str) -> String {
        format!("{:#}", parse(text).unwrap_err())
    }

    #[test]
    fn a_missing_file_and_an_empty_one_take_every_default() {
        let dir = tempfile::tempdir().unwrap();
        let missing = Config::load(dir.path()).unwrap();
        assert!(!missing.exists);
        assert_eq!(missing.path, dir.path().join(CONFIG_FILE));
        let empty = parse("").unwrap();
        for config in [&missing, &empty] {
            assert_eq!(config.store, StoreConfig::default());
            assert_eq!(config.record, RecordConfig::default());
            assert_eq!(config.server.listen(None), LISTEN_DEFAULT);
            assert!(config.server.block_public_access());
            assert!(config.cluster.is_none());
            assert_eq!(
                config.power.scheduler,
                permafrost_policy::SchedulerConfig::default()
            );
            assert_eq!(
                config.mount.mount_config().read_ahead_kb,
                permafrost_fuse::MountConfig::default().read_ahead_kb
            );
        }
        assert_eq!(
            empty.server.listen(Some("0.0.0.0:1")),
            "0.0.0.0:1",
            "the flag comes first"
        );
    }

    #[test]
    fn the_packaged_config_parses() {
        let text = include_str!("../../../packaging/permafrost.toml");
        let config = parse(text).unwrap();
        assert_eq!(config.server.listen(None), "127.0.0.1:9000");
        assert!(config.server.block_public_access());
        assert_eq!(config.store.cache_bytes_max, 8 << 30);
        assert_eq!(config.store.grid.layout, "8x6:4+1");
        assert_eq!(config.store.grid.disk_capacity_bytes, 16 << 30);
        assert_eq!(config.store.catalog.url, None);
        config.store.validate().unwrap();
    }

    #[test]
    fn the_file_a_first_start_writes_reads_back_the_same() {
        let store = StoreConfig {
            cache_bytes_max: 123 << 20,
            ..StoreConfig::default()
        };
        let text = first_start_text("127.0.0.1:9555", &store).unwrap();
        let config = parse(&text).unwrap();
        assert_eq!(config.store, store);
        assert_eq!(config.server.listen(None), "127.0.0.1:9555");
        assert_eq!(config.server.block_public_access, Some(true));
    }

    #[test]
    fn a_value_of_the_wrong_type_names_the_file_the_key_and_the_line() {
        let e = error("[server]\nlisten = \"x:1\"\n\n[store]\ncache_bytes_max = \"big\"\n");
        assert!(
            e.starts_with("D/permafrost.toml: store.cache_bytes_max: "),
            "{e}"
        );
        assert!(e.contains("invalid type: string \"big\""), "{e}");
        assert!(e.ends_with("(line 5)"), "{e}");
        let e = error("[store.grid]\nlayout = 8\n");
        assert!(
            e.contains("store.grid.layout: invalid type: integer"),
            "{e}"
        );
        let e = error("[mount]\nttl_ms = -1\n");
        assert!(e.contains("mount.ttl_ms: "), "{e}");
    }

    #[test]
    fn an_unknown_key_or_table_is_refused_by_name() {
        let e = error("[store]\ncache_byte_max = 1\n");
        assert!(
            e.contains("store.cache_byte_max: unknown field `cache_byte_max`"),
            "{e}"
        );
        let e = error("[server]\nlisten = \"a:1\"\nport = 9000\n");
        assert!(e.contains("server.port: unknown field `port`"), "{e}");
        let e = error("[store]\n[srever]\nlisten = \"a:1\"\n");
        assert!(e.contains("unknown field `srever`"), "{e}");
    }

    #[test]
    fn the_store_at_the_top_level_reads_as_store_and_its_errors_name_the_key() {
        let config =
            parse("cache_bytes_max = 1048576\n[server]\nlisten = \"a:1\"\n[catalog]\nurl = \"postgresql://h/d\"\n")
                .unwrap();
        assert_eq!(config.store.cache_bytes_max, 1 << 20);
        assert_eq!(config.server.listen(None), "a:1");
        assert_eq!(
            config.store.catalog.url.as_deref(),
            Some("postgresql://h/d")
        );
        let e = error("cache_bytes_max = true\n");
        assert!(
            e.starts_with("D/permafrost.toml: store.cache_bytes_max: invalid type: boolean"),
            "{e}"
        );
        assert!(!e.contains("(line"), "{e}");
    }

    #[test]
    fn the_catalog_table_reaches_the_store_unless_the_store_names_its_own() {
        let config = parse("[store]\n[catalog]\nurl = \"postgresql://a/b\"\n").unwrap();
        assert_eq!(
            config.store.catalog.url.as_deref(),
            Some("postgresql://a/b")
        );
        let config = parse(
            "[store.catalog]\nurl = \"postgresql://own/b\"\n[catalog]\nurl = \"postgresql://a/b\"\n",
        )
        .unwrap();
        assert_eq!(
            config.store.catalog.url.as_deref(),
            Some("postgresql://own/b")
        );
    }

    #[test]
    fn lost_after_ms_defaults_to_ten_minutes_and_may_not_be_shorter_than_the_timeout() {
        let parse = |extra: &str| {
            parse(&format!("[cluster]\nname = \"c\"\nnode = \"n1\"\n{extra}")).map(|c| c.cluster)
        };
        let s = parse("").unwrap().unwrap();
        assert_eq!((s.timeout_ms, s.lost_after_ms), (10_000, 600_000));
        let s = parse("heartbeat_ms = 200\ntimeout_ms = 1000\nlost_after_ms = 3000\n")
            .unwrap()
            .unwrap();
        assert_eq!(s.lost_after_ms, 3000);
        let e = parse("lost_after_ms = 5000\n").unwrap_err().to_string();
        assert!(
            e.contains("lost_after_ms = 5000 is shorter than timeout_ms = 10000"),
            "{e}"
        );
    }

    #[test]
    fn a_cluster_table_is_checked_and_needs_postgresql() {
        let e = error("[cluster]\nname = \"c\"\nnode = \"N-1\"\n");
        assert!(e.contains("[cluster] node = \"N-1\": use 1–40"), "{e}");
        let e = error("[cluster]\nname = \"c\"\nnode = \"n1\"\ncopies = 0\n");
        assert!(e.contains("[cluster] copies = 0"), "{e}");
        let e = error("[cluster]\nnode = \"n1\"\n");
        assert!(e.contains("[cluster]: missing field `name`"), "{e}");
        let sqlite = parse("[cluster]\nname = \"c\"\nnode = \"n1\"\n").unwrap();
        let e = sqlite.cluster_database_url().unwrap_err().to_string();
        assert!(e.contains("needs the shared PostgreSQL catalog"), "{e}");
        let node = parse(
            "[catalog]\nurl = \"postgresql://h/d\"\n[cluster]\nname = \"c\"\nnode = \"n1\"\n",
        )
        .unwrap();
        let url = node.cluster_database_url().unwrap();
        assert!(url.starts_with("postgresql://h/d"), "{url}");
        assert_ne!(
            url, "postgresql://h/d",
            "a node's store catalog is in its own schema"
        );
    }

    #[test]
    fn a_record_table_that_cannot_work_is_named() {
        let e = error("[record]\nblock_bytes = 1\n");
        assert!(e.starts_with("D/permafrost.toml: [record]: "), "{e}");
        assert!(e.contains("record.block_bytes = 1"), "{e}");
    }

    #[test]
    fn invalid_toml_names_the_file() {
        let e = error("[store\n");
        assert!(e.starts_with("D/permafrost.toml is not valid TOML"), "{e}");
    }
}
