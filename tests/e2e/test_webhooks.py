"""Waiting for persistence through the real binary: the wait endpoint returns once an object is persisted, and a
registered webhook is delivered exactly once — also across server restarts (before and after it fired)."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

from conftest import Server, client
from ops import call, ok


class Receiver:
    """An HTTP server on the loopback that records every POST it gets."""

    def __init__(self):
        self.deliveries = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.deliveries.append((self.headers.get("X-Permafrost-Webhook"), json.loads(body)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.http = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_port}/hook"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def of(self, webhook_id):
        return [d for hook, d in self.deliveries if hook == str(webhook_id)]

    def close(self):
        self.http.shutdown()


def wait_for(what, condition, timeout_s=30):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_webhook_is_delivered_exactly_once_across_restarts(tmp_path):
    receiver = Receiver()
    server = Server(tmp_path / "data")
    server.start()
    try:
        s3 = client(server.endpoint)
        s3.create_bucket(Bucket="runs")
        # Registered before the objects exist.
        early = ok(server.endpoint, "POST", "/webhooks", {"url": receiver.url, "bucket": "runs", "key": "a.bin"})
        prefix = ok(server.endpoint, "POST", "/webhooks", {"url": receiver.url, "bucket": "runs", "prefix": "night/"})
        bad = call(server.endpoint, "POST", "/webhooks", {"url": "https://x/h", "bucket": "runs"})
        assert bad.status_code == 400 and "http://" in bad.json()["message"]
        assert call(server.endpoint, "POST", "/webhooks", {"url": receiver.url, "bucket": "nobucket"}).status_code == 404
        # A restart before anything fired forgets nothing.
        assert server.stop() == 0
        server.start()
        s3 = client(server.endpoint)
        s3.put_object(Bucket="runs", Key="a.bin", Body=b"a" * 200_000)
        wait_for("the object's webhook", lambda: receiver.of(early["id"]))
        delivery = receiver.of(early["id"])[0]
        assert delivery["event"] == "persisted" and delivery["key"] == "a.bin" and delivery["objects"] == 1
        # The engine agrees that the object is persisted.
        head = s3.head_object(Bucket="runs", Key="a.bin")
        assert head["ResponseMetadata"]["HTTPHeaders"]["x-permafrost-state"] == "persisted"
        hooks = {h["id"]: h for h in ok(server.endpoint, "GET", "/webhooks")["webhooks"]}
        assert hooks[early["id"]]["delivered_unix_ms"] is not None
        assert hooks[prefix["id"]]["delivered_unix_ms"] is None, "nothing under night/ yet"
        # Restart after it fired: it is not sent again.
        assert server.stop() == 0
        server.start()
        s3 = client(server.endpoint)
        for i in range(3):
            s3.put_object(Bucket="runs", Key=f"night/{i}.bin", Body=bytes([i]) * 100_000)
        wait_for("the prefix's webhook", lambda: receiver.of(prefix["id"]))
        assert receiver.of(prefix["id"])[0]["objects"] == 3
        assert server.stop() == 0
        server.start()
        time.sleep(3)  # several delivery rounds
        assert len(receiver.of(early["id"])) == 1, receiver.deliveries
        assert len(receiver.of(prefix["id"])) == 1, receiver.deliveries
        removed = ok(server.endpoint, "DELETE", f"/webhooks/{early['id']}")
        assert removed["removed"] is True
        assert call(server.endpoint, "DELETE", f"/webhooks/{early['id']}").status_code == 404
    finally:
        receiver.close()
        if server.process is not None:
            assert server.stop() == 0, server.log_tail()


def test_wait_returns_when_every_object_under_a_prefix_is_persisted(server, s3, bucket):
    for i in range(4):
        s3.put_object(Bucket=bucket, Key=f"batch/{i}", Body=bytes([i]) * 300_000)
    answer = ok(server.endpoint, "GET", f"/wait?bucket={bucket}&prefix=batch/&timeout_ms=60000")
    assert answer == {"bucket": bucket, "key": None, "prefix": "batch/", "objects": 4, "persisted": True}
    for i in range(4):
        head = s3.head_object(Bucket=bucket, Key=f"batch/{i}")
        assert head["ResponseMetadata"]["HTTPHeaders"]["x-permafrost-state"] == "persisted"
    missing = call(server.endpoint, "GET", f"/wait?bucket={bucket}&key=nope")
    assert missing.status_code == 404 and "nope" in missing.json()["message"]
