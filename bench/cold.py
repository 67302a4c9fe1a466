#!/usr/bin/env python3
"""Cold reads under the read scheduler (issue 30): time to first byte of GETs that find their disk asleep, while
uploads persist, with the `deadline` scheduler and with `fifo` (the server's behaviour before it) in one run.

The release binary (`permafrost serve`, 8x6:4+1 grid of sparse file-backed disks, power budget `--budget` disks
spinning at once, a simulated spin-up of `--spin-up-ms`, idle timeout 5x that) on one data directory:
  1. Setup: `--objects` objects of `--object-kib` random bytes spread over `--datasets` datasets (bucket `cold`,
     keys `dsNN/oNNN`, one dataset per key prefix: dataset affinity puts each on one disk), persisted.
  2. Per scheduler (`deadline`, then `fifo`): the server restarts with `[power.scheduler] strategy = ...` (every
     disk off), the cache is evicted, an uploader PUTs `--upload-mib` MiB objects into bucket `ingest` at
     `--upload-mbps` MB/s (cycling over 32 keys, so old versions are collected and the grid stays bounded), and
     after `--warmup-s` `--clients` client threads GET the cold objects (the same shuffled order for both
     schedulers), each GET timed from the request to the first body byte (TTFB). Spin-ups are counted from the
     status (`detail.engine.disks[].power.spin_ups`) before and after the reads.
Goal (issue 30, full size: 500 objects, 40 datasets, 16 clients, 50 MB/s, 10 s spin-up, budget 12): deadline
TTFB p50 <= 12 s and p99 <= 40 s.

Usage: .venv/bin/python bench/cold.py [--objects 500] [--datasets 40] [--clients 16] [--upload-mbps 50]
                                      [--spin-up-ms 10000] [--budget 12] [--bin PATH] [--scratch DIR]
                                      [--schedulers deadline,fifo] [--store-extra 'prefetch_bytes_max = 0']
Results: bench/out/cold-<UTC time>/ (results.json, summary.txt, server logs).
"""

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
import s3 as pf  # noqa: E402  (server, clients, machine)

MiB = pf.MiB
COLD, INGEST = "cold", "ingest"
EVICT_PATH = "/_permafrost/cache/evict"
UPLOAD_KEYS = 32


def config(args, strategy: str) -> str:
    return f"""
[store]
cache_bytes_max = {args.cache_mib * MiB}
cache_wait_ms_max = 60000
gc_grace_ms = 0
gc_interval_ms = 2000
fsync = false
write_mode = "serialized"
default_placement = "dataset-affinity"
dataset_prefix_depth = 1
{args.store_extra}

[store.watchdog]
interval_ms = 200
max_age_ms = 2000
start_off_disk_above_bytes = {64 * MiB}
persist_spinning_above_bytes = {64 * MiB}
pressure_fill_percent = 80.0
persist_under_pressure_above_bytes = 0

[store.grid]
layout = "8x6:4+1"
disk_capacity_bytes = {args.disk_gib << 30}
spinning_max = {args.budget}

[power.scheduler]
strategy = "{strategy}"
"""


class Server(pf.Server):
    """`pf.Server` with a simulated spin-up time other than 0."""

    def __init__(self, *a, spin_up_ms: int, **kw):
        super().__init__(*a, **kw)
        self.spin_up_ms = spin_up_ms

    def start(self):
        env = dict(os.environ, PERMAFROST_ROOT_USER=pf.ACCESS_KEY, PERMAFROST_ROOT_PASSWORD=pf.SECRET_KEY)
        self.process = subprocess.Popen(
            [str(self.binary), "serve", "--data-dir", str(self.data_dir), "--listen", f"127.0.0.1:{self.port}",
             "--simulated-spin-up-ms", str(self.spin_up_ms)],
            stdout=open(self.log, "ab"), stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"permafrost serve exited with {self.process.returncode}; see {self.log}")
            try:
                if requests.get(self.endpoint + pf.HEALTH_PATH, timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"permafrost serve not healthy after 300 s; see {self.log}")


def spin_ups(endpoint: str) -> list:
    status = pf.admin_status(endpoint)
    return [d["power"]["spin_ups"] for d in status["detail"]["engine"]["disks"]]


def percentile(xs: list, p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * len(xs) + 0.5) - 1))]


def cold_keys(args) -> list:
    return [f"ds{i % args.datasets:02d}/o{i:03d}" for i in range(args.objects)]


def setup(args, data_dir: Path, out: Path):
    s = Server(args.binary, data_dir, config(args, "deadline"), out / "setup.log", spin_up_ms=0).start()
    try:
        s3 = pf.s3_client(s.endpoint)
        for b in (COLD, INGEST):
            s3.create_bucket(Bucket=b)
        def put(i_key):
            i, key = i_key
            s3.put_object(Bucket=COLD, Key=key, Body=pf.RandomData(1000 + i).range(0, args.object_kib * 1024))

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(put, enumerate(cold_keys(args))))
        r = pf.admin(s.endpoint, "POST", pf.PERSIST_PATH)
        assert r.status_code == 200, r.text
    finally:
        s.stop()


class Uploader(threading.Thread):
    """PUTs into `ingest` at a steady rate until stopped."""

    def __init__(self, endpoint: str, mbps: float, object_mib: int):
        super().__init__(daemon=True)
        self.s3 = pf.s3_client(endpoint, attempts=1)
        self.rate = mbps * 1e6
        self.size = object_mib * MiB
        self.stop = threading.Event()
        self.bytes = 0
        self.errors = 0
        self.seconds = 0.0

    def run(self):
        t0 = time.monotonic()
        data = pf.RandomData(31)
        i = 0
        while not self.stop.is_set():
            due = t0 + self.bytes / self.rate
            if time.monotonic() < due:
                time.sleep(max(0.0, min(0.05, due - time.monotonic())))
                continue
            try:
                self.s3.put_object(Bucket=INGEST, Key=f"up/{i % UPLOAD_KEYS}", Body=data.range(MiB * (i % 8), self.size))
                self.bytes += self.size
            except Exception:  # SlowDown when the cache is full: the persist fell behind
                self.errors += 1
                time.sleep(0.5)
            i += 1
        self.seconds = time.monotonic() - t0


def run_scheduler(args, strategy: str, data_dir: Path, out: Path) -> dict:
    s = Server(args.binary, data_dir, config(args, strategy), out / f"{strategy}.log", spin_up_ms=args.spin_up_ms)
    s.start()
    try:
        r = pf.admin(s.endpoint, "POST", EVICT_PATH)
        assert r.status_code == 200, r.text
        uploader = Uploader(s.endpoint, args.upload_mbps, args.upload_mib)
        uploader.start()
        time.sleep(args.warmup_s)
        before = spin_ups(s.endpoint)
        keys = cold_keys(args)
        random.Random(30).shuffle(keys)
        queue = list(reversed(keys))
        lock = threading.Lock()
        ttfb, total = [], []

        give_up = threading.Event()

        def client():
            s3 = pf.s3_client(s.endpoint, attempts=1)
            while not give_up.is_set():
                with lock:
                    if not queue:
                        return
                    key = queue.pop()
                t0 = time.monotonic()
                try:
                    body = s3.get_object(Bucket=COLD, Key=key)["Body"]
                    first = body.read(1)
                    t1 = time.monotonic()
                    n = len(first) + sum(len(c) for c in body.iter_chunks(MiB))
                except Exception:
                    if give_up.is_set():
                        return  # the run timed out: the server was stopped under it
                    raise
                t2 = time.monotonic()
                assert n == args.object_kib * 1024, (key, n)
                with lock:
                    ttfb.append(t1 - t0)
                    total.append(t2 - t0)

        t0 = time.monotonic()
        threads = [threading.Thread(target=client, daemon=True) for _ in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=max(0.0, t0 + args.run_timeout_s - time.monotonic()))
        reads_s = time.monotonic() - t0
        timed_out = any(t.is_alive() for t in threads)
        after = spin_ups(s.endpoint)
        uploader.stop.set()
        if timed_out:
            give_up.set()
            s.stop()
        uploader.join()
        per_disk = [a - b for a, b in zip(after, before)]
        return dict(
            scheduler=strategy, reads=len(ttfb), reads_s=round(reads_s, 1),
            ttfb_p50_s=round(percentile(ttfb, 50), 2), ttfb_p90_s=round(percentile(ttfb, 90), 2),
            ttfb_p99_s=round(percentile(ttfb, 99), 2), ttfb_max_s=round(max(ttfb), 2),
            ttfb_mean_s=round(statistics.mean(ttfb), 2), get_mean_s=round(statistics.mean(total), 2),
            spin_ups=sum(per_disk), spin_ups_disk_max=max(per_disk),
            upload_mb_s=round(uploader.bytes / 1e6 / max(uploader.seconds, 1e-3), 1),
            upload_errors=uploader.errors, timed_out=timed_out, unfinished=args.objects - len(ttfb),
            ttfb_s=[round(x, 3) for x in ttfb])
    finally:
        s.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--objects", type=int, default=500)
    p.add_argument("--datasets", type=int, default=40)
    p.add_argument("--object-kib", type=int, default=1024)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--upload-mbps", type=float, default=50.0)
    p.add_argument("--upload-mib", type=int, default=8)
    p.add_argument("--spin-up-ms", type=int, default=10_000)
    p.add_argument("--budget", type=int, default=12)
    p.add_argument("--cache-mib", type=int, default=2048)
    p.add_argument("--disk-gib", type=int, default=4)
    p.add_argument("--warmup-s", type=float, default=10.0)
    p.add_argument("--schedulers", default="deadline,fifo")
    p.add_argument("--run-timeout-s", type=float, default=1200.0, help="GETs still waiting then are unfinished")
    p.add_argument("--store-extra", default="", help="TOML lines for [store], e.g. 'prefetch_bytes_max = 0'")
    p.add_argument("--bin")
    p.add_argument("--scratch", default="/tmp/permafrost-cold")
    p.add_argument("--out")
    args = p.parse_args()
    args.binary = pf.find_binary(args.bin)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = Path(args.out or pf.REPO / "bench" / "out" / f"cold-{stamp}")
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(args.scratch)
    shutil.rmtree(scratch, ignore_errors=True)
    data_dir = scratch / "data"
    results = dict(machine=pf.machine(scratch.parent), args={k: str(v) for k, v in vars(args).items()}, runs=[])
    summary = []

    def say(line=""):
        print(line, flush=True)
        summary.append(line)

    t = time.monotonic()
    setup(args, data_dir, out)
    say(f"setup: {args.objects} objects of {args.object_kib} KiB in {args.datasets} datasets persisted in "
        f"{time.monotonic() - t:.0f} s")
    for strategy in args.schedulers.split(","):
        r = run_scheduler(args, strategy, data_dir, out)
        results["runs"].append(r)
        say(f"{strategy:>8}: TTFB p50 {r['ttfb_p50_s']} s, p90 {r['ttfb_p90_s']} s, p99 {r['ttfb_p99_s']} s, "
            f"max {r['ttfb_max_s']} s, mean {r['ttfb_mean_s']} s; {r['reads']} GETs in {r['reads_s']} s; "
            f"spin-ups {r['spin_ups']} (most on one disk {r['spin_ups_disk_max']}); uploads "
            f"{r['upload_mb_s']} MB/s, {r['upload_errors']} refused"
            + (f"; TIMED OUT after {args.run_timeout_s:.0f} s with {r['unfinished']} GETs unfinished" if r["timed_out"] else ""))
        (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "summary.txt").write_text("\n".join(summary) + "\n")
    shutil.rmtree(scratch, ignore_errors=True)
    print(f"results in {out}")


if __name__ == "__main__":
    main()
