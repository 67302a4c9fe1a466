"""SMART through the running server (docs/smart.md): file-backed disks read the SMART file beside them, only at
spin-ups the server made for other work. A reallocated count raised while the disks sleep shows nowhere and wakes
nothing; the next read of an object spins its disks up, and then it is a `smart` event, a metric and the
dashboard's mark."""

import json
import random
import re
import time
from pathlib import Path

import requests

from admin import evict, sha, spin_ups, status, wait_all_off, wait_persisted
from conftest import TEST_CONFIG, Server, client
from ops import api_token, metrics, ok


def fixture(reallocated: int) -> str:
    """`smartctl --json -A` output of a healthy drive with `reallocated` reallocated sectors."""
    table = [{"id": i, "name": f"attr{i}", "value": 100, "worst": 100, "thresh": 0, "raw": {"value": v, "string": str(v)}}
             for i, v in ((4, 120), (5, reallocated), (9, 1000), (197, 0))]
    return json.dumps({"json_format_version": [1, 0], "smartctl": {"exit_status": 0}, "serial_number": "E2E",
                       "smart_status": {"passed": True}, "ata_smart_attributes": {"revision": 16, "table": table}})


def smart_files(server: Server, disks: list) -> list:
    files = []
    for d in disks:
        path = Path(d["name"])
        if not path.is_absolute():
            path = server.data_dir / path
        assert path.exists(), f"disk file {path} of disk {d['disk']}"
        files.append(Path(str(path) + ".smart.json"))
    return files


def smart_reads(text: str) -> int:
    return sum(int(float(v)) for v in re.findall(r'^permafrost_disk_smart_reads_total\{disk="\d+"\} (\S+)$', text, re.M))


def smart_events(endpoint: str, timeout_s: float = 10) -> list:
    """Every `smart` event in the server's ring (the SSE stream from the start, read until quiet)."""
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
                elif line.startswith("data: ") and kind == "smart":
                    found.append(json.loads(line[len("data: "):]))
                if time.time() > deadline:
                    break
    except requests.exceptions.RequestException:
        pass  # the read timed out: the ring was replayed and the stream went quiet
    return found


def test_a_risen_reallocated_count_is_an_event_a_metric_and_a_mark_at_the_next_spin_up_and_nothing_wakes_for_it(tmp_path):
    rng = random.Random(33)
    server = Server(tmp_path / "data", config=TEST_CONFIG + "\n[smart]\nmax_age_hours = 0\n")
    server.start()
    try:
        disks = ok(server.endpoint, "GET", "/disks")["disks"]
        files = smart_files(server, disks)
        for f in files:
            f.write_text(fixture(0))
        s3 = client(server.endpoint)
        s3.create_bucket(Bucket="smart")
        bodies = {}
        for i in range(6):
            body = rng.randbytes(rng.randint(200_000, 1_000_000))
            s3.put_object(Bucket="smart", Key=f"obj-{i}", Body=body)
            bodies[f"obj-{i}"] = sha(body)
        wait_persisted(server.endpoint, expect_contents=len(bodies))
        evict(server.endpoint)
        wait_all_off(server.endpoint, timeout_s=60)
        read_before = {d["disk"] for d in ok(server.endpoint, "GET", "/disks")["disks"] if d["smart"]["available"]}
        assert read_before, "persisting spun disks up and none had its SMART read"

        # The drives reallocate sectors while they sleep: nothing reads them, nothing wakes.
        for f in files:
            f.write_text(fixture(8))
        ups = sum(spin_ups(status(server.endpoint)).values())
        reads = smart_reads(metrics(server.endpoint))
        time.sleep(3)
        assert sum(spin_ups(status(server.endpoint)).values()) == ups, "a disk spun up while nothing was asked"
        assert smart_reads(metrics(server.endpoint)) == reads, "SMART was read while every disk was off"
        assert not smart_events(server.endpoint), "an alert before any spin-up"

        # Reads of the evicted objects spin their disks up: SMART piggybacks on those spin-ups.
        for key, digest in bodies.items():
            assert sha(s3.get_object(Bucket="smart", Key=key)["Body"].read()) == digest, key
        after = status(server.endpoint)
        woken = {i for i, n in spin_ups(after).items() if n > 0}
        deadline = time.time() + 30
        while True:
            view = {d["disk"]: d["smart"] for d in ok(server.endpoint, "GET", "/disks")["disks"]}
            marked = {i for i, s in view.items() if s.get("warning")}
            if marked:
                break
            assert time.time() < deadline, f"no disk marked after the reads: {view}"
            time.sleep(0.2)
        for i in marked:
            assert view[i]["attributes"]["5"] == 8, view[i]
            assert any("reallocated_sectors (5) rose from 0 to 8" in a for a in view[i]["last_alerts"]), view[i]
        text = metrics(server.endpoint)
        for i in marked:
            assert f'permafrost_disk_smart_attribute_raw{{disk="{i}",id="5",name="reallocated_sectors"}} 8' in text
            assert f'permafrost_disk_smart_warning{{disk="{i}"}} 1' in text
            assert re.search(rf'^permafrost_disk_smart_alerts_total{{disk="{i}"}} [1-9]', text, re.M), text
        events = smart_events(server.endpoint)
        alerted = {e["data"]["disk"] for e in events}
        assert marked <= alerted, (marked, events)
        for e in events:
            assert {"alert": "rose", "id": 5, "from": 0, "to": 8} in e["data"]["alerts"], e
        # Only disks that spun up were read, and every spin-up had a reason of its own (none is SMART's).
        assert alerted <= woken, (alerted, woken)
        wakes = ok(server.endpoint, "GET", "/wakes")["wakes"]
        assert wakes and all(w["kind"] != "unattributed" for w in wakes), wakes
    finally:
        server.stop()


def test_with_evacuate_when_failing_a_risen_count_evacuates_the_disk_and_a_wear_alert_does_not(tmp_path):
    """`[smart] evacuate_when_failing = true`: the disk whose reallocated count rose is evacuated by the server
    on its own (the old disk retired, every object exact); a disk whose start/stop count only nears its rating is
    not."""
    from admin import GRID_BUCKET_HEADER, data_disk_of
    rng = random.Random(34)
    server = Server(tmp_path / "data", config=TEST_CONFIG + "\n[smart]\nmax_age_hours = 0\n"
                    "evacuate_when_failing = true\nstart_stop_rating = 100\n")
    server.start()
    try:
        disks = ok(server.endpoint, "GET", "/disks")["disks"]
        files = smart_files(server, disks)
        for f in files:
            f.write_text(fixture(0))
        s3 = client(server.endpoint)
        s3.create_bucket(Bucket="failing")
        bodies = {}
        for i in range(4):
            body = rng.randbytes(rng.randint(300_000, 900_000))
            s3.put_object(Bucket="failing", Key=f"obj-{i}", Body=body)
            bodies[f"obj-{i}"] = body
        wait_persisted(server.endpoint, expect_contents=len(bodies))
        evict(server.endpoint)
        wait_all_off(server.endpoint, timeout_s=60)
        head = s3.head_object(Bucket="failing", Key="obj-0")
        bucket = int(head["ResponseMetadata"]["HTTPHeaders"][GRID_BUCKET_HEADER.lower()])
        disk = data_disk_of(status(server.endpoint), bucket)["index"]
        # Every disk is past 90 % of its (tiny) start/stop rating: wear alerts everywhere, no evacuation for them.
        # The disk holding the objects also reallocated sectors: that one is failing.
        for i, f in enumerate(files):
            f.write_text(fixture(8 if disks[i]["disk"] == disk else 0))
        for key, body in bodies.items():
            assert s3.get_object(Bucket="failing", Key=key)["Body"].read() == body, key
        deadline = time.time() + 60
        while True:
            view = {d["disk"]: d for d in ok(server.endpoint, "GET", "/disks")["disks"]}
            evacuation = view[disk]["evacuation"]
            if evacuation and evacuation["state"] == "retired":
                break
            assert time.time() < deadline, f"disk {disk} not evacuated: {view[disk]}"
            time.sleep(0.3)
        others = {i: d["evacuation"] for i, d in view.items() if i != disk and d["evacuation"]}
        assert not others, f"disks evacuated for wear alone: {others}"
        assert any("near" in a or "rating" in a for d in view.values() for a in d["smart"].get("last_alerts", [])), \
            "the start/stop rating alerts did not happen, so this test shows nothing about them"
        for key, body in bodies.items():
            assert s3.get_object(Bucket="failing", Key=key)["Body"].read() == body, key
        tasks = ok(server.endpoint, "GET", "/tasks")["tasks"]
        assert [t["state"] for t in tasks if t["kind"] == "evacuate"] == ["done"], tasks
    finally:
        server.stop()
