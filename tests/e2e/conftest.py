"""Fixtures of the end-to-end suite: the real `permafrost serve` binary, started on a free port in a temporary
data directory with millisecond disk power timings, and unmodified S3 clients pointed at it.

The binary: $PERMAFROST_BIN, else $CARGO_TARGET_DIR/debug/permafrost, else <repo>/target/debug/permafrost
(built with `cargo build -p permafrost --profile test` when missing).
"""

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import boto3
import pytest
import requests
from botocore.config import Config

REPO = Path(__file__).resolve().parents[2]
ACCESS_KEY = "PFE2ETESTKEY"
SECRET_KEY = "pf-e2e-secret-key-0123456789"
HEALTH_PATH = "/_permafrost/health"
START_TIMEOUT_S = 60

# A small grid and fast persistence: 48 sparse disks of 512 MiB, objects persisted 300 ms after upload.
TEST_CONFIG = """
[server]
listen = "127.0.0.1:9000"

[store]
cache_bytes_max = 2147483648
cache_wait_ms_max = 10000
gc_grace_ms = 1000
extent_bytes_max = 67108864
persist_batch_bytes_max = 268435456

[store.watchdog]
interval_ms = 100
max_age_ms = 300

[store.grid]
disk_capacity_bytes = 536870912
"""


def pytest_configure(config):
    config.addinivalue_line("markers", "soak: long variants, skipped unless --soak (CI skips them)")


def pytest_addoption(parser):
    parser.addoption("--soak", action="store_true", help="also run the long (soak) variants")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="soak variant: run with --soak")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


def binary() -> Path:
    if os.environ.get("PERMAFROST_BIN"):
        return Path(os.environ["PERMAFROST_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    path = target / "debug" / "permafrost"
    if not path.exists():
        subprocess.run(["cargo", "build", "-p", "permafrost", "--profile", "test"], cwd=REPO, check=True)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One `permafrost serve` process on a data directory; restartable on the same directory and port."""

    def __init__(self, data_dir: Path, config: str = TEST_CONFIG, env_credentials: bool = True,
                 spin_up_ms: int = 20, extra_args: tuple = ()):
        self.env_credentials = env_credentials
        self.spin_up_ms = spin_up_ms
        self.extra_args = tuple(extra_args)
        self.data_dir = data_dir
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process = None
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        data_dir.mkdir(parents=True, exist_ok=True)
        if not (data_dir / "permafrost.toml").exists():
            (data_dir / "permafrost.toml").write_text(config)

    def start(self):
        assert self.process is None
        env = {k: v for k, v in os.environ.items() if not k.startswith("PERMAFROST_ROOT_")}
        if self.env_credentials:
            env.update(PERMAFROST_ROOT_USER=ACCESS_KEY, PERMAFROST_ROOT_PASSWORD=SECRET_KEY)
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [str(binary()), "serve", "--data-dir", str(self.data_dir), "--listen", f"127.0.0.1:{self.port}",
             "--simulated-spin-up-ms", str(self.spin_up_ms), *self.extra_args],
            stdout=log, stderr=log, env=env)
        deadline = time.time() + START_TIMEOUT_S
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"permafrost serve exited with {self.process.returncode}; log: {self.log_tail()}")
            try:
                if requests.get(self.endpoint + HEALTH_PATH, timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"permafrost serve not healthy after {START_TIMEOUT_S} s; log: {self.log_tail()}")

    def stop(self, timeout_s: float = 60) -> int:
        """SIGTERM and wait: the graceful shutdown."""
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=timeout_s)
        self.process = None
        return code

    def kill(self):
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""


def client(endpoint: str, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY, retries: int = 3):
    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=access_key, aws_secret_access_key=secret_key,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": retries, "mode": "standard"},
                      connect_timeout=10, read_timeout=120))


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("shared") / "data")
    s.start()
    yield s
    code = s.stop()
    assert code == 0, f"graceful shutdown failed with {code}: {s.log_tail()}"


@pytest.fixture(scope="session")
def s3(server):
    return client(server.endpoint)


@pytest.fixture
def bucket(s3):
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def tool_env(server, tmp_path):
    """Environment for the AWS CLI and rclone: credentials of the server, no user configuration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "RCLONE_"))}
    env.update(
        AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE=str(tmp_path / "aws-config"), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "aws-credentials"),
        RCLONE_CONFIG=str(tmp_path / "rclone.conf"),
        RCLONE_CONFIG_PF_TYPE="s3", RCLONE_CONFIG_PF_PROVIDER="Other", RCLONE_CONFIG_PF_ENV_AUTH="false",
        RCLONE_CONFIG_PF_ACCESS_KEY_ID=ACCESS_KEY, RCLONE_CONFIG_PF_SECRET_ACCESS_KEY=SECRET_KEY,
        RCLONE_CONFIG_PF_ENDPOINT=server.endpoint, RCLONE_CONFIG_PF_REGION="us-east-1",
    )
    return env


def tool(name: str) -> str:
    """Path of a command-line client: the venv's first (the AWS CLI), then PATH."""
    import sys
    candidate = Path(sys.executable).parent / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if not found:
        # A missing client must not turn its tests green: scripts/setup-deps.sh installs it (as root).
        if os.environ.get("PERMAFROST_E2E_ALLOW_MISSING_TOOLS") == "1":
            pytest.skip(f"{name} is not installed (PERMAFROST_E2E_ALLOW_MISSING_TOOLS=1)")
        pytest.fail(f"{name} is not installed: run scripts/setup-deps.sh as root", pytrace=False)
    return found
