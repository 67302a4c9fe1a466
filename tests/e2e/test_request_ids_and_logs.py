"""Error codes as AWS documents them, `x-amz-request-id`/`x-amz-id-2` on every answer, and the log lines an
operator reads (docs/admin.md, "Logs"): one per request with the operation, bucket, key, status, code, request id
and access key; probes that find nothing at debug; messages unescaped; no colour codes in a file; and info lines
when a batch is persisted, a disk spins up and a restore completes."""

import base64
import hashlib
import re
import time
import uuid

import pytest
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from admin import wait_persisted
from conftest import ACCESS_KEY, SECRET_KEY, Server, client

REQUEST_ID = re.compile(r"^[0-9A-F]{16}$")


def error_of(call, *args, **kwargs):
    """`(HTTP status, S3 code, message, request id)` of a call that must fail."""
    with pytest.raises(ClientError) as e:
        call(*args, **kwargs)
    r = e.value.response
    return (r["ResponseMetadata"]["HTTPStatusCode"], r["Error"]["Code"], r["Error"].get("Message", ""),
            r["ResponseMetadata"].get("RequestId", ""))


def signed(method, url, body=b"", headers=None):
    """A request signed with SigV4 by botocore, sent as is (for bodies boto3 would never send)."""
    headers = dict(headers or {})
    headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
    request = AWSRequest(method=method, url=url, data=body, headers=headers)
    SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(request)
    prepared = request.prepare()
    return requests.request(method, prepared.url, headers=dict(prepared.headers), data=body)


def code_of(response):
    m = re.search(r"<Code>([^<]*)</Code>", response.text)
    return m.group(1) if m else None


def log_line(server, request_id, timeout_s=10):
    """The server's log line naming `request_id` (waits for it)."""
    deadline = time.time() + timeout_s
    while True:
        for line in server.log_path.read_text(errors="replace").splitlines():
            if f"request_id={request_id}" in line:
                return line
        assert time.time() < deadline, f"no log line with request_id={request_id}: {server.log_tail(3000)}"
        time.sleep(0.1)


def test_malformed_xml_bodies_are_malformed_xml(server, bucket):
    url = f"{server.endpoint}/{bucket}"
    r = signed("PUT", url + "?tagging", b"<Tagging><TagSet><Tag><Key>a</Key>")
    assert (r.status_code, code_of(r)) == (400, "MalformedXML"), r.text
    r = signed("PUT", url + "?versioning", b"this is not XML at all")
    assert (r.status_code, code_of(r)) == (400, "MalformedXML"), r.text
    assert "<Message>The XML you provided was not well-formed" in r.text, r.text
    r = signed("PUT", url + "?versioning",
               b'<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
               b"<Status>Sometimes</Status></VersioningConfiguration>")
    assert (r.status_code, code_of(r)) == (400, "MalformedXML"), r.text


def test_errors_s3s_sends_bare_carry_aws_messages(s3, bucket):
    st, code, msg, _ = error_of(s3.put_object, Bucket=bucket, Key="k" * 1025, Body=b"x")
    assert (st, code) == (400, "KeyTooLongError") and "too long" in msg, msg


def test_tags_that_break_the_rules_are_invalid_tag(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    eleven = {"TagSet": [{"Key": f"k{i}", "Value": "v"} for i in range(11)]}
    assert error_of(s3.put_object_tagging, Bucket=bucket, Key="k", Tagging=eleven)[:2] == (400, "InvalidTag")
    twice = {"TagSet": [{"Key": "a", "Value": "1"}, {"Key": "a", "Value": "2"}]}
    assert error_of(s3.put_object_tagging, Bucket=bucket, Key="k", Tagging=twice)[:2] == (400, "InvalidTag")
    long_key = {"TagSet": [{"Key": "k" * 129, "Value": "v"}]}
    assert error_of(s3.put_object_tagging, Bucket=bucket, Key="k", Tagging=long_key)[:2] == (400, "InvalidTag")
    assert error_of(s3.put_object, Bucket=bucket, Key="t", Body=b"x", Tagging="a=1&a=2")[:2] == (400, "InvalidTag")
    many = {"TagSet": [{"Key": f"k{i}", "Value": "v"} for i in range(51)]}
    assert error_of(s3.put_bucket_tagging, Bucket=bucket, Tagging=many)[:2] == (400, "InvalidTag")


def test_a_non_positive_default_retention_is_invalid_retention_period_and_an_unknown_mode_malformed_xml(s3):
    b = f"t-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=b, ObjectLockEnabledForBucket=True)
    config = {"ObjectLockEnabled": "Enabled",
              "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 0}}}
    st, code, msg, _ = error_of(s3.put_object_lock_configuration, Bucket=b, ObjectLockConfiguration=config)
    assert (st, code) == (400, "InvalidRetentionPeriod"), msg
    config["Rule"]["DefaultRetention"] = {"Mode": "FOREVER", "Days": 1}
    st, code, msg, _ = error_of(s3.put_object_lock_configuration, Bucket=b, ObjectLockConfiguration=config)
    assert (st, code) == (400, "MalformedXML"), msg


def test_a_wrong_content_md5_is_bad_digest_and_a_malformed_one_invalid_digest(s3, bucket):
    other = base64.b64encode(hashlib.md5(b"other bytes").digest()).decode()
    st, code, msg, _ = error_of(s3.put_object, Bucket=bucket, Key="md5", Body=b"the bytes", ContentMD5=other)
    assert (st, code) == (400, "BadDigest"), msg
    st, code, msg, _ = error_of(s3.put_object, Bucket=bucket, Key="md5", Body=b"the bytes", ContentMD5="not!base64")
    assert (st, code) == (400, "InvalidDigest"), msg
    st, code, msg, _ = error_of(s3.put_object, Bucket=bucket, Key="md5", Body=b"the bytes",
                                ContentMD5=base64.b64encode(b"short").decode())
    assert (st, code) == (400, "InvalidDigest"), msg
    assert error_of(s3.head_object, Bucket=bucket, Key="md5")[0] == 404
    up = s3.create_multipart_upload(Bucket=bucket, Key="parts")["UploadId"]
    st, code, msg, _ = error_of(s3.upload_part, Bucket=bucket, Key="parts", UploadId=up, PartNumber=1,
                                Body=b"the bytes", ContentMD5=other)
    assert (st, code) == (400, "BadDigest"), msg


def test_signature_does_not_match_says_what_differed_in_one_sentence(server):
    bad = client(server.endpoint, secret_key="not-the-secret-at-all", retries=1)
    st, code, msg, request_id = error_of(bad.list_buckets)
    assert (st, code) == (403, "SignatureDoesNotMatch")
    assert "  " not in msg, repr(msg)
    assert "the string to sign differed" in msg and ACCESS_KEY in msg, msg
    assert REQUEST_ID.match(request_id), request_id


def test_every_answer_carries_a_request_id_and_a_host_id(server, s3, bucket):
    put = s3.put_object(Bucket=bucket, Key="k", Body=b"x")["ResponseMetadata"]
    get = s3.get_object(Bucket=bucket, Key="k")["ResponseMetadata"]
    for meta in (put, get):
        assert REQUEST_ID.match(meta["RequestId"]), meta
        assert meta["HostId"] and meta["HTTPHeaders"]["x-amz-id-2"] == meta["HostId"], meta
    assert put["RequestId"] != get["RequestId"]
    # An error: the headers, and the same ids in the XML body.
    r = signed("GET", f"{server.endpoint}/{bucket}/missing")
    assert r.status_code == 404
    request_id, host_id = r.headers["x-amz-request-id"], r.headers["x-amz-id-2"]
    assert REQUEST_ID.match(request_id), r.headers
    assert f"<RequestId>{request_id}</RequestId>" in r.text and f"<HostId>{host_id}</HostId>" in r.text, r.text
    # boto3 reads them (rclone and the AWS CLI print them in their errors).
    assert REQUEST_ID.match(error_of(s3.get_object, Bucket=bucket, Key="missing")[3])
    # Unsigned, refused: still there.
    r = requests.get(f"{server.endpoint}/{bucket}")
    assert r.status_code == 403 and REQUEST_ID.match(r.headers["x-amz-request-id"]), r.headers


def test_a_failure_is_one_line_with_operation_bucket_key_status_code_request_id_and_access_key(server, s3, bucket):
    _, _, _, request_id = error_of(s3.get_object, Bucket=bucket, Key="dir/no such thing")
    line = log_line(server, request_id)
    assert " INFO " in line, line
    expected = (f'GetObject bucket={bucket} key="dir/no such thing" status=404 code=NoSuchKey '
                f"request_id={request_id} access_key={ACCESS_KEY} signer=root ms=")
    assert expected in line, line
    assert line.rstrip().endswith(f"no such key: {bucket}/dir/no such thing"), line


def test_a_change_is_one_audit_line_with_its_request_id(server, s3, bucket):
    meta = s3.put_object(Bucket=bucket, Key="written", Body=b"x")["ResponseMetadata"]
    line = log_line(server, meta["RequestId"])
    assert "permafrost_s3::audit" in line, line
    assert f"PutObject bucket={bucket} key=written status=200 code=- request_id={meta['RequestId']} " \
           f"access_key={ACCESS_KEY} signer=root" in line, line


def test_probes_that_find_nothing_are_not_logged_at_info(server, s3, bucket):
    probes = [
        (s3.get_bucket_policy, "NoSuchBucketPolicy"),
        (s3.get_bucket_tagging, "NoSuchTagSet"),
        (s3.get_object_lock_configuration, "ObjectLockConfigurationNotFoundError"),
        (s3.get_bucket_lifecycle_configuration, "NoSuchLifecycleConfiguration"),
        (s3.get_bucket_cors, "NoSuchCORSConfiguration"),
    ]
    ids = []
    for call, code in probes:
        st, got, msg, request_id = error_of(call, Bucket=bucket)
        assert (st, got) == (404, code), msg
        ids.append(request_id)
    ids.append(error_of(s3.head_object, Bucket=bucket, Key="absent")[3])
    # A real failure after them: once its line is there, theirs would be too.
    marker = error_of(s3.get_object, Bucket=bucket, Key="marker")[3]
    log_line(server, marker)
    log = server.log_path.read_text(errors="replace")
    for request_id in ids:
        assert REQUEST_ID.match(request_id)
        assert f"request_id={request_id}" not in log, f"probe {request_id} logged at the default level"


def test_no_xml_escape_and_no_ansi_code_reaches_the_log_file(server, bucket):
    r = signed("PUT", f"{server.endpoint}/{bucket}?versioning",
               b'<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
               b"<Status>it's &quot;odd&quot; &amp; &lt;wrong&gt;</Status></VersioningConfiguration>")
    assert (r.status_code, code_of(r)) == (400, "MalformedXML"), r.text
    assert "&lt;wrong&gt;" in r.text and "&amp;" in r.text, r.text  # the body escapes; the log must not
    line = log_line(server, r.headers["x-amz-request-id"])
    assert "it's" in line and "odd" in line and "& <wrong>" in line, line
    log = server.log_path.read_text(errors="replace")
    for escape in ("&quot;", "&apos;", "&amp;", "&lt;", "&gt;"):
        assert escape not in log, f"{escape} in the log: {[l for l in log.splitlines() if escape in l][:3]}"
    assert "\x1b[" not in log, "ANSI colour codes in a log file"


def test_at_debug_every_request_has_its_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PERMAFROST_LOG", "warn,s3s=off,permafrost_s3=debug")
    server = Server(tmp_path / "data")
    server.start()
    try:
        s3 = client(server.endpoint)
        b = f"t-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(Bucket=b)
        listed = s3.list_objects_v2(Bucket=b)["ResponseMetadata"]
        line = log_line(server, listed["RequestId"])
        assert " DEBUG " in line and f"ListObjectsV2 bucket={b} key=- status=200 code=-" in line, line
        probe = error_of(s3.get_bucket_policy, Bucket=b)[3]
        assert " DEBUG " in log_line(server, probe)
        preflight = requests.options(f"{server.endpoint}/{b}/cold", headers={
            "Origin": "https://example.org", "Access-Control-Request-Method": "GET"})
        line = log_line(server, preflight.headers["x-amz-request-id"])
        assert " DEBUG " in line and f"PreflightRequest bucket={b} key=cold status={preflight.status_code}" in line, line
    finally:
        code = server.stop()
    assert code == 0, server.log_tail()


def test_by_default_persistence_spin_ups_and_restores_have_an_info_line(tmp_path, monkeypatch):
    monkeypatch.delenv("PERMAFROST_LOG", raising=False)
    server = Server(tmp_path / "data")
    server.start()
    try:
        s3 = client(server.endpoint)
        b = f"t-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(Bucket=b)
        s3.put_object(Bucket=b, Key="cold", Body=b"c" * 100_000, StorageClass="GLACIER")
        wait_persisted(server.endpoint)
        s3.restore_object(Bucket=b, Key="cold", RestoreRequest={"Days": 1, "GlacierJobParameters": {"Tier": "Expedited"}})
        deadline = time.time() + 60
        while 'ongoing-request="false"' not in s3.head_object(Bucket=b, Key="cold").get("Restore", ""):
            assert time.time() < deadline, server.log_tail(3000)
            time.sleep(0.2)
        deadline = time.time() + 10
        while True:
            log = server.log_path.read_text(errors="replace")
            if f"restore of {b}/cold" in log:
                break
            assert time.time() < deadline, log[-3000:]
            time.sleep(0.1)
        assert re.search(r"INFO permafrost_store::persist: persisted a batch to grid bucket \d+: \d+ contents", log), \
            log[-3000:]
        assert re.search(r"INFO permafrost_disk::power: disk \d+ spun up in \d+ ms for persist of grid bucket \d+",
                         log), log[-3000:]
        assert re.search(rf"INFO permafrost_store::restore: restore of {b}/cold \(version null, Expedited\) "
                         r"completed after \d+ ms", log), log[-3000:]
        assert " DEBUG " not in log
    finally:
        code = server.stop()
    assert code == 0, server.log_tail()


def test_rclone_names_the_request_id_and_host_id_of_an_error(tool_env, bucket):
    import subprocess
    from conftest import tool
    env = dict(tool_env, RCLONE_CONFIG_PF_SECRET_ACCESS_KEY="not-the-secret")
    run = subprocess.run([tool("rclone"), "--retries", "1", "--low-level-retries", "1", "lsf", f"pf:{bucket}"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0, run
    # "request id: ID, host id: HOST" (older rclone: "RequestID: ID, HostID: HOST"); both were empty before.
    ids = re.findall(r"(?:RequestID|request id): ([0-9A-F]*), (?:HostID|host id): (\S*)", run.stderr)
    assert ids and all(REQUEST_ID.match(r) and h.strip(",") for r, h in ids), run.stderr[-3000:]
