#!/usr/bin/env python3
"""Probe: where a persisted GET's time goes. Usage: probe_read.py BIN SCRATCH OUTDIR [perf] ...

Uploads a random and a compressible object (256 MiB, or PROBE_MIB), persists them, then per object: evicts the
cache, drops the page cache and GETs it (optionally under `perf record`, per-thread flat profile)."""
import os, subprocess, sys, time, shutil
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
import s3 as pf, peers, ingest
MiB = pf.MiB
binary, scratch, out, modes = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:] or ["none"]
size = int(os.environ.get("PROBE_MIB", "256")) * MiB
scratch.mkdir(parents=True, exist_ok=True)
out.mkdir(parents=True, exist_ok=True)
d = scratch / "probe"
shutil.rmtree(d, ignore_errors=True)
extra = os.environ.get("EXTRA", "")
s = pf.Server(binary, d, ingest.config(6 * size, 4 * size, hold=True, extra=extra), out / "probe.log")
s.start()
try:
    s3 = pf.s3_client(s.endpoint); s3.create_bucket(Bucket=pf.BUCKET)
    peers.put_object(s3, "ds/random", size, pf.RandomData(1))
    peers.put_object(s3, "ds/text", size, peers.TextData(2))
    t = time.time(); r = pf.admin(s.endpoint, "POST", pf.PERSIST_PATH); assert r.status_code == 200, r.text
    print(f"persist {2 * size / (time.time()-t)/1e6:.1f} MB/s (load {pf.loadavg()})", flush=True)
    for mode in modes:
        for key in ["ds/random", "ds/text"]:
            r = pf.admin(s.endpoint, "POST", "/_permafrost/cache/evict"); assert r.status_code == 200
            subprocess.run(["sh", "-c", "echo 3 > /proc/sys/vm/drop_caches"])
            tracer = None
            name = key.split("/")[1]
            if mode == "perf":
                tracer = subprocess.Popen(["perf", "record", "-F", "999", "-o", str(out / f"perf-{name}.data"),
                                           "-p", str(s.pid)], stderr=subprocess.DEVNULL)
                time.sleep(1)
            with pf.Measure(s) as m:
                n = pf.get_object(s3, key)
            assert n == size
            print(mode, key, m.row(size), f"load {pf.loadavg()}", flush=True)
            if tracer:
                tracer.send_signal(2); tracer.wait()
finally:
    s.stop()
    shutil.rmtree(d, ignore_errors=True)
