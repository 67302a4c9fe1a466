//! # permafrost-s3: the S3 API of permafrost
//!
//! **Job.** Speak S3 over HTTP to unmodified clients (boto3, the AWS CLI, rclone, SDKs) on top of the blocking
//! object store (`permafrost-store`, `docs/store.md`). The protocol (request parsing, XML, AWS Signature V4 in
//! headers, presigned URLs and `aws-chunked` bodies) is the `s3s` crate's; this crate maps S3 operations to the
//! store, one module per family of operations: [`bucket`](crate) (ListBuckets, CreateBucket, DeleteBucket,
//! HeadBucket, GetBucketLocation), `put`, `get` (GetObject with ranges and `partNumber`, HeadObject,
//! GetObjectAttributes with paged parts; `x-amz-delete-marker` on reads that meet a delete marker), `list`
//! (ListObjectsV2, ListObjects), `multipart` (a completion retried after success is answered again), `copy`
//! (CopyObject, UploadPartCopy), `delete` (DeleteObject, DeleteObjects), `versioning` (Get/PutBucketVersioning,
//! ListObjectVersions), `tagging`, `lock` (Object Lock), `lifecycle`,
//! `restore` (RestoreObject), `acl` (ACLs, bucket policies, Block Public Access), `cors` (CORS configurations,
//! preflights and the CORS headers of answers), `post_object` (HTML form uploads with V4 POST policies); `auth`
//! checks every signature and decides every operation for its signer (`permafrost-access`, docs/security.md); store errors
//! become S3 errors in one place (`error`), trailing checksums are checked in `checksum`, and `bridge` moves bodies between the
//! async server and the blocking store. What versions, Object Lock, lifecycle, storage classes and restores
//! mean here is in docs/archive.md.
//!
//! **Guarantees.**
//! - A PUT (or part, or completion) is answered `200` only after the store acknowledged it durable; a request
//!   that fails or is cut off (bad signature, wrong `Content-MD5`/`x-amz-checksum-*`, client gone, server
//!   killed) leaves nothing visible.
//! - Memory per request is bounded: bodies move in pieces through channels of [`BODY_PIECES_IN_FLIGHT`]
//!   entries (GET pieces are [`READ_PIECE_BYTES`]); a 10 GiB object never sits in RAM. Bodies up to
//!   [`SMALL_UPLOAD_BYTES`] (PUT, known length) and [`SMALL_BODY_BYTES`] (GET) are held whole instead: one
//!   blocking call each, no thread or channel per request.
//! - A GET never delivers the complete length of bytes that fail verification: a small body is read and
//!   verified before the answer (a failure is a `500`); a streamed body withholds its last piece until the
//!   reader's end checks (the object's BLAKE3) passed, so a failure leaves the client with a short body.
//! - `503 SlowDown` when the write-back cache stays full for the store's `cache_wait_ms_max`.
//! - HEAD, LIST, DELETE and COPY touch only the catalog (no disk spins up).
//! - HEAD and GET show the persistence state (`cached`, `placed`, `persisting`, `persisted`) in the response
//!   header [`STATE_HEADER`] (`x-permafrost-state`; not an `x-amz-meta-*` header, so it never leaks into user
//!   metadata when a client copies an object's metadata).
//! - Once an object's grid bucket is chosen, HEAD and GET show it in [`GRID_BUCKET_HEADER`]
//!   (`x-permafrost-grid-bucket`); they always show the stored size (after compression) in
//!   [`STORED_BYTES_HEADER`] (`x-permafrost-stored-bytes`).
//! - Paths under [`RESERVED_PREFIX`] (`/_permafrost/`) are the service's own admin API (`admin`: status,
//!   persist, cache eviction, garbage collection, bucket settings), signed like S3 requests; `GET /_permafrost/health`
//!   answers `200 {"status":"ok"}` without authentication. No bucket can be named `_permafrost`.
//! - Every answer carries `x-amz-request-id` (16 hex digits, unique per request) and `x-amz-id-2`; S3 error
//!   bodies carry them as `<RequestId>` and `<HostId>` (`server`). Every request is one log line naming the
//!   operation, bucket, key, status, S3 code, request id and access key, with the message unescaped, never the
//!   query string (a presigned URL's signature is there): reads that succeed and probes that find nothing at
//!   debug, changes at info (the audit trail), failures at info (4xx) or error (5xx) (`docs/admin.md`, "Logs").
//! - Store errors become S3 errors in one place (`error`), by variant: the catalog database gone is
//!   `503 ServiceUnavailable`, a retry may succeed.
//! - Conditional requests as S3 answers them (`conditional`): GET and HEAD decide `If-Match`, `If-None-Match`,
//!   `If-Modified-Since` and `If-Unmodified-Since` from the catalog (`304`/`412`; no disk wakes), copies the
//!   `x-amz-copy-source-if-*` headers; `If-None-Match: *` and `If-Match` on PutObject, CompleteMultipartUpload
//!   and CopyObject are checked in the catalog transaction that makes the version current, so of two racing
//!   creates exactly one succeeds.
//! - Every request that may change something, and every refusal, is one audit line and one `request` event
//!   naming its signer (`server`).
//! - Conditional writes hold cluster-wide: in a cluster the node checks the condition in its own catalog at the
//!   commit and again against the shared directory in the transaction that publishes the write
//!   (`cluster::NodeAnswers::publish_written`); a write the directory refuses is undone on its node and answered
//!   `412` (`404` for `If-Match` on a key no node holds), so of two creates of one key through different nodes
//!   exactly one succeeds. A node that crashes between the local commit and the publish publishes the write at
//!   its restart's reconcile without the condition (docs/cluster.md, "Conditional writes").
//!
//! **Pre-compressed objects.** A PUT with `Content-Encoding: zstd` (or `lz4`) and
//! `x-amz-meta-permafrost-decoded-length: N` is stored as sent. A GET whose `Accept-Encoding` names that
//! encoding gets the stored bytes with `Content-Encoding`; any other GET gets the decoded bytes, and ranges
//! apply to the representation returned.
//!
//! **Browsers.** A CORS preflight (`OPTIONS`) is answered from the bucket's CORS rules without a signature,
//! and answers to allowed origins carry the CORS headers (`cors`); an HTML form upload's V4 POST policy is
//! checked as AWS checks it and the upload is a PutObject with the signer's rights (`post_object`;
//! docs/archive.md).
//!
//! **Not here.** Virtual-hosted-style addressing (path style only), who may do what (`permafrost-access`
//! decides; this crate asks), storage-class transitions, SELECT. Signature V2 (headers, presigned URLs, forms
//! as boto3 signs them) is checked by s3s like V4.

#![forbid(unsafe_code)]

mod acl;
mod admin;
mod archive_api;
mod auth;
mod bridge;
mod bucket;
mod checksum;
mod cluster;
mod common;
mod conditional;
mod copy;
mod cors;
mod delete;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod get;
mod lifecycle;
mod list;
mod lock;
mod metrics;
mod multipart;
mod parity;
mod post_object;
mod put;
mod restore;
mod server;
mod service;
mod tagging;
mod versioning;

pub use admin::{
    BUCKETS_PREFIX, EVICT_PATH, GC_PATH, HEALTH_PATH, PERSIST_PATH, READY_PATH, RESERVED_PREFIX,
    STATUS_PATH,
};
pub use archive_api::{add_archive_endpoints, DATASETS_PATH, RESTORES_PATH};
pub use auth::Credentials;
pub use bridge::{BODY_PIECES_IN_FLIGHT, READ_PIECE_BYTES, SMALL_UPLOAD_BYTES};
pub use cluster::FORWARDED_HEADER;
pub use common::{GRID_BUCKET_HEADER, STATE_HEADER, STORED_BYTES_HEADER};
pub use get::SMALL_BODY_BYTES;
pub use post_object::POST_OBJECT_BYTES_MAX;
pub use server::{s3_service, s3_service_in, serve, serve_admin, serve_node, DRAIN_TIMEOUT_MS};
