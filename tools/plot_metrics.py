#!/usr/bin/env python3
"""plot_metrics: training and validation loss against step, from the metrics
files training binaries write (--metrics F: one JSON object per line per step;
docs/binary.md, "The metrics file"), drawn with matplotlib into a PNG, SVG or
PDF (by the output's extension). Several files are several runs, one colour each:
training loss as a line (smoothed with --smooth N, a trailing mean of N steps),
validation loss as points joined by a dashed line. Prints each run's summary.

    python3 tools/plot_metrics.py m.jsonl [other.jsonl ...] [-o loss.png]
        [--title T] [--log-y] [--smooth N]

Without -o it prints the summaries alone. With -o under a python that has no
matplotlib (a pyenv or a venv), it runs itself again with Debian's
/usr/bin/python3 when that one has it (tools/setup.sh installs
python3-matplotlib there), saying so; else it prints the summaries and says
how to install matplotlib. A path that is not a regular file (a FIFO, a
device, a directory), a line that is not a JSON object with a whole-number
"step" and a "loss" (a number a float holds), or a step not above the line
before it is an error naming the file and line; nothing is written then. A
null, NaN or infinite loss or val_loss is left out and counted."""
import argparse
import json
import math
import os
import stat
import subprocess
import sys

# The pythons tried for the plot when the one running this has no matplotlib.
FALLBACK_PYTHONS = ("/usr/bin/python3",)


class MetricsError(Exception):
    """A metrics file that cannot be plotted: the message names it and the line."""


class Run:
    """One metrics file: its steps' training and validation losses."""

    def __init__(self, path):
        self.path = path
        self.name = os.path.splitext(os.path.basename(path))[0]
        self.steps, self.losses = [], []          # finite training losses
        self.val_steps, self.val_losses = [], []  # steps after which validation ran
        self.nonfinite = 0                        # steps whose loss was null or not finite
        self.last_step = None


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _float_range(v):
    """Whether the JSON integer or float v is within a float's range (an integer
    of hundreds of digits is not, and math.isfinite raises OverflowError on it)."""
    try:
        float(v)
        return True
    except OverflowError:
        return False


def metric_number(m, key, where):
    """m[key] as a float, None when null or not finite; raises MetricsError naming
    where on anything else (tools/metrics_export.py reads every key with it)."""
    v = m[key]
    if not _number(v) and v is not None:
        raise MetricsError(f"{where}: \"{key}\" is not a number (got {json.dumps(v)})")
    if _number(v) and not _float_range(v):
        raise MetricsError(f"{where}: \"{key}\" is an integer of {len(str(abs(v)))} digits, "
                           "beyond a float's range")
    if v is None or not math.isfinite(v):
        return None
    return float(v)


def load_run(path):
    """Reads one metrics file; raises MetricsError naming path:line."""
    run = Run(path)
    try:
        # Only a regular file: a FIFO would wait for a writer, /dev/zero never end.
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise MetricsError(f"{path}: not a regular file")
        with open(path, encoding="utf-8") as f:
            for number, text in enumerate(f, start=1):
                load_line(run, f"{path}:{number}", text)
    except OSError as e:
        raise MetricsError(f"{path}: cannot read: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise MetricsError(f"{path}: not a text file ({e.reason} at byte {e.start})") from e
    if run.last_step is None:
        raise MetricsError(f"{path}: empty: no step to plot")
    return run


def metrics_line(where, text):
    """One line of a metrics file as its JSON object with "step" made an int, or
    None for a blank line; raises MetricsError naming where when the line is not
    a JSON object with a whole-number "step" of 1 or more. The one reading of a
    line: this tool's and tools/metrics_export.py's."""
    if not text.strip():
        return None
    try:
        m = json.loads(text)
    except json.JSONDecodeError as e:
        raise MetricsError(f"{where}: not JSON: {e.msg} at column {e.colno}") from e
    except (ValueError, RecursionError) as e:  # an integer of thousands of digits, deep nesting
        raise MetricsError(f"{where}: not a metrics line ({type(e).__name__}: {e})") from e
    if not isinstance(m, dict):
        raise MetricsError(f"{where}: a line is one JSON object, not {type(m).__name__}")
    step = m.get("step")
    if (not _number(step) or not _float_range(step) or not math.isfinite(step)
            or step != int(step) or step < 1):
        raise MetricsError(f"{where}: no whole-number \"step\" of 1 or more (got "
                           f"{json.dumps(step)})")
    m["step"] = int(step)
    return m


def load_line(run, where, text):
    """Adds one line of a metrics file to run; raises MetricsError naming where."""
    m = metrics_line(where, text)
    if m is None:
        return
    step = m["step"]
    if run.last_step is not None and step <= run.last_step:
        raise MetricsError(
            f"{where}: step {step} does not follow step {run.last_step}; a metrics file is one "
            "run (a run resumed into another --metrics file: pass both)")
    run.last_step = step
    if "loss" not in m:
        raise MetricsError(f"{where}: no \"loss\"")
    for key, steps, losses in (("loss", run.steps, run.losses),
                               ("val_loss", run.val_steps, run.val_losses)):
        if key not in m:
            continue
        value = metric_number(m, key, where)
        if value is None:
            run.nonfinite += 1
        else:
            steps.append(step)
            losses.append(value)


def smoothed(values, n):
    """The trailing mean of the last n values (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= n:
            total -= values[i - n]
        out.append(total / min(i + 1, n))
    return out


def summary(run):
    """One line per run: steps, first and last training loss, best validation."""
    text = f"{run.name}: {len(run.steps)} steps"
    if run.steps:
        text += f", loss {run.losses[0]:.4f} (step {run.steps[0]}) -> {run.losses[-1]:.4f} " \
                f"(step {run.steps[-1]})"
    if run.val_steps:
        best = min(range(len(run.val_losses)), key=lambda i: run.val_losses[i])
        text += f", best val loss {run.val_losses[best]:.4f} at step {run.val_steps[best]}" \
                f" of {len(run.val_steps)} validations"
    if run.nonfinite:
        text += f", {run.nonfinite} non-finite loss{'es' if run.nonfinite != 1 else ''} left out"
    return text


def figure(runs, title=None, log_y=False, smooth=1):
    """The matplotlib figure of the runs (one axes)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, run in enumerate(runs):
        colour = colours[i % len(colours)]
        train = smoothed(run.losses, smooth) if smooth > 1 else run.losses
        label = f"{run.name} train" + (f" (mean of {smooth})" if smooth > 1 else "")
        ax.plot(run.steps, train, color=colour, linewidth=1.2, label=label)
        if run.val_steps:
            ax.plot(run.val_steps, run.val_losses, color=colour, linestyle="--", marker="o",
                    markersize=4, linewidth=1, label=f"{run.name} val")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per token)")
    if log_y:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend()
    ax.set_title(title or "loss")
    fig.tight_layout()
    return fig


def has_matplotlib():
    try:
        import matplotlib  # noqa: F401
        return True
    except ImportError:
        return False


def python_with_matplotlib():
    """The first of FALLBACK_PYTHONS that imports matplotlib, or None; asked with
    -E (as it would run), so that this python's PYTHONPATH (a venv's packages,
    another version's) does not reach it. None once already run again."""
    if os.environ.get("PLOT_METRICS_REEXEC"):
        return None
    for python in FALLBACK_PYTHONS:
        try:
            if subprocess.run([python, "-E", "-c", "import matplotlib"], capture_output=True,
                              timeout=120).returncode == 0:
                return python
        except (OSError, subprocess.TimeoutExpired):
            continue
    return None


def main(argv=None):
    """The command; argv None: run as a script (sys.argv), which alone may run
    itself again under another python for matplotlib."""
    parser = argparse.ArgumentParser(
        description="Plot training and validation loss from fsdpgen --metrics files.")
    parser.add_argument("metrics", nargs="+", help="metrics files (one run each)")
    parser.add_argument("-o", "--output",
                        help="image to write: .png, .svg or .pdf (without: the summaries alone)")
    parser.add_argument("--title", help="the plot's title (default: loss)")
    parser.add_argument("--log-y", action="store_true", help="logarithmic loss axis")
    parser.add_argument("--smooth", type=int, default=1, metavar="N",
                        help="plot the training loss as the trailing mean of N steps")
    args = parser.parse_args(argv)
    try:
        if args.smooth < 1:
            raise MetricsError(f"--smooth {args.smooth}: must be at least 1")
        ext = os.path.splitext(args.output or "")[1].lower()
        if args.output and ext not in (".png", ".svg", ".pdf"):
            raise MetricsError(f"-o {args.output}: the extension chooses the format: .png, .svg "
                               "or .pdf")
        out_dir = os.path.dirname(os.path.abspath(args.output or "."))
        if args.output and not os.path.isdir(out_dir):
            raise MetricsError(f"-o {args.output}: directory {out_dir} does not exist")
        runs = [load_run(p) for p in args.metrics]
    except MetricsError as e:
        print(f"plot_metrics: error: {e}", file=sys.stderr)
        return 2
    if args.output and not has_matplotlib() and argv is None:
        other = python_with_matplotlib()
        if other:  # run as a script: the same command under a python that can plot
            print(f"plot_metrics: note: {sys.executable} has no matplotlib; plotting with "
                  f"{other}, which has it", file=sys.stderr)
            sys.stderr.flush()
            os.execve(other, [other, "-E", os.path.abspath(__file__)] + sys.argv[1:],
                      dict(os.environ, PLOT_METRICS_REEXEC="1"))
    for run in runs:
        print(summary(run))
    if not args.output:
        return 0
    if not has_matplotlib():
        others = f", nor has {' or '.join(FALLBACK_PYTHONS)}" if argv is None else ""
        print(f"plot_metrics: error: -o {args.output}: plotting needs matplotlib, which "
              f"{sys.executable} lacks{others}: {sys.executable} -m pip install matplotlib, or "
              "apt install python3-matplotlib (tools/setup.sh does) for /usr/bin/python3, "
              "which this runs itself with; the summaries above need nothing", file=sys.stderr)
        return 2
    fig = figure(runs, args.title, args.log_y, args.smooth)
    partial = args.output + ".partial" + ext
    fig.savefig(partial)
    os.replace(partial, args.output)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
