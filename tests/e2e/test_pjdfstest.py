"""POSIX conformance of the mount: pjdfstest (the Rust rewrite from crates.io, installed by
scripts/setup-deps.sh) for open (O_CREAT), mkdir, rmdir, unlink and rename. The cases that cannot apply to an
archive of immutable objects are expected failures, each with its reason, in tests/e2e/pjdfstest.toml."""

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import TEST_CONFIG
from test_mount import Mounted

CONFIG = Path(__file__).with_name("pjdfstest.toml")
GROUPS = ["open", "mkdir", "rmdir", "unlink", "rename"]
# open::interact_2gb writes at an offset of 2 GiB: the cache must be allowed to hold that much (a limit, not a
# size: the file is sparse). Conformance, not durability, is tested here: no fsync.
PJDFSTEST_CONFIG = TEST_CONFIG.replace("cache_bytes_max = 2147483648", "cache_bytes_max = 8589934592").replace(
    "[store]\n", "[store]\nfsync = false\n")


def pjdfstest_binary() -> str:
    found = shutil.which("pjdfstest") or next(
        (str(p) for p in [Path.home() / ".cargo" / "bin" / "pjdfstest"] if p.exists()), None)
    if found is None:
        if os.environ.get("PERMAFROST_E2E_ALLOW_MISSING_TOOLS") == "1":
            pytest.skip("pjdfstest is not installed (PERMAFROST_E2E_ALLOW_MISSING_TOOLS=1)")
        pytest.fail("pjdfstest is not installed: run scripts/setup-deps.sh as root", pytrace=False)
    return found


def test_pjdfstest_open_mkdir_rmdir_unlink_rename_pass_but_for_the_recorded_exceptions(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("pjdfstest switches users: it needs root")
    binary = pjdfstest_binary()
    assert "socket" in CONFIG.read_text()
    # Tests switch to other users, who must reach the mount: not under pytest's private (0700) directory.
    mnt = Path(tempfile.mkdtemp(prefix="permafrost-pjdfstest-"))
    mnt.chmod(0o755)
    with Mounted(tmp_path, config=PJDFSTEST_CONFIG, mnt=mnt) as m:
        run_dir = m.mnt / "pjdfstest" / "run"
        run_dir.mkdir(parents=True)
        result = subprocess.run([binary, "-c", str(CONFIG), "-p", str(run_dir), *GROUPS], cwd=run_dir,
                                capture_output=True, text=True, env={**os.environ, "RUST_BACKTRACE": "0"},
                                timeout=600)
    mnt.rmdir()
    out = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout + result.stderr)
    failures = [line.split()[0] for line in out.splitlines() if "FAILED" in line or "PASSED UNEXPECTEDLY" in line]
    summary = re.search(r"Summary: (\d+) failed, (\d+) skipped, (\d+) passed, (\d+) expected failures", out)
    assert summary, out[-3000:]
    failed, skipped, passed, expected = (int(v) for v in summary.groups())
    assert result.returncode == 0 and failed == 0, f"unexpected results: {failures}\n{out[-3000:]}"
    assert passed >= 50 and expected <= 100, summary.group(0)
    print(summary.group(0))
