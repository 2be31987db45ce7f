#!/usr/bin/env bash
# Muon against AdamW on the CPU, small-10m at 2 ranks (issue 36's benchmark;
# figures come from the runs, nothing is asserted; tests/bench/muon/RESULTS.md
# holds what they gave):
#   tokens: small-10m's train section with a real text (Python's own
#     documentation, pydoc_data.topics, bytes: 90% train, the last 10%
#     validation) and a validation every 10 steps; AdamW at each lr of
#     ADAMW_LRS, then Muon at each lr of MUON_LRS with its nested AdamW at the
#     AdamW lr whose final validation loss was lowest; then the best of each
#     again with seed 1338. Each run warms up 10 steps and decays by cosine
#     to a tenth of its lr. summary.py prints the tokens each run needed to
#     reach a target validation loss every seed of the two best lrs reaches
#     and the validation curves.
#   step time: small-10m as it is (synthetic data) with its AdamW against the
#     same with muon(adamw = its adamw): the step the planner predicts
#     (`fsdpgen plan --world 2`) and the median step measured over STEPS_T
#     steps after 2 of warm-up, the two binaries alternated REPEATS times so
#     that a shared machine's drift falls on both.
#   bash tests/bench/muon/run.sh [STEPS] [STEPS_T] [REPEATS]
#   (STEPS 120, STEPS_T 20, REPEATS 3; ADAMW_LRS="3e-4 1e-3 3e-3",
#   MUON_LRS="0.01 0.02 0.05", PARTS="tokens time" in the environment;
#   needs build/fsdpgen or FSDPGEN_BIN; WORK=DIR keeps the runs there;
#   LOCK=/tmp/fsdpgen-build.lock: held around the timed runs, where others
#   build on the same cores)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
fsdpgen="${FSDPGEN_BIN:-$root/build/fsdpgen}"
steps="${1:-120}"
steps_t="${2:-20}"
repeats="${3:-3}"
adamw_lrs=(${ADAMW_LRS:-3e-4 1e-3 3e-3})
muon_lrs=(${MUON_LRS:-0.01 0.02 0.05})
parts="${PARTS:-tokens time}"
[ "$steps" -ge 20 ] 2>/dev/null && [ "$steps_t" -ge 3 ] 2>/dev/null ||
  { echo "usage: bash tests/bench/muon/run.sh [STEPS >= 20] [STEPS_T >= 3] [REPEATS]" >&2; exit 2; }
[ -x "$fsdpgen" ] || { echo "run.sh: no fsdpgen at $fsdpgen (build it: ninja -C build fsdpgen)" >&2; exit 2; }
if [ -n "${WORK:-}" ]; then work=$WORK; mkdir -p "$work"; else  # WORK: keep the runs there
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
adamw_rest="betas = (0.9, 0.95), eps = 1e-8, weight_decay = 0.1"  # small-10m's

# with_train OUT LINES: specs/small-10m.fsdp with its train entries named in
# LINES (one "key = value" a line) replaced, the others kept.
with_train() {
  python3 - "$root/specs/small-10m.fsdp" "$1" "$2" <<'EOF'
import re, sys
spec, out, lines = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3].strip().splitlines()
new = {l.split("=")[0].strip(): l.strip() for l in lines}
head, body, tail = re.match(r"(.*\ntrain \{\n)(.*?)(\n\}.*)", spec, re.S).groups()
kept = [l for l in body.splitlines() if l.split("=")[0].strip() not in new]
open(out, "w").write(head + "\n".join(kept + ["  " + l for l in new.values()]) + tail)
EOF
}

# build NAME: $work/NAME.fsdp into the CPU binary at 2 ranks, $work/NAME.bin.
build() {
  (cd "$work" && "$fsdpgen" "$1.fsdp" --target cpu --world 2 -o "$1.bin" >"$1.build.log" 2>&1) ||
    { cat "$work/$1.build.log"; exit 1; }
}

# run NAME ARGS...: the binary at 2 ranks in $work, its log in $work/NAME.log.
run() {
  local name=$1
  shift
  (cd "$work" && mpirun -n 2 --bind-to none "./$name.bin" "$@" >"$name.log" 2>&1) ||
    { cat "$work/$name.log"; echo "run.sh: $name $* failed" >&2; exit 1; }
}

if [[ " $parts " == *" tokens "* ]]; then
  python3 -c '
import pydoc_data.topics as t, sys
b = "\n\n".join(t.topics[k] for k in sorted(t.topics)).encode()
cut = len(b) - len(b) // 10
open(sys.argv[1] + "/train.txt", "wb").write(b[:cut])
open(sys.argv[1] + "/val.txt", "wb").write(b[cut:])
print("data: Python %s pydoc_data.topics, %d bytes: %d train, %d validation" % (sys.version.split()[0], len(b), cut, len(b) - cut))' "$work"
  data='data = text("train.txt")
val = text("val.txt")
val_every = 10
val_sequences = 32
log_every = 10'
  echo "tokens: $steps steps of 2,048 tokens (2 ranks x 4 x 256), validation loss on 32 sequences (8,192 tokens) every 10 steps"
  # train NAME OPTIMIZER LR SEED: a run, its metrics in $work/NAME.jsonl.
  train() {
    with_train "$work/$1.fsdp" "optimizer = $2
lr_schedule = cosine(warmup = 10, min = $(python3 -c "print('%g' % ($3 / 10))"))
steps = $steps
seed = $4
$data"
    build "$1"
    local start=$SECONDS
    run "$1" --metrics "$1.jsonl"
    echo "  $1: $(grep -E '^done:' "$work/$1.log") ($((SECONDS - start)) s)"
  }
  # final NAME: the last validation loss of a run.
  final() { python3 -c '
import json, sys
print([r["val_loss"] for r in map(json.loads, open(sys.argv[1])) if "val_loss" in r][-1])' "$work/$1.jsonl"; }
  runs=()
  for lr in "${adamw_lrs[@]}"; do
    train "adamw-$lr" "adamw(lr = $lr, $adamw_rest)" "$lr" 1337
    runs+=("adamw-$lr")
  done
  best_adamw=$(for lr in "${adamw_lrs[@]}"; do echo "$(final "adamw-$lr") $lr"; done | sort -g | head -1 | cut -d' ' -f2)
  echo "best AdamW lr: $best_adamw (the nested AdamW of every Muon run)"
  for lr in "${muon_lrs[@]}"; do
    train "muon-$lr" "muon(lr = $lr, adamw = adamw(lr = $best_adamw, $adamw_rest))" "$lr" 1337
    runs+=("muon-$lr")
  done
  best_muon=$(for lr in "${muon_lrs[@]}"; do echo "$(final "muon-$lr") $lr"; done | sort -g | head -1 | cut -d' ' -f2)
  train "adamw-$best_adamw-seed1338" "adamw(lr = $best_adamw, $adamw_rest)" "$best_adamw" 1338
  train "muon-$best_muon-seed1338" "muon(lr = $best_muon, adamw = adamw(lr = $best_adamw, $adamw_rest))" \
    "$best_muon" 1338
  runs+=("adamw-$best_adamw-seed1338" "muon-$best_muon-seed1338")
  python3 "$root/tests/bench/muon/summary.py" "$work" "adamw-$best_adamw" "muon-$best_muon" "${runs[@]}"
fi

if [[ " $parts " == *" time "* ]]; then
  with_train "$work/t-adamw.fsdp" "optimizer = adamw(lr = 6e-4, $adamw_rest)"
  with_train "$work/t-muon.fsdp" "optimizer = muon(lr = 0.02, adamw = adamw(lr = 6e-4, $adamw_rest))"
  build t-adamw
  build t-muon
  predicted() { (cd "$work" && "$fsdpgen" plan "$1.fsdp" --world 2) | sed -nE 's#^predicted step of .* on .*: ([0-9.]+) ms#\1#p'; }
  p_adamw=$(predicted t-adamw)
  p_muon=$(predicted t-muon)
  # median_ms NAME: the median step of a run's metrics after the first two.
  median_ms() { python3 -c '
import json, statistics, sys
print("%.1f" % statistics.median([r["ms"] for r in map(json.loads, open(sys.argv[1]))][2:]))' "$work/$1.jsonl"; }
  echo
  echo "step time: small-10m (synthetic data) at 2 ranks, $steps_t steps after 2 of warm-up, median ms"
  printf '%-4s %10s %10s %7s\n' rep adamw muon ratio
  timed() {
    declare -a ratios
    for rep in $(seq 1 "$repeats"); do
      run t-adamw --steps $((steps_t + 2)) --log-every 1 --metrics t-adamw.jsonl
      run t-muon --steps $((steps_t + 2)) --log-every 1 --metrics t-muon.jsonl
      a=$(median_ms t-adamw)
      m=$(median_ms t-muon)
      ratios+=("$(awk -v a="$m" -v b="$a" 'BEGIN { printf "%.3f", a / b }')")
      printf '%-4s %10s %10s %7s\n' "$rep" "$a" "$m" "${ratios[-1]}"
    done
    echo "measured muon / adamw, median over $repeats: $(printf '%s\n' "${ratios[@]}" | sort -g |
      awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }')"
  }
  if [ -n "${LOCK:-}" ]; then
    exec 9>"$LOCK"
    flock 9
  fi
  timed
  if [ -n "${LOCK:-}" ]; then flock -u 9; fi
  echo "predicted: adamw $p_adamw ms, muon $p_muon ms: muon / adamw $(awk -v a="$p_muon" -v b="$p_adamw" 'BEGIN { printf "%.3f", a / b }')"
fi
