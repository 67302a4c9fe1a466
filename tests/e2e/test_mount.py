"""The POSIX mount (`permafrost serve --mount DIR`, docs/mount.md) driven by real tools: cp, diff, find, ls, du,
getfattr, rsync, tar, git, Python's open(), boto3 on the same archive, and SIGKILL of the server."""

import hashlib
import io
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from boto3.s3.transfer import TransferConfig

from admin import (EVICT_PATH, PERSIST_PATH, admin_json, data_disk_of, disks, evict, gc, power_state_name,
                   spin_ups, spun_up_since, status, wait_all_off, wait_persisted)
from conftest import TEST_CONFIG, Server, client, tool

# The 5,000-file tree is about the file system, not durability: this server skips fsync so that the copy
# takes seconds (each close of a file commits it through the put path; with fsync that is three fsyncs per
# file, measured in BENCHMARKS.md). Every other test here runs durable.
NO_FSYNC_CONFIG = TEST_CONFIG.replace("[store]\n", "[store]\nfsync = false\n")


def sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


class Mounted:
    """A server with the archive mounted on `mnt` next to its data directory."""

    def __init__(self, tmp_path: Path, config: str = TEST_CONFIG, spin_up_ms: int = 20, name: str = "m",
                 mnt: Path | None = None):
        self.mnt = mnt or tmp_path / f"{name}-mnt"
        self.server = Server(tmp_path / f"{name}-data", config=config, spin_up_ms=spin_up_ms,
                             extra_args=("--mount", str(self.mnt)))

    def __enter__(self):
        self.server.start()
        assert os.path.ismount(self.mnt), f"{self.mnt} is not mounted: {self.server.log_tail()}"
        return self

    def __exit__(self, *exc):
        if self.server.process is not None:
            code = self.server.stop()
            assert code == 0, f"graceful shutdown failed with {code}: {self.server.log_tail()}"
            assert not os.path.ismount(self.mnt), "the mount outlived the server"

    def restart(self):
        self.server.stop()
        self.server.start()
        assert os.path.ismount(self.mnt)

    @property
    def endpoint(self):
        return self.server.endpoint


def persist_all(endpoint: str, expect_contents: int | None = None):
    """Persist everything and wait for it. Contents a later close replaced (a file committed at an fsync and
    again at its close) are garbage: collected first, since nothing persists them."""
    admin_json(endpoint, "POST", PERSIST_PATH)
    gc(endpoint)
    wait_persisted(endpoint, expect_contents=expect_contents)


def run(*args, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{args}: exit {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    return result


def make_tree(root: Path, rng: random.Random, small_files: int) -> int:
    """Nested directories of small files (0 B to 8 KiB, some empty, some empty directories) and a few large
    ones (1 MiB to 200 MB). Returns the number of files."""
    count = 0
    for i in range(small_files):
        d = root / f"level-{i % 7}" / f"sub-{i % 13}" / f"leaf-{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        size = 0 if i % 97 == 0 else rng.randint(1, 8192)
        (d / f"file-{i:05d}.dat").write_bytes(rng.randbytes(size))
        count += 1
    (root / "empty-dir" / "nested-empty").mkdir(parents=True)
    big = root / "big"
    big.mkdir()
    for name, size in [("one-mib.bin", 1 << 20), ("seven-mib.bin", 7 << 20), ("text.log", 3 << 20),
                       ("two-hundred-mb.bin", 200_000_000)]:
        with open(big / name, "wb") as f:
            if name.endswith(".log"):
                line = b"2026-11-25 permafrost mount test line, compressible\n"
                f.write(line * (size // len(line)))
            else:
                left = size
                while left:
                    n = min(left, 8 << 20)
                    f.write(rng.randbytes(n))
                    left -= n
        count += 1
    return count


def test_a_copied_tree_reads_back_identical_while_cached_and_after_persist_and_eviction(tmp_path):
    rng = random.Random(11)
    source = tmp_path / "source"
    files = make_tree(source, rng, small_files=5000)
    assert files >= 5000
    with Mounted(tmp_path, config=NO_FSYNC_CONFIG) as m:
        (m.mnt / "trees").mkdir()
        started = time.time()
        run("cp", "-r", source, m.mnt / "trees" / "copy")
        copied_s = time.time() - started
        run("diff", "-r", source, m.mnt / "trees" / "copy")
        assert (m.mnt / "trees" / "copy" / "empty-dir" / "nested-empty").is_dir()
        # Persist everything, drop the cache, and restart so that no page cache of the kernel holds the bytes:
        # the second diff reads from the grid.
        persist_all(m.endpoint)
        evict(m.endpoint)
        assert status(m.endpoint)["detail"]["catalog"]["cached_bytes"] == 0
        m.restart()
        run("diff", "-r", source, m.mnt / "trees" / "copy")
        print(f"cp -r of {files} files: {copied_s:.1f} s")


@pytest.fixture
def persisted_tree(tmp_path):
    """A durable server with a small tree written through the mount, persisted and evicted, disks off."""
    rng = random.Random(5)
    with Mounted(tmp_path) as m:
        (m.mnt / "archive").mkdir()
        sums = {}
        for dataset in ("runs-a", "runs-b"):
            for i in range(40):
                path = m.mnt / "archive" / dataset / f"day-{i % 4}" / f"scan-{i:03d}.bin"
                path.parent.mkdir(parents=True, exist_ok=True)
                body = rng.randbytes(rng.randint(1, 300_000) if i % 10 else 3 << 20)
                path.write_bytes(body)
                sums[path] = hashlib.sha256(body).hexdigest()
        persist_all(m.endpoint, expect_contents=len(sums))
        evict(m.endpoint)
        m.restart()  # no page cache of the kernel either
        yield m, sums


def test_find_ls_du_and_getfattr_wake_no_disk_and_one_read_wakes_one(persisted_tree):
    m, sums = persisted_tree
    before = wait_all_off(m.endpoint)
    listing = run("find", m.mnt / "archive", "-ls").stdout
    assert listing.count("scan-") == len(sums)
    run("ls", "-lR", m.mnt / "archive")
    du = int(run("du", "-s", "--block-size=1", m.mnt / "archive").stdout.split()[0])
    assert du > 0
    one = sorted(sums)[3]
    attrs = run("getfattr", "-d", one).stdout
    for name in ("user.permafrost.state=\"persisted\"", "user.permafrost.blake3=", "user.permafrost.disk=\"grid-bucket",
                 "user.permafrost.encoding=", "user.permafrost.persisted_at=\"20"):
        assert name in attrs, attrs
    assert " off" in run("getfattr", "-n", "user.permafrost.disk", "--only-values", one).stdout
    missing = subprocess.run(["getfattr", "-n", "user.nothing", one], capture_output=True, text=True)
    assert missing.returncode != 0 and "No such attribute" in missing.stderr, missing
    after = status(m.endpoint)
    assert spun_up_since(before, after) == {}, "metadata through the mount woke a disk"

    assert sha(one) == sums[one]
    woke = spun_up_since(after, status(m.endpoint))
    assert len(woke) == 1 and list(woke.values()) == [1], f"reading one file spun up {woke}"
    grid_bucket = int(run("getfattr", "-n", "user.permafrost.disk", "--only-values", one).stdout.split()[1])
    assert list(woke) == [data_disk_of(after, grid_bucket)["index"]]
    # The spin-up is the read of that file (the operator's view names it).
    last = admin_json(m.endpoint, "GET", "/_permafrost/api/v1/wakes")["wakes"][-1]
    assert (last["kind"], last["subject"]) == ("read", str(Path(one).relative_to(m.mnt))), last


def test_rsync_tar_and_git_clone_work_through_the_mount(tmp_path):
    rng = random.Random(7)
    source = tmp_path / "source"
    for i in range(60):
        p = source / f"d{i % 5}" / f"f{i}.txt"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rng.randbytes(rng.randint(0, 40_000)))
    os.chmod(source / "d1" / "f1.txt", 0o600)
    repo = tmp_path / "repo"
    git = tool("git")
    run(git, "init", "-q", repo)
    for i in range(3):
        (repo / "notes.txt").write_text("".join(f"line {j}\n" for j in range(i + 1)))
        (repo / "src").mkdir(exist_ok=True)
        (repo / "src" / f"m{i}.py").write_text(f"print({i})\n")
        run(git, "-C", repo, "add", "-A")
        run(git, "-C", repo, "-c", "user.email=t@e", "-c", "user.name=t", "commit", "-qm", f"commit {i}")
    with Mounted(tmp_path) as m:
        bucket = m.mnt / "tools"
        bucket.mkdir()
        # rsync writes each file to a temporary name and renames it into place.
        run(tool("rsync"), "-a", f"{source}/", f"{bucket}/synced/")
        run(tool("rsync"), "-a", f"{bucket}/synced/", f"{tmp_path}/back/")
        run("diff", "-r", source, tmp_path / "back")
        assert (os.stat(tmp_path / "back" / "d1" / "f1.txt").st_mode & 0o777) == 0o600
        assert os.stat(bucket / "synced" / "d2" / "f2.txt").st_mtime == os.stat(source / "d2" / "f2.txt").st_mtime
        # A second rsync finds nothing to do (sizes and times match).
        again = run(tool("rsync"), "-a", "--itemize-changes", f"{source}/", f"{bucket}/synced/").stdout
        assert again.strip() == "", again
        # tar of a mounted directory.
        (tmp_path / "untar").mkdir()
        tar = subprocess.Popen(["tar", "c", "-C", str(bucket), "synced"], stdout=subprocess.PIPE)
        run("tar", "x", "-C", tmp_path / "untar", stdin=tar.stdout)
        assert tar.wait() == 0
        run("diff", "-r", source, tmp_path / "untar" / "synced")
        # git clone into the mount, and git working in the clone.
        run(git, "clone", "-q", repo, bucket / "clone")
        log = run(git, "-C", bucket / "clone", "log", "--oneline").stdout
        assert len(log.splitlines()) == 3, log
        assert run(git, "-C", bucket / "clone", "status", "--porcelain").stdout == ""
        run(git, "-C", bucket / "clone", "fsck")
        run("diff", "-r", "--exclude=.git", repo, bucket / "clone")


def test_files_cross_between_the_mount_and_s3(tmp_path):
    with Mounted(tmp_path) as m:
        s3 = client(m.endpoint)
        (m.mnt / "shared").mkdir()
        body = random.Random(3).randbytes(2 << 20)
        (m.mnt / "shared" / "from-mount").mkdir()
        (m.mnt / "shared" / "from-mount" / "a.bin").write_bytes(body)
        got = s3.get_object(Bucket="shared", Key="from-mount/a.bin")
        assert got["Body"].read() == body
        assert got["Metadata"]["mode"] == str(0o100644)
        s3.put_object(Bucket="shared", Key="from-s3/deep/b.txt", Body=b"uploaded through S3\n")
        assert (m.mnt / "shared" / "from-s3" / "deep" / "b.txt").read_bytes() == b"uploaded through S3\n"
        assert sorted(os.listdir(m.mnt / "shared")) == ["from-mount", "from-s3"]
        # A multipart upload is a list of parts: it reads back whole through the mount.
        parts_body = random.Random(4).randbytes(13 << 20)
        s3.upload_fileobj(io.BytesIO(parts_body), "shared", "from-s3/parts.bin",
                          Config=TransferConfig(multipart_threshold=5 << 20, multipart_chunksize=5 << 20))
        assert sha(m.mnt / "shared" / "from-s3" / "parts.bin") == hashlib.sha256(parts_body).hexdigest()
        assert os.stat(m.mnt / "shared" / "from-s3" / "parts.bin").st_blocks * 512 >= 13 << 20
        s3.delete_object(Bucket="shared", Key="from-s3/parts.bin")
        s3.delete_object(Bucket="shared", Key="from-s3/deep/b.txt")
        assert "from-s3" not in os.listdir(m.mnt / "shared")
        s3.create_bucket(Bucket="made-by-s3")
        assert "made-by-s3" in os.listdir(m.mnt)
        # Object Lock holds through the mount: a file under legal hold cannot be renamed (EPERM, not EIO).
        s3.create_bucket(Bucket="held", ObjectLockEnabledForBucket=True)
        s3.put_object(Bucket="held", Key="scan.bin", Body=b"kept", ObjectLockLegalHoldStatus="ON")
        with pytest.raises(PermissionError):
            os.rename(m.mnt / "held" / "scan.bin", m.mnt / "held" / "moved.bin")
        assert (m.mnt / "held" / "scan.bin").read_bytes() == b"kept"


def test_closed_files_are_immutable_and_deleting_frees_space_after_gc(tmp_path):
    with Mounted(tmp_path) as m:
        d = m.mnt / "closed"
        d.mkdir()
        (d / "f.txt").write_bytes(b"final\n")
        for mode in ("ab", "r+b", "wb"):
            with pytest.raises(PermissionError):
                open(d / "f.txt", mode)
        with pytest.raises(PermissionError):
            os.truncate(d / "f.txt", 1)
        assert (d / "f.txt").read_bytes() == b"final\n"
        os.chmod(d / "f.txt", 0o640)
        os.utime(d / "f.txt", (1_600_000_000, 1_600_000_000))
        st = os.stat(d / "f.txt")
        assert (st.st_mode & 0o777, st.st_mtime) == (0o640, 1_600_000_000)
        # A file being written takes writes from every handle until its last close.
        with open(d / "g.txt", "wb") as g:
            g.write(b"one ")
            g.flush()
            os.fsync(g.fileno())
            with open(d / "g.txt", "ab") as g2:
                g2.write(b"two")
        assert (d / "g.txt").read_bytes() == b"one two"

        rng = random.Random(9)
        unique = rng.randbytes(6 << 20)
        shared_body = rng.randbytes(5 << 20)
        (d / "unique.bin").write_bytes(unique)
        (d / "copy-1.bin").write_bytes(shared_body)
        (d / "copy-2.bin").write_bytes(shared_body)
        persist_all(m.endpoint)

        def used() -> int:
            return sum(g["bytes"] for g in status(m.endpoint)["used_bytes_per_grid_bucket"])

        start = used()
        os.unlink(d / "unique.bin")
        gc(m.endpoint)
        assert start - used() >= 6 << 20, "deleting a file did not free its extent"
        os.unlink(d / "copy-1.bin")
        gc(m.endpoint)
        assert start - used() < 11 << 20, "content still referenced by copy-2.bin was freed"
        assert (d / "copy-2.bin").read_bytes() == shared_body
        os.unlink(d / "copy-2.bin")
        gc(m.endpoint)
        assert start - used() >= 11 << 20
        assert sorted(os.listdir(d)) == ["f.txt", "g.txt"]


def test_reads_complete_with_the_kernels_read_ahead_raised(tmp_path):
    """With the mount's read-ahead raised (root), the kernel sends many read requests at once, out of order and
    far ahead: each must be answered (a read waiting on a stream another request restarted used to wait forever)."""
    if os.geteuid() != 0:
        pytest.skip("raising a mount's read-ahead (/sys/class/bdi) needs root")
    body = random.Random(12).randbytes(96 << 20)
    with Mounted(tmp_path) as m:
        (m.mnt / "readahead").mkdir()
        (m.mnt / "readahead" / "big.bin").write_bytes(body)
        dev = os.stat(m.mnt).st_dev
        Path(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb").write_text("16384\n")
        for _ in range(3):
            subprocess.run(["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"], check=True)
            dd = subprocess.run(["dd", f"if={m.mnt / 'readahead' / 'big.bin'}", "bs=1M", "status=none"],
                                capture_output=True, timeout=60)
            assert dd.returncode == 0, dd.stderr
            assert hashlib.sha256(dd.stdout).digest() == hashlib.sha256(body).digest()


def mount_read_ahead_kb(mnt: Path) -> int:
    dev = os.stat(mnt).st_dev
    return int(Path(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb").read_text())


def test_the_server_sets_its_mounts_read_ahead_and_large_sequential_reads_are_exact(tmp_path):
    """`[mount] read_ahead_kb` (default 1024) reaches the kernel's read-ahead of the mount when the server runs as
    root, with one log line saying so; 0 leaves the kernel's. Sequential 1 MiB reads of a 96 MiB file are
    byte-exact from the cache (page cache, requests up to 1 MiB, several in flight) and from the grid."""
    if os.geteuid() != 0:
        pytest.skip("the server sets a mount's read-ahead (/sys/class/bdi) only as root")
    body = random.Random(13).randbytes(96 << 20)
    digest = hashlib.sha256(body).digest()

    def dd_digest(path: Path) -> bytes:
        subprocess.run(["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"], check=True)
        dd = subprocess.run(["dd", f"if={path}", "bs=1M", "status=none"], capture_output=True, timeout=120)
        assert dd.returncode == 0, dd.stderr
        return hashlib.sha256(dd.stdout).digest()

    with Mounted(tmp_path) as m:  # no [mount] table: what a user gets
        assert mount_read_ahead_kb(m.mnt) == 1024
        assert "set the kernel's read-ahead of the mount to 1024 KiB" in m.server.log_tail(20000)
        s3 = client(m.endpoint)
        s3.create_bucket(Bucket="readahead")
        s3.put_object(Bucket="readahead", Key="seq/big.bin", Body=body)
        path = m.mnt / "readahead" / "seq" / "big.bin"
        assert dd_digest(path) == digest, "read from the cache differs"
        assert mount_read_ahead_kb(m.mnt) == 1024, "reads changed the read-ahead"
        wait_persisted(m.endpoint, expect_contents=1)
        assert evict(m.endpoint) >= len(body)
        assert dd_digest(path) == digest, "read from the grid differs"

    config = TEST_CONFIG + "\n[mount]\nread_ahead_kb = 0\n"
    with Mounted(tmp_path, config=config, name="left") as m:
        assert mount_read_ahead_kb(m.mnt) == 128, "read_ahead_kb = 0 must leave the kernel's value"
        assert "left as it is" in m.server.log_tail(20000)


def sigint_as_in_a_terminal():
    """In the reader's process: SIGINT unblocked and at its default, as for a command started from a shell. A
    child inherits its parent's ignored and blocked signals, and a test run started from a background job ignores
    SIGINT (`/proc/self/status` SigIgn): `cat` then read on until the disk was up."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_read_waiting_for_a_spin_up_blocks_nothing_else_and_can_be_interrupted(tmp_path):
    with Mounted(tmp_path, spin_up_ms=4000) as m:
        (m.mnt / "slow").mkdir()
        (m.mnt / "slow" / "sleepy").mkdir()
        (m.mnt / "slow" / "other").mkdir()
        body = random.Random(1).randbytes(8 << 20)
        (m.mnt / "slow" / "sleepy" / "big.bin").write_bytes(body)
        for i in range(20):
            (m.mnt / "slow" / "other" / f"f{i}").write_bytes(b"x" * i)
        persist_all(m.endpoint)
        evict(m.endpoint)
        m.restart()
        wait_all_off(m.endpoint, timeout_s=60)
        big = m.mnt / "slow" / "sleepy" / "big.bin"

        # O_NONBLOCK: EAGAIN at once, and the disk starts spinning up.
        started = time.time()
        fd = os.open(big, os.O_RDONLY | os.O_NONBLOCK)
        try:
            with pytest.raises(BlockingIOError):
                os.read(fd, 4096)
        finally:
            os.close(fd)
        assert time.time() - started < 1.0
        spinning = [d for d in disks(status(m.endpoint)) if power_state_name(d) == "spinningup"]
        assert len(spinning) == 1, [(d["index"], d["power_state"]) for d in disks(status(m.endpoint))]

        # Ctrl-C ends a read that waits for the disk: `cat` (SIGINT kills it) and Python (SIGINT raises
        # KeyboardInterrupt, which needs the FUSE interrupt to end the read).
        reader = ("import sys\ntry:\n    open(sys.argv[1], 'rb').read()\n    print('read')\n"
                  "except KeyboardInterrupt:\n    print('interrupted')\n")
        for argv in (["cat", str(big)], [sys.executable, "-c", reader, str(big)]):
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    preexec_fn=sigint_as_in_a_terminal)
            time.sleep(0.5)
            assert proc.poll() is None, f"{argv[0]} did not wait for the disk"
            # Meanwhile: listing another directory answers within 100 ms.
            t = time.time()
            names = os.listdir(m.mnt / "slow" / "other")
            for name in names:
                os.stat(m.mnt / "slow" / "other" / name)
            listed_ms = (time.time() - t) * 1000
            assert len(names) == 20 and listed_ms < 100, f"ls took {listed_ms:.0f} ms while a read waited"
            t = time.time()
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=10)
            waited = time.time() - t
            assert waited < 1.0, f"{argv[0]} took {waited:.1f} s to stop after SIGINT"
            if argv[0] == "cat":
                assert proc.returncode != 0, "cat read the whole file before SIGINT: the disk was up already"
            else:
                assert out.strip() == b"interrupted", (out[-200:], err[-2000:])
        # And the read itself completes once the disk is up.
        assert sha(big) == hashlib.sha256(body).hexdigest()


WRITER = r"""
import hashlib, os, random, sys
root = sys.argv[1]
rng = random.Random(int(sys.argv[2]))
i = 0
while True:
    i += 1
    body = rng.randbytes(rng.randint(1, 600_000))
    path = os.path.join(root, f"w-{i:05d}.bin")
    try:
        f = open(path, "wb")
        f.write(body[: len(body) // 2])
        if i % 3 == 0:
            f.flush()
            os.fsync(f.fileno())  # safe now, even if the close never comes
            print(path, len(body) // 2, hashlib.sha256(body[: len(body) // 2]).hexdigest(), flush=True)
        f.write(body[len(body) // 2:])
        f.close()
    except OSError:
        break
    print(path, len(body), hashlib.sha256(body).hexdigest(), flush=True)
"""


def test_files_closed_or_fsynced_before_sigkill_survive_and_the_stale_mount_is_cleaned(tmp_path):
    m = Mounted(tmp_path)
    with m:
        (m.mnt / "crash").mkdir()
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(m.mnt / "crash"), "4"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        time.sleep(3)
        m.server.kill()
        out, _ = writer.communicate(timeout=60)
        assert os.path.ismount(m.mnt), "the mount point should be left stale by the kill"
        with pytest.raises(OSError):
            os.listdir(m.mnt)
        acknowledged = {}
        for line in out.splitlines():
            path, size, digest = line.split()
            acknowledged[path] = (int(size), digest)  # the close's line overrides the fsync's
        assert len(acknowledged) >= 5, f"only {len(acknowledged)} files were written before the kill"
        m.server.start()
        assert "was left mounted by a server that stopped without unmounting" in m.server.log_tail(20000)
        assert os.path.ismount(m.mnt)
        for path, (size, digest) in acknowledged.items():
            assert os.path.getsize(path) >= size, path
            with open(path, "rb") as f:
                assert hashlib.sha256(f.read(size)).hexdigest() == digest, path
