#!/usr/bin/env bash
# Predicted TFLOPS per GPU and memory per GPU (`fsdpgen plan`) for the FSDP
# paper's GPT-175B on the paper's cluster (2 Tb/s RoCE per node) and on AWS
# p4de, and the FSDP 1T blog's GPT-1T on its p4d cluster, beside the reported
# figures; then GPT-175B with other inter-node networks (what-if, through
# build/tests/paper_compare). Explained in tests/paper/README.md.
# Usage: tests/paper/compare.sh [BUILD_DIR]   (default: build; configured and built if needed)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$root/build}"
cd "$root"
if [[ ! -f "$build/build.ninja" && ! -f "$build/Makefile" ]]; then
  cmake -S . -B "$build" -G Ninja >/dev/null
fi
cmake --build "$build" --target fsdpgen paper_compare >/dev/null

# Reads `fsdpgen plan` output on stdin; prints the table cells:
# step s | model TFLOPS | hardware TFLOPS | MFU | exposed comm | memory GiB (of usable)
# [| host GiB (of usable), with "host"]
cells() {
  awk -v with_host="${1:-}" '
    BEGIN { host = "-" }
    /^predicted step of / { step = $NF == "ms" ? $(NF - 1) / 1000 : "?" }
    /^      host arena / {
      match($0, /host arena [0-9.]+ GiB of [0-9.]+ GiB/); split(substr($0, RSTART, RLENGTH), h, " ")
      host = h[3] " (" h[6] ")" ($0 ~ /does NOT fit/ ? " **does not fit**" : "")
    }
    /^  per GPU / {
      match($0, /model [0-9.]+ TFLOPS/); model = substr($0, RSTART + 6, RLENGTH - 13)
      match($0, /hardware [0-9.]+ TFLOPS/); hw = substr($0, RSTART + 9, RLENGTH - 16)
      match($0, /MFU [0-9.]+%/); mfu = substr($0, RSTART + 4, RLENGTH - 4)
    }
    /^  communication / { match($0, /exposed \([0-9.]+%/); exposed = substr($0, RSTART + 9, RLENGTH - 9) }
    /^fits: / {
      match($0, /peak [0-9.]+ GiB of [0-9.]+ GiB/); split(substr($0, RSTART, RLENGTH), f, " ")
      mem = f[2] " (" f[5] ")" ($2 == "NO:" ? " **does not fit**" : "")
    }
    END {
      printf "%.2f | %s | %s | %s | %s | %s", step, model, hw, mfu, exposed, mem
      if (with_host != "") printf " | %s", host
    }'
}

table_header() {
  echo "| model | gpu | GPUs | batch/GPU | step s | model TFLOPS | hardware TFLOPS | MFU | exposed comm | device GiB (of usable) | host GiB (of usable) | reported TFLOPS |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
}
# Rows from lines "spec gpu world micro_batch reported" on stdin.
rows() {
  while read -r spec gpu world mb reported; do
    # exit 4: the plan does not fit (still printed whole)
    row=$({ "$build/fsdpgen" plan "specs/$spec.fsdp" --gpu "$gpu" --world "$world" \
      --micro-batch "$mb" || [ $? -eq 4 ]; } | cells host)
    echo "| $spec | $gpu | $world | $mb | $row | $reported |"
  done
}

echo "## GPT-175B on the paper's cluster (a100-80g-roce: A100 80GB, 2 Tb/s RoCE per node)"
echo
table_header
rows <<'EOF'
gpt-175b a100-80g-roce 128 1 173
gpt-175b a100-80g-roce 128 2 186
gpt-175b a100-80g-roce 256 1 173
gpt-175b a100-80g-roce 256 2 186
gpt-175b a100-80g-roce 512 1 173
gpt-175b a100-80g-roce 512 2 186
EOF

echo
echo "## On AWS p4de/p4d (4 x 100 Gb/s EFA per node): GPT-175B (a100-80g) and the 1T blog's GPT-1T (a100-40g)"
echo
table_header
rows <<'EOF'
gpt-175b a100-80g 128 1 173
gpt-175b a100-80g 128 2 186
gpt-175b a100-80g 512 1 173
gpt-175b a100-80g 512 2 186
gpt-1t a100-40g 128 4 84
gpt-1t a100-40g 256 4 -
gpt-1t a100-40g 512 4 81
EOF
echo
echo "## What if the network were faster (GPT-175B, a100-80g, 512 GPUs)"
echo
echo "| inter-node busbw | batch/GPU | step s | model TFLOPS | hardware TFLOPS | MFU | exposed comm | memory GiB (of usable) |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
for busbw in 40 80 120 200; do
  for mb in 1 2; do
    row=$("$build/tests/paper_compare" specs/gpt-175b.fsdp a100-80g 512 "$mb" "$busbw" | cells)
    echo "| $busbw GB/s | $mb | $row |"
  done
done
