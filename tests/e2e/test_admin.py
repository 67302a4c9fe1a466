"""The admin HTTP API of `permafrost serve` (`/_permafrost/...`, signed with SigV4 like S3 requests), the object
headers it pairs with, and `permafrost status --endpoint` reading it."""

import json
import os
import subprocess
import xml.etree.ElementTree as ET

import pytest
import requests
from botocore.exceptions import ClientError

from admin import (EVICT_PATH, GC_PATH, GRID_BUCKET_HEADER, PERSIST_PATH, STATE_HEADER, STATUS_PATH, admin,
                   admin_json)
from conftest import ACCESS_KEY, HEALTH_PATH, SECRET_KEY, binary


def s3_error_code(response):
    return ET.fromstring(response.content).findtext("Code")


def test_health_needs_no_signature(server):
    r = requests.get(server.endpoint + HEALTH_PATH, timeout=10)
    assert r.status_code == 200 and r.json() == {"status": "ok"}


def test_status_reports_the_summary_and_the_full_detail(server, s3, bucket):
    s3.put_object(Bucket=bucket, Key="st/one", Body=b"x" * 5000)
    st = admin_json(server.endpoint, "GET", STATUS_PATH)
    assert st["objects"] >= 1 and st["buckets"] >= 1
    assert st["disks"]["total"] == 48 == len(st["detail"]["engine"]["disks"])
    assert st["layout"] == st["detail"]["engine"]["layout"] == "8x6:4+1"
    assert st["cache_capacity_bytes"] == 2147483648
    assert st["last_background_error"] is None
    disk = st["detail"]["engine"]["disks"][0]
    for field in ["index", "name", "role", "power_state", "power", "io"]:
        assert field in disk, field
    assert isinstance(disk["power"]["spin_ups"], int)
    states = {state.lower() for state, _count, _bytes in st["detail"]["catalog"]["contents_by_state"]}
    assert states == {"cached", "placed", "persisting", "persisted"}
    assert {c["state"] for c in st["contents"]} == states


def test_admin_requests_without_a_valid_signature_are_refused(server):
    for method, path in [("GET", STATUS_PATH), ("POST", PERSIST_PATH), ("POST", EVICT_PATH), ("POST", GC_PATH),
                         ("GET", "/_permafrost/unknown")]:
        r = requests.request(method, server.endpoint + path, timeout=10)
        if path.endswith("unknown"):
            assert r.status_code == 404, r.text  # not an endpoint: nothing to protect
        else:
            assert r.status_code == 403 and s3_error_code(r) == "AccessDenied", (path, r.text)
        r = admin(server.endpoint, method, path, secret_key="not-the-secret-key-000000")
        assert r.status_code == 403 and s3_error_code(r) == "SignatureDoesNotMatch", (path, r.text)
        r = admin(server.endpoint, method, path, access_key="NOSUCHKEY")
        assert r.status_code == 403 and s3_error_code(r) == "InvalidAccessKeyId", (path, r.text)


def test_unknown_admin_paths_are_404_and_wrong_methods_405(server):
    r = admin(server.endpoint, "GET", "/_permafrost/no/such/thing")
    assert r.status_code == 404 and "error" in r.json()
    r = admin(server.endpoint, "GET", PERSIST_PATH)
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    r = admin(server.endpoint, "POST", GC_PATH + "?ignore_grace=perhaps")
    assert r.status_code == 400


def test_no_bucket_can_take_the_reserved_name(server, s3):
    with pytest.raises(ClientError) as e:
        s3.create_bucket(Bucket="_permafrost")
    assert e.value.response["Error"]["Code"] == "InvalidBucketName"
    assert "_permafrost" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def test_persist_then_evict_then_read_back_from_the_grid(server, s3, bucket):
    body = os.urandom(700_000)
    s3.put_object(Bucket=bucket, Key="pe/obj", Body=body)
    head = s3.head_object(Bucket=bucket, Key="pe/obj")["ResponseMetadata"]["HTTPHeaders"]
    assert head[STATE_HEADER] in ("cached", "placed", "persisting", "persisted")
    assert admin_json(server.endpoint, "POST", PERSIST_PATH) == {"persisted": True}
    head = s3.head_object(Bucket=bucket, Key="pe/obj")["ResponseMetadata"]["HTTPHeaders"]
    assert head[STATE_HEADER] == "persisted"
    grid_bucket = int(head[GRID_BUCKET_HEADER])
    assert 0 <= grid_bucket < 32
    got = s3.get_object(Bucket=bucket, Key="pe/obj")
    assert int(got["ResponseMetadata"]["HTTPHeaders"][GRID_BUCKET_HEADER]) == grid_bucket
    assert got["Body"].read() == body

    evicted = admin_json(server.endpoint, "POST", EVICT_PATH)["evicted_bytes"]
    assert evicted >= len(body)
    assert s3.get_object(Bucket=bucket, Key="pe/obj")["Body"].read() == body


def test_gc_frees_an_overwritten_content(server, s3, bucket):
    old = os.urandom(300_000)
    s3.put_object(Bucket=bucket, Key="gc/obj", Body=old)
    s3.put_object(Bucket=bucket, Key="gc/obj", Body=b"new")
    result = admin_json(server.endpoint, "POST", GC_PATH + "?ignore_grace=true")
    assert result["contents_removed"] >= 1 and result["freed_bytes"] >= 0.9 * len(old), result
    assert s3.get_object(Bucket=bucket, Key="gc/obj")["Body"].read() == b"new"
    assert admin_json(server.endpoint, "POST", GC_PATH + "?ignore_grace=true")["freed_bytes"] == 0


def test_cli_status_through_the_endpoint_prints_the_server_summary(server, s3, bucket):
    s3.put_object(Bucket=bucket, Key="cli/obj", Body=b"y" * 1000)
    env = dict(os.environ, PERMAFROST_ROOT_USER=ACCESS_KEY, PERMAFROST_ROOT_PASSWORD=SECRET_KEY)
    cmd = [str(binary()), "status", "--endpoint", server.endpoint]
    human = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert human.returncode == 0, human.stderr
    lines = human.stdout.splitlines()
    assert lines[0] == f"archive   {server.data_dir} (grid 8x6:4+1)", human.stdout
    assert lines[1].startswith("disks     48: "), human.stdout
    assert any(line.startswith("catalog   ") for line in lines), human.stdout

    machine = subprocess.run(cmd + ["--json"], env=env, capture_output=True, text=True, timeout=60)
    assert machine.returncode == 0, machine.stderr
    st = json.loads(machine.stdout)
    assert st["data_dir"] == str(server.data_dir)
    assert len(st["detail"]["engine"]["disks"]) == 48
    assert st["objects"] >= 1


def test_cli_status_with_wrong_credentials_fails_clearly(server):
    env = dict(os.environ, PERMAFROST_ROOT_USER=ACCESS_KEY, PERMAFROST_ROOT_PASSWORD="wrong-secret-123456")
    result = subprocess.run([str(binary()), "status", "--endpoint", server.endpoint], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "SignatureDoesNotMatch" in result.stderr, result.stderr


def test_cli_put_waits_until_the_server_persisted_the_object(server, s3, bucket, tmp_path):
    source = tmp_path / "scan.bin"
    source.write_bytes(os.urandom(3_000_000))
    env = dict(os.environ, PERMAFROST_ROOT_USER=ACCESS_KEY, PERMAFROST_ROOT_PASSWORD=SECRET_KEY)
    result = subprocess.run([str(binary()), "put", str(source), f"{bucket}/runs/scan.bin", "--wait-persisted",
                             "--wait-timeout-s", "60", "--json", "--endpoint", server.endpoint],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["state"] == "persisted", result.stdout
    head = s3.head_object(Bucket=bucket, Key="runs/scan.bin")["ResponseMetadata"]["HTTPHeaders"]
    assert head[STATE_HEADER] == "persisted" and GRID_BUCKET_HEADER in head
