"""A file system that fills up under the embedded default (cache, catalog and the grid's sparse disk files on one
file system) slows uploads down instead of failing the archive: an upload that would leave less than the reserve
(`free_bytes_min`, capped at a twentieth of the file system) answers `503 SlowDown` naming the file system,
persistence waits, no disk is marked failed, and deletes, reads and the health check keep working.

Needs root (it mounts a 400 MiB tmpfs); skipped otherwise."""

import os
import subprocess

import pytest
import requests
from botocore.exceptions import ClientError

from conftest import HEALTH_PATH, TEST_CONFIG, Server, client

FS_BYTES = 400 << 20
OBJECT_BYTES = 4 << 20


@pytest.fixture
def small_fs(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "fs"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FS_BYTES}", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_filling_file_system_answers_slow_down_and_keeps_deletes_working(small_fs):
    config = TEST_CONFIG.replace("cache_wait_ms_max = 10000", "cache_wait_ms_max = 500\nfree_bytes_min = 67108864")
    server = Server(small_fs / "data", config=config)
    server.start()
    try:
        s3 = client(server.endpoint, retries=1)  # see every 503 instead of botocore's retries
        s3.create_bucket(Bucket="full")
        acked, slow_down = {}, None
        for n in range(2 * FS_BYTES // OBJECT_BYTES):
            key, body = f"o{n:03d}", os.urandom(OBJECT_BYTES)
            try:
                s3.put_object(Bucket="full", Key=key, Body=body)
                acked[key] = body
            except ClientError as e:
                status = e.response["ResponseMetadata"]["HTTPStatusCode"]
                error = e.response["Error"]
                assert (status, error["Code"]) == (503, "SlowDown"), (key, status, error)
                slow_down = error.get("Message", "")
                break
        assert slow_down is not None, f"{len(acked)} uploads of {OBJECT_BYTES} bytes fit a {FS_BYTES}-byte file system"
        assert "kept free for the catalog" in slow_down and str(small_fs) in slow_down, slow_down
        assert acked, "nothing was accepted before the file system filled"
        # The archive still works: health, reads of what was acknowledged, deletes.
        assert requests.get(server.endpoint + HEALTH_PATH, timeout=10).status_code == 200
        first = next(iter(acked))
        assert s3.get_object(Bucket="full", Key=first)["Body"].read() == acked[first]
        for key in list(acked)[: len(acked) // 2]:
            s3.delete_object(Bucket="full", Key=key)
            del acked[key]
        for key, body in list(acked.items())[-3:]:
            assert s3.get_object(Bucket="full", Key=key)["Body"].read() == body
    finally:
        server.stop()
    log = server.log_tail(200_000)
    assert "marked failed" not in log, log[-3000:]
    assert " 500 " not in log and "status=500" not in log, log[-3000:]
