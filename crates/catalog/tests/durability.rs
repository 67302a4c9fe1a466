//! Durability of the group-committed catalog: concurrent commits all survive a reopen, and every put a child
//! process acknowledged survives that process being killed with SIGKILL.
//!
//! The crash test runs this test binary again as the child (`CHILD_ENV` names its database). A SIGKILL keeps
//! the kernel's page cache, so it checks that acknowledged means committed and that WAL recovery keeps every
//! concurrent commit; power loss (what the fdatasync is for) cannot be simulated here.
//!
//! Short variant (always on): `CRASHES` kills. `PERMAFROST_CATALOG_CRASHES` raises it.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use permafrost_catalog::*;

const CRASHES: usize = 3;
const CHILD_ENV: &str = "PERMAFROST_CATALOG_CRASH_CHILD";
const CHILD_THREADS: u32 = 4;
/// A child stops by itself after this long, should its parent fail to kill it.
const CHILD_RUN_MAX: Duration = Duration::from_secs(60);

fn content_id(key: &str) -> ContentId {
    ContentId {
        hash: *blake3::hash(key.as_bytes()).as_bytes(),
        encoding: Encoding::Identity,
    }
}

/// Put `key` with a content of its own.
fn put(c: &SqliteCatalog, key: &str) -> Result<PutOutcome> {
    let id = content_id(key);
    let object = ObjectRecord {
        bucket: "b".into(),
        key: key.into(),
        content: id,
        size_bytes: key.len() as u64,
        etag: format!("\"{key}\""),
        last_modified_ms: 1,
        content_type: None,
        user_metadata: vec![],
        checksums: vec![],
        dataset: "b/".into(),
        version_id: String::new(),
        attributes: Default::default(),
        expires_ms: None,
    };
    let content = NewContent {
        id,
        logical_bytes: key.len() as u64,
        stored_bytes: key.len() as u64,
        stored_form: StoredForm::Raw,
        chunk_index: vec![],
        md5: [0; 16],
        cache_path: format!("contents/{key}"),
        inline: None,
    };
    c.put_object(&object, &content, 1)
}

/// Panics unless `key` is present with its own content.
fn assert_present(c: &SqliteCatalog, key: &str) {
    let (object, content) = c
        .get_object("b", key)
        .unwrap()
        .unwrap_or_else(|| panic!("acknowledged object {key} is missing"));
    assert_eq!(object.content, content_id(key), "object {key}");
    assert_eq!(
        content.cache_path.as_deref(),
        Some(&*format!("contents/{key}"))
    );
}

#[test]
fn concurrent_durable_commits_all_survive_reopen() {
    let (threads, puts_per_thread) = (8, 40);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("catalog.sqlite");
    {
        let c = SqliteCatalog::open(&path).unwrap();
        c.create_bucket("b", &BucketSettings::default()).unwrap();
        std::thread::scope(|s| {
            for t in 0..threads {
                let c = &c;
                s.spawn(move || {
                    for i in 0..puts_per_thread {
                        let key = format!("k{t}.{i}");
                        put(c, &key).unwrap();
                        assert_present(c, &key);
                    }
                });
            }
        });
    }
    let c = SqliteCatalog::open(&path).unwrap();
    for t in 0..threads {
        for i in 0..puts_per_thread {
            assert_present(&c, &format!("k{t}.{i}"));
        }
    }
    assert_eq!(
        c.stats().unwrap().objects,
        (threads * puts_per_thread) as u64
    );
    assert_eq!(c.check().unwrap(), Vec::<String>::new());
}

/// The child: `CHILD_THREADS` threads put keys `{round}.{thread}.{i}` and print `acked KEY` after each
/// acknowledged put, until killed.
fn run_child(path: &Path, round: &str) {
    let c = SqliteCatalog::open(path).unwrap();
    if c.get_bucket("b").unwrap().is_none() {
        c.create_bucket("b", &BucketSettings::default()).unwrap();
    }
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..CHILD_THREADS {
            let c = &c;
            s.spawn(move || {
                let mut i = 0u64;
                while start.elapsed() < CHILD_RUN_MAX {
                    let key = format!("{round}.{t}.{i}");
                    put(c, &key).unwrap();
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "acked {key}").unwrap();
                    out.flush().unwrap();
                    i += 1;
                }
            });
        }
    });
}

/// Start a child writing round `round`, SIGKILL it after `kill_after_acks` acknowledgements, return every key
/// it acknowledged.
fn write_and_kill(path: &Path, round: usize, kill_after_acks: usize) -> Vec<String> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "acknowledged_puts_survive_sigkill",
            "--nocapture",
        ])
        .env(CHILD_ENV, path)
        .env("PERMAFROST_CATALOG_CRASH_ROUND", round.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the child writer");
    let stdout = child.stdout.take().unwrap();
    let (sender, receiver) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(key) = line.strip_prefix("acked ") {
                if sender.send(key.to_string()).is_err() {
                    break;
                }
            }
        }
    });
    let mut acked = Vec::new();
    let deadline = Instant::now() + CHILD_RUN_MAX;
    while acked.len() < kill_after_acks {
        let wait = deadline.saturating_duration_since(Instant::now());
        match receiver.recv_timeout(wait) {
            Ok(key) => acked.push(key),
            Err(e) => panic!(
                "child acknowledged {} of {kill_after_acks} puts: {e}",
                acked.len()
            ),
        }
    }
    child.kill().expect("SIGKILL the child");
    child.wait().unwrap();
    reader.join().unwrap();
    // Acknowledgements printed before the kill.
    acked.extend(receiver.try_iter());
    acked
}

#[test]
fn acknowledged_puts_survive_sigkill() {
    if let Some(path) = std::env::var_os(CHILD_ENV) {
        let round = std::env::var("PERMAFROST_CATALOG_CRASH_ROUND").unwrap();
        run_child(Path::new(&path), &round);
        return;
    }
    let crashes = std::env::var("PERMAFROST_CATALOG_CRASHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CRASHES);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("catalog.sqlite");
    let mut all_acked = Vec::new();
    for round in 0..crashes {
        // Kill at varied moments: early (WAL just created) to a few hundred commits in.
        let kill_after_acks = 5 + (round * 97) % 300;
        let acked = write_and_kill(&path, round, kill_after_acks);
        assert!(acked.len() >= kill_after_acks);
        all_acked.extend(acked);
        let c = SqliteCatalog::open(&path).unwrap();
        for key in &all_acked {
            assert_present(&c, key);
        }
        assert_eq!(c.check().unwrap(), Vec::<String>::new(), "round {round}");
    }
}
