#!/usr/bin/env bash
# CPU benchmark of generated binaries and of the cost model: calibrates this
# machine once (`fsdpgen calibrate` on the specs below), then for the tiny
# spec and a ~10M-parameter spec, at 1 and 2 ranks, prints the step time the
# planner predicts from that profile, the step time measured (the median of
# the run's steps after the first two), their ratio, tokens/s, the fraction of
# communication hidden behind compute (from the measured trace of one step)
# and the arena per rank as the kernel counts it against the plan. Figures
# come from one run of each binary; nothing is asserted.
#   bash tests/bench/run.sh [STEPS] [PROFILE]   (needs a built fsdpgen in build/;
#   PROFILE: an existing profile to use instead of calibrating)
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

profile="${2:-$work/profile.json}"
if [ -z "${2:-}" ]; then
  paths=()
  for spec in "${specs[@]}"; do paths+=("specs/$spec.fsdp"); done
  (cd "$root" && "$fsdpgen" calibrate "${paths[@]}" -o "$profile" | tail -1)
fi

printf '%-10s %5s %13s %13s %7s %10s %8s %11s %11s\n' spec ranks "predicted ms" "measured ms" \
  ratio tokens/s hidden "arena MiB" "planned MiB"
for spec in "${specs[@]}"; do
  for ranks in 1 2; do
    bin="$work/$spec-$ranks"
    (cd "$root" && "$fsdpgen" "specs/$spec.fsdp" --target cpu --world "$ranks" -o "$bin" >/dev/null)
    predicted=$(cd "$root" && "$fsdpgen" plan "specs/$spec.fsdp" --world "$ranks" \
      --hardware "$profile" | field "$(cat)" 'predicted step of .* on .*: ([0-9.]+) ms')
    launch=("$bin")
    [ "$ranks" -gt 1 ] && launch=(mpirun -n "$ranks" --bind-to none "$bin")
    out=$("${launch[@]}" --steps "$steps" --log-every 1 --trace "$work/trace.json" \
      --trace-step $((steps - 1)) 2>&1) || { echo "$out"; exit 1; }
    # The median of the logged step times after the first two (warm-up).
    measured=$(grep -E '^step +[0-9]+/' <<<"$out" | tail -n +3 |
      sed -nE 's#.*\| ([0-9.]+) ms \|.*#\1#p' | sort -g |
      awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }')
    memory_line=$(grep '^memory per rank' <<<"$out")
    trace_line=$(grep '^trace:' <<<"$out")
    tokens=$(field "$(grep '^done:' <<<"$out")" '\| ([0-9,]+) tok/s' | tr -d ,)
    hidden=$(field "$trace_line" 'compute: ([0-9]+%)')
    ratio=$(awk -v m="$measured" -v p="$predicted" 'BEGIN { printf "%.2f", m / p }')
    printf '%-10s %5s %13s %13s %7s %10s %8s %11s %11s\n' "$spec" "$ranks" "$predicted" \
      "$measured" "$ratio" "$tokens" "${hidden:-no comm}" \
      "$(field "$memory_line" 'arena ([0-9.]+) MiB resident')" \
      "$(field "$memory_line" 'planned ([0-9.]+) MiB')"
  done
done
echo "ratio = measured / predicted step time (profile: $profile)"
