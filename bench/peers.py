#!/usr/bin/env python3
"""permafrost next to MinIO on the same machine, disk and client (issue 8's peer benchmark).

One server at a time on the same file system (the data directories live under --scratch): permafrost (`serve`,
fsync on, persistence held off: the cache path), MinIO single-drive (the honest peer of a write into a cache) and
MinIO with 4 drives (erasure set EC 2+2). The same boto3 client drives all of them:

  large   1 GiB objects (--quick: 256 MiB), random and compressible bytes: PUT with 1 and 4 streams (one thread,
          connection and object per stream; multipart in 64 MiB parts, as bench/s3.py), then GET of the same
          objects with 1 and 4 streams (permafrost: from the cache).
  small   4 KiB PUTs, then GETs of those keys, with 8 client threads (2 processes x 4 threads) for N seconds.

Ratios are permafrost / MinIO from this one run; `uptime` and the raw O_DIRECT write and read of the same file
system are recorded next to them. MinIO comes from `go install github.com/minio/minio@latest` (bench/peers.sh
installs it); MINIO_CI_CD=1 lets it use directories on the root disk.

Usage: .venv/bin/python bench/peers.py [--quick] [--scratch DIR] [--bin PATH] [--minio PATH] [--only NAMES]
Results: bench/out/peers-<UTC time>/ (results.json, summary.txt, server logs).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
import s3 as pf  # noqa: E402  (bench/s3.py: the permafrost server, data generators, dd baselines)

MiB, GiB = pf.MiB, pf.GiB
BUCKET = pf.BUCKET


class TextData(pf.RandomData):
    """Compressible bytes: random bytes mapped onto 16 letters and a space (about 4 bits of entropy per byte,
    zstd and lz4 roughly halve them); unique per (seed, block) like `RandomData`."""

    TABLE = bytes((b"abcdefghijklmnop "[i % 17]) for i in range(256))
    BASE = pf.RandomData.BASE.translate(TABLE)


class Minio:
    """A MinIO server on one or four directories (same credentials as permafrost's benchmark servers)."""

    def __init__(self, binary: Path, dirs: list, log: Path):
        self.binary, self.dirs, self.log = binary, dirs, log
        self.port = pf.free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process = None

    def start(self):
        for d in self.dirs:
            d.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, MINIO_ROOT_USER=pf.ACCESS_KEY, MINIO_ROOT_PASSWORD=pf.SECRET_KEY, MINIO_CI_CD="1",
                   MINIO_BROWSER="off")
        self.process = subprocess.Popen(
            [str(self.binary), "server", "--quiet", "--address", f"127.0.0.1:{self.port}",
             "--console-address", f"127.0.0.1:{pf.free_port()}", *[str(d) for d in self.dirs]],
            stdout=open(self.log, "ab"), stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"minio exited with {self.process.returncode}; see {self.log}")
            try:
                if requests.get(self.endpoint + "/minio/health/ready", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"minio not ready after 120 s; see {self.log}")

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self):
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

    kill = stop


def put_object(s3, key: str, size: int, data) -> None:
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
    parts = []
    for number, offset in enumerate(range(0, size, pf.PART_BYTES), 1):
        body = data.range(offset, min(pf.PART_BYTES, size - offset))
        r = s3.upload_part(Bucket=BUCKET, Key=key, UploadId=upload, PartNumber=number, Body=body)
        parts.append({"PartNumber": number, "ETag": r["ETag"]})
        del body
    s3.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload, MultipartUpload={"Parts": parts})


def machine_cpu_s() -> float:
    """CPU seconds the whole machine spent (every process and the kernel's own threads: writeback, I/O completion)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = sum(fields[:8]) - fields[3] - fields[4]  # user nice system idle iowait irq softirq steal
    return busy / os.sysconf("SC_CLK_TCK")


def timed(pid: int, f) -> dict:
    cpu0, cli0, all0, t0 = pf.proc_cpu_s(pid), pf.client_cpu_s(), machine_cpu_s(), time.monotonic()
    f()
    return dict(seconds=time.monotonic() - t0, server_cpu_s=pf.proc_cpu_s(pid) - cpu0,
                client_cpu_s=pf.client_cpu_s() - cli0, machine_cpu_s=machine_cpu_s() - all0)


def large(server, size: int, say) -> list:
    rows = []
    for kind, gen in (("random", pf.RandomData), ("compressible", TextData)):
        for streams in (1, 4):
            keys = [f"large/{kind}-{streams}-{i}" for i in range(streams)]
            clients = [pf.s3_client(server.endpoint) for _ in range(streams)]
            for c in clients:
                c.head_bucket(Bucket=BUCKET)
            with ThreadPoolExecutor(streams) as pool:
                put = timed(server.pid, lambda: list(pool.map(
                    lambda i: put_object(clients[i], keys[i], size, gen(1000 * streams + i)), range(streams))))
                got = []
                get = timed(server.pid, lambda: got.extend(pool.map(
                    lambda i: pf.get_object(clients[i], keys[i]), range(streams))))
            assert got == [size] * streams, f"GET returned {got} bytes"
            for op, m in (("PUT", put), ("GET", get)):
                row = dict(op=op, data=kind, streams=streams, mb_per_s=round(size * streams / m["seconds"] / 1e6, 1),
                           server_cpu_s=round(m["server_cpu_s"], 2), client_cpu_s=round(m["client_cpu_s"], 2),
                           machine_cpu_s=round(m["machine_cpu_s"], 2))
                rows.append(row)
                say(f"   {op} {size // MiB} MiB {kind:12} x{streams}: {row['mb_per_s']:8.1f} MB/s  "
                    f"(server cpu {row['server_cpu_s']} s, client cpu {row['client_cpu_s']} s, "
                    f"machine cpu {row['machine_cpu_s']} s)")
            for i, k in enumerate(keys):
                clients[i].delete_object(Bucket=BUCKET, Key=k)
    return rows


def small(server, seconds: float, say) -> list:
    rows = []
    keys = 1
    for op in ("put", "get"):
        start_at = time.time() + 2.0
        spec = dict(endpoint=server.endpoint, threads=4, start_at=start_at, seconds=seconds, op=op, keys=keys)
        cpu0 = pf.proc_cpu_s(server.pid)
        workers = [subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(dict(spec, process=p))],
                                    stdout=subprocess.PIPE) for p in range(2)]
        outs = [json.loads(w.communicate()[0]) for w in workers]
        count = sum(o["count"] for o in outs)
        errors = sum(o["errors"] for o in outs)
        if op == "put":  # GETs read keys every thread wrote
            keys = max(1, min(n for o in outs for n in o["per_thread"]))
        lat = sorted(x for o in outs for x in o["latencies_ms"])
        row = dict(op=f"4 KiB {op.upper()}", clients=8, per_s=round(count / seconds, 1), errors=errors,
                   p50_ms=lat[len(lat) // 2] if lat else None, p99_ms=lat[int(len(lat) * 0.99)] if lat else None,
                   server_cpu_ms=round((pf.proc_cpu_s(server.pid) - cpu0) * 1000 / max(count, 1), 3),
                   client_cpu_ms=round(sum(o["client_cpu_s"] for o in outs) * 1000 / max(count, 1), 3))
        rows.append(row)
        say(f"   4 KiB {op.upper()} x8 clients: {row['per_s']:8.1f}/s  p50 {row['p50_ms']} ms, "
            f"p99 {row['p99_ms']} ms, errors {errors}, server cpu {row['server_cpu_ms']} ms, "
            f"client cpu {row['client_cpu_ms']} ms each")
    return rows


def worker(spec: dict):
    """One process of the small-object benchmark: `threads` clients PUT (or GET) 4 KiB objects for `seconds`.
    PUTs write `small/<process>-<thread>-<n>`; GETs read the first `keys` of each thread's (all written)."""
    clients = [pf.s3_client(spec["endpoint"]) for _ in range(spec["threads"])]
    for c in clients:
        c.head_bucket(Bucket=BUCKET)
    results = []

    def run(t: int):
        s3, n, errors, lat = clients[t], 0, 0, []
        time.sleep(max(0.0, spec["start_at"] - time.time()))
        end = spec["start_at"] + spec["seconds"]
        while time.time() < end:
            t0 = time.time()
            key = f"small/{spec['process']}-{t}-{n if spec['op'] == 'put' else n % spec['keys']}"
            try:
                if spec["op"] == "put":
                    s3.put_object(Bucket=BUCKET, Key=key, Body=os.urandom(4096))
                else:
                    s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
                t1 = time.time()
                if t1 <= end:
                    n += 1
                    lat.append(round((t1 - t0) * 1000, 3))
            except Exception:  # counted: the rate is what is measured
                errors += 1
                n += 1
        results.append((n, errors, lat))

    threads = [threading.Thread(target=run, args=(t,)) for t in range(spec["threads"])]
    for t in threads:
        t.start()
    time.sleep(max(0.0, spec["start_at"] - time.time()))
    cpu0 = pf.client_cpu_s()  # this process's CPU while its clients run (the ceiling in BENCHMARKS.md uses it)
    for t in threads:
        t.join()
    print(json.dumps(dict(count=sum(len(r[2]) for r in results), errors=sum(r[1] for r in results),
                          client_cpu_s=pf.client_cpu_s() - cpu0,
                          per_thread=[r[0] - r[1] for r in results],
                          latencies_ms=[x for r in results for x in r[2]])))


def find_minio(path) -> Path:
    if path:
        return Path(path)
    found = shutil.which("minio") or str(Path(os.environ.get("GOPATH", Path.home() / "go")) / "bin" / "minio")
    if not Path(found).exists():
        sys.exit("minio not found: run bench/peers.sh (it installs it with go install) or pass --minio")
    return Path(found)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(json.loads(sys.argv[2]))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="256 MiB objects, 5 s small-object runs")
    p.add_argument("--scratch", default=str(pf.REPO.parent / "bench-scratch-peers"))
    p.add_argument("--bin", default=None)
    p.add_argument("--minio", default=None)
    p.add_argument("--only", default="permafrost,minio-1,minio-4",
                   help="servers to run, comma-separated: permafrost, minio-1, minio-4, permafrost-base (the "
                        "--baseline binary), permafrost-drop (--bin with cache_drop_behind = true)")
    p.add_argument("--baseline", default=None, help="a second permafrost binary (e.g. main's), server permafrost-base")
    p.add_argument("--skip", default="", help="phases to skip: large, small")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    size = 256 * MiB if args.quick else 1 * GiB
    seconds = 5.0 if args.quick else 20.0
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = Path(args.out or pf.REPO / "bench" / "out" / f"peers-{stamp}")
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(args.scratch)
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    summary = []

    def say(text=""):
        print(text, flush=True)
        summary.append(text)

    results = dict(machine=pf.machine(scratch), object_bytes=size, small_seconds=seconds, servers={})
    say(f"peers: {results['machine']}")
    source = pf.random_file(scratch, size, 7)
    try:
        results["raw"] = pf.raw_baselines(scratch, source, size)
    finally:
        source.unlink(missing_ok=True)
    say(f"   raw {size // MiB} MiB: O_DIRECT write {results['raw']['odirect_write']['mb_per_s']} MB/s, "
        f"O_DIRECT read {results['raw']['odirect_read']['mb_per_s']} MB/s")
    servers = {
        "permafrost": lambda: pf.Server(pf.find_binary(args.bin), scratch / "permafrost",
                                        pf.server_config(True, 8 * GiB, 4 * GiB, hold=True),
                                        out / "permafrost.log"),
        # The same binary with `cache_drop_behind = true` (cache files leave the page cache once on the device).
        "permafrost-drop": lambda: pf.Server(pf.find_binary(args.bin), scratch / "permafrost-drop",
                                             pf.server_config(True, 8 * GiB, 4 * GiB, hold=True).replace(
                                                 "[store]\n", "[store]\ncache_drop_behind = true\n", 1),
                                             out / "permafrost-drop.log"),
        "permafrost-base": lambda: pf.Server(Path(args.baseline), scratch / "permafrost-base",
                                             pf.server_config(True, 8 * GiB, 4 * GiB, hold=True),
                                             out / "permafrost-base.log"),
        "minio-1": lambda: Minio(find_minio(args.minio), [scratch / "minio-1"], out / "minio-1.log"),
        "minio-4": lambda: Minio(find_minio(args.minio), [scratch / f"minio-4-{i}" for i in range(4)],
                                 out / "minio-4.log"),
    }
    try:
        for name in [n for n in args.only.split(",") if n]:
            say(f"\n== {name} (load {pf.loadavg()})")
            server = servers[name]().start()
            try:
                pf.s3_client(server.endpoint).create_bucket(Bucket=BUCKET)
                rows = {}
                if "large" not in args.skip:
                    rows["large"] = large(server, size, say)
                if "small" not in args.skip:
                    rows["small"] = small(server, seconds, say)
                results["servers"][name] = rows
            finally:
                server.stop()
                for d in scratch.iterdir():
                    if d.name == name or d.name.startswith(name + "-") and name.startswith("minio"):
                        shutil.rmtree(d, ignore_errors=True)
        report_ratios(results, say)
        report_ratios(results, say, "permafrost-drop")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        results["uptime_after"] = pf.loadavg()
        (out / "results.json").write_text(json.dumps(results, indent=2))
        (out / "summary.txt").write_text("\n".join(summary) + "\n")
        print(f"\nresults in {out}")


def cpu_model(mine: list, theirs: list, key) -> str:
    """The ratio the CPU seconds of this run explain when the 2 cores are the bound: per unit of work the client
    spends C and a server S, so rate ∝ 1 / (C + S) and permafrost / MinIO = (C_m + S_m) / (C_p + S_p); and the
    ceiling of any server on this machine with this client: (C + S_m) / C (a server that costs nothing). Only
    meaningful where both runs were CPU-bound (x4 and the 4 KiB rows; x1 is bound by one client stream)."""
    def cpu(rows):
        for r in rows:
            if (r["op"], r.get("data"), r.get("streams")) == key:
                if "server_cpu_s" in r:
                    return r["client_cpu_s"], r["server_cpu_s"]
                if r.get("client_cpu_ms") is not None:
                    return r["client_cpu_ms"], r["server_cpu_ms"]
        return None
    a, b = cpu(mine), cpu(theirs)
    if not a or not b or a[0] <= 0:
        return ""
    (cp, sp), (cm, sm) = a, b
    return f"  (cpu model {(cm + sm) / (cp + sp):4.2f}x, ceiling {(cp + sm) / cp:4.2f}x)"


def report_ratios(results: dict, say, mine_name: str = "permafrost"):
    s = results["servers"]
    if mine_name not in s:
        return
    say(f"\n== {mine_name} / peers (same run)")

    def value(rows, key):
        return {(r["op"], r.get("data"), r.get("streams")): r[key] for r in rows}

    for peer in ("minio-1", "minio-4", "permafrost-base", "permafrost"):
        if peer not in s:
            continue
        for phase, key in (("large", "mb_per_s"), ("small", "per_s")):
            if peer == mine_name or phase not in s[mine_name] or phase not in s[peer]:
                continue
            mine, theirs = value(s[mine_name][phase], key), value(s[peer][phase], key)
            for k, v in mine.items():
                if k in theirs and theirs[k]:
                    op, data, streams = k
                    label = f"{op} {data} x{streams}" if data else op
                    say(f"   {label:28} {v:9.1f} / {theirs[k]:9.1f} = {v / theirs[k]:5.2f}x  vs {peer}"
                        + cpu_model(s[mine_name][phase], s[peer][phase], k))


if __name__ == "__main__":
    main()
