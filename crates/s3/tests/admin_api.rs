//! The admin API v1, the metrics and the event stream of a real server (hyper + s3s + permafrost-admin over a
//! store on small sparse disks with a simulated power model): authentication on every endpoint, clear 400s,
//! wake reasons from a read to the API, events and metrics, operator actions as tasks, waiting for
//! persistence, and monitoring that never wakes a disk.

use std::io::{BufRead, BufReader};
use std::sync::Arc;
use std::time::{Duration, Instant};

use permafrost_admin::{api_token, Admin, AdminOptions};
use permafrost_disk::power::PowerProfile;
use permafrost_s3::Credentials;
use permafrost_store::{GridSetup, PutOptions, Store, StoreConfig};
use rusty_s3::{Method, S3Action, UrlStyle};
use serde_json::Value;
use url::Url;

const ACCESS_KEY: &str = "OPSTESTKEY";
const SECRET_KEY: &str = "ops-test-secret-0123456789";
const API: &str = "/_permafrost/api/v1";

struct Server {
    endpoint: Url,
    store: Arc<Store>,
    admin: Admin,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    runtime: Option<tokio::runtime::Runtime>,
    agent: ureq::Agent,
    token: String,
    _dir: tempfile::TempDir,
}

/// Spin-ups of 300 ms and an idle timeout of 1 s: long enough for the 50 ms monitor to see every state.
fn profile() -> PowerProfile {
    PowerProfile {
        spin_up_ms: 300,
        idle_timeout_ms: 1000,
        ..PowerProfile::for_tests()
    }
}

fn config() -> StoreConfig {
    StoreConfig {
        cache_bytes_max: 256 << 20,
        extent_bytes_max: 4 << 20,
        pack_threshold_bytes: 4 << 10,
        chunk_bytes: 256 << 10,
        fsync: false,
        grid: GridSetup {
            layout: "4x4:2+1".into(),
            disk_capacity_bytes: 96 << 20,
            spinning_max: 16,
            ..GridSetup::default()
        },
        power_profile: Some(profile()),
        ..StoreConfig::default()
    }
}

impl Server {
    fn start() -> Server {
        Server::start_with(AdminOptions {
            sample_ms: 50,
            history_interval_ms: 200,
            history_keep: 5,
            ..Default::default()
        })
    }

    fn start_with(options: AdminOptions) -> Server {
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
        let access = permafrost_access::Access::open(
            store.access_catalog(),
            credentials,
            permafrost_access::AccessSettings::default(),
        )
        .unwrap();
        let admin = Admin::start(store.clone(), Arc::new(access), options);
        runtime.spawn(permafrost_s3::serve_admin(listener, admin.clone(), async {
            let _ = rx.await;
        }));
        Server {
            endpoint,
            store,
            admin,
            shutdown: Some(tx),
            runtime: Some(runtime),
            agent: ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(60))
                .build(),
            token: api_token(ACCESS_KEY, SECRET_KEY),
            _dir: dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.endpoint.as_str().trim_end_matches('/'), path)
    }

    /// `(status, body as JSON or as a string)` whatever the status.
    fn call(
        &self,
        method: &str,
        path: &str,
        auth: Option<&str>,
        body: Option<&str>,
    ) -> (u16, Value) {
        let mut request = self.agent.request(method, &self.url(path));
        if let Some(token) = auth {
            request = request.set("Authorization", &format!("Bearer {token}"));
        }
        let result = match body {
            Some(b) => request
                .set("Content-Type", "application/json")
                .send_string(b),
            None => request.call(),
        };
        let response = match result {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{method} {path}: {e}"),
        };
        let status = response.status();
        let text = response.into_string().unwrap();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    fn api(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        self.call(
            method,
            &format!("{API}{path}"),
            Some(&self.token.clone()),
            body,
        )
    }

    fn ok(&self, method: &str, path: &str, body: Option<&str>) -> Value {
        let (status, value) = self.api(method, path, body);
        assert!(
            (200..300).contains(&status),
            "{method} {path}: {status} {value}"
        );
        value
    }

    fn state(&self) -> Value {
        self.ok("GET", "/state", None)
    }

    fn metrics(&self) -> String {
        let (status, value) = self.call(
            "GET",
            "/_permafrost/metrics",
            Some(&self.token.clone()),
            None,
        );
        assert_eq!(status, 200, "{value}");
        value.as_str().unwrap().to_string()
    }

    fn wait_task(&self, id: u64) -> Value {
        let start = Instant::now();
        loop {
            let task = self.ok("GET", &format!("/tasks/{id}"), None);
            if task["state"] == "done" || task["state"] == "failed" {
                return task;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "task {id} never ended: {task}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait until every disk is off (idle timeouts ran out) and the monitor saw it.
    fn all_off(&self) {
        let power = self.store.engine().power().clone();
        let start = Instant::now();
        let monitor_off = || {
            self.admin
                .monitor()
                .views()
                .iter()
                .all(|v| v.shown_state == "off" || v.shown_state == "failed")
        };
        while power.spinning_now() > 0 || !monitor_off() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "disks never went off"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn spin_ups(&self) -> u64 {
        self.store.engine().power().totals().spin_ups
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.admin.stop();
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(5));
        }
    }
}

/// A persisted object on the grid, its data disk found through the engine.
fn persisted_object(server: &Server, bucket: &str, key: &str, bytes: usize) -> usize {
    let store = &server.store;
    if store.head_bucket(bucket).is_err() {
        store.create_bucket(bucket, Default::default()).unwrap();
    }
    let data: Vec<u8> = (0..bytes).map(|i| (i * 7 % 251) as u8).collect();
    store
        .put_object(bucket, key, PutOptions::default(), &data)
        .unwrap();
    store.persist_now().unwrap();
    store.evict_cache().unwrap();
    let info = store.head_object(bucket, key).unwrap();
    let grid_bucket = info.grid_bucket.expect("placed") as usize;
    store.engine().geometry().bucket_disk(grid_bucket)
}

#[test]
fn every_endpoint_refuses_missing_credentials_with_401_and_wrong_ones_with_403() {
    let server = Server::start();
    let index = server.ok("GET", "/", None);
    let endpoints: Vec<String> = index["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap().to_string())
        .collect();
    assert!(endpoints.len() >= 18, "{endpoints:?}");
    let wrong = api_token(ACCESS_KEY, "not-the-secret");
    let mut checked = 0;
    for endpoint in endpoints
        .iter()
        .chain(std::iter::once(&"GET /metrics".to_string()))
    {
        let (method, pattern) = endpoint.split_once(' ').unwrap();
        if pattern == "/login" || pattern == "/logout" || pattern == "/session" {
            continue;
        }
        let path = pattern
            .replace("{disk}", "1")
            .replace("{id}", "1")
            .replace("{bucket}", "photos");
        let path = if pattern == "/metrics" {
            "/_permafrost/metrics".to_string()
        } else {
            format!("{API}{path}")
        };
        let (status, body) = server.call(method, &path, None, None);
        assert_eq!(status, 401, "{method} {path} without credentials: {body}");
        let (status, body) = server.call(method, &path, Some(&wrong), None);
        assert_eq!(status, 403, "{method} {path} with a wrong token: {body}");
        assert!(
            body["message"].as_str().unwrap().contains("token"),
            "{body}"
        );
        checked += 1;
    }
    assert_eq!(checked, endpoints.len() - 3 + 1);
    // A wrong AWS signature is s3s's 403; the right one works.
    let sign = |secret: &str| {
        let mut url = server.endpoint.clone();
        url.set_path(&format!("{API}/state"));
        rusty_s3::signing::sign(
            &jiff::Timestamp::now(),
            Method::Get,
            url,
            ACCESS_KEY,
            secret,
            None,
            "us-east-1",
            600,
            std::iter::empty(),
            std::iter::empty(),
        )
    };
    let status = |url: Url| match server.agent.request_url("GET", &url).call() {
        Ok(r) => r.status(),
        Err(ureq::Error::Status(s, _)) => s,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(status(sign("wrong-secret")), 403);
    assert_eq!(status(sign(SECRET_KEY)), 200);
    // The dashboard's files need no login; unknown API paths are 404 and wrong methods 405.
    let (status, _) = server.call("GET", "/_permafrost/ui/", None, None);
    assert_eq!(status, 200);
    assert_eq!(server.api("GET", "/nothing-here", None).0, 404);
    assert_eq!(server.api("DELETE", "/state", None).0, 405);
}

#[test]
fn a_dashboard_session_is_made_by_logging_in_and_needs_the_csrf_header_to_act() {
    let server = Server::start();
    let login = |secret: &str| {
        server
            .agent
            .post(&server.url(&format!("{API}/login")))
            .send_string(&format!(
                r#"{{"access_key":"{ACCESS_KEY}","secret_key":"{secret}"}}"#
            ))
            .map_err(Box::new)
    };
    match login("wrong").map_err(|e| *e) {
        Err(ureq::Error::Status(403, _)) => {}
        other => panic!(
            "a wrong password logged in: {:?}",
            other.map(|r| r.status())
        ),
    }
    let response = login(SECRET_KEY).unwrap();
    let cookie = response.header("set-cookie").unwrap().to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let session = cookie.split(';').next().unwrap().to_string();
    let get = server
        .agent
        .get(&server.url(&format!("{API}/state")))
        .set("Cookie", &session)
        .call()
        .unwrap();
    assert_eq!(get.status(), 200);
    let post = |csrf: bool| {
        let mut r = server
            .agent
            .post(&server.url(&format!("{API}/cache/evict")))
            .set("Cookie", &session);
        if csrf {
            r = r.set("X-Permafrost-Csrf", "1");
        }
        match r.call() {
            Ok(r) => r.status(),
            Err(ureq::Error::Status(s, _)) => s,
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(post(false), 403);
    assert_eq!(post(true), 200);
}

#[test]
fn state_shows_every_disk_with_position_role_and_power_and_agrees_with_the_metrics() {
    let server = Server::start();
    let state = server.state();
    assert_eq!(state["layout"], "4x4:2+1");
    assert_eq!(
        (state["columns"].as_u64(), state["rows"].as_u64()),
        (Some(4), Some(4))
    );
    let disks = state["disks"].as_array().unwrap();
    assert_eq!(disks.len(), 16);
    let geometry = server.store.engine().geometry();
    for d in disks {
        let i = d["disk"].as_u64().unwrap() as usize;
        assert_eq!(d["column"].as_u64().unwrap() as usize, geometry.column(i));
        assert_eq!(d["row"].as_u64().unwrap() as usize, geometry.row(i));
        let expected = match geometry.role(i) {
            permafrost_grid::Role::Data { .. } => "data",
            permafrost_grid::Role::HParity { .. } => "hp",
            permafrost_grid::Role::VParity { .. } => "vp",
        };
        assert_eq!(d["role"], expected, "disk {i}");
        assert_eq!(d["power_state"], "off");
        assert_eq!(d["smart"]["available"], false);
        assert!(d["smart"]["why"].as_str().unwrap().contains("file-backed"));
    }
    let metrics = server.metrics();
    let value = |line_start: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(line_start))
            .unwrap_or_else(|| panic!("no {line_start} in the metrics"))
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(value("permafrost_disks{state=\"off\"}"), 16.0);
    let watts = state["energy"]["watts"].as_f64().unwrap();
    assert!((value("permafrost_power_watts ") - watts).abs() < 1e-6);
    assert!(metrics.contains("# TYPE permafrost_disk_spinups_total counter"));
    assert!(metrics.contains("# TYPE permafrost_disk_spinup_duration_seconds histogram"));
    assert!(metrics.contains("permafrost_cache_capacity_bytes 268435456"));
}

#[test]
fn bad_parameters_get_400s_that_say_what_was_wrong() {
    let server = Server::start();
    let cases: [(&str, &str, Option<&str>, &str); 17] = [
        (
            "PUT",
            "/watchdog",
            Some(r#"{"pressure_fill_percent": 150}"#),
            "pressure_fill_percent 150: more than 0 and at most 100",
        ),
        (
            "PUT",
            "/watchdog",
            Some(r#"{"interval_ms": 0}"#),
            "interval_ms 0: at least 10",
        ),
        (
            "PUT",
            "/watchdog",
            Some(r#"{"max_age_ms": -5}"#),
            "request body",
        ),
        ("GET", "/history?limit=0", None, "limit=0: between 1 and"),
        (
            "POST",
            "/webhooks",
            Some(r#"{"url":"ftp://x","bucket":"b"}"#),
            "give an http://",
        ),
        (
            "POST",
            "/webhooks",
            Some(r#"{"url":"http://127.0.0.1:9/h","bucket":"b","key":"k","prefix":"p"}"#),
            "not both",
        ),
        (
            "POST",
            "/webhooks",
            Some(r#"{"url":"http://127.0.0.1:9/h"}"#),
            "missing field `bucket`",
        ),
        (
            "DELETE",
            "/webhooks/abc",
            None,
            "webhook id \"abc\" is not a number",
        ),
        (
            "GET",
            "/disks/99",
            None,
            "unknown disk \"99\": this grid has disks 0 to 15",
        ),
        ("POST", "/disks/x/scrub", None, "unknown disk \"x\""),
        ("POST", "/disks/16/fail", None, "unknown disk \"16\""),
        (
            "POST",
            "/scrub",
            Some(r#"{"max_age_hours": -1}"#),
            "max_age_hours -1",
        ),
        (
            "POST",
            "/scrub",
            Some(r#"{"max_age": 1}"#),
            "unknown field `max_age`",
        ),
        (
            "POST",
            "/disks/1/replace",
            Some("{not json"),
            "request body",
        ),
        ("GET", "/wait", None, "give bucket="),
        ("GET", "/wait?bucket=b&key=k&prefix=p", None, "not both"),
        (
            "GET",
            "/wait?bucket=b&key=k&timeout_ms=soon",
            None,
            "timeout_ms=\"soon\"",
        ),
    ];
    for (method, path, body, expected) in cases {
        let (status, value) = server.api(method, path, body);
        assert_eq!(status, 400, "{method} {path}: {value}");
        let message = value["message"].as_str().unwrap();
        assert!(
            message.contains(expected),
            "{method} {path}: {message:?} lacks {expected:?}"
        );
    }
    server
        .store
        .create_bucket("photos", Default::default())
        .unwrap();
    let (status, value) = server.api(
        "PUT",
        "/buckets/photos/placement",
        Some(r#"{"placement":"fastest"}"#),
    );
    assert_eq!(status, 400);
    assert!(value["message"]
        .as_str()
        .unwrap()
        .contains("unknown placement strategy \"fastest\""));
    let (status, _) = server.api("GET", "/buckets/nobucket/placement", None);
    assert_eq!(status, 404);
    let (status, value) = server.api("POST", "/disks/3/replace", None);
    assert_eq!(status, 409, "{value}");
}

#[test]
fn reading_a_persisted_object_wakes_its_disk_and_the_api_events_and_metrics_name_the_object() {
    let server = Server::start();
    let disk = persisted_object(&server, "photos", "2024/scan.tif", 300 << 10);
    server.all_off();
    let before = server.ok("GET", "/wakes", None)["wakes"]
        .as_array()
        .unwrap()
        .len();
    let last_event = server
        .admin
        .events()
        .since(0, usize::MAX)
        .last()
        .map_or(0, |e| e.id);
    // Read it through S3 with a presigned GET.
    let bucket = rusty_s3::Bucket::new(
        server.endpoint.clone(),
        UrlStyle::Path,
        "photos",
        "us-east-1",
    )
    .unwrap();
    let credentials = rusty_s3::Credentials::new(ACCESS_KEY, SECRET_KEY);
    let url = bucket
        .get_object(Some(&credentials), "2024/scan.tif")
        .sign(Duration::from_secs(600));
    let body = server.agent.get(url.as_str()).call().unwrap();
    assert_eq!(
        body.into_string().map(|_| ()).err().map(|e| e.to_string()),
        None::<String>
    );
    // The API names the object as the reason of the disk's last wake.
    let d = server.ok("GET", &format!("/disks/{disk}"), None);
    assert_eq!(
        d["last_wake"]["reason"], "read of photos/2024/scan.tif",
        "{d}"
    );
    assert_eq!(d["last_wake"]["kind"], "read");
    assert_eq!(d["spin_ups_by_reason"]["read"], 1);
    let wakes = server.ok("GET", "/wakes", None)["wakes"]
        .as_array()
        .unwrap()
        .clone();
    assert!(wakes.len() > before);
    // The events: off -> spinning_up -> active (or idle after a short read) with the reason, then off again.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut states = Vec::new();
    let mut reasons = Vec::new();
    while Instant::now() < deadline && states.last().map(String::as_str) != Some("off") {
        for e in server.admin.events().since(last_event, usize::MAX) {
            if e.kind == "disk"
                && e.data["disk"] == disk
                && !states.contains(&format!("{}#{}", e.data["state"].as_str().unwrap(), e.id))
            {
                states.push(format!("{}#{}", e.data["state"].as_str().unwrap(), e.id));
                reasons.push(e.text.clone());
            }
        }
        states.dedup();
        let plain: Vec<String> = states
            .iter()
            .map(|s| s.split('#').next().unwrap().to_string())
            .collect();
        if plain.last().map(String::as_str) == Some("off") {
            states = plain;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        states.first().map(String::as_str),
        Some("spinning_up"),
        "{states:?} {reasons:?}"
    );
    assert!(states.contains(&"active".to_string()), "{states:?}");
    assert_eq!(states.last().map(String::as_str), Some("off"), "{states:?}");
    assert!(
        reasons[0].contains("read of photos/2024/scan.tif"),
        "{reasons:?}"
    );
    // The metrics count it by reason, and the request as one that needed a spin-up.
    let metrics = server.metrics();
    assert!(
        metrics.contains(&format!(
            "permafrost_disk_spinups_total{{disk=\"{disk}\",reason=\"read\"}} 1"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("permafrost_s3_time_to_first_byte_seconds_count{operation=\"GetObject\",spin_up=\"true\"} 1"),
        "{}",
        metrics.lines().filter(|l| l.contains("first_byte")).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn the_event_stream_delivers_wakes_with_their_reasons() {
    let server = Server::start();
    let disk = persisted_object(&server, "logs", "day1.log", 100 << 10);
    server.all_off();
    let response = server
        .agent
        .get(&server.url(&format!("{API}/events")))
        .set("Authorization", &format!("Bearer {}", server.token))
        .call()
        .unwrap();
    assert_eq!(response.header("content-type"), Some("text/event-stream"));
    let mut lines = BufReader::new(response.into_reader()).lines();
    let store = server.store.clone();
    let reader = std::thread::spawn(move || {
        let _reason = permafrost_disk::power::WakeReason::read("logs", "day1.log").enter();
        let (_, mut r) = store.open_object("logs", "day1.log", None, None).unwrap();
        std::io::copy(&mut r, &mut std::io::sink()).unwrap();
    });
    let mut event = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let line = lines.next().unwrap().unwrap();
        if line == "event: wake" {
            event = lines.next().unwrap().unwrap();
            break;
        }
    }
    reader.join().unwrap();
    let data: Value = serde_json::from_str(event.strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(data["data"]["disk"], disk);
    assert_eq!(data["data"]["reason"], "read of logs/day1.log");
    assert!(data["text"]
        .as_str()
        .unwrap()
        .contains("woke up for read of logs/day1.log"));
}

#[test]
fn fail_replace_and_rebuild_run_through_the_api_with_progress() {
    let server = Server::start();
    let disk = persisted_object(&server, "data", "a.bin", 2 << 20);
    // The background recovery would race the task for the work: pause it, so the task reports its progress.
    server.store.engine().pause_background(true);
    let failed = server.ok("POST", &format!("/disks/{disk}/fail"), None);
    assert_eq!(failed["failed"], true);
    let d = server.ok("GET", &format!("/disks/{disk}"), None);
    assert_eq!(
        (
            d["failed"].as_bool(),
            d["health"].as_str(),
            d["shown_state"].as_str()
        ),
        (Some(true), Some("failed"), Some("failed"))
    );
    let (status, value) = server.api("POST", &format!("/disks/{disk}/rebuild"), None);
    assert_eq!(status, 409, "a failed disk must be replaced first: {value}");
    let replaced = server.ok(
        "POST",
        &format!("/disks/{disk}/replace"),
        Some(r#"{"rebuild": true}"#),
    );
    let task = server.wait_task(replaced["rebuild_task"]["id"].as_u64().unwrap());
    assert_eq!(task["state"], "done", "{task}");
    assert!(task["total_bytes"].as_u64().unwrap() > 0);
    assert_eq!(task["done_bytes"], task["total_bytes"]);
    server.store.engine().pause_background(false);
    let d = server.ok("GET", &format!("/disks/{disk}"), None);
    assert_eq!(
        (d["health"].as_str(), d["defect_bytes"].as_u64()),
        (Some("ok"), Some(0))
    );
    let events = server.admin.events().since(0, usize::MAX);
    assert!(events
        .iter()
        .any(|e| e.kind == "task" && e.text.contains("rebuild of disk") && e.text.contains('%')));
    // The object reads back whole.
    let (_, mut r) = server
        .store
        .open_object("data", "a.bin", None, None)
        .unwrap();
    assert_eq!(
        std::io::copy(&mut r, &mut std::io::sink()).unwrap(),
        2 << 20
    );
    // A scrub of it is a task too, and names its reason.
    server.all_off();
    let scrub = server.ok("POST", &format!("/disks/{disk}/scrub"), None);
    let task = server.wait_task(scrub["task"]["id"].as_u64().unwrap());
    assert_eq!(task["state"], "done", "{task}");
    assert!(task["result"]["bytes_verified"].as_u64().unwrap() > 0);
    let d = server.ok("GET", &format!("/disks/{disk}"), None);
    assert_eq!(d["last_wake"]["kind"], "scrub", "{d}");
}

#[test]
fn wait_returns_once_every_extent_and_all_parity_are_on_disk() {
    let server = Server::start();
    server
        .store
        .create_bucket("runs", Default::default())
        .unwrap();
    for i in 0..3 {
        server
            .store
            .put_object(
                "runs",
                &format!("2026/scan{i}.bin"),
                PutOptions::default(),
                &vec![i as u8 + 1; 600 << 10],
            )
            .unwrap();
    }
    let answer = server.ok(
        "GET",
        "/wait?bucket=runs&prefix=2026/&timeout_ms=30000&persist_now=true",
        None,
    );
    assert_eq!(
        (answer["persisted"].as_bool(), answer["objects"].as_u64()),
        (Some(true), Some(3))
    );
    // Checked against the engine: no parity delta waits, no write promise is open, every object persisted.
    let status = server.store.engine().status().unwrap();
    assert_eq!(status.pending_delta_bytes, 0);
    assert_eq!(status.open_promises, 0);
    for i in 0..3 {
        let info = server
            .store
            .head_object("runs", &format!("2026/scan{i}.bin"))
            .unwrap();
        assert_eq!(info.state.as_str(), "persisted");
    }
    let one = server.ok("GET", "/wait?bucket=runs&key=2026/scan1.bin", None);
    assert_eq!(one["persisted"], true);
    assert_eq!(server.api("GET", "/wait?bucket=runs&key=nope", None).0, 404);
    assert_eq!(
        server.api("GET", "/wait?bucket=nobucket&prefix=x", None).0,
        404
    );
}

#[test]
fn scraping_metrics_and_reading_the_state_never_wake_a_disk() {
    let server = Server::start();
    persisted_object(&server, "quiet", "x.bin", 200 << 10);
    server.all_off();
    let spin_ups = server.spin_ups();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        server.metrics();
        server.state();
        server.ok("GET", "/disks/0", None);
        server.ok("GET", "/tasks", None);
        let (status, _) = server.call("GET", "/_permafrost/ui/", None, None);
        assert_eq!(status, 200);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(server.spin_ups(), spin_ups, "monitoring woke a disk");
    assert_eq!(server.store.engine().power().spinning_now(), 0);
}

#[test]
fn history_is_kept_in_the_catalog_bounded_with_rates_between_samples() {
    let server = Server::start();
    persisted_object(&server, "hist", "x.bin", 100 << 10);
    std::thread::sleep(Duration::from_millis(1500));
    let history = server.ok("GET", "/history", None);
    let points = history["points"].as_array().unwrap();
    assert_eq!(points.len(), 5, "bounded to history_keep: {history}");
    let times: Vec<u64> = points
        .iter()
        .map(|p| p["at_unix_ms"].as_u64().unwrap())
        .collect();
    assert!(
        times.windows(2).all(|w| w[0] < w[1]),
        "oldest first: {times:?}"
    );
    assert!(points[1]["read_bytes_per_second"].as_f64().is_some());
    assert!(
        points.iter().all(|p| p["spin_ups"].as_u64().unwrap() > 0),
        "persisting spun disks up"
    );
    let since = times[3];
    let later = server.ok("GET", &format!("/history?since_ms={since}&limit=10"), None);
    assert!(later["points"].as_array().unwrap().len() >= 2);
    assert_eq!(
        server.ok("GET", "/history?limit=1", None)["points"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // Webhooks: registered, listed, removed; an unknown bucket is a 404.
    let hook = server.ok(
        "POST",
        "/webhooks",
        Some(r#"{"url":"http://127.0.0.1:9/h","bucket":"hist","prefix":"x"}"#),
    );
    assert_eq!(hook["target"], "hist/x*");
    assert_eq!(
        server.ok("GET", "/webhooks", None)["webhooks"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let (status, _) = server.api(
        "POST",
        "/webhooks",
        Some(r#"{"url":"http://127.0.0.1:9/h","bucket":"nobucket"}"#),
    );
    assert_eq!(status, 404);
    let id = hook["id"].as_u64().unwrap();
    server.ok("DELETE", &format!("/webhooks/{id}"), None);
    assert_eq!(
        server.api("DELETE", &format!("/webhooks/{id}"), None).0,
        404
    );
}

#[test]
fn watchdog_thresholds_change_at_run_time_and_are_kept_in_the_configuration_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("permafrost.toml");
    std::fs::write(&path, "# operator's notes\n[store]\nfsync = false\n").unwrap();
    let server = Server::start_with(AdminOptions {
        config_path: Some(path.clone()),
        ..Default::default()
    });
    let before = server.ok("GET", "/watchdog", None);
    let changed = server.ok(
        "PUT",
        "/watchdog",
        Some(r#"{"max_age_ms": 1234, "pressure_fill_percent": 70}"#),
    );
    assert_eq!(changed["watchdog"]["max_age_ms"], 1234);
    assert_eq!(
        changed["watchdog"]["interval_ms"],
        before["watchdog"]["interval_ms"]
    );
    assert_eq!(server.store.watchdog().max_age_ms, 1234);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("# operator's notes"), "{text}");
    assert!(
        text.contains("max_age_ms = 1234") && text.contains("pressure_fill_percent = 70"),
        "{text}"
    );
    assert!(text.contains("fsync = false"), "{text}");
    // A refused change changes nothing.
    let (status, _) = server.api(
        "PUT",
        "/watchdog",
        Some(r#"{"max_age_ms": 1, "pressure_fill_percent": 0}"#),
    );
    assert_eq!(status, 400);
    assert_eq!(server.store.watchdog().max_age_ms, 1234);
}
