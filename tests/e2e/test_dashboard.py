"""The dashboard in a real browser: Debian's headless Chromium driven by playwright-core (tests/e2e/ui/
dashboard.mjs). Page loads without console errors, the grid shows every disk with its role, reading an object
turns its disk active on the page, failing a disk through the API turns it failed, a rebuild shows progress.
Screenshots: target/test-artifacts/dashboard/ (or $PERMAFROST_ARTIFACTS/dashboard)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ACCESS_KEY, REPO, SECRET_KEY, Server, client
from ops import api_token, object_disk, ok, wait_all_off

UI_DIR = REPO / "tests" / "e2e" / "ui"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


def test_dashboard_shows_the_grid_live_in_headless_chromium(tmp_path):
    if not Path(CHROMIUM).exists() or not (UI_DIR / "node_modules" / "playwright-core").exists():
        pytest.fail("chromium or playwright-core missing: run scripts/setup-deps.sh as root")
    artifacts = Path(os.environ.get("PERMAFROST_ARTIFACTS", REPO / "target" / "test-artifacts")) / "dashboard"
    shutil.rmtree(artifacts, ignore_errors=True)
    artifacts.mkdir(parents=True)
    server = Server(tmp_path / "data")
    server.start()
    try:
        s3 = client(server.endpoint)
        s3.create_bucket(Bucket="scans")
        s3.put_object(Bucket="scans", Key="2026/run1.bin", Body=os.urandom(3 << 20))
        assert ok(server.endpoint, "GET", "/wait?bucket=scans&key=2026/run1.bin&persist_now=true")["persisted"]
        ok(server.endpoint, "POST", "/cache/evict")
        disk = object_disk(server.endpoint, s3, "scans", "2026/run1.bin")
        wait_all_off(server.endpoint)
        url = s3.generate_presigned_url("get_object", Params={"Bucket": "scans", "Key": "2026/run1.bin"}, ExpiresIn=600)
        env = dict(os.environ, ENDPOINT=server.endpoint, ACCESS_KEY=ACCESS_KEY, SECRET_KEY=SECRET_KEY,
                   TOKEN=api_token(), GET_URL=url, OBJECT="scans/2026/run1.bin", OBJECT_DISK=str(disk),
                   ARTIFACTS=str(artifacts), CHROMIUM=CHROMIUM)
        run = subprocess.run(["node", str(UI_DIR / "dashboard.mjs")], env=env, capture_output=True, text=True,
                             timeout=300)
        print(run.stdout)
        assert run.returncode == 0, f"{run.stdout}\n{run.stderr}\nserver log: {server.log_tail()}"
        for name in ["01-login.png", "02-grid.png", "03-read.png", "04-failed.png", "05-rebuilt.png"]:
            assert (artifacts / name).stat().st_size > 1000, name
    finally:
        assert server.stop() == 0, server.log_tail()
