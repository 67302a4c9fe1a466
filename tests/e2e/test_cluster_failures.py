"""Issue 13's failure items on the relay path, on real network namespaces: bench/cluster.sh --failures on the
example topology (client, core relay, two edge relays, six data nodes; 200 Mbit/s links shaped with tbf), each
scenario a write of k=3 copies of a 32 MiB object with a process killed (`kill -9`) once a quarter of the object
has reached it:

- the edge relay of the first tree: the write completes on a second tree around it, every copy byte-exact, and
  the client's uplink shows the resend (more than the object once, less than twice: the dead subtree's relay
  answers at once, so the client stops sending the first stream early);
- a data node of the tree (`--copies 3`): the write completes with the copy on another node; the killed node,
  restarted, holds nothing of the object (no half-visible copy, no spool file left);
- the same data node named with `--to`: nothing replaces it, so the write is not acknowledged (exit 1), the two
  other copies are whole and the killed node holds nothing.

Skipped, with the reason, when not root or when `ip netns` does not work here.
"""

import json
import os
import subprocess

import pytest

from conftest import REPO, binary
from test_cluster_netns import netns_unavailable

OBJECT_MIB = 32


def test_relay_and_node_killed_mid_write(tmp_path):
    reason = netns_unavailable()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "out"
    env = dict(os.environ, PERMAFROST_BIN=str(binary()))
    run = subprocess.run(
        [str(REPO / "bench" / "cluster.sh"), "--copies", "", "--groups", "", "--failures",
         "--failure-mib", str(OBJECT_MIB), "--out", str(out), "--scratch", str(tmp_path / "scratch")],
        env=env, capture_output=True, text=True, timeout=150,
    )
    rows = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else []
    failures = {r["scenario"]: r for r in rows if r["what"] == "failure"}
    assert run.returncode == 0, run.stdout + run.stderr
    assert set(failures) == {"relay", "node", "node-exact"}, rows
    size = OBJECT_MIB << 20
    for scenario, r in failures.items():
        assert r["killed_after_bytes"] >= size // 4, r          # killed mid-transfer
        assert r["killed"] in r["send"]["attempts"][0]["tree"], r
        assert r["byte_exact"] and r["nothing_visible_on_killed"], r
        assert r["killed"] not in r["nodes"].split(), r
        assert r["as_expected"], r

    relay = failures["relay"]
    assert relay["exit_code"] == 0 and relay["copies_ok"] == 3, relay
    attempts = relay["send"]["attempts"]
    assert len(attempts) == 2, attempts
    assert all(not a["ok"] and a["blame"] == relay["killed"] for a in attempts[0]["acks"]), attempts[0]
    assert attempts[1]["avoided"] == [relay["killed"]], attempts[1]
    assert relay["killed"] not in attempts[1]["tree"], attempts[1]
    assert all(a["ok"] for a in attempts[1]["acks"]), attempts[1]
    resent = relay["client_uplink_bytes"] / size
    assert 1.2 < resent < 2.0, f"client uplink {resent:.3f} x object"

    node = failures["node"]
    assert node["exit_code"] == 0 and node["copies_ok"] == 3, node
    first = node["send"]["attempts"][0]["acks"]
    assert [a["node"] for a in first if not a["ok"]] == [node["killed"]], first
    assert node["send"]["attempts"][1]["avoided"] == [node["killed"]]

    exact = failures["node-exact"]
    assert exact["exit_code"] == 1 and exact["copies_ok"] == 2, exact
    assert exact["killed"] in (exact["send"]["gave_up"] or ""), exact
    assert "not acknowledged" in (out / "client.log").read_text()

    summary = (out / "summary.txt").read_text()
    tag = summary.split("# namespaces ", 1)[1].split("-", 1)[0]
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"{tag}-" not in left, left
