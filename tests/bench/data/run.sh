#!/usr/bin/env bash
# Data benchmark (not a test): a token set of SIZE_GB split into FILES llm.c
# token files, read by a training binary on RANKS ranks. Reports what opening
# it costs (the time from launch to the banner and to the first step's line)
# and each rank's resident memory before its first batch and at most,
# split into private memory (RssAnon: the arena and the process) and mapped
# file pages (RssFile: its shared libraries and the token files' pages it
# touched, shared with the other ranks through the page cache). A loader that read the set into every
# rank would hold SIZE_GB of private memory per rank. Figures come from the
# run; nothing is asserted.
#   bash tests/bench/data/run.sh [SIZE_GB] [FILES] [RANKS] [SPEC]
#   (defaults 4, 20, 2, specs/tiny.fsdp; needs a built fsdpgen in build/, or FSDPGEN_BIN)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
fsdpgen="${FSDPGEN_BIN:-$root/build/fsdpgen}"
size_gb="${1:-4}"
files="${2:-20}"
ranks="${3:-2}"
spec="${4:-$root/specs/tiny.fsdp}"
steps=20
work=$(mktemp -d "${TMPDIR:-/tmp}/fsdpgen-data-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

vocab=$(sed -nE 's/^ *vocab *= *([0-9]+).*/\1/p' "$spec" | head -1)
tokens_per_file=$(python3 -c "print(int($size_gb * 2**30 / 2 / $files))")
echo "writing $files files of $tokens_per_file tokens (vocab $vocab) into $work ..."
start=$(date +%s.%N)
python3 "$root/tests/bench/data/write_tokens.py" "$work/set" "$files" "$tokens_per_file" "$vocab"
echo "  written in $(python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')") s: $(du -sh "$work/set" | cut -f1)"
"$fsdpgen" "$spec" --world "$ranks" --target cpu -o "$work/train" >/dev/null

# Drop the set from the page cache where we may (root), so that the first
# step reads from the disk as on a fresh node; otherwise say it is warm.
if sync && echo 1 >/proc/sys/vm/drop_caches 2>/dev/null; then cache="cold page cache"; else
  cache="warm page cache (cannot drop it here)"; fi

log="$work/log"
start=$(date +%s.%N)
(cd "$work" && mpirun -n "$ranks" --oversubscribe --bind-to none ./train --steps "$steps" \
  --data "$work/set/bench_train_*.bin" --val "$work/set/bench_val_000000.bin" \
  --val-every 10 --val-sequences 64 >"$log" 2>&1) &
launcher=$!
banner=""
first=""
declare -A before after
# rss PID: "RssAnon RssFile" in kB.
rss() { awk '/^RssAnon/{a=$2} /^RssFile/{f=$2} END{print a" "f}' "/proc/$1/status" 2>/dev/null; }
while kill -0 "$launcher" 2>/dev/null; do
  now=$(python3 -c "import time; print(time.time())")
  pids=$(pgrep -f "^./train --steps $steps" || true)
  if [ -z "$banner" ] && grep -q "^  data: " "$log" 2>/dev/null; then banner=$now; fi
  if [ -z "$first" ]; then
    for p in $pids; do before[$p]=$(rss "$p"); done
    if grep -qE "^step +1/" "$log" 2>/dev/null; then first=$now; fi
  fi
  for p in $pids; do  # the most each rank held, private and mapped, over the run
    r=$(rss "$p")
    [ -n "$r" ] || continue
    read -r a f <<<"$r"
    read -r pa pf <<<"${after[$p]:-0 0}"
    after[$p]="$((a > pa ? a : pa)) $((f > pf ? f : pf))"
  done
  sleep 0.05
done
wait "$launcher" || { cat "$log"; exit 1; }
grep -E "^  data: |^  val: |val loss|^done" "$log"
python3 - "$start" "$banner" "$first" "$size_gb" "$files" "$ranks" "$cache" <<PY
import sys
start, banner, first = (float(x) if x else None for x in sys.argv[1:4])
size_gb, files, ranks, cache = sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7]
print(f"set: {size_gb} GiB in {files} files, {ranks} ranks, {cache}")
if banner: print(f"launch to banner (set checked and mapped): {banner - start:.2f} s")
if first: print(f"launch to the first step's line: {first - start:.2f} s")
before = """$(for p in "${!before[@]}"; do echo "$p ${before[$p]}"; done)"""
after = """$(for p in "${!after[@]}"; do echo "$p ${after[$p]}"; done)"""
b = {l.split()[0]: l.split()[1:] for l in before.strip().splitlines() if len(l.split()) == 3}
a = {l.split()[0]: l.split()[1:] for l in after.strip().splitlines() if len(l.split()) == 3}
for pid in sorted(a):
    pb = b.get(pid, ["?", "?"])
    mib = lambda kb: f"{int(kb) / 1024:.1f} MiB" if kb != "?" else "?"
    print(f"rank process {pid}: before the first batch private {mib(pb[0])}, mapped files "
          f"{mib(pb[1])}; at most over the run private {mib(a[pid][0])}, mapped files {mib(a[pid][1])}")
PY
