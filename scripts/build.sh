#!/usr/bin/env bash
# Configures and builds Tessera (Release) into ./build; extra args go to CMake.
set -euo pipefail
cd "$(dirname "$0")/.."
# One compiler cache per user, outside the checkout: a fresh clone (CI) reuses
# what earlier builds on this machine compiled (paths hashed relative to it).
export CCACHE_DIR="${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera-ccache}" CCACHE_BASEDIR="$PWD"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" > /dev/null
cmake --build build
