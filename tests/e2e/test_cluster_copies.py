"""`copies = k` through `permafrost serve` (issue 13, docs/cluster.md "Copies"): a PUT (single or multipart) on one
node is held by k nodes, each copy the same object (ETag, last modified, content type, metadata) and byte-exact
from its own store; a holder killed with SIGKILL leaves the object readable from another; a node killed while
clients write loses no acknowledged object and leaves no half-visible one; DELETE removes every copy, also with
a holder down at the time; DeleteObjects likewise; a node that was down catches up the copies it missed; a node
lost for `lost_after_ms` has its copies made again and brings nothing back; versioning and copies > 1 are refused
together.

Real processes and the throwaway PostgreSQL of scripts/pg-cluster.sh (the `pg` fixture of
test_cluster_nodes.py; skipped with the reason when not root or without PostgreSQL).
"""

import os
import random
import subprocess
import threading
import time

import pytest
from botocore.exceptions import ClientError

from conftest import Server, binary, client
from test_cluster_nodes import error_of, health, node_config, pg, wait_for  # noqa: F401 - pg is a fixture

MIB = 1024 * 1024


def start_nodes(tmp_path, url, names, copies):
    nodes = {}
    for name in names:
        s = Server(tmp_path / name, config=node_config(url, "copies", name, f"copies = {copies}\n"))
        s.start()
        nodes[name] = s
    return nodes


def stop_all(nodes):
    for s in nodes.values():
        s.kill()


def psql(pg, url, sql):
    database = url.rsplit("/", 1)[1]
    r = pg.as_postgres(pg.bin / "psql", "-At", "-h", pg.dir, "-p", pg.port, "-U", "postgres", "-d", database,
                       "-c", sql)
    return [line for line in r.stdout.splitlines() if line]


def holders(pg, url, bucket, key):
    """The nodes the directory names as holding bucket/key, by name."""
    return psql(pg, url, "SELECT n.name FROM permafrost_cluster.objects o JOIN permafrost_cluster.nodes n "
                         f"ON n.node_id = o.node_id WHERE o.bucket = '{bucket}' "
                         f"AND o.key = convert_to('{key}', 'UTF8') ORDER BY n.name")


def stored(pg, url, node, bucket):
    """The keys node `node`'s own store catalog holds in `bucket` (its schema pf_node_<node>), by key."""
    return psql(pg, url, f"SELECT convert_from(key, 'UTF8') FROM pf_node_{node}.objects "
                         f"WHERE bucket = '{bucket}' ORDER BY key")


def fnv1a(data: bytes) -> int:
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def preferred(obj: str, candidates: str) -> str:
    """The node a direct-hop write of `obj` sends its first copy to (tree_for_write: the least used link,
    used = fnv1a(obj NUL node) % 500, ties by name)."""
    return min(candidates, key=lambda n: (fnv1a(f"{obj}\0{n}".encode()) % 500, n))


def same_object(s3, bucket, key, body, head0):
    """`s3` (a node holding a copy) serves the object from its own store, identical to the origin's."""
    got = s3.get_object(Bucket=bucket, Key=key)
    assert got["Body"].read() == body
    for field in ("ETag", "LastModified", "ContentType", "Metadata", "ContentLength"):
        assert got[field] == head0[field], (field, got[field], head0[field])


def bucket_copies(tmp_path, name, *args):
    return subprocess.run([str(binary()), "cluster", "bucket", name, *args, "--data-dir", str(tmp_path / "a")],
                          capture_output=True, text=True, timeout=60)


class Writers:
    """Clients writing new keys `NODE/NNNN` of random sizes to `bucket` through each of `names` until stopped:
    `acknowledged` maps each key whose PUT was answered 200 to its body; a PUT that failed is not acknowledged
    (allowed, but it must not be half-visible) and is listed in `failed`."""

    def __init__(self, nodes, bucket, names, sizes):
        self.acknowledged, self.failed = {}, []
        self.lock, self.stop_event = threading.Lock(), threading.Event()
        self.threads = [threading.Thread(target=self._write, args=(nodes[n], bucket, n, seed, sizes))
                        for seed, n in enumerate(names)]

    def _write(self, server, bucket, node, seed, sizes):
        rng = random.Random(seed)
        s3 = client(server.endpoint, retries=1)
        i = 0
        while not self.stop_event.is_set():
            key = f"{node}/{i:04d}"
            body = rng.randbytes(rng.choice(sizes))
            try:
                s3.put_object(Bucket=bucket, Key=key, Body=body)
                with self.lock:
                    self.acknowledged[key] = body
            except Exception as e:  # noqa: BLE001 - not acknowledged
                self.failed.append(f"{key}: {e}")
                time.sleep(0.2)
            i += 1

    def start(self, *more):
        self.threads.extend(more)
        for t in self.threads:
            t.start()

    def stop(self):
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=120)


def put_single_and_multipart(s3, bucket):
    """PUT `single.bin` (3 MiB + 17 bytes, odd; content type and metadata) through node a and a 3-part multipart
    `multi.bin` (an "md5-N" ETag) through node b; return both bodies."""
    body = os.urandom(3 * MIB + 17)
    s3["a"].put_object(Bucket=bucket, Key="single.bin", Body=body, ContentType="application/x-test",
                       Metadata={"origin": "a"})
    parts = [os.urandom(5 * MIB), os.urandom(5 * MIB), os.urandom(123)]
    up = s3["b"].create_multipart_upload(Bucket=bucket, Key="multi.bin", Metadata={"parts": "3"})
    etags = [s3["b"].upload_part(Bucket=bucket, Key="multi.bin", UploadId=up["UploadId"], PartNumber=i + 1,
                                 Body=p)["ETag"] for i, p in enumerate(parts)]
    s3["b"].complete_multipart_upload(
        Bucket=bucket, Key="multi.bin", UploadId=up["UploadId"],
        MultipartUpload={"Parts": [{"ETag": e, "PartNumber": i + 1} for i, e in enumerate(etags)]})
    return body, b"".join(parts)


def assert_listed_objects_read_whole(lister, header, getter, bucket, acknowledged):
    """No half-visible object: every key listed (by `lister`) HEADs (by `header`) and reads whole (by `getter`),
    and an acknowledged one reads back byte-exact."""
    listed = [o["Key"] for o in lister.list_objects_v2(Bucket=bucket, MaxKeys=1000).get("Contents", [])]
    assert set(acknowledged) <= set(listed)
    for key in listed:
        size = header.head_object(Bucket=bucket, Key=key)["ContentLength"]
        got = getter.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert len(got) == size and (key not in acknowledged or got == acknowledged[key]), key


def test_put_is_held_by_k_nodes_survives_a_holder_killed_and_delete_removes_every_copy(pg, tmp_path):
    url = pg.database()
    nodes = start_nodes(tmp_path, url, ["a", "b", "c", "d"], copies=2)
    try:
        s3 = {n: client(nodes[n].endpoint) for n in nodes}
        s3["a"].create_bucket(Bucket="two")
        body, multi = put_single_and_multipart(s3, "two")
        for key, data, origin in (("single.bin", body, "a"), ("multi.bin", multi, "b")):
            held = holders(pg, url, "two", key)
            assert len(held) == 2 and origin in held, held
            head0 = s3[origin].get_object(Bucket="two", Key=key)
            if key == "multi.bin":
                assert head0["ETag"].endswith('-3"'), head0["ETag"]
            for n in held:
                same_object(s3[n], "two", key, data, head0)
            for n in set(nodes) - set(held):  # forwarded from a holder
                assert s3[n].get_object(Bucket="two", Key=key)["Body"].read() == data

        # A bucket's own setting; bad values refused with a clear error.
        s3["c"].create_bucket(Bucket="three")
        assert bucket_copies(tmp_path, "three", "--copies", "3").returncode == 0
        shown = bucket_copies(tmp_path, "three")
        assert shown.returncode == 0 and "copies = 3" in shown.stdout, shown
        for bad, message in (("0", "from 1"), ("5", "only 4 node(s)"), ("x", "from 1")):
            r = bucket_copies(tmp_path, "three", "--copies", bad)
            assert r.returncode != 0 and message in r.stderr, (bad, r.stderr)
        assert "no such bucket" in bucket_copies(tmp_path, "nope", "--copies", "2").stderr
        three = os.urandom(700 * 1024)
        s3["c"].put_object(Bucket="three", Key="x", Body=three)
        held3 = holders(pg, url, "three", "x")
        assert len(held3) == 3 and "c" in held3, held3

        # DELETE with every holder up removes every copy, also from each holder's own store.
        s3["a"].delete_object(Bucket="three", Key="x")
        assert holders(pg, url, "three", "x") == []
        for n in nodes:
            assert error_of(lambda: s3[n].get_object(Bucket="three", Key="x"))["Error"]["Code"] == "NoSuchKey"
        wait_for("tombstones applied",
                 lambda: psql(pg, url, "SELECT count(*) FROM permafrost_cluster.tombstones") == ["0"])

        # DeleteObjects removes every copy as DELETE does: gone from the directory, every node's answer and
        # listing, and (once the tombstones are applied) every node's own store.
        for i in range(4):
            s3["b"].put_object(Bucket="two", Key=f"many/{i}", Body=os.urandom(100_000 + i))
        assert all(len(holders(pg, url, "two", f"many/{i}")) == 2 for i in range(4))
        answer = s3["c"].delete_objects(Bucket="two", Delete={"Objects": [{"Key": f"many/{i}"} for i in range(4)]})
        assert sorted(d["Key"] for d in answer["Deleted"]) == [f"many/{i}" for i in range(4)]
        assert not answer.get("Errors"), answer
        for i in range(4):
            assert holders(pg, url, "two", f"many/{i}") == []
        wait_for("tombstones applied",
                 lambda: psql(pg, url, "SELECT count(*) FROM permafrost_cluster.tombstones") == ["0"])
        for n in nodes:
            assert not [k for k in stored(pg, url, n, "two") if k.startswith("many/")], n
            assert error_of(lambda: s3[n].head_object(Bucket="two", Key="many/0"))["Error"]["Code"] == "404"
            listed = [o["Key"] for o in s3[n].list_objects_v2(Bucket="two").get("Contents", [])]
            assert sorted(listed) == ["multi.bin", "single.bin"], (n, listed)

        # Versioning and copies > 1 are refused together, both ways, with the reason.
        e = error_of(lambda: s3["a"].put_bucket_versioning(Bucket="two",
                                                          VersioningConfiguration={"Status": "Enabled"}))
        assert e["Error"]["Code"] == "InvalidRequest" and "copies do not cover versioned" in e["Error"]["Message"]
        assert e["ResponseMetadata"]["HTTPStatusCode"] == 400
        e = error_of(lambda: s3["a"].create_bucket(Bucket="locked", ObjectLockEnabledForBucket=True))
        assert e["Error"]["Code"] == "InvalidRequest" and "copies = 2" in e["Error"]["Message"], e
        s3["a"].create_bucket(Bucket="versioned")
        assert bucket_copies(tmp_path, "versioned", "--copies", "1").returncode == 0
        s3["a"].put_bucket_versioning(Bucket="versioned", VersioningConfiguration={"Status": "Enabled"})
        r = bucket_copies(tmp_path, "versioned", "--copies", "2")
        assert r.returncode != 0 and "versioning is on for it (on node(s) a)" in r.stderr, r.stderr
        assert "copies = 1" in bucket_copies(tmp_path, "versioned").stdout

        # kill -9 of the other holder of single.bin: every node still reads it byte-exact (failover), at once
        # (the dead holder still counts as up) and after it shows down.
        other = next(n for n in holders(pg, url, "two", "single.bin") if n != "a")
        nodes[other].kill()
        alive = [n for n in nodes if n != other]
        for n in alive:
            assert client(nodes[n].endpoint, retries=1).get_object(
                Bucket="two", Key="single.bin")["Body"].read() == body
        wait_for(f"{other} shown down", lambda: health(tmp_path / "a")[other] == "down")
        for n in alive:
            assert s3[n].get_object(Bucket="two", Key="single.bin")["Body"].read() == body

        # DELETE with a holder down: gone everywhere, and the holder does not bring it back when it returns.
        s3["a"].delete_object(Bucket="two", Key="single.bin")
        assert holders(pg, url, "two", "single.bin") == []
        for n in alive:
            assert error_of(lambda: s3[n].get_object(Bucket="two", Key="single.bin"))["Error"]["Code"] == "NoSuchKey"
        nodes[other].start()
        wait_for(f"{other} shown up", lambda: health(tmp_path / "a")[other] == "up")
        assert holders(pg, url, "two", "single.bin") == []
        assert error_of(lambda: s3[other].get_object(Bucket="two", Key="single.bin"))["Error"]["Code"] == "NoSuchKey"
        assert error_of(lambda: s3[other].head_object(Bucket="two", Key="single.bin"))["Error"]["Code"] == "404"
        assert [o["Key"] for o in s3[other].list_objects_v2(Bucket="two").get("Contents", [])] == ["multi.bin"]
        assert psql(pg, url, "SELECT count(*) FROM permafrost_cluster.tombstones") == ["0"]
    finally:
        stop_all(nodes)


def test_kill_a_node_while_clients_write_loses_nothing_acknowledged(pg, tmp_path):
    url = pg.database()
    nodes = start_nodes(tmp_path, url, ["a", "b", "c", "d"], copies=2)
    try:
        client(nodes["a"].endpoint).create_bucket(Bucket="writes")
        writers = Writers(nodes, "writes", "abc", [64 * 1024, 700 * 1024, 2 * MIB + 5])
        acknowledged, lock, stop = writers.acknowledged, writers.lock, writers.stop_event
        errors = writers.failed

        def big_writer():
            # Large objects whose copy goes to d (the node a's direct-hop tree prefers for the key): d is
            # likely to be killed in the middle of receiving one.
            s3 = client(nodes["a"].endpoint, retries=1)
            for i in range(1000):
                key = f"big/{i:04d}"
                if stop.is_set() or len(acknowledged) > 200:
                    return
                if preferred("writes/" + key, "bcd") != "d":
                    continue
                body = os.urandom(24 * MIB)
                try:
                    s3.put_object(Bucket="writes", Key=key, Body=body)
                    with lock:
                        acknowledged[key] = body
                except ClientError as e:
                    errors.append(str(e))

        writers.start(threading.Thread(target=big_writer))
        wait_for("a few writes", lambda: len(acknowledged) >= 15, timeout_s=60)
        # Kill d while a copy is arriving there (d gets no client writes: a file in its cache's tmp is a copy).
        receiving = wait_for("a copy arriving at d",
                             lambda: any(f.stat().st_size > 0 for f in (tmp_path / "d/cache/tmp").iterdir()),
                             timeout_s=60)
        nodes["d"].kill()
        assert receiving
        killed_at = len(acknowledged)
        time.sleep(4)  # d still counts as up for the first 3 s: copies to it fail and go elsewhere
        writers.stop()
        assert len(acknowledged) > killed_at, "no write was acknowledged after the kill"
        nodes["d"].start()
        wait_for("d shown up", lambda: health(tmp_path / "a")["d"] == "up")

        s3 = {n: client(nodes[n].endpoint) for n in nodes}
        for key, body in acknowledged.items():
            held = holders(pg, url, "writes", key)
            assert len(held) >= 2, (key, held)
            for n in held:
                assert s3[n].get_object(Bucket="writes", Key=key)["Body"].read() == body, (key, n)
        # No half-visible object: everything listed (on any node) can be read, from any node.
        assert_listed_objects_read_whole(s3["d"], s3["b"], s3["c"], "writes", acknowledged)
    finally:
        stop.set()
        stop_all(nodes)


def test_a_node_that_was_down_catches_up_the_copies_it_missed(pg, tmp_path):
    url = pg.database()
    nodes = start_nodes(tmp_path, url, ["a", "b", "c"], copies=3)
    try:
        s3 = client(nodes["a"].endpoint)
        s3.create_bucket(Bucket="catch")
        nodes["c"].kill()
        wait_for("c shown down", lambda: health(tmp_path / "a")["c"] == "down")
        marks = {n: nodes[n].log_path.stat().st_size for n in "ab"}
        body = os.urandom(2 * MIB + 3)
        s3.put_object(Bucket="catch", Key="late", Body=body)  # answered with 2 of 3 copies
        assert holders(pg, url, "catch", "late") == ["a", "b"]
        assert psql(pg, url, "SELECT wanted, held FROM permafrost_cluster.under_replicated") == ["3|2"]
        for i in range(5):
            s3.put_object(Bucket="catch", Key=f"more/{i}", Body=os.urandom(64 * 1024 + i))
        # The catch-up retries the 6 objects every 0.9 s while c is down: the survivors' logs say so in a few
        # lines (c not up, objects short of copies), not one per object per pass. Each write's own line (one per
        # request) is not counted.
        time.sleep(8)
        warnings = [line for n in "ab" for line in nodes[n].log_path.read_bytes()[marks[n]:].decode(errors="replace")
                    .splitlines() if ("WARN" in line or "ERROR" in line) and "recorded as under-replicated" not in line]
        assert len(warnings) <= 5, "\n".join(warnings)
        nodes["c"].start()
        wait_for("c holds its copy", lambda: holders(pg, url, "catch", "late") == ["a", "b", "c"], timeout_s=30)
        assert client(nodes["c"].endpoint).get_object(Bucket="catch", Key="late")["Body"].read() == body
        wait_for("every object has its copies",
                 lambda: psql(pg, url, "SELECT count(*) FROM permafrost_cluster.under_replicated") == ["0"],
                 timeout_s=30)
    finally:
        stop_all(nodes)


def test_a_lost_node_s_copies_are_made_again_and_it_brings_nothing_back(pg, tmp_path):
    """A holder killed with SIGKILL for longer than lost_after_ms: its objects get their second copy back on
    the spare node; when it restarts it drops its stale copies (tombstones) and does not bring back an object
    deleted while it was away."""
    url = pg.database()
    nodes = {}
    for name in "abc":
        nodes[name] = Server(tmp_path / name, config=node_config(url, "copies", name,
                                                                 "copies = 2\nlost_after_ms = 5000\n"))
        nodes[name].start()
    try:
        s3 = {n: client(nodes[n].endpoint) for n in nodes}
        s3["a"].create_bucket(Bucket="lost")
        # Keys whose copy goes from a to c (a's direct-hop tree prefers c for them), and one that goes to b.
        keys = [k for k in (f"k{i}" for i in range(40)) if preferred(f"lost/{k}", "bc") == "c"][:3]
        other = next(k for k in (f"k{i}" for i in range(40)) if preferred(f"lost/{k}", "bc") == "b")
        bodies = {k: os.urandom(300_000 + i) for i, k in enumerate(keys + [other])}
        for k, body in bodies.items():
            s3["a"].put_object(Bucket="lost", Key=k, Body=body)
        assert all(holders(pg, url, "lost", k) == ["a", "c"] for k in keys)
        assert holders(pg, url, "lost", other) == ["a", "b"]
        nodes["c"].kill()
        # Down after 3 s, lost after 5 s: the catch-up makes the second copies on b.
        for k in keys:
            wait_for(f"{k} copied again", lambda: holders(pg, url, "lost", k) == ["a", "b"], timeout_s=30)
        assert psql(pg, url, "SELECT count(*) FROM permafrost_cluster.under_replicated") == ["0"]
        for k in keys:
            assert s3["b"].get_object(Bucket="lost", Key=k)["Body"].read() == bodies[k]
        assert sorted(stored(pg, url, "b", "lost")) == sorted(bodies)
        # Deleted while c is away; c still holds a copy of it in its store.
        s3["b"].delete_object(Bucket="lost", Key=keys[0])
        assert keys[0] in stored(pg, url, "c", "lost")
        nodes["c"].start()
        wait_for("c shown up", lambda: health(tmp_path / "a")["c"] == "up")
        wait_for("c applied its tombstones",
                 lambda: psql(pg, url, "SELECT count(*) FROM permafrost_cluster.tombstones") == ["0"])
        assert stored(pg, url, "c", "lost") == []
        assert holders(pg, url, "lost", keys[0]) == []
        for k in keys[1:]:
            assert holders(pg, url, "lost", k) == ["a", "b"]
        for n in nodes:
            assert error_of(lambda: s3[n].get_object(Bucket="lost", Key=keys[0]))["Error"]["Code"] == "NoSuchKey"
            listed = [o["Key"] for o in s3[n].list_objects_v2(Bucket="lost").get("Contents", [])]
            assert sorted(listed) == sorted(keys[1:] + [other]), (n, listed)
            for k in keys[1:] + [other]:
                assert s3[n].get_object(Bucket="lost", Key=k)["Body"].read() == bodies[k], (n, k)
    finally:
        stop_all(nodes)


REFUSE_DIRECTORY_CHANGES = (
    "CREATE OR REPLACE FUNCTION permafrost_cluster.refuse() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN RAISE EXCEPTION 'directory changes refused by the test'; END $$; "
    "CREATE TRIGGER refuse BEFORE INSERT OR UPDATE OR DELETE ON permafrost_cluster.objects "
    "FOR EACH ROW EXECUTE FUNCTION permafrost_cluster.refuse()")
ALLOW_DIRECTORY_CHANGES = "DROP TRIGGER refuse ON permafrost_cluster.objects"


def test_a_directory_step_that_failed_is_made_good_by_the_next_heartbeat(pg, tmp_path):
    """A write or delete whose step in the cluster directory failed while the database stayed up (no heartbeat
    saw an outage; here a trigger refuses every change of the directory's object rows): the client gets 503,
    the local commit stands, and once the directory takes changes again the next heartbeat's reconcile
    publishes the write and removes the rows of the deleted objects, without a restart. DeleteObjects and
    DeleteObject each, in a window of their own."""
    url = pg.database()
    nodes = start_nodes(tmp_path, url, ["a", "b"], copies=1)
    try:
        s3 = client(nodes["a"].endpoint, retries=1)
        s3.create_bucket(Bucket="behind")
        for key in ["old1", "old2"]:
            s3.put_object(Bucket="behind", Key=key, Body=key.encode())
            assert holders(pg, url, "behind", key) == ["a"]

        # Window 1: DeleteObjects.
        psql(pg, url, REFUSE_DIRECTORY_CHANGES)
        errors = s3.delete_objects(Bucket="behind", Delete={"Objects": [{"Key": "old2"}]}).get("Errors", [])
        assert [(e["Key"], e["Code"]) for e in errors] == [("old2", "ServiceUnavailable")], errors
        assert stored(pg, url, "a", "behind") == ["old1"]  # the local delete stood
        time.sleep(1.0)  # heartbeats: the directory still refuses, so its row stays
        assert holders(pg, url, "behind", "old2") == ["a"]
        psql(pg, url, ALLOW_DIRECTORY_CHANGES)
        wait_for("old2's row removed", lambda: holders(pg, url, "behind", "old2") == [], timeout_s=15)

        # Window 2: a PUT and a DeleteObject.
        psql(pg, url, REFUSE_DIRECTORY_CHANGES)
        body = os.urandom(300 * 1024)
        assert error_of(lambda: s3.put_object(Bucket="behind", Key="new", Body=body))[
            "ResponseMetadata"]["HTTPStatusCode"] == 503
        assert error_of(lambda: s3.delete_object(Bucket="behind", Key="old1"))[
            "ResponseMetadata"]["HTTPStatusCode"] == 503
        assert stored(pg, url, "a", "behind") == ["new"]
        time.sleep(1.0)
        assert holders(pg, url, "behind", "new") == [] and holders(pg, url, "behind", "old1") == ["a"]
        psql(pg, url, ALLOW_DIRECTORY_CHANGES)
        wait_for("the write published and old1's row removed",
                 lambda: (holders(pg, url, "behind", "new"), holders(pg, url, "behind", "old1")) == (["a"], []),
                 timeout_s=15)
        # Node b sees what node a holds: the new object (forwarded to a), not the deleted ones.
        b = client(nodes["b"].endpoint)
        assert b.get_object(Bucket="behind", Key="new")["Body"].read() == body
        assert [o["Key"] for o in b.list_objects_v2(Bucket="behind").get("Contents", [])] == ["new"]
    finally:
        stop_all(nodes)


def test_bad_copies_setting_is_refused_at_start(pg, tmp_path):
    url = pg.database()
    s = Server(tmp_path / "z", config=node_config(url, "copies", "z", "copies = 0\n"))
    with pytest.raises(RuntimeError) as e:
        s.start()
    assert "[cluster] copies = 0" in str(e.value)


def test_the_database_killed_while_clients_write_loses_nothing_acknowledged(pg, tmp_path):
    """The catalog's PostgreSQL killed with SIGKILL in the middle of writes (issue 13 "Killing … the database
    during writes"): writes fail while it is away (never acknowledged without their copies), every write that
    was acknowledged, before or after, reads back byte-exact from every node once it is back, and nothing
    listed is half there."""
    url = pg.database()
    nodes = start_nodes(tmp_path, url, ["a", "b", "c"], copies=2)
    try:
        client(nodes["a"].endpoint).create_bucket(Bucket="outage")
        writers = Writers(nodes, "outage", "abc", [16 * 1024, 300 * 1024, MIB + 5])
        acknowledged, failed, stop = writers.acknowledged, writers.failed, writers.stop_event
        writers.start()
        wait_for("a few writes", lambda: len(acknowledged) >= 15, timeout_s=60)
        pg.kill()
        killed_at = len(acknowledged)
        wait_for("writes failing while the database is away", lambda: len(failed) >= 3, timeout_s=30)
        pg.start()
        wait_for("writes acknowledged again", lambda: len(acknowledged) >= killed_at + 15, timeout_s=90)
        writers.stop()
        for n in nodes:
            wait_for(f"{n} shown up", lambda: health(tmp_path / "a")[n] == "up", timeout_s=30)

        s3 = {n: client(nodes[n].endpoint) for n in nodes}
        for key, body in acknowledged.items():
            held = holders(pg, url, "outage", key)
            assert len(held) >= 2, (key, held)
            for n in nodes:  # holders serve their own copy, the others forward
                assert s3[n].get_object(Bucket="outage", Key=key)["Body"].read() == body, (key, n)
        # Also the writes that failed after their local commit: whole, or not listed.
        assert_listed_objects_read_whole(s3["b"], s3["c"], s3["a"], "outage", acknowledged)
        # ... and none of them stays short of copies: their publish recorded them as under-replicated, so the
        # catch-up makes the copies the outage stopped.
        listed = [o["Key"] for o in s3["a"].list_objects_v2(Bucket="outage", MaxKeys=1000).get("Contents", [])]
        wait_for("every listed object held twice",
                 lambda: all(len(holders(pg, url, "outage", key)) >= 2 for key in listed), timeout_s=60)
    finally:
        stop.set()
        stop_all(nodes)
