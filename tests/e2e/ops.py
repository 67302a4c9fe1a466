"""The admin API v1 of `permafrost serve` (`/_permafrost/api/v1/...`, docs/admin.md) with its bearer token, for
the operator tests (metrics, dashboard, waiting, webhooks)."""

import hashlib
import hmac
import time

import requests

from conftest import ACCESS_KEY, SECRET_KEY

API = "/_permafrost/api/v1"
METRICS_PATH = "/_permafrost/metrics"


def api_token(access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY) -> str:
    """The admin API bearer token: HMAC-SHA256 under the secret key of a fixed label and the access key."""
    mac = hmac.new(secret_key.encode(), b"permafrost admin API token v1\n" + access_key.encode(), hashlib.sha256)
    return "pf1-" + mac.hexdigest()


def call(endpoint: str, method: str, path: str, json=None, token: str | None = None, timeout_s: float = 120):
    """One request to the admin API; returns the response whatever its status."""
    headers = {"Authorization": f"Bearer {token or api_token()}"}
    return requests.request(method, endpoint + API + path, json=json, headers=headers, timeout=timeout_s)


def ok(endpoint: str, method: str, path: str, json=None, timeout_s: float = 120):
    r = call(endpoint, method, path, json=json, timeout_s=timeout_s)
    assert r.status_code in (200, 201, 202), f"{method} {path}: {r.status_code} {r.text}"
    return r.json()


def metrics(endpoint: str) -> str:
    r = requests.get(endpoint + METRICS_PATH, headers={"Authorization": f"Bearer {api_token()}"}, timeout=30)
    assert r.status_code == 200, r.text
    return r.text


def wait_all_off(endpoint: str, timeout_s: float = 30):
    """Until every disk is off as the API shows it (the monitor saw it too)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        state = ok(endpoint, "GET", "/state")
        if all(d["shown_state"] in ("off", "failed") for d in state["disks"]) and state["spinning_now"] == 0:
            return state
        time.sleep(0.1)
    raise AssertionError(f"disks still on after {timeout_s} s")


def wait_task(endpoint: str, task_id: int, timeout_s: float = 120) -> dict:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        task = ok(endpoint, "GET", f"/tasks/{task_id}")
        if task["state"] in ("done", "failed"):
            return task
        time.sleep(0.05)
    raise AssertionError(f"task {task_id} still running after {timeout_s} s")


def object_disk(endpoint: str, s3, bucket: str, key: str) -> int:
    """The data disk an object's grid bucket lives on."""
    grid_bucket = int(s3.head_object(Bucket=bucket, Key=key)["ResponseMetadata"]["HTTPHeaders"]["x-permafrost-grid-bucket"])
    state = ok(endpoint, "GET", "/state")
    return next(d["disk"] for d in state["disks"] if d["role"] == "data" and d["role_index"] == grid_bucket)
