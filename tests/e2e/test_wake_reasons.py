"""Every wake has a reason: a workload that spins disks up for each kind of work the server does (persisting,
parity, reads of evicted objects, a restore, a scrub, a verify) leaves no spin-up "unattributed", names what it
was for, and the reads that woke a disk show in the time-to-first-byte quantiles of the state and the metrics."""

import random
import time

from admin import admin_json, evict, sha, spin_ups, status, wait_all_off, wait_persisted
from conftest import Server, client
from ops import metrics, ok, wait_task

SPIN_UP_MS = 300


def wakes(endpoint: str) -> list:
    return admin_json(endpoint, "GET", "/_permafrost/api/v1/wakes")["wakes"]


def test_every_spin_up_names_its_reason_and_cold_reads_are_timed(tmp_path):
    rng = random.Random(7)
    server = Server(tmp_path / "data", spin_up_ms=SPIN_UP_MS)
    server.start()
    try:
        s3 = client(server.endpoint)
        s3.create_bucket(Bucket="reasons")
        bodies = {}
        for dataset in ("alpha", "beta"):
            for i in range(4):
                body = rng.randbytes(rng.randint(100_000, 1_500_000))
                s3.put_object(Bucket="reasons", Key=f"{dataset}/obj-{i}", Body=body)
                bodies[f"{dataset}/obj-{i}"] = sha(body)
        s3.put_object(Bucket="reasons", Key="frozen/scan", Body=b"frozen" * 5000, StorageClass="GLACIER")
        wait_persisted(server.endpoint, expect_contents=len(bodies) + 1)
        evict(server.endpoint)
        wait_all_off(server.endpoint, timeout_s=60)

        # Reads of evicted objects wake their disks.
        for key, digest in bodies.items():
            assert sha(s3.get_object(Bucket="reasons", Key=key)["Body"].read()) == digest, key
        # A restore reads its object into the cache.
        s3.restore_object(Bucket="reasons", Key="frozen/scan",
                          RestoreRequest={"Days": 1, "GlacierJobParameters": {"Tier": "Expedited"}})
        deadline = time.time() + 60
        while 'ongoing-request="false"' not in s3.head_object(Bucket="reasons", Key="frozen/scan").get("Restore", ""):
            assert time.time() < deadline, "the restore did not finish within 60 s"
            time.sleep(0.2)
        wait_all_off(server.endpoint, timeout_s=60)
        # A scrub of one data disk and a verify of everything persisted.
        state = ok(server.endpoint, "GET", "/state")
        data_disk = next(d["disk"] for d in state["disks"] if d["role"] == "data" and d["written_bytes"] > 0)
        task = ok(server.endpoint, "POST", f"/disks/{data_disk}/scrub")
        assert wait_task(server.endpoint, task["task"]["id"])["state"] == "done"
        report = ok(server.endpoint, "GET", "/verify/persisted")
        assert report, report

        log = wakes(server.endpoint)
        total = sum(spin_ups(status(server.endpoint)).values())
        assert log, "the workload spun no disk up"
        unattributed = [w for w in log if w["kind"] == "unattributed"]
        assert not unattributed, f"spin-ups without a reason: {unattributed} in {[(w['seq'], w['disk'], w['reason']) for w in log]}"
        kinds = {w["kind"] for w in log}
        for kind in ("persist", "read", "restore", "scrub"):
            assert kind in kinds, f"no spin-up for {kind} among {sorted(kinds)}"
        for w in log:
            assert w["reason"] and w["reason"] != w["kind"] or w["kind"] in ("parity",), w
        reads = [w for w in log if w["kind"] == "read"]
        assert all(w["subject"].startswith("reasons/") for w in reads), reads
        restores = [w for w in log if w["kind"] == "restore"]
        assert all(w["subject"] == "reasons/frozen/scan" for w in restores), restores
        by_reason = {}
        for d in ok(server.endpoint, "GET", "/state")["disks"]:
            for k, n in d["spin_ups_by_reason"].items():
                by_reason[k] = by_reason.get(k, 0) + n
        assert "unattributed" not in by_reason, by_reason
        assert sum(by_reason.values()) == len(log) <= total, (by_reason, len(log), total)

        # The reads that woke a disk waited at least one spin-up for their first byte.
        first_byte = ok(server.endpoint, "GET", "/state")["first_byte"]
        assert first_byte["reads"]["count"] == len(bodies), first_byte
        woke = first_byte["reads_that_woke_a_disk"]
        assert 1 <= woke["count"] <= len(bodies), first_byte
        assert woke["p99_seconds"] >= SPIN_UP_MS / 1000 * 0.9, first_byte
        assert first_byte["reads"]["p50_seconds"] <= woke["p99_seconds"], first_byte
        text = metrics(server.endpoint)
        line = next(l for l in text.splitlines() if l.startswith(
            'permafrost_s3_time_to_first_byte_seconds_count{operation="GetObject",spin_up="true"}'))
        assert int(float(line.split()[-1])) == woke["count"], line
        assert server.stop() == 0, server.log_tail()
    except Exception:
        print(server.log_tail())
        raise
    finally:
        server.kill()
