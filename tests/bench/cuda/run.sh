#!/usr/bin/env bash
# GPU benchmark of generated CUDA binaries against PyTorch FSDP2 on one H100 or
# H200: GPT-2 124M, 350M and 1.5B at world 1, bf16 params, sequence 1024 and
# the largest micro-batch the plan fits; prints tokens/s, MFU, measured against
# planned arena (the driver's count), the step time measured against the one
# predicted from a profile `fsdpgen calibrate` measures on the same GPU, and
# PyTorch's tokens/s (eager and torch.compile) for the
# same model, batch and precision; judges the targets; appends the table to
# RESULTS.md beside this script.
#   bash tests/bench/cuda/run.sh [--profile] [STEPS] [SIZE...]   STEPS 20; SIZE 124m 350m 1.5b (default all)
# --profile: also measure one step of each size's binary under Nsight Compute
# (ncu, about 60x slower than the step) and print and record where its time
# goes, kernel by kernel (kernel_table.py beside this script).
# Exit status: 0 when every build and run completed, whether or not the targets
# were met (a missed target is FAIL in the table; PyTorch running out of memory
# is OOM in the table); 1 when a build or run failed; 2 for bad arguments; 77
# (skipped) when there is no H100 or H200.
# Environment: FSDPGEN_BIN (else build/fsdpgen, brought up to date with ninja),
# PYTHON (python3), MAX_MICRO_BATCH (64, halved until the plan fits),
# TORCH_WARMUP (5 steps before PyTorch's timing starts).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
here="$root/tests/bench/cuda"
fsdpgen="${FSDPGEN_BIN:-$root/build/fsdpgen}"
python="${PYTHON:-python3}"
max_micro_batch="${MAX_MICRO_BATCH:-64}"
torch_warmup="${TORCH_WARMUP:-5}"
mfu_target_pct=45
context=1024
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

usage() {
  echo "usage: bash tests/bench/cuda/run.sh [--profile] [STEPS] [SIZE...]   (STEPS >= 2; SIZE: 124m 350m 1.5b)" >&2
  exit 2
}

profile=false
if [ "${1:-}" = --profile ]; then
  profile=true
  shift
  command -v ncu >/dev/null 2>&1 || { echo "run.sh: --profile needs ncu (Nsight Compute) on PATH" >&2; exit 2; }
fi
steps=20
if [[ ${1:-} =~ ^[0-9]+$ ]]; then
  steps=$1
  shift
fi
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(124m 350m 1.5b)
[ "$steps" -ge 2 ] || usage # the binary times steps 2..N
[[ $max_micro_batch =~ ^[1-9][0-9]*$ ]] || usage
for size in "${sizes[@]}"; do
  [ -f "$root/specs/gpt2-$size.fsdp" ] || { echo "run.sh: no spec specs/gpt2-$size.fsdp" >&2; usage; }
done

# detect_device: sets device_name, device_mib, gpu_kind (fsdpgen's --gpu) and
# peak_tflops with its source (dense bf16, datasheet); exits 77 without an
# H100 or H200. Uses the first device of CUDA_VISIBLE_DEVICES, else GPU 0.
detect_device() {
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "run.sh: skipped: nvidia-smi is not on PATH; this benchmark needs an NVIDIA H100 or H200"
    exit 77
  fi
  local index="${CUDA_VISIBLE_DEVICES:-0}" line
  index=${index%%,*}
  line=$(nvidia-smi -i "$index" --query-gpu=name,memory.total --format=csv,noheader,nounits \
    2>/dev/null | head -1) || true
  if [ -z "$line" ]; then
    echo "run.sh: skipped: nvidia-smi finds no GPU $index (is the driver loaded?)"
    exit 77
  fi
  device_name=${line%,*}
  device_mib=${line##*,}
  device_mib=${device_mib// /}
  case "$device_name" in
    *H100*PCIe*) peak_tflops=756 peak_source="H100 PCIe datasheet" ;;
    *H100*NVL* | *H200*NVL*) peak_tflops=835 peak_source="H100/H200 NVL datasheet" ;;
    *H100* | *H200*) peak_tflops=989 peak_source="H100 SXM / H200 SXM datasheet" ;;
    *)
      echo "run.sh: skipped: $device_name is not an H100 or H200"
      exit 77
      ;;
  esac
  # fsdpgen knows h100-sxm (80 GB) and h200 (141 GB); 94 and 96 GB parts plan as 80 GB.
  if [ "$device_mib" -ge 100000 ]; then gpu_kind=h200; else gpu_kind=h100-sxm; fi
}

# ensure_fsdpgen: brings build/fsdpgen up to date (unless FSDPGEN_BIN names
# one) and checks that it has the CUDA target and PyTorch sees the GPU.
ensure_fsdpgen() {
  if [ -z "${FSDPGEN_BIN:-}" ] && command -v ninja >/dev/null 2>&1; then
    if ! { [ -f "$root/build/build.ninja" ] || cmake -S "$root" -B "$root/build" -G Ninja; } \
      >"$work/build.log" 2>&1 || ! ninja -C "$root/build" fsdpgen >>"$work/build.log" 2>&1; then
      tail -n 30 "$work/build.log" >&2
      echo "run.sh: error: building fsdpgen failed (log: $work/build.log)" >&2
      exit 1
    fi
  fi
  if [ ! -x "$fsdpgen" ]; then
    echo "run.sh: error: no fsdpgen at $fsdpgen (cmake -S . -B build -G Ninja && ninja -C build fsdpgen)" >&2
    exit 1
  fi
  if ! "$fsdpgen" build --help 2>&1 | grep -- '--target' >/dev/null; then
    echo "run.sh: error: $fsdpgen has no --target option, so it cannot build the CUDA binary" >&2
    exit 1
  fi
  if ! "$python" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
    echo "run.sh: error: '$python' has no PyTorch with CUDA for the baseline (set PYTHON=...)" >&2
    exit 1
  fi
}

# field TEXT REGEX: the first capture group of REGEX in TEXT (first match).
field() { sed -nE "s#.*$2.*#\1#p" <<<"$1" | awk 'NR == 1'; }

# resolved KEY DUMP: the value of `  KEY = value` in the resolved spec DUMP.
resolved() { field "$2" "^  $1 = (.*)"; }

# to_mib NUMBER UNIT: NUMBER (commas allowed) of KiB, MiB or GiB, in MiB.
to_mib() {
  awk -v n="${1//,/}" -v u="$2" \
    'BEGIN { printf "%.2f", n * (u == "GiB" ? 1024 : u == "KiB" ? 1 / 1024 : 1) }'
}

# json_field LOG KEY: KEY of the last JSON line of LOG.
json_field() {
  "$python" -c 'import json, sys
lines = [l for l in open(sys.argv[1]) if l.startswith("{")]
print(json.loads(lines[-1])[sys.argv[2]])' "$1" "$2"
}

# fail SIZE MESSAGE [LOG]: records why SIZE stopped and shows the log's end.
fail() {
  error[$1]=$2
  if [ -n "${3:-}" ]; then tail -n 25 "$3" >&2; fi
  echo "run.sh: $1: error: $2${3:+ (log: $3)}" >&2
  return 1
}

# write_spec DUMP MICRO_BATCH SOURCE: the benchmark's spec of the resolved spec
# DUMP: its model (context 1024) and wrap units, at world 1 with bf16 params and
# fp32 reduce and master weights, no recompute, one micro-batch per step,
# synthetic data, a constant learning rate and no checkpoints.
write_spec() {
  echo "# Written by tests/bench/cuda/run.sh from $3."
  awk '/^model /,/^}/' <<<"$1" | sed -E "s/^(  context = ).*/\1$context/"
  awk '/^units /,/^}/' <<<"$1"
  cat <<EOF
parallel {
  world     = 1
  sharding  = full_shard
  precision { param = bf16  reduce = fp32  master = fp32 }
  recompute = none
}
train {
$(grep -E '^  optimizer = ' <<<"$1")
  lr_schedule = constant(warmup = 0)
  micro_batch = $2
  steps       = $steps
$(grep -E '^  clip = ' <<<"$1")
  data        = synthetic(seed = 7)
  log_every   = $steps
}
EOF
}

# choose_micro_batch SIZE SPEC: the largest micro-batch from MAX_MICRO_BATCH
# down by halves that `fsdpgen plan` fits on the device; its plan is kept.
choose_micro_batch() {
  local b=$max_micro_batch out="$work/$1.plan.txt"
  while [ "$b" -ge 1 ]; do
    # exit 4: the plan does not fit (still printed whole)
    "$fsdpgen" plan "$2" --micro-batch "$b" --gpu "$gpu_kind" >"$out" 2>&1 || [ $? -eq 4 ] ||
      { fail "$1" "fsdpgen plan failed" "$out"; return 1; }
    if grep -q '^fits: yes' "$out"; then
      micro_batch[$1]=$b
      return 0
    fi
    b=$((b / 2))
  done
  fail "$1" "no micro-batch fits $gpu_kind" "$out"
}

# run_fsdpgen SIZE SPEC: builds and runs the CUDA binary; records tokens/s
# and MFU from its final 'done:' line, and the device arena as the driver
# counted it against the planned arena from its 'memory per rank' line.
run_fsdpgen() {
  local bin="$work/$1.train" log="$work/$1.fsdpgen.log" done_line memory_line t peak planned
  "$fsdpgen" build "$2" --target cuda --gpu "$gpu_kind" -o "$bin" >"$log" 2>&1 ||
    { fail "$1" "fsdpgen build --target cuda failed" "$log"; return 1; }
  (cd "$work" && "$bin" --steps "$steps" --metrics "$work/$1.metrics.jsonl") >>"$log" 2>&1 ||
    { fail "$1" "the generated binary failed" "$log"; return 1; }
  done_line=$(grep -E '^done:' "$log" | tail -1) || true
  [ -n "$done_line" ] || { fail "$1" "the binary printed no 'done:' line" "$log"; return 1; }
  memory_line=$(grep -E '^memory per rank' "$log" | tail -1) || true
  t=$(field "$done_line" '[ |]([0-9][0-9,]*(\.[0-9]+)?) tok/s' | tr -d ,)
  peak=$(field "$memory_line" 'device arena ([0-9][0-9,.]*) MiB in use per the driver')
  planned=$(field "$memory_line" 'per the driver \(planned ([0-9][0-9,.]*) MiB\)')
  if [ -z "$t" ] || [ -z "$peak" ] || [ -z "$planned" ]; then
    fail "$1" "cannot read tok/s and 'device arena X MiB in use per the driver (planned Y MiB)' in: $done_line $memory_line"
    return 1
  fi
  tokens_per_s[$1]=$t
  peak_mib[$1]=$(to_mib "$peak" MiB)
  planned_mib[$1]=$(to_mib "$planned" MiB)
  mfu_pct[$1]=$(awk -v t="$t" -v f="${flops_per_token[$1]}" -v p="$peak_tflops" \
    'BEGIN { printf "%.1f", 100 * t * f / (p * 1e12) }')
  echo "  fsdpgen: $done_line"
  echo "  fsdpgen: $memory_line"
}

# predict_fsdpgen SIZE SPEC: calibrates this GPU for the spec (`fsdpgen
# calibrate`: its layer passes, optimizer and copies as the runtime runs
# them) and records the step the planner predicts from that profile beside
# the measured one (the binary's tokens/s over the step's tokens).
predict_fsdpgen() {
  local log="$work/$1.calibrate.log" prof="$work/$1.profile.json"
  "$fsdpgen" calibrate "$2" --target cuda --gpu "$gpu_kind" -o "$prof" >"$log" 2>&1 ||
    { fail "$1" "fsdpgen calibrate failed" "$log"; return 1; }
  predicted_ms[$1]=$("$fsdpgen" plan "$2" --hardware "$prof" 2>>"$log" |
    sed -nE 's#^predicted step of .* on .*: ([0-9.]+) ms#\1#p')
  [ -n "${predicted_ms[$1]}" ] || { fail "$1" "fsdpgen plan --hardware printed no step" "$log"; return 1; }
  measured_ms[$1]=$(awk -v b="${micro_batch[$1]}" -v t="${tokens_per_s[$1]}" -v c="$context" \
    'BEGIN { printf "%.1f", 1000 * b * c / t }')
  echo "  predicted from its profile: ${predicted_ms[$1]} ms a step; measured ${measured_ms[$1]} ms"
  # Op by op: one traced step (the tenth, after warm-up and graph capture)
  # against the predicted trace (`fsdpgen compare`).
  "$fsdpgen" schedule "$2" --hardware "$prof" --format trace -o "$work/$1.predicted.json" \
    2>>"$log" || { fail "$1" "fsdpgen schedule --format trace failed" "$log"; return 1; }
  (cd "$work" && "$work/$1.train" --steps 12 --log-every 100 --trace "$work/$1.measured.json" \
    --trace-step 10) >>"$log" 2>&1 || { fail "$1" "the traced run failed" "$log"; return 1; }
  op_kinds[$1]=$("$fsdpgen" compare "$work/$1.predicted.json" "$work/$1.measured.json" --top 10 \
    -o "$work/$1.compare.json" 2>>"$log") ||
    { fail "$1" "fsdpgen compare failed" "$log"; return 1; }
  sed 's/^/    /' <<<"${op_kinds[$1]}"
}

# profile_fsdpgen SIZE: one step of the size's binary (the fourth: after GEMM
# algorithm choice and graph capture) under ncu; its kernel table.
profile_fsdpgen() {
  local bin="$work/$1.train" csv="$work/$1.ncu.csv" log="$work/$1.ncu.log"
  (cd "$work" && ncu --profile-from-start off --metrics gpu__time_duration.sum --csv \
    --log-file "$csv" "$bin" --steps 4 --profile-step 3) >"$log" 2>&1 ||
    { fail "$1" "the binary failed under ncu" "$log"; return 1; }
  kernels[$1]=$("$python" "$here/kernel_table.py" "$csv") ||
    { fail "$1" "kernel_table.py read no kernels from $csv" "$log"; return 1; }
  echo "  kernels of one step (ncu gpu__time_duration.sum):"
  sed 's/^/    /' <<<"${kernels[$1]}"
}

# run_torch SIZE MODE ARGS...: torch_gpt2.py in MODE (eager or compile);
# records tokens/s and peak memory, or OOM.
run_torch() {
  local size=$1 mode=$2 log="$work/$1.torch-$2.log" rc=0 params
  shift 2
  local args=("$@")
  [ "$mode" = compile ] && args+=(--compile)
  "$python" "$here/torch_gpt2.py" "${args[@]}" >"$log" 2>&1 || rc=$?
  if [ "$rc" -eq 3 ]; then
    torch_tps[$size-$mode]=OOM
    torch_peak_mib[$size-$mode]=OOM
    echo "  torch $mode: out of memory at micro-batch ${micro_batch[$size]}"
    return 0
  fi
  [ "$rc" -eq 0 ] || { fail "$size" "torch_gpt2.py ($mode) failed" "$log"; return 1; }
  params=$(json_field "$log" params)
  [ "$params" = "${params_of[$size]}" ] ||
    { fail "$size" "PyTorch's model has $params parameters, the spec ${params_of[$size]}"; return 1; }
  torch_tps[$size-$mode]=$(json_field "$log" tokens_per_s | awk '{ printf "%.0f", $1 }')
  torch_peak_mib[$size-$mode]=$(json_field "$log" peak_mem_bytes | awk '{ printf "%.2f", $1 / 1048576 }')
  echo "  torch $mode: $(tail -n 1 "$log")"
}

# bench SIZE: plans, builds and runs specs/gpt2-SIZE.fsdp and its PyTorch twin.
bench() {
  local size=$1 source="specs/gpt2-$1.fsdp" spec="$work/gpt2-$1.fsdp" dump plan
  dump=$("$fsdpgen" check "$root/$source" --dump 2>"$work/$size.check.log") ||
    { fail "$size" "fsdpgen check failed" "$work/$size.check.log"; return 1; }
  write_spec "$dump" 1 "$source" >"$spec"
  choose_micro_batch "$size" "$spec" || return 1
  write_spec "$dump" "${micro_batch[$size]}" "$source" >"$spec"
  dump=$("$fsdpgen" check "$spec" --dump 2>"$work/$size.check.log") ||
    { fail "$size" "the benchmark's spec does not check" "$work/$size.check.log"; return 1; }
  local layers width heads vocab ffn eps opt clip
  layers=$(resolved layers "$dump") width=$(resolved width "$dump") heads=$(resolved heads "$dump")
  vocab=$(resolved vocab "$dump") ffn=$(resolved ffn_hidden "$dump") eps=$(resolved norm_eps "$dump")
  opt=$(resolved optimizer "$dump") clip=$(resolved clip "$dump")
  if [ "$(resolved family "$dump")" != gpt2 ] || [ "$ffn" != $((4 * width)) ] ||
    [ "$(resolved tie_embeddings "$dump")" != true ] || [[ $opt != adamw* ]]; then
    fail "$size" "torch_gpt2.py models only gpt2 with ffn 4*width, tied embeddings and adamw"
    return 1
  fi
  params_of[$size]=$(field "$("$fsdpgen" check "$spec")" ' ([0-9]+) parameters')
  [ -n "${params_of[$size]}" ] || { fail "$size" "fsdpgen check printed no parameter count"; return 1; }
  flops_per_token[$size]=$((6 * params_of[$size] + 12 * layers * context * width))
  plan=$(cat "$work/$size.plan.txt")
  echo "gpt2-$size: ${params_of[$size]} parameters, micro-batch ${micro_batch[$size]} x $context;" \
    "plan: $(field "$plan" '^fits: yes: (peak .* usable)'), $(field "$plan" ', ([0-9]+ tokens/s)$')," \
    "MFU $(field "$plan" '\(MFU ([0-9.]+%)')"
  run_fsdpgen "$size" "$spec" || return 1
  predict_fsdpgen "$size" "$spec" || return 1
  if $profile; then profile_fsdpgen "$size" || return 1; fi
  local args=(--layers "$layers" --width "$width" --heads "$heads" --vocab "$vocab"
    --context "$context" --micro-batch "${micro_batch[$size]}" --steps "$steps"
    --warmup "$torch_warmup" --norm-eps "$eps" --clip "${clip/none/0}"
    --lr "$(field "$opt" 'lr = ([^,)]+)')" --eps "$(field "$opt" ' eps = ([^,)]+)')"
    --betas "$(field "$opt" 'betas = \(([^,]+),')" "$(field "$opt" 'betas = \([^,]+, ([^)]+)\)')"
    --weight-decay "$(field "$opt" 'weight_decay = ([^,)]+)')")
  run_torch "$size" eager "${args[@]}" || return 1
  run_torch "$size" compile "${args[@]}" || return 1
}

# row SIZE: the size's line of the results table.
row() {
  local s=$1
  if [ -n "${error[$s]:-}" ]; then
    echo "| $s | ${micro_batch[$s]:--} | error: ${error[$s]//|//} | | | | | | | | | | |"
    return
  fi
  local compiled=${torch_tps[$s-compile]} ratio="-" vs_compile="n/a (torch OOM)" mfu_verdict="-"
  if [ "$compiled" != OOM ]; then
    ratio=$(awk -v a="${tokens_per_s[$s]}" -v b="$compiled" 'BEGIN { printf "%.2f", a / b }')
    vs_compile=$(awk -v r="$ratio" 'BEGIN { print (r >= 1 ? "PASS" : "FAIL") }')
  fi
  if [ "$s" = 1.5b ]; then
    mfu_verdict=$(awk -v m="${mfu_pct[$s]}" -v t="$mfu_target_pct" 'BEGIN { print (m >= t ? "PASS" : "FAIL") }')
  fi
  # The driver maps the arena (and its 4 KiB guard) in 2 MiB pages.
  local peak_verdict
  peak_verdict=$(awk -v a="${peak_mib[$s]}" -v p="${planned_mib[$s]}" \
    'BEGIN { print (a >= p && a < p + 2.01 ? "PASS" : "FAIL") }')
  echo "| $s | ${micro_batch[$s]} | ${tokens_per_s[$s]} | ${mfu_pct[$s]}% |" \
    "${peak_mib[$s]} / ${planned_mib[$s]} | ${torch_tps[$s-eager]} | $compiled |" \
    "${torch_peak_mib[$s-compile]} | $ratio | $vs_compile | $mfu_verdict | $peak_verdict |" \
    "${measured_ms[$s]} / ${predicted_ms[$s]} = $(awk -v m="${measured_ms[$s]}" \
      -v p="${predicted_ms[$s]}" 'BEGIN { printf "%.2f", m / p }') |"
}

table() {
  echo "| size | micro-batch | fsdpgen tok/s | MFU | arena (driver) / plan MiB | torch eager tok/s |" \
    "torch compile tok/s | torch compile peak MiB | fsdpgen / compile | tok/s >= compile |" \
    "MFU >= $mfu_target_pct% (1.5b) | arena = plan (2 MiB pages) |" \
    "step ms measured / predicted (calibrated) |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|"
  for size in "${sizes[@]}"; do row "$size"; done
}

# header: the results entry's date, device, versions and method.
header() {
  local driver cuda nvcc_version torch_version
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | awk 'NR == 1')
  cuda=$(field "$(nvidia-smi 2>/dev/null)" 'CUDA Version: ([0-9.]+)')
  nvcc_version=$(field "$(nvcc --version 2>/dev/null)" 'release ([0-9.]+)')
  torch_version=$("$python" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)')
  echo "## $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $device_name"
  echo
  echo "- device: $device_name ($device_mib MiB), planned as \`--gpu $gpu_kind\`;" \
    "dense bf16 peak $peak_tflops TFLOP/s ($peak_source)"
  echo "- driver $driver, CUDA $cuda (driver), nvcc ${nvcc_version:-not found};" \
    "torch $torch_version"
  echo "- $steps steps a run: fsdpgen times steps 2 to $steps, PyTorch $steps steps after" \
    "$torch_warmup warm-up steps; world 1, bf16 params, fp32 reduce and master weights," \
    "sequence $context, no recompute"
  echo "- MFU = tokens/s x (6 N + 12 L T C) / peak, N parameters, L layers, T sequence, C width"
}

declare -A error micro_batch params_of flops_per_token tokens_per_s mfu_pct peak_mib planned_mib
declare -A predicted_ms measured_ms op_kinds
declare -A torch_tps torch_peak_mib kernels
detect_device
work=$(mktemp -d "${TMPDIR:-/tmp}/fsdpgen-bench-cuda.XXXXXX")
echo "device: $device_name ($device_mib MiB): planning with --gpu $gpu_kind;" \
  "MFU against $peak_tflops TFLOP/s dense bf16 ($peak_source)"
echo "MFU = tokens/s x flops per token / peak; flops per token = 6 N + 12 L T C (PaLM, nanoGPT," \
  "fsdpgen plan; llm.c counts 6 L T C for causal attention)"
ensure_fsdpgen
status=0
for size in "${sizes[@]}"; do
  bench "$size" || status=1
done
echo
results=$(
  header
  echo
  table
  for size in "${sizes[@]}"; do
    [ -n "${op_kinds[$size]:-}" ] || continue
    printf '\nPredicted (calibrated) against measured, one step of %s (`fsdpgen compare`):\n\n```\n%s\n```\n' \
      "$size" "${op_kinds[$size]}"
  done
  for size in "${sizes[@]}"; do
    [ -n "${kernels[$size]:-}" ] || continue
    printf '\nWhere one step of %s goes (ncu, `run.sh --profile`):\n\n%s\n' "$size" "${kernels[$size]}"
  done
)
table
printf '\n%s\n' "$results" >>"$here/RESULTS.md"
echo
echo "appended to $here/RESULTS.md; logs, specs and binaries in $work"
exit "$status"
