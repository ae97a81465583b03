#!/usr/bin/env bash
# The test suite under sanitizers:
#  - AddressSanitizer + UndefinedBehaviorSanitizer (./build-asan), whole suite,
#    at the machine's best ISA and at scalar;
#  - ThreadSanitizer (./build-tsan) on what runs across threads: the pool,
#    and ops that split work over it.
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_DIR="${CCACHE_DIR:-$PWD/.cache/ccache}"

configure() {  # <dir> <sanitizer flags>
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_BUILD_APPS=OFF \
    -DCMAKE_CXX_FLAGS="$2 -fno-omit-frame-pointer" > /dev/null
  cmake --build "$1"
}

configure build-asan "-fsanitize=address,undefined -fno-sanitize-recover=all"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
./build-asan/tests/tessera_tests --gtest_brief=1
TESSERA_ISA=scalar ./build-asan/tests/tessera_tests --gtest_brief=1

configure build-tsan "-fsanitize=thread"
TSAN_OPTIONS=halt_on_error=1 ./build-tsan/tests/tessera_tests --gtest_brief=1 \
  --gtest_filter='ThreadPool*:PlanCache*:*Elementwise*:*Matmul*:*LinearTest.W8A8*:*LinearTest.Batched*:*NormTest.StridedViews*:*GroupNormTest.LargeSplitsOverThePool*:*LayoutTest.Permute4D*:*QuantizeTest.StridedAndThreadedLayouts*:*ReduceTest.MatchesReference*:*AttentionTest.DecodeShapes*:*AttentionTest.LargePrefill*:*PagedAttentionTest.LongSequence*'
