"""The admin HTTP API of `permafrost serve` (`/_permafrost/...`, SigV4-signed like any S3 request), and helpers
the grid, sleep, packing, dedup and salvage tests share: status polling, power counters, grid geometry."""

import hashlib
import json
import time

import requests
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from conftest import ACCESS_KEY, SECRET_KEY

STATUS_PATH = "/_permafrost/status"
PERSIST_PATH = "/_permafrost/persist"
EVICT_PATH = "/_permafrost/cache/evict"
GC_PATH = "/_permafrost/gc"
BUCKETS_PREFIX = "/_permafrost/buckets/"
GRID_BUCKET_HEADER = "x-permafrost-grid-bucket"
STATE_HEADER = "x-permafrost-state"
STORED_BYTES_HEADER = "x-permafrost-stored-bytes"


def admin(endpoint: str, method: str, path: str, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY,
          body: bytes = b"", timeout_s: float = 300) -> requests.Response:
    """One admin request, signed with AWS Signature V4 (service s3, us-east-1) like an S3 request."""
    req = AWSRequest(method=method, url=endpoint + path, data=body)
    S3SigV4Auth(Credentials(access_key, secret_key), "s3", "us-east-1").add_auth(req)
    return requests.request(method, endpoint + path, headers=dict(req.headers.items()), data=body,
                            timeout=timeout_s)


def admin_json(endpoint: str, method: str, path: str, body: bytes = b"") -> dict:
    """An admin request that must succeed; its JSON body."""
    r = admin(endpoint, method, path, body=body)
    assert r.status_code == 200, f"{method} {path}: {r.status_code} {r.text[:500]}"
    assert r.headers["content-type"] == "application/json", r.headers
    return r.json()


def status(endpoint: str) -> dict:
    return admin_json(endpoint, "GET", STATUS_PATH)


def evict(endpoint: str) -> int:
    return admin_json(endpoint, "POST", EVICT_PATH)["evicted_bytes"]


def gc(endpoint: str, ignore_grace: bool = True) -> dict:
    return admin_json(endpoint, "POST", GC_PATH + ("?ignore_grace=true" if ignore_grace else ""))


def contents_by_state(st: dict) -> dict:
    """`{state: (contents, stored_bytes)}` from a status document (`detail.catalog.contents_by_state`)."""
    out = {}
    for state, count, stored_bytes in st["detail"]["catalog"]["contents_by_state"]:
        out[str(state).lower()] = (count, stored_bytes)
    return out


def unpersisted(st: dict) -> int:
    """Contents not yet persisted (cached, placed or persisting)."""
    return sum(n for state, (n, _) in contents_by_state(st).items() if state != "persisted")


def wait_persisted(endpoint: str, expect_contents: int | None = None, timeout_s: float = 120) -> dict:
    """Poll status until every content is persisted (and, if given, `expect_contents` of them); the status."""
    deadline = time.time() + timeout_s
    while True:
        st = status(endpoint)
        persisted = contents_by_state(st).get("persisted", (0, 0))[0]
        if unpersisted(st) == 0 and (expect_contents is None or persisted >= expect_contents):
            assert st["last_background_error"] is None, st["last_background_error"]
            return st
        assert time.time() < deadline, (
            f"not persisted after {timeout_s} s: {contents_by_state(st)}, error {st['last_background_error']}")
        time.sleep(0.2)


def disks(st: dict) -> list:
    return st["detail"]["engine"]["disks"]


def role_of(disk: dict) -> tuple:
    """`("data", bucket)`, `("h_parity", hpg)` or `("v_parity", column)` from a disk's serialized role."""
    role = disk["role"]
    if isinstance(role, str):
        return (role, None)
    (name, fields), = role.items()
    return (name, next(iter(fields.values())) if isinstance(fields, dict) else fields)


def spin_ups(st: dict) -> dict:
    """`{disk index: spin-ups so far}`."""
    return {d["index"]: d["power"]["spin_ups"] for d in disks(st)}


def spun_up_since(before: dict, after: dict) -> dict:
    """`{disk index: new spin-ups}` of the disks that spun up between two status documents."""
    a, b = spin_ups(before), spin_ups(after)
    return {i: b[i] - a[i] for i in b if b[i] != a[i]}


def power_state_name(disk: dict) -> str:
    return str(disk["power_state"]).lower().replace("_", "")


def wait_all_off(endpoint: str, timeout_s: float = 30) -> dict:
    """Poll status until every disk is off; the status."""
    deadline = time.time() + timeout_s
    while True:
        st = status(endpoint)
        on = [(d["index"], d["power_state"]) for d in disks(st) if power_state_name(d) != "off"]
        if not on:
            return st
        assert time.time() < deadline, f"disks still on after {timeout_s} s: {on}"
        time.sleep(0.1)


def data_disk_of(st: dict, grid_bucket: int) -> dict:
    for d in disks(st):
        if role_of(d) == ("data", grid_bucket):
            return d
    raise AssertionError(f"no data disk for grid bucket {grid_bucket}: {[role_of(d) for d in disks(st)]}")


class Grid:
    """Geometry of the grid a status reports (layout `XxY:hn+hk`, disk = row·x + column, the last row holds the
    vertical parity disks, the upper disks cut into horizontal parity groups of hn+hk in disk order)."""

    def __init__(self, st: dict):
        layout = st["detail"]["engine"]["layout"]
        dims, groups = layout.split(":")
        self.x, self.y = (int(v) for v in dims.split("x"))
        hn, hk = (int(v) for v in groups.split("+"))
        self.group = hn + hk
        self.upper = self.x * (self.y - 1)
        self.disks = self.x * self.y

    def column(self, disk: int) -> int:
        return disk % self.x

    def hpg(self, disk: int) -> int | None:
        return disk // self.group if disk < self.upper else None

    def vp(self, column: int) -> int:
        return self.upper + column

    def groups(self) -> list:
        hpgs = [list(range(h * self.group, (h + 1) * self.group)) for h in range(self.upper // self.group)]
        columns = [[r * self.x + c for r in range(self.y)] for c in range(self.x)]
        return hpgs + columns

    def recoverable(self, failed: set) -> bool:
        """Peel decoding: a group with exactly one missing member rebuilds it, until nothing is missing."""
        missing = set(failed)
        progress = True
        while missing and progress:
            progress = False
            for g in self.groups():
                lost = [d for d in g if d in missing]
                if len(lost) == 1:
                    missing.discard(lost[0])
                    progress = True
        return not missing


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def dump(st: dict) -> str:
    """A status document without the per-disk detail, for assertion messages."""
    short = {k: v for k, v in st.items() if k != "detail"}
    short["contents_by_state"] = st["detail"]["catalog"]["contents_by_state"]
    return json.dumps(short)[:3000]
