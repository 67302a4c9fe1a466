"""Conditional requests against the real server, as AWS documents them: GET/HEAD with If-Match, If-None-Match,
If-Modified-Since and If-Unmodified-Since (RFC 7232 precedence; 304 with ETag and Last-Modified, 412
PreconditionFailed), CopyObject and UploadPartCopy with x-amz-copy-source-if-*, and the conditional writes
If-None-Match: * and If-Match on PutObject and CompleteMultipartUpload, including two clients racing to create
the same key (exactly one wins)."""

import datetime
import hashlib
import threading

import pytest
import requests
from botocore.exceptions import ClientError

from admin import evict, spun_up_since, status, wait_all_off, wait_persisted
from conftest import Server, client

DAY = datetime.timedelta(days=1)


def body(n: int, seed: int) -> bytes:
    return hashlib.shake_256(seed.to_bytes(8, "little")).digest(n)


def answer(call, **kwargs):
    """(HTTP status, error code or None, response headers) of a boto3 call that may fail."""
    try:
        r = call(**kwargs)
        return r["ResponseMetadata"]["HTTPStatusCode"], None, r["ResponseMetadata"]["HTTPHeaders"], r
    except ClientError as e:
        meta = e.response["ResponseMetadata"]
        return meta["HTTPStatusCode"], e.response["Error"]["Code"], meta.get("HTTPHeaders", {}), e.response


@pytest.fixture
def obj(s3, bucket):
    """An object and what a condition compares: (key, ETag with quotes, Last-Modified as a datetime)."""
    s3.put_object(Bucket=bucket, Key="obj", Body=b"conditional body")
    head = s3.head_object(Bucket=bucket, Key="obj")
    return "obj", head["ETag"], head["LastModified"]


CASES_ALONE = [
    # (name, conditions from (etag, last modified), expected status)
    ("if-match right", lambda e, t: {"IfMatch": e}, 200),
    ("if-match unquoted", lambda e, t: {"IfMatch": e.strip('"')}, 200),
    ("if-match star", lambda e, t: {"IfMatch": "*"}, 200),
    ("if-match list", lambda e, t: {"IfMatch": '"0000", ' + e}, 200),
    ("if-match wrong", lambda e, t: {"IfMatch": '"0000"'}, 412),
    ("if-none-match right", lambda e, t: {"IfNoneMatch": e}, 304),
    ("if-none-match unquoted", lambda e, t: {"IfNoneMatch": e.strip('"')}, 304),
    ("if-none-match star", lambda e, t: {"IfNoneMatch": "*"}, 304),
    ("if-none-match list", lambda e, t: {"IfNoneMatch": '"0000", ' + e}, 304),
    ("if-none-match wrong", lambda e, t: {"IfNoneMatch": '"0000", "1111"'}, 200),
    ("if-modified-since before", lambda e, t: {"IfModifiedSince": t - DAY}, 200),
    ("if-modified-since same second", lambda e, t: {"IfModifiedSince": t}, 304),
    ("if-modified-since later", lambda e, t: {"IfModifiedSince": t + DAY}, 304),
    ("if-unmodified-since same second", lambda e, t: {"IfUnmodifiedSince": t}, 200),
    ("if-unmodified-since later", lambda e, t: {"IfUnmodifiedSince": t + DAY}, 200),
    ("if-unmodified-since before", lambda e, t: {"IfUnmodifiedSince": t - DAY}, 412),
]

CASES_COMBINED = [
    # AWS: If-Match true and If-Unmodified-Since false → 200.
    ("if-match true, if-unmodified-since false", lambda e, t: {"IfMatch": e, "IfUnmodifiedSince": t - DAY}, 200),
    # AWS: If-None-Match false and If-Modified-Since true → 304.
    ("if-none-match false, if-modified-since true", lambda e, t: {"IfNoneMatch": e, "IfModifiedSince": t - DAY}, 304),
    # RFC 7232: If-None-Match true means If-Modified-Since is not evaluated.
    ("if-none-match true, if-modified-since false",
     lambda e, t: {"IfNoneMatch": '"0000"', "IfModifiedSince": t + DAY}, 200),
    # 412 is decided before 304.
    ("if-match false, if-none-match false", lambda e, t: {"IfMatch": '"0000"', "IfNoneMatch": e}, 412),
    ("if-unmodified-since false, if-none-match false",
     lambda e, t: {"IfUnmodifiedSince": t - DAY, "IfNoneMatch": e}, 412),
    ("if-match true, if-none-match true", lambda e, t: {"IfMatch": e, "IfNoneMatch": '"0000"'}, 200),
    ("all four, all true",
     lambda e, t: {"IfMatch": e, "IfNoneMatch": '"0000"', "IfModifiedSince": t - DAY, "IfUnmodifiedSince": t}, 200),
]


@pytest.mark.parametrize("case", CASES_ALONE + CASES_COMBINED, ids=lambda c: c[0])
def test_get_and_head_answer_each_condition_as_aws_does(s3, bucket, obj, case):
    key, etag, modified = obj
    name, conditions, expected = case
    for method in (s3.get_object, s3.head_object):
        status, code, headers, r = answer(method, Bucket=bucket, Key=key, **conditions(etag, modified))
        what = f"{method.__name__} {name}"
        assert status == expected, f"{what}: {status} {code}"
        if expected == 200:
            assert headers["etag"] == etag, what
            if method == s3.get_object:
                assert r["Body"].read() == b"conditional body", what
        elif expected == 304:
            assert headers.get("etag") == etag, f"{what}: {headers}"
            assert headers.get("last-modified") == modified.strftime("%a, %d %b %Y %H:%M:%S GMT"), what
        elif expected == 412 and method == s3.get_object:
            assert code == "PreconditionFailed", what


def test_not_modified_has_no_body_and_the_raw_headers_are_read_as_sent(s3, bucket, obj):
    """Raw HTTP through a presigned URL (only the host header is signed, so conditions can be added)."""
    key, etag, modified = obj
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=300)
    r = requests.get(url, headers={"If-None-Match": etag})
    assert r.status_code == 304 and r.content == b""
    assert r.headers["ETag"] == etag
    last_modified = r.headers["Last-Modified"]
    assert last_modified == modified.strftime("%a, %d %b %Y %H:%M:%S GMT")
    r = requests.get(url, headers={"If-None-Match": f'W/"0000", W/{etag}'})
    assert r.status_code == 304
    r = requests.get(url, headers={"If-Match": f'"0000",{etag}'})
    assert r.status_code == 200 and r.content == b"conditional body"
    r = requests.get(url, headers={"If-Match": '"0000"'})
    assert r.status_code == 412 and b"<Code>PreconditionFailed</Code>" in r.content
    r = requests.get(url, headers={"If-Modified-Since": last_modified})
    assert r.status_code == 304 and r.content == b""


def test_conditions_apply_to_the_version_asked_for(s3):
    b = "t-cond-versions"
    s3.create_bucket(Bucket=b)
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    old = s3.put_object(Bucket=b, Key="k", Body=b"old")
    new = s3.put_object(Bucket=b, Key="k", Body=b"new")
    got = s3.get_object(Bucket=b, Key="k", VersionId=old["VersionId"], IfMatch=old["ETag"])
    assert got["Body"].read() == b"old"
    status, code, _, _ = answer(s3.get_object, Bucket=b, Key="k", IfMatch=old["ETag"])
    assert (status, code) == (412, "PreconditionFailed")
    status, _, _, _ = answer(s3.head_object, Bucket=b, Key="k", IfNoneMatch=new["ETag"])
    assert status == 304
    # A missing key is still 404, whatever the conditions.
    status, code, _, _ = answer(s3.get_object, Bucket=b, Key="missing", IfMatch="*")
    assert (status, code) == (404, "NoSuchKey")


COPY_CASES = [
    ("if-match right", lambda e, t: {"CopySourceIfMatch": e}, 200),
    ("if-match unquoted", lambda e, t: {"CopySourceIfMatch": e.strip('"')}, 200),
    ("if-match wrong", lambda e, t: {"CopySourceIfMatch": '"0000"'}, 412),
    ("if-none-match right", lambda e, t: {"CopySourceIfNoneMatch": e}, 412),
    ("if-none-match wrong", lambda e, t: {"CopySourceIfNoneMatch": '"0000"'}, 200),
    ("if-modified-since before", lambda e, t: {"CopySourceIfModifiedSince": t - DAY}, 200),
    ("if-modified-since later", lambda e, t: {"CopySourceIfModifiedSince": t + DAY}, 412),
    ("if-unmodified-since later", lambda e, t: {"CopySourceIfUnmodifiedSince": t + DAY}, 200),
    ("if-unmodified-since before", lambda e, t: {"CopySourceIfUnmodifiedSince": t - DAY}, 412),
    # AWS: if-match true and if-unmodified-since false → the copy is made.
    ("if-match true, if-unmodified-since false",
     lambda e, t: {"CopySourceIfMatch": e, "CopySourceIfUnmodifiedSince": t - DAY}, 200),
    # AWS: if-none-match false and if-modified-since true → 412.
    ("if-none-match false, if-modified-since true",
     lambda e, t: {"CopySourceIfNoneMatch": e, "CopySourceIfModifiedSince": t - DAY}, 412),
]


@pytest.mark.parametrize("case", COPY_CASES, ids=lambda c: c[0])
def test_copy_object_checks_the_copy_source_conditions(s3, bucket, obj, case):
    key, etag, modified = obj
    name, conditions, expected = case
    status, code, _, _ = answer(s3.copy_object, Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": key},
                                **conditions(etag, modified))
    assert status == expected, f"{name}: {status} {code}"
    if expected == 412:
        assert code == "PreconditionFailed", name
        status, code, _, _ = answer(s3.head_object, Bucket=bucket, Key="copy")
        assert status == 404, f"{name}: a refused copy creates nothing"
    else:
        assert s3.get_object(Bucket=bucket, Key="copy")["Body"].read() == b"conditional body"


def test_upload_part_copy_checks_the_copy_source_conditions(s3, bucket, obj):
    key, etag, modified = obj
    upload = s3.create_multipart_upload(Bucket=bucket, Key="parts")["UploadId"]
    source = {"Bucket": bucket, "Key": key}
    for number, conditions in [(1, {"CopySourceIfMatch": '"0000"'}),
                               (2, {"CopySourceIfNoneMatch": etag}),
                               (3, {"CopySourceIfUnmodifiedSince": modified - DAY}),
                               (4, {"CopySourceIfModifiedSince": modified + DAY})]:
        status, code, _, _ = answer(s3.upload_part_copy, Bucket=bucket, Key="parts", UploadId=upload,
                                    PartNumber=number, CopySource=source, **conditions)
        assert (status, code) == (412, "PreconditionFailed"), conditions
    assert s3.list_parts(Bucket=bucket, Key="parts", UploadId=upload).get("Parts", []) == []
    copied = s3.upload_part_copy(Bucket=bucket, Key="parts", UploadId=upload, PartNumber=5, CopySource=source,
                                 CopySourceIfMatch=etag, CopySourceIfUnmodifiedSince=modified - DAY)
    s3.complete_multipart_upload(Bucket=bucket, Key="parts", UploadId=upload, MultipartUpload={
        "Parts": [{"PartNumber": 5, "ETag": copied["CopyPartResult"]["ETag"]}]})
    assert s3.get_object(Bucket=bucket, Key="parts")["Body"].read() == b"conditional body"


def test_put_if_none_match_creates_only_once(s3, bucket):
    first = s3.put_object(Bucket=bucket, Key="once", Body=b"first", IfNoneMatch="*")
    status, code, _, _ = answer(s3.put_object, Bucket=bucket, Key="once", Body=b"second", IfNoneMatch="*")
    assert (status, code) == (412, "PreconditionFailed")
    got = s3.get_object(Bucket=bucket, Key="once")
    assert got["Body"].read() == b"first" and got["ETag"] == first["ETag"]
    # Deleted: absent again.
    s3.delete_object(Bucket=bucket, Key="once")
    s3.put_object(Bucket=bucket, Key="once", Body=b"third", IfNoneMatch="*")
    # If-None-Match takes only *; If-Match and If-None-Match together are refused.
    status, code, _, _ = answer(s3.put_object, Bucket=bucket, Key="x", Body=b"x", IfNoneMatch=first["ETag"])
    assert (status, code) == (501, "NotImplemented")
    status, code, _, _ = answer(s3.put_object, Bucket=bucket, Key="x", Body=b"x", IfNoneMatch="*",
                                IfMatch=first["ETag"])
    assert (status, code) == (501, "NotImplemented")


def test_put_if_none_match_treats_a_delete_marker_as_absent(s3):
    b = "t-cond-marker"
    s3.create_bucket(Bucket=b)
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket=b, Key="k", Body=b"v1")
    status, _, _, _ = answer(s3.put_object, Bucket=b, Key="k", Body=b"v2", IfNoneMatch="*")
    assert status == 412
    s3.delete_object(Bucket=b, Key="k")  # a delete marker
    s3.put_object(Bucket=b, Key="k", Body=b"v3", IfNoneMatch="*")
    assert s3.get_object(Bucket=b, Key="k")["Body"].read() == b"v3"


def test_put_if_match_replaces_only_the_version_named(s3, bucket):
    status, code, _, _ = answer(s3.put_object, Bucket=bucket, Key="cas", Body=b"x", IfMatch='"0000"')
    assert (status, code) == (404, "NoSuchKey"), "no object: 404, as AWS answers"
    v1 = s3.put_object(Bucket=bucket, Key="cas", Body=b"v1")
    status, code, _, _ = answer(s3.put_object, Bucket=bucket, Key="cas", Body=b"lost", IfMatch='"0000"')
    assert (status, code) == (412, "PreconditionFailed")
    assert s3.get_object(Bucket=bucket, Key="cas")["Body"].read() == b"v1"
    v2 = s3.put_object(Bucket=bucket, Key="cas", Body=b"v2", IfMatch=v1["ETag"])
    v3 = s3.put_object(Bucket=bucket, Key="cas", Body=b"v3", IfMatch=v2["ETag"].strip('"'))
    # A stale ETag (v1's) no longer matches.
    status, code, _, _ = answer(s3.put_object, Bucket=bucket, Key="cas", Body=b"stale", IfMatch=v1["ETag"])
    assert (status, code) == (412, "PreconditionFailed")
    got = s3.get_object(Bucket=bucket, Key="cas")
    assert got["Body"].read() == b"v3" and got["ETag"] == v3["ETag"]


def race(endpoint: str, bucket: str, key: str, bodies: list) -> list:
    """Each body PUT by its own client and thread at once under If-None-Match: *; (status, code) per body."""
    clients = [client(endpoint, retries=1) for _ in bodies]
    barrier = threading.Barrier(len(bodies))
    results = [None] * len(bodies)

    def put(i):
        barrier.wait()
        status, code, _, _ = answer(clients[i].put_object, Bucket=bucket, Key=key, Body=bodies[i], IfNoneMatch="*")
        results[i] = (status, code)

    threads = [threading.Thread(target=put, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


@pytest.mark.parametrize("size", [1000, 3_000_000], ids=["small", "streamed"])
def test_of_two_clients_racing_to_create_a_key_exactly_one_wins(server, s3, bucket, size):
    for round_ in range(8):
        key = f"lock-{round_}"
        bodies = [body(size, 2 * round_), body(size, 2 * round_ + 1)]
        results = race(server.endpoint, bucket, key, bodies)
        assert sorted(results) == [(200, None), (412, "PreconditionFailed")], f"round {round_}: {results}"
        winner = bodies[results.index((200, None))]
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == winner, f"round {round_}"


def test_complete_multipart_upload_with_if_none_match(s3, bucket):
    def upload(key: str, data: bytes) -> tuple:
        upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        part = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=1, Body=data)
        return upload_id, {"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]}

    first_id, first_parts = upload("mp", b"first upload")
    done = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=first_id, MultipartUpload=first_parts,
                                        IfNoneMatch="*")
    # A retry of the same completion (its answer lost) gets the same answer, not a 412 for its own object.
    again = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=first_id, MultipartUpload=first_parts,
                                         IfNoneMatch="*")
    assert again["ETag"] == done["ETag"]
    second_id, second_parts = upload("mp", b"second upload")
    status, code, _, _ = answer(s3.complete_multipart_upload, Bucket=bucket, Key="mp", UploadId=second_id,
                                MultipartUpload=second_parts, IfNoneMatch="*")
    assert (status, code) == (412, "PreconditionFailed")
    assert s3.get_object(Bucket=bucket, Key="mp")["Body"].read() == b"first upload"
    # The refused upload is intact: its parts are listed, and it completes under If-Match of the current ETag.
    assert len(s3.list_parts(Bucket=bucket, Key="mp", UploadId=second_id)["Parts"]) == 1
    current = s3.head_object(Bucket=bucket, Key="mp")["ETag"]
    status, code, _, _ = answer(s3.complete_multipart_upload, Bucket=bucket, Key="mp", UploadId=second_id,
                                MultipartUpload=second_parts, IfMatch='"0000"')
    assert (status, code) == (412, "PreconditionFailed")
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=second_id, MultipartUpload=second_parts,
                                 IfMatch=current)
    assert s3.get_object(Bucket=bucket, Key="mp")["Body"].read() == b"second upload"


def test_copy_object_if_none_match_and_if_match_are_conditions_on_the_target(s3, bucket, obj):
    key, etag, _ = obj
    source = {"Bucket": bucket, "Key": key}
    s3.copy_object(Bucket=bucket, Key="target", CopySource=source, IfNoneMatch="*")
    status, code, _, _ = answer(s3.copy_object, Bucket=bucket, Key="target", CopySource=source, IfNoneMatch="*",
                                MetadataDirective="REPLACE", Metadata={"second": "copy"})
    assert (status, code) == (412, "PreconditionFailed")
    assert s3.head_object(Bucket=bucket, Key="target")["Metadata"] == {}
    status, code, _, _ = answer(s3.copy_object, Bucket=bucket, Key="target", CopySource=source, IfMatch='"0000"',
                                MetadataDirective="REPLACE", Metadata={"second": "copy"})
    assert (status, code) == (412, "PreconditionFailed")
    status, code, _, _ = answer(s3.copy_object, Bucket=bucket, Key="absent", CopySource=source, IfMatch=etag)
    assert (status, code) == (404, "NoSuchKey")
    s3.copy_object(Bucket=bucket, Key="target", CopySource=source, IfMatch=etag, MetadataDirective="REPLACE",
                   Metadata={"second": "copy"})
    assert s3.head_object(Bucket=bucket, Key="target")["Metadata"] == {"second": "copy"}


def test_a_refused_or_not_modified_read_of_a_sleeping_object_wakes_no_disk(tmp_path):
    """304 and 412 answers (GET, HEAD, CopyObject and UploadPartCopy sources) are decided from the catalog."""
    server = Server(tmp_path / "data")
    server.start()
    try:
        s3 = client(server.endpoint)
        s3.create_bucket(Bucket="sleepy")
        data = body(3_000_000, 7)
        etag = s3.put_object(Bucket="sleepy", Key="cold", Body=data)["ETag"]
        modified = s3.head_object(Bucket="sleepy", Key="cold")["LastModified"]
        wait_persisted(server.endpoint, expect_contents=1)
        evict(server.endpoint)
        before = wait_all_off(server.endpoint)
        upload = s3.create_multipart_upload(Bucket="sleepy", Key="parts")["UploadId"]
        source = {"Bucket": "sleepy", "Key": "cold"}
        refusals = [
            (s3.get_object, {"Bucket": "sleepy", "Key": "cold", "IfNoneMatch": etag}, 304),
            (s3.get_object, {"Bucket": "sleepy", "Key": "cold", "IfMatch": '"0000"'}, 412),
            (s3.get_object, {"Bucket": "sleepy", "Key": "cold", "IfModifiedSince": modified}, 304),
            (s3.get_object, {"Bucket": "sleepy", "Key": "cold", "IfUnmodifiedSince": modified - DAY}, 412),
            (s3.head_object, {"Bucket": "sleepy", "Key": "cold", "IfNoneMatch": etag}, 304),
            (s3.copy_object, {"Bucket": "sleepy", "Key": "copy", "CopySource": source,
                              "CopySourceIfNoneMatch": etag}, 412),
            (s3.upload_part_copy, {"Bucket": "sleepy", "Key": "parts", "UploadId": upload, "PartNumber": 1,
                                   "CopySource": source, "CopySourceIfMatch": '"0000"'}, 412),
        ]
        for call, kwargs, expected in refusals:
            status_, code, _, _ = answer(call, **kwargs)
            assert status_ == expected, f"{call.__name__} {kwargs}: {status_} {code}"
        woken = spun_up_since(before, status(server.endpoint))
        assert woken == {}, f"304/412 answers spun up disks {woken}"
        # The condition that holds reads the object from its disk (which the counters see).
        after = status(server.endpoint)
        got = s3.get_object(Bucket="sleepy", Key="cold", IfMatch=etag, IfModifiedSince=modified - DAY)
        assert got["Body"].read() == data
        assert spun_up_since(after, status(server.endpoint)), "the read woke no disk: the counters see nothing"
    finally:
        server.stop()
