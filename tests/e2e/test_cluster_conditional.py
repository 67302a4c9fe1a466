"""Conditional writes hold cluster-wide (docs/archive.md "Conditional requests", docs/cluster.md "Conditional
writes"): two clients on two nodes racing `If-None-Match: *` PUTs of one key get exactly one 200 and one 412 each
round, and every node then reads the winner's bytes (the loser's node keeps nothing of its write); `If-Match`
through a node that does not hold the object is decided by the directory (the holder's ETag replaces it, a wrong or
stale ETag is 412, a key that exists nowhere 404); CompleteMultipartUpload and CopyObject with `If-None-Match: *`
on a key another node holds are 412.

Real processes on the throwaway PostgreSQL of scripts/pg-cluster.sh (the `pg` fixture of test_cluster_nodes.py;
skipped with the reason when not root or without PostgreSQL).
"""

import os
import threading

from conftest import client
from test_cluster_copies import holders, stored
from test_cluster_nodes import error_of, pg, start_nodes  # noqa: F401 - pg is a fixture


def answer(call, **kwargs):
    """(HTTP status, error code or None, response) of one call."""
    try:
        r = call(**kwargs)
        return r["ResponseMetadata"]["HTTPStatusCode"], None, r
    except Exception as e:  # noqa: BLE001 - botocore's ClientError
        resp = getattr(e, "response", None)
        if resp is None:
            raise
        return resp["ResponseMetadata"]["HTTPStatusCode"], resp["Error"]["Code"], resp


def race(endpoints, bucket, key, bodies):
    """Each body PUT at once through its own node (own client, own thread) under If-None-Match: *."""
    clients = [client(e, retries=1) for e in endpoints]
    barrier = threading.Barrier(len(bodies))
    results = [None] * len(bodies)

    def put(i):
        barrier.wait()
        status, code, _ = answer(clients[i].put_object, Bucket=bucket, Key=key, Body=bodies[i], IfNoneMatch="*")
        results[i] = (status, code)

    threads = [threading.Thread(target=put, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


def test_conditional_writes_hold_across_nodes(pg, tmp_path):
    url = pg.database()
    nodes = start_nodes(tmp_path, url, ["a", "b", "c"])
    try:
        s3 = {n: client(nodes[n].endpoint) for n in nodes}
        s3["a"].create_bucket(Bucket="locks")

        # Two clients on nodes a and b race to create each key: exactly one wins every round, everywhere.
        for round_ in range(8):
            key = f"lock-{round_}"
            size = 1000 if round_ % 2 == 0 else 3 * 1024 * 1024 + 7  # small and streamed bodies
            bodies = [os.urandom(size), os.urandom(size)]
            results = race([nodes["a"].endpoint, nodes["b"].endpoint], "locks", key, bodies)
            assert sorted(results, key=str) == sorted([(200, None), (412, "PreconditionFailed")], key=str), \
                f"round {round_}: {results}"
            won = results.index((200, None))
            winner, loser = ("a", "b") if won == 0 else ("b", "a")
            for n in nodes:
                assert s3[n].get_object(Bucket="locks", Key=key)["Body"].read() == bodies[won], (round_, n)
            assert holders(pg, url, "locks", key) == [winner], round_
            assert key not in stored(pg, url, loser, "locks"), f"round {round_}: the refused write stayed on {loser}"

        # If-Match through a node that does not hold the object: the directory's current version decides.
        v1 = s3["a"].put_object(Bucket="locks", Key="cas", Body=b"v1 on a")
        status, code, _ = answer(s3["b"].put_object, Bucket="locks", Key="cas", Body=b"wrong", IfMatch='"0000"')
        assert (status, code) == (412, "PreconditionFailed")
        assert "cas" not in stored(pg, url, "b", "locks")
        v2 = s3["b"].put_object(Bucket="locks", Key="cas", Body=b"v2 on b", IfMatch=v1["ETag"])
        for n in nodes:
            assert s3[n].get_object(Bucket="locks", Key="cas")["Body"].read() == b"v2 on b", n
        assert holders(pg, url, "locks", "cas") == ["b"]
        # Node a still holds v1 (stale): v1's ETag is refused there, v2's accepted there.
        status, code, _ = answer(s3["a"].put_object, Bucket="locks", Key="cas", Body=b"stale", IfMatch=v1["ETag"])
        assert (status, code) == (412, "PreconditionFailed")
        s3["a"].put_object(Bucket="locks", Key="cas", Body=b"v3 on a", IfMatch=v2["ETag"])
        for n in nodes:
            assert s3[n].get_object(Bucket="locks", Key="cas")["Body"].read() == b"v3 on a", n
        # If-Match on a key that exists on no node: 404, as on one server.
        status, code, _ = answer(s3["c"].put_object, Bucket="locks", Key="nowhere", Body=b"x", IfMatch="*")
        assert (status, code) == (404, "NoSuchKey")

        # CompleteMultipartUpload with If-None-Match on a key another node holds: 412, nothing visible.
        s3["a"].put_object(Bucket="locks", Key="mp", Body=b"held by a")
        up = s3["b"].create_multipart_upload(Bucket="locks", Key="mp")
        part = s3["b"].upload_part(Bucket="locks", Key="mp", UploadId=up["UploadId"], PartNumber=1, Body=b"mp on b")
        status, code, _ = answer(s3["b"].complete_multipart_upload, Bucket="locks", Key="mp",
                                 UploadId=up["UploadId"], IfNoneMatch="*",
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
        assert (status, code) == (412, "PreconditionFailed")
        for n in nodes:
            assert s3[n].get_object(Bucket="locks", Key="mp")["Body"].read() == b"held by a", n
        assert holders(pg, url, "locks", "mp") == ["a"]
        assert "mp" not in stored(pg, url, "b", "locks")
        # ... and on a key that exists nowhere it creates it.
        up = s3["c"].create_multipart_upload(Bucket="locks", Key="mp-new")
        part = s3["c"].upload_part(Bucket="locks", Key="mp-new", UploadId=up["UploadId"], PartNumber=1, Body=b"new")
        s3["c"].complete_multipart_upload(Bucket="locks", Key="mp-new", UploadId=up["UploadId"], IfNoneMatch="*",
                                          MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
        assert s3["a"].get_object(Bucket="locks", Key="mp-new")["Body"].read() == b"new"

        # CopyObject with If-None-Match onto a key another node holds: 412.
        s3["c"].put_object(Bucket="locks", Key="source", Body=b"source on c")
        status, code, _ = answer(s3["c"].copy_object, Bucket="locks", Key="mp",
                                 CopySource={"Bucket": "locks", "Key": "source"}, IfNoneMatch="*")
        assert (status, code) == (412, "PreconditionFailed")
        assert s3["b"].get_object(Bucket="locks", Key="mp")["Body"].read() == b"held by a"
        assert "mp" not in stored(pg, url, "c", "locks")
    finally:
        for s in nodes.values():
            s.kill()


def test_with_copies_a_retried_conditional_completion_keeps_its_object(pg, tmp_path):
    """copies = 2: the winner of a race is held twice; a CompleteMultipartUpload under If-None-Match retried after
    it succeeded (its copy on another node already published) gets 200 again and its object stays everywhere."""
    from test_cluster_copies import start_nodes as start_with_copies

    url = pg.database()
    nodes = start_with_copies(tmp_path, url, ["a", "b", "c"], copies=2)
    try:
        s3 = {n: client(nodes[n].endpoint) for n in nodes}
        s3["a"].create_bucket(Bucket="two")
        bodies = [os.urandom(2000), os.urandom(2000)]
        results = race([nodes["a"].endpoint, nodes["b"].endpoint], "two", "lock", bodies)
        assert sorted(results, key=str) == sorted([(200, None), (412, "PreconditionFailed")], key=str), results
        won = results.index((200, None))
        assert len(holders(pg, url, "two", "lock")) == 2
        for n in nodes:
            assert s3[n].get_object(Bucket="two", Key="lock")["Body"].read() == bodies[won], n

        up = s3["b"].create_multipart_upload(Bucket="two", Key="mp")
        part = s3["b"].upload_part(Bucket="two", Key="mp", UploadId=up["UploadId"], PartNumber=1, Body=b"mp on b")
        parts = {"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]}
        done = s3["b"].complete_multipart_upload(Bucket="two", Key="mp", UploadId=up["UploadId"], IfNoneMatch="*",
                                                 MultipartUpload=parts)
        assert len(holders(pg, url, "two", "mp")) == 2
        again = s3["b"].complete_multipart_upload(Bucket="two", Key="mp", UploadId=up["UploadId"],
                                                  IfNoneMatch="*", MultipartUpload=parts)
        assert again["ETag"] == done["ETag"]
        assert len(holders(pg, url, "two", "mp")) == 2
        for n in nodes:
            assert s3[n].get_object(Bucket="two", Key="mp")["Body"].read() == b"mp on b", n
    finally:
        for s in nodes.values():
            s.kill()
