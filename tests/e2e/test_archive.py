"""What archive users expect from S3, through boto3 against the real server: versions and delete markers, Object
Lock (GOVERNANCE, COMPLIANCE, legal hold), tags, lifecycle expiry that wakes no disk, storage classes and
restores (single and batch, one spin-up per disk), ACLs and policies under Block Public Access, stored headers, dataset queries.
Status codes, error codes and headers are the ones the AWS documentation gives."""
import base64
import datetime
import hashlib
import json
import time
import uuid
import zlib

import boto3
import pytest
import requests
from botocore.config import Config
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from admin import (GRID_BUCKET_HEADER, admin, admin_json, data_disk_of, evict, gc, spin_ups, spun_up_since,
                   status, wait_all_off, wait_persisted)
from conftest import ACCESS_KEY, SECRET_KEY, TEST_CONFIG, Server, client

DAY_S = 2
LIFECYCLE_CONFIG = TEST_CONFIG.replace("[store]\n", f"[store]\nlifecycle_day_ms = {DAY_S * 1000}\n")


def error_of(call, *args, **kwargs):
    """`(HTTP status, S3 code, message)` of a call that must fail."""
    with pytest.raises(ClientError) as e:
        call(*args, **kwargs)
    r = e.value.response
    return r["ResponseMetadata"]["HTTPStatusCode"], r["Error"]["Code"], r["Error"].get("Message", "")


def new_name(prefix="a"):
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def in_seconds(s):
    return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=s)


def test_versions_delete_markers_and_older_versions(s3):
    b = new_name()
    s3.create_bucket(Bucket=b)
    assert "Status" not in s3.get_bucket_versioning(Bucket=b)
    s3.put_object(Bucket=b, Key="plain", Body=b"before versioning")
    # An unversioned bucket lists one null version per object and accepts versionId=null.
    v = s3.list_object_versions(Bucket=b)["Versions"]
    assert [(x["Key"], x["VersionId"], x["IsLatest"]) for x in v] == [("plain", "null", True)]
    assert s3.get_object(Bucket=b, Key="plain", VersionId="null")["Body"].read() == b"before versioning"

    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    assert s3.get_bucket_versioning(Bucket=b)["Status"] == "Enabled"
    v1 = s3.put_object(Bucket=b, Key="k", Body=b"one")["VersionId"]
    v2 = s3.put_object(Bucket=b, Key="k", Body=b"two")["VersionId"]
    assert v1 != v2 and "null" not in (v1, v2)
    head = s3.head_object(Bucket=b, Key="k")
    assert head["VersionId"] == v2
    assert s3.get_object(Bucket=b, Key="k", VersionId=v1)["Body"].read() == b"one"

    d = s3.delete_object(Bucket=b, Key="k")
    assert d["DeleteMarker"] is True and d["VersionId"] not in (v1, v2)
    status_code, code, _ = error_of(s3.get_object, Bucket=b, Key="k")
    assert (status_code, code) == (404, "NoSuchKey")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=b).get("Contents", [])] == ["plain"]
    listing = s3.list_object_versions(Bucket=b, Prefix="k")
    assert [m["VersionId"] for m in listing["DeleteMarkers"]] == [d["VersionId"]]
    assert listing["DeleteMarkers"][0]["IsLatest"] is True
    assert [x["VersionId"] for x in listing["Versions"]] == [v2, v1]
    assert not any(x["IsLatest"] for x in listing["Versions"])
    # HEAD of the marker version: 405 MethodNotAllowed.
    assert error_of(s3.head_object, Bucket=b, Key="k", VersionId=d["VersionId"])[0] == 405

    # Removing the marker makes v2 current again; removing v2 for good makes v1 current.
    assert s3.delete_object(Bucket=b, Key="k", VersionId=d["VersionId"])["DeleteMarker"] is True
    assert s3.get_object(Bucket=b, Key="k")["Body"].read() == b"two"
    s3.delete_object(Bucket=b, Key="k", VersionId=v2)
    assert s3.get_object(Bucket=b, Key="k")["Body"].read() == b"one"
    assert error_of(s3.get_object, Bucket=b, Key="k", VersionId="0000nonexistent")[:2] == (404, "NoSuchVersion")

    # DeleteObjects with version ids, then the bucket can go.
    every = s3.list_object_versions(Bucket=b)
    objs = [{"Key": x["Key"], "VersionId": x["VersionId"]}
            for x in every.get("Versions", []) + every.get("DeleteMarkers", [])]
    out = s3.delete_objects(Bucket=b, Delete={"Objects": objs})
    assert not out.get("Errors") and len(out["Deleted"]) == len(objs)
    s3.delete_bucket(Bucket=b)


def test_suspended_versioning_writes_null_versions(s3):
    b = new_name()
    s3.create_bucket(Bucket=b)
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    v1 = s3.put_object(Bucket=b, Key="k", Body=b"1")["VersionId"]
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Suspended"})
    assert s3.get_bucket_versioning(Bucket=b)["Status"] == "Suspended"
    assert s3.put_object(Bucket=b, Key="k", Body=b"2")["VersionId"] == "null"
    assert s3.put_object(Bucket=b, Key="k", Body=b"3")["VersionId"] == "null"
    ids = [x["VersionId"] for x in s3.list_object_versions(Bucket=b)["Versions"]]
    assert ids == ["null", v1]


def test_list_object_versions_pages_over_thousands_of_versions(s3):
    b = new_name()
    s3.create_bucket(Bucket=b)
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket=b, Key="source", Body=b"x" * 100)
    # CopyObject is catalog only: 2,520 versions of 12 keys without writing 2,520 bodies.
    made = {"source": 1}
    for i in range(2520):
        key = f"k{i % 12:02d}"
        s3.copy_object(Bucket=b, Key=key, CopySource={"Bucket": b, "Key": "source"})
        made[key] = made.get(key, 0) + 1
    seen = []
    pages = 0
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=b, PaginationConfig={"PageSize": 1000}):
        pages += 1
        seen += [(v["Key"], v["VersionId"]) for v in page.get("Versions", [])]
    assert pages == 3
    assert len(seen) == 2521 == len(set(seen))
    assert seen == sorted(seen, key=lambda kv: kv[0]), "key order"
    for key, n in made.items():
        ids = [vid for k, vid in seen if k == key]
        assert len(ids) == n
        assert ids == sorted(ids, reverse=True), f"{key}: newest first"


def test_governance_yields_only_to_the_bypass_and_compliance_to_nobody_before_its_date(s3):
    b = new_name("lock")
    s3.create_bucket(Bucket=b, ObjectLockEnabledForBucket=True)
    assert s3.get_bucket_versioning(Bucket=b)["Status"] == "Enabled"
    conf = s3.get_object_lock_configuration(Bucket=b)["ObjectLockConfiguration"]
    assert conf["ObjectLockEnabled"] == "Enabled"
    assert error_of(s3.put_bucket_versioning, Bucket=b,
                    VersioningConfiguration={"Status": "Suspended"})[:2] == (409, "InvalidBucketState")

    gov = s3.put_object(Bucket=b, Key="gov", Body=b"g", ObjectLockMode="GOVERNANCE",
                        ObjectLockRetainUntilDate=in_seconds(3600))["VersionId"]
    head = s3.head_object(Bucket=b, Key="gov")
    assert head["ObjectLockMode"] == "GOVERNANCE" and head["ObjectLockLegalHoldStatus"] == "OFF"
    st, code, msg = error_of(s3.delete_object, Bucket=b, Key="gov", VersionId=gov)
    assert (st, code) == (403, "AccessDenied") and "GOVERNANCE" in msg
    # Shortening needs the bypass too.
    assert error_of(s3.put_object_retention, Bucket=b, Key="gov", VersionId=gov,
                    Retention={"Mode": "GOVERNANCE", "RetainUntilDate": in_seconds(60)})[:2] == (403, "AccessDenied")
    s3.delete_object(Bucket=b, Key="gov", VersionId=gov, BypassGovernanceRetention=True)

    comp = s3.put_object(Bucket=b, Key="comp", Body=b"c", ObjectLockMode="COMPLIANCE",
                         ObjectLockRetainUntilDate=in_seconds(4))["VersionId"]
    r = s3.get_object_retention(Bucket=b, Key="comp", VersionId=comp)["Retention"]
    assert r["Mode"] == "COMPLIANCE"
    for bypass in (False, True):
        st, code, msg = error_of(s3.delete_object, Bucket=b, Key="comp", VersionId=comp,
                                 BypassGovernanceRetention=bypass)
        assert (st, code) == (403, "AccessDenied") and "COMPLIANCE" in msg
    assert error_of(s3.put_object_retention, Bucket=b, Key="comp", VersionId=comp, BypassGovernanceRetention=True,
                    Retention={"Mode": "GOVERNANCE", "RetainUntilDate": in_seconds(3)})[:2] == (403, "AccessDenied")
    # Deleting without a version id only adds a delete marker: allowed, and the version stays.
    assert s3.delete_object(Bucket=b, Key="comp")["DeleteMarker"] is True
    assert s3.get_object(Bucket=b, Key="comp", VersionId=comp)["Body"].read() == b"c"
    time.sleep(4.5)
    s3.delete_object(Bucket=b, Key="comp", VersionId=comp)
    assert error_of(s3.get_object, Bucket=b, Key="comp", VersionId=comp)[0] == 404


def test_a_legal_hold_blocks_deletion_regardless_of_retention(s3):
    b = new_name("lock")
    s3.create_bucket(Bucket=b, ObjectLockEnabledForBucket=True)
    v = s3.put_object(Bucket=b, Key="held", Body=b"h", ObjectLockLegalHoldStatus="ON")["VersionId"]
    assert s3.get_object_legal_hold(Bucket=b, Key="held")["LegalHold"]["Status"] == "ON"
    st, code, msg = error_of(s3.delete_object, Bucket=b, Key="held", VersionId=v, BypassGovernanceRetention=True)
    assert (st, code) == (403, "AccessDenied") and "legal hold" in msg
    s3.put_object_legal_hold(Bucket=b, Key="held", VersionId=v, LegalHold={"Status": "OFF"})
    s3.delete_object(Bucket=b, Key="held", VersionId=v)


def test_default_retention_applies_and_plain_buckets_refuse_locks(s3):
    b = new_name("lock")
    s3.create_bucket(Bucket=b, ObjectLockEnabledForBucket=True)
    s3.put_object_lock_configuration(Bucket=b, ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}})
    rule = s3.get_object_lock_configuration(Bucket=b)["ObjectLockConfiguration"]["Rule"]["DefaultRetention"]
    assert rule == {"Mode": "GOVERNANCE", "Days": 1}
    s3.put_object(Bucket=b, Key="k", Body=b"x")
    assert s3.head_object(Bucket=b, Key="k")["ObjectLockMode"] == "GOVERNANCE"
    plain = new_name()
    s3.create_bucket(Bucket=plain)
    assert error_of(s3.get_object_lock_configuration, Bucket=plain)[1] == "ObjectLockConfigurationNotFoundError"
    assert error_of(s3.put_object, Bucket=plain, Key="k", Body=b"x", ObjectLockLegalHoldStatus="ON")[:2] == (
        400, "InvalidRequest")


def test_tags_on_objects_and_buckets(s3):
    b = new_name()
    s3.create_bucket(Bucket=b)
    s3.put_object(Bucket=b, Key="k", Body=b"x", Tagging="site=effelsberg&scan=no%2042")
    assert s3.get_object(Bucket=b, Key="k")["TagCount"] == 2
    tags = s3.get_object_tagging(Bucket=b, Key="k")["TagSet"]
    assert {t["Key"]: t["Value"] for t in tags} == {"site": "effelsberg", "scan": "no 42"}
    s3.put_object_tagging(Bucket=b, Key="k", Tagging={"TagSet": [{"Key": "a", "Value": "1"}]})
    assert s3.get_object_tagging(Bucket=b, Key="k")["TagSet"] == [{"Key": "a", "Value": "1"}]
    s3.delete_object_tagging(Bucket=b, Key="k")
    assert s3.get_object_tagging(Bucket=b, Key="k")["TagSet"] == []
    too_many = [{"Key": f"t{i}", "Value": "v"} for i in range(11)]
    assert error_of(s3.put_object_tagging, Bucket=b, Key="k", Tagging={"TagSet": too_many})[0] == 400
    assert error_of(s3.get_bucket_tagging, Bucket=b)[1] == "NoSuchTagSet"
    s3.put_bucket_tagging(Bucket=b, Tagging={"TagSet": [{"Key": "project", "Value": "vlbi"}]})
    assert s3.get_bucket_tagging(Bucket=b)["TagSet"] == [{"Key": "project", "Value": "vlbi"}]
    s3.delete_bucket_tagging(Bucket=b)
    # Multipart uploads carry tags too.
    up = s3.create_multipart_upload(Bucket=b, Key="mp", Tagging="kind=multipart")
    part = s3.upload_part(Bucket=b, Key="mp", UploadId=up["UploadId"], PartNumber=1, Body=b"y" * 100)
    s3.complete_multipart_upload(Bucket=b, Key="mp", UploadId=up["UploadId"],
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert s3.get_object_tagging(Bucket=b, Key="mp")["TagSet"] == [{"Key": "kind", "Value": "multipart"}]


def test_nothing_becomes_public_while_the_server_blocks_public_access(s3, server):
    b = new_name()
    s3.create_bucket(Bucket=b)
    s3.put_object(Bucket=b, Key="k", Body=b"x")
    acl = s3.get_bucket_acl(Bucket=b)
    assert [g["Permission"] for g in acl["Grants"]] == ["FULL_CONTROL"]
    assert acl["Grants"][0]["Grantee"]["ID"] == acl["Owner"]["ID"]
    assert s3.get_object_acl(Bucket=b, Key="k")["Grants"][0]["Permission"] == "FULL_CONTROL"
    s3.put_bucket_acl(Bucket=b, ACL="private")
    st, code, msg = error_of(s3.put_bucket_acl, Bucket=b, ACL="public-read")
    assert (st, code) == (403, "AccessDenied") and "block_public_access" in msg
    assert error_of(s3.put_object_acl, Bucket=b, Key="k", ACL="public-read")[1] == "AccessDenied"
    assert error_of(s3.get_bucket_policy, Bucket=b)[:2] == (404, "NoSuchBucketPolicy")
    assert error_of(s3.get_bucket_policy_status, Bucket=b)[:2] == (404, "NoSuchBucketPolicy")
    # And it is true: an unsigned read is refused.
    import requests
    assert requests.get(f"{server.endpoint}/{b}/k").status_code == 403


def test_cache_control_expires_disposition_and_language_come_back(s3):
    b = new_name()
    s3.create_bucket(Bucket=b)
    expires = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    s3.put_object(Bucket=b, Key="k", Body=b"x", CacheControl="max-age=60", Expires=expires,
                  ContentDisposition='attachment; filename="scan.bin"', ContentLanguage="de")
    for r in (s3.head_object(Bucket=b, Key="k"), s3.get_object(Bucket=b, Key="k")):
        assert r["CacheControl"] == "max-age=60"
        assert r["ContentDisposition"] == 'attachment; filename="scan.bin"'
        assert r["ContentLanguage"] == "de"
        assert r["Expires"] == expires


def test_a_bucket_with_only_a_pending_upload_can_be_deleted(s3):
    b = new_name()
    s3.create_bucket(Bucket=b)
    up = s3.create_multipart_upload(Bucket=b, Key="half")
    s3.upload_part(Bucket=b, Key="half", UploadId=up["UploadId"], PartNumber=1, Body=b"z" * 1000)
    s3.delete_bucket(Bucket=b)
    assert error_of(s3.head_bucket, Bucket=b)[0] == 404


def test_storage_classes_offered_are_reported_and_others_refused(s3):
    b = new_name()
    s3.create_bucket(Bucket=b)
    st, code, msg = error_of(s3.put_object, Bucket=b, Key="k", Body=b"x", StorageClass="STANDARD_IA")
    assert (st, code) == (400, "InvalidStorageClass") and "GLACIER" in msg
    s3.put_object(Bucket=b, Key="cold", Body=b"x", StorageClass="GLACIER")
    s3.put_object(Bucket=b, Key="warm", Body=b"x")
    classes = {o["Key"]: o["StorageClass"] for o in s3.list_objects_v2(Bucket=b)["Contents"]}
    assert classes == {"cold": "GLACIER", "warm": "STANDARD"}
    assert s3.head_object(Bucket=b, Key="cold")["StorageClass"] == "GLACIER"
    assert "StorageClass" not in s3.head_object(Bucket=b, Key="warm")


def test_a_wrong_secret_says_which_key_and_that_the_string_to_sign_differed(server):
    bad = client(server.endpoint, secret_key="not-the-secret-at-all", retries=1)
    st, code, msg = error_of(bad.list_buckets)
    assert (st, code) == (403, "SignatureDoesNotMatch")
    assert ACCESS_KEY in msg and "string to sign" in msg
    assert "  " not in msg, repr(msg)
    deadline = time.time() + 10
    while f"status=403 code=SignatureDoesNotMatch " not in server.log_tail(200_000):
        assert time.time() < deadline, server.log_tail(3000)
        time.sleep(0.1)
    assert f"code=SignatureDoesNotMatch" in server.log_tail(200_000) and msg in server.log_tail(200_000)


def test_restore_answers_202_409_200_with_the_x_amz_restore_values(tmp_path):
    # Spin-ups of 3 s make the restore observable while it runs.
    server = Server(tmp_path / "data", spin_up_ms=3000)
    server.start()
    try:
        s3 = client(server.endpoint)
        b = new_name("cold")
        s3.create_bucket(Bucket=b)
        body = b"frozen " * 1000
        s3.put_object(Bucket=b, Key="scan", Body=body, StorageClass="GLACIER")
        wait_persisted(server.endpoint, expect_contents=1)
        evict(server.endpoint)
        wait_all_off(server.endpoint, timeout_s=60)
        st, code, _ = error_of(s3.get_object, Bucket=b, Key="scan")
        assert (st, code) == (403, "InvalidObjectState")
        assert "Restore" not in s3.head_object(Bucket=b, Key="scan")

        r = s3.restore_object(Bucket=b, Key="scan", RestoreRequest={"Days": 2, "Tier": "Expedited"})
        assert r["ResponseMetadata"]["HTTPStatusCode"] == 202
        assert s3.head_object(Bucket=b, Key="scan")["Restore"] == 'ongoing-request="true"'
        assert error_of(s3.restore_object, Bucket=b, Key="scan",
                        RestoreRequest={"Days": 2})[:2] == (409, "RestoreAlreadyInProgress")
        deadline = time.time() + 60
        while 'ongoing-request="false"' not in s3.head_object(Bucket=b, Key="scan").get("Restore", ""):
            assert time.time() < deadline, "restore did not finish"
            time.sleep(0.2)
        restore = s3.head_object(Bucket=b, Key="scan")["Restore"]
        assert restore.startswith('ongoing-request="false", expiry-date="') and restore.endswith('GMT"')
        assert s3.get_object(Bucket=b, Key="scan")["Body"].read() == body
        # Restored already: 200, and the copy stays (pinned) through an eviction.
        r = s3.restore_object(Bucket=b, Key="scan", RestoreRequest={"Days": 3})
        assert r["ResponseMetadata"]["HTTPStatusCode"] == 200
        evict(server.endpoint)
        assert s3.get_object(Bucket=b, Key="scan")["Body"].read() == body
    finally:
        server.kill()


def test_a_batch_restore_spins_each_disk_up_once_and_then_serves_from_the_cache(tmp_path):
    config = TEST_CONFIG.replace("[store]\n", "[store]\ndataset_prefix_depth = 1\n")
    server = Server(tmp_path / "data", config=config)
    server.start()
    try:
        s3 = client(server.endpoint)
        b = "observatory"
        s3.create_bucket(Bucket=b)
        s3.put_bucket_tagging(Bucket=b, Tagging={"TagSet": [{"Key": "site", "Value": "effelsberg"}]})
        keys = []
        for i in range(1000):
            key = f"scan-{i % 8}/chunk-{i:04d}"
            s3.put_object(Bucket=b, Key=key, Body=key.encode() * 40, StorageClass="GLACIER")
            keys.append(key)
        wait_persisted(server.endpoint, expect_contents=1000)
        grid_buckets = {int(s3.head_object(Bucket=b, Key=f"scan-{d}/chunk-{d:04d}")["ResponseMetadata"]
                            ["HTTPHeaders"][GRID_BUCKET_HEADER]) for d in range(8)}
        assert len(grid_buckets) == 8, f"8 datasets landed on {grid_buckets}"
        evict(server.endpoint)
        before = wait_all_off(server.endpoint)

        started = admin(server.endpoint, "POST", "/_permafrost/api/v1/restores",
                        body=json.dumps({"bucket": b, "prefix": "", "days": 1}).encode())
        assert started.status_code == 202, started.text
        assert started.json()["requested"] == 1000
        deadline = time.time() + 120
        while True:
            progress = admin_json(server.endpoint, "GET", "/_permafrost/api/v1/restores")
            if progress["pending"] == 0 and progress["done"] >= 1000:
                break
            assert time.time() < deadline, progress
            time.sleep(0.2)
        assert sorted(progress["grid_buckets"]) == sorted(grid_buckets)
        after = status(server.endpoint)
        woken = spun_up_since(before, after)
        expected = {data_disk_of(after, g)["index"]: 1 for g in grid_buckets}
        assert woken == expected, f"spin-ups {woken}, expected one per data disk {expected}"
        for key in keys:
            assert s3.get_object(Bucket=b, Key=key)["Body"].read() == key.encode() * 40
        assert spin_ups(status(server.endpoint)) == spin_ups(after), "every GET came from the cache"

        # The datasets, from the catalog.
        datasets = admin_json(server.endpoint, "GET", "/_permafrost/api/v1/datasets?tag=site%3Deffelsberg")
        assert sorted(d["dataset"] for d in datasets) == [f"{b}/scan-{d}" for d in range(8)]
        assert all(d["objects"] == 125 and d["persistence"] == "persisted" for d in datasets)
        assert admin_json(server.endpoint, "GET", "/_permafrost/api/v1/datasets?tag=site%3Delsewhere") == []
    finally:
        server.kill()


def test_lifecycle_expiry_empties_listings_without_waking_a_disk(tmp_path):
    server = Server(tmp_path / "data", config=LIFECYCLE_CONFIG)
    server.start()
    try:
        s3 = client(server.endpoint)
        b = new_name("lc")
        s3.create_bucket(Bucket=b)
        for i in range(20):
            s3.put_object(Bucket=b, Key=f"tmp/{i}", Body=bytes([i]) * 300_000)
        s3.put_object(Bucket=b, Key="keep/forever", Body=b"k" * 1000)
        wait_persisted(server.endpoint, expect_contents=21)
        evict(server.endpoint)
        before = wait_all_off(server.endpoint)
        s3.put_bucket_lifecycle_configuration(Bucket=b, LifecycleConfiguration={"Rules": [
            {"ID": "tmp-after-a-day", "Status": "Enabled", "Filter": {"Prefix": "tmp/"}, "Expiration": {"Days": 1}},
            {"ID": "uploads", "Status": "Enabled", "Filter": {"Prefix": ""},
             "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}},
        ]})
        rules = s3.get_bucket_lifecycle_configuration(Bucket=b)["Rules"]
        assert [r["ID"] for r in rules] == ["tmp-after-a-day", "uploads"]
        head = s3.head_object(Bucket=b, Key="tmp/0")
        assert head["Expiration"].startswith('expiry-date="') and 'rule-id="tmp-after-a-day"' in head["Expiration"]
        assert "Expiration" not in s3.head_object(Bucket=b, Key="keep/forever")
        deadline = time.time() + 4 * DAY_S + 5
        while s3.list_objects_v2(Bucket=b, Prefix="tmp/").get("KeyCount", 0) > 0:
            assert time.time() < deadline, "tmp/ did not expire"
            time.sleep(0.2)
        assert error_of(s3.head_object, Bucket=b, Key="tmp/3")[0] == 404
        assert [o["Key"] for o in s3.list_objects_v2(Bucket=b)["Contents"]] == ["keep/forever"]
        # The lifecycle thread turns the expiry into deletes within a fraction of a day; then the space goes.
        removed = 0
        while removed < 20:
            assert time.time() < deadline, f"only {removed} contents collected"
            removed += gc(server.endpoint)["contents_removed"]
            time.sleep(0.2)
        assert removed == 20
        after = status(server.endpoint)
        assert spun_up_since(before, after) == {}, "lifecycle and garbage collection woke a disk"
        s3.delete_bucket_lifecycle(Bucket=b)
        assert error_of(s3.get_bucket_lifecycle_configuration, Bucket=b)[1] == "NoSuchLifecycleConfiguration"
    finally:
        server.kill()


def test_a_sigkill_during_lifecycle_and_gc_loses_no_locked_or_unexpired_version(tmp_path):
    server = Server(tmp_path / "data", config=LIFECYCLE_CONFIG.replace("gc_grace_ms = 1000", "gc_grace_ms = 0"))
    server.start()
    try:
        s3 = client(server.endpoint)
        b = new_name("lock")
        s3.create_bucket(Bucket=b, ObjectLockEnabledForBucket=True)
        locked, kept = {}, {}
        for i in range(30):
            body = f"locked {i}".encode() * 100
            v = s3.put_object(Bucket=b, Key=f"tmp/locked-{i}", Body=body, ObjectLockMode="COMPLIANCE",
                              ObjectLockRetainUntilDate=in_seconds(3600))["VersionId"]
            locked[(f"tmp/locked-{i}", v)] = body
            body = f"kept {i}".encode() * 100
            v = s3.put_object(Bucket=b, Key=f"keep/{i}", Body=body)["VersionId"]
            kept[(f"keep/{i}", v)] = body
            for j in range(3):
                s3.put_object(Bucket=b, Key=f"tmp/plain-{i}", Body=f"{i}.{j}".encode())
        s3.put_bucket_lifecycle_configuration(Bucket=b, LifecycleConfiguration={"Rules": [
            {"ID": "tmp", "Status": "Enabled", "Filter": {"Prefix": "tmp/"}, "Expiration": {"Days": 1},
             "NoncurrentVersionExpiration": {"NoncurrentDays": 1}}]})
        # Kill while expiry and collection run.
        time.sleep(DAY_S * 1.5)
        server.kill()
        server.start()
        time.sleep(DAY_S * 2.5)
        gc(server.endpoint)
        for (key, v), body in {**locked, **kept}.items():
            assert s3.get_object(Bucket=b, Key=key, VersionId=v)["Body"].read() == body, key
        assert s3.list_objects_v2(Bucket=b, Prefix="keep/")["KeyCount"] == 30
    finally:
        server.kill()


def test_a_dataset_tag_keeps_objects_of_any_key_together_on_one_disk(tmp_path):
    server = Server(tmp_path / "data")
    server.start()
    try:
        s3 = client(server.endpoint)
        b = "telescope"
        s3.create_bucket(Bucket=b)
        tag = "permafrost-dataset=run-7&kind=raw"
        for key in ("calibration/c1", "scans/s1", "logs/l1"):
            s3.put_object(Bucket=b, Key=key, Body=key.encode() * 1000, Tagging=tag)
        up = s3.create_multipart_upload(Bucket=b, Key="big/m1", Tagging=tag)
        p = s3.upload_part(Bucket=b, Key="big/m1", UploadId=up["UploadId"], PartNumber=1, Body=b"m" * 70_000)
        s3.complete_multipart_upload(Bucket=b, Key="big/m1", UploadId=up["UploadId"],
                                     MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": p["ETag"]}]})
        s3.copy_object(Bucket=b, Key="copies/k1", CopySource={"Bucket": b, "Key": "scans/s1"})  # tags copied
        s3.put_object(Bucket=b, Key="other/o1", Body=b"o" * 5000)
        assert error_of(s3.put_object, Bucket=b, Key="x", Body=b"x", Tagging="permafrost-dataset=")[:2] == \
            (400, "InvalidTag")
        datasets = {d["dataset"]: d for d in admin_json(server.endpoint, "GET", f"/_permafrost/api/v1/datasets?bucket={b}")}
        assert sorted(datasets) == [f"{b}/other", f"{b}/run-7"], datasets
        assert datasets[f"{b}/run-7"]["objects"] == 5
        wait_persisted(server.endpoint)
        tagged = {int(s3.head_object(Bucket=b, Key=k)["ResponseMetadata"]["HTTPHeaders"][GRID_BUCKET_HEADER])
                  for k in ("calibration/c1", "scans/s1", "logs/l1", "big/m1", "copies/k1")}
        assert len(tagged) == 1, f"one dataset spread over grid buckets {tagged}"
    finally:
        server.stop()


def test_the_cli_obeys_object_lock_and_restores_and_lists_datasets(server, s3):
    import subprocess
    from conftest import SECRET_KEY, binary
    b = new_name("cli")
    s3.create_bucket(Bucket=b, ObjectLockEnabledForBucket=True)
    v = s3.put_object(Bucket=b, Key="runs/r1", Body=b"r" * 5000, ObjectLockMode="COMPLIANCE",
                      ObjectLockRetainUntilDate=in_seconds(3600), Tagging="kind=raw")["VersionId"]
    base = [str(binary())]
    common = ["--endpoint", server.endpoint, "--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY]

    def run(*args):
        return subprocess.run(base + list(args) + common, capture_output=True, text=True, timeout=120)

    r = run("rm", f"{b}/runs/r1", "--version-id", v, "--bypass-governance-retention")
    assert r.returncode == 1 and "AccessDenied" in r.stderr and "COMPLIANCE" in r.stderr, r.stderr
    assert "X-Amz-Signature" not in r.stderr
    r = run("rm", f"{b}/runs/r1")
    assert r.returncode == 0 and "delete marker" in r.stdout, r.stdout + r.stderr
    assert s3.get_object(Bucket=b, Key="runs/r1", VersionId=v)["Body"].read() == b"r" * 5000
    s3.put_object(Bucket=b, Key="runs/r2", Body=b"2" * 5000, Tagging="kind=raw")
    r = run("datasets", "--bucket", b, "--tag", "kind=raw", "--json")
    assert r.returncode == 0, r.stderr
    found = json.loads(r.stdout)
    assert len(found) == 1, r.stdout
    (d,) = found
    assert d["dataset"] == f"{b}/runs" and d["objects"] == 1 and d["tags"] == [["kind", "raw"]]
    r = run("restore", f"{b}/runs/", "--days", "1")
    assert r.returncode == 0 and "restored 1 of 1" in r.stdout, r.stdout + r.stderr


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def digest(algorithm: str, data: bytes) -> bytes:
    """What S3 computes for `algorithm` (its name as boto3 writes it), CRCs big-endian."""
    from awscrt import checksums
    if algorithm == "CRC64NVME":
        return checksums.crc64nvme(data).to_bytes(8, "big")
    if algorithm == "CRC32C":
        return checksums.crc32c(data).to_bytes(4, "big")
    if algorithm == "CRC32":
        return zlib.crc32(data).to_bytes(4, "big")
    return hashlib.new(algorithm.lower(), data).digest()


def with_trailer(server, path, body, algorithm, value):
    """A PUT as current AWS SDKs stream it (aws-sdk-cpp in pyarrow does so over plain HTTP too): an
    `aws-chunked` body, unsigned payload, the checksum sent as a trailer after the last chunk."""
    name = f"x-amz-checksum-{algorithm.lower()}"
    wire = b"%x\r\n" % len(body) + body + b"\r\n0\r\n" + f"{name}:{value}\r\n\r\n".encode()
    headers = {"x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER", "Content-Encoding": "aws-chunked",
               "x-amz-trailer": name, "x-amz-decoded-content-length": str(len(body))}
    request = AWSRequest(method="PUT", url=f"{server.endpoint}{path}", data=wire, headers=headers)
    SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(request)
    prepared = request.prepare()
    return requests.put(prepared.url, headers=dict(prepared.headers), data=wire, timeout=60)


def test_a_put_and_a_multipart_upload_with_crc64nvme_trailers_are_verified_and_stored(server, s3):
    b = new_name()
    s3.create_bucket(Bucket=b)
    body = b"archive " * 100_000
    crc = b64(digest("CRC64NVME", body))
    r = with_trailer(server, f"/{b}/bad", body, "CRC64NVME", b64(digest("CRC64NVME", b"other")))
    assert r.status_code == 400 and b"<Code>BadDigest</Code>" in r.content, r.content
    assert error_of(s3.head_object, Bucket=b, Key="bad")[0] == 404
    r = with_trailer(server, f"/{b}/one", body, "CRC64NVME", crc)
    assert r.status_code == 200, r.content
    head = s3.head_object(Bucket=b, Key="one", ChecksumMode="ENABLED")
    assert (head["ChecksumCRC64NVME"], head["ChecksumType"]) == (crc, "FULL_OBJECT")
    assert s3.get_object(Bucket=b, Key="one", ChecksumMode="ENABLED")["Body"].read() == body

    # Multipart: CRC64NVME is full-object; every part streams its CRC as a trailer and gets it back.
    up = s3.create_multipart_upload(Bucket=b, Key="multi", ChecksumAlgorithm="CRC64NVME")
    assert up["ChecksumType"] == "FULL_OBJECT"
    pieces = [bytes([1]) * (5 << 20), bytes(range(256)) * (20 << 10), b"tail"]
    parts = []
    for n, piece in enumerate(pieces, 1):
        value = b64(digest("CRC64NVME", piece))
        r = with_trailer(server, f"/{b}/multi?partNumber={n}&uploadId={up['UploadId']}", piece, "CRC64NVME", value)
        assert r.status_code == 200, r.content
        assert r.headers["x-amz-checksum-crc64nvme"] == value
        parts.append({"PartNumber": n, "ETag": r.headers["ETag"], "ChecksumCRC64NVME": value})
    listed = s3.list_parts(Bucket=b, Key="multi", UploadId=up["UploadId"])["Parts"]
    assert [p["ChecksumCRC64NVME"] for p in listed] == [p["ChecksumCRC64NVME"] for p in parts]
    whole = b"".join(pieces)
    crc = b64(digest("CRC64NVME", whole))
    st, code, message = error_of(s3.complete_multipart_upload, Bucket=b, Key="multi", UploadId=up["UploadId"],
                                 MultipartUpload={"Parts": parts}, ChecksumCRC64NVME=b64(digest("CRC64NVME", b"x")),
                                 ChecksumType="FULL_OBJECT")
    assert (st, code) == (400, "BadDigest") and crc in message, message
    wrong = [dict(parts[0], ChecksumCRC64NVME=parts[1]["ChecksumCRC64NVME"])] + parts[1:]
    assert error_of(s3.complete_multipart_upload, Bucket=b, Key="multi", UploadId=up["UploadId"],
                    MultipartUpload={"Parts": wrong})[:2] == (400, "InvalidPart")
    done = s3.complete_multipart_upload(Bucket=b, Key="multi", UploadId=up["UploadId"],
                                        MultipartUpload={"Parts": parts}, ChecksumCRC64NVME=crc,
                                        ChecksumType="FULL_OBJECT")
    assert (done["ChecksumCRC64NVME"], done["ChecksumType"]) == (crc, "FULL_OBJECT")
    head = s3.head_object(Bucket=b, Key="multi", ChecksumMode="ENABLED")
    assert (head["ChecksumCRC64NVME"], head["ChecksumType"]) == (crc, "FULL_OBJECT")
    # boto3 checks a full-object checksum it is given against the body.
    assert s3.get_object(Bucket=b, Key="multi", ChecksumMode="ENABLED")["Body"].read() == whole
    attributes = s3.get_object_attributes(Bucket=b, Key="multi", ObjectAttributes=["Checksum", "ObjectParts"])
    assert attributes["Checksum"]["ChecksumCRC64NVME"] == crc
    assert attributes["ObjectParts"]["TotalPartsCount"] == 3


def test_multipart_checksums_are_composite_or_full_object_as_announced(s3):
    b = new_name()
    s3.create_bucket(Bucket=b)
    pieces = [bytes(range(256)) * (20 << 10), b"the last part"]
    whole = b"".join(pieces)
    for algorithm, kind in (("SHA256", "COMPOSITE"), ("CRC32", "COMPOSITE"), ("CRC32C", "FULL_OBJECT")):
        up = s3.create_multipart_upload(Bucket=b, Key=algorithm, ChecksumAlgorithm=algorithm, ChecksumType=kind)
        parts = []
        for n, piece in enumerate(pieces, 1):
            p = s3.upload_part(Bucket=b, Key=algorithm, UploadId=up["UploadId"], PartNumber=n, Body=piece,
                               ChecksumAlgorithm=algorithm)
            assert p[f"Checksum{algorithm}"] == b64(digest(algorithm, piece))
            parts.append({"PartNumber": n, "ETag": p["ETag"], f"Checksum{algorithm}": p[f"Checksum{algorithm}"]})
        done = s3.complete_multipart_upload(Bucket=b, Key=algorithm, UploadId=up["UploadId"],
                                            MultipartUpload={"Parts": parts})
        if kind == "COMPOSITE":
            expected = b64(digest(algorithm, b"".join(digest(algorithm, p) for p in pieces))) + "-2"
        else:
            expected = b64(digest(algorithm, whole))
        assert (done[f"Checksum{algorithm}"], done["ChecksumType"]) == (expected, kind)
        head = s3.head_object(Bucket=b, Key=algorithm, ChecksumMode="ENABLED")
        assert (head[f"Checksum{algorithm}"], head["ChecksumType"]) == (expected, kind)
        assert s3.get_object(Bucket=b, Key=algorithm, ChecksumMode="ENABLED")["Body"].read() == whole
    # S3's rules: CRC64NVME is full-object only, SHA-256 composite only.
    for algorithm, kind in (("CRC64NVME", "COMPOSITE"), ("SHA256", "FULL_OBJECT")):
        st, code, message = error_of(s3.create_multipart_upload, Bucket=b, Key="x", ChecksumAlgorithm=algorithm,
                                     ChecksumType=kind)
        assert (st, code) == (400, "InvalidArgument") and kind in message, message


def test_objects_uploaded_without_a_checksum_get_a_crc64nvme_as_in_s3(server):
    # A client that sends checksums only when an operation requires them (older SDKs, curl, most tools).
    s3 = boto3.client("s3", endpoint_url=server.endpoint, aws_access_key_id=ACCESS_KEY,
                      aws_secret_access_key=SECRET_KEY, region_name="us-east-1",
                      config=Config(s3={"addressing_style": "path"}, request_checksum_calculation="when_required"))
    b = new_name()
    s3.create_bucket(Bucket=b)
    small, large = b"no checksum sent", bytes(range(256)) * (8 << 10)
    for key, body in (("small", small), ("large", large)):
        s3.put_object(Bucket=b, Key=key, Body=body)
        head = s3.head_object(Bucket=b, Key=key, ChecksumMode="ENABLED")
        assert (head["ChecksumCRC64NVME"], head["ChecksumType"]) == (b64(digest("CRC64NVME", body)), "FULL_OBJECT")
    # One the client announces is kept instead.
    s3.put_object(Bucket=b, Key="sha", Body=small, ChecksumSHA256=b64(digest("SHA256", small)))
    head = s3.head_object(Bucket=b, Key="sha", ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == b64(digest("SHA256", small)) and "ChecksumCRC64NVME" not in head
    up = s3.create_multipart_upload(Bucket=b, Key="multi")
    p = s3.upload_part(Bucket=b, Key="multi", UploadId=up["UploadId"], PartNumber=1, Body=large)
    s3.complete_multipart_upload(Bucket=b, Key="multi", UploadId=up["UploadId"],
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": p["ETag"]}]})
    head = s3.head_object(Bucket=b, Key="multi", ChecksumMode="ENABLED")
    assert (head["ChecksumCRC64NVME"], head["ChecksumType"]) == (b64(digest("CRC64NVME", large)), "FULL_OBJECT")


def test_a_wrong_crc64nvme_header_is_bad_digest_and_stores_nothing(s3):
    b = new_name()
    s3.create_bucket(Bucket=b)
    st, code, _ = error_of(s3.put_object, Bucket=b, Key="bad", Body=b"abc", ChecksumCRC64NVME="AAAAAAAAAAA=")
    assert (st, code) == (400, "BadDigest")
    assert error_of(s3.head_object, Bucket=b, Key="bad")[0] == 404


def test_pyarrow_writes_and_reads_a_parquet_dataset_with_its_default_settings(server, s3):
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq
    b = new_name("arrow")
    s3.create_bucket(Bucket=b)
    fs = pafs.S3FileSystem(access_key=ACCESS_KEY, secret_key=__import__("conftest").SECRET_KEY,
                           endpoint_override=server.endpoint, region="us-east-1")
    table = pa.table({"run": [i // 1000 for i in range(20_000)], "x": [float(i) for i in range(20_000)],
                      "label": [f"obj-{i % 7}" for i in range(20_000)]})
    ds.write_dataset(table, f"{b}/runs", format="parquet", filesystem=fs, partitioning=["run"])
    # A large single file too (aws-sdk-cpp switches to multipart uploads over its part size).
    big = pa.table({"v": pa.array(range(3_000_000), pa.int64())})
    pq.write_table(big, f"{b}/big.parquet", filesystem=fs, compression="none")
    back = ds.dataset(f"{b}/runs", format="parquet", filesystem=fs, partitioning=["run"]).to_table()
    assert back.num_rows == 20_000
    assert sorted(back.column("x").to_pylist()) == [float(i) for i in range(20_000)]
    assert pq.read_table(f"{b}/big.parquet", filesystem=fs).num_rows == 3_000_000


def test_failed_requests_are_logged_in_one_plain_line_and_the_startup_says_grid_buckets(server, s3):
    b = new_name()
    s3.create_bucket(Bucket=b)
    error_of(s3.get_object, Bucket=b, Key="nothing-here")
    deadline = time.time() + 10
    while f"GetObject bucket={b} key=nothing-here status=404 code=NoSuchKey request_id=" not in server.log_tail(1_000_000):
        assert time.time() < deadline, server.log_tail(3000)
        time.sleep(0.1)
    log = server.log_tail(1_000_000)
    assert "\x1b[" not in log, "ANSI colour codes in a log file"
    assert "Response {" not in log and "once: b\"" not in log, "Debug dumps in the log"
    assert "grid buckets" in log and "disk power is simulated" in log
    assert "pf-e2e-secret-key" not in log


def test_curl_sigv4_reaches_the_admin_endpoints_without_extra_headers(server):
    import shutil
    curl = shutil.which("curl")
    assert curl, "curl is not installed"
    from conftest import SECRET_KEY
    r = subprocess_run([curl, "-sS", "-w", "\n%{http_code}", "--aws-sigv4", "aws:amz:us-east-1:s3",
                        "--user", f"{ACCESS_KEY}:{SECRET_KEY}", f"{server.endpoint}/_permafrost/api/v1/datasets"])
    body, code = r.stdout.rsplit("\n", 1)
    assert code == "200", r.stdout + r.stderr
    assert isinstance(json.loads(body), list)
    r = subprocess_run([curl, "-sS", "-w", "\n%{http_code}", "--aws-sigv4", "aws:amz:us-east-1:s3",
                        "--user", f"{ACCESS_KEY}:wrong-secret", f"{server.endpoint}/_permafrost/status"])
    assert r.stdout.rsplit("\n", 1)[1] == "403"


def subprocess_run(cmd):
    import subprocess
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_a_cli_upload_cut_short_reports_the_servers_answer_and_no_signed_url(server, tmp_path):
    from conftest import SECRET_KEY, binary
    big = tmp_path / "big.bin"
    big.write_bytes(b"\0" * (20 << 20))
    r = subprocess_run([str(binary()), "put", str(big), "no-such-bucket-here/x.bin", "--endpoint", server.endpoint,
                        "--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
    assert r.returncode == 1
    assert "NoSuchBucket" in r.stderr, r.stderr
    assert "X-Amz-Signature" not in r.stderr and "X-Amz-Credential" not in r.stderr, r.stderr
