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
use permafrost_store::Store;

use crate::config::{first_start_text, Config, PowerSection};
use crate::data_dir;
use crate::units::{format_bytes, parse_bytes};

/// `eprintln!` that never panics: a server must not die because whoever started it closed its stderr.
macro_rules! note {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

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

/// Give the store's power manager the `[power]` settings. `fifo` keeps the server's behaviour before the
/// scheduler: the budget's queue in arrival order and every disk on the profile's fixed idle timeout.
fn apply_power(section: PowerSection, store: &Store) -> String {
    let power = store.engine().power();
    let deadline = section.scheduler.strategy == permafrost_policy::SchedulerStrategy::Deadline;
    let summary = if deadline {
        format!(
                "read scheduler deadline (max wait {} ms, persistence yields to reads up to {} ms), idle timeouts {} per disk, {} spin-ups per disk per day{}",
                section.scheduler.max_wait_ms,
                section.scheduler.persist_yield_max_ms,
                if section.idle.adaptive { "adapted" } else { "fixed" },
                section.idle.spinups_per_day(),
                if section.idle.enforce_wear_budget { " at most" } else { " budgeted (not enforced)" }
            )
    } else {
        "read scheduler fifo (first come, first served), fixed idle timeouts".to_owned()
    };
    power.set_scheduler(section.scheduler);
    power.set_idle(deadline.then_some(section.idle));
    summary
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
    data_dir::server_credentials(data_dir)
}

pub fn run(args: ServeArgs) -> Result<()> {
    let data_dir = &args.data_dir;
    data_dir::create(data_dir)?;
    let _lock = data_dir::lock(data_dir)?;
    let Config {
        path: config_path,
        exists: config_exists,
        server: server_section,
        store: mut config,
        cluster: cluster_section,
        mount: mount_section,
        power: power_section,
        record: record_config,
        smart: smart_settings,
    } = Config::load(data_dir)?;
    let block_public_access = server_section.block_public_access();
    let listen = server_section.listen(args.listen.as_deref());
    if !config_exists {
        if let Some(bytes) = args.disk_size {
            config.grid.disk_capacity_bytes = bytes;
        }
        if let Some(bytes) = args.cache_size {
            config.cache_bytes_max = bytes;
        }
        config.validate().context("the configuration")?;
        data_dir::write_durable(&config_path, &first_start_text(&listen, &config)?)?;
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
    let membership = match cluster_section {
        None => None,
        Some(section) => {
            let url =
                crate::config::cluster_database_url(config.catalog.url.as_deref(), &config_path)?;
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
    note!("permafrost: {}", apply_power(power_section, &store));
    let store = Arc::new(store);
    let cluster = match &membership {
        None => None,
        Some(m) => Some(crate::cluster::start(&store, m)?),
    };
    let mounted = match &args.mount {
        None => None,
        Some(dir) => {
            let config = mount_section.mount_config();
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
            block_public_access,
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
        if let Err(e) = data_dir::write_endpoint(data_dir, address) {
            note!("permafrost: {e:#}");
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
                config_path: Some(config_path.clone()),
                smart: smart_settings,
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
    data_dir::remove_endpoint(data_dir);
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
