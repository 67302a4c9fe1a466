"""boto3 against the real server: the operations S3 applications use, unmodified."""

import hashlib
import os
import time

import pytest
import requests

from conftest import client


def random_bytes(n: int, seed: int = 0) -> bytes:
    # Fast deterministic incompressible data.
    return hashlib.shake_256(seed.to_bytes(8, "little")).digest(n) if n <= 1 << 20 else os.urandom(n)


def test_put_then_get_returns_the_same_bytes_and_metadata(s3, bucket):
    data = random_bytes(3_000_001, 1)
    put = s3.put_object(Bucket=bucket, Key="a/b.bin", Body=data, Metadata={"colour": "blue"},
                        ContentType="application/x-test")
    assert put["ETag"] == '"%s"' % hashlib.md5(data).hexdigest()
    got = s3.get_object(Bucket=bucket, Key="a/b.bin")
    assert got["Body"].read() == data
    assert got["Metadata"] == {"colour": "blue"}
    assert got["ContentType"] == "application/x-test"
    assert got["ETag"] == put["ETag"]
    assert got["ContentLength"] == len(data)


def test_ranged_gets_return_exactly_the_requested_bytes(s3, bucket):
    data = random_bytes(2_500_000, 2)
    s3.put_object(Bucket=bucket, Key="r", Body=data)
    for header, expected in [("bytes=0-0", data[:1]), ("bytes=100-199", data[100:200]),
                             ("bytes=1048570-1048600", data[1048570:1048601]),
                             ("bytes=2499990-", data[2499990:]), ("bytes=-7", data[-7:]),
                             ("bytes=2000000-9999999", data[2000000:])]:
        got = s3.get_object(Bucket=bucket, Key="r", Range=header)
        assert got["Body"].read() == expected, header
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert got["ContentRange"].endswith("/%d" % len(data))


def test_unsatisfiable_range_is_416_invalid_range(s3, bucket):
    s3.put_object(Bucket=bucket, Key="small", Body=b"0123456789")
    with pytest.raises(s3.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="small", Range="bytes=10-20")
    assert e.value.response["Error"]["Code"] == "InvalidRange"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 416


def test_multipart_upload_of_200_mb_reads_back_byte_exact(s3, bucket, tmp_path):
    from boto3.s3.transfer import TransferConfig
    size = 200 * 1000 * 1000 + 12345
    path = tmp_path / "big.bin"
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        remaining = size
        while remaining:
            block = os.urandom(min(remaining, 8 << 20))
            digest.update(block)
            f.write(block)
            remaining -= len(block)
    config = TransferConfig(multipart_threshold=16 << 20, multipart_chunksize=16 << 20, max_concurrency=4)
    started = time.time()
    s3.upload_file(str(path), bucket, "big/object.bin", Config=config)
    upload_s = time.time() - started
    head = s3.head_object(Bucket=bucket, Key="big/object.bin")
    assert head["ContentLength"] == size
    assert head["ETag"].endswith('-%d"' % ((size + (16 << 20) - 1) // (16 << 20)))
    started = time.time()
    body = s3.get_object(Bucket=bucket, Key="big/object.bin")["Body"]
    got = hashlib.sha256()
    for piece in iter(lambda: body.read(4 << 20), b""):
        got.update(piece)
    download_s = time.time() - started
    assert got.hexdigest() == digest.hexdigest()
    print(f"200 MB multipart: upload {upload_s:.1f} s, download {download_s:.1f} s")


def test_multipart_parts_can_be_listed_aborted_and_listed_as_uploads(s3, bucket):
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp/x")["UploadId"]
    part = b"p" * (5 << 20)
    e1 = s3.upload_part(Bucket=bucket, Key="mp/x", UploadId=upload, PartNumber=1, Body=part)["ETag"]
    s3.upload_part(Bucket=bucket, Key="mp/x", UploadId=upload, PartNumber=2, Body=b"tail")
    parts = s3.list_parts(Bucket=bucket, Key="mp/x", UploadId=upload)["Parts"]
    assert [(p["PartNumber"], p["Size"]) for p in parts] == [(1, 5 << 20), (2, 4)]
    assert parts[0]["ETag"] == e1
    uploads = s3.list_multipart_uploads(Bucket=bucket)["Uploads"]
    assert [u["UploadId"] for u in uploads] == [upload]
    s3.abort_multipart_upload(Bucket=bucket, Key="mp/x", UploadId=upload)
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    with pytest.raises(s3.exceptions.ClientError) as e:
        s3.list_parts(Bucket=bucket, Key="mp/x", UploadId=upload)
    assert e.value.response["Error"]["Code"] == "NoSuchUpload"
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)


def test_completing_with_a_small_middle_part_is_entity_too_small_and_stores_nothing(s3, bucket):
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp/small")["UploadId"]
    e1 = s3.upload_part(Bucket=bucket, Key="mp/small", UploadId=upload, PartNumber=1, Body=b"a" * 100)["ETag"]
    e2 = s3.upload_part(Bucket=bucket, Key="mp/small", UploadId=upload, PartNumber=2, Body=b"b" * 100)["ETag"]
    with pytest.raises(s3.exceptions.ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="mp/small", UploadId=upload, MultipartUpload={
            "Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
    assert e.value.response["Error"]["Code"] == "EntityTooSmall"
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)


def test_list_with_prefix_delimiter_and_pagination(s3, bucket):
    keys = ["a/1", "a/2", "a/b/3", "b/4", "c", "d/5/6"]
    for k in keys:
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())
    top = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [o["Key"] for o in top["Contents"]] == ["c"]
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["a/", "b/", "d/"]
    under_a = s3.list_objects_v2(Bucket=bucket, Prefix="a/", Delimiter="/")
    assert [o["Key"] for o in under_a["Contents"]] == ["a/1", "a/2"]
    assert [p["Prefix"] for p in under_a["CommonPrefixes"]] == ["a/b/"]
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="a/")["Contents"]] == ["a/1", "a/2", "a/b/3"]
    # Pagination with max-keys and continuation tokens visits every key once, in order.
    seen, token = [], None
    while True:
        kwargs = {"Bucket": bucket, "MaxKeys": 2}
        if token:
            kwargs["ContinuationToken"] = token
        page = s3.list_objects_v2(**kwargs)
        seen += [o["Key"] for o in page.get("Contents", [])]
        assert page["KeyCount"] <= 2
        if not page["IsTruncated"]:
            break
        token = page["NextContinuationToken"]
    assert seen == sorted(keys)
    # The paginator and ListObjects v1 agree.
    paginated = [o["Key"] for p in s3.get_paginator("list_objects").paginate(Bucket=bucket, PaginationConfig={"PageSize": 4})
                 for o in p.get("Contents", [])]
    assert paginated == sorted(keys)
    assert s3.list_objects_v2(Bucket=bucket, StartAfter="b/4")["Contents"][0]["Key"] == "c"


def test_delete_and_delete_objects_remove_keys(s3, bucket):
    for k in ["x", "y", "z"]:
        s3.put_object(Bucket=bucket, Key=k, Body=b"1")
    s3.delete_object(Bucket=bucket, Key="x")
    s3.delete_object(Bucket=bucket, Key="never-existed")  # S3: deleting a missing key succeeds
    result = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "y"}, {"Key": "z"}]})
    assert sorted(d["Key"] for d in result["Deleted"]) == ["y", "z"]
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)
    s3.delete_bucket(Bucket=bucket)
    assert bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def test_copy_object_keeps_or_replaces_metadata(s3, bucket):
    s3.put_object(Bucket=bucket, Key="src", Body=b"copy me", Metadata={"a": "1"})
    s3.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"})
    got = s3.get_object(Bucket=bucket, Key="dst")
    assert got["Body"].read() == b"copy me" and got["Metadata"] == {"a": "1"}
    s3.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"},
                   MetadataDirective="REPLACE", Metadata={"b": "2"})
    assert s3.head_object(Bucket=bucket, Key="dst")["Metadata"] == {"b": "2"}


def test_presigned_get_and_put_work_without_other_credentials(s3, bucket):
    url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "pre/put"}, ExpiresIn=300)
    assert requests.put(url, data=b"presigned body").status_code == 200
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "pre/put"}, ExpiresIn=300)
    r = requests.get(url)
    assert r.status_code == 200 and r.content == b"presigned body"


def test_head_shows_the_persistence_state_and_it_reaches_persisted(s3, bucket):
    s3.put_object(Bucket=bucket, Key="state", Body=random_bytes(100_000, 3))
    states = []
    deadline = time.time() + 30
    while time.time() < deadline:
        state = s3.head_object(Bucket=bucket, Key="state")["ResponseMetadata"]["HTTPHeaders"]["x-permafrost-state"]
        states.append(state)
        if state == "persisted":
            break
        time.sleep(0.1)
    assert states[-1] == "persisted", states
    assert set(states) <= {"cached", "placed", "persisting", "persisted"}


def test_buckets_can_be_created_listed_and_headed(s3):
    s3.create_bucket(Bucket="bucket-life")
    assert "bucket-life" in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    s3.head_bucket(Bucket="bucket-life")
    with pytest.raises(s3.exceptions.ClientError) as e:
        s3.create_bucket(Bucket="bucket-life")
    assert e.value.response["Error"]["Code"] == "BucketAlreadyOwnedByYou"
    s3.delete_bucket(Bucket="bucket-life")
    with pytest.raises(s3.exceptions.ClientError) as e:
        s3.head_bucket(Bucket="bucket-life")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_health_needs_no_signature_and_the_reserved_prefix_is_not_a_bucket(server, s3):
    r = requests.get(server.endpoint + "/_permafrost/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    assert requests.get(server.endpoint + "/_permafrost/nothing").status_code == 404
    with pytest.raises(Exception):
        s3.create_bucket(Bucket="_permafrost")
