""""Persisted" is always true, through boto3 and the CLI against the real server: in a versioned and an Object
Lock bucket, versions superseded or hidden under delete markers before persistence runs, multipart and copied
versions are all on the grid after `POST /_permafrost/persist`; each HEADs (by version id) as persisted, reads
back byte-exact from the grid after an eviction and a wiped cache, `/_permafrost/api/v1/wait` covers them, and
`permafrost verify --persisted` finds no false claim — until claims are made false on purpose in the catalog
(the server stopped), which it lists by version and fails on, from the data directory and through the server."""
import json
import os
import shutil
import sqlite3
import subprocess

from admin import STATE_HEADER, admin, admin_json, evict
from conftest import ACCESS_KEY, SECRET_KEY, TEST_CONFIG, Server, binary, client

# Only `/persist` persists: the watchdog would wait an hour.
CONFIG = TEST_CONFIG.replace("max_age_ms = 300", "max_age_ms = 3600000")
PART_BYTES = 5 << 20


def body(n: int) -> bytes:
    """Incompressible bytes: a content of 1 MiB or more gets extents of its own, a smaller one is packed."""
    return os.urandom(n)


def state_of(s3, bucket, key, version) -> str:
    head = s3.head_object(Bucket=bucket, Key=key, VersionId=version)
    return head["ResponseMetadata"]["HTTPHeaders"][STATE_HEADER]


def fill(s3) -> dict:
    """`{(bucket, key, version id): bytes}` of every version written, markers left out."""
    expected = {}

    def put(bucket, key, data):
        v = s3.put_object(Bucket=bucket, Key=key, Body=data)["VersionId"]
        expected[(bucket, key, v)] = data
        return v

    for bucket, lock in (("pv-versions", False), ("pv-locked", True)):
        if lock:
            s3.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
            s3.put_object_lock_configuration(Bucket=bucket, ObjectLockConfiguration={
                "ObjectLockEnabled": "Enabled",
                "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}})
        else:
            s3.create_bucket(Bucket=bucket)
            s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        put(bucket, "k", body(2_000_000))
        put(bucket, "k", body(3000))
        put(bucket, "k", body(1_000_000))
        put(bucket, "k2", body(2000))
        assert s3.delete_object(Bucket=bucket, Key="k2")["DeleteMarker"] is True
        put(bucket, "empty", b"")
        put(bucket, "empty", b"x")
        parts = [body(PART_BYTES), body(70_000)]
        upload = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
        etags = [s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload, PartNumber=n, Body=p)["ETag"]
                 for n, p in enumerate(parts, 1)]
        mp = s3.complete_multipart_upload(
            Bucket=bucket, Key="mp", UploadId=upload,
            MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, 1)]})["VersionId"]
        expected[(bucket, "mp", mp)] = b"".join(parts)
        put(bucket, "mp", body(100))
        # A copy of the now noncurrent multipart version, superseded and then hidden under a marker.
        copy = s3.copy_object(Bucket=bucket, Key="copy",
                              CopySource={"Bucket": bucket, "Key": "mp", "VersionId": mp})["VersionId"]
        expected[(bucket, "copy", copy)] = b"".join(parts)
        put(bucket, "copy", body(50))
        s3.delete_object(Bucket=bucket, Key="copy")
    return expected


def cli(*args, timeout=300):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERMAFROST_")}
    return subprocess.run([str(binary()), *args], capture_output=True, text=True, timeout=timeout, env=env)


def remote(server):
    return ["--endpoint", server.endpoint, "--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY]


def test_every_version_is_persisted_survives_a_wiped_cache_and_verify_catches_false_claims(tmp_path):
    data_dir = tmp_path / "data"
    server = Server(data_dir, config=CONFIG)
    server.start()
    try:
        s3 = client(server.endpoint)
        expected = fill(s3)
        assert len(expected) == 2 * 10, len(expected)
        waiting = {v: state_of(s3, *v) for v in expected}
        assert set(waiting.values()) <= {"cached", "placed"}, waiting

        answer = admin(server.endpoint, "POST", "/_permafrost/persist")
        assert answer.status_code == 200 and answer.json() == {"persisted": True}, answer.text
        states = {v: state_of(s3, *v) for v in expected}
        assert all(s == "persisted" for s in states.values()), {v: s for v, s in states.items() if s != "persisted"}
        for bucket in ("pv-versions", "pv-locked"):
            waited = admin_json(server.endpoint, "GET", f"/_permafrost/api/v1/wait?bucket={bucket}&timeout_ms=1000")
            assert waited["persisted"] is True, waited
            assert waited["objects"] == sum(1 for b, _, _ in expected if b == bucket), waited
        r = cli("verify", "--persisted", "--json", *remote(server))
        assert r.returncode == 0, r.stdout + r.stderr
        report = json.loads(r.stdout)
        assert (report["false_claims_total"], report["not_persisted_total"]) == (0, 0), report
        assert report["versions_checked"] == len(expected), report

        # Out of the cache, the cache wiped while the server is stopped: every version from the grid alone.
        evict(server.endpoint)
        assert server.stop() == 0
        contents = data_dir / "cache" / "contents"
        shutil.rmtree(contents)
        contents.mkdir()
        server.start()
        s3 = client(server.endpoint)
        for (bucket, key, version), data in expected.items():
            got = s3.get_object(Bucket=bucket, Key=key, VersionId=version)
            assert got["ResponseMetadata"]["HTTPHeaders"][STATE_HEADER] == "persisted"
            assert got["Body"].read() == data, (bucket, key, version)

        # A version written now is not persisted yet: verify lists it as such and finds no false claim.
        fresh = s3.put_object(Bucket="pv-versions", Key="fresh", Body=body(5000))["VersionId"]
        r = cli("verify", "--persisted", *remote(server))
        assert r.returncode == 0, r.stdout + r.stderr
        assert "NOT PERSISTED" in r.stdout and f"pv-versions/fresh version {fresh}" in r.stdout, r.stdout
        assert "0 false claims" in r.stdout, r.stdout
        assert server.stop() == 0

        # Two claims made false in the catalog: the fresh version's content said persisted without any extent,
        # and the extent of a superseded, locked version moved to where its bytes are not.
        superseded = next(v for v, d in expected.items() if v[:2] == ("pv-locked", "k") and len(d) == 2_000_000)
        db = sqlite3.connect(data_dir / "catalog.sqlite")
        with db:
            (fresh_content,), = db.execute(
                "SELECT content FROM objects WHERE bucket = 'pv-versions' AND key = CAST('fresh' AS BLOB)")
            db.execute("UPDATE contents SET state = 'persisted' WHERE content = ?", (fresh_content,))
            (locked_content,), = db.execute(
                "SELECT content FROM object_versions WHERE bucket = 'pv-locked' AND version_id = ?",
                (superseded[2],))
            moved = db.execute("UPDATE extents SET offset = offset + 4096 WHERE extent_id IN "
                               "(SELECT extent_id FROM segments WHERE content = ?)", (locked_content,)).rowcount
            assert moved >= 1
        db.close()

        r = cli("verify", "--persisted", "--data-dir", str(data_dir))
        assert r.returncode == 1, r.stdout + r.stderr
        assert "2 false claims" in r.stdout, r.stdout
        assert f"FALSE CLAIM    pv-versions/fresh version {fresh}" in r.stdout, r.stdout
        assert f"FALSE CLAIM    pv-locked/k version {superseded[2]}" in r.stdout, r.stdout
        assert "claimed persisted" in r.stderr, r.stderr

        server.start()
        r = cli("verify", "--persisted", "--json", *remote(server))
        assert r.returncode == 1, r.stdout + r.stderr
        report = json.loads(r.stdout)
        assert report["false_claims_total"] == 2, report
        found = {(f["bucket"], f["key"], f["version_id"]) for f in report["false_claims"]}
        assert found == {("pv-versions", "fresh", fresh), superseded}, report
    finally:
        server.kill()
