"""Memory stays bounded: a large object streams into the server with one PUT and back out of the grid (cache
evicted), byte-exact, while the server's peak resident memory (VmHWM) stays under 512 MiB. The short variant
streams 1 GiB; the soak variant the issue's 10 GiB."""

import hashlib
import shutil
import time

import pytest
import requests

from admin import evict, wait_persisted
from conftest import TEST_CONFIG, Server, client

RSS_BYTES_MAX = 512 << 20
BLOCK_BYTES = 1 << 20


class Generated:
    """`size` deterministic, incompressible bytes produced as they are read (never all in memory), hashed on the
    way out. Each 1 MiB block differs (a counter in its first bytes), so neither chunk compression nor anything
    else can shrink it."""

    def __init__(self, size: int):
        self.size, self.sent = size, 0
        self.block = bytearray(hashlib.shake_256(b"stream").digest(BLOCK_BYTES))
        self.sha = hashlib.sha256()

    def __len__(self):
        return self.size - self.sent

    def read(self, n: int = -1) -> bytes:
        n = self.size - self.sent if n < 0 else min(n, self.size - self.sent)
        out = bytearray()
        while len(out) < n:
            index, offset = divmod(self.sent + len(out), BLOCK_BYTES)
            self.block[:8] = index.to_bytes(8, "little")
            out += self.block[offset:offset + min(n - len(out), BLOCK_BYTES - offset)]
        self.sent += len(out)
        self.sha.update(out)
        return bytes(out)


def peak_rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/PID/status")


def stream_round_trip(tmp_path, size: int):
    disk_bytes = max(4 << 30, 2 * size)  # the object lives whole on one data disk
    config = TEST_CONFIG.replace("disk_capacity_bytes = 536870912", f"disk_capacity_bytes = {disk_bytes}")
    config = config.replace("cache_bytes_max = 2147483648", f"cache_bytes_max = {size + (1 << 30)}")
    server = Server(tmp_path / "data", config=config)
    server.start()
    try:
        s3 = client(server.endpoint)
        s3.create_bucket(Bucket="big")
        url = s3.generate_presigned_url("put_object", Params={"Bucket": "big", "Key": "stream.bin"},
                                        ExpiresIn=3600)
        body = Generated(size)
        started = time.time()
        r = requests.put(url, data=body, timeout=3600)
        assert r.status_code == 200, r.text[:500]
        assert body.sent == size
        put_s = time.time() - started
        wait_persisted(server.endpoint, timeout_s=1800)
        assert evict(server.endpoint) >= size
        started = time.time()
        got = s3.get_object(Bucket="big", Key="stream.bin")
        assert got["ContentLength"] == size
        sha = hashlib.sha256()
        received = 0
        for piece in got["Body"].iter_chunks(4 << 20):
            sha.update(piece)
            received += len(piece)
        get_s = time.time() - started
        assert received == size and sha.digest() == body.sha.digest(), "the object read back from the grid differs"
        peak = peak_rss_bytes(server.process.pid)
        print(f"{size >> 20} MiB: PUT {size / put_s / 1e6:.0f} MB/s, GET from the grid {size / get_s / 1e6:.0f} "
              f"MB/s, server peak RSS {peak >> 20} MiB")
        assert peak < RSS_BYTES_MAX, f"server peak RSS {peak >> 20} MiB while streaming {size >> 20} MiB"
    finally:
        server.kill()
        shutil.rmtree(tmp_path / "data", ignore_errors=True)  # gigabytes; the server's log stays


def test_a_1_gib_object_streams_in_and_out_of_the_grid_in_bounded_memory(tmp_path):
    stream_round_trip(tmp_path, 1 << 30)


@pytest.mark.soak
def test_a_10_gib_object_streams_in_and_out_of_the_grid_in_bounded_memory(tmp_path):
    stream_round_trip(tmp_path, 10 << 30)
