#!/usr/bin/env python3
"""check_layers.py on this repository (the card's top level, no include
climbs, no include cycle) and on made-up trees: includes that climb (between
nested libraries too), one that leaves its folder by "../", a folder the card
does not name, concepts that include each other."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "check_layers.py")
sys.path.insert(0, HERE)
from check_layers import LAYERS  # noqa: E402


def write(root, path, *includes):
    """A file at ROOT/PATH holding only the include lines of INCLUDES."""
    os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
    with open(os.path.join(root, path), "w") as f:
        f.write("".join(f'#include "{i}"\n' for i in includes))


def run(root):
    return subprocess.run([sys.executable, SCRIPT, root], capture_output=True, text=True)


class CheckLayers(unittest.TestCase):
    def test_this_repository_has_no_include_that_climbs(self):
        r = run(os.path.join(HERE, ".."))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("no include climbs", r.stdout)

    def test_a_climbing_include_and_a_relative_one_are_named(self):
        with tempfile.TemporaryDirectory() as root:
            for _, path in LAYERS:
                os.makedirs(os.path.join(root, path), exist_ok=True)
            with open(os.path.join(root, "runtime", "arena.cpp"), "w") as f:
                f.write('#include "runtime/arena.h"\n#include "runtime/model/layout.h"\n'
                        '#include "codegen/planner/Tune.h"\n')
            with open(os.path.join(root, "runtime", "model", "layout.h"), "w") as f:
                f.write('#include <vector>\n#include "../dsl/Spec.h"\n#include "runtime/dtype.h"\n')
            with open(os.path.join(root, "runtime", "cuda", "gemm.cu"), "w") as f:
                f.write('#include "runtime/cuda/gemm.h"\n#include "dsl/Spec.h"\n')
            r = run(root)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn('runtime/arena.cpp:3: includes "codegen/planner/Tune.h": '
                          'codegen/planner/ is above runtime/', r.stdout)
            self.assertIn('runtime/model/layout.h:2: includes "../dsl/Spec.h": a relative path '
                          'out of runtime/model/', r.stdout)
            # runtime/model/ is a library of its own below runtime/: it may not include
            # the runtime.
            self.assertIn('runtime/model/layout.h:3: includes "runtime/dtype.h": runtime/ is '
                          'above runtime/model/', r.stdout)
            # runtime/cuda/ is a library of its own above runtime/'s root.
            self.assertIn('runtime/cuda/gemm.cu:2: includes "dsl/Spec.h": dsl/ is above '
                          'runtime/cuda/', r.stdout)
            self.assertEqual(len(r.stdout.splitlines()), 4, r.stdout)

    def test_no_backend_includes_the_training_loop(self):
        with tempfile.TemporaryDirectory() as root:
            for _, path in LAYERS:
                os.makedirs(os.path.join(root, path), exist_ok=True)
            with open(os.path.join(root, "runtime", "streams.cpp"), "w") as f:
                f.write('#include "runtime/streams.h"\n#include "runtime/train/watchdog.h"\n')
            with open(os.path.join(root, "runtime", "cuda", "executor.cpp"), "w") as f:
                f.write('#include "runtime/train/guard.h"\n')
            # The loop includes the backends' headers: downward.
            with open(os.path.join(root, "runtime", "train", "train.cpp"), "w") as f:
                f.write('#include "runtime/train/guard.h"\n#include "runtime/backend.h"\n'
                        '#include "runtime/files/file_io.h"\n')
            r = run(root)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertEqual(r.stdout.splitlines(), [
                'runtime/streams.cpp:2: includes "runtime/train/watchdog.h": runtime/train/ is '
                "above runtime/ in tools/check_layers.py's LAYERS",
                'runtime/cuda/executor.cpp:1: includes "runtime/train/guard.h": runtime/train/ '
                "is above runtime/cuda/ in tools/check_layers.py's LAYERS",
            ])

    def test_the_backends_and_the_shared_layer(self):
        with tempfile.TemporaryDirectory() as root:
            for _, path in LAYERS:
                os.makedirs(os.path.join(root, path), exist_ok=True)
            # Each backend reads the shared layer: downward.
            write(root, "runtime/cpu/gpt2.h", "runtime/gpt2.h")
            write(root, "runtime/cuda/gpt2.h", "runtime/gpt2.h")
            write(root, "runtime/gpt2.h", "runtime/block_pieces.h")
            # The shared layer does not read a backend, nor one backend the other.
            write(root, "runtime/step_context.h", "runtime/cpu/gemm.h")
            write(root, "runtime/cuda/step.h", "runtime/cpu/step.h")
            write(root, "runtime/cpu/step.cpp", "runtime/cuda/exec.h")
            # The names layer headers include forward, and only the runtime's
            # own name is included inside it.
            write(root, "runtime/kernels.h", "runtime/cpu/kernels.h")
            write(root, "runtime/gemm.h", "runtime/cpu/gemm.h", "runtime/dtype.h")
            write(root, "runtime/cpu/norms.cpp", "runtime/kernels.h")
            r = run(root)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertEqual(sorted(r.stdout.splitlines()), [
                'runtime/cpu/norms.cpp:1: includes "runtime/kernels.h", the name custom layers\' '
                'headers include; include "runtime/cpu/kernels.h"',
                'runtime/cpu/step.cpp:1: includes "runtime/cuda/exec.h": runtime/cuda/ and '
                'runtime/cpu/ are side by side (BESIDE in tools/check_layers.py): neither '
                "includes the other; move what both need into runtime/'s root",
                'runtime/cuda/step.h:1: includes "runtime/cpu/step.h": runtime/cpu/ and '
                'runtime/cuda/ are side by side (BESIDE in tools/check_layers.py): neither '
                "includes the other; move what both need into runtime/'s root",
                'runtime/gemm.h:2: includes "runtime/dtype.h": a name custom layers\' headers '
                'include holds only "runtime/cpu/gemm.h"',
                'runtime/step_context.h:1: includes "runtime/cpu/gemm.h": runtime/cpu/ is above '
                "runtime/ in tools/check_layers.py's LAYERS",
            ])

    def test_concepts_that_include_each_other_are_named(self):
        with tempfile.TemporaryDirectory() as root:
            for _, path in LAYERS:
                os.makedirs(os.path.join(root, path), exist_ok=True)
            # Two concepts, a header and a source: KeyTable.h needs Fields.h,
            # Fields.cpp needs KeyTable.h.
            write(root, "dsl/KeyTable.h", "dsl/Spec.h", "dsl/Fields.h")
            write(root, "dsl/Fields.h", "dsl/Spec.h")
            write(root, "dsl/Fields.cpp", "dsl/Fields.h", "dsl/KeyTable.h")
            write(root, "dsl/Spec.h")
            write(root, "dsl/Print.cpp", "dsl/KeyTable.h")  # one way only: no cycle
            # Three concepts around, and one hanging off the cycle.
            write(root, "runtime/a.h", "runtime/b.h")
            write(root, "runtime/b.cpp", "runtime/c.h")
            write(root, "runtime/c.h", "runtime/a.h", "runtime/d.h")
            write(root, "runtime/d.h", "runtime/c.h")
            # A library below may be included both ways round by two of this one.
            write(root, "runtime/model/layout.h")
            write(root, "runtime/e.h", "runtime/model/layout.h", "runtime/f.h")
            write(root, "runtime/f.cpp", "runtime/model/layout.h")
            # A backend's concepts are held to it too.
            write(root, "runtime/cuda/gemm.h", "runtime/cuda/gemm_plan.h")
            write(root, "runtime/cuda/gemm_plan.cpp", "runtime/cuda/gemm.h")
            r = run(root)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertEqual(r.stdout.splitlines(), [
                'include cycle: dsl/Fields -> dsl/KeyTable -> dsl/Fields (dsl/Fields.cpp:2 '
                'includes "dsl/KeyTable.h"; dsl/KeyTable.h:2 includes "dsl/Fields.h"): a concept '
                'includes one that includes it back; move what both need into a header of its '
                'own, or pass it in',
                'include cycle: runtime/a -> runtime/b -> runtime/c -> runtime/a (runtime/a.h:1 '
                'includes "runtime/b.h"; runtime/b.cpp:1 includes "runtime/c.h"; runtime/c.h:1 '
                'includes "runtime/a.h"; runtime/d also in the cycle): a concept includes one '
                'that includes it back; move what both need into a header of its own, or pass '
                'it in',
                'include cycle: runtime/cuda/gemm -> runtime/cuda/gemm_plan -> runtime/cuda/gemm '
                '(runtime/cuda/gemm.h:1 includes "runtime/cuda/gemm_plan.h"; '
                'runtime/cuda/gemm_plan.cpp:1 includes "runtime/cuda/gemm.h"): a concept includes '
                'one that includes it back; move what both need into a header of its own, or '
                'pass it in',
            ])

    def test_a_folder_the_card_does_not_name_is_named(self):
        with tempfile.TemporaryDirectory() as root:
            for _, path in LAYERS:
                os.makedirs(os.path.join(root, path), exist_ok=True)
            os.makedirs(os.path.join(root, "planner"))
            os.makedirs(os.path.join(root, ".ci"))  # tooling, hidden: allowed
            r = run(root)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("planner/: a top-level folder the design card does not name",
                          r.stdout)
            self.assertEqual(len(r.stdout.splitlines()), 1, r.stdout)

    def test_a_missing_layer_folder_is_an_error(self):
        with tempfile.TemporaryDirectory() as root:
            r = run(root)
            self.assertEqual(r.returncode, 2)
            self.assertIn("no folder runtime/suggest", r.stderr)


if __name__ == "__main__":
    unittest.main()
