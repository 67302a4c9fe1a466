//! `permafrost serve`: run the archive and its S3 endpoint on a data directory.
//!
//! First start (no `DATA/permafrost.toml`): writes a commented configuration file with the embedded default (an
//! 8×6 grid with 4+1 horizontal parity groups on sparse file-backed disks under `DATA/grid`, a write-back cache
//! with a size limit under `DATA/cache`, the SQLite catalog); later starts read it back. `Store::open` creates
//! the grid when it is missing and otherwise replays the journal and re-queues what was not yet persisted.
//!
//! Credentials: `PERMAFROST_ROOT_USER` and `PERMAFROST_ROOT_PASSWORD` when both are set; otherwise
//! `DATA/credentials` (mode 0600), generated on first start.
//!
//! SIGTERM or SIGINT: stop accepting, let requests in flight finish, close the store (persistence threads
//! stopped, grid closed cleanly), exit 0. The data directory is locked (`DATA/.lock`) while the server runs, so
//! local `permafrost put/get/...` commands refuse to open it concurrently.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use permafrost_disk::power::PowerProfile;
use permafrost_s3::Credentials;
use permafrost_store::{Store, StoreConfig};
use rand::distributions::Alphanumeric;
use rand::Rng;

use crate::object::{load_config, lock_data_dir, CONFIG_FILE};
use crate::units::{format_bytes, parse_bytes};

/// `eprintln!` that never panics: a server must not die because whoever started it closed its stderr.
macro_rules! note {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// The credentials file in the data directory.
pub const CREDENTIALS_FILE: &str = "credentials";
/// Address the S3 endpoint listens on unless told otherwise.
pub const LISTEN_DEFAULT: &str = "127.0.0.1:9000";
/// How long the shutdown waits for the last users of the store (response bodies still draining).
const CLOSE_WAIT_MS: u64 = 10_000;

#[derive(Args)]
pub struct ServeArgs {
    /// Data directory (created with the embedded default on first start).
    #[arg(long, default_value = "./permafrost-data")]
    data_dir: PathBuf,
    /// Address of the S3 endpoint [default: `listen` of permafrost.toml, else 127.0.0.1:9000]. Port 0 picks a
    /// free port (printed).
    #[arg(long)]
    listen: Option<String>,
    /// Size of each sparse file-backed disk of the embedded default (first start only; then in permafrost.toml).
    #[arg(long, value_parser = parse_bytes)]
    disk_size: Option<u64>,
    /// Upper bound of the write-back cache (first start only; then in permafrost.toml).
    #[arg(long, value_parser = parse_bytes)]
    cache_size: Option<u64>,
    /// Simulated disk power timings in milliseconds instead of the thesis's 10 s spin-up (tests and demos;
    /// idle timeout = 5 × this, at least 100 ms). Applies to this run only.
    #[arg(long)]
    simulated_spin_up_ms: Option<u64>,
    /// Mount the archive on this directory too (FUSE, docs/mount.md): buckets are top-level directories. A stale
    /// mount left there by a crashed server is cleaned up first. Options in the `[mount]` table of
    /// permafrost.toml.
    #[arg(long, value_name = "DIR")]
    mount: Option<PathBuf>,
}

/// What the `[mount]` table of permafrost.toml may hold (docs/mount.md).
#[derive(serde::Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct MountSection {
    /// How long the kernel caches names and attributes (changes made through S3 show after this).
    ttl_ms: Option<u64>,
    /// Owner, group and modes of entries that carry none (S3 uploads, implicit directories).
    uid: Option<u32>,
    gid: Option<u32>,
    file_mode: Option<u32>,
    dir_mode: Option<u32>,
    /// Let every user of the machine use the mount (default: when the server runs as root).
    allow_other: Option<bool>,
    /// The kernel's read-ahead of the mount in KiB, set after mounting when the server runs as root (default
    /// 1024; 0 leaves the kernel's 128).
    read_ahead_kb: Option<u32>,
}

impl MountSection {
    fn config(self) -> permafrost_fuse::MountConfig {
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

/// What the `[power]` table of permafrost.toml may hold: the read scheduler and the idle timeouts the server's
/// power manager runs (the code `permafrost sim energy` runs; docs/energy.md, issue 30).
#[derive(serde::Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct PowerSection {
    /// `[power.scheduler]`: `strategy` = "deadline" (default) | "fifo", `max_wait_ms`, `persist_yield_max_ms`.
    scheduler: permafrost_policy::SchedulerConfig,
    /// `[power.idle]` (with the deadline scheduler): adaptive per-disk idle timeouts and the wear budget
    /// (`spinups_per_day_max`, `enforce_wear_budget`, `rated_start_stop_cycles`, `service_life_years`, …).
    idle: permafrost_policy::IdleConfig,
}

impl PowerSection {
    /// Give the store's power manager these settings. `fifo` keeps the server's behaviour before the scheduler:
    /// the budget's queue in arrival order and every disk on the profile's fixed idle timeout.
    fn apply(self, store: &Store) -> String {
        let power = store.engine().power();
        let deadline = self.scheduler.strategy == permafrost_policy::SchedulerStrategy::Deadline;
        let summary = if deadline {
            format!(
                "read scheduler deadline (max wait {} ms, persistence yields to reads up to {} ms), idle timeouts {} per disk, {} spin-ups per disk per day{}",
                self.scheduler.max_wait_ms,
                self.scheduler.persist_yield_max_ms,
                if self.idle.adaptive { "adapted" } else { "fixed" },
                self.idle.spinups_per_day(),
                if self.idle.enforce_wear_budget { " at most" } else { " budgeted (not enforced)" }
            )
        } else {
            "read scheduler fifo (first come, first served), fixed idle timeouts".to_owned()
        };
        power.set_scheduler(self.scheduler);
        power.set_idle(deadline.then_some(self.idle));
        summary
    }
}

/// How often a server checks the catalog for changes to keys made elsewhere (another node, `permafrost key` on
/// the data directory).
const ACCESS_REFRESH: Duration = Duration::from_secs(2);

/// The access tables a cluster's nodes share (schema `pf_access` of the cluster's database).
fn shared_access_catalog(
    db: &permafrost_catalog::cluster::ClusterDb,
    url: &str,
) -> Result<permafrost_catalog::SqlCatalog> {
    db.make_access_schema()
        .context("making the cluster's shared access tables")?;
    permafrost_catalog::SqlCatalog::open_postgres(
        &permafrost_catalog::cluster::access_url(url),
        permafrost_catalog::PostgresOptions::default(),
    )
    .context("opening the cluster's shared access tables")
}

/// What the `[server]` table of permafrost.toml may hold.
#[derive(serde::Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct ServerSection {
    listen: Option<String>,
    /// Block every public ACL and bucket policy on every bucket (docs/security.md); on unless set to false.
    block_public_access: Option<bool>,
}

/// The `[server]` table of permafrost.toml (defaults when the file or the table is missing); the `[store]`
/// table is read by `object::load_config`, shared with the local object commands.
fn server_section(data_dir: &Path) -> Result<ServerSection> {
    config_table(data_dir, "server")
}

/// A table of permafrost.toml (its defaults when the file or the table is missing).
fn config_table<T: serde::de::DeserializeOwned + Default>(
    data_dir: &Path,
    name: &str,
) -> Result<T> {
    let path = data_dir.join(CONFIG_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(T::default()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let table: toml::Table =
        toml::from_str(&text).with_context(|| format!("{} is not valid TOML", path.display()))?;
    match table.get(name) {
        None => Ok(T::default()),
        Some(v) => v
            .clone()
            .try_into()
            .with_context(|| format!("{}: invalid [{name}] table", path.display())),
    }
}

/// The configuration file written on first start: every value, with what it means.
fn config_text(listen: &str, config: &StoreConfig) -> Result<String> {
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

fn random_token(len: usize) -> String {
    rand::thread_rng()
        .sample_iter(&Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}

/// Whether disk power is real or simulated, in words: file-backed disks have no motor, and block devices
/// without a configured controller keep only the model.
fn power_description(disks: &[permafrost_engine::DiskSpec]) -> String {
    use permafrost_disk::power::PowerControl;
    let simulated = disks
        .iter()
        .filter(|d| {
            matches!(
                d,
                permafrost_engine::DiskSpec::File { .. }
                    | permafrost_engine::DiskSpec::Block {
                        power_control: PowerControl::Simulated,
                        ..
                    }
            )
        })
        .count();
    match (simulated, disks.len()) {
        (s, n) if s == n => "disk power is simulated (no motor is switched)".to_owned(),
        (0, _) => "disk power is switched for real".to_owned(),
        (s, n) => {
            format!("disk power is simulated for {s} of {n} disks, switched for real for the rest")
        }
    }
}

/// The root credentials and a description of where they came from.
fn credentials(data_dir: &Path) -> Result<(Credentials, String)> {
    let user = std::env::var("PERMAFROST_ROOT_USER")
        .ok()
        .filter(|v| !v.is_empty());
    let password = std::env::var("PERMAFROST_ROOT_PASSWORD")
        .ok()
        .filter(|v| !v.is_empty());
    match (user, password) {
        (Some(access_key), Some(secret_key)) => {
            if secret_key.len() < 8 {
                bail!("PERMAFROST_ROOT_PASSWORD must have at least 8 characters");
            }
            return Ok((
                Credentials {
                    access_key,
                    secret_key,
                },
                "from PERMAFROST_ROOT_USER / PERMAFROST_ROOT_PASSWORD".into(),
            ));
        }
        (None, None) => {}
        _ => bail!("set both PERMAFROST_ROOT_USER and PERMAFROST_ROOT_PASSWORD, or neither"),
    }
    let path = data_dir.join(CREDENTIALS_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let (mut key, mut secret) = (None, None);
            for line in text.lines() {
                let Some((name, value)) = line.split_once('=') else {
                    continue;
                };
                let value = value.trim().trim_matches('"').to_string();
                match name.trim() {
                    "access_key" => key = Some(value),
                    "secret_key" => secret = Some(value),
                    _ => {}
                }
            }
            match (key, secret) {
                (Some(access_key), Some(secret_key)) => Ok((
                    Credentials {
                        access_key,
                        secret_key,
                    },
                    format!("secret key in {}", path.display()),
                )),
                _ => bail!(
                    "{} must hold access_key = \"…\" and secret_key = \"…\"",
                    path.display()
                ),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let credentials = Credentials {
                access_key: format!("PF{}", random_token(18).to_uppercase()),
                secret_key: random_token(40),
            };
            write_private(
                &path,
                &format!(
                    "# Root credentials of this permafrost server (S3 access key id and secret access key).\n\
                     access_key = \"{}\"\nsecret_key = \"{}\"\n",
                    credentials.access_key, credentials.secret_key
                ),
            )?;
            // The secret goes only into the 0600 file, never to stdout (which often ends up in a log file).
            Ok((
                credentials,
                format!(
                    "generated; the secret key is in {} (mode 0600)",
                    path.display()
                ),
            ))
        }
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Create `path` with mode 0600 and `text`, durably.
fn write_private(path: &Path, text: &str) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Write `text` to `path` so that a crash leaves the old file or the new one whole: a temporary file next to it
/// (`NAME.tmp`), synced, then renamed over it.
pub(crate) fn write_durable(path: &Path, text: &str) -> Result<()> {
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    let mut file =
        std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))
}

pub fn run(args: ServeArgs) -> Result<()> {
    let data_dir = &args.data_dir;
    let new_data_dir = !data_dir.exists();
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create {}", data_dir.display()))?;
    if new_data_dir {
        // The catalog holds every access key's secret in clear (docs/security.md): the directory is the
        // service user's alone.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(data_dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot make {} private (mode 0700)", data_dir.display()))?;
    }
    let _lock = lock_data_dir(data_dir)?;
    let config_path = data_dir.join(CONFIG_FILE);
    let first_start = !config_path.exists();
    let mut config = load_config(data_dir)?;
    let section = server_section(data_dir)?;
    let block_public_access = section.block_public_access;
    let listen = args
        .listen
        .clone()
        .or(section.listen)
        .unwrap_or_else(|| LISTEN_DEFAULT.to_string());
    if first_start {
        if let Some(bytes) = args.disk_size {
            config.grid.disk_capacity_bytes = bytes;
        }
        if let Some(bytes) = args.cache_size {
            config.cache_bytes_max = bytes;
        }
        config.validate().context("the configuration")?;
        write_durable(&config_path, &config_text(&listen, &config)?)?;
        note!("permafrost: wrote {}", config_path.display());
    } else if args.disk_size.is_some() || args.cache_size.is_some() {
        note!(
            "permafrost: --disk-size and --cache-size apply on first start only; edit {} instead",
            config_path.display()
        );
    }
    if let Some(ms) = args.simulated_spin_up_ms {
        config.power_profile = Some(PowerProfile {
            spin_up_ms: ms,
            idle_timeout_ms: (ms * 5).max(100),
            ..config.power_profile.clone().unwrap_or_default()
        });
    }
    let (credentials, credentials_source) = credentials(data_dir)?;
    // A node of a cluster: every check before the archive opens (docs/cluster.md "Nodes").
    let mut cluster_url = None;
    let membership = match crate::cluster::section(data_dir)? {
        None => None,
        Some(section) => {
            let url = crate::cluster::database_url(config.catalog.url.as_deref(), &config_path)?;
            cluster_url = Some(url.clone());
            let m = crate::cluster::join(data_dir, section, &url, &listen)?;
            note!(
                "permafrost: node {} of cluster {} (id {}), advertised at {}; store catalog in schema {}",
                m.section.node,
                m.section.name,
                m.cluster_id,
                m.address,
                permafrost_catalog::cluster::node_schema(&m.section.node)
            );
            Some(m)
        }
    };
    let new_grid = !data_dir
        .join("grid")
        .join(permafrost_engine::CONFIG_FILE)
        .exists();
    if new_grid {
        note!(
            "permafrost: creating the embedded default in {}: grid {}, sparse file-backed disks of {}, cache of {}",
            data_dir.display(),
            config.grid.layout,
            format_bytes(config.grid.disk_capacity_bytes),
            format_bytes(config.cache_bytes_max)
        );
    }
    let started = Instant::now();
    let store = Store::open(data_dir, config)
        .with_context(|| format!("cannot open the archive in {}", data_dir.display()))?;
    let grid = store.engine().config();
    note!(
        "permafrost: archive open in {} ms: grid {}, {} grid buckets (data disks) of {}; {}",
        started.elapsed().as_millis(),
        grid.layout,
        store.engine().buckets(),
        format_bytes(store.engine().bucket_capacity_bytes()),
        power_description(&grid.disks)
    );
    let power_section: PowerSection = config_table(data_dir, "power")?;
    note!("permafrost: {}", power_section.apply(&store));
    let store = Arc::new(store);
    let cluster = match &membership {
        None => None,
        Some(m) => Some(crate::cluster::start(&store, m)?),
    };
    let mounted = match &args.mount {
        None => None,
        Some(dir) => {
            let config = config_table::<MountSection>(data_dir, "mount")?.config();
            let mounted = permafrost_fuse::mount(Arc::clone(&store), dir, config)
                .with_context(|| format!("cannot mount the archive on {}", dir.display()))?;
            if mounted.cleaned_stale() {
                note!(
                    "permafrost: {} was left mounted by a server that stopped without unmounting (transport endpoint is not connected); unmounted it",
                    mounted.path().display()
                );
            }
            note!(
                "permafrost: archive mounted on {}",
                mounted.path().display()
            );
            note!("permafrost: {}", mounted.read_ahead());
            Some(mounted)
        }
    };
    let record_config: permafrost_record::RecordConfig = config_table(data_dir, "record")?;
    record_config
        .validate()
        .with_context(|| format!("{}: [record]", data_dir.join(CONFIG_FILE).display()))?;
    let recorder = permafrost_record::Recorder::open(Arc::clone(&store), record_config)
        .context("starting the recorder")?;

    let root_access_key = credentials.access_key.clone();
    // Keys live in the node's own catalog, or in a cluster in the shared access tables (every node knows
    // them). Opened before the async runtime: the PostgreSQL client blocks.
    let access_catalog: Arc<dyn permafrost_catalog::AccessCatalog> =
        match (&membership, &cluster_url) {
            (Some(m), Some(url)) => Arc::new(shared_access_catalog(&m.db, url)?),
            _ => store.access_catalog(),
        };
    let access = permafrost_access::Access::open(
        access_catalog,
        credentials,
        permafrost_access::AccessSettings {
            block_public_access: block_public_access.unwrap_or(true),
        },
    )
    .context("loading the access keys from the catalog")?;
    let access = Arc::new(access);
    access.spawn_refresher(ACCESS_REFRESH);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("permafrost-http")
        .build()
        .context("starting the async runtime")?;
    let served = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&listen)
            .await
            .with_context(|| format!("cannot listen on {listen}"))?;
        let address: SocketAddr = listener.local_addr().context("the listening address")?;
        // Where `permafrost status --data-dir` finds the running server (removed when it stops).
        let endpoint_file = data_dir.join(crate::object::ENDPOINT_FILE);
        if let Err(e) = std::fs::write(&endpoint_file, format!("http://{address}\n")) {
            note!("permafrost: cannot write {}: {e}", endpoint_file.display());
        }
        note!("permafrost: S3 endpoint http://{address}");
        note!(
            "permafrost: access key {} ({credentials_source})",
            root_access_key
        );
        note!(
            "permafrost: health http://{address}{}",
            permafrost_s3::HEALTH_PATH
        );
        note!(
            "permafrost: dashboard http://{address}{}/",
            permafrost_admin::UI_PREFIX
        );
        let admin = permafrost_admin::Admin::start(
            Arc::clone(&store),
            Arc::clone(&access),
            permafrost_admin::AdminOptions {
                config_path: Some(data_dir.join(CONFIG_FILE)),
                ..Default::default()
            },
        );
        permafrost_s3::add_archive_endpoints(&admin);
        permafrost_record::api::add_endpoints(&admin, &recorder);
        if let Some(m) = &membership {
            crate::cluster::add_endpoint(
                &admin,
                Arc::clone(&m.db),
                m.section.clone(),
                m.cluster_id.clone(),
                data_dir.to_path_buf(),
            );
        }
        let node = cluster.as_ref().map(|(node, _)| Arc::clone(node));
        let served = permafrost_s3::serve_node(listener, admin.clone(), node, shutdown_signal())
            .await
            .context("serving S3");
        admin.stop();
        served
    });
    let _ = std::fs::remove_file(data_dir.join(crate::object::ENDPOINT_FILE));
    note!("permafrost: stopping, closing the archive");
    if let Some(mounted) = mounted {
        let path = mounted.path().display().to_string();
        match mounted.unmount() {
            Ok(()) => note!("permafrost: unmounted {path}"),
            Err(problems) => note!("permafrost: unmounting {path}: {problems}"),
        }
    }
    runtime.shutdown_timeout(Duration::from_millis(CLOSE_WAIT_MS));
    // Dropped here, outside the runtime: a cluster's shared access tables hold a PostgreSQL client, whose own
    // runtime must not be dropped inside another.
    drop(access);
    drop(cluster); // the heartbeat stops (it holds the store)
    recorder.shutdown();
    drop(recorder);
    served?;
    let mut store = store;
    let deadline = Instant::now() + Duration::from_millis(CLOSE_WAIT_MS);
    loop {
        match Arc::try_unwrap(store) {
            Ok(store) => return store.close().context("closing the archive"),
            Err(shared) if Instant::now() < deadline => {
                store = shared;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(_) => bail!("the archive is still in use after {CLOSE_WAIT_MS} ms; not closed cleanly (restart recovers)"),
        }
    }
}

/// Completes on SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            note!("permafrost: cannot watch SIGTERM ({e}); stop with SIGINT");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
