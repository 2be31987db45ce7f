#!/usr/bin/env bash
# CPU benchmark of generated binaries: for the tiny spec and a ~10M-parameter
# spec, at 1 and 2 ranks on this machine, prints tokens/s, the fraction of
# communication time hidden behind compute (from the measured trace of one
# step), the arena per rank as the kernel counts it against the plan and the
# process's peak resident set, then the ratios. Figures come from one run of each binary; nothing is asserted.
#   bash tests/bench/run.sh [STEPS]      (needs a built fsdpgen in build/)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
fsdpgen="${FSDPGEN_BIN:-$root/build/fsdpgen}"
steps="${1:-12}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

# field LINE REGEX: the first capture group of REGEX in LINE.
field() { sed -nE "s#.*$2.*#\1#p" <<<"$1" | head -1; }

declare -A tps
printf '%-10s %5s %12s %10s %14s %14s %14s\n' spec ranks tokens/s hidden "arena MiB" "planned MiB" \
  "process MiB"
for spec in tiny small-10m; do
  for ranks in 1 2; do
    bin="$work/$spec-$ranks"
    (cd "$root" && "$fsdpgen" "specs/$spec.fsdp" --target cpu --world "$ranks" -o "$bin" >/dev/null)
    launch=("$bin")
    [ "$ranks" -gt 1 ] && launch=(mpirun -n "$ranks" --bind-to none "$bin")
    out=$("${launch[@]}" --steps "$steps" --log-every 1000 --trace "$work/trace.json" \
      --trace-step $((steps - 1)) 2>&1) || { echo "$out"; exit 1; }
    done_line=$(grep '^done:' <<<"$out")
    memory_line=$(grep '^memory per rank' <<<"$out")
    trace_line=$(grep '^trace:' <<<"$out")
    t=$(field "$done_line" '\| ([0-9,]+) tok/s' | tr -d ,)
    tps[$spec-$ranks]=$t
    hidden=$(field "$trace_line" 'compute: ([0-9]+%)')
    printf '%-10s %5s %12s %10s %14s %14s %14s\n' "$spec" "$ranks" "$t" "${hidden:-no comm}" \
      "$(field "$memory_line" 'arena ([0-9.]+) MiB resident')" \
      "$(field "$memory_line" 'planned ([0-9.]+) MiB')" \
      "$(field "$memory_line" 'process ([0-9.]+) MiB resident at most')"
  done
done
echo
for spec in tiny small-10m; do
  awk -v a="${tps[$spec-1]}" -v b="${tps[$spec-2]}" -v s="$spec" \
    'BEGIN { printf "%s: 2 ranks / 1 rank tokens/s = %.2f (per-rank micro-batch fixed; 2 cores)\n", s, b / a }'
done
