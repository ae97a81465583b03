#!/usr/bin/env bash
# Installs the Debian packages Tessera builds and tests with, if any is missing.
set -euo pipefail
packages=(g++ cmake ninja-build ccache pkg-config libgtest-dev libfmt-dev libcli11-dev)
[ "${1:-}" = "--bench" ] && packages+=(libbenchmark-dev libdnnl-dev libopenblas-dev libpthreadpool-dev)
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
