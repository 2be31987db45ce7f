#!/usr/bin/env bash
# Builds one libFuzzer target with clang (tests/fuzz/CMakeLists.txt: ASan and
# UBSan, -fsanitize=fuzzer) and runs it for a bounded time on a seed corpus
# of the repository's valid files and tests/fuzz/seeds/TARGET. Fails on any
# crash, leak, sanitizer report, uncaught exception, broken invariant or
# timeout (10 s per input).
#   bash tests/fuzz/run.sh TARGET OUT_DIR [--build-only]   (FSDPGEN_FUZZ_SECONDS, default 60)
# TARGET: parser, safetensors, manifest, profile, trace, tokens, layer_expr, hf_config.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
target=${1:?usage: run.sh TARGET OUT_DIR [--build-only]}
out=${2:-$root/build/fuzz}
seconds=${FSDPGEN_FUZZ_SECONDS:-60}

# Per target: the seeds (files, globs), the longest input and the dictionary.
max_len=16384
dict=""
case "$target" in
  parser)
    seeds=("$root"/specs/*.fsdp "$root"/tests/bad/*.fsdp)
    dict=spec.dict ;;
  safetensors)
    seeds=("$root"/tests/e2e/*/model.safetensors "$root"/tests/e2e/llama_reference/hf/*)
    max_len=131072
    dict=safetensors.dict ;;
  manifest) seeds=() ; dict=manifest.dict ;;
  profile) seeds=("$root"/tests/calibrate/*.json) ; dict=profile.dict ;;
  trace) seeds=() ; max_len=32768 ; dict=trace.dict ;;
  tokens) seeds=("$root"/tests/e2e/*/tokens.bin) ;;
  layer_expr)
    seeds=()
    max_len=1024
    dict=layer_expr.dict ;;
  hf_config) seeds=("$root"/tests/e2e/llama_reference/hf/*.json "$root"/tests/cli/hf/*/config.json) ; dict=hf_config.dict ;;
  *)
    echo "fuzz: unknown target '$target' (parser, safetensors, manifest, profile, trace," \
      "tokens, layer_expr, hf_config)" >&2
    exit 2 ;;
esac
seeds+=("$root/tests/fuzz/seeds/$target"/*)

cxx=$(command -v clang++ || true)
if [ -z "$cxx" ]; then
  echo "fuzz: clang++ not found; 'bash tools/setup.sh deps' installs it" >&2
  exit 1
fi
# One build for every target, two compiles at a time (CI has 2 cores); a lock
# keeps targets run in parallel by CTest from building at once.
mkdir -p "$out/build"
(
  flock 9
  if [ ! -f "$out/build/build.ninja" ]; then
    cmake -S "$root/tests/fuzz" -B "$out/build" -G Ninja -DCMAKE_BUILD_TYPE=None \
      -DCMAKE_CXX_COMPILER="$cxx" >"$out/build/configure.log" 2>&1 || {
      cat "$out/build/configure.log" >&2
      echo "fuzz: cannot configure the fuzz targets (clang's libFuzzer: libclang-rt-14-dev)" >&2
      exit 1
    }
  fi
  ninja -C "$out/build" -j 2 "${target}_fuzz" >"$out/build/$target.log" 2>&1 || {
    cat "$out/build/$target.log" >&2
    echo "fuzz: cannot build ${target}_fuzz" >&2
    exit 1
  }
) 9>"$out/build/lock"
[ "${3:-}" = --build-only ] && exit 0

work="$out/$target"
mkdir -p "$work/corpus"
for seed in "${seeds[@]}"; do  # named after their directory too: two model.safetensors
  [ -f "$seed" ] && cp "$seed" "$work/corpus/seed-$(basename "$(dirname "$seed")")-$(basename "$seed")"
done
dict_flag=()
[ -n "$dict" ] && dict_flag=(-dict="$root/tests/fuzz/$dict")
# The targets' scratch files; a crashed run leaves its own, removed here next time.
export FSDPGEN_FUZZ_SCRATCH="$work/scratch"
rm -rf "$FSDPGEN_FUZZ_SCRATCH"
echo "fuzz: running ${target}_fuzz for ${seconds}s on $(ls "$work/corpus" | wc -l) inputs"
cd "$work"
"$out/build/${target}_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -max_len="$max_len" -print_final_stats=1 -artifact_prefix="$work/" "${dict_flag[@]}" \
  corpus 2>fuzz.log || {
  tail -60 fuzz.log >&2
  echo "fuzz: FAILED; the input is in $work (crash-*, leak-*, timeout-*, oom-*)" >&2
  exit 1
}
grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" fuzz.log || true
echo "fuzz: no crash, leak, sanitizer report, uncaught exception or broken invariant"
