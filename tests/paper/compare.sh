#!/usr/bin/env bash
# Predicted TFLOPS per GPU and memory per GPU for the FSDP paper's GPT-175B
# and the FSDP 1T blog's GPT-1T configurations, beside the reported figures.
# Usage: tests/paper/compare.sh [BUILD_DIR]   (default: build; configures and builds it)
# Explained in tests/paper/README.md.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$root/build}"
cd "$root"
if [[ ! -f "$build/build.ninja" && ! -f "$build/Makefile" ]]; then
  cmake -S . -B "$build" -G Ninja >/dev/null
fi
cmake --build "$build" --target paper_compare >/dev/null
tool="$build/tests/paper_compare"

header() {
  echo "| model | gpu | GPUs | batch/GPU | inter-node busbw | step s | model TFLOPS | hardware TFLOPS | MFU | exposed comm | memory GiB (of) | reported TFLOPS |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
}

# row SPEC GPU WORLD MICRO_BATCH REPORTED [INTER_BUSBW_GBPS]
row() {
  local spec=$1 gpu=$2 world=$3 mb=$4 reported=$5 bw=${6:-}
  local args=("specs/$spec.fsdp" "$gpu" "$world" "$mb")
  local bw_text="as described"
  if [[ -n "$bw" ]]; then
    args+=(--inter-busbw "$bw")
    bw_text="$bw GB/s"
  fi
  read -r step model hw mfu exposed mem cap < <("$tool" "${args[@]}")
  local fits=""
  awk -v m="$mem" -v c="$cap" 'BEGIN { exit !(m > c) }' && fits=" **does not fit**"
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %.1f%% | %s%% | %s (%s)%s | %s |\n' \
    "$spec" "$gpu" "$world" "$mb" "$bw_text" "$step" "$model" "$hw" "$(awk -v x="$mfu" 'BEGIN { print 100 * x }')" \
    "$exposed" "$mem" "$cap" "$fits" "$reported"
}

echo "## As described (a100-80g: AWS p4de, a100-40g: AWS p4d; 4 x 100 Gb/s EFA per node)"
echo
header
for world in 128 256 512; do
  for mb in 1 2; do
    row gpt-175b a100-80g "$world" "$mb" "173-186"
  done
done
row gpt-1t a100-40g 128 4 84
row gpt-1t a100-40g 512 4 81
echo
echo "## What if the network were faster (GPT-175B, 512 GPUs): inter-node busbw in GB/s per node"
echo
header
for bw in 40 80 120 160; do
  for mb in 1 2; do
    row gpt-175b a100-80g 512 "$mb" "173-186" "$bw"
  done
done
