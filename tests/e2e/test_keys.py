"""Access keys end to end: `permafrost key …` against a running server and on a stopped server's data directory,
the same through the admin API (`/_permafrost/api/v1/keys`), what a disabled or deleted key can still do
(nothing), presigned URLs carrying their signer's rights, the admin API closed to keys except `/wait`, the audit
trail filtered by key, and secrets kept out of the server's log."""

import json
import os
import re
import subprocess
import uuid

import pytest
import requests

from admin import admin
from conftest import ACCESS_KEY, SECRET_KEY, Server, binary, client
from ops import api_token, call, ok
from scoped import (allow, anonymous_client, assert_denied, audit, create_key, deny, key_client, last_event_id,
                    refusal)

# Every secret this module's server handed out; none may appear in its log.
SECRETS = [SECRET_KEY]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("keys") / "data")
    s.start()
    yield s
    if s.process is not None:
        code = s.stop()
        assert code == 0, f"graceful shutdown failed with {code}: {s.log_tail()}"


@pytest.fixture(scope="module")
def root(srv):
    return client(srv.endpoint, retries=1)


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def new_key(srv, prefix: str, create_buckets: bool = False) -> dict:
    key = create_key(srv.endpoint, name(prefix), create_buckets)
    SECRETS.append(key["secret_key"])
    return key


def new_bucket(root, prefix: str = "kb") -> str:
    b = name(prefix)
    root.create_bucket(Bucket=b)
    return b


def cli(srv, *args, ok_=True, env_credentials=True):
    """`permafrost key ARGS --data-dir DATA`: the server running there, signed as root (from the environment)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERMAFROST_")}
    if env_credentials:
        env.update(PERMAFROST_ROOT_USER=ACCESS_KEY, PERMAFROST_ROOT_PASSWORD=SECRET_KEY)
    result = subprocess.run([str(binary()), "key", *args, "--data-dir", str(srv.data_dir)], env=env,
                            capture_output=True, text=True, timeout=60)
    if ok_:
        assert result.returncode == 0, f"permafrost key {args}: {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def test_cli_creates_lists_grants_disables_and_deletes_keys_on_a_running_server(srv, root):
    bucket = new_bucket(root)
    root.put_object(Bucket=bucket, Key="k", Body=b"payload")
    n = name("robot")

    human = cli(srv, "create", n)
    lines = human.stdout.splitlines()
    assert lines[0] == f"access key {n} created", human.stdout
    key_id = lines[1].split()[-1]
    secret = lines[2].split()[-1]
    assert lines[1].startswith("  access key id") and lines[2].startswith("  secret key"), human.stdout
    assert "shown only now" in human.stdout
    SECRETS.append(secret)
    robot = {"name": n, "access_key": key_id, "secret_key": secret}
    s3 = key_client(srv.endpoint, robot)

    # A new key may do nothing yet.
    assert s3.list_buckets()["Buckets"] == []
    assert_denied(refusal(s3.get_object, Bucket=bucket, Key="k"), n, "GetObject", bucket)

    shown = json.loads(cli(srv, "allow", n, bucket, "read", "write", "--json").stdout)
    assert shown["buckets"] == {bucket: ["read", "write"]} and "secret_key" not in shown, shown
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"payload"
    s3.put_object(Bucket=bucket, Key="by-robot", Body=b"x")
    assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == [bucket]

    listed = json.loads(cli(srv, "list", "--json").stdout)
    mine = [k for k in listed if k["name"] == n]
    assert len(mine) == 1 and mine[0]["access_key"] == key_id and mine[0]["enabled"] is True, listed
    assert all("secret_key" not in k for k in listed), listed
    table = cli(srv, "list").stdout
    row = next(line for line in table.splitlines() if line.startswith(n + " "))
    assert key_id in row and "enabled" in row and f"{bucket}: read+write" in row, table
    assert secret not in table

    info = cli(srv, "info", n).stdout
    assert f"name            {n}" in info and f"access key id   {key_id}" in info, info
    assert f"permissions     {bucket}: read+write" in info and secret not in info, info

    shown = json.loads(cli(srv, "deny", n, bucket, "write", "--json").stdout)
    assert shown["buckets"] == {bucket: ["read"]}, shown
    assert_denied(refusal(s3.put_object, Bucket=bucket, Key="again", Body=b"x"), n, "PutObject", bucket)

    status, code, message = refusal(s3.create_bucket, Bucket=name("robot-own"))
    assert (status, code) == (403, "AccessDenied") and n in message and "--create-buckets" in message, message
    shown = json.loads(cli(srv, "allow", n, "--create-buckets", "--json").stdout)
    assert shown["create_buckets"] is True
    own = name("robot-own")
    s3.create_bucket(Bucket=own)
    assert json.loads(cli(srv, "info", n, "--json").stdout)["buckets"][own] == ["owner"]
    assert json.loads(cli(srv, "deny", n, "--create-buckets", "--json").stdout)["create_buckets"] is False
    assert refusal(s3.create_bucket, Bucket=name("robot-two"))[:2] == (403, "AccessDenied")
    assert s3.list_objects_v2(Bucket=own)["KeyCount"] == 0  # what it made stays its own

    shown = json.loads(cli(srv, "disable", n, "--json").stdout)
    assert shown["enabled"] is False
    status, code, message = refusal(s3.get_object, Bucket=bucket, Key="k")
    assert (status, code) == (403, "InvalidAccessKeyId") and key_id in message and "disabled" in message, message
    cli(srv, "enable", n)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"payload"

    done = cli(srv, "delete", n)
    assert done.stdout.strip() == f"access key {n} deleted", done.stdout
    status, code, message = refusal(s3.get_object, Bucket=bucket, Key="k")
    assert (status, code) == (403, "InvalidAccessKeyId") and key_id in message, message
    missing = cli(srv, "info", n, ok_=False)
    assert missing.returncode != 0 and n in missing.stderr, missing.stderr
    # Its bucket is root's now: a new key of the same name does not inherit it.
    again = new_key(srv, "x")
    assert again["name"] != n
    reborn = create_key(srv.endpoint, n)
    SECRETS.append(reborn["secret_key"])
    assert reborn["buckets"] == {}, reborn
    assert_denied(refusal(key_client(srv.endpoint, reborn).list_objects_v2, Bucket=own), n, "ListObjectsV2", own)
    listing = root.list_buckets()
    assert own in [b["Name"] for b in listing["Buckets"]]
    assert root.get_bucket_acl(Bucket=own)["Owner"]["ID"] == listing["Owner"]["ID"]
    assert root.get_object(Bucket=bucket, Key="by-robot")["Body"].read() == b"x"


def test_cli_refuses_bad_requests_clearly(srv, root):
    n = name("bad")
    cli(srv, "create", n)
    dup = cli(srv, "create", n, ok_=False)
    assert dup.returncode != 0 and "already exists" in dup.stderr and n in dup.stderr, dup.stderr
    bad = cli(srv, "allow", n, "somebucket", "admin", ok_=False)
    assert bad.returncode != 0 and "admin" in bad.stderr and "read, write, delete or owner" in bad.stderr, bad.stderr
    nothing = cli(srv, "allow", n, ok_=False)
    assert nothing.returncode != 0 and "--create-buckets" in nothing.stderr, nothing.stderr
    for reserved in ("root", "anonymous"):
        r = cli(srv, "create", reserved, ok_=False)
        assert r.returncode != 0 and "reserved" in r.stderr, r.stderr


def test_cli_through_an_endpoint_manages_keys_as_root_only(srv, root):
    n = name("ep")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERMAFROST_")}
    base = [str(binary()), "key"]
    endpoint = ["--endpoint", srv.endpoint]
    as_root = ["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY]
    made = subprocess.run(base + ["create", n, "--create-buckets", "--json"] + endpoint + as_root, env=env,
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)
    SECRETS.append(key["secret_key"])
    assert key["name"] == n and key["create_buckets"] is True and key["secret_key"], key
    listed = subprocess.run(base + ["list", "--json"] + endpoint + as_root, env=env, capture_output=True, text=True,
                            timeout=60)
    assert listed.returncode == 0 and n in [k["name"] for k in json.loads(listed.stdout)], listed.stderr
    # The key itself may not manage keys, not even its own.
    as_key = ["--access-key", key["access_key"], "--secret-key", key["secret_key"]]
    for args in (["list"], ["create", name("escalate")], ["allow", n, "somebucket", "owner"], ["delete", n]):
        r = subprocess.run(base + args + endpoint + as_key, env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode != 0, (args, r.stdout)
        assert "AccessDenied" in r.stderr and n in r.stderr and "root user" in r.stderr, (args, r.stderr)
    assert ok(srv.endpoint, "GET", f"/keys/{n}")["buckets"] == {}
    assert not [k for k in ok(srv.endpoint, "GET", "/keys") if k["name"].startswith("escalate")]


def test_admin_api_manages_keys_and_answers_with_the_secret_only_at_creation(srv, root):
    bucket = new_bucket(root)
    n = name("api")
    r = call(srv.endpoint, "POST", "/keys", json={"name": n, "create_buckets": False})
    assert r.status_code == 201, r.text
    created = r.json()
    SECRETS.append(created["secret_key"])
    assert created["name"] == n and created["access_key"] and len(created["secret_key"]) >= 20, created
    assert created["enabled"] is True and created["create_buckets"] is False and created["buckets"] == {}

    listed = ok(srv.endpoint, "GET", "/keys")
    assert [k for k in listed if k["name"] == n] == [{k: v for k, v in created.items() if k != "secret_key"}]
    assert all("secret_key" not in k for k in listed)
    info = ok(srv.endpoint, "GET", f"/keys/{n}")
    assert info["access_key"] == created["access_key"] and "secret_key" not in info

    assert ok(srv.endpoint, "POST", f"/keys/{n}/allow",
              json={"bucket": bucket, "permission": "delete"})["buckets"] == {bucket: ["delete"]}
    assert ok(srv.endpoint, "POST", f"/keys/{n}/allow",
              json={"bucket": bucket, "permission": "read"})["buckets"] == {bucket: ["read", "delete"]}
    assert ok(srv.endpoint, "POST", f"/keys/{n}/deny",
              json={"bucket": bucket, "permission": "delete"})["buckets"] == {bucket: ["read"]}
    changed = ok(srv.endpoint, "PUT", f"/keys/{n}", json={"enabled": False, "create_buckets": True})
    assert changed["enabled"] is False and changed["create_buckets"] is True
    status, code, _ = refusal(key_client(srv.endpoint, created).list_objects_v2, Bucket=bucket)
    assert (status, code) == (403, "InvalidAccessKeyId")
    ok(srv.endpoint, "PUT", f"/keys/{n}", json={"enabled": True})
    assert key_client(srv.endpoint, created).list_objects_v2(Bucket=bucket)["KeyCount"] == 0

    # Errors say what is wrong.
    r = call(srv.endpoint, "POST", "/keys", json={"name": n})
    assert r.status_code == 409 and n in r.text, r.text
    r = call(srv.endpoint, "POST", f"/keys/{n}/allow", json={"bucket": bucket, "permission": "everything"})
    assert r.status_code == 400 and "everything" in r.text, r.text
    r = call(srv.endpoint, "POST", "/keys", json={"name": "no spaces allowed"})
    assert r.status_code == 400, r.text
    r = call(srv.endpoint, "GET", "/keys/no-such-key-here")
    assert r.status_code == 404 and "no-such-key-here" in r.text, r.text

    assert ok(srv.endpoint, "DELETE", f"/keys/{n}") == {"deleted": n}
    assert call(srv.endpoint, "GET", f"/keys/{n}").status_code == 404
    status, code, _ = refusal(key_client(srv.endpoint, created).list_objects_v2, Bucket=bucket)
    assert (status, code) == (403, "InvalidAccessKeyId")


def test_a_key_made_on_the_data_directory_of_a_stopped_server_works_once_it_runs(tmp_path):
    s = Server(tmp_path / "data")
    s.start()
    s3 = client(s.endpoint, retries=1)
    s3.create_bucket(Bucket="offline-made")
    s3.put_object(Bucket="offline-made", Key="k", Body=b"offline")
    assert s.stop() == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERMAFROST_")}
    run = lambda *a: subprocess.run([str(binary()), "key", *a, "--data-dir", str(s.data_dir)], env=env,
                                    capture_output=True, text=True, timeout=60)
    made = run("create", "offline", "--json")
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)
    assert run("allow", "offline", "offline-made", "read").returncode == 0
    s.start()
    try:
        assert key_client(s.endpoint, key).get_object(Bucket="offline-made", Key="k")["Body"].read() == b"offline"
        assert_denied(refusal(key_client(s.endpoint, key).delete_object, Bucket="offline-made", Key="k"),
                      "offline", "DeleteObject", "offline-made")
    finally:
        assert s.stop() == 0
    assert key["secret_key"] not in s.log_path.read_text(errors="replace")


def test_list_buckets_shows_what_the_key_may_use_and_the_creator_owns_its_bucket(srv, root):
    shared, hidden = new_bucket(root), new_bucket(root)
    reader = new_key(srv, "lister")
    maker = new_key(srv, "maker", create_buckets=True)
    allow(srv.endpoint, reader["name"], shared, "read")
    assert [b["Name"] for b in key_client(srv.endpoint, reader).list_buckets()["Buckets"]] == [shared]
    made = name("made")
    key_client(srv.endpoint, maker).create_bucket(Bucket=made)
    assert ok(srv.endpoint, "GET", f"/keys/{maker['name']}")["buckets"] == {made: ["owner"]}
    assert [b["Name"] for b in key_client(srv.endpoint, maker).list_buckets()["Buckets"]] == [made]
    names = [b["Name"] for b in root.list_buckets()["Buckets"]]
    assert {shared, hidden, made} <= set(names)
    # Another key may not take the name, and learns only that it is taken.
    other = new_key(srv, "taker", create_buckets=True)
    status, code, message = refusal(key_client(srv.endpoint, other).create_bucket, Bucket=made)
    assert (status, code) == (409, "BucketAlreadyExists") and maker["name"] not in message, message
    assert refusal(key_client(srv.endpoint, reader).head_bucket, Bucket=hidden)[0] == 403


def test_a_copy_needs_read_on_its_source_and_write_on_its_target(srv, root):
    source, target = new_bucket(root, "src"), new_bucket(root, "dst")
    root.put_object(Bucket=source, Key="s", Body=b"source")
    copier = new_key(srv, "copier")
    allow(srv.endpoint, copier["name"], target, "write")
    s3 = key_client(srv.endpoint, copier)
    answer = refusal(s3.copy_object, Bucket=target, Key="t", CopySource={"Bucket": source, "Key": "s"})
    assert_denied(answer, copier["name"], "GetObject", source)
    assert "read" in answer[2], answer
    upload = s3.create_multipart_upload(Bucket=target, Key="parts")["UploadId"]
    answer = refusal(s3.upload_part_copy, Bucket=target, Key="parts", UploadId=upload, PartNumber=1,
                     CopySource={"Bucket": source, "Key": "s"})
    assert_denied(answer, copier["name"], "GetObject", source)
    allow(srv.endpoint, copier["name"], source, "read")
    s3.upload_part_copy(Bucket=target, Key="parts", UploadId=upload, PartNumber=1,
                        CopySource={"Bucket": source, "Key": "s"})
    s3.abort_multipart_upload(Bucket=target, Key="parts", UploadId=upload)
    s3.copy_object(Bucket=target, Key="t", CopySource={"Bucket": source, "Key": "s"})
    assert root.get_object(Bucket=target, Key="t")["Body"].read() == b"source"
    # Read on the source is not write on it.
    answer = refusal(s3.copy_object, Bucket=source, Key="back", CopySource={"Bucket": target, "Key": "t"})
    assert_denied(answer, copier["name"], "CopyObject", source)


def test_bypassing_a_governance_retention_and_lifting_a_legal_hold_need_owner(srv, root):
    import datetime
    maker = new_key(srv, "lockowner", create_buckets=True)
    owner = key_client(srv.endpoint, maker)
    b = name("locked")
    owner.create_bucket(Bucket=b, ObjectLockEnabledForBucket=True)
    until = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
    version = owner.put_object(Bucket=b, Key="g", Body=b"governed", ObjectLockMode="GOVERNANCE",
                               ObjectLockRetainUntilDate=until)["VersionId"]
    held = owner.put_object(Bucket=b, Key="h", Body=b"held", ObjectLockLegalHoldStatus="ON")["VersionId"]
    worker = new_key(srv, "lockworker")
    allow(srv.endpoint, worker["name"], b, "write", "delete")
    w = key_client(srv.endpoint, worker)
    answer = refusal(w.delete_object, Bucket=b, Key="g", VersionId=version, BypassGovernanceRetention=True)
    assert_denied(answer, worker["name"], "BypassGovernanceRetention", b)
    assert "owner" in answer[2], answer
    answer = refusal(w.delete_objects, Bucket=b, BypassGovernanceRetention=True,
                     Delete={"Objects": [{"Key": "g", "VersionId": version}]})
    assert_denied(answer, worker["name"], "BypassGovernanceRetention", b)
    answer = refusal(w.put_object_legal_hold, Bucket=b, Key="h", VersionId=held, LegalHold={"Status": "OFF"})
    assert_denied(answer, worker["name"], "PutObjectLegalHold", b)
    assert "owner" in answer[2], answer
    w.put_object_legal_hold(Bucket=b, Key="g", VersionId=version, LegalHold={"Status": "ON"})  # protects more
    owner.put_object_legal_hold(Bucket=b, Key="g", VersionId=version, LegalHold={"Status": "OFF"})
    owner.delete_object(Bucket=b, Key="g", VersionId=version, BypassGovernanceRetention=True)
    assert [v["VersionId"] for v in root.list_object_versions(Bucket=b, Prefix="g").get("Versions", [])] == []


def test_presigned_urls_carry_the_rights_of_the_key_that_signed_them(srv, root):
    bucket = new_bucket(root)
    root.put_object(Bucket=bucket, Key="shared.bin", Body=b"shared bytes")
    reader = new_key(srv, "presigner")
    allow(srv.endpoint, reader["name"], bucket, "read")
    s3 = key_client(srv.endpoint, reader)
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "shared.bin"}, ExpiresIn=300)
    r = requests.get(url, timeout=30)
    assert r.status_code == 200 and r.content == b"shared bytes", r.text
    url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "planted.bin"}, ExpiresIn=300)
    r = requests.put(url, data=b"planted", timeout=30)
    assert r.status_code == 403, r.text
    assert "<Code>AccessDenied</Code>" in r.text and reader["name"] in r.text and "PutObject" in r.text, r.text
    assert bucket in r.text, r.text
    assert refusal(root.head_object, Bucket=bucket, Key="planted.bin")[0] == 404
    # A presigned URL of a key that is then disabled stops working.
    ok(srv.endpoint, "PUT", f"/keys/{reader['name']}", json={"enabled": False})
    r = requests.get(s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "shared.bin"}),
                     timeout=30)
    assert r.status_code == 403 and "<Code>InvalidAccessKeyId</Code>" in r.text, r.text


def test_the_admin_api_is_roots_but_a_key_may_wait_on_a_bucket_it_reads(srv, root):
    bucket, other = new_bucket(root), new_bucket(root)
    root.put_object(Bucket=bucket, Key="w", Body=b"wait for me")
    key = new_key(srv, "waiter")
    allow(srv.endpoint, key["name"], bucket, "read")
    ak, sk = key["access_key"], key["secret_key"]
    for method, path in [("GET", "/_permafrost/api/v1/state"), ("GET", "/_permafrost/api/v1/keys"),
                         ("POST", "/_permafrost/api/v1/keys"), ("GET", "/_permafrost/status"),
                         ("POST", "/_permafrost/persist"), ("GET", f"/_permafrost/api/v1/audit?key={key['name']}")]:
        r = admin(srv.endpoint, method, path, access_key=ak, secret_key=sk,
                  body=b'{"name": "escalated"}' if method == "POST" else b"")
        assert r.status_code == 403, (method, path, r.status_code, r.text)
        assert "AccessDenied" in r.text and key["name"] in r.text, (path, r.text)
    assert call(srv.endpoint, "GET", "/keys/escalated").status_code == 404
    # A key's own bearer token is not the admin API token.
    r = call(srv.endpoint, "GET", "/state", token=api_token(ak, sk))
    assert r.status_code == 403, r.text

    r = admin(srv.endpoint, "GET", f"/_permafrost/api/v1/wait?bucket={bucket}&key=w&timeout_ms=30000",
              access_key=ak, secret_key=sk)
    assert r.status_code == 200, r.text
    assert r.json()["bucket"] == bucket and r.json()["objects"] == 1 and r.json()["persisted"] is True, r.json()
    r = admin(srv.endpoint, "GET", f"/_permafrost/api/v1/wait?bucket={other}&timeout_ms=1000",
              access_key=ak, secret_key=sk)
    assert r.status_code == 403 and key["name"] in r.text and other in r.text, r.text
    r = admin(srv.endpoint, "GET", f"/_permafrost/api/v1/wait?bucket={bucket}&persist_now=true&timeout_ms=1000",
              access_key=ak, secret_key=sk)
    assert r.status_code == 403 and "persist_now" in r.text, r.text


def test_the_audit_trail_names_the_key_operation_bucket_and_object_of_every_change_and_refusal(srv, root):
    bucket = new_bucket(root)
    root.put_object(Bucket=bucket, Key="kept", Body=b"kept")
    w = new_key(srv, "auditee")
    bystander = new_key(srv, "bystander")
    allow(srv.endpoint, w["name"], bucket, "read", "write")
    after = last_event_id(srv.endpoint)
    s3 = key_client(srv.endpoint, w)
    s3.put_object(Bucket=bucket, Key="written", Body=b"w")
    s3.get_object(Bucket=bucket, Key="kept")["Body"].read()  # a successful GET is not audited
    refusal(s3.delete_object, Bucket=bucket, Key="kept")
    refusal(s3.put_bucket_versioning, Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    refusal(s3.head_object, Bucket=name("nobucket"), Key="x")
    key_client(srv.endpoint, bystander).list_buckets()
    refusal(key_client(srv.endpoint, bystander).get_object, Bucket=bucket, Key="kept")
    deny(srv.endpoint, w["name"], bucket, "write")
    root.put_object(Bucket=bucket, Key="by-root", Body=b"r")

    events = audit(srv.endpoint, key=w["name"], after=after)
    assert all(e["data"]["key"] == w["name"] for e in events), events
    requests_ = [e["data"] for e in events if e["kind"] == "request"]
    seen = [(d["operation"], d["bucket"], d["object"], d["status"], d["code"]) for d in requests_]
    assert seen[:3] == [
        ("PutObject", bucket, "written", 200, ""),
        ("DeleteObject", bucket, "kept", 403, "AccessDenied"),
        ("PutBucketVersioning", bucket, "", 403, "AccessDenied"),
    ], seen
    assert len(seen) == 4 and seen[3][0] == "HeadObject" and seen[3][3] == 403, seen
    for e in events:
        if e["kind"] == "request":
            assert w["name"] in e["text"] and e["data"]["operation"] in e["text"], e
    key_events = [e for e in events if e["kind"] == "key"]
    assert [e["data"].get("action") for e in key_events] == ["deny"], key_events
    assert key_events[0]["data"]["bucket"] == bucket and key_events[0]["data"]["permission"] == "write"
    # The other key's refusal is in its own trail, not in this one.
    others = audit(srv.endpoint, key=bystander["name"], after=after)
    assert [(e["data"]["operation"], e["data"]["status"]) for e in others] == [("GetObject", 403)], others
    refusal(anonymous_client(srv.endpoint).delete_object, Bucket=bucket, Key="kept")
    anon = [(e["data"]["operation"], e["data"]["bucket"], e["data"]["object"], e["data"]["status"])
            for e in audit(srv.endpoint, key="anonymous", after=after)]
    assert anon == [("DeleteObject", bucket, "kept", 403)], anon
    everyone = audit(srv.endpoint, after=after)
    assert {e["data"]["key"] for e in everyone} >= {w["name"], bystander["name"], "root"}, everyone
    # The log has one line per audited request, naming the key.
    log = srv.log_path.read_text(errors="replace")
    assert re.search(rf"PutObject bucket={bucket} key=written status=200 code=- request_id=[0-9A-F]{{16}} "
                     rf"access_key=\S+ signer={re.escape(w['name'])} ", log), log[-3000:]
    assert re.search(rf"DeleteObject bucket={bucket} key=\S+ status=403 code=AccessDenied .*signer={re.escape(w['name'])} ",
                     log), log[-3000:]


def test_the_archives_own_endpoints_need_read_on_the_bucket(srv, root):
    bucket = new_bucket(root, "arch")
    root.put_object(Bucket=bucket, Key="runs/a.bin", Body=b"archived")
    keys = {p: new_key(srv, f"arch-{p}") for p in ("none", "read", "write", "owner")}
    for p in ("read", "write", "owner"):
        allow(srv.endpoint, keys[p]["name"], bucket, p)
    requests_ = {
        "WaitPersisted": ("GET", f"/_permafrost/api/v1/wait?bucket={bucket}&key=runs%2Fa.bin&timeout_ms=30000",
                          b""),
        "ListDatasets": ("GET", f"/_permafrost/api/v1/datasets?bucket={bucket}", b""),
        "RestoreDataset": ("POST", "/_permafrost/api/v1/restores",
                           json.dumps({"bucket": bucket, "prefix": "runs/", "days": 1}).encode()),
    }
    wrong = []
    for operation, (method, path, body) in requests_.items():
        for p, key in keys.items():
            r = admin(srv.endpoint, method, path, access_key=key["access_key"], secret_key=key["secret_key"],
                      body=body)
            if p in ("read", "owner"):
                if r.status_code not in (200, 202):
                    wrong.append((operation, p, r.status_code, r.text[:300]))
            elif r.status_code != 403 or not all(w in r.text for w in ("AccessDenied", key["name"], operation,
                                                                       bucket)):
                wrong.append((operation, p, r.status_code, r.text[:300]))
        r = admin(srv.endpoint, method, path, body=body)
        if r.status_code not in (200, 202):
            wrong.append((operation, "root", r.status_code, r.text[:300]))
        r = requests.request(method, srv.endpoint + path, data=body, timeout=30)
        if r.status_code != 401:
            wrong.append((operation, "anonymous", r.status_code, r.text[:300]))
    assert not wrong, "\n".join(map(str, wrong))


def test_a_deleted_bucket_takes_its_owner_grants_and_policy_along(srv, root):
    maker = new_key(srv, "recreate-owner", create_buckets=True)
    reader = new_key(srv, "recreate-reader")
    m = key_client(srv.endpoint, maker)
    b = name("recreated")
    m.create_bucket(Bucket=b)
    allow(srv.endpoint, reader["name"], b, "read")
    m.put_bucket_policy(Bucket=b, Policy=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": [reader["name"]]}, "Action": "s3:GetObject",
         "Resource": f"arn:aws:s3:::{b}/*"}]}))
    m.delete_bucket(Bucket=b)
    assert ok(srv.endpoint, "GET", f"/keys/{maker['name']}")["buckets"] == {}
    assert ok(srv.endpoint, "GET", f"/keys/{reader['name']}")["buckets"] == {}
    # The name made again by root starts unshared: the old owner, grants and policy do not come back.
    root.create_bucket(Bucket=b)
    root.put_object(Bucket=b, Key="new", Body=b"root's")
    assert root.get_bucket_acl(Bucket=b)["Owner"]["ID"] == root.list_buckets()["Owner"]["ID"]
    assert refusal(root.get_bucket_policy, Bucket=b)[:2] == (404, "NoSuchBucketPolicy")
    assert_denied(refusal(key_client(srv.endpoint, reader).get_object, Bucket=b, Key="new"), reader["name"],
                  "GetObject", b)
    assert_denied(refusal(m.put_object, Bucket=b, Key="x", Body=b"x"), maker["name"], "PutObject", b)


def test_a_new_key_with_a_deleted_keys_name_inherits_none_of_its_sharing(srv, root):
    """ACL grants and policy statements name keys; a key made later under the same name is someone else."""
    bucket = new_bucket(root, "reuse")
    root.put_object(Bucket=bucket, Key="by-acl", Body=b"acl")
    root.put_object(Bucket=bucket, Key="by-policy", Body=b"policy")
    n = name("alice")
    first = create_key(srv.endpoint, n)
    SECRETS.append(first["secret_key"])
    root.put_object_acl(Bucket=bucket, Key="by-acl", GrantRead=f"id={n}")
    root.put_bucket_policy(Bucket=bucket, Policy=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": [n]}, "Action": "s3:GetObject",
         "Resource": f"arn:aws:s3:::{bucket}/by-policy"}]}))
    a = key_client(srv.endpoint, first)
    assert a.get_object(Bucket=bucket, Key="by-acl")["Body"].read() == b"acl"
    assert a.get_object(Bucket=bucket, Key="by-policy")["Body"].read() == b"policy"
    ok(srv.endpoint, "DELETE", f"/keys/{n}")
    second = create_key(srv.endpoint, n)
    SECRETS.append(second["secret_key"])
    b = key_client(srv.endpoint, second)
    assert_denied(refusal(b.get_object, Bucket=bucket, Key="by-acl"), n, "GetObject", bucket)
    assert_denied(refusal(b.get_object, Bucket=bucket, Key="by-policy"), n, "GetObject", bucket)


def test_owner_granted_by_root_runs_the_bucket_but_root_stays_its_owner(srv, root):
    bucket = new_bucket(root, "granted-owner")
    root.put_object(Bucket=bucket, Key="k", Body=b"k")
    key = new_key(srv, "steward")
    allow(srv.endpoint, key["name"], bucket, "owner")
    s = key_client(srv.endpoint, key)
    # owner covers read, write, delete and the bucket's configuration and access.
    assert s.get_object(Bucket=bucket, Key="k")["Body"].read() == b"k"
    s.put_object(Bucket=bucket, Key="w", Body=b"w")
    s.delete_object(Bucket=bucket, Key="w")
    s.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s.put_bucket_policy(Bucket=bucket, Policy=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": [key["name"]]}, "Action": "s3:GetObject",
         "Resource": f"arn:aws:s3:::{bucket}/*"}]}))
    s.delete_bucket_policy(Bucket=bucket)
    # The bucket is still root's (ownership is not a grant).
    assert s.get_bucket_acl(Bucket=bucket)["Owner"]["ID"] == root.list_buckets()["Owner"]["ID"]
    assert ok(srv.endpoint, "GET", f"/keys/{key['name']}")["buckets"] == {bucket: ["owner"]}
    # Taking owner back takes everything back.
    deny(srv.endpoint, key["name"], bucket, "owner")
    assert_denied(refusal(s.get_object, Bucket=bucket, Key="k"), key["name"], "GetObject", bucket)
    assert s.list_buckets()["Buckets"] == []


def test_taking_owner_back_from_a_buckets_creator_hands_the_bucket_to_root(srv, root):
    maker = new_key(srv, "creator", create_buckets=True)
    m = key_client(srv.endpoint, maker)
    b = name("handed")
    m.create_bucket(Bucket=b)
    m.put_object(Bucket=b, Key="k", Body=b"made by the key")
    assert m.get_bucket_acl(Bucket=b)["Owner"]["ID"] == maker["name"]
    shown = deny(srv.endpoint, maker["name"], b, "owner")
    assert shown["buckets"] == {}, shown
    assert_denied(refusal(m.get_object, Bucket=b, Key="k"), maker["name"], "GetObject", b)
    assert root.get_bucket_acl(Bucket=b)["Owner"]["ID"] == root.list_buckets()["Owner"]["ID"]
    assert root.get_object(Bucket=b, Key="k")["Body"].read() == b"made by the key"


def test_a_refused_request_of_a_disabled_key_is_in_that_keys_audit_trail(srv, root):
    bucket = new_bucket(root, "disabled-audit")
    key = new_key(srv, "disabled")
    allow(srv.endpoint, key["name"], bucket, "read")
    ok(srv.endpoint, "PUT", f"/keys/{key['name']}", json={"enabled": False})
    after = last_event_id(srv.endpoint)
    status, code, _ = refusal(key_client(srv.endpoint, key).get_object, Bucket=bucket, Key="k")
    assert (status, code) == (403, "InvalidAccessKeyId")
    seen = [(e["data"]["operation"], e["data"]["bucket"], e["data"]["status"], e["data"]["code"])
            for e in audit(srv.endpoint, key=key["name"], after=after) if e["kind"] == "request"]
    assert seen == [("GetObject", bucket, 403, "InvalidAccessKeyId")], (
        seen, [e["text"] for e in audit(srv.endpoint, after=after)])


def test_no_secret_is_ever_written_to_the_servers_log(srv):
    """Runs last in this module: every secret its server handed out, and the root secret."""
    assert len(SECRETS) > 10, SECRETS
    log = srv.log_path.read_text(errors="replace")
    assert "access key" in log  # the log is the right one and says things
    leaked = [s for s in SECRETS if s in log]
    assert not leaked, f"{len(leaked)} secrets in {srv.log_path}"
