//! Whole S3 requests through s3s, as the server's front end receives them: method, path, query, headers and
//! body from the fuzzer, with the headers that drive parsing (SigV4 `Authorization` and presigned query
//! parameters, `x-amz-date`, `x-amz-content-sha256`, `Content-Type` of a POST form, `Range`, conditional
//! headers, `x-amz-copy-source`, checksums, tagging) picked often. Every operation's XML body, form and
//! header parser runs behind it (access is granted to anyone, so parsing is reached without a signature).
//! Never a panic, and every request is answered.
#![no_main]
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use futures::StreamExt;
use libfuzzer_sys::fuzz_target;
use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::SimpleAuth;
use s3s::dto::{PutObjectInput, PutObjectOutput, UploadPartInput, UploadPartOutput};
use s3s::service::{S3Service, S3ServiceBuilder};
use s3s::{S3Request, S3Response, S3Result, S3};

const BODY_READ_MAX: usize = 1 << 20;

struct Sink;

async fn drain(body: Option<s3s::dto::StreamingBlob>) {
    let Some(mut body) = body else { return };
    let mut read = 0;
    while let Some(piece) = body.next().await {
        match piece {
            Ok(b) => read += b.len(),
            Err(_) => return,
        }
        if read > BODY_READ_MAX {
            return;
        }
    }
}

#[async_trait::async_trait]
impl S3 for Sink {
    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        drain(req.input.body).await;
        Ok(S3Response::new(PutObjectOutput::default()))
    }
    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        drain(req.input.body).await;
        Ok(S3Response::new(UploadPartOutput::default()))
    }
}

struct Anyone;

#[async_trait::async_trait]
impl S3Access for Anyone {
    async fn check(&self, _cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        Ok(())
    }
}

fn service() -> &'static (tokio::runtime::Runtime, S3Service) {
    static SERVICE: OnceLock<(tokio::runtime::Runtime, S3Service)> = OnceLock::new();
    SERVICE.get_or_init(|| {
        let mut b = S3ServiceBuilder::new(Sink);
        b.set_auth(SimpleAuth::from_single("AKIAFUZZ", "fuzz-secret-key"));
        b.set_access(Anyone);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        (rt, b.build())
    })
}

const METHODS: [&str; 6] = ["GET", "PUT", "POST", "DELETE", "HEAD", "OPTIONS"];
const NAMES: [&str; 28] = [
    "authorization",
    "x-amz-date",
    "x-amz-content-sha256",
    "content-type",
    "content-length",
    "content-md5",
    "content-encoding",
    "range",
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
    "x-amz-copy-source",
    "x-amz-copy-source-range",
    "x-amz-decoded-content-length",
    "x-amz-trailer",
    "x-amz-checksum-crc32",
    "x-amz-checksum-sha256",
    "x-amz-tagging",
    "x-amz-grant-read",
    "x-amz-acl",
    "x-amz-object-lock-mode",
    "x-amz-object-lock-retain-until-date",
    "x-amz-bypass-governance-retention",
    "x-amz-meta-note",
    "x-amz-storage-class",
    "expires",
    "host",
];
const QUERIES: [&str; 12] = [
    "",
    "uploads",
    "uploadId=u&partNumber=1",
    "delete",
    "tagging",
    "acl",
    "lifecycle",
    "cors",
    "object-lock",
    "retention",
    "restore",
    "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAFUZZ%2F20260101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20260101T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host&X-Amz-Signature=",
];

#[derive(Debug, Arbitrary)]
enum Name {
    Known(u8),
    Other(String),
}

#[derive(Debug, Arbitrary)]
struct Request {
    method: u8,
    path: String,
    query_kind: u8,
    query: String,
    headers: Vec<(Name, Vec<u8>)>,
    body: Vec<u8>,
}

fuzz_target!(|r: Request| {
    let mut uri = format!("/{}", r.path.trim_start_matches('/'));
    let fixed = QUERIES[usize::from(r.query_kind) % QUERIES.len()];
    if !fixed.is_empty() || !r.query.is_empty() {
        uri.push('?');
        uri.push_str(fixed);
        uri.push_str(&r.query);
    }
    let mut builder = http::Request::builder()
        .method(METHODS[usize::from(r.method) % METHODS.len()])
        .uri(uri);
    for (name, value) in r.headers.iter().take(24) {
        let name = match name {
            Name::Known(i) => NAMES[usize::from(*i) % NAMES.len()].to_string(),
            Name::Other(s) => s.clone(),
        };
        let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(name.as_bytes()),
            http::HeaderValue::from_bytes(value),
        ) else {
            continue;
        };
        builder = builder.header(name, value);
    }
    let Ok(request) = builder.body(s3s::Body::from(bytes::Bytes::from(r.body))) else {
        return;
    };
    let (rt, service) = service();
    if let Ok(response) = rt.block_on(service.call(request)) {
        assert!(response.status().as_u16() >= 100);
    }
});
