"""Restore tiers as Glacier users know them, through boto3 and the admin API against the real server: a Standard
batch of 1,000 objects over 8 disks spins each disk once and, killed with SIGKILL halfway, finishes after the
restart with no new request (each disk spun at most twice); Expedited is not delayed by the batch window, Bulk
waits, a faster tier upgrades a pending restore (202); ListObjectsV2's RestoreStatus; the expiry at midnight UTC;
the s3:ObjectRestore:Post and :Completed events; restore spin-ups attributed as "restore of BUCKET/KEY"."""
import concurrent.futures
import datetime
import json
import time
import uuid

import pytest
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from admin import GRID_BUCKET_HEADER, admin, admin_json, data_disk_of, evict, status, wait_all_off, wait_persisted
from conftest import ACCESS_KEY, SECRET_KEY, TEST_CONFIG, Server, client

RESTORES = "/_permafrost/api/v1/restores"
WAKES = "/_permafrost/api/v1/wakes"
EVENTS = "/_permafrost/api/v1/events"


def config(window_ms: int, bulk_wait_ms: int = 86_400_000) -> str:
    # A nightly hour twelve hours away: Bulk restores never reach it during a test.
    hour = (datetime.datetime.now(datetime.timezone.utc).hour + 12) % 24
    return (TEST_CONFIG.replace("[store]\n", "[store]\ndataset_prefix_depth = 1\n")
            + f"\n[store.restore]\nstandard_window_ms = {window_ms}\nbulk_wait_ms_max = {bulk_wait_ms}\n"
            + f"bulk_start_hour_utc = {hour}\n")


def error_of(call, *args, **kwargs):
    with pytest.raises(ClientError) as e:
        call(*args, **kwargs)
    r = e.value.response
    return r["ResponseMetadata"]["HTTPStatusCode"], r["Error"]["Code"], r["Error"].get("Message", "")


def wakes(endpoint: str, after: int = 0) -> list:
    return admin_json(endpoint, "GET", f"{WAKES}?after={after}")["wakes"]


def last_wake_seq(endpoint: str) -> int:
    return max((w["seq"] for w in wakes(endpoint)), default=0)


def restore_state(s3, bucket: str, key: str) -> str:
    return s3.head_object(Bucket=bucket, Key=key).get("Restore", "")


def restored(s3, bucket: str, key: str) -> bool:
    return 'ongoing-request="false"' in restore_state(s3, bucket, key)


def wait_for(what: str, timeout_s: float, done):
    deadline = time.time() + timeout_s
    while not done():
        assert time.time() < deadline, f"timed out waiting: {what}"
        time.sleep(0.1)


def archive(server: Server, bucket: str, keys: list) -> dict:
    """Put `keys` (GLACIER), persist, evict, wait until every disk is off; `{dataset: grid bucket}`."""
    s3 = client(server.endpoint)
    s3.create_bucket(Bucket=bucket)
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda key: s3.put_object(Bucket=bucket, Key=key, Body=key.encode() * 40,
                                                StorageClass="GLACIER"), keys))
    t1 = time.time()
    wait_persisted(server.endpoint, expect_contents=len(keys))
    t2 = time.time()
    datasets = {}
    for key in keys:
        dataset = key.split("/")[0]
        if dataset not in datasets:
            datasets[dataset] = int(s3.head_object(Bucket=bucket, Key=key)["ResponseMetadata"]["HTTPHeaders"]
                                    [GRID_BUCKET_HEADER])
    evict(server.endpoint)
    wait_all_off(server.endpoint, timeout_s=60)
    print(f"\n{len(keys)} objects put in {t1 - t0:.1f} s, persisted in {t2 - t1:.1f} s, disks off after "
          f"{time.time() - t2:.1f} s")
    return datasets


def restore_events(endpoint: str, want: int, timeout_s: float = 20) -> list:
    """`restore` events from the admin event stream (server-sent events) until `want` of them arrived."""
    url = endpoint + EVENTS + "?after=0"
    req = AWSRequest(method="GET", url=url)
    SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(req)
    found = []
    deadline = time.time() + timeout_s
    with requests.get(url, headers=dict(req.headers.items()), stream=True, timeout=5) as r:
        assert r.status_code == 200, r.text
        kind = None
        for line in r.iter_lines(decode_unicode=True):
            if line.startswith("event:"):
                kind = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and kind == "restore":
                found.append(json.loads(line.split(":", 1)[1])["data"])
                if len(found) >= want:
                    return found
            assert time.time() < deadline, f"only {len(found)} restore events: {found}"
    return found


def test_a_standard_batch_killed_halfway_finishes_after_a_restart_spinning_each_disk_at_most_twice(tmp_path):
    server = Server(tmp_path / "data", config=config(window_ms=5000))
    server.start()
    try:
        s3 = client(server.endpoint)
        b = "observatory"
        keys = [f"scan-{i % 8}/chunk-{i:04d}" for i in range(1000)]
        datasets = archive(server, b, keys)
        assert len(set(datasets.values())) == 8, f"8 datasets landed on {datasets}"
        # From here on spin-ups take 1 s, so the reading (8 disks one after the other) takes long enough for a
        # kill to land halfway.
        server.kill()
        server.spin_up_ms = 1000
        server.start()
        st = wait_all_off(server.endpoint)
        data_disks = {data_disk_of(st, g)["index"] for g in datasets.values()}
        seq = last_wake_seq(server.endpoint)

        started = time.time()
        r = admin(server.endpoint, "POST", RESTORES,
                  body=json.dumps({"bucket": b, "prefix": "", "days": 1, "tier": "Standard"}).encode())
        assert r.status_code == 202, r.text
        assert r.json()["requested"] == 1000
        # Within the window nothing is read: every disk's group waits (planned within a second).
        wait_for("the plan", 2, lambda: len(admin_json(server.endpoint, "GET", RESTORES)["waiting_grid_buckets"]) == 8)
        progress = admin_json(server.endpoint, "GET", RESTORES)
        assert progress["pending"] == 1000 and progress["done"] == 0, progress
        assert sorted(progress["waiting_grid_buckets"]) == sorted(datasets.values()), progress
        assert wakes(server.endpoint, seq) == []
        # Halfway through the reading: SIGKILL.
        deadline = time.time() + 60
        while True:
            progress = admin_json(server.endpoint, "GET", RESTORES)
            if progress["done"] >= 400:
                first = wakes(server.endpoint, seq)
                server.kill()
                break
            assert time.time() < deadline, progress
            time.sleep(0.05)
        assert time.time() - started >= 5.0, "the batch did not wait for its window"
        done_before_kill = progress["done"]
        assert done_before_kill < 1000, progress

        # The restart resumes the batch from the catalog, with no new request.
        server.start()
        restarted = time.time()
        deadline = time.time() + 60
        while True:
            progress = admin_json(server.endpoint, "GET", RESTORES)
            if progress["pending"] == 0:
                break
            assert time.time() < deadline, progress
            time.sleep(0.1)
        second = wakes(server.endpoint)
        spun = {}
        for w in first + second:
            spun[w["disk"]] = spun.get(w["disk"], 0) + 1
        assert set(spun) == data_disks, f"spin-ups {spun}, data disks {data_disks}"
        assert all(n <= 2 for n in spun.values()), f"spin-ups per disk {spun}"
        assert len(second) <= 8 - done_before_kill // 125 + 1, (done_before_kill, second)
        for w in first + second:
            assert w["kind"] == "restore" and w["reason"].startswith(f"restore of {b}/scan-"), w
        print(f"\nkilled after {done_before_kill} of 1000 restores; spin-ups per disk over both runs {spun}; "
              f"{1000 - done_before_kill} finished {time.time() - restarted:.1f} s after the restart")

        # Everything is restored: the listing says so, and reads wake nothing.
        page = s3.list_objects_v2(Bucket=b, OptionalObjectAttributes=["RestoreStatus"])
        assert page["KeyCount"] == 1000
        assert all(o["RestoreStatus"]["IsRestoreInProgress"] is False for o in page["Contents"]), page["Contents"][:3]
        seq = last_wake_seq(server.endpoint)
        for key in keys[::97]:
            assert s3.get_object(Bucket=b, Key=key)["Body"].read() == key.encode() * 40
        assert wakes(server.endpoint, seq) == []
    finally:
        server.kill()


def test_tiers_restore_status_expiry_and_events(tmp_path):
    # A window and a Bulk wait far longer than the test: only Expedited restores (and upgrades) are read.
    server = Server(tmp_path / "data", config=config(window_ms=600_000, bulk_wait_ms=600_000))
    server.start()
    try:
        s3 = client(server.endpoint)
        b = "tiers-" + uuid.uuid4().hex[:8]
        keys = [f"run/{name}" for name in ("expedited", "standard", "bulk", "job", "never")]
        archive(server, b, keys)

        # Expedited: at once.
        started = time.time()
        r = s3.restore_object(Bucket=b, Key="run/expedited", RestoreRequest={"Days": 1, "Tier": "Expedited"})
        assert r["ResponseMetadata"]["HTTPStatusCode"] == 202
        wait_for("the Expedited restore", 20, lambda: restored(s3, b, "run/expedited"))
        expedited_s = time.time() - started
        # (A disk still spinning would take the others at once: let it stop.)
        wait_all_off(server.endpoint, timeout_s=60)
        # Standard (the default) and Bulk wait.
        assert s3.restore_object(Bucket=b, Key="run/standard", RestoreRequest={"Days": 1}
                                 )["ResponseMetadata"]["HTTPStatusCode"] == 202
        assert s3.restore_object(Bucket=b, Key="run/bulk", RestoreRequest={"Days": 1, "Tier": "Bulk"}
                                 )["ResponseMetadata"]["HTTPStatusCode"] == 202
        # The tier may come as GlacierJobParameters too; an unknown one is refused, naming it.
        assert s3.restore_object(Bucket=b, Key="run/job", RestoreRequest={
            "Days": 1, "GlacierJobParameters": {"Tier": "Bulk"}})["ResponseMetadata"]["HTTPStatusCode"] == 202
        st, code, message = error_of(s3.restore_object, Bucket=b, Key="run/never",
                                     RestoreRequest={"Days": 1, "Tier": "Glacial"})
        assert (st, code) == (400, "InvalidArgument") and "Glacial" in message, message
        time.sleep(2)
        for key in ("run/standard", "run/bulk", "run/job"):
            assert restore_state(s3, b, key) == 'ongoing-request="true"', key

        # Listings show the restore status of each object (none for objects never restored).
        listed = {o["Key"]: o.get("RestoreStatus") for o in
                  s3.list_objects_v2(Bucket=b, OptionalObjectAttributes=["RestoreStatus"])["Contents"]}
        assert listed["run/never"] is None
        assert listed["run/standard"] == {"IsRestoreInProgress": True}, listed
        done = listed["run/expedited"]
        assert done["IsRestoreInProgress"] is False
        # The expiry: completion + 1 day, rounded up to the next midnight UTC.
        expiry = done["RestoreExpiryDate"].astimezone(datetime.timezone.utc)
        assert (expiry.hour, expiry.minute, expiry.second) == (0, 0, 0), expiry
        now = datetime.datetime.now(datetime.timezone.utc)
        assert now + datetime.timedelta(days=1) < expiry <= now + datetime.timedelta(days=2), expiry
        head = restore_state(s3, b, "run/expedited")
        assert head.endswith('00:00:00 GMT"') and expiry.strftime("%d %b %Y") in head, head
        # Without the header, no status.
        assert all("RestoreStatus" not in o for o in s3.list_objects_v2(Bucket=b)["Contents"])

        # The same or a slower tier changes nothing (409); a faster one upgrades the restore (202), read at once.
        assert error_of(s3.restore_object, Bucket=b, Key="run/bulk",
                        RestoreRequest={"Days": 1, "Tier": "Bulk"})[:2] == (409, "RestoreAlreadyInProgress")
        seq = last_wake_seq(server.endpoint)
        r = s3.restore_object(Bucket=b, Key="run/bulk", RestoreRequest={"Days": 1, "Tier": "Expedited"})
        assert r["ResponseMetadata"]["HTTPStatusCode"] == 202
        wait_for("the upgraded restore", 20, lambda: restored(s3, b, "run/bulk"))
        # Everything pending on that disk came along: the Standard and the other Bulk restore (one dataset,
        # one disk), with one spin-up attributed to the restore.
        for key in ("run/standard", "run/job"):
            assert restored(s3, b, key), key
        spun = wakes(server.endpoint, seq)
        assert len(spun) == 1 and spun[0]["kind"] == "restore", spun
        assert spun[0]["reason"].startswith(f"restore of {b}/run/"), spun
        print(f"\nExpedited restore done in {expedited_s:.2f} s; upgrade woke {spun[0]['reason']!r}")

        # One Post per accepted restore, one Completed per restored copy, shaped like S3's event records.
        events = restore_events(server.endpoint, want=8)
        posts = sorted(e["s3"]["object"]["key"] for e in events if e["eventName"] == "s3:ObjectRestore:Post")
        completed = [e for e in events if e["eventName"] == "s3:ObjectRestore:Completed"]
        assert posts == ["run/bulk", "run/expedited", "run/job", "run/standard"], events
        assert sorted(e["s3"]["object"]["key"] for e in completed) == posts, events
        for e in completed:
            assert e["s3"]["bucket"]["name"] == b
            assert e["glacierEventData"]["restoreEventData"]["lifecycleRestorationExpiryTime"].endswith(
                "T00:00:00.000Z"), e
    finally:
        server.kill()


def test_rclone_restores_with_its_priority_as_the_glacier_job_tier(server, tool_env):
    import subprocess
    from conftest import tool
    s3 = client(server.endpoint)
    b = "rclone-" + uuid.uuid4().hex[:8]
    s3.create_bucket(Bucket=b)
    s3.put_object(Bucket=b, Key="cold/scan", Body=b"frozen" * 1000, StorageClass="GLACIER")
    wait_persisted(server.endpoint)
    evict(server.endpoint)
    # `rclone backend restore` sends GlacierJobParameters.Tier = its priority.
    r = subprocess.run([tool("rclone"), "backend", "restore", f"pf:{b}/cold", "-o", "priority=Expedited",
                        "-o", "lifetime=2"], env=tool_env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    answers = json.loads(r.stdout)
    assert [(a["Remote"], a["Status"]) for a in answers] == [("scan", "OK")], answers
    wait_for("rclone's Expedited restore", 20, lambda: restored(s3, b, "cold/scan"))
    assert s3.get_object(Bucket=b, Key="cold/scan")["Body"].read() == b"frozen" * 1000
