"""Real clients archive users run, unmodified, against the real server: the AWS CLI (`s3 cp`/`mv` of 100 MB
between buckets, `s3api` for versioning, tagging, lifecycle, restore and Object Lock), the MinIO client `mc`
(`tag set`, `ls --versions`, `stat`) and restic (init, backup, check --read-data, forget --prune, restore). All are
installed by scripts/setup-deps.sh."""
import datetime
import filecmp
import hashlib
import json
import os
import subprocess

from conftest import ACCESS_KEY, SECRET_KEY, tool


def run(cmd, env, ok=True, timeout=600):
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if ok:
        assert result.returncode == 0, f"{cmd} failed:\n{result.stdout}\n{result.stderr}"
    return result


def sha(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for piece in iter(lambda: f.read(1 << 20), b""):
            h.update(piece)
    return h.hexdigest()


def test_aws_cli_copies_and_moves_100_mb_between_buckets(server, s3, tool_env, tmp_path):
    aws = [tool("aws"), "--endpoint-url", server.endpoint]
    a, b = f"cp-a-{os.getpid()}", f"cp-b-{os.getpid()}"
    for name in (a, b):
        s3.create_bucket(Bucket=name)
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        for _ in range(100):
            f.write(os.urandom(1 << 20))
    run(aws + ["s3", "cp", str(big), f"s3://{a}/scan.bin"], tool_env)
    # Over the CLI's 8 MB threshold a bucket-to-bucket copy is a multipart upload of UploadPartCopy parts.
    run(aws + ["s3", "cp", f"s3://{a}/scan.bin", f"s3://{b}/copy.bin"], tool_env)
    run(aws + ["s3", "mv", f"s3://{b}/copy.bin", f"s3://{a}/moved.bin"], tool_env)
    assert "Contents" not in s3.list_objects_v2(Bucket=b)
    back = tmp_path / "back.bin"
    run(aws + ["s3", "cp", f"s3://{a}/moved.bin", str(back)], tool_env)
    assert sha(back) == sha(big)
    assert s3.head_object(Bucket=a, Key="moved.bin")["ContentLength"] == 100 << 20


def test_aws_cli_s3api_versioning_tagging_lifecycle_restore_and_object_lock(server, tool_env, tmp_path):
    aws = [tool("aws"), "--endpoint-url", server.endpoint, "--output", "json"]

    def api(*args, ok=True):
        r = run(aws + ["s3api", *args], tool_env, ok=ok)
        return json.loads(r.stdout) if ok and r.stdout.strip() else r

    b = f"api-{os.getpid()}"
    api("create-bucket", "--bucket", b)
    api("put-bucket-versioning", "--bucket", b, "--versioning-configuration", "Status=Enabled")
    assert api("get-bucket-versioning", "--bucket", b)["Status"] == "Enabled"
    body = tmp_path / "v.txt"
    body.write_text("one")
    v1 = api("put-object", "--bucket", b, "--key", "k", "--body", str(body))["VersionId"]
    body.write_text("two")
    v2 = api("put-object", "--bucket", b, "--key", "k", "--body", str(body), "--tagging", "site=effelsberg")["VersionId"]
    versions = api("list-object-versions", "--bucket", b)["Versions"]
    assert [v["VersionId"] for v in versions] == [v2, v1]
    api("get-object", "--bucket", b, "--key", "k", "--version-id", v1, str(tmp_path / "old.txt"))
    assert (tmp_path / "old.txt").read_text() == "one"
    api("put-object-tagging", "--bucket", b, "--key", "k", "--tagging", "TagSet=[{Key=kind,Value=raw}]")
    assert api("get-object-tagging", "--bucket", b, "--key", "k")["TagSet"] == [{"Key": "kind", "Value": "raw"}]
    rules = {"Rules": [{"ID": "old", "Status": "Enabled", "Filter": {"Prefix": "tmp/"},
                        "Expiration": {"Days": 100}, "NoncurrentVersionExpiration": {"NoncurrentDays": 30}}]}
    api("put-bucket-lifecycle-configuration", "--bucket", b, "--lifecycle-configuration", json.dumps(rules))
    assert api("get-bucket-lifecycle-configuration", "--bucket", b)["Rules"][0]["ID"] == "old"
    api("restore-object", "--bucket", b, "--key", "k", "--restore-request", "Days=1")
    assert "ongoing-request" in api("head-object", "--bucket", b, "--key", "k")["Restore"]

    locked = f"api-lock-{os.getpid()}"
    api("create-bucket", "--bucket", locked, "--object-lock-enabled-for-bucket")
    assert api("get-object-lock-configuration", "--bucket", locked)["ObjectLockConfiguration"][
        "ObjectLockEnabled"] == "Enabled"
    until = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    vid = api("put-object", "--bucket", locked, "--key", "w", "--body", str(body),
              "--object-lock-mode", "COMPLIANCE", "--object-lock-retain-until-date", until)["VersionId"]
    assert api("get-object-retention", "--bucket", locked, "--key", "w")["Retention"]["Mode"] == "COMPLIANCE"
    r = api("delete-object", "--bucket", locked, "--key", "w", "--version-id", vid, "--bypass-governance-retention",
            ok=False)
    assert r.returncode != 0 and "AccessDenied" in r.stderr and "COMPLIANCE" in r.stderr, r.stderr


def mc_env(server, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MC_")}
    env["MC_CONFIG_DIR"] = str(tmp_path / "mc")
    env["MC_HOST_pf"] = server.endpoint.replace("http://", f"http://{ACCESS_KEY}:{SECRET_KEY}@")
    return env


def minio_client() -> str:
    mc = tool("mc")
    version = subprocess.run([mc, "--version"], capture_output=True, text=True, timeout=60).stdout
    assert "minio" in version.lower() or "RELEASE" in version, f"{mc} is not the MinIO client: {version[:200]}"
    return mc


def test_mc_tags_versions_and_stat(server, s3, tmp_path):
    mc = minio_client()
    env = mc_env(server, tmp_path)
    b = f"mc-{os.getpid()}"
    s3.create_bucket(Bucket=b)
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket=b, Key="scan.bin", Body=b"first")
    s3.put_object(Bucket=b, Key="scan.bin", Body=b"second")
    run([mc, "tag", "set", f"pf/{b}/scan.bin", "site=effelsberg&kind=raw"], env)
    tags = {t["Key"]: t["Value"] for t in s3.get_object_tagging(Bucket=b, Key="scan.bin")["TagSet"]}
    assert tags == {"site": "effelsberg", "kind": "raw"}
    listing = run([mc, "ls", "--versions", f"pf/{b}"], env).stdout
    assert listing.count("scan.bin") == 2, listing
    stat = run([mc, "stat", f"pf/{b}"], env).stdout
    assert "Anonymous: Enabled" not in stat, stat
    stat = run([mc, "stat", f"pf/{b}/scan.bin"], env).stdout
    assert "scan.bin" in stat


def test_restic_init_backup_check_forget_prune_restore(server, s3, tmp_path):
    restic = tool("restic")
    b = f"restic-{os.getpid()}"
    s3.create_bucket(Bucket=b)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "RESTIC_"))}
    env.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY, RESTIC_PASSWORD="pf-e2e-restic",
               RESTIC_REPOSITORY=f"s3:{server.endpoint}/{b}", RESTIC_CACHE_DIR=str(tmp_path / "cache"))
    data = tmp_path / "data"
    for i in range(30):
        (data / f"d{i % 3}").mkdir(parents=True, exist_ok=True)
        (data / f"d{i % 3}" / f"f{i}.bin").write_bytes(os.urandom(50_000 + i * 1000))
    run([restic, "init"], env)
    run([restic, "backup", str(data)], env)
    (data / "d0" / "new.bin").write_bytes(os.urandom(200_000))
    run([restic, "backup", str(data)], env)
    run([restic, "check", "--read-data"], env)
    run([restic, "forget", "--keep-last", "1", "--prune"], env)
    run([restic, "check"], env)
    target = tmp_path / "restored"
    run([restic, "restore", "latest", "--target", str(target)], env)
    restored = target / str(data).lstrip("/")
    compare = filecmp.dircmp(data, restored)
    assert not compare.diff_files and not compare.left_only and not compare.right_only
    for sub in ("d0", "d1", "d2"):
        for f in (data / sub).iterdir():
            assert (restored / sub / f.name).read_bytes() == f.read_bytes()
