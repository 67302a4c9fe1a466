#!/usr/bin/env bash
# Installs what the tests need on a fresh machine, and nothing that is already there.
# Idempotent: safe to run before every test run. Rust itself comes from rustup (on the machine).
set -euo pipefail

need_apt=()
command -v losetup >/dev/null 2>&1 || need_apt+=(mount)
# permafrost-plot rasterises chart text with a system font (PNG output of --plot).
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need_apt+=(fonts-dejavu-core)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
  else
    echo "setup-deps: missing ${need_apt[*]} (run as root to install)" >&2
  fi
fi
