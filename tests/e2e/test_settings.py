"""Per-bucket settings (compression, placement, write mode): the admin endpoint `/_permafrost/buckets/NAME`,
`permafrost mb`/`permafrost settings` through `--endpoint`, and the server's defaults from permafrost.toml."""

import json
import os
import subprocess

import requests

from admin import (BUCKETS_PREFIX, GRID_BUCKET_HEADER, PERSIST_PATH, STORED_BYTES_HEADER, admin, admin_json)
from conftest import ACCESS_KEY, SECRET_KEY, TEST_CONFIG, Server, binary, client

DEFAULTS = {"compression": "zstd", "placement": "dataset-affinity", "write_mode": "serialized"}
UNCHOSEN = {"compression": None, "placement": None, "write_mode": None}
# Compresses well with zstd and lz4 alike (repetitive text, 1.2 MB).
TEXT = b"".join(b"sensor %06d temperature 21.5 humidity 40 ok\n" % i for i in range(26_000))


def settings_of(endpoint, bucket):
    return admin_json(endpoint, "GET", BUCKETS_PREFIX + bucket)


def set_settings(endpoint, bucket, **fields):
    return admin_json(endpoint, "PUT", BUCKETS_PREFIX + bucket, body=json.dumps(fields).encode())


def stored_bytes(s3, bucket, key):
    return int(s3.head_object(Bucket=bucket, Key=key)["ResponseMetadata"]["HTTPHeaders"][STORED_BYTES_HEADER])


def cli(server, *args):
    env = dict(os.environ, PERMAFROST_ROOT_USER=ACCESS_KEY, PERMAFROST_ROOT_PASSWORD=SECRET_KEY)
    return subprocess.run([str(binary()), *args, "--endpoint", server.endpoint], env=env, capture_output=True,
                          text=True, timeout=60)


def test_a_bucket_takes_the_defaults_until_its_settings_change_what_uploads_get(server, s3, bucket):
    assert settings_of(server.endpoint, bucket) == {"bucket": bucket, "chosen": UNCHOSEN, "effective": DEFAULTS,
                                                    "storage_class": "STANDARD"}
    s3.put_object(Bucket=bucket, Key="zstd", Body=TEXT)
    zstd_bytes = stored_bytes(s3, bucket, "zstd")
    assert zstd_bytes < len(TEXT) // 5

    report = set_settings(server.endpoint, bucket, compression="none")
    assert report["chosen"] == dict(UNCHOSEN, compression="none")
    assert report["effective"] == dict(DEFAULTS, compression="none")
    s3.put_object(Bucket=bucket, Key="raw", Body=TEXT + b"raw")  # not TEXT: that content is stored already
    assert stored_bytes(s3, bucket, "raw") == len(TEXT) + 3

    # The CLI changes one setting and keeps the others it finds.
    result = cli(server, "settings", bucket, "--compression", "lz4", "--write-mode", "delayed", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["effective"] == {"compression": "lz4", "placement": "dataset-affinity",
                                                      "write_mode": "delayed"}
    s3.put_object(Bucket=bucket, Key="lz4", Body=TEXT + b"lz4")
    lz4_bytes = stored_bytes(s3, bucket, "lz4")
    assert lz4_bytes < len(TEXT) // 2 and lz4_bytes != zstd_bytes

    # Stored data keeps the encoding it was stored with.
    assert stored_bytes(s3, bucket, "zstd") == zstd_bytes
    for key, body in [("zstd", TEXT), ("raw", TEXT + b"raw"), ("lz4", TEXT + b"lz4")]:
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body, key

    # `default` gives a setting back to the server.
    result = cli(server, "settings", bucket, "--compression", "default")
    assert result.returncode == 0, result.stderr
    assert "compression zstd (default)" in result.stdout, result.stdout
    assert settings_of(server.endpoint, bucket)["chosen"] == dict(UNCHOSEN, write_mode="delayed")


def test_bad_settings_are_refused_by_name_and_change_nothing(server, s3, bucket):
    before = settings_of(server.endpoint, bucket)
    path = BUCKETS_PREFIX + bucket
    r = admin(server.endpoint, "PUT", path, body=b'{"compresion": "lz4"}')
    assert r.status_code == 400 and "compresion" in r.json()["message"], r.text
    r = admin(server.endpoint, "PUT", path, body=b'{"placement": "nearest"}')
    assert r.status_code == 400 and "round-robin" in r.json()["message"], r.text
    r = admin(server.endpoint, "PUT", path, body=b'{"compression": "gzip"}')
    assert r.status_code == 400, r.text
    r = admin(server.endpoint, "PUT", path, body=b"not json")
    assert r.status_code == 400, r.text
    r = requests.put(server.endpoint + path, data=b'{"compression": "none"}', timeout=10)
    assert r.status_code == 403, r.text
    r = admin(server.endpoint, "GET", BUCKETS_PREFIX + "no-such-bucket-here")
    assert r.status_code == 404 and r.json()["error"] == "NoSuchBucket", r.text
    r = admin(server.endpoint, "DELETE", path)
    assert r.status_code == 405 and "PUT" in r.headers["allow"], r.text

    result = cli(server, "settings", bucket, "--placement", "nearest")
    assert result.returncode == 1 and "dataset-affinity" in result.stderr, result.stderr
    result = cli(server, "mb", "another-bucket-x", "--write-mode", "eventually")
    assert result.returncode == 1 and "serialized" in result.stderr, result.stderr
    assert "another-bucket-x" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert settings_of(server.endpoint, bucket) == before


def test_placement_is_chosen_per_bucket(server, s3):
    """Same dataset shape in two buckets: the default keeps it on one grid bucket, round-robin spreads it."""
    result = cli(server, "mb", "spread-placement", "--placement", "round-robin", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["settings"]["effective"]["placement"] == "round-robin"
    s3.create_bucket(Bucket="affine-placement")
    bodies = [os.urandom(1_300_000) for _ in range(6)]  # above the packing threshold: one extent each
    for name in ["spread-placement", "affine-placement"]:
        for i, body in enumerate(bodies):
            s3.put_object(Bucket=name, Key=f"run-7/part-{i}", Body=body + name.encode())
    assert admin_json(server.endpoint, "POST", PERSIST_PATH) == {"persisted": True}

    def grid_buckets(name):
        return {int(s3.head_object(Bucket=name, Key=f"run-7/part-{i}")["ResponseMetadata"]["HTTPHeaders"]
                    [GRID_BUCKET_HEADER]) for i in range(len(bodies))}

    assert len(grid_buckets("affine-placement")) == 1
    assert len(grid_buckets("spread-placement")) >= 3


def test_the_servers_defaults_come_from_its_configuration(tmp_path):
    config = TEST_CONFIG.replace("[store]\n", '[store]\ndefault_compression = "none"\ndefault_placement = "least-full"\n')
    server = Server(tmp_path / "data", config=config)
    server.start()
    try:
        s3 = client(server.endpoint)
        s3.create_bucket(Bucket="plain")
        report = settings_of(server.endpoint, "plain")
        assert report["chosen"] == UNCHOSEN
        assert report["effective"] == dict(DEFAULTS, compression="none", placement="least-full")
        s3.put_object(Bucket="plain", Key="t", Body=TEXT)
        assert stored_bytes(s3, "plain", "t") == len(TEXT)
    finally:
        assert server.stop() == 0, server.log_tail()
