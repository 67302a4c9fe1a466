"""Real clients with scoped keys: restic with a key that may read and write but not delete, rclone with a read-only
key, the AWS CLI with a write-only key, `mc anonymous set download` with public access allowed and blocked, and
anonymous `curl` of a public and a private object.

restic (0.14) removes its lock file at the end of every command, so a key without delete leaves a lock behind
after a backup (and retries the refused DELETE for about 90 s first); the backup itself is saved. The setup that
works is delete on `locks/*` only, through a bucket policy: the second restic test."""

import json
import os
import subprocess
import time
import uuid

import pytest
import requests

from conftest import Server
from scoped import PUBLIC_CONFIG, allow, create_key
from test_archive_clients import mc_env, minio_client, run

CURL_TIMEOUT = "30"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def keyed(tool_env: dict, key: dict) -> dict:
    """The suite's client environment (tool_env) signing with `key` instead of the root user."""
    env = dict(tool_env)
    env.update(AWS_ACCESS_KEY_ID=key["access_key"], AWS_SECRET_ACCESS_KEY=key["secret_key"],
               RCLONE_CONFIG_PF_ACCESS_KEY_ID=key["access_key"],
               RCLONE_CONFIG_PF_SECRET_ACCESS_KEY=key["secret_key"])
    return env


def restic_env(server, bucket: str, key: dict, tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "RESTIC_"))}
    env.update(AWS_ACCESS_KEY_ID=key["access_key"], AWS_SECRET_ACCESS_KEY=key["secret_key"],
               RESTIC_PASSWORD="pf-e2e-restic", RESTIC_REPOSITORY=f"s3:{server.endpoint}/{bucket}",
               RESTIC_CACHE_DIR=str(tmp_path / "restic-cache"))
    return env


def some_files(root, n: int = 12):
    for i in range(n):
        (root / f"d{i % 3}").mkdir(parents=True, exist_ok=True)
        (root / f"d{i % 3}" / f"f{i}.bin").write_bytes(os.urandom(20_000 + 1000 * i))
    return root


def locks(s3, bucket: str) -> list:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="locks/").get("Contents", [])]


def snapshots(s3, bucket: str) -> list:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="snapshots/").get("Contents", [])]


def test_restic_with_read_and_write_but_no_delete_saves_its_backup_but_cannot_remove_its_lock_or_forget(
        server, s3, tmp_path):
    restic = __import__("conftest").tool("restic")
    bucket = unique("restic-nodel")
    s3.create_bucket(Bucket=bucket)
    key = create_key(server.endpoint, unique("restic-robot"))
    allow(server.endpoint, key["name"], bucket, "read", "write")
    env = restic_env(server, bucket, key, tmp_path)
    data = some_files(tmp_path / "data")

    run([restic, "init"], env)
    backup = run([restic, "backup", str(data)], env, timeout=300)
    assert "snapshot" in backup.stdout and "saved" in backup.stdout, backup.stdout
    # The snapshot is in the bucket; removing the lock at the end was refused, and restic says so.
    assert len(snapshots(s3, bucket)) == 1
    assert "error in cleanup handler" in backup.stderr, backup.stderr[-2000:]
    refused = f"access key {key['name']} ({key['access_key']}) may not DeleteObject in bucket {bucket}: that needs " \
              f"the permission delete on {bucket}"
    assert refused in backup.stderr, backup.stderr[-2000:]
    assert len(locks(s3, bucket)) == 1, "the lock restic could not remove is still there"
    # A check takes an exclusive lock, which the stale lock prevents; without a lock it reads fine.
    locked = run([restic, "check"], env, ok=False)
    assert locked.returncode == 1 and "already locked" in locked.stderr, locked.stderr[-2000:]
    check = run([restic, "check", "--no-lock"], env)
    assert "no errors were found" in check.stdout, check.stdout
    # Forgetting needs an exclusive lock and deletes: refused, exit 1.
    forget = run([restic, "forget", "--keep-last", "1", "--prune"], env, ok=False, timeout=300)
    assert forget.returncode == 1 and "already locked" in forget.stderr, forget.stderr[-2000:]
    assert len(snapshots(s3, bucket)) == 1
    log = server.log_path.read_text(errors="replace")
    lines = [line for line in log.splitlines() if f"{refused}, and the key has read, write there" in line]
    assert lines and f"DeleteObject bucket={bucket} " in lines[-1] and f"signer={key['name']} " in lines[-1], lines


def test_restic_with_delete_only_on_its_locks_backs_up_and_checks_and_cannot_forget(server, s3, tmp_path):
    restic = __import__("conftest").tool("restic")
    bucket = unique("restic-locks")
    s3.create_bucket(Bucket=bucket)
    key = create_key(server.endpoint, unique("restic-robot"))
    allow(server.endpoint, key["name"], bucket, "read", "write")
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Sid": "restic-locks", "Effect": "Allow", "Principal": {"AWS": [key["name"]]},
         "Action": "s3:DeleteObject", "Resource": f"arn:aws:s3:::{bucket}/locks/*"}]}))
    env = restic_env(server, bucket, key, tmp_path)
    data = some_files(tmp_path / "data")

    run([restic, "init"], env)
    first = run([restic, "backup", str(data)], env, timeout=120)
    assert "error" not in first.stderr.lower(), first.stderr[-2000:]
    (data / "d0" / "new.bin").write_bytes(os.urandom(50_000))
    run([restic, "backup", str(data)], env, timeout=120)
    assert len(snapshots(s3, bucket)) == 2 and locks(s3, bucket) == []
    check = run([restic, "check", "--read-data"], env, timeout=120)
    assert "no errors were found" in check.stdout, check.stdout
    assert locks(s3, bucket) == []

    started = time.time()
    forget = run([restic, "forget", "--keep-last", "1", "--prune"], env, ok=False, timeout=400)
    assert forget.returncode != 0, forget.stdout
    refused = f"access key {key['name']} ({key['access_key']}) may not DeleteObject in bucket {bucket}"
    assert refused in forget.stderr and "delete" in forget.stderr, forget.stderr[-2000:]
    assert len(snapshots(s3, bucket)) == 2, f"a snapshot was deleted ({time.time() - started:.0f} s)"


def test_rclone_with_a_read_only_key_copies_down_and_checks_but_cannot_upload(server, s3, tool_env, tmp_path):
    rclone = __import__("conftest").tool("rclone")
    bucket = unique("rclone-ro")
    s3.create_bucket(Bucket=bucket)
    for i in range(5):
        s3.put_object(Bucket=bucket, Key=f"runs/r{i}.bin", Body=os.urandom(10_000 + i))
    key = create_key(server.endpoint, unique("rclone-reader"))
    allow(server.endpoint, key["name"], bucket, "read")
    env = keyed(tool_env, key)
    down = tmp_path / "down"
    run([rclone, "copy", f"pf:{bucket}", str(down)], env)
    assert sorted(p.name for p in (down / "runs").iterdir()) == [f"r{i}.bin" for i in range(5)]
    for i in range(5):
        assert (down / "runs" / f"r{i}.bin").read_bytes() == s3.get_object(
            Bucket=bucket, Key=f"runs/r{i}.bin")["Body"].read()
    check = run([rclone, "check", f"pf:{bucket}", str(down)], env)
    assert "0 differences found" in check.stderr, check.stderr

    up = tmp_path / "up"
    up.mkdir()
    (up / "new.bin").write_bytes(b"not allowed")
    upload = run([rclone, "copy", str(up), f"pf:{bucket}/incoming", "--retries", "1"], env, ok=False)
    assert upload.returncode != 0, upload.stdout
    assert "AccessDenied" in upload.stderr and key["name"] in upload.stderr and "PutObject" in upload.stderr, \
        upload.stderr[-2000:]
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix="incoming/")


def test_aws_cli_with_a_write_only_key_uploads_and_cannot_list(server, s3, tool_env, tmp_path):
    aws = [__import__("conftest").tool("aws"), "--endpoint-url", server.endpoint]
    bucket = unique("aws-wo")
    s3.create_bucket(Bucket=bucket)
    key = create_key(server.endpoint, unique("aws-writer"))
    allow(server.endpoint, key["name"], bucket, "write")
    env = keyed(tool_env, key)
    small, big = tmp_path / "small.txt", tmp_path / "big.bin"
    small.write_bytes(b"a small upload")
    big.write_bytes(os.urandom(9 << 20))  # over the CLI's 8 MB threshold: a multipart upload
    run(aws + ["s3", "cp", str(small), f"s3://{bucket}/in/small.txt"], env)
    run(aws + ["s3", "cp", str(big), f"s3://{bucket}/in/big.bin"], env)
    assert s3.get_object(Bucket=bucket, Key="in/small.txt")["Body"].read() == b"a small upload"
    assert s3.get_object(Bucket=bucket, Key="in/big.bin")["Body"].read() == big.read_bytes()

    listing = run(aws + ["s3", "ls", f"s3://{bucket}/"], env, ok=False)
    assert listing.returncode != 0 and "small.txt" not in listing.stdout, listing.stdout
    assert "AccessDenied" in listing.stderr and key["name"] in listing.stderr, listing.stderr
    assert "ListObjectsV2" in listing.stderr and bucket in listing.stderr, listing.stderr
    down = run(aws + ["s3", "cp", f"s3://{bucket}/in/small.txt", str(tmp_path / "back.txt")], env, ok=False)
    assert down.returncode != 0 and not (tmp_path / "back.txt").exists(), down.stderr
    assert "403" in down.stderr or "AccessDenied" in down.stderr, down.stderr


def curl(*args) -> subprocess.CompletedProcess:
    return subprocess.run([__import__("conftest").tool("curl"), "-sS", "--max-time", CURL_TIMEOUT,
                           "-w", "\n%{http_code}", *args], capture_output=True, text=True, timeout=60)


def body_and_status(result) -> tuple:
    body, _, status = result.stdout.rpartition("\n")
    return body, int(status)


@pytest.fixture(scope="module")
def public_server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("public") / "data", config=PUBLIC_CONFIG)
    s.start()
    yield s
    code = s.stop()
    assert code == 0, f"graceful shutdown failed with {code}: {s.log_tail()}"


def test_mc_anonymous_set_download_opens_a_bucket_to_curl_when_public_access_is_allowed(public_server, tmp_path):
    from conftest import client
    mc = minio_client()
    env = mc_env(public_server, tmp_path)
    root = client(public_server.endpoint, retries=1)
    public, private = unique("open"), unique("closed")
    for b in (public, private):
        root.create_bucket(Bucket=b)
        root.put_object(Bucket=b, Key="scan.txt", Body=f"scan of {b}".encode())

    # Before: nobody gets in without a key.
    body, status = body_and_status(curl(f"{public_server.endpoint}/{public}/scan.txt"))
    assert status == 403 and "<Code>AccessDenied</Code>" in body, body

    run([mc, "anonymous", "set", "download", f"pf/{public}"], env)
    got = run([mc, "anonymous", "get", f"pf/{public}"], env).stdout
    assert "download" in got, got
    assert root.get_bucket_policy_status(Bucket=public)["PolicyStatus"]["IsPublic"] is True

    body, status = body_and_status(curl(f"{public_server.endpoint}/{public}/scan.txt"))
    assert (status, body) == (200, f"scan of {public}")
    body, status = body_and_status(curl(f"{public_server.endpoint}/{public}/?list-type=2"))
    assert status == 200 and "<Key>scan.txt</Key>" in body, body
    # download is read-only, and the other bucket stays private.
    body, status = body_and_status(curl("-X", "PUT", "--data-binary", "planted",
                                        f"{public_server.endpoint}/{public}/planted.txt"))
    assert status == 403 and "<Code>AccessDenied</Code>" in body and "anonymous" in body, body
    body, status = body_and_status(curl(f"{public_server.endpoint}/{private}/scan.txt"))
    assert status == 403 and "<Code>AccessDenied</Code>" in body and "anonymous" in body, body
    assert private in body and "GetObject" in body, body

    run([mc, "anonymous", "set", "none", f"pf/{public}"], env)
    body, status = body_and_status(curl(f"{public_server.endpoint}/{public}/scan.txt"))
    assert status == 403 and "<Code>AccessDenied</Code>" in body, body


def test_mc_anonymous_set_download_is_refused_naming_the_setting_when_public_access_is_blocked(
        server, s3, tmp_path):
    mc = minio_client()
    env = mc_env(server, tmp_path)
    bucket = unique("blocked")
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="scan.txt", Body=b"private")
    refused = run([mc, "anonymous", "set", "download", f"pf/{bucket}"], env, ok=False)
    assert refused.returncode != 0, refused.stdout
    assert "block_public_access" in refused.stderr + refused.stdout, refused.stderr
    body, status = body_and_status(curl(f"{server.endpoint}/{bucket}/scan.txt"))
    assert status == 403 and "<Code>AccessDenied</Code>" in body, body
    r = requests.get(f"{server.endpoint}/{bucket}/scan.txt", timeout=30)
    assert r.status_code == 403
