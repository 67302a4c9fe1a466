"""`permafrost cluster status` as an operator runs a cluster from it (issue 31, docs/cluster.md "`permafrost cluster
status`"): each node up, down, then lost after `lost_after_ms`, with since-when; the objects a lost node held
counted per bucket as under-replicated; the count going to 0 once a new node takes the copies, with the recovery
rate; the database shown once without password or options; the admin API and the Prometheus metrics showing the
same numbers.

Real `serve` processes on the throwaway PostgreSQL of scripts/pg-cluster.sh (the `pg` fixture of
test_cluster_nodes.py; skipped with the reason when not root or without PostgreSQL).
"""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ACCESS_KEY, REPO, SECRET_KEY, Server, binary, client
from ops import call, metrics
from test_cluster_nodes import node_config, pg, wait_for  # noqa: F401 - pg is a fixture

LOST_AFTER_MS = 8000
UI_DIR = REPO / "tests" / "e2e" / "ui"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


def status(data_dir, *extra) -> dict:
    r = subprocess.run([str(binary()), "cluster", "status", "--data-dir", str(data_dir), "--json", *extra],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def quick(data_dir) -> dict:
    return status(data_dir, "--sample-ms", "0")


def states(st) -> dict:
    return {n["name"]: n["state"] for n in st["nodes"]}


def series(text: str, name: str) -> dict:
    """`name{labels} value` lines of a metrics text: {labels: value}."""
    out = {}
    for m in re.finditer(rf"^{name}(\{{[^}}]*\}})? (\S+)$", text, re.M):
        out[m.group(1) or ""] = float(m.group(2))
    return out


def dashboard_shows(endpoint, lost, short, server):
    """The dashboard's Cluster section in headless Chromium (tests/e2e/ui/dashboard_cluster.mjs) shows `lost`
    lost and `short` ({bucket: objects}) under-replicated; a screenshot in target/test-artifacts/cluster/."""
    if not Path(CHROMIUM).exists() or not (UI_DIR / "node_modules" / "playwright-core").exists():
        pytest.fail("chromium or playwright-core missing: run scripts/setup-deps.sh as root")
    artifacts = Path(os.environ.get("PERMAFROST_ARTIFACTS", REPO / "target" / "test-artifacts")) / "cluster"
    shutil.rmtree(artifacts, ignore_errors=True)
    artifacts.mkdir(parents=True)
    env = dict(os.environ, ENDPOINT=endpoint, ACCESS_KEY=ACCESS_KEY, SECRET_KEY=SECRET_KEY, LOST=lost,
               SHORT=json.dumps(short), ARTIFACTS=str(artifacts), CHROMIUM=CHROMIUM)
    run = subprocess.run(["node", str(UI_DIR / "dashboard_cluster.mjs")], env=env, capture_output=True, text=True,
                         timeout=120)
    print(run.stdout)
    assert run.returncode == 0, f"{run.stdout}\n{run.stderr}\nserver log: {server.log_tail()}"
    assert (artifacts / "cluster.png").stat().st_size > 1000


def test_status_through_a_node_lost_and_the_recovery(pg, tmp_path):
    url = pg.database()
    extra = f"copies = 2\nlost_after_ms = {LOST_AFTER_MS}\n"
    nodes = {}
    try:
        for name in "ab":
            nodes[name] = Server(tmp_path / name, config=node_config(url, "st", name, extra))
            nodes[name].start()
        s3 = client(nodes["a"].endpoint)
        s3.create_bucket(Bucket="photos")
        s3.create_bucket(Bucket="docs")
        bodies = {("photos", f"p{i}"): os.urandom(100_000 + i) for i in range(3)}
        bodies[("docs", "d0")] = os.urandom(50_000)
        for (bucket, key), body in bodies.items():
            s3.put_object(Bucket=bucket, Key=key, Body=body)

        # All up: the database once, without password or options; nothing short of copies.
        st = quick(tmp_path / "a")
        assert states(st) == {"a": "up", "b": "up"}, st
        assert (st["nodes_up"], st["nodes_down"], st["nodes_lost"]) == (2, 0, 0)
        assert st["lost_after_ms"] == LOST_AFTER_MS and st["timeout_ms"] == 3000
        database = url.split("://", 1)[1]
        user = database.split("@", 1)[0].split(":", 1)[0]
        assert st["database"] == f"{user}@{database.split('@', 1)[1]}", st["database"]
        assert "options" not in st["database"] and "search_path" not in st["database"]
        assert all(n["state_for_ms"] is None and n["objects_held"] == 4 for n in st["nodes"]), st["nodes"]
        assert st["under_replicated"] == {"objects": 0, "bytes": 0, "missing_copies": 0, "buckets": []}
        assert st["parity"] == [] and all(n["fragments_held"] == 0 for n in st["nodes"])
        assert not st["recovery"]["in_progress"]

        # b killed: down after timeout_ms, with how long; then lost after lost_after_ms.
        nodes["b"].kill()
        down = wait_for("b shown down", lambda: (s := quick(tmp_path / "a")) and states(s)["b"] == "down" and s)
        b = next(n for n in down["nodes"] if n["name"] == "b")
        assert b["health"] == "down" and b["state_for_ms"] >= 0 and b["heartbeat_age_ms"] > 3000, b
        assert b["state_since_unix_ms"] == down["now_unix_ms"] - b["state_for_ms"]
        lost = wait_for("b shown lost with its objects under-replicated",
                        lambda: (s := quick(tmp_path / "a")) and states(s)["b"] == "lost"
                        and s["under_replicated"]["objects"] == 4 and s, timeout_s=40)
        b = next(n for n in lost["nodes"] if n["name"] == "b")
        assert b["heartbeat_age_ms"] > LOST_AFTER_MS and b["health"] == "down", b
        assert (lost["nodes_up"], lost["nodes_down"], lost["nodes_lost"]) == (1, 0, 1)
        size = {bk: sum(len(v) for (bucket, _), v in bodies.items() if bucket == bk) for bk in ("docs", "photos")}
        assert lost["under_replicated"]["buckets"] == [
            {"bucket": "docs", "objects": 1, "bytes": size["docs"], "missing_copies": 1},
            {"bucket": "photos", "objects": 3, "bytes": size["photos"], "missing_copies": 3},
        ], lost["under_replicated"]
        assert lost["under_replicated"]["bytes"] == size["docs"] + size["photos"]
        # No spare node: nothing heals, so no rate and no estimate (the CLI sampled twice).
        sampled = status(tmp_path / "a", "--sample-ms", "500")
        r = sampled["recovery"]
        assert r["in_progress"] and r["remaining_objects"] == 4 and r["samples"] == 2, r
        assert r["healed_objects"] == 0 and r["eta_ms"] is None, r
        text = subprocess.run([str(binary()), "cluster", "status", "--data-dir", str(tmp_path / "a"),
                               "--sample-ms", "0"], capture_output=True, text=True, timeout=60).stdout
        assert "lost for" in text and "under-replicated: 4 object(s)" in text, text
        assert "photos" in text and "options" not in text, text

        # The admin API and the metrics show the same numbers.
        api = call(nodes["a"].endpoint, "GET", "/cluster")
        assert api.status_code == 200, api.text
        body = api.json()
        assert states(body) == {"a": "up", "b": "lost"}
        assert body["under_replicated"]["buckets"] == lost["under_replicated"]["buckets"]
        assert body["database"] == st["database"] and body["lost_after_ms"] == LOST_AFTER_MS
        text = metrics(nodes["a"].endpoint)
        assert series(text, "permafrost_cluster_nodes") == {
            '{state="up"}': 1.0, '{state="down"}': 0.0, '{state="lost"}': 1.0}, text
        assert series(text, "permafrost_cluster_under_replicated_objects") == {
            '{bucket="docs"}': 1.0, '{bucket="photos"}': 3.0}
        assert series(text, "permafrost_cluster_under_replicated_bytes") == {
            '{bucket="docs"}': float(size["docs"]), '{bucket="photos"}': float(size["photos"])}
        assert series(text, "permafrost_cluster_lost_after_seconds") == {"": LOST_AFTER_MS / 1000}
        assert series(text, "permafrost_cluster_node_state")['{node="b",state="lost"}'] == 1.0
        dashboard_shows(nodes["a"].endpoint, "b", {"docs": 1, "photos": 3}, nodes["a"])

        # Recovery: a new node takes the missing copies; the count goes to 0, the API saw it heal.
        nodes["c"] = Server(tmp_path / "c", config=node_config(url, "st", "c", extra))
        nodes["c"].start()
        wait_for("copies made on c", lambda: call(nodes["a"].endpoint, "GET", "/cluster").json()
                 ["under_replicated"]["objects"] == 0, timeout_s=60)
        done = quick(tmp_path / "c")
        assert states(done) == {"a": "up", "b": "lost", "c": "up"}
        assert done["under_replicated"]["buckets"] == [] and not done["recovery"]["in_progress"]
        assert next(n for n in done["nodes"] if n["name"] == "c")["objects_held"] == 4
        r = call(nodes["a"].endpoint, "GET", "/cluster").json()["recovery"]
        assert r["healed_objects"] == 4 and r["objects_per_minute"] > 0 and r["eta_ms"] is None, r
        text = metrics(nodes["a"].endpoint)
        assert series(text, "permafrost_cluster_under_replicated_objects") == {}
        assert series(text, "permafrost_cluster_recovery_remaining_objects") == {"": 0.0}
        assert series(text, "permafrost_cluster_recovery_objects_per_second")[""] > 0
        for (bucket, key), body in bodies.items():
            assert client(nodes["c"].endpoint).get_object(Bucket=bucket, Key=key)["Body"].read() == body
    finally:
        for s in nodes.values():
            s.kill()


def test_status_counts_the_parity_fragments_of_nodes_down_and_lost(pg, tmp_path):
    """An XOR bucket on three nodes, one killed: its fragments on that node show per bucket as on a node down,
    then on a lost node (what the rebuild makes again), and count in what recovery has left."""
    url = pg.database()
    extra = f"lost_after_ms = {LOST_AFTER_MS}\n"
    nodes = {}
    try:
        for name in "abc":
            nodes[name] = Server(tmp_path / name, config=node_config(url, "px", name, extra))
            nodes[name].start()
        s3 = client(nodes["a"].endpoint)
        s3.create_bucket(Bucket="xor")
        r = subprocess.run([str(binary()), "cluster", "bucket", "xor", "--parity", "xor", "--data-dir",
                            str(tmp_path / "a")], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        for i in range(4):
            s3.put_object(Bucket="xor", Key=f"x{i}", Body=os.urandom(200_000 + i))
        st = quick(tmp_path / "a")
        assert st["parity"] == [], st["parity"]
        held = {n["name"]: n["fragments_held"] for n in st["nodes"]}
        assert sum(held.values()) == 12 and held["c"] > 0, held
        nodes["c"].kill()
        down = wait_for("c shown down", lambda: (s := quick(tmp_path / "a")) and states(s)["c"] == "down" and s)
        assert down["parity"] == [{"bucket": "xor", "fragments_on_down": held["c"], "fragments_on_lost": 0}]
        lost = wait_for("c shown lost", lambda: (s := quick(tmp_path / "a")) and states(s)["c"] == "lost" and s,
                        timeout_s=40)
        on_lost = sum(p["fragments_on_lost"] for p in lost["parity"])
        assert on_lost <= held["c"] and all(p["fragments_on_down"] == 0 for p in lost["parity"]), lost["parity"]
        assert lost["recovery"]["remaining_objects"] == lost["under_replicated"]["objects"] + on_lost, lost
        text = subprocess.run([str(binary()), "cluster", "status", "--data-dir", str(tmp_path / "a"),
                               "--sample-ms", "0"], capture_output=True, text=True, timeout=60).stdout
        if on_lost:
            assert f"parity xor: {on_lost} fragment(s) on lost nodes" in text, text
    finally:
        for s in nodes.values():
            s.kill()
