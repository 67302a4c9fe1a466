"""`permafrost grid add-group`: three data disks added to row 0 (hPG 0, now 7+1 wide) and written move into a new row
with its own parity disk. The command is killed with SIGKILL in the middle of computing the parity (seen in the
grid's journal: the group is committed and part of its defects are recovered), every object reads back byte-exact,
the same command run again resumes and finishes, and then `grid verify-parity` accepts the grid."""

import json
import random
import signal
import sqlite3
import subprocess
import time

from conftest import binary


def run(*args, check=True):
    return subprocess.run([str(binary()), *map(str, args)], capture_output=True, text=True, check=check)


def journal_progress(grid):
    """(group committed, defect bytes left) as the journal says, read-only; (False, 0) while it cannot be read."""
    try:
        db = sqlite3.connect(f"file:{grid / 'journal.sqlite'}?mode=ro", uri=True, timeout=0.5)
        try:
            groups = db.execute("SELECT count(*) FROM added_groups").fetchone()[0]
            left = db.execute("SELECT coalesce(sum(end - start), 0) FROM defects").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error:
        return False, 0
    return groups > 0, left


def assert_objects(grid, tmp_path, objects):
    for bucket, offset, data in objects:
        out = tmp_path / "out.bin"
        run("grid", "read", "--dir", grid, "--bucket", bucket, "--offset", offset, "--length", len(data),
            "--output", out)
        assert out.read_bytes() == data, f"bucket {bucket} at {offset} differs"


def test_add_group_survives_sigkill_mid_computation(tmp_path):
    grid = tmp_path / "g"
    run("grid", "init", "--dir", grid, "--layout", "8x6:4+1", "--disk-size", "64MiB", "--spin-up-ms", "1",
        "--json")
    for column in (5, 6, 7):
        run("grid", "add-disk", "--dir", grid, "--size", "64MiB", "--row", 0, "--column", column, "--json")
    rng = random.Random(33)
    objects = []
    for bucket, size in [(0, 8 << 20), (20, 4 << 20), (32, 40 << 20), (33, 40 << 20), (34, 24 << 20)]:
        data = rng.randbytes(size)
        src = tmp_path / f"in-{bucket}.bin"
        src.write_bytes(data)
        run("grid", "write", "--dir", grid, "--bucket", bucket, "--offset", 1 << 20, "--input", src, "--json")
        objects.append((bucket, 1 << 20, data))

    # Refused before anything is recorded: a disk of the layout cannot move.
    refused = run("grid", "add-group", "--dir", grid, "--members", "3,48", "--size", "64MiB", check=False)
    assert refused.returncode != 0 and "not a data disk added" in refused.stderr, refused.stderr
    assert journal_progress(grid) == (False, 0)

    command = [str(binary()), "grid", "add-group", "--dir", str(grid), "--members", "48,49,50", "--size", "64MiB",
               "--json"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first_left = None
    seen = None
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        committed, left = journal_progress(grid)
        if committed:
            first_left = first_left or left
            if 0 < left < first_left:
                seen = (first_left, left)
                break
        time.sleep(0.005)
    assert proc.poll() is None, "the computation ended before it could be killed: " + proc.communicate()[1]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    committed, left = journal_progress(grid)
    print("killed mid-computation: defect bytes at commit, when killed, after the kill:", seen, left)
    assert committed and seen is not None and left > 0, (seen, left)

    # Killed mid-way: the group is in the geometry, its parity partly computed, and every object reads.
    status = run("grid", "status", "--dir", grid).stdout
    assert "+1 group (hPG 8: disks 48, 49, 50, hP 51 col 0)" in status, status
    assert_objects(grid, tmp_path, objects)

    out = run(*command[1:])
    resumed = json.loads(out.stdout)
    report = resumed["added_group"]
    print(f"resumed: {report['bytes_to_compute']} bytes of parity left, computed in {resumed['seconds']:.2f} s")
    assert report["resumed"], report
    assert (report["hpg"], report["parity"], report["column"]) == (8, 51, 0), report
    assert journal_progress(grid) == (True, 0)

    st = json.loads(run("grid", "status", "--dir", grid, "--json").stdout)
    assert st["disks"][51]["role"] == {"h_parity": {"hpg": 8}}, st["disks"][51]
    assert all(not d["failed"] and d["defect_bytes"] == 0 for d in st["disks"]), st["disks"]
    checked = run("grid", "verify-parity", "--dir", grid, "--json", check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert json.loads(checked.stdout)["mismatches"] == []
    assert_objects(grid, tmp_path, objects)

    # The new row protects its disks: disk 49 lost and rebuilt, every object byte-exact, parity clean.
    run("grid", "fail", "--dir", grid, "--disk", 49)
    run("grid", "replace", "--dir", grid, "--disk", 49)
    run("grid", "rebuild", "--dir", grid, "--disk", 49)
    assert_objects(grid, tmp_path, objects)
    checked = run("grid", "verify-parity", "--dir", grid, "--json", check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
