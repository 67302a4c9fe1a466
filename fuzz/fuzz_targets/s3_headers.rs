//! Request headers the server parses itself or through s3s: conditional reads and writes (`If-Match`,
//! `If-None-Match`, `If-Modified-Since`, `If-Unmodified-Since`), `Range` (a satisfiable range lies inside the
//! object), `x-amz-copy-source`, `x-amz-tagging`, `x-amz-grant-*` and `Accept-Encoding`. Fields are separated
//! by newlines in the input. Never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use permafrost_s3::fuzzing;
use s3s::dto::{CopySource, Range};

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let (size, rest) = data.split_at(8);
    // Any object size and last-modified time (one after the year 9999 panicked in `http_date` once:
    // fuzz/regressions/s3_headers-http-date-after-year-9999).
    let size = u64::from_le_bytes(size.try_into().unwrap());
    let mut fields = rest.split(|&b| b == b'\n');
    let mut next = || fields.next().unwrap_or(&[]);
    let (if_match, if_none_match) = (next(), next());
    let if_modified_since = String::from_utf8_lossy(next()).into_owned();
    let if_unmodified_since = String::from_utf8_lossy(next()).into_owned();
    let range = String::from_utf8_lossy(next()).into_owned();
    let other = String::from_utf8_lossy(next()).into_owned();
    let etag = String::from_utf8_lossy(next()).into_owned();
    fuzzing::conditions(
        if_match,
        if_none_match,
        &if_modified_since,
        &if_unmodified_since,
        &etag,
        size,
    );
    if let Ok(r) = Range::parse(&range) {
        if let Ok(within) = r.check(size) {
            assert!(
                within.start <= within.end && within.end <= size,
                "{range:?} of {size}: {within:?}"
            );
        }
        let _ = Range::parse(&r.to_header_string());
    }
    let _ = CopySource::parse(&other);
    let _ = fuzzing::tagging(b"", &other);
    let _ = fuzzing::grant_header(&other);
    let _ = fuzzing::accept_encoding(other.as_bytes());
});
