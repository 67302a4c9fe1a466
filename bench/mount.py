#!/usr/bin/env python3
"""The POSIX mount (issue 11's benchmarks): `permafrost serve --mount DIR`, each number next to its baseline in
the same run.

  read   a 1 GiB object of random bytes (--quick: 256 MiB), persisted (POST /_permafrost/persist) and evicted
         from the cache: a sequential read through the mount (`dd bs=1M` to /dev/null) against an S3 GET of the
         same object (boto3, 1 MiB reads), alternating, `--rounds` each (median reported), the kernel's caches
         dropped and every disk off before each read (so each one spins up one disk). Then the same with a
         second object of that size that stays in the cache. Goal: mount >= 0.9 x GET from the grid. The mount's
         kernel read-ahead is what the server set ([mount] read_ahead_kb, reported with the server's log line);
         --read-ahead-kb overwrites it through sysfs, for experiments.
  tree   100 directories x 1,000 small files (--quick: 10 x 1,000), made on the local file system, uploaded
         (--upload mount: `cp -r` into the mount; s3: `rclone copy` with 32 transfers), persisted and evicted.
         Then `find DIR` (names) and `find DIR -ls` (a stat of every entry) over: the local copy, the permafrost
         mount, `rclone mount` and `s3fs` on permafrost's own S3 endpoint (default options), cold (kernel caches
         dropped; rclone and s3fs mounted afresh, so their own directory caches are empty too) and warm (at once
         again). The disks' spin-up counters (admin status) before and after the listings: goal zero.

Run as root (drop_caches, mounts) with the server and client favoured: `nice -n -10 .venv/bin/python bench/mount.py`.
Usage: bench/mount.py [--quick] [--only read,tree] [--peers rclone,s3fs] [--upload mount|s3] [--bin PATH]
                      [--rounds N] [--read-ahead-kb KB] [--scratch DIR] [--out DIR]
Results: bench/out/mount-<UTC time>/ (results.json, summary.txt, server and peer logs).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import s3 as pf  # noqa: E402  (server, clients, data, measuring)
from pagecache import drop_caches  # noqa: E402

MiB, GiB = pf.MiB, pf.GiB
BUCKET = pf.BUCKET
EVICT_PATH = "/_permafrost/cache/evict"
LIST_TIMEOUT_S = 900


def config(cache_bytes: int, disk_bytes: int, fsync: bool) -> str:
    """Persistence only on demand (POST /_permafrost/persist); disks spin down 100 ms after their last I/O
    (`--simulated-spin-up-ms 0`)."""
    return f"""
[store]
cache_bytes_max = {cache_bytes}
cache_wait_ms_max = 30000
gc_grace_ms = 0
fsync = {"true" if fsync else "false"}

[store.watchdog]
interval_ms = 200
max_age_ms = 86400000
start_off_disk_above_bytes = {pf.NEVER}
persist_spinning_above_bytes = {pf.NEVER}
persist_under_pressure_above_bytes = {pf.NEVER}

[store.grid]
layout = "8x6:4+1"
disk_capacity_bytes = {disk_bytes}
"""


def status(endpoint: str) -> dict:
    st = pf.admin_status(endpoint)
    assert st is not None, "no admin status"
    return st


def spin_ups(st: dict) -> int:
    return sum(d["power"]["spin_ups"] for d in st["detail"]["engine"]["disks"])


def woken(before: dict, after: dict) -> dict:
    """`{disk index: spin-ups}` of the disks that spun up between two status documents."""
    a = {d["index"]: d["power"]["spin_ups"] for d in before["detail"]["engine"]["disks"]}
    return {d["index"]: d["power"]["spin_ups"] - a[d["index"]] for d in after["detail"]["engine"]["disks"]
            if d["power"]["spin_ups"] != a[d["index"]]}


def wait_all_off(endpoint: str, timeout_s: float = 60) -> dict:
    deadline = time.time() + timeout_s
    while True:
        st = status(endpoint)
        on = [d["index"] for d in st["detail"]["engine"]["disks"]
              if str(d["power_state"]).lower().replace("_", "") != "off"]
        if not on:
            return st
        if time.time() > deadline:
            raise RuntimeError(f"disks still on after {timeout_s} s: {on}")
        time.sleep(0.05)


def post(endpoint: str, path: str):
    r = pf.admin(endpoint, "POST", path)
    assert r.status_code == 200, f"POST {path}: {r.status_code} {r.text[:300]}"
    return r.json() if r.headers.get("content-type", "").startswith("application/json") else None


def cached_bytes(endpoint: str) -> int:
    return status(endpoint)["detail"]["catalog"]["cached_bytes"]


def bdi_of(path: Path) -> dict:
    """The kernel's read-ahead of the file system mounted on `path` (/sys/class/bdi/MAJ:MIN)."""
    dev = os.stat(path).st_dev
    bdi = Path(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}")
    out = {"bdi": bdi.name}
    for name in ("read_ahead_kb", "max_ratio"):
        try:
            out[name] = int((bdi / name).read_text())
        except OSError:
            pass
    return out


def wait_mounted(path: Path, proc: subprocess.Popen, log: Path, timeout_s: float = 60):
    deadline = time.time() + timeout_s
    while not os.path.ismount(path):
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}: {log.read_text()[-2000:]}")
        if time.time() > deadline:
            raise RuntimeError(f"{path} not mounted after {timeout_s} s: {log.read_text()[-2000:]}")
        time.sleep(0.05)


def unmount(path: Path):
    if os.path.ismount(path):
        if subprocess.run(["fusermount3", "-u", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


class Peer:
    """`rclone mount` or `s3fs` of the benchmark bucket on permafrost's S3 endpoint, default options (what a
    user gets), in the foreground as a child process."""

    def __init__(self, name: str, endpoint: str, mnt: Path, out: Path):
        self.name, self.endpoint, self.mnt, self.out = name, endpoint, mnt, out
        self.proc = None

    def mount(self):
        self.mnt.mkdir(parents=True, exist_ok=True)
        log = self.out / f"{self.name}.log"
        if self.name == "rclone":
            cmd, env = ["rclone", "mount", f"pf:{BUCKET}", str(self.mnt)], pf.rclone_env(self.endpoint)
        else:
            passwd = self.out / "s3fs.passwd"
            passwd.write_text(f"{pf.ACCESS_KEY}:{pf.SECRET_KEY}\n")
            passwd.chmod(0o600)
            cmd = ["s3fs", BUCKET, str(self.mnt), "-f", "-o", f"url={self.endpoint}", "-o", "use_path_request_style",
                   "-o", f"passwd_file={passwd}"]
            env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
        self.proc = subprocess.Popen(cmd, stdout=open(log, "ab"), stderr=subprocess.STDOUT, env=env)
        wait_mounted(self.mnt, self.proc, log)
        return self

    def unmount(self):
        unmount(self.mnt)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


class Run:
    def __init__(self, args):
        self.args = args
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        self.out = Path(args.out or pf.REPO / "bench" / "out" / f"mount-{stamp}")
        self.out.mkdir(parents=True, exist_ok=True)
        self.scratch = Path(args.scratch)
        self.cleanup_scratch()
        self.scratch.mkdir(parents=True)
        self.binary = pf.find_binary(args.bin)
        self.size = 256 * MiB if args.quick else 1 * GiB
        self.dirs = 10 if args.quick else 100
        self.files_per_dir = 1000
        self.summary = []
        self.servers = []
        self.peers = []
        self.results = dict(machine=pf.machine(self.scratch), binary=str(self.binary), object_bytes=self.size,
                            tree=dict(dirs=self.dirs, files_per_dir=self.files_per_dir), phases={})

    def say(self, text=""):
        print(text, flush=True)
        self.summary.append(text)

    def cleanup_scratch(self):
        if self.scratch.exists():
            for m in sorted({Path(l.split()[4]) for l in Path("/proc/self/mountinfo").read_text().splitlines()
                             if l.split()[4].startswith(str(self.scratch))}, reverse=True):
                unmount(m)
        shutil.rmtree(self.scratch, ignore_errors=True)

    def server(self, name: str, conf: str) -> pf.Server:
        data, mnt = self.scratch / f"{name}-data", self.scratch / f"{name}-mnt"
        s = pf.Server(self.binary, data, conf, self.out / f"{name}.log", extra_args=("--mount", mnt))
        self.servers.append(s)
        s.start()
        s.mnt = mnt
        assert os.path.ismount(mnt), f"{mnt} is not mounted; see {s.log}"
        # The server sets the kernel's read-ahead of its mount itself ([mount] read_ahead_kb, docs/mount.md);
        # --read-ahead-kb overrides it through sysfs, for experiments only.
        s.read_ahead_set_by = "server"
        if self.args.read_ahead_kb:
            Path(f"/sys/class/bdi/{bdi_of(mnt)['bdi']}/read_ahead_kb").write_text(f"{self.args.read_ahead_kb}\n")
            s.read_ahead_set_by = "--read-ahead-kb"
        s.read_ahead_log = [l for l in s.log.read_text(errors="replace").splitlines() if "read-ahead" in l]
        pf.s3_client(s.endpoint).create_bucket(Bucket=BUCKET)
        return s

    def done(self, s: pf.Server):
        s.stop()
        unmount(s.mnt)
        shutil.rmtree(s.data_dir, ignore_errors=True)

    def close(self):
        for p in self.peers:
            p.unmount()
        for s in self.servers:
            s.stop()
        self.cleanup_scratch()

    # ---- read
    def read(self):
        size = self.size
        self.say(f"\n== read: {size // MiB} MiB, mount (dd bs=1M) vs S3 GET (boto3), median of {self.args.rounds} "
                 f"(load {pf.loadavg()})")
        s = self.server("read", config(3 * size + GiB, 2 * size, fsync=True))
        s3 = pf.s3_client(s.endpoint)
        pf.put_object(s3, "read/persisted.bin", size, 61)
        post(s.endpoint, pf.PERSIST_PATH)
        post(s.endpoint, EVICT_PATH)
        assert cached_bytes(s.endpoint) == 0, "evict left bytes in the cache"
        pf.put_object(s3, "read/cached.bin", size, 62)
        phase = dict(bdi=bdi_of(s.mnt), read_ahead_set_by=s.read_ahead_set_by, server_said=s.read_ahead_log,
                     cases={})
        self.say(f"   mount {phase['bdi']} (read_ahead_kb as left by the {s.read_ahead_set_by})")
        for line in s.read_ahead_log:
            self.say(f"   server: {line}")
        for case, key, seed in (("grid", "read/persisted.bin", 61), ("cache", "read/cached.bin", 62)):
            from_grid = case == "grid"
            path = s.mnt / BUCKET / key
            self.check(path, size, seed)
            runs = {"mount": [], "s3": []}
            for r in range(self.args.rounds):
                order = ("mount", "s3") if r % 2 == 0 else ("s3", "mount")
                for who in order:
                    drop_caches()
                    before = wait_all_off(s.endpoint)
                    with pf.Measure(s) as m:
                        if who == "mount":
                            pf.dd([f"if={path}", "of=/dev/null", f"bs={MiB}"])
                        else:
                            got = pf.get_object(s3, key)
                            assert got == size, f"GET returned {got} bytes"
                    row = m.row(size)
                    after = status(s.endpoint)
                    row["spin_ups"] = spin_ups(after) - spin_ups(before)
                    row["woken"] = woken(before, after)
                    runs[who].append(row)
                    self.say(f"   {case:5} {who:5} round {r + 1}: {row['mb_per_s']:8.1f} MB/s  (server "
                             f"{row['server_cores']} cores, client {row['client_cores']} cores, spin-ups "
                             f"{row['spin_ups']} {row['woken']})")
            med = {who: statistics.median(x["mb_per_s"] for x in rows) for who, rows in runs.items()}
            ratio = round(med["mount"] / med["s3"], 3)
            # Each round's pair ran back to back: on a noisy machine the median of their ratios is the steadier one.
            pairs = zip(runs["mount"], runs["s3"])
            paired = round(statistics.median(a["mb_per_s"] / b["mb_per_s"] for a, b in pairs), 3)
            phase["cases"][case] = dict(runs=runs, median_mb_per_s=med, ratio=ratio, median_paired_ratio=paired)
            self.say(f"   {case}: mount {med['mount']:.1f} / GET {med['s3']:.1f} MB/s = {ratio:.3f}; median of the "
                     f"rounds' ratios {paired:.3f}" + (" (goal 0.9)" if from_grid else ""))
            if from_grid:
                assert cached_bytes(s.endpoint) <= size, "a read from the grid filled the cache"
        self.results["phases"]["read"] = phase
        self.done(s)

    def check(self, path: Path, size: int, seed: int):
        """The first and last MiB through the mount equal what was uploaded."""
        data = pf.RandomData(seed)
        with open(path, "rb") as f:
            for offset in sorted({0, (size - 1) // MiB * MiB}):
                f.seek(offset)
                length = min(MiB, size - offset)
                if f.read(length) != data.range(offset, length):
                    raise RuntimeError(f"{path}: bytes at {offset} differ from what was uploaded")

    # ---- tree
    def make_tree(self, root: Path) -> int:
        n = 0
        blob = os.urandom(1 << 16)
        for d in range(self.dirs):
            sub = root / f"dir-{d:03d}"
            sub.mkdir(parents=True)
            for f in range(self.files_per_dir):
                size = (d * 7919 + f * 104729) % 4096
                (sub / f"file-{f:04d}.dat").write_bytes(blob[(f * 13) % 4096:][:size])
                n += 1
        return n

    def listing(self, s: pf.Server, name: str, temp: str, what: str, cmd: list) -> dict:
        before = wait_all_off(s.endpoint)
        t0 = time.monotonic()
        try:
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=LIST_TIMEOUT_S)
            seconds = time.monotonic() - t0
            lines = r.stdout.count(b"\n")
            error = r.stderr.decode(errors="replace")[-300:] if r.returncode else None
        except subprocess.TimeoutExpired:
            seconds, lines, error = None, None, f"timed out after {LIST_TIMEOUT_S} s"
        woke = spin_ups(status(s.endpoint)) - spin_ups(before)
        row = dict(target=name, cache=temp, op=what, seconds=None if seconds is None else round(seconds, 3),
                   entries=lines, per_s=round(lines / seconds) if seconds else None, spin_ups=woke, error=error)
        shown = f"{seconds:8.2f} s {row['per_s']:>8}/s" if seconds else f"{'-':>8}"
        self.say(f"   {name:10} {what:8} {temp}: {shown}  entries {lines}, spin-ups {woke}"
                 + (f"  ERROR {error}" if error else ""))
        return row

    def tree(self):
        entries = self.dirs * self.files_per_dir + self.dirs
        self.say(f"\n== tree: {self.dirs} dirs x {self.files_per_dir} files ({entries} entries below the root), "
                 f"upload {self.args.upload} (load {pf.loadavg()})")
        local = self.scratch / "tree-local" / "tree"
        t0 = time.monotonic()
        files = self.make_tree(local)
        self.say(f"   made the local tree in {time.monotonic() - t0:.1f} s")
        # The upload is setup, not the measurement: no fsync, so that it is bound by requests, not the device.
        s = self.server("tree", config(4 * GiB, 4 * GiB, fsync=False))
        phase = dict(upload=self.args.upload, entries=entries, runs=[])
        with pf.Measure(s) as m:
            if self.args.upload == "mount":
                subprocess.run(["cp", "-r", str(local), str(s.mnt / BUCKET / "tree")], check=True)
            else:
                r = subprocess.run(["rclone", "copy", *pf.RCLONE_FLAGS, "--transfers", "32", "--checkers", "32",
                                    str(local), f"pf:{BUCKET}/tree"], env=pf.rclone_env(s.endpoint),
                                   capture_output=True, text=True)
                assert r.returncode == 0, r.stderr[-2000:]
        phase["upload_s"] = round(m.seconds, 1)
        self.say(f"   uploaded {files} files in {m.seconds:.1f} s ({files / m.seconds:.0f} files/s, "
                 f"server {m.server_cpu_s / m.seconds:.2f} cores)")
        t0 = time.monotonic()
        post(s.endpoint, pf.PERSIST_PATH)
        post(s.endpoint, EVICT_PATH)
        phase["persist_s"] = round(time.monotonic() - t0, 1)
        self.say(f"   persisted and evicted in {phase['persist_s']} s; cached bytes {cached_bytes(s.endpoint)}")

        targets = [("local", local), ("permafrost", s.mnt / BUCKET / "tree")]
        for name in [p for p in self.args.peers.split(",") if p]:
            if shutil.which("rclone" if name == "rclone" else "s3fs"):
                targets.append((name, None))
            else:
                self.say(f"   {name}: not installed, skipped")
        for name, path in targets:
            for what, cmd in (("find", []), ("find -ls", ["-ls"])):
                peer = None
                if path is None:  # cold: a fresh mount of the peer (its directory cache empty)
                    peer = Peer(name, s.endpoint, self.scratch / f"{name}-mnt", self.out).mount()
                    self.peers.append(peer)
                where = path or peer.mnt / "tree"
                for temp in ("cold", "warm"):
                    if temp == "cold":
                        drop_caches()
                    phase["runs"].append(self.listing(s, name, temp, what, ["find", str(where), *cmd]))
                if peer is not None:
                    peer.unmount()
                    self.peers.remove(peer)
        self.results["phases"]["tree"] = phase
        self.say(f"\n   {'target':10} {'op':9} {'cold s':>9} {'warm s':>9}   (x local cold / warm)")
        by = {(r["target"], r["cache"], r["op"]): r["seconds"] for r in phase["runs"]}
        for name, _ in targets:
            for what in ("find", "find -ls"):
                c, w = by.get((name, "cold", what)), by.get((name, "warm", what))
                lc, lw = by.get(("local", "cold", what)), by.get(("local", "warm", what))
                rel = lambda a, b: f"{a / b:7.1f}x" if a and b else "      -"
                sec = lambda a: f"{a:9.2f}" if a else f"{'failed':>9}"
                self.say(f"   {name:10} {what:9} {sec(c)} {sec(w)}   {rel(c, lc)} / {rel(w, lw)}")
        total = sum(r["spin_ups"] for r in phase["runs"] if r["target"] == "permafrost")
        phase["permafrost_spin_ups"] = total
        self.say(f"   spin-ups during the permafrost listings: {total} (goal 0)")
        self.done(s)
        shutil.rmtree(local.parent, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="256 MiB object, 10,000-entry tree")
    p.add_argument("--only", default="read,tree", help="phases, comma-separated: read, tree")
    p.add_argument("--peers", default="rclone,s3fs", help="S3 mounts to list the tree through")
    p.add_argument("--upload", choices=["mount", "s3"], default="mount", help="how the tree gets in")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--read-ahead-kb", type=int, default=0,
                   help="experiments: overwrite the mount's /sys/class/bdi/*/read_ahead_kb after the server set it "
                        "(default: leave what the server chose, [mount] read_ahead_kb)")
    p.add_argument("--bin", default=None)
    p.add_argument("--scratch", default=str(pf.REPO.parent / "bench-scratch-mount"))
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/mount.py drops the kernel's caches and mounts: run it as root")
    run = Run(args)
    run.say(f"mount: {run.results['machine']}")
    run.say(f"binary: {run.binary}")
    try:
        for phase in [x for x in args.only.split(",") if x]:
            getattr(run, phase)()
    finally:
        run.close()
        run.results["uptime_after"] = pf.loadavg()
        (run.out / "results.json").write_text(json.dumps(run.results, indent=2))
        (run.out / "summary.txt").write_text("\n".join(run.summary) + "\n")
        print(f"\nresults in {run.out}")


if __name__ == "__main__":
    main()
