"""Salvage: with the server stopped and the catalog gone, `permafrost salvage --data-dir DATA DISK --out DIR`
recovers every object that lived on the data disk, byte-exact, from the self-describing extents alone — also
when that disk itself is wiped and its contents come back through the parity grid."""

import json
import os
import random
import subprocess
import time

import zstandard

from admin import GRID_BUCKET_HEADER, data_disk_of, sha, status, wait_persisted
from conftest import TEST_CONFIG, Server, binary, client

# The salvage command opens the grid with the configured power profile (`--simulated-spin-up-ms` is a flag of
# `serve` only): give the file-backed disks the tests' millisecond timings instead of the thesis's 10 s spin-up.
SALVAGE_CONFIG = TEST_CONFIG + """
[store.power_profile]
spin_up_ms = 20
idle_timeout_ms = 100
"""
BUCKET = "salvage-src"


def text_body(rng: random.Random, n: int) -> bytes:
    words = [f"{rng.getrandbits(40):010x}".encode() for _ in range(200)]
    out = bytearray()
    while len(out) < n:
        out += rng.choice(words) + b"\n"
    return bytes(out[:n])


def salvage(data_dir, disk: str, out) -> dict:
    run = subprocess.run([str(binary()), "salvage", "--data-dir", str(data_dir), disk, "--out", str(out), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"salvage failed ({run.returncode}): {run.stderr[-3000:]}"
    return json.loads(run.stdout)


def recovered_files(out) -> dict:
    """{(bucket, key): sha256} of the objects written under OUT (sidecars excluded)."""
    found = {}
    for root, _, files in os.walk(out):
        rel_root = os.path.relpath(root, out)
        if rel_root.split(os.sep)[0] == "_sidecars":
            continue
        for f in files:
            rel = os.path.normpath(os.path.join(rel_root, f))
            bucket, key = rel.split(os.sep, 1)
            with open(os.path.join(root, f), "rb") as fh:
                found[(bucket, key.replace(os.sep, "/"))] = sha(fh.read())
    return found


def check(report: dict, out, expected: dict, what: str):
    found = recovered_files(out)
    missing = sorted(set(expected) - set(found))
    assert not missing, f"{what}: objects not recovered: {missing[:10]} (report {report})"
    wrong = sorted(k for k in expected if found[k] != expected[k])
    assert not wrong, f"{what}: objects recovered with wrong bytes: {wrong[:10]}"
    assert set(found) == set(expected), f"{what}: unexpected objects {sorted(set(found) - set(expected))[:10]}"
    assert report["objects_recovered"] == len(expected), report
    assert report["incomplete_objects"] == [] and report["damaged_extents"] == [], report


def test_salvage_recovers_every_object_of_a_disk_without_the_catalog(tmp_path):
    rng = random.Random(4242)
    server = Server(tmp_path / "data", config=SALVAGE_CONFIG)
    server.start()
    try:
        s3 = client(server.endpoint)
        s3.create_bucket(Bucket=BUCKET)
        expected_all = {}  # (bucket, key) -> sha256 of the bytes salvage must write

        def put(key, body, **extra):
            s3.put_object(Bucket=BUCKET, Key=key, Body=body, **extra)
            expected_all[(BUCKET, key)] = sha(body)

        # An older version under a key, persisted, then replaced: salvage keeps the newest.
        put("field/versioned", b"old version " * 1000)
        wait_persisted(server.endpoint)
        for i in range(25):  # packed
            put(f"field/small/{i:03d}", rng.randbytes(rng.randint(1, 120_000)),
                Metadata={"index": str(i)} if i % 5 == 0 else {})
        for i in range(3):  # compressed in chunks by the server
            put(f"field/text/{i}", text_body(rng, rng.randint(2 << 20, 4 << 20)), ContentType="text/plain")
        raw = text_body(rng, 3_000_000)
        sent = zstandard.ZstdCompressor(level=3).compress(raw)  # stored as sent: salvage writes these bytes
        put("field/precompressed.zst", sent, ContentEncoding="zstd",
            Metadata={"permafrost-decoded-length": str(len(raw))})
        put("field/large", rng.randbytes(70 << 20))  # two extents (extent_bytes_max = 64 MiB)
        put("field/versioned", b"new version " * 2000)
        for i in range(5):  # another dataset
            put(f"other/o{i}", rng.randbytes(rng.randint(1, 3 << 20)))
        wait_persisted(server.endpoint)

        grid_bucket = {k: int(s3.head_object(Bucket=b, Key=k)["ResponseMetadata"]["HTTPHeaders"][GRID_BUCKET_HEADER])
                       for b, k in expected_all}
        target = grid_bucket["field/large"]
        expected = {(b, k): d for (b, k), d in expected_all.items() if grid_bucket[k] == target}
        assert len(expected) >= 31, expected.keys()
        disk = data_disk_of(status(server.endpoint), target)
        disk_name = os.path.splitext(os.path.basename(disk["name"]))[0]
        assert server.stop() == 0, server.log_tail()

        # The catalog is gone.
        catalogs = [p for p in server.data_dir.iterdir() if p.name.startswith("catalog.sqlite")]
        assert catalogs, sorted(p.name for p in server.data_dir.iterdir())
        for p in catalogs:
            p.unlink()

        t0 = time.time()
        report = salvage(server.data_dir, disk_name, tmp_path / "out")
        check(report, tmp_path / "out", expected, f"salvage of {disk_name}")
        assert report["superseded_objects"] >= 1, report  # the old field/versioned
        t1 = time.time()

        # The data disk itself is wiped too: salvage reads it through the grid, reconstructed from parity.
        image = server.data_dir / "grid" / "disks" / os.path.basename(disk["name"])
        size = image.stat().st_size
        os.truncate(image, 0)
        os.truncate(image, size)
        report = salvage(server.data_dir, str(target), tmp_path / "out-reconstructed")
        check(report, tmp_path / "out-reconstructed", expected, f"salvage of wiped {disk_name}")
        print(f"salvaged {len(expected)} objects of grid bucket {target} ({disk_name}) byte-exact without the "
              f"catalog in {t1 - t0:.1f} s, and again from parity with the disk wiped in {time.time() - t1:.1f} s")
    except Exception:
        print(server.log_tail())
        raise
    finally:
        server.kill()
