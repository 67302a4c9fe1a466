//! The archive opened in this process: `permafrost_store::Store` on a data directory, under an exclusive lock.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use permafrost_catalog::{Catalog, ContentState, ExtentKind, ListQuery};
use permafrost_engine::Engine;
use permafrost_grid::Role;
use permafrost_store::{
    BucketSettings, BucketSettingsReport, ByteRange, ObjectInfo, PutOptions, Store,
};

use super::{
    format_time_ms, print_json, print_status, Archive, Body, ExtentStat, Listed, Listing,
    ObjectStat, PutRequest, Range,
};
use crate::config::Config;
use crate::data_dir;
use crate::progress::bytes_bar;
use crate::units::format_bytes;

/// Bytes moved per read/write of a transfer.
const TRANSFER_BUFFER_BYTES: usize = 1 << 20;
/// Listing page size.
const LIST_PAGE_KEYS: usize = 1000;

/// An archive opened in this process. Dropping it closes the store, then releases the lock.
pub struct Local {
    store: Option<Store>,
    data_dir: PathBuf,
    _lock: File,
}

impl Local {
    /// Lock and open the data directory.
    pub fn open(data_dir: &Path) -> Result<Local> {
        let lock = data_dir::lock(data_dir)?;
        let config = Config::load(data_dir)?.store;
        let store = Store::open(data_dir, config)
            .with_context(|| format!("cannot open the archive in {}", data_dir.display()))?;
        Ok(Local {
            store: Some(store),
            data_dir: data_dir.to_path_buf(),
            _lock: lock,
        })
    }

    fn store(&self) -> &Store {
        self.store.as_ref().expect("the store is open until drop")
    }

    /// `permafrost status`: disks per power state, cache fill, bytes waiting per grid bucket, energy, contents.
    pub fn status(&self, json: bool) -> Result<()> {
        let summary = self.store().summary()?;
        if json {
            return print_json(&summary);
        }
        print_status(&summary);
        Ok(())
    }

    /// `permafrost verify`: re-read every object against its hashes; an error when any fails.
    pub fn verify(&self, json: bool) -> Result<()> {
        let bar = super::count_bar("verify", json);
        let report = self.store().verify(&mut |p| {
            bar.set_length(p.objects_total);
            bar.set_position(p.objects_checked);
        })?;
        bar.finish_and_clear();
        if json {
            print_json(&report)?;
        } else {
            for error in &report.errors {
                println!("FAILED  {error}");
            }
            println!(
                "verified {} objects, {}: {} failed",
                report.objects_checked,
                format_bytes(report.bytes_checked),
                report.errors.len()
            );
        }
        if !report.errors.is_empty() {
            bail!(
                "{} of {} objects did not read back verified",
                report.errors.len(),
                report.objects_checked
            );
        }
        Ok(())
    }

    /// `permafrost verify --persisted` on the data directory.
    pub fn verify_persisted(&self, json: bool) -> Result<permafrost_store::PersistedReport> {
        let bar = if json || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            indicatif::ProgressBar::hidden()
        } else {
            indicatif::ProgressBar::new_spinner()
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} checking persisted claims: {pos} versions",
            )
            .expect("progress template"),
        );
        let report = self.store().verify_persisted(&mut |p| {
            bar.set_position(p.versions_checked);
        })?;
        bar.finish_and_clear();
        Ok(report)
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        if let Some(store) = self.store.take() {
            if let Err(e) = store.close() {
                eprintln!("permafrost: closing the archive: {e}");
            }
        }
    }
}

fn stat_of(info: &ObjectInfo) -> ObjectStat {
    ObjectStat {
        bucket: info.bucket.clone(),
        key: info.key.clone(),
        size_bytes: info.size_bytes,
        etag: info.etag.clone(),
        content_encoding: info.content_encoding.as_str().to_string(),
        content_type: info.content_type.clone(),
        last_modified: format_time_ms(info.last_modified_ms),
        state: Some(info.state.as_str().to_string()),
        user_metadata: info.user_metadata.clone(),
        stored_bytes: Some(info.stored_bytes),
        dataset: Some(info.dataset.clone()),
        content_id: Some(info.content_id.clone()),
        grid_bucket: info.grid_bucket,
        extents: Vec::new(),
    }
}

fn byte_range(range: Range) -> ByteRange {
    match range {
        Range::FromTo(a, b) => ByteRange::FromTo(a, b),
        Range::From(a) => ByteRange::From(a),
        Range::Suffix(n) => ByteRange::Suffix(n),
    }
}

impl Archive for Local {
    fn put(
        &self,
        bucket: &str,
        key: &str,
        body: Body<'_>,
        request: &PutRequest,
        json: bool,
    ) -> Result<ObjectStat> {
        let options = PutOptions {
            content_encoding: request
                .content_encoding
                .parse()
                .map_err(|e: String| anyhow::anyhow!(e))?,
            decoded_length: request.decoded_length,
            user_metadata: request.user_metadata.clone(),
            content_type: request.content_type.clone(),
            ..Default::default()
        };
        let bar = bytes_bar("put", json);
        if let Some(len) = body.len_bytes() {
            bar.set_length(len);
        }
        let mut handle = self.store().begin_put(bucket, key, options)?;
        let mut reader = body.into_reader();
        let mut buffer = vec![0u8; TRANSFER_BUFFER_BYTES];
        loop {
            let n = match reader.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).context("reading the upload"),
            };
            handle.write(&buffer[..n])?;
            bar.inc(n as u64);
        }
        let info = handle.finish()?;
        bar.finish_and_clear();
        Ok(stat_of(&info))
    }

    fn get(
        &self,
        bucket: &str,
        key: &str,
        range: Option<Range>,
        sink: &mut dyn Write,
        json: bool,
    ) -> Result<u64> {
        let (_, mut reader) = self
            .store()
            .open_object(bucket, key, range.map(byte_range), None)?;
        let bar = bytes_bar("get", json);
        bar.set_length(reader.len());
        let mut buffer = vec![0u8; TRANSFER_BUFFER_BYTES];
        let mut total = 0u64;
        loop {
            let n = match reader.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => bail!("reading {bucket}/{key}: {e}"),
            };
            sink.write_all(&buffer[..n])
                .context("writing the download")?;
            total += n as u64;
            bar.inc(n as u64);
        }
        bar.finish_and_clear();
        Ok(total)
    }

    fn list(&self, bucket: &str, prefix: &str, recursive: bool) -> Result<Listing> {
        self.store().head_bucket(bucket)?;
        let mut listing = Listing::default();
        let mut start_after = None;
        loop {
            let page = self.store().list_objects(
                bucket,
                &ListQuery {
                    prefix: prefix.to_string(),
                    delimiter: (!recursive).then(|| "/".to_string()),
                    start_after: start_after.take(),
                    max_keys: LIST_PAGE_KEYS,
                },
            )?;
            listing.prefixes.extend(page.common_prefixes);
            listing
                .objects
                .extend(page.objects.into_iter().map(|o| Listed {
                    key: o.key,
                    size_bytes: o.size_bytes,
                    etag: o.etag,
                    last_modified: format_time_ms(o.last_modified_ms),
                }));
            if !page.is_truncated {
                return Ok(listing);
            }
            start_after = Some(
                page.next_start_after
                    .context("a truncated listing page has no resume key")?,
            );
        }
    }

    fn list_buckets(&self) -> Result<Vec<String>> {
        Ok(self
            .store()
            .list_buckets()?
            .into_iter()
            .map(|b| b.name)
            .collect())
    }

    fn remove(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        bypass_governance: bool,
    ) -> Result<permafrost_store::DeleteOutcome> {
        Ok(self
            .store()
            .delete_version(bucket, key, version_id, bypass_governance)?)
    }

    fn restore(
        &self,
        bucket: &str,
        prefix: &str,
        days: u32,
        tier: permafrost_store::RestoreTier,
        json: bool,
    ) -> Result<permafrost_store::RestoreBatch> {
        let store = self.store();
        let requested = store.restore_prefix(bucket, prefix, days, tier)?;
        let bar = super::count_bar("restore", json);
        bar.set_length(requested.requested);
        // This process is the archive's only user: run the pass here (the restore thread may take it first;
        // either way it ends when nothing is pending).
        loop {
            let progress = store.run_restores()?;
            bar.set_position(progress.done);
            if progress.pending == 0 {
                bar.finish_and_clear();
                return Ok(progress);
            }
            if let Some(e) = progress.last_error {
                bail!("restore: {e}");
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    fn datasets(
        &self,
        filter: &permafrost_store::DatasetFilter,
    ) -> Result<Vec<permafrost_store::DatasetSummary>> {
        Ok(self.store().datasets(filter)?)
    }

    fn stat(&self, bucket: &str, key: &str) -> Result<ObjectStat> {
        let info = self.store().head_object(bucket, key)?;
        let mut stat = stat_of(&info);
        // Extents are the catalog's: read them through a second, read-only use of the catalog file.
        let catalog = Config::load(&self.data_dir)?
            .store
            .catalog
            .open(&self.data_dir, false)?;
        if let Some((_, content)) = catalog.get_object(bucket, key)? {
            stat.extents = catalog
                .segments(&content.id)?
                .into_iter()
                .map(|s| ExtentStat {
                    extent_id: s.extent.extent_id,
                    grid_bucket: s.extent.grid_bucket,
                    offset: s.extent.offset,
                    offset_in_payload: s.segment.offset_in_payload,
                    length_bytes: s.segment.length_bytes,
                    kind: match s.extent.kind {
                        ExtentKind::Content => "content",
                        ExtentKind::Pack => "pack",
                    }
                    .to_string(),
                })
                .collect();
        }
        Ok(stat)
    }

    fn make_bucket(&self, bucket: &str) -> Result<()> {
        Ok(self
            .store()
            .create_bucket(bucket, BucketSettings::default())?)
    }

    fn bucket_settings(
        &self,
        bucket: &str,
        change: Option<BucketSettings>,
    ) -> Result<BucketSettingsReport> {
        Ok(match change {
            Some(settings) => self.store().set_bucket_settings(bucket, settings)?,
            None => self.store().bucket_settings(bucket)?,
        })
    }

    fn remove_bucket(&self, bucket: &str) -> Result<()> {
        Ok(self.store().delete_bucket(bucket)?)
    }

    fn wait_persisted(&self, bucket: &str, key: &str, timeout: Duration) -> Result<bool> {
        // This process is the archive's only user: persist what waits now instead of waiting for the watchdog.
        if self.store().head_object(bucket, key)?.state != ContentState::Persisted {
            match self.store().persist_now() {
                // Something else is not persisted: the wait below says whether this object is.
                Ok(()) | Err(permafrost_store::StoreError::NotPersisted(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(self.store().wait_persisted(bucket, key, timeout)?)
    }
}

/// The grid bucket a `salvage` argument names: a bucket number or a data disk's name.
fn grid_bucket_of(engine: &Engine, disk: &str) -> Result<usize> {
    if let Ok(n) = disk.parse::<usize>() {
        if n >= engine.buckets() {
            bail!(
                "grid bucket {n} does not exist: the grid has buckets 0 to {}",
                engine.buckets() - 1
            );
        }
        return Ok(n);
    }
    let status = engine.status()?;
    let found = status
        .disks
        .iter()
        .find(|d| d.name == disk || Path::new(&d.name).file_stem().is_some_and(|s| s == disk));
    match found {
        Some(d) => match d.role {
            Role::Data { bucket } => Ok(bucket),
            other => bail!("disk {disk} is a parity disk ({other:?}); salvage reads data disks"),
        },
        None => bail!(
            "no disk named {disk:?}; data disks: {}",
            status
                .disks
                .iter()
                .filter(|d| matches!(d.role, Role::Data { .. }))
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `permafrost salvage DISK`: rebuild the objects of one data disk through the grid, without the catalog.
pub fn salvage_disk(data_dir: &Path, disk: &str, out: &Path, json: bool) -> Result<()> {
    let _lock = data_dir::lock(data_dir)?;
    let config = Config::load(data_dir)?.store;
    let grid_dir = data_dir.join("grid");
    let engine = Engine::open_with(
        &grid_dir,
        permafrost_engine::OpenOptions {
            power_profile: config.power_profile.clone(),
            ..Default::default()
        },
    )
    .with_context(|| format!("cannot open the grid in {}", grid_dir.display()))?;
    let grid_bucket = grid_bucket_of(&engine, disk)?;
    let len_bytes = engine.bucket_capacity_bytes();
    let bar = bytes_bar("salvage", json);
    bar.set_length(len_bytes);
    let report = permafrost_store::salvage_through_engine(&engine, grid_bucket, out, &mut |p| {
        bar.set_position(p.scanned_bytes)
    })
    .with_context(|| format!("salvaging grid bucket {grid_bucket}"))?;
    bar.finish_and_clear();
    engine.close().context("closing the grid")?;
    print_salvage(&format!("grid bucket {grid_bucket}"), out, &report, json)
}

/// `permafrost salvage --image FILE`: rebuild the objects of a raw data-disk image: no grid, no catalog.
pub fn salvage_image(image: &Path, out: &Path, json: bool) -> Result<()> {
    let bar = bytes_bar("salvage", json);
    let report = permafrost_store::salvage_disk_image(image, out, &mut |p| {
        bar.set_length(p.image_bytes);
        bar.set_position(p.scanned_bytes);
    })?;
    bar.finish_and_clear();
    print_salvage(&image.display().to_string(), out, &report, json)
}

fn print_salvage(
    source: &str,
    out: &Path,
    report: &permafrost_store::SalvageReport,
    json: bool,
) -> Result<()> {
    if json {
        return print_json(report);
    }
    for d in &report.damaged_extents {
        println!("damaged extent     {d}");
    }
    for i in &report.incomplete_objects {
        println!("incomplete object  {i}");
    }
    println!(
        "salvaged {} objects ({}) from {source} into {}: {} extents found, {} damaged, {} incomplete objects, {} superseded",
        report.objects_recovered,
        format_bytes(report.bytes_recovered),
        out.display(),
        report.extents_found,
        report.damaged_extents.len(),
        report.incomplete_objects.len(),
        report.superseded_objects
    );
    Ok(())
}
