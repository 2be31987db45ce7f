#!/usr/bin/env bash
# Which of tune's knobs keep the training bit for bit on this CPU: a small
# gpt2 (the e2e tests' model: width 32, 3 blocks, vocab 64, fp32, world 2,
# two micro-batches of 2) trained STEPS steps as written and with one knob
# changed at a time to a value tune tries; each run against the spec as
# written: the saved weights byte for byte, and the largest relative
# difference of the loss and of the gradient norm over the steps (the
# metrics print 9 significant digits). The hybrid rows compare at world 4
# against full_shard at world 4; the last rows with bf16 params. The
# equivalence tests' fp32 tolerances (tests/e2e/EquivalenceTest.cpp) are
# 2.5e-6 for the loss and 4e-5 for the norm. Figures come from the runs;
# nothing is asserted (docs/tune.md quotes them).
#   bash tests/bench/tune/exact.sh [STEPS]      (STEPS 6)
# Environment: FSDPGEN_BIN (else build/fsdpgen), KEEP (non-empty: keep the work directory).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
fsdpgen="${FSDPGEN_BIN:-$root/build/fsdpgen}"
steps="${1:-6}"
[[ $steps =~ ^[0-9]+$ ]] && [ "$steps" -ge 1 ] || { echo "exact.sh: STEPS must be a positive number" >&2; exit 2; }
[ -x "$fsdpgen" ] || { echo "exact.sh: no fsdpgen at $fsdpgen (build it first)" >&2; exit 2; }
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
work=$(mktemp -d)
if [ -n "${KEEP:-}" ]; then echo "work directory (kept): $work"; else trap 'rm -rf "$work"' EXIT; fi

# The spec with KEY=VALUE settings over these defaults.
spec() {
  local world=2 sharding=full_shard group="" units="each block" param=fp32 reduce_dtype=fp32
  local prefetch="forward = true  backward = pre  max_inflight = 2" recompute=none offload="offload = none"
  local micro_batch=2 micro_batches=2 reduce=every
  for kv in "$@"; do local "${kv%%=*}=${kv#*=}"; done
  cat <<EOF
model exact {
  family = gpt2
  vocab = 64
  context = 16
  width = 32
  heads = 2
  layers = 3
  tie_embeddings = true
}
units {
  $units
}
parallel {
  world = $world
  sharding = $sharding
${group:+  shard_group = $group
}  precision { param = $param  reduce = $reduce_dtype  master = fp32 }
  prefetch { $prefetch }
  recompute = $recompute
  $offload
  accumulate { micro_batches = $micro_batches  reduce = $reduce }
}
train {
  optimizer = adamw(lr = 1e-2, betas = (0.9, 0.95), eps = 1e-8, weight_decay = 0.1)
  lr_schedule = cosine(warmup = 1, min = 1e-3)
  micro_batch = $micro_batch
  steps = $steps
  clip = 1.0
  seed = 1337
  data = synthetic(seed = 7)
  log_every = 1
}
EOF
}

# train NAME WORLD SETTINGS...: builds and trains NAME, its metrics and weights in $work/NAME.
train() {
  local name=$1 world=$2
  shift 2
  mkdir -p "$work/$name"
  spec "world=$world" "$@" >"$work/$name/spec.fsdp"
  (cd "$work/$name" && "$fsdpgen" spec.fsdp -o train >build.log 2>&1) ||
    { echo "exact.sh: $name does not build:" >&2; cat "$work/$name/build.log" >&2; exit 1; }
  local launch=("$work/$name/train")
  [ "$world" -gt 1 ] && launch=(mpirun -n "$world" --oversubscribe --bind-to none "$work/$name/train")
  (cd "$work/$name" && "${launch[@]}" --metrics metrics.jsonl --save weights.safetensors >run.log 2>&1) ||
    { echo "exact.sh: $name does not train:" >&2; tail -20 "$work/$name/run.log" >&2; exit 1; }
}

# compare BASE NAME WHAT: one row of the table.
compare() {
  python3 - "$work/$1" "$work/$2" "$3" <<'EOF'
import json, sys
base, other, what = sys.argv[1:]
def steps(d):
    return [json.loads(l) for l in open(d + "/metrics.jsonl") if l.strip()]
a, b = steps(base), steps(other)
assert len(a) == len(b) and a, (len(a), len(b))
rel = lambda k: max(abs(x[k] - y[k]) / abs(x[k]) for x, y in zip(a, b))
same = open(base + "/weights.safetensors", "rb").read() == open(other + "/weights.safetensors", "rb").read()
print(f"| {what} | {'yes' if same else 'no'} | {rel('loss'):.2g} | {rel('grad_norm'):.2g} |")
EOF
}

echo "| change from the spec as written | weights bit for bit | loss (max rel.) | grad norm (max rel.) |"
echo "|---|---|---:|---:|"
train base 2
for row in \
  "prefetch_none|prefetch { forward = false  backward = none }|prefetch=forward = false  backward = none  max_inflight = 1" \
  "prefetch_post|prefetch { backward = post  max_inflight = 3 }|prefetch=forward = true  backward = post  max_inflight = 3" \
  "recompute|recompute = block|recompute=block" \
  "offload|offload = cpu|offload=offload = cpu" \
  "offload_acts|recompute = block, offload { params = cpu  activations = cpu }|recompute=block|offload=offload { params = cpu  activations = cpu }" \
  "sgo|sharding = shard_grad_op|sharding=shard_grad_op" \
  "noshard|sharding = no_shard|sharding=no_shard" \
  "linear|units { each linear }|units=each linear" \
  "group|units { group 2 blocks }|units=group 2 blocks" \
  "mb4x1|micro_batch = 4, micro_batches = 1|micro_batch=4|micro_batches=1" \
  "mb1x4|micro_batch = 1, micro_batches = 4|micro_batch=1|micro_batches=4" \
  "last|accumulate reduce = last|reduce=last"; do
  IFS='|' read -r name what settings <<<"$row"
  IFS='|' read -r -a kvs <<<"${row#*|*|}"
  train "$name" 2 "${kvs[@]}"
  compare base "$name" "$what"
done
train base_w4 4
for s in hybrid_shard hybrid_shard_zero2; do
  train "$s" 4 "sharding=$s" "group=2"
  compare base_w4 "$s" "world 4: sharding = $s (shard_group = 2), not full_shard"
done
# 16-bit params: a sum in another order rounds activations and gradients
# to bf16 differently (compared with a dtype change and 16-bit sums).
train base_bf16 2 "param=bf16"
train bf16_linear 2 "param=bf16" "units=each linear"
compare base_bf16 bf16_linear "bf16 params: units { each linear }"
train bf16_reduce 2 "param=bf16" "reduce_dtype=bf16"
compare base_bf16 bf16_reduce "bf16 params: precision reduce = bf16, not fp32"
train bf16_reduce_linear 2 "param=bf16" "reduce_dtype=bf16" "units=each linear"
compare bf16_reduce bf16_reduce_linear "bf16 params and reduce: units { each linear }"
train bf16_reduce_last 2 "param=bf16" "reduce_dtype=bf16" "reduce=last"
compare bf16_reduce bf16_reduce_last "bf16 params and reduce: accumulate reduce = last (sums in bf16)"
