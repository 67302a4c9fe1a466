"""Growing the grid of a running server: the embedded default grid (8x6:4+1) gets a data disk through the admin API
(`POST /_permafrost/api/v1/disks`) and one through `permafrost grid add-disk`, which finds the running server on
the data directory. Each add takes less than 5 s and spins up no other disk (the API's power counters); a disk
larger than its parity disk is refused with a 400 naming the way out. The API, the metrics and the state show the
grown grid; objects of a new dataset land on a new disk, read back byte-exact, and again after a restart."""

import json
import os
import random
import subprocess
import time

from admin import evict, sha, wait_persisted
from conftest import ACCESS_KEY, SECRET_KEY, Server, binary, client
from ops import call, metrics, ok, wait_all_off

DISK_BYTES = 512 << 20  # the e2e configuration's disk size
OBJECT_BYTES = 1 << 20
OBJECTS = 8


def spin_ups(endpoint: str) -> dict:
    return {d["disk"]: d["spin_ups"] for d in ok(endpoint, "GET", "/disks")["disks"]}


def grid_bucket(s3, bucket: str, key: str) -> int:
    return int(s3.head_object(Bucket=bucket, Key=key)["ResponseMetadata"]["HTTPHeaders"]["x-permafrost-grid-bucket"])


def test_a_running_server_grows_by_a_disk_and_new_objects_land_on_it(tmp_path):
    rng = random.Random(33)
    server = Server(tmp_path / "data")
    server.start()
    try:
        s3 = client(server.endpoint)
        s3.create_bucket(Bucket="grow")
        old = {}
        for i in range(4):
            body = rng.randbytes(OBJECT_BYTES)
            s3.put_object(Bucket="grow", Key=f"old/o{i}", Body=body)
            old[f"old/o{i}"] = sha(body)
        wait_persisted(server.endpoint, expect_contents=len(old))
        before_state = ok(server.endpoint, "GET", "/state")
        assert before_state["geometry"] == "8x6:4+1" and before_state["buckets"] == 32, before_state["geometry"]
        wait_all_off(server.endpoint, timeout_s=60)

        # Through the API.
        before = spin_ups(server.endpoint)
        started = time.monotonic()
        report = ok(server.endpoint, "POST", "/disks", json={"size": "512MiB"})
        api_seconds = time.monotonic() - started
        after = spin_ups(server.endpoint)
        print(f"API add: {api_seconds * 1000:.1f} ms round trip, engine {report['millis']} ms: {report}")
        assert api_seconds < 5, api_seconds
        assert (report["disk"], report["bucket"], report["geometry_version"]) == (48, 32, 1), report
        assert report["capacity_bytes"] == DISK_BYTES, report
        assert report["other_disks_spin_ups"] == 0, report
        assert {d: after[d] for d in before} == before, "another disk spun up during the add"
        assert after[48] == 0

        # Refusals are the operator's to fix: 400 with the reason.
        refused = call(server.endpoint, "POST", "/disks", json={"size": "1GiB", "row": 1})
        assert refused.status_code == 400, refused.text
        assert "larger" in refused.text and "swap-parity" in refused.text, refused.text
        bad = call(server.endpoint, "POST", "/disks", json={"size": "12 parsecs"})
        assert bad.status_code == 400 and "unknown unit" in bad.text, bad.text
        neither = call(server.endpoint, "POST", "/disks", json={"row": 0})
        assert neither.status_code == 400 and "either" in neither.text, neither.text

        # Through the CLI, which finds the server holding the data directory.
        env = {**os.environ, "PERMAFROST_ROOT_USER": ACCESS_KEY, "PERMAFROST_ROOT_PASSWORD": SECRET_KEY}
        before = spin_ups(server.endpoint)
        started = time.monotonic()
        done = subprocess.run(
            [str(binary()), "grid", "add-disk", "--dir", str(server.data_dir / "grid"), "--size", "512MiB",
             "--json"], capture_output=True, text=True, env=env)
        cli_seconds = time.monotonic() - started
        assert done.returncode == 0, done.stderr
        cli_report = json.loads(done.stdout)
        after = spin_ups(server.endpoint)
        print(f"CLI add: {cli_seconds * 1000:.1f} ms with the process, engine {cli_report['millis']} ms")
        assert cli_seconds < 5, cli_seconds
        assert (cli_report["disk"], cli_report["bucket"], cli_report["geometry_version"]) == (49, 33, 2)
        assert cli_report["other_disks_spin_ups"] == 0, cli_report
        assert {d: after[d] for d in before} == before, "another disk spun up during the add"

        # The API, the state and the metrics show the grown grid.
        listed = ok(server.endpoint, "GET", "/disks")
        disks = listed["disks"]
        assert len(disks) == 50
        assert listed["buckets"] == 34 and listed["capacity_bytes"] == 34 * listed["bucket_capacity_bytes"], listed
        assert listed["geometry_version"] == 2, listed["geometry"]
        assert listed["geometry"].startswith("8x6:4+1 +2 disks"), listed["geometry"]
        for d in (48, 49):
            assert disks[d]["role"] == "data" and disks[d]["capacity_bytes"] > 0, disks[d]
        assert disks[48]["column"] == 5 and disks[48]["row"] == 6, disks[48]
        state = ok(server.endpoint, "GET", "/state")
        assert state["geometry_version"] == 2 and state["buckets"] == 34, state["geometry"]
        assert state["capacity_bytes"] == 34 * state["bucket_capacity_bytes"]
        assert state["rows"] >= 7
        text = metrics(server.endpoint)
        assert "permafrost_grid_disks 50" in text
        assert "permafrost_grid_buckets 34" in text
        assert 'permafrost_disk_capacity_bytes{disk="49"}' in text

        # A new dataset lands on a new disk (default placement), and reads back byte-exact.
        fresh = {}
        for i in range(OBJECTS):
            body = rng.randbytes(OBJECT_BYTES)
            s3.put_object(Bucket="grow", Key=f"fresh/o{i}", Body=body)
            fresh[f"fresh/o{i}"] = sha(body)
        wait_persisted(server.endpoint, expect_contents=len(old) + len(fresh))
        placed = {key: grid_bucket(s3, "grow", key) for key in fresh}
        assert set(placed.values()) <= {32, 33} and len(set(placed.values())) == 1, placed
        new_bucket = next(iter(placed.values()))
        new_disk = 48 + new_bucket - 32
        written = ok(server.endpoint, "GET", f"/disks/{new_disk}")["written_bytes"]
        assert written >= OBJECTS * OBJECT_BYTES, written
        evict(server.endpoint)
        for key, digest in {**old, **fresh}.items():
            assert sha(s3.get_object(Bucket="grow", Key=key)["Body"].read()) == digest, key

        # Restarted, the server opens the grown grid and every object reads back.
        assert server.stop() == 0
        server.start()
        s3 = client(server.endpoint)
        assert len(ok(server.endpoint, "GET", "/disks")["disks"]) == 50
        for key, digest in {**old, **fresh}.items():
            assert sha(s3.get_object(Bucket="grow", Key=key)["Body"].read()) == digest, key
        assert grid_bucket(s3, "grow", "fresh/o0") == new_bucket
    finally:
        server.kill()
