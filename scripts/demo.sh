#!/usr/bin/env bash
# Installs what is missing, builds, and runs `tessera demo` (args pass through).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh -DTESSERA_BUILD_TESTS=OFF
./build/tessera demo "$@"
