"""The dashboard's keys page in a real browser: Debian's headless Chromium driven by playwright-core
(tests/e2e/ui/dashboard_keys.mjs). A key is created through the page's form, its secret read from the page (shown
once, with the note, and in no URL, storage or console), read on a bucket granted there; boto3 with that key
reads an object and is refused a write (403, which the page then shows in the key's recent activity); the key is
deleted on the page, behind a confirmation, and is gone from the API. Screenshots:
target/test-artifacts/dashboard-keys/ (or $PERMAFROST_ARTIFACTS/dashboard-keys)."""

import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import ACCESS_KEY, REPO, SECRET_KEY, Server, client
from ops import api_token, call
from scoped import key_client, refusal

UI_DIR = REPO / "tests" / "e2e" / "ui"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


def test_keys_page_creates_grants_and_deletes_a_key_in_headless_chromium(tmp_path):
    if not Path(CHROMIUM).exists() or not (UI_DIR / "node_modules" / "playwright-core").exists():
        pytest.fail("chromium or playwright-core missing: run scripts/setup-deps.sh as root")
    artifacts = Path(os.environ.get("PERMAFROST_ARTIFACTS", REPO / "target" / "test-artifacts")) / "dashboard-keys"
    shutil.rmtree(artifacts, ignore_errors=True)
    artifacts.mkdir(parents=True)
    server = Server(tmp_path / "data")
    server.start()
    node = None
    try:
        s3 = client(server.endpoint)
        s3.create_bucket(Bucket="shared")
        s3.put_object(Bucket="shared", Key="notes/readme.txt", Body=b"read me, do not change me\n")
        handoff = tmp_path / "handoff.json"
        env = dict(os.environ, ENDPOINT=server.endpoint, ACCESS_KEY=ACCESS_KEY, SECRET_KEY=SECRET_KEY,
                   TOKEN=api_token(), BUCKET="shared", KEY_NAME="reader-robot", HANDOFF=str(handoff),
                   ARTIFACTS=str(artifacts), CHROMIUM=CHROMIUM)
        node = subprocess.Popen(["node", str(UI_DIR / "dashboard_keys.mjs")], env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        watchdog = threading.Timer(300, node.kill)
        watchdog.start()
        output = []
        try:
            # The browser half: log in, create the key, grant read on "shared"; then the key is handed over.
            for line in node.stdout:
                output.append(line)
                if line.strip() == "handoff":
                    break
            assert output and output[-1].strip() == "handoff", \
                f"{''.join(output)}\n{node.stderr.read()}\nserver log: {server.log_tail()}"
            key = json.loads(handoff.read_text())
            handoff.unlink()
            try:
                reader = key_client(server.endpoint, key)
                body = reader.get_object(Bucket="shared", Key="notes/readme.txt")["Body"].read()
                assert body == b"read me, do not change me\n"
                keys_listed = [o["Key"] for o in reader.list_objects_v2(Bucket="shared").get("Contents", [])]
                assert keys_listed == ["notes/readme.txt"], keys_listed
                status, code, message = refusal(reader.put_object, Bucket="shared", Key="notes/new.txt", Body=b"x")
                assert (status, code) == (403, "AccessDenied"), (status, code, message)
                assert "reader-robot" in message and "shared" in message, message
                node.stdin.write("go\n")
            except BaseException:
                node.stdin.write("stop\n")
                raise
            finally:
                node.stdin.flush()
            # The browser half again: the refusal in the key's activity, disable/enable, revoke, delete.
            output.extend(node.stdout)
            code = node.wait()
        finally:
            watchdog.cancel()
        print("".join(output))
        assert code == 0, f"{''.join(output)}\n{node.stderr.read()}\nserver log: {server.log_tail()}"
        for name in ["01-created.png", "02-granted.png", "03-confirm-delete.png", "04-deleted.png"]:
            assert (artifacts / name).stat().st_size > 1000, name

        # Deleted on the page: gone from the API, and its signature is no longer accepted.
        assert call(server.endpoint, "GET", "/keys/reader-robot").status_code == 404
        assert all(k["name"] != "reader-robot" for k in call(server.endpoint, "GET", "/keys").json())
        status, code, _ = refusal(key_client(server.endpoint, key).get_object, Bucket="shared", Key="notes/readme.txt")
        assert status == 403 and code == "InvalidAccessKeyId", (status, code)
        assert key["secret_key"] not in server.log_tail(1 << 20), "the secret is in the server's log"
    finally:
        if node is not None and node.poll() is None:
            node.kill()
        assert server.stop() == 0, server.log_tail()
