#!/usr/bin/env python3
"""check_layers.py on this repository (no include climbs) and on a made-up
tree where one include climbs and one leaves its folder by "../"."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "check_layers.py")
sys.path.insert(0, HERE)
from check_layers import LAYERS  # noqa: E402


def run(root):
    return subprocess.run([sys.executable, SCRIPT, root], capture_output=True, text=True)


class CheckLayers(unittest.TestCase):
    def test_this_repository_has_no_include_that_climbs(self):
        r = run(os.path.join(HERE, ".."))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("no include climbs", r.stdout)

    def test_a_climbing_include_and_a_relative_one_are_named(self):
        with tempfile.TemporaryDirectory() as root:
            for layer in LAYERS:
                os.makedirs(os.path.join(root, layer))
            with open(os.path.join(root, "runtime", "arena.cpp"), "w") as f:
                f.write('#include "runtime/arena.h"\n#include "model/layout.h"\n'
                        '#include "planner/Tune.h"\n')
            with open(os.path.join(root, "model", "layout.h"), "w") as f:
                f.write('#include <vector>\n#include "../dsl/Spec.h"\n')
            r = run(root)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn('runtime/arena.cpp:3: includes "planner/Tune.h": planner/ is above '
                          'runtime/', r.stdout)
            self.assertIn('model/layout.h:2: includes "../dsl/Spec.h": a relative path out of '
                          'model/', r.stdout)
            self.assertEqual(len(r.stdout.splitlines()), 2, r.stdout)

    def test_a_missing_layer_folder_is_an_error(self):
        with tempfile.TemporaryDirectory() as root:
            r = run(root)
            self.assertEqual(r.returncode, 2)
            self.assertIn("no folder suggest", r.stderr)


if __name__ == "__main__":
    unittest.main()
