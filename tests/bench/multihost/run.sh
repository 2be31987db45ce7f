#!/usr/bin/env bash
# tests/bench/multihost/run.sh: full_shard against hybrid_shard across 2
# namespace hosts (tests/slurm/cluster.sh), their links shaped slower than
# shared memory within a host, measured and predicted.
#
#   bash tests/bench/multihost/run.sh [RATE] [STEPS] [REPEATS]
#
# RATE (default 100mbit; "none": unshaped) shapes each host's link both ways
# (tbf). Builds tests/slurm/hosts.fsdp (world 4, ranks_per_node 2, the same
# global batch) as full_shard and hybrid_shard, runs each REPEATS times
# (default 3), alternating, under srun -N 2 --ntasks-per-node 2 --mpi=pmix
# for STEPS steps (default 20), and prints the median step time of each
# (the --metrics "ms" of steps 3..STEPS, the median over steps, then over
# repeats), their ratio, the plan's predicted step of each from a profile
# calibrated across the two hosts (fsdpgen calibrate --nodes 2 --request,
# measured by srun -N 2 --ntasks-per-node 2: the collectives of groups that
# span the hosts run over the shaped links) and from the built-in `cpu`
# figures, their ratios, and how `fsdpgen tune` ranks the shardings with each.
# Needs what cluster.sh needs (root, Slurm, munge, namespaces).
set -euo pipefail

HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
ROOT=$(readlink -f "$HERE/../../..")
RATE=${1:-100mbit}
STEPS=${2:-20}
REPEATS=${3:-3}
FSDPGEN=${FSDPGEN:-$ROOT/build/fsdpgen}

if [[ -z ${CLUSTER_ON:-} ]]; then
    shape=()
    [[ $RATE == none ]] || shape=(--rate "$RATE")
    exec bash "$ROOT/tests/slurm/cluster.sh" --hosts 2 "${shape[@]}" -- \
        env FSDPGEN="$FSDPGEN" bash "$HERE/run.sh" "$RATE" "$STEPS" "$REPEATS"
fi

S=$CLUSTER_SHARED
for sharding in full_shard hybrid_shard; do
    sed -E "s/^( *sharding *= *)hybrid_shard\$/\\1$sharding/" "$ROOT/tests/slurm/hosts.fsdp" \
        >"$S/$sharding.fsdp"
    "$FSDPGEN" "$S/$sharding.fsdp" --target cpu -o "$S/$sharding" >/dev/null
done

median_ms() {
    python3 - "$@" <<'PY'
import json, statistics, sys
per_run = []
for path in sys.argv[1:]:
    with open(path) as f:
        ms = [r["ms"] for r in map(json.loads, f) if r["step"] >= 3]
    per_run.append(statistics.median(ms))
print(f"{statistics.median(per_run):.2f}")
PY
}

for ((i = 1; i <= REPEATS; i++)); do
    for sharding in full_shard hybrid_shard; do
        timeout 600 srun -N 2 --ntasks-per-node 2 --mpi=pmix "$S/$sharding" --steps "$STEPS" \
            --metrics "$S/$sharding.$i.jsonl" >"$S/$sharding.$i.out" 2>&1
    done
done

# The calibration across both hosts (collectives of groups spanning them measured
# over the shaped links), as `fsdpgen calibrate --nodes 2 --request` prints it.
"$FSDPGEN" calibrate "$S/full_shard.fsdp" "$S/hybrid_shard.fsdp" --target cpu --ranks 2 --nodes 2 \
    --quick --request "$S/request.json" >"$S/request.out"
measure=$(sed -nE 's/^  (srun .*)$/\1/p' "$S/request.out")
[[ $measure == *PROFILE.json* ]] || { cat "$S/request.out"; exit 1; }
measure=${measure/PROFILE.json/$S/profile.json}
start=$SECONDS
timeout 1200 $measure >"$S/calibrate.out" 2>&1 ||
    { tail -20 "$S/calibrate.out"; exit 1; }
calibrated_s=$((SECONDS - start))

echo "link between hosts: ${RATE} (each host's link, both ways); within a host: shared memory"
echo "calibrated across the 2 hosts in ${calibrated_s} s: $measure"
declare -A measured predicted calibrated
for sharding in full_shard hybrid_shard; do
    measured[$sharding]=$(median_ms "$S"/$sharding.*.jsonl)
    predicted[$sharding]=$("$FSDPGEN" plan "$S/$sharding.fsdp" --gpu cpu |
        sed -nE 's/^predicted step of .*: ([0-9.]+) ms$/\1/p')
    calibrated[$sharding]=$("$FSDPGEN" plan "$S/$sharding.fsdp" --hardware "$S/profile.json" |
        sed -nE 's/^predicted step of .*: ([0-9.]+) ms$/\1/p')
    echo "$sharding: measured ${measured[$sharding]} ms/step (median of $REPEATS runs of" \
         "$STEPS steps), predicted ${calibrated[$sharding]} ms (the calibrated profile)," \
         "${predicted[$sharding]} ms (built-in cpu figures)"
done
awk -v a="${measured[full_shard]}" -v b="${measured[hybrid_shard]}" \
    -v c="${calibrated[full_shard]}" -v d="${calibrated[hybrid_shard]}" \
    -v e="${predicted[full_shard]}" -v f="${predicted[hybrid_shard]}" \
    'BEGIN { printf "full_shard / hybrid_shard: measured %.2fx, predicted %.2fx calibrated, %.2fx built-in\n", a / b, c / d, e / f }'
"$FSDPGEN" plan "$S/full_shard.fsdp" --hardware "$S/profile.json" | grep -E '^  figures'
for hw in "--hardware $S/profile.json" "--gpu cpu"; do
    echo "fsdpgen tune $hw (only the sharding varies):"
    "$FSDPGEN" tune "$S/full_shard.fsdp" $hw --top 6 \
        --keep units recompute offload micro_batch reduce prefetch precision 2>&1 |
        sed -n '/fastest that fit/,/ranks [0-9]* of/p'
done
