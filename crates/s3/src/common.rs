//! Conversions shared by the operation modules: ETags, timestamps, metadata, owner, the state header.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderValue};
use permafrost_store::{
    ContentState, LockMode, ObjectAttributes, ObjectInfo, Retention, StorageClass, StoreError,
};
use s3s::dto::{ETag, Metadata, Owner, Timestamp, TimestampFormat};
use s3s::S3Result;

use crate::error::s3_error;

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

/// The latest time a [`Timestamp`] holds (9999-12-31 23:59:59.999 UTC), in ms since the epoch.
const TIMESTAMP_MS_MAX: u64 = 253_402_300_799_999;

/// `ms` since the epoch as a [`Timestamp`]; a later time (only a damaged or hostile record holds one: a copy's
/// metadata comes from a peer) is the latest one it holds rather than a panic.
pub(crate) fn timestamp(ms: u64) -> Timestamp {
    let ms = ms.min(TIMESTAMP_MS_MAX);
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

/// Milliseconds since the epoch of an S3 timestamp.
pub(crate) fn timestamp_ms(t: &Timestamp) -> u64 {
    let mut text = Vec::new();
    if t.format(TimestampFormat::EpochSeconds, &mut text).is_err() {
        return 0;
    }
    std::str::from_utf8(&text)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .map_or(0, |secs| (secs * 1000.0).max(0.0) as u64)
}

/// An HTTP date (`Fri, 23 Dec 2012 00:00:00 GMT`).
pub(crate) fn http_date(ms: u64) -> String {
    let mut text = Vec::new();
    let _ = timestamp(ms).format(TimestampFormat::HttpDate, &mut text);
    String::from_utf8(text).unwrap_or_default()
}

/// Decode `application/x-www-form-urlencoded` text (`+` is a space, `%XX` a byte).
pub(crate) fn form_decode(s: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(s.len());
    let mut it = s.bytes();
    while let Some(b) = it.next() {
        match b {
            b'+' => bytes.push(b' '),
            b'%' => {
                let hi = (it.next()? as char).to_digit(16)?;
                let lo = (it.next()? as char).to_digit(16)?;
                bytes.push((hi * 16 + lo) as u8);
            }
            other => bytes.push(other),
        }
    }
    String::from_utf8(bytes).ok()
}

/// The tags of an `x-amz-tagging` header (`k1=v1&k2=v2`, URL-encoded).
pub(crate) fn parse_tagging(header: &str) -> S3Result<Vec<(String, String)>> {
    let mut tags = Vec::new();
    for pair in header.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match (form_decode(k), form_decode(v)) {
            (Some(k), Some(v)) => tags.push((k, v)),
            _ => {
                return Err(s3_error(StoreError::InvalidArgument(format!(
                    "x-amz-tagging {header:?} is not URL-encoded key=value pairs"
                ))))
            }
        }
    }
    permafrost_store::validate_tags(&tags).map_err(s3_error)?;
    Ok(tags)
}

/// A storage class a client asked for: STANDARD or GLACIER; anything else is refused, never changed.
pub(crate) fn storage_class(
    requested: Option<&str>,
    default: StorageClass,
) -> S3Result<StorageClass> {
    match requested {
        None => Ok(default),
        Some(name) => name
            .parse()
            .map_err(|m: String| s3_error(StoreError::InvalidStorageClass(m))),
    }
}

/// What a PUT, a multipart upload or a copy says about the new version besides its bytes.
pub(crate) struct NewVersion<'a> {
    pub cache_control: Option<String>,
    pub content_disposition: Option<String>,
    pub content_language: Option<String>,
    pub expires: Option<Timestamp>,
    pub tagging: Option<&'a str>,
    pub storage_class: Option<&'a str>,
    pub lock_mode: Option<&'a str>,
    pub retain_until: Option<Timestamp>,
    pub legal_hold: Option<&'a str>,
}

impl NewVersion<'_> {
    /// The attributes of the new version (`default_class`: the bucket's storage class).
    pub(crate) fn attributes(self, default_class: StorageClass) -> S3Result<ObjectAttributes> {
        let mut headers = Vec::new();
        for (name, value) in [
            ("cache-control", self.cache_control),
            ("content-disposition", self.content_disposition),
            ("content-language", self.content_language),
            (
                "expires",
                self.expires.as_ref().map(|t| http_date(timestamp_ms(t))),
            ),
        ] {
            if let Some(v) = value {
                headers.push((name.to_string(), v));
            }
        }
        let retention =
            match (self.lock_mode, self.retain_until) {
                (None, None) => None,
                (Some(mode), Some(until)) => Some(Retention {
                    mode: mode
                        .parse::<LockMode>()
                        .map_err(|m| s3_error(StoreError::InvalidArgument(m)))?,
                    retain_until_ms: timestamp_ms(&until),
                }),
                _ => return Err(s3_error(StoreError::InvalidArgument(
                    "x-amz-object-lock-mode and x-amz-object-lock-retain-until-date go together"
                        .into(),
                ))),
            };
        if retention.is_some_and(|r| r.retain_until_ms <= permafrost_store::now_ms()) {
            return Err(s3_error(StoreError::InvalidArgument(
                "x-amz-object-lock-retain-until-date must be in the future".into(),
            )));
        }
        let legal_hold = match self.legal_hold {
            None | Some("OFF") => false,
            Some("ON") => true,
            Some(other) => {
                return Err(s3_error(StoreError::InvalidArgument(format!(
                    "x-amz-object-lock-legal-hold {other:?}: expected ON or OFF"
                ))))
            }
        };
        Ok(ObjectAttributes {
            headers,
            tags: match self.tagging {
                Some(t) => parse_tagging(t)?,
                None => Vec::new(),
            },
            storage_class: storage_class(self.storage_class, default_class)?,
            lock: permafrost_store::ObjectLock {
                retention,
                legal_hold,
            },
        })
    }
}

/// A stored header of a version (`cache-control`, …).
pub(crate) fn stored_header(info: &ObjectInfo, name: &str) -> Option<String> {
    info.attributes
        .headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.clone())
}

/// `Expires` as stored, as a timestamp.
pub(crate) fn stored_expires(info: &ObjectInfo) -> Option<Timestamp> {
    stored_header(info, "expires")
        .and_then(|v| Timestamp::parse(TimestampFormat::HttpDate, &v).ok())
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

    /// fuzz/regressions/s3_headers-http-date-after-year-9999: a time past the year 9999 panicked.
    #[test]
    fn a_time_after_the_year_9999_is_the_latest_date_not_a_panic() {
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(TIMESTAMP_MS_MAX), "Fri, 31 Dec 9999 23:59:59 GMT");
        for ms in [TIMESTAMP_MS_MAX + 1, u64::MAX / 2, u64::MAX] {
            assert_eq!(http_date(ms), "Fri, 31 Dec 9999 23:59:59 GMT", "{ms}");
        }
    }

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
