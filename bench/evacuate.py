#!/usr/bin/env python3
"""Evacuation of one data disk (`permafrost grid evacuate`) against an O_DIRECT copy of the same bytes, in the
same run: a file-backed 8x6:4+1 grid, --gib GiB of random data written to bucket 0, then
  1. the baseline: `dd iflag=direct oflag=direct` of the old disk file's allocated bytes to a new file;
  2. `grid evacuate --disk D --json` (wall time of the command, which opens and closes the grid too).
Page caches are dropped before each step when the script may (root). Prints one JSON line.

Usage: bench/evacuate.py [--bin target/release/permafrost] [--gib 1] [--dir /var/tmp/evac-bench]"""

import argparse
import json
import os
import shutil
import subprocess
import time


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
    a = p.parse_args()
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


if __name__ == "__main__":
    main()
