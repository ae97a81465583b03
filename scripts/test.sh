#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through CTest:
# every test at this machine's best ISA, then the suite again with TESSERA_ISA
# lowered to avx2 and to scalar.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh -DTESSERA_BUILD_TESTS=ON
ctest --test-dir build --output-on-failure -j "$(nproc)"
