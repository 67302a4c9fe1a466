//! Objects from the command line: the real `permafrost` binary against a data directory (put/get/ls/rm/stat,
//! mb/rb, status, verify, salvage, and the errors people meet). The data directory carries a `permafrost.toml`
//! with a small grid (4x4:2+1 on 96 MiB sparse disks), millisecond power timings (`PowerProfile::for_tests()`)
//! and a watchdog that never fires on its own, so states only change when a test asks.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use rand::{RngCore, SeedableRng};
use serde_json::Value;

const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"

[store]
cache_bytes_max = 268435456
cache_wait_ms_max = 2000
pack_threshold_bytes = 262144
extent_bytes_max = 4194304
chunk_bytes = 262144
gc_grace_ms = 3600000
gc_interval_ms = 3600000
persist_batch_bytes_max = 67108864
fsync = false

[store.watchdog]
interval_ms = 50
max_age_ms = 1000000000000000
start_off_disk_above_bytes = 1000000000000000
persist_spinning_above_bytes = 1000000000000000
pressure_fill_percent = 100.0
persist_under_pressure_above_bytes = 1000000000000000

[store.grid]
layout = "4x4:2+1"
disk_capacity_bytes = 100663296
spinning_max = 16

[store.power_profile]
spin_up_ms = 20
idle_timeout_ms = 100
"#;

/// A fresh data directory with the test configuration.
struct Archive {
    dir: tempfile::TempDir,
}

impl Archive {
    fn new() -> Archive {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("data")).unwrap();
        std::fs::write(dir.path().join("data/permafrost.toml"), CONFIG).unwrap();
        Archive { dir }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Run `permafrost ARGS --data-dir DATA`, with `stdin` as standard input.
    fn run_with(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_permafrost"));
        command
            .args(args)
            .arg("--data-dir")
            .arg(self.data())
            .env_remove("PERMAFROST_ENDPOINT")
            .env_remove("PERMAFROST_ROOT_USER")
            .env_remove("PERMAFROST_ROOT_PASSWORD")
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn permafrost");
        if let Some(bytes) = stdin {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(bytes).unwrap();
        }
        child.wait_with_output().unwrap()
    }

    fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, None)
    }

    /// Run and require success; returns stdout.
    fn ok(&self, args: &[&str]) -> Vec<u8> {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "permafrost {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// Run with --json and parse stdout.
    fn json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.push("--json");
        serde_json::from_slice(&self.ok(&args)).expect("--json prints JSON")
    }

    /// Run and require failure; returns stderr.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(!out.status.success(), "permafrost {args:?} should fail");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// Write `body` to a file and put it at `destination`.
    fn put(&self, body: &[u8], destination: &str, extra: &[&str]) -> Value {
        let file = self.path(&format!("upload-{}", destination.replace('/', "_")));
        std::fs::write(&file, body).unwrap();
        let mut args = vec!["put", file.to_str().unwrap(), destination];
        args.extend_from_slice(extra);
        self.json(&args)
    }
}

fn data(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut out = vec![0u8; len];
    rng.fill_bytes(&mut out);
    out
}

/// The object is in the cache, not yet persisted (the persistence manager may already have chosen its grid
/// bucket: `placed`).
fn waiting(stat: &Value) -> bool {
    stat["state"] == "cached" || stat["state"] == "placed"
}

fn keys(listing: &Value) -> Vec<String> {
    listing["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["key"].as_str().unwrap().to_string())
        .collect()
}

fn prefixes(listing: &Value) -> Vec<String> {
    listing["prefixes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn put_then_get_round_trips_byte_exact() {
    let a = Archive::new();
    a.ok(&["mb", "photos"]);
    let body = data(1, 3_000_000);
    let put = a.put(&body, "s3://photos/2024/big.bin", &[]);
    assert_eq!(put["size_bytes"], 3_000_000);
    assert!(waiting(&put), "{put}");

    let out = a.path("big.out");
    a.ok(&["get", "photos/2024/big.bin", out.to_str().unwrap()]);
    assert_eq!(std::fs::read(&out).unwrap(), body, "get into a file");
    assert!(!a.path("big.out.permafrost-partial").exists());
    assert_eq!(
        a.ok(&["get", "photos/2024/big.bin", "-"]),
        body,
        "get to stdout"
    );
    assert_eq!(
        a.ok(&["get", "photos/2024/big.bin", "-", "--range", "1000-1999"]),
        &body[1000..2000]
    );
    assert_eq!(
        a.ok(&["get", "photos/2024/big.bin", "-", "--range", "-10"]),
        &body[body.len() - 10..]
    );

    // From standard input, and read back after it is persisted and evicted-by-restart (a new process).
    let small = data(2, 10_000);
    let out = a.run_with(
        &[
            "put",
            "-",
            "photos/2024/small.bin",
            "--wait-persisted",
            "--json",
        ],
        Some(&small),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stat: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stat["state"], "persisted");
    assert_eq!(a.ok(&["get", "photos/2024/small.bin", "-"]), small);
    assert_eq!(
        a.ok(&["get", "photos/2024/big.bin", "-"]),
        body,
        "persisted with the other"
    );
}

#[test]
fn precompressed_put_is_stored_as_sent_and_read_back_decoded() {
    let a = Archive::new();
    a.ok(&["mb", "logs"]);
    let plain: Vec<u8> = (0..200_000u32)
        .flat_map(|i| format!("line {i}\n").into_bytes())
        .collect();
    let packed = zstd::encode_all(&plain[..], 3).unwrap();
    let len = plain.len().to_string();
    let put = a.put(
        &packed,
        "logs/day1.log",
        &["--content-encoding", "zstd", "--decoded-length", &len],
    );
    assert_eq!(
        put["stored_bytes"],
        packed.len() as u64,
        "stored exactly as sent"
    );
    assert_eq!(put["content_encoding"], "zstd");
    assert_eq!(a.ok(&["get", "logs/day1.log", "-"]), plain);
    let err = a.fails(&[
        "put",
        a.path("upload-logs_day1.log").to_str().unwrap(),
        "logs/x",
        "--content-encoding",
        "zstd",
    ]);
    assert!(err.contains("--decoded-length"), "{err}");
}

#[test]
fn ls_lists_buckets_keys_and_prefixes() {
    let a = Archive::new();
    a.ok(&["mb", "tree"]);
    a.ok(&["mb", "other"]);
    for key in ["a/1", "a/2", "a/b/3", "c"] {
        a.put(key.as_bytes(), &format!("tree/{key}"), &[]);
    }
    assert_eq!(
        a.json(&["ls"])["buckets"],
        serde_json::json!(["other", "tree"])
    );

    let top = a.json(&["ls", "tree"]);
    assert_eq!(keys(&top), ["c"]);
    assert_eq!(prefixes(&top), ["a/"]);

    let under_a = a.json(&["ls", "s3://tree/a/"]);
    assert_eq!(keys(&under_a), ["a/1", "a/2"]);
    assert_eq!(prefixes(&under_a), ["a/b/"]);

    let all = a.json(&["ls", "tree", "--recursive"]);
    assert_eq!(keys(&all), ["a/1", "a/2", "a/b/3", "c"]);
    assert!(prefixes(&all).is_empty());

    let text = String::from_utf8(a.ok(&["ls", "tree"])).unwrap();
    assert!(
        text.contains("PRE") && text.contains("a/") && text.contains(" c"),
        "{text}"
    );
    assert!(keys(&a.json(&["ls", "other"])).is_empty());
}

#[test]
fn rm_removes_a_key_and_missing_names_are_clear_errors() {
    let a = Archive::new();
    a.ok(&["mb", "bin"]);
    a.put(b"gone soon", "bin/k", &[]);
    a.ok(&["rm", "bin/k"]);
    assert!(keys(&a.json(&["ls", "bin", "-r"])).is_empty());

    let err = a.fails(&["stat", "bin/k"]);
    assert!(err.contains("no such key: bin/k"), "{err}");
    let err = a.fails(&["get", "bin/k", "-"]);
    assert!(err.contains("no such key: bin/k"), "{err}");
    let err = a.fails(&["rm", "bin/k"]);
    assert!(err.contains("no such key"), "{err}");
    let err = a.fails(&["get", "nobucket/k", "-"]);
    assert!(err.contains("no such bucket: nobucket"), "{err}");
    let err = a.fails(&["ls", "nobucket"]);
    assert!(err.contains("no such bucket: nobucket"), "{err}");
    let err = a.fails(&["get", "bin", "-"]);
    assert!(err.contains("names no key"), "{err}");
    assert!(!a.path("k").exists(), "a failed get leaves no file");

    a.put(b"x", "bin/keep", &[]);
    let err = a.fails(&["rb", "bin"]);
    assert!(err.contains("not empty"), "{err}");
    a.ok(&["rm", "bin/keep"]);
    a.ok(&["rb", "bin"]);
    assert_eq!(a.json(&["ls"])["buckets"], serde_json::json!([]));
}

#[test]
fn stat_shows_the_persistence_state_and_extents() {
    let a = Archive::new();
    a.ok(&["mb", "stt"]);
    let body = data(3, 5_000_000);
    a.put(&body, "stt/d/one", &["--meta", "owner=ana"]);
    let cached = a.json(&["stat", "stt/d/one"]);
    assert!(waiting(&cached), "{cached}");
    assert_eq!(cached["size_bytes"], 5_000_000);
    assert!(cached["etag"].as_str().unwrap().starts_with('"'));
    assert_eq!(
        cached["user_metadata"],
        serde_json::json!([["owner", "ana"]])
    );
    assert!(
        cached.get("extents").is_none(),
        "no extents before persistence"
    );

    a.put(&body, "stt/d/two", &["--wait-persisted"]);
    let persisted = a.json(&["stat", "stt/d/one"]);
    assert_eq!(
        persisted["state"], "persisted",
        "same content: persisted once for both keys"
    );
    let grid_bucket = persisted["grid_bucket"]
        .as_u64()
        .expect("a grid bucket once persisted");
    let extents = persisted["extents"].as_array().unwrap();
    assert!(extents.len() >= 2, "5 MB in 4 MiB extents: {extents:?}");
    assert!(extents.iter().all(|e| e["grid_bucket"] == grid_bucket));
    let stored: u64 = extents
        .iter()
        .map(|e| e["length_bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(stored, persisted["stored_bytes"].as_u64().unwrap());

    let text = String::from_utf8(a.ok(&["stat", "stt/d/one"])).unwrap();
    assert!(
        text.contains("persisted") && text.contains("grid bucket"),
        "{text}"
    );
}

#[test]
fn status_json_shows_cache_disks_and_waiting_bytes() {
    let a = Archive::new();
    a.ok(&["mb", "sts"]);
    let empty = a.json(&["status"]);
    assert_eq!(empty["disks"]["total"], 16);
    assert_eq!(empty["cache_capacity_bytes"], 256u64 << 20);
    assert_eq!(empty["cache_used_bytes"], 0);

    a.put(&data(4, 1_000_000), "sts/x", &[]);
    let status = a.json(&["status"]);
    let d = &status["disks"];
    let states: u64 = ["off", "spinning_up", "idle", "active"]
        .iter()
        .map(|s| d[*s].as_u64().unwrap())
        .sum();
    assert_eq!(states, 16, "every disk is in one power state: {d}");
    assert!(
        status["cache_used_bytes"].as_u64().unwrap() >= 1_000_000,
        "{status}"
    );
    assert!(status["waiting_bytes_per_grid_bucket"].is_array());
    assert!(status["energy_kwh"].as_f64().unwrap() >= 0.0);
    let in_state = |status: &Value, state: &str| {
        let counts = status["contents"].as_array().unwrap();
        let count = counts.iter().find(|c| c["state"] == state).unwrap();
        count["contents"].as_u64().unwrap()
    };
    assert_eq!(
        in_state(&status, "cached") + in_state(&status, "placed"),
        1,
        "{status}"
    );

    a.put(&data(5, 1000), "sts/y", &["--wait-persisted"]);
    let after = a.json(&["status"]);
    assert_eq!(
        after["waiting_bytes_per_grid_bucket"],
        serde_json::json!([]),
        "{after}"
    );
    assert_eq!(in_state(&after, "persisted"), 2, "{after}");
    let text = String::from_utf8(a.ok(&["status"])).unwrap();
    assert!(
        text.contains("disks") && text.contains("cache") && text.contains("kWh"),
        "{text}"
    );
}

#[test]
fn verify_passes_then_fails_after_a_cache_file_is_corrupted() {
    let a = Archive::new();
    a.ok(&["mb", "ver", "--compression", "none"]);
    a.put(&data(6, 300_000), "ver/good", &[]);
    a.put(&data(7, 400_000), "ver/bad", &[]);
    let report = a.json(&["verify"]);
    assert_eq!(report["objects_checked"], 2);
    assert_eq!(report["errors"], serde_json::json!([]));

    let stored = a.json(&["stat", "ver/bad"])["stored_bytes"]
        .as_u64()
        .unwrap();
    let file =
        find_file(&a.data().join("cache/contents"), stored).expect("the cache file of v/bad");
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[150_000] ^= 0x40;
    std::fs::write(&file, bytes).unwrap();

    let out = a.run(&["verify", "--json"]);
    assert!(
        !out.status.success(),
        "verify must fail on a corrupted object"
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let errors = report["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{report}");
    assert!(
        errors[0].as_str().unwrap().starts_with("ver/bad:"),
        "{report}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 of 2 objects"));
}

/// The file under `dir` of `len_bytes` bytes.
fn find_file(dir: &Path, len_bytes: u64) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()? {
        let path = entry.ok()?.path();
        if path.is_dir() {
            if let Some(found) = find_file(&path, len_bytes) {
                return Some(found);
            }
        } else if path.metadata().ok()?.len() == len_bytes {
            return Some(path);
        }
    }
    None
}

#[test]
fn salvage_without_the_catalog_recovers_every_object_byte_exact() {
    let a = Archive::new();
    a.ok(&["mb", "lost"]);
    let mut expected = Vec::new();
    for i in 0..12u64 {
        // Large (own extents) and small (packed) objects of one dataset.
        let len = if i % 4 == 0 {
            1_500_000
        } else {
            3_000 + i as usize * 1000
        };
        let key = format!("scan/obj{i}");
        expected.push((key.clone(), data(100 + i, len)));
    }
    for (key, body) in &expected {
        a.put(body, &format!("lost/{key}"), &[]);
    }
    a.put(b"last", "lost/scan/last", &["--wait-persisted"]);
    expected.push(("scan/last".into(), b"last".to_vec()));
    let grid_bucket = a.json(&["stat", "lost/scan/obj0"])["grid_bucket"]
        .as_u64()
        .unwrap();
    let status = a.json(&["status"]);
    let disk = status["detail"]["engine"]["disks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["role"]["data"]["bucket"] == grid_bucket)
        .expect("the data disk of the grid bucket")
        .clone();

    std::fs::remove_file(a.data().join("catalog.sqlite")).unwrap();
    let out = a.path("salvaged");
    let report = a.json(&[
        "salvage",
        &grid_bucket.to_string(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(
        report["objects_recovered"],
        expected.len() as u64,
        "{report}"
    );
    for (key, body) in &expected {
        assert_eq!(
            &std::fs::read(out.join("lost").join(key)).unwrap(),
            body,
            "{key}"
        );
    }
    assert!(
        !a.data().join("catalog.sqlite").exists(),
        "salvage leaves the catalog alone"
    );

    // The same from the raw disk image, by disk name through the grid too.
    let name = disk["name"].as_str().unwrap();
    let by_name = a.path("salvaged-by-name");
    let report = a.json(&["salvage", name, "--out", by_name.to_str().unwrap()]);
    assert_eq!(
        report["objects_recovered"],
        expected.len() as u64,
        "{report}"
    );
    let image = a
        .data()
        .join("grid/disks")
        .join(format!("disk-{:02}.img", disk["index"].as_u64().unwrap()));
    let from_image = a.path("salvaged-image");
    let report = a.json(&[
        "salvage",
        "--image",
        image.to_str().unwrap(),
        "--out",
        from_image.to_str().unwrap(),
    ]);
    assert_eq!(
        report["objects_recovered"],
        expected.len() as u64,
        "{report}"
    );
    for (key, body) in &expected {
        assert_eq!(
            &std::fs::read(from_image.join("lost").join(key)).unwrap(),
            body,
            "{key}"
        );
    }
}

#[test]
fn a_data_dir_in_use_is_refused_with_a_clear_error() {
    let a = Archive::new();
    a.ok(&["mb", "busy"]);
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(a.data().join(".lock"))
        .unwrap();
    lock.try_lock().expect("the test takes the lock");
    for args in [
        &["ls", "busy"][..],
        &["status"],
        &["salvage", "0", "--out", "/tmp/never"],
    ] {
        let err = a.fails(args);
        assert!(
            err.contains("a server is running on") && err.contains("--endpoint"),
            "{args:?}: {err}"
        );
    }
    drop(lock);
    a.ok(&["ls", "busy"]);
}

#[test]
fn missing_archive_and_unreachable_server_are_clear_errors() {
    let a = Archive::new();
    let out = Command::new(env!("CARGO_BIN_EXE_permafrost"))
        .args(["ls", "--data-dir"])
        .arg(a.path("nowhere"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no archive at"));
    assert!(
        !a.path("nowhere").exists(),
        "the CLI creates no archive by accident"
    );

    let err = a.fails(&[
        "ls",
        "b",
        "--endpoint",
        "http://127.0.0.1:1",
        "--access-key",
        "k",
        "--secret-key",
        "s",
    ]);
    assert!(err.contains("cannot reach http://127.0.0.1:1/"), "{err}");
    let err = a.fails(&["status", "--endpoint", "http://127.0.0.1:1"]);
    assert!(err.contains("credentials"), "{err}");
}

/// A stand-in S3 server: answers each request from `reply(method, path_and_query)` and records the request lines.
fn fake_server(
    reply: fn(&str, &str) -> (u16, String),
) -> (String, std::sync::Arc<parking_lot::Mutex<Vec<String>>>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let log = std::sync::Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok() && line.trim() != "" {
                line.clear();
            }
            let mut parts = request_line.split_whitespace();
            let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            log.lock().push(format!("{method} {path}"));
            let (status, body) = reply(method, path);
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                body.len(),
                if method == "HEAD" { "" } else { body.as_str() }
            );
        }
    });
    (endpoint, seen)
}

#[test]
fn endpoint_requests_are_signed_and_server_errors_are_named() {
    let (endpoint, seen) = fake_server(|method, path| match (method, path) {
        ("GET", p) if p.starts_with("/?") => (
            200,
            "<ListAllMyBucketsResult><Buckets><Bucket><Name>alpha</Name></Bucket>\
             <Bucket><Name>beta</Name></Bucket></Buckets></ListAllMyBucketsResult>"
                .into(),
        ),
        ("HEAD", _) => (404, String::new()),
        ("GET", p) if p.starts_with("/_permafrost/status") => (404, String::new()),
        _ => (
            404,
            "<Error><Code>NoSuchBucket</Code><Message>no such bucket: gone</Message></Error>"
                .into(),
        ),
    });
    let a = Archive::new();
    let remote = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend_from_slice(&[
            "--endpoint",
            &endpoint,
            "--access-key",
            "AK",
            "--secret-key",
            "SK",
        ]);
        a.run(&all)
    };
    let out = remote(&["ls", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listing: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listing["buckets"], serde_json::json!(["alpha", "beta"]));

    let out = remote(&["stat", "gone/key"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("NoSuchBucket: no such bucket: gone"),
        "{err}"
    );

    let out = remote(&["status"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no status endpoint"),
        "{err}"
    );

    let requests = seen.lock().clone();
    assert!(requests.len() >= 4, "{requests:?}");
    for request in &requests {
        assert!(
            request.contains("X-Amz-Signature=") && request.contains("X-Amz-Credential=AK%2F"),
            "every request is signed: {request}"
        );
    }
}

/// Kills the server it holds when dropped (also when a test fails).
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn objects_round_trip_through_a_running_server() {
    use std::io::BufRead;
    let a = Archive::new();
    let mut child = Command::new(env!("CARGO_BIN_EXE_permafrost"))
        .args(["serve", "--data-dir"])
        .arg(a.data())
        .env_remove("PERMAFROST_ROOT_USER")
        .env_remove("PERMAFROST_ROOT_PASSWORD")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let server = Server(child);
    // Read the server's log on a thread for as long as it runs (a pipe nobody reads fills up), passing on the
    // endpoint it announces.
    let (endpoint_tx, endpoint_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if let Some(url) = line.split("S3 endpoint ").nth(1) {
                let _ = endpoint_tx.send(url.split_whitespace().next().unwrap_or("").to_string());
            }
        }
    });
    let endpoint = endpoint_rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the server prints its endpoint");
    // Credentials come from DATA/credentials (the server generated them).
    let remote = |args: &[&'static str]| with_endpoint(args, &endpoint);
    let body = data(9, 2_500_000);
    a.ok(&remote(&["mb", "viaserver"]));
    let put = a.put(&body, "viaserver/dir/obj", &remote(&[]));
    assert_eq!(put["size_bytes"], 2_500_000, "{put}");
    assert_eq!(a.ok(&remote(&["get", "viaserver/dir/obj", "-"])), body);
    assert_eq!(
        a.ok(&remote(&[
            "get",
            "viaserver/dir/obj",
            "-",
            "--range",
            "5-9"
        ])),
        &body[5..10]
    );
    let listing = a.json(&remote(&["ls", "viaserver"]));
    assert_eq!(prefixes(&listing), ["dir/"]);
    assert_eq!(
        keys(&a.json(&remote(&["ls", "viaserver", "-r"]))),
        ["dir/obj"]
    );
    let stat = a.json(&remote(&["stat", "viaserver/dir/obj"]));
    assert_eq!(stat["size_bytes"], 2_500_000, "{stat}");
    assert_eq!(stat["etag"], put["etag"]);
    assert!(a.json(&remote(&["verify"]))["errors"]
        .as_array()
        .unwrap()
        .is_empty());

    let err = a.fails(&["ls", "viaserver"]);
    assert!(err.contains("a server is running on"), "{err}");

    a.ok(&remote(&["rm", "viaserver/dir/obj"]));
    let err = a.fails(&remote(&["stat", "viaserver/dir/obj"]));
    assert!(err.contains("no such key"), "{err}");
    drop(server);
}

/// `args` followed by `--endpoint endpoint`.
fn with_endpoint<'a>(args: &[&'a str], endpoint: &'a str) -> Vec<&'a str> {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--endpoint", endpoint]);
    all
}
