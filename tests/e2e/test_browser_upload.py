"""A web page of another origin uses the archive in a real browser (Debian's headless Chromium driven by
playwright-core, tests/e2e/ui/browser_upload.mjs): with a CORS configuration allowing the page's origin, the page
uploads a file with an HTML form's POST policy (fetch + FormData) and reads it back with fetch through CORS
(simple and preflighted); a page of an origin no rule allows is refused by the preflight and its fetch fails.
The protocol cases (every condition, every preflight answer) are in test_cors_post.py."""

import http.server
import json
import os
import subprocess
import threading
import uuid
from pathlib import Path

import pytest

from conftest import REPO
from test_cors_post import post_form

UI_DIR = REPO / "tests" / "e2e" / "ui"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")

PAGE = b"<!doctype html><html><head><title>upload page</title></head><body>uploads go to the archive</body></html>"


class Page(http.server.BaseHTTPRequestHandler):
    """Serves the upload page at every path."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args):
        pass


@pytest.fixture
def page_origins():
    """Two small web servers on other ports: two origins (`http://127.0.0.1:PORT`)."""
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page) for _ in range(2)]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    yield [f"http://127.0.0.1:{s.server_address[1]}" for s in servers]
    for s in servers:
        s.shutdown()
        s.server_close()


def test_a_page_of_another_origin_uploads_with_a_post_policy_and_reads_back_through_cors(server, s3, page_origins,
                                                                                       tmp_path):
    if not Path(CHROMIUM).exists() or not (UI_DIR / "node_modules" / "playwright-core").exists():
        pytest.fail("chromium or playwright-core missing: run scripts/setup-deps.sh as root")
    allowed, denied = page_origins
    bucket = f"t-browser-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [{
        "AllowedOrigins": [allowed], "AllowedMethods": ["GET", "HEAD", "POST"], "AllowedHeaders": ["x-app-*"],
        "ExposeHeaders": ["ETag"], "MaxAgeSeconds": 60}]})
    content = os.urandom(200_000)
    file_name = "scan-0001.bin"
    (tmp_path / file_name).write_bytes(content)
    form = post_form(bucket, "browser/${filename}", key_prefix="browser/",
                     fields={"success_action_status": "201"},
                     conditions=[["content-length-range", 1, 1 << 20]])
    key = f"browser/{file_name}"
    get_url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=600)
    env = dict(os.environ, ENDPOINT=server.endpoint, BUCKET=bucket, PAGE_URL=f"{allowed}/upload.html",
               DENIED_PAGE_URL=f"{denied}/upload.html", FORM=json.dumps(form), FILE_NAME=file_name,
               CONTENT_FILE=str(tmp_path / file_name), KEY=key, GET_URL=get_url, CHROMIUM=CHROMIUM)
    run = subprocess.run(["node", str(UI_DIR / "browser_upload.mjs")], env=env, capture_output=True, text=True,
                         timeout=300)
    print(run.stdout)
    assert run.returncode == 0, f"{run.stdout}\n{run.stderr}\nserver log: {server.log_tail()}"
    # What the page uploaded is what the archive holds.
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == content
