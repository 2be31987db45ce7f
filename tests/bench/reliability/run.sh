#!/usr/bin/env bash
# What fsdpgen's guards cost on the CPU, as ratios measured in one run (each
# repetition runs every pair back to back, so that a shared VM's drift falls
# on both sides of a ratio; nothing is asserted):
#   watchdog:    tiny at 2 ranks, with the watchdog against --no-watchdog
#   guard:       tiny at 2 ranks, with guard { loss_z = 6  norm_z = 6 } (its
#                loss all-reduce in every step) against without
#   checkpoints: small-10m at 2 ranks, a checkpoint every 5 steps written behind
#                the next steps against --checkpoint-sync: the stall of a
#                checkpoint's step (checkpoint_stall_s in --metrics) against the
#                median step
#   bash tests/bench/reliability/run.sh [STEPS] [REPEATS]   (STEPS 30, REPEATS 3; needs build/fsdpgen)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
fsdpgen="${FSDPGEN_BIN:-$root/build/fsdpgen}"
steps="${1:-30}"
repeats="${2:-3}"
[ "$steps" -ge 10 ] 2>/dev/null || { echo "usage: bash tests/bench/reliability/run.sh [STEPS >= 10] [REPEATS]" >&2; exit 2; }
[ -x "$fsdpgen" ] || { echo "run.sh: no fsdpgen at $fsdpgen (build it: ninja -C build fsdpgen)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

# with_train SPEC LINE OUT: SPEC with LINE added at the end of its train section.
with_train() {
  awk -v line="$2" '
    /^train[ \t]*\{/ { t = 1 }
    t && /^\}/ { print line; t = 0 }
    { print }' "$1" >"$3"
}

# build NAME SPEC: the CPU binary at 2 ranks, $work/NAME.bin.
build() {
  (cd "$root" && "$fsdpgen" "$2" --target cpu --world 2 -o "$work/$1.bin" >"$work/$1.build.log" 2>&1) ||
    { cat "$work/$1.build.log"; exit 1; }
}

# median_ms OUT: the median of the logged step times after the first two.
median_ms() {
  grep -E '^step +[0-9]+/' <<<"$1" | tail -n +3 | sed -nE 's#.*\| ([0-9.]+) ms \|.*#\1#p' |
    sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}

# run NAME ARGS...: the binary at 2 ranks in $work, its output.
run() {
  local name=$1
  shift
  local out
  out=$(cd "$work" && mpirun -n 2 --bind-to none "$work/$name.bin" --steps "$steps" --log-every 1 \
    --val-every 0 "$@" 2>&1) || { printf '%s\nrun.sh: %s %s failed\n' "$out" "$name" "$*" >&2; exit 1; }
  echo "$out"
}

# (Both specs read synthetic data: they build from anywhere.)
with_train "$root/specs/tiny.fsdp" "  guard { loss_z = 6  norm_z = 6  window = 20 }" "$work/guard.fsdp"
with_train "$root/specs/small-10m.fsdp" "  checkpoint(every = 5, dir = \"ck\", keep = 1)" \
  "$work/ckpt.fsdp"
build tiny "$root/specs/tiny.fsdp"
build guard "$work/guard.fsdp"
build ckpt "$work/ckpt.fsdp"

# stall_stats METRICS: the mean checkpoint_stall_s (ms) of the checkpoint
# steps but the last (which waits for its own write at the end).
stall_ms() {
  python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
s = [r["checkpoint_stall_s"] for r in rows if "checkpoint_stall_s" in r][:-1]
print("%.1f" % (1e3 * sum(s) / len(s)) if s else "-")' "$1"
}

printf '%-4s %-12s %10s %10s %7s   %-12s %10s %10s %7s   %-22s %10s %10s %8s\n' rep \
  watchdog "on ms" "off ms" ratio guard "on ms" "off ms" ratio "checkpoint stall" "behind ms" \
  "sync ms" "step ms"
declare -a w_ratios g_ratios c_behind c_sync c_step
for rep in $(seq 1 "$repeats"); do
  on=$(median_ms "$(run tiny)")
  off=$(median_ms "$(run tiny --no-watchdog)")
  g_on=$(median_ms "$(run guard)")
  g_off=$(median_ms "$(run tiny)")
  rm -rf "$work/ck"
  behind_out=$(run ckpt --metrics "$work/behind.jsonl")
  rm -rf "$work/ck"
  run ckpt --checkpoint-sync --metrics "$work/sync.jsonl" >/dev/null
  behind=$(stall_ms "$work/behind.jsonl")
  sync=$(stall_ms "$work/sync.jsonl")
  step=$(median_ms "$behind_out")
  wr=$(awk -v a="$on" -v b="$off" 'BEGIN { printf "%.3f", a / b }')
  gr=$(awk -v a="$g_on" -v b="$g_off" 'BEGIN { printf "%.3f", a / b }')
  w_ratios+=("$wr") g_ratios+=("$gr") c_behind+=("$behind") c_sync+=("$sync") c_step+=("$step")
  printf '%-4s %-12s %10s %10s %7s   %-12s %10s %10s %7s   %-22s %10s %10s %8s\n' "$rep" "" "$on" \
    "$off" "$wr" "" "$g_on" "$g_off" "$gr" "" "$behind" "$sync" "$step"
done

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
echo
echo "medians over $repeats repetition(s), $steps steps a run, 2 ranks:"
echo "  watchdog: step time with / without $(median "${w_ratios[@]}")"
echo "  guard (loss_z and norm_z): step time with / without $(median "${g_ratios[@]}")"
echo "  checkpoint of small-10m every 5 steps: the step stalls $(median "${c_behind[@]}") ms" \
  "written behind the next steps, $(median "${c_sync[@]}") ms with --checkpoint-sync" \
  "(a step takes $(median "${c_step[@]}") ms)"
