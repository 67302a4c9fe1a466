//! `permafrost record`: start, stop and watch scans on a running server (its admin API under
//! `/_permafrost/api/v1/record`), give it a schedule, send a paced VDIF stream for tests and demos, check a
//! recorded scan against the stream that was sent, and the benchmark's floor loop.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use permafrost_record::stream::{self, StreamSpec, Verifier};
use permafrost_record::{RecorderStatus, ScanStatus};

use crate::object::{self, Target};
use crate::units::format_bytes;

/// The admin API's recorder endpoints (`permafrost_record::api` serves them).
const API: &str = "/_permafrost/api/v1/record";

#[derive(Subcommand, Debug)]
pub enum RecordCommand {
    /// Start recording a scan now: EXPERIMENT/STATION/SCAN into vlbi/EXPERIMENT/STATION/SCAN.vdif.
    Start(StartArgs),
    /// Stop a scan (EXPERIMENT/STATION/SCAN) and wait until it is an ordinary object.
    Stop(StopArgs),
    /// Scans being recorded, scheduled and ended, with their loss accounting.
    Status(StatusArgs),
    /// Give the server a schedule file (START DURATION SCAN per line) for one experiment and station.
    Schedule(ScheduleArgs),
    /// Send a paced VDIF stream (tests, demos, benchmarks).
    Send(SendArgs),
    /// Read a recorded scan back and compare it with the stream `send` sent (same stream options).
    Check(CheckArgs),
    /// The benchmark's floor: receive with recvmmsg into a file, nothing else; prints JSON.
    #[command(hide = true)]
    Floor(FloorArgs),
}

#[derive(Args, Debug)]
pub struct StartArgs {
    /// EXPERIMENT/STATION/SCAN, e.g. r1234/Ef/no0001.
    scan: String,
    /// Where to receive, e.g. 0.0.0.0:50000.
    #[arg(long)]
    listen: SocketAddr,
    #[command(flatten)]
    format: FormatArgs,
    /// Stop after this long (e.g. 120s, 2m); default: until `record stop`.
    #[arg(long)]
    duration: Option<String>,
    #[command(flatten)]
    target: Target,
}

#[derive(Args, Debug, Clone)]
pub struct FormatArgs {
    /// Each datagram starts with jive5ab's 64-bit sequence number (udps).
    #[arg(long)]
    udps: bool,
    /// Frame size in bytes; default: from the first frame's header.
    #[arg(long)]
    frame_bytes: Option<usize>,
    /// Frames per second per VDIF thread, for loss accounting by VDIF time; default: learned.
    #[arg(long)]
    frames_per_second: Option<u64>,
}

#[derive(Args, Debug)]
pub struct StopArgs {
    /// EXPERIMENT/STATION/SCAN.
    scan: String,
    #[command(flatten)]
    target: Target,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Only this scan (EXPERIMENT/STATION/SCAN).
    scan: Option<String>,
    #[command(flatten)]
    target: Target,
}

#[derive(Args, Debug)]
pub struct ScheduleArgs {
    /// The schedule file (`-` for standard input); omit with --clear.
    file: Option<PathBuf>,
    #[arg(long)]
    experiment: Option<String>,
    #[arg(long)]
    station: Option<String>,
    /// Where to receive, e.g. 0.0.0.0:50000.
    #[arg(long)]
    listen: Option<SocketAddr>,
    #[command(flatten)]
    format: FormatArgs,
    /// Remove the scans that have not started from the server's schedule.
    #[arg(long, conflicts_with = "file")]
    clear: bool,
    #[command(flatten)]
    target: Target,
}

#[derive(Args, Debug, Clone)]
pub struct StreamArgs {
    /// Data rate: bits per second with an optional unit (500Mbps, 2Gbps, 2G, 2e9).
    #[arg(long, default_value = "1Gbps")]
    rate: String,
    /// Seconds of stream.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Bytes per frame, header included (a multiple of 8).
    #[arg(long, default_value_t = 8032)]
    frame_bytes: usize,
    /// VDIF threads (frames alternate between them).
    #[arg(long, default_value_t = 1)]
    threads: u16,
    /// Station (two letters).
    #[arg(long, default_value = "Pf")]
    station: String,
    /// VDIF second of the first frame.
    #[arg(long, default_value_t = 0)]
    first_second: u32,
    /// Prefix each datagram with a 64-bit sequence number (jive5ab udps).
    #[arg(long)]
    udps: bool,
    /// Seed of the samples.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Frames not sent, by index: `100+5,700` (five from 100, and 700).
    #[arg(long, default_value = "")]
    skip: String,
    /// Frame indices sent after their successor: `50,3000`.
    #[arg(long, default_value = "")]
    swap: String,
}

#[derive(Args, Debug)]
pub struct SendArgs {
    /// Where to send, e.g. 127.0.0.1:50000.
    #[arg(long)]
    to: SocketAddr,
    #[command(flatten)]
    stream: StreamArgs,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The scan: bucket/key, e.g. vlbi/r1234/Ef/no0001.vdif.
    object: String,
    #[command(flatten)]
    stream: StreamArgs,
    /// Leave out the frames the scan itself lists as missing (its gaps, and what came after its last frame):
    /// checks that the stored bytes are exactly the frames received.
    #[arg(long)]
    gaps_from_scan: bool,
    #[command(flatten)]
    target: Target,
}

#[derive(Args, Debug)]
pub struct FloorArgs {
    #[arg(long)]
    listen: SocketAddr,
    #[arg(long, default_value_t = 8032)]
    datagram_bytes: usize,
    #[arg(long)]
    out: PathBuf,
    /// Stop after this many datagrams.
    #[arg(long)]
    datagrams: u64,
    /// Stop when none arrived for this long after the first.
    #[arg(long, default_value_t = 3000)]
    idle_ms: u64,
    #[arg(long, default_value_t = 256 << 20)]
    rcvbuf_bytes: usize,
}

pub fn run(command: RecordCommand) -> Result<()> {
    match command {
        RecordCommand::Start(a) => start(a),
        RecordCommand::Stop(a) => stop(a),
        RecordCommand::Status(a) => status(a),
        RecordCommand::Schedule(a) => schedule(a),
        RecordCommand::Send(a) => send(a),
        RecordCommand::Check(a) => check(a),
        RecordCommand::Floor(a) => {
            let report = permafrost_record::floor::run(
                a.listen,
                a.rcvbuf_bytes,
                a.datagram_bytes,
                &a.out,
                a.datagrams,
                a.idle_ms,
            )?;
            println!("{}", serde_json::to_string(&report)?);
            Ok(())
        }
    }
}

/// `EXPERIMENT/STATION/SCAN` → its three names.
fn split_id(id: &str) -> Result<(&str, &str, &str)> {
    let parts: Vec<&str> = id.split('/').collect();
    match parts[..] {
        [e, s, n] if !e.is_empty() && !s.is_empty() && !n.is_empty() => Ok((e, s, n)),
        _ => bail!("scan {id:?}: give it as EXPERIMENT/STATION/SCAN, e.g. r1234/Ef/no0001"),
    }
}

/// The server's recorder API.
struct Api {
    remote: object::remote::Remote,
    endpoint: String,
}

impl Api {
    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<serde_json::Value> {
        self.remote.admin(method, path, body).map_err(|e| {
            if e.to_string().contains("not found (HTTP 404)") {
                anyhow::anyhow!(
                    "{e}: the server at {} has no recorder API (a permafrost serve of this version has)",
                    self.endpoint
                )
            } else {
                e
            }
        })
    }
}

fn remote(target: &Target) -> Result<Api> {
    let endpoint = object::remote_endpoint(target)
        .unwrap_or_else(|| format!("http://{}", crate::config::LISTEN_DEFAULT));
    Ok(Api {
        remote: object::remote::Remote::connect(&endpoint, target)?,
        endpoint,
    })
}

fn start(a: StartArgs) -> Result<()> {
    let (experiment, station, scan) = split_id(&a.scan)?;
    let duration_ms = a
        .duration
        .as_deref()
        .map(permafrost_record::schedule::parse_duration_ms)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let body = serde_json::json!({
        "experiment": experiment, "station": station, "scan": scan, "listen": a.listen,
        "udps": a.format.udps, "frame_bytes": a.format.frame_bytes,
        "frames_per_second": a.format.frames_per_second, "duration_ms": duration_ms,
    });
    let answer = remote(&a.target)?.call("POST", &format!("{API}/scans"), Some(&body))?;
    if a.target.json() {
        println!("{answer}");
        return Ok(());
    }
    let s: ScanStatus = serde_json::from_value(answer).context("the server's answer")?;
    println!(
        "recording {} on {} into {}/{}",
        s.id, s.listen, s.bucket, s.key
    );
    if let Some(r) = s.rcvbuf.filter(|r| r.capped) {
        println!("warning: {}", r.describe());
    }
    Ok(())
}

fn stop(a: StopArgs) -> Result<()> {
    split_id(&a.scan)?;
    let answer = remote(&a.target)?.call("POST", &format!("{API}/scans/{}/stop", a.scan), None)?;
    if a.target.json() {
        println!("{answer}");
        return Ok(());
    }
    let s: ScanStatus = serde_json::from_value(answer).context("the server's answer")?;
    print_scan(&s);
    Ok(())
}

fn status(a: StatusArgs) -> Result<()> {
    let remote = remote(&a.target)?;
    if let Some(id) = &a.scan {
        split_id(id)?;
        let answer = remote.call("GET", &format!("{API}/scans/{id}"), None)?;
        if a.target.json() {
            println!("{answer}");
        } else {
            print_scan(&serde_json::from_value(answer).context("the server's answer")?);
        }
        return Ok(());
    }
    let answer = remote.call("GET", API, None)?;
    if a.target.json() {
        println!("{answer}");
        return Ok(());
    }
    let s: RecorderStatus = serde_json::from_value(answer).context("the server's answer")?;
    println!(
        "recorder: bucket {}, receive buffers of {} asked (net.core.rmem_max {})",
        s.bucket,
        format_bytes(s.rcvbuf_requested_bytes as u64),
        s.rmem_max_bytes.map_or("unknown".into(), format_bytes)
    );
    if s.scans.is_empty() && s.scheduled.is_empty() {
        println!("no scans");
    }
    for scan in &s.scans {
        print_scan(scan);
    }
    for p in &s.scheduled {
        println!(
            "scheduled {} at {} for {} s on {} (line {})",
            p.id,
            p.start,
            p.duration_ms as f64 / 1000.0,
            p.listen,
            p.line
        );
    }
    for e in &s.schedule_errors {
        println!("schedule error: {e}");
    }
    Ok(())
}

fn print_scan(s: &ScanStatus) {
    let l = &s.writer.loss;
    let seconds = s
        .ended_ms
        .unwrap_or_else(now_ms)
        .saturating_sub(s.started_ms) as f64
        / 1000.0;
    let rate = if seconds > 0.0 {
        s.writer.bytes_written as f64 * 8.0 / seconds / 1e9
    } else {
        0.0
    };
    println!(
        "{} {}: {} in {}/{} ({} durable), {:.3} Gbit/s over {:.1} s",
        s.id,
        s.state.as_str(),
        format_bytes(s.writer.bytes_written),
        s.bucket,
        s.key,
        format_bytes(s.writer.durable_bytes),
        rate,
        seconds
    );
    println!(
        "  frames: {} received of {} expected, {} missing in {} gaps, {} out of order, {} duplicate, {} invalid; \
         rejected {}; dropped: {} by the kernel (socket buffer full), {} with the writer behind",
        l.frames_received,
        l.frames_expected,
        l.frames_missing,
        l.gaps,
        l.frames_out_of_order,
        l.frames_duplicate,
        l.frames_invalid,
        s.frames_rejected.values().sum::<u64>(),
        s.kernel_drops,
        s.ring_dropped_frames
    );
    println!(
        "  ring: {} allocated, at most {} waiting for the writer",
        format_bytes(s.ring_bytes_allocated),
        format_bytes(s.ring_bytes_used_max)
    );
    for g in &s.writer.gaps {
        println!("  gap: {g}");
    }
    if let Some(r) = &s.first_rejection {
        println!("  first rejected datagram: {r}");
    }
    if let Some(e) = &s.error {
        println!("  error: {e}");
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn schedule(a: ScheduleArgs) -> Result<()> {
    let remote = remote(&a.target)?;
    if a.clear {
        let answer = remote.call("DELETE", &format!("{API}/schedule"), None)?;
        println!("{answer}");
        return Ok(());
    }
    let Some(file) = a.file else {
        bail!("give a schedule file (or - for standard input), or --clear");
    };
    let text = if file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading the schedule from stdin")?
    } else {
        std::fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?
    };
    let (Some(experiment), Some(station), Some(listen)) = (a.experiment, a.station, a.listen)
    else {
        bail!("a schedule needs --experiment, --station and --listen");
    };
    let body = serde_json::json!({
        "defaults": {
            "experiment": experiment, "station": station, "listen": listen, "udps": a.format.udps,
            "frame_bytes": a.format.frame_bytes, "frames_per_second": a.format.frames_per_second,
        },
        "text": text,
    });
    let answer = remote.call("POST", &format!("{API}/schedule"), Some(&body))?;
    if a.target.json() {
        println!("{answer}");
        return Ok(());
    }
    for s in answer.as_array().into_iter().flatten() {
        println!(
            "scheduled {} at {} for {} ms",
            s["id"].as_str().unwrap_or("?"),
            s["start"].as_str().unwrap_or("?"),
            s["duration_ms"]
        );
    }
    Ok(())
}

/// A rate: bits per second with an optional unit.
fn parse_rate(text: &str) -> Result<u64> {
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    let lower = lower.trim_end_matches("bps").trim_end_matches("bit/s");
    let (number, factor) = match lower.chars().last() {
        Some('k') => (&lower[..lower.len() - 1], 1e3),
        Some('m') => (&lower[..lower.len() - 1], 1e6),
        Some('g') => (&lower[..lower.len() - 1], 1e9),
        _ => (lower, 1.0),
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("--rate {text:?} is not a rate (try 500Mbps, 2Gbps)"))?;
    if !(value > 0.0 && (value * factor).is_finite()) {
        bail!("--rate {text:?} must be positive");
    }
    Ok((value * factor) as u64)
}

/// `100+5,700` → [(100, 5), (700, 1)].
fn parse_runs(text: &str, what: &str) -> Result<Vec<(u64, u64)>> {
    text.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (first, count) = p.split_once('+').unwrap_or((p, "1"));
            match (first.parse(), count.parse()) {
                (Ok(f), Ok(c)) => Ok((f, c)),
                _ => bail!("--{what} {p:?}: give INDEX or INDEX+COUNT"),
            }
        })
        .collect()
}

fn stream_spec(a: &StreamArgs) -> Result<StreamSpec> {
    if !a.frame_bytes.is_multiple_of(8)
        || !(permafrost_record::vdif::HEADER_BYTES..=permafrost_record::vdif::FRAME_BYTES_MAX)
            .contains(&a.frame_bytes)
    {
        bail!(
            "--frame-bytes {} must be a multiple of 8 between {} and {}",
            a.frame_bytes,
            permafrost_record::vdif::HEADER_BYTES,
            permafrost_record::vdif::FRAME_BYTES_MAX
        );
    }
    if a.threads == 0 || a.seconds.is_nan() || a.seconds <= 0.0 {
        bail!("--threads and --seconds must be positive");
    }
    let rate = parse_rate(&a.rate)?;
    let mut spec = StreamSpec::at_rate(rate / a.threads as u64, a.seconds, a.frame_bytes);
    spec.frames *= a.threads as u64;
    spec.threads = a.threads;
    spec.station = a.station.clone();
    spec.first_second = a.first_second;
    spec.udps = a.udps;
    spec.seed = a.seed;
    spec.skip = parse_runs(&a.skip, "skip")?;
    spec.swap = parse_runs(&a.swap, "swap")?
        .into_iter()
        .map(|(i, _)| i)
        .collect();
    Ok(spec)
}

fn send(a: SendArgs) -> Result<()> {
    let spec = stream_spec(&a.stream)?;
    let report = stream::send(&spec, a.to).with_context(|| format!("sending to {}", a.to))?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "sent {} frames ({}) in {:.2} s: {:.3} Gbit/s (asked {:.3}); at worst {:.1} ms behind schedule",
            report.frames_sent,
            format_bytes(report.frames_sent * spec.frame_bytes as u64),
            report.seconds,
            report.rate_bits_per_second / 1e9,
            spec.rate_bits_per_second() as f64 / 1e9,
            report.behind_ms_max
        );
    }
    Ok(())
}

/// Compares what it is given with the stream.
struct VerifyingSink(Verifier);

impl Write for VerifyingSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The scan's own record of what it misses: its gaps (from `vdif-gap-list-object` when it lists more than its
/// metadata holds) and its last frame.
fn missing_from_scan(target: &Target, path: &str, spec: &mut StreamSpec) -> Result<u64> {
    use permafrost_record::loss::{GapRecord, Position};
    let stat = object::stat_of(target, path)?;
    let meta = |name: &str| {
        stat.user_metadata
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let gaps: Vec<GapRecord> = match meta("vdif-gap-list-object") {
        Some(key) => {
            let mut body = Vec::new();
            object::get_into(target, &format!("{}/{key}", stat.bucket), &mut body)?;
            serde_json::from_slice(&body).with_context(|| format!("{key} is not a gap list"))?
        }
        None => meta("vdif-gap-list")
            .unwrap_or_default()
            .split("; ")
            .filter(|g| !g.is_empty() && !g.starts_with("and "))
            .map(|g| g.parse().map_err(anyhow::Error::msg))
            .collect::<Result<_>>()?,
    };
    let mut missing = 0;
    for g in gaps {
        let first = spec
            .index_of(&g.from)
            .with_context(|| format!("gap {g} is not in the stream given"))?;
        spec.skip.push((first, g.frames));
        missing += g.frames;
    }
    if let Some(last) = meta("vdif-last") {
        let last: Position = last.parse().map_err(anyhow::Error::msg)?;
        let index = spec.index_of(&last).with_context(|| {
            format!("the scan's last frame ({last}) is not in the stream given")
        })?;
        spec.frames = spec.frames.min(index + 1);
    }
    Ok(missing)
}

fn check(a: CheckArgs) -> Result<()> {
    let mut spec = stream_spec(&a.stream)?;
    let sent = spec.frames_sent();
    let missing = if a.gaps_from_scan {
        missing_from_scan(&a.target, &a.object, &mut spec)?
    } else {
        0
    };
    let after = sent
        .saturating_sub(spec.frames_sent())
        .saturating_sub(missing);
    let mut sink = VerifyingSink(Verifier::new(spec));
    object::get_into(&a.target, &a.object, &mut sink)?;
    match sink.0.finish() {
        Ok(bytes) if a.gaps_from_scan => {
            println!(
                "{}: identical to the stream sent less the {missing} frames its gaps list and {after} after its last frame ({bytes} bytes)",
                a.object
            );
            Ok(())
        }
        Ok(bytes) => {
            println!("{}: identical to the stream sent ({bytes} bytes)", a.object);
            Ok(())
        }
        Err(e) => bail!("{}: {e}", a.object),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_runs_parse_with_units() {
        assert_eq!(parse_rate("2Gbps").unwrap(), 2_000_000_000);
        assert_eq!(parse_rate("500M").unwrap(), 500_000_000);
        assert_eq!(parse_rate("2e9").unwrap(), 2_000_000_000);
        assert!(parse_rate("fast")
            .unwrap_err()
            .to_string()
            .contains("not a rate"));
        assert_eq!(
            parse_runs("100+5, 700", "skip").unwrap(),
            vec![(100, 5), (700, 1)]
        );
        assert!(parse_runs("x", "skip").is_err());
        assert!(split_id("a/b").is_err());
    }
}
