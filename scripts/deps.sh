#!/usr/bin/env bash
# Installs the Debian packages Tessera builds and tests with, if any is missing.
set -euo pipefail
# libdnnl-dev and libopenblas-dev: the peers that `tessera bench` runs in the same process.
packages=(g++ cmake ninja-build ccache pkg-config libgtest-dev libfmt-dev libcli11-dev nlohmann-json3-dev
          libdnnl-dev libopenblas-dev)
[ "${1:-}" = "--bench" ] && packages+=(libbenchmark-dev libpthreadpool-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
