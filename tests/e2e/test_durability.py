"""Durability: SIGKILL the server at random moments during uploads and during persistence; after each restart
every acknowledged object reads back with the right hash, and no object is ever visible half-written."""

import hashlib
import random
import threading
import time

import pytest

from conftest import Server, client

BUCKET = "durable"


def body_of(key: str) -> bytes:
    """The bytes uploaded under `key` (deterministic, so any visible object can be checked)."""
    seed = hashlib.sha256(key.encode()).digest()
    size = int.from_bytes(seed[:4], "little") % (3 << 20) if seed[4] % 4 == 0 else int.from_bytes(seed[:4], "little") % 200_000
    return hashlib.shake_256(seed).digest(size + 1)


class Uploader(threading.Thread):
    """Uploads new keys until stopped or the server dies; records the keys the server acknowledged."""

    def __init__(self, endpoint, prefix, acked, lock):
        super().__init__(daemon=True)
        self.s3 = client(endpoint, retries=1)
        self.prefix, self.acked, self.lock = prefix, acked, lock
        self.stop = threading.Event()
        self.attempted = []

    def run(self):
        n = 0
        while not self.stop.is_set():
            key = f"{self.prefix}/{n:05d}"
            n += 1
            self.attempted.append(key)
            try:
                self.s3.put_object(Bucket=BUCKET, Key=key, Body=body_of(key))
            except Exception:
                return  # the server is gone: this upload is not acknowledged
            with self.lock:
                self.acked.add(key)


def check_visible(s3, acked, attempted, full: bool, verified: set):
    listed = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        listed |= {o["Key"]: o["Size"] for o in page.get("Contents", [])}.keys()
    missing = acked - listed
    assert not missing, f"acknowledged objects lost: {sorted(missing)[:10]}"
    unknown = listed - attempted
    assert not unknown, f"objects nobody uploaded: {sorted(unknown)[:10]}"
    to_read = listed if full else listed - verified
    for key in sorted(to_read):
        got = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        assert hashlib.sha256(got).digest() == hashlib.sha256(body_of(key)).digest(), f"{key} reads back wrong"
        verified.add(key)


def kill_loop(tmp_path, rounds: int, seed: int):
    rng = random.Random(seed)
    server = Server(tmp_path / "data")
    server.start()
    s3 = client(server.endpoint)
    s3.create_bucket(Bucket=BUCKET)
    acked, attempted, verified, lock = set(), set(), set(), threading.Lock()
    kills_during_upload = kills_during_persistence = 0
    try:
        for r in range(rounds):
            uploaders = [Uploader(server.endpoint, f"r{r:03d}/u{i}", acked, lock) for i in range(3)]
            for u in uploaders:
                u.start()
            time.sleep(rng.uniform(0.1, 1.2))
            if rng.random() < 0.5:
                kills_during_upload += 1
            else:
                # Stop uploading, then kill while the persistence manager works on what just arrived
                # (persisted 300 ms after upload in the test configuration).
                for u in uploaders:
                    u.stop.set()
                for u in uploaders:
                    u.join()
                time.sleep(rng.uniform(0.0, 0.6))
                kills_during_persistence += 1
            server.kill()
            for u in uploaders:
                u.stop.set()
                u.join()
                attempted.update(u.attempted)
            server.start()
            check_visible(s3, acked, attempted, full=False, verified=verified)
        check_visible(s3, acked, attempted, full=True, verified=set())
        assert server.stop() == 0, server.log_tail()
        server.start()
        check_visible(s3, acked, attempted, full=False, verified=verified)
    except Exception:
        print(f"seed {seed}; log tail:\n{server.log_tail()}")
        raise
    finally:
        server.kill()
    assert kills_during_upload > 0 and kills_during_persistence > 0
    print(f"seed {seed}: {rounds} kills ({kills_during_upload} during uploads, {kills_during_persistence} during "
          f"persistence), {len(acked)} acknowledged objects, all intact")
    return acked


def test_acknowledged_puts_survive_20_sigkills_and_nothing_is_half_written(tmp_path):
    seed = int(time.time())
    acked = kill_loop(tmp_path, rounds=20, seed=seed)
    assert len(acked) > 20


@pytest.mark.soak
def test_acknowledged_puts_survive_100_sigkills(tmp_path):
    kill_loop(tmp_path, rounds=100, seed=int(time.time()))


def test_sigterm_shuts_down_gracefully_and_restart_resumes(tmp_path):
    server = Server(tmp_path / "data")
    server.start()
    s3 = client(server.endpoint)
    s3.create_bucket(Bucket="graceful")
    data = hashlib.shake_256(b"g").digest(5 << 20)
    s3.put_object(Bucket="graceful", Key="k", Body=data)
    assert server.stop() == 0, server.log_tail()
    server.start()
    try:
        assert s3.get_object(Bucket="graceful", Key="k")["Body"].read() == data
        # The configuration written on first start is read back (the grid and credentials are kept).
        assert (server.data_dir / "permafrost.toml").exists()
    finally:
        server.stop()
