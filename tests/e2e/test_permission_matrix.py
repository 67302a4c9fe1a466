"""The permission matrix: every S3 operation the server implements, asked by every kind of caller, against the
expectations of one table file (permissions.tsv). Each cell is a real request made with boto3: allowed means
anything but a 403, denied means a 403 with the table's code and a message naming the caller, the operation and
the bucket (for a HEAD, which has no body, the code is read from the audit trail). Objects, uploads and buckets a
cell would use up are made fresh for it. An operation added to the server fails the completeness test until the
table classifies it."""

import datetime
import json
import re
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import requests
from botocore import UNSIGNED
from botocore.exceptions import ClientError

from conftest import REPO, Server, client
import scoped
from scoped import (PUBLIC_CONFIG, allow, anonymous_client, audit, create_key, key_client, last_event_id)

TABLE = Path(__file__).with_name("permissions.tsv")
SERVICE = REPO / "crates" / "s3" / "src" / "service.rs"
COLUMNS = ["no-grant", "anonymous", "anonymous-public", "read", "write", "write+delete", "owner", "other-owner",
           "root"]
# The key behind each column (anonymous columns have none, root is the server's root user).
KEY_NAMES = {"no-grant": "mx-nogrant", "read": "mx-reader", "write": "mx-writer", "write+delete": "mx-writedel",
             "owner": "mx-owner", "other-owner": "mx-other"}
BYSTANDER = "mx-bystander"
HEAD_OPERATIONS = {"HeadObject", "HeadBucket"}
BUCKETLESS = {"ListBuckets"}


def read_table() -> dict:
    """`{operation: {column: cell}}` from permissions.tsv (comment lines start with #)."""
    rows = {}
    header = None
    for number, line in enumerate(TABLE.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        cells = line.split("\t")
        if header is None:
            header = cells
            assert header == ["operation", *COLUMNS], f"{TABLE.name}:{number}: header {header}"
            continue
        assert len(cells) == len(header), f"{TABLE.name}:{number}: {len(cells)} cells, expected {len(header)}"
        operation, *values = cells
        assert operation not in rows, f"{TABLE.name}:{number}: {operation} twice"
        for value in values:
            assert value == "allow" or re.fullmatch(r"[A-Z][A-Za-z]+", value), f"{TABLE.name}:{number}: {value!r}"
        rows[operation] = dict(zip(COLUMNS, values))
    return rows


def implemented_operations() -> set:
    """The operations of `impl S3 for PermafrostS3` in service.rs, named as s3s names them (`list_objects_v2`
    is `ListObjectsV2`)."""
    text = SERVICE.read_text()
    start = text.index("impl S3 for PermafrostS3 {")
    end = text.index("\n}\n", start)
    names = re.findall(r"^\s*async fn (\w+)\(", text[start:end], flags=re.M)
    assert names, f"no operations found in {SERVICE}"
    return {"".join(part[:1].upper() + part[1:] for part in name.split("_")) for name in names}


def test_every_operation_the_server_implements_is_in_the_table():
    table, implemented = set(read_table()), implemented_operations()
    missing = sorted(implemented - table)
    stale = sorted(table - implemented)
    assert not missing and not stale, (
        f"{TABLE.name} must have a row per implemented operation: missing {missing}; rows the server does not "
        f"implement (in {SERVICE.relative_to(REPO)}): {stale}")
    assert set(CALLS) == table, f"requests built for {sorted(set(CALLS) ^ table)} do not match the table"


# ---- the world the cells run in ----------------------------------------------------------------------------

LIFECYCLE = {"Rules": [{"ID": "tmp", "Status": "Enabled", "Filter": {"Prefix": "tmp/"},
                        "Expiration": {"Days": 100}}]}
TAGS = {"TagSet": [{"Key": "site", "Value": "effelsberg"}]}
BLOCK_ALL = {"BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": True,
             "RestrictPublicBuckets": True}
BLOCK_NONE = {"BlockPublicAcls": False, "IgnorePublicAcls": False, "BlockPublicPolicy": False,
              "RestrictPublicBuckets": False}


def public_read_policy(bucket: str) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Sid": "objects", "Effect": "Allow", "Principal": "*", "Action": ["s3:GetObject"],
         "Resource": [f"arn:aws:s3:::{bucket}/*"]},
        {"Sid": "list", "Effect": "Allow", "Principal": "*", "Action": ["s3:ListBucket"],
         "Resource": [f"arn:aws:s3:::{bucket}"]}]})


def bystander_policy(bucket: str) -> str:
    """A policy that changes nothing for the columns: a key outside the matrix may read one unused prefix."""
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Sid": "bystander", "Effect": "Allow", "Principal": {"AWS": [BYSTANDER]}, "Action": "s3:GetObject",
         "Resource": f"arn:aws:s3:::{bucket}/never/*"}]})


def in_a_day():
    return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)


class World:
    """The server, the keys, the buckets and their fixtures."""

    def __init__(self, server: Server):
        self.server = server
        self.endpoint = server.endpoint
        self.root = client(server.endpoint, retries=1)
        self.setup_errors = []
        self.keys = {col: create_key(self.endpoint, name, create_buckets=col in ("owner", "other-owner"))
                     for col, name in KEY_NAMES.items()}
        create_key(self.endpoint, BYSTANDER)
        self.clients = {col: key_client(self.endpoint, key) for col, key in self.keys.items()}
        self.clients["anonymous"] = self.clients["anonymous-public"] = anonymous_client(self.endpoint)
        self.clients["root"] = self.root
        self.uploads = {}
        suffix = uuid.uuid4().hex[:8]
        # The bucket under test: made by the owner key, versioned with Object Lock.
        self.bucket = f"mx-{suffix}"
        self.clients["owner"].create_bucket(Bucket=self.bucket, ObjectLockEnabledForBucket=True)
        self.mirror_grants(self.bucket)
        # The other owner's bucket.
        self.clients["other-owner"].create_bucket(Bucket=f"mx-theirs-{suffix}")
        # The public bucket of the anonymous-public column.
        self.public = f"mx-public-{suffix}"
        self.root.create_bucket(Bucket=self.public, ObjectLockEnabledForBucket=True)
        self.policies = {self.bucket: bystander_policy(self.bucket), self.public: public_read_policy(self.public)}
        self.blocks = {self.bucket: BLOCK_ALL, self.public: BLOCK_NONE}
        # The source of copies: every key may read it.
        self.source = f"mx-source-{suffix}"
        self.root.create_bucket(Bucket=self.source)
        self.root.put_object(Bucket=self.source, Key="src", Body=b"source of copies")
        for name in [*KEY_NAMES.values(), BYSTANDER]:
            allow(self.endpoint, name, self.source, "read")
        for bucket in (self.bucket, self.public):
            self.furnish(bucket)

    def mirror_grants(self, bucket: str):
        allow(self.endpoint, KEY_NAMES["read"], bucket, "read")
        allow(self.endpoint, KEY_NAMES["write"], bucket, "write")
        allow(self.endpoint, KEY_NAMES["write+delete"], bucket, "write", "delete")

    def step(self, what: str, call, **kwargs):
        """A setup request that must work; a failure is kept (and shown with the matrix), not raised, so that
        the cells that do not need it still run."""
        try:
            return call(**kwargs)
        except ClientError as e:
            self.setup_errors.append(f"{what}: {e}")
            return None

    def furnish(self, bucket: str):
        r = self.root
        r.put_object(Bucket=bucket, Key="obj", Body=b"the object", Tagging="kind=raw")
        r.put_object(Bucket=bucket, Key="locked", Body=b"locked", ObjectLockMode="GOVERNANCE",
                     ObjectLockRetainUntilDate=in_a_day())
        r.put_object(Bucket=bucket, Key="held", Body=b"held", ObjectLockLegalHoldStatus="ON")
        r.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration=LIFECYCLE)
        self.step(f"PutBucketTagging {bucket}", r.put_bucket_tagging, Bucket=bucket, Tagging=TAGS)
        self.step(f"PutPublicAccessBlock {bucket}", r.put_public_access_block, Bucket=bucket,
                  PublicAccessBlockConfiguration=self.blocks[bucket])
        self.step(f"PutBucketPolicy {bucket}", r.put_bucket_policy, Bucket=bucket, Policy=self.policies[bucket])
        self.uploads[bucket] = r.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]

    def fresh_object(self, bucket: str, tagging: str = "") -> str:
        key = f"fresh/{uuid.uuid4().hex[:12]}"
        self.root.put_object(Bucket=bucket, Key=key, Body=b"fresh", Tagging=tagging)
        return key

    def fresh_bucket(self, column: str) -> str:
        """An empty bucket with the permissions of the bucket under test (the public one for its column)."""
        if column == "anonymous-public":
            return self.public
        name = f"mx-fresh-{uuid.uuid4().hex[:10]}"
        self.clients["owner"].create_bucket(Bucket=name)
        self.mirror_grants(name)
        return name


# Each operation: (prepare, request). `prepare(world, bucket, column)` runs as root before the cell and returns
# what the request needs; `request(client, bucket, prepared, world)` is the call under test.
def _fresh(w, b, col):
    return w.fresh_object(b)


def _fresh_upload(w, b, col):
    key = f"up/{uuid.uuid4().hex[:12]}"
    upload = w.root.create_multipart_upload(Bucket=b, Key=key)["UploadId"]
    return key, upload


def _upload_with_part(w, b, col):
    key, upload = _fresh_upload(w, b, col)
    etag = w.root.upload_part(Bucket=b, Key=key, UploadId=upload, PartNumber=1, Body=b"one part")["ETag"]
    return key, upload, etag


def _none(w, b, col):
    return None


def _restore(what):
    def prepare(w, b, col):
        if what == "tags":
            w.step(f"PutBucketTagging {b}", w.root.put_bucket_tagging, Bucket=b, Tagging=TAGS)
        elif what == "lifecycle":
            w.root.put_bucket_lifecycle_configuration(Bucket=b, LifecycleConfiguration=LIFECYCLE)
        elif what == "policy":
            w.step(f"PutBucketPolicy {b}", w.root.put_bucket_policy, Bucket=b, Policy=w.policies[b])
        elif what == "block":
            w.step(f"PutPublicAccessBlock {b}", w.root.put_public_access_block, Bucket=b,
                   PublicAccessBlockConfiguration=w.blocks[b])
    return prepare


def _delete_objects(c, b, key, w):
    answer = c.delete_objects(Bucket=b, Delete={"Objects": [{"Key": key}]})
    errors = answer.get("Errors") or []
    if errors:  # a per-key refusal inside a 200 is a refusal too
        raise ClientError({"Error": {"Code": errors[0].get("Code"), "Message": errors[0].get("Message", "")},
                           "ResponseMetadata": {"HTTPStatusCode": 403 if errors[0].get("Code") == "AccessDenied"
                                                else 200}}, "DeleteObjects")
    return answer


def _post_object(c, b, key):
    """An HTML form upload (POST Object) signed by the client's key (unsigned for an anonymous client); a refusal
    raised as boto3 raises it."""
    if c.meta.config.signature_version == UNSIGNED:
        url, fields = f"{c.meta.endpoint_url}/{b}", {"key": key}
    else:
        post = c.generate_presigned_post(b, key)
        url, fields = post["url"], post["fields"]
    r = requests.post(url, data=fields, files={"file": ("f.txt", b"posted", "text/plain")}, timeout=60)
    if r.status_code >= 300:
        root = ET.fromstring(r.content)
        raise ClientError({"Error": {"Code": root.findtext("Code"), "Message": root.findtext("Message")},
                           "ResponseMetadata": {"HTTPStatusCode": r.status_code}}, "PostObject")


CORS = {"CORSRules": [{"AllowedOrigins": ["https://app.example.test"], "AllowedMethods": ["GET"]}]}

CALLS = {
    "GetObject": (_none, lambda c, b, p, w: c.get_object(Bucket=b, Key="obj")["Body"].read()),
    "HeadObject": (_none, lambda c, b, p, w: c.head_object(Bucket=b, Key="obj")),
    "GetObjectAttributes": (_none, lambda c, b, p, w: c.get_object_attributes(
        Bucket=b, Key="obj", ObjectAttributes=["ETag", "ObjectSize"])),
    "GetObjectTagging": (_none, lambda c, b, p, w: c.get_object_tagging(Bucket=b, Key="obj")),
    "GetObjectRetention": (_none, lambda c, b, p, w: c.get_object_retention(Bucket=b, Key="locked")),
    "GetObjectLegalHold": (_none, lambda c, b, p, w: c.get_object_legal_hold(Bucket=b, Key="held")),
    "RestoreObject": (_none, lambda c, b, p, w: c.restore_object(Bucket=b, Key="obj",
                                                                 RestoreRequest={"Days": 1})),
    "PutObject": (_none, lambda c, b, p, w: c.put_object(Bucket=b, Key=f"put/{uuid.uuid4().hex}", Body=b"put")),
    "PostObject": (_none, lambda c, b, p, w: _post_object(c, b, f"post/{uuid.uuid4().hex}")),
    "CopyObject": (_none, lambda c, b, p, w: c.copy_object(
        Bucket=b, Key=f"copy/{uuid.uuid4().hex}", CopySource={"Bucket": w.source, "Key": "src"})),
    "CreateMultipartUpload": (_none, lambda c, b, p, w: c.create_multipart_upload(
        Bucket=b, Key=f"mpu/{uuid.uuid4().hex}")),
    "UploadPart": (_none, lambda c, b, p, w: c.upload_part(Bucket=b, Key="mp", UploadId=w.uploads[b],
                                                           PartNumber=1, Body=b"a part")),
    "UploadPartCopy": (_none, lambda c, b, p, w: c.upload_part_copy(
        Bucket=b, Key="mp", UploadId=w.uploads[b], PartNumber=2, CopySource={"Bucket": w.source, "Key": "src"})),
    "CompleteMultipartUpload": (_upload_with_part, lambda c, b, p, w: c.complete_multipart_upload(
        Bucket=b, Key=p[0], UploadId=p[1], MultipartUpload={"Parts": [{"ETag": p[2], "PartNumber": 1}]})),
    "AbortMultipartUpload": (_fresh_upload, lambda c, b, p, w: c.abort_multipart_upload(
        Bucket=b, Key=p[0], UploadId=p[1])),
    "ListParts": (_none, lambda c, b, p, w: c.list_parts(Bucket=b, Key="mp", UploadId=w.uploads[b])),
    "PutObjectTagging": (_none, lambda c, b, p, w: c.put_object_tagging(
        Bucket=b, Key="obj", Tagging={"TagSet": [{"Key": "kind", "Value": "raw"}]})),
    "DeleteObjectTagging": (lambda w, b, col: w.fresh_object(b, tagging="kind=raw"),
                            lambda c, b, p, w: c.delete_object_tagging(Bucket=b, Key=p)),
    "PutObjectRetention": (_fresh, lambda c, b, p, w: c.put_object_retention(
        Bucket=b, Key=p, Retention={"Mode": "GOVERNANCE", "RetainUntilDate": in_a_day()})),
    "PutObjectLegalHold": (_fresh, lambda c, b, p, w: c.put_object_legal_hold(
        Bucket=b, Key=p, LegalHold={"Status": "ON"})),
    "DeleteObject": (_fresh, lambda c, b, p, w: c.delete_object(Bucket=b, Key=p)),
    "DeleteObjects": (_fresh, lambda c, b, p, w: _delete_objects(c, b, p, w)),
    "GetObjectAcl": (_none, lambda c, b, p, w: c.get_object_acl(Bucket=b, Key="obj")),
    "PutObjectAcl": (_none, lambda c, b, p, w: c.put_object_acl(Bucket=b, Key="obj", ACL="private")),
    "ListBuckets": (_none, lambda c, b, p, w: c.list_buckets()),
    "CreateBucket": (lambda w, b, col: f"mx-new-{uuid.uuid4().hex[:10]}",
                     lambda c, b, p, w: c.create_bucket(Bucket=p)),
    "HeadBucket": (_none, lambda c, b, p, w: c.head_bucket(Bucket=b)),
    "GetBucketLocation": (_none, lambda c, b, p, w: c.get_bucket_location(Bucket=b)),
    "ListObjects": (_none, lambda c, b, p, w: c.list_objects(Bucket=b)),
    "ListObjectsV2": (_none, lambda c, b, p, w: c.list_objects_v2(Bucket=b)),
    "ListObjectVersions": (_none, lambda c, b, p, w: c.list_object_versions(Bucket=b)),
    "ListMultipartUploads": (_none, lambda c, b, p, w: c.list_multipart_uploads(Bucket=b)),
    "GetBucketVersioning": (_none, lambda c, b, p, w: c.get_bucket_versioning(Bucket=b)),
    "GetBucketLifecycleConfiguration": (_none, lambda c, b, p, w: c.get_bucket_lifecycle_configuration(Bucket=b)),
    "GetObjectLockConfiguration": (_none, lambda c, b, p, w: c.get_object_lock_configuration(Bucket=b)),
    "GetBucketTagging": (_none, lambda c, b, p, w: c.get_bucket_tagging(Bucket=b)),
    "PutBucketTagging": (_none, lambda c, b, p, w: c.put_bucket_tagging(Bucket=b, Tagging=TAGS)),
    "DeleteBucketTagging": (_restore("tags"), lambda c, b, p, w: c.delete_bucket_tagging(Bucket=b)),
    "DeleteBucket": (lambda w, b, col: w.fresh_bucket(col), lambda c, b, p, w: c.delete_bucket(Bucket=p)),
    "PutBucketVersioning": (_none, lambda c, b, p, w: c.put_bucket_versioning(
        Bucket=b, VersioningConfiguration={"Status": "Enabled"})),
    "PutBucketLifecycleConfiguration": (_none, lambda c, b, p, w: c.put_bucket_lifecycle_configuration(
        Bucket=b, LifecycleConfiguration=LIFECYCLE)),
    "DeleteBucketLifecycle": (_restore("lifecycle"), lambda c, b, p, w: c.delete_bucket_lifecycle(Bucket=b)),
    "PutObjectLockConfiguration": (_none, lambda c, b, p, w: c.put_object_lock_configuration(
        Bucket=b, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"})),
    "GetBucketAcl": (_none, lambda c, b, p, w: c.get_bucket_acl(Bucket=b)),
    "PutBucketAcl": (_none, lambda c, b, p, w: c.put_bucket_acl(Bucket=b, ACL="private")),
    "GetBucketPolicy": (_none, lambda c, b, p, w: c.get_bucket_policy(Bucket=b)),
    "PutBucketPolicy": (_none, lambda c, b, p, w: c.put_bucket_policy(Bucket=b, Policy=w.policies[b])),
    "DeleteBucketPolicy": (_restore("policy"), lambda c, b, p, w: c.delete_bucket_policy(Bucket=b)),
    "GetBucketPolicyStatus": (_none, lambda c, b, p, w: c.get_bucket_policy_status(Bucket=b)),
    "GetBucketCors": (_none, lambda c, b, p, w: c.get_bucket_cors(Bucket=b)),
    "PutBucketCors": (_none, lambda c, b, p, w: c.put_bucket_cors(Bucket=b, CORSConfiguration=CORS)),
    "DeleteBucketCors": (_none, lambda c, b, p, w: c.delete_bucket_cors(Bucket=b)),
    "GetPublicAccessBlock": (_none, lambda c, b, p, w: c.get_public_access_block(Bucket=b)),
    "PutPublicAccessBlock": (_none, lambda c, b, p, w: c.put_public_access_block(
        Bucket=b, PublicAccessBlockConfiguration=w.blocks[b])),
    "DeletePublicAccessBlock": (_restore("block"), lambda c, b, p, w: c.delete_public_access_block(Bucket=b)),
}

# The bucket a cell's refusal must name when it is not the bucket under test.
NAMED_BUCKET = {"CreateBucket": lambda b, p: p, "DeleteBucket": lambda b, p: p}


class Cell:
    def __init__(self, operation, column, expected, bucket):
        self.operation, self.column, self.expected, self.bucket = operation, column, expected, bucket
        self.status, self.code, self.message, self.problem = None, "", "", None

    @property
    def who(self):
        return "anonymous" if self.column.startswith("anonymous") else KEY_NAMES.get(self.column, "root")

    def got(self) -> str:
        if self.status is None:
            return "not run"
        if self.status < 300:
            return "allow"
        return f"{self.status} {self.code}".strip()


def run_cell(w: World, operation: str, column: str, expected: str) -> Cell:
    bucket = w.public if column == "anonymous-public" else w.bucket
    cell = Cell(operation, column, expected, bucket)
    if operation not in CALLS:
        cell.problem = "no request is built for this operation"
        return cell
    prepare, request = CALLS[operation]
    try:
        prepared = prepare(w, bucket, column)
    except ClientError as e:
        cell.problem = f"preparing as root failed: {e}"
        return cell
    cell.bucket = NAMED_BUCKET.get(operation, lambda b, p: b)(bucket, prepared)
    try:
        request(w.clients[column], bucket, prepared, w)
        cell.status = 200
    except ClientError as e:
        cell.status = e.response["ResponseMetadata"]["HTTPStatusCode"]
        cell.code = e.response["Error"].get("Code", "")
        cell.message = e.response["Error"].get("Message", "")
    if expected == "allow":
        if cell.status == 403:
            cell.problem = f"refused: {cell.code}: {cell.message}"
        elif cell.status >= 500:
            cell.problem = f"let through but failed: {cell.status} {cell.code}: {cell.message}"
    elif cell.status != 403:
        cell.problem = f"not refused: {cell.got()} {cell.message}".strip()
    elif operation not in HEAD_OPERATIONS:
        if cell.code != expected:
            cell.problem = f"refused with {cell.code}, expected {expected}: {cell.message}"
        else:
            names = [cell.who, operation] + ([] if operation in BUCKETLESS else [cell.bucket])
            unnamed = [n for n in names if not scoped.names(cell.message, n)]
            if unnamed:
                cell.problem = f"the refusal does not name {unnamed}: {cell.message!r}"
    return cell


def mutating(operation: str) -> bool:
    """Whether the operation's request is not a GET or HEAD (the audit trail has every such request)."""
    return not operation.startswith(("Get", "Head", "List"))


def check_audit(cells: list, events: list):
    """Every refusal of a row, and every request of it that was let through and may have changed something, is
    an audit event naming the caller, the operation and the bucket, with the status; a HEAD's code (no body) is
    taken from it."""
    unused = [e for e in events if e.get("kind") == "request"]
    for cell in cells:
        cell.audit_problem = None
        refused = cell.status == 403
        if not refused and not (cell.status is not None and cell.status < 300 and mutating(cell.operation)):
            continue

        def fits(e, operation=cell.operation):
            d = e["data"]
            return (d.get("key") == cell.who and d.get("operation") == operation
                    and (d.get("status") == 403) == refused and (d.get("status", 0) < 300 or refused)
                    and (cell.operation in BUCKETLESS or d.get("bucket") == cell.bucket))

        match = next((e for e in unused if fits(e)), None)
        if match is None:
            named = sorted({e["data"].get("operation") for e in unused if fits(e, e["data"].get("operation"))})
            cell.audit_problem = (f"no event {{key: {cell.who}, operation: {cell.operation}, bucket: {cell.bucket}, "
                                  f"status: {cell.status}}}"
                                  + (f"; the request is there as operation {named}" if named else ""))
            if refused and cell.operation in HEAD_OPERATIONS and cell.problem is None:
                cell.problem = "refused (403), but no audit event tells the code (a HEAD has no body)"
            continue
        unused.remove(match)
        if refused and cell.operation in HEAD_OPERATIONS:
            cell.code = match["data"].get("code", "")
            if cell.problem is None and cell.code != cell.expected and cell.expected != "allow":
                cell.problem = f"refused with {cell.code or 'no code'} (audit), expected {cell.expected}"


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("matrix") / "data", config=PUBLIC_CONFIG)
    server.start()
    try:
        world = World(server)
        results = {}
        for operation, row in read_table().items():
            after = last_event_id(server.endpoint)
            cells = [run_cell(world, operation, column, expected) for column, expected in row.items()]
            check_audit(cells, audit(server.endpoint, after=after))
            results[operation] = cells
        yield world, results
    finally:
        code = server.stop()
        assert code == 0, f"graceful shutdown failed with {code}: {server.log_tail()}"


def render(results: dict, problem_of) -> str:
    width = max(len(op) for op in results)
    lines = [" ".join([f"{'operation':<{width}}", *(f"{c:<18}" for c in COLUMNS)])]
    for operation, cells in results.items():
        shown = []
        for cell in cells:
            mark = "" if problem_of(cell) is None else "!! "
            shown.append(f"{mark + cell.got():<18}")
        lines.append(" ".join([f"{operation:<{width}}", *shown]))
    return "\n".join(lines)


def test_every_cell_answers_as_the_table_says(matrix):
    world, results = matrix
    wrong = [c for cells in results.values() for c in cells if c.problem is not None]
    if wrong:
        detail = "\n".join(f"  {c.operation} as {c.column} (expected {c.expected}): {c.problem}" for c in wrong)
        setup = "\n".join(f"  {e}" for e in world.setup_errors) or "  none"
        pytest.fail(f"{len(wrong)} of {sum(len(c) for c in results.values())} cells answered otherwise than "
                    f"{TABLE.name} says (!! marks them):\n{render(results, lambda c: c.problem)}\n\n"
                    f"{detail}\n\nsetup requests that failed:\n{setup}", pytrace=False)


def test_every_refusal_and_every_change_is_in_the_audit_trail(matrix):
    world, results = matrix
    cells = [c for cells in results.values() for c in cells]
    refused = [c for c in cells if c.status == 403]
    changed = [c for c in cells if c.status is not None and c.status < 300 and mutating(c.operation)]
    assert len(refused) > 200 and len(changed) > 60, f"{len(refused)} refusals, {len(changed)} changes: the " \
                                                      f"matrix did not run"
    missing = [c for c in refused + changed if c.audit_problem]
    if missing:
        detail = "\n".join(f"  {c.operation} as {c.column}: {c.audit_problem}" for c in missing)
        pytest.fail(f"{len(missing)} of {len(refused)} refusals and {len(changed)} changes have no audit event "
                    f"naming the key, the operation and the bucket:\n{detail}", pytrace=False)


def test_the_table_refuses_what_each_permission_lacks():
    """The table itself: a column never allows more than its permission does (a typo that allows everything
    would make the matrix test pass for a server that allows everything)."""
    table = read_table()
    refused = {col: sum(row[col] != "allow" for row in table.values()) for col in COLUMNS}
    assert refused["root"] == 0
    assert refused["anonymous"] == len(table)
    assert refused["no-grant"] == len(table) - 1  # it may list its (zero) buckets
    assert refused["anonymous-public"] == len(table) - 5  # GetObject, HeadObject, ListObjects(V2), HeadBucket
    assert refused["read"] > refused["owner"] and refused["write"] > refused["owner"]
    assert refused["other-owner"] == len(table) - 2  # ListBuckets and CreateBucket
