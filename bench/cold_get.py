#!/usr/bin/env python3
"""GET of a persisted object at the disk's speed (issue 30): each round evicts the cache, drops the page cache and
GETs a 1 GiB object of random bytes and one of compressible text from the grid, next to an O_DIRECT read of the
same disk file in the same round.

The release binary (`permafrost serve`, fsync on, 8x6:4+1 grid of file-backed disks under --scratch) gets both
objects (multipart, 64 MiB parts, one dataset), persists them (POST /_permafrost/persist) and then, per round and
object:
  1. `dd if=<disk file holding the object> of=/dev/null bs=4M iflag=direct` over the object's extent on that file
     (from its first stripe, as many bytes as its stored bytes take there with the IDR overhead), before and after the GET; the
     baseline is the mean of the two (the device's speed swings between minutes);
  2. POST /_permafrost/cache/evict, `echo 3 > /proc/sys/vm/drop_caches`, then one boto3 GET streamed to nowhere in
     1 MiB reads: MB/s of user bytes, the ratio to the baseline (goal >= 0.9), and the server's CPU seconds per GiB
     (utime + stime of /proc/<pid>/stat around the GET).
With --perf, the last round's GETs run under `perf record -g` of the server (perf-<object>.data in the output).

Run as root (drop_caches), when `uptime` is low; the server and client favoured: `nice -n -10`.
Usage: .venv/bin/python bench/cold_get.py [--rounds 3] [--mib 1024] [--bin PATH] [--scratch DIR] [--perf]
Results: bench/out/cold-get-<UTC time>/ (results.json, summary.txt, server log).
"""

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ingest  # noqa: E402  (the persistence configuration)
import peers  # noqa: E402  (multipart upload, compressible data)
from pagecache import drop_caches  # noqa: E402
import s3 as pf  # noqa: E402  (server, clients, measuring)

MiB, GiB = pf.MiB, pf.GiB
EVICT_PATH = "/_permafrost/cache/evict"
GOAL = 0.9
OBJECTS = (("random", pf.RandomData, 31), ("compressible", peers.TextData, 32))


def odirect_read(path: Path, offset: int, length: int) -> dict:
    """`dd bs=4M iflag=direct` of `length` bytes of `path` from `offset` (both multiples of 4096)."""
    r = subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=4M", "iflag=direct,skip_bytes,count_bytes",
                        f"skip={offset}", f"count={length}"], capture_output=True, text=True, check=True)
    m = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", r.stderr)
    n, seconds = int(m.group(1)), float(m.group(2))
    assert n == length, r.stderr
    return dict(bytes=n, seconds=seconds, mb_per_s=round(n / seconds / 1e6, 1))


def grid_extent(s, key: str) -> tuple:
    """(disk file, byte offset, bytes) to read for `key`'s baseline: the file of its grid bucket's data disk, from
    its first stripe, as many bytes as the object's stored bytes take there with the IDR overhead."""
    st = pf.admin_status(s.endpoint)
    head = pf.s3_client(s.endpoint).head_object(Bucket=pf.BUCKET, Key=key)["ResponseMetadata"]["HTTPHeaders"]
    bucket = int(head["x-permafrost-grid-bucket"])
    disks = st["detail"]["engine"]["disks"]
    index = next(d["index"] for d in disks if d.get("role", {}).get("data", {}).get("bucket") == bucket)
    path = s.data_dir / "grid" / "disks" / f"disk-{index:02d}.img"
    stored = int(head["x-permafrost-stored-bytes"])
    # The data disk holds a 1 MiB header, then per MiB of bucket space 2 + 16 x 17 blocks of 4 KiB (docs/engine.md).
    physical = -(-stored // MiB) * (2 + 16 * 17) * 4096
    return path, MiB, physical


class Run:
    def __init__(self, args):
        self.args = args
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        self.out = Path(args.out or pf.REPO / "bench" / "out" / f"cold-get-{stamp}")
        self.out.mkdir(parents=True, exist_ok=True)
        self.scratch = Path(args.scratch)
        shutil.rmtree(self.scratch, ignore_errors=True)
        self.scratch.mkdir(parents=True)
        self.binary = pf.find_binary(args.bin)
        self.size = args.mib * MiB
        self.summary = []
        self.results = dict(machine=pf.machine(self.scratch), binary=str(self.binary), object_bytes=self.size,
                            commit=commit(), started=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                            load_start=pf.loadavg(), rounds=[])

    def say(self, text=""):
        print(text, flush=True)
        self.summary.append(text)

    def run(self):
        a = self.args
        m = self.results["machine"]
        self.say(f"cold GET, {m.get('date (UTC)')} UTC: {m.get('cpu')}, {m.get('ram')}, {m.get('kernel')}, "
                 f"{m.get('file system')}")
        self.say(f"   commit {self.results['commit']}, binary {self.binary}, {a.mib} MiB objects, {a.rounds} rounds, "
                 f"load {pf.loadavg()}")
        conf = ingest.config(3 * self.size, 4 * self.size, hold=True, extra=a.store_extra, grid_extra=a.grid_extra)
        s = pf.Server(self.binary, self.scratch / "server", conf, self.out / "server.log").start()
        try:
            s3 = pf.s3_client(s.endpoint)
            s3.create_bucket(Bucket=pf.BUCKET)
            for name, data, seed in OBJECTS:
                peers.put_object(s3, f"ds/{name}", self.size, data(seed))
            t = time.monotonic()
            r = pf.admin(s.endpoint, "POST", pf.PERSIST_PATH)
            assert r.status_code == 200, r.text
            self.say(f"   uploaded and persisted 2 x {a.mib} MiB (persist {time.monotonic() - t:.1f} s)")
            extents = {name: grid_extent(s, f"ds/{name}") for name, _, _ in OBJECTS}
            for i in range(1, a.rounds + 1):
                rows = {}
                for name, _, _ in OBJECTS:
                    perf = self.out / f"perf-{name}.data" if a.perf and i == a.rounds else None
                    rows[name] = self.one(s, s3, f"ds/{name}", extents[name], perf)
                self.results["rounds"].append(rows)
                self.say(f"   round {i}: " + "; ".join(
                    f"{n} {r['get_mb_per_s']:.0f} MB/s / O_DIRECT {r['odirect_mb_per_s']:.0f} = {r['ratio']:.3f}, "
                    f"{r['server_cpu_s_per_gib']:.2f} CPU-s/GiB" for n, r in rows.items()) + f" (load {pf.loadavg()})")
        finally:
            s.stop()
            shutil.rmtree(self.scratch, ignore_errors=True)
        self.report()

    def one(self, s, s3, key: str, extent: tuple, perf) -> dict:
        path, offset, length = extent
        drop_caches()
        before = odirect_read(path, offset, length)
        r = pf.admin(s.endpoint, "POST", EVICT_PATH)
        assert r.status_code == 200, r.text
        drop_caches()
        tracer = None
        if perf:
            tracer = subprocess.Popen(["perf", "record", "-g", "-F", "1999", "-o", str(perf), "-p", str(s.pid)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1)
        with pf.Measure(s) as m:
            n = pf.get_object(s3, key)
        if tracer:
            tracer.send_signal(2)
            tracer.wait()
        assert n == self.size, f"{key}: {n} bytes"
        after = odirect_read(path, offset, length)
        get = self.size / m.seconds / 1e6
        odirect = (before["mb_per_s"] + after["mb_per_s"]) / 2
        return dict(get_seconds=round(m.seconds, 3), get_mb_per_s=round(get, 1),
                    odirect_mb_per_s=round(odirect, 1), odirect_before=before, odirect_after=after,
                    ratio=round(get / odirect, 3), server_cpu_s=round(m.server_cpu_s, 2),
                    server_cpu_s_per_gib=round(m.server_cpu_s / (self.size / GiB), 3),
                    server_cores=round(m.server_cpu_s / m.seconds, 2), client_cpu_s=round(m.client_cpu_s, 2),
                    server_read_bytes=m.io["read_bytes"], disk_file=path.name, load=pf.loadavg())

    def report(self):
        self.say(f"\n   {'object':<20} {'GET MB/s':>9} {'O_DIRECT MB/s':>14} {'ratio':>6} {'CPU-s/GiB':>10}")
        for name, _, _ in OBJECTS:
            rows = [r[name] for r in self.results["rounds"]]
            for i, r in enumerate(rows, 1):
                self.say(f"   {name + ' ' + str(i):<20} {r['get_mb_per_s']:>9.1f} {r['odirect_mb_per_s']:>14.1f} "
                         f"{r['ratio']:>6.3f} {r['server_cpu_s_per_gib']:>10.2f}")
            ratios = [r["ratio"] for r in rows]
            self.say(f"   {name + ' median':<20} {statistics.median(r['get_mb_per_s'] for r in rows):>9.1f} "
                     f"{statistics.median(r['odirect_mb_per_s'] for r in rows):>14.1f} "
                     f"{statistics.median(ratios):>6.3f} "
                     f"{statistics.median(r['server_cpu_s_per_gib'] for r in rows):>10.2f}   "
                     f"(goal >= {GOAL}: {sum(x >= GOAL for x in ratios)} of {len(ratios)} rounds)")
        self.results["load_end"] = pf.loadavg()
        (self.out / "results.json").write_text(json.dumps(self.results, indent=2))
        (self.out / "summary.txt").write_text("\n".join(self.summary) + "\n")
        print(f"\nresults in {self.out}")


def commit() -> str:
    def git(*a):
        return subprocess.run(["git", "-C", str(pf.REPO), *a], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(pf.REPO), "diff", "--quiet", "HEAD"]).returncode != 0
    return git("rev-parse", "--short", "HEAD") + (" (+ uncommitted changes)" if dirty else "")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--mib", type=int, default=1024, help="object size in MiB (1024)")
    p.add_argument("--perf", action="store_true", help="perf record -g of the server during the last round's GETs")
    p.add_argument("--store-extra", default="", help="TOML lines added to [store]")
    p.add_argument("--grid-extra", default="", help="TOML lines added to [store.grid], e.g. 'readahead_chunks = 3'")
    p.add_argument("--bin", default=None)
    p.add_argument("--scratch", default=str(pf.REPO.parent / "bench-scratch-cold-get"))
    p.add_argument("--out", default=None)
    Run(p.parse_args()).run()


if __name__ == "__main__":
    main()
