"""Sharing as S3 clients do it, checked with boto3 against the AWS documentation: ACLs (GetBucketAcl/GetObjectAcl
answer the owner and the grantees; canned ACLs and grants to a key by `id=NAME`), bucket policies (round trip,
what they allow, explicit Deny beating every Allow, MalformedPolicy naming what is unsupported),
GetBucketPolicyStatus, and Block Public Access: the server's `block_public_access` (on by default) and the
bucket-level configuration refuse a public ACL or policy with 403 AccessDenied."""

import json
import uuid

import pytest
from botocore.exceptions import ClientError

from conftest import Server, client
from scoped import (ALL_USERS_URI, AUTHENTICATED_USERS_URI, PUBLIC_CONFIG, allow, anonymous_client, assert_denied,
                    create_key, key_client, refusal)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def pub(tmp_path_factory):
    """A server that lets buckets be made public (`block_public_access = false`)."""
    s = Server(tmp_path_factory.mktemp("sharing") / "data", config=PUBLIC_CONFIG)
    s.start()
    yield s
    code = s.stop()
    assert code == 0, f"graceful shutdown failed with {code}: {s.log_tail()}"


@pytest.fixture(scope="module")
def root(pub):
    return client(pub.endpoint, retries=1)


@pytest.fixture(scope="module")
def anon(pub):
    return anonymous_client(pub.endpoint)


def owned_bucket(pub, prefix="sh"):
    """A bucket made by a key of its own (the bucket's owner): `(bucket, owner key, owner client)`."""
    key = create_key(pub.endpoint, unique(f"{prefix}-owner"), create_buckets=True)
    s3 = key_client(pub.endpoint, key)
    bucket = unique(prefix)
    s3.create_bucket(Bucket=bucket)
    return bucket, key, s3


def grants(answer) -> list:
    """`[(grantee type, ID or URI, permission)]` of a GetBucketAcl/GetObjectAcl answer, in order."""
    out = []
    for g in answer["Grants"]:
        grantee = g["Grantee"]
        out.append((grantee["Type"], grantee.get("ID") or grantee.get("URI"), g["Permission"]))
    return out


def policy(bucket: str, *statements) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def stmt(effect, principal, action, resource, sid=None) -> dict:
    s = {"Effect": effect, "Principal": principal, "Action": action, "Resource": resource}
    if sid:
        s["Sid"] = sid
    return s


# ---- ACLs ---------------------------------------------------------------------------------------------------


def test_bucket_acl_names_the_owning_key_and_each_grantee(pub, root, anon):
    bucket, owner, s3 = owned_bucket(pub)
    s3.put_object(Bucket=bucket, Key="o", Body=b"object")
    answer = s3.get_bucket_acl(Bucket=bucket)
    assert answer["Owner"]["ID"] == owner["name"], answer["Owner"]
    assert grants(answer) == [("CanonicalUser", owner["name"], "FULL_CONTROL")]

    s3.put_bucket_acl(Bucket=bucket, ACL="public-read")
    answer = s3.get_bucket_acl(Bucket=bucket)
    assert answer["Owner"]["ID"] == owner["name"]
    assert grants(answer) == [("CanonicalUser", owner["name"], "FULL_CONTROL"), ("Group", ALL_USERS_URI, "READ")]
    # Bucket READ lists the bucket; the objects keep their own (private) ACLs.
    assert [o["Key"] for o in anon.list_objects_v2(Bucket=bucket)["Contents"]] == ["o"]
    assert_denied(refusal(anon.get_object, Bucket=bucket, Key="o"), "anonymous", "GetObject", bucket)
    assert_denied(refusal(anon.put_object, Bucket=bucket, Key="x", Body=b"x"), "anonymous", "PutObject", bucket)

    s3.put_bucket_acl(Bucket=bucket, ACL="authenticated-read")
    assert grants(s3.get_bucket_acl(Bucket=bucket))[1:] == [("Group", AUTHENTICATED_USERS_URI, "READ")]
    stranger_key = create_key(pub.endpoint, unique("stranger"))
    stranger = key_client(pub.endpoint, stranger_key)
    assert stranger.list_objects_v2(Bucket=bucket)["KeyCount"] == 1
    assert_denied(refusal(anon.list_objects_v2, Bucket=bucket), "anonymous", "ListObjectsV2", bucket)

    reader = create_key(pub.endpoint, unique("grantee"))
    s3.put_bucket_acl(Bucket=bucket, GrantRead=f"id={reader['name']}", GrantFullControl=f"id={owner['name']}")
    assert (("CanonicalUser", reader["name"], "READ") in grants(s3.get_bucket_acl(Bucket=bucket)))
    assert key_client(pub.endpoint, reader).list_objects_v2(Bucket=bucket)["KeyCount"] == 1
    assert_denied(refusal(stranger.list_objects_v2, Bucket=bucket), stranger_key["name"], "ListObjectsV2", bucket)

    s3.put_bucket_acl(Bucket=bucket, ACL="private")
    assert grants(s3.get_bucket_acl(Bucket=bucket)) == [("CanonicalUser", owner["name"], "FULL_CONTROL")]
    assert_denied(refusal(key_client(pub.endpoint, reader).list_objects_v2, Bucket=bucket), reader["name"],
                  "ListObjectsV2", bucket)


def test_a_root_bucket_is_owned_by_the_root_user_and_a_grant_to_an_unknown_key_is_refused(pub, root):
    bucket = unique("rootacl")
    root.create_bucket(Bucket=bucket)
    root_id = root.list_buckets()["Owner"]["ID"]
    answer = root.get_bucket_acl(Bucket=bucket)
    assert answer["Owner"]["ID"] == root_id
    assert grants(answer) == [("CanonicalUser", root_id, "FULL_CONTROL")]
    status, code, message = refusal(root.put_bucket_acl, Bucket=bucket, GrantRead="id=nobody-has-this-name")
    assert status == 400 and "nobody-has-this-name" in message, (status, code, message)
    status, code, message = refusal(root.put_bucket_acl, Bucket=bucket, ACL="log-delivery-write")
    assert status == 400 and "log-delivery-write" in message, (status, code, message)


def test_object_acls_share_one_object_and_a_new_version_of_it_starts_private(pub, root, anon):
    bucket, owner, s3 = owned_bucket(pub, "objacl")
    s3.put_object(Bucket=bucket, Key="public.txt", Body=b"for everyone", ACL="public-read")
    s3.put_object(Bucket=bucket, Key="private.txt", Body=b"for the owner")
    answer = s3.get_object_acl(Bucket=bucket, Key="public.txt")
    assert answer["Owner"]["ID"] == owner["name"]
    assert grants(answer) == [("CanonicalUser", owner["name"], "FULL_CONTROL"), ("Group", ALL_USERS_URI, "READ")]
    assert grants(s3.get_object_acl(Bucket=bucket, Key="private.txt")) == [
        ("CanonicalUser", owner["name"], "FULL_CONTROL")]
    assert anon.get_object(Bucket=bucket, Key="public.txt")["Body"].read() == b"for everyone"
    assert_denied(refusal(anon.get_object, Bucket=bucket, Key="private.txt"), "anonymous", "GetObject", bucket)
    assert_denied(refusal(anon.list_objects_v2, Bucket=bucket), "anonymous", "ListObjectsV2", bucket)

    # A grant to one key by its name, with an AccessControlPolicy body.
    friend = create_key(pub.endpoint, unique("friend"))
    s3.put_object_acl(Bucket=bucket, Key="private.txt", AccessControlPolicy={
        "Owner": {"ID": owner["name"]},
        "Grants": [{"Grantee": {"Type": "CanonicalUser", "ID": friend["name"]}, "Permission": "READ"}]})
    assert ("CanonicalUser", friend["name"], "READ") in grants(s3.get_object_acl(Bucket=bucket, Key="private.txt"))
    f = key_client(pub.endpoint, friend)
    assert f.get_object(Bucket=bucket, Key="private.txt")["Body"].read() == b"for the owner"
    assert_denied(refusal(f.get_object_acl, Bucket=bucket, Key="private.txt"), friend["name"], "GetObjectAcl",
                  bucket)
    assert_denied(refusal(f.put_object, Bucket=bucket, Key="private.txt", Body=b"x"), friend["name"], "PutObject",
                  bucket)
    assert_denied(refusal(anon.get_object, Bucket=bucket, Key="private.txt"), "anonymous", "GetObject", bucket)

    # Writing the key again makes a new object: its ACL does not carry over.
    s3.put_object(Bucket=bucket, Key="public.txt", Body=b"replaced")
    assert grants(s3.get_object_acl(Bucket=bucket, Key="public.txt")) == [
        ("CanonicalUser", owner["name"], "FULL_CONTROL")]
    assert_denied(refusal(anon.get_object, Bucket=bucket, Key="public.txt"), "anonymous", "GetObject", bucket)


# ---- policies -----------------------------------------------------------------------------------------------


def test_a_policy_round_trips_and_its_status_says_whether_it_is_public(pub, root):
    bucket, owner, s3 = owned_bucket(pub, "pol")
    reader = create_key(pub.endpoint, unique("polreader"))
    private = policy(bucket, stmt("Allow", {"AWS": [f"arn:aws:iam::123456789012:user/{reader['name']}"]},
                                  ["s3:GetObject"], [f"arn:aws:s3:::{bucket}/shared/*"], sid="reader"))
    status, code, _ = refusal(s3.get_bucket_policy, Bucket=bucket)
    assert (status, code) == (404, "NoSuchBucketPolicy")

    s3.put_bucket_policy(Bucket=bucket, Policy=private)
    assert json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"]) == json.loads(private)
    assert s3.get_bucket_policy_status(Bucket=bucket)["PolicyStatus"]["IsPublic"] is False

    public = policy(bucket, stmt("Allow", "*", "s3:GetObject", f"arn:aws:s3:::{bucket}/*"))
    s3.put_bucket_policy(Bucket=bucket, Policy=public)
    assert json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"]) == json.loads(public)
    assert s3.get_bucket_policy_status(Bucket=bucket)["PolicyStatus"]["IsPublic"] is True
    public_aws = policy(bucket, stmt("Allow", {"AWS": "*"}, "s3:GetObject", f"arn:aws:s3:::{bucket}/*"))
    s3.put_bucket_policy(Bucket=bucket, Policy=public_aws)
    assert s3.get_bucket_policy_status(Bucket=bucket)["PolicyStatus"]["IsPublic"] is True

    s3.delete_bucket_policy(Bucket=bucket)
    status, code, _ = refusal(s3.get_bucket_policy, Bucket=bucket)
    assert (status, code) == (404, "NoSuchBucketPolicy")
    status, code, _ = refusal(s3.get_bucket_policy_status, Bucket=bucket)
    assert (status, code) == (404, "NoSuchBucketPolicy"), "AWS answers NoSuchBucketPolicy when there is none"


def test_what_a_policy_cannot_say_is_refused_as_malformed_naming_it(pub, root):
    bucket, owner, s3 = owned_bucket(pub, "malformed")
    arn = f"arn:aws:s3:::{bucket}/*"
    cases = [
        ({"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": arn,
          "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}}, "Condition"),
        ({"Effect": "Allow", "NotPrincipal": {"AWS": [owner["name"]]}, "Action": "s3:GetObject", "Resource": arn},
         "NotPrincipal"),
        ({"Effect": "Allow", "Principal": "*", "NotAction": "s3:GetObject", "Resource": arn}, "NotAction"),
        ({"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::other-bucket/*"},
         "other-bucket"),
        ({"Effect": "Allow", "Principal": {"AWS": ["no-such-key-anywhere"]}, "Action": "s3:GetObject",
          "Resource": arn}, "no-such-key-anywhere"),
        ({"Effect": "Perhaps", "Principal": "*", "Action": "s3:GetObject", "Resource": arn}, "Effect"),
    ]
    for statement, word in cases:
        status, code, message = refusal(s3.put_bucket_policy, Bucket=bucket, Policy=policy(bucket, statement))
        assert (status, code) == (400, "MalformedPolicy") and word in message, (word, status, code, message)
    status, code, message = refusal(s3.put_bucket_policy, Bucket=bucket, Policy="{not json")
    assert (status, code) == (400, "MalformedPolicy"), (status, code, message)
    status, _, _ = refusal(s3.get_bucket_policy, Bucket=bucket)
    assert status == 404, "a refused policy is not kept"


def test_a_policy_allows_a_key_exactly_the_actions_and_objects_it_names(pub, root):
    bucket, owner, s3 = owned_bucket(pub, "polallow")
    for k in ("shared/a.txt", "shared/b.txt", "private/c.txt"):
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())
    guest = create_key(pub.endpoint, unique("guest"))
    g = key_client(pub.endpoint, guest)
    s3.put_bucket_policy(Bucket=bucket, Policy=policy(
        bucket,
        stmt("Allow", {"AWS": f"arn:aws:iam::123456789012:user/{guest['name']}"}, "s3:Get*",
             f"arn:aws:s3:::{bucket}/shared/*", sid="guest-reads-shared"),
        stmt("Allow", {"AWS": [guest["name"]]}, "s3:PutObject", f"arn:aws:s3:::{bucket}/incoming/*")))
    assert g.get_object(Bucket=bucket, Key="shared/a.txt")["Body"].read() == b"shared/a.txt"
    assert g.get_object_tagging(Bucket=bucket, Key="shared/b.txt")["TagSet"] == []
    assert_denied(refusal(g.get_object, Bucket=bucket, Key="private/c.txt"), guest["name"], "GetObject", bucket)
    assert_denied(refusal(g.list_objects_v2, Bucket=bucket), guest["name"], "ListObjectsV2", bucket)
    g.put_object(Bucket=bucket, Key="incoming/d.txt", Body=b"dropped")
    assert_denied(refusal(g.put_object, Bucket=bucket, Key="shared/a.txt", Body=b"x"), guest["name"], "PutObject",
                  bucket)
    assert_denied(refusal(g.delete_object, Bucket=bucket, Key="incoming/d.txt"), guest["name"], "DeleteObject",
                  bucket)
    assert s3.get_object(Bucket=bucket, Key="shared/a.txt")["Body"].read() == b"shared/a.txt"


def test_an_explicit_deny_beats_a_grant_a_policy_allow_and_an_acl_but_not_root(pub, root, anon):
    bucket, owner, s3 = owned_bucket(pub, "deny")
    for k in ("open/a.txt", "secret/b.txt"):
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())
    reader = create_key(pub.endpoint, unique("denied"))
    allow(pub.endpoint, reader["name"], bucket, "read")
    r = key_client(pub.endpoint, reader)
    assert r.get_object(Bucket=bucket, Key="secret/b.txt")["Body"].read() == b"secret/b.txt"

    s3.put_bucket_policy(Bucket=bucket, Policy=policy(
        bucket,
        stmt("Allow", "*", "s3:GetObject", f"arn:aws:s3:::{bucket}/*", sid="everyone-reads"),
        stmt("Deny", {"AWS": [reader["name"]]}, "s3:GetObject", f"arn:aws:s3:::{bucket}/secret/*",
             sid="no-secrets")))
    answer = refusal(r.get_object, Bucket=bucket, Key="secret/b.txt")
    assert_denied(answer, reader["name"], "GetObject", bucket)
    assert "no-secrets" in answer[2] and "policy" in answer[2], answer
    assert r.get_object(Bucket=bucket, Key="open/a.txt")["Body"].read() == b"open/a.txt"
    assert r.list_objects_v2(Bucket=bucket)["KeyCount"] == 2
    assert anon.get_object(Bucket=bucket, Key="secret/b.txt")["Body"].read() == b"secret/b.txt"

    # An object ACL granting the key READ does not beat the Deny either.
    s3.put_object_acl(Bucket=bucket, Key="secret/b.txt", GrantRead=f"id={reader['name']}")
    assert_denied(refusal(r.get_object, Bucket=bucket, Key="secret/b.txt"), reader["name"], "GetObject", bucket)

    # A Deny for everyone stops the owner key and anonymous requests; the root user is the administrator.
    s3.put_bucket_policy(Bucket=bucket, Policy=policy(
        bucket, stmt("Deny", "*", ["s3:GetObject", "s3:DeleteObject"], f"arn:aws:s3:::{bucket}/secret/*",
                     sid="nobody")))
    assert_denied(refusal(s3.get_object, Bucket=bucket, Key="secret/b.txt"), owner["name"], "GetObject", bucket)
    assert_denied(refusal(s3.delete_object, Bucket=bucket, Key="secret/b.txt"), owner["name"], "DeleteObject",
                  bucket)
    assert_denied(refusal(anon.get_object, Bucket=bucket, Key="open/a.txt"), "anonymous", "GetObject", bucket)
    assert root.get_object(Bucket=bucket, Key="secret/b.txt")["Body"].read() == b"secret/b.txt"
    # The owner can still change the policy that locks it out of a prefix.
    s3.delete_bucket_policy(Bucket=bucket)
    assert s3.get_object(Bucket=bucket, Key="secret/b.txt")["Body"].read() == b"secret/b.txt"


# ---- Block Public Access ------------------------------------------------------------------------------------


def test_the_servers_block_public_access_refuses_every_public_acl_and_policy(server, s3):
    """The default server (`block_public_access = true`)."""
    bucket = unique("blocked")
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="o", Body=b"private")
    refusals = [
        refusal(s3.put_bucket_acl, Bucket=bucket, ACL="public-read"),
        refusal(s3.put_bucket_acl, Bucket=bucket, ACL="authenticated-read"),
        refusal(s3.put_bucket_acl, Bucket=bucket, GrantRead=f'uri="{ALL_USERS_URI}"'),
        refusal(s3.put_object_acl, Bucket=bucket, Key="o", ACL="public-read-write"),
        refusal(s3.put_object, Bucket=bucket, Key="p", Body=b"x", ACL="public-read"),
        refusal(s3.put_bucket_policy, Bucket=bucket, Policy=policy(
            bucket, stmt("Allow", "*", "s3:GetObject", f"arn:aws:s3:::{bucket}/*"))),
        refusal(s3.create_bucket, Bucket=unique("born-public"), ACL="public-read"),
    ]
    for status, code, message in refusals:
        assert (status, code) == (403, "AccessDenied") and "block_public_access" in message, message
    assert refusal(s3.get_bucket_policy, Bucket=bucket)[0] == 404
    assert [g[2] for g in grants(s3.get_bucket_acl(Bucket=bucket))] == ["FULL_CONTROL"]
    # What applies is shown as the bucket's configuration.
    assert s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": True, "RestrictPublicBuckets": True}
    # A bucket's own configuration cannot lift the server's setting.
    s3.delete_public_access_block(Bucket=bucket)
    s3.put_public_access_block(Bucket=bucket, PublicAccessBlockConfiguration={
        "BlockPublicAcls": False, "IgnorePublicAcls": False, "BlockPublicPolicy": False,
        "RestrictPublicBuckets": False})
    status, code, message = refusal(s3.put_bucket_acl, Bucket=bucket, ACL="public-read")
    assert (status, code) == (403, "AccessDenied") and "block_public_access" in message, message
    # Sharing with a key is not public: allowed.
    key = create_key(server.endpoint, unique("named"))
    s3.put_bucket_policy(Bucket=bucket, Policy=policy(
        bucket, stmt("Allow", {"AWS": [key["name"]]}, "s3:GetObject", f"arn:aws:s3:::{bucket}/*")))
    assert s3.get_bucket_policy_status(Bucket=bucket)["PolicyStatus"]["IsPublic"] is False
    assert key_client(server.endpoint, key).get_object(Bucket=bucket, Key="o")["Body"].read() == b"private"
    assert_denied(refusal(anonymous_client(server.endpoint).get_object, Bucket=bucket, Key="o"), "anonymous",
                  "GetObject", bucket)


def test_an_upload_refused_for_its_public_acl_writes_nothing(server, s3):
    bucket = unique("blocked-write")
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="o", Body=b"private")
    for answer in (refusal(s3.put_object, Bucket=bucket, Key="p", Body=b"x", ACL="public-read"),
                   refusal(s3.put_object, Bucket=bucket, Key="o", Body=b"replaced", ACL="public-read"),
                   refusal(s3.copy_object, Bucket=bucket, Key="c", CopySource={"Bucket": bucket, "Key": "o"},
                           ACL="public-read")):
        assert answer[:2] == (403, "AccessDenied") and "block_public_access" in answer[2], answer
    # A refused request changed nothing: no object written, none replaced.
    assert refusal(s3.head_object, Bucket=bucket, Key="p")[0] == 404
    assert refusal(s3.head_object, Bucket=bucket, Key="c")[0] == 404
    assert s3.get_object(Bucket=bucket, Key="o")["Body"].read() == b"private"


def test_a_buckets_public_access_block_refuses_and_ignores_public_acls_and_policies(pub, root, anon):
    bucket, owner, s3 = owned_bucket(pub, "bpa")
    s3.put_object(Bucket=bucket, Key="o", Body=b"object")
    status, code, _ = refusal(s3.get_public_access_block, Bucket=bucket)
    assert (status, code) == (404, "NoSuchPublicAccessBlockConfiguration")

    block = {"BlockPublicAcls": True, "IgnorePublicAcls": False, "BlockPublicPolicy": True,
             "RestrictPublicBuckets": False}
    s3.put_public_access_block(Bucket=bucket, PublicAccessBlockConfiguration=block)
    assert s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"] == block
    status, code, message = refusal(s3.put_bucket_acl, Bucket=bucket, ACL="public-read")
    assert (status, code) == (403, "AccessDenied") and "BlockPublicAcls" in message and bucket in message, message
    public = policy(bucket, stmt("Allow", "*", ["s3:GetObject", "s3:ListBucket"],
                                 [f"arn:aws:s3:::{bucket}/*", f"arn:aws:s3:::{bucket}"]))
    status, code, message = refusal(s3.put_bucket_policy, Bucket=bucket, Policy=public)
    assert (status, code) == (403, "AccessDenied") and "BlockPublicPolicy" in message, message

    s3.delete_public_access_block(Bucket=bucket)
    assert refusal(s3.get_public_access_block, Bucket=bucket)[:2] == (404, "NoSuchPublicAccessBlockConfiguration")
    s3.put_bucket_acl(Bucket=bucket, ACL="public-read")
    s3.put_bucket_policy(Bucket=bucket, Policy=public)
    assert anon.get_object(Bucket=bucket, Key="o")["Body"].read() == b"object"
    assert anon.list_objects_v2(Bucket=bucket)["KeyCount"] == 1

    # Ignoring public ACLs and restricting public policies takes back what they gave, without removing them.
    s3.put_public_access_block(Bucket=bucket, PublicAccessBlockConfiguration={
        "BlockPublicAcls": False, "IgnorePublicAcls": True, "BlockPublicPolicy": False,
        "RestrictPublicBuckets": True})
    assert_denied(refusal(anon.get_object, Bucket=bucket, Key="o"), "anonymous", "GetObject", bucket)
    assert_denied(refusal(anon.list_objects_v2, Bucket=bucket), "anonymous", "ListObjectsV2", bucket)
    assert json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"]) == json.loads(public)
    assert ("Group", ALL_USERS_URI, "READ") in grants(s3.get_bucket_acl(Bucket=bucket))
    s3.delete_public_access_block(Bucket=bucket)
    assert anon.get_object(Bucket=bucket, Key="o")["Body"].read() == b"object"


def test_anonymous_requests_get_in_only_where_a_public_policy_lets_them(pub, root, anon):
    bucket, owner, s3 = owned_bucket(pub, "drop")
    s3.put_bucket_policy(Bucket=bucket, Policy=policy(
        bucket, stmt("Allow", "*", "s3:PutObject", f"arn:aws:s3:::{bucket}/dropbox/*", sid="dropbox")))
    anon.put_object(Bucket=bucket, Key="dropbox/report.txt", Body=b"anonymous report")
    assert s3.get_object(Bucket=bucket, Key="dropbox/report.txt")["Body"].read() == b"anonymous report"
    assert_denied(refusal(anon.get_object, Bucket=bucket, Key="dropbox/report.txt"), "anonymous", "GetObject",
                  bucket)
    assert_denied(refusal(anon.put_object, Bucket=bucket, Key="elsewhere.txt", Body=b"x"), "anonymous",
                  "PutObject", bucket)
    assert_denied(refusal(anon.delete_object, Bucket=bucket, Key="dropbox/report.txt"), "anonymous",
                  "DeleteObject", bucket)
    assert_denied(refusal(anon.list_buckets), "anonymous", "ListBuckets", "")


def test_public_read_write_lets_anyone_write_and_authenticated_read_lets_every_key_read(pub, root, anon):
    bucket, owner, s3 = owned_bucket(pub, "rw")
    s3.put_bucket_acl(Bucket=bucket, ACL="public-read-write")
    assert grants(s3.get_bucket_acl(Bucket=bucket))[1:] == [("Group", ALL_USERS_URI, "READ"),
                                                           ("Group", ALL_USERS_URI, "WRITE")]
    anon.put_object(Bucket=bucket, Key="from-anyone.txt", Body=b"anyone")
    assert s3.get_object(Bucket=bucket, Key="from-anyone.txt")["Body"].read() == b"anyone"
    assert [o["Key"] for o in anon.list_objects_v2(Bucket=bucket)["Contents"]] == ["from-anyone.txt"]
    anon.delete_object(Bucket=bucket, Key="from-anyone.txt")
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)
    # WRITE on the bucket is not its configuration.
    assert_denied(refusal(anon.put_bucket_acl, Bucket=bucket, ACL="private"), "anonymous", "PutBucketAcl", bucket)
    assert_denied(refusal(anon.delete_bucket, Bucket=bucket), "anonymous", "DeleteBucket", bucket)

    s3.put_bucket_acl(Bucket=bucket, ACL="private")
    s3.put_object(Bucket=bucket, Key="members.txt", Body=b"members only", ACL="authenticated-read")
    assert grants(s3.get_object_acl(Bucket=bucket, Key="members.txt"))[1:] == [
        ("Group", AUTHENTICATED_USERS_URI, "READ")]
    member = key_client(pub.endpoint, create_key(pub.endpoint, unique("member")))
    assert member.get_object(Bucket=bucket, Key="members.txt")["Body"].read() == b"members only"
    assert_denied(refusal(anon.get_object, Bucket=bucket, Key="members.txt"), "anonymous", "GetObject", bucket)
    assert_denied(refusal(anon.put_object, Bucket=bucket, Key="late.txt", Body=b"x"), "anonymous", "PutObject",
                  bucket)


def test_a_deny_on_a_prefix_holds_for_a_multi_object_delete_too(pub, root):
    bucket, owner, s3 = owned_bucket(pub, "denymulti")
    for k in ("secret/a", "open/b"):
        s3.put_object(Bucket=bucket, Key=k, Body=b"x")
    cleaner = create_key(pub.endpoint, unique("cleaner"))
    allow(pub.endpoint, cleaner["name"], bucket, "read", "delete")
    s3.put_bucket_policy(Bucket=bucket, Policy=policy(bucket, stmt(
        "Deny", {"AWS": [cleaner["name"]]}, "s3:DeleteObject", f"arn:aws:s3:::{bucket}/secret/*", sid="keep")))
    c = key_client(pub.endpoint, cleaner)
    assert_denied(refusal(c.delete_object, Bucket=bucket, Key="secret/a"), cleaner["name"], "DeleteObject", bucket)
    # DeleteObjects is s3:DeleteObject on each key (AWS): the denied key is refused (or the whole request is).
    try:
        answer = c.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "secret/a"}, {"Key": "open/b"}]})
    except ClientError as e:
        assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 403, e.response
    else:
        errors = {e["Key"]: e["Code"] for e in answer.get("Errors", [])}
        deleted = [d["Key"] for d in answer.get("Deleted", [])]
        assert errors == {"secret/a": "AccessDenied"} and deleted == ["open/b"], answer
    assert s3.get_object(Bucket=bucket, Key="secret/a")["Body"].read() == b"x"


def test_a_deny_of_the_version_actions_protects_old_versions(pub, root):
    """AWS checks s3:GetObjectVersion for a GET and s3:DeleteObjectVersion for a DELETE of a given version."""
    bucket, owner, s3 = owned_bucket(pub, "denyversions")
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    old = s3.put_object(Bucket=bucket, Key="k", Body=b"old")["VersionId"]
    s3.put_object(Bucket=bucket, Key="k", Body=b"new")
    worker = create_key(pub.endpoint, unique("versions"))
    allow(pub.endpoint, worker["name"], bucket, "read", "write", "delete")
    s3.put_bucket_policy(Bucket=bucket, Policy=policy(bucket, stmt(
        "Deny", "*", ["s3:DeleteObjectVersion", "s3:GetObjectVersion"], f"arn:aws:s3:::{bucket}/*",
        sid="versions-stay")))
    w = key_client(pub.endpoint, worker)
    assert w.get_object(Bucket=bucket, Key="k")["Body"].read() == b"new"
    assert_denied(refusal(w.get_object, Bucket=bucket, Key="k", VersionId=old), worker["name"], "GetObject", bucket)
    assert_denied(refusal(w.delete_object, Bucket=bucket, Key="k", VersionId=old), worker["name"], "DeleteObject",
                  bucket)
    assert old in [v["VersionId"] for v in root.list_object_versions(Bucket=bucket)["Versions"]]
    # A plain DELETE (a delete marker) is s3:DeleteObject: not denied.
    w.delete_object(Bucket=bucket, Key="k")


def test_an_object_shared_by_its_acl_can_be_the_source_of_a_copy(pub, root):
    bucket, owner, s3 = owned_bucket(pub, "aclcopy")
    s3.put_object(Bucket=bucket, Key="shared.bin", Body=b"shared by ACL")
    target = unique("aclcopy-target")
    root.create_bucket(Bucket=target)
    friend = create_key(pub.endpoint, unique("copier"))
    allow(pub.endpoint, friend["name"], target, "write")
    s3.put_object_acl(Bucket=bucket, Key="shared.bin", GrantRead=f"id={friend['name']}")
    f = key_client(pub.endpoint, friend)
    assert f.get_object(Bucket=bucket, Key="shared.bin")["Body"].read() == b"shared by ACL"
    # CopyObject needs s3:GetObject on the source, which the object's ACL grants.
    f.copy_object(Bucket=target, Key="copy.bin", CopySource={"Bucket": bucket, "Key": "shared.bin"})
    assert root.get_object(Bucket=target, Key="copy.bin")["Body"].read() == b"shared by ACL"


def test_a_policy_allow_on_a_prefix_holds_for_a_multi_object_delete(pub, root):
    """restic, rclone and `aws s3 rm --recursive` delete with DeleteObjects: an Allow of s3:DeleteObject on a prefix
    lets them delete there (AWS checks each key), and only there."""
    bucket, owner, s3 = owned_bucket(pub, "allowmulti")
    for k in ("locks/1", "locks/2", "data/3"):
        s3.put_object(Bucket=bucket, Key=k, Body=b"x")
    robot = create_key(pub.endpoint, unique("lockrobot"))
    allow(pub.endpoint, robot["name"], bucket, "read", "write")
    s3.put_bucket_policy(Bucket=bucket, Policy=policy(bucket, stmt(
        "Allow", {"AWS": [robot["name"]]}, "s3:DeleteObject", f"arn:aws:s3:::{bucket}/locks/*", sid="locks")))
    r = key_client(pub.endpoint, robot)
    r.delete_object(Bucket=bucket, Key="locks/1")
    answer = r.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "locks/2"}]})
    assert [d["Key"] for d in answer.get("Deleted", [])] == ["locks/2"] and not answer.get("Errors"), answer
    assert_denied(refusal(r.delete_object, Bucket=bucket, Key="data/3"), robot["name"], "DeleteObject", bucket)
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["data/3"]


def test_acl_grants_of_read_acp_write_acp_and_full_control_do_what_aws_says(pub, root, anon):
    bucket, owner, s3 = owned_bucket(pub, "acp")
    s3.put_object(Bucket=bucket, Key="o", Body=b"object")
    friend = create_key(pub.endpoint, unique("acp-friend"))
    f = key_client(pub.endpoint, friend)
    grantee = f"id={friend['name']}"
    s3.put_object_acl(Bucket=bucket, Key="o", GrantRead=grantee, GrantReadACP=grantee)
    assert f.head_object(Bucket=bucket, Key="o")["ContentLength"] == 6
    assert [g[2] for g in grants(f.get_object_acl(Bucket=bucket, Key="o"))] == ["FULL_CONTROL", "READ", "READ_ACP"]
    assert_denied(refusal(f.put_object_acl, Bucket=bucket, Key="o", ACL="private"), friend["name"], "PutObjectAcl",
                  bucket)
    s3.put_object_acl(Bucket=bucket, Key="o", GrantWriteACP=grantee)
    assert_denied(refusal(f.get_object, Bucket=bucket, Key="o"), friend["name"], "GetObject", bucket)
    f.put_object_acl(Bucket=bucket, Key="o", GrantRead=grantee, GrantWriteACP=grantee)
    assert f.get_object(Bucket=bucket, Key="o")["Body"].read() == b"object"

    # FULL_CONTROL of a bucket is its objects and its ACL, not its policy or its existence.
    s3.put_bucket_acl(Bucket=bucket, GrantFullControl=grantee)
    assert f.list_objects_v2(Bucket=bucket)["KeyCount"] == 1
    f.put_object(Bucket=bucket, Key="by-friend", Body=b"f")
    assert ("CanonicalUser", friend["name"], "FULL_CONTROL") in grants(f.get_bucket_acl(Bucket=bucket))
    assert_denied(refusal(f.put_bucket_policy, Bucket=bucket, Policy=policy(
        bucket, stmt("Allow", "*", "s3:GetObject", f"arn:aws:s3:::{bucket}/*"))), friend["name"], "PutBucketPolicy",
        bucket)
    assert_denied(refusal(f.delete_bucket, Bucket=bucket), friend["name"], "DeleteBucket", bucket)
