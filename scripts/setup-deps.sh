#!/usr/bin/env bash
# Installs what the tests need on a fresh machine, and nothing that is already there.
# Idempotent: safe to run before every test run. Rust itself comes from rustup (on the machine).
set -euo pipefail

# scripts/test runs `cargo clippy`: rustup's default profile has it; a minimal one does not.
cargo clippy --version >/dev/null 2>&1 || rustup component add clippy

need_apt=()
command -v losetup >/dev/null 2>&1 || need_apt+=(mount)
# permafrost-plot rasterises chart text with a system font (PNG output of --plot).
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need_apt+=(fonts-dejavu-core)
# The cluster test (tests/e2e/test_cluster_netns.py) builds network namespaces, veth pairs and tbf links.
{ command -v ip && command -v tc; } >/dev/null 2>&1 || need_apt+=(iproute2)
# The package test (tests/e2e/test_package.py): dpkg-deb inspects the .deb, systemd-analyze checks the unit (the
# tool works without systemd as PID 1), setpriv and unshare run the server as the service would.
command -v systemd-analyze >/dev/null 2>&1 || need_apt+=(systemd)
command -v dpkg-deb >/dev/null 2>&1 || need_apt+=(dpkg)
{ command -v setpriv && command -v unshare; } >/dev/null 2>&1 || need_apt+=(util-linux)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
  else
    echo "setup-deps: missing ${need_apt[*]} (run as root to install)" >&2
  fi
fi

# The catalog's PostgreSQL tests run a throwaway cluster (scripts/pg-cluster.sh) of Debian's `postgresql` server
# (initdb and pg_ctl under /usr/lib/postgresql/*/bin, the `postgres` user) and `runuser` to start it as that user.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql
  else
    echo "setup-deps: PostgreSQL server missing (run as root to install); the PostgreSQL catalog tests will fail" >&2
  fi
fi

# End-to-end tests (tests/e2e, pytest) drive the real server with unmodified S3 clients: boto3, the AWS CLI
# (pip `awscli`) and rclone. Python packages go into the project venv (.venv), rclone comes from apt.
venv=.venv
e2e_packages=(boto3 awscli pytest requests zstandard lz4 awscrt pyarrow)
# The operator tests parse /_permafrost/metrics with Prometheus's own Python parser.
e2e_packages+=(prometheus_client)
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || { echo "setup-deps: cannot create $venv (python3-venv missing?)" >&2; exit 1; }
fi
missing_py=()
for p in "${e2e_packages[@]}"; do
  "$venv/bin/python" -m pip show -q "$p" >/dev/null 2>&1 || missing_py+=("$p")
done
if [ ${#missing_py[@]} -gt 0 ]; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${missing_py[@]}"
fi
if ! command -v rclone >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rclone
  else
    echo "setup-deps: rclone missing (run as root to install); the rclone e2e test will be skipped" >&2
  fi
fi

# The mount (tests/e2e/test_mount.py, test_pjdfstest.py): FUSE 3 (/dev/fuse, fusermount3 for servers that do not
# run as root), getfattr (attr), rsync, git, a user `tests` for pjdfstest to switch to, and pjdfstest itself: the
# Rust rewrite of the POSIX file system test suite, built from crates.io (it needs the libacl headers).
need_mount=()
command -v fusermount3 >/dev/null 2>&1 || need_mount+=(fuse3)
command -v getfattr >/dev/null 2>&1 || need_mount+=(attr)
command -v rsync >/dev/null 2>&1 || need_mount+=(rsync)
command -v git >/dev/null 2>&1 || need_mount+=(git)
dpkg -s libacl1-dev >/dev/null 2>&1 || need_mount+=(libacl1-dev)
if [ ${#need_mount[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_mount[@]}"
  else
    echo "setup-deps: missing ${need_mount[*]} (run as root to install); the mount tests will fail" >&2
  fi
fi
if [ "$(id -u)" = 0 ] && ! id tests >/dev/null 2>&1; then
  useradd --user-group --no-create-home --shell /usr/sbin/nologin tests
fi
if ! command -v pjdfstest >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/pjdfstest" ]; then
  # A debug build: it compiles in a fraction of the time, and the suite's speed is the file system's.
  cargo install --quiet --locked --debug pjdfstest
fi
# Archive clients of the e2e suite (tests/e2e/test_archive_clients.py): restic from apt, and the MinIO client `mc`
# built from its Go module (Debian's `mc` is Midnight Commander; its `minio-client` package is not in bookworm).
if ! command -v restic >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq restic
  else
    echo "setup-deps: restic missing (run as root to install)" >&2
  fi
fi
MC_VERSION=v0.0.0-20250313080218-cf909e1063a9
if ! (command -v mc >/dev/null 2>&1 && mc --version 2>/dev/null | grep -qi minio); then
  if [ "$(id -u)" = 0 ] && command -v go >/dev/null 2>&1; then
    GOBIN=/usr/local/bin GOFLAGS=-mod=mod go install "github.com/minio/mc@$MC_VERSION" \
      || echo "setup-deps: building the MinIO client failed" >&2
  else
    echo "setup-deps: the MinIO client (mc) is missing (run as root with Go installed)" >&2
  fi
fi
# The AWS SDK for Go v2 test (tests/e2e/test_go_sdk.py) builds tests/e2e/go with the machine's Go toolchain; its
# modules (pinned in go.mod and go.sum) are downloaded here from the Go module proxy, so the test's build needs
# no network. Without Go the test fails, saying so.
go_bin=$(command -v go || { [ -x /usr/local/go/bin/go ] && echo /usr/local/go/bin/go; } || true)
if [ -n "$go_bin" ]; then
  (cd tests/e2e/go && GOTOOLCHAIN=local GOFLAGS=-mod=readonly "$go_bin" mod download) \
    || echo "setup-deps: downloading the Go SDK test's modules failed" >&2
else
  echo "setup-deps: go is missing; the Go SDK e2e test (tests/e2e/test_go_sdk.py) will fail" >&2
fi
# The dashboard test (tests/e2e/test_dashboard.py) drives Debian's headless Chromium with playwright-core from npm
# (pinned in tests/e2e/ui/package.json and its lock file; installed into tests/e2e/ui/node_modules).
# Only what is missing: a machine whose Node.js comes from NodeSource has npm inside `nodejs`, and asking apt for
# Debian's `npm` as well conflicts with it (apt then installs nothing, chromium included).
need_ui=()
[ -x /usr/bin/chromium ] || need_ui+=(chromium)
command -v node >/dev/null 2>&1 || need_ui+=(nodejs)
command -v npm >/dev/null 2>&1 || need_ui+=(npm)
if [ ${#need_ui[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_ui[@]}"
  else
    echo "setup-deps: missing ${need_ui[*]} (run as root to install); the dashboard test will fail" >&2
  fi
fi
if [ ! -d tests/e2e/ui/node_modules/playwright-core ] && command -v npm >/dev/null 2>&1; then
  (cd tests/e2e/ui && npm ci --no-audit --no-fund --loglevel=error)
fi

# The recorder's tests receive UDP at hundreds of Mbit/s on a loaded machine: the kernel caps each socket's
# receive buffer at net.core.rmem_max (4 MiB here, ~60 ms at 500 Mbit/s). Raise the cap (never lower it) so
# the 256 MiB the recorder asks for is granted; on a production recorder this is the operator's call
# (docs/record.md "Operating system").
rmem_wanted=268435456
rmem_now=$(cat /proc/sys/net/core/rmem_max 2>/dev/null || echo 0)
if [ "$rmem_now" -lt "$rmem_wanted" ]; then
  if [ "$(id -u)" = 0 ] && sysctl -q -w net.core.rmem_max=$rmem_wanted; then
    echo "setup-deps: net.core.rmem_max raised from $rmem_now to $rmem_wanted for the recorder's tests"
  else
    echo "setup-deps: net.core.rmem_max is $rmem_now (run as root to raise it); recorder tests may see kernel drops" >&2
  fi
fi
