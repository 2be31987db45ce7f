#!/usr/bin/env python3
"""Checks that what the README and `fsdpgen plan` say about measured speed
and prediction error is what the benchmark results files hold.

  python3 tools/check_results.py FSDPGEN [ROOT]

- README's GPU table: each row's tok/s, MFU, vs llm.c and vs torch.compile
  equal the newest benchmark row (a row with tok/s and MFU) of that model
  with cuDNN attention in tests/bench/cuda/RESULTS.md.
- README: the tok/s of each model's newest cuDNN row there (a benchmark or
  not) appears in it, so that a newer run is never left unsaid.
- `fsdpgen plan ... --gpu h100-sxm` prints the range of measured / predicted
  step ratios of RESULTS.md's cuDNN rows, built-in and calibrated, and `plan
  --gpu cpu` the ranges of tests/bench/RESULTS.md's newest entry (its
  sentences on the median ratio, calibrated and built-in); figures with no
  measured ratio print none.
Prints each disagreement and exits 1; exits 0 when everything agrees.
"""
import re
import subprocess
import sys
from pathlib import Path

DATE = re.compile(r"^## (\d{4}-\d{2}-\d{2})")


def entries(text):
    """The results file's dated entries, oldest first: (heading, lines); a
    section under another heading (another benchmark's) belongs to none."""
    out, current = [], None
    for line in text.splitlines():
        if DATE.match(line):
            current = (line, [])
            out.append(current)
        elif line.startswith("## "):
            current = None  # another benchmark's section: no entry of these runs
        elif current:
            current[1].append(line)
    return out


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def tables(lines):
    """Each markdown table of `lines` as a list of {column: cell} rows."""
    out, header = [], None
    for line in lines:
        if not line.startswith("|"):
            header = None
            continue
        row = cells(line)
        if header is None:
            header = row
            out.append([])
        elif not all(set(c) <= set("-: ") for c in row):
            out[-1].append(dict(zip(header, row)))
    return out


def model_key(name):
    """'GPT-2 124M' and '124m' -> '124m'; 'llama-1b (B=4, T=2048)' -> 'llama-1b'."""
    name = name.lower().replace("gpt-2", "").strip()
    return name.split(" (")[0].split()[0] if name else name


def column(row, *words):
    """The first column of `row` whose name holds every word, or None."""
    for name, value in row.items():
        if all(w in name.lower() for w in words):
            return name
    return None


def cudnn_rows(results):
    """(entry index, row) of every row with cuDNN attention (or no attention column)."""
    for i, (_, lines) in enumerate(entries(results)):
        for table in tables(lines):
            for row in table:
                if "size" in row and row.get("attention", "cuDNN") == "cuDNN":
                    yield i, row


def ratios(cell):
    """The ratios in parentheses of a 'measured / predicted (r)' cell: '(1.08; traced step 1.07)'."""
    m = re.search(r"\(([^)]*)\)", cell or "")
    return [float(x) for x in re.findall(r"\d+\.\d+", m.group(1))] if m else []


def check_readme(readme, results, problems):
    newest_bench, newest_any = {}, {}
    for _, row in cudnn_rows(results):
        key = model_key(row["size"])
        tok = column(row, "tok/s")
        if tok and row[tok]:
            newest_any[key] = row[tok]
            if column(row, "mfu"):
                newest_bench[key] = row
    table = next((t for t in tables(readme.splitlines()) if t and "tok/s" in t[0]), None)
    if not table:
        problems.append("README.md: no GPU table (a table with a tok/s column)")
        return
    for row in table:
        key = model_key(row.get("model", ""))
        bench = newest_bench.get(key)
        if not bench:
            problems.append(f"README.md: '{row.get('model')}' has no benchmark row in RESULTS.md")
            continue
        for readme_col, words in (("tok/s", ("tok/s",)), ("MFU", ("mfu",)),
                                  ("vs llm.c", ("llm.c",)), ("vs torch.compile", ("torch", "compile"))):
            res_col = column(bench, *words)
            if readme_col in row and res_col and row[readme_col] != bench[res_col]:
                problems.append(f"README.md: {row['model']} {readme_col} is {row[readme_col]}, "
                                f"the newest RESULTS.md benchmark row says {bench[res_col]}")
    for key, tok in newest_any.items():
        if tok not in readme:
            problems.append(f"README.md: the newest {key} run ({tok} tok/s, RESULTS.md) is not mentioned")


def plan_range(fsdpgen, root, spec, gpu, label):
    """The (low, high) ratios `fsdpgen plan` prints after `label` ('the predicted time' or 'measured there,')."""
    out = subprocess.run([fsdpgen, "plan", spec, "--gpu", gpu], cwd=root, capture_output=True,
                         text=True, check=True).stdout
    line = next((l for l in out.splitlines() if "measured error" in l), "")
    pattern = {"built-in": r"took ([\d.]+)(?:-([\d.]+))?x the predicted time",
               "calibrated": r"measured there, ([\d.]+)(?:-([\d.]+))?x"}[label]
    m = re.search(pattern, line)
    if not m:
        return None, line
    return (float(m.group(1)), float(m.group(2) or m.group(1))), line


def check_plan(fsdpgen, root, results, cpu_results, problems):
    built_in, calibrated = [], []
    for _, row in cudnn_rows(results):
        for name, value in row.items():
            lname = name.lower()
            if "predicted" in lname:
                (calibrated if "calibrated" in lname else built_in).extend(ratios(value))
    newest = " ".join(l.strip() for l in entries(cpu_results)[-1][1] if not l.startswith("|"))
    cpu = {"built-in": [], "calibrated": []}
    for sentence in re.split(r"(?<=\.)\s+(?=[A-Z])", newest):
        if "median ratio" in sentence.lower():
            kind = "built-in" if "built-in" in sentence else "calibrated"
            cpu[kind].extend(float(x) for x in re.findall(r"\b\d+\.\d\d\b", sentence))
    expected = [("specs/gpt2-124m.fsdp", "h100-sxm", "built-in", built_in, "tests/bench/cuda"),
                ("specs/gpt2-124m.fsdp", "h100-sxm", "calibrated", calibrated, "tests/bench/cuda"),
                ("specs/tiny.fsdp", "cpu", "built-in", cpu["built-in"], "tests/bench"),
                ("specs/tiny.fsdp", "cpu", "calibrated", cpu["calibrated"], "tests/bench")]
    for spec, gpu, label, found, where in expected:
        # Figures never compared with a real step print no range.
        want = (min(found), max(found)) if found else None
        got, line = plan_range(fsdpgen, root, spec, gpu, label)
        if got != want:
            problems.append(f"fsdpgen plan --gpu {gpu}: {label} range {got} but {where}/RESULTS.md "
                            f"measured {want} (line: {line.strip()})")


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    fsdpgen = argv[1]
    root = Path(argv[2]) if len(argv) > 2 else Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text()
    results = (root / "tests/bench/cuda/RESULTS.md").read_text()
    cpu_results = (root / "tests/bench/RESULTS.md").read_text()
    problems = []
    check_readme(readme, results, problems)
    check_plan(fsdpgen, root, results, cpu_results, problems)
    for p in problems:
        print(f"check_results: {p}")
    if problems:
        return 1
    print("check_results: README.md and fsdpgen plan agree with the RESULTS.md files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
