"""From the grid: once `status` reports everything persisted, evict the whole cache and read every object back
byte-exact from the disks; then fail 3 disks the way a real failure looks (server stopped, disk files wiped or
gone, server started again) and read everything byte-exact again, reconstructed through the parity grid."""

import hashlib
import os
import random

from admin import (Grid, GRID_BUCKET_HEADER, STATE_HEADER, data_disk_of, disks, dump, evict, role_of, sha,
                   spun_up_since, status, wait_all_off, wait_persisted)
from conftest import Server, client

PART_BYTES = 8 << 20


def text_body(rng: random.Random, n: int) -> bytes:
    """Compressible bytes (words from a small vocabulary): stored compressed in chunks by the server."""
    words = [f"{rng.getrandbits(32):08x}".encode() for _ in range(300)]
    out = bytearray()
    while len(out) < n:
        out += rng.choice(words) + b" "
    return bytes(out[:n])


def upload_mix(s3, rng: random.Random, between_buckets) -> dict:
    """A mix of objects in three S3 buckets and five datasets: small packed ones, mid-sized ones (random and
    compressible), one ~40 MiB multipart upload. `between_buckets()` runs after each S3 bucket's uploads.
    Returns {(bucket, key): sha256}."""
    objects = {}

    def put(bucket, key, body):
        s3.put_object(Bucket=bucket, Key=key, Body=body)
        objects[(bucket, key)] = sha(body)

    for b in ("grid-a", "grid-b", "grid-c"):
        s3.create_bucket(Bucket=b)
    for i in range(30):
        put("grid-a", f"small/s{i:03d}", rng.randbytes(rng.randint(1, 100_000)))
    for i in range(3):
        put("grid-a", f"mid/m{i}", text_body(rng, rng.randint(2 << 20, 5 << 20)))
    between_buckets()
    for i in range(20):
        put("grid-b", f"logs/l{i:03d}", text_body(rng, rng.randint(100, 300_000)))
    for i in range(2):
        put("grid-b", f"media/v{i}", rng.randbytes(3 << 20))
    between_buckets()
    put("grid-c", "big/tail", rng.randbytes(1_500_000))
    # ~40 MiB in 5 parts through the multipart API.
    parts = [rng.randbytes(PART_BYTES) for _ in range(4)] + [text_body(rng, 6 << 20)]
    upload = s3.create_multipart_upload(Bucket="grid-c", Key="big/multipart")["UploadId"]
    etags = [s3.upload_part(Bucket="grid-c", Key="big/multipart", UploadId=upload, PartNumber=n + 1,
                            Body=p)["ETag"] for n, p in enumerate(parts)]
    s3.complete_multipart_upload(Bucket="grid-c", Key="big/multipart", UploadId=upload, MultipartUpload={
        "Parts": [{"PartNumber": n + 1, "ETag": e} for n, e in enumerate(etags)]})
    objects[("grid-c", "big/multipart")] = hashlib.sha256(b"".join(parts)).hexdigest()
    between_buckets()
    return objects


def read_all_exact(s3, objects: dict):
    for (bucket, key), digest in sorted(objects.items()):
        got = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert sha(got) == digest, f"{bucket}/{key} reads back wrong ({len(got)} bytes)"


def grid_buckets_of(s3, objects: dict) -> dict:
    """{(bucket, key): grid bucket} from HEAD; every object must report persisted and its grid bucket."""
    out = {}
    for bucket, key in objects:
        headers = s3.head_object(Bucket=bucket, Key=key)["ResponseMetadata"]["HTTPHeaders"]
        assert headers.get(STATE_HEADER) == "persisted", (bucket, key, headers)
        out[(bucket, key)] = int(headers[GRID_BUCKET_HEADER])
    return out


def choose_failures(st: dict, used_grid_buckets: list, main_grid_bucket: int) -> list:
    """Three disks whose loss the grid survives, all holding this test's data or its parity: the data disk of
    `main_grid_bucket`, the vertical parity disk of its column, and a second data disk that holds objects —
    preferably in the same horizontal group, so recovering the first needs two peeling steps (when all objects
    are on one grid bucket: the vertical parity disk of its horizontal parity disk's column)."""
    grid = Grid(st)
    d1 = data_disk_of(st, main_grid_bucket)["index"]
    vp = grid.vp(grid.column(d1))
    others = [data_disk_of(st, g)["index"] for g in used_grid_buckets if g != main_grid_bucket]
    same_group = [d for d in range(grid.upper) if grid.hpg(d) == grid.hpg(d1) and d != d1
                  and role_of(disks(st)[d])[0] == "data"]
    vhp = grid.vp(grid.column(grid.hpg(d1) * grid.group + grid.group - 1))
    candidates = [d for d in others if d in same_group] + others + [vhp] + same_group
    for d3 in candidates:
        if grid.recoverable({d1, vp, d3}):
            return [d1, vp, d3]
    raise AssertionError(f"no recoverable third disk among {candidates}")


def disk_path(server: Server, st: dict, index: int):
    name = disks(st)[index]["name"]
    path = server.data_dir / "grid" / "disks" / os.path.basename(name)
    assert path.exists(), f"disk {index} is {name}; expected it at {path}"
    return path


def wipe(path):
    """Zero the whole disk file, keeping its size (truncate to 0, then back): a blank disk swapped in."""
    size = path.stat().st_size
    os.truncate(path, 0)
    os.truncate(path, size)


def test_everything_reads_back_byte_exact_from_the_grid_and_after_3_disks_fail(tmp_path):
    rng = random.Random(20240613)
    server = Server(tmp_path / "data")
    server.start()
    try:
        s3 = client(server.endpoint)
        # Placement prefers a spinning disk for a new dataset: letting the disks spin down after each S3
        # bucket's uploads spreads the objects over several grid buckets, so the failures below hit several.
        objects = upload_mix(s3, rng, lambda: (wait_persisted(server.endpoint), wait_all_off(server.endpoint)))
        st = wait_persisted(server.endpoint, expect_contents=len(set(objects.values())))
        placed = grid_buckets_of(s3, objects)
        used = sorted(set(placed.values()))

        # Evict the whole cache: nothing of the objects stays on flash, every read goes to the disks.
        evict(server.endpoint)
        before = status(server.endpoint)
        assert before["detail"]["catalog"]["cached_bytes"] == 0, dump(before)
        read_all_exact(s3, objects)
        woken = spun_up_since(before, status(server.endpoint))
        for g in used:
            assert data_disk_of(before, g)["index"] in woken, (
                f"grid bucket {g} holds objects but its disk never spun up: reads were not from the grid {woken}")

        # Fail 3 disks: stop the server, wipe two disk files and delete one, start again.
        main_bucket = placed[("grid-c", "big/multipart")]
        failed = choose_failures(st, used, main_bucket)
        assert server.stop() == 0, server.log_tail()
        d1, vp, d3 = (disk_path(server, st, i) for i in failed)
        wipe(d1)
        vp.unlink()
        wipe(d3)
        server.start()
        st = status(server.endpoint)
        assert st["disks"]["failed"] == 3, dump(st)
        assert sorted(d["index"] for d in disks(st) if d["failed"]) == sorted(failed)

        evict(server.endpoint)
        assert status(server.endpoint)["detail"]["catalog"]["cached_bytes"] == 0
        read_all_exact(s3, objects)
        holds = {g: sum(1 for v in placed.values() if v == g) for g in used}
        print(f"failed disks {failed} (grid buckets in use {holds}); {len(objects)} objects read back byte-exact")
        assert server.stop() == 0, server.log_tail()
    except Exception:
        print(server.log_tail())
        raise
    finally:
        server.kill()


def test_a_reader_that_closes_the_pipe_early_ends_grid_status_quietly(tmp_path):
    """`permafrost grid status | true`: the command stops when the pipe closes, as a tool stopped by SIGPIPE
    does (status 141), without a panic message."""
    from conftest import binary
    import subprocess
    grid = tmp_path / "grid"
    subprocess.run([str(binary()), "grid", "init", "--dir", str(grid), "--layout", "8x6:4+1", "--disk-size",
                    "64MiB"], check=True, capture_output=True)
    # `true` exits at once: the pipe is closed before the command, which opens the grid first, writes a line.
    p = subprocess.run(f"'{binary()}' grid status --dir '{grid}' | true; echo ${{PIPESTATUS[0]}}", shell=True,
                       capture_output=True, text=True, executable="/bin/bash")
    assert "panicked" not in p.stderr, p.stderr
    assert p.stdout.strip() == "141", (p.stdout, p.stderr)
