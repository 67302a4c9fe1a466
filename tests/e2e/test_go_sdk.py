"""The AWS SDK for Go v2, unmodified, against the real server: a conditional write (PutObject with If-None-Match: *
twice: 200, then a 412 PreconditionFailed API error) and GetObjectAttributes (ETag, ObjectSize, ObjectParts of a
multipart object). The program is tests/e2e/go (go.mod and go.sum pin the SDK; scripts/setup-deps.sh downloads
its modules); it exits non-zero on any answer that differs from AWS's documentation."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ACCESS_KEY, SECRET_KEY

PROGRAM = Path(__file__).resolve().parent / "go"
BUILD_TIMEOUT_S = 600


def go_binary() -> str:
    found = shutil.which("go") or next((p for p in ("/usr/local/go/bin/go", "/usr/lib/go/bin/go")
                                        if os.access(p, os.X_OK)), None)
    if not found:
        # Not a skip: a missing toolchain must not turn this test green.
        pytest.fail("go is not installed: the Go SDK test needs the Go toolchain (the machine's /usr/local/go, "
                    "or Debian's golang-go); scripts/setup-deps.sh then downloads the SDK's modules", pytrace=False)
    return found


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    go = go_binary()
    out = tmp_path_factory.mktemp("gosdk") / "gosdk"
    env = dict(os.environ, GOTOOLCHAIN="local", GOFLAGS="-mod=readonly -buildvcs=false")
    built = subprocess.run([go, "build", "-o", str(out), "."], cwd=PROGRAM, env=env, capture_output=True,
                           text=True, timeout=BUILD_TIMEOUT_S)
    assert built.returncode == 0, f"go build of {PROGRAM} failed:\n{built.stdout}{built.stderr}"
    return out


def test_the_go_sdk_makes_a_conditional_write_and_reads_object_attributes(server, s3, bucket, program):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(PERMAFROST_ENDPOINT=server.endpoint, PERMAFROST_BUCKET=bucket, AWS_ACCESS_KEY_ID=ACCESS_KEY,
               AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull,
               AWS_EC2_METADATA_DISABLED="true")
    run = subprocess.run([str(program)], env=env, capture_output=True, text=True, timeout=300)
    output = run.stdout + run.stderr
    assert run.returncode == 0, f"the Go SDK program found mismatches:\n{output}"
    assert "PutObject IfNoneMatch=* (exists): 412 PreconditionFailed" in run.stdout, output
    # The object the refused write would have replaced is the first writer's.
    assert s3.get_object(Bucket=bucket, Key="go-sdk/lock")["Body"].read() == b"first writer wins"
