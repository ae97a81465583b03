#!/usr/bin/env bash
# The test suite under sanitizers:
#  - AddressSanitizer + UndefinedBehaviorSanitizer (./build-asan), whole suite
#    at the machine's best ISA (the ISA-parametrized tests cover every lower
#    level in the same run);
#  - ThreadSanitizer (./build-tsan) on what runs across threads: the pool,
#    and ops that split work over it.
set -euo pipefail
cd "$(dirname "$0")/.."
# One compiler cache per user, outside the checkout: a fresh clone (CI) reuses
# what earlier builds on this machine compiled (paths hashed relative to it).
export CCACHE_DIR="${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera-ccache}" CCACHE_BASEDIR="$PWD"

# -O1 -g1 (line tables: ASan's and UBSan's stack traces keep file:line): the
# AVX-512 kernels' instantiations took minutes each under -O2 -g with ASan +
# UBSan (gated.cpp 182 s alone), the whole ASan build 17 min of CI; -O1 -g1
# 12 min (gated.cpp 66 s), the suite 1.6 min.
configure() {  # <dir> <sanitizer flags>
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_BUILD_APPS=OFF \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_CXX_FLAGS="$2 -fno-omit-frame-pointer" > /dev/null
  cmake --build "$1"
}

configure build-asan "-fsanitize=address,undefined -fno-sanitize-recover=all"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
./build-asan/tests/tessera_tests --gtest_brief=1

configure build-tsan "-fsanitize=thread"
TSAN_OPTIONS=halt_on_error=1 ./build-tsan/tests/tessera_tests --gtest_brief=1 \
  --gtest_filter='ThreadPool*:PlanCache*:Stream*:Event*:Profiler*:DynamicShapes*:*Elementwise*:*Matmul*:*LinearTest.W8A8*:*LinearTest.Batched*:*NormTest.StridedViews*:*GroupNormTest.LargeSplitsOverThePool*:*LayoutTest.Permute4D*:*QuantizeTest.StridedAndThreadedLayouts*:*ReduceTest.MatchesReference*:*AttentionTest.DecodeShapes*:*AttentionTest.LargePrefill*:*PagedAttentionTest.LongSequence*'
