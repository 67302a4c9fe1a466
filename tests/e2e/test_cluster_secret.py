"""Authenticated cluster traffic (issue 31, docs/security.md "Cluster traffic", docs/cluster.md "Cluster secret"):
two `permafrost serve` nodes with `copies = 2` and a peer in another network namespace, joined to node a's
cluster address by a veth pair.

- The peer without the secret (the old unauthenticated protocol, a wrong secret, nothing at all) is refused by
  node a's relay before anything is read, and node a's log names the peer's address and the reason, once per
  address however often it retries; with the catalog's secret the same peer's handshake succeeds and the node
  proves itself back (the protocol as docs/cluster.md writes it, implemented again here).
- Copies between the nodes (both ways) work: an object written through either node is held by both.
- A node with a wrong `[cluster] secret_file` gets no copy in: the node it tried refuses and logs it.
- Relays listen only where configured: `ss -ltnp` shows node a's relay on its cluster address only and node
  b's (no `relay_address`) on the host of its own address; connecting to node a's relay port on another of its
  addresses is refused; a node whose address names no host refuses to start.

Real processes and the throwaway PostgreSQL of scripts/pg-cluster.sh; skipped with the reason when not root, or
without PostgreSQL or `ip netns`.
"""

import hashlib
import hmac
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import time

import pytest

from conftest import TEST_CONFIG, Server, binary, client, free_port
from test_cluster_copies import psql, stored
from test_cluster_nodes import node_config, pg, wait_for  # noqa: F401 - pg is a fixture

# A client of the handshake, run inside the peer's namespace: prints what happened as JSON.
PEER = r'''
import hashlib, hmac, json, os, socket, struct, sys
host, port, mode, secret = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].encode()
s = socket.create_connection((host, port), timeout=15)
out = {}
def read(n):
    b = b""
    while len(b) < n:
        chunk = s.recv(n - len(b))
        if not chunk:
            raise EOFError(f"closed after {len(b)} of {n} bytes")
        b += chunk
    return b
try:
    if mode == "v1":
        header = json.dumps({"version": 1, "transfer": "intruder/x", "object_bytes": 4, "piece_bytes": 1024,
                             "hop": {"name": "a", "addr": "", "children": []}}).encode()
        s.sendall(struct.pack("<I", len(header)) + header + struct.pack("<I", 4) + bytes(32) + b"evil")
        rest = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            rest += chunk
        out["answer"] = rest.decode("latin-1")
    else:
        magic, version = read(4), struct.unpack("<I", read(4))[0]
        server_nonce = read(32)
        server = read(read(1)[0])
        out["hello"] = [magic.decode(), version, server.decode()]
        if mode == "silent":
            s.shutdown(socket.SHUT_WR)
            out["answer"] = s.recv(4096).decode("latin-1")
        else:
            name = b"intruder"
            nonce = os.urandom(32)
            t = (b"permafrost-relay" + struct.pack("<I", version) + server_nonce + nonce
                 + bytes([len(server)]) + server + bytes([len(name)]) + name)
            proof = hmac.new(secret, b"client" + t, hashlib.sha256).digest()
            s.sendall(b"PFRL" + struct.pack("<I", version) + nonce + bytes([len(name)]) + name + proof)
            verdict = read(1)[0]
            out["verdict"] = verdict
            if verdict == 0:
                want = hmac.new(secret, b"server" + t, hashlib.sha256).digest()
                out["server_proved"] = hmac.compare_digest(read(32), want)
            else:
                out["reason"] = read(read(1)[0]).decode()
except Exception as e:
    out["error"] = repr(e)
print(json.dumps(out))
'''


def netns_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root for network namespaces"
    if shutil.which("ip") is None or shutil.which("ss") is None:
        return "needs iproute2 (ip, ss)"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True)
    if probe.returncode != 0:
        return f"`ip netns` does not work here: {probe.stderr.decode().strip()}"
    return None


def sh(*args):
    subprocess.run([str(a) for a in args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def peer_namespace():
    """A namespace `pfsec<pid>` joined to this one by a veth pair: (our address, the peer's address, name)."""
    reason = netns_unavailable()
    if reason:
        pytest.skip(reason)
    pid = os.getpid()
    ns, here, there = f"pfsec{pid}", f"pfsh{pid % 100000}", f"pfsp{pid % 100000}"
    subnet = f"10.78.{pid % 200 + 20}"
    sh("ip", "netns", "add", ns)
    try:
        sh("ip", "link", "add", here, "type", "veth", "peer", "name", there)
        sh("ip", "link", "set", there, "netns", ns)
        sh("ip", "addr", "add", f"{subnet}.1/24", "dev", here)
        sh("ip", "link", "set", here, "up")
        sh("ip", "-n", ns, "addr", "add", f"{subnet}.2/24", "dev", there)
        sh("ip", "-n", ns, "link", "set", there, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        yield f"{subnet}.1", f"{subnet}.2", ns
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", here], capture_output=True)


def from_peer(ns, tmp_path, host, port, mode, secret="-"):
    script = tmp_path / "peer.py"
    script.write_text(PEER)
    r = subprocess.run(["ip", "netns", "exec", ns, sys.executable, str(script), host, str(port), mode, secret],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def listening(pid):
    """The TCP addresses process `pid` listens on (`ss -ltnp`)."""
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, timeout=30).stdout
    return sorted(line.split()[3] for line in out.splitlines() if f"pid={pid}," in line)


def refusal_lines(server, peer_ip):
    return [line for line in server.log_path.read_text(errors="replace").splitlines()
            if f"refused a connection from {peer_ip}:" in line]


def test_only_members_reach_a_relay_and_relays_listen_only_where_configured(pg, peer_namespace, tmp_path):
    ours, theirs, ns = peer_namespace
    url = pg.database()
    relay_port = free_port()
    a = Server(tmp_path / "a", config=node_config(
        url, "sec", "a", f'copies = 2\nrelay_address = "{ours}:{relay_port}"\n'))
    b = Server(tmp_path / "b", config=node_config(url, "sec", "b", "copies = 2\n"))
    nodes = [a, b]
    try:
        a.start()
        b.start()
        secret = psql(pg, url, "SELECT value FROM permafrost_cluster.meta WHERE key = 'relay_secret'")[0]
        assert len(secret) == 64, secret

        # Relays listen where configured: a on its cluster address only, b on its own address's host.
        a_listens, b_listens = listening(a.process.pid), listening(b.process.pid)
        assert f"{ours}:{relay_port}" in a_listens, a_listens
        assert not any(addr.startswith(("0.0.0.0:", "*:", "[::]:")) for addr in a_listens + b_listens), \
            (a_listens, b_listens)
        b_relay = psql(pg, url, "SELECT relay_address FROM permafrost_cluster.nodes WHERE name = 'b'")[0]
        assert b_relay.startswith("127.0.0.1:") and b_relay in b_listens, (b_relay, b_listens)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", relay_port), timeout=5)

        # Peers without the secret are refused, each way, and nothing reaches the node.
        old = from_peer(ns, tmp_path, ours, relay_port, "v1")
        assert "unauthenticated relay protocol" in old.get("answer", ""), old
        wrong = from_peer(ns, tmp_path, ours, relay_port, "hmac", "not the cluster's secret at all")
        assert wrong["hello"] == ["PFRL", 2, "a"] and wrong["verdict"] == 1, wrong
        assert "did not prove the cluster secret" in wrong["reason"], wrong
        silent = from_peer(ns, tmp_path, ours, relay_port, "silent")
        assert "error" not in silent, silent
        wait_for("node a's refusal line", lambda: refusal_lines(a, theirs))
        lines = refusal_lines(a, theirs)
        assert len(lines) == 1, lines  # the next refusals from the same address within a minute are counted
        assert "unauthenticated relay protocol" in lines[0], lines
        assert stored(pg, url, "a", "intruder") == []

        # The same peer with the cluster's secret is let in, and the node proves itself back.
        member = from_peer(ns, tmp_path, ours, relay_port, "hmac", secret)
        assert member["verdict"] == 0 and member["server_proved"], member

        # Copies both ways: a → b's relay on 127.0.0.1, b → a's relay on the cluster address.
        s3a, s3b = client(a.endpoint), client(b.endpoint)
        s3a.create_bucket(Bucket="bkt")
        s3a.put_object(Bucket="bkt", Key="from-a", Body=b"written through a" * 1000)
        s3b.put_object(Bucket="bkt", Key="from-b", Body=b"written through b" * 1000)
        wait_for("both copies", lambda: stored(pg, url, "a", "bkt") == ["from-a", "from-b"]
                 and stored(pg, url, "b", "bkt") == ["from-a", "from-b"])
        for s3 in (s3a, s3b):
            assert s3.get_object(Bucket="bkt", Key="from-a")["Body"].read() == b"written through a" * 1000
            assert s3.get_object(Bucket="bkt", Key="from-b")["Body"].read() == b"written through b" * 1000

        # A node with a wrong secret file gets no copy in; the node it tried logs who and why.
        (tmp_path / "c").mkdir()
        (tmp_path / "c" / "wrong.secret").write_text("a secret of some other cluster\n")
        c = Server(tmp_path / "c", config=node_config(
            url, "sec", "c", 'copies = 2\nsecret_file = "wrong.secret"\n'))
        nodes.append(c)
        c.start()
        client(c.endpoint).put_object(Bucket="bkt", Key="from-c", Body=b"written through c")
        assert stored(pg, url, "c", "bkt") == ["from-c"]
        wait_for("a refusal of c", lambda: any('"c" did not prove the cluster secret' in line
                                               for s in (a, b) for line in s.log_path.read_text().splitlines()))
        assert "from-c" not in stored(pg, url, "a", "bkt") + stored(pg, url, "b", "bkt")
    finally:
        for s in nodes:
            s.kill()


def test_a_node_that_knows_no_host_for_its_relay_refuses_to_start(pg, tmp_path):
    url = pg.database()
    data = tmp_path / "a"
    data.mkdir()
    port = free_port()
    (data / "permafrost.toml").write_text(node_config(url, "nohost", "a", f'address = "0.0.0.0:{port}"\n'))
    r = subprocess.run([str(binary()), "serve", "--data-dir", str(data), "--listen", f"127.0.0.1:{port}"],
                       capture_output=True, text=True, timeout=60, env=dict(os.environ, PERMAFROST_ROOT_USER="x",
                                                                           PERMAFROST_ROOT_PASSWORD="y" * 16))
    assert r.returncode != 0
    assert "[cluster] relay_address is not set" in r.stderr and "names no host" in r.stderr, r.stderr


def test_relay_commands_without_a_secret_refuse_to_start(tmp_path):
    for cmd in (["relay", "serve", "--name", "core"], ["relay", "node", "--name", "n1", "--data-dir", tmp_path]):
        r = subprocess.run([str(binary()), *map(str, cmd), "--listen", f"127.0.0.1:{free_port()}"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0, r.stderr
        assert "no cluster secret: pass --secret-file FILE" in r.stderr, r.stderr
    short = tmp_path / "short.secret"
    short.write_text("tiny\n")
    r = subprocess.run([str(binary()), "relay", "serve", "--name", "core", "--listen", f"127.0.0.1:{free_port()}",
                        "--secret-file", str(short)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "needs at least 16" in r.stderr, r.stderr
