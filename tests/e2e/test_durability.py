"""Durability: SIGKILL the server at random moments during uploads (single PUTs and multipart uploads) and
during persistence; after each restart every acknowledged object reads back with the right hash, and no object is
ever visible half-written (checked while uploads run and after every restart)."""

import hashlib
import random
import threading
import time

import pytest

from admin import contents_by_state, status, wait_persisted
from conftest import TEST_CONFIG, Server, client

BUCKET = "durable"
MULTIPART_PART_BYTES = 5 << 20  # S3's smallest part but the last


def body_of(key: str) -> bytes:
    """The bytes uploaded under `key` (deterministic, so any visible object can be checked)."""
    seed = hashlib.sha256(key.encode()).digest()
    if key.endswith("-mp"):  # multipart: two full parts and a short last one
        return hashlib.shake_256(seed).digest(2 * MULTIPART_PART_BYTES + int.from_bytes(seed[:2], "little"))
    size = int.from_bytes(seed[:4], "little") % (3 << 20) if seed[4] % 4 == 0 else int.from_bytes(seed[:4], "little") % 200_000
    return hashlib.shake_256(seed).digest(size + 1)


class Uploader(threading.Thread):
    """Uploads new keys until stopped or the server dies; records the keys the server acknowledged. A multipart
    uploader sends every key as three parts (its keys end in `-mp`)."""

    def __init__(self, endpoint, prefix, acked, lock, multipart=False):
        super().__init__(daemon=True)
        self.s3 = client(endpoint, retries=1)
        self.prefix, self.acked, self.lock, self.multipart = prefix, acked, lock, multipart
        self.stop = threading.Event()
        self.attempted = []

    def upload(self, key):
        body = body_of(key)
        if not self.multipart:
            self.s3.put_object(Bucket=BUCKET, Key=key, Body=body)
            return
        upload_id = self.s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
        parts = []
        for number, start in enumerate(range(0, len(body), MULTIPART_PART_BYTES), start=1):
            part = self.s3.upload_part(Bucket=BUCKET, Key=key, UploadId=upload_id, PartNumber=number,
                                       Body=body[start:start + MULTIPART_PART_BYTES])
            parts.append({"PartNumber": number, "ETag": part["ETag"]})
        self.s3.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload_id,
                                          MultipartUpload={"Parts": parts})

    def run(self):
        n = 0
        while not self.stop.is_set():
            key = f"{self.prefix}/{n:05d}" + ("-mp" if self.multipart else "")
            n += 1
            self.attempted.append(key)
            try:
                self.upload(key)
            except Exception:
                return  # the server is gone: this upload is not acknowledged
            with self.lock:
                self.acked.add(key)


class Watcher(threading.Thread):
    """While uploads run: every listed object has its full size and a HEAD agrees (never half-written)."""

    def __init__(self, endpoint):
        super().__init__(daemon=True)
        self.s3 = client(endpoint, retries=1)
        self.stop = threading.Event()
        self.checked = 0
        self.wrong = []

    def run(self):
        while not self.stop.is_set():
            try:
                for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
                    for o in page.get("Contents", []):
                        if o["Size"] != len(body_of(o["Key"])):
                            self.wrong.append((o["Key"], o["Size"]))
                        self.checked += 1
            except Exception:
                return  # the server is gone


def kill_during_persistence(server, rng) -> bool:
    """Wait (up to 5 s) until the status shows contents placed or persisting, then kill within 50 ms. True when
    persistence was seen under way."""
    deadline = time.time() + 5
    while time.time() < deadline:
        states = contents_by_state(status(server.endpoint))
        if states.get("persisting", (0, 0))[0] + states.get("placed", (0, 0))[0] > 0:
            time.sleep(rng.uniform(0.0, 0.05))
            server.kill()
            return True
        time.sleep(0.005)
    server.kill()
    return False


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
    kills_during_upload = kills_during_persistence = kills_after = watched = 0
    try:
        for r in range(rounds):
            uploaders = [Uploader(server.endpoint, f"r{r:03d}/u{i}", acked, lock, multipart=(i == 2))
                         for i in range(3)]
            watcher = Watcher(server.endpoint)
            for u in [*uploaders, watcher]:
                u.start()
            time.sleep(rng.uniform(0.1, 1.2))
            if rng.random() < 0.5:
                kills_during_upload += 1
                server.kill()
            else:
                # Stop uploading, then kill while the persistence manager works on what just arrived
                # (persisted 300 ms after upload in the test configuration).
                for u in uploaders:
                    u.stop.set()
                for u in uploaders:
                    u.join()
                if kill_during_persistence(server, rng):
                    kills_during_persistence += 1
                else:
                    kills_after += 1
            for u in [*uploaders, watcher]:
                u.stop.set()
                u.join()
            for u in uploaders:
                attempted.update(u.attempted)
            assert not watcher.wrong, f"objects visible half-written during uploads: {watcher.wrong[:10]}"
            watched += watcher.checked
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
    assert kills_during_upload > 0 and kills_during_persistence > 0, (kills_during_upload, kills_during_persistence)
    assert any(k.endswith("-mp") for k in acked), "no multipart upload was acknowledged"
    print(f"seed {seed}: {rounds} kills ({kills_during_upload} during uploads, {kills_during_persistence} during "
          f"persistence, {kills_after} after it), {len(acked)} acknowledged objects "
          f"({sum(k.endswith('-mp') for k in acked)} multipart), all intact; {watched} listings checked while "
          f"uploading")
    return acked


def test_acknowledged_puts_survive_20_sigkills_and_nothing_is_half_written(tmp_path):
    seed = int(time.time())
    acked = kill_loop(tmp_path, rounds=20, seed=seed)
    assert len(acked) > 20


@pytest.mark.soak
def test_acknowledged_puts_survive_100_sigkills(tmp_path):
    kill_loop(tmp_path, rounds=100, seed=int(time.time()))


def test_sigterm_shuts_down_gracefully_and_restart_resumes(tmp_path):
    # Cached data waits 3 s before the watchdog persists it: long enough to stop the server first.
    config = TEST_CONFIG.replace("max_age_ms = 300", "max_age_ms = 3000")
    server = Server(tmp_path / "data", config=config)
    server.start()
    s3 = client(server.endpoint)
    s3.create_bucket(Bucket="graceful")
    data = {key: hashlib.shake_256(key.encode()).digest(5 << 20) for key in ["term", "kill"]}
    try:
        for key in ["term", "kill"]:
            s3.put_object(Bucket="graceful", Key=key, Body=data[key])
            head = s3.head_object(Bucket="graceful", Key=key)["ResponseMetadata"]["HTTPHeaders"]
            assert head["x-permafrost-state"] in ("cached", "placed"), head  # not yet persisted
            if key == "term":
                assert server.stop() == 0, server.log_tail()
            else:
                server.kill()
            server.start()
            # Restart re-queues what was cached but not persisted: it reaches the grid without a new upload.
            wait_persisted(server.endpoint, timeout_s=60)
            head = s3.head_object(Bucket="graceful", Key=key)["ResponseMetadata"]["HTTPHeaders"]
            assert head["x-permafrost-state"] == "persisted", head
            assert s3.get_object(Bucket="graceful", Key=key)["Body"].read() == data[key]
    finally:
        server.stop()
