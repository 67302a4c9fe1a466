"""Access keys in a cluster: keys, grants, ownership and bucket policies live in the shared catalog, so a key made
on one node signs on every node, and a change made on one node (a grant taken back, a key disabled, a policy
Deny) holds on the others within the reload interval (2 s, docs/security.md). Uses the throwaway PostgreSQL of
the cluster tests."""

import json
import time

from conftest import client
from ops import ok
from scoped import allow, assert_denied, create_key, deny, key_client, refusal
from test_cluster_nodes import pg, start_nodes  # noqa: F401 - pg is a fixture

RELOAD_S = 2.0
SLACK_S = 3.0  # polling and request time on a loaded machine


def until(what: str, predicate, limit_s: float = RELOAD_S + SLACK_S) -> float:
    """Poll `predicate` until true; the seconds it took (failing after `limit_s`)."""
    started = time.time()
    last = None
    while time.time() - started < limit_s:
        try:
            if predicate():
                return time.time() - started
        except Exception as e:  # noqa: BLE001 - retried until the deadline, reported then
            last = e
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {limit_s} s (last: {last!r})")


def answers(call) -> tuple:
    """`(status, code)` of a call: `(200, "")` when it worked."""
    try:
        call()
        return (200, "")
    except Exception as e:  # noqa: BLE001
        r = getattr(e, "response", None)
        if r is None:
            raise
        return (r["ResponseMetadata"]["HTTPStatusCode"], r["Error"].get("Code"))


def test_keys_grants_and_policies_made_on_one_node_hold_on_every_node(pg, tmp_path):  # noqa: F811
    url = pg.database()
    nodes = start_nodes(tmp_path, url, ["a", "b"])
    a, b = nodes["a"], nodes["b"]
    try:
        root_a = client(a.endpoint, retries=1)
        root_a.create_bucket(Bucket="shared")
        root_a.put_object(Bucket="shared", Key="secret/x", Body=b"on a")
        root_a.put_object(Bucket="shared", Key="open/y", Body=b"also on a")

        key = create_key(a.endpoint, "robot")
        allow(a.endpoint, "robot", "shared", "read")
        on_b = key_client(b.endpoint, key)
        took = until("the key made on a signs on b",
                     lambda: on_b.get_object(Bucket="shared", Key="open/y")["Body"].read() == b"also on a")
        assert_denied(refusal(on_b.put_object, Bucket="shared", Key="z", Body=b"z"), "robot", "PutObject", "shared")
        assert ok(b.endpoint, "GET", "/keys/robot")["buckets"] == {"shared": ["read"]}

        # A Deny put on b holds on a.
        root_b = client(b.endpoint, retries=1)
        root_b.put_bucket_policy(Bucket="shared", Policy=json.dumps({"Version": "2012-10-17", "Statement": [
            {"Sid": "no-secrets", "Effect": "Deny", "Principal": {"AWS": ["robot"]}, "Action": "s3:GetObject",
             "Resource": "arn:aws:s3:::shared/secret/*"}]}))
        on_a = key_client(a.endpoint, key)
        took = max(took, until("the Deny put on b holds on a",
                               lambda: answers(lambda: on_a.get_object(Bucket="shared", Key="secret/x"))
                               == (403, "AccessDenied")))
        assert on_a.get_object(Bucket="shared", Key="open/y")["Body"].read() == b"also on a"

        # A grant taken back on a, then the key disabled on b: refused on the other node too.
        deny(a.endpoint, "robot", "shared", "read")
        took = max(took, until("the grant taken back on a holds on b",
                               lambda: answers(lambda: on_b.get_object(Bucket="shared", Key="open/y"))
                               == (403, "AccessDenied")))
        ok(b.endpoint, "PUT", "/keys/robot", json={"enabled": False})
        took = max(took, until("the key disabled on b is refused on a",
                               lambda: answers(lambda: on_a.list_buckets()) == (403, "InvalidAccessKeyId")))

        # A bucket made by a key on b is that key's on a.
        maker = create_key(b.endpoint, "maker", create_buckets=True)
        key_client(b.endpoint, maker).create_bucket(Bucket="made-on-b")
        until("the bucket made on b is its maker's on a",
              lambda: ok(a.endpoint, "GET", "/keys/maker")["buckets"] == {"made-on-b": ["owner"]})
        assert key_client(a.endpoint, maker).get_bucket_acl(Bucket="made-on-b")["Owner"]["ID"] == "maker"
        print(f"slowest change to reach the other node: {took:.2f} s")
    finally:
        for s in nodes.values():
            if s.process is not None:
                s.stop()
