//! What the catalog claims about persistence, checked.
//!
//! - **After a persist run** ([`unpersisted_after_run`]): every content some version, part list or upload still
//!   references and that existed when the run began must be persisted when it ends; what is not is named, so
//!   that `/_permafrost/persist` never answers `{"persisted": true}` while bytes live only in the cache.
//! - **Against the grid** ([`Store::verify_persisted`], `permafrost verify --persisted`,
//!   `GET /_permafrost/api/v1/verify/persisted`): every version of every object (current, noncurrent, under a
//!   delete marker, locked), every part of a part list and every part of an upload in progress is looked at.
//!   For each content the catalog says is `persisted`, the claim is checked where the bytes are meant to be:
//!   its segments cover its stored bytes, their extents are written with a recorded BLAKE3, and the bytes read
//!   back from the grid (never the cache) verify — the content's BLAKE3 through the store's normal read path,
//!   and, read whole against the BLAKE3 the catalog recorded, the extents that read leaves unchecked: packs (the
//!   read checks a member's bytes, not its manifest) and the extents of contents without stored bytes (empty
//!   objects, part lists: only their manifest is on the grid). A claim that fails is *false*; a content not
//!   claimed persisted is listed as *not persisted* (with its state).
//!
//! Bounds: the lists keep at most [`LISTED_MAX`] entries each (the totals count all), the memo of contents and
//! extents already checked at most [`MEMO_MAX`] entries (cleared when full: a content shared by many versions is
//! then read again, never skipped).

use std::collections::{HashMap, HashSet};
use std::io::{self, Read};
use std::sync::Arc;

use permafrost_catalog::{
    ContentId, ContentRecord, ContentState, ExtentKind, ExtentRecord, StoredForm, VersionQuery,
};
use permafrost_format::{EXTENT_ALIGN_BYTES, EXTENT_OVERHEAD_BYTES};
use serde::{Deserialize, Serialize};

use crate::read::ObjectReader;
use crate::store::Inner;
use crate::{Encoding, Result, Store, StoreError};

/// Entries kept per list of a [`PersistedReport`].
pub const LISTED_MAX: usize = 10_000;
/// Contents and extents remembered as checked.
const MEMO_MAX: usize = 1_000_000;
/// Versions per catalog listing page.
const PAGE_VERSIONS: usize = 1000;
/// Uploads in progress looked at per bucket.
const UPLOADS_MAX: usize = 100_000;
/// Contents named in the error of a persist run that left some behind.
const NAMED_IN_ERROR_MAX: usize = 5;
/// Rows of `Catalog::unpersisted_references` looked at after a persist run.
const UNPERSISTED_ROWS_MAX: usize = 100_000;

/// One version (or part of an upload in progress) whose bytes are not where the catalog says, or not on the
/// grid yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PersistedFinding {
    pub bucket: String,
    pub key: String,
    /// The version id; `None` for a part of a multipart upload in progress.
    pub version_id: Option<String>,
    /// The upload and part number, for a part of an upload in progress.
    pub upload: Option<(String, u32)>,
    /// The content concerned (the version's own, or one of its parts): `hex(blake3):encoding`.
    pub content_id: String,
    /// Its state in the catalog (`persisted` for a false claim; `growing` for the list of an object still
    /// being written, whose pieces are persisted as they arrive and the list once it is finished).
    pub state: String,
    /// What is wrong, in words.
    pub problem: String,
}

impl std::fmt::Display for PersistedFinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.bucket, self.key)?;
        if let Some(v) = &self.version_id {
            write!(f, " version {v}")?;
        }
        if let Some((upload, part)) = &self.upload {
            write!(f, " upload {upload} part {part}")?;
        }
        write!(
            f,
            ": content {} ({}): {}",
            self.content_id, self.state, self.problem
        )
    }
}

/// What [`Store::verify_persisted`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PersistedReport {
    /// Versions (delete markers not counted) and upload parts looked at.
    pub versions_checked: u64,
    /// Distinct contents claimed persisted whose claim was checked against the grid.
    pub contents_checked: u64,
    /// Bytes read back from the grid.
    pub bytes_checked: u64,
    /// Versions whose content (or one of its parts) the catalog claims persisted but the grid does not hold
    /// verified: at most [`LISTED_MAX`], `false_claims_total` counts all.
    pub false_claims: Vec<PersistedFinding>,
    pub false_claims_total: u64,
    /// Versions whose content (or one of its parts) is not persisted yet: at most [`LISTED_MAX`].
    pub not_persisted: Vec<PersistedFinding>,
    pub not_persisted_total: u64,
}

/// Progress of [`Store::verify_persisted`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PersistedProgress {
    pub versions_checked: u64,
    pub bytes_checked: u64,
}

/// A content's verdict: `None` when its claim holds (or it claims nothing), else what is wrong.
type Verdict = Option<String>;

struct Checker<'a> {
    inner: &'a Arc<Inner>,
    report: PersistedReport,
    contents: HashMap<ContentId, Verdict>,
    extents: HashMap<i64, Verdict>,
}

impl Store {
    /// Check every persistence claim of the catalog against the grid (see the module doc of `claims`): every
    /// version of every object, every part of a part list, every part of an upload in progress. Reads from
    /// the grid only, so it spins up the disks holding data.
    pub fn verify_persisted(
        &self,
        progress: &mut dyn FnMut(&PersistedProgress),
    ) -> Result<PersistedReport> {
        let inner = self.inner();
        // Reading extents back wakes their disks: say why.
        let _wake = permafrost_disk::power::WakeReason::about(
            permafrost_disk::power::WakeKind::Verify,
            "persisted claims (verify --persisted)",
        )
        .enter();
        let mut checker = Checker {
            inner,
            report: PersistedReport::default(),
            contents: HashMap::new(),
            extents: HashMap::new(),
        };
        let mut state = PersistedProgress::default();
        for bucket in inner.catalog.list_buckets()? {
            let mut query = VersionQuery {
                max_keys: PAGE_VERSIONS,
                ..Default::default()
            };
            loop {
                let page = inner.catalog.list_object_versions(&bucket.name, &query)?;
                for version in &page.versions {
                    let Some(object) = &version.object else {
                        continue; // a delete marker holds no bytes
                    };
                    checker.version(
                        &object.bucket,
                        &object.key,
                        Some(&object.version_id),
                        None,
                        &object.content,
                    )?;
                    state.versions_checked = checker.report.versions_checked;
                    state.bytes_checked = checker.report.bytes_checked;
                    progress(&state);
                }
                match (page.is_truncated, page.next_key_marker) {
                    (true, Some(key)) => {
                        query.key_marker = Some(key);
                        query.version_id_marker = page.next_version_id_marker;
                    }
                    _ => break,
                }
            }
            for upload in inner.catalog.list_uploads(&bucket.name, "", UPLOADS_MAX)? {
                for part in inner.catalog.list_parts(&upload.upload_id)? {
                    let Some(content) = part.content else {
                        continue; // a part kept as a file by catalog schema 2: never persisted, never claimed
                    };
                    checker.version(
                        &upload.bucket,
                        &upload.key,
                        None,
                        Some((upload.upload_id.clone(), part.part_number)),
                        &content,
                    )?;
                }
            }
        }
        let report = checker.report;
        tracing::info!(
            versions = report.versions_checked,
            contents = report.contents_checked,
            bytes = report.bytes_checked,
            false_claims = report.false_claims_total,
            not_persisted = report.not_persisted_total,
            "verified the persisted claims against the grid"
        );
        Ok(report)
    }
}

impl Checker<'_> {
    /// Check one version (or upload part) naming `content`: the content and, for a part list, each part.
    fn version(
        &mut self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        upload: Option<(String, u32)>,
        content: &ContentId,
    ) -> Result<()> {
        self.report.versions_checked += 1;
        let finding = |content: &ContentId, state: &str, problem: String| PersistedFinding {
            bucket: bucket.to_string(),
            key: key.to_string(),
            version_id: version_id.map(str::to_string),
            upload: upload.clone(),
            content_id: content.to_string(),
            state: state.to_string(),
            problem,
        };
        let Some(record) = self.inner.catalog.get_content(content)? else {
            let f = finding(content, "missing", "the catalog has no row for it".into());
            push(
                &mut self.report.false_claims,
                &mut self.report.false_claims_total,
                f,
            );
            return Ok(());
        };
        let parts = self.inner.parts_of(&record)?;
        let growing = crate::growing::is_growing(self.inner, &record)?;
        for c in std::iter::once(&record).chain(parts.iter().map(|(_, c)| c)) {
            if c.state != ContentState::Persisted {
                let (state, problem) = if growing && c.id == record.id {
                    (
                        "growing".to_string(),
                        "the object is still being written: its list is persisted once it is finished".into(),
                    )
                } else {
                    (
                        c.state.as_str().to_string(),
                        "not on the grid yet".to_string(),
                    )
                };
                let f = finding(&c.id, &state, problem);
                push(
                    &mut self.report.not_persisted,
                    &mut self.report.not_persisted_total,
                    f,
                );
                continue;
            }
            if let Some(problem) = self.claim(c)? {
                let f = finding(&c.id, "persisted", problem);
                push(
                    &mut self.report.false_claims,
                    &mut self.report.false_claims_total,
                    f,
                );
            }
        }
        Ok(())
    }

    /// The verdict on a content the catalog claims persisted (remembered).
    fn claim(&mut self, content: &ContentRecord) -> Result<Verdict> {
        if let Some(verdict) = self.contents.get(&content.id) {
            return Ok(verdict.clone());
        }
        let verdict = self.check_claim(content)?;
        if self.contents.len() >= MEMO_MAX {
            self.contents.clear();
        }
        self.contents.insert(content.id, verdict.clone());
        self.report.contents_checked += 1;
        Ok(verdict)
    }

    fn check_claim(&mut self, content: &ContentRecord) -> Result<Verdict> {
        let segments = self.inner.catalog.segments(&content.id)?;
        if segments.is_empty() {
            return Ok(Some(
                "claimed persisted, but no extent on the grid holds it".into(),
            ));
        }
        let placed: u64 = segments.iter().map(|s| s.segment.length_bytes).sum();
        if placed != content.stored_bytes {
            return Ok(Some(format!(
                "claimed persisted, but its segments hold {placed} of its {} stored bytes",
                content.stored_bytes
            )));
        }
        let buckets = self.inner.engine.buckets() as u32;
        for s in &segments {
            let e = &s.extent;
            if e.grid_bucket >= buckets {
                return Ok(Some(format!(
                    "extent {} is on grid bucket {}, beyond the grid's {buckets}",
                    e.extent_id, e.grid_bucket
                )));
            }
            if !e.written || e.blake3.is_none() {
                return Ok(Some(format!(
                    "extent {} (grid bucket {}, offset {}) is not recorded as written",
                    e.extent_id, e.grid_bucket, e.offset
                )));
            }
        }
        let reads_bytes = content.stored_form != StoredForm::Parts && content.stored_bytes > 0;
        if reads_bytes {
            // The content's BLAKE3 over its bytes read back from the grid (the crc32c of every content extent
            // on the way), through the store's read path.
            if let Err(e) = self.read_back(content) {
                return Ok(Some(format!("reading it back from the grid: {e}")));
            }
        }
        // Extents whose bytes the read above did not check whole: the manifest-only extents of contents without
        // stored bytes, and packs (the read checks a pack member's bytes, not its manifest).
        for s in &segments {
            if !reads_bytes || s.extent.kind == ExtentKind::Pack {
                if let Some(problem) = self.extent(&s.extent) {
                    return Ok(Some(problem));
                }
            }
        }
        Ok(None)
    }

    fn read_back(&mut self, content: &ContentRecord) -> Result<()> {
        // Pre-compressed contents are named by the BLAKE3 of their bytes as sent: read them as stored.
        let accept = (content.id.encoding != Encoding::Identity).then_some(content.id.encoding);
        let mut reader =
            ObjectReader::open(self.inner, content, Vec::new(), None, accept, true, &[])?;
        let n = io::copy(&mut reader, &mut io::sink())
            .map_err(|e| StoreError::Internal(e.to_string()))?;
        self.report.bytes_checked += n;
        Ok(())
    }

    /// The verdict on one extent read whole from the grid: its header, crc32c and the BLAKE3 the catalog
    /// recorded (remembered).
    fn extent(&mut self, e: &ExtentRecord) -> Verdict {
        if let Some(verdict) = self.extents.get(&e.extent_id) {
            return verdict.clone();
        }
        let verdict = self.read_extent(e).err().map(|problem| {
            format!(
                "extent {} (grid bucket {}, offset {}): {problem}",
                e.extent_id, e.grid_bucket, e.offset
            )
        });
        if self.extents.len() >= MEMO_MAX {
            self.extents.clear();
        }
        self.extents.insert(e.extent_id, verdict.clone());
        verdict
    }

    fn read_extent(&mut self, e: &ExtentRecord) -> std::result::Result<(), String> {
        let hashed = e.payload_bytes + EXTENT_OVERHEAD_BYTES as u64;
        let len = hashed.div_ceil(EXTENT_ALIGN_BYTES) * EXTENT_ALIGN_BYTES;
        let promise = self
            .inner
            .engine
            .read(e.grid_bucket as usize, e.offset, len)
            .map_err(|err| format!("cannot read it: {err}"))?;
        let mut hashing = HashingReader {
            inner: promise.take(hashed),
            hasher: blake3::Hasher::new(),
        };
        let header = permafrost_format::read_extent(&mut hashing, io::sink())
            .map_err(|err| format!("does not read back as an extent: {err}"))?;
        self.report.bytes_checked += hashed;
        if header.object_id != u128::from_le_bytes(e.object_id) || header.extent_id != e.extent_no {
            return Err("its header names another object or extent than the catalog's".into());
        }
        if Some(*hashing.hasher.finalize().as_bytes()) != e.blake3 {
            return Err("its BLAKE3 differs from the catalog's".into());
        }
        Ok(())
    }
}

struct HashingReader<R> {
    inner: R,
    hasher: blake3::Hasher,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// Count a finding and keep it while the list has room. A false claim is logged as a warning, one line each; a
/// version not persisted yet only at debug level (a busy archive has many).
fn push(list: &mut Vec<PersistedFinding>, total: &mut u64, finding: PersistedFinding) {
    if finding.state == "persisted" || finding.state == "missing" {
        tracing::warn!("false persistence claim: {finding}");
    } else {
        tracing::debug!("not persisted yet: {finding}");
    }
    *total += 1;
    if list.len() < LISTED_MAX {
        list.push(finding);
    }
}

/// After a persist run that began at `began_ms`: the contents that existed then, that a version, a part list or
/// an upload names, and that are still not persisted (a list still growing excepted: its pieces are persisted as
/// they arrive, the list once finished or frozen). Found from the catalog's naming tables
/// (`Catalog::unpersisted_references`), not from the persister's own view of owners, so a content the persister
/// overlooked is caught. `Err(NotPersisted)` naming the first few when there are any.
pub(crate) fn unpersisted_after_run(inner: &Inner, began_ms: u64) -> Result<()> {
    let mut left: Vec<String> = Vec::new();
    let mut seen: HashSet<ContentId> = HashSet::new();
    for r in inner.catalog.unpersisted_references(UNPERSISTED_ROWS_MAX)? {
        if r.content.created_ms > began_ms || seen.contains(&r.content.id) {
            continue;
        }
        if crate::growing::is_growing(inner, &r.content)? {
            continue;
        }
        seen.insert(r.content.id);
        if left.len() < NAMED_IN_ERROR_MAX {
            let whose = match (&r.version_id, &r.upload_id) {
                (Some(v), _) => format!("{}/{} version {v}", r.bucket, r.key),
                (None, Some(u)) => format!("upload {u} of {}/{}", r.bucket, r.key),
                (None, None) => format!("{}/{}", r.bucket, r.key),
            };
            left.push(format!(
                "content {} of {whose} ({})",
                r.content.id,
                r.content.state.as_str()
            ));
        }
    }
    if seen.is_empty() {
        return Ok(());
    }
    let last = inner
        .last_error
        .lock()
        .clone()
        .map(|e| format!("; last error: {e}"))
        .unwrap_or_default();
    let more = if seen.len() > left.len() {
        format!(" and {} more", seen.len() - left.len())
    } else {
        String::new()
    };
    Err(StoreError::NotPersisted(format!(
        "{} referenced contents are still not on the grid after the persist run: {}{more}{last}",
        seen.len(),
        left.join(", ")
    )))
}
