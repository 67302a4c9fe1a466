//! A real server (hyper + s3s over a store on small sparse disks): the admin API under `/_permafrost/` (signed
//! requests work, unsigned and wrongly signed ones get S3's 403, unknown paths 404, no bucket can take the
//! reserved name) and HTTP details clients depend on.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use permafrost_disk::power::PowerProfile;
use permafrost_s3::Credentials;
use permafrost_store::{GridSetup, Store, StoreConfig};
use rusty_s3::actions::{CreateBucket, GetObject, HeadObject, PutObject};
use rusty_s3::{Bucket, Method, S3Action, UrlStyle};
use url::Url;

const ACCESS_KEY: &str = "ADMINTESTKEY";
const SECRET_KEY: &str = "admin-test-secret-0123456789";
const REGION: &str = "us-east-1";
const VALID: Duration = Duration::from_secs(600);

struct Server {
    endpoint: Url,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    runtime: Option<tokio::runtime::Runtime>,
    agent: ureq::Agent,
    _dir: tempfile::TempDir,
}

fn config() -> StoreConfig {
    StoreConfig {
        cache_bytes_max: 256 << 20,
        extent_bytes_max: 4 << 20,
        pack_threshold_bytes: 256 << 10,
        chunk_bytes: 256 << 10,
        fsync: false,
        gc_grace_ms: 3_600_000,
        grid: GridSetup {
            layout: "4x4:2+1".into(),
            disk_capacity_bytes: 96 << 20,
            spinning_max: 16,
            ..GridSetup::default()
        },
        power_profile: Some(PowerProfile::for_tests()),
        ..StoreConfig::default()
    }
}

impl Server {
    fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), config()).unwrap());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let endpoint: Url = format!("http://{}", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let credentials = Credentials {
            access_key: ACCESS_KEY.into(),
            secret_key: SECRET_KEY.into(),
        };
        runtime.spawn(permafrost_s3::serve(listener, store, credentials, async {
            let _ = rx.await;
        }));
        Server {
            endpoint,
            shutdown: Some(tx),
            runtime: Some(runtime),
            agent: ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(60))
                .build(),
            _dir: dir,
        }
    }

    /// A presigned URL of `path` (and `query`) for `method`, signed with `secret`.
    fn signed(&self, method: Method, path: &str, query: &[(&str, &str)], secret: &str) -> Url {
        let mut url = self.endpoint.clone();
        url.set_path(path);
        rusty_s3::signing::sign(
            &jiff::Timestamp::now(),
            method,
            url,
            ACCESS_KEY,
            secret,
            None,
            REGION,
            VALID.as_secs(),
            query.iter().copied(),
            std::iter::empty(),
        )
    }

    fn bucket(&self, name: &str) -> Bucket {
        Bucket::new(
            self.endpoint.clone(),
            UrlStyle::Path,
            name.to_string(),
            REGION.to_string(),
        )
        .unwrap()
    }

    fn credentials() -> rusty_s3::Credentials {
        rusty_s3::Credentials::new(ACCESS_KEY, SECRET_KEY)
    }

    /// Send; `(status, content type, body)` whatever the status.
    fn send(&self, method: &str, url: &Url, body: &[u8]) -> (u16, String, String) {
        let result = self.agent.request_url(method, url).send_bytes(body);
        let response = match result {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{method} {url}: {e}"),
        };
        let status = response.status();
        let content_type = response.content_type().to_string();
        let text = response.into_string().unwrap();
        (status, content_type, text)
    }

    fn json(&self, method: Method, path: &str, query: &[(&str, &str)]) -> serde_json::Value {
        let url = self.signed(method, path, query, SECRET_KEY);
        let (status, content_type, text) = self.send(method.to_str(), &url, b"");
        assert_eq!(status, 200, "{path}: {text}");
        assert_eq!(content_type, "application/json", "{path}");
        serde_json::from_str(&text).unwrap()
    }

    fn put(&self, bucket: &str, key: &str, body: &[u8]) {
        let url = PutObject::new(&self.bucket(bucket), Some(&Self::credentials()), key).sign(VALID);
        let (status, _, text) = self.send("PUT", &url, body);
        assert_eq!(status, 200, "put {bucket}/{key}: {text}");
    }

    /// GET `bucket/key`: the status, the `Content-Length` announced and the bytes received (reading stops at
    /// the first error: a cut body is shorter than its `Content-Length`).
    fn get(&self, bucket: &str, key: &str) -> (u16, Option<usize>, Vec<u8>) {
        let url = GetObject::new(&self.bucket(bucket), Some(&Self::credentials()), key).sign(VALID);
        let response = match self.agent.request_url("GET", &url).call() {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("GET {url}: {e}"),
        };
        let status = response.status();
        let length = response
            .header("content-length")
            .and_then(|v| v.parse().ok());
        let mut body = Vec::new();
        let mut reader = response.into_reader();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match reader.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => body.extend_from_slice(&buf[..n]),
            }
        }
        (status, length, body)
    }

    /// The only file in the cache's `contents/` directory.
    fn only_cache_file(&self) -> std::path::PathBuf {
        let mut files: Vec<_> = std::fs::read_dir(self._dir.path().join("cache/contents"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        files.pop().unwrap()
    }

    fn make_bucket(&self, bucket: &str) -> (u16, String) {
        let url = CreateBucket::new(&self.bucket(bucket), &Self::credentials()).sign(VALID);
        let (status, _, text) = self.send("PUT", &url, b"");
        (status, text)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(10));
        }
    }
}

#[test]
fn health_answers_without_a_signature() {
    let server = Server::start();
    let url = server.endpoint.join("/_permafrost/health").unwrap();
    let (status, content_type, text) = server.send("GET", &url, b"");
    assert_eq!((status, content_type.as_str()), (200, "application/json"));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&text).unwrap(),
        serde_json::json!({"status": "ok"})
    );
}

#[test]
fn signed_admin_requests_persist_evict_collect_and_report_status() {
    let server = Server::start();
    assert_eq!(server.make_bucket("data").0, 200);
    let body = vec![7u8; 300 << 10];
    server.put("data", "a/one.bin", &body);

    let before = server.json(Method::Get, "/_permafrost/status", &[]);
    assert_eq!(before["objects"], 1);
    assert_eq!(before["buckets"], 1);
    assert_eq!(before["disks"]["total"], 16);
    assert!(before["cache_used_bytes"].as_u64().unwrap() > 0);
    assert!(before["detail"]["engine"]["disks"][0]["power"]["spin_ups"].is_u64());
    assert!(before["detail"]["catalog"]["contents_by_state"].is_array());

    assert_eq!(
        server.json(Method::Post, "/_permafrost/persist", &[]),
        serde_json::json!({"persisted": true})
    );
    let after = server.json(Method::Get, "/_permafrost/status", &[]);
    let persisted = after["contents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["state"] == "persisted")
        .expect("a persisted content");
    assert_eq!(persisted["contents"], 1);

    // HEAD shows the state and the grid bucket the content went to.
    let url = HeadObject::new(
        &server.bucket("data"),
        Some(&Server::credentials()),
        "a/one.bin",
    )
    .sign(VALID);
    let head = server.agent.request_url("HEAD", &url).call().unwrap();
    assert_eq!(head.header(permafrost_s3::STATE_HEADER), Some("persisted"));
    let grid_bucket: u32 = head
        .header(permafrost_s3::GRID_BUCKET_HEADER)
        .expect("the grid bucket header")
        .parse()
        .unwrap();
    assert!(grid_bucket < 8);

    let evicted = server.json(Method::Post, "/_permafrost/cache/evict", &[]);
    assert!(evicted["evicted_bytes"].as_u64().unwrap() > 0, "{evicted}");

    // Overwrite: the old content is unreferenced; gc with ignore_grace frees it.
    server.put("data", "a/one.bin", b"new");
    let gc = server.json(Method::Post, "/_permafrost/gc", &[("ignore_grace", "true")]);
    assert_eq!(gc["contents_removed"], 1, "{gc}");
    assert!(gc["freed_bytes"].as_u64().unwrap() > 0, "{gc}");
}

#[test]
fn unsigned_and_wrongly_signed_admin_requests_are_refused_with_403() {
    let server = Server::start();
    for path in [
        "/_permafrost/status",
        "/_permafrost/persist",
        "/_permafrost/nothing",
    ] {
        let url = server.endpoint.join(path).unwrap();
        let (status, _, text) = server.send("GET", &url, b"");
        if path == "/_permafrost/nothing" {
            assert_eq!(
                status, 404,
                "unsigned {path}: not an endpoint, nothing to protect: {text}"
            );
        } else {
            assert_eq!(status, 403, "unsigned {path}: {text}");
            assert!(text.contains("AccessDenied"), "{text}");
        }

        let url = server.signed(Method::Get, path, &[], "not-the-secret-key-000");
        let (status, _, text) = server.send("GET", &url, b"");
        assert_eq!(status, 403, "wrong signature {path}: {text}");
        assert!(text.contains("SignatureDoesNotMatch"), "{text}");
    }
}

#[test]
fn unknown_admin_paths_are_404_and_wrong_methods_405_in_json() {
    let server = Server::start();
    let url = server.signed(Method::Get, "/_permafrost/nothing/here", &[], SECRET_KEY);
    let (status, content_type, text) = server.send("GET", &url, b"");
    assert_eq!((status, content_type.as_str()), (404, "application/json"));
    assert!(serde_json::from_str::<serde_json::Value>(&text).is_ok());

    let url = server.signed(Method::Get, "/_permafrost/persist", &[], SECRET_KEY);
    let (status, content_type, _) = server.send("GET", &url, b"");
    assert_eq!((status, content_type.as_str()), (405, "application/json"));

    let url = server.signed(Method::Put, "/_permafrost/some-key", &[], SECRET_KEY);
    let (status, _, _) = server.send("PUT", &url, b"data");
    assert_eq!(
        status, 404,
        "an object can never be put under the reserved prefix"
    );
}

#[test]
fn a_bucket_named_like_the_reserved_prefix_cannot_be_created() {
    let server = Server::start();
    let (status, text) = server.make_bucket("_permafrost");
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("InvalidBucketName"), "{text}");
    let (status, text) = server.make_bucket("Not_Valid");
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("InvalidBucketName"), "{text}");
    assert!(
        text.contains("Not_Valid"),
        "the error names the bad name: {text}"
    );
}

#[test]
fn a_request_on_a_bucket_name_no_bucket_can_have_is_no_such_bucket_naming_it() {
    let server = Server::start();
    let (status, text) = server.make_bucket("b");
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("InvalidBucketName") && text.contains("invalid bucket name b:"),
        "{text}"
    );
    let url = server.signed(Method::Post, "/b/key", &[("uploads", "")], SECRET_KEY);
    let (status, _, text) = server.send("POST", &url, b"");
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("NoSuchBucket"), "{text}");
    assert!(
        text.contains("<Message>no such bucket: b</Message>"),
        "{text}"
    );
}

#[test]
fn an_expect_continue_request_answered_without_100_closes_its_connection() {
    let server = Server::start();
    assert_eq!(server.make_bucket("data").0, 200);
    let url = PutObject::new(
        &server.bucket("data"),
        Some(&Server::credentials()),
        "empty",
    )
    .sign(VALID);
    let target = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_string(),
    };
    let address = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap());
    let mut stream = std::net::TcpStream::connect(&address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "PUT {target} HTTP/1.1\r\nHost: {address}\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    // The server answers and closes: read to the end.
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let lower = answer.to_ascii_lowercase();
    assert!(lower.starts_with("http/1.1 200"), "{answer}");
    assert!(!lower.contains("100 continue"), "{answer}");
    assert!(lower.contains("connection: close"), "{answer}");
}

#[test]
fn an_ordinary_request_keeps_its_connection_open() {
    let server = Server::start();
    let url = server.endpoint.join("/_permafrost/health").unwrap();
    let address = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap());
    let mut stream = std::net::TcpStream::connect(&address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    for _ in 0..2 {
        write!(
            stream,
            "GET /_permafrost/health HTTP/1.1\r\nHost: {address}\r\n\r\n"
        )
        .unwrap();
        let mut buf = [0u8; 4096];
        let n = stream.read(&mut buf).unwrap();
        let answer = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
        assert!(answer.starts_with("http/1.1 200"), "{answer}");
        assert!(!answer.contains("connection: close"), "{answer}");
    }
}

/// Incompressible bytes (stored raw: the cache file holds them as sent).
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[test]
fn get_bodies_read_whole_or_streamed_in_pieces_are_byte_exact() {
    let server = Server::start();
    assert_eq!(server.make_bucket("data").0, 200);
    let small = permafrost_s3::SMALL_BODY_BYTES as usize;
    let piece = permafrost_s3::READ_PIECE_BYTES;
    for (i, len) in [
        0,
        1,
        100_000,
        small,
        small + 1,
        4 * piece,
        3 * piece + 17,
        (3 << 20) + 5,
    ]
    .into_iter()
    .enumerate()
    {
        let body = noise(i as u64, len);
        let key = format!("k{len}");
        server.put("data", &key, &body);
        let (status, length, got) = server.get("data", &key);
        assert_eq!(status, 200, "{len} bytes");
        assert_eq!(length, Some(len));
        assert!(
            got == body,
            "{len} bytes: got {} bytes, not the same",
            got.len()
        );
    }
}

#[test]
fn a_damaged_small_object_is_an_error_answer_not_its_bytes() {
    let server = Server::start();
    assert_eq!(server.make_bucket("data").0, 200);
    // Larger than the catalog's inline limit (a cache file), small enough to be read whole before answering.
    let body = noise(7, 100_000);
    server.put("data", "k", &body);
    let file = server.only_cache_file();
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[50_000] ^= 1;
    std::fs::write(&file, bytes).unwrap();
    let (status, _, got) = server.get("data", "k");
    assert_eq!(status, 500, "{}", String::from_utf8_lossy(&got));
}

#[test]
fn a_damaged_large_object_never_arrives_whole() {
    // The damage is found only at the end (the object's BLAKE3): the last piece is withheld, so the client never
    // receives the complete length; also when the length is an exact number of pieces.
    for (seed, len, at) in [
        (1, 4 * permafrost_s3::READ_PIECE_BYTES, 10),
        (2, 4 * permafrost_s3::READ_PIECE_BYTES, usize::MAX),
        (3, (1 << 20) + 12_345, usize::MAX),
    ] {
        let server = Server::start();
        assert_eq!(server.make_bucket("data").0, 200);
        let body = noise(seed, len);
        server.put("data", "k", &body);
        let file = server.only_cache_file();
        let mut bytes = std::fs::read(&file).unwrap();
        let at = at.min(bytes.len() - 1);
        bytes[at] ^= 0x80;
        std::fs::write(&file, bytes).unwrap();
        let (status, length, got) = server.get("data", "k");
        assert_eq!(status, 200);
        assert_eq!(length, Some(len));
        assert!(
            got.len() < len,
            "damaged byte {at} of {len}: the whole body arrived"
        );
        assert!(got[..] == body[..got.len()] || at < got.len());
    }
}
