"""Prefetch and hot data through S3 and the admin API: a GET that wakes its disk prefetches the next objects of its
dataset, which are then read from the cache; a prefix made hot (`PUT /buckets/{bucket}/hot`) is read back by a
`keep_hot` task and survives eviction, and lets go when made cold; the hit counters show in the state and the
metrics."""

import random
import time

from admin import evict, sha, spin_ups, status, wait_all_off, wait_persisted
from conftest import Server, client
from ops import call, metrics, ok, wait_task

BUCKET = "telescope"


def cache_reads(endpoint: str) -> dict:
    return ok(endpoint, "GET", "/state")["cache_reads"]


def settled_cache_reads(endpoint: str) -> dict:
    """The counters once the prefetch thread stopped moving them."""
    deadline = time.time() + 60
    last = cache_reads(endpoint)
    while True:
        time.sleep(0.5)
        now = cache_reads(endpoint)
        if now == last:
            return now
        assert time.time() < deadline, f"prefetch never settled: {now}"
        last = now


def total_spin_ups(endpoint: str) -> int:
    return sum(spin_ups(status(endpoint)).values())


def metric(text: str, line_start: str) -> float:
    line = next(l for l in text.splitlines() if l.startswith(line_start))
    return float(line.split()[-1])


def test_prefetch_keep_hot_and_hit_rates_through_the_admin_api(tmp_path):
    rng = random.Random(30)
    server = Server(tmp_path / "data")
    server.start()
    try:
        s3 = client(server.endpoint)
        s3.create_bucket(Bucket=BUCKET)
        bodies = {}
        for dataset in ("raw", "scans"):
            for i in range(4):
                key = f"{dataset}/part-{i}"
                body = rng.randbytes(300_000 + 1000 * i)
                s3.put_object(Bucket=BUCKET, Key=key, Body=body)
                bodies[key] = sha(body)
        wait_persisted(server.endpoint, expect_contents=len(bodies))
        evict(server.endpoint)
        wait_all_off(server.endpoint, timeout_s=60)

        # A cold GET wakes its disk once; the next three objects of its dataset come along.
        before = total_spin_ups(server.endpoint)
        assert sha(s3.get_object(Bucket=BUCKET, Key="scans/part-0")["Body"].read()) == bodies["scans/part-0"]
        reads = settled_cache_reads(server.endpoint)
        assert (reads["from_grid"], reads["from_cache"], reads["prefetches"]) == (1, 0, 1), reads
        assert reads["prefetched_contents"] == 3, reads
        assert reads["prefetched_bytes"] >= 3 * 300_000, reads
        wait_all_off(server.endpoint, timeout_s=60)
        for i in (1, 2, 3):
            key = f"scans/part-{i}"
            assert sha(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()) == bodies[key]
        assert total_spin_ups(server.endpoint) - before == 1, "prefetched objects needed a spin-up"
        reads = cache_reads(server.endpoint)
        assert (reads["from_cache"], reads["prefetch_hits"]) == (3, 3), reads
        assert reads["hit_ratio"] == 0.75, reads

        # Keep hot: nothing of raw/ is cached, so a keep_hot task reads it back.
        assert ok(server.endpoint, "GET", f"/buckets/{BUCKET}/hot") == {"bucket": BUCKET, "prefixes": []}
        answer = ok(server.endpoint, "PUT", f"/buckets/{BUCKET}/hot", json={"prefixes": ["raw/"]})
        assert answer["prefixes"] == ["raw/"] and answer["to_read_contents"] == 4, answer
        task = wait_task(server.endpoint, answer["task"]["id"])
        assert task["state"] == "done" and task["kind"] == "keep_hot", task
        assert task["result"]["read_contents"] == 4, task
        assert ok(server.endpoint, "GET", f"/buckets/{BUCKET}/hot")["prefixes"] == ["raw/"]
        wakes = ok(server.endpoint, "GET", "/wakes")["wakes"]
        hot_wakes = [w for w in wakes if w["kind"] == "prefetch"]
        assert hot_wakes and all(w["reason"] == f"prefetch of {BUCKET}/raw/ (keep hot)" for w in hot_wakes), wakes
        # Hot data survives eviction and is read with every disk off; the rest is evicted.
        evict(server.endpoint)
        wait_all_off(server.endpoint, timeout_s=60)
        before = total_spin_ups(server.endpoint)
        for i in range(4):
            key = f"raw/part-{i}"
            assert sha(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()) == bodies[key]
        assert total_spin_ups(server.endpoint) == before, "hot objects were evicted"
        reads = settled_cache_reads(server.endpoint)
        assert (reads["from_cache"], reads["from_grid"]) == (7, 1), reads
        assert reads["hot_read_contents"] == 4, reads

        # The figures in the metrics.
        text = metrics(server.endpoint)
        assert metric(text, 'permafrost_cache_reads_total{source="cache"}') == 7
        assert metric(text, 'permafrost_cache_reads_total{source="grid"}') == 1
        assert metric(text, "permafrost_cache_prefetch_hits_total") == 3
        assert metric(text, "permafrost_cache_hit_ratio") == 7 / 8

        # Made cold: eviction takes it again, and a read wakes the disk.
        answer = ok(server.endpoint, "PUT", f"/buckets/{BUCKET}/hot", json={"prefixes": []})
        assert answer["unpinned"] == 4 and answer["task"] is None, answer
        evict(server.endpoint)
        assert sha(s3.get_object(Bucket=BUCKET, Key="raw/part-3")["Body"].read()) == bodies["raw/part-3"]
        assert total_spin_ups(server.endpoint) > before
        # Bad requests.
        r = call(server.endpoint, "PUT", f"/buckets/{BUCKET}/hot", json={"prefix": "raw/"})
        assert r.status_code == 400, r.text
        r = call(server.endpoint, "PUT", "/buckets/no-such-bucket/hot", json={"prefixes": ["a/"]})
        assert r.status_code == 404, r.text
        assert server.stop() == 0, server.log_tail()
    except Exception:
        print(server.log_tail())
        raise
    finally:
        server.kill()
