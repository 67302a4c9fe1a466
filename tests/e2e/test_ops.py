"""The operator's view through the real binary: Prometheus metrics parse with prometheus_client's parser and
agree with the API; monitoring (metrics scrapes and dashboard loads) never wakes a disk."""

import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from conftest import Server
from ops import METRICS_PATH, api_token, metrics, ok, wait_all_off


@pytest.fixture(scope="module")
def quiet(tmp_path_factory, request):
    """A server of its own (other tests' background work would wake disks), with one persisted object."""
    s = Server(tmp_path_factory.mktemp("ops") / "data")
    s.start()
    yield s
    assert s.stop() == 0, s.log_tail()


def put_persisted(server, s3_client, bucket="ops", key="scan.bin", size=300 << 10):
    s3_client.create_bucket(Bucket=bucket)
    s3_client.put_object(Bucket=bucket, Key=key, Body=bytes(range(256)) * (size // 256))
    answer = ok(server.endpoint, "GET", f"/wait?bucket={bucket}&key={key}&persist_now=true&timeout_ms=60000")
    assert answer["persisted"] is True


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_metrics_parse_with_prometheus_client_and_agree_with_the_api(quiet):
    from conftest import client
    s3 = client(quiet.endpoint)
    put_persisted(quiet, s3)
    assert len(s3.get_object(Bucket="ops", Key="scan.bin")["Body"].read()) == 300 << 10  # a GET: TTFB series
    state = wait_all_off(quiet.endpoint)
    text = metrics(quiet.endpoint)
    after = ok(quiet.endpoint, "GET", "/state")
    parsed = families(text)
    # Names follow Prometheus's rules: base units, counters end in _total (the parser strips it from names).
    for name in ["permafrost_disks", "permafrost_disk_power_watts", "permafrost_power_watts",
                 "permafrost_cache_capacity_bytes", "permafrost_cache_dirty_bytes",
                 "permafrost_cache_oldest_unpersisted_age_seconds", "permafrost_disk_rebuild_remaining_bytes",
                 "permafrost_disk_last_scrub_timestamp_seconds"]:
        assert parsed[name].type == "gauge", name
    for name in ["permafrost_disk_spinups", "permafrost_disk_energy_joules", "permafrost_energy_joules",
                 "permafrost_disk_power_state_seconds", "permafrost_s3_requests"]:
        assert parsed[name].type == "counter", name
        assert all(s.name == name + "_total" for s in parsed[name].samples), name
    for name in ["permafrost_disk_spinup_duration_seconds", "permafrost_s3_request_duration_seconds",
                 "permafrost_s3_time_to_first_byte_seconds"]:
        assert parsed[name].type == "histogram", name
    # Disk and energy figures agree with the API (all disks off: nothing changes between the two reads).
    assert state["spinning_now"] == 0
    by_state = {s.labels["state"]: s.value for s in parsed["permafrost_disks"].samples}
    assert by_state == {k: float(after["disks_by_state"].get(k, 0)) for k in by_state}
    assert by_state["off"] == len(after["disks"])
    joules = {int(s.labels["disk"]): s.value for s in parsed["permafrost_disk_energy_joules"].samples}
    for d in after["disks"]:
        assert joules[d["disk"]] == pytest.approx(d["energy"]["joules"], rel=1e-9, abs=1e-9), d["disk"]
    assert parsed["permafrost_energy_joules"].samples[0].value == pytest.approx(after["energy"]["joules"], rel=1e-9)
    assert parsed["permafrost_power_watts"].samples[0].value == pytest.approx(after["energy"]["watts"])
    spinups = {}
    for s in parsed["permafrost_disk_spinups"].samples:
        spinups.setdefault(int(s.labels["disk"]), {})[s.labels["reason"]] = s.value
    for d in after["disks"]:
        assert spinups.get(d["disk"], {}) == {k: float(v) for k, v in d["spin_ups_by_reason"].items()}
    assert any("persist" in r for r in spinups.values()), "persisting woke disks, and says so"
    assert parsed["permafrost_cache_capacity_bytes"].samples[0].value == after["cache"]["capacity_bytes"]
    put = [s for s in parsed["permafrost_s3_requests"].samples if s.labels["operation"] == "PutObject"]
    assert put and put[0].labels["status"] == "200"


def test_scraping_and_loading_the_dashboard_every_second_for_a_minute_wakes_no_disk(quiet):
    wait_all_off(quiet.endpoint)
    before = ok(quiet.endpoint, "GET", "/state")
    spin_ups = sum(d["spin_ups"] for d in before["disks"])
    session = requests.Session()
    r = session.post(quiet.endpoint + "/_permafrost/api/v1/login",
                     json={"access_key": "PFE2ETESTKEY", "secret_key": "pf-e2e-secret-key-0123456789"})
    assert r.status_code == 200
    start = time.time()
    loads = 0
    while time.time() - start < 60:
        tick = time.time()
        assert session.get(quiet.endpoint + METRICS_PATH, headers={"Authorization": f"Bearer {api_token()}"}).status_code == 200
        # What the dashboard loads: its files, its session check, the state and the spin-ups.
        for path in ["/_permafrost/ui/", "/_permafrost/ui/app.js", "/_permafrost/ui/style.css",
                     "/_permafrost/api/v1/session", "/_permafrost/api/v1/state", "/_permafrost/api/v1/wakes"]:
            assert session.get(quiet.endpoint + path).status_code == 200, path
        loads += 1
        time.sleep(max(0.0, 1.0 - (time.time() - tick)))
    after = ok(quiet.endpoint, "GET", "/state")
    assert loads >= 55
    assert sum(d["spin_ups"] for d in after["disks"]) == spin_ups, "monitoring woke a disk"
    assert after["spinning_now"] == 0
