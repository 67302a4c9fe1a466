//! S3 request metrics: each request's operation (from its method, path, query and headers, so the label set
//! stays bounded), its duration until the response body ended and its time to first byte, recorded in the
//! admin's [`Metrics`] with whether it waited for a disk to spin up (a [`WakeWitness`] the request carries in
//! its extensions; handlers that touch disks enter it with their wake reason).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderMap, Method, Response, Uri};
use http_body::{Body as _, Frame, SizeHint};
use permafrost_admin::Metrics;
use permafrost_disk::power::WakeWitness;
use s3s::{Body, StdError};

/// Query sub-resources that name an operation family: `(query name, operation suffix)`.
const SUBRESOURCES: [(&str, &str); 16] = [
    ("tagging", "Tagging"),
    ("policyStatus", "PolicyStatus"),
    ("publicAccessBlock", "PublicAccessBlock"),
    ("acl", "Acl"),
    ("versioning", "Versioning"),
    ("lifecycle", "LifecycleConfiguration"),
    ("policy", "Policy"),
    ("legal-hold", "LegalHold"),
    ("retention", "Retention"),
    ("object-lock", "ObjectLockConfiguration"),
    ("location", "Location"),
    ("attributes", "Attributes"),
    ("cors", "Cors"),
    ("encryption", "Encryption"),
    ("versions", "Versions"),
    ("restore", "Restore"),
];

fn has(query: &[&str], name: &str) -> bool {
    query
        .iter()
        .any(|p| p.split_once('=').map_or(*p, |(n, _)| n) == name)
}

/// The S3 operation of a request, e.g. `GetObject`, `UploadPart`, `ListObjectsV2`, `GetObjectTagging`.
pub(crate) fn operation(method: &Method, uri: &Uri, headers: &HeaderMap) -> &'static str {
    let query: Vec<&str> = uri.query().unwrap_or("").split('&').collect();
    let path = uri.path().trim_start_matches('/');
    let (bucket, key) = path.split_once('/').unwrap_or((path, ""));
    let sub = SUBRESOURCES
        .iter()
        .find(|(n, _)| has(&query, n))
        .map(|(_, s)| *s);
    let copy = headers.contains_key("x-amz-copy-source");
    if bucket.is_empty() {
        return if *method == Method::GET {
            "ListBuckets"
        } else {
            "Other"
        };
    }
    let object = !key.is_empty();
    macro_rules! family {
        ($($s:literal => $op:literal),* ; $default:literal) => {
            match sub { $(Some($s) => $op,)* _ => $default }
        };
    }
    match (method.as_str(), object) {
        ("GET", true) if has(&query, "uploadId") => "ListParts",
        ("GET", true) => family!("Tagging" => "GetObjectTagging", "Acl" => "GetObjectAcl",
            "LegalHold" => "GetObjectLegalHold", "Retention" => "GetObjectRetention",
            "Attributes" => "GetObjectAttributes"; "GetObject"),
        ("HEAD", true) => "HeadObject",
        ("PUT", true) if has(&query, "partNumber") && copy => "UploadPartCopy",
        ("PUT", true) if has(&query, "partNumber") => "UploadPart",
        ("PUT", true) => family!("Tagging" => "PutObjectTagging", "Acl" => "PutObjectAcl",
            "LegalHold" => "PutObjectLegalHold", "Retention" => "PutObjectRetention";
            "PutObject_or_copy"),
        ("POST", true) if has(&query, "uploads") => "CreateMultipartUpload",
        ("POST", true) if has(&query, "uploadId") => "CompleteMultipartUpload",
        ("POST", true) if sub == Some("Restore") => "RestoreObject",
        ("DELETE", true) if has(&query, "uploadId") => "AbortMultipartUpload",
        ("DELETE", true) => family!("Tagging" => "DeleteObjectTagging"; "DeleteObject"),
        ("GET", false) if has(&query, "uploads") => "ListMultipartUploads",
        ("GET", false) if has(&query, "list-type") => "ListObjectsV2",
        ("GET", false) => family!("Tagging" => "GetBucketTagging", "Acl" => "GetBucketAcl",
            "Versioning" => "GetBucketVersioning", "LifecycleConfiguration" => "GetBucketLifecycleConfiguration",
            "Policy" => "GetBucketPolicy", "ObjectLockConfiguration" => "GetObjectLockConfiguration",
            "Location" => "GetBucketLocation", "Cors" => "GetBucketCors", "Encryption" => "GetBucketEncryption",
            "Versions" => "ListObjectVersions", "PolicyStatus" => "GetBucketPolicyStatus",
            "PublicAccessBlock" => "GetPublicAccessBlock"; "ListObjects"),
        ("HEAD", false) => "HeadBucket",
        ("PUT", false) => family!("Tagging" => "PutBucketTagging", "Acl" => "PutBucketAcl",
            "Versioning" => "PutBucketVersioning", "LifecycleConfiguration" => "PutBucketLifecycleConfiguration",
            "Policy" => "PutBucketPolicy", "ObjectLockConfiguration" => "PutObjectLockConfiguration",
            "Cors" => "PutBucketCors", "Encryption" => "PutBucketEncryption",
            "PublicAccessBlock" => "PutPublicAccessBlock"; "CreateBucket"),
        ("POST", false) if has(&query, "delete") => "DeleteObjects",
        ("POST", false) if crate::post_object::is_form(headers) => "PostObject",
        ("DELETE", false) => family!("Tagging" => "DeleteBucketTagging", "Policy" => "DeleteBucketPolicy",
            "LifecycleConfiguration" => "DeleteBucketLifecycle", "Cors" => "DeleteBucketCors",
            "PublicAccessBlock" => "DeletePublicAccessBlock"; "DeleteBucket"),
        _ => "Other",
    }
    .replace_copy(copy)
}

trait ReplaceCopy {
    fn replace_copy(self, copy: bool) -> &'static str;
}

impl ReplaceCopy for &'static str {
    /// `PutObject_or_copy` is `CopyObject` with a copy source, else `PutObject`.
    fn replace_copy(self, copy: bool) -> &'static str {
        match (self, copy) {
            ("PutObject_or_copy", true) => "CopyObject",
            ("PutObject_or_copy", false) => "PutObject",
            (other, _) => other,
        }
    }
}

/// The response with its body wrapped so that the request is recorded when the body ends (or is dropped: a
/// client that went away), with the time of the first body byte.
pub(crate) fn timed(
    response: Response<Body>,
    metrics: Metrics,
    operation: &'static str,
    started: Instant,
    witness: Arc<WakeWitness>,
) -> Response<Body> {
    let status = response.status().as_u16();
    response.map(|body| {
        let empty = body.size_hint().exact() == Some(0);
        Body::http_body(Timed {
            inner: body,
            record: Some(Record {
                metrics,
                operation,
                status,
                started,
                witness,
                first_byte: if empty { None } else { Some(None) },
            }),
        })
    })
}

struct Record {
    metrics: Metrics,
    operation: &'static str,
    status: u16,
    started: Instant,
    witness: Arc<WakeWitness>,
    /// `None`: the response has no body; `Some(None)`: no byte yet.
    first_byte: Option<Option<f64>>,
}

impl Record {
    fn finish(self) {
        let seconds = self.started.elapsed().as_secs_f64();
        // A body that ended without a byte (an empty GET) is ready at its end.
        let first_byte = self.first_byte.map(|f| f.unwrap_or(seconds));
        self.metrics.observe_request(
            self.operation,
            self.status,
            self.witness.needed_spin_up(),
            seconds,
            first_byte,
        );
    }
}

struct Timed {
    inner: Body,
    record: Option<Record>,
}

impl http_body::Body for Timed {
    type Data = Bytes;
    type Error = StdError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, StdError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) if frame.is_data() => {
                if let Some(record) = self.record.as_mut() {
                    if let Some(first @ None) = record.first_byte.as_mut() {
                        *first = Some(record.started.elapsed().as_secs_f64());
                    }
                }
            }
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => {
                if let Some(record) = self.record.take() {
                    record.finish();
                }
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Timed {
    fn drop(&mut self) {
        if let Some(record) = self.record.take() {
            record.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(method: Method, uri: &str, copy: bool) -> &'static str {
        let mut headers = HeaderMap::new();
        if copy {
            headers.insert("x-amz-copy-source", "b/k".parse().unwrap());
        }
        operation(&method, &uri.parse().unwrap(), &headers)
    }

    #[test]
    fn operations_are_named_from_method_path_and_query() {
        assert_eq!(op(Method::GET, "/", false), "ListBuckets");
        assert_eq!(op(Method::GET, "/b/k/x.bin", false), "GetObject");
        assert_eq!(op(Method::HEAD, "/b/k", false), "HeadObject");
        assert_eq!(op(Method::PUT, "/b/k", false), "PutObject");
        assert_eq!(op(Method::PUT, "/b/k", true), "CopyObject");
        assert_eq!(
            op(Method::PUT, "/b/k?partNumber=1&uploadId=x", false),
            "UploadPart"
        );
        assert_eq!(
            op(Method::PUT, "/b/k?partNumber=1&uploadId=x", true),
            "UploadPartCopy"
        );
        assert_eq!(
            op(Method::POST, "/b/k?uploads", false),
            "CreateMultipartUpload"
        );
        assert_eq!(
            op(Method::POST, "/b/k?uploadId=x", false),
            "CompleteMultipartUpload"
        );
        assert_eq!(
            op(Method::DELETE, "/b/k?uploadId=x", false),
            "AbortMultipartUpload"
        );
        assert_eq!(
            op(Method::GET, "/b?list-type=2&prefix=a", false),
            "ListObjectsV2"
        );
        assert_eq!(op(Method::GET, "/b", false), "ListObjects");
        assert_eq!(op(Method::GET, "/b/k?tagging", false), "GetObjectTagging");
        assert_eq!(
            op(Method::PUT, "/b?versioning", false),
            "PutBucketVersioning"
        );
        assert_eq!(op(Method::POST, "/b?delete", false), "DeleteObjects");
        assert_eq!(op(Method::PUT, "/b", false), "CreateBucket");
        assert_eq!(op(Method::PATCH, "/b", false), "Other");
    }
}
