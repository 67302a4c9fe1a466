#!/usr/bin/env python3
"""What a 4-stream PUT waits on (issue 8, "the x4 wait"): one permafrost server (`bench/peers.py`'s configuration:
fsync on, persistence held off), N streams of multipart PUTs of random bytes (64 MiB parts), driven either by
threads of this one Python process (as `bench/peers.py` does) or by one process per stream. While they run, every
5 ms: each server thread's state and kernel wait channel (`/proc/PID/task/*/stat`, `wchan`), the client threads'
states, and the device's queue (`/proc/diskstats`). Prints MB/s, CPU per GiB and where the threads spent their
samples.

Usage: nice -n -10 .venv/bin/python bench/probe_wait.py --bin PATH | --minio PATH [--size-mib 256] [--streams 4]
                                                        [--clients threads,processes] [--store-extra TOML]
"""

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402
import s3 as pf  # noqa: E402

MiB = pf.MiB


def device() -> str:
    return os.environ.get("PROBE_DEVICE", "vda")


def diskstats() -> list:
    for line in Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        if f[2] == device():
            return [int(x) for x in f[3:]]
    raise RuntimeError(f"no device {device()} in /proc/diskstats")


def task_states(pid: int) -> list:
    out = []
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{t}/stat").read_text()
            wchan = Path(f"/proc/{pid}/task/{t}/wchan").read_text().strip() or "-"
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        state = stat[stat.rindex(")") + 2]
        out.append((comm.rstrip("0123456789-"), state, wchan if state != "R" else "running"))
    return out


class Sampler:
    def __init__(self, pids: dict):
        self.pids, self.counts, self.samples = pids, collections.Counter(), 0
        self.inflight, self._stop = [], threading.Event()

    def run(self):
        while not self._stop.is_set():
            for role, pid in self.pids.items():
                for p in (pid if isinstance(pid, list) else [pid]):
                    try:
                        for comm, state, wchan in task_states(p):
                            self.counts[(role, comm, state, wchan)] += 1
                    except OSError:
                        pass
            self.inflight.append(diskstats()[8])
            self.samples += 1
            time.sleep(0.005)

    def stop(self):
        self._stop.set()


def put_worker(spec: dict):
    """One stream in a process of its own."""
    s3 = pf.s3_client(spec["endpoint"])
    s3.head_bucket(Bucket=pf.BUCKET)
    time.sleep(max(0.0, spec["start_at"] - time.time()))
    peers.put_object(s3, spec["key"], spec["size"], pf.RandomData(spec["seed"]))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        put_worker(json.loads(sys.argv[2]))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=None)
    p.add_argument("--minio", default=None, help="probe MinIO (this binary) instead of permafrost")
    p.add_argument("--size-mib", type=int, default=256)
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--clients", default="threads,processes")
    p.add_argument("--store-extra", default="")
    p.add_argument("--scratch", default=str(pf.REPO.parent / "bench-scratch-wait"))
    args = p.parse_args()
    scratch = Path(args.scratch)
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    size = args.size_mib * MiB
    config = pf.server_config(True, 8 * pf.GiB, 4 * pf.GiB, hold=True)
    if args.store_extra:
        config = config.replace("[store]\n", f"[store]\n{args.store_extra}\n", 1)
    if args.minio:  # the same clients against MinIO single-drive (its threads are Go's: states only)
        server = peers.Minio(peers.find_minio(args.minio), [scratch / "minio-1"], scratch / "server.log").start()
    else:
        server = pf.Server(Path(args.bin), scratch / "permafrost", config, scratch / "server.log").start()
    try:
        pf.s3_client(server.endpoint).create_bucket(Bucket=pf.BUCKET)
        for mode in args.clients.split(","):
            keys = [f"wait/{mode}-{i}" for i in range(args.streams)]
            start_at, workers = time.time() + 5.0, []
            if mode == "threads":
                clients = [pf.s3_client(server.endpoint) for _ in keys]
                for c in clients:
                    c.head_bucket(Bucket=pf.BUCKET)
            else:  # started (imports, the 32 MiB random base) before the clock: they wait for start_at
                workers = [subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(dict(
                    endpoint=server.endpoint, key=k, size=size, seed=50 + i, start_at=start_at))])
                    for i, k in enumerate(keys)]
            time.sleep(max(0.0, start_at - time.time()))
            d0, t0 = diskstats(), time.monotonic()
            cpu0, all0 = pf.proc_cpu_s(server.pid), peers.machine_cpu_s()
            if mode == "threads":
                sampler = Sampler({"server": server.pid, "client": os.getpid()})
                threading.Thread(target=sampler.run, daemon=True).start()
                with ThreadPoolExecutor(args.streams) as pool:
                    list(pool.map(lambda i: peers.put_object(clients[i], keys[i], size, pf.RandomData(50 + i)),
                                  range(args.streams)))
            else:
                sampler = Sampler({"server": server.pid, "client": [w.pid for w in workers]})
                threading.Thread(target=sampler.run, daemon=True).start()
                for w in workers:
                    assert w.wait() == 0
            seconds = time.monotonic() - t0
            sampler.stop()
            d1 = diskstats()
            gib = size * args.streams / pf.GiB
            writes, write_ms, busy_ms = d1[4] - d0[4], d1[7] - d0[7], d1[9] - d0[9]
            print(f"\n== {args.streams} x {args.size_mib} MiB PUT, clients as {mode} (load {pf.loadavg()})")
            print(f"   {size * args.streams / seconds / 1e6:.1f} MB/s in {seconds:.2f} s; server cpu "
                  f"{(pf.proc_cpu_s(server.pid) - cpu0) / gib:.2f} s/GiB, machine cpu "
                  f"{(peers.machine_cpu_s() - all0) / gib:.2f} s/GiB")
            print(f"   device {device()}: {(d1[6] - d0[6]) * 512 / 1e6:.0f} MB written in {writes} writes, "
                  f"mean write await {write_ms / max(writes, 1):.1f} ms, busy {busy_ms / 1000 / seconds:.0%}, "
                  f"mean in flight {sum(sampler.inflight) / max(len(sampler.inflight), 1):.1f}")
            per_role = collections.Counter()
            for (role, comm, state, wchan), n in sampler.counts.items():
                per_role[(role, comm)] += n
            for (role, comm), total in sorted(per_role.items()):
                rows = sorted(((n, state, wchan) for (r, c, state, wchan), n in sampler.counts.items()
                               if (r, c) == (role, comm)), reverse=True)[:5]
                print(f"   {role:6} {comm:18} {total / sampler.samples:5.1f} threads: "
                      + ", ".join(f"{state} {wchan} {n / total:.0%}" for n, state, wchan in rows))
            for k in keys:
                pf.s3_client(server.endpoint).delete_object(Bucket=pf.BUCKET, Key=k)
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
