//! What archive users expect of S3 beyond bytes, as catalog data and pure rules: versioning, Object Lock
//! (retention and legal hold), tags, stored HTTP headers, storage classes, lifecycle rules, restores.
//!
//! The rules here (who may delete a locked version, how retention may change, when a lifecycle rule expires an
//! object) are pure functions over catalog records, so every catalog backend applies the same rule inside its
//! own transaction, and the store (and the mount) can ask the same question before it acts: **one place** for
//! each rule. `docs/archive.md` states the guarantees.

use serde::{Deserialize, Serialize};

/// Milliseconds of a real day (retention periods are always real days; lifecycle days are configurable).
pub const DAY_MS: u64 = 86_400_000;

/// The version id of objects written while versioning was not enabled (S3's `null` version).
pub const NULL_VERSION: &str = "null";

/// A bucket's versioning state (S3: never enabled, `Enabled`, `Suspended`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Versioning {
    #[default]
    Unversioned,
    Enabled,
    Suspended,
}

/// Object Lock retention mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum LockMode {
    /// Deletable before its date only with `x-amz-bypass-governance-retention`; shortenable the same way.
    Governance,
    /// Deletable by no one before its date; its date can only be extended.
    Compliance,
}

impl LockMode {
    /// The name S3 uses (`GOVERNANCE`, `COMPLIANCE`).
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::Governance => "GOVERNANCE",
            LockMode::Compliance => "COMPLIANCE",
        }
    }
}

impl std::str::FromStr for LockMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "GOVERNANCE" => Ok(LockMode::Governance),
            "COMPLIANCE" => Ok(LockMode::Compliance),
            other => Err(format!(
                "unknown Object Lock mode {other:?}: expected GOVERNANCE or COMPLIANCE"
            )),
        }
    }
}

/// A retention: mode and date.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Retention {
    pub mode: LockMode,
    pub retain_until_ms: u64,
}

/// The Object Lock state of one version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct ObjectLock {
    pub retention: Option<Retention>,
    pub legal_hold: bool,
}

/// Why a version may not be deleted or its lock changed (S3 answers `AccessDenied`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockViolation(pub String);

impl std::fmt::Display for LockViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn date(ms: u64) -> String {
    iso8601_utc(ms, false)
}

/// `ms` since the epoch in UTC as ISO 8601, `2026-12-09T00:00:00Z`, or with milliseconds
/// (`2026-12-09T00:00:00.000Z`, as S3's event records write times).
pub fn iso8601_utc(ms: u64, with_millis: bool) -> String {
    let secs = (ms / 1000) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let millis = if with_millis {
        format!(".{:03}", ms % 1000)
    } else {
        String::new()
    };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}{millis}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

impl ObjectLock {
    /// Whether this version is protected now (a legal hold, or a retention date in the future).
    pub fn is_locked(&self, now_ms: u64) -> bool {
        self.legal_hold || self.retention.is_some_and(|r| r.retain_until_ms > now_ms)
    }

    /// **The deletion rule**, applied by every path that removes a version (S3 DeleteObject(s) with a version id,
    /// overwriting a `null` version, lifecycle, the CLI, the mount): a legal hold forbids it; a COMPLIANCE
    /// retention forbids it until its date, for everyone; a GOVERNANCE retention forbids it until its date
    /// unless the caller bypasses governance retention.
    pub fn may_delete(&self, now_ms: u64, bypass_governance: bool) -> Result<(), LockViolation> {
        if self.legal_hold {
            return Err(LockViolation(
                "the version is under a legal hold; remove the hold first".into(),
            ));
        }
        match self.retention {
            Some(r) if r.retain_until_ms > now_ms => match r.mode {
                LockMode::Compliance => Err(LockViolation(format!(
                    "the version is locked in COMPLIANCE mode until {}; nobody can delete it before then",
                    date(r.retain_until_ms)
                ))),
                LockMode::Governance if !bypass_governance => Err(LockViolation(format!(
                    "the version is locked in GOVERNANCE mode until {}; deleting it needs \
                     x-amz-bypass-governance-retention: true",
                    date(r.retain_until_ms)
                ))),
                LockMode::Governance => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// **The retention change rule** (S3's): a retention may always be placed or extended; a COMPLIANCE retention
    /// in force can be neither shortened, removed nor turned into GOVERNANCE; a GOVERNANCE retention in force can
    /// be shortened, removed or changed in mode only when bypassing governance retention.
    pub fn may_set_retention(
        &self,
        new: Option<Retention>,
        now_ms: u64,
        bypass_governance: bool,
    ) -> Result<(), LockViolation> {
        let Some(old) = self.retention.filter(|r| r.retain_until_ms > now_ms) else {
            return Ok(());
        };
        let extends =
            new.is_some_and(|n| n.mode == old.mode && n.retain_until_ms >= old.retain_until_ms);
        let to_compliance = new.is_some_and(|n| {
            old.mode == LockMode::Governance
                && n.mode == LockMode::Compliance
                && n.retain_until_ms >= old.retain_until_ms
        });
        if extends || to_compliance {
            return Ok(());
        }
        match old.mode {
            LockMode::Compliance => Err(LockViolation(format!(
                "the version is locked in COMPLIANCE mode until {}: its retention can only be extended",
                date(old.retain_until_ms)
            ))),
            LockMode::Governance if bypass_governance => Ok(()),
            LockMode::Governance => Err(LockViolation(format!(
                "the version is locked in GOVERNANCE mode until {}: shortening or removing the retention needs \
                 x-amz-bypass-governance-retention: true",
                date(old.retain_until_ms)
            ))),
        }
    }
}

/// Storage classes this server offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StorageClass {
    /// A GET of an object whose disk sleeps waits for the spin-up.
    #[default]
    Standard,
    /// A GET of an object that is not in the cache is refused (`403 InvalidObjectState`) until it is restored.
    Glacier,
}

impl StorageClass {
    /// The S3 name.
    pub fn as_str(self) -> &'static str {
        match self {
            StorageClass::Standard => "STANDARD",
            StorageClass::Glacier => "GLACIER",
        }
    }
}

impl std::str::FromStr for StorageClass {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "STANDARD" => Ok(StorageClass::Standard),
            "GLACIER" => Ok(StorageClass::Glacier),
            other => Err(format!(
                "storage class {other:?} is not offered here: this server offers STANDARD (reads wait for a \
                 sleeping disk to spin up) and GLACIER (reads of objects not in the cache need a restore)"
            )),
        }
    }
}

/// What a version carries besides its content: HTTP headers returned on GET/HEAD, tags, storage class, lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct ObjectAttributes {
    /// `Cache-Control`, `Content-Disposition`, `Content-Language`, `Expires` as sent (lowercase names).
    pub headers: Vec<(String, String)>,
    /// Object tags (key, value), in the order sent.
    pub tags: Vec<(String, String)>,
    pub storage_class: StorageClass,
    pub lock: ObjectLock,
}

/// Default retention of new versions in a bucket with Object Lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefaultRetention {
    pub mode: LockMode,
    /// Days (real days) or years; exactly one is set.
    pub days: Option<u32>,
    pub years: Option<u32>,
}

impl DefaultRetention {
    /// The retention a version written at `now_ms` gets.
    pub fn retention_from(&self, now_ms: u64) -> Retention {
        let days = u64::from(self.days.unwrap_or(0)) + u64::from(self.years.unwrap_or(0)) * 365;
        Retention {
            mode: self.mode,
            retain_until_ms: now_ms + days * DAY_MS,
        }
    }
}

/// Which objects a lifecycle rule applies to (all conditions must hold).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct LifecycleFilter {
    pub prefix: String,
    pub tags: Vec<(String, String)>,
    pub size_greater_than: Option<u64>,
    pub size_less_than: Option<u64>,
}

impl LifecycleFilter {
    pub fn matches(&self, key: &str, tags: &[(String, String)], size_bytes: u64) -> bool {
        key.starts_with(&self.prefix)
            && self.tags.iter().all(|t| tags.contains(t))
            && self.size_greater_than.is_none_or(|n| size_bytes > n)
            && self.size_less_than.is_none_or(|n| size_bytes < n)
    }
}

/// One lifecycle rule (S3's, the actions this server performs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct LifecycleRule {
    pub id: String,
    pub enabled: bool,
    pub filter: LifecycleFilter,
    /// Current versions expire this many lifecycle days after they were written.
    pub expiration_days: Option<u32>,
    /// Current versions expire at this date.
    pub expiration_date_ms: Option<u64>,
    /// Remove delete markers that are the only version left of their key.
    pub expired_object_delete_marker: bool,
    /// Noncurrent versions are deleted this many lifecycle days after they became noncurrent.
    pub noncurrent_days: Option<u32>,
    /// … except the newest this many noncurrent versions of each key.
    pub newer_noncurrent_versions: Option<u32>,
    /// Multipart uploads not completed this many lifecycle days after they started are aborted.
    pub abort_incomplete_multipart_days: Option<u32>,
}

/// A bucket's lifecycle configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Lifecycle {
    /// Length of a lifecycle "day" when the configuration was set (86,400,000 unless configured for tests).
    pub day_ms: u64,
    pub rules: Vec<LifecycleRule>,
}

impl Lifecycle {
    fn day(&self) -> u64 {
        if self.day_ms == 0 {
            DAY_MS
        } else {
            self.day_ms
        }
    }

    /// `n` lifecycle days after `from_ms`, rounded up to the next day boundary (S3 rounds to midnight UTC; with
    /// a configured day length, to the next multiple of it).
    pub fn days_after(&self, from_ms: u64, n: u32) -> u64 {
        let day = self.day();
        let t = from_ms + u64::from(n) * day;
        t.div_ceil(day) * day
    }

    /// When a current version written at `last_modified_ms` expires, and by which rule (the earliest rule wins).
    pub fn expiry(
        &self,
        key: &str,
        tags: &[(String, String)],
        size_bytes: u64,
        last_modified_ms: u64,
    ) -> Option<(u64, &str)> {
        self.rules
            .iter()
            .filter(|r| r.enabled && r.filter.matches(key, tags, size_bytes))
            .filter_map(|r| {
                let at = match (r.expiration_days, r.expiration_date_ms) {
                    (Some(days), _) => self.days_after(last_modified_ms, days),
                    (None, Some(date)) => date,
                    (None, None) => return None,
                };
                Some((at, r.id.as_str()))
            })
            .min_by_key(|(at, _)| *at)
    }

    /// Whether a noncurrent version (noncurrent since `since_ms`, `newer` noncurrent versions of its key newer
    /// than it) is due for deletion at `now_ms`.
    pub fn noncurrent_expired(
        &self,
        key: &str,
        tags: &[(String, String)],
        size_bytes: u64,
        since_ms: u64,
        newer: u32,
        now_ms: u64,
    ) -> bool {
        self.rules.iter().any(|r| {
            r.enabled
                && r.filter.matches(key, tags, size_bytes)
                && r.noncurrent_days
                    .is_some_and(|days| self.days_after(since_ms, days) <= now_ms)
                && r.newer_noncurrent_versions.is_none_or(|keep| newer >= keep)
        })
    }

    /// Whether lone delete markers under `key` are removed.
    pub fn removes_lone_markers(&self, key: &str) -> bool {
        self.rules.iter().any(|r| {
            r.enabled && r.expired_object_delete_marker && key.starts_with(&r.filter.prefix)
        })
    }

    /// The age in lifecycle days after which an upload of `key` is aborted, if a rule says so.
    pub fn abort_upload_days(&self, key: &str) -> Option<u32> {
        self.rules
            .iter()
            .filter(|r| r.enabled && key.starts_with(&r.filter.prefix))
            .filter_map(|r| r.abort_incomplete_multipart_days)
            .min()
    }
}

/// A bucket's archive configuration (versioning, Object Lock, lifecycle, tags, default storage class).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct BucketArchive {
    pub versioning: Versioning,
    /// Object Lock is enabled (then versioning is `Enabled` and stays so; it cannot be disabled).
    pub object_lock: bool,
    pub default_retention: Option<DefaultRetention>,
    pub lifecycle: Option<Lifecycle>,
    pub tags: Vec<(String, String)>,
    /// Storage class of new versions uploaded without one.
    pub storage_class: StorageClass,
}

impl BucketArchive {
    /// Whether `next` may replace this configuration (S3's rules: Object Lock needs versioning enabled, and
    /// once enabled neither Object Lock nor versioning can be turned off).
    pub fn may_become(&self, next: &BucketArchive) -> Result<(), String> {
        if next.object_lock && next.versioning != Versioning::Enabled {
            return Err(if self.object_lock {
                "versioning cannot be suspended on a bucket with Object Lock enabled".into()
            } else {
                "Object Lock needs versioning enabled on the bucket first".into()
            });
        }
        if self.object_lock && !next.object_lock {
            return Err("Object Lock cannot be disabled once enabled".into());
        }
        if next.default_retention.is_some() && !next.object_lock {
            return Err("a default retention needs Object Lock enabled on the bucket".into());
        }
        Ok(())
    }
}

/// One version of a key as ListObjectVersions shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionRecord {
    pub bucket: String,
    pub key: String,
    pub version_id: String,
    pub last_modified_ms: u64,
    /// The newest version of its key.
    pub is_latest: bool,
    /// `None` for a delete marker.
    pub object: Option<crate::ObjectRecord>,
}

/// A query of [`crate::Catalog::list_object_versions`] (S3 ListObjectVersions semantics).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionQuery {
    pub prefix: String,
    pub delimiter: Option<String>,
    /// Start after this key (all its versions), or, with `version_id_marker`, after that version of it.
    pub key_marker: Option<String>,
    pub version_id_marker: Option<String>,
    /// At most this many entries (versions + common prefixes); 0 is treated as 1000.
    pub max_keys: usize,
}

/// One page of versions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionPage {
    pub versions: Vec<VersionRecord>,
    pub common_prefixes: Vec<String>,
    pub is_truncated: bool,
    pub next_key_marker: Option<String>,
    pub next_version_id_marker: Option<String>,
}

/// What a delete did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteOutcome {
    /// The version removed, or the delete marker created.
    pub version_id: Option<String>,
    /// A delete marker was created, or the version removed was one.
    pub delete_marker: bool,
}

/// A change of one version's attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttributeChange {
    Tags(Vec<(String, String)>),
    Retention(Option<Retention>),
    LegalHold(bool),
}

/// The restore of one version (a copy pinned in the cache for a while).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreRecord {
    pub bucket: String,
    pub key: String,
    pub version_id: String,
    pub content: crate::ContentId,
    pub requested_ms: u64,
    /// How long the copy stays once restored.
    pub duration_ms: u64,
    /// `None` while ongoing.
    pub done_ms: Option<u64>,
    /// When the restored copy may leave the cache (set when done): [`restore_expiry_ms`].
    pub expiry_ms: Option<u64>,
    /// How soon the restore is to be done (schema version 10; older rows are `Standard`).
    pub tier: RestoreTier,
}

/// How soon a restore is done, as S3 Glacier's retrieval tiers (docs/archive.md, "Restores"): `Expedited`
/// starts at once; `Standard` waits until its disk's oldest Standard restore is a batch window old (or the
/// disk spins anyway) so one spin-up serves all of them; `Bulk` waits until the disk spins for another reason
/// or the nightly window. Ordered from the fastest.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub enum RestoreTier {
    Expedited,
    #[default]
    Standard,
    Bulk,
}

impl RestoreTier {
    /// S3's name: `Expedited`, `Standard`, `Bulk`.
    pub fn as_str(self) -> &'static str {
        match self {
            RestoreTier::Expedited => "Expedited",
            RestoreTier::Standard => "Standard",
            RestoreTier::Bulk => "Bulk",
        }
    }
}

impl std::fmt::Display for RestoreTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RestoreTier {
    type Err = String;
    /// S3's names, in any case.
    fn from_str(s: &str) -> std::result::Result<RestoreTier, String> {
        match s.to_ascii_lowercase().as_str() {
            "expedited" => Ok(RestoreTier::Expedited),
            "standard" => Ok(RestoreTier::Standard),
            "bulk" => Ok(RestoreTier::Bulk),
            _ => Err(format!(
                "restore tier {s:?} is not one of Expedited, Standard, Bulk"
            )),
        }
    }
}

/// What a restore request asks for besides the version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestoreTerms {
    /// How long the copy stays once restored (the request's days times `day_ms`).
    pub duration_ms: u64,
    pub tier: RestoreTier,
    /// Length of a day: expiries are rounded up to the next multiple of it after `done + duration`.
    pub day_ms: u64,
}

/// When a restored copy expires, as S3 computes it: the time it was restored (or its restore was extended) plus
/// its days, rounded up to the start of the next day (with `day_ms` = [`DAY_MS`], midnight UTC of the following
/// day). The SQL of `finish_restores` computes the same.
pub fn restore_expiry_ms(done_ms: u64, duration_ms: u64, day_ms: u64) -> u64 {
    let day_ms = day_ms.max(1);
    ((done_ms + duration_ms) / day_ms + 1) * day_ms
}

/// What a restore request found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreOutcome {
    /// A restore started (S3 `202`).
    Started,
    /// The version was restored already; its expiry was moved (S3 `200`).
    Extended,
    /// A restore is running (S3 `409 RestoreAlreadyInProgress`), at the same or a faster tier.
    InProgress,
    /// A restore was running at a slower tier; it now has the faster one asked for (S3 `202`).
    Upgraded,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(mode: LockMode, until: u64) -> ObjectLock {
        ObjectLock {
            retention: Some(Retention {
                mode,
                retain_until_ms: until,
            }),
            legal_hold: false,
        }
    }

    #[test]
    fn compliance_refuses_everyone_before_its_date_and_nobody_after() {
        let l = lock(LockMode::Compliance, 1000);
        assert!(l.may_delete(999, true).is_err());
        assert!(l.may_delete(1000, false).is_ok());
    }

    #[test]
    fn governance_yields_only_to_the_bypass() {
        let l = lock(LockMode::Governance, 1000);
        assert!(l.may_delete(10, false).is_err());
        assert!(l.may_delete(10, true).is_ok());
    }

    #[test]
    fn a_legal_hold_blocks_whatever_the_retention() {
        let l = ObjectLock {
            retention: None,
            legal_hold: true,
        };
        assert!(l.may_delete(u64::MAX, true).is_err());
    }

    #[test]
    fn retention_can_be_extended_but_compliance_never_shortened() {
        let c = lock(LockMode::Compliance, 1000);
        let r = |mode, until| {
            Some(Retention {
                mode,
                retain_until_ms: until,
            })
        };
        assert!(c
            .may_set_retention(r(LockMode::Compliance, 2000), 10, false)
            .is_ok());
        assert!(c
            .may_set_retention(r(LockMode::Compliance, 500), 10, true)
            .is_err());
        assert!(c
            .may_set_retention(r(LockMode::Governance, 2000), 10, true)
            .is_err());
        assert!(c.may_set_retention(None, 10, true).is_err());
        assert!(c.may_set_retention(None, 1000, false).is_ok(), "expired");
        let g = lock(LockMode::Governance, 1000);
        assert!(g
            .may_set_retention(r(LockMode::Governance, 500), 10, false)
            .is_err());
        assert!(g
            .may_set_retention(r(LockMode::Governance, 500), 10, true)
            .is_ok());
        assert!(g
            .may_set_retention(r(LockMode::Compliance, 1500), 10, false)
            .is_ok());
    }

    #[test]
    fn lifecycle_days_round_up_to_a_day_boundary_and_the_earliest_rule_wins() {
        let lc = Lifecycle {
            day_ms: 2000,
            rules: vec![
                LifecycleRule {
                    id: "logs".into(),
                    enabled: true,
                    filter: LifecycleFilter {
                        prefix: "logs/".into(),
                        ..Default::default()
                    },
                    expiration_days: Some(1),
                    ..Default::default()
                },
                LifecycleRule {
                    id: "tagged".into(),
                    enabled: true,
                    filter: LifecycleFilter {
                        tags: vec![("tmp".into(), "1".into())],
                        ..Default::default()
                    },
                    expiration_days: Some(3),
                    ..Default::default()
                },
            ],
        };
        assert_eq!(lc.expiry("logs/a", &[], 1, 2500), Some((6000, "logs")));
        assert_eq!(lc.expiry("data/a", &[], 1, 2500), None);
        let tags = [("tmp".to_string(), "1".to_string())];
        assert_eq!(lc.expiry("data/a", &tags, 1, 2000), Some((8000, "tagged")));
        assert_eq!(lc.expiry("logs/a", &tags, 1, 2000), Some((4000, "logs")));
    }

    #[test]
    fn object_lock_needs_versioning_and_stays() {
        let plain = BucketArchive::default();
        let locked = BucketArchive {
            versioning: Versioning::Enabled,
            object_lock: true,
            ..Default::default()
        };
        assert!(plain.may_become(&locked).is_ok());
        assert!(locked
            .may_become(&BucketArchive {
                versioning: Versioning::Suspended,
                ..locked.clone()
            })
            .is_err());
        assert!(locked.may_become(&plain).is_err());
    }

    #[test]
    fn dates_are_printed_in_utc() {
        assert_eq!(date(0), "1970-01-01T00:00:00Z");
        assert_eq!(date(1_700_000_000_000), "2023-11-14T22:13:20Z");
    }
}
