"""Bad input gets the right S3 error, and stores nothing."""

import base64
import hashlib
import time
import zlib

import pytest
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from conftest import ACCESS_KEY, SECRET_KEY, client


def error_of(call):
    with pytest.raises(Exception) as e:
        call()
    response = e.value.response
    return response["ResponseMetadata"]["HTTPStatusCode"], response["Error"]["Code"]


def signed(method, url, body=b"", headers=None):
    """A request signed with SigV4 by botocore, sent as is (for bodies boto3 would never send)."""
    headers = dict(headers or {})
    headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
    request = AWSRequest(method=method, url=url, data=body, headers=headers)
    SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(request)
    prepared = request.prepare()
    return requests.request(method, prepared.url, headers=dict(prepared.headers), data=body)


def absent(s3, bucket, key):
    try:
        s3.head_object(Bucket=bucket, Key=key)
        return False
    except Exception as e:
        return e.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_wrong_signature_is_403_signature_does_not_match_and_stores_nothing(server, s3, bucket):
    bad = client(server.endpoint, secret_key="not-the-secret", retries=1)
    assert error_of(lambda: bad.put_object(Bucket=bucket, Key="k", Body=b"x")) == (403, "SignatureDoesNotMatch")
    assert error_of(lambda: bad.list_objects_v2(Bucket=bucket)) == (403, "SignatureDoesNotMatch")
    assert absent(s3, bucket, "k")


def test_unknown_access_key_is_403_invalid_access_key_id(server, s3, bucket):
    stranger = client(server.endpoint, access_key="NOSUCHKEY", retries=1)
    assert error_of(lambda: stranger.put_object(Bucket=bucket, Key="k", Body=b"x")) == (403, "InvalidAccessKeyId")
    assert absent(s3, bucket, "k")


def test_unsigned_requests_are_refused(server, bucket):
    assert requests.get(f"{server.endpoint}/{bucket}").status_code == 403
    assert requests.put(f"{server.endpoint}/{bucket}/anon", data=b"x").status_code == 403


def test_expired_presigned_urls_are_403_and_store_nothing(s3, bucket):
    s3.put_object(Bucket=bucket, Key="exists", Body=b"secret")
    get_url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "exists"}, ExpiresIn=1)
    put_url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "late"}, ExpiresIn=1)
    time.sleep(2.5)
    r = requests.get(get_url)
    assert r.status_code == 403 and b"secret" not in r.content
    assert requests.put(put_url, data=b"too late").status_code == 403
    assert absent(s3, bucket, "late")


def test_tampered_presigned_url_is_403(s3, bucket):
    s3.put_object(Bucket=bucket, Key="a", Body=b"a")
    s3.put_object(Bucket=bucket, Key="b", Body=b"b")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "a"}, ExpiresIn=300)
    r = requests.get(url.replace(f"/{bucket}/a?", f"/{bucket}/b?"))
    assert r.status_code == 403 and b"SignatureDoesNotMatch" in r.content


def test_malformed_xml_is_400_malformed_xml_and_changes_nothing(server, s3, bucket):
    s3.put_object(Bucket=bucket, Key="keep", Body=b"keep")
    body = b"<Delete><Object><Key>keep</Key></Object"
    md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
    r = signed("POST", f"{server.endpoint}/{bucket}?delete", body, {"Content-MD5": md5})
    assert r.status_code == 400 and b"<Code>MalformedXML</Code>" in r.content, r.content
    assert not absent(s3, bucket, "keep")
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload, PartNumber=1, Body=b"part")
    r = signed("POST", f"{server.endpoint}/{bucket}/mp?uploadId={upload}", b"<CompleteMultipartUpload><Part>")
    assert r.status_code == 400 and b"<Code>MalformedXML</Code>" in r.content, r.content
    assert absent(s3, bucket, "mp")


def test_content_md5_mismatch_is_400_bad_digest_and_stores_nothing(s3, bucket):
    wrong = base64.b64encode(hashlib.md5(b"other bytes").digest()).decode()
    assert error_of(lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"these bytes", ContentMD5=wrong)) == \
        (400, "BadDigest")
    assert absent(s3, bucket, "k")
    assert error_of(lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"x", ContentMD5="not-base64!")) == \
        (400, "InvalidDigest")
    assert absent(s3, bucket, "k")


def test_checksum_header_mismatch_is_400_bad_digest_and_stores_nothing(s3, bucket):
    assert error_of(lambda: s3.put_object(Bucket=bucket, Key="c", Body=b"abc", ChecksumSHA256=base64.b64encode(
        hashlib.sha256(b"abd").digest()).decode())) == (400, "BadDigest")
    assert error_of(lambda: s3.put_object(Bucket=bucket, Key="c", Body=b"abc", ChecksumCRC32="AAAAAA==")) == \
        (400, "BadDigest")
    assert absent(s3, bucket, "c")
    s3.put_object(Bucket=bucket, Key="c", Body=b"abc",
                  ChecksumSHA256=base64.b64encode(hashlib.sha256(b"abc").digest()).decode())
    assert not absent(s3, bucket, "c")


def chunked_with_trailer(server, bucket, key, body, crc32_b64):
    """A PUT as newer SDKs stream it: `aws-chunked` body, unsigned payload, the CRC32 sent as a trailer."""
    wire = b"%x\r\n" % len(body) + body + b"\r\n0\r\n" + \
        b"x-amz-checksum-crc32:" + crc32_b64.encode() + b"\r\n\r\n"
    headers = {"x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER", "Content-Encoding": "aws-chunked",
               "x-amz-trailer": "x-amz-checksum-crc32", "x-amz-decoded-content-length": str(len(body))}
    request = AWSRequest(method="PUT", url=f"{server.endpoint}/{bucket}/{key}", data=wire, headers=headers)
    SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(request)
    prepared = request.prepare()
    return requests.put(prepared.url, headers=dict(prepared.headers), data=wire)


def test_checksum_trailer_mismatch_is_400_bad_digest_and_stores_nothing(server, s3, bucket):
    body = b"trailing checksum " * 1000
    right = base64.b64encode(zlib.crc32(body).to_bytes(4, "big")).decode()
    r = chunked_with_trailer(server, bucket, "t", body, "AAAAAA==")
    assert r.status_code == 400 and b"<Code>BadDigest</Code>" in r.content, r.content
    assert absent(s3, bucket, "t")
    r = chunked_with_trailer(server, bucket, "t", body, right)
    assert r.status_code == 200, r.content
    assert s3.get_object(Bucket=bucket, Key="t")["Body"].read() == body


def test_payload_hash_mismatch_stores_nothing(server, s3, bucket):
    body = b"payload"
    request = AWSRequest(method="PUT", url=f"{server.endpoint}/{bucket}/h", data=body,
                         headers={"x-amz-content-sha256": hashlib.sha256(b"other").hexdigest()})
    SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(request)
    prepared = request.prepare()
    r = requests.put(prepared.url, headers=dict(prepared.headers), data=body)
    assert r.status_code in (400, 403), r.content
    assert absent(s3, bucket, "h")


def test_missing_things_are_404_with_their_codes(s3, bucket):
    assert error_of(lambda: s3.get_object(Bucket=bucket, Key="nope")) == (404, "NoSuchKey")
    assert error_of(lambda: s3.get_object(Bucket="no-such-bucket-x", Key="k")) == (404, "NoSuchBucket")
    assert error_of(lambda: s3.put_object(Bucket="no-such-bucket-x", Key="k", Body=b"x")) == (404, "NoSuchBucket")
    assert error_of(lambda: s3.list_objects_v2(Bucket="no-such-bucket-x")) == (404, "NoSuchBucket")
    assert error_of(lambda: s3.delete_bucket(Bucket="no-such-bucket-x")) == (404, "NoSuchBucket")


def test_deleting_a_non_empty_bucket_is_409_bucket_not_empty(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    assert error_of(lambda: s3.delete_bucket(Bucket=bucket)) == (409, "BucketNotEmpty")
    assert not absent(s3, bucket, "k")
