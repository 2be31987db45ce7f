#!/usr/bin/env bash
# What the reliability features cost on a GPU, as ratios measured in one run
# (each repetition runs both sides of each ratio back to back): GPT-2 124M at
# world 1 in bf16 (micro-batch 16 x 1024), tokens/s of
#   the watchdog's GPU marks (two stream memory writes per op) against
#     FSDPGEN_GPU_MARKS=0,
#   the watchdog against --no-watchdog,
#   the loss-spike guard (guard { loss_z = 6  norm_z = 6 }: one more all-reduce
#     and the gate in the optimizer) against the spec without it.
# Nothing is asserted. Needs a GPU and build/fsdpgen (or FSDPGEN_BIN) built
# with the CUDA target; exits 77 without a GPU.
#   bash tests/bench/cuda/overhead.sh [STEPS] [REPEATS] [MICRO_BATCH]   (30, 3, 16)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
fsdpgen="${FSDPGEN_BIN:-$root/build/fsdpgen}"
steps="${1:-30}"
repeats="${2:-3}"
micro_batch="${3:-16}"
[ "$steps" -ge 10 ] 2>/dev/null ||
  { echo "usage: bash tests/bench/cuda/overhead.sh [STEPS >= 10] [REPEATS] [MICRO_BATCH]" >&2; exit 2; }
[ -x "$fsdpgen" ] || { echo "overhead.sh: no fsdpgen at $fsdpgen" >&2; exit 2; }
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "overhead.sh: skipped: no GPU (nvidia-smi finds none)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# spec GUARD: GPT-2 124M's model and units from specs/gpt2-124m.fsdp at
# world 1, bf16, with GUARD (a train line, or nothing).
spec() {
  local dump
  dump=$("$fsdpgen" check "$root/specs/gpt2-124m.fsdp" --dump)
  awk '/^model /,/^}/' <<<"$dump"
  awk '/^units /,/^}/' <<<"$dump"
  cat <<EOF
parallel {
  world     = 1
  sharding  = full_shard
  precision { param = bf16  reduce = fp32  master = fp32 }
  recompute = none
}
train {
  optimizer = adamw(lr = 6e-4, betas = (0.9, 0.95), eps = 1e-8, weight_decay = 0.1)
  lr_schedule = constant(warmup = 0)
  micro_batch = $micro_batch
  steps       = $steps
  clip        = 1
  data        = synthetic(seed = 7)
  log_every   = $steps
$1
}
EOF
}

spec "" >"$work/plain.fsdp"
spec "  guard { loss_z = 6  norm_z = 6  window = 10 }" >"$work/guard.fsdp"
for name in plain guard; do
  "$fsdpgen" build "$work/$name.fsdp" --target cuda -o "$work/$name" >"$work/$name.build.log" 2>&1 ||
    { cat "$work/$name.build.log"; exit 1; }
done

# tokens NAME ENV ARGS...: the run's tokens/s (its done: line: steps 2 to N).
tokens() {
  local name=$1 env=$2 out
  shift 2
  out=$(cd "$work" && env $env "$work/$name" --steps "$steps" "$@" 2>&1) ||
    { echo "$out" >&2; echo "overhead.sh: $name $env $* failed" >&2; exit 1; }
  sed -nE 's#^done: .*\| ([0-9,]+) tok/s$#\1#p' <<<"$out" | tr -d ,
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

printf '%-4s %14s %14s %7s %16s %7s %14s %7s\n' rep "marks tok/s" "no marks" ratio "no watchdog" ratio \
  "guard tok/s" ratio
declare -a r_marks r_watch r_guard
for rep in $(seq 1 "$repeats"); do
  on=$(tokens plain FSDPGEN_GPU_MARKS=1)
  off=$(tokens plain FSDPGEN_GPU_MARKS=0)
  none=$(tokens plain FSDPGEN_GPU_MARKS=1 --no-watchdog)
  guard=$(tokens guard FSDPGEN_GPU_MARKS=1)
  r_marks+=("$(ratio "$on" "$off")") r_watch+=("$(ratio "$on" "$none")") r_guard+=("$(ratio "$guard" "$on")")
  printf '%-4s %14s %14s %7s %16s %7s %14s %7s\n' "$rep" "$on" "$off" "${r_marks[-1]}" "$none" \
    "${r_watch[-1]}" "$guard" "${r_guard[-1]}"
done
echo
echo "medians over $repeats repetition(s) (tokens/s with / without; below 1 is a cost):"
echo "  GPU marks: $(median "${r_marks[@]}")   watchdog: $(median "${r_watch[@]}")   guard: $(median "${r_guard[@]}")"
