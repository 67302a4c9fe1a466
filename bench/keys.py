#!/usr/bin/env python3
"""What access control costs a small GET: the 4 KiB GET rate of a server with 1,000 access keys and 200 bucket
policies, signed by one of those keys, next to a server with only the root user, in the same run.

Two `permafrost serve` on the same machine and file system, the same 4 KiB object in each. Each request is the
same presigned URL (AWS Signature V4 in the query), so the server checks the whole signature every time (key
lookup, signing-key derivation, HMAC) and then decides the request (grants, policies, ACLs); the client is `wrk`
(C, keep-alive), so the client's cost is small next to the server's. The two servers are measured in turn,
--rounds times in both orders (A B B A …), --seconds each, and the ratio of the medians is printed.

  baseline  one key (root), no policies; the presigned URL is root's
  keys      1,000 keys (each granted read on one of 200 buckets), 200 buckets with a policy each (an Allow for a
            few keys, a Deny on a prefix); the presigned URL is signed by key 500, allowed by its grant after
            the policy of its bucket was checked for a Deny

Usage: .venv/bin/python bench/keys.py [--keys 1000] [--policies 200] [--seconds 8] [--rounds 3] [--bin PATH]
Needs `wrk` (apt-get install wrk).
"""

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

sys.path.insert(0, str(Path(__file__).resolve().parent))
import s3 as pf  # noqa: E402  (bench/s3.py: the server, its configuration, the S3 client)

KEYS_PATH = "/_permafrost/api/v1/keys"


def admin_json(endpoint: str, method: str, path: str, body: dict) -> dict:
    data = json.dumps(body).encode()
    req = AWSRequest(method=method, url=endpoint + path, data=data, headers={"Content-Type": "application/json"})
    S3SigV4Auth(Credentials(pf.ACCESS_KEY, pf.SECRET_KEY), "s3", "us-east-1").add_auth(req)
    r = requests.request(method, endpoint + path, headers=dict(req.headers.items()), data=data, timeout=60)
    r.raise_for_status()
    return r.json()


def populate(server: pf.Server, keys: int, policies: int) -> tuple:
    """Make the keys, buckets and policies; returns (access key, secret) of key `keys // 2`."""
    s3 = pf.s3_client(server.endpoint)
    for b in range(policies):
        s3.create_bucket(Bucket=f"b{b:03d}")
    chosen = None
    started = time.monotonic()
    for k in range(keys):
        made = admin_json(server.endpoint, "POST", KEYS_PATH, {"name": f"key{k:04d}"})
        admin_json(server.endpoint, "POST", f"{KEYS_PATH}/key{k:04d}/allow",
                   {"bucket": f"b{k % policies:03d}", "permission": "read"})
        if k == keys // 2:
            chosen = (made["access_key"], made["secret_key"], f"b{k % policies:03d}")
    for b in range(policies):
        names = [f"key{k:04d}" for k in range(b, keys, policies)][:5]
        policy = {"Version": "2012-10-17", "Statement": [
            {"Sid": "readers", "Effect": "Allow", "Principal": {"AWS": names}, "Action": ["s3:GetObject"],
             "Resource": [f"arn:aws:s3:::b{b:03d}/shared/*"]},
            {"Sid": "noraw", "Effect": "Deny", "Principal": "*", "Action": ["s3:DeleteObject"],
             "Resource": [f"arn:aws:s3:::b{b:03d}/raw/*"]}]}
        s3.put_bucket_policy(Bucket=f"b{b:03d}", Policy=json.dumps(policy))
    print(f"  {keys} keys, {policies} buckets with policies in {time.monotonic() - started:.1f} s", flush=True)
    return chosen


def presigned(endpoint: str, key_id: str, secret: str, bucket: str, key: str) -> str:
    import boto3
    from botocore.config import Config
    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key_id, aws_secret_access_key=secret,
                      region_name="us-east-1", config=Config(s3={"addressing_style": "path"}))
    return s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=3600)


def wrk_rate(url: str, seconds: int) -> float:
    out = subprocess.run(["wrk", "-t2", "-c8", f"-d{seconds}s", url], capture_output=True, text=True,
                         check=True).stdout
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if non2xx:
        raise RuntimeError(f"{non2xx.group(1)} requests were refused or failed:\n{out}")
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--policies", type=int, default=200)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    release = pf.REPO / "target" / "release" / "permafrost"
    ap.add_argument("--bin", type=Path, default=release if release.exists() else pf.REPO / "target" / "debug" / "permafrost",
                    help="the server binary (default: the release build, else the test build, opt-level 2)")
    args = ap.parse_args()
    if not shutil.which("wrk"):
        sys.exit("bench/keys.py needs wrk: apt-get install wrk")
    scratch = Path(tempfile.mkdtemp(prefix="pf-keys-"))
    config = pf.server_config(fsync=True, cache_bytes=4 * pf.GiB, disk_bytes=4 * pf.GiB, hold=True)
    servers = {name: pf.Server(args.bin, scratch / name, config, scratch / f"{name}.log")
               for name in ("baseline", "keys")}
    try:
        urls = {}
        for name, server in servers.items():
            server.start()
            s3 = pf.s3_client(server.endpoint)
            bucket = "small"
            if name == "keys":
                key_id, secret, bucket = populate(server, args.keys, args.policies)
            else:
                s3.create_bucket(Bucket=bucket)
                key_id, secret = pf.ACCESS_KEY, pf.SECRET_KEY
            s3.put_object(Bucket=bucket, Key="o4k", Body=bytes(4096))
            urls[name] = presigned(server.endpoint, key_id, secret, bucket, "o4k")
            wrk_rate(urls[name], 2)  # warm up
        rates = {name: [] for name in servers}
        order = []
        for r in range(args.rounds):
            order += ["baseline", "keys"] if r % 2 == 0 else ["keys", "baseline"]
        for name in order:
            rate = wrk_rate(urls[name], args.seconds)
            rates[name].append(rate)
            print(f"  {name:8} {rate:9.0f} GET/s", flush=True)
        base, keyed = statistics.median(rates["baseline"]), statistics.median(rates["keys"])
        print(f"4 KiB GET, presigned, wrk -t2 -c8, {args.rounds} rounds of {args.seconds} s in both orders; "
              f"load {pf.loadavg()}")
        print(f"  baseline (root only)              median {base:9.0f} GET/s  {rates['baseline']}")
        print(f"  {args.keys} keys, {args.policies} policies       median {keyed:9.0f} GET/s  {rates['keys']}")
        print(f"  keys / baseline = {keyed / base:.3f} (cost {100 * (1 - keyed / base):+.1f} %)")
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
