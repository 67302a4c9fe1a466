"""Several `permafrost serve` processes form a cluster through a shared PostgreSQL catalog (issue 13 "Nodes",
docs/cluster.md "Nodes"): any node answers for any bucket, a node killed with SIGKILL shows as down and its
objects answer a clear 503, a data directory of another cluster is refused at start, and the database going
away makes requests fail with 503 until it is back.

The tests start their own throwaway PostgreSQL with scripts/pg-cluster.sh (root and Debian's `postgresql`,
which scripts/setup-deps.sh installs; skipped with the reason otherwise): they stop and start it, which must not
disturb a server other tests use (scripts/test stops its own before the end-to-end tests anyway). One database
per test, so each test makes a fresh cluster.
"""

import glob
import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from admin import admin
from conftest import REPO, TEST_CONFIG, Server, binary, client, free_port

HEARTBEAT_MS = 300
TIMEOUT_MS = 3000


def pg_bindir():
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


class Postgres:
    """The throwaway PostgreSQL of scripts/pg-cluster.sh, with stop and start for the outage test."""

    def __init__(self):
        out = subprocess.run(["bash", str(REPO / "scripts/pg-cluster.sh"), "start"], check=True,
                             capture_output=True, text=True, timeout=120).stdout
        env = dict(re.findall(r"export (\w+)='([^']*)'", out))
        self.url = env["PERMAFROST_TEST_PG_URL"]
        self.dir = env["PERMAFROST_TEST_PG_DIR"]
        self.port = int(re.search(r"@127\.0\.0\.1:(\d+)/", self.url).group(1))
        self.bin = pg_bindir()

    def as_postgres(self, *args, check=True):
        return subprocess.run(["runuser", "-u", "postgres", "--", *map(str, args)], check=check,
                              capture_output=True, text=True, timeout=120)

    def database(self) -> str:
        """A fresh database owned by the test role; its URL."""
        name = f"c_{uuid.uuid4().hex[:10]}"
        self.as_postgres(self.bin / "psql", "-q", "-h", self.dir, "-p", self.port, "-U", "postgres", "-d",
                         "postgres", "-c", f"CREATE DATABASE {name} OWNER permafrost")
        return self.url.rsplit("/", 1)[0] + "/" + name

    def stop(self):
        self.as_postgres(self.bin / "pg_ctl", "-D", f"{self.dir}/data", "-m", "fast", "-w", "stop")

    def start(self):
        # The options of scripts/pg-cluster.sh start (not kept in postgresql.conf).
        self.as_postgres(self.bin / "pg_ctl", "-D", f"{self.dir}/data", "-l", f"{self.dir}/server.log", "-w",
                         "-t", "60", "start", "-o",
                         f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} -c fsync=off "
                         f"-c full_page_writes=off "
                         f"-c default_transaction_isolation=serializable -c max_connections=300 "
                         f"-c shared_buffers=64MB")

    def kill(self):
        """SIGKILL the server: the postmaster and every backend at once, as a crash would (no shutdown)."""
        pid = int((Path(self.dir) / "data/postmaster.pid").read_text().split()[0])
        os.kill(pid, 19)  # SIGSTOP: the postmaster can neither react nor fork while its backends die
        subprocess.run(["pkill", "-KILL", "-P", str(pid)], timeout=30)
        os.kill(pid, 9)
        deadline = time.time() + 30
        while time.time() < deadline and os.path.exists(f"/proc/{pid}"):
            time.sleep(0.1)

    def remove(self):
        subprocess.run(["bash", str(REPO / "scripts/pg-cluster.sh"), "stop", self.dir], timeout=120)


@pytest.fixture(scope="module")
def pg():
    if os.geteuid() != 0:
        pytest.skip("the cluster tests start a throwaway PostgreSQL as the postgres user: run as root")
    if pg_bindir() is None:
        pytest.skip("no PostgreSQL server (/usr/lib/postgresql/*/bin/initdb): run scripts/setup-deps.sh")
    server = Postgres()
    yield server
    server.remove()


def node_config(url: str, cluster: str, node: str, extra: str = "") -> str:
    return TEST_CONFIG + f"""
[catalog]
url = "{url}"

[cluster]
name = "{cluster}"
node = "{node}"
heartbeat_ms = {HEARTBEAT_MS}
timeout_ms = {TIMEOUT_MS}
{extra}"""


def status(data_dir: Path) -> dict:
    r = subprocess.run([str(binary()), "cluster", "status", "--data-dir", str(data_dir), "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def health(data_dir: Path) -> dict:
    return {n["name"]: n["health"] for n in status(data_dir)["nodes"]}


def wait_for(what, predicate, timeout_s=20.0):
    deadline = time.time() + timeout_s
    last = None
    while time.time() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except Exception as e:  # noqa: BLE001 - retried until the deadline, reported then
            last = e
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout_s} s (last: {last!r})")


def start_nodes(tmp_path, url, names, cluster="e2e"):
    nodes = {}
    for name in names:
        s = Server(tmp_path / name, config=node_config(url, cluster, name))
        s.start()
        nodes[name] = s
    return nodes


def error_of(call):
    with pytest.raises(ClientError) as e:
        call()
    return e.value.response


def test_any_node_answers_and_a_killed_node_shows_down(pg, tmp_path):
    url = pg.database()
    nodes = start_nodes(tmp_path, url, ["a", "b", "c"])
    try:
        a, b, c = (client(nodes[n].endpoint) for n in "abc")
        a.create_bucket(Bucket="shared")
        big = os.urandom(3 * 1024 * 1024 + 17)  # streamed (above the small-body limit)
        small = b"held by node a"
        a.put_object(Bucket="shared", Key="dir/big.bin", Body=big, ContentType="application/x-test")
        a.put_object(Bucket="shared", Key="dir/small.txt", Body=small)
        # A bucket made on a takes a PUT on b.
        b.put_object(Bucket="shared", Key="from-b.txt", Body=b"held by node b")

        # Any node answers: GET byte-exact (forwarded), HEAD and listings from the directory.
        assert b.get_object(Bucket="shared", Key="dir/big.bin")["Body"].read() == big
        assert c.get_object(Bucket="shared", Key="dir/small.txt")["Body"].read() == small
        assert c.get_object(Bucket="shared", Key="dir/big.bin", Range="bytes=10-19")["Body"].read() == big[10:20]
        assert a.get_object(Bucket="shared", Key="from-b.txt")["Body"].read() == b"held by node b"
        head = c.head_object(Bucket="shared", Key="dir/big.bin")
        assert head["ContentLength"] == len(big)
        assert head["ContentType"] == "application/x-test"
        assert head["ETag"] == a.head_object(Bucket="shared", Key="dir/big.bin")["ETag"]
        for s3 in (a, b, c):
            keys = [o["Key"] for o in s3.list_objects_v2(Bucket="shared")["Contents"]]
            assert keys == ["dir/big.bin", "dir/small.txt", "from-b.txt"]
            listed = s3.list_objects_v2(Bucket="shared", Delimiter="/")
            assert [p["Prefix"] for p in listed["CommonPrefixes"]] == ["dir/"]
            assert "shared" in [x["Name"] for x in s3.list_buckets()["Buckets"]]
        assert error_of(lambda: b.get_object(Bucket="shared", Key="nope"))["Error"]["Code"] == "NoSuchKey"

        st = status(tmp_path / "b")
        assert st["cluster"] == "e2e" and [n["name"] for n in st["nodes"]] == ["a", "b", "c"]
        assert all(n["health"] == "up" and n["capacity_bytes"] > 0 for n in st["nodes"]), st
        # Capacity is the file system's room (statvfs), not the sparse grid files' apparent sizes.
        fs = os.statvfs(tmp_path)
        assert all(n["capacity_bytes"] <= fs.f_blocks * fs.f_frsize for n in st["nodes"]), (st, fs)
        assert {n["address"] for n in st["nodes"]} == {f"127.0.0.1:{nodes[n].port}" for n in "abc"}
        api = admin(nodes["c"].endpoint, "GET", "/_permafrost/api/v1/cluster")
        assert api.status_code == 200, api.text
        assert [n["name"] for n in api.json()["nodes"]] == ["a", "b", "c"]
        text = subprocess.run([str(binary()), "cluster", "status", "--data-dir", str(tmp_path / "a")],
                              capture_output=True, text=True, timeout=60)
        assert text.returncode == 0 and "cluster e2e" in text.stdout and " up " in text.stdout, text

        # kill -9 of a: b reports it down; its objects answer 503 naming it; HEAD and list still answer.
        nodes["a"].kill()
        b1 = client(nodes["b"].endpoint, retries=1)
        # Before the timeout a still counts as up: the forward finds nobody there, a clear 503 all the same.
        response = error_of(lambda: b1.get_object(Bucket="shared", Key="dir/small.txt"))
        assert response["ResponseMetadata"]["HTTPStatusCode"] == 503, response
        assert "node a (127.0.0.1:" in response["Error"]["Message"], response
        wait_for("a shown down", lambda: health(tmp_path / "b") == {"a": "down", "b": "up", "c": "up"})
        response = error_of(lambda: b1.get_object(Bucket="shared", Key="dir/big.bin"))
        assert response["ResponseMetadata"]["HTTPStatusCode"] == 503
        assert response["Error"]["Code"] == "ServiceUnavailable"
        assert "node a (127.0.0.1:" in response["Error"]["Message"]
        assert "down" in response["Error"]["Message"]
        assert b1.head_object(Bucket="shared", Key="dir/big.bin")["ContentLength"] == len(big)
        assert len(b1.list_objects_v2(Bucket="shared")["Contents"]) == 3
        assert c.get_object(Bucket="shared", Key="from-b.txt")["Body"].read() == b"held by node b"

        # a comes back on its data directory: up again, its objects served again.
        nodes["a"].start()
        wait_for("a shown up", lambda: health(tmp_path / "c")["a"] == "up")
        assert b.get_object(Bucket="shared", Key="dir/big.bin")["Body"].read() == big
    finally:
        for s in nodes.values():
            s.kill()


def serve_fails(data_dir: Path, config: str, timeout_s=60) -> str:
    """`permafrost serve` on `data_dir` with `config` must exit non-zero at start; its stderr."""
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "permafrost.toml").write_text(config)
    env = dict(os.environ, PERMAFROST_ROOT_USER="PFE2ETESTKEY", PERMAFROST_ROOT_PASSWORD="pf-e2e-secret-key-0123456789")
    r = subprocess.run([str(binary()), "serve", "--data-dir", str(data_dir), "--listen", f"127.0.0.1:{free_port()}"],
                       capture_output=True, text=True, timeout=timeout_s, env=env)
    assert r.returncode != 0, f"serve started: {r.stderr}"
    assert "panicked" not in r.stderr, r.stderr
    return r.stderr


def test_bad_input_at_start(pg, tmp_path):
    url_one, url_two = pg.database(), pg.database()
    # A node of cluster "one", stopped cleanly.
    one = Server(tmp_path / "n1", config=node_config(url_one, "one", "n1"))
    one.start()
    assert one.stop() == 0
    # Another cluster in another database.
    two = Server(tmp_path / "m1", config=node_config(url_two, "two", "m1"))
    two.start()
    try:
        # n1's data directory pointed at the other cluster's database: a foreign cluster id.
        err = serve_fails(tmp_path / "n1", node_config(url_two, "two", "n1"))
        assert "foreign cluster id" in err and "belongs to cluster id" in err, err
        # The same cluster name, another database (another id): still foreign.
        # [cluster] with the SQLite catalog.
        err = serve_fails(tmp_path / "s1", TEST_CONFIG + '\n[cluster]\nname = "one"\nnode = "s1"\n')
        assert "[cluster] needs the shared PostgreSQL catalog" in err, err
        # A database that is not there.
        dead = f"postgresql://permafrost:pw@127.0.0.1:{free_port()}/permafrost"
        err = serve_fails(tmp_path / "d1", node_config(dead, "one", "d1"))
        assert "cannot connect" in err and "pw@" not in err, err
        # A database holding another cluster name.
        err = serve_fails(tmp_path / "x1", node_config(url_two, "other", "x1"))
        assert 'holds cluster "two"' in err, err
        # A topology naming an unknown node, and one lacking a node the cluster knows.
        (tmp_path / "t1").mkdir()
        (tmp_path / "t1" / "topology.toml").write_text(
            'version = 1\n[[node]]\nname = "t1"\nrole = "node"\n[[link]]\nbetween = ["t1", "n9"]\ncapacity_mbit = 100\n')
        err = serve_fails(tmp_path / "t1", node_config(url_two, "two", "t1", 'topology = "topology.toml"'))
        assert "n9" in err and "topology" in err, err
        (tmp_path / "t2").mkdir()
        (tmp_path / "t2" / "topology.toml").write_text('version = 1\n[[node]]\nname = "t2"\nrole = "node"\n')
        err = serve_fails(tmp_path / "t2", node_config(url_two, "two", "t2", 'topology = "topology.toml"'))
        assert "m1" in err and "does not name" in err, err
        # A node name another data directory holds.
        err = serve_fails(tmp_path / "m1-copy", node_config(url_two, "two", "m1"))
        assert 'node name "m1" is already taken' in err, err
        # Every refusal is one line.
        for line in err.strip().splitlines():
            assert not line.startswith(" "), err
    finally:
        two.kill()


def probe(endpoint, path):
    """Status and JSON body of an unsigned GET of a probe path (`/_permafrost/health`, `/_permafrost/ready`)."""
    try:
        with urllib.request.urlopen(endpoint + path, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_database_outage_answers_503_then_recovers(pg, tmp_path):
    url = pg.database()
    nodes = start_nodes(tmp_path, url, ["p", "q"])
    try:
        p, q = client(nodes["p"].endpoint, retries=1), client(nodes["q"].endpoint, retries=1)
        p.create_bucket(Bucket="outage")
        body = os.urandom(200_000)
        p.put_object(Bucket="outage", Key="k", Body=body)
        assert q.get_object(Bucket="outage", Key="k")["Body"].read() == body
        assert probe(nodes["q"].endpoint, "/_permafrost/ready") == (200, {"status": "ready"})

        pg.stop()
        try:
            # Readiness says the node cannot serve, and why; liveness still answers (the process is fine).
            status, answer = probe(nodes["q"].endpoint, "/_permafrost/ready")
            assert status == 503 and answer["status"] == "unavailable", answer
            assert answer["reason"].startswith("catalog database unreachable"), answer
            assert probe(nodes["q"].endpoint, "/_permafrost/health") == (200, {"status": "ok"})
            for call in (lambda: q.get_object(Bucket="outage", Key="k"),
                         lambda: p.get_object(Bucket="outage", Key="k"),
                         lambda: q.head_object(Bucket="outage", Key="k"),
                         lambda: q.list_objects_v2(Bucket="outage"),
                         lambda: p.put_object(Bucket="outage", Key="during", Body=b"x")):
                response = error_of(call)
                assert response["ResponseMetadata"]["HTTPStatusCode"] == 503, response
            # The message says why (HEAD has no body to carry it).
            response = error_of(lambda: q.get_object(Bucket="outage", Key="k"))
            assert "database" in response["Error"]["Message"], response
            time.sleep(3)  # the background loops run many rounds against the stopped database
        finally:
            pg.start()

        # Back: the same answers as before, and writes work again.
        wait_for("GET after the database came back",
                 lambda: q.get_object(Bucket="outage", Key="k")["Body"].read() == body)
        wait_for("PUT after the database came back",
                 lambda: p.put_object(Bucket="outage", Key="after", Body=b"after"))
        wait_for("listing after the database came back",
                 lambda: [o["Key"] for o in q.list_objects_v2(Bucket="outage")["Contents"]] == ["after", "k"])
        assert q.get_object(Bucket="outage", Key="after")["Body"].read() == b"after"
        for name in ("p", "q"):
            assert probe(nodes[name].endpoint, "/_permafrost/ready") == (200, {"status": "ready"})
        wait_for("both nodes up", lambda: set(health(tmp_path / "q").values()) == {"up"})
        # The store's background loops say it once per outage, in words, and once when it answers again.
        for name in ("p", "q"):
            wait_for(f"{name} logs the database back",
                     lambda: "catalog database answers again" in nodes[name].log_path.read_text(errors="replace"))
            log = nodes[name].log_path.read_text(errors="replace").splitlines()
            down = [line for line in log if "catalog database unreachable:" in line and "WARN" in line]
            assert 1 <= len(down) <= 2, "\n".join(down)
            internal = [line for line in log if "internal error" in line]
            assert not internal, "\n".join(internal)
    finally:
        for s in nodes.values():
            s.kill()
