#!/usr/bin/env python3
"""`permafrost grid swap-parity` timed on a small file-backed grid, two binaries side by side in one run: --baseline
(a build whose swap rebuilds the new parity from its group) and --bin (a build whose swap copies the old parity
disk). Per round and binary: a fresh 8x6:4+1 grid of --disk-mib MiB disks (simulated power, --spin-up-ms), --fill-mib
MiB of random data written to each of the buckets 0..3, then the hP of hPG 0 swapped for a disk twice the size
(wall time of the command, which opens and closes the grid too). Page caches are dropped before each swap when the
script may (root). Reported per binary: the median time, the bytes copied and reconstructed (from the command's
JSON when it says so), and which disk positions spun up during the swap (`grid status --json` before and after).

Usage: bench/swap_parity.py --baseline PATH --bin PATH [--disk-mib 512] [--fill-mib 256] [--spin-up-ms 1]
       [--rounds 3] [--dir /var/tmp/swap-bench]"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from pagecache import drop_caches


def run(binary, *args):
    return subprocess.run([str(binary), *map(str, args)], check=True, capture_output=True, text=True)


def spin_ups(binary, grid):
    st = json.loads(run(binary, "grid", "status", "--dir", grid, "--json").stdout)
    return [d["power"]["spin_ups"] for d in st["disks"]], st


def one(binary, root, args):
    grid = root / "g"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    run(binary, "grid", "init", "--dir", grid, "--layout", "8x6:4+1", "--disk-size", f"{args.disk_mib}MiB",
        "--spin-up-ms", args.spin_up_ms, "--json")
    src = root / "in.bin"
    for bucket in range(4):
        src.write_bytes(os.urandom(args.fill_mib << 20))
        run(binary, "grid", "write", "--dir", grid, "--bucket", bucket, "--offset", 0, "--input", src, "--json")
    src.unlink()
    before, st = spin_ups(binary, grid)
    parity = next(d["index"] for d in st["disks"] if d["role"] == {"h_parity": {"hpg": 0}})
    dropped = drop_caches(required=False)
    started = time.monotonic()
    out = run(binary, "grid", "swap-parity", "--dir", grid, "--parity", parity, "--size",
              f"{2 * args.disk_mib}MiB", "--json")
    seconds = time.monotonic() - started
    report = json.loads(out.stdout)["swapped"]
    after, _ = spin_ups(binary, grid)
    spun = [d for d in range(len(before)) if after[d] != before[d]]
    checked = run(binary, "grid", "verify-parity", "--dir", grid, "--json")
    assert json.loads(checked.stdout)["mismatches"] == [], checked.stdout
    return {"seconds": seconds, "parity": parity, "spun_up": spun, "caches_dropped": dropped,
            "bytes_rebuilt": report["bytes_rebuilt"], "bytes_copied": report.get("bytes_copied"),
            "bytes_reconstructed": report.get("bytes_reconstructed")}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--baseline", required=True)
    p.add_argument("--bin", required=True)
    p.add_argument("--disk-mib", type=int, default=512)
    p.add_argument("--fill-mib", type=int, default=256)
    p.add_argument("--spin-up-ms", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dir", default="/var/tmp/swap-bench")
    args = p.parse_args()
    root = Path(args.dir)
    runs = {"baseline": [], "bin": []}
    for _ in range(args.rounds):
        for name in ("baseline", "bin"):
            runs[name].append(one(getattr(args, name), root / name, args))
    shutil.rmtree(root, ignore_errors=True)
    summary = {name: {"median_s": statistics.median(r["seconds"] for r in rs), "runs": rs}
               for name, rs in runs.items()}
    summary["ratio_bin_to_baseline"] = summary["bin"]["median_s"] / summary["baseline"]["median_s"]
    summary["args"] = vars(args)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
