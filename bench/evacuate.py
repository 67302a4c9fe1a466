#!/usr/bin/env python3
"""Evacuation of one data disk (`permafrost grid evacuate`) against an O_DIRECT copy of the same bytes, in the
same run: a file-backed 8x6:4+1 grid, --gib GiB of random data written to bucket 0, then
  1. the baseline: `dd iflag=direct oflag=direct` of the old disk file's allocated bytes to a new file;
  2. `grid evacuate --disk D --json` (wall time of the command, which opens and closes the grid too).
Page caches are dropped before each step when the script may (root). Prints one JSON line.

With --live the evacuation runs inside `permafrost serve` while clients read (the acceptance case, issue 33): the
server takes --gib GiB as 64 MiB objects of one dataset (one grid bucket, one data disk), persists them and drops
them from its cache; then, per round,
  1. the baseline: the same O_DIRECT `dd` copy of the disk file's allocated bytes, before and after the
     evacuation (the mean of the two: the device's speed swings between minutes);
  2. --readers (8) boto3 clients GET the objects of that disk in a loop, each checked byte-exact (SHA-256 against
     the upload's), the cache evicted every 0.5 s so the reads keep going to the disks; as fast as they can, or
     paced to --reader-mb-per-s MB/s together;
  3. `POST /_permafrost/api/v1/disks/{disk}/evacuate`, timed from the request to the task's end (GET /tasks/{id}).
Reports the evacuation time against the copy (ratio, goal <= 1.2), the readers' GETs, bytes, MB/s, their longest
GET, errors and mismatches (must be 0), and the reads of the disk that waited for their turn behind the evacuation
(the engine's `[evacuation]` settings in grid.toml; --grid-evacuation "reader_wait_ms_max = 0" turns the priority
off: the server is restarted with it after the upload). The next round evacuates the disk's new file again; the
retired file of the round before is deleted before the second copy. The grid (the disk and its three parity
disks), the cache and a second copy of the disk need about 6x --gib GiB of free space.

Usage: bench/evacuate.py [--bin target/release/permafrost] [--gib 1] [--dir /var/tmp/evac-bench]
       bench/evacuate.py --live [--gib 2] [--readers 8] [--reader-mb-per-s 0] [--rounds 3] [--bin PATH] [--dir DIR]
                            [--grid-evacuation "reader_share = 0.1"]
Results of --live: bench/out/evacuate-live-<UTC time>/ (results.json, summary.txt, server log)."""

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from pagecache import drop_caches


def run(*args, **kw):
    return subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True, **kw)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", default="target/release/permafrost")
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--dir", default="/var/tmp/evac-bench")
    p.add_argument("--live", action="store_true", help="evacuate inside a running server while clients read")
    p.add_argument("--readers", type=int, default=8, help="--live: reading clients")
    p.add_argument("--reader-mb-per-s", type=float, default=0.0,
                   help="--live: the readers' bytes per second together, in MB/s (0: as fast as they can)")
    p.add_argument("--rounds", type=int, default=3, help="--live: evacuations measured")
    p.add_argument("--out", default=None, help="--live: results directory")
    p.add_argument("--profile", action="store_true",
                   help="--live: sample what the evacuation's threads wait for every 10 ms (/proc/PID/task/*/syscall)")
    p.add_argument("--grid-evacuation", default="",
                   help="--live: settings of [evacuation] in the grid's grid.toml, e.g. 'reader_wait_ms_max = 0' "
                        "(the evacuation without priority over reads); ';' between several")
    a = p.parse_args()
    if a.live:
        return live(a)
    data_bytes = int(a.gib * (1 << 30)) // (1 << 20) * (1 << 20)
    shutil.rmtree(a.dir, ignore_errors=True)
    os.makedirs(a.dir)
    grid = os.path.join(a.dir, "g")
    disk_size = data_bytes * 5 // 4 + (64 << 20)
    run(a.bin, "grid", "init", "--dir", grid, "--layout", "8x6:4+1", "--disk-size", str(disk_size),
        "--spin-up-ms", "1", "--json")
    src = os.path.join(a.dir, "data.bin")
    with open(src, "wb") as f:
        left = data_bytes
        while left:
            n = min(left, 64 << 20)
            f.write(os.urandom(n))
            left -= n
    run(a.bin, "grid", "write", "--dir", grid, "--bucket", "0", "--offset", "0", "--input", src, "--json")
    st = json.loads(run(a.bin, "grid", "status", "--dir", grid, "--json").stdout)
    disk = next(d["index"] for d in st["disks"] if d["role"] == {"data": {"bucket": 0}})
    old = os.path.join(grid, "disks", f"disk-{disk:02d}.img")
    allocated = os.stat(old).st_blocks * 512
    block = 4 << 20
    count = -(-allocated // block)

    dropped = drop_caches(required=False)
    t = time.monotonic()
    run("dd", f"if={old}", f"of={os.path.join(a.dir, 'copy.img')}", f"bs={block}", f"count={count}",
        "iflag=direct", "oflag=direct", "conv=fsync")
    dd_s = time.monotonic() - t
    os.remove(os.path.join(a.dir, "copy.img"))

    drop_caches(required=False)
    t = time.monotonic()
    out = json.loads(run(a.bin, "grid", "evacuate", "--dir", grid, "--disk", str(disk), "--json").stdout)
    evac_s = time.monotonic() - t
    assert out["report"]["retired"], out

    back = os.path.join(a.dir, "back.bin")
    run(a.bin, "grid", "read", "--dir", grid, "--bucket", "0", "--offset", "0", "--length", str(data_bytes),
        "--output", back)
    exact = subprocess.run(["cmp", "-s", src, back]).returncode == 0
    print(json.dumps({
        "data_bytes": data_bytes, "disk": disk, "disk_allocated_bytes": allocated,
        "dd_direct_copy_s": round(dd_s, 3), "evacuate_s": round(evac_s, 3),
        "evacuate_engine_s": round(out["seconds"], 3), "ratio": round(evac_s / dd_s, 3),
        "bytes_copied": out["report"]["bytes_copied"],
        "bytes_reconstructed": out["report"]["bytes_reconstructed"],
        "byte_exact": exact, "caches_dropped": dropped,
    }))
    shutil.rmtree(a.dir, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- --live

OBJECT_BYTES = 64 << 20
API = "/_permafrost/api/v1"
EVICT_PATH = "/_permafrost/cache/evict"


def odirect_copy(path: Path, scratch: Path) -> dict:
    """`dd` of the allocated bytes of `path` to a new file, O_DIRECT both ways, fsync at the end; the copy is
    removed."""
    allocated = path.stat().st_blocks * 512
    block = 4 << 20
    copy = scratch / "copy.img"
    drop_caches(required=False)
    t = time.monotonic()
    run("dd", f"if={path}", f"of={copy}", f"bs={block}", f"count={-(-allocated // block)}", "iflag=direct",
        "oflag=direct", "conv=fsync")
    seconds = time.monotonic() - t
    copy.unlink()
    return dict(bytes=allocated, seconds=round(seconds, 3), mb_per_s=round(allocated / seconds / 1e6, 1))


def api(pf, endpoint: str, method: str, path: str, body: dict | None = None):
    """An admin API v1 request (SigV4 like the other bench requests); its JSON."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    import requests
    data = json.dumps(body).encode() if body is not None else b""
    req = AWSRequest(method=method, url=endpoint + API + path, data=data)
    S3SigV4Auth(Credentials(pf.ACCESS_KEY, pf.SECRET_KEY), "s3", "us-east-1").add_auth(req)
    r = requests.request(method, endpoint + API + path, headers=dict(req.headers.items()), data=data, timeout=600)
    assert r.status_code in (200, 202), f"{method} {path}: {r.status_code} {r.text[:500]}"
    return r.json()


class Readers:
    """`n` boto3 clients GETting `keys` in a loop (each from its own random order), every body checked against
    its SHA-256; an evictor drops the cache every 0.5 s so the GETs keep reading the disks."""

    def __init__(self, pf, endpoint: str, keys: list, digests: dict, n: int, mb_per_s: float = 0.0):
        self.pf, self.endpoint, self.keys, self.digests = pf, endpoint, keys, digests
        # Each reader's pace (bytes per second; 0: none): an archive's clients read at their own speed.
        self.pace = mb_per_s * 1e6 / n if mb_per_s > 0 and n else 0.0
        self.n = n
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.gets, self.bytes, self.errors, self.mismatches = 0, 0, [], []
        self.get_s_max = 0.0
        self.threads = [threading.Thread(target=self.read, args=(i,), daemon=True) for i in range(n)]
        self.threads.append(threading.Thread(target=self.evict, daemon=True))

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def counts(self) -> tuple:
        with self.lock:
            return self.gets, self.bytes

    def read(self, i: int):
        import random
        s3 = self.pf.s3_client(self.endpoint)
        rng = random.Random(i)
        if self.pace:
            # Staggered: the paced readers' GETs spread evenly over time, not all at once.
            self.stop.wait(i * OBJECT_BYTES / self.pace / self.n)
        while not self.stop.is_set():
            key = rng.choice(self.keys)
            started = time.monotonic()
            try:
                body = s3.get_object(Bucket=self.pf.BUCKET, Key=key)["Body"]
                h, n = hashlib.sha256(), 0
                for chunk in body.iter_chunks(1 << 20):
                    h.update(chunk)
                    n += len(chunk)
                with self.lock:
                    if h.hexdigest() != self.digests[key] or n != OBJECT_BYTES:
                        self.mismatches.append(f"{key}: {n} bytes, sha256 {h.hexdigest()}")
                    self.gets += 1
                    self.bytes += n
                    self.get_s_max = max(self.get_s_max, time.monotonic() - started)
            except Exception as e:  # noqa: BLE001 - every failure is counted and reported
                with self.lock:
                    self.errors.append(f"{key}: {e}")
            if self.pace:
                self.stop.wait(max(0.0, OBJECT_BYTES / self.pace - (time.monotonic() - started)))

    def evict(self):
        while not self.stop.is_set():
            try:
                self.pf.admin(self.endpoint, "POST", EVICT_PATH, timeout_s=60)
            except Exception as e:  # noqa: BLE001
                with self.lock:
                    self.errors.append(f"evict: {e}")
            self.stop.wait(0.5)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join()


# System calls of x86-64 Linux that move a disk's bytes, and the futex (a lock, condition variable or channel).
DISK_CALLS = {0: "read", 1: "write", 17: "pread", 18: "pwrite", 19: "readv", 20: "writev", 74: "fsync",
              75: "fdatasync", 295: "preadv", 296: "pwritev", 277: "sync_file_range"}
FUTEX = 202


class ThreadSampler:
    """Every 10 ms, what the evacuation's threads are doing: in a disk system call, waiting on a futex (a range
    lock, the rendezvous of the piece reader with the writer thread, the power budget), running, or else. The
    evacuation runs on the maintenance lane's thread (named `permafrost-task-0`, shown as `permafrost-task`: the
    one of the task threads present before the evacuation that used the most CPU during it); each recovery chunk
    starts a writer thread, which inherits the name (task threads born during the evacuation). A sample where the
    lane thread waits on a futex while no writer thread lives is the evacuation between two chunks: waiting for
    its range locks (or the power budget)."""

    def __init__(self, pid: int):
        self.pid, self.stop = pid, threading.Event()
        self.base = Path(f"/proc/{pid}/task")
        self.initial = {t.name: self.cpu(t) for t in self.tasks()}
        self.samples = []  # per sample: {tid: state}
        self.thread = threading.Thread(target=self.run, daemon=True)

    def tasks(self):
        for task in self.base.iterdir():
            try:
                if (task / "comm").read_text().strip().startswith("permafrost-task"):
                    yield task
            except OSError:
                continue

    @staticmethod
    def cpu(task: Path) -> int:
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            return int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            return 0

    def start(self):
        self.thread.start()
        return self

    def run(self):
        while not self.stop.is_set():
            sample = {}
            for task in self.tasks():
                try:
                    call = (task / "syscall").read_text().split()
                except OSError:
                    continue
                if not call:
                    continue
                if call[0] == "running":
                    sample[task.name] = "running"
                elif call[0].lstrip("-").isdigit() and int(call[0]) in DISK_CALLS:
                    sample[task.name] = "disk"
                elif call[0].lstrip("-").isdigit() and int(call[0]) == FUTEX:
                    sample[task.name] = "futex"
                else:
                    sample[task.name] = "other"
            self.samples.append(sample)
            self.stop.wait(0.01)

    def finish(self) -> dict:
        self.stop.set()
        self.thread.join()
        used = {tid: self.cpu(self.base / tid) - cpu for tid, cpu in self.initial.items()}
        lane = max(used, key=used.get) if used else None
        states = ("disk", "futex", "running", "other")
        out = dict(samples=len(self.samples), lane={k: 0 for k in states}, writers={k: 0 for k in states},
                   lane_futex_without_writer=0)
        for sample in self.samples:
            writers = [st for tid, st in sample.items() if tid not in self.initial]
            for st in writers:
                out["writers"][st] += 1
            if lane in sample:
                out["lane"][sample[lane]] += 1
                if sample[lane] == "futex" and not writers:
                    out["lane_futex_without_writer"] += 1
        return out


def set_grid_evacuation(path: Path, settings: str):
    """Set `key = value` pairs (';' between them) in the [evacuation] table of grid.toml (the server is stopped)."""
    text = path.read_text()
    if "\n[evacuation]\n" not in text:
        raise SystemExit(f"{path} has no [evacuation] table: the binary predates the setting")
    head, rest = text.split("\n[evacuation]\n", 1)
    table, sep, tail = rest.partition("\n[")
    lines = dict(line.split(" = ", 1) for line in table.splitlines() if " = " in line)
    for setting in filter(None, (x.strip() for x in settings.split(";"))):
        key, value = (x.strip() for x in setting.split("=", 1))
        if key not in lines:
            raise SystemExit(f"[evacuation] has no setting {key!r} (it has {', '.join(lines)})")
        lines[key] = value
    table = "\n".join(f"{k} = {v}" for k, v in lines.items()) + "\n"
    path.write_text(head + "\n[evacuation]\n" + table + sep + tail)


def live(a):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import ingest  # noqa: E402  (the server configuration)
    import s3 as pf  # noqa: E402  (server, clients)

    objects = max(1, int(a.gib * (1 << 30)) // OBJECT_BYTES)
    data_bytes = objects * OBJECT_BYTES
    scratch = Path(a.dir)
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = Path(a.out or pf.REPO / "bench" / "out" / f"evacuate-live-{stamp}")
    out.mkdir(parents=True, exist_ok=True)
    summary = []

    def say(text=""):
        print(text, flush=True)
        summary.append(text)

    commit = subprocess.run(["git", "-C", str(pf.REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    results = dict(machine=pf.machine(scratch), binary=str(a.bin), commit=commit, data_bytes=data_bytes,
                   grid_evacuation=a.grid_evacuation,
                   readers=a.readers, reader_mb_per_s_cap=a.reader_mb_per_s, started=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                   load_start=pf.loadavg(), rounds=[])
    m = results["machine"]
    pace = f" paced to {a.reader_mb_per_s:g} MB/s together" if a.reader_mb_per_s > 0 else ""
    say(f"evacuation in a running server with {a.readers} readers{pace}, {m.get('date (UTC)')} UTC: {m.get('cpu')}, "
        f"{m.get('ram')}, {m.get('kernel')}, {m.get('file system')}")
    say(f"   binary {a.bin} (commit {commit}), {data_bytes >> 20} MiB on the disk in {objects} objects, "
        f"load {pf.loadavg()}")
    disk_bytes = data_bytes * 5 // 4 + (256 << 20)
    conf = ingest.config(data_bytes + (512 << 20), disk_bytes, hold=True)
    s = pf.Server(Path(a.bin), scratch / "server", conf, out / "server.log").start()
    try:
        s3 = pf.s3_client(s.endpoint)
        s3.create_bucket(Bucket=pf.BUCKET)
        digests = {}
        t = time.monotonic()
        for i in range(objects):
            body = pf.RandomData(1000 + i).range(0, OBJECT_BYTES)
            key = f"ds/o{i:04d}"
            s3.put_object(Bucket=pf.BUCKET, Key=key, Body=body)
            digests[key] = hashlib.sha256(body).hexdigest()
            del body
        r = pf.admin(s.endpoint, "POST", pf.PERSIST_PATH)
        assert r.status_code == 200, r.text
        r = pf.admin(s.endpoint, "POST", EVICT_PATH)
        assert r.status_code == 200, r.text
        say(f"   uploaded and persisted in {time.monotonic() - t:.1f} s")
        if a.grid_evacuation:
            s.stop()
            set_grid_evacuation(s.data_dir / "grid" / "grid.toml", a.grid_evacuation)
            s.start()
            s3 = pf.s3_client(s.endpoint)
            say(f"   restarted with [evacuation] {a.grid_evacuation} in grid.toml")
        buckets = {}
        for key in digests:
            head = s3.head_object(Bucket=pf.BUCKET, Key=key)["ResponseMetadata"]["HTTPHeaders"]
            buckets.setdefault(int(head["x-permafrost-grid-bucket"]), []).append(key)
        grid_bucket, keys = max(buckets.items(), key=lambda kv: len(kv[1]))
        disks = api(pf, s.endpoint, "GET", "/disks")["disks"]
        disk = next(d["disk"] for d in disks if d["role"] == "data" and d["role_index"] == grid_bucket)
        say(f"   disk {disk} (grid bucket {grid_bucket}) holds {len(keys)} of the {objects} objects")
        grid = s.data_dir / "grid"
        for i in range(1, a.rounds + 1):
            name = next(d["name"] for d in api(pf, s.endpoint, "GET", "/disks")["disks"] if d["disk"] == disk)
            path = Path(name) if Path(name).is_absolute() else grid / name
            before = odirect_copy(path, scratch)
            drop_caches(required=False)
            readers = Readers(pf, s.endpoint, keys, digests, a.readers, a.reader_mb_per_s).start()
            while readers.counts()[0] < a.readers and not (readers.errors or readers.mismatches):
                time.sleep(0.05)
            gets0, bytes0 = readers.counts()
            sampler = ThreadSampler(s.pid).start() if a.profile else None
            t = time.monotonic()
            task = api(pf, s.endpoint, "POST", f"/disks/{disk}/evacuate")["task"]
            while task["state"] not in ("done", "failed"):
                time.sleep(0.1)
                task = api(pf, s.endpoint, "GET", f"/tasks/{task['id']}")
            evac_s = time.monotonic() - t
            profile = sampler.finish() if sampler else None
            gets1, bytes1 = readers.counts()
            readers.finish()
            assert task["state"] == "done", task
            report = task["result"]
            state = next(d for d in api(pf, s.endpoint, "GET", "/disks")["disks"] if d["disk"] == disk)["evacuation"]
            assert report["retired"] and state["state"] == "retired", (report, state)
            # The retired disk file of this round is no longer part of the grid: free its space first.
            (grid / state["source"]).unlink()
            after = odirect_copy(grid / state["target"], scratch)
            dd_s = (before["seconds"] + after["seconds"]) / 2
            row = dict(disk=disk, evacuate_s=round(evac_s, 3), engine_s=round(report["seconds"], 3),
                       dd_before=before, dd_after=after, dd_s=round(dd_s, 3), ratio=round(evac_s / dd_s, 3),
                       bytes_copied=report["bytes_copied"], bytes_reconstructed=report["bytes_reconstructed"],
                       bytes_served_to_readers=report["bytes_served_to_readers"],
                       reader_gets=gets1 - gets0, reader_bytes=bytes1 - bytes0,
                       reader_mb_per_s=round((bytes1 - bytes0) / evac_s / 1e6, 1),
                       reader_get_s_max=round(readers.get_s_max, 3), profile=profile,
                       reads_admitted=report.get("reads_admitted"), reads_waited=report.get("reads_waited"),
                       read_wait_ms_longest=report.get("read_wait_ms_longest"),
                       reader_gets_total=readers.gets, reader_errors=len(readers.errors),
                       reader_mismatches=len(readers.mismatches), errors=readers.errors[:5],
                       mismatches=readers.mismatches[:5], load=pf.loadavg())
            results["rounds"].append(row)
            if profile:
                say(f"   round {i} threads of the evacuation, samples every 10 ms: {profile}")
            say(f"   round {i}: evacuation {evac_s:.2f} s / O_DIRECT copy {dd_s:.2f} s "
                f"({before['seconds']:.2f}, {after['seconds']:.2f}) = {row['ratio']:.3f}; "
                f"{row['bytes_copied'] >> 20} MiB copied, {row['bytes_reconstructed'] >> 20} MiB reconstructed, "
                f"{row['bytes_served_to_readers'] >> 20} MiB served to readers from the old disk; readers "
                f"{row['reader_gets']} GETs, {row['reader_mb_per_s']} MB/s during it, longest GET "
                f"{row['reader_get_s_max']:.2f} s, {row['reads_waited']} of {row['reads_admitted']} read chunks "
                f"waited (longest {row['read_wait_ms_longest']} ms), {row['reader_errors']} errors, "
                f"{row['reader_mismatches']} mismatches (load {row['load']})")
        # After the last round: every object of the disk once more, byte-exact, from the disks.
        pf.admin(s.endpoint, "POST", EVICT_PATH)
        bad = 0
        for key in keys:
            body = s3.get_object(Bucket=pf.BUCKET, Key=key)["Body"].read()
            bad += hashlib.sha256(body).hexdigest() != digests[key]
        results["final_mismatches"] = bad
        say(f"   after the rounds: {len(keys)} objects read back, {bad} mismatches")
    finally:
        s.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    rounds = results["rounds"]
    if rounds:
        say(f"   median ratio {statistics.median(r['ratio'] for r in rounds):.3f} (goal <= 1.2), reader errors "
            f"{sum(r['reader_errors'] for r in rounds)}, mismatches {sum(r['reader_mismatches'] for r in rounds)}")
    results["load_end"] = pf.loadavg()
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "summary.txt").write_text("\n".join(summary) + "\n")
    print(f"results in {out}")


if __name__ == "__main__":
    main()
