"""Access keys, anonymous requests and the audit trail, shared by the permission matrix, the sharing, the key
management and the scoped-client tests: make keys and grant them permissions through the admin API
(`/_permafrost/api/v1/keys`, the root user's), S3 clients signed by a key or unsigned, and the answer of a
refused request."""

import re

import boto3
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

from conftest import TEST_CONFIG, Server, client
from ops import call, ok

# The test configuration with public access allowed (the default, `block_public_access = true`, blocks every
# public ACL and policy).
PUBLIC_CONFIG = TEST_CONFIG.replace("[server]\n", "[server]\nblock_public_access = false\n", 1)
assert PUBLIC_CONFIG != TEST_CONFIG

ALL_USERS_URI = "http://acs.amazonaws.com/groups/global/AllUsers"
AUTHENTICATED_USERS_URI = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers"


def create_key(endpoint: str, name: str, create_buckets: bool = False) -> dict:
    """A new key through the admin API: `{"name", "access_key", "secret_key", ...}`."""
    r = call(endpoint, "POST", "/keys", json={"name": name, "create_buckets": create_buckets})
    assert r.status_code == 201, f"POST /keys {name}: {r.status_code} {r.text}"
    key = r.json()
    assert key["name"] == name and key["secret_key"], key
    return key


def allow(endpoint: str, name: str, bucket: str, *permissions: str) -> dict:
    key = None
    for p in permissions:
        key = ok(endpoint, "POST", f"/keys/{name}/allow", json={"bucket": bucket, "permission": p})
    return key


def deny(endpoint: str, name: str, bucket: str, *permissions: str) -> dict:
    key = None
    for p in permissions:
        key = ok(endpoint, "POST", f"/keys/{name}/deny", json={"bucket": bucket, "permission": p})
    return key


def key_client(endpoint: str, key: dict, retries: int = 1):
    """An S3 client signing with `key` (no retries: a refusal is seen once)."""
    return client(endpoint, key["access_key"], key["secret_key"], retries=retries)


def anonymous_client(endpoint: str):
    """An S3 client that signs nothing (botocore's UNSIGNED)."""
    return boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1",
        config=Config(signature_version=UNSIGNED, s3={"addressing_style": "path"},
                      retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=10, read_timeout=120))


def refusal(call_, *args, **kwargs) -> tuple:
    """`(HTTP status, code, message)` of a call that must fail."""
    try:
        call_(*args, **kwargs)
    except ClientError as e:
        return (e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"].get("Code"),
                e.response["Error"].get("Message", ""))
    raise AssertionError(f"{getattr(call_, '__name__', call_)} {args} {kwargs} succeeded; it must be refused")


def assert_denied(answer: tuple, who: str, operation: str, bucket: str, code: str = "AccessDenied"):
    """A refusal: 403 with `code`, and a message naming the caller (`anonymous` or the key's name), the
    operation and the bucket."""
    status, got_code, message = answer
    assert status == 403 and got_code == code, answer
    for word in (who, operation, bucket):
        assert names(message, word), f"the refusal does not name {word!r}: {message!r}"


def names(message: str, word: str) -> bool:
    """Whether `message` has `word` as a whole (GetObject is not named by GetObjectAcl)."""
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(word)}(?![A-Za-z0-9])", message) is not None


def audit(endpoint: str, key: str | None = None, after: int = 0) -> list:
    """The audit trail (request and key events), oldest first; `key` keeps those about one key."""
    query = f"?after={after}" + (f"&key={key}" if key else "")
    events = ok(endpoint, "GET", "/audit" + query)
    assert isinstance(events, list), events
    return events


def last_event_id(endpoint: str) -> int:
    events = audit(endpoint)
    return events[-1]["id"] if events else 0


def start_server(tmp_path, config: str = TEST_CONFIG, name: str = "data") -> Server:
    s = Server(tmp_path / name, config=config)
    s.start()
    return s
