"""Multipart objects read and described as AWS S3 answers (boto3 against the real server):

- CompleteMultipartUpload retried after it succeeded answers `200` with the same result while the version it created
  exists (also after a restart: the catalog remembers completions); a different part list is `400 InvalidPart`; a
  completion whose object was deleted since is `404 NoSuchUpload`.
- `GET`/`HEAD ?partNumber=N`: `206` with the part's bytes, `Content-Range` and `x-amz-mp-parts-count`; an object
  uploaded whole is its own part 1 (no parts count); a part beyond the last is `416 InvalidPartNumber`; a part number
  with a `Range` is `400 InvalidRequest`.
- GetObjectAttributes: ETag, Checksum, ObjectSize, StorageClass and ObjectParts paged by `MaxParts` and
  `PartNumberMarker`, with `Last-Modified` and `x-amz-version-id`.
- `x-amz-delete-marker` on DELETE, on GET/HEAD of a key whose newest version is a delete marker (`404 NoSuchKey`)
  and of a delete marker's version id (`405 MethodNotAllowed` with `Last-Modified`); `x-amz-tagging-count` on GET.
"""

import time
import uuid

import pytest
from botocore.exceptions import ClientError

from admin import STATE_HEADER, evict
from conftest import Server, client

MIB = 1 << 20
# Three parts: two of the 5 MiB minimum and a short last one.
PART_SIZES = (5 * MIB, 5 * MIB, MIB + 123)


def part_bodies():
    return [bytes([(i * 7 + n) % 251 for i in range(256)]) * (size // 256) + bytes(size % 256)
            for n, size in enumerate(PART_SIZES)]


def upload_parts(s3, bucket, key, bodies):
    """Create an upload and send its parts; returns (upload id, [{PartNumber, ETag}])."""
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts = []
    for n, body in enumerate(bodies, start=1):
        r = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=n, Body=body)
        parts.append({"PartNumber": n, "ETag": r["ETag"]})
    return upload_id, parts


def complete(s3, bucket, key, upload_id, parts):
    return s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id,
                                        MultipartUpload={"Parts": parts})


RESULT_FIELDS = ("Location", "Bucket", "Key", "ETag", "VersionId", "ChecksumCRC64NVME", "ChecksumCRC32",
                 "ChecksumType")


def result_of(r):
    return {f: r.get(f) for f in RESULT_FIELDS}


def error_of(excinfo):
    e = excinfo.value.response
    return e["ResponseMetadata"]["HTTPStatusCode"], e["Error"]["Code"], e["ResponseMetadata"]["HTTPHeaders"]


def multipart_object(s3, bucket, key="three-parts.bin"):
    bodies = part_bodies()
    upload_id, parts = upload_parts(s3, bucket, key, bodies)
    complete(s3, bucket, key, upload_id, parts)
    return key, bodies


@pytest.fixture
def versioned(s3, bucket):
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    return bucket


@pytest.mark.parametrize("versioning", [False, True])
def test_a_completion_retried_after_success_gets_the_same_answer(s3, bucket, versioning):
    if versioning:
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    key = "retried.bin"
    bodies = part_bodies()
    upload_id, parts = upload_parts(s3, bucket, key, bodies)
    first = complete(s3, bucket, key, upload_id, parts)
    assert first["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert first["ETag"].endswith('-3"')
    assert (first.get("VersionId") is not None) == versioning
    again = complete(s3, bucket, key, upload_id, parts)
    assert again["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert result_of(again) == result_of(first)
    # The object is intact and the retry made no new version.
    got = s3.get_object(Bucket=bucket, Key=key)
    assert got["Body"].read() == b"".join(bodies)
    assert got["ETag"] == first["ETag"]
    if versioning:
        versions = s3.list_object_versions(Bucket=bucket, Prefix=key)["Versions"]
        assert [v["VersionId"] for v in versions] == [first["VersionId"]]

    # Another part list for the same upload id is refused, and changes nothing.
    with pytest.raises(ClientError) as excinfo:
        complete(s3, bucket, key, upload_id, parts[:2])
    status, code, _ = error_of(excinfo)
    assert (status, code) == (400, "InvalidPart")
    wrong_etag = [dict(parts[0], ETag='"' + "0" * 32 + '"'), *parts[1:]]
    with pytest.raises(ClientError) as excinfo:
        complete(s3, bucket, key, upload_id, wrong_etag)
    assert error_of(excinfo)[:2] == (400, "InvalidPart")
    assert s3.head_object(Bucket=bucket, Key=key)["ETag"] == first["ETag"]

    # Once the version it created is gone, the upload is gone too.
    if versioning:
        s3.delete_object(Bucket=bucket, Key=key, VersionId=first["VersionId"])
    else:
        s3.delete_object(Bucket=bucket, Key=key)
    with pytest.raises(ClientError) as excinfo:
        complete(s3, bucket, key, upload_id, parts)
    assert error_of(excinfo)[:2] == (404, "NoSuchUpload")


def test_an_unknown_upload_id_is_no_such_upload(s3, bucket):
    with pytest.raises(ClientError) as excinfo:
        complete(s3, bucket, "k", "0" * 32, [{"PartNumber": 1, "ETag": '"' + "0" * 32 + '"'}])
    assert error_of(excinfo)[:2] == (404, "NoSuchUpload")


def test_a_completion_is_remembered_across_a_restart(tmp_path):
    server = Server(tmp_path / "data")
    server.start()
    try:
        s3 = client(server.endpoint)
        bucket = f"t-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(Bucket=bucket)
        bodies = part_bodies()
        upload_id, parts = upload_parts(s3, bucket, "kept.bin", bodies)
        first = complete(s3, bucket, "kept.bin", upload_id, parts)
        assert server.stop() == 0
        server.start()
        s3 = client(server.endpoint)
        again = complete(s3, bucket, "kept.bin", upload_id, parts)
        assert again["ResponseMetadata"]["HTTPStatusCode"] == 200
        assert result_of(again) == result_of(first)
        assert s3.get_object(Bucket=bucket, Key="kept.bin")["Body"].read() == b"".join(bodies)
    finally:
        server.kill()


def test_reads_by_part_number_of_a_three_part_object(s3, bucket):
    key, bodies = multipart_object(s3, bucket)
    total = sum(PART_SIZES)
    etag = s3.head_object(Bucket=bucket, Key=key)["ETag"]
    offset = 0
    for n, body in enumerate(bodies, start=1):
        last = offset + len(body) - 1
        got = s3.get_object(Bucket=bucket, Key=key, PartNumber=n)
        headers = got["ResponseMetadata"]["HTTPHeaders"]
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert got["Body"].read() == body
        assert got["ContentLength"] == len(body)
        assert got["ContentRange"] == f"bytes {offset}-{last}/{total}"
        assert got["PartsCount"] == 3
        assert headers["x-amz-mp-parts-count"] == "3"
        assert got["ETag"] == etag
        head = s3.head_object(Bucket=bucket, Key=key, PartNumber=n)
        assert head["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert head["ContentLength"] == len(body)
        assert head["ContentRange"] == f"bytes {offset}-{last}/{total}"
        assert head["PartsCount"] == 3
        assert head["ETag"] == etag
        offset += len(body)
    # HEAD and GET without a part number say nothing of parts.
    assert "PartsCount" not in s3.head_object(Bucket=bucket, Key=key)

    with pytest.raises(ClientError) as excinfo:
        s3.get_object(Bucket=bucket, Key=key, PartNumber=4)
    assert error_of(excinfo)[:2] == (416, "InvalidPartNumber")
    with pytest.raises(ClientError) as excinfo:
        s3.head_object(Bucket=bucket, Key=key, PartNumber=4)
    assert excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"] == 416
    with pytest.raises(ClientError) as excinfo:
        s3.get_object(Bucket=bucket, Key=key, PartNumber=2, Range="bytes=0-9")
    assert error_of(excinfo)[:2] == (400, "InvalidRequest")
    with pytest.raises(ClientError) as excinfo:
        s3.get_object(Bucket=bucket, Key=key, PartNumber=10001)
    assert error_of(excinfo)[:2] == (400, "InvalidArgument")


def test_parts_read_back_from_the_grid_after_eviction(s3, server, bucket):
    """Part reads of a persisted object whose cache copy is gone: read from the disks, verified as range reads."""
    key, bodies = multipart_object(s3, bucket, "persisted.bin")
    deadline = time.time() + 120
    while s3.head_object(Bucket=bucket, Key=key)["ResponseMetadata"]["HTTPHeaders"].get(STATE_HEADER) != "persisted":
        assert time.time() < deadline, "not persisted after 120 s"
        time.sleep(0.2)
    assert evict(server.endpoint) > 0
    for n in (3, 1, 2):
        got = s3.get_object(Bucket=bucket, Key=key, PartNumber=n)
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert got["Body"].read() == bodies[n - 1]
        assert got["PartsCount"] == 3


def test_part_number_one_of_an_object_uploaded_whole_is_all_of_it(s3, bucket):
    body = b"uploaded in one piece " * 100
    s3.put_object(Bucket=bucket, Key="whole.txt", Body=body)
    got = s3.get_object(Bucket=bucket, Key="whole.txt", PartNumber=1)
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert got["Body"].read() == body
    assert got["ContentRange"] == f"bytes 0-{len(body) - 1}/{len(body)}"
    assert "PartsCount" not in got
    assert "x-amz-mp-parts-count" not in got["ResponseMetadata"]["HTTPHeaders"]
    head = s3.head_object(Bucket=bucket, Key="whole.txt", PartNumber=1)
    assert head["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert head["ContentLength"] == len(body)
    assert "PartsCount" not in head
    with pytest.raises(ClientError) as excinfo:
        s3.get_object(Bucket=bucket, Key="whole.txt", PartNumber=2)
    assert error_of(excinfo)[:2] == (416, "InvalidPartNumber")


ALL_ATTRIBUTES = ["ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"]


def test_get_object_attributes_of_a_multipart_object_pages_its_parts(s3, versioned):
    bucket = versioned
    key, bodies = multipart_object(s3, bucket)
    head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    first = s3.get_object_attributes(Bucket=bucket, Key=key, ObjectAttributes=ALL_ATTRIBUTES, MaxParts=2)
    headers = first["ResponseMetadata"]["HTTPHeaders"]
    assert first["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert first["ETag"].strip('"') == head["ETag"].strip('"')
    assert first["ObjectSize"] == sum(PART_SIZES)
    assert first["StorageClass"] == "STANDARD"
    assert first["VersionId"] == head["VersionId"]
    assert headers["x-amz-version-id"] == head["VersionId"]
    assert first["LastModified"] == head["LastModified"]
    assert first["Checksum"]["ChecksumCRC64NVME"] == head["ChecksumCRC64NVME"]
    assert first["Checksum"]["ChecksumType"] == "FULL_OBJECT"
    parts = first["ObjectParts"]
    assert parts["TotalPartsCount"] == 3
    assert parts["PartNumberMarker"] == 0
    assert parts["NextPartNumberMarker"] == 2
    assert parts["MaxParts"] == 2
    assert parts["IsTruncated"] is True
    assert [(p["PartNumber"], p["Size"]) for p in parts["Parts"]] == [(1, PART_SIZES[0]), (2, PART_SIZES[1])]
    assert all(p.get("ChecksumCRC64NVME") for p in parts["Parts"])

    rest = s3.get_object_attributes(Bucket=bucket, Key=key, ObjectAttributes=["ObjectParts"], MaxParts=2,
                                    PartNumberMarker=2)["ObjectParts"]
    assert rest["PartNumberMarker"] == 2
    assert rest["NextPartNumberMarker"] == 3
    assert rest["IsTruncated"] is False
    assert [(p["PartNumber"], p["Size"]) for p in rest["Parts"]] == [(3, PART_SIZES[2])]

    # Only what was asked for.
    only_size = s3.get_object_attributes(Bucket=bucket, Key=key, ObjectAttributes=["ObjectSize"])
    assert only_size["ObjectSize"] == sum(PART_SIZES)
    assert "ObjectParts" not in only_size and "ETag" not in only_size


def test_get_object_attributes_of_an_object_uploaded_whole_has_no_parts(s3, bucket):
    s3.put_object(Bucket=bucket, Key="small", Body=b"0123456789")
    r = s3.get_object_attributes(Bucket=bucket, Key="small", ObjectAttributes=ALL_ATTRIBUTES)
    assert r["ObjectSize"] == 10
    assert "ObjectParts" not in r
    # No versioning: no version id header.
    assert "x-amz-version-id" not in r["ResponseMetadata"]["HTTPHeaders"]


def test_delete_marker_headers_on_delete_get_and_head(s3, versioned):
    bucket = versioned
    put = s3.put_object(Bucket=bucket, Key="doc", Body=b"first")
    deleted = s3.delete_object(Bucket=bucket, Key="doc")
    assert deleted["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert deleted["DeleteMarker"] is True
    marker = deleted["VersionId"]
    assert marker and marker != put["VersionId"]
    assert deleted["ResponseMetadata"]["HTTPHeaders"]["x-amz-delete-marker"] == "true"

    # The newest version is a delete marker: 404 NoSuchKey, saying so.
    with pytest.raises(ClientError) as excinfo:
        s3.get_object(Bucket=bucket, Key="doc")
    status, code, headers = error_of(excinfo)
    assert (status, code) == (404, "NoSuchKey")
    assert headers["x-amz-delete-marker"] == "true"
    assert headers["x-amz-version-id"] == marker
    with pytest.raises(ClientError) as excinfo:
        s3.head_object(Bucket=bucket, Key="doc")
    status, _, headers = error_of(excinfo)
    assert status == 404
    assert headers["x-amz-delete-marker"] == "true"
    assert headers["x-amz-version-id"] == marker

    # The delete marker's own version: 405 MethodNotAllowed with its Last-Modified.
    with pytest.raises(ClientError) as excinfo:
        s3.get_object(Bucket=bucket, Key="doc", VersionId=marker)
    status, code, headers = error_of(excinfo)
    assert (status, code) == (405, "MethodNotAllowed")
    assert headers["x-amz-delete-marker"] == "true"
    assert headers["x-amz-version-id"] == marker
    assert "last-modified" in headers
    with pytest.raises(ClientError) as excinfo:
        s3.head_object(Bucket=bucket, Key="doc", VersionId=marker)
    status, _, headers = error_of(excinfo)
    assert status == 405
    assert headers["x-amz-delete-marker"] == "true"
    assert "last-modified" in headers

    # The older version still reads; a key that never existed has no marker header.
    assert s3.get_object(Bucket=bucket, Key="doc", VersionId=put["VersionId"])["Body"].read() == b"first"
    with pytest.raises(ClientError) as excinfo:
        s3.get_object(Bucket=bucket, Key="never")
    status, code, headers = error_of(excinfo)
    assert (status, code) == (404, "NoSuchKey")
    assert "x-amz-delete-marker" not in headers

    # Removing the marker says it removed one, and the object is back.
    removed = s3.delete_object(Bucket=bucket, Key="doc", VersionId=marker)
    assert removed["DeleteMarker"] is True
    assert removed["VersionId"] == marker
    assert s3.get_object(Bucket=bucket, Key="doc")["Body"].read() == b"first"


def test_delete_in_an_unversioned_bucket_names_no_marker(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    deleted = s3.delete_object(Bucket=bucket, Key="k")
    assert deleted["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert "DeleteMarker" not in deleted
    assert "VersionId" not in deleted


def test_get_counts_the_tags_of_a_version(s3, bucket):
    s3.put_object(Bucket=bucket, Key="tagged", Body=b"x", Tagging="project=vlbi&site=effelsberg")
    got = s3.get_object(Bucket=bucket, Key="tagged")
    assert got["TagCount"] == 2
    assert got["ResponseMetadata"]["HTTPHeaders"]["x-amz-tagging-count"] == "2"
    s3.put_object(Bucket=bucket, Key="plain", Body=b"x")
    plain = s3.get_object(Bucket=bucket, Key="plain")
    assert "TagCount" not in plain
    assert "x-amz-tagging-count" not in plain["ResponseMetadata"]["HTTPHeaders"]
