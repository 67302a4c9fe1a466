"""The topology and live link utilisation in the shared catalog (issue 13 "Topology and trees", docs/cluster.md
"Topology in the catalog"), with real processes on loopback and a throwaway PostgreSQL (scripts/pg-cluster.sh;
skipped with the reason when not root or without PostgreSQL):

- a `permafrost serve` node with `[cluster] topology` loads the example topology into the catalog at start;
- relays (`relay serve`) and data nodes (`relay node`) report their link counters to the catalog (`--catalog`);
- `relay send --catalog` (no topology file: the catalog's) writes 2 copies along a replication tree; right
  after, `cluster status --json` shows use > 0 on exactly the links of that tree (down the tree), nothing on the
  other links, every relay's last report, and the transfer with its tree and outcome;
- a second send, while the first one's use is still fresh, gets a tree around the loaded links;
- `relay rebuild --catalog` is recorded as a rebuild transfer.
"""

import json
import subprocess
import time

from admin import admin
from conftest import REPO, Server, binary, free_port
from test_cluster_nodes import node_config, pg  # noqa: F401 - pg is the module's PostgreSQL fixture

OBJECT_BYTES = 8 * 1024 * 1024 + 123
RELAYS = ["core", "edge1", "edge2"]
DATA_NODES = ["n1", "n2", "n3", "n4", "n5", "n6"]


def cli(*args, timeout=120):
    return subprocess.run([str(binary()), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def status(url):
    r = cli("cluster", "status", "--catalog", url, "--json", timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def tree_edges(tree: str) -> set:
    """Edges (parent, child) of a rendered tree like `client → core → edge1 → { n1, n2 }`."""
    tokens = tree.replace("{", " { ").replace("}", " } ").replace(",", " , ").replace("→", " → ").split()
    edges, stack, last = set(), [], None
    parent = None
    for tok in tokens:
        if tok == "→":
            parent = last
        elif tok == "{":
            stack.append(parent)
        elif tok == "}":
            stack.pop()
        elif tok == ",":
            parent = stack[-1]
        else:
            if parent is not None:
                edges.add((parent, tok))
            last = tok
    return edges


def test_link_use_and_trees_in_the_catalog(pg, tmp_path):  # noqa: F811 - the fixture
    url = pg.database()
    topology = (REPO / "docs" / "cluster-topology.toml").read_text()
    serve_dir = tmp_path / "n1-serve"
    serve_dir.mkdir()
    (serve_dir / "topology.toml").write_text(topology)
    server = Server(serve_dir, config=node_config(url, "topo", "n1", 'topology = "topology.toml"'))
    procs = []
    try:
        server.start()
        log = server.log_path.read_text()
        assert "topology" in log and "loaded into the catalog" in log, log
        st = status(url)
        assert st["cluster"] == "topo" and st["topology"]["loaded_by"] == "n1", st
        assert len(st["links"]) == 9 and all(l["used_ab_mbit"] == 0 for l in st["links"]), st["links"]
        assert [r["name"] for r in st["relays"]] == RELAYS
        assert all(r["last_report"] is None for r in st["relays"])

        addrs = {}
        for name in RELAYS + DATA_NODES:
            port = free_port()
            addrs[name] = f"127.0.0.1:{port}"
            if name in RELAYS:
                cmd = ["relay", "serve", "--name", name, "--listen", addrs[name]]
            else:
                cmd = ["relay", "node", "--name", name, "--listen", addrs[name], "--data-dir", tmp_path / name]
            logf = open(tmp_path / f"{name}.log", "wb")
            procs.append(subprocess.Popen([str(binary()), *map(str, cmd), "--catalog", url, "--report-ms", "200"],
                                          stdout=logf, stderr=logf))
        # Every relay and data node has reported once.
        deadline = time.time() + 30
        while time.time() < deadline:
            st = status(url)
            if {r["node"] for r in st["reporters"]} >= set(RELAYS + DATA_NODES):
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"not every process reported: {st['reporters']}")

        payload = tmp_path / "object.bin"
        payload.write_bytes(bytes(range(256)) * (OBJECT_BYTES // 256) + b"x" * (OBJECT_BYTES % 256))
        addr_args = [a for n, addr in addrs.items() for a in ("--addr", f"{n}={addr}")]

        def send(key):
            r = cli("relay", "send", "--catalog", url, *addr_args, "--copies", "2", "--key", key, "--json", payload)
            assert r.returncode == 0, r.stdout + r.stderr
            return json.loads(r.stdout)

        first = send("one")
        assert first["copies_ok"] == 2, first
        st = status(url)
        edges = tree_edges(first["tree"])
        assert len(edges) == 4, first["tree"]  # client → core → edge → { two data nodes }
        used_down = {(l["a"], l["b"]) for l in st["links"] if l["used_ab_mbit"] > 0}
        assert used_down == edges, (first["tree"], st["links"])
        for l in st["links"]:
            if (l["a"], l["b"]) in edges:
                assert l["used_ab_mbit"] > 1 and l["bytes_ab"] >= OBJECT_BYTES, l
                assert l["used_ba_mbit"] < 1 and l["bytes_ba"] < 4096, l  # only the acks come back up
                assert l["measured_age_ms"] is not None, l
            else:
                assert l["used_ab_mbit"] == 0 and l["used_ba_mbit"] == 0, l
                assert l["bytes_ab"] == 0 and l["bytes_ba"] == 0, l
        assert all(r["last_report"] is not None and r["last_report"]["age_ms"] < 10_000 for r in st["relays"]), \
            st["relays"]
        t = st["transfers"][0]
        assert (t["kind"], t["name"], t["root"], t["tree"], t["k"], t["bytes"], t["outcome"]) == \
            ("write", "one", "client", first["tree"], 2, OBJECT_BYTES, "ok"), t

        # The first write's use is fresh: the next tree goes around the loaded edge relay.
        second = send("two")
        assert second["copies_ok"] == 2, second
        first_edge = next(c for p, c in edges if p == "core")
        assert first_edge not in second["tree"], (first["tree"], second["tree"])

        # A rebuild is recorded too (the XOR of two equal copies is zeros).
        holders = [c for p, c in edges if p == first_edge]
        out = tmp_path / "rebuilt.bin"
        r = cli("relay", "rebuild", "--catalog", url, *addr_args, "--onto", "n6" if "n6" not in holders else "n1",
                "--from", ",".join(holders), "--key", "one", "--bytes", OBJECT_BYTES, "--out", out, "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        assert out.read_bytes() == bytes(OBJECT_BYTES)
        st = status(url)
        kinds = [(t["kind"], t["name"], t["outcome"]) for t in st["transfers"]]
        assert kinds[:3] == [("rebuild", "one", "ok"), ("write", "two", "ok"), ("write", "one", "ok")], kinds

        # The text form: one line per node, relay, link and transfer, with units.
        text = cli("cluster", "status", "--data-dir", serve_dir)
        assert text.returncode == 0, text.stderr
        for needle in ["relay", "core → edge1", "Mbit/s", "transfer", "rebuild one", "write two"]:
            assert needle in text.stdout, text.stdout
        # The admin API answers the same JSON.
        api = admin(server.endpoint, "GET", "/_permafrost/api/v1/cluster")
        assert api.status_code == 200, api.text
        assert [t["name"] for t in api.json()["transfers"][:3]] == ["one", "two", "one"]
    finally:
        for p in procs:
            p.kill()
            p.wait()
        server.stop()
