#!/usr/bin/env bash
# The ISA kernel objects (src/kernels/x86/*) are compiled with AVX2/AVX-512/AMX
# flags. A weak (inline, template) definition in one of them could be picked
# by the linker for baseline code too, and fault on an older CPU. Fail if any
# such object defines a weak or unique symbol. Args: the library's object files.
set -euo pipefail
status=0
for obj in "$@"; do
  case "$obj" in */kernels/x86/*) ;; *) continue ;; esac
  weak=$(nm -C --defined-only "$obj" | grep -E ' [WVu] ' || true)
  if [ -n "$weak" ]; then
    echo "$obj defines weak symbols:"; echo "$weak"; status=1
  fi
done
exit $status
