"""Evacuating a disk of a running server (`POST /_permafrost/api/v1/disks/{disk}/evacuate`) while clients read the
objects on it: every read byte-exact during the evacuation, the task ends with the old disk retired, `GET /disks`
and the event stream say so, and after a restart every object still reads back exact (from the new disk). Then
`permafrost grid evacuate` asks the running server to evacuate the same position again and waits for it."""

import json
import os
import random
import subprocess
import threading
import time

import requests

from admin import evict, sha, wait_persisted
from conftest import ACCESS_KEY, SECRET_KEY, Server, binary, client
from ops import api_token, call, object_disk, ok, wait_task

OBJECT_BYTES = 4 << 20
OBJECTS = 16  # 64 MiB, one dataset: one grid bucket
READERS = 4


def disk_events(endpoint: str, timeout_s: float = 10) -> list:
    """Every `disk` event in the server's ring (the SSE stream from the start, read until quiet)."""
    headers = {"Authorization": f"Bearer {api_token()}", "Last-Event-ID": "0"}
    found, kind = [], None
    try:
        with requests.get(endpoint + "/_permafrost/api/v1/events", headers=headers, stream=True,
                          timeout=(5, 2)) as r:
            assert r.status_code == 200, r.text
            deadline = time.time() + timeout_s
            for line in r.iter_lines(decode_unicode=True):
                if line.startswith("event: "):
                    kind = line[len("event: "):]
                elif line.startswith("data: ") and kind == "disk":
                    found.append(json.loads(line[len("data: "):])["data"])
                if time.time() > deadline:
                    break
    except requests.exceptions.RequestException:
        pass  # the read timed out: the ring was replayed and the stream went quiet
    return found


def evacuation_of(endpoint: str, disk: int):
    return next(d for d in ok(endpoint, "GET", "/disks")["disks"] if d["disk"] == disk)["evacuation"]


def test_evacuating_a_disk_while_clients_read_keeps_every_read_exact_and_retires_it(tmp_path):
    rng = random.Random(3333)
    server = Server(tmp_path / "data")
    server.start()
    try:
        s3 = client(server.endpoint)
        s3.create_bucket(Bucket="evac")
        bodies = {}
        for i in range(OBJECTS):
            body = rng.randbytes(OBJECT_BYTES)
            s3.put_object(Bucket="evac", Key=f"set/o{i:02d}", Body=body)
            bodies[f"set/o{i:02d}"] = sha(body)
        wait_persisted(server.endpoint, expect_contents=OBJECTS)
        on_disk = {}
        for key in bodies:
            on_disk.setdefault(object_disk(server.endpoint, s3, "evac", key), []).append(key)
        disk, keys = max(on_disk.items(), key=lambda kv: len(kv[1]))
        assert len(keys) * OBJECT_BYTES >= 32 << 20, f"objects spread too thin: {on_disk}"
        assert evacuation_of(server.endpoint, disk) is None
        evict(server.endpoint)

        stop = threading.Event()
        reads, errors = [0] * READERS, []

        def reader(n: int):
            own = client(server.endpoint)
            r = random.Random(n)
            while not stop.is_set():
                key = r.choice(keys)
                try:
                    got = own.get_object(Bucket="evac", Key=key)["Body"].read()
                    if sha(got) != bodies[key]:
                        errors.append(f"{key}: {len(got)} bytes, different content")
                    reads[n] += 1
                except Exception as e:  # noqa: BLE001 - every failure is counted and reported
                    errors.append(f"{key}: {e}")

        def evictor():
            # Drop what the reads cached, so the readers keep reading the disks.
            while not stop.is_set():
                evict(server.endpoint)
                time.sleep(0.05)

        threads = [threading.Thread(target=reader, args=(n,)) for n in range(READERS)]
        threads.append(threading.Thread(target=evictor))
        for t in threads:
            t.start()
        try:
            while sum(reads) < READERS:
                assert not errors, errors[:5]
                time.sleep(0.05)
            reads_before = sum(reads)
            answer = ok(server.endpoint, "POST", f"/disks/{disk}/evacuate")
            task = answer["task"]
            assert task["kind"] == "evacuate" and task["disk"] == disk, answer
            again = call(server.endpoint, "POST", f"/disks/{disk}/evacuate")
            assert again.status_code == 409 and "already being evacuated" in again.text, again.text
            task = wait_task(server.endpoint, task["id"], timeout_s=300)
            reads_during = sum(reads) - reads_before
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert not errors, errors[:5]
        assert task["state"] == "done", task
        report = task["result"]
        assert report["retired"], report
        assert report["bytes_copied"] >= len(keys) * OBJECT_BYTES, report
        # Everything from the old disk (zeros a writer wrote, such as padding, are vouched for by IDR).
        assert report["bytes_reconstructed"] == 0, report
        assert task["done_bytes"] == task["total_bytes"] > 0, task
        assert reads_during > 0, "no read ran during the evacuation"
        print(f"disk {disk}: {report['bytes_copied']} bytes copied in {report['seconds']:.2f} s; "
              f"{sum(reads)} reads ({reads_during} during the evacuation), "
              f"{report['bytes_served_to_readers']} bytes served from the old disk")

        evacuation = evacuation_of(server.endpoint, disk)
        assert evacuation["state"] == "retired", evacuation
        assert evacuation["source"] == f"disks/disk-{disk:02d}.img", evacuation
        assert evacuation["target"] != evacuation["source"]
        assert evacuation["bytes_copied"] == report["bytes_copied"]
        events = [e for e in disk_events(server.endpoint) if e.get("disk") == disk and "evacuation" in e]
        assert [e["evacuation"] for e in events] == ["started", "finished", "retired"], events

        # Restarted, the new disk is the disk: everything reads back exact from it.
        assert server.stop() == 0, server.log_tail()
        server.start()
        evict(server.endpoint)
        s3 = client(server.endpoint)
        for key, digest in bodies.items():
            assert sha(s3.get_object(Bucket="evac", Key=key)["Body"].read()) == digest, key
        assert evacuation_of(server.endpoint, disk)["state"] == "retired"
        st = next(d for d in ok(server.endpoint, "GET", "/disks")["disks"] if d["disk"] == disk)
        assert st["defect_bytes"] == 0 and not st["failed"], st

        # The CLI asks the running server (found through the data directory) and waits for the task.
        env = dict(os.environ, PERMAFROST_ROOT_USER=ACCESS_KEY, PERMAFROST_ROOT_PASSWORD=SECRET_KEY)
        out = subprocess.run([str(binary()), "grid", "evacuate", "--disk", str(disk), "--data-dir",
                              str(server.data_dir), "--json"], capture_output=True, text=True, env=env,
                             timeout=300)
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout)
        assert result["disk"] == disk and result["report"]["retired"], result
        assert result["report"]["bytes_copied"] >= len(keys) * OBJECT_BYTES, result
        evict(server.endpoint)
        for key in keys:
            assert sha(s3.get_object(Bucket="evac", Key=key)["Body"].read()) == bodies[key], key
        bad = subprocess.run([str(binary()), "grid", "evacuate", "--disk", "999", "--data-dir",
                              str(server.data_dir)], capture_output=True, text=True, env=env, timeout=60)
        assert bad.returncode != 0 and "unknown disk" in bad.stderr, bad.stderr
        assert server.stop() == 0, server.log_tail()
    except Exception:
        print(server.log_tail())
        raise
    finally:
        server.kill()
