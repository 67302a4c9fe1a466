#!/usr/bin/env python3
"""Soak (issue 34): N clients of mixed S3 operations against the real `permafrost serve` for a set time while the
server is SIGKILLed and restarted, the cache is evicted and one disk of the grid fails; at the end every
acknowledged object and version is read back and compared.

The release binary runs on a scratch data directory (bench/ingest.py's configuration: fsync on, the watchdog
persisting objects older than a second, 8x6:4+1 grid of file-backed disks). Buckets:
  soak       plain bucket: small PUTs (1-64 KiB), large PUTs (4-8 MiB), multipart uploads (2 x 5 MiB + a tail),
             GETs and ranged GETs (compared with what was written), DELETEs
  soak-ver   versioned: PUTs of new versions, GETs of a version, DELETEs of one version, delete markers
  soak-lock  Object Lock: PUTs with GOVERNANCE retention; DELETE of a retained version must be refused
  soak-cold  GLACIER objects: RestoreObject (Expedited) of an evicted object, then its GET
Each client owns its keys (no two clients write one key), so the model of what must be there is exact: every
acknowledged write (key, version id, bytes) and every acknowledged delete. A write that failed without an answer
(connection error, timeout, 5xx) may or may not have happened: both outcomes are accepted for that key.
Faults, from one thread: SIGKILL of the server every --kill-every seconds and restart on the same data directory
(the first restart also wipes one data disk of the grid that holds persisted objects: one failure of the 3 the
grid survives); POST /_permafrost/persist and /_permafrost/cache/evict every --evict-every seconds.
At the end (faults over, server up) the cache is persisted and evicted, then every object and version that must
exist is read and compared. Printed: operations by type, errors by code (HTTP status and S3 code, or the
connection error), how many of them fell in a fault window (the server down or restarting), 503s, lost
(acknowledged, missing) and wrong (bytes differ, or an acknowledged delete undone, or a locked version deleted).
Exit status 1 when lost or wrong is not 0.

Usage: .venv/bin/python bench/soak.py [--minutes 10] [--clients 64] [--kill-every 120] [--evict-every 30]
                                      [--bin target/release/permafrost] [--scratch DIR] [--out DIR] [--seed N]
The binary is built with `cargo build --release -p permafrost`. Results: bench/out/soak-<UTC time>/
(results.json, summary.txt, server.log).
"""

import argparse
import collections
import hashlib
import json
import os
import random
import shutil
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import boto3
import requests
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ingest  # noqa: E402  (the persistence configuration)
import s3 as pf  # noqa: E402  (server, credentials, admin requests, data)

KiB, MiB, GiB = pf.KiB, pf.MiB, pf.GiB
PLAIN, VER, LOCK, COLD = "soak", "soak-ver", "soak-lock", "soak-cold"
EVICT_PATH = "/_permafrost/cache/evict"
ABSENT = None  # a key's possible state: not there
PART = 5 * MiB

# Operation mix: (name, weight).
MIX = [("put_small", 26), ("put_large", 4), ("multipart", 3), ("get", 18), ("get_range", 14), ("delete", 6),
       ("put_version", 10), ("get_version", 6), ("delete_version", 3), ("delete_marker", 2), ("put_locked", 4),
       ("delete_locked", 1), ("put_cold", 2), ("restore", 1)]


def data(seed: int, size: int) -> bytes:
    return pf.RandomData(seed).range(0, size)


def digest(b: bytes) -> str:
    return hashlib.blake2b(b, digest_size=16).hexdigest()


def client(endpoint: str):
    """No retries: every failure reaches the soak and is counted by its code."""
    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=pf.ACCESS_KEY, aws_secret_access_key=pf.SECRET_KEY,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1, "mode": "standard"},
                      connect_timeout=5, read_timeout=120, max_pool_connections=4))


def code_of(e: Exception) -> tuple:
    """(label, ambiguous): the HTTP status and S3 code, or the connection error's class; `ambiguous` when the
    request may have taken effect without an answer (no answer, or a 5xx)."""
    if isinstance(e, ClientError):
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        code = e.response.get("Error", {}).get("Code", "?")
        return f"{status} {code}", status >= 500 or status == 0
    return f"connection ({type(e).__name__})", True


class Model:
    """What must be there. Per plain/cold key: the set of possible states (a digest, or ABSENT). Per versioned or
    locked key: the versions that must exist {version id: digest}, and the versions whose delete has no answer."""

    def __init__(self):
        self.lock = threading.Lock()
        self.keys = {}  # (bucket, key) -> {"states": set, "floating": [(generation, state)], "size": {digest: (seed,size)}}
        self.versions = {}  # (bucket, key, vid) -> (digest, seed, size)
        self.maybe_versions = set()
        self.generation = 0  # bumped at every kill: a request older than a kill can no longer take effect
        self.acked_writes = 0
        self.lock_violations = []

    def key(self, bucket, k):
        return self.keys.setdefault((bucket, k), {"states": {ABSENT}, "floating": [], "src": {}})

    def acked(self, bucket, k, state, src=None):
        with self.lock:
            e = self.key(bucket, k)
            live = [(g, s) for g, s in e["floating"] if g == self.generation]
            e["floating"] = live
            e["states"] = {state} | {s for _, s in live}
            if src:
                e["src"][state] = src
            self.acked_writes += 1

    def ambiguous(self, bucket, k, state, src=None):
        with self.lock:
            e = self.key(bucket, k)
            e["states"].add(state)
            e["floating"].append((self.generation, state))
            if src:
                e["src"][state] = src

    def known(self, bucket, k):
        """(seed, size) when the key has exactly one possible state and it is an object, else None."""
        with self.lock:
            e = self.keys.get((bucket, k))
            if not e or len(e["states"]) != 1:
                return None
            (s,) = e["states"]
            return e["src"].get(s) if s is not ABSENT else None


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.ops = collections.Counter()
        self.ok = collections.Counter()
        self.errors = collections.Counter()
        self.errors_in_faults = collections.Counter()
        self.wrong_reads = []  # during the run: a GET answered bytes that differ from the model's
        self.lost_reads = []  # during the run: a GET of an acknowledged object answered NoSuchKey

    def op(self, name):
        with self.lock:
            self.ops[name] += 1

    def done(self, name):
        with self.lock:
            self.ok[name] += 1

    def error(self, label, in_fault):
        with self.lock:
            self.errors[label] += 1
            if in_fault:
                self.errors_in_faults[label] += 1


class Soak:
    def __init__(self, args):
        self.args = args
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        self.out = Path(args.out or pf.REPO / "bench" / "out" / f"soak-{stamp}")
        self.out.mkdir(parents=True, exist_ok=True)
        self.scratch = Path(args.scratch)
        shutil.rmtree(self.scratch, ignore_errors=True)
        self.scratch.mkdir(parents=True)
        self.binary = Path(args.bin)
        self.model, self.stats = Model(), Stats()
        self.stop = threading.Event()
        self.fault_until = 0.0  # errors before this (monotonic) fall in a fault window
        self.faulting = threading.Event()  # set while the server is down or restarting
        self.seed_lock = threading.Lock()
        self.next_seed = args.seed * 1_000_000
        self.events = []
        self.summary = []
        self.wiped = None

    def say(self, text=""):
        print(text, flush=True)
        self.summary.append(text)

    def event(self, text):
        t = time.monotonic() - self.t0
        self.events.append(f"{t:7.1f} s  {text}")
        self.say(f"   [{t:6.1f} s] {text}")

    def seed(self) -> int:
        with self.seed_lock:
            self.next_seed += 1
            return self.next_seed

    def in_fault(self) -> bool:
        return self.faulting.is_set() or time.monotonic() < self.fault_until

    # ------------------------------------------------------------------------------------------ clients

    def worker(self, n: int, s3, rng: random.Random):
        names, weights = zip(*MIX)
        while not self.stop.is_set():
            name = rng.choices(names, weights)[0]
            self.stats.op(name)
            try:
                getattr(self, name)(s3, n, rng)
                self.stats.done(name)
            except (ClientError, BotoCoreError, requests.RequestException, ConnectionError, OSError) as e:
                label, _ = code_of(e)
                self.stats.error(label, self.in_fault())
            except Exception:  # a defect of the soak itself: say so, keep going
                self.stats.error("soak error", False)
                traceback.print_exc()
            if self.faulting.is_set():
                time.sleep(0.2)

    def write(self, bucket, key, seed, size, call):
        """A write of one plain/cold key: acknowledged, refused (4xx: nothing happened) or ambiguous."""
        body = data(seed, size)
        state = digest(body)
        try:
            call(body)
        except (ClientError, BotoCoreError, requests.RequestException, OSError) as e:
            if code_of(e)[1]:
                self.model.ambiguous(bucket, key, state, (seed, size))
            raise
        self.model.acked(bucket, key, state, (seed, size))

    def put_small(self, s3, n, rng):
        key = f"c{n}/small-{rng.randrange(12)}"
        self.write(PLAIN, key, self.seed(), rng.randint(1 * KiB, 64 * KiB),
                   lambda b: s3.put_object(Bucket=PLAIN, Key=key, Body=b))

    def put_large(self, s3, n, rng):
        key = f"c{n}/large-{rng.randrange(3)}"
        self.write(PLAIN, key, self.seed(), rng.randint(4 * MiB, 8 * MiB),
                   lambda b: s3.put_object(Bucket=PLAIN, Key=key, Body=b))

    def multipart(self, s3, n, rng):
        key = f"c{n}/mp-{rng.randrange(2)}"

        def upload(b):
            up = s3.create_multipart_upload(Bucket=PLAIN, Key=key)["UploadId"]
            parts = []
            for i, off in enumerate(range(0, len(b), PART), 1):
                r = s3.upload_part(Bucket=PLAIN, Key=key, UploadId=up, PartNumber=i, Body=b[off:off + PART])
                parts.append({"PartNumber": i, "ETag": r["ETag"]})
            s3.complete_multipart_upload(Bucket=PLAIN, Key=key, UploadId=up, MultipartUpload={"Parts": parts})

        self.write(PLAIN, key, self.seed(), 2 * PART + rng.randint(1, 2 * MiB), upload)

    def pick_plain(self, n, rng):
        kind = rng.choice(["small-%d" % rng.randrange(12), "large-%d" % rng.randrange(3), "mp-%d" % rng.randrange(2)])
        return f"c{n}/{kind}"

    def get(self, s3, n, rng):
        key = self.pick_plain(n, rng)
        src = self.model.known(PLAIN, key)
        if src is None:
            return
        body = self.read_known(s3, key)
        if body != data(*src):
            self.stats.wrong_reads.append(f"GET {PLAIN}/{key}: {len(body)} bytes, expected {src[1]}")

    def get_range(self, s3, n, rng):
        key = self.pick_plain(n, rng)
        src = self.model.known(PLAIN, key)
        if src is None:
            return
        size = src[1]
        a = rng.randrange(size)
        b = min(size - 1, a + rng.randint(0, 2 * MiB))
        body = self.read_known(s3, key, Range=f"bytes={a}-{b}")
        if body != data(*src)[a:b + 1]:
            self.stats.wrong_reads.append(f"GET {PLAIN}/{key} bytes={a}-{b}: {len(body)} bytes differ")

    def read_known(self, s3, key, **extra):
        try:
            return s3.get_object(Bucket=PLAIN, Key=key, **extra)["Body"].read()
        except ClientError as e:
            if e.response["Error"]["Code"] == "NoSuchKey":
                self.stats.lost_reads.append(f"GET {PLAIN}/{key} {extra}: NoSuchKey after an acknowledged PUT "
                                             f"(at {time.monotonic() - self.t0:.1f} s)")
            raise

    def delete(self, s3, n, rng):
        key = self.pick_plain(n, rng)
        try:
            s3.delete_object(Bucket=PLAIN, Key=key)
        except (ClientError, BotoCoreError, requests.RequestException, OSError) as e:
            if code_of(e)[1]:
                self.model.ambiguous(PLAIN, key, ABSENT)
            raise
        self.model.acked(PLAIN, key, ABSENT)

    def put_version_in(self, s3, bucket, key, seed, size, **extra):
        body = data(seed, size)
        vid = s3.put_object(Bucket=bucket, Key=key, Body=body, **extra)["VersionId"]  # no answer: no known version
        with self.model.lock:
            self.model.versions[(bucket, key, vid)] = (digest(body), seed, size)
            self.model.acked_writes += 1

    def put_version(self, s3, n, rng):
        self.put_version_in(s3, VER, f"c{n}/v-{rng.randrange(4)}", self.seed(), rng.randint(1 * KiB, 256 * KiB))

    def my_versions(self, bucket, n):
        with self.model.lock:
            return [k for k in self.model.versions if k[0] == bucket and k[1].startswith(f"c{n}/")]

    def get_version(self, s3, n, rng):
        mine = self.my_versions(VER, n)
        if not mine:
            return
        b, key, vid = rng.choice(mine)
        entry = self.model.versions.get((b, key, vid))
        if entry is None:
            return
        _, seed, size = entry
        body = s3.get_object(Bucket=b, Key=key, VersionId=vid)["Body"].read()
        if body != data(seed, size):
            self.stats.wrong_reads.append(f"GET {b}/{key}?versionId={vid}: {len(body)} bytes differ")

    def delete_version(self, s3, n, rng):
        mine = self.my_versions(VER, n)
        if len(mine) < 6:
            return
        b, key, vid = rng.choice(mine)
        try:
            s3.delete_object(Bucket=b, Key=key, VersionId=vid)
        except (ClientError, BotoCoreError, requests.RequestException, OSError) as e:
            if code_of(e)[1]:
                with self.model.lock:
                    self.model.versions.pop((b, key, vid), None)
                    self.model.maybe_versions.add((b, key, vid))
            raise
        with self.model.lock:
            self.model.versions.pop((b, key, vid), None)

    def delete_marker(self, s3, n, rng):
        s3.delete_object(Bucket=VER, Key=f"c{n}/v-{rng.randrange(4)}")  # the versions stay

    def put_locked(self, s3, n, rng):
        until = datetime.now(timezone.utc) + timedelta(days=1)
        self.put_version_in(s3, LOCK, f"c{n}/l-{rng.randrange(2)}", self.seed(), rng.randint(1 * KiB, 32 * KiB),
                            ObjectLockMode="GOVERNANCE", ObjectLockRetainUntilDate=until)

    def delete_locked(self, s3, n, rng):
        mine = self.my_versions(LOCK, n)
        if not mine:
            return
        b, key, vid = rng.choice(mine)
        try:
            s3.delete_object(Bucket=b, Key=key, VersionId=vid)
        except ClientError as e:
            if e.response["ResponseMetadata"]["HTTPStatusCode"] == 403:
                return  # refused, as it must be (counted as done: the expected answer)
            raise
        with self.model.lock:
            self.model.lock_violations.append(f"DELETE {b}/{key}?versionId={vid} answered 204 under retention")

    def put_cold(self, s3, n, rng):
        key = f"c{n}/cold-{rng.randrange(2)}"
        self.write(COLD, key, self.seed(), rng.randint(1 * KiB, 128 * KiB),
                   lambda b: s3.put_object(Bucket=COLD, Key=key, Body=b, StorageClass="GLACIER"))

    def restore(self, s3, n, rng):
        key = f"c{n}/cold-{rng.randrange(2)}"
        src = self.model.known(COLD, key)
        if src is None:
            return
        body = restore_and_get(s3, COLD, key, timeout_s=60, counter=self.stats.ok)
        if body is not None and body != data(*src):
            self.stats.wrong_reads.append(f"GET {COLD}/{key} after restore: {len(body)} bytes differ")

    # ------------------------------------------------------------------------------------------ faults

    def kills(self, server):
        """SIGKILL and restart every --kill-every seconds (its own thread: a long persist does not delay it)."""
        a = self.args
        kills = 0
        while not self.stop.wait(a.kill_every):
            kills += 1
            self.kill_restart(server, wipe=(kills == 1 and not a.no_disk_failure))

    def evictions(self, server):
        """POST /_permafrost/persist then /_permafrost/cache/evict every --evict-every seconds."""
        while not self.stop.wait(self.args.evict_every):
            if self.faulting.is_set():
                continue
            try:
                r = pf.admin(server.endpoint, "POST", pf.PERSIST_PATH, timeout_s=300)
                e = pf.admin(server.endpoint, "POST", EVICT_PATH, timeout_s=300)
                ev = e.json().get("evicted_bytes") if e.status_code == 200 else None
                self.event(f"persist {r.status_code}" + (f" ({r.text.strip()[:200]})" if r.status_code != 200 else "")
                           + f", evict {e.status_code}"
                           + (f" ({ev / MiB:.0f} MiB evicted)" if ev is not None else f": {e.text[:200]}"))
            except (requests.RequestException, ValueError) as e:
                self.event(f"persist/evict failed: {type(e).__name__}")

    def disk_to_wipe(self, server):
        """The data disk of the grid bucket holding a persisted object (a plain key of this run), or None."""
        s3 = client(server.endpoint)
        st = pf.admin_status(server.endpoint)
        with self.model.lock:
            keys = [k for (b, k), e in self.model.keys.items() if b == PLAIN and ABSENT not in e["states"]]
        random.Random(self.args.seed).shuffle(keys)
        for key in keys[:50]:
            try:
                h = s3.head_object(Bucket=PLAIN, Key=key)["ResponseMetadata"]["HTTPHeaders"]
            except (ClientError, BotoCoreError):
                continue
            if h.get(pf.STATE_HEADER) != "persisted" or "x-permafrost-grid-bucket" not in h:
                continue
            g = int(h["x-permafrost-grid-bucket"])
            for d in st["detail"]["engine"]["disks"]:
                role = d.get("role")
                if isinstance(role, dict) and (role.get("data") or {}).get("bucket") == g:
                    return d, key
        return None, None

    def kill_restart(self, server, wipe: bool):
        target = None
        if wipe:
            try:
                target, key = self.disk_to_wipe(server)
            except Exception as e:  # the server may be busy: then no wipe this time
                self.event(f"no disk chosen to fail: {type(e).__name__}: {e}")
        self.faulting.set()
        t = time.monotonic()
        server.kill()
        self.model.generation += 1
        if target is not None:
            path = server.data_dir / "grid" / "disks" / os.path.basename(target["name"])
            size = path.stat().st_size
            os.truncate(path, 0)
            os.truncate(path, size)  # a blank disk swapped in
            self.wiped = dict(index=target["index"], file=path.name, holds=key)
            self.event(f"SIGKILL; disk {target['index']} ({path.name}, data disk holding {PLAIN}/{key}) wiped")
        else:
            self.event("SIGKILL")
        try:
            server.start()
        finally:
            self.fault_until = time.monotonic() + 5  # answers of requests sent just before the restart
            self.faulting.clear()
        st = pf.admin_status(server.endpoint) or {}
        failed = (st.get("disks") or {}).get("failed")
        self.event(f"restarted in {time.monotonic() - t:.1f} s (disks failed: {failed})")

    # ------------------------------------------------------------------------------------------ run

    def run(self):
        a = self.args
        m = pf.machine(self.scratch)
        self.results = dict(machine=m, binary=str(self.binary), args=vars(a), commit=commit(),
                            started=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))
        self.say(f"soak, {m['date (UTC)']} UTC: {m['cpu']}, {m['ram']}, {m['kernel']}, {m['file system']}")
        self.say(f"   commit {self.results['commit']}, binary {self.binary}; {a.clients} clients, {a.minutes} min, "
                 f"SIGKILL every {a.kill_every} s, persist+evict every {a.evict_every} s, load {pf.loadavg()}")
        conf = ingest.config(8 * GiB, 2 * GiB, hold=False)
        server = pf.Server(self.binary, self.scratch / "server", conf, self.out / "server.log").start()
        self.t0 = time.monotonic()
        try:
            s3 = client(server.endpoint)
            s3.create_bucket(Bucket=PLAIN)
            s3.create_bucket(Bucket=VER)
            s3.put_bucket_versioning(Bucket=VER, VersioningConfiguration={"Status": "Enabled"})
            s3.create_bucket(Bucket=LOCK, ObjectLockEnabledForBucket=True)
            s3.create_bucket(Bucket=COLD)
            clients = [client(server.endpoint) for _ in range(a.clients)]
            threads = [threading.Thread(target=self.worker, args=(i, clients[i], random.Random(a.seed * 1000 + i)))
                       for i in range(a.clients)]
            faults = [threading.Thread(target=self.kills, args=(server,)),
                      threading.Thread(target=self.evictions, args=(server,))]
            for t in threads + faults:
                t.start()
            self.stop.wait(a.minutes * 60)
            self.stop.set()
            for t in faults:
                t.join()
            for t in threads:
                t.join()
            self.results["run_seconds"] = round(time.monotonic() - self.t0, 1)
            self.event("clients stopped; faults over")
            self.verify(server)
        finally:
            server.kill()
            shutil.rmtree(self.scratch, ignore_errors=True)
        return self.report()

    def verify(self, server):
        """Persist and evict (reads come from the grid, one disk wiped), then read everything that must exist."""
        r = pf.admin(server.endpoint, "POST", pf.PERSIST_PATH, timeout_s=600)
        e = pf.admin(server.endpoint, "POST", EVICT_PATH, timeout_s=600)
        self.event(f"final persist {r.status_code}" + (f" ({r.text.strip()[:200]})" if r.status_code != 200 else "")
                   + f", evict {e.status_code}")
        s3s = [client(server.endpoint) for _ in range(8)]
        if self.args.plant:
            self.plant(s3s[0])
        lost, wrong = [], []
        checks = []
        with self.model.lock:
            for (b, k), ent in self.model.keys.items():
                checks.append(("key", b, k, set(ent["states"]), None))
            for (b, k, vid), (dg, _, _) in self.model.versions.items():
                checks.append(("version", b, k, {dg}, vid))
        done = collections.Counter()

        def one(i):
            kind, b, k, states, vid = checks[i]
            s3 = s3s[i % len(s3s)]
            for attempt in range(3):
                try:
                    if kind == "version":
                        body = s3.get_object(Bucket=b, Key=k, VersionId=vid)["Body"].read()
                    elif b == COLD:
                        body = restore_and_get(s3, b, k, timeout_s=300, counter=done)
                    else:
                        body = s3.get_object(Bucket=b, Key=k)["Body"].read()
                    break
                except ClientError as e:
                    if e.response["Error"]["Code"] in ("NoSuchKey", "NoSuchVersion"):
                        body = ABSENT
                        break
                    if attempt == 2:
                        raise
                    time.sleep(1)
            name = f"{b}/{k}" + (f"?versionId={vid}" if vid else "")
            if body is ABSENT:
                if ABSENT not in states:
                    lost.append(f"{name}: missing ({kind}; expected one of {sorted(map(str, states))})")
            elif digest(body) not in states:
                what = "there after an acknowledged delete" if states == {ABSENT} else f"{len(body)} bytes differ"
                wrong.append(f"{name}: {what}")
            done[kind] += 1

        with ThreadPoolExecutor(8) as ex:
            list(ex.map(one, range(len(checks))))
        wrong += self.model.lock_violations + self.stats.wrong_reads
        lost += self.stats.lost_reads
        self.results["verify"] = dict(keys=done["key"], versions=done["version"], lost=lost, wrong=wrong,
                                      restores=done["restores of an evicted object"],
                                      ambiguous_version_deletes=len(self.model.maybe_versions))
        self.event(f"read back {done['key']} keys and {done['version']} versions "
                   f"({done['restores of an evicted object']} GLACIER objects restored first)")

    def plant(self, s3):
        """Damage on purpose, behind the model's back: delete one acknowledged object and overwrite another, so
        that the read-back must report exactly 1 lost and 1 wrong (a check of the checker)."""
        with self.model.lock:
            keys = sorted(k for (b, k), e in self.model.keys.items()
                          if b == PLAIN and len(e["states"]) == 1 and ABSENT not in e["states"])
        if len(keys) < 2:
            raise RuntimeError("--plant: fewer than 2 acknowledged objects to damage")
        s3.delete_object(Bucket=PLAIN, Key=keys[0])
        s3.put_object(Bucket=PLAIN, Key=keys[1], Body=b"planted bytes")
        self.results["planted"] = dict(deleted=f"{PLAIN}/{keys[0]}", overwritten=f"{PLAIN}/{keys[1]}")
        self.event(f"planted: deleted {PLAIN}/{keys[0]}, overwrote {PLAIN}/{keys[1]}")

    def report(self):
        st, v = self.stats, self.results["verify"]
        ops = sum(st.ops.values())
        errs = sum(st.errors.values())
        n503 = sum(c for k, c in st.errors.items() if k.startswith("503"))
        self.say(f"\n   {'operation':<16} {'sent':>8} {'ok':>8}")
        for name, _ in MIX:
            self.say(f"   {name:<16} {st.ops[name]:>8} {st.ok[name]:>8}")
        self.say(f"   (of the restores: {st.ok['restores of an evicted object']} were RestoreObject of an evicted "
                 f"object; the others found it in the cache)")
        self.say(f"   {'total':<16} {ops:>8} {sum(st.ok[name] for name, _ in MIX):>8}  ({ops / self.results['run_seconds']:.1f} op/s; "
                 f"{self.model.acked_writes} acknowledged writes)")
        self.say(f"\n   {'error':<44} {'count':>7} {'in a fault window':>18}")
        for label, c in st.errors.most_common():
            self.say(f"   {label:<44} {c:>7} {st.errors_in_faults[label]:>18}")
        self.say(f"   errors {errs} ({sum(st.errors_in_faults.values())} in a fault window), 503s {n503}")
        self.say(f"\n   read back: {v['keys']} keys, {v['versions']} versions; lost {len(v['lost'])}, "
                 f"wrong {len(v['wrong'])}")
        for line in v["lost"][:50]:
            self.say(f"   LOST  {line}")
        for line in v["wrong"][:50]:
            self.say(f"   WRONG {line}")
        self.results.update(ops=dict(st.ops), ok=dict(st.ok), errors=dict(st.errors),
                            errors_in_faults=dict(st.errors_in_faults), errors_total=errs, n503=n503,
                            lost=len(v["lost"]), wrong=len(v["wrong"]), events=self.events, wiped=self.wiped,
                            acked_writes=self.model.acked_writes, load_end=pf.loadavg())
        (self.out / "results.json").write_text(json.dumps(self.results, indent=2, default=str))
        (self.out / "summary.txt").write_text("\n".join(self.summary) + "\n")
        print(f"\nresults in {self.out}")
        return 1 if v["lost"] or v["wrong"] else 0


def restore_and_get(s3, bucket, key, timeout_s, counter=None):
    """GET a GLACIER object: RestoreObject (Expedited) when the GET answers InvalidObjectState, wait, GET."""
    try:
        return s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as e:
        if e.response["Error"]["Code"] != "InvalidObjectState":
            raise
    s3.restore_object(Bucket=bucket, Key=key, RestoreRequest={"Days": 1, "Tier": "Expedited"})
    if counter is not None:
        counter["restores of an evicted object"] += 1
    deadline = time.time() + timeout_s
    while 'ongoing-request="false"' not in s3.head_object(Bucket=bucket, Key=key).get("Restore", ""):
        if time.time() > deadline:
            raise TimeoutError(f"restore of {bucket}/{key} not done after {timeout_s} s")
        time.sleep(0.5)
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def commit() -> str:
    import subprocess
    git = subprocess.run(["git", "-C", str(pf.REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    return git


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--kill-every", type=float, default=120, help="seconds between SIGKILLs of the server")
    p.add_argument("--evict-every", type=float, default=30, help="seconds between persist+evict of the cache")
    p.add_argument("--no-disk-failure", action="store_true", help="do not wipe a disk at the first restart")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--plant", action="store_true",
                   help="delete one acknowledged object and overwrite another before the read-back (must report "
                        "1 lost, 1 wrong)")
    p.add_argument("--bin", default=str(pf.REPO / "target" / "release" / "permafrost"))
    p.add_argument("--scratch", default=str(pf.REPO.parent / "bench-scratch-soak"))
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if not Path(args.bin).exists():
        sys.exit(f"no permafrost binary at {args.bin}: build it with `cargo build --release -p permafrost` "
                 f"(or pass --bin PATH)")
    sys.exit(Soak(args).run())


if __name__ == "__main__":
    main()
