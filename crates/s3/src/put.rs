//! PutObject: the body streams into the store's write-back cache (see `bridge::upload`); the object becomes
//! visible only when the store acknowledged it durable.
//!
//! Pre-compressed uploads: `Content-Encoding: zstd` or `lz4` with the decoded length in
//! `x-amz-meta-permafrost-decoded-length` are stored exactly as sent. Other content encodings (`aws-chunked`
//! is the signing layer's and already removed, `gzip`, …) are not interpreted: the bytes are stored and
//! returned as received. (The store keeps no `Content-Encoding` for them, so GET does not repeat it.)

use std::sync::{Arc, OnceLock};

use permafrost_store::{BucketArchive, Encoding, PutOptions, StorageClass, Store};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use crate::bridge::upload;
use crate::checksum;
use crate::common::{etag, metadata_pairs, NewVersion};
use crate::conditional::write_condition;
use crate::error::internal;
use crate::versioning::{expiration_header, version_header};

/// The encoding the store should know of, from a `Content-Encoding` header: `zstd` or `lz4` (alone, or after
/// `aws-chunked`); anything else is identity.
pub(crate) fn store_encoding(content_encoding: Option<&str>) -> Encoding {
    let Some(value) = content_encoding else {
        return Encoding::Identity;
    };
    let codings: Vec<String> = value
        .split(',')
        .map(|c| c.trim().to_ascii_lowercase())
        .filter(|c| !c.is_empty() && c != "aws-chunked")
        .collect();
    match codings.as_slice() {
        [one] if one == "zstd" => Encoding::Zstd,
        [one] if one == "lz4" => Encoding::Lz4,
        _ => Encoding::Identity,
    }
}

pub(crate) async fn put_object(
    store: &Arc<Store>,
    req: S3Request<PutObjectInput>,
) -> S3Result<S3Response<PutObjectOutput>> {
    let trailer = checksum::trailer_of(&req.headers)?;
    let input = req.input;
    // `If-None-Match: *` / `If-Match`: checked in the commit's transaction (crate::conditional).
    let condition = write_condition(input.if_match.as_ref(), input.if_none_match.as_ref())?;
    let class_given = input.storage_class.is_some();
    // Checked before the body is read; the bucket's default storage class is filled in with the store call.
    let mut attributes = NewVersion {
        cache_control: input.cache_control.clone(),
        content_disposition: input.content_disposition.clone(),
        content_language: input.content_language.clone(),
        expires: input.expires.clone(),
        tagging: input.tagging.as_deref(),
        storage_class: input.storage_class.as_ref().map(|c| c.as_str()),
        lock_mode: input.object_lock_mode.as_ref().map(|m| m.as_str()),
        retain_until: input.object_lock_retain_until_date.clone(),
        legal_hold: input
            .object_lock_legal_hold_status
            .as_ref()
            .map(|h| h.as_str()),
    }
    .attributes(StorageClass::Standard)?;
    let user_metadata = metadata_pairs(input.metadata);
    let content_encoding = store_encoding(input.content_encoding.as_deref());
    let echo = PutObjectOutput {
        checksum_crc32: input.checksum_crc32.clone(),
        checksum_crc32c: input.checksum_crc32c.clone(),
        checksum_sha1: input.checksum_sha1.clone(),
        checksum_sha256: input.checksum_sha256.clone(),
        checksum_crc64nvme: input.checksum_crc64nvme.clone(),
        ..Default::default()
    };
    let expected = checksum::from_headers(
        input.content_md5,
        input.checksum_crc32,
        input.checksum_crc32c,
        input.checksum_sha1,
        input.checksum_sha256,
        input.checksum_crc64nvme,
    );
    let content_type = input.content_type.map(|m| m.to_string());
    let opener = Arc::clone(store);
    let (bucket, key) = (input.bucket, input.key);
    // The bucket's archive configuration, read on the store's thread with the upload's start (one blocking
    // call less per PUT), for the storage class and the answer's version headers.
    let archive_slot: Arc<OnceLock<BucketArchive>> = Arc::new(OnceLock::new());
    let slot = Arc::clone(&archive_slot);
    let info = upload(
        input.body,
        move || {
            let archive = opener.bucket_archive(&bucket)?;
            if !class_given {
                attributes.storage_class = archive.storage_class;
            }
            let _ = slot.set(archive);
            let options = PutOptions {
                content_encoding,
                decoded_length: None,
                user_metadata,
                content_type,
                expected,
                attributes,
                upload_checksum: None,
                replica_of: None,
            };
            let mut handle = opener.begin_put(&bucket, &key, options)?;
            handle.set_condition(condition);
            Ok(handle)
        },
        trailer,
        req.trailing_headers,
    )
    .await?;
    let archive = match archive_slot.get() {
        Some(a) => a.clone(),
        None => {
            return Err(internal(
                "the upload finished without its bucket's configuration",
            ))
        }
    };
    Ok(S3Response::new(PutObjectOutput {
        e_tag: Some(etag(&info.etag)),
        size: i64::try_from(info.size_bytes).ok(),
        version_id: version_header(&archive, &info.version_id),
        expiration: expiration_header(&archive, &info),
        ..echo
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_zstd_and_lz4_alone_are_stored_as_sent() {
        assert_eq!(store_encoding(None), Encoding::Identity);
        assert_eq!(store_encoding(Some("zstd")), Encoding::Zstd);
        assert_eq!(store_encoding(Some("LZ4")), Encoding::Lz4);
        assert_eq!(store_encoding(Some("aws-chunked, zstd")), Encoding::Zstd);
        assert_eq!(store_encoding(Some("gzip")), Encoding::Identity);
        assert_eq!(store_encoding(Some("gzip, zstd")), Encoding::Identity);
        assert_eq!(store_encoding(Some("aws-chunked")), Encoding::Identity);
    }
}
