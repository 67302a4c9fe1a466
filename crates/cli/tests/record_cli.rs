//! `permafrost record` against a real `permafrost serve`: a lossless recording checked byte for byte (the CI
//! run of the benchmark), and a server killed with SIGKILL mid-recording that keeps every durable point.

use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const USER: &str = "recorder";
const PASSWORD: &str = "recorder-secret-key";

fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_permafrost")
}

/// A server on a data directory; killed when dropped.
struct Server {
    child: Child,
    endpoint: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The server's settings: a ring of up to 1 GiB (allocated only while the writer is behind) holds the whole
/// 10-second recording, so a slow or busy CI disk delays the scan's durable points but loses no frame.
fn write_config(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("permafrost.toml"),
        "[store]\ncache_bytes_max = 4000000000\n\n[store.grid]\nlayout = \"4x4:2+1\"\ndisk_capacity_bytes = 1073741824\n\n\
         [record]\nseal_interval_ms = 500\nrcvbuf_bytes = 268435456\nring_bytes = 1073741824\n",
    )
    .unwrap();
}

fn serve(dir: &Path) -> Server {
    let mut child = Command::new(binary())
        .args(["serve", "--data-dir"])
        .arg(dir)
        .args(["--listen", "127.0.0.1:0", "--simulated-spin-up-ms", "20"])
        .env("PERMAFROST_ROOT_USER", USER)
        .env("PERMAFROST_ROOT_PASSWORD", PASSWORD)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.split("S3 endpoint ").nth(1) {
                let _ = tx.send(url.trim().to_string());
            }
            eprintln!("serve: {line}");
        }
    });
    let endpoint = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the server prints its endpoint");
    Server { child, endpoint }
}

/// Run `permafrost ARGS` against `server`; returns stdout, panics with stderr on failure.
fn cli(server: &Server, args: &[&str]) -> String {
    let out = cli_result(server, args);
    match out {
        Ok(s) => s,
        Err(e) => panic!("permafrost {args:?} failed: {e}"),
    }
}

fn cli_result(server: &Server, args: &[&str]) -> Result<String, String> {
    let out = Command::new(binary())
        .args(args)
        .args(["--endpoint", &server.endpoint])
        .env("PERMAFROST_ROOT_USER", USER)
        .env("PERMAFROST_ROOT_PASSWORD", PASSWORD)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn send(to: &str, args: &[&str]) -> serde_json::Value {
    let out = Command::new(binary())
        .args(["record", "send", "--to", to, "--json"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn free_port() -> String {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string()
}

fn status(server: &Server, id: &str) -> serde_json::Value {
    serde_json::from_str(&cli(server, &["record", "status", id, "--json"])).unwrap()
}

fn meta(stat: &serde_json::Value, name: &str) -> String {
    stat["user_metadata"]
        .as_array()
        .and_then(|pairs| {
            pairs
                .iter()
                .find(|p| p[0] == name)
                .and_then(|p| p[1].as_str().map(str::to_owned))
        })
        .or_else(|| stat["user_metadata"][name].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("no {name} in {stat}"))
}

/// The CI run of the benchmark: 10 s at a rate this machine holds, no frame lost, the stored bytes identical.
#[test]
fn a_ten_second_recording_is_lossless_and_reads_back_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path());
    let server = serve(dir.path());
    let listen = free_port();
    let out = cli(
        &server,
        &[
            "record",
            "start",
            "ci/Pf/ten",
            "--listen",
            &listen,
            "--udps",
        ],
    );
    assert!(out.contains("recording ci/Pf/ten on"), "{out}");
    let stream = ["--rate", "500Mbps", "--seconds", "10", "--udps"];
    let report = send(&listen, &stream);
    std::thread::sleep(Duration::from_millis(500));
    let out = cli(&server, &["record", "stop", "ci/Pf/ten"]);
    assert!(out.contains("ci/Pf/ten complete"), "{out}");
    let s = status(&server, "ci/Pf/ten");
    let sent = report["frames_sent"].as_u64().unwrap();
    assert_eq!(
        s["writer"]["loss"]["frames_received"].as_u64(),
        Some(sent),
        "{s}"
    );
    assert_eq!(
        s["writer"]["loss"]["frames_missing"].as_u64(),
        Some(0),
        "{s}"
    );
    assert_eq!(s["kernel_drops"].as_u64(), Some(0), "{s}");
    assert_eq!(s["ring_dropped_frames"].as_u64(), Some(0), "{s}");
    let mut check = vec!["record", "check", "vlbi/ci/Pf/ten.vdif"];
    check.extend(stream);
    let out = cli(&server, &check);
    assert!(out.contains("identical to the stream sent"), "{out}");
}

/// A server killed mid-recording keeps every durable point: after the restart the scan is an ordinary object,
/// `interrupted`, holding exactly the frames its metadata counts (the exact prefix of the stream sent) and saying
/// where it stops.
#[test]
fn a_server_killed_mid_recording_keeps_what_it_acknowledged_and_says_where_the_scan_stops() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path());
    let mut server = serve(dir.path());
    let listen = free_port();
    cli(
        &server,
        &[
            "record",
            "start",
            "crash/Pf/k1",
            "--listen",
            &listen,
            "--udps",
        ],
    );
    let stream = ["--rate", "200Mbps", "--seconds", "15", "--udps"];
    let sender = {
        let listen = listen.clone();
        std::thread::spawn(move || send(&listen, &stream))
    };
    // Wait for a few durable points, note the last one acknowledged, then kill.
    let deadline = Instant::now() + Duration::from_secs(60);
    let acknowledged = loop {
        let s = status(&server, "crash/Pf/k1");
        let durable = s["writer"]["durable_bytes"].as_u64().unwrap();
        if s["writer"]["durable_pieces"].as_u64().unwrap() >= 3 {
            break durable;
        }
        assert!(Instant::now() < deadline, "no durable points: {s}");
        std::thread::sleep(Duration::from_millis(100));
    };
    // SAFETY-free: kill(2) through the standard library sends SIGKILL.
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    drop(server);
    let server = serve(dir.path());
    let stat: serde_json::Value =
        serde_json::from_str(&cli(&server, &["stat", "vlbi/crash/Pf/k1.vdif", "--json"])).unwrap();
    let size = stat["size_bytes"].as_u64().unwrap();
    assert!(
        size >= acknowledged,
        "{size} bytes kept, {acknowledged} were acknowledged"
    );
    assert_eq!(meta(&stat, "record-state"), "interrupted");
    assert!(meta(&stat, "record-error").contains("the server stopped during the scan"));
    let received: u64 = meta(&stat, "vdif-frames-received").parse().unwrap();
    assert_eq!(
        received * 8032,
        size,
        "the metadata counts exactly the frames the scan holds"
    );
    let last = meta(&stat, "vdif-last");
    assert!(last.starts_with("seq "), "{last}");
    let last_seq: u64 = last[4..].parse().unwrap();
    let missing: u64 = meta(&stat, "vdif-frames-missing").parse().unwrap();
    assert_eq!(last_seq + 1, received + missing);
    // The bytes are the exact prefix of the stream: frames 0..=last, less any gap the metadata lists.
    let mut check_stream: Vec<String> = vec![
        "--rate".into(),
        "200Mbps".into(),
        "--udps".into(),
        "--seconds".into(),
        format!(
            "{}",
            (last_seq + 1) as f64 / (200_000_000 / (8 * 8032)) as f64
        ),
    ];
    if missing > 0 {
        let list = meta(&stat, "vdif-gap-list");
        let skips: Vec<String> = list
            .split("; ")
            .map(|g| {
                // "N frames missing from seq S at byte B"
                let words: Vec<&str> = g.split(' ').collect();
                format!("{}+{}", words[5], words[0])
            })
            .collect();
        check_stream.push("--skip".into());
        check_stream.push(skips.join(","));
    }
    let mut args = vec!["record", "check", "vlbi/crash/Pf/k1.vdif"];
    args.extend(check_stream.iter().map(String::as_str));
    let out = cli(&server, &args);
    assert!(out.contains("identical to the stream sent"), "{out}");
    // The recorder lists it as interrupted; the sender did not notice any of it.
    let recorder: serde_json::Value =
        serde_json::from_str(&cli(&server, &["record", "status", "--json"])).unwrap();
    assert_eq!(recorder["scans"][0]["state"], "interrupted", "{recorder}");
    sender.join().unwrap();
}
