//! GetObject and HeadObject.
//!
//! GET streams the object from the store (the cache, or the grid: one disk spins up) through a bounded channel
//! (`bridge::download`). Ranges (`bytes=a-b`, `a-`, `-n`) are on the representation returned: decoded bytes
//! normally; for an object uploaded pre-compressed (`zstd`/`lz4`) and a client whose `Accept-Encoding` names
//! that encoding, the stored bytes with `Content-Encoding`. HEAD answers from the catalog only (no disk wakes)
//! and shows the persistence state in [`crate::STATE_HEADER`].

use std::sync::Arc;

use http::HeaderMap;
use permafrost_store::{ByteRange, Encoding, ObjectInfo, Store};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use crate::bridge::{blocking, download};
use crate::common::{etag, metadata, object_headers, timestamp, DEFAULT_CONTENT_TYPE};

/// The stored encodings (`zstd`, `lz4`) the client accepts, from `Accept-Encoding` (`q=0` excludes; `*` is
/// not taken as a yes: decoded bytes are always safe).
pub(crate) fn accepted_encodings(headers: &HeaderMap) -> Vec<Encoding> {
    let mut accepted = Vec::new();
    for value in headers.get_all(http::header::ACCEPT_ENCODING) {
        let Ok(value) = value.to_str() else { continue };
        for item in value.split(',') {
            let mut parts = item.split(';');
            let name = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let refused = parts.any(|p| {
                let p = p.trim();
                p.strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            let encoding = match name.as_str() {
                "zstd" => Encoding::Zstd,
                "lz4" => Encoding::Lz4,
                _ => continue,
            };
            if !refused && !accepted.contains(&encoding) {
                accepted.push(encoding);
            }
        }
    }
    accepted
}

fn byte_range(range: Option<Range>) -> Option<ByteRange> {
    range.map(|r| match r {
        Range::Int {
            first,
            last: Some(last),
        } => ByteRange::FromTo(first, last),
        Range::Int { first, last: None } => ByteRange::From(first),
        Range::Suffix { length } => ByteRange::Suffix(length),
    })
}

fn content_encoding(encoding: Encoding) -> Option<String> {
    (encoding != Encoding::Identity).then(|| encoding.as_str().to_owned())
}

pub(crate) async fn get_object(
    store: &Arc<Store>,
    req: S3Request<GetObjectInput>,
) -> S3Result<S3Response<GetObjectOutput>> {
    let accepted = accepted_encodings(&req.headers);
    let input = req.input;
    let range = byte_range(input.range);
    let opener = Arc::clone(store);
    let (info, reader) = blocking(move || {
        let accept = match accepted.as_slice() {
            [] => None,
            [one] => Some(*one),
            _ => {
                let encoding = opener
                    .head_object(&input.bucket, &input.key)?
                    .content_encoding;
                accepted.contains(&encoding).then_some(encoding)
            }
        };
        opener.open_object(&input.bucket, &input.key, range, accept)
    })
    .await?;
    let content_range = reader.range().map(|(offset, length)| {
        format!(
            "bytes {}-{}/{}",
            offset,
            offset + length - 1,
            reader.total_bytes()
        )
    });
    let output = GetObjectOutput {
        accept_ranges: Some("bytes".into()),
        content_length: i64::try_from(reader.len()).ok(),
        content_range,
        content_encoding: content_encoding(reader.encoding()),
        content_type: Some(content_type(&info)),
        e_tag: Some(etag(&info.etag)),
        last_modified: Some(timestamp(info.last_modified_ms)),
        metadata: metadata(&info.user_metadata),
        body: Some(download(reader, Arc::clone(store))),
        ..Default::default()
    };
    let mut response = S3Response::new(output);
    response.headers = object_headers(&info);
    Ok(response)
}

fn content_type(info: &ObjectInfo) -> ContentType {
    info.content_type
        .clone()
        .unwrap_or_else(|| DEFAULT_CONTENT_TYPE.into())
}

pub(crate) async fn head_object(
    store: &Arc<Store>,
    req: S3Request<HeadObjectInput>,
) -> S3Result<S3Response<HeadObjectOutput>> {
    let accepted = accepted_encodings(&req.headers);
    let store = Arc::clone(store);
    let input = req.input;
    let info = blocking(move || store.head_object(&input.bucket, &input.key)).await?;
    let as_stored =
        info.content_encoding != Encoding::Identity && accepted.contains(&info.content_encoding);
    let output = HeadObjectOutput {
        accept_ranges: Some("bytes".into()),
        content_length: i64::try_from(if as_stored {
            info.stored_bytes
        } else {
            info.size_bytes
        })
        .ok(),
        content_encoding: if as_stored {
            content_encoding(info.content_encoding)
        } else {
            None
        },
        content_type: Some(content_type(&info)),
        e_tag: Some(etag(&info.etag)),
        last_modified: Some(timestamp(info.last_modified_ms)),
        metadata: metadata(&info.user_metadata),
        ..Default::default()
    };
    let mut response = S3Response::new(output);
    response.headers = object_headers(&info);
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(http::header::ACCEPT_ENCODING, value.parse().unwrap());
        h
    }

    #[test]
    fn accept_encoding_names_zstd_and_lz4_unless_refused() {
        assert_eq!(accepted_encodings(&HeaderMap::new()), vec![]);
        assert_eq!(accepted_encodings(&headers("gzip, deflate")), vec![]);
        assert_eq!(
            accepted_encodings(&headers("gzip, zstd")),
            vec![Encoding::Zstd]
        );
        assert_eq!(
            accepted_encodings(&headers("ZSTD;q=0.5, lz4")),
            vec![Encoding::Zstd, Encoding::Lz4]
        );
        assert_eq!(
            accepted_encodings(&headers("zstd;q=0, lz4")),
            vec![Encoding::Lz4]
        );
        assert_eq!(accepted_encodings(&headers("*")), vec![]);
    }

    #[test]
    fn s3_ranges_become_store_ranges() {
        assert_eq!(
            byte_range(Some(Range::Int {
                first: 2,
                last: Some(5)
            })),
            Some(ByteRange::FromTo(2, 5))
        );
        assert_eq!(
            byte_range(Some(Range::Int {
                first: 2,
                last: None
            })),
            Some(ByteRange::From(2))
        );
        assert_eq!(
            byte_range(Some(Range::Suffix { length: 7 })),
            Some(ByteRange::Suffix(7))
        );
        assert_eq!(byte_range(None), None);
    }
}
