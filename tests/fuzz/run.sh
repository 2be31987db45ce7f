#!/usr/bin/env bash
# Builds the parser fuzzer with clang (-fsanitize=fuzzer,address,undefined)
# and runs it for a bounded time on a seed corpus of specs/ and tests/bad/.
# Fails on any crash, leak, sanitizer report, round-trip mismatch or timeout.
#   bash tests/fuzz/run.sh OUT_DIR      (FSDPGEN_FUZZ_SECONDS, default 60)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:-$root/build/fuzz}
seconds=${FSDPGEN_FUZZ_SECONDS:-60}
mkdir -p "$out/obj" "$out/corpus"

cxx=$(command -v clang++ || true)
if [ -z "$cxx" ]; then
  echo "fuzz: clang++ not found; 'bash tools/setup.sh deps' installs it" >&2
  exit 1
fi
launcher=()
command -v ccache >/dev/null && launcher=(ccache)
# The fuzzed front end runs no layer reader: a spec that imports a header
# gets the one line that says how to install it.
flags=(-std=c++20 -g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -I"$root"
  -DFSDPGEN_DEFAULT_LAYER_READER='""')

objs=()
pids=()
for src in "$root"/dsl/*.cpp "$root"/layers/*.cpp "$root"/suggest/*.cpp "$root"/tests/fuzz/ParserFuzz.cpp; do
  obj="$out/obj/$(basename "$src" .cpp).o"
  objs+=("$obj")
  "${launcher[@]}" "$cxx" "${flags[@]}" -c "$src" -o "$obj" &
  pids+=($!)
  # Two compiles at a time (CI has 2 cores).
  if [ ${#pids[@]} -ge 2 ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p"; done
"$cxx" -fsanitize=fuzzer,address,undefined "${objs[@]}" -lfmt -o "$out/parser_fuzz"

cp "$root"/specs/*.fsdp "$root"/tests/bad/*.fsdp "$out/corpus/" 2>/dev/null || true
echo "fuzz: running the parser fuzzer for ${seconds}s on $(ls "$out/corpus" | wc -l) inputs"
cd "$out"
./parser_fuzz -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
  -print_final_stats=1 -dict="$root/tests/fuzz/spec.dict" corpus 2>fuzz.log || {
  tail -60 fuzz.log >&2
  echo "fuzz: FAILED; the crashing input is in $out (crash-*, leak-*, timeout-*)" >&2
  exit 1
}
grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" fuzz.log || true
echo "fuzz: no crash, leak, sanitizer report or round-trip mismatch"
