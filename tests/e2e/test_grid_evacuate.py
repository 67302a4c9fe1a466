"""`permafrost grid evacuate`: a data disk with a damaged stretch moves to a new file, the readable bytes copied
from it and the damaged ones reconstructed from the grid; every byte reads back exact, the old disk is retired
and `grid status` says so."""

import json
import os
import random
import subprocess

from conftest import binary


def run(*args, check=True):
    return subprocess.run([str(binary()), *map(str, args)], capture_output=True, text=True, check=check)


def test_evacuate_copies_reconstructs_and_retires(tmp_path):
    grid = tmp_path / "g"
    run("grid", "init", "--dir", grid, "--layout", "8x6:4+1", "--disk-size", "64MiB", "--spin-up-ms", "1",
        "--json")
    rng = random.Random(33)
    data = rng.randbytes(16 << 20)
    (tmp_path / "in.bin").write_bytes(data)
    run("grid", "write", "--dir", grid, "--bucket", "0", "--offset", "0", "--input", tmp_path / "in.bin",
        "--json")
    st = json.loads(run("grid", "status", "--dir", grid, "--json").stdout)
    disk = next(d["index"] for d in st["disks"] if d["role"] == {"data": {"bucket": 0}})
    old = grid / "disks" / f"disk-{disk:02d}.img"
    # 1 MiB of garbage 4 MiB into the disk (after its 1 MiB header): beyond what the disk's own code repairs.
    with open(old, "r+b") as f:
        f.seek((1 << 20) + (4 << 20))
        f.write(rng.randbytes(1 << 20))
        os.fsync(f.fileno())

    bad = run("grid", "evacuate", "--dir", grid, "--disk", "999", check=False)
    assert bad.returncode != 0 and "does not exist" in bad.stderr, bad.stderr

    out = json.loads(run("grid", "evacuate", "--dir", grid, "--disk", disk, "--json").stdout)
    report = out["report"]
    assert report["retired"], out
    assert report["bytes_reconstructed"] > 0, out
    assert report["bytes_copied"] >= 12 << 20, out
    assert report["bytes_copied"] + report["bytes_reconstructed"] == 16 << 20, out

    st = json.loads(run("grid", "status", "--dir", grid, "--json").stdout)
    [evac] = st["evacuations"]
    assert evac["disk"] == disk and evac["state"] == "retired", evac
    assert evac["source"]["path"] == f"disks/disk-{disk:02d}.img"
    assert st["disks"][disk]["defect_bytes"] == 0
    assert not st["disks"][disk]["failed"]
    assert st["disks"][disk]["name"].endswith(evac["target"]["path"])
    text = run("grid", "status", "--dir", grid).stdout
    assert f"disk {disk}: disks/disk-{disk:02d}.img -> " in text and "retired" in text, text

    run("grid", "read", "--dir", grid, "--bucket", "0", "--offset", "0", "--length", "16MiB", "--output",
        tmp_path / "out.bin")
    assert (tmp_path / "out.bin").read_bytes() == data
    parity = run("grid", "verify-parity", "--dir", grid, "--json", check=False)
    assert parity.returncode == 0, parity.stdout + parity.stderr
