#!/usr/bin/env bash
# CPU benchmark of generated binaries and of the cost model. Each repetition
# calibrates this machine (`fsdpgen calibrate` on the specs below), then for
# the tiny spec and a ~10M-parameter spec, at 1 and 2 ranks, prints the step
# time the planner predicts from that profile, the step time measured (the
# median of the run's steps after the first two), their ratio, tokens/s, the
# fraction of communication hidden behind compute (from the measured trace
# of one step) and the arena the process grew by against the plan, and the
# same step predicted from the built-in 'cpu' figures (no calibration) with
# its ratio, and from the profile without its contention entries (each
# collective and layer pass as if alone, docs/calibrate.md) with its ratio;
# the summary gives each configuration's ratios over the
# repetitions (a shared
# VM's speed drifts by tens of percent within a minute: one run says
# little). Exits 1 when a configuration's median calibrated ratio leaves
# 0.9-1.1, naming it: on a quiet machine, the cost model has drifted from
# the runtime.
#   bash tests/bench/run.sh [STEPS] [REPEATS] [PROFILE]   (needs a built fsdpgen in build/;
#   PROFILE: use this profile in every repetition instead of calibrating)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
fsdpgen="${FSDPGEN_BIN:-$root/build/fsdpgen}"
steps="${1:-24}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
specs=(tiny small-10m)

# field LINE REGEX: the first capture group of REGEX in LINE.
field() { sed -nE "s#.*$2.*#\1#p" <<<"$1" | head -1; }

repeats="${2:-3}"
fixed_profile="${3:-}"
declare -A ratios builtin_ratios alone_ratios

row='%-4s %-10s %5s %13s %13s %7s %10s %8s %20s %12s %9s %10s %9s\n'
printf "$row" rep spec ranks "predicted ms" "measured ms" ratio tokens/s hidden "arena (plan) MiB" \
  "built-in ms" "ratio b" "alone ms" "ratio a"
for rep in $(seq 1 "$repeats"); do
  profile="${fixed_profile:-$work/profile.json}"
  if [ -z "$fixed_profile" ]; then
    paths=()
    for spec in "${specs[@]}"; do paths+=("specs/$spec.fsdp"); done
    (cd "$root" && "$fsdpgen" calibrate "${paths[@]}" -o "$profile" >"$work/calibrate.log") ||
      { cat "$work/calibrate.log"; exit 1; }
  fi
  python3 -c 'import json, sys
p = json.load(open(sys.argv[1])); p.pop("contention", None); json.dump(p, open(sys.argv[2], "w"))' \
    "$profile" "$work/alone.json"
  for spec in "${specs[@]}"; do
    for ranks in 1 2; do
      bin="$work/$spec-$ranks"
      [ -x "$bin" ] || (cd "$root" && "$fsdpgen" "specs/$spec.fsdp" --target cpu --world "$ranks" \
        -o "$bin" >/dev/null)
      # predicted SOURCE...: the step `fsdpgen plan` predicts with those figures.
      predicted() {
        (cd "$root" && "$fsdpgen" plan "specs/$spec.fsdp" --world "$ranks" "$@") |
          sed -nE 's#^predicted step of .* on .*: ([0-9.]+) ms#\1#p'
      }
      predicted=$(predicted --hardware "$profile")
      builtin=$(predicted --gpu cpu)
      alone=$(predicted --hardware "$work/alone.json")
      launch=("$bin")
      [ "$ranks" -gt 1 ] && launch=(mpirun -n "$ranks" --bind-to none "$bin")
      out=$("${launch[@]}" --steps "$steps" --log-every 1 --trace "$work/trace.json" \
        --trace-step $((steps - 1)) 2>&1) || { echo "$out"; exit 1; }
      # The median of the logged step times after the first two (warm-up).
      measured=$(grep -E '^step +[0-9]+/' <<<"$out" | tail -n +3 |
        sed -nE 's#.*\| ([0-9.]+) ms \|.*#\1#p' | sort -g |
        awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }')
      tokens=$(field "$(grep '^done:' <<<"$out")" '\| ([0-9,]+) tok/s' | tr -d ,)
      hidden=$(field "$(grep '^trace:' <<<"$out")" 'compute: ([0-9]+%)')
      arena_line=$(grep '^  arena ' <<<"$out")
      arena="$(field "$arena_line" 'arena ([0-9.]+) MiB') ($(field "$arena_line" 'planned peak ([0-9.]+)'))"
      ratio=$(awk -v m="$measured" -v p="$predicted" 'BEGIN { printf "%.2f", m / p }')
      builtin_ratio=$(awk -v m="$measured" -v p="$builtin" 'BEGIN { printf "%.2f", m / p }')
      alone_ratio=$(awk -v m="$measured" -v p="$alone" 'BEGIN { printf "%.2f", m / p }')
      ratios[$spec-$ranks]+="$ratio "
      builtin_ratios[$spec-$ranks]+="$builtin_ratio "
      alone_ratios[$spec-$ranks]+="$alone_ratio "
      printf "$row" "$rep" "$spec" "$ranks" "$predicted" "$measured" "$ratio" "$tokens" \
        "${hidden:-no comm}" "$arena" "$builtin" "$builtin_ratio" "$alone" "$alone_ratio"
    done
  done
done
# summary TITLE ARRAY: each configuration's median, min and max ratio.
summary() {
  local -n all=$2
  echo "$1, per configuration over $repeats repetition(s):"
  for spec in "${specs[@]}"; do
    for ranks in 1 2; do
      tr ' ' '\n' <<<"${all[$spec-$ranks]}" | grep . | sort -g |
        awk -v s="$spec" -v r="$ranks" '{ v[NR] = $1 } END {
          m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
          printf "  %-10s %d rank%s  median %.2f  (min %.2f, max %.2f)\n", s, r, (r > 1 ? "s" : " "), m, v[1], v[NR] }'
    done
  done
}
echo
summary "ratio = measured / predicted step time, calibrated profile" ratios
summary "ratio b = measured / predicted step time, built-in 'cpu' figures" builtin_ratios
summary "ratio a = measured / predicted step time, the profile without its contention entries" \
  alone_ratios

# The calibrated prediction's target: every configuration's median ratio in
# 0.9-1.1. Exit 1 naming those outside (on a quiet machine, a real drift).
outside=()
for key in "${!ratios[@]}"; do
  median=$(tr ' ' '\n' <<<"${ratios[$key]}" | grep . | sort -g |
    awk '{ v[NR] = $1 } END { printf "%.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
  awk -v m="$median" 'BEGIN { exit !(m < 0.9 || m > 1.1) }' && outside+=("$key $median")
done
if [ ${#outside[@]} -gt 0 ]; then
  echo "check: calibrated median ratio outside 0.9-1.1: ${outside[*]}"
  exit 1
fi
echo "check: every calibrated median ratio within 0.9-1.1"
