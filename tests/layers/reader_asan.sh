#!/usr/bin/env bash
# The layer reader built with AddressSanitizer (fsdpgen-layers-asan) on every
# header the reader's tests use: each answers with JSON (exit 0) or
# diagnostics (exit 1), and AddressSanitizer reports nothing.
# Usage: reader_asan.sh READER_ASAN SOURCE_DIR
set -uo pipefail
reader=$1
src=$2
failed=0
for h in "$src"/examples/layers/*.h "$src"/tests/layers/bad/*.h; do
  out=$(cd "$(dirname "$h")" && ASAN_OPTIONS=detect_leaks=1 timeout 120 "$reader" "$(basename "$h")" 2>&1)
  status=$?
  if [[ $status -gt 1 ]] || grep -q "AddressSanitizer\|LeakSanitizer" <<<"$out"; then
    echo "FAIL: $h (exit $status)"
    echo "$out" | head -40
    failed=1
  else
    echo "ok: $(basename "$h") (exit $status)"
  fi
done
exit $failed
