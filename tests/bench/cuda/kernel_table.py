#!/usr/bin/env python3
"""Per-kernel time of one profiled step, from Nsight Compute's CSV.

    python3 kernel_table.py NCU.csv [--top N]

NCU.csv is what `ncu --profile-from-start off --metrics gpu__time_duration.sum
--csv --log-file NCU.csv BINARY --steps K --profile-step K-1` writes: one row
per kernel launch of the bracketed step. Prints a Markdown table of kernels
grouped by name (template arguments dropped), slowest first: launches, ms in
the step, share of the step's kernel time. Exit status 1 when the file holds no
gpu__time_duration rows (ncu found nothing to profile).
"""
import argparse
import csv
import io
import re
import sys
from collections import defaultdict

# Nsight Compute 2025+ prints "ns", "us", "ms", "s"; older releases "nsecond" and so on.
SECONDS_PER_UNIT = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0,
                    "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def short_name(kernel):
    """The kernel's name without its parameter list and template arguments."""
    name = kernel.split("(", 1)[0]
    while "<" in name:  # innermost first: nested template arguments
        stripped = re.sub(r"<[^<>]*>", "", name)
        if stripped == name:
            break
        name = stripped
    return name.strip().split(" ")[-1] or kernel


def launches(text):
    """(kernel name, seconds) per launch; ncu prints ==PROF== lines before the CSV."""
    start = text.find('"ID"')
    if start < 0:
        return []
    rows = []
    for row in csv.DictReader(io.StringIO(text[start:])):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = row.get("Metric Unit", "")
        if unit not in SECONDS_PER_UNIT:
            raise ValueError(f"unknown time unit {unit!r} for {row.get('Kernel Name')}")
        value = float(row["Metric Value"].replace(",", ""))
        rows.append((short_name(row["Kernel Name"]), value * SECONDS_PER_UNIT[unit]))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=25, help="kernels listed (the rest summed)")
    args = parser.parse_args()
    with open(args.csv, encoding="utf-8", errors="replace") as f:
        rows = launches(f.read())
    if not rows:
        print(f"kernel_table.py: {args.csv} holds no gpu__time_duration.sum rows", file=sys.stderr)
        return 1
    count, seconds = defaultdict(int), defaultdict(float)
    for name, s in rows:
        count[name] += 1
        seconds[name] += s
    total = sum(seconds.values())
    ranked = sorted(seconds, key=seconds.get, reverse=True)
    print(f"| kernel | launches | ms per step | share |")
    print("|---|---:|---:|---:|")
    for name in ranked[: args.top]:
        print(f"| `{name}` | {count[name]} | {seconds[name] * 1e3:.2f} | "
              f"{100 * seconds[name] / total:.1f}% |")
    rest = ranked[args.top:]
    if rest:
        s = sum(seconds[n] for n in rest)
        print(f"| {len(rest)} others | {sum(count[n] for n in rest)} | {s * 1e3:.2f} | "
              f"{100 * s / total:.1f}% |")
    print(f"| all kernels | {len(rows)} | {total * 1e3:.2f} | 100% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
