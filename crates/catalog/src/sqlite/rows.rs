//! How records map to rows, for every module: the column lists the `SELECT`s and `INSERT`s share (their order is
//! the order the `*_from_row` readers expect), the readers, and the JSON forms of the list and attribute columns. A
//! row that does not read back (unknown state, wrong digest length, bad JSON) is [`crate::CatalogError::Corrupt`].

use crate::sql::{self, Row};
use crate::*;

pub(super) const OBJECT_COLUMNS: &str =
    "bucket, key, content, size_bytes, etag, last_modified_ms, content_type, user_metadata, checksums, dataset, \
     version_id, version_seq, attributes, expires_ms";

pub(super) const CONTENT_COLUMNS: &str =
    "content, logical_bytes, stored_bytes, stored_form, chunk_index, md5, state, refcount, \
     dataset, grid_bucket, cache_path, created_ms, last_access_ms, unreferenced_since_ms";

pub(super) const EXTENT_COLUMNS: &str =
    "extent_id, grid_bucket, offset, length_bytes, payload_bytes, object_id, extent_no, kind, written, blake3, replica_id";

pub(super) fn corrupt(what: impl std::fmt::Display) -> CatalogError {
    CatalogError::Corrupt(what.to_string())
}

pub(super) fn key_string(bytes: Vec<u8>) -> sql::Result<String> {
    String::from_utf8(bytes).map_err(|e| sql::Error::Conversion(Box::new(e)))
}

pub(super) fn conversion(e: CatalogError) -> sql::Error {
    sql::Error::conversion(e)
}

pub(super) fn json_pairs(text: &str) -> sql::Result<Vec<(String, String)>> {
    serde_json::from_str(text).map_err(|e| conversion(corrupt(format!("metadata column: {e}"))))
}

pub(super) fn object_from_row(row: &Row) -> sql::Result<ObjectRecord> {
    Ok(ObjectRecord {
        bucket: row.get(0)?,
        key: key_string(row.get(1)?)?,
        content: ContentId::from_key(&row.get::<_, Vec<u8>>(2)?).map_err(conversion)?,
        size_bytes: row.get::<_, i64>(3)? as u64,
        etag: row.get(4)?,
        last_modified_ms: row.get::<_, i64>(5)? as u64,
        content_type: row.get(6)?,
        user_metadata: json_pairs(&row.get::<_, String>(7)?)?,
        checksums: json_pairs(&row.get::<_, String>(8)?)?,
        dataset: row.get(9)?,
        version_id: row.get(10)?,
        attributes: attributes_from_json(&row.get::<_, String>(12)?)?,
        expires_ms: row.get::<_, Option<i64>>(13)?.map(|v| v as u64),
    })
}

pub(super) fn attributes_from_json(text: &str) -> sql::Result<ObjectAttributes> {
    serde_json::from_str(text).map_err(|e| conversion(corrupt(format!("attributes column: {e}"))))
}

pub(super) fn attributes_json(attributes: &ObjectAttributes) -> String {
    serde_json::to_string(attributes).expect("attributes serialize")
}

pub(super) fn archive_from_json(text: &str) -> Result<BucketArchive> {
    serde_json::from_str(text).map_err(|e| corrupt(format!("bucket archive configuration: {e}")))
}

pub(super) fn fixed<const N: usize>(bytes: Vec<u8>, what: &str) -> sql::Result<[u8; N]> {
    bytes.try_into().map_err(|b: Vec<u8>| {
        conversion(corrupt(format!(
            "{what} has {} bytes, expected {N}",
            b.len()
        )))
    })
}

/// Content columns starting at column `at`.
pub(super) fn content_from_row(row: &Row, at: usize) -> sql::Result<ContentRecord> {
    Ok(ContentRecord {
        id: ContentId::from_key(&row.get::<_, Vec<u8>>(at)?).map_err(conversion)?,
        logical_bytes: row.get::<_, i64>(at + 1)? as u64,
        stored_bytes: row.get::<_, i64>(at + 2)? as u64,
        stored_form: StoredForm::parse(&row.get::<_, String>(at + 3)?).map_err(conversion)?,
        chunk_index: row.get(at + 4)?,
        md5: fixed(row.get(at + 5)?, "md5")?,
        state: ContentState::parse(&row.get::<_, String>(at + 6)?).map_err(conversion)?,
        refcount: row.get::<_, i64>(at + 7)? as u64,
        dataset: row.get(at + 8)?,
        grid_bucket: row.get::<_, Option<i64>>(at + 9)?.map(|b| b as u32),
        cache_path: row.get(at + 10)?,
        created_ms: row.get::<_, i64>(at + 11)? as u64,
        last_access_ms: row.get::<_, i64>(at + 12)? as u64,
        unreferenced_since_ms: row.get::<_, Option<i64>>(at + 13)?.map(|v| v as u64),
    })
}

pub(super) fn extent_kind(s: &str) -> sql::Result<ExtentKind> {
    match s {
        "content" => Ok(ExtentKind::Content),
        "pack" => Ok(ExtentKind::Pack),
        other => Err(conversion(corrupt(format!(
            "unknown extent kind {other:?}"
        )))),
    }
}

pub(super) fn kind_str(kind: ExtentKind) -> &'static str {
    match kind {
        ExtentKind::Content => "content",
        ExtentKind::Pack => "pack",
    }
}

/// Extent columns starting at column `at`.
pub(super) fn extent_from_row(row: &Row, at: usize) -> sql::Result<ExtentRecord> {
    Ok(ExtentRecord {
        extent_id: row.get(at)?,
        grid_bucket: row.get::<_, i64>(at + 1)? as u32,
        offset: row.get::<_, i64>(at + 2)? as u64,
        length_bytes: row.get::<_, i64>(at + 3)? as u64,
        payload_bytes: row.get::<_, i64>(at + 4)? as u64,
        object_id: fixed(row.get(at + 5)?, "object id")?,
        extent_no: row.get::<_, i64>(at + 6)? as u16,
        kind: extent_kind(&row.get::<_, String>(at + 7)?)?,
        written: row.get::<_, i64>(at + 8)? != 0,
        blake3: row
            .get::<_, Option<Vec<u8>>>(at + 9)?
            .map(|b| fixed(b, "extent blake3"))
            .transpose()?,
        replica_id: row.get::<_, i64>(at + 10)? as u8,
    })
}

pub(super) fn upload_from_row(row: &Row) -> sql::Result<UploadRecord> {
    Ok(UploadRecord {
        upload_id: row.get(0)?,
        bucket: row.get(1)?,
        key: key_string(row.get(2)?)?,
        created_ms: row.get::<_, i64>(3)? as u64,
        options: row.get(4)?,
    })
}

pub(super) const PART_COLUMNS: &str =
    "upload_id, part_number, size_bytes, md5, cache_path, created_ms, content, checksums";

pub(super) fn part_from_row(row: &Row) -> sql::Result<PartRecord> {
    Ok(PartRecord {
        upload_id: row.get(0)?,
        part_number: row.get::<_, i64>(1)? as u32,
        size_bytes: row.get::<_, i64>(2)? as u64,
        md5: fixed(row.get(3)?, "part md5")?,
        cache_path: row.get(4)?,
        created_ms: row.get::<_, i64>(5)? as u64,
        content: row
            .get::<_, Option<Vec<u8>>>(6)?
            .map(|k| ContentId::from_key(&k).map_err(conversion))
            .transpose()?,
        checksums: json_pairs(&row.get::<_, String>(7)?)?,
    })
}

pub(super) fn pairs_json(pairs: &[(String, String)]) -> String {
    serde_json::to_string(pairs).expect("pairs of strings serialize")
}
