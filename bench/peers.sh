#!/usr/bin/env bash
# permafrost next to MinIO (single drive and a 4-drive erasure set) on the same disk with the same boto3 client:
# 1 GiB PUT/GET with 1 and 4 streams (random and compressible bytes), 4 KiB PUT/GET with 8 client threads.
# One command: installs MinIO (`go install github.com/minio/minio@latest`) when missing, builds the release binary,
# runs bench/peers.py. Arguments go to bench/peers.py (--quick: 256 MiB objects and 5 s small runs).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export GOPATH="${GOPATH:-$HOME/go}"
MINIO="$(command -v minio || echo "$GOPATH/bin/minio")"
if [ ! -x "$MINIO" ]; then
    echo "installing MinIO with go install (takes a few minutes)"
    GOFLAGS=-mod=mod go install github.com/minio/minio@latest
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
cargo build -q --release -p permafrost --manifest-path "$ROOT/Cargo.toml"
exec "$ROOT/.venv/bin/python" "$ROOT/bench/peers.py" --bin "$CARGO_TARGET_DIR/release/permafrost" --minio "$MINIO" "$@"
