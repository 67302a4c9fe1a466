"""Pre-compressed uploads (Content-Encoding zstd/lz4 + x-amz-meta-permafrost-decoded-length) are stored as sent."""

import os

import lz4.frame
import pytest
import requests
import zstandard


def sample(n: int) -> bytes:
    # Compressible but not trivial: repeated random words.
    words = [os.urandom(8).hex() for _ in range(500)]
    out, i = bytearray(), 0
    while len(out) < n:
        out += words[(i * 7919) % 500].encode() + b" "
        i += 1
    return bytes(out[:n])


@pytest.mark.parametrize("encoding,compress", [("zstd", lambda b: zstandard.ZstdCompressor(level=3).compress(b)),
                                               ("lz4", lz4.frame.compress)])
def test_precompressed_upload_is_stored_as_sent_and_served_both_ways(s3, bucket, encoding, compress):
    raw = sample(3_000_000)
    sent = compress(raw)
    assert len(sent) < len(raw) // 2
    s3.put_object(Bucket=bucket, Key="c", Body=sent, ContentEncoding=encoding,
                  Metadata={"permafrost-decoded-length": str(len(raw))})
    # HEAD: decoded length for everyone; stored (= uploaded) size for a client that accepts the encoding.
    assert s3.head_object(Bucket=bucket, Key="c")["ContentLength"] == len(raw)
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "c"}, ExpiresIn=300)
    head_url = s3.generate_presigned_url("head_object", Params={"Bucket": bucket, "Key": "c"}, ExpiresIn=300)
    head = requests.head(head_url, headers={"Accept-Encoding": encoding})
    assert int(head.headers["Content-Length"]) == len(sent)
    # GET with a matching Accept-Encoding: the identical bytes, with Content-Encoding.
    r = requests.get(url, headers={"Accept-Encoding": f"gzip, {encoding}"}, stream=True)
    assert r.status_code == 200 and r.headers["Content-Encoding"] == encoding
    assert r.raw.read(decode_content=False) == sent
    # Everyone else: the decoded bytes, whole and ranged.
    r = requests.get(url, headers={"Accept-Encoding": "identity"}, stream=True)
    assert "Content-Encoding" not in r.headers
    assert r.raw.read(decode_content=False) == raw
    assert s3.get_object(Bucket=bucket, Key="c")["Body"].read() == raw
    for first, last in [(0, 99), (1_000_000, 1_000_999), (2_999_000, 2_999_999)]:
        got = s3.get_object(Bucket=bucket, Key="c", Range=f"bytes={first}-{last}")["Body"].read()
        assert got == raw[first:last + 1]


def test_precompressed_upload_without_decoded_length_is_refused(s3, bucket):
    sent = zstandard.ZstdCompressor().compress(b"hello" * 1000)
    with pytest.raises(Exception) as e:
        s3.put_object(Bucket=bucket, Key="c", Body=sent, ContentEncoding="zstd")
    assert e.value.response["Error"]["Code"] == "InvalidArgument"
