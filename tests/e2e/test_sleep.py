"""Sleep: once objects are persisted and the disks are off, LIST, HEAD, DELETE, CopyObject and metadata changes
touch only the catalog and spin up zero disks (power counters of the status); a dataset written under one key
prefix lands on one grid bucket, and reading it back after the cache is evicted spins up exactly one data disk."""

import random

from admin import (GRID_BUCKET_HEADER, STATE_HEADER, data_disk_of, disks, dump, evict, role_of, sha,
                   spin_ups, spun_up_since, status, wait_all_off, wait_persisted)
from conftest import TEST_CONFIG, Server, client

# The dataset is the S3 bucket plus the first key component (crates/store/src/config.rs, the default made
# explicit here).
SLEEP_CONFIG = TEST_CONFIG.replace("[store]\n", "[store]\ndataset_prefix_depth = 1\n")
BUCKET = "sleepy"


def head_headers(s3, bucket, key) -> dict:
    return s3.head_object(Bucket=bucket, Key=key)["ResponseMetadata"]["HTTPHeaders"]


def test_catalog_operations_wake_no_disk_and_a_dataset_reads_back_from_one_disk(tmp_path):
    assert "dataset_prefix_depth = 1" in SLEEP_CONFIG
    rng = random.Random(99)
    server = Server(tmp_path / "data", config=SLEEP_CONFIG)
    server.start()
    try:
        s3 = client(server.endpoint)
        s3.create_bucket(Bucket=BUCKET)
        s3.create_bucket(Bucket="elsewhere")
        # Two datasets uploaded interleaved, small (packed) and mid-sized objects, plus scratch objects that the
        # catalog operations below work on.
        uploaded = {}
        for i in range(40):
            for dataset in ("survey-2024", "survey-2025"):
                size = rng.randint(2 << 20, 3 << 20) if i % 10 == 0 else rng.randint(1, 200_000)
                body = rng.randbytes(size)
                s3.put_object(Bucket=BUCKET, Key=f"{dataset}/run-{i // 10}/part-{i:03d}", Body=body)
                uploaded[f"{dataset}/run-{i // 10}/part-{i:03d}"] = sha(body)
        for i in range(6):
            body = rng.randbytes(rng.randint(1, 50_000))
            s3.put_object(Bucket=BUCKET, Key=f"scratch/s{i}", Body=body, Metadata={"v": "1"})
            uploaded[f"scratch/s{i}"] = sha(body)
        wait_persisted(server.endpoint, expect_contents=len(uploaded))

        # One dataset, one grid bucket.
        dataset_keys = sorted(k for k in uploaded if k.startswith("survey-2024/"))
        grid_buckets = {}
        for key in uploaded:
            headers = head_headers(s3, BUCKET, key)
            assert headers[STATE_HEADER] == "persisted", (key, headers)
            grid_buckets[key] = int(headers[GRID_BUCKET_HEADER])
        for dataset in ("survey-2024/", "survey-2025/"):
            landed = {g for k, g in grid_buckets.items() if k.startswith(dataset)}
            assert len(landed) == 1, f"dataset {dataset} is spread over grid buckets {landed}"
        (grid_bucket,) = {grid_buckets[k] for k in dataset_keys}

        evict(server.endpoint)
        before = wait_all_off(server.endpoint)
        assert before["detail"]["catalog"]["cached_bytes"] == 0, dump(before)

        # Catalog-only operations on persisted objects.
        for prefix, delimiter in [("", "/"), ("survey-2024/", "/"), ("survey-2024/run-1/", ""), ("sc", "")]:
            page = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix, Delimiter=delimiter)
            assert page.get("Contents") or page.get("CommonPrefixes"), (prefix, delimiter)
        top = s3.list_objects_v2(Bucket=BUCKET, Delimiter="/")
        assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["scratch/", "survey-2024/", "survey-2025/"]
        runs = s3.list_objects(Bucket=BUCKET, Prefix="survey-2025/", Delimiter="/")  # ListObjects v1
        assert [p["Prefix"] for p in runs["CommonPrefixes"]] == [f"survey-2025/run-{r}/" for r in range(4)]
        listed = [o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(
            Bucket=BUCKET, Prefix="survey-2024/", PaginationConfig={"PageSize": 7}) for o in p["Contents"]]
        assert listed == dataset_keys
        for key in uploaded:
            head_headers(s3, BUCKET, key)
        s3.copy_object(Bucket=BUCKET, Key="scratch/copy", CopySource={"Bucket": BUCKET, "Key": "scratch/s0"})
        s3.copy_object(Bucket="elsewhere", Key="big-copy", CopySource={"Bucket": BUCKET, "Key": dataset_keys[0]})
        # Metadata change: copy onto itself with REPLACE.
        s3.copy_object(Bucket=BUCKET, Key="scratch/s1", CopySource={"Bucket": BUCKET, "Key": "scratch/s1"},
                       Metadata={"v": "2", "note": "changed"}, MetadataDirective="REPLACE")
        assert s3.head_object(Bucket=BUCKET, Key="scratch/s1")["Metadata"] == {"v": "2", "note": "changed"}
        assert head_headers(s3, "elsewhere", "big-copy")[STATE_HEADER] == "persisted"
        s3.delete_object(Bucket=BUCKET, Key="scratch/s2")
        s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": "scratch/s3"}, {"Key": "scratch/s4"}]})
        s3.delete_object(Bucket=BUCKET, Key="scratch/copy")
        after = status(server.endpoint)
        woken = spun_up_since(before, after)
        assert woken == {}, f"catalog operations spun up disks {woken}"
        assert sum(spin_ups(after).values()) == sum(spin_ups(before).values())
        assert all(d["power_state"] == "off" for d in disks(after)), [d["power_state"] for d in disks(after)]

        # Reading the whole dataset back from the grid wakes its one data disk, nothing else.
        for key in dataset_keys:
            got = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
            assert sha(got) == uploaded[key], f"{key} reads back wrong"
        woken = spun_up_since(after, status(server.endpoint))
        disk = data_disk_of(after, grid_bucket)["index"]
        assert set(woken) == {disk}, (
            f"reading dataset survey-2024 (grid bucket {grid_bucket}, disk {disk}) spun up "
            f"{ {i: role_of(disks(after)[i]) for i in woken} }")
        print(f"dataset survey-2024: {len(dataset_keys)} objects on grid bucket {grid_bucket}; read back with "
              f"{woken[disk]} spin-up(s) of disk {disk} and none elsewhere")
        assert server.stop() == 0, server.log_tail()
    except Exception:
        print(server.log_tail())
        raise
    finally:
        server.kill()
