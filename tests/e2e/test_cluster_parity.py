"""Cross-node XOR parity through `permafrost serve` (issue 13, docs/cluster.md "Cross-node XOR parity"): an object
of a `parity = xor` bucket is held as A, B (zero-padded) and A⊕B on three nodes and no whole copy; GET, HEAD and
ranged GET from every node are byte-exact; with the holder of A killed GET rebuilds A from B and P; a node lost
(down longer than lost_after_ms) has its fragments rebuilt on a node that holds none of that object, after which a
second holder can die; DELETE removes every fragment.

Real processes and the throwaway PostgreSQL of scripts/pg-cluster.sh (the `pg` fixture of test_cluster_nodes.py).
"""

import os
import subprocess

from conftest import Server, binary, client
from test_cluster_copies import psql, put_single_and_multipart
from test_cluster_nodes import TIMEOUT_MS, error_of, health, node_config, pg, wait_for  # noqa: F401 - pg

MIB = 1024 * 1024
LOST_AFTER_MS = TIMEOUT_MS + 2000


def start_nodes(tmp_path, url, names):
    nodes = {}
    for name in names:
        s = Server(tmp_path / name, config=node_config(url, "parity", name, f"lost_after_ms = {LOST_AFTER_MS}\n"))
        s.start()
        nodes[name] = s
    return nodes


def cluster(tmp_path, *args):
    return subprocess.run([str(binary()), "cluster", *args, "--data-dir", str(tmp_path / "a")],
                          capture_output=True, text=True, timeout=60)


def whole_holders(pg, url, bucket, key):
    return psql(pg, url, "SELECT o.node_id FROM permafrost_cluster.objects o "
                         f"WHERE o.bucket = '{bucket}' AND o.key = convert_to('{key}', 'UTF8') ORDER BY o.node_id")


def fragments(pg, url, bucket, key):
    """{role: node name} of bucket/key's fragments."""
    rows = psql(pg, url, "SELECT f.role, n.name FROM permafrost_cluster.fragments f JOIN permafrost_cluster.nodes n "
                         f"ON n.node_id = f.node_id WHERE f.bucket = '{bucket}' "
                         f"AND f.key = convert_to('{key}', 'UTF8') ORDER BY f.role")
    return dict(r.split("|") for r in rows)


def check_reads(s3, names, key, data, head0):
    n = len(data)
    h = (n + 1) // 2
    for name in names:
        got = s3[name].get_object(Bucket="par", Key=key)
        assert got["Body"].read() == data, (name, key)
        for field in ("ETag", "LastModified", "ContentType", "Metadata", "ContentLength"):
            assert got[field] == head0[field], (name, field, got[field], head0[field])
        head = s3[name].head_object(Bucket="par", Key=key)
        for field in ("ETag", "ContentType", "Metadata", "ContentLength"):
            assert head[field] == head0[field], (name, field)
        for first, last in ((0, 0), (5, h - 1), (h - 3, h + 4), (h, n - 1), (n - 1, n - 1), (1000, 3 * MIB)):
            last = min(last, n - 1)
            r = s3[name].get_object(Bucket="par", Key=key, Range=f"bytes={first}-{last}")
            assert r["Body"].read() == data[first:last + 1], (name, key, first, last)
            assert r["ContentRange"] == f"bytes {first}-{last}/{n}"
        assert s3[name].get_object(Bucket="par", Key=key, Range="bytes=-7")["Body"].read() == data[-7:]


def test_xor_parity_places_reads_survives_a_kill_rebuilds_a_lost_node_and_deletes(pg, tmp_path):
    url = pg.database()
    nodes = start_nodes(tmp_path, url, ["a", "b", "c", "d"])
    try:
        s3 = {n: client(nodes[n].endpoint, retries=1) for n in nodes}
        s3["a"].create_bucket(Bucket="par")
        # The setting, and its errors.
        r = cluster(tmp_path, "bucket", "par", "--parity", "xor", "--copies", "2")
        assert r.returncode != 0 and "cannot be used with" in r.stderr, r.stderr
        r = cluster(tmp_path, "bucket", "par", "--parity", "raid6")
        assert r.returncode != 0 and "`xor`" in r.stderr, r.stderr
        assert "no such bucket" in cluster(tmp_path, "bucket", "nope", "--parity", "xor").stderr
        r = cluster(tmp_path, "bucket", "par", "--parity", "xor")
        assert r.returncode == 0 and "parity = xor" in r.stdout, r
        assert "parity = xor" in cluster(tmp_path, "bucket", "par").stdout
        r = cluster(tmp_path, "rebuild", "--node", "b")
        assert r.returncode != 0 and "is up" in r.stderr, r.stderr

        body, multi = put_single_and_multipart(s3, "par")  # single.bin is odd: B is padded by one byte
        objects = {"single.bin": body, "multi.bin": multi}
        heads = {}
        for key, data in objects.items():
            frags = fragments(pg, url, "par", key)
            assert sorted(frags) == ["a", "b", "p"] and len(set(frags.values())) == 3, frags
            assert whole_holders(pg, url, "par", key) == ["0"], "no whole copy, only the parity row"
            heads[key] = s3["c"].head_object(Bucket="par", Key=key)
            assert heads[key]["ContentLength"] == len(data)
        assert heads["multi.bin"]["ETag"].endswith('-3"'), heads["multi.bin"]["ETag"]
        assert heads["single.bin"]["Metadata"] == {"origin": "a"}
        for n in nodes:
            listed = [o["Key"] for o in s3[n].list_objects_v2(Bucket="par").get("Contents", [])]
            assert listed == ["multi.bin", "single.bin"], (n, listed)
            assert "permafrost-fragments" not in [b["Name"] for b in s3[n].list_buckets()["Buckets"]]
        for key, data in objects.items():
            check_reads(s3, nodes, key, data, s3["d"].get_object(Bucket="par", Key=key))
        # Empty and one-byte objects: fragments of 0 and 1 bytes.
        for key, data in (("empty", b""), ("one", b"x")):
            s3["c"].put_object(Bucket="par", Key=key, Body=data)
            assert sorted(fragments(pg, url, "par", key)) == ["a", "b", "p"], key
            for n in nodes:
                assert s3[n].get_object(Bucket="par", Key=key)["Body"].read() == data, (n, key)
        # DeleteObjects removes objects held as fragments everywhere, as DELETE does (below).
        r = s3["b"].delete_objects(Bucket="par", Delete={"Objects": [{"Key": "empty"}, {"Key": "one"}]})
        assert sorted(d["Key"] for d in r.get("Deleted", [])) == ["empty", "one"] and not r.get("Errors"), r
        for key in ("empty", "one"):
            assert fragments(pg, url, "par", key) == {}, key
            assert whole_holders(pg, url, "par", key) == [], key
            for n in nodes:
                assert error_of(lambda: s3[n].head_object(Bucket="par", Key=key))["Error"]["Code"] in ("404", "NoSuchKey")

        # kill -9 of the holder of A: at once (it still counts as up) and after it shows down, A is B ⊕ P.
        frags = fragments(pg, url, "par", "single.bin")
        dead = frags["a"]
        nodes[dead].kill()
        alive = [n for n in nodes if n != dead]
        for n in alive:
            assert s3[n].get_object(Bucket="par", Key="single.bin")["Body"].read() == body
        wait_for(f"{dead} shown down", lambda: health(tmp_path / alive[0])[dead] == "down")
        for key, data in objects.items():
            head0 = s3[alive[0]].head_object(Bucket="par", Key=key)
            for n in alive:
                got = s3[n].get_object(Bucket="par", Key=key, Range="bytes=3-")
                assert got["Body"].read() == data[3:]
                assert s3[n].get_object(Bucket="par", Key=key)["Body"].read() == data
                assert s3[n].head_object(Bucket="par", Key=key)["ETag"] == head0["ETag"]

        # Lost: the node without a fragment of single.bin rebuilds A; every fragment ends on a live node.
        spare = next(n for n in nodes if n not in frags.values())
        wait_for("fragment a rebuilt on the spare node",
                 lambda: fragments(pg, url, "par", "single.bin").get("a") == spare, timeout_s=30)
        wait_for("every fragment on a live node",
                 lambda: all(dead not in fragments(pg, url, "par", k).values() for k in objects), timeout_s=30)
        etag = heads["single.bin"]["ETag"].strip('"')
        stored = s3[spare].get_object(Bucket="permafrost-fragments", Key=f"par/single.bin/{etag}/a")["Body"].read()
        assert stored == body[:(len(body) + 1) // 2], "the rebuilt fragment is the original half"
        # A second original holder dies: still byte-exact (its half from the other two).
        second = frags["b"]
        nodes[second].kill()
        left = [n for n in alive if n != second]
        for n in left:
            for key, data in objects.items():
                assert s3[n].get_object(Bucket="par", Key=key)["Body"].read() == data, (n, key)

        # DELETE: the object and its fragments go; the holders up drop their fragments (tombstones applied).
        s3[left[0]].delete_object(Bucket="par", Key="single.bin")
        assert fragments(pg, url, "par", "single.bin") == {}
        assert whole_holders(pg, url, "par", "single.bin") == []
        for n in left:
            assert error_of(lambda: s3[n].get_object(Bucket="par", Key="single.bin"))["Error"]["Code"] == "NoSuchKey"
        wait_for("live holders dropped their fragments", lambda: psql(
            pg, url, "SELECT count(*) FROM permafrost_cluster.tombstones t JOIN permafrost_cluster.nodes n "
                     f"ON n.node_id = t.node_id WHERE n.name IN ({', '.join(repr(n) for n in left)})") == ["0"])
        for n in left:
            assert error_of(lambda: s3[n].get_object(Bucket="permafrost-fragments",
                                                     Key=f"par/single.bin/{etag}/a"))["Error"]["Code"] == "NoSuchKey"
    finally:
        for s in nodes.values():
            s.kill()


def test_parity_needs_three_nodes(pg, tmp_path):
    url = pg.database()
    nodes = start_nodes(tmp_path, url, ["a", "b"])
    try:
        client(nodes["a"].endpoint).create_bucket(Bucket="two")
        r = cluster(tmp_path, "bucket", "two", "--parity", "xor")
        assert r.returncode != 0 and "only 2 node(s); XOR parity needs 3" in r.stderr, r.stderr
    finally:
        for s in nodes.values():
            s.kill()


def test_a_write_with_a_node_down_stays_whole_then_the_catch_up_places_its_fragments(pg, tmp_path):
    url = pg.database()
    nodes = start_nodes(tmp_path, url, ["a", "b", "c"])
    try:
        s3 = client(nodes["a"].endpoint)
        s3.create_bucket(Bucket="par")
        assert cluster(tmp_path, "bucket", "par", "--parity", "xor").returncode == 0
        nodes["c"].kill()
        wait_for("c shown down", lambda: health(tmp_path / "a")["c"] == "down")
        body = os.urandom(MIB + 1)
        s3.put_object(Bucket="par", Key="late", Body=body)  # answered: whole on a, under-replicated
        assert fragments(pg, url, "par", "late") == {}
        assert len(whole_holders(pg, url, "par", "late")) == 1
        assert psql(pg, url, "SELECT wanted, held FROM permafrost_cluster.under_replicated") == ["3|1"]
        assert client(nodes["b"].endpoint).get_object(Bucket="par", Key="late")["Body"].read() == body
        nodes["c"].start()
        wait_for("fragments placed by the catch-up",
                 lambda: sorted(fragments(pg, url, "par", "late")) == ["a", "b", "p"], timeout_s=30)
        assert whole_holders(pg, url, "par", "late") == ["0"]
        assert psql(pg, url, "SELECT count(*) FROM permafrost_cluster.under_replicated") == ["0"]
        for n in nodes:
            assert client(nodes[n].endpoint).get_object(Bucket="par", Key="late")["Body"].read() == body
    finally:
        for s in nodes.values():
            s.kill()
