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
Reports the evacuation time against the copy (ratio, goal <= 1.2), the readers' GETs, bytes, MB/s and their
errors and mismatches (must be 0). The next round evacuates the disk's new file again; the retired file of the
round before is deleted. The grid, the cache and two copies of the disk need about 6x --gib GiB of free space.

Usage: bench/evacuate.py [--bin target/release/permafrost] [--gib 1] [--dir /var/tmp/evac-bench]
       bench/evacuate.py --live [--gib 2] [--readers 8] [--reader-mb-per-s 0] [--rounds 3] [--bin PATH] [--dir DIR]
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


def run(*args, **kw):
    return subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True, **kw)


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


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

    dropped = drop_caches()
    t = time.monotonic()
    run("dd", f"if={old}", f"of={os.path.join(a.dir, 'copy.img')}", f"bs={block}", f"count={count}",
        "iflag=direct", "oflag=direct", "conv=fsync")
    dd_s = time.monotonic() - t
    os.remove(os.path.join(a.dir, "copy.img"))

    drop_caches()
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
    drop_caches()
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
            drop_caches()
            readers = Readers(pf, s.endpoint, keys, digests, a.readers, a.reader_mb_per_s).start()
            while readers.counts()[0] < a.readers and not (readers.errors or readers.mismatches):
                time.sleep(0.05)
            gets0, bytes0 = readers.counts()
            t = time.monotonic()
            task = api(pf, s.endpoint, "POST", f"/disks/{disk}/evacuate")["task"]
            while task["state"] not in ("done", "failed"):
                time.sleep(0.1)
                task = api(pf, s.endpoint, "GET", f"/tasks/{task['id']}")
            evac_s = time.monotonic() - t
            gets1, bytes1 = readers.counts()
            readers.finish()
            assert task["state"] == "done", task
            report = task["result"]
            state = next(d for d in api(pf, s.endpoint, "GET", "/disks")["disks"] if d["disk"] == disk)["evacuation"]
            assert report["retired"] and state["state"] == "retired", (report, state)
            after = odirect_copy(grid / state["target"], scratch)
            dd_s = (before["seconds"] + after["seconds"]) / 2
            row = dict(disk=disk, evacuate_s=round(evac_s, 3), engine_s=round(report["seconds"], 3),
                       dd_before=before, dd_after=after, dd_s=round(dd_s, 3), ratio=round(evac_s / dd_s, 3),
                       bytes_copied=report["bytes_copied"], bytes_reconstructed=report["bytes_reconstructed"],
                       bytes_served_to_readers=report["bytes_served_to_readers"],
                       reader_gets=gets1 - gets0, reader_bytes=bytes1 - bytes0,
                       reader_mb_per_s=round((bytes1 - bytes0) / evac_s / 1e6, 1),
                       reader_gets_total=readers.gets, reader_errors=len(readers.errors),
                       reader_mismatches=len(readers.mismatches), errors=readers.errors[:5],
                       mismatches=readers.mismatches[:5], load=pf.loadavg())
            results["rounds"].append(row)
            say(f"   round {i}: evacuation {evac_s:.2f} s / O_DIRECT copy {dd_s:.2f} s "
                f"({before['seconds']:.2f}, {after['seconds']:.2f}) = {row['ratio']:.3f}; "
                f"{row['bytes_copied'] >> 20} MiB copied, {row['bytes_reconstructed'] >> 20} MiB reconstructed, "
                f"{row['bytes_served_to_readers'] >> 20} MiB served to readers from the old disk; readers "
                f"{row['reader_gets']} GETs, {row['reader_mb_per_s']} MB/s during it, {row['reader_errors']} "
                f"errors, {row['reader_mismatches']} mismatches (load {row['load']})")
            # The retired disk file of this round is no longer part of the grid: free its space.
            (grid / state["source"]).unlink()
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
