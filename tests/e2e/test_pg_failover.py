"""The failover drill of docs/cluster.md ("The catalog database: a primary and a synchronous standby", issue 31):
three `permafrost serve` nodes on a PostgreSQL primary with a synchronous standby (scripts/pg-standby.sh), one
URL naming both servers. Eight clients PUT and GET through the three nodes; the primary's postmaster is
SIGKILLed; readiness answers 503 on every node while no server accepts writes; the standby is promoted; writes
resume within 30 s without restarting any node, readiness answers 200 again, and every acknowledged PUT reads
back byte-exact from every node.

Needs root and Debian's `postgresql` (scripts/setup-deps.sh); skipped with the reason otherwise.
"""

import hashlib
import os
import random
import re
import subprocess
import threading
import time

import pytest

from conftest import REPO, Server, client
from test_cluster_nodes import node_config, pg_bindir, probe, status, wait_for

SCRIPT = REPO / "scripts/pg-standby.sh"
CLIENTS = 8
RESUME_S_MAX = 30


@pytest.fixture
def pg_pair():
    if os.geteuid() != 0:
        pytest.skip("the failover drill starts PostgreSQL as the postgres user: run as root")
    if pg_bindir() is None:
        pytest.skip("no PostgreSQL server (/usr/lib/postgresql/*/bin/initdb): run scripts/setup-deps.sh")
    out = subprocess.run(["bash", str(SCRIPT), "start"], check=True, capture_output=True, text=True,
                         timeout=180).stdout
    env = dict(re.findall(r"export (\w+)='([^']*)'", out))
    yield env
    subprocess.run(["bash", str(SCRIPT), "stop", env["PERMAFROST_TEST_PG_DIR"]], timeout=120)


class Load:
    """CLIENTS threads, each PUTting new keys and GETting keys acknowledged before, round-robin over the nodes;
    every outcome kept with its times."""

    def __init__(self, endpoints):
        self.endpoints = endpoints
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.acked = {}  # key -> sha256 of the body
        self.puts = []  # (started, finished, ok)
        self.gets_ok = 0
        self.gets_failed = 0
        self.gets_wrong = []
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(CLIENTS)]

    def start(self):
        for t in self.threads:
            t.start()

    def join(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=180)
            assert not t.is_alive(), "a client thread hangs"

    def run(self, i):
        rng = random.Random(i)
        clients = [client(e, retries=1) for e in self.endpoints]
        n = 0
        while not self.stop.is_set():
            s3 = clients[(i + n) % len(clients)]
            key = f"c{i}/k{n:05d}"
            body = os.urandom(rng.choice([1000, 20_000, 150_000]) + rng.randrange(1000))
            started = time.monotonic()
            try:
                s3.put_object(Bucket="drill", Key=key, Body=body)
                ok = True
            except Exception:  # noqa: BLE001 - a failed PUT is counted, never acknowledged
                ok = False
            finished = time.monotonic()
            with self.lock:
                self.puts.append((started, finished, ok))
                if ok:
                    self.acked[key] = hashlib.sha256(body).hexdigest()
                known = list(self.acked.items())
            n += 1
            if known:
                k, digest = rng.choice(known)
                try:
                    got = clients[rng.randrange(len(clients))].get_object(Bucket="drill", Key=k)["Body"].read()
                except Exception:  # noqa: BLE001 - unavailable during the gap: counted
                    with self.lock:
                        self.gets_failed += 1
                    continue
                with self.lock:
                    if hashlib.sha256(got).hexdigest() == digest:
                        self.gets_ok += 1
                    else:
                        self.gets_wrong.append(k)
            if not ok:
                time.sleep(0.05)


def test_nodes_follow_a_promoted_standby(pg_pair, tmp_path):
    url = pg_pair["PERMAFROST_TEST_PG_URL"]
    assert url.count(",") == 1 and "target_session_attrs=read-write" in url, url
    nodes = {}
    try:
        for name in "abc":
            nodes[name] = Server(tmp_path / name, config=node_config(url, "drill", name, "copies = 2\n"))
            nodes[name].start()
        pids = {name: s.process.pid for name, s in nodes.items()}
        # The status names both servers, without password or options.
        pa, pb = pg_pair["PERMAFROST_TEST_PG_PRIMARY_PORT"], pg_pair["PERMAFROST_TEST_PG_STANDBY_PORT"]
        assert status(tmp_path / "a")["database"] == f"permafrost@127.0.0.1:{pa},127.0.0.1:{pb}/permafrost"
        client(nodes["a"].endpoint).create_bucket(Bucket="drill")
        for s in nodes.values():
            assert probe(s.endpoint, "/_permafrost/ready") == (200, {"status": "ready"})

        load = Load([s.endpoint for s in nodes.values()])
        load.start()
        wait_for("writes under way", lambda: len(load.acked) >= 40, timeout_s=60)
        time.sleep(2)

        # The primary's postmaster SIGKILLed (its backends notice and exit; none of them acknowledges a commit
        # the standby has not written).
        killed_at = time.monotonic()
        os.kill(int(pg_pair["PERMAFROST_TEST_PG_PRIMARY_PID"]), 9)
        acked_at_kill = len(load.acked)

        # Readiness: 503 with the reason on every node while no server accepts writes.
        unready = {}

        def all_unready():
            for name, s in nodes.items():
                if name not in unready:
                    code, answer = probe(s.endpoint, "/_permafrost/ready")
                    if code == 503:
                        unready[name] = answer
            return len(unready) == len(nodes)

        wait_for("every node unready", all_unready, timeout_s=30)
        for answer in unready.values():
            assert answer["status"] == "unavailable", answer
            assert answer["reason"].startswith("catalog database unreachable"), answer
        time.sleep(3)  # a gap long enough that every client meets it

        promoting_at = time.monotonic()
        promote = subprocess.run(["bash", str(SCRIPT), "promote", pg_pair["PERMAFROST_TEST_PG_DIR"], "b"],
                                 capture_output=True, text=True, timeout=120)
        assert promote.returncode == 0 and "is primary" in promote.stdout, promote.stdout + promote.stderr
        promoted_at = time.monotonic()

        # Readiness back to 200 on every node, polled; writes resume.
        ready_at = {}

        def all_ready():
            for name, s in nodes.items():
                if name not in ready_at and probe(s.endpoint, "/_permafrost/ready")[0] == 200:
                    ready_at[name] = time.monotonic()
            return len(ready_at) == len(nodes)

        wait_for("every node ready again", all_ready, timeout_s=RESUME_S_MAX)

        def first_write_after(t):
            with load.lock:
                done = [f for (s, f, ok) in load.puts if ok and s >= t]
            return min(done) if done else None

        wait_for("a PUT acknowledged after the promotion", lambda: first_write_after(promoting_at),
                 timeout_s=RESUME_S_MAX)
        resumed_at = first_write_after(promoting_at)
        time.sleep(5)  # more load on the promoted server
        load.join()

        # No node restarted.
        for name, s in nodes.items():
            assert s.process.poll() is None and s.process.pid == pids[name], f"node {name} exited"

        # A PUT that started well after the kill and before the promotion was never acknowledged (no server
        # accepted writes: the standby refuses them and is never chosen).
        during = [(s - killed_at, f - killed_at, ok) for (s, f, ok) in load.puts
                  if killed_at + 1 < s and f < promoting_at]
        assert during and not any(ok for (_, _, ok) in during), (promoting_at - killed_at, during)
        last_before = max(f for (s, f, ok) in load.puts if ok and f <= killed_at + 1)
        first_after_kill = min(f for (s, f, ok) in load.puts if ok and f > killed_at + 1)

        # Every acknowledged PUT, from every node, byte-exact.
        lost, wrong = [], []
        readers = [client(s.endpoint) for s in nodes.values()]
        for key, digest in sorted(load.acked.items()):
            for s3 in readers:
                try:
                    got = s3.get_object(Bucket="drill", Key=key)["Body"].read()
                except Exception as e:  # noqa: BLE001 - reported below
                    lost.append((key, repr(e)[:200]))
                    continue
                if hashlib.sha256(got).hexdigest() != digest:
                    wrong.append(key)
        puts_failed = sum(1 for (_, _, ok) in load.puts if not ok)
        print(f"\nfailover drill: {len(load.acked)} PUTs acknowledged ({acked_at_kill} before the kill), "
              f"{puts_failed} failed; GETs during the load {load.gets_ok} byte-exact, {load.gets_failed} failed, "
              f"{len(load.gets_wrong)} wrong\n"
              f"  writes stopped for {first_after_kill - last_before:.2f} s (last ack before the kill to the "
              f"first after); promotion {promoting_at - killed_at:.2f} s after the kill (took "
              f"{promoted_at - promoting_at:.2f} s); first PUT acknowledged "
              f"{resumed_at - promoting_at:.2f} s after the promotion began; readiness 200 again after "
              + ", ".join(f"{n} {t - promoting_at:.2f} s" for n, t in sorted(ready_at.items()))
              + f"\n  read back: {len(load.acked) * len(readers)} GETs, {len(lost)} lost, {len(wrong)} wrong")
        assert not lost, lost[:5]
        assert not wrong and not load.gets_wrong, (wrong[:5], load.gets_wrong[:5])
        assert resumed_at - promoting_at < RESUME_S_MAX
        assert len(load.acked) > acked_at_kill, "no write acknowledged after the promotion"

        # Each node says once, in words, that the writable server changed.
        port = pg_pair["PERMAFROST_TEST_PG_STANDBY_PORT"]
        for name, s in nodes.items():
            log = s.log_path.read_text(errors="replace")
            assert f"the writable server is now 127.0.0.1:{port}" in log, f"node {name}: {s.log_tail()}"
    finally:
        for s in nodes.values():
            s.kill()
