"""CORS configurations, preflights and POST Object (HTML form uploads with V4 POST policies), against AWS's
documentation: Put/Get/DeleteBucketCors and the configurations S3 refuses; preflight `OPTIONS` answered from
the rules (no signature), CORS headers on actual answers; every POST policy condition checked, refused with
AWS's code and words, `success_action_status`/`success_action_redirect`, metadata, `${filename}`, and the
signer's rights. The browser itself: test_browser_upload.py."""

import base64
import datetime
import hashlib
import hmac
import json
import urllib.parse
import uuid
import xml.etree.ElementTree as ET

import pytest
import requests
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from conftest import ACCESS_KEY, SECRET_KEY
from scoped import allow, create_key, key_client

ORIGIN = "http://app.example.test:8080"
OTHER_ORIGIN = "http://evil.example.test"
NOT_ALLOWED = ("CORSResponse: This CORS request is not allowed. This is usually because the evaluation of Origin, "
               "request method / Access-Control-Request-Method or Access-Control-Request-Headers are not "
               "whitelisted by the resource's CORS spec.")


def post_form(bucket: str, key: str, *, key_prefix: str | None = None, conditions: list = (),
              fields: dict | None = None, expires_in_s: int = 600, access_key: str = ACCESS_KEY,
              secret_key: str = SECRET_KEY, signed_fields: bool = True, signed_ago_s: int = 0) -> dict:
    """The fields of an HTML upload form with a signed V4 POST policy (as a web application's server makes
    them): the policy allows `bucket`, keys starting with `key_prefix` (default: `key` exactly) and each of
    `fields` exactly (unless `signed_fields` is false: they are then sent without a condition), plus
    `conditions`; signed `signed_ago_s` ago, expiring `expires_in_s` after signing."""
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=signed_ago_s)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    credential = f"{access_key}/{now:%Y%m%d}/us-east-1/s3/aws4_request"
    fields = dict(fields or {})
    key_condition = ["starts-with", "$key", key_prefix] if key_prefix is not None else {"key": key}
    policy = {
        "expiration": (now + datetime.timedelta(seconds=expires_in_s)).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        "conditions": [
            {"bucket": bucket}, key_condition,
            {"x-amz-algorithm": "AWS4-HMAC-SHA256"}, {"x-amz-credential": credential}, {"x-amz-date": amz_date},
            *([{name: value} for name, value in fields.items()] if signed_fields else []),
            *conditions,
        ],
    }
    encoded = base64.b64encode(json.dumps(policy).encode()).decode()

    def sign(k: bytes, msg: str) -> bytes:
        return hmac.new(k, msg.encode(), hashlib.sha256).digest()

    signing_key = sign(sign(sign(sign(("AWS4" + secret_key).encode(), f"{now:%Y%m%d}"), "us-east-1"), "s3"),
                       "aws4_request")
    signature = hmac.new(signing_key, encoded.encode(), hashlib.sha256).hexdigest()
    return {"key": key, **fields, "x-amz-algorithm": "AWS4-HMAC-SHA256", "x-amz-credential": credential,
            "x-amz-date": amz_date, "policy": encoded, "x-amz-signature": signature}


def upload(endpoint: str, bucket: str, form: dict, body: bytes = b"hello, archive",
           filename: str = "hello.txt", content_type: str = "text/plain", **kwargs) -> requests.Response:
    return requests.post(f"{endpoint}/{bucket}", data=form, files={"file": (filename, body, content_type)},
                         allow_redirects=False, timeout=60, **kwargs)


def error(r: requests.Response) -> tuple:
    """`(status, code, message)` of an S3 XML error answer."""
    root = ET.fromstring(r.content)
    return r.status_code, root.findtext("Code"), root.findtext("Message")


def signed(endpoint: str, method: str, path: str, body: bytes = b"", headers: dict | None = None):
    """A request signed with the test's key (for XML boto3 would not send)."""
    req = AWSRequest(method=method, url=endpoint + path, data=body, headers=headers or {})
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(req)
    return requests.request(method, endpoint + path, headers=dict(req.headers.items()), data=body, timeout=60)


RULES = [
    {"AllowedOrigins": [ORIGIN], "AllowedMethods": ["GET", "HEAD", "POST"],
     "AllowedHeaders": ["x-amz-*", "content-type"], "ExposeHeaders": ["ETag", "x-amz-version-id"],
     "MaxAgeSeconds": 600},
    {"ID": "everyone-reads", "AllowedOrigins": ["https://*.example.org"], "AllowedMethods": ["GET"]},
]


# --- CORS configuration -------------------------------------------------------------------------------------


def test_a_cors_configuration_is_put_read_back_and_deleted(s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.get_bucket_cors(Bucket=bucket)
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert e.value.response["Error"]["Code"] == "NoSuchCORSConfiguration"
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": RULES})
    got = s3.get_bucket_cors(Bucket=bucket)["CORSRules"]
    assert got == RULES
    answer = s3.delete_bucket_cors(Bucket=bucket)
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as e:
        s3.get_bucket_cors(Bucket=bucket)
    assert e.value.response["Error"]["Code"] == "NoSuchCORSConfiguration"
    # Deleting none is no error, as in S3.
    assert s3.delete_bucket_cors(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] == 204


def test_a_cors_configuration_goes_with_its_bucket(s3):
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    s3.put_bucket_cors(Bucket=name, CORSConfiguration={"CORSRules": RULES})
    s3.delete_bucket(Bucket=name)
    s3.create_bucket(Bucket=name)
    with pytest.raises(ClientError) as e:
        s3.get_bucket_cors(Bucket=name)
    assert e.value.response["Error"]["Code"] == "NoSuchCORSConfiguration"
    with pytest.raises(ClientError) as e:
        s3.get_bucket_cors(Bucket=f"t-none-{uuid.uuid4().hex[:8]}")
    assert e.value.response["Error"]["Code"] == "NoSuchBucket"


@pytest.mark.parametrize("rules, words", [
    ([{"AllowedOrigins": ["*"], "AllowedMethods": ["PATCH"]}],
     "Found unsupported HTTP method in CORS config. Unsupported method is PATCH"),
    ([{"AllowedOrigins": ["http://*.*.example"], "AllowedMethods": ["GET"]}],
     'AllowedOrigin "http://*.*.example" can not have more than one wildcard.'),
    ([{"AllowedOrigins": ["*"], "AllowedMethods": ["GET"], "AllowedHeaders": ["x-*-*"]}],
     'AllowedHeader "x-*-*" can not have more than one wildcard.'),
    ([{"AllowedOrigins": ["*"], "AllowedMethods": ["GET"], "ExposeHeaders": ["*"]}],
     'ExposeHeader "*" contains wildcard.'),
    ([{"AllowedOrigins": ["*"], "AllowedMethods": ["GET"]}] * 101,
     "The number of CORS rules should not exceed allowed limit of 100 rules"),
])
def test_cors_configurations_aws_refuses_are_refused(s3, bucket, rules, words):
    with pytest.raises(ClientError) as e:
        s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": rules})
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert e.value.response["Error"]["Code"] == "InvalidRequest"
    assert words in e.value.response["Error"]["Message"]
    with pytest.raises(ClientError):
        s3.get_bucket_cors(Bucket=bucket)  # nothing was stored


def test_cors_xml_that_is_not_a_configuration_is_malformed(server, bucket):
    for body in [b"<CORSConfiguration><CORSRule><AllowedMethod>GET</AllowedMethod></CORSRule>",
                 b"<CORSConfiguration></CORSConfiguration>", b"not xml"]:
        r = signed(server.endpoint, "PUT", f"/{bucket}?cors", body,
                   {"Content-MD5": base64.b64encode(hashlib.md5(body).digest()).decode()})
        assert r.status_code == 400, r.text
        assert error(r)[1] == "MalformedXML", r.text


def test_only_the_bucket_owner_manages_cors(server, s3, bucket):
    writer = create_key(server.endpoint, f"cors-writer-{uuid.uuid4().hex[:8]}")
    allow(server.endpoint, writer["name"], bucket, "write", "read")
    c = key_client(server.endpoint, writer)
    for call in [lambda: c.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": RULES}),
                 lambda: c.get_bucket_cors(Bucket=bucket), lambda: c.delete_bucket_cors(Bucket=bucket)]:
        with pytest.raises(ClientError) as e:
            call()
        assert e.value.response["Error"]["Code"] == "AccessDenied"


# --- preflight and actual requests ------------------------------------------------------------------------


@pytest.fixture
def cors_bucket(s3, bucket):
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": RULES})
    s3.put_object(Bucket=bucket, Key="a/b.txt", Body=b"bytes")
    return bucket


def preflight(endpoint, path, origin=ORIGIN, method="GET", headers=None):
    h = {}
    if origin is not None:
        h["Origin"] = origin
    if method is not None:
        h["Access-Control-Request-Method"] = method
    if headers:
        h["Access-Control-Request-Headers"] = headers
    return requests.options(endpoint + path, headers=h, timeout=30)


def test_a_preflight_a_rule_allows_is_answered_with_the_rule(server, cors_bucket):
    r = preflight(server.endpoint, f"/{cors_bucket}/a/b.txt", headers="X-Amz-Date, Content-Type")
    assert r.status_code == 200, r.text
    assert r.headers["Access-Control-Allow-Origin"] == ORIGIN
    assert r.headers["Access-Control-Allow-Methods"] == "GET, HEAD, POST"
    assert r.headers["Access-Control-Allow-Headers"] == "x-amz-date, content-type"
    assert r.headers["Access-Control-Max-Age"] == "600"
    assert r.headers["Access-Control-Expose-Headers"] == "ETag, x-amz-version-id"
    assert r.headers["Access-Control-Allow-Credentials"] == "true"
    assert "Origin" in r.headers["Vary"]
    # On the bucket too, and through the second rule's wildcard origin (answered with the origin).
    r = preflight(server.endpoint, f"/{cors_bucket}", origin="https://photos.example.org")
    assert r.status_code == 200 and r.headers["Access-Control-Allow-Origin"] == "https://photos.example.org"
    assert r.headers["Access-Control-Allow-Methods"] == "GET"


@pytest.mark.parametrize("origin, method, headers", [
    (OTHER_ORIGIN, "GET", None),                  # origin not in any rule
    (ORIGIN, "DELETE", None),                     # method not allowed for the origin
    (ORIGIN, "GET", "x-custom-header"),           # header not allowed
    ("https://example.org", "GET", None),         # the wildcard needs a subdomain
    ("https://photos.example.org", "POST", None),  # second rule: GET only
])
def test_a_preflight_no_rule_allows_is_refused_as_aws_refuses_it(server, cors_bucket, origin, method, headers):
    r = preflight(server.endpoint, f"/{cors_bucket}/a/b.txt", origin, method, headers)
    assert error(r) == (403, "AccessForbidden", NOT_ALLOWED)
    assert "Access-Control-Allow-Origin" not in r.headers


def test_preflights_without_a_configuration_or_the_needed_headers_are_refused(server, s3, cors_bucket):
    plain = f"t-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=plain)
    assert error(preflight(server.endpoint, f"/{plain}/x")) == (
        403, "AccessForbidden", "CORSResponse: CORS is not enabled for this bucket.")
    assert error(preflight(server.endpoint, f"/{cors_bucket}/x", origin=None)) == (
        400, "BadRequest", "Insufficient information. Origin request header needed.")
    assert error(preflight(server.endpoint, f"/{cors_bucket}/x", method=None))[:2] == (400, "BadRequest")


def test_actual_requests_from_an_allowed_origin_get_cors_headers_success_or_error(server, s3, cors_bucket):
    url = s3.generate_presigned_url("get_object", Params={"Bucket": cors_bucket, "Key": "a/b.txt"})
    r = requests.get(url, headers={"Origin": ORIGIN}, timeout=30)
    assert r.status_code == 200 and r.content == b"bytes"
    assert r.headers["Access-Control-Allow-Origin"] == ORIGIN
    assert r.headers["Access-Control-Expose-Headers"] == "ETag, x-amz-version-id"
    assert "Origin" in r.headers["Vary"]
    # An error answer carries them too (the page can read why).
    missing = s3.generate_presigned_url("get_object", Params={"Bucket": cors_bucket, "Key": "nope"})
    r = requests.get(missing, headers={"Origin": ORIGIN}, timeout=30)
    assert r.status_code == 404 and r.headers["Access-Control-Allow-Origin"] == ORIGIN
    # Another origin, or a method the rule does not allow: no CORS header (the browser withholds the answer).
    r = requests.get(url, headers={"Origin": OTHER_ORIGIN}, timeout=30)
    assert r.status_code == 200 and "Access-Control-Allow-Origin" not in r.headers
    put = s3.generate_presigned_url("put_object", Params={"Bucket": cors_bucket, "Key": "a/c.txt"})
    r = requests.put(put, data=b"x", headers={"Origin": ORIGIN}, timeout=30)
    assert r.status_code == 200 and "Access-Control-Allow-Origin" not in r.headers
    # Without Origin nothing changes.
    assert "Access-Control-Allow-Origin" not in requests.get(url, timeout=30).headers


def test_the_servers_own_paths_are_not_subject_to_cors(server, cors_bucket):
    before = requests.get(server.endpoint + "/_permafrost/health", timeout=30)
    r = requests.get(server.endpoint + "/_permafrost/health", headers={"Origin": ORIGIN}, timeout=30)
    assert r.status_code == before.status_code == 200
    assert "Access-Control-Allow-Origin" not in r.headers
    r = preflight(server.endpoint, "/_permafrost/health")
    assert r.status_code != 403 or b"AccessForbidden" not in r.content
    r = requests.get(server.endpoint + "/_permafrost/ui/", headers={"Origin": ORIGIN}, timeout=30)
    assert r.status_code == 200 and "Access-Control-Allow-Origin" not in r.headers


# --- POST Object ------------------------------------------------------------------------------------------


def test_a_form_upload_stores_the_file_with_its_type_and_metadata(server, s3, bucket):
    form = post_form(bucket, "forms/one.txt",
                     fields={"Content-Type": "text/plain", "x-amz-meta-origin": "form", "x-amz-meta-run": "7"})
    r = upload(server.endpoint, bucket, form, b"hello, archive")
    assert r.status_code == 204, r.text
    assert r.content == b""
    assert r.headers["ETag"] == f'"{hashlib.md5(b"hello, archive").hexdigest()}"'
    got = s3.get_object(Bucket=bucket, Key="forms/one.txt")
    assert got["Body"].read() == b"hello, archive"
    assert got["ContentType"] == "text/plain"
    assert got["Metadata"] == {"origin": "form", "run": "7"}


@pytest.mark.parametrize("status", ["200", "204"])
def test_success_action_status_200_and_204_answer_with_an_empty_body(server, bucket, status):
    form = post_form(bucket, f"forms/{status}.txt", fields={"success_action_status": status})
    r = upload(server.endpoint, bucket, form)
    assert r.status_code == int(status) and r.content == b"", r.text


def test_success_action_status_201_answers_with_the_post_response(server, bucket):
    form = post_form(bucket, "forms/${filename}", key_prefix="forms/", fields={"success_action_status": "201"})
    r = upload(server.endpoint, bucket, form, b"abc", filename="scan 1.tif")
    assert r.status_code == 201, r.text
    root = ET.fromstring(r.content)
    assert root.tag == "PostResponse"
    assert root.findtext("Bucket") == bucket
    assert root.findtext("Key") == "forms/scan 1.tif"
    assert root.findtext("ETag") == f'"{hashlib.md5(b"abc").hexdigest()}"'
    assert root.findtext("Location") == f"{server.endpoint}/{bucket}/forms/scan%201.tif"


@pytest.mark.parametrize("field", ["success_action_redirect", "redirect"])
def test_success_action_redirect_answers_303_with_bucket_key_and_etag(server, s3, bucket, field):
    target = "https://app.example.test/done?upload=1"
    form = post_form(bucket, "forms/${filename}", key_prefix="forms/", fields={field: target})
    r = upload(server.endpoint, bucket, form, b"redirected", filename="r.txt")
    assert r.status_code == 303, r.text
    location = urllib.parse.urlparse(r.headers["Location"])
    query = dict(urllib.parse.parse_qsl(location.query))
    assert location.netloc == "app.example.test" and location.path == "/done"
    assert query["upload"] == "1" and query["bucket"] == bucket and query["key"] == "forms/r.txt"
    assert query["etag"].strip('"') == hashlib.md5(b"redirected").hexdigest()
    assert s3.get_object(Bucket=bucket, Key="forms/r.txt")["Body"].read() == b"redirected"


def test_a_form_made_by_boto3_uploads(server, s3, bucket):
    post = s3.generate_presigned_post(bucket, "boto/${filename}", Fields={"success_action_status": "201"},
                                      Conditions=[["starts-with", "$key", "boto/"], {"success_action_status": "201"},
                                                  ["content-length-range", 1, 1000]])
    r = requests.post(post["url"], data=post["fields"], files={"file": ("b.bin", b"\x00\x01", "application/x")},
                      timeout=60)
    assert r.status_code == 201, r.text
    assert s3.get_object(Bucket=bucket, Key="boto/b.bin")["Body"].read() == b"\x00\x01"


def refused(r: requests.Response, status: int, code: str, words: str = ""):
    got = error(r)
    assert got[:2] == (status, code) and words in (got[2] or ""), got


def test_each_violated_condition_is_refused_as_aws_refuses_it(server, s3, bucket):
    e = server.endpoint
    # The key outside its prefix.
    refused(upload(e, bucket, post_form(bucket, "elsewhere/x", key_prefix="forms/")), 403, "AccessDenied",
            'Invalid according to Policy: Policy Condition failed: ["starts-with", "$key", "forms/"]')
    # A policy for another bucket.
    other = f"{bucket}-other"
    refused(upload(e, bucket, post_form(other, "forms/x")), 403, "AccessDenied",
            f'Invalid according to Policy: Policy Condition failed: ["eq", "$bucket", "{other}"]')
    # Content-Type other than the policy's.
    form = post_form(bucket, "forms/t", conditions=[["starts-with", "$Content-Type", "image/"]],
                     fields={"Content-Type": "text/html"}, signed_fields=False)
    refused(upload(e, bucket, form), 403, "AccessDenied",
            'Policy Condition failed: ["starts-with", "$Content-Type", "image/"]')
    # A field the policy does not name.
    form = post_form(bucket, "forms/m", fields={"x-amz-meta-sneaky": "1"}, signed_fields=False)
    refused(upload(e, bucket, form), 403, "AccessDenied",
            "Invalid according to Policy: Extra input fields: x-amz-meta-sneaky")
    # Expired.
    refused(upload(e, bucket, post_form(bucket, "forms/old", expires_in_s=-60)), 403, "AccessDenied",
            "Invalid according to Policy: Policy expired.")
    # Sizes outside content-length-range.
    form = post_form(bucket, "forms/big", conditions=[["content-length-range", 1, 10]])
    refused(upload(e, bucket, form, b"x" * 11), 400, "EntityTooLarge")
    form = post_form(bucket, "forms/small", conditions=[["content-length-range", 5, 10]])
    refused(upload(e, bucket, form, b"xy"), 400, "EntityTooSmall")
    # A changed field under the signature (the policy names the key exactly).
    form = post_form(bucket, "forms/exact")
    form["key"] = "forms/changed"
    refused(upload(e, bucket, form), 403, "AccessDenied", "Policy Condition failed")
    # A wrong signature.
    form = post_form(bucket, "forms/sig", secret_key="not-the-secret")
    refused(upload(e, bucket, form), 403, "SignatureDoesNotMatch")
    names = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert names == [], f"refused uploads stored {names}"


def test_a_form_upload_has_the_rights_of_the_key_that_signed_its_policy(server, s3, bucket):
    reader = create_key(server.endpoint, f"post-reader-{uuid.uuid4().hex[:8]}")
    allow(server.endpoint, reader["name"], bucket, "read")
    writer = create_key(server.endpoint, f"post-writer-{uuid.uuid4().hex[:8]}")
    allow(server.endpoint, writer["name"], bucket, "write")
    r = upload(server.endpoint, bucket, post_form(bucket, "forms/r", access_key=reader["access_key"],
                                                  secret_key=reader["secret_key"]))
    refused(r, 403, "AccessDenied", reader["name"])
    r = upload(server.endpoint, bucket, post_form(bucket, "forms/w", access_key=writer["access_key"],
                                                  secret_key=writer["secret_key"]))
    assert r.status_code == 204, r.text
    assert s3.get_object(Bucket=bucket, Key="forms/w")["Body"].read() == b"hello, archive"
    # Unsigned forms are anonymous uploads: refused on a private bucket.
    r = requests.post(f"{server.endpoint}/{bucket}", data={"key": "forms/anon"},
                      files={"file": ("a", b"a", "text/plain")}, timeout=60)
    refused(r, 403, "AccessDenied")
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="forms/r")


def test_a_refused_form_upload_from_an_allowed_origin_carries_cors_headers(server, cors_bucket):
    form = post_form(cors_bucket, "forms/x", key_prefix="up/")
    r = upload(server.endpoint, cors_bucket, form, headers={"Origin": ORIGIN})
    refused(r, 403, "AccessDenied", "Policy Condition failed")
    assert r.headers["Access-Control-Allow-Origin"] == ORIGIN


def test_the_acl_field_is_the_uploads_canned_acl_and_block_public_access_refuses_a_public_one(server, s3, bucket):
    r = upload(server.endpoint, bucket, post_form(bucket, "forms/public", fields={"acl": "public-read"}))
    refused(r, 403, "AccessDenied", "public access is blocked")
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="forms/public")
    r = upload(server.endpoint, bucket, post_form(bucket, "forms/private", fields={"acl": "private"}))
    assert r.status_code == 204, r.text
    grants = s3.get_object_acl(Bucket=bucket, Key="forms/private")["Grants"]
    assert [g["Permission"] for g in grants] == ["FULL_CONTROL"], grants


def test_a_form_signed_an_hour_ago_uploads_until_its_policy_expires(server, s3, bucket):
    """AWS bounds a form by its policy's expiration, not by how old its x-amz-date is (a page may show its upload
    form for an hour): the signature is checked all the same, and the signer's rights decide."""
    e = server.endpoint
    form = post_form(bucket, "forms/late", signed_ago_s=3600, expires_in_s=7200,
                     fields={"x-amz-meta-late": "yes"})
    r = upload(e, bucket, form, b"late but valid")
    assert r.status_code == 204, r.text
    got = s3.get_object(Bucket=bucket, Key="forms/late")
    assert got["Body"].read() == b"late but valid" and got["Metadata"] == {"late": "yes"}
    # Its signature still has to be right, and its policy still holds.
    form = post_form(bucket, "forms/forged", signed_ago_s=3600, expires_in_s=7200, secret_key="not-the-secret")
    refused(upload(e, bucket, form), 403, "SignatureDoesNotMatch")
    form = post_form(bucket, "forms/late2", signed_ago_s=3600, expires_in_s=7200)
    form["x-amz-signature"] = "0" * 64
    refused(upload(e, bucket, form), 403, "SignatureDoesNotMatch")
    form = post_form(bucket, "forms/x", key_prefix="up/", signed_ago_s=3600, expires_in_s=7200)
    refused(upload(e, bucket, form), 403, "AccessDenied", "Policy Condition failed")
    refused(upload(e, bucket, post_form(bucket, "forms/old", signed_ago_s=3600, expires_in_s=1800)), 403,
            "AccessDenied", "Policy expired")
    # With the rights of its signer.
    reader = create_key(server.endpoint, f"late-reader-{uuid.uuid4().hex[:8]}")
    allow(server.endpoint, reader["name"], bucket, "read")
    form = post_form(bucket, "forms/by-reader", signed_ago_s=3600, expires_in_s=7200,
                     access_key=reader["access_key"], secret_key=reader["secret_key"])
    refused(upload(e, bucket, form), 403, "AccessDenied", reader["name"])
    names = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))
    assert names == ["forms/late"], names
