//! Conversions shared by the operation modules: ETags, timestamps, metadata, owner, the state header.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderValue};
use permafrost_store::{ContentState, ObjectInfo};
use s3s::dto::{ETag, Metadata, Owner, Timestamp};

/// The response header that shows an object's persistence state on HEAD and GET: `cached`, `placed`,
/// `persisting` or `persisted` (every extent and all parity on the grid).
pub const STATE_HEADER: &str = "x-permafrost-state";

/// The response header that shows, on HEAD and GET, the grid bucket an object's content is placed on, once
/// chosen (absent while the object is only `cached`).
pub const GRID_BUCKET_HEADER: &str = "x-permafrost-grid-bucket";

/// The response header that shows, on HEAD and GET, how many bytes the object's content takes in storage
/// (after compression; before the grid's parity and IDR).
pub const STORED_BYTES_HEADER: &str = "x-permafrost-stored-bytes";

/// Owner id and display name of everything (one root user).
pub(crate) const OWNER_ID: &str = "permafrost";

pub(crate) fn owner() -> Owner {
    Owner {
        display_name: Some(OWNER_ID.into()),
        id: Some(OWNER_ID.into()),
    }
}

/// The store keeps ETags quoted, as on the wire; s3s wants the value.
pub(crate) fn etag(stored: &str) -> ETag {
    let value = stored.trim();
    let value = value.strip_prefix("W/").unwrap_or(value);
    ETag::Strong(value.trim_matches('"').to_owned())
}

pub(crate) fn timestamp(ms: u64) -> Timestamp {
    Timestamp::from(SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
}

pub(crate) fn metadata(pairs: &[(String, String)]) -> Option<Metadata> {
    if pairs.is_empty() {
        return None;
    }
    Some(pairs.iter().cloned().collect())
}

/// User metadata of a request, sorted by name (S3 metadata names are case-insensitive; s3s lowercases them).
pub(crate) fn metadata_pairs(metadata: Option<Metadata>) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = metadata.unwrap_or_default().into_iter().collect();
    pairs.sort();
    pairs
}

pub(crate) fn state_name(state: ContentState) -> &'static str {
    match state {
        ContentState::Cached => "cached",
        ContentState::Placed => "placed",
        ContentState::Persisting => "persisting",
        ContentState::Persisted => "persisted",
    }
}

/// Extra response headers of HEAD and GET.
pub(crate) fn object_headers(info: &ObjectInfo) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        STATE_HEADER,
        HeaderValue::from_static(state_name(info.state)),
    );
    if let Some(grid_bucket) = info.grid_bucket {
        headers.insert(GRID_BUCKET_HEADER, HeaderValue::from(grid_bucket));
    }
    headers.insert(STORED_BYTES_HEADER, HeaderValue::from(info.stored_bytes));
    headers
}

/// `Content-Type` of an object stored without one (what S3 answers).
pub(crate) const DEFAULT_CONTENT_TYPE: &str = "binary/octet-stream";

/// Percent-encode a key for `encoding-type=url` listings (everything but unreserved characters and `/`).
pub(crate) fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_lose_their_quotes_once() {
        assert_eq!(etag("\"abc\"").value(), "abc");
        assert_eq!(etag("\"abc-3\"").value(), "abc-3");
        assert_eq!(etag("abc").value(), "abc");
    }

    #[test]
    fn url_encoding_keeps_slashes_and_escapes_the_rest() {
        assert_eq!(url_encode("a b/c+d%é"), "a%20b/c%2Bd%25%C3%A9");
    }
}
