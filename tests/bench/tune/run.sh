#!/usr/bin/env bash
# CPU benchmark of `fsdpgen tune`: does the configuration it picks run
# fastest here? Calibrates this machine once (`fsdpgen calibrate`), then for
# each case below asks tune, with that profile, for every candidate that fits
# (--write-candidates), and measures the top 8 and 4 others drawn at random
# (seeded) and the spec as written: each the median step of STEPS steps
# after the first two, REPEATS times, interleaved (a shared VM's speed drifts
# within a minute), the fastest of the repeats kept (noise only adds time:
# on 2026-11-26 one binary's median step here varied 2x between repeats). Prints per case the
# tuned configuration's measured step against the best measured (target:
# within 5%), the Spearman rank correlation of predicted and measured steps
# over the measured candidates (target >= 0.8), and the measured speed-up of
# the tuned spec over the spec as written; appends the table to RESULTS.md
# beside this script. Figures come from the runs; nothing is asserted.
#   bash tests/bench/tune/run.sh [STEPS] [REPEATS] [CASE...]
#     STEPS 24, REPEATS 3; CASE: tiny:1 tiny:2 small-10m:1 small-10m:2 llama-tiny:2 (default all)
# Environment: FSDPGEN_BIN (else build/fsdpgen), PROFILE (a profile to use
# instead of calibrating), SEED (7: which other candidates are drawn), KEEP
# (non-empty: keep the work directory, its candidates and measurements).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
here="$root/tests/bench/tune"
fsdpgen="${FSDPGEN_BIN:-$root/build/fsdpgen}"
steps="${1:-24}"
repeats="${2:-3}"
shift $(($# > 2 ? 2 : $#))
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(tiny:1 tiny:2 small-10m:1 small-10m:2 llama-tiny:2)
seed="${SEED:-7}"
[[ $steps =~ ^[0-9]+$ ]] && [ "$steps" -ge 4 ] || { echo "run.sh: STEPS must be at least 4" >&2; exit 2; }
[[ $repeats =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: REPEATS must be a positive number" >&2; exit 2; }
for c in "${cases[@]}"; do
  [[ $c =~ ^[a-z0-9-]+:[1-9][0-9]*$ ]] && [ -f "$root/specs/${c%%:*}.fsdp" ] ||
    { echo "run.sh: bad case '$c' (SPEC:WORLD, SPEC in specs/)" >&2; exit 2; }
done
[ -x "$fsdpgen" ] || { echo "run.sh: no fsdpgen at $fsdpgen (build it first)" >&2; exit 2; }
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
work=$(mktemp -d)
if [ -n "${KEEP:-}" ]; then echo "work directory (kept): $work"; else trap 'rm -rf "$work"' EXIT; fi

profile="${PROFILE:-$work/profile.json}"
if [ -z "${PROFILE:-}" ]; then
  # calibrate measures gpt2's layers only: a llama case's profile lacks its
  # layers, which tune then takes from the built-in figures (its rows say so).
  specs=()
  for c in "${cases[@]}"; do
    grep -qE '^ *family *= *llama' "$root/specs/${c%%:*}.fsdp" || specs+=("specs/${c%%:*}.fsdp")
  done
  [ ${#specs[@]} -gt 0 ] || specs=(specs/tiny.fsdp)
  mapfile -t specs < <(printf '%s\n' "${specs[@]}" | sort -u)
  echo "calibrating this machine for ${specs[*]} ..."
  (cd "$root" && "$fsdpgen" calibrate "${specs[@]}" -o "$profile" >"$work/calibrate.log" 2>&1) ||
    { cat "$work/calibrate.log"; exit 1; }
fi

# median_step BIN WORLD: the median of the logged step times after the first two.
median_step() {
  local launch=("$1")
  [ "$2" -gt 1 ] && launch=(mpirun -n "$2" --bind-to none "$1")
  "${launch[@]}" --steps "$steps" --log-every 1 --data synthetic --val-every 0 \
    --checkpoint-every 0 2>&1 | grep -E '^step +[0-9]+/' | tail -n +3 |
    sed -nE 's#.*\| ([0-9.]+) ms \|.*#\1#p' | sort -g |
    awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}

table="| case | measured | tuned ms (measured) | best measured ms | tuned / best | Spearman | spec as written ms | speed-up |
|---|---:|---:|---:|---:|---:|---:|---:|"
for c in "${cases[@]}"; do
  spec="${c%%:*}" world="${c##*:}" dir="$work/$spec-$world"
  mkdir -p "$dir"
  (cd "$root" && "$fsdpgen" tune "specs/$spec.fsdp" --world "$world" --hardware "$profile" --top 200 \
    --write-candidates "$dir" >"$dir/tune.log" 2>&1) || { cat "$dir/tune.log"; exit 1; }
  # The top 8, 4 others drawn at random, and the spec as written (own).
  # --top 200 plans enough candidates in full that the others spread over
  # the predicted range: tune's top 8 are often within 1% of each other.
  mapfile -t chosen < <(awk -F'\t' -v seed="$seed" 'NR > 1 {
      if ($2 <= 8 || $5 == "yes") print $1; else rest[++n] = $1 }
    END { srand(seed); for (k = 0; k < 4 && n > 0; k++) { i = int(rand() * n) + 1; print rest[i];
      rest[i] = rest[n--] } }' "$dir/candidates.tsv")
  own=$(awk -F'\t' '$5 == "yes" { print $1 }' "$dir/candidates.tsv")
  for f in "${chosen[@]}"; do
    (cd "$dir" && "$fsdpgen" "$f" --target cpu -o "${f%.fsdp}.bin" >>"$dir/build.log" 2>&1) ||
      { tail -20 "$dir/build.log"; exit 1; }
  done
  : >"$dir/measured.tsv"
  for rep in $(seq 1 "$repeats"); do
    for f in "${chosen[@]}"; do
      printf '%s\t%s\n' "$f" "$(median_step "$dir/${f%.fsdp}.bin" "$world")" >>"$dir/measured.tsv"
    done
  done
  row=$(python3 - "$dir/candidates.tsv" "$dir/measured.tsv" "$own" <<'EOF'
import sys
index, measured, own = sys.argv[1], sys.argv[2], sys.argv[3]
predicted = {}
for line in open(index).read().splitlines()[1:]:
    f = line.split("\t")
    predicted[f[0]] = float(f[2])
runs = {}
for line in open(measured).read().splitlines():
    name, ms = line.split("\t")
    runs.setdefault(name, []).append(float(ms))
m = {name: min(v) for name, v in runs.items()}
names = sorted(m)
def ranks(values):
    order = sorted(range(len(values)), key=lambda i: values[i])
    r = [0.0] * len(values)
    i = 0
    while i < len(order):  # ties share their mean rank
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r
rp, rm = ranks([predicted[n] for n in names]), ranks([m[n] for n in names])
mean = (len(names) + 1) / 2
cov = sum((a - mean) * (b - mean) for a, b in zip(rp, rm))
var = (sum((a - mean) ** 2 for a in rp) * sum((b - mean) ** 2 for b in rm)) ** 0.5
rho = cov / var if var > 0 else float("nan")
tuned, best = m["candidate_001.fsdp"], min(m.values())
own_ms = m.get(own)
print(f"{len(names)} | {tuned:.2f} | {best:.2f} | {tuned / best:.3f} | {rho:.2f} | "
      + (f"{own_ms:.2f} | {own_ms / tuned:.2f}x" if own_ms else "does not fit | -"))
EOF
  )
  echo "$spec at world $world: $row"
  table+=$'\n'"| $spec, world $world | $row |"
done

echo
echo "$table"
{
  printf '\n## %s, %s\n\n' "$(date -u '+%Y-%m-%d %H:%M UTC')" "$(nproc) cores, $(uname -m)"
  printf -- '- fsdpgen %s; %s steps a run (median after the first two), %s repeats interleaved (the fastest kept); seed %s\n' \
    "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')" "$steps" "$repeats" "$seed"
  printf -- '- measured: the top 8 of tune (with this machine'"'"'s profile), 4 other fitting candidates drawn at random, and the spec as written\n\n'
  echo "$table"
} >>"$here/RESULTS.md"
echo "appended to $here/RESULTS.md"
