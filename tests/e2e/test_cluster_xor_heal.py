"""XOR parity on exactly three nodes heals (issue 31, docs/cluster.md "Cross-node XOR parity", "Lost node"): with
one node SIGKILLed for good there is no free node for its fragments, so once it is lost each object is rebuilt
whole on both surviving holders and held as two whole copies (recorded under-replicated for parity); a second node
SIGKILLed then, every object still reads byte-exact through the last one; when a fourth node joins, the catch-up
re-encodes every object into three fragments and drops the whole copies. `cluster status --json` shows each phase.

Real `serve` processes on the throwaway PostgreSQL of scripts/pg-cluster.sh (the `pg` fixture of
test_cluster_nodes.py).
"""

import os
import time

from conftest import Server, client
from test_cluster_copies import psql
from test_cluster_nodes import TIMEOUT_MS, node_config, pg, wait_for  # noqa: F401 - pg is a fixture
from test_cluster_parity import cluster
from test_cluster_status import quick, states

LOST_AFTER_MS = TIMEOUT_MS + 2000
SIZES = [0, 1, 2, 3, 17, 1000, 4095, 4096, 65_537, 200_001, 1_048_576, 1_048_577, 2_500_001,
         7, 333, 12_345, 99_999, 500_000, 777_777, 3 * 1024 * 1024 + 5]


def per_node(st, field):
    return {n["name"]: n[field] for n in st["nodes"]}


def read_all(s3, objects):
    for key, data in objects.items():
        got = s3.get_object(Bucket="xheal", Key=key)["Body"].read()
        assert len(got) == len(data) and got == data, key


def test_three_nodes_xor_kept_as_two_whole_copies_then_re_encoded(pg, tmp_path):
    url = pg.database()
    extra = f"lost_after_ms = {LOST_AFTER_MS}\n"
    nodes = {}
    try:
        for name in "abc":
            nodes[name] = Server(tmp_path / name, config=node_config(url, "xheal", name, extra))
            nodes[name].start()
        s3 = {n: client(nodes[n].endpoint, retries=1) for n in nodes}
        s3["a"].create_bucket(Bucket="xheal")
        r = cluster(tmp_path, "bucket", "xheal", "--parity", "xor")
        assert r.returncode == 0, r.stderr
        objects = {}
        for i, size in enumerate(SIZES):
            key = f"obj-{i:02}-{size}"
            objects[key] = os.urandom(size)
            s3["abc"[i % 3]].put_object(Bucket="xheal", Key=key, Body=objects[key], ContentType="application/x-test",
                                        Metadata={"n": str(i)})
        n = len(objects)
        st = quick(tmp_path / "a")
        assert sum(per_node(st, "fragments_held").values()) == 3 * n, st["nodes"]
        assert set(per_node(st, "objects_held").values()) == {0}, "held as fragments, no whole copy"
        assert st["under_replicated"]["objects"] == 0

        # c SIGKILLed for good: every node up holds a fragment of every object, so none is free.
        nodes["c"].kill()
        killed = time.time()
        wait_for("c shown down", lambda: states(quick(tmp_path / "a"))["c"] == "down")
        r = cluster(tmp_path, "rebuild", "--node", "c")
        assert r.returncode == 0 and (f"0 fragment(s) rebuilt on nodes that hold no fragment of their object; {n} "
                                      "object(s) with no such node kept as 2 whole copies") in r.stdout, r

        def healed():
            s = quick(tmp_path / "a")
            held = per_node(s, "objects_held")
            return (states(s)["c"] == "lost" and held["a"] == n and held["b"] == n
                    and sum(per_node(s, "fragments_held").values()) == 0 and s["parity"] == []
                    and s["under_replicated"]["objects"] == n
                    and s["under_replicated"]["missing_copies"] == n and s)

        st = wait_for("every object held as two whole copies", healed, timeout_s=LOST_AFTER_MS / 1000 + 60)
        heal_s = time.time() - killed
        print(f"kill -> two whole copies of {n} objects: {heal_s:.1f} s (lost_after_ms {LOST_AFTER_MS})")
        assert psql(pg, url, "SELECT DISTINCT wanted, held FROM permafrost_cluster.under_replicated") == ["3|2"]
        logs = nodes["a"].log_tail(200_000) + nodes["b"].log_tail(200_000)
        assert "node c lost:" in logs and "switched to 2 whole copies" in logs, logs[-3000:]
        print("\n".join(line for line in logs.splitlines() if "node c lost:" in line))
        for name in "ab":
            head = s3[name].head_object(Bucket="xheal", Key="obj-05-1000")
            assert head["ContentType"] == "application/x-test" and head["Metadata"] == {"n": "5"}, head
            read_all(s3[name], objects)

        # A second node SIGKILLed: the last one still has every object, byte-exact.
        nodes["b"].kill()
        read_all(s3["a"], objects)

        # b back and a fourth node joins: three nodes up, the catch-up re-encodes into fragments.
        nodes["b"].start()
        nodes["d"] = Server(tmp_path / "d", config=node_config(url, "xheal", "d", extra))
        nodes["d"].start()
        s3["d"] = client(nodes["d"].endpoint, retries=1)
        joined = time.time()

        def re_encoded():
            s = quick(tmp_path / "a")
            return (sum(per_node(s, "fragments_held").values()) == 3 * n
                    and set(per_node(s, "objects_held").values()) == {0}
                    and s["under_replicated"]["objects"] == 0 and s)

        st = wait_for("every object back to three fragments", re_encoded, timeout_s=90)
        print(f"fourth node joined -> {n} objects re-encoded: {time.time() - joined:.1f} s")
        assert per_node(st, "fragments_held")["d"] > 0, st["nodes"]
        assert psql(pg, url, "SELECT DISTINCT node_id FROM permafrost_cluster.objects WHERE bucket = 'xheal'") == ["0"]
        for name in "abd":
            read_all(s3[name], objects)
        # The whole copies are dropped from the stores too (tombstones applied).
        wait_for("whole copies dropped", lambda: psql(
            pg, url, "SELECT count(*) FROM permafrost_cluster.tombstones t JOIN permafrost_cluster.nodes n "
                     "ON n.node_id = t.node_id WHERE n.name IN ('a', 'b', 'd')") == ["0"], timeout_s=30)
    finally:
        for s in nodes.values():
            s.kill()
