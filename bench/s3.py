#!/usr/bin/env python3
"""Benchmarks of issue 3 (the archive service over S3), each next to a baseline measured in the same run.

Drives the real release binary (`permafrost serve`) on a scratch data directory with unmodified clients:

  A. PUT and GET of large objects (1 GiB; quick: 128 MiB) with 1 and 4 streams (boto3, one thread and one
     connection per stream, multipart in 64 MiB parts; and rclone as a faster client), next to O_DIRECT and
     buffered `dd` writes and reads of a file of the same size on the same file system as the data directory.
     Persistence is held off during A (watchdog thresholds out of reach), so A measures the cache path.
  B. 4 KiB PUTs per second with 1 and 16 clients (boto3 in worker processes; rclone with 16 transfers).
  C. Persistence: objects in the cache are persisted on demand (POST /_permafrost/persist when the admin API
     exists, otherwise a restart with max_age_ms = 0); bytes/s moved from cache to grid, and I/O amplification
     = device bytes read + written (/proc/<server>/io) per user byte, plus the engine's per-disk counters.
  D. Resident memory (VmRSS every 100 ms, and VmHWM) of a fresh server while one object of 10 GiB (quick:
     1 GiB) is streamed in (multipart) and out again; the data is generated on the fly by the client.
  Every phase also records CPU seconds of the server and of the client, to tell which one is the bottleneck
  (this machine has 2 cores shared by both).

Usage: .venv/bin/python bench/s3.py [--quick] [--scratch DIR] [--bin PATH] [--fsync true|false|both]
                                     [--skip PHASES] [--out DIR]
  --quick    128 MiB objects, 256 MiB persisted, 1 GiB stream, 3 s small-PUT runs (< 2 min)
  --fsync    `both` (default for the full run) repeats A and B with fsync = false for comparison
  --skip     comma-separated phases to skip: large, rclone, small, persist, rss (--only: the phases to run)
  --bin      the permafrost binary (default $PERMAFROST_BIN, else $CARGO_TARGET_DIR/release/permafrost,
             built with `cargo build --release -p permafrost` when missing)
Raw numbers go to bench/out/s3-<UTC time>/ (results.json, summary.txt, server logs); bench/run.sh --s3 runs it.
"""

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import requests
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
REPO = Path(__file__).resolve().parents[1]
ACCESS_KEY = "PFBENCHKEY"
SECRET_KEY = "pf-bench-secret-key-0123456789"
BUCKET = "bench"
HEALTH_PATH = "/_permafrost/health"
STATUS_PATH = "/_permafrost/status"
PERSIST_PATH = "/_permafrost/persist"
STATE_HEADER = "x-permafrost-state"
PART_BYTES = 64 * MiB
RSS_SAMPLE_S = 0.1
RSS_GOAL_BYTES = 512 * MiB
NEVER = 1 << 50  # a watchdog threshold that is never reached: persistence held off

FULL = dict(object_bytes=1 * GiB, persist_bytes=2 * GiB, persist_objects=2, stream_bytes=10 * GiB,
            small_seconds=10.0, rclone_small_files=3000)
QUICK = dict(object_bytes=128 * MiB, persist_bytes=256 * MiB, persist_objects=2, stream_bytes=1 * GiB,
             small_seconds=3.0, rclone_small_files=600)

# ---------------------------------------------------------------------------------------------- data


class RandomData:
    """Incompressible, unique bytes generated on the fly: block i (1 MiB) of object `seed` is a 16-byte header
    (seed, i) followed by a slice of a shared 32 MiB random buffer, so no two blocks or objects are identical
    (content addressing cannot deduplicate them) and no 1 MiB chunk compresses."""

    BASE = os.urandom(32 * MiB)
    SLOTS = (len(BASE) - MiB) // 4096

    def __init__(self, seed: int):
        self.seed = seed

    def block(self, i: int) -> bytes:
        off = ((self.seed * 7919 + i * 131) % self.SLOTS) * 4096
        return struct.pack("<QQ", self.seed, i) + self.BASE[off:off + MiB - 16]

    def range(self, offset: int, length: int) -> bytes:
        """Bytes [offset, offset + length); offset must be MiB-aligned. The same bytes as joining `block`s, built
        with one copy (headers and views of BASE joined once): joining whole blocks copied every byte three times
        and cost the client 2.3 s of CPU per GiB, as much as the server it measures (now 0.9 s, mostly the page
        faults of the new buffer)."""
        assert offset % MiB == 0
        first, last = offset // MiB, (offset + length + MiB - 1) // MiB
        base, pieces = memoryview(self.BASE), []
        for i in range(first, last):
            off = ((self.seed * 7919 + i * 131) % self.SLOTS) * 4096
            n = min(MiB, offset + length - i * MiB)
            pieces.append(struct.pack("<QQ", self.seed, i)[:n])
            if n > 16:
                pieces.append(base[off:off + n - 16])
        return b"".join(pieces)


# ---------------------------------------------------------------------------------------------- server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_config(fsync: bool, cache_bytes: int, disk_bytes: int, hold: bool) -> str:
    """permafrost.toml: `hold` keeps persistence off (no threshold is ever reached); otherwise max_age 0."""
    age, above = (86_400_000, NEVER) if hold else (0, 512 * MiB)
    return f"""
[store]
cache_bytes_max = {cache_bytes}
cache_wait_ms_max = 30000
gc_grace_ms = 0
gc_interval_ms = 2000
fsync = {"true" if fsync else "false"}

[store.watchdog]
interval_ms = 200
max_age_ms = {age}
start_off_disk_above_bytes = {above if not hold else NEVER}
persist_spinning_above_bytes = {above}
pressure_fill_percent = 95.0
persist_under_pressure_above_bytes = {above}

[store.grid]
disk_capacity_bytes = {disk_bytes}
"""


def read_proc(pid: int, name: str) -> str:
    with open(f"/proc/{pid}/{name}") as f:
        return f.read()


def proc_kv(pid: int, name: str) -> dict:
    out = {}
    for line in read_proc(pid, name).splitlines():
        k, _, v = line.partition(":")
        out[k.strip()] = v.strip()
    return out


def proc_cpu_s(pid: int) -> float:
    fields = read_proc(pid, "stat").rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def proc_io(pid: int) -> dict:
    return {k: int(v) for k, v in proc_kv(pid, "io").items()}


def kib_field(pid: int, field: str) -> int:
    return int(proc_kv(pid, "status")[field].split()[0]) * KiB


class Server:
    """One `permafrost serve` on a data directory, with a sampler of its VmRSS every 100 ms."""

    def __init__(self, binary: Path, data_dir: Path, config: str, log: Path, extra_args: tuple = ()):
        self.binary, self.data_dir, self.log = binary, data_dir, log
        self.extra_args = tuple(str(a) for a in extra_args)  # e.g. ("--mount", DIR): bench/mount.py
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        data_dir.mkdir(parents=True, exist_ok=True)
        (data_dir / "permafrost.toml").write_text(config)
        self.process = None
        self.rss_max = 0
        self.spawned_at = None
        self._stop_sampler = threading.Event()

    def start(self):
        env = dict(os.environ, PERMAFROST_ROOT_USER=ACCESS_KEY, PERMAFROST_ROOT_PASSWORD=SECRET_KEY)
        self.spawned_at = time.monotonic()
        self.process = subprocess.Popen(
            [str(self.binary), "serve", "--data-dir", str(self.data_dir), "--listen", f"127.0.0.1:{self.port}",
             "--simulated-spin-up-ms", "0", *self.extra_args],
            stdout=open(self.log, "ab"), stderr=subprocess.STDOUT, env=env)
        self._stop_sampler.clear()
        threading.Thread(target=self._sample, daemon=True).start()
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"permafrost serve exited with {self.process.returncode}; see {self.log}")
            try:
                if requests.get(self.endpoint + HEALTH_PATH, timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"permafrost serve not healthy after 120 s; see {self.log}")

    @property
    def pid(self) -> int:
        return self.process.pid

    def _sample(self):
        while not self._stop_sampler.is_set():
            try:
                self.rss_max = max(self.rss_max, kib_field(self.pid, "VmRSS"))
            except (OSError, KeyError):
                return
            time.sleep(RSS_SAMPLE_S)

    def reset_rss_max(self):
        self.rss_max = kib_field(self.pid, "VmRSS")

    def hwm(self) -> int:
        return kib_field(self.pid, "VmHWM")

    def stop(self):
        if self.process is None:
            return
        self._stop_sampler.set()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def kill(self):
        if self.process is not None:
            self._stop_sampler.set()
            self.process.kill()
            self.process.wait()
            self.process = None


def s3_client(endpoint: str, attempts: int = 3):
    """A boto3 client of the benchmark servers; `attempts=1` turns retries off (a 503 reaches the caller)."""
    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": attempts, "mode": "standard"},
                      connect_timeout=10, read_timeout=1800, max_pool_connections=32))


def admin(endpoint: str, method: str, path: str, timeout_s: float = 1800) -> requests.Response:
    """An admin request, signed with SigV4 like an S3 request (docs of the admin API: prompts/admin-api.md)."""
    req = AWSRequest(method=method, url=endpoint + path, data=b"")
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(req)
    return requests.request(method, endpoint + path, headers=dict(req.headers.items()), data=b"",
                            timeout=timeout_s)


def admin_status(endpoint: str):
    """The status document, or None when this server has no admin API yet."""
    try:
        r = admin(endpoint, "GET", STATUS_PATH, timeout_s=60)
    except requests.RequestException:
        return None
    if r.status_code != 200 or not r.headers.get("content-type", "").startswith("application/json"):
        return None
    return r.json()


def engine_io(status) -> dict:
    """Sum of the engine's per-disk io counters (`detail.engine.disks[].io`), or {} when not reported."""
    total = {}
    try:
        for disk in status["detail"]["engine"]["disks"]:
            for k, v in (disk.get("io") or {}).items():
                if isinstance(v, (int, float)):
                    total[k] = total.get(k, 0) + v
    except (KeyError, TypeError):
        return {}
    return total


# ---------------------------------------------------------------------------------------------- measuring


class Measure:
    """Wall time, CPU seconds of server and client, server I/O (/proc/<pid>/io) and max VmRSS over a block."""

    def __init__(self, server: Server):
        self.server = server

    def __enter__(self):
        self.server.reset_rss_max()
        self.t0 = time.monotonic()
        self.server_cpu0 = proc_cpu_s(self.server.pid)
        self.io0 = proc_io(self.server.pid)
        self.client0 = client_cpu_s()
        return self

    def __exit__(self, *exc):
        self.seconds = time.monotonic() - self.t0
        self.server_cpu_s = proc_cpu_s(self.server.pid) - self.server_cpu0
        io1 = proc_io(self.server.pid)
        self.io = {k: io1[k] - self.io0.get(k, 0) for k in io1}
        self.client_cpu_s = client_cpu_s() - self.client0
        self.rss_max = self.server.rss_max
        return False

    def row(self, user_bytes: int) -> dict:
        return dict(seconds=round(self.seconds, 3), mb_per_s=round(user_bytes / self.seconds / 1e6, 1),
                    server_cpu_s=round(self.server_cpu_s, 2), client_cpu_s=round(self.client_cpu_s, 2),
                    server_cores=round(self.server_cpu_s / self.seconds, 2),
                    # Throughput per CPU-second of the server: what it would do with a core to itself.
                    mb_per_server_cpu_s=round(user_bytes / 1e6 / max(self.server_cpu_s, 1e-3), 1),
                    client_cores=round(self.client_cpu_s / self.seconds, 2),
                    server_read_bytes=self.io["read_bytes"], server_write_bytes=self.io["write_bytes"],
                    server_rss_max_bytes=self.rss_max)


def client_cpu_s() -> float:
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# ---------------------------------------------------------------------------------------------- clients


def put_object(s3, key: str, size: int, seed: int) -> dict:
    """Upload `size` generated bytes as one PUT (≤ one part) or a multipart upload in 64 MiB parts.
    Returns the seconds spent in CompleteMultipartUpload (the server re-reads the parts into one content)."""
    data = RandomData(seed)
    if size <= PART_BYTES:
        s3.put_object(Bucket=BUCKET, Key=key, Body=data.range(0, size))
        return dict(complete_s=0.0)
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
    parts = []
    for number, offset in enumerate(range(0, size, PART_BYTES), 1):
        body = data.range(offset, min(PART_BYTES, size - offset))
        r = s3.upload_part(Bucket=BUCKET, Key=key, UploadId=upload, PartNumber=number, Body=body)
        parts.append({"PartNumber": number, "ETag": r["ETag"]})
        del body
    t = time.monotonic()
    s3.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload, MultipartUpload={"Parts": parts})
    return dict(complete_s=time.monotonic() - t)


def get_object(s3, key: str) -> int:
    """Stream the object to nowhere in 1 MiB reads; the bytes received."""
    body = s3.get_object(Bucket=BUCKET, Key=key)["Body"]
    n = 0
    for chunk in body.iter_chunks(MiB):
        n += len(chunk)
    return n


def check_object(s3, key: str, size: int, seed: int):
    """The first and last MiB read back equal what was sent (a cheap guard against measuring wrong answers)."""
    data = RandomData(seed)
    last = (size - 1) // MiB * MiB
    for offset in sorted({0, last}):
        length = min(MiB, size - offset)
        got = s3.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={offset}-{offset + length - 1}")["Body"].read()
        if got != data.range(offset, length):
            raise RuntimeError(f"{key}: bytes at {offset} differ from what was uploaded")


def rclone_env(endpoint: str) -> dict:
    # AWS_CA_BUNDLE (set on some machines) makes rclone's S3 backend fail on plain http endpoints.
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    return dict(env, RCLONE_CONFIG_PF_TYPE="s3", RCLONE_CONFIG_PF_PROVIDER="Other",
                RCLONE_CONFIG_PF_ACCESS_KEY_ID=ACCESS_KEY, RCLONE_CONFIG_PF_SECRET_ACCESS_KEY=SECRET_KEY,
                RCLONE_CONFIG_PF_ENDPOINT=endpoint, RCLONE_CONFIG_PF_REGION="us-east-1",
                RCLONE_CONFIG_PF_FORCE_PATH_STYLE="true")


RCLONE_FLAGS = ["--s3-chunk-size", "64M", "--s3-upload-concurrency", "1", "--s3-disable-checksum",
                "--s3-no-check-bucket", "--s3-no-head", "--retries", "1", "--low-level-retries", "1"]


def rclone_put(endpoint: str, key: str, size: int, seed: int) -> dict:
    """`rclone rcat` of `size` generated bytes (written into its stdin by this process)."""
    proc = subprocess.Popen(["rclone", "rcat", *RCLONE_FLAGS, f"pf:{BUCKET}/{key}"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=rclone_env(endpoint))
    data = RandomData(seed)
    for offset in range(0, size, 8 * MiB):
        proc.stdin.write(data.range(offset, min(8 * MiB, size - offset)))
    proc.stdin.close()
    err = proc.stderr.read()
    if proc.wait() != 0:
        raise RuntimeError(f"rclone rcat failed: {err.decode(errors='replace')[-2000:]}")
    return {}


def rclone_get(endpoint: str, key: str) -> int:
    r = subprocess.run(["rclone", "cat", *RCLONE_FLAGS, f"pf:{BUCKET}/{key}"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, env=rclone_env(endpoint))
    if r.returncode != 0:
        raise RuntimeError(f"rclone cat failed: {r.stderr.decode(errors='replace')[-2000:]}")
    return 0


# ---------------------------------------------------------------------------------------------- baselines


def dd(args: list) -> float:
    """Seconds of one dd run (from its summary line)."""
    r = subprocess.run(["dd", *args], capture_output=True, text=True, check=True)
    line = next(l for l in r.stderr.splitlines() if "copied" in l)
    return float(line.split(",")[-2].split()[0])


def random_file(scratch: Path, size: int, seed: int) -> Path:
    """A file of `size` generated bytes in /dev/shm (memory) when it fits, else in `scratch`."""
    path = Path("/dev/shm") / f"pf-bench-s3-{os.getpid()}-{seed}.bin"
    if shutil.disk_usage("/dev/shm").free < 2 * size:
        path = scratch / f"source-{seed}.bin"
    with open(path, "wb") as f:
        data = RandomData(seed)
        for offset in range(0, size, 64 * MiB):
            f.write(data.range(offset, min(64 * MiB, size - offset)))
    return path


def raw_baselines(scratch: Path, source: Path, size: int) -> dict:
    """dd of `source` (`size` random bytes) to a file on the data directory's file system and back:
    O_DIRECT and buffered."""
    target = scratch / "dd.bin"
    count = [f"bs={4 * MiB}", f"count={size // (4 * MiB)}"]
    out = {}
    try:
        out["odirect_write"] = dd([f"if={source}", f"of={target}", *count, "oflag=direct", "conv=fsync"])
        out["odirect_read"] = dd([f"if={target}", "of=/dev/null", *count, "iflag=direct"])
        target.unlink()
        out["buffered_write_fsync"] = dd([f"if={source}", f"of={target}", *count, "conv=fsync"])
        out["buffered_read_cached"] = dd([f"if={target}", "of=/dev/null", *count])
        target.unlink()
        out["buffered_write_nofsync"] = dd([f"if={source}", f"of={target}", *count])
    finally:
        target.unlink(missing_ok=True)
    return {k: dict(seconds=v, mb_per_s=round(size / v / 1e6, 1)) for k, v in out.items()}


# ---------------------------------------------------------------------------------------------- phases


class Bench:
    def __init__(self, args):
        self.args = args
        self.sizes = QUICK if args.quick else FULL
        self.scratch = Path(args.scratch)
        self.out = Path(args.out)
        self.results = dict(machine=machine(self.scratch), sizes=self.sizes, phases={})
        self.summary = []
        self.servers = []

    def say(self, text: str = ""):
        print(text, flush=True)
        self.summary.append(text)

    def server(self, name: str, fsync: bool, cache_bytes: int, disk_bytes: int, hold: bool = True) -> Server:
        data_dir = self.scratch / name
        shutil.rmtree(data_dir, ignore_errors=True)
        s = Server(self.args.bin, data_dir, server_config(fsync, cache_bytes, disk_bytes, hold),
                   self.out / f"{name}.log")
        self.servers.append(s)
        s.start()
        s3_client(s.endpoint).create_bucket(Bucket=BUCKET)
        return s

    def done(self, s: Server):
        s.stop()
        shutil.rmtree(s.data_dir, ignore_errors=True)

    def cleanup(self):
        for s in self.servers:
            s.kill()
        shutil.rmtree(self.scratch, ignore_errors=True)

    # ---- A: large objects
    def large(self, fsync: bool):
        size = self.sizes["object_bytes"]
        tag = f"fsync={'true' if fsync else 'false'}"
        self.say(f"\n== A. PUT/GET of {size // MiB} MiB objects, 1 and 4 streams, {tag} (load {loadavg()})")
        source = random_file(self.scratch, size, 999_999 if fsync else 999_998)
        base = raw_baselines(self.scratch, source, size)
        self.say("   baselines (dd bs=4M of a random file on the data directory's file system):")
        for k, v in base.items():
            self.say(f"     {k:24} {v['mb_per_s']:8.1f} MB/s")
        s = self.server(f"large-{tag.replace('=', '-')}", fsync, cache_bytes=10 * size + 2 * GiB,
                        disk_bytes=2 * GiB)
        phase = dict(baselines=base, runs=[])
        clients = [("boto3", put_object, None)]
        if fsync and "rclone" not in self.args.skip and shutil.which("rclone"):
            clients.append(("rclone", None, None))  # the faster client; once (fsync=true) is enough
        seed = 1000 if fsync else 2000
        for client, _, _ in clients:
            for streams in (1, 4):
                seed += 10
                keys = [f"large/{client}-{streams}-{i}" for i in range(streams)]
                s3s = [s3_client(s.endpoint) for _ in range(streams)]
                if client == "boto3":
                    put = lambda i: put_object(s3s[i], keys[i], size, seed + i)
                    get = lambda i: get_object(s3s[i], keys[i])
                else:
                    put = lambda i: rclone_put(s.endpoint, keys[i], size, seed + i)
                    get = lambda i: rclone_get(s.endpoint, keys[i])
                with ThreadPoolExecutor(streams) as pool:
                    with Measure(s) as m_put:
                        put_info = list(pool.map(put, range(streams)))
                    with Measure(s) as m_get:
                        list(pool.map(get, range(streams)))
                for i in range(streams):
                    check_object(s3s[0], keys[i], size, seed + i)
                    head = s3s[0].head_object(Bucket=BUCKET, Key=keys[i])
                    assert head["ContentLength"] == size, head
                total = size * streams
                row_put = m_put.row(total)
                row_put["complete_s_max"] = round(max(p.get("complete_s", 0) for p in put_info), 3)
                row_get = m_get.row(total)
                row_get["state"] = head["ResponseMetadata"]["HTTPHeaders"].get(STATE_HEADER)
                for op, row, ref in (("PUT", row_put, "buffered_write_fsync" if fsync else "buffered_write_nofsync"),
                                     ("GET", row_get, "buffered_read_cached")):
                    row.update(op=op, client=client, streams=streams,
                               ratio_vs_odirect=round(row["mb_per_s"] / base[f"odirect_{'write' if op == 'PUT' else 'read'}"]["mb_per_s"], 3),
                               ratio_vs_buffered=round(row["mb_per_s"] / base[ref]["mb_per_s"], 3),
                               buffered_ref=ref)
                    phase["runs"].append(row)
                    extra = f", complete {row['complete_s_max']:.2f} s" if op == "PUT" and client == "boto3" else ""
                    self.say(f"   {client:6} {op} x{streams}: {row['mb_per_s']:7.1f} MB/s  "
                             f"÷O_DIRECT {row['ratio_vs_odirect']:.2f}  ÷{ref} {row['ratio_vs_buffered']:.2f}  "
                             f"cpu server {row['server_cores']:.2f} client {row['client_cores']:.2f} cores "
                             f"({row['mb_per_server_cpu_s']:.0f} MB per server cpu-s)"
                             f"{extra}  rss max {row['server_rss_max_bytes'] / MiB:.0f} MiB")
                if m_get.io["write_bytes"] > total // 10:
                    self.say(f"   (the server wrote {m_get.io['write_bytes'] / MiB:.0f} MiB during the GETs: "
                             f"persistence ran under cache pressure)")
                for i in range(streams):
                    s3s[0].delete_object(Bucket=BUCKET, Key=keys[i])
                time.sleep(1)
        phase["server_vm_hwm_bytes"] = s.hwm()
        s.stop()
        # The store alone, without HTTP, S3 signing or a client: `permafrost put` into the same data directory.
        client0, t0 = client_cpu_s(), time.monotonic()
        subprocess.run([str(self.args.bin), "put", "--data-dir", str(s.data_dir), str(source), f"{BUCKET}/local/x"],
                       check=True, capture_output=True)
        seconds = time.monotonic() - t0
        cpu = client_cpu_s() - client0
        source.unlink()
        phase["store_alone_put"] = row = dict(seconds=round(seconds, 3), mb_per_s=round(size / seconds / 1e6, 1),
                                              cpu_s=round(cpu, 2), mb_per_cpu_s=round(size / 1e6 / cpu, 1))
        self.say(f"   store alone (`permafrost put --data-dir`, single PUT of the same size from memory): "
                 f"{row['mb_per_s']} MB/s, {row['cpu_s'] / seconds:.2f} cores ({row['mb_per_cpu_s']:.0f} MB per cpu-s)")
        shutil.rmtree(s.data_dir, ignore_errors=True)
        self.results["phases"][f"large {tag}"] = phase

    # ---- B: small PUTs
    def small(self, fsync: bool):
        tag = f"fsync={'true' if fsync else 'false'}"
        seconds = self.sizes["small_seconds"]
        self.say(f"\n== B. 4 KiB PUTs per second, {tag}, {seconds:.0f} s per run (load {loadavg()})")
        s = self.server(f"small-{tag.replace('=', '-')}", fsync, cache_bytes=2 * GiB, disk_bytes=2 * GiB)
        phase = dict(runs=[])
        for clients in (1, 16):
            processes = min(clients, 4)
            start_at = time.time() + 2.0
            spec = dict(endpoint=s.endpoint, threads=clients // processes, start_at=start_at,
                        seconds=seconds, prefix=f"small/{tag}/{clients}")
            with Measure(s) as m:
                workers = [subprocess.Popen([sys.executable, __file__, "--worker-small-puts",
                                             json.dumps(dict(spec, process=p))], stdout=subprocess.PIPE)
                           for p in range(processes)]
                outs = [json.loads(w.communicate()[0]) for w in workers]
            lat = sorted(x for o in outs for x in o["latencies_ms"])
            count = sum(o["count"] for o in outs)
            errors = sum(o["errors"] for o in outs)
            row = dict(client="boto3", clients=clients, processes=processes, puts=count, errors=errors,
                       puts_per_s=round(count / seconds, 1), p50_ms=round(lat[len(lat) // 2], 2) if lat else None,
                       p99_ms=round(lat[int(len(lat) * 0.99)], 2) if lat else None,
                       # CPU over the whole block includes ~2 s of client start-up; per PUT it is an upper bound.
                       server_cpu_ms_per_put=round(m.server_cpu_s * 1000 / max(count, 1), 3),
                       client_cpu_ms_per_put=round(m.client_cpu_s * 1000 / max(count, 1), 3),
                       server_write_bytes_per_put=round(m.io["write_bytes"] / max(count, 1)))
            phase["runs"].append(row)
            self.say(f"   boto3  {clients:2} clients ({processes} processes): {row['puts_per_s']:7.1f} PUT/s, "
                     f"p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms, errors {errors}; per PUT: server cpu "
                     f"{row['server_cpu_ms_per_put']} ms, client cpu {row['client_cpu_ms_per_put']} ms, "
                     f"device writes {row['server_write_bytes_per_put'] / KiB:.0f} KiB")
        if fsync and "rclone" not in self.args.skip and shutil.which("rclone"):
            files = self.sizes["rclone_small_files"]
            src = self.scratch / "small-files"
            src.mkdir(parents=True, exist_ok=True)
            for i in range(files):
                (src / f"f{i:05}").write_bytes(os.urandom(4096))
            with Measure(s) as m:
                r = subprocess.run(["rclone", "copy", *RCLONE_FLAGS, "--transfers", "16", "--checkers", "16",
                                    "--no-check-dest", "--no-traverse", str(src), f"pf:{BUCKET}/small/rclone-{tag}"],
                                   capture_output=True, text=True, env=rclone_env(s.endpoint))
            shutil.rmtree(src, ignore_errors=True)
            if r.returncode != 0:
                self.say(f"   rclone copy failed: {r.stderr[-1000:]}")
            else:
                row = dict(client="rclone", clients=16, puts=files, puts_per_s=round(files / m.seconds, 1),
                           server_cpu_ms_per_put=round(m.server_cpu_s * 1000 / files, 3),
                           client_cpu_ms_per_put=round(m.client_cpu_s * 1000 / files, 3))
                phase["runs"].append(row)
                self.say(f"   rclone 16 transfers, {files} files: {row['puts_per_s']:7.1f} PUT/s (incl. start-up); "
                         f"per PUT: server cpu {row['server_cpu_ms_per_put']} ms, "
                         f"client cpu {row['client_cpu_ms_per_put']} ms")
        self.done(s)
        self.results["phases"][f"small {tag}"] = phase

    # ---- C: persistence
    def persist(self):
        total, objects = self.sizes["persist_bytes"], self.sizes["persist_objects"]
        size = total // objects
        self.say(f"\n== C. persistence of {objects} x {size // MiB} MiB (one dataset), fsync=true (load {loadavg()})")
        s = self.server("persist", True, cache_bytes=3 * total + GiB, disk_bytes=max(2 * GiB, 2 * total))
        s3 = s3_client(s.endpoint)
        keys = [f"ds/obj-{i}" for i in range(objects)]
        for i, key in enumerate(keys):
            put_object(s3, key, size, 5000 + i)
        time.sleep(1.0)
        status = admin_status(s.endpoint)
        phase = dict(bytes=total, objects=objects, object_bytes=size)
        if status is not None:
            phase["trigger"] = "POST /_permafrost/persist"
            eng0 = engine_io(status)
            with Measure(s) as m:
                r = admin(s.endpoint, "POST", PERSIST_PATH)
                assert r.status_code == 200, r.text
                self.wait_persisted(s3, keys)
            eng1 = engine_io(admin_status(s.endpoint))
            io, seconds, cpu = m.io, m.seconds, m.server_cpu_s
            phase["engine_io"] = {k: eng1.get(k, 0) - eng0.get(k, 0) for k in eng1}
        else:
            # No admin API in this binary: restart with max_age_ms = 0, so the watchdog persists at once.
            phase["trigger"] = "restart with watchdog max_age_ms = 0 (no admin API in this binary)"
            s.stop()
            (s.data_dir / "permafrost.toml").write_text(server_config(True, 3 * total + GiB,
                                                                      max(2 * GiB, 2 * total), hold=False))
            s.start()
            t0 = s.spawned_at
            self.wait_persisted(s3_client(s.endpoint), keys)
            seconds = time.monotonic() - t0
            io = proc_io(s.pid)  # counters of the new process: everything since it started
            cpu = proc_cpu_s(s.pid)
        rw = io["read_bytes"] + io["write_bytes"]
        phase.update(seconds=round(seconds, 3), mb_per_s=round(total / seconds / 1e6, 1),
                     server_cpu_s=round(cpu, 2), server_cores=round(cpu / seconds, 2),
                     device_read_bytes=io["read_bytes"], device_write_bytes=io["write_bytes"],
                     syscall_read_bytes=io["rchar"], syscall_write_bytes=io["wchar"],
                     device_bytes_per_user_byte=round(rw / total, 3),
                     syscall_bytes_per_user_byte=round((io["rchar"] + io["wchar"]) / total, 3))
        self.say(f"   trigger: {phase['trigger']}")
        self.say(f"   persisted {total // MiB} MiB in {seconds:.2f} s: {phase['mb_per_s']} MB/s of user data, "
                 f"server cpu {phase['server_cores']} cores")
        self.say(f"   device I/O (/proc io): read {io['read_bytes'] / MiB:.0f} MiB + write {io['write_bytes'] / MiB:.0f} MiB"
                 f" = {phase['device_bytes_per_user_byte']} bytes per user byte "
                 f"(syscall level rchar+wchar: {phase['syscall_bytes_per_user_byte']})")
        if phase.get("engine_io"):
            e = phase["engine_io"]
            self.say("   engine counters per user byte: " + ", ".join(f"{k} {v / total:.3f}" for k, v in sorted(e.items())))
        # Read back from the grid when the cache can be emptied (admin API).
        if status is not None:
            r = admin(s.endpoint, "POST", "/_permafrost/cache/evict")
            if r.status_code == 200:
                with Measure(s) as m:
                    for key in keys:
                        get_object(s3, key)
                phase["grid_get"] = m.row(total)
                self.say(f"   GET from the grid after evicting the cache: {phase['grid_get']['mb_per_s']} MB/s, "
                         f"server cpu {phase['grid_get']['server_cores']} cores, client {phase['grid_get']['client_cores']}")
                for i, key in enumerate(keys):
                    check_object(s3, key, size, 5000 + i)
        self.done(s)
        self.results["phases"]["persist"] = phase

    def wait_persisted(self, s3, keys, timeout_s: float = 900):
        deadline = time.time() + timeout_s
        pending = list(keys)
        while pending:
            states = {k: s3.head_object(Bucket=BUCKET, Key=k)["ResponseMetadata"]["HTTPHeaders"].get(STATE_HEADER)
                      for k in pending}
            pending = [k for k, st in states.items() if st != "persisted"]
            if not pending:
                return
            if time.time() > deadline:
                raise RuntimeError(f"not persisted after {timeout_s} s: {states}")
            time.sleep(0.1)

    # ---- D: resident memory while streaming a big object
    def rss(self):
        size = self.sizes["stream_bytes"]
        need = 2 * size + 2 * GiB  # parts + the completed content, transiently
        free = shutil.disk_usage(self.scratch).free
        self.say(f"\n== D. server memory while streaming one {size / GiB:.0f} GiB object in and out, fsync=true "
                 f"(load {loadavg()})")
        if free < need:
            self.say(f"   SKIPPED: {free / GiB:.1f} GiB free in {self.scratch}, need {need / GiB:.1f} GiB")
            return
        s = self.server("rss", True, cache_bytes=need, disk_bytes=max(16 * GiB, size + 2 * GiB))
        s3 = s3_client(s.endpoint)
        start_rss = kib_field(s.pid, "VmRSS")
        with Measure(s) as m_put:
            info = put_object(s3, "stream/big", size, 7777)
        with Measure(s) as m_get:
            got = get_object(s3, "stream/big")
        assert got == size, (got, size)
        check_object(s3, "stream/big", size, 7777)
        hwm = s.hwm()
        phase = dict(bytes=size, start_rss_bytes=start_rss, put=m_put.row(size), get=m_get.row(size),
                     complete_s=round(info["complete_s"], 2), vm_hwm_bytes=hwm,
                     goal_bytes=RSS_GOAL_BYTES, met=max(hwm, m_put.rss_max, m_get.rss_max) < RSS_GOAL_BYTES)
        self.say(f"   RSS at start {start_rss / MiB:.0f} MiB; max VmRSS during PUT {m_put.rss_max / MiB:.0f} MiB "
                 f"({phase['put']['mb_per_s']} MB/s, complete {phase['complete_s']} s), during GET "
                 f"{m_get.rss_max / MiB:.0f} MiB ({phase['get']['mb_per_s']} MB/s); VmHWM {hwm / MiB:.0f} MiB "
                 f"[goal < 512 MiB: {'met' if phase['met'] else 'NOT met'}]")
        self.done(s)
        self.results["phases"]["rss"] = phase

    def run(self):
        m = self.results["machine"]
        for k, v in m.items():
            self.say(f"{k + ':':14}{v}")
        t0 = time.monotonic()
        fsyncs = {"true": [True], "false": [False], "both": [True, False]}[self.args.fsync]
        for fsync in fsyncs:
            if "large" not in self.args.skip:
                self.large(fsync)
            if "small" not in self.args.skip:
                self.small(fsync)
        if "persist" not in self.args.skip:
            self.persist()
        if "rss" not in self.args.skip:
            self.rss()
        self.results["seconds"] = round(time.monotonic() - t0, 1)
        self.say(f"\nload average {loadavg()} (end); bench took {self.results['seconds']:.0f} s")


def machine(scratch: Path) -> dict:
    cpu = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                if l.startswith("model name")), "unknown")
    mem = int(next(l for l in Path("/proc/meminfo").read_text().splitlines() if l.startswith("MemTotal")).split()[1])
    fs = subprocess.run(["df", "-T", str(scratch)], capture_output=True, text=True).stdout.splitlines()[-1].split()
    git = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "diff", "--quiet", "HEAD"]).returncode != 0
    return {"date (UTC)": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "cpu": f"{cpu}, nproc {os.cpu_count()}",
            "ram": f"{mem / (1 << 20):.1f} GiB", "uptime": subprocess.run(["uptime"], capture_output=True,
                                                                         text=True).stdout.strip(),
            "kernel": os.uname().release, "file system": f"{fs[1]} on {fs[0]} (scratch {scratch})",
            "guest memory": guest_memory(),
            "git": git + (" (+ uncommitted changes)" if dirty else "")}


def guest_memory() -> str:
    """Whether this VM hands free and cold memory back to its host. With free page reporting (virtio-balloon)
    and a DAMON `pageout` scheme, a page the kernel allocates for the page cache or a buffer may first have to be
    faulted in by the host: buffered writes of a fresh VM ran at 0.4 GB/s against 1.9 GB/s right after a warm-up,
    and the CPU per GiB of the same PUT varies up to 2x between runs (BENCHMARKS.md, 2026-11-29)."""
    notes = []
    try:
        reported = Path("/sys/module/page_reporting/parameters/reported_kib")
        if reported.exists():
            notes.append(f"free page reporting on ({int(reported.read_text()) >> 10} MiB reported since boot)")
        damon = Path("/sys/kernel/mm/damon/admin/kdamonds")
        for state in (damon.glob("*/state") if damon.exists() else []):
            actions = {a.read_text().strip() for a in state.parent.glob("contexts/*/schemes/*/action")}
            if state.read_text().strip() == "on":
                notes.append(f"DAMON on ({', '.join(sorted(actions)) or 'no scheme'})")
    except (OSError, ValueError) as e:  # not readable here (no root, another kernel): say so, do not stop the run
        notes.append(f"unknown ({e})")
    return "; ".join(notes) or "nothing returned to a host"


# ---------------------------------------------------------------------------------------------- workers


def worker_small_puts(spec: dict):
    """One process of the small-PUT benchmark: `threads` clients PUT unique 4 KiB objects for `seconds`."""
    clients = [s3_client(spec["endpoint"]) for _ in range(spec["threads"])]
    for c in clients:  # connect and warm up before the clock starts
        c.head_bucket(Bucket=BUCKET)
    results = []

    def run(t: int):
        s3, n, errors, lat = clients[t], 0, 0, []
        time.sleep(max(0.0, spec["start_at"] - time.time()))
        end = spec["start_at"] + spec["seconds"]
        while True:
            t0 = time.time()
            if t0 >= end:
                break
            try:
                s3.put_object(Bucket=BUCKET, Key=f"{spec['prefix']}/{spec['process']}-{t}-{n}", Body=os.urandom(4096))
                t1 = time.time()
                if t1 <= end:
                    n += 1
                    lat.append(round((t1 - t0) * 1000, 3))
            except Exception:  # counted, not fatal: the rate is what is measured
                errors += 1
        results.append((n, errors, lat))

    threads = [threading.Thread(target=run, args=(t,)) for t in range(spec["threads"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(dict(count=sum(r[0] for r in results), errors=sum(r[1] for r in results),
                          latencies_ms=[x for r in results for x in r[2]])))


# ---------------------------------------------------------------------------------------------- main


def find_binary(path) -> Path:
    if path:
        return Path(path)
    if os.environ.get("PERMAFROST_BIN"):
        return Path(os.environ["PERMAFROST_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", "/work/target-bench"))
    subprocess.run(["cargo", "build", "-q", "--release", "-p", "permafrost"], cwd=REPO, check=True,
                   env=dict(os.environ, CARGO_TARGET_DIR=str(target)))
    return target / "release" / "permafrost"


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--worker-small-puts":
        worker_small_puts(json.loads(sys.argv[2]))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--scratch", default="/tmp/permafrost-bench-s3")
    p.add_argument("--bin")
    p.add_argument("--fsync", choices=["true", "false", "both"])
    p.add_argument("--skip", default="", help="comma-separated: rclone, small, persist, rss")
    p.add_argument("--only", default="", help="comma-separated phases to run: large, small, persist, rss")
    p.add_argument("--out")
    args = p.parse_args()
    args.skip = {x.strip() for x in args.skip.split(",") if x.strip()}
    if args.only:
        args.skip |= {"large", "small", "persist", "rss"} - {x.strip() for x in args.only.split(",")}
    args.fsync = args.fsync or ("true" if args.quick else "both")
    args.bin = find_binary(args.bin)
    args.out = args.out or str(REPO / "bench" / "out" / time.strftime("s3-%Y%m%dT%H%M%SZ", time.gmtime()))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    shutil.rmtree(args.scratch, ignore_errors=True)
    Path(args.scratch).mkdir(parents=True)
    bench = Bench(args)
    bench.say(f"binary:       {args.bin}")
    try:
        bench.run()
    finally:
        bench.cleanup()
        Path(args.out, "results.json").write_text(json.dumps(bench.results, indent=2))
        Path(args.out, "summary.txt").write_text("\n".join(bench.summary) + "\n")
        print(f"raw numbers: {args.out}")


if __name__ == "__main__":
    main()
