#!/usr/bin/env python3
"""Tokens to a target validation loss, from the --metrics of the runs of
tests/bench/muon/run.sh (kept with WORK=DIR):
  python3 tests/bench/muon/summary.py DIR BEST_ADAMW BEST_MUON RUN...
BEST_ADAMW and BEST_MUON name the best lr's runs (e.g. adamw-1e-3,
muon-0.02); the runs whose names start with them are that lr's seeds. The
target is the highest final validation loss of those seeds (a level every
one reaches); a run's tokens to it interpolate linearly between the two
validation points around its first crossing (2,048 tokens a step)."""
import json
import sys

TOKENS_PER_STEP = 2048


def vals(work, name):
    rows = map(json.loads, open(f"{work}/{name}.jsonl"))
    return [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]


def reach(points, target):
    prev = None
    for step, loss in points:
        if loss <= target:
            if prev is None:
                return step * TOKENS_PER_STEP
            s0, l0 = prev
            return (s0 + (step - s0) * (l0 - target) / (l0 - loss)) * TOKENS_PER_STEP
        prev = (step, loss)
    return None


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    work, best_a, best_m, runs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    seeds = {b: [n for n in runs if n == b or n.startswith(b + "-seed")] for b in (best_a, best_m)}
    target = max(vals(work, n)[-1][1] for b in seeds for n in seeds[b])
    print(f"\ntarget validation loss {target:.4f} (the highest final one of {', '.join(seeds[best_a] + seeds[best_m])})")
    print(f"{'run':<28} {'tokens to target':>17} {'final val loss':>15}")
    reached = {}
    for name in runs:
        v = vals(work, name)
        reached[name] = reach(v, target)
        t = "%.0f" % reached[name] if reached[name] else "not reached"
        print(f"{name:<28} {t:>17} {v[-1][1]:>15.4f}")
    steps = [s for s, _ in vals(work, runs[0])]
    print("\nvalidation loss by step:")
    print(f"{'run':<28} " + " ".join(f"{s:>6}" for s in steps))
    for name in runs:
        print(f"{name:<28} " + " ".join(f"{l:6.3f}" for _, l in vals(work, name)))
    mean = {b: sum(reached[n] for n in seeds[b]) / len(seeds[b]) for b in seeds}
    print(f"tokens to {target:.4f}, mean over the best lr's {len(seeds[best_a])} and {len(seeds[best_m])} seeds:"
          f" AdamW {mean[best_a]:.0f}, Muon {mean[best_m]:.0f}: Muon / AdamW {mean[best_m] / mean[best_a]:.3f}")


main()
