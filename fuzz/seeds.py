#!/usr/bin/env python3
"""Writes the checked-in seed corpus: fuzz/corpus/<target>/<name>, a few valid inputs per target.

Binary formats are laid out here as docs/formats.md and the crates' encoders lay them out (crc32c computed
here; BLAKE3 fields, which Python's standard library cannot compute, are seeded where the target computes
them itself). Structured targets (the `arbitrary` crate) get a few short byte strings: any bytes are a valid
input for them. Run from anywhere: `python3 fuzz/seeds.py`.
"""

import json
import os
import random
import shutil
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def crc32c(data, crc=0):
    poly = 0x82F63B78
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (poly if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def u8(n):
    return struct.pack("<B", n)


def u16(n):
    return struct.pack("<H", n)


def u32(n):
    return struct.pack("<I", n)


def u64(n):
    return struct.pack("<Q", n)


def put_str(s):
    b = s.encode()
    return u32(len(b)) + b


def chunk_index(entries):
    """version 1 | count u32 | (algorithm u8 | logical u32 | stored u32)*"""
    out = u8(1) + u32(len(entries))
    for algorithm, logical, stored in entries:
        out += u8(algorithm) + u32(logical) + u32(stored)
    return out


def manifest_body(key, data, stored_form=b"\x00", stored_len=None, meta=(), content_type=None):
    body = put_str("sci") + put_str(key) + u32(len(meta))
    for name, value in meta:
        body += put_str(name) + put_str(value)
    body += b"\x00" if content_type is None else b"\x01" + put_str(content_type)
    body += u8(0)  # content encoding: none
    body += stored_form
    body += u64(len(data)) + u64(len(data) if stored_len is None else stored_len)
    body += bytes(range(32))  # the content's BLAKE3 (not checked by decoding)
    body += u64(1_780_000_000_000) + put_str("sci") + u8(0)
    return body


def manifest_record(body):
    return b"PFMN" + u8(2) + u32(len(body)) + body + u32(crc32c(body))


def extent(object_id, extent_id, payload):
    head = b"PFXE" + u8(1) + object_id.to_bytes(16, "little") + u8(0) + u16(extent_id) + u32(len(payload))
    out = head + payload + u32(crc32c(head + payload))
    return out + b"\x00" * (-len(out) % 4096)


def pack(entries):
    out = b"PFPK" + u8(1)
    for key, data in entries:
        record = manifest_record(manifest_body(key, data))
        out += u32(len(record) + len(data)) + record + data
    return out


def vdif(seconds, frame, payload_bytes, legacy=False, station=b"Ef", thread=3):
    header_bytes = 16 if legacy else 32
    total = header_bytes + payload_bytes
    w0 = (int(legacy) << 30) | seconds
    w1 = (52 << 24) | frame
    w2 = (0 << 29) | (3 << 24) | (total // 8)
    w3 = (1 << 26) | (thread << 16) | int.from_bytes(station, "big")
    words = [w0, w1, w2, w3] + ([] if legacy else [2 << 24, 0, 0, 0])
    return b"".join(u32(w) for w in words) + bytes((i * 7) & 0xFF for i in range(payload_bytes))


def zstd_raw_frame(data):
    """A zstd frame with one raw block: magic | FHD (single segment, 1-byte size) | size | block header | data."""
    assert len(data) < 256
    block_header = (len(data) << 3) | 1  # last block, raw
    return struct.pack("<I", 0xFD2FB528) + u8(0x20) + u8(len(data)) + block_header.to_bytes(3, "little") + data


def xxh32(data, seed=0):
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    mask = 0xFFFFFFFF
    rotl = lambda x, r: ((x << r) | (x >> (32 - r))) & mask
    i, n = 0, len(data)
    if n >= 16:
        v = [(seed + p1 + p2) & mask, (seed + p2) & mask, seed, (seed - p1) & mask]
        while i + 16 <= n:
            for j in range(4):
                v[j] = rotl((v[j] + struct.unpack_from("<I", data, i)[0] * p2) & mask, 13) * p1 & mask
                i += 4
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & mask
    else:
        h = (seed + p5) & mask
    h = (h + n) & mask
    while i + 4 <= n:
        h = rotl((h + struct.unpack_from("<I", data, i)[0] * p3) & mask, 17) * p4 & mask
        i += 4
    while i < n:
        h = rotl((h + data[i] * p5) & mask, 11) * p1 & mask
        i += 1
    h ^= h >> 15
    h = h * p2 & mask
    h ^= h >> 13
    h = h * p3 & mask
    h ^= h >> 16
    return h


def lz4_frame(data):
    """An LZ4 frame with one uncompressed block: magic | FLG | BD | HC | block | end mark."""
    descriptor = u8(0x60) + u8(0x40)
    hc = (xxh32(descriptor) >> 8) & 0xFF
    return struct.pack("<I", 0x184D2204) + descriptor + u8(hc) + u32(len(data) | 0x80000000) + data + u32(0)


def relay_json(value):
    b = json.dumps(value).encode()
    return u32(len(b)) + b


def arbitrary_seeds(n, seed):
    rng = random.Random(seed)
    return [bytes(rng.randrange(256) for _ in range(rng.choice([16, 64, 256, 1024]))) for _ in range(n)]


def xml(kind, body):
    return u8(kind) + body.encode()


def seeds():
    s = {}
    data = b"hello permafrost\n" * 3
    s["format_chunk_index"] = [
        chunk_index([(0, 4096, 4096), (1, 4096, 100)]),
        chunk_index([(2, 65536, 3000)]),
        chunk_index([]),
    ]
    s["format_chunks"] = arbitrary_seeds(4, 1)
    s["format_stream"] = [
        u8(0) + zstd_raw_frame(data),
        u8(0) + zstd_raw_frame(b"a" * 40) + zstd_raw_frame(b"b" * 20),
        u8(1) + lz4_frame(data),
        u8(9) + lz4_frame(b"x" * 100) + lz4_frame(b"y"),
    ]
    s["format_extent"] = [
        u32(0) + extent(0xB16, 0, manifest_record(manifest_body("a.txt", data)) + data),
        u32(0) + extent(7, 3, b"payload"),
    ] + arbitrary_seeds(2, 2)
    s["format_manifest"] = [
        u8(4) + manifest_body("runs/a.txt", data, meta=[("run", "7")], content_type="text/plain"),
        u8(4) + manifest_body("big.bin", b"x" * 8192, stored_form=b"\x01" + chunk_index([(1, 4096, 50), (1, 4096, 60)]), stored_len=110),
        u8(4) + manifest_body("as-sent.zst", data, stored_form=b"\x02"),
        u8(1) + manifest_record(manifest_body("whole.txt", data)),
    ]
    p = pack([("a.txt", b"tiny"), ("b.txt", data)])
    s["format_pack"] = [u32(0) + u16(len(p)) + p, u32(0) + u16(len(p) - 3) + p] + arbitrary_seeds(2, 3)
    s["format_salvage"] = arbitrary_seeds(4, 4)
    content = extent(0xB16, 0, manifest_record(manifest_body("a.txt", data)) + data)
    s["format_salvage_image"] = [content, b"\xaa" * 4096 + extent(0xFACC, 0, p)]
    s["record_vdif"] = [
        vdif(1000, 5, 224),
        vdif(1000, 6, 112, legacy=True),
        u64(42) + vdif(2000, 0, 96),
        vdif(3, 1, 0)[:20],
    ]
    s["record_schedule"] = [
        u64(0) + b"2030-01-01T00:00:00Z 10m scan-1\n2030-01-01T00:10:00Z 30s scan-2  # comment\n",
        u64(0) + b"# only a comment\n\n2031-06-30T12:00:00Z 1h x\n",
        u64(0) + b"2030-01-01T00:00:00Z 500ms a\n2030-01-01T00:00:00Z 1s a\n",
    ]
    header = {
        "version": 2,
        "op": "replicate",
        "transfer": "t-1",
        "object_bytes": 10_000_000,
        "piece_bytes": 1 << 20,
        "hop": {"name": "n1", "addr": "127.0.0.1:9000", "children": [
            {"name": "n2", "addr": "127.0.0.1:9001", "children": []},
            {"name": "n3", "addr": "127.0.0.1:9002", "children": []},
        ]},
        "object": {"bucket": "b", "key": "k", "etag": "abc-2", "last_modified_ms": 1, "content_type": None,
                   "user_metadata": [["run", "7"]], "attributes": {"tags": []}},
    }
    s["relay_wire"] = [
        u8(0) + relay_json(header),
        u8(0) + relay_json(dict(header, op="xor", object_bytes=0, piece_bytes=7)),
        u8(1) + relay_json({"node": "n2", "ok": False, "error": "disk full", "blame": "n1"}),
        u8(2) + u16(5) + (u32(5) + bytes(32) + b"piece") * 2,
    ]
    name = b"node-b"
    s["relay_handshake"] = [
        u8(0) + b"PFRL" + u32(2) + bytes(32) + u8(len(name)) + name + bytes(32),
        u8(1) + b"PFRL" + u32(2) + bytes(32) + u8(len(name)) + name + u8(0) + bytes(32),
        u8(1) + b"PFRL" + u32(2) + bytes(32) + u8(len(name)) + name + u8(1) + u8(7) + b"go away",
        u8(0) + u32(200) + b'{"version":1}',
    ]
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "read", "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
             "Resource": "arn:aws:s3:::bucket/public/*"},
            {"Effect": "Deny", "Principal": {"AWS": ["arn:aws:iam:::user/alice", "bob"]},
             "Action": ["s3:Delete*", "s3:Put?bject"], "Resource": ["arn:aws:s3:::bucket", "arn:aws:s3:::bucket/*"]},
        ],
    }
    s["access_policy"] = [
        json.dumps(policy).encode(),
        json.dumps({"Statement": {"Effect": "Allow", "Principal": {"AWS": "alice"}, "Action": "s3:*",
                                  "Resource": "arn:aws:s3:::bucket"}}).encode(),
        json.dumps({"grants": [{"grantee": {"key": "alice"}, "permission": "READ"}]}).encode(),
        b"FULL_CONTROL",
    ]
    s["s3_request"] = arbitrary_seeds(6, 5)
    s["s3_aws_chunked"] = arbitrary_seeds(4, 6)
    ns = ' xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
    bodies = [
        (0, f"<CompleteMultipartUpload{ns}><Part><PartNumber>1</PartNumber><ETag>\"a\"</ETag></Part>"
            "<Part><PartNumber>2</PartNumber><ETag>\"b\"</ETag><ChecksumCRC32>AAAAAA==</ChecksumCRC32></Part>"
            "</CompleteMultipartUpload>"),
        (1, "<Delete><Quiet>true</Quiet><Object><Key>a</Key></Object><Object><Key>b&amp;c</Key>"
            "<VersionId>v1</VersionId></Object></Delete>"),
        (2, "<LifecycleConfiguration><Rule><ID>r</ID><Status>Enabled</Status><Filter><And><Prefix>logs/</Prefix>"
            "<Tag><Key>k</Key><Value>v</Value></Tag><ObjectSizeGreaterThan>10</ObjectSizeGreaterThan></And></Filter>"
            "<Expiration><Days>30</Days></Expiration><NoncurrentVersionExpiration><NoncurrentDays>7</NoncurrentDays>"
            "</NoncurrentVersionExpiration><AbortIncompleteMultipartUpload><DaysAfterInitiation>2"
            "</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule></LifecycleConfiguration>"),
        (3, "<Tagging><TagSet><Tag><Key>project</Key><Value>vlbi</Value></Tag></TagSet></Tagging>"),
        (4, "<AccessControlPolicy><Owner><ID>root</ID></Owner><AccessControlList><Grant>"
            "<Grantee xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xsi:type=\"CanonicalUser\"><ID>alice</ID>"
            "</Grantee><Permission>READ</Permission></Grant></AccessControlList></AccessControlPolicy>"),
        (5, "<RestoreRequest><Days>2</Days><GlacierJobParameters><Tier>Bulk</Tier></GlacierJobParameters>"
            "</RestoreRequest>"),
        (6, "<ObjectLockConfiguration><ObjectLockEnabled>Enabled</ObjectLockEnabled><Rule><DefaultRetention>"
            "<Mode>GOVERNANCE</Mode><Days>1</Days></DefaultRetention></Rule></ObjectLockConfiguration>"),
        (7, "<Retention><Mode>COMPLIANCE</Mode><RetainUntilDate>2030-01-01T00:00:00.000Z</RetainUntilDate>"
            "</Retention>"),
        (8, "<LegalHold><Status>ON</Status></LegalHold>"),
        (9, "<CORSConfiguration><CORSRule><AllowedOrigin>https://*.example.org</AllowedOrigin>"
            "<AllowedMethod>GET</AllowedMethod><AllowedHeader>x-amz-*</AllowedHeader><ExposeHeader>ETag"
            "</ExposeHeader><MaxAgeSeconds>600</MaxAgeSeconds></CORSRule></CORSConfiguration>"),
        (10, "<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>"),
        (11, "<CreateBucketConfiguration><LocationConstraint>us-east-1</LocationConstraint>"
             "</CreateBucketConfiguration>"),
        (12, "<PublicAccessBlockConfiguration><BlockPublicAcls>true</BlockPublicAcls></PublicAccessBlockConfiguration>"),
        (13, "<NotificationConfiguration><QueueConfiguration><Queue>arn:q</Queue><Event>s3:ObjectCreated:*</Event>"
             "</QueueConfiguration></NotificationConfiguration>"),
    ]
    s["s3_xml"] = [xml(k, b) for k, b in bodies]
    s["s3_bucket_config"] = [
        xml(0, bodies[9][1]) + b"\x00https://a.example.org\nGET\nx-amz-date",
        xml(1, bodies[2][1]),
        xml(1, "<LifecycleConfiguration><Rule><Status>Disabled</Status><Expiration><Date>2030-01-01T00:00:00Z"
               "</Date></Expiration></Rule></LifecycleConfiguration>"),
        xml(2, bodies[3][1]) + b"\x00a=1&b=two%20words",
        xml(3, "<RestoreRequest><Days>1</Days><Tier>Expedited</Tier></RestoreRequest>"),
    ]
    s["s3_headers"] = [
        u64(1000 << 16) + b'"abc"\n*\nWed, 21 Oct 2015 07:28:00 GMT\nWed, 21 Oct 2025 07:28:00 GMT\nbytes=0-99\n'
        b"id=alice, uri=\"http://acs.amazonaws.com/groups/global/AllUsers\"\nabc",
        u64(5 << 16) + b'W/"a", "b"\n\n\n\nbytes=-3\nbucket/key?versionId=v1\n"a"',
        u64(0) + b"\n\n\n\nbytes=10-\nzstd;q=1, gzip;q=0, *\n",
    ]
    form = (b"--XYZ\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nuploads/${filename}\r\n"
            b"--XYZ\r\nContent-Disposition: form-data; name=\"policy\"\r\n\r\n"
            b"eyJleHBpcmF0aW9uIjoiMjA5OS0wMS0wMVQwMDowMDowMFoiLCJjb25kaXRpb25zIjpbWyJzdGFydHMtd2l0aCIsIiRrZXkiLCJ1cGxvYWRzLyJdXX0=\r\n"
            b"--XYZ\r\nContent-Disposition: form-data; name=\"x-amz-signature\"\r\n\r\nabc\r\n"
            b"--XYZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n"
            b"Content-Type: text/plain\r\n\r\nhello\r\n--XYZ--\r\n")
    s["s3_post_form"] = [b"XYZ\n" + form, b"XYZ\n" + form[:90]]
    s["engine_delta"] = [b"\xff\xff\xff\xff" + x for x in arbitrary_seeds(3, 7)] + [u32(0) + b"PFDELTA1" + bytes(64)]
    layout = b"4x4:2+1".ljust(32, b"\x00")
    fields = bytes(range(16)) + layout + u32(3) + u8(0) + u64(8 << 30) + u8(1) + u32(16)
    s["engine_disk_header"] = [u8(0) + fields, u8(0) + fields[:16] + b"8x2:4+2".ljust(32, b"\x00") + fields[48:]]
    return s


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    for target, inputs in seeds().items():
        d = os.path.join(ROOT, target)
        os.makedirs(d)
        for i, data in enumerate(inputs):
            with open(os.path.join(d, f"seed-{i}"), "wb") as f:
                f.write(data)
    print(f"{len(seeds())} targets seeded under {ROOT}")


if __name__ == "__main__":
    main()
