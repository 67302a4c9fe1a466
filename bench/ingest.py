#!/usr/bin/env python3
"""Ingest end to end (issue 8): persistence against the device's limit, reads of persisted objects against an
O_DIRECT read, parity delta merging for concurrent datasets, a long continuous ingest, and churn.

Each phase runs the release binary (`permafrost serve`, fsync on) on a scratch data directory on the same file
system as its baselines, measured in the same run (`dd` with O_DIRECT), and records `uptime`:

  persist     2 x 1 GiB of random bytes in one dataset (--quick: 2 x 256 MiB), persisted on demand
              (POST /_permafrost/persist, returns once all parity is durable). Device bytes per user byte from
              /proc/<server>/io; the device-bound limit = O_DIRECT write MB/s / device bytes per user byte; the
              result is persistence MB/s / that limit (goal >= 0.8). Per write mode (--modes).
  read        after `persist`: the cache evicted, GET of each persisted 1 GiB object (random, and a compressible
              one) next to an O_DIRECT read of a file of the same size (goal >= 0.9).
  merge       delayed write mode, 1, 2 and 4 datasets uploaded at the same time and persisted together; the default
              placement (dataset-affinity) puts datasets persisted together on members of one horizontal parity
              group: device bytes per user byte next to the model (1 data + 1 vP + (hP + vhP) / k) x 17/16.
  continuous  --minutes of ingest (default 10) by 4 clients into a small cache, as fast as the server takes it or
              paced to --continuous-mbps in total (below the persistence rate: the fill must level off; the grid's
              sparse files grow by ~4.3 bytes per byte ingested): cache fill, persistence and ingest sampled every
              second; a chart (SVG) of the fill.
  churn       64 clients overwriting and deleting keys at about --churn-mbps MB/s for --churn-minutes: 503s
              counted (goal 0), and what the cache holds at the end against the live objects.

Usage: .venv/bin/python bench/ingest.py [--quick] [--only PHASES] [--minutes N] [--bin PATH] [--scratch DIR]
Results: bench/out/ingest-<UTC time>/ (results.json, summary.txt, continuous.csv, continuous.svg, logs).
"""

import argparse
import json
import os
import random
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from botocore.exceptions import ClientError

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402  (compressible data)
import s3 as pf  # noqa: E402  (server, clients, dd baselines, measuring)

MiB, GiB = pf.MiB, pf.GiB
BUCKET = pf.BUCKET


def config(cache_bytes: int, disk_bytes: int, hold: bool, write_mode: str = "serialized", layout: str = "8x6:4+1",
           grace_ms: int = 0, placement: str = "dataset-affinity", extra: str = "", grid_extra: str = "") -> str:
    age, above = (86_400_000, pf.NEVER) if hold else (1000, 256 * MiB)
    return f"""
[store]
cache_bytes_max = {cache_bytes}
cache_wait_ms_max = 30000
gc_grace_ms = {grace_ms}
gc_interval_ms = 1000
fsync = true
write_mode = "{write_mode}"
default_placement = "{placement}"
{extra}

[store.watchdog]
interval_ms = 200
max_age_ms = {age}
start_off_disk_above_bytes = {above}
persist_spinning_above_bytes = {above}
pressure_fill_percent = 80.0
persist_under_pressure_above_bytes = {0 if not hold else pf.NEVER}

[store.grid]
layout = "{layout}"
disk_capacity_bytes = {disk_bytes}
{grid_extra}
"""


class Run:
    def __init__(self, args):
        self.args = args
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        self.out = Path(args.out or pf.REPO / "bench" / "out" / f"ingest-{stamp}")
        self.out.mkdir(parents=True, exist_ok=True)
        self.scratch = Path(args.scratch)
        shutil.rmtree(self.scratch, ignore_errors=True)
        self.scratch.mkdir(parents=True)
        self.binary = pf.find_binary(args.bin)
        self.summary = []
        self.results = dict(machine=pf.machine(self.scratch), phases={})
        self.size = 256 * MiB if args.quick else 1 * GiB

    def say(self, text=""):
        print(text, flush=True)
        self.summary.append(text)

    def server(self, name: str, conf: str) -> pf.Server:
        data = self.scratch / name
        shutil.rmtree(data, ignore_errors=True)
        s = pf.Server(self.binary, data, conf, self.out / f"{name}.log").start()
        pf.s3_client(s.endpoint).create_bucket(Bucket=BUCKET)
        return s

    def done(self, s: pf.Server):
        s.stop()
        shutil.rmtree(s.data_dir, ignore_errors=True)

    def baselines(self) -> dict:
        source = pf.random_file(self.scratch, self.size, 11)
        try:
            raw = pf.raw_baselines(self.scratch, source, self.size)
        finally:
            source.unlink(missing_ok=True)
        self.say(f"   O_DIRECT {self.size // MiB} MiB: write {raw['odirect_write']['mb_per_s']} MB/s, "
                 f"read {raw['odirect_read']['mb_per_s']} MB/s (load {pf.loadavg()})")
        return raw

    # ---- persist + read
    def persist(self):
        for mode in self.args.modes.split(","):
            self.say(f"\n== persist: 2 x {self.size // MiB} MiB, one dataset, {mode} mode (load {pf.loadavg()})")
            raw = self.baselines()
            s = self.server(f"persist-{mode}", config(6 * self.size, 4 * self.size, hold=True, write_mode=mode,
                                                      extra=self.args.store_extra,
                                                      grid_extra=self.args.grid_extra))
            s3 = pf.s3_client(s.endpoint)
            keys = [f"ds/random-{i}" for i in range(2)]
            for i, key in enumerate(keys):
                peers.put_object(s3, key, self.size, pf.RandomData(100 + i))
            user = 2 * self.size
            with pf.Measure(s) as m:
                r = pf.admin(s.endpoint, "POST", pf.PERSIST_PATH)
                assert r.status_code == 200, r.text
            io = m.io
            amplification = io["write_bytes"] / user
            limit = raw["odirect_write"]["mb_per_s"] / amplification
            rate = user / m.seconds / 1e6
            phase = dict(mode=mode, user_bytes=user, seconds=round(m.seconds, 3), mb_per_s=round(rate, 1),
                         device_write_bytes=io["write_bytes"], device_read_bytes=io["read_bytes"],
                         device_write_per_user_byte=round(amplification, 3),
                         device_limit_mb_per_s=round(limit, 1), ratio=round(rate / limit, 3),
                         server_cores=round(m.server_cpu_s / m.seconds, 2), raw=raw)
            self.say(f"   persisted {user // MiB} MiB in {m.seconds:.2f} s: {rate:.1f} MB/s; device writes "
                     f"{amplification:.3f} per user byte (reads {io['read_bytes'] / user:.3f}); limit "
                     f"{raw['odirect_write']['mb_per_s']} / {amplification:.3f} = {limit:.1f} MB/s; "
                     f"ratio {rate / limit:.3f} (goal 0.8); server {phase['server_cores']} cores")
            if "read" in self.phases and mode == self.args.modes.split(",")[0]:
                text_key = "ds/compressible"  # persisted too, not counted in the rate above
                peers.put_object(s3, text_key, self.size, peers.TextData(200))
                r = pf.admin(s.endpoint, "POST", pf.PERSIST_PATH)
                assert r.status_code == 200, r.text
                phase["read"] = self.read(s, s3, keys[:1] + [text_key], raw)
            self.results["phases"][f"persist {mode}"] = phase
            self.done(s)

    def read(self, s, s3, keys, raw) -> list:
        r = pf.admin(s.endpoint, "POST", "/_permafrost/cache/evict")
        assert r.status_code == 200, r.text
        rows = []
        for key in keys:
            with pf.Measure(s) as m:
                n = pf.get_object(s3, key)
            assert n == self.size
            row = m.row(self.size)
            row.update(key=key, ratio=round(row["mb_per_s"] / raw["odirect_read"]["mb_per_s"], 3))
            rows.append(row)
            self.say(f"   GET {key} from the grid: {row['mb_per_s']} MB/s = {row['ratio']} x O_DIRECT read "
                     f"{raw['odirect_read']['mb_per_s']} MB/s (goal 0.9); server {row['server_cores']} cores, "
                     f"client {row['client_cores']} cores")
        return rows

    # ---- merge
    def merge(self):
        self.say(f"\n== merge: delayed mode, datasets persisted at the same time (load {pf.loadavg()})")
        rows = []
        per = self.size // 2
        for k in (1, 2, 4):
            s = self.server(f"merge-{k}", config(8 * per + 2 * GiB, 4 * per, hold=True, write_mode="delayed",
                                                layout="8x6:4+1"))
            s3 = pf.s3_client(s.endpoint)
            # Datasets ds0..ds{k-1} (first key component), placed by the default strategy when the persist call
            # comes: each new one joins the horizontal parity group where the others wait (checked below: with
            # hn = 4, buckets 4h..4h+3 form hPG h).
            with ThreadPoolExecutor(k) as pool:
                list(pool.map(lambda i: peers.put_object(pf.s3_client(s.endpoint), f"ds{i}/obj", per,
                                                          pf.RandomData(400 + i)), range(k)))
            with pf.Measure(s) as m:
                r = pf.admin(s.endpoint, "POST", pf.PERSIST_PATH)
                assert r.status_code == 200, r.text
            st = pf.admin_status(s.endpoint)
            placed = sorted({int(s3.head_object(Bucket=BUCKET, Key=f"ds{i}/obj")["ResponseMetadata"]["HTTPHeaders"]
                                 .get("x-permafrost-grid-bucket", -1)) for i in range(k)})
            user = k * per
            measured = m.io["write_bytes"] / user
            model = (2 + 2 / k) * 17 / 16
            groups = sorted({b // 4 for b in placed})
            rows.append(dict(datasets=k, grid_buckets=placed, hpgs=groups,
                             device_write_per_user_byte=round(measured, 3), model=round(model, 3),
                             seconds=round(m.seconds, 2), mb_per_s=round(user / m.seconds / 1e6, 1)))
            self.say(f"   {k} dataset(s) on grid buckets {placed} (hPG {groups}): {measured:.3f} device bytes per "
                     f"user byte (model {model:.3f}); {user / m.seconds / 1e6:.1f} MB/s")
            del st
            self.done(s)
        self.results["phases"]["merge"] = rows

    # ---- continuous
    def continuous(self):
        minutes = self.args.minutes
        cache = 2 * GiB if not self.args.quick else GiB
        mbps = self.args.continuous_mbps
        pace = f"paced to {mbps:g} MB/s" if mbps else "unpaced"
        self.say(f"\n== continuous: {minutes} min of ingest by 4 clients ({pace}) into a {cache // MiB} MiB cache "
                 f"(load {pf.loadavg()})")
        object_bytes = 16 * MiB if mbps else 64 * MiB
        s = self.server("continuous", config(cache, 64 * GiB, hold=False, write_mode="serialized",
                                             layout="4x4:2+1"))
        stop = threading.Event()
        counters = dict(bytes=0, objects=0, slowdowns=0, errors=0)
        lock = threading.Lock()

        def client(c: int):
            s3 = pf.s3_client(s.endpoint, attempts=1)
            n = 0
            started = time.monotonic()
            while not stop.is_set():
                if mbps:  # this client's share of the rate: start object n when its bytes are due
                    due = started + n * object_bytes / (mbps * 1e6 / 4)
                    if stop.wait(max(0.0, due - time.monotonic())):
                        break
                body = pf.RandomData(10_000 * c + n).range(0, object_bytes)
                try:
                    s3.put_object(Bucket=BUCKET, Key=f"run{c}/obj-{n:06}", Body=body)
                    with lock:
                        counters["bytes"] += len(body)
                        counters["objects"] += 1
                except ClientError as e:
                    code = e.response.get("Error", {}).get("Code")
                    with lock:
                        counters["slowdowns" if code == "SlowDown" else "errors"] += 1
                n += 1

        rows = []
        threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(4)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        try:
            while time.monotonic() - t0 < minutes * 60:
                time.sleep(1.0)
                st = pf.admin_status(s.endpoint)
                by_state = {str(x[0]).lower(): x[2] for x in st["detail"]["catalog"]["contents_by_state"]}
                with lock:
                    c = dict(counters)
                rows.append(dict(t=round(time.monotonic() - t0, 1), cache_used=st["detail"]["cache_used_bytes"],
                                 persisted=by_state.get("persisted", 0), ingested=c["bytes"],
                                 slowdowns=c["slowdowns"], errors=c["errors"]))
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=120)
        (self.out / "continuous.csv").write_text(
            "t_s,cache_used_bytes,persisted_bytes,ingested_bytes,slowdowns,errors\n"
            + "".join(f"{r['t']},{r['cache_used']},{r['persisted']},{r['ingested']},{r['slowdowns']},{r['errors']}\n"
                      for r in rows))
        svg = chart(rows, cache, f"{minutes:g} min continuous ingest ({pace}), {cache // MiB} MiB cache")
        (self.out / "continuous.svg").write_text(svg)
        last = rows[-1]
        half = [r for r in rows if r["t"] >= rows[-1]["t"] / 2]
        fill = [r["cache_used"] for r in half]
        ingest_rate = (half[-1]["ingested"] - half[0]["ingested"]) / max(half[-1]["t"] - half[0]["t"], 1) / 1e6
        persist_rate = (half[-1]["persisted"] - half[0]["persisted"]) / max(half[-1]["t"] - half[0]["t"], 1) / 1e6
        phase = dict(minutes=minutes, paced_mb_per_s=mbps, object_bytes=object_bytes, cache_bytes=cache,
                     samples=len(rows), ingested_bytes=last["ingested"],
                     second_half=dict(fill_min=min(fill), fill_max=max(fill), ingest_mb_per_s=round(ingest_rate, 1),
                                      persist_mb_per_s=round(persist_rate, 1)),
                     slowdowns=last["slowdowns"], errors=last["errors"])
        phase["grid_allocated_bytes"] = allocated_bytes(s.data_dir / "grid")
        self.results["phases"]["continuous"] = phase
        self.say(f"   ingested {last['ingested'] / GiB:.1f} GiB; second half: cache fill "
                 f"{min(fill) / MiB:.0f}-{max(fill) / MiB:.0f} MiB of {cache // MiB}, ingest {ingest_rate:.1f} MB/s, "
                 f"persistence {persist_rate:.1f} MB/s; SlowDown answers {last['slowdowns']}, other errors "
                 f"{last['errors']}; grid files {phase['grid_allocated_bytes'] / GiB:.1f} GiB; chart "
                 f"{self.out / 'continuous.svg'}")
        self.done(s)

    # ---- churn
    def churn(self):
        minutes = self.args.churn_minutes
        self.say(f"\n== churn: 64 clients overwriting and deleting for {minutes} min at ~{self.args.churn_mbps} MB/s, "
                 f"{self.args.churn_cache_mib} MiB cache, gc grace {self.args.churn_grace_ms} ms (load {pf.loadavg()})")
        s = self.server("churn", config(self.args.churn_cache_mib * MiB, 16 * GiB, hold=False,
                                        grace_ms=self.args.churn_grace_ms))
        result = churn(s.endpoint, minutes * 60, self.args.churn_mbps)
        time.sleep(15)  # the grace period and a collection
        st = pf.admin_status(s.endpoint)
        detail = st["detail"]
        result.update(cache_used_bytes=detail["cache_used_bytes"], objects=detail["catalog"]["objects"],
                      contents=sum(x[1] for x in detail["catalog"]["contents_by_state"]))
        self.results["phases"]["churn"] = result
        self.say(f"   {result['puts']} PUTs, {result['deletes']} DELETEs, {result['slowdowns']} SlowDown, "
                 f"{result['errors']} other errors; at the end {result['objects']} objects, {result['contents']} "
                 f"contents, cache {result['cache_used_bytes'] / MiB:.0f} MiB for {result['live_bytes'] / MiB:.0f} "
                 f"MiB of live objects")
        self.done(s)


def allocated_bytes(path: Path) -> int:
    """Bytes the files under `path` occupy on the file system (sparse files count what is allocated)."""
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file())


def churn(endpoint: str, seconds: float, mbps: float, clients: int = 64, keys: int = 2000) -> dict:
    """`clients` threads PUT (overwrite) and DELETE random keys of `keys` at about `mbps` MB/s for `seconds`
    (no retries: a 503 is counted). Returns counts and the live bytes at the end."""
    stop_at = time.monotonic() + seconds
    per_client_bps = mbps * 1e6 / clients
    lock = threading.Lock()
    live = {}
    counts = dict(puts=0, deletes=0, slowdowns=0, errors=0)

    def run(c: int):
        s3 = pf.s3_client(endpoint, attempts=1)
        rng = random.Random(c)
        while time.monotonic() < stop_at:
            key = f"churn/k{rng.randrange(keys):05}"
            t0 = time.monotonic()
            try:
                if rng.random() < 0.2:
                    s3.delete_object(Bucket=BUCKET, Key=key)
                    with lock:
                        counts["deletes"] += 1
                        live.pop(key, None)
                    continue
                size = rng.choice((4 << 10, 64 << 10, 1 << 20, 4 << 20))
                s3.put_object(Bucket=BUCKET, Key=key, Body=os.urandom(size))
                with lock:
                    counts["puts"] += 1
                    live[key] = size
                # Pace: this client's share of the rate.
                time.sleep(max(0.0, size / per_client_bps - (time.monotonic() - t0)))
            except ClientError as e:
                with lock:
                    counts["slowdowns" if e.response.get("Error", {}).get("Code") == "SlowDown" else "errors"] += 1

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(run, range(clients)))
    return dict(counts, seconds=seconds, live_objects=len(live), live_bytes=sum(live.values()))


def chart(rows: list, cache: int, title: str) -> str:
    """A small SVG line chart: cache fill and ingested/persisted GiB over time."""
    w, h, left, bottom, top, right = 760, 360, 70, 40, 30, 150
    tmax = max(r["t"] for r in rows) or 1
    gib = max(max(r["ingested"] for r in rows), 1) / GiB
    fill_max = cache / MiB

    def x(t):
        return left + (w - left - right) * t / tmax

    def y(v, vmax):
        return h - bottom - (h - bottom - top) * v / vmax

    def path(values, vmax):
        return " ".join(f"{'M' if i == 0 else 'L'}{x(t):.1f},{y(v, vmax):.1f}" for i, (t, v) in enumerate(values))

    lines = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
             f'font-size="12"><rect width="100%" height="100%" fill="white"/>',
             f'<text x="{left}" y="18" font-size="14">{title}</text>',
             f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>',
             f'<text x="{(w - right + left) / 2}" y="{h - 8}" text-anchor="middle">seconds</text>']
    for i in range(6):
        t = tmax * i / 5
        lines.append(f'<text x="{x(t):.1f}" y="{h - bottom + 15}" text-anchor="middle">{t:.0f}</text>')
        v = fill_max * i / 5
        lines.append(f'<text x="{left - 5}" y="{y(v, fill_max) + 4:.1f}" text-anchor="end">{v:.0f}</text>')
    lines.append(f'<text x="15" y="{top + 100}" transform="rotate(-90 15 {top + 100})">cache MiB</text>')
    series = [("cache fill (MiB)", [(r["t"], r["cache_used"] / MiB) for r in rows], fill_max, "#c0392b"),
              (f"ingested (0-{gib:.0f} GiB)", [(r["t"], r["ingested"] / GiB) for r in rows], gib, "#2980b9"),
              (f"persisted (0-{gib:.0f} GiB)", [(r["t"], r["persisted"] / GiB) for r in rows], gib, "#27ae60")]
    for i, (name, values, vmax, color) in enumerate(series):
        lines.append(f'<path d="{path(values, vmax)}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        lines.append(f'<text x="{w - right + 10}" y="{top + 20 + 18 * i}" fill="{color}">{name}</text>')
    lines.append(f'<line x1="{left}" y1="{y(fill_max, fill_max)}" x2="{w - right}" y2="{y(fill_max, fill_max)}" '
                 f'stroke="#999" stroke-dasharray="4 3"/>')
    lines.append("</svg>")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="256 MiB objects, 1 min continuous, 1 min churn")
    p.add_argument("--only", default="persist,read,merge,continuous,churn")
    p.add_argument("--modes", default="serialized,direct", help="write modes of the persist phase")
    p.add_argument("--minutes", type=float, default=None, help="continuous ingest minutes (10; quick 1)")
    p.add_argument("--continuous-mbps", type=float, default=None, help="pace the continuous ingest to this many "
                   "MB/s in total (default: as fast as the server takes it)")
    p.add_argument("--churn-minutes", type=float, default=None, help="churn minutes (3; quick 1)")
    p.add_argument("--churn-mbps", type=float, default=50.0)
    p.add_argument("--churn-cache-mib", type=int, default=2048, help="cache of the churn phase")
    p.add_argument("--churn-grace-ms", type=int, default=3_600_000, help="gc_grace_ms of the churn phase (the "
                   "default configuration's hour: dead contents must not hold the cache full meanwhile)")
    p.add_argument("--store-extra", default="", help="TOML lines added to [store] of the persist phase, e.g. "
                   "'persist_chunks_in_flight = 1'")
    p.add_argument("--grid-extra", default="", help="TOML lines added to [store.grid] of the persist phase, e.g. "
                   "'readahead_chunks = 3'")
    p.add_argument("--bin", default=None)
    p.add_argument("--scratch", default=str(pf.REPO.parent / "bench-scratch-ingest"))
    p.add_argument("--out", default=None)
    args = p.parse_args()
    args.minutes = args.minutes if args.minutes is not None else (1 if args.quick else 10)
    args.churn_minutes = args.churn_minutes if args.churn_minutes is not None else (1 if args.quick else 3)
    run = Run(args)
    run.phases = set(args.only.split(","))
    run.say(f"ingest: {run.results['machine']}")
    try:
        if "persist" in run.phases or "read" in run.phases:
            run.persist()
        if "merge" in run.phases:
            run.merge()
        if "continuous" in run.phases:
            run.continuous()
        if "churn" in run.phases:
            run.churn()
    finally:
        shutil.rmtree(run.scratch, ignore_errors=True)
        run.results["uptime_after"] = pf.loadavg()
        (run.out / "results.json").write_text(json.dumps(run.results, indent=2))
        (run.out / "summary.txt").write_text("\n".join(run.summary) + "\n")
        print(f"\nresults in {run.out}")


if __name__ == "__main__":
    main()
