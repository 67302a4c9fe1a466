//! The recorder against a real store on file-backed disks and real UDP sockets on loopback.

use std::io::Read;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use permafrost_record::recorder::{RecordError, ScheduleDefaults};
use permafrost_record::stream::{self, StreamSpec, Verifier};
use permafrost_record::{RecordConfig, Recorder, ScanSpec, ScanState};
use permafrost_store::{ByteRange, GridSetup, Store, StoreConfig};

fn store(dir: &std::path::Path) -> Arc<Store> {
    let config = StoreConfig {
        cache_bytes_max: 512 << 20,
        fsync: false,
        grid: GridSetup {
            layout: "4x4:2+1".into(),
            disk_capacity_bytes: 128 << 20,
            spinning_max: 16,
            ..GridSetup::default()
        },
        power_profile: Some(permafrost_disk::power::PowerProfile::for_tests()),
        ..StoreConfig::default()
    };
    Arc::new(Store::open(dir, config).unwrap())
}

fn config() -> RecordConfig {
    RecordConfig {
        rcvbuf_bytes: 4 << 20,
        ring_bytes: 64 << 20,
        seal_interval_ms: 300,
        ..RecordConfig::default()
    }
}

fn free_port() -> SocketAddr {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn spec(scan: &str, listen: SocketAddr, udps: bool) -> ScanSpec {
    ScanSpec {
        experiment: "r1234".into(),
        station: "Pf".into(),
        scan: scan.into(),
        listen,
        udps,
        frame_bytes: Some(8032),
        frames_per_second: None,
        duration_ms: None,
    }
}

fn read(store: &Store, key: &str, range: Option<ByteRange>) -> Vec<u8> {
    let (_, mut reader) = store.open_object("vlbi", key, range, None).unwrap();
    let mut out = Vec::new();
    reader.read_to_end(&mut out).unwrap();
    out
}

fn meta<'a>(info: &'a permafrost_store::ObjectInfo, name: &str) -> &'a str {
    info.user_metadata
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no metadata {name} in {:?}", info.user_metadata))
}

fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn check_bytes(store: &Store, key: &str, sent: &StreamSpec) {
    let bytes = read(store, key, None);
    let mut v = Verifier::new(sent.clone());
    v.update(&bytes);
    v.finish().unwrap();
}

#[test]
fn a_recording_with_gaps_and_reordering_reports_exactly_the_missing_and_out_of_order_frames() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let recorder = Recorder::open(Arc::clone(&store), config()).unwrap();
    for udps in [true, false] {
        let listen = free_port();
        let name = if udps { "gaps-udps" } else { "gaps-vdif" };
        let mut sent = StreamSpec::at_rate(100_000_000, 3.0, 8032);
        sent.udps = udps;
        sent.first_second = 1000;
        // 5 + 1 + 3 frames missing, three pairs swapped (one of them across a second boundary).
        sent.skip = vec![(100, 5), (700, 1), (2000, 3)];
        sent.swap = vec![50, 3111, 4000];
        let mut scan = spec(name, listen, udps);
        scan.frames_per_second = (!udps).then_some(sent.frames_per_second);
        recorder.start(scan.clone()).unwrap();
        let report = stream::send(&sent, listen).unwrap();
        assert_eq!(report.frames_sent, sent.frames - 9);
        std::thread::sleep(Duration::from_millis(300));
        let status = recorder.stop(&scan.id()).unwrap();
        assert_eq!(status.state, ScanState::Complete, "{status:?}");
        assert_eq!(
            (status.kernel_drops, status.ring_dropped_frames),
            (0, 0),
            "{status:?}"
        );
        let info = store.head_object("vlbi", &scan.key()).unwrap();
        assert_eq!(meta(&info, "record-state"), "complete");
        assert_eq!(
            meta(&info, "vdif-frames-expected"),
            sent.frames.to_string(),
            "{name}"
        );
        assert_eq!(
            meta(&info, "vdif-frames-received"),
            (sent.frames - 9).to_string()
        );
        assert_eq!(meta(&info, "vdif-frames-missing"), "9");
        assert_eq!(meta(&info, "vdif-frames-out-of-order"), "3");
        assert_eq!(meta(&info, "vdif-gaps"), "3");
        let fb = 8032u64;
        let list = meta(&info, "vdif-gap-list");
        let expected = if udps {
            format!(
                "5 frames missing from seq 100 at byte {}; 1 frames missing from seq 700 at byte {}; 3 frames missing from seq 2000 at byte {}",
                100 * fb,
                695 * fb,
                1994 * fb
            )
        } else {
            let fps = sent.frames_per_second;
            format!(
                "5 frames missing from thread 0 second {} frame {} at byte {}; 1 frames missing from thread 0 second {} frame {} at byte {}; 3 frames missing from thread 0 second {} frame {} at byte {}",
                1000 + 100 / fps, 100 % fps, 100 * fb,
                1000 + 700 / fps, 700 % fps, 695 * fb,
                1000 + 2000 / fps, 2000 % fps, 1994 * fb
            )
        };
        assert_eq!(list, expected);
        assert_eq!(info.size_bytes, (sent.frames - 9) * fb);
        check_bytes(&store, &scan.key(), &sent);
    }
    recorder.shutdown();
}

#[test]
fn a_scan_is_readable_while_recorded_and_byte_exact_after_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let recorder = Recorder::open(Arc::clone(&store), config()).unwrap();
    let listen = free_port();
    let scan = spec("live", listen, true);
    recorder.start(scan.clone()).unwrap();
    let mut sent = StreamSpec::at_rate(200_000_000, 3.0, 8032);
    sent.udps = true;
    let sender = {
        let sent = sent.clone();
        std::thread::spawn(move || stream::send(&sent, listen).unwrap())
    };
    // While the sender runs: the object grows, and what is visible is the exact prefix of what was sent.
    let mut sizes = Vec::new();
    let mut prefix = Vec::new();
    let mut read_so_far = 0u64;
    while !sender.is_finished() {
        std::thread::sleep(Duration::from_millis(250));
        let info = store.head_object("vlbi", &scan.key()).unwrap();
        assert_eq!(meta(&info, "record-state"), "recording");
        if info.size_bytes > read_so_far {
            let range = ByteRange::FromTo(read_so_far, info.size_bytes - 1);
            let bytes = read(&store, &scan.key(), Some(range));
            assert_eq!(bytes.len() as u64, info.size_bytes - read_so_far);
            prefix.extend_from_slice(&bytes);
            read_so_far = info.size_bytes;
            sizes.push(info.size_bytes);
        }
    }
    let report = sender.join().unwrap();
    assert!(
        sizes.len() >= 3,
        "the scan grew visibly at least three times while recorded: {sizes:?}"
    );
    assert!(
        sizes.iter().all(|s| s % 8032 == 0),
        "durable points hold whole frames: {sizes:?}"
    );
    let status = recorder.stop(&scan.id()).unwrap();
    assert_eq!(status.state, ScanState::Complete);
    // On a loaded machine the kernel may drop datagrams (its buffer is capped by net.core.rmem_max): the scan
    // says which, and holds exactly the others.
    let gaps = &status.writer.gaps;
    assert_eq!(
        gaps.iter().map(|g| g.frames).sum::<u64>(),
        status.writer.loss.frames_missing,
        "{status:?}"
    );
    assert_eq!(
        status.kernel_drops + status.ring_dropped_frames,
        status.writer.loss.frames_missing
    );
    for g in gaps {
        let permafrost_record::loss::Position::Sequence { seq } = g.from else {
            panic!("udps gaps are by sequence number: {g:?}")
        };
        sent.skip.push((seq, g.frames));
    }
    let info = store.head_object("vlbi", &scan.key()).unwrap();
    assert_eq!(
        info.size_bytes,
        (report.frames_sent - status.writer.loss.frames_missing) * 8032
    );
    check_bytes(&store, &scan.key(), &sent);
    // What was read while the scan grew is the final scan's prefix.
    assert_eq!(
        read(
            &store,
            &scan.key(),
            Some(ByteRange::FromTo(0, read_so_far - 1))
        ),
        prefix
    );
    let mut generator_check = Verifier::new(sent.clone());
    generator_check.update(&prefix);
    let rest = read(&store, &scan.key(), Some(ByteRange::From(read_so_far)));
    generator_check.update(&rest);
    generator_check.finish().unwrap();
    // A scan that ended is an ordinary object: it persists and reads back from the grid.
    store.persist_now().unwrap();
    store.evict_cache().unwrap();
    check_bytes(&store, &scan.key(), &sent);
    recorder.shutdown();
}

#[test]
fn bad_input_gets_a_clear_error_and_malformed_frames_are_counted_not_stored() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let recorder = Recorder::open(Arc::clone(&store), config()).unwrap();
    let listen = free_port();
    let scan = spec("bad", listen, false);
    recorder.start(scan.clone()).unwrap();

    // A second recorder on the same port, the same scan again, an unknown scan, bad names.
    let err = recorder.start(spec("other", listen, false)).unwrap_err();
    assert!(
        matches!(&err, RecordError::Conflict(m) if m.contains(&format!("UDP port {} is in use by scan r1234/Pf/bad", listen.port()))),
        "{err}"
    );
    let err = recorder.start(spec("bad", free_port(), false)).unwrap_err();
    assert!(
        matches!(&err, RecordError::Conflict(m) if m.contains("is being recorded already")),
        "{err}"
    );
    let err = recorder.stop("r1234/Pf/nope").unwrap_err();
    assert!(
        matches!(&err, RecordError::NotFound(m) if m.contains("no scan r1234/Pf/nope is being recorded (recording: r1234/Pf/bad)")),
        "{err}"
    );
    let err = recorder
        .start(spec("../etc", free_port(), false))
        .unwrap_err();
    assert!(
        matches!(&err, RecordError::BadRequest(m) if m.contains("scan name \"../etc\"")),
        "{err}"
    );
    // A port another program holds.
    let holder = UdpSocket::bind("127.0.0.1:0").unwrap();
    let err = recorder
        .start(spec("held", holder.local_addr().unwrap(), false))
        .unwrap_err();
    assert!(
        matches!(&err, RecordError::Conflict(m) if m.contains("is in use (another recorder or program")),
        "{err}"
    );

    // Datagrams that are not frames of this scan: truncated, wrong size, too short for a header, too long.
    let mut good = StreamSpec::at_rate(10_000_000, 0.2, 8032);
    good.first_second = 7;
    let g = stream::Generator::new(good.clone());
    let mut frame = vec![0u8; 8032];
    g.frame(0, &mut frame);
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    sender.send_to(&frame[..4000], listen).unwrap(); // truncated: the header says 8032
    let other = StreamSpec::at_rate(10_000_000, 0.2, 1032);
    let mut small = vec![0u8; 1032];
    stream::Generator::new(other).frame(0, &mut small);
    sender.send_to(&small, listen).unwrap(); // a whole frame of another size
    sender.send_to(&[1, 2, 3], listen).unwrap(); // not a header
    sender.send_to(&vec![0u8; 8032 + 100], listen).unwrap(); // longer than this scan's frames
    stream::send(&good, listen).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let status = recorder.stop(&scan.id()).unwrap();
    let rejected: Vec<(&str, u64)> = status
        .frames_rejected
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(
        rejected,
        vec![
            ("length-mismatch", 1),
            ("oversize", 1),
            ("truncated", 1),
            ("wrong-frame-size", 1)
        ],
        "{status:?}"
    );
    assert_eq!(
        status.first_rejection.as_deref(),
        Some("the header says the frame has 8032 bytes but 4000 arrived")
    );
    let info = store.head_object("vlbi", &scan.key()).unwrap();
    assert_eq!(
        info.size_bytes,
        good.frames * 8032,
        "only whole frames of the scan are stored"
    );
    assert!(meta(&info, "record-datagrams-rejected").starts_with("4 (first: the header says"));
    check_bytes(&store, &scan.key(), &good);

    // The scan exists now: the name cannot be recorded again.
    let err = recorder.start(spec("bad", free_port(), false)).unwrap_err();
    assert!(
        matches!(&err, RecordError::Conflict(m) if m.contains("exists already as vlbi/r1234/Pf/bad.vdif")),
        "{err}"
    );
    // A schedule in the past is refused as a whole, naming the line.
    let defaults = ScheduleDefaults {
        experiment: "r1234".into(),
        station: "Pf".into(),
        listen: free_port(),
        udps: false,
        frame_bytes: None,
        frames_per_second: None,
    };
    let err = recorder
        .schedule(
            &defaults,
            "2099-01-01T00:00:00Z 10s later\n2001-01-01T00:00:00Z 10s past\n",
        )
        .unwrap_err();
    assert!(
        matches!(&err, RecordError::BadRequest(m) if m.contains("line 2: scan past starts at 2001-01-01T00:00:00Z, which is in the past")),
        "{err}"
    );
    assert!(recorder.status().scheduled.is_empty());
    recorder.shutdown();
}

#[test]
fn the_schedule_starts_and_stops_scans_on_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let recorder = Recorder::open(Arc::clone(&store), config()).unwrap();
    let listen = free_port();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let first = (now_ms / 1000 + 2) * 1000;
    let at = |ms: u64| {
        jiff::Timestamp::from_millisecond(ms as i64)
            .unwrap()
            .to_string()
    };
    let text = format!("{} 1500ms s1\n{} 1s s2\n", at(first), at(first + 2000));
    let defaults = ScheduleDefaults {
        experiment: "sched".into(),
        station: "Pf".into(),
        listen,
        udps: true,
        frame_bytes: Some(8032),
        frames_per_second: None,
    };
    let added = recorder.schedule(&defaults, &text).unwrap();
    assert_eq!(added.len(), 2);
    // A second schedule overlapping on the same port is refused.
    let clash = recorder
        .schedule(&defaults, &format!("{} 10s s3\n", at(first + 500)))
        .unwrap_err();
    assert!(
        clash
            .to_string()
            .contains("overlaps scheduled scan sched/Pf/s1"),
        "{clash}"
    );
    // The sender runs through both scans and the pauses between them.
    let mut sent = StreamSpec::at_rate(50_000_000, 0.0, 8032);
    sent.udps = true;
    sent.frames = sent.frames_per_second * (first + 3500 - now_ms) / 1000 + sent.frames_per_second;
    let report = stream::send(&sent, listen).unwrap();
    assert!(report.seconds > 4.0);
    wait_until("both scans to end", Duration::from_secs(20), || {
        let s = recorder.status();
        s.scheduled.is_empty()
            && s.scans
                .iter()
                .filter(|s| s.state == ScanState::Complete)
                .count()
                == 2
    });
    let status = recorder.status();
    assert!(
        status.schedule_errors.is_empty(),
        "{:?}",
        status.schedule_errors
    );
    for (name, start, duration) in [("s1", first, 1500u64), ("s2", first + 2000, 1000)] {
        let s = status
            .scans
            .iter()
            .find(|s| s.id == format!("sched/Pf/{name}"))
            .unwrap();
        let late = s.started_ms as i64 - start as i64;
        assert!(
            (0..300).contains(&late),
            "{name} started {late} ms after its time"
        );
        let ended = s.ended_ms.unwrap() as i64 - (start + duration) as i64;
        assert!(
            (0..1500).contains(&ended),
            "{name} ended {ended} ms after its end"
        );
        let info = store
            .head_object("vlbi", &format!("sched/Pf/{name}.vdif"))
            .unwrap();
        let frames = info.size_bytes / 8032;
        let expected = sent.frames_per_second * duration / 1000;
        // ±25 %: the sender paces its frames, and on a loaded machine a sender that fell behind catches up with
        // a burst that may land inside the scan's window (CI saw 896 frames for 778 expected).
        assert!(
            frames + expected / 4 >= expected && frames <= expected + expected / 4,
            "{name}: {frames} frames in {duration} ms at {} frames/s",
            sent.frames_per_second
        );
        assert_eq!(meta(&info, "vdif-frames-missing"), "0");
    }
    recorder.shutdown();
}

#[test]
fn recording_goes_on_with_a_failed_grid_disk_while_the_cache_drains() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    store.engine().fail_disk(0).unwrap();
    let recorder = Recorder::open(Arc::clone(&store), config()).unwrap();
    let listen = free_port();
    let scan = spec("degraded", listen, true);
    recorder.start(scan.clone()).unwrap();
    let mut sent = StreamSpec::at_rate(100_000_000, 3.0, 8032);
    sent.udps = true;
    let sender = {
        let sent = sent.clone();
        std::thread::spawn(move || stream::send(&sent, listen).unwrap())
    };
    // Drain the cache to the (degraded) grid while recording, evicting what is persisted.
    while !sender.is_finished() {
        store.persist_now().unwrap();
        store.evict_cache().unwrap();
        std::thread::sleep(Duration::from_millis(200));
    }
    sender.join().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let status = recorder.stop(&scan.id()).unwrap();
    assert_eq!(status.state, ScanState::Complete, "{status:?}");
    assert_eq!(status.writer.loss.frames_missing, 0, "{status:?}");
    store.persist_now().unwrap();
    store.evict_cache().unwrap();
    check_bytes(&store, &scan.key(), &sent);
    recorder.shutdown();
}

/// Scans kept ~100 days: the recorder creates its bucket at the first scan (not before: a server that records
/// nothing has none) with a lifecycle rule (`retention_days`), which gives a scan its expiry from its first
/// durable point on; the finished scan keeps it (days after it was written).
#[test]
fn scans_expire_by_the_buckets_lifecycle_rule_while_recorded_and_after() {
    const DAY_MS: u64 = 86_400_000;
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let recorder = Recorder::open(Arc::clone(&store), config()).unwrap();
    assert!(
        matches!(
            store.head_bucket("vlbi"),
            Err(permafrost_store::StoreError::NoSuchBucket(_))
        ),
        "the recorder's bucket exists before any scan"
    );
    let listen = free_port();
    let scan = spec("kept", listen, false);
    recorder.start(scan.clone()).unwrap();
    let rules = store
        .bucket_archive("vlbi")
        .unwrap()
        .lifecycle
        .unwrap()
        .rules;
    assert_eq!(
        rules
            .iter()
            .map(|r| (r.id.as_str(), r.expiration_days))
            .collect::<Vec<_>>(),
        [("record-retention", Some(100))]
    );
    let sent = StreamSpec::at_rate(50_000_000, 1.0, 8032);
    let sender = {
        let sent = sent.clone();
        std::thread::spawn(move || stream::send(&sent, listen).unwrap())
    };
    let in_100_days = |info: &permafrost_store::ObjectInfo| {
        let at = info.expires_ms.expect("the scan has an expiry");
        let days = (at - info.last_modified_ms.min(at)) as f64 / DAY_MS as f64;
        assert!(
            (99.0..=101.0).contains(&days),
            "expires {days} days after it was written"
        );
    };
    in_100_days(&store.head_object("vlbi", &scan.key()).unwrap());
    sender.join().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let status = recorder.stop(&scan.id()).unwrap();
    assert_eq!(status.state, ScanState::Complete, "{status:?}");
    in_100_days(&store.head_object("vlbi", &scan.key()).unwrap());
    check_bytes(&store, &scan.key(), &sent);
    recorder.shutdown();
}

/// The writer is held up (the cache is full and its disks take 10 s to spin up, so persistence frees nothing in
/// time): the ring grows to `ring_bytes`, then the receiver goes on, counts what it drops, and the scan fails with
/// the reason, keeping its last durable point.
#[test]
fn a_writer_that_falls_behind_makes_counted_drops_and_a_failed_scan_keeps_its_durable_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let mut config_store = StoreConfig {
        cache_bytes_max: 24 << 20,
        cache_wait_ms_max: 1_500,
        fsync: false,
        grid: GridSetup {
            layout: "4x4:2+1".into(),
            disk_capacity_bytes: 64 << 20,
            spinning_max: 16,
            ..GridSetup::default()
        },
        power_profile: Some(permafrost_disk::power::PowerProfile {
            spin_up_ms: 10_000,
            ..permafrost_disk::power::PowerProfile::for_tests()
        }),
        ..StoreConfig::default()
    };
    // Nothing persists on its own, so nothing can be evicted: the cache fills up. (A writer waiting for room
    // puts the cache under pressure and starts a persist, but its disks are still spinning up when the scan
    // fails.)
    config_store.watchdog.max_age_ms = u64::MAX / 4;
    config_store.watchdog.start_off_disk_above_bytes = u64::MAX / 4;
    config_store.watchdog.persist_spinning_above_bytes = u64::MAX / 4;
    config_store.watchdog.persist_under_pressure_above_bytes = u64::MAX / 4;
    config_store.watchdog.pressure_fill_percent = 100.0;
    let store = Arc::new(Store::open(dir.path(), config_store).unwrap());
    let small_ring = RecordConfig {
        ring_bytes: 16 * 600_000,
        block_bytes: 600_000,
        seal_interval_ms: 200,
        ..config()
    };
    let recorder = Recorder::open(Arc::clone(&store), small_ring).unwrap();
    let listen = free_port();
    let scan = spec("behind", listen, true);
    recorder.start(scan.clone()).unwrap();
    let mut sent = StreamSpec::at_rate(100_000_000, 4.0, 8032);
    sent.udps = true;
    stream::send(&sent, listen).unwrap();
    wait_until("the scan to fail", Duration::from_secs(30), || {
        recorder.scan_status(&scan.id()).unwrap().state.is_over()
    });
    let status = recorder.scan_status(&scan.id()).unwrap();
    assert_eq!(status.state, ScanState::Failed, "{status:?}");
    assert!(status.ring_dropped_frames > 0, "{status:?}");
    // It started with an eighth (two blocks) and grew to the most before dropping.
    assert_eq!(status.ring_bytes_allocated, 16 * 600_000, "{status:?}");
    assert!(
        status.ring_bytes_used_max > 2 * 600_000
            && status.ring_bytes_used_max <= status.ring_bytes_allocated,
        "{status:?}"
    );
    let error = status.error.clone().unwrap();
    assert!(
        error.contains("writing to the archive failed") && error.contains("slow down"),
        "{error}"
    );
    let info = store.head_object("vlbi", &scan.key()).unwrap();
    assert_eq!(meta(&info, "record-state"), "failed");
    assert_eq!(meta(&info, "record-error"), error);
    // The object is its last durable point, and its metadata counts exactly its frames.
    assert_eq!(info.size_bytes, status.writer.durable_bytes);
    let received: u64 = meta(&info, "vdif-frames-received").parse().unwrap();
    assert_eq!(received * 8032, info.size_bytes);
    assert!(received > 0);
    recorder.shutdown();
}
