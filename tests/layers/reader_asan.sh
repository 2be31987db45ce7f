#!/usr/bin/env bash
# The layer reader built with AddressSanitizer (fsdpgen-layers-asan) on every
# header the reader's tests use, and on those ReaderTest makes on the fly
# (nested past any stack, a FIFO included): each answers with JSON (exit 0) or
# diagnostics (exit 1), and AddressSanitizer reports nothing.
# Usage: reader_asan.sh READER_ASAN SOURCE_DIR
set -uo pipefail
reader=$1
src=$2
failed=0
made=$(mktemp -d)
trap 'rm -rf "$made"' EXIT
repeat() { yes -- "$1" | head -n "$2" | tr -d '\n'; }
echo "inline int f() { return $(repeat '(' 100000)1$(repeat ')' 100000); }" >"$made/parentheses.h"
echo "template <class T> struct W {}; inline void f() { $(repeat 'W<' 1000000)int$(repeat '>' 1000000) w; }" \
  >"$made/template_arguments.h"
echo "inline int f() { return $(repeat '- ' 1000000)1; }" >"$made/unary.h"
mkfifo "$made/pipe.h"
echo '#include "pipe.h"' >"$made/includes_fifo.h"
for h in "$src"/examples/layers/*.h "$src"/tests/layers/bad/*.h "$made"/parentheses.h \
  "$made"/template_arguments.h "$made"/unary.h "$made"/includes_fifo.h; do
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
