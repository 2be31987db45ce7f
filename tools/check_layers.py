#!/usr/bin/env python3
"""The tree is the design card's, and its libraries are layers.

    python3 tools/check_layers.py [ROOT]

1. The top level holds the card's folders (dsl, codegen, runtime, templates,
   specs, generated, tests) and the conventional ones (examples, tools, docs),
   nothing else: a new library goes in the folder it belongs to.
2. Each library is a folder under dsl/, runtime/ or codegen/, and an include
   names a file by its path from the top ("codegen/planner/Schedule.h"; the
   layer API's "layers/" is runtime/include/layers/). A file includes only
   from its own library and the libraries below it in LAYERS, never from one
   above (an include that climbs) and never by a relative path out of its
   folder ("../"). Two libraries side by side (BESIDE: the CPU and CUDA
   backends) share a level: neither includes the other.
3. Inside a library, concepts do not include each other in a cycle: a
   concept is a file name without its extension (KeyTable.h and KeyTable.cpp
   are dsl/KeyTable), and when any file of A includes one of B and any file
   of B one of A (or of C, which includes A), one of them cannot be read,
   built or tested without the other.
4. The names custom layers' headers include for runtime/cpu/ files
   (PUBLIC_FORWARDS: "runtime/kernels.h") hold one include, the file they
   stand for, and no library includes them: the runtime names the real file.

Prints each violation as FILE:LINE: what it includes and why that climbs (or
the folder that should not be at the top), and exits 1 if there is any; 0
and one summary line otherwise. tests/, examples/, generated/ and tools/ are
not layers (tests include what they test). The order is the one the CMake
libraries link in: a library links only libraries below it.
"""
import os
import re
import subprocess
import sys

# Lowest first: (include name, folder). An include names a file by its path
# from the top ("codegen/planner/Schedule.h"), so a library's include name is
# its folder; the one exception is the layer API, whose public name
# "layers/fsdpgen_layer.h" users' headers write (runtime/include/ is its
# root). Each library may include itself and any library before it, but
# not one BESIDE it. A file belongs to the library of the longest folder that
# holds it (runtime/model/ is model's, runtime/cpu/ the CPU backend's). The
# lowest libraries live in runtime/, the lowest top-level folder: the front
# end and the planner read them too.
LAYERS = [
    ("runtime/suggest", "runtime/suggest"),      # did-you-mean, for every front end and flags
    ("runtime/model", "runtime/model"),          # layout tables shared by the planner and the runtime
    # What both backends and the loop read (runtime/'s root): the program,
    # the step context, dtypes and the formulas both backends' kernels share,
    # each family's tensors (gpt2.h, llama.h, muon.h), MPI, launch, arena,
    # memory counts. The file formats (files/, a CMake library without MPI)
    # are of this layer too.
    ("runtime", "runtime"),
    # The backends, side by side (BESIDE): the same file names for the same
    # concepts (runtime/cpu/gpt2.cpp is runtime/cuda/gpt2.cu's twin).
    ("runtime/cpu", "runtime/cpu"),              # the CPU backend (in fsdpgen_runtime)
    ("runtime/cuda", "runtime/cuda"),            # the CUDA backend (fsdpgen_cuda)
    # Generation on the CPU (fsdpgen_generate, without MPI): the CPU
    # kernels' shared helpers; the training loop and `fsdpgen sample` use it.
    ("runtime/generate", "runtime/generate"),
    ("layers", "runtime/include/layers"),        # the API custom layers' headers include
    # The backend-neutral training loop: the run, its flags and settings,
    # checkpoints, the watchdog, guard, straggler and log. It drives a backend
    # (runtime/backend.h); no backend, CPU or CUDA, includes it. It links into
    # the runtime's CMake library (the backends' train_main enter it).
    ("runtime/train", "runtime/train"),
    ("runtime/profile", "runtime/profile"),      # the hardware profile schema (reads runtime/files)
    ("runtime/calibrate", "runtime/calibrate"),  # the calibration program (a runtime client)
    ("dsl/layer_reader", "dsl/layer_reader"),    # custom layers' declarations and their Clang reader
    ("dsl", "dsl"),                              # the spec language
    ("codegen/planner", "codegen/planner"),      # schedule, memory plan, cost model, tune
    ("codegen/emit", "codegen/emit"),            # the code generator
    ("codegen/driver", "codegen/driver"),        # the pipeline: every pass, emit and build, the target
    ("codegen/cli", "codegen/cli"),              # fsdpgen's commands
]
# Libraries at the level of another (the row named): neither includes the other.
BESIDE = {"runtime/cuda": "runtime/cpu"}
# The names users' layer headers include for files that moved into
# runtime/cpu/ (docs/custom-layers.md): each only includes its file.
PUBLIC_FORWARDS = {
    "runtime/gemm.h": "runtime/cpu/gemm.h",
    "runtime/kernels.h": "runtime/cpu/kernels.h",
}
# The design card's top level, and the conventional folders beside it.
TOP_LEVEL = ["dsl", "codegen", "runtime", "templates", "specs", "generated", "tests",
             "examples", "tools", "docs"]
SOURCE = re.compile(r"\.(h|hpp|cpp|cc|cu|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def top_level_folders(root):
    """The folders at ROOT's top that the repository holds: git's when ROOT is
    a checkout (a build folder is not the tree's), else what is there. Hidden
    folders (.ci, .git) are tooling, not the tree."""
    try:
        listed = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True,
                                check=True).stdout.splitlines()
        inside = subprocess.run(["git", "-C", root, "rev-parse", "--show-prefix"],
                                capture_output=True, text=True, check=True).stdout.strip()
        names = {path.split("/", 1)[0] for path in listed if "/" in path} if not inside else None
    except (OSError, subprocess.CalledProcessError):
        names = None
    if names is None:
        names = {n for n in os.listdir(root) if os.path.isdir(os.path.join(root, n))}
    return sorted(n for n in names if not n.startswith("."))


def owner_of(folder):
    """The library whose folder is the longest prefix of FOLDER (relative), or None."""
    best = None
    for name, path in LAYERS:
        if folder == path or folder.startswith(path + "/"):
            if best is None or len(path) > len(best[1]):
                best = (name, path)
    return best


def library_of_include(target):
    """The library an include names: the longest include name it starts with."""
    best = None
    for name, _ in LAYERS:
        if target.startswith(name + "/") and (best is None or len(name) > len(best)):
            best = name
    return best


def concept_of(path):
    """A file's concept: its path without the extension (dsl/KeyTable)."""
    return os.path.splitext(path)[0]


def include_cycles(includes):
    """One line per cycle of concepts in INCLUDES, {concept: {concept: (file,
    line, target)}} (an edge: a file of the first includes TARGET, a file of
    the second), each a shortest cycle through the cycle's first concept."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(includes.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(includes):
        if v not in index:
            visit(v)
    lines = []
    for group in sorted(groups, key=min):
        start = min(group)
        came_from, frontier = {start: None}, [start]
        while start not in [w for v in frontier for w in includes[v]]:
            following = []
            for v in frontier:
                for w in sorted(includes[v]):
                    if w in group and w not in came_from:
                        came_from[w] = v
                        following.append(w)
            frontier = following
        last = min(v for v in frontier if start in includes[v])
        path = [last]
        while came_from[path[-1]] is not None:
            path.append(came_from[path[-1]])
        path.reverse()
        steps = [(v, path[i + 1] if i + 1 < len(path) else start) for i, v in enumerate(path)]
        because = "; ".join('{}:{} includes "{}"'.format(*includes[a][b]) for a, b in steps)
        others = sorted(group - set(path))
        also = f"; {', '.join(others)} also in the cycle" if others else ""
        lines.append(f"include cycle: {' -> '.join(path + [start])} ({because}{also}): a "
                     f"concept includes one that includes it back; move what both need into a "
                     f"header of its own, or pass it in")
    return lines


def ranks():
    """Each library's level: its row's, or that of the row it is BESIDE."""
    rank = {name: i for i, (name, _) in enumerate(LAYERS)}
    for name, beside in BESIDE.items():
        rank[name] = rank[beside]
    return rank


def violations(root):
    rank = ranks()
    folder_of = dict(LAYERS)
    includes = {}  # concept -> {concept it includes: (file, line, include)}, per library
    found, files = [], 0
    for folder in top_level_folders(root):
        if folder not in TOP_LEVEL:
            found.append(f"{folder}/: a top-level folder the design card does not name (the top "
                         f"level is {', '.join(TOP_LEVEL)}); move it under the one it belongs to")
    seen = set()
    for layer, path in LAYERS:
        for folder, _, names in os.walk(os.path.join(root, path)):
            rel_folder = os.path.relpath(folder, root)
            if owner_of(rel_folder) != (layer, path) or rel_folder in seen:
                continue  # a library of its own below this one
            seen.add(rel_folder)
            for name in sorted(names):
                if not SOURCE.search(name):
                    continue
                rel = os.path.join(rel_folder, name)
                files += 1
                if rel in PUBLIC_FORWARDS:
                    found += forward_violations(root, rel)
                    continue
                with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = m.group(1)
                        if target.startswith("../"):
                            found.append(f"{rel}:{number}: includes \"{target}\": a relative "
                                         f"path out of {path}/ (name the library instead)")
                            continue
                        if target in PUBLIC_FORWARDS:
                            found.append(f"{rel}:{number}: includes \"{target}\", the name "
                                         f"custom layers' headers include; include "
                                         f"\"{PUBLIC_FORWARDS[target]}\"")
                            continue
                        above = library_of_include(target)
                        if above is not None and rank[above] > rank[layer]:
                            found.append(f"{rel}:{number}: includes \"{target}\": {above}/ is "
                                         f"above {layer}/ in tools/check_layers.py's LAYERS")
                        elif above is not None and above != layer and rank[above] == rank[layer]:
                            found.append(f"{rel}:{number}: includes \"{target}\": {above}/ and "
                                         f"{layer}/ are side by side (BESIDE in "
                                         f"tools/check_layers.py): neither includes the other; "
                                         f"move what both need into runtime/'s root")
                        if above == layer:
                            into = concept_of(folder_of[above] + target[len(above):])
                            if into != concept_of(rel):
                                includes.setdefault(concept_of(rel), {}).setdefault(
                                    into, (rel, number, target))
    found += include_cycles(includes)
    return found, files


def forward_violations(root, rel):
    """A public forward that includes anything but the file it stands for."""
    found = []
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m and m.group(1) != PUBLIC_FORWARDS[rel]:
                found.append(f"{rel}:{number}: includes \"{m.group(1)}\": a name custom layers' "
                             f"headers include holds only \"{PUBLIC_FORWARDS[rel]}\"")
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    missing = [path for _, path in LAYERS if not os.path.isdir(os.path.join(root, path))]
    if missing:
        print(f"check_layers.py: no folder {', '.join(missing)} under {root}", file=sys.stderr)
        return 2
    found, files = violations(root)
    for v in found:
        print(v)
    if found:
        print(f"check_layers.py: {len(found)} violation(s)", file=sys.stderr)
        return 1
    print(f"check_layers.py: the card's top level; {files} files in {len(LAYERS)} libraries, "
          "no include climbs, none between backends side by side, no include cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
