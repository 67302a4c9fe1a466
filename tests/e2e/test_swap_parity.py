"""`permafrost grid swap-parity`: a disk twice the size of a parity disk takes its place and the old parity disk
becomes a data disk. The command is killed with SIGKILL at each of its steps (seen in parity_swaps.json) and at
fixed times, every object is read back byte-exact after every kill, and the same command run again finishes the
swap; then `grid verify-parity` accepts the grid and `grid status` tells the story."""

import json
import random
import signal
import subprocess
import time

from conftest import binary


def run(*args, check=True):
    return subprocess.run([str(binary()), *map(str, args)], capture_output=True, text=True, check=check)


def swap_state(grid):
    try:
        swaps = json.loads((grid / "parity_swaps.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return swaps[-1]["state"] if swaps else None


def assert_objects(grid, tmp_path, objects):
    for bucket, offset, data in objects:
        out = tmp_path / "out.bin"
        run("grid", "read", "--dir", grid, "--bucket", bucket, "--offset", offset, "--length", len(data),
            "--output", out)
        assert out.read_bytes() == data, f"bucket {bucket} at {offset} differs"


def test_swap_parity_survives_sigkill_at_every_step(tmp_path):
    grid = tmp_path / "g"
    run("grid", "init", "--dir", grid, "--layout", "8x6:4+1", "--disk-size", "64MiB", "--spin-up-ms", "1",
        "--json")
    st = json.loads(run("grid", "status", "--dir", grid, "--json").stdout)
    parity = next(d["index"] for d in st["disks"] if d["role"] == {"h_parity": {"hpg": 0}})
    rng = random.Random(33)
    objects = []
    for bucket, size in [(0, 24 << 20), (1, 24 << 20), (2, 16 << 20), (3, 8 << 20), (17, 4 << 20)]:
        data = rng.randbytes(size)
        src = tmp_path / f"in-{bucket}.bin"
        src.write_bytes(data)
        run("grid", "write", "--dir", grid, "--bucket", bucket, "--offset", 1 << 20, "--input", src, "--json")
        objects.append((bucket, 1 << 20, data))

    # add-disk refuses a disk larger than the parity disks and names the way out.
    refused = run("grid", "add-disk", "--dir", grid, "--size", "128MiB", "--row", "0", check=False)
    assert refused.returncode != 0
    assert f"than disk {parity} " in refused.stderr and "grid swap-parity" in refused.stderr, refused.stderr

    command = [str(binary()), "grid", "swap-parity", "--dir", str(grid), "--parity", str(parity), "--size",
               "128MiB", "--json"]
    killed = []
    for target in ["replacing", "rebuilding", "delay:0.05", "moving", "delay:0.4"]:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + (float(target.split(":")[1]) if target.startswith("delay:") else 120)
        while proc.poll() is None and time.monotonic() < deadline:
            if swap_state(grid) == target:
                break
            time.sleep(0.001)
        if proc.poll() is None:
            state = swap_state(grid)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            killed.append((target, state))
            # Whatever the step, the grid opens and every object reads byte-exact.
            assert_objects(grid, tmp_path, objects)
            status = run("grid", "status", "--dir", grid).stdout
            if state not in (None, "done"):
                assert "parity swap in progress" in status, status
        else:
            proc.communicate()
        if swap_state(grid) == "done":
            break
    print("killed (target, state seen):", killed)
    assert any(state in ("replacing", "rebuilding") for _, state in killed), killed

    if swap_state(grid) != "done":
        out = run(*command[1:])
        report = json.loads(out.stdout)["swapped"]
        assert report["resumed"], report
    swaps = json.loads((grid / "parity_swaps.json").read_text())
    assert len(swaps) == 1 and swaps[0]["state"] == "done", swaps
    new_disk = swaps[0]["data_disk"]
    assert new_disk == 48, swaps

    st = json.loads(run("grid", "status", "--dir", grid, "--json").stdout)
    assert st["geometry_version"] == 1
    assert st["disks"][parity]["name"].endswith(swaps[0]["new"]["path"]), st["disks"][parity]
    assert st["disks"][new_disk]["name"].endswith(f"disks/disk-{parity:02d}.img")
    assert st["disks"][new_disk]["role"] == {"data": {"bucket": 32}}
    assert all(not d["failed"] and d["defect_bytes"] == 0 for d in st["disks"]), st["disks"]
    text = run("grid", "status", "--dir", grid).stdout
    assert "parity swapped; the old parity disk is data disk 48" in text, text

    checked = run("grid", "verify-parity", "--dir", grid, "--json", check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert json.loads(checked.stdout)["mismatches"] == []
    assert_objects(grid, tmp_path, objects)
    # The old parity disk reads as zeros and takes data; parity stays valid.
    out = tmp_path / "zeros.bin"
    run("grid", "read", "--dir", grid, "--bucket", 32, "--offset", 0, "--length", 1 << 20, "--output", out)
    assert out.read_bytes() == bytes(1 << 20)
    data = rng.randbytes(4 << 20)
    (tmp_path / "new.bin").write_bytes(data)
    run("grid", "write", "--dir", grid, "--bucket", 32, "--offset", 0, "--input", tmp_path / "new.bin")
    assert_objects(grid, tmp_path, objects + [(32, 0, data)])
    checked = run("grid", "verify-parity", "--dir", grid, "--json", check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_swap_parity_copies_the_old_parity_disk_and_spins_no_other(tmp_path):
    """Unraid's point: the new parity is copied from the old parity disk, so the swap spins up only the parity's
    position (the old and the new disk; `grid status` power counters before and after) and the command says how
    many bytes it copied and reconstructed."""
    grid = tmp_path / "g"
    run("grid", "init", "--dir", grid, "--layout", "8x6:4+1", "--disk-size", "64MiB", "--spin-up-ms", "1",
        "--json")
    st = json.loads(run("grid", "status", "--dir", grid, "--json").stdout)
    parity = next(d["index"] for d in st["disks"] if d["role"] == {"h_parity": {"hpg": 0}})
    rng = random.Random(34)
    objects = []
    for bucket in range(4):
        data = rng.randbytes(8 << 20)
        src = tmp_path / f"in-{bucket}.bin"
        src.write_bytes(data)
        run("grid", "write", "--dir", grid, "--bucket", bucket, "--offset", 0, "--input", src, "--json")
        objects.append((bucket, 0, data))
    before = [d["power"]["spin_ups"] for d in json.loads(run("grid", "status", "--dir", grid, "--json").stdout)["disks"]]

    out = run("grid", "swap-parity", "--dir", grid, "--parity", parity, "--size", "128MiB")
    assert "copied from the old parity disk" in out.stdout, out.stdout
    st = json.loads(run("grid", "status", "--dir", grid, "--json").stdout)
    after = [d["power"]["spin_ups"] for d in st["disks"]]
    spun = [d for d in range(len(before)) if after[d] != before[d]]
    assert spun == [parity], (spun, before, after)
    swaps = json.loads((grid / "parity_swaps.json").read_text())
    assert swaps[0]["bytes_copied"] == swaps[0]["bytes_rebuilt"] > 0, swaps
    assert swaps[0]["bytes_reconstructed"] == 0, swaps
    text = run("grid", "status", "--dir", grid).stdout
    assert "of parity copied from the old parity disk, 0 B reconstructed" in text, text
    checked = run("grid", "verify-parity", "--dir", grid, "--json", check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert_objects(grid, tmp_path, objects)
