#!/usr/bin/env python3
"""Tests of tools/plot_metrics.py: the curves it draws are the metrics files'
losses (training smoothed as asked, validation at its steps), images are
written in each format, the summary gives the figures, and every kind of bad
file is an error naming the file and line, with no image written. Exits 77
(CTest: skipped) with the reason when matplotlib is missing."""
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET
from contextlib import redirect_stderr, redirect_stdout

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import plot_metrics  # noqa: E402


def write(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")


def steps(n, val_every=0, first=1):
    out = []
    for s in range(first, first + n):
        m = {"step": s, "loss": 5.0 / s, "lr": 1e-3, "grad_norm": 1.0, "ms": 10.0}
        if val_every and s % val_every == 0:
            m["val_loss"] = 6.0 / s
        out.append(m)
    return out


class PlotMetrics(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def path(self, name):
        return os.path.join(self.dir, name)

    def run_main(self, args):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            rc = plot_metrics.main(args)
        return rc, out.getvalue(), err.getvalue()

    def test_curves_are_the_files_losses(self):
        write(self.path("a.jsonl"), steps(10, val_every=5))
        write(self.path("b.jsonl"), steps(4))
        runs = [plot_metrics.load_run(self.path("a.jsonl")), plot_metrics.load_run(self.path("b.jsonl"))]
        fig = plot_metrics.figure(runs, smooth=3)
        lines = {l.get_label(): l for l in fig.axes[0].get_lines()}
        self.assertEqual(sorted(lines), ["a train (mean of 3)", "a val", "b train (mean of 3)"])
        train = lines["a train (mean of 3)"]
        self.assertEqual(list(train.get_xdata()), list(range(1, 11)))
        want = [5.0, 3.75, (5 + 2.5 + 5 / 3) / 3] + \
            [(5 / (s - 2) + 5 / (s - 1) + 5 / s) / 3 for s in range(4, 11)]
        for got, w in zip(train.get_ydata(), want):
            self.assertAlmostEqual(got, w, places=12)
        val = lines["a val"]
        self.assertEqual(list(val.get_xdata()), [5, 10])
        self.assertEqual(list(val.get_ydata()), [6.0 / 5, 6.0 / 10])
        self.assertEqual(val.get_linestyle(), "--")
        self.assertEqual(fig.axes[0].get_xlabel(), "step")
        self.assertEqual(fig.axes[0].get_yscale(), "linear")
        self.assertEqual(plot_metrics.figure(runs, log_y=True).axes[0].get_yscale(), "log")

    def test_images_and_summary(self):
        write(self.path("run.jsonl"),
              steps(10, val_every=5) + [{"step": 11, "loss": None, "val_loss": None}])
        for ext in ("svg", "png", "pdf"):
            out = self.path(f"loss.{ext}")
            rc, stdout, err = self.run_main([self.path("run.jsonl"), "-o", out, "--title", "T"])
            self.assertEqual(rc, 0, err)
            self.assertTrue(os.path.getsize(out) > 1000)
            self.assertFalse(os.path.exists(out + ".partial." + ext))
        svg = ET.parse(self.path("loss.svg")).getroot()
        self.assertTrue(svg.tag.endswith("svg"))
        with open(self.path("loss.png"), "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertIn("run: 10 steps, loss 5.0000 (step 1) -> 0.5000 (step 10), best val loss "
                      "0.6000 at step 10 of 2 validations, 2 non-finite losses left out", stdout)
        self.assertIn("wrote " + self.path("loss.pdf"), stdout)

    def test_bad_files_name_the_line_and_write_nothing(self):
        cases = {
            "missing.jsonl": (None, "missing.jsonl: cannot read"),
            "empty.jsonl": ([], "empty.jsonl: empty: no step to plot"),
            "text.jsonl": (["step 1 loss 2"], "text.jsonl:1: not JSON"),
            "list.jsonl": ([[1, 2]], "list.jsonl:1: a line is one JSON object, not list"),
            "nostep.jsonl": ([{"loss": 1.0}], "nostep.jsonl:1: no whole-number \"step\""),
            "noloss.jsonl": ([{"step": 1}], "noloss.jsonl:1: no \"loss\""),
            "strloss.jsonl": ([{"step": 1, "loss": "x"}], "strloss.jsonl:1: \"loss\" is not a number"),
            "back.jsonl": ([{"step": 2, "loss": 1.0}, "", {"step": 2, "loss": 1.0}],
                           "back.jsonl:3: step 2 does not follow step 2"),
            "badval.jsonl": ([{"step": 1, "loss": 1.0, "val_loss": "low"}],
                             "badval.jsonl:1: \"val_loss\" is not a number"),
        }
        for name, (lines, message) in cases.items():
            if lines is not None:
                write(self.path(name), lines)
            out = self.path(name + ".png")
            rc, _, err = self.run_main([self.path(name), "-o", out])
            self.assertEqual(rc, 2, name)
            self.assertIn(message, err, name)
            self.assertFalse(os.path.exists(out), name)
        write(self.path("ok.jsonl"), steps(3))
        for args, message in (
                (["-o", self.path("no/such/dir/x.png")], "does not exist"),
                (["-o", self.path("x.gif")], "the extension chooses the format"),
                (["-o", self.path("x.png"), "--smooth", "0"], "--smooth 0: must be at least 1")):
            rc, _, err = self.run_main([self.path("ok.jsonl")] + args)
            self.assertEqual(rc, 2, args)
            self.assertIn(message, err, args)

    def test_hostile_files_are_errors_not_tracebacks_or_waits(self):
        cases = {
            "nan_step.jsonl": (['{"step": NaN, "loss": 1.0}'], "nan_step.jsonl:1: no whole-number"),
            "inf_step.jsonl": (['{"step": Infinity, "loss": 1.0}'], "inf_step.jsonl:1: no whole-number"),
            "big_step.jsonl": (['{"step": 1e400, "loss": 1.0}'], "big_step.jsonl:1: no whole-number"),
            "zero_step.jsonl": (['{"step": 0, "loss": 1.0}'], "zero_step.jsonl:1: no whole-number"),
            "digits.jsonl": (['{"step": ' + "9" * 5000 + ', "loss": 1.0}'],
                             "digits.jsonl:1: not a metrics line (ValueError"),
            "deep.jsonl": (["[" * 100000 + "]" * 100000], "deep.jsonl:1: not a metrics line"),
            # Integers a float cannot hold (math.isfinite raised OverflowError on them).
            "long_loss.jsonl": (['{"step": 1, "loss": ' + "9" * 401 + '}'],
                                "long_loss.jsonl:1: \"loss\" is an integer of 401 digits, "
                                "beyond a float's range"),
            "long_val.jsonl": (['{"step": 1, "loss": 1.0, "val_loss": -' + "9" * 401 + '}'],
                               "long_val.jsonl:1: \"val_loss\" is an integer of 401 digits"),
            "long_step.jsonl": (['{"step": ' + "9" * 401 + ', "loss": 1.0}'],
                                "long_step.jsonl:1: no whole-number \"step\""),
        }
        for name, (lines, message) in cases.items():
            write(self.path(name), lines)
            rc, _, err = self.run_main([self.path(name)])
            self.assertEqual(rc, 2, name)
            self.assertIn(message, err, name)
        write(self.path("nan_loss.jsonl"), ['{"step": 1, "loss": NaN}', '{"step": 2, "loss": 2.0}'])
        rc, out, err = self.run_main([self.path("nan_loss.jsonl")])
        self.assertEqual(rc, 0, err)
        self.assertIn("1 non-finite loss left out", out)
        os.mkfifo(self.path("fifo"))
        for path in (self.path("fifo"), "/dev/zero", self.dir):
            rc, _, err = self.run_main([path])
            self.assertEqual(rc, 2, path)
            self.assertIn(path + ": not a regular file", err)

    def test_summaries_need_no_matplotlib(self):
        write(self.path("run.jsonl"), steps(4))
        rc, out, err = self.run_main([self.path("run.jsonl")])
        self.assertEqual(rc, 0, err)
        self.assertIn("run: 4 steps, loss 5.0000 (step 1) -> 1.2500 (step 4)", out)
        saved = sys.modules.get("matplotlib")
        sys.modules["matplotlib"] = None  # import matplotlib raises ImportError
        try:
            rc, out, err = self.run_main([self.path("run.jsonl"), "-o", self.path("x.png")])
        finally:
            sys.modules["matplotlib"] = saved
        self.assertEqual(rc, 2)
        self.assertIn("run: 4 steps", out, "the summary first")
        self.assertIn(f"plotting needs matplotlib, which {sys.executable} lacks: "
                      f"{sys.executable} -m pip install matplotlib", err)
        self.assertFalse(os.path.exists(self.path("x.png")))

    def test_a_python_without_matplotlib_plots_with_one_that_has_it(self):
        """A pyenv or venv python (here: this one, with matplotlib hidden by a
        PYTHONPATH package that refuses to import) runs the script again with
        Debian's python, which tools/setup.sh gives matplotlib."""
        fallback = plot_metrics.python_with_matplotlib()
        if fallback is None:
            self.skipTest(f"none of {plot_metrics.FALLBACK_PYTHONS} has matplotlib")
        hidden = self.path("hidden")
        os.makedirs(os.path.join(hidden, "matplotlib"))
        with open(os.path.join(hidden, "matplotlib", "__init__.py"), "w") as f:
            f.write("raise ImportError('matplotlib hidden by the test')\n")
        write(self.path("run.jsonl"), steps(4))
        script = os.path.abspath(plot_metrics.__file__)
        env = dict(os.environ, PYTHONPATH=hidden)
        env.pop("PLOT_METRICS_REEXEC", None)
        lacks = subprocess.run([sys.executable, "-c", "import matplotlib"], env=env,
                               capture_output=True)
        self.assertNotEqual(lacks.returncode, 0, "the test's python still has matplotlib")
        out = self.path("loss.png")
        r = subprocess.run([sys.executable, script, self.path("run.jsonl"), "-o", out], env=env,
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"plot_metrics: note: {sys.executable} has no matplotlib; plotting with "
                      f"{fallback}, which has it", r.stderr)
        self.assertEqual(r.stdout.count("run: 4 steps"), 1, r.stdout)
        self.assertIn("wrote " + out, r.stdout)
        with open(out, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        # Without a python to run again with, the error says how to get one.
        env["PLOT_METRICS_REEXEC"] = "1"
        r = subprocess.run([sys.executable, script, self.path("run.jsonl"), "-o",
                            self.path("x.png")], env=env, capture_output=True, text=True,
                           timeout=600)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"{sys.executable} -m pip install matplotlib", r.stderr)
        self.assertFalse(os.path.exists(self.path("x.png")))


if __name__ == "__main__":
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("skipped: matplotlib is not installed (tools/setup.sh installs python3-matplotlib)")
        sys.exit(77)
    unittest.main()
