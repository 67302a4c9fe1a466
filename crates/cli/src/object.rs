//! Objects from the command line: `put`, `get`, `ls`, `rm`, `stat`, `mb`, `rb`, `status`, `verify`, `salvage`.
//!
//! Two ways to reach an archive, chosen per command:
//! - **`--endpoint URL`** (or `PERMAFROST_ENDPOINT`): talk S3 to a running `permafrost serve`, signing every
//!   request with AWS Signature V4 (presigned URLs). Credentials come from `--access-key`/`--secret-key`, else
//!   `PERMAFROST_ROOT_USER`/`PERMAFROST_ROOT_PASSWORD`, else `DATA/credentials`.
//! - **`--data-dir DIR`** (default `./permafrost-data`): open the store directly, in this process. Only one
//!   process may have a data directory open: the CLI holds an exclusive `flock` on `DATA/.lock` for as long as it
//!   has the store open and refuses with "a server is running on DIR" when another process holds it.
//!
//! Invariants: `get` into a file writes `FILE.permafrost-partial` and renames it only once every byte arrived
//! verified, so a failed download never leaves a file that looks complete; `verify` exits non-zero when any
//! object fails to read back verified; `salvage` never opens the catalog (it works when the catalog is lost).
//! Results go to stdout (`--json` for scripts), progress bars and errors to stderr.

mod grid_view;
mod local;
pub(crate) mod remote;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;

use crate::units::format_bytes;
use permafrost_store::{
    BucketSettings, BucketSettingsReport, DatasetFilter, DatasetSummary, RestoreBatch,
};

/// Where the archive is: a data directory opened in this process, or a running server.
#[derive(Args, Clone, Debug)]
pub struct Target {
    /// Data directory of the archive, opened directly (the server must be stopped).
    #[arg(long, default_value = "./permafrost-data")]
    pub(crate) data_dir: PathBuf,
    /// S3 endpoint of a running server, e.g. http://127.0.0.1:9000 [env: PERMAFROST_ENDPOINT].
    #[arg(long)]
    endpoint: Option<String>,
    /// Access key for --endpoint [env: PERMAFROST_ROOT_USER; else DATA/credentials].
    #[arg(long)]
    access_key: Option<String>,
    /// Secret key for --endpoint [env: PERMAFROST_ROOT_PASSWORD; else DATA/credentials].
    #[arg(long)]
    secret_key: Option<String>,
    /// Region named in request signatures.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Print machine-readable JSON on stdout (and no progress bars).
    #[arg(long)]
    pub(crate) json: bool,
}

impl Target {
    /// The server at `endpoint` serving the archive in `data_dir` (credentials from the environment or
    /// `DATA/credentials`).
    pub(crate) fn of_server(data_dir: PathBuf, endpoint: &str) -> Target {
        Target {
            data_dir,
            endpoint: Some(endpoint.to_string()),
            access_key: None,
            secret_key: None,
            region: "us-east-1".to_string(),
            json: false,
        }
    }
}

#[derive(Args, Debug)]
pub struct PutArgs {
    /// File to upload, or `-` for standard input.
    file: PathBuf,
    /// Destination: `bucket/key` or `s3://bucket/key` (a key ending in `/` gets the file's name appended).
    destination: String,
    /// The file is already compressed (`zstd` or `lz4`): it is stored exactly as sent.
    #[arg(long, default_value = "identity")]
    content_encoding: String,
    /// Decoded length in bytes of a pre-compressed file (required with --content-encoding zstd|lz4).
    #[arg(long)]
    decoded_length: Option<u64>,
    /// Content type recorded with the object.
    #[arg(long)]
    content_type: Option<String>,
    /// User metadata `NAME=VALUE` (repeatable), returned as `x-amz-meta-NAME`.
    #[arg(long = "meta", value_name = "NAME=VALUE")]
    metadata: Vec<String>,
    /// Return only once the object is persisted on the grid (all extents and parity durable).
    #[arg(long)]
    wait_persisted: bool,
    /// Give up waiting for persistence after this many seconds (exit 1).
    #[arg(long, default_value_t = 600)]
    wait_timeout_s: u64,
    #[command(flatten)]
    target: Target,
}

#[derive(Args, Debug)]
pub struct GetArgs {
    /// Source: `bucket/key` or `s3://bucket/key`.
    source: String,
    /// Output file, or `-` for standard output (default: the key's last component in the current directory).
    output: Option<PathBuf>,
    /// Only these bytes: `FIRST-LAST` (inclusive), `FIRST-` or `-SUFFIX_LENGTH`.
    #[arg(long, allow_hyphen_values = true)]
    range: Option<String>,
    #[command(flatten)]
    target: Target,
}

#[derive(Args, Debug)]
pub struct LsArgs {
    /// `bucket` or `bucket/prefix` (nothing: list the buckets).
    path: Option<String>,
    /// List every key under the prefix instead of rolling sub-"directories" into prefixes.
    #[arg(long, short)]
    recursive: bool,
    #[command(flatten)]
    target: Target,
}

#[derive(Args, Debug)]
pub struct KeyArgs {
    /// `bucket/key` or `s3://bucket/key`.
    object: String,
    #[command(flatten)]
    target: Target,
}

/// An object to remove.
#[derive(Args, Debug)]
pub struct RmArgs {
    /// `bucket/key` or `s3://bucket/key`.
    object: String,
    /// Remove this version for good (without it, a versioned bucket only gets a delete marker). Object Lock
    /// decides: a legal hold or a retention date in the future refuses.
    #[arg(long)]
    version_id: Option<String>,
    /// Lift a GOVERNANCE retention for this delete (never a COMPLIANCE one, never a legal hold).
    #[arg(long)]
    bypass_governance_retention: bool,
    #[command(flatten)]
    target: Target,
}

/// Restore objects into the cache, scheduled by disk.
#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// `bucket`, `bucket/prefix` or `s3://bucket/prefix`: every current object under it.
    prefix: String,
    /// Keep the restored copies in the cache this many (lifecycle) days.
    #[arg(long, default_value_t = 1)]
    days: u32,
    /// When the server reads them: `Expedited` (at once), `Standard` (batched per disk within the server's
    /// window) or `Bulk` (when the disks spin anyway, or at night). A local archive reads them at once.
    #[arg(long, default_value = "Expedited")]
    tier: permafrost_store::RestoreTier,
    #[command(flatten)]
    target: Target,
}

/// Datasets and what they hold.
#[derive(Args, Debug)]
pub struct DatasetsArgs {
    /// Only datasets of this bucket.
    #[arg(long)]
    bucket: Option<String>,
    /// Only datasets whose objects (or bucket) carry this tag, `KEY=VALUE`.
    #[arg(long)]
    tag: Option<String>,
    /// Only datasets written to at or after this time (RFC 3339, e.g. 2026-01-31T00:00:00Z, or a date).
    #[arg(long)]
    after: Option<String>,
    /// Only datasets first written at or before this time.
    #[arg(long)]
    before: Option<String>,
    #[command(flatten)]
    target: Target,
}

#[derive(Args, Debug)]
pub struct BucketArgs {
    /// Bucket name (3–63 characters of a-z, 0-9, '.', '-').
    bucket: String,
    #[command(flatten)]
    target: Target,
}

/// A bucket and changes to its settings.
#[derive(Args, Debug)]
pub struct SettingsArgs {
    /// Bucket name (3–63 characters of a-z, 0-9, '.', '-').
    bucket: String,
    /// Compression of uploads that arrive uncompressed: `zstd`, `lz4`, `none`, or `default` (the server's).
    #[arg(long)]
    compression: Option<String>,
    /// Placement strategy of the bucket's datasets (`dataset-affinity`, `random`, `round-robin`, `least-full`),
    /// or `default`.
    #[arg(long)]
    placement: Option<String>,
    /// Engine write mode of its persistence: `serialized`, `direct`, `delayed`, or `default`.
    #[arg(long)]
    write_mode: Option<String>,
    #[command(flatten)]
    target: Target,
}

impl SettingsArgs {
    fn changes_anything(&self) -> bool {
        self.compression.is_some() || self.placement.is_some() || self.write_mode.is_some()
    }

    /// `chosen` with the changes asked for, checked here so that a typo fails before anything changes.
    fn apply(&self, mut chosen: BucketSettings) -> Result<BucketSettings> {
        fn value<T>(
            flag: &Option<String>,
            current: Option<T>,
            parse: impl Fn(&str) -> Result<T>,
        ) -> Result<Option<T>> {
            match flag.as_deref() {
                None => Ok(current),
                Some("default") => Ok(None),
                Some(text) => parse(text).map(Some),
            }
        }
        chosen.compression = value(&self.compression, chosen.compression, |t| {
            t.parse()
                .map_err(|e: String| anyhow::anyhow!("--compression: {e}"))
        })?;
        chosen.placement = value(&self.placement, chosen.placement, |t| {
            let known = permafrost_policy::placement_names();
            if !known.contains(&t) {
                bail!("--placement {t:?} is unknown; known: {}", known.join(", "));
            }
            Ok(t.to_string())
        })?;
        chosen.write_mode = value(&self.write_mode, chosen.write_mode, |t| {
            t.parse::<permafrost_store::WriteMode>()
                .map_err(|e| anyhow::anyhow!("--write-mode: {e}"))?;
            Ok(t.to_string())
        })?;
        Ok(chosen)
    }
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    target: Target,
    /// Redraw every SECONDS (through a running server's admin API) until interrupted.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "2")]
    watch: Option<f64>,
}

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// Instead of reading every object: check every claim of the catalog that a version is persisted against
    /// the grid (every version, part list and upload part; bytes read back from the grid, never the cache), list
    /// the false claims and the versions not persisted yet; exits 1 when a claim is false.
    #[arg(long)]
    persisted: bool,
    #[command(flatten)]
    target: Target,
}

#[derive(Args, Debug)]
pub struct SalvageArgs {
    /// The data disk to salvage: its grid bucket number or its disk name (e.g. `disk-03`), read through the
    /// grid (parity reconstruction included). Not needed with --image.
    disk: Option<String>,
    /// Directory the objects are written to (`OUT/<bucket>/<key>`, metadata in `OUT/_sidecars/`).
    #[arg(long)]
    out: PathBuf,
    /// Read a raw data-disk image (a file-backed disk or a block device) instead: no grid, no catalog.
    #[arg(long)]
    image: Option<PathBuf>,
    #[command(flatten)]
    target: Target,
}

/// What `stat` and `put` report about an object.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ObjectStat {
    pub bucket: String,
    pub key: String,
    pub size_bytes: u64,
    pub etag: String,
    pub content_encoding: String,
    pub content_type: Option<String>,
    pub last_modified: String,
    /// `cached`, `placed`, `persisting`, `persisted` (None when the server does not say).
    pub state: Option<String>,
    pub user_metadata: Vec<(String, String)>,
    /// Local only: stored form size, dataset, content id and extents (the grid bucket also remotely, from the
    /// server's `x-permafrost-grid-bucket` header).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stored_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grid_bucket: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extents: Vec<ExtentStat>,
}

/// Where part of an object's stored bytes live on the grid.
#[derive(Debug, Clone, Serialize)]
pub struct ExtentStat {
    pub extent_id: i64,
    pub grid_bucket: u32,
    /// Byte offset of the extent in the grid bucket.
    pub offset: u64,
    /// Offset of this object's bytes inside the extent's payload, and their length.
    pub offset_in_payload: u64,
    pub length_bytes: u64,
    /// `content` or `pack`.
    pub kind: String,
}

/// One listed object.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    pub key: String,
    pub size_bytes: u64,
    pub etag: String,
    pub last_modified: String,
}

/// A listing: objects and common prefixes ("directories").
#[derive(Debug, Clone, Default, Serialize)]
pub struct Listing {
    pub objects: Vec<Listed>,
    pub prefixes: Vec<String>,
}

/// What a put sends besides the bytes.
#[derive(Debug, Clone, Default)]
pub struct PutRequest {
    pub content_encoding: String,
    pub decoded_length: Option<u64>,
    pub content_type: Option<String>,
    pub user_metadata: Vec<(String, String)>,
}

/// An inclusive byte range as S3 takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Range {
    FromTo(u64, u64),
    From(u64),
    Suffix(u64),
}

impl Range {
    fn parse(text: &str) -> Result<Range> {
        let bad = || {
            anyhow::anyhow!(
                "range {text:?}: use FIRST-LAST, FIRST- or -SUFFIX_LENGTH (bytes, inclusive)"
            )
        };
        let text = text.trim().trim_start_matches("bytes=");
        let (first, last) = text.split_once('-').ok_or_else(bad)?;
        let number = |s: &str| s.trim().parse::<u64>().map_err(|_| bad());
        match (first.trim().is_empty(), last.trim().is_empty()) {
            (false, false) => {
                let (a, b) = (number(first)?, number(last)?);
                if a > b {
                    return Err(bad());
                }
                Ok(Range::FromTo(a, b))
            }
            (false, true) => Ok(Range::From(number(first)?)),
            (true, false) => Ok(Range::Suffix(number(last)?)),
            (true, true) => Err(bad()),
        }
    }

    /// The value of an HTTP `Range` header.
    fn header(self) -> String {
        match self {
            Range::FromTo(a, b) => format!("bytes={a}-{b}"),
            Range::From(a) => format!("bytes={a}-"),
            Range::Suffix(n) => format!("bytes=-{n}"),
        }
    }
}

/// The operations both ways of reaching an archive offer.
trait Archive {
    fn put(
        &self,
        bucket: &str,
        key: &str,
        body: Body<'_>,
        request: &PutRequest,
        json: bool,
    ) -> Result<ObjectStat>;
    /// Copy the object (or a range of it) to `sink`; returns the bytes written.
    fn get(
        &self,
        bucket: &str,
        key: &str,
        range: Option<Range>,
        sink: &mut dyn Write,
        json: bool,
    ) -> Result<u64>;
    fn list(&self, bucket: &str, prefix: &str, recursive: bool) -> Result<Listing>;
    fn list_buckets(&self) -> Result<Vec<String>>;
    /// Delete a key (a delete marker in versioned buckets) or, with `version_id`, one version for good.
    fn remove(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        bypass_governance: bool,
    ) -> Result<permafrost_store::DeleteOutcome>;
    /// Restore every current object under `bucket/prefix` into the cache (by disk), and wait until done.
    fn restore(
        &self,
        bucket: &str,
        prefix: &str,
        days: u32,
        tier: permafrost_store::RestoreTier,
        json: bool,
    ) -> Result<RestoreBatch>;
    fn datasets(&self, filter: &DatasetFilter) -> Result<Vec<DatasetSummary>>;
    fn stat(&self, bucket: &str, key: &str) -> Result<ObjectStat>;
    fn make_bucket(&self, bucket: &str) -> Result<()>;
    /// The bucket's settings; with `change`, after replacing them.
    fn bucket_settings(
        &self,
        bucket: &str,
        change: Option<BucketSettings>,
    ) -> Result<BucketSettingsReport>;
    fn remove_bucket(&self, bucket: &str) -> Result<()>;
    /// Wait until the object is persisted; `Ok(false)` after `timeout`.
    fn wait_persisted(&self, bucket: &str, key: &str, timeout: Duration) -> Result<bool>;
}

/// The bytes of a put: a file (its length known), standard input, or a stream of known length (a copy arriving
/// at `permafrost relay node`: a read error abandons the put, nothing becomes visible).
pub enum Body<'a> {
    File {
        file: std::fs::File,
        len_bytes: u64,
    },
    Stdin,
    Stream {
        reader: &'a mut dyn Read,
        len_bytes: u64,
    },
}

impl<'a> Body<'a> {
    fn open(path: &Path) -> Result<Body<'static>> {
        if path == Path::new("-") {
            return Ok(Body::Stdin);
        }
        let file =
            std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        let meta = file
            .metadata()
            .with_context(|| format!("cannot stat {}", path.display()))?;
        if !meta.is_file() {
            bail!("{} is not a regular file", path.display());
        }
        Ok(Body::File {
            file,
            len_bytes: meta.len(),
        })
    }

    /// Length when known before reading.
    fn len_bytes(&self) -> Option<u64> {
        match self {
            Body::File { len_bytes, .. } | Body::Stream { len_bytes, .. } => Some(*len_bytes),
            Body::Stdin => None,
        }
    }

    fn into_reader(self) -> Box<dyn Read + 'a> {
        match self {
            Body::File { file, .. } => Box::new(file),
            Body::Stdin => Box::new(std::io::stdin().lock()),
            Body::Stream { reader, .. } => Box::new(reader),
        }
    }
}

impl Target {
    /// `--json` was given.
    pub(crate) fn json(&self) -> bool {
        self.json
    }
}

/// Download `bucket/key` (a path as `get` takes it) into `sink`, from a running server or the data directory.
pub(crate) fn get_into(target: &Target, path: &str, sink: &mut dyn std::io::Write) -> Result<u64> {
    let (bucket, key) = split_path(path, true)?;
    connect(target)?.get(&bucket, &key, None, sink, true)
}

/// What the archive knows of `bucket/key` (a path as `stat` takes it).
pub(crate) fn stat_of(target: &Target, path: &str) -> Result<ObjectStat> {
    let (bucket, key) = split_path(path, true)?;
    connect(target)?.stat(&bucket, &key)
}

/// An archive opened once for several operations: `permafrost relay node` shares one between the copies it
/// stores and the rebuild sources it reads at the same time (a data directory stays locked while it is open).
pub(crate) struct OpenArchive(Box<dyn Archive + Send + Sync>);

/// Open the target's archive (lock and open its data directory, or check the endpoint's credentials).
pub(crate) fn open_archive(target: &Target) -> Result<OpenArchive> {
    connect(target).map(OpenArchive)
}

impl OpenArchive {
    /// Store `len_bytes` from `reader` as `bucket/key`, making the bucket when it is missing (a copy that arrives
    /// through a replication tree). Returns once the archive acknowledged the object; a read error (or fewer
    /// bytes than announced) fails the put and leaves nothing visible.
    pub(crate) fn put_stream(
        &self,
        bucket: &str,
        key: &str,
        reader: &mut dyn Read,
        len_bytes: u64,
    ) -> Result<ObjectStat> {
        if !self.0.list_buckets()?.iter().any(|b| b == bucket) {
            self.0.make_bucket(bucket)?;
        }
        let request = PutRequest {
            content_encoding: "identity".to_string(),
            ..PutRequest::default()
        };
        let body = Body::Stream { reader, len_bytes };
        self.0.put(bucket, key, body, &request, true)
    }

    /// Copy `bucket/key` to `sink` as it is read; returns the bytes written.
    pub(crate) fn get_into(&self, bucket: &str, key: &str, sink: &mut dyn Write) -> Result<u64> {
        self.0.get(bucket, key, None, sink, true)
    }
}

/// The data directory of a target (None when it is a running server).
pub(crate) fn data_dir_of(target: &Target) -> Option<&Path> {
    remote_endpoint(target)
        .is_none()
        .then_some(target.data_dir.as_path())
}

fn connect(target: &Target) -> Result<Box<dyn Archive + Send + Sync>> {
    let endpoint = target.endpoint.clone().or_else(|| {
        std::env::var("PERMAFROST_ENDPOINT")
            .ok()
            .filter(|e| !e.is_empty())
    });
    match endpoint {
        Some(endpoint) => Ok(Box::new(remote::Remote::connect(&endpoint, target)?)),
        None => Ok(Box::new(local::Local::open(&target.data_dir)?)),
    }
}

/// `bucket/key` or `s3://bucket/key` → (bucket, key); the key may be empty when `key_required` is false.
fn split_path(text: &str, key_required: bool) -> Result<(String, String)> {
    let path = text.strip_prefix("s3://").unwrap_or(text);
    let (bucket, key) = path.split_once('/').unwrap_or((path, ""));
    if bucket.is_empty() {
        bail!("{text:?} names no bucket: use bucket/key or s3://bucket/key");
    }
    if key_required && key.is_empty() {
        bail!("{text:?} names no key: use bucket/key or s3://bucket/key");
    }
    Ok((bucket.to_string(), key.to_string()))
}

fn print_json(value: &impl Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// `permafrost status` for people: the same lines whether the summary came from the store opened here or from a
/// server's status endpoint.
fn print_status(summary: &permafrost_store::StatusSummary) {
    let d = &summary.disks;
    println!("archive   {} (grid {})", summary.data_dir, summary.layout);
    println!(
        "disks     {}: {} off, {} spinning up, {} idle, {} active{}",
        d.total,
        d.off,
        d.spinning_up,
        d.idle,
        d.active,
        if d.failed > 0 {
            format!(", {} FAILED", d.failed)
        } else {
            String::new()
        }
    );
    let fill = 100.0 * summary.cache_used_bytes as f64 / summary.cache_capacity_bytes.max(1) as f64;
    println!(
        "cache     {} of {} ({fill:.1} %)",
        format_bytes(summary.cache_used_bytes),
        format_bytes(summary.cache_capacity_bytes)
    );
    if summary.waiting_bytes_per_grid_bucket.is_empty() {
        println!("waiting   nothing: every object is persisted");
    }
    for w in &summary.waiting_bytes_per_grid_bucket {
        println!(
            "waiting   grid bucket {}: {}",
            w.grid_bucket,
            format_bytes(w.bytes)
        );
    }
    for c in &summary.contents {
        println!(
            "contents  {:<10} {:>8}  {}",
            c.state,
            c.contents,
            format_bytes(c.stored_bytes)
        );
    }
    println!(
        "catalog   {} buckets, {} objects, {} extents ({} packs)",
        summary.buckets, summary.objects, summary.extents, summary.pack_extents
    );
    println!(
        "energy    {:.6} kWh {}",
        summary.energy_kwh, summary.energy_scope
    );
    if let Some(e) = &summary.last_background_error {
        println!("error     {e}");
    }
}

pub fn put(args: PutArgs) -> Result<()> {
    let (bucket, mut key) = split_path(&args.destination, true)?;
    if key.ends_with('/') {
        let name = args
            .file
            .file_name()
            .filter(|_| args.file != Path::new("-"))
            .with_context(|| {
                format!(
                    "{} ends with '/' but the source has no file name",
                    args.destination
                )
            })?;
        key.push_str(&name.to_string_lossy());
    }
    let mut user_metadata = Vec::new();
    for pair in &args.metadata {
        let (name, value) = pair
            .split_once('=')
            .with_context(|| format!("--meta {pair:?}: use NAME=VALUE"))?;
        user_metadata.push((name.trim().to_ascii_lowercase(), value.to_string()));
    }
    let encoding = args.content_encoding.to_ascii_lowercase();
    if !["identity", "zstd", "lz4"].contains(&encoding.as_str()) {
        bail!("--content-encoding {encoding:?}: use identity, zstd or lz4");
    }
    if encoding != "identity" && args.decoded_length.is_none() {
        bail!("--content-encoding {encoding} needs --decoded-length (the size of the data once decoded)");
    }
    let request = PutRequest {
        content_encoding: encoding,
        decoded_length: args.decoded_length,
        content_type: args.content_type.clone(),
        user_metadata,
    };
    let body = Body::open(&args.file)?;
    let archive = connect(&args.target)?;
    let mut stat = archive.put(&bucket, &key, body, &request, args.target.json)?;
    if args.wait_persisted {
        let timeout = Duration::from_secs(args.wait_timeout_s);
        if !archive.wait_persisted(&bucket, &key, timeout)? {
            bail!(
                "{bucket}/{key} is stored but not persisted after {} s",
                args.wait_timeout_s
            );
        }
        stat = archive.stat(&bucket, &key)?;
    }
    if args.target.json {
        print_json(&stat)
    } else {
        println!(
            "{bucket}/{key}: {} ({} bytes), etag {}, {}",
            format_bytes(stat.size_bytes),
            stat.size_bytes,
            stat.etag,
            stat.state.as_deref().unwrap_or("stored")
        );
        Ok(())
    }
}

pub fn get(args: GetArgs) -> Result<()> {
    let (bucket, key) = split_path(&args.source, true)?;
    let range = args.range.as_deref().map(Range::parse).transpose()?;
    let archive = connect(&args.target)?;
    let output = args.output.clone().unwrap_or_else(|| {
        PathBuf::from(key.rsplit('/').find(|c| !c.is_empty()).unwrap_or("object"))
    });
    let quiet = args.target.json;
    let bytes = if output == Path::new("-") {
        let stdout = std::io::stdout();
        let mut sink = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
        let n = archive.get(&bucket, &key, range, &mut sink, true)?;
        sink.flush().context("writing to standard output")?;
        n
    } else {
        let mut partial = output.clone().into_os_string();
        partial.push(".permafrost-partial");
        let partial = PathBuf::from(partial);
        let result = (|| -> Result<u64> {
            let file = std::fs::File::create(&partial)
                .with_context(|| format!("cannot create {}", partial.display()))?;
            let mut sink = std::io::BufWriter::with_capacity(1 << 20, file);
            let n = archive.get(&bucket, &key, range, &mut sink, quiet)?;
            let file = sink
                .into_inner()
                .map_err(|e| e.into_error())
                .with_context(|| format!("writing {}", partial.display()))?;
            file.sync_all()
                .with_context(|| format!("syncing {}", partial.display()))?;
            std::fs::rename(&partial, &output).with_context(|| {
                format!(
                    "cannot rename {} to {}",
                    partial.display(),
                    output.display()
                )
            })?;
            Ok(n)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&partial);
        }
        result?
    };
    if args.target.json {
        print_json(
            &serde_json::json!({ "bucket": bucket, "key": key, "bytes": bytes, "output": output }),
        )
    } else {
        if output != Path::new("-") {
            eprintln!(
                "{bucket}/{key} → {}: {} ({bytes} bytes)",
                output.display(),
                format_bytes(bytes)
            );
        }
        Ok(())
    }
}

pub fn ls(args: LsArgs) -> Result<()> {
    let archive = connect(&args.target)?;
    let Some(path) = args.path.as_deref() else {
        let buckets = archive.list_buckets()?;
        if args.target.json {
            return print_json(&serde_json::json!({ "buckets": buckets }));
        }
        for bucket in buckets {
            println!("{bucket}/");
        }
        return Ok(());
    };
    let (bucket, prefix) = split_path(path, false)?;
    let listing = archive.list(&bucket, &prefix, args.recursive)?;
    if args.target.json {
        return print_json(&listing);
    }
    for prefix in &listing.prefixes {
        println!("{:>12}  {:<20}  {prefix}", "PRE", "");
    }
    for object in &listing.objects {
        println!(
            "{:>12}  {:<20}  {}",
            object.size_bytes, object.last_modified, object.key
        );
    }
    Ok(())
}

pub fn rm(args: RmArgs) -> Result<()> {
    let (bucket, key) = split_path(&args.object, true)?;
    let archive = connect(&args.target)?;
    // S3 deletes of a missing key succeed; a person asking to remove one wants to know.
    if args.version_id.is_none() {
        archive.stat(&bucket, &key)?;
    }
    let outcome = archive.remove(
        &bucket,
        &key,
        args.version_id.as_deref(),
        args.bypass_governance_retention,
    )?;
    if let (Some(v), None) = (&args.version_id, &outcome.version_id) {
        bail!("no such version: {bucket}/{key} version {v}");
    }
    let text = match (&args.version_id, outcome.delete_marker, &outcome.version_id) {
        (None, true, Some(marker)) => {
            format!("removed {bucket}/{key} (delete marker {marker}; older versions stay)")
        }
        (Some(v), true, _) => format!("removed delete marker {v} of {bucket}/{key}"),
        (Some(v), false, _) => format!("removed version {v} of {bucket}/{key}"),
        _ => format!("removed {bucket}/{key}"),
    };
    if args.target.json {
        print_json(&serde_json::json!({
            "removed": format!("{bucket}/{key}"),
            "version_id": outcome.version_id,
            "delete_marker": outcome.delete_marker,
        }))
    } else {
        println!("{text}");
        Ok(())
    }
}

pub fn restore(args: RestoreArgs) -> Result<()> {
    let (bucket, prefix) = split_path(&args.prefix, false)?;
    if args.days == 0 {
        bail!("--days must be at least 1");
    }
    let archive = connect(&args.target)?;
    let batch = archive.restore(&bucket, &prefix, args.days, args.tier, args.target.json)?;
    if args.target.json {
        return print_json(&batch);
    }
    println!(
        "restored {} of {} objects under {bucket}/{prefix} ({} read from {} disk(s): {}); they stay in the \
         cache for {} day(s)",
        batch.done,
        batch.requested,
        format_bytes(batch.bytes_read),
        batch.grid_buckets.len(),
        batch
            .grid_buckets
            .iter()
            .map(|b| format!("grid bucket {b}"))
            .collect::<Vec<_>>()
            .join(", "),
        args.days
    );
    Ok(())
}

/// A time given on the command line: RFC 3339, or a date (midnight UTC), or milliseconds since the epoch.
fn parse_time_ms(text: &str) -> Result<u64> {
    if let Ok(ms) = text.parse::<u64>() {
        return Ok(ms);
    }
    let with_time = if text.len() == 10 {
        format!("{text}T00:00:00Z")
    } else {
        text.to_string()
    };
    let t: jiff::Timestamp = with_time.parse().with_context(|| {
        format!(
            "{text:?} is not a time: use RFC 3339 (2026-01-31T12:00:00Z) or a date (2026-01-31)"
        )
    })?;
    u64::try_from(t.as_millisecond()).map_err(|_| anyhow::anyhow!("{text:?} is before 1970"))
}

fn time_text(ms: u64) -> String {
    jiff::Timestamp::from_millisecond(ms as i64)
        .map(|t| t.strftime("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default()
}

pub fn datasets(args: DatasetsArgs) -> Result<()> {
    let tag = match &args.tag {
        None => None,
        Some(t) => {
            let (k, v) = t
                .split_once('=')
                .with_context(|| format!("--tag {t:?}: expected KEY=VALUE"))?;
            Some((k.to_string(), v.to_string()))
        }
    };
    let filter = DatasetFilter {
        tag,
        written_after_ms: args.after.as_deref().map(parse_time_ms).transpose()?,
        written_before_ms: args.before.as_deref().map(parse_time_ms).transpose()?,
        bucket: args.bucket.clone(),
    };
    let archive = connect(&args.target)?;
    let list = archive.datasets(&filter)?;
    if args.target.json {
        return print_json(&list);
    }
    if list.is_empty() {
        println!("no datasets match");
        return Ok(());
    }
    println!(
        "{:<32} {:>8} {:>10} {:<19} {:<19} {:<19} {:<18} {:>5}  tags",
        "dataset", "objects", "size", "first write", "last write", "expires", "persistence", "grid"
    );
    for d in list {
        println!(
            "{:<32} {:>8} {:>10} {:<19} {:<19} {:<19} {:<18} {:>5}  {}",
            d.dataset,
            d.objects,
            format_bytes(d.size_bytes),
            time_text(d.first_write_ms),
            time_text(d.last_write_ms),
            d.expires_ms
                .map(time_text)
                .unwrap_or_else(|| "never".into()),
            d.persistence,
            d.grid_bucket
                .map(|g| g.to_string())
                .unwrap_or_else(|| "-".into()),
            d.tags
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    Ok(())
}

pub fn stat(args: KeyArgs) -> Result<()> {
    let (bucket, key) = split_path(&args.object, true)?;
    let archive = connect(&args.target)?;
    let stat = archive.stat(&bucket, &key)?;
    if args.target.json {
        return print_json(&stat);
    }
    println!("object        {}/{}", stat.bucket, stat.key);
    println!(
        "size          {} ({} bytes)",
        format_bytes(stat.size_bytes),
        stat.size_bytes
    );
    if let Some(stored) = stat.stored_bytes {
        println!("stored        {} ({stored} bytes)", format_bytes(stored));
    }
    println!("etag          {}", stat.etag);
    println!("encoding      {}", stat.content_encoding);
    if let Some(t) = &stat.content_type {
        println!("content type  {t}");
    }
    println!("modified      {}", stat.last_modified);
    println!(
        "state         {}",
        stat.state
            .as_deref()
            .unwrap_or("(not reported by the server)")
    );
    for (name, value) in &stat.user_metadata {
        println!("meta          {name}={value}");
    }
    if let Some(d) = &stat.dataset {
        println!("dataset       {d}");
    }
    if let Some(c) = &stat.content_id {
        println!("content       {c}");
    }
    if let Some(g) = stat.grid_bucket {
        println!("grid bucket   {g}");
    }
    for e in &stat.extents {
        println!(
            "extent        #{} ({}) grid bucket {} at {}: {} bytes at payload offset {}",
            e.extent_id, e.kind, e.grid_bucket, e.offset, e.length_bytes, e.offset_in_payload
        );
    }
    Ok(())
}

/// `mb BUCKET [settings]`: create the bucket, then apply the settings given.
pub fn mb(args: SettingsArgs) -> Result<()> {
    // Check the flags before anything is created.
    let chosen = args.apply(BucketSettings::default())?;
    let archive = connect(&args.target)?;
    archive.make_bucket(&args.bucket)?;
    let report = if args.changes_anything() {
        archive.bucket_settings(&args.bucket, Some(chosen))?
    } else {
        archive.bucket_settings(&args.bucket, None)?
    };
    if args.target.json {
        print_json(&serde_json::json!({ "created": args.bucket, "settings": report }))
    } else {
        println!("created bucket {}", args.bucket);
        print_settings(&report);
        Ok(())
    }
}

/// `settings BUCKET [changes]`: show a bucket's settings, changing those given first.
pub fn settings(args: SettingsArgs) -> Result<()> {
    let archive = connect(&args.target)?;
    let report = if args.changes_anything() {
        let current = archive.bucket_settings(&args.bucket, None)?;
        archive.bucket_settings(&args.bucket, Some(args.apply(current.chosen)?))?
    } else {
        archive.bucket_settings(&args.bucket, None)?
    };
    if args.target.json {
        print_json(&report)
    } else {
        print_settings(&report);
        Ok(())
    }
}

fn print_settings(report: &BucketSettingsReport) {
    let show = |chosen: bool, effective: String| {
        if chosen {
            effective
        } else {
            format!("{effective} (default)")
        }
    };
    let e = &report.effective;
    let c = &report.chosen;
    println!(
        "compression {}",
        show(
            c.compression.is_some(),
            format!("{:?}", e.compression).to_lowercase()
        )
    );
    println!(
        "placement   {}",
        show(c.placement.is_some(), e.placement.clone())
    );
    println!(
        "write mode  {}",
        show(c.write_mode.is_some(), e.write_mode.to_string())
    );
}

pub fn rb(args: BucketArgs) -> Result<()> {
    let archive = connect(&args.target)?;
    archive.remove_bucket(&args.bucket)?;
    if args.target.json {
        print_json(&serde_json::json!({ "removed": args.bucket }))
    } else {
        println!("removed bucket {}", args.bucket);
        Ok(())
    }
}

pub fn status(args: StatusArgs) -> Result<()> {
    let watch = match args.watch {
        Some(s) if !(s.is_finite() && s >= 0.1) => {
            bail!("--watch {s}: give the seconds between redraws, at least 0.1")
        }
        Some(s) => Some(std::time::Duration::from_secs_f64(s)),
        None => None,
    };
    // A server running on the data directory answers through its admin API (it wrote its address there).
    let endpoint = server_endpoint(&args.target);
    if let Some(endpoint) = endpoint {
        return remote::Remote::connect(&endpoint, &args.target)?.status(args.target.json, watch);
    }
    if watch.is_some() {
        bail!("--watch needs a running server (--endpoint URL, or a server on the data directory)");
    }
    local::Local::open(&args.target.data_dir)?.status(args.target.json)
}

/// The server to talk to: `--endpoint` (or `PERMAFROST_ENDPOINT`), else the server running on the data directory
/// (it holds the directory's lock and wrote its address there); `None` when the data directory is free.
pub(crate) fn server_endpoint(target: &Target) -> Option<String> {
    remote_endpoint(target).or_else(|| {
        if !crate::data_dir::is_locked(&target.data_dir) {
            return None;
        }
        crate::data_dir::running_server_endpoint(&target.data_dir)
    })
}

pub fn verify(args: VerifyArgs) -> Result<()> {
    if args.persisted {
        let report = match remote_endpoint(&args.target) {
            Some(endpoint) => {
                remote::Remote::connect(&endpoint, &args.target)?.verify_persisted()?
            }
            None => {
                local::Local::open(&args.target.data_dir)?.verify_persisted(args.target.json)?
            }
        };
        return report_persisted(&report, args.target.json);
    }
    if let Some(endpoint) = remote_endpoint(&args.target) {
        return remote::Remote::connect(&endpoint, &args.target)?.verify(args.target.json);
    }
    local::Local::open(&args.target.data_dir)?.verify(args.target.json)
}

/// `permafrost verify --persisted`: the findings, then a summary; an error (exit 1) when a claim is false.
fn report_persisted(report: &permafrost_store::PersistedReport, json: bool) -> Result<()> {
    if json {
        print_json(report)?;
    } else {
        for finding in &report.false_claims {
            println!("FALSE CLAIM    {finding}");
        }
        for finding in &report.not_persisted {
            println!("NOT PERSISTED  {finding}");
        }
        let cut = |listed: usize, total: u64| {
            if total > listed as u64 {
                format!(" (the first {listed} listed)")
            } else {
                String::new()
            }
        };
        println!(
            "checked {} versions, {} persisted contents, {} read back from the grid: {} false claims{}, {} not persisted yet{}",
            report.versions_checked,
            report.contents_checked,
            format_bytes(report.bytes_checked),
            report.false_claims_total,
            cut(report.false_claims.len(), report.false_claims_total),
            report.not_persisted_total,
            cut(report.not_persisted.len(), report.not_persisted_total),
        );
    }
    if report.false_claims_total > 0 {
        bail!(
            "{} versions are claimed persisted but are not on the grid as claimed",
            report.false_claims_total
        );
    }
    Ok(())
}

pub fn salvage(args: SalvageArgs) -> Result<()> {
    if let Some(image) = &args.image {
        return local::salvage_image(image, &args.out, args.target.json);
    }
    if remote_endpoint(&args.target).is_some() {
        bail!("salvage reads disks: run it on the server's machine with --data-dir (server stopped) or --image");
    }
    let disk = args.disk.as_deref().context(
        "name the data disk to salvage (grid bucket number or disk name), or pass --image FILE",
    )?;
    local::salvage_disk(&args.target.data_dir, disk, &args.out, args.target.json)
}

pub(crate) fn remote_endpoint(target: &Target) -> Option<String> {
    target.endpoint.clone().or_else(|| {
        std::env::var("PERMAFROST_ENDPOINT")
            .ok()
            .filter(|e| !e.is_empty())
    })
}

/// A bar counting objects, drawn only for people (a terminal on stderr, no `--json`).
fn count_bar(message: &str, json: bool) -> indicatif::ProgressBar {
    let bar = if json || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(0)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg:>12} [{bar:40}] {pos}/{len} objects eta {eta}",
        )
        .expect("progress template")
        .progress_chars("=> "),
    );
    bar.set_message(message.to_string());
    bar
}

/// Milliseconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
fn format_time_ms(ms: u64) -> String {
    match jiff::Timestamp::from_millisecond(ms as i64) {
        Ok(t) => t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        Err(_) => ms.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_split_into_bucket_and_key() {
        assert_eq!(
            split_path("s3://b1/a/b.txt", true).unwrap(),
            ("b1".into(), "a/b.txt".into())
        );
        assert_eq!(
            split_path("b1/a/", false).unwrap(),
            ("b1".into(), "a/".into())
        );
        assert_eq!(
            split_path("b1", false).unwrap(),
            ("b1".into(), String::new())
        );
        assert!(split_path("b1", true)
            .unwrap_err()
            .to_string()
            .contains("names no key"));
        assert!(split_path("/k", true).is_err());
    }

    #[test]
    fn ranges_parse_like_http_ranges() {
        assert_eq!(Range::parse("0-99").unwrap(), Range::FromTo(0, 99));
        assert_eq!(Range::parse("100-").unwrap(), Range::From(100));
        assert_eq!(Range::parse("-5").unwrap(), Range::Suffix(5));
        assert_eq!(Range::parse("bytes=3-4").unwrap().header(), "bytes=3-4");
        assert!(Range::parse("9-3").is_err());
        assert!(Range::parse("-").is_err());
        assert!(Range::parse("abc").is_err());
    }
}
