//! A running server reached through S3: requests signed with AWS Signature V4 as presigned URLs (`rusty-s3`),
//! sent with `ureq`. Bodies stream in both directions; nothing holds a whole object in memory.

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use md5::{Digest, Md5};
use rusty_s3::actions::{
    CreateBucket, DeleteBucket, DeleteObject, GetObject, HeadObject, ListObjectsV2, PutObject,
};
use rusty_s3::{Bucket, Credentials, Method, S3Action, UrlStyle};
use url::Url;

use permafrost_store::{BucketSettings, BucketSettingsReport};

use super::{
    print_json, print_status, Archive, Body, Listed, Listing, ObjectStat, PutRequest, Range, Target,
};
use crate::progress::bytes_bar;
use crate::units::format_bytes;

/// How long a presigned request stays valid (a transfer must start within it).
const SIGNATURE_VALID: Duration = Duration::from_secs(3600);
/// Bytes moved per read/write of a transfer.
const TRANSFER_BUFFER_BYTES: usize = 1 << 20;
/// Largest error body read from the server.
const ERROR_BODY_BYTES_MAX: u64 = 64 << 10;
/// Largest listing or status response read from the server.
const RESPONSE_BYTES_MAX: u64 = 64 << 20;
/// Headers that may carry the persistence state of an object.
const STATE_HEADERS: [&str; 2] = ["x-amz-meta-permafrost-state", permafrost_s3::STATE_HEADER];
/// The server's own status endpoint.
const STATUS_PATH: &str = permafrost_s3::STATUS_PATH;
/// Everything the admin API knows at once.
const ADMIN_STATE_PATH: &str = "/_permafrost/api/v1/state";
/// The admin API's check of the catalog's persistence claims against the grid.
const VERIFY_PERSISTED_PATH: &str = "/_permafrost/api/v1/verify/persisted";

/// A running server.
pub struct Remote {
    endpoint: Url,
    credentials: Credentials,
    region: String,
    agent: ureq::Agent,
}

/// Credentials from the flags, else the environment, else `DATA/credentials`.
fn credentials(target: &Target) -> Result<Credentials> {
    let from_env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let mut key = target
        .access_key
        .clone()
        .or_else(|| from_env("PERMAFROST_ROOT_USER"));
    let mut secret = target
        .secret_key
        .clone()
        .or_else(|| from_env("PERMAFROST_ROOT_PASSWORD"));
    if key.is_none() || secret.is_none() {
        let (k, s) = crate::data_dir::credentials_in_file(&target.data_dir);
        key = key.or(k);
        secret = secret.or(s);
    }
    match (key, secret) {
        (Some(key), Some(secret)) => Ok(Credentials::new(key, secret)),
        _ => bail!(
            "no credentials for the endpoint: pass --access-key and --secret-key, set PERMAFROST_ROOT_USER and \
             PERMAFROST_ROOT_PASSWORD, or point --data-dir at the server's data directory (DATA/credentials)"
        ),
    }
}

/// The text between `<tag>` and `</tag>`, every occurrence.
fn xml_values<'a>(xml: &'a str, tag: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find(&open) {
        rest = &rest[start + open.len()..];
        let Some(end) = rest.find(&close) else { break };
        out.push(&rest[..end]);
        rest = &rest[end + close.len()..];
    }
    out
}

fn unescape_xml(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

impl Remote {
    pub fn connect(endpoint: &str, target: &Target) -> Result<Remote> {
        let endpoint: Url = endpoint
            .parse()
            .with_context(|| format!("--endpoint {endpoint:?} is not a URL"))?;
        if !matches!(endpoint.scheme(), "http" | "https") || endpoint.host_str().is_none() {
            bail!("--endpoint {endpoint}: use http://HOST:PORT");
        }
        Ok(Remote {
            endpoint,
            credentials: credentials(target)?,
            region: target.region.clone(),
            agent: ureq::AgentBuilder::new()
                .timeout_connect(Duration::from_secs(10))
                .build(),
        })
    }

    fn bucket(&self, name: &str) -> Result<Bucket> {
        Bucket::new(
            self.endpoint.clone(),
            UrlStyle::Path,
            name.to_string(),
            self.region.clone(),
        )
        .with_context(|| format!("bucket {name:?} with endpoint {}", self.endpoint))
    }

    /// Sign a request to a path of the endpoint that is not a bucket (`/`, `/_permafrost/…`).
    fn sign_path(&self, method: Method, path: &str) -> Url {
        let mut url = self.endpoint.clone();
        url.set_path(path);
        rusty_s3::signing::sign(
            &jiff::Timestamp::now(),
            method,
            url,
            self.credentials.key(),
            self.credentials.secret(),
            None,
            &self.region,
            SIGNATURE_VALID.as_secs(),
            std::iter::empty(),
            std::iter::empty(),
        )
    }

    /// A signed request to one of the server's JSON endpoints; its answer parsed.
    fn admin_json<T: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        method: Method,
        path: &str,
        query: Option<&[(&str, String)]>,
        body: Option<&str>,
    ) -> Result<T> {
        let mut url = self.endpoint.clone();
        url.set_path(path);
        let verb = match method {
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            _ => "GET",
        };
        // rusty-s3 builds the query from this list (a query already in the URL would be dropped).
        let pairs = query.unwrap_or(&[]);
        let url = rusty_s3::signing::sign(
            &jiff::Timestamp::now(),
            method,
            url,
            self.credentials.key(),
            self.credentials.secret(),
            None,
            &self.region,
            SIGNATURE_VALID.as_secs(),
            pairs.iter().map(|(k, v)| (*k, v.as_str())),
            std::iter::empty(),
        );
        let request = self.agent.request_url(verb, &url);
        let result = match body {
            Some(b) => request
                .set("Content-Type", "application/json")
                .send_string(b),
            None => request.call(),
        };
        let response = self.check(what, result)?;
        let mut text = String::new();
        response
            .into_reader()
            .take(RESPONSE_BYTES_MAX)
            .read_to_string(&mut text)
            .with_context(|| format!("reading the {what}"))?;
        serde_json::from_str(&text)
            .with_context(|| format!("the {what} from {} has an unknown shape", self.endpoint))
    }

    /// Send a request; turn HTTP errors into messages naming what failed (S3 error code and message).
    fn send(
        &self,
        what: &str,
        request: ureq::Request,
        body: Option<(Box<dyn Read>, u64)>,
    ) -> Result<ureq::Response> {
        let result = match body {
            Some((reader, len)) => request.set("Content-Length", &len.to_string()).send(reader),
            None => request.call(),
        };
        self.check(what, result)
    }

    /// The response, or an error naming what failed (S3 error code and message).
    fn check(
        &self,
        what: &str,
        result: Result<ureq::Response, ureq::Error>,
    ) -> Result<ureq::Response> {
        match result {
            Ok(response) => Ok(response),
            Err(ureq::Error::Status(status, response)) => {
                let mut text = String::new();
                let _ = response
                    .into_reader()
                    .take(ERROR_BODY_BYTES_MAX)
                    .read_to_string(&mut text);
                // S3 errors are XML; the service's own endpoints answer JSON.
                let json: Option<serde_json::Value> = serde_json::from_str(&text).ok();
                let json_field = |name: &str| {
                    json.as_ref()
                        .and_then(|j| j.get(name)?.as_str().map(str::to_owned))
                };
                let code = xml_values(&text, "Code")
                    .first()
                    .map(|c| unescape_xml(c))
                    .or_else(|| json_field("error"));
                let message = xml_values(&text, "Message")
                    .first()
                    .map(|m| unescape_xml(m))
                    .or_else(|| json_field("message"));
                match (code, message) {
                    (Some(code), Some(message)) => bail!("{what}: {code}: {message}"),
                    (Some(code), None) => bail!("{what}: {code} (HTTP {status})"),
                    _ if status == 404 => bail!("{what}: not found (HTTP 404)"),
                    _ if status == 403 => {
                        bail!("{what}: access denied (HTTP 403): check the credentials")
                    }
                    _ => bail!("{what}: HTTP {status}"),
                }
            }
            Err(ureq::Error::Transport(e)) => bail!(
                "{what}: cannot reach {}: {}",
                self.endpoint,
                transport_error(&e)
            ),
        }
    }

    /// A connection that broke while an upload's body was being sent: the server may have answered early (a
    /// `NoSuchBucket` before the body was read) and closed, which the HTTP client only sees as a broken pipe.
    /// Ask the server about the bucket and report its answer, else the broken connection (never the URL: it
    /// carries the signature).
    fn explain_cut_upload(&self, what: &str, bucket: &str, e: &ureq::Transport) -> anyhow::Error {
        let probe = self.bucket(bucket).map(|b| {
            let mut action = ListObjectsV2::new(&b, Some(&self.credentials));
            action.with_max_keys(1);
            action.sign(SIGNATURE_VALID)
        });
        if let Ok(url) = probe {
            if let Err(answer) = self.check(what, self.agent.request_url("GET", &url).call()) {
                if !answer.to_string().contains("cannot reach") {
                    return answer;
                }
            }
        }
        anyhow::anyhow!(
            "{what}: the connection to {} broke while sending the body: {}",
            self.endpoint,
            transport_error(e)
        )
    }

    /// A JSON request to the service's own API (`/_permafrost/…`), signed as the root user; the answer's
    /// JSON, or an error with the server's message.
    pub fn admin(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<serde_json::Value> {
        let signing = match method {
            "GET" => Method::Get,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            other => bail!("unsupported method {other}"),
        };
        let body = body.map(|b| b.to_string());
        self.admin_json(
            &format!("{method} {path}"),
            signing,
            path,
            None,
            body.as_deref(),
        )
    }

    /// `permafrost status` through the server: its status endpoint, then (for people) the grid from the admin
    /// API v1; with `watch`, redrawn until interrupted.
    pub fn status(&self, json: bool, watch: Option<Duration>) -> Result<()> {
        let Some(every) = watch else {
            return self.status_once(json);
        };
        let terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
        loop {
            if terminal {
                print!("\x1b[2J\x1b[H"); // clear the screen, cursor home
            } else {
                println!("---- {}", jiff::Timestamp::now());
            }
            self.status_once(json)?;
            std::io::Write::flush(&mut std::io::stdout()).ok();
            std::thread::sleep(every);
        }
    }

    /// The admin API's `GET /_permafrost/api/v1/state` (`None` from a server without the API).
    fn admin_state(&self) -> Result<Option<serde_json::Value>> {
        let url = self.sign_path(Method::Get, ADMIN_STATE_PATH);
        let result = self.agent.request_url("GET", &url).call();
        if let Err(ureq::Error::Status(404, _)) = result {
            return Ok(None);
        }
        let response = self.check("admin state", result)?;
        let mut text = String::new();
        response
            .into_reader()
            .take(RESPONSE_BYTES_MAX)
            .read_to_string(&mut text)
            .context("reading the admin state")?;
        let state = serde_json::from_str(&text)
            .with_context(|| format!("the admin state from {} is not JSON", self.endpoint))?;
        Ok(Some(state))
    }

    fn status_once(&self, json: bool) -> Result<()> {
        let url = self.sign_path(Method::Get, STATUS_PATH);
        let result = self.agent.request_url("GET", &url).call();
        if let Err(ureq::Error::Status(404, _)) = result {
            bail!(
                "the server at {} has no status endpoint ({STATUS_PATH}) yet; run `permafrost status --data-dir DIR` \
                 on its machine with the server stopped",
                self.endpoint
            );
        }
        let response = self.check("status", result)?;
        let mut text = String::new();
        response
            .into_reader()
            .take(RESPONSE_BYTES_MAX)
            .read_to_string(&mut text)
            .context("reading the status")?;
        if json {
            // The server's document as it is (with `detail`, pretty-printed like `permafrost status --json` on
            // a data directory).
            serde_json::from_str::<serde_json::Value>(&text)
                .with_context(|| format!("the status from {} is not JSON", self.endpoint))?;
            println!("{}", text.trim_end());
            return Ok(());
        }
        let summary: permafrost_store::StatusSummary = serde_json::from_str(&text)
            .with_context(|| format!("the status from {} has an unknown shape", self.endpoint))?;
        print_status(&summary);
        if let Some(state) = self.admin_state()? {
            print!("{}", super::grid_view::render(&state));
        }
        Ok(())
    }

    /// `permafrost verify --persisted` through the server's admin API (`GET /_permafrost/api/v1/verify/persisted`).
    pub fn verify_persisted(&self) -> Result<permafrost_store::PersistedReport> {
        self.admin_json(
            "persisted-claims check",
            Method::Get,
            VERIFY_PERSISTED_PATH,
            None,
            None,
        )
    }

    /// `permafrost verify` through S3: read every object back (the server checks its hashes on the way out) and
    /// compare single-part objects with their ETag (MD5).
    pub fn verify(&self, json: bool) -> Result<()> {
        let mut objects = Vec::new();
        for bucket in self.list_buckets()? {
            for object in self.list(&bucket, "", true)?.objects {
                objects.push((bucket.clone(), object));
            }
        }
        let bar = super::count_bar("verify", json);
        bar.set_length(objects.len() as u64);
        let mut errors = Vec::new();
        let mut bytes_checked = 0u64;
        for (bucket, object) in &objects {
            let mut hasher = HashingSink {
                md5: Md5::new(),
                bytes: 0,
            };
            match self.get(bucket, &object.key, None, &mut hasher, true) {
                Ok(n) => {
                    bytes_checked += n;
                    let etag = object.etag.trim_matches('"');
                    let md5: String = hasher
                        .md5
                        .finalize()
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect();
                    if etag.len() == 32 && !etag.contains('-') && etag != md5 {
                        errors.push(format!(
                            "{bucket}/{}: MD5 {md5} does not match the ETag {etag}",
                            object.key
                        ));
                    } else if n != object.size_bytes {
                        errors.push(format!(
                            "{bucket}/{}: read {n} bytes, listed {}",
                            object.key, object.size_bytes
                        ));
                    }
                }
                Err(e) => errors.push(format!("{bucket}/{}: {e:#}", object.key)),
            }
            bar.inc(1);
        }
        bar.finish_and_clear();
        if json {
            print_json(&serde_json::json!({
                "objects_checked": objects.len(),
                "bytes_checked": bytes_checked,
                "errors": errors,
            }))?;
        } else {
            for error in &errors {
                println!("FAILED  {error}");
            }
            println!(
                "verified {} objects, {}: {} failed",
                objects.len(),
                format_bytes(bytes_checked),
                errors.len()
            );
        }
        if !errors.is_empty() {
            bail!(
                "{} of {} objects did not read back verified",
                errors.len(),
                objects.len()
            );
        }
        Ok(())
    }
}

/// A sink that only hashes (MD5) and counts.
struct HashingSink {
    md5: Md5,
    bytes: u64,
}

impl Write for HashingSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.md5.update(buf);
        self.bytes += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Spool standard input to a temporary file so the upload can announce its length (S3 requires one).
fn spool_stdin() -> Result<(std::fs::File, u64)> {
    let path = std::env::temp_dir().join(format!("permafrost-put-{}.spool", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .create_new(true)
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    // Unlinked at once: the file lives only as long as the handle.
    let _ = std::fs::remove_file(&path);
    let len = io::copy(&mut io::stdin().lock(), &mut file).context("reading standard input")?;
    io::Seek::rewind(&mut file).context("rewinding the spooled input")?;
    Ok((file, len))
}

/// Reads through, advancing a progress bar.
struct Progress<R> {
    inner: R,
    bar: indicatif::ProgressBar,
}

impl<R: Read> Read for Progress<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bar.inc(n as u64);
        Ok(n)
    }
}

fn header_stat(bucket: &str, key: &str, response: &ureq::Response) -> ObjectStat {
    let header = |name: &str| response.header(name).map(str::to_string);
    let user_metadata = response
        .headers_names()
        .into_iter()
        .filter_map(|name| {
            let meta = name.strip_prefix("x-amz-meta-")?.to_string();
            Some((meta, response.header(&name)?.to_string()))
        })
        .collect();
    ObjectStat {
        bucket: bucket.to_string(),
        key: key.to_string(),
        size_bytes: header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        etag: header("etag").unwrap_or_default(),
        content_encoding: header("content-encoding").unwrap_or_else(|| "identity".into()),
        content_type: header("content-type"),
        last_modified: header("last-modified").unwrap_or_default(),
        state: STATE_HEADERS.iter().find_map(|h| header(h)),
        grid_bucket: header(permafrost_s3::GRID_BUCKET_HEADER).and_then(|v| v.parse().ok()),
        stored_bytes: header(permafrost_s3::STORED_BYTES_HEADER).and_then(|v| v.parse().ok()),
        user_metadata,
        ..Default::default()
    }
}

/// What went wrong with a connection, without the request's URL (a presigned URL holds the signature).
fn transport_error(e: &ureq::Transport) -> String {
    match e.message() {
        Some(message) => format!("{}: {message}", e.kind()),
        None => match std::error::Error::source(e) {
            Some(source) => format!("{}: {source}", e.kind()),
            None => e.kind().to_string(),
        },
    }
}

impl Archive for Remote {
    fn put(
        &self,
        bucket: &str,
        key: &str,
        body: Body<'_>,
        request: &PutRequest,
        json: bool,
    ) -> Result<ObjectStat> {
        let b = self.bucket(bucket)?;
        let mut action = PutObject::new(&b, Some(&self.credentials), key);
        let decoded = request.decoded_length.map(|n| n.to_string());
        let mut headers: Vec<(String, String)> = Vec::new();
        if request.content_encoding != "identity" {
            headers.push(("content-encoding".into(), request.content_encoding.clone()));
        }
        if let Some(n) = &decoded {
            headers.push((
                format!("x-amz-meta-{}", permafrost_store::DECODED_LENGTH_META),
                n.clone(),
            ));
        }
        if let Some(t) = &request.content_type {
            headers.push(("content-type".into(), t.clone()));
        }
        for (name, value) in &request.user_metadata {
            headers.push((format!("x-amz-meta-{name}"), value.clone()));
        }
        for (name, value) in &headers {
            action.headers_mut().insert(name.clone(), value.clone());
        }
        let url = action.sign(SIGNATURE_VALID);
        let (reader, len): (Box<dyn Read + '_>, u64) = match body {
            Body::File { file, len_bytes } => (Box::new(file), len_bytes),
            Body::Stdin => {
                let (file, len) = spool_stdin()?;
                (Box::new(file), len)
            }
            Body::Stream { reader, len_bytes } => (Box::new(reader), len_bytes),
        };
        let bar = bytes_bar("put", json);
        bar.set_length(len);
        let mut req = self.agent.request_url("PUT", &url);
        for (name, value) in &headers {
            req = req.set(name, value);
        }
        let reader = Box::new(Progress {
            inner: reader,
            bar: bar.clone(),
        });
        let what = format!("put {bucket}/{key}");
        let result = req.set("Content-Length", &len.to_string()).send(reader);
        let response = match result {
            Err(ureq::Error::Transport(e)) => {
                bar.finish_and_clear();
                return Err(self.explain_cut_upload(&what, bucket, &e));
            }
            other => self.check(&what, other)?,
        };
        bar.finish_and_clear();
        let etag = response.header("etag").unwrap_or_default().to_string();
        let mut stat = self.stat(bucket, key).unwrap_or_else(|_| ObjectStat {
            bucket: bucket.into(),
            key: key.into(),
            size_bytes: request.decoded_length.unwrap_or(len),
            content_encoding: request.content_encoding.clone(),
            ..Default::default()
        });
        if !etag.is_empty() {
            stat.etag = etag;
        }
        Ok(stat)
    }

    fn get(
        &self,
        bucket: &str,
        key: &str,
        range: Option<Range>,
        sink: &mut dyn Write,
        json: bool,
    ) -> Result<u64> {
        let b = self.bucket(bucket)?;
        let url = GetObject::new(&b, Some(&self.credentials), key).sign(SIGNATURE_VALID);
        let mut req = self.agent.request_url("GET", &url);
        if let Some(r) = range {
            req = req.set("Range", &r.header());
        }
        let response = self.send(&format!("get {bucket}/{key}"), req, None)?;
        let expected: Option<u64> = response
            .header("content-length")
            .and_then(|v| v.parse().ok());
        let bar = bytes_bar("get", json);
        bar.set_length(expected.unwrap_or(0));
        let mut reader = response.into_reader();
        let mut buffer = vec![0u8; TRANSFER_BUFFER_BYTES];
        let mut total = 0u64;
        loop {
            let n = match reader.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => bail!("get {bucket}/{key}: the transfer broke after {total} bytes: {e}"),
            };
            sink.write_all(&buffer[..n])
                .context("writing the download")?;
            total += n as u64;
            bar.inc(n as u64);
        }
        bar.finish_and_clear();
        if let Some(expected) = expected {
            if total != expected {
                bail!("get {bucket}/{key}: the server announced {expected} bytes and sent {total}");
            }
        }
        Ok(total)
    }

    fn list(&self, bucket: &str, prefix: &str, recursive: bool) -> Result<Listing> {
        let b = self.bucket(bucket)?;
        let mut listing = Listing::default();
        let mut token: Option<String> = None;
        loop {
            let mut action = ListObjectsV2::new(&b, Some(&self.credentials));
            action.query_mut().remove("encoding-type");
            if !prefix.is_empty() {
                action.with_prefix(prefix.to_string());
            }
            if !recursive {
                action.with_delimiter("/");
            }
            if let Some(t) = token.take() {
                action.with_continuation_token(t);
            }
            let url = action.sign(SIGNATURE_VALID);
            let response = self.send(
                &format!("list {bucket}/{prefix}"),
                self.agent.request_url("GET", &url),
                None,
            )?;
            let mut text = String::new();
            response
                .into_reader()
                .take(RESPONSE_BYTES_MAX)
                .read_to_string(&mut text)
                .context("reading a listing")?;
            let page = ListObjectsV2::parse_response(&text)
                .with_context(|| format!("list {bucket}: bad response"))?;
            listing
                .prefixes
                .extend(page.common_prefixes.into_iter().map(|p| p.prefix));
            listing
                .objects
                .extend(page.contents.into_iter().map(|o| Listed {
                    key: o.key,
                    size_bytes: o.size,
                    etag: o.etag,
                    last_modified: o.last_modified,
                }));
            match page.next_continuation_token {
                Some(t) if !t.is_empty() => token = Some(t),
                _ => return Ok(listing),
            }
        }
    }

    fn list_buckets(&self) -> Result<Vec<String>> {
        let url = self.sign_path(Method::Get, "/");
        let response = self.send("list buckets", self.agent.request_url("GET", &url), None)?;
        let mut text = String::new();
        response
            .into_reader()
            .take(RESPONSE_BYTES_MAX)
            .read_to_string(&mut text)
            .context("reading the bucket list")?;
        Ok(xml_values(&text, "Name")
            .into_iter()
            .map(unescape_xml)
            .collect())
    }

    fn remove(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        bypass_governance: bool,
    ) -> Result<permafrost_store::DeleteOutcome> {
        let b = self.bucket(bucket)?;
        let mut action = DeleteObject::new(&b, Some(&self.credentials), key);
        if let Some(v) = version_id {
            action.query_mut().insert("versionId", v.to_string());
        }
        if bypass_governance {
            action
                .headers_mut()
                .insert("x-amz-bypass-governance-retention", "true");
        }
        let url = action.sign(SIGNATURE_VALID);
        let mut request = self.agent.request_url("DELETE", &url);
        if bypass_governance {
            request = request.set("x-amz-bypass-governance-retention", "true");
        }
        let response = self.send(&format!("rm {bucket}/{key}"), request, None)?;
        Ok(permafrost_store::DeleteOutcome {
            version_id: response.header("x-amz-version-id").map(str::to_owned),
            delete_marker: response.header("x-amz-delete-marker") == Some("true"),
        })
    }

    fn restore(
        &self,
        bucket: &str,
        prefix: &str,
        days: u32,
        tier: permafrost_store::RestoreTier,
        json: bool,
    ) -> Result<permafrost_store::RestoreBatch> {
        let body = serde_json::json!({
            "bucket": bucket, "prefix": prefix, "days": days, "tier": tier.as_str()
        })
        .to_string();
        let started: permafrost_store::RestoreBatch = self.admin_json(
            "restore",
            Method::Post,
            permafrost_s3::RESTORES_PATH,
            None,
            Some(&body),
        )?;
        let bar = super::count_bar("restore", json);
        bar.set_length(started.requested);
        loop {
            let progress: permafrost_store::RestoreBatch = self.admin_json(
                "restore progress",
                Method::Get,
                permafrost_s3::RESTORES_PATH,
                None,
                None,
            )?;
            bar.set_position(progress.done);
            if progress.pending == 0 {
                bar.finish_and_clear();
                return Ok(progress);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn datasets(
        &self,
        filter: &permafrost_store::DatasetFilter,
    ) -> Result<Vec<permafrost_store::DatasetSummary>> {
        let mut query = Vec::new();
        if let Some(b) = &filter.bucket {
            query.push(("bucket", b.clone()));
        }
        if let Some((k, v)) = &filter.tag {
            query.push(("tag", format!("{k}={v}")));
        }
        if let Some(t) = filter.written_after_ms {
            query.push(("after", t.to_string()));
        }
        if let Some(t) = filter.written_before_ms {
            query.push(("before", t.to_string()));
        }
        self.admin_json(
            "datasets",
            Method::Get,
            permafrost_s3::DATASETS_PATH,
            Some(&query),
            None,
        )
    }

    fn stat(&self, bucket: &str, key: &str) -> Result<ObjectStat> {
        let b = self.bucket(bucket)?;
        let url = HeadObject::new(&b, Some(&self.credentials), key).sign(SIGNATURE_VALID);
        let result = self.agent.request_url("HEAD", &url).call();
        if let Err(ureq::Error::Status(404, _)) = result {
            // HEAD has no body to name the error: tell a missing bucket from a missing key with a listing.
            self.list(bucket, key, true)?;
            bail!("no such key: {bucket}/{key}");
        }
        let response = self.check(&format!("stat {bucket}/{key}"), result)?;
        Ok(header_stat(bucket, key, &response))
    }

    fn make_bucket(&self, bucket: &str) -> Result<()> {
        let b = self.bucket(bucket)?;
        let url = CreateBucket::new(&b, &self.credentials).sign(SIGNATURE_VALID);
        self.send(
            &format!("mb {bucket}"),
            self.agent.request_url("PUT", &url),
            None,
        )?;
        Ok(())
    }

    fn bucket_settings(
        &self,
        bucket: &str,
        change: Option<BucketSettings>,
    ) -> Result<BucketSettingsReport> {
        let path = format!("{}{bucket}", permafrost_s3::BUCKETS_PREFIX);
        let what = format!("settings of {bucket}");
        let result = match &change {
            None => {
                let url = self.sign_path(Method::Get, &path);
                self.agent.request_url("GET", &url).call()
            }
            Some(settings) => {
                let url = self.sign_path(Method::Put, &path);
                let body = serde_json::to_string(settings)?;
                self.agent
                    .request_url("PUT", &url)
                    .set("Content-Type", "application/json")
                    .send_string(&body)
            }
        };
        let response = self.check(&what, result)?;
        let mut text = String::new();
        response
            .into_reader()
            .take(RESPONSE_BYTES_MAX)
            .read_to_string(&mut text)
            .with_context(|| format!("reading the {what}"))?;
        serde_json::from_str(&text)
            .with_context(|| format!("the {what} from {} has an unknown shape", self.endpoint))
    }

    fn remove_bucket(&self, bucket: &str) -> Result<()> {
        let b = self.bucket(bucket)?;
        let url = DeleteBucket::new(&b, &self.credentials).sign(SIGNATURE_VALID);
        self.send(
            &format!("rb {bucket}"),
            self.agent.request_url("DELETE", &url),
            None,
        )?;
        Ok(())
    }

    fn wait_persisted(&self, bucket: &str, key: &str, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        loop {
            let stat = self.stat(bucket, key)?;
            match stat.state.as_deref() {
                Some("persisted") => return Ok(true),
                Some(_) => {}
                None => bail!(
                    "the server does not report persistence states (no {} header); --wait-persisted needs it",
                    STATE_HEADERS[1]
                ),
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_error_bodies_give_code_and_message() {
        let xml = "<Error><Code>NoSuchKey</Code><Message>no such key: a &amp; b</Message></Error>";
        assert_eq!(xml_values(xml, "Code"), vec!["NoSuchKey"]);
        assert_eq!(
            unescape_xml(xml_values(xml, "Message")[0]),
            "no such key: a & b"
        );
    }
}
