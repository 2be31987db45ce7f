#!/usr/bin/env python3
"""The source folders are layers: a file includes only from its own folder
and the folders below it in LAYERS, never from one above (an include that
climbs) and never by a relative path out of its folder ("../").

    python3 tools/check_layers.py [ROOT]

Prints each violation as FILE:LINE: what it includes and why that climbs,
and exits 1 if there is any; 0 and one summary line otherwise. tests/,
examples/, generated/ and tools/ are not layers (tests include what they
test). The order is the one the CMake libraries link in: a library links
only libraries below it.
"""
import os
import re
import sys

# Lowest first. Each folder may include itself and any folder before it.
LAYERS = [
    "suggest",    # did-you-mean, used by every front end
    "model",      # layout tables shared by the planner and the runtime
    "runtime",    # the CPU and CUDA runtimes and their file formats
    "profile",    # the hardware profile schema (reads runtime/files)
    "layers",     # the custom-layer API header and the Clang reader of layer headers
    "calibrate",  # the calibration program (a runtime client)
    "dsl",        # the spec language
    "planner",    # schedule, memory plan, cost model, tune
    "emit",       # the code generator
    "driver",     # the pipeline: every pass, emit and build too, and the target
    "cli",        # fsdpgen's commands
]
SOURCE = re.compile(r"\.(h|hpp|cpp|cc|cu|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def violations(root):
    rank = {name: i for i, name in enumerate(LAYERS)}
    found, files = [], 0
    for layer in LAYERS:
        for folder, _, names in os.walk(os.path.join(root, layer)):
            for name in sorted(names):
                if not SOURCE.search(name):
                    continue
                path = os.path.join(folder, name)
                files += 1
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = m.group(1)
                        if target.startswith("../"):
                            found.append(f"{rel}:{number}: includes \"{target}\": a relative "
                                         f"path out of {layer}/ (name the folder instead)")
                            continue
                        top = target.split("/", 1)[0]
                        if "/" in target and top in rank and rank[top] > rank[layer]:
                            found.append(f"{rel}:{number}: includes \"{target}\": {top}/ is above "
                                         f"{layer}/ in tools/check_layers.py's LAYERS")
    return found, files


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    missing = [layer for layer in LAYERS if not os.path.isdir(os.path.join(root, layer))]
    if missing:
        print(f"check_layers.py: no folder {', '.join(missing)} under {root}", file=sys.stderr)
        return 2
    found, files = violations(root)
    for v in found:
        print(v)
    if found:
        print(f"check_layers.py: {len(found)} include(s) climb", file=sys.stderr)
        return 1
    print(f"check_layers.py: {files} files in {len(LAYERS)} layers, no include climbs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
