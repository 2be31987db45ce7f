#!/usr/bin/env python3
"""metrics_export (`fsdpgen metrics`): a training run's --metrics file (one
JSON object a step; docs/binary.md, "The metrics file") where users read
metrics: TensorBoard event files (tensorboardX) and a Weights & Biases offline
run (wandb, optional), written once or live beside the run with --follow.

    fsdpgen metrics RUN.jsonl --tensorboard DIR [--wandb-offline DIR]
        [--follow [--pid PID] [--interval S]] [--name NAME] [--wandb-project P]

What is written, at each line's step: every number as a scalar under its key
(nested objects' keys joined by "/", as "straggler/busy_s"; true and false as
1 and 0; null, NaN and infinities left out), text (a string, or a list of
strings such as "samples") as text; other values are left out, said once per
key. --follow reads whole lines as the run appends them (a partial last line
waits), until --pid's process ends (the lines it left are read first) or the
follower is stopped (Ctrl-C, SIGTERM); it waits for a file not written yet.

A file rewritten under the follower (a resumed run keeps the lines of the
steps its checkpoint holds and drops the later ones, which it trains again;
a new run truncates it) is read again from its start: lines already written
are not written twice, and from the first step whose line differs TensorBoard
gets a restart marker (SessionLog START at that step, its own convention for
a run restarted from a checkpoint), so that it shows the file as it is now.
Every session of this tool starts with such a marker at its first step, so
exporting a file again into the same directory replaces what it showed. W&B
steps only go forward: steps a resumed run trains again keep their first
values there (a resume is bit-exact, so only their times differ), and a file
rewritten from its first step starts a new W&B run.

A path that is not a regular file, a line that is not a JSON object with a
whole-number "step", a step that does not follow the one before (within one
version of the file), a number beyond a float's range, or a directory that
cannot be written is an error naming the file (and line); exit 2. A missing
library is named with the command that installs it; exit 2."""
import argparse
import json
import os
import signal
import stat
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_metrics import MetricsError, metric_number, metrics_line  # noqa: E402

TOOLS = os.path.dirname(os.path.abspath(__file__))
INSTALL_TENSORBOARD = ("bash tools/setup.sh python (the venv fsdpgen runs its tools with), or "
                       f"{sys.executable} -m pip install -r "
                       f"{os.path.join(TOOLS, 'requirements-metrics.txt')}")
INSTALL_WANDB = ("bash tools/setup.sh wandb (into the venv fsdpgen runs its tools with), or "
                 f"{sys.executable} -m pip install -r "
                 f"{os.path.join(TOOLS, 'requirements-wandb.txt')}")


def flatten(m, where, prefix=""):
    """The line's values by tag: (scalars {tag: float}, texts {tag: [str]},
    left_out {tag: why}). "step" is the index, not a value."""
    scalars, texts, left_out = {}, {}, {}
    for key, v in m.items():
        if not prefix and key == "step":
            continue
        tag = prefix + key
        if isinstance(v, bool):
            scalars[tag] = 1.0 if v else 0.0
        elif isinstance(v, (int, float)):
            value = metric_number({tag: v}, tag, where)  # a float's range, else MetricsError
            if value is not None:
                scalars[tag] = value
        elif v is None:
            continue
        elif isinstance(v, str):
            texts[tag] = [v]
        elif isinstance(v, list) and v and all(isinstance(s, str) for s in v):
            texts[tag] = v
        elif isinstance(v, dict):
            s, t, o = flatten(v, where, tag + "/")
            scalars.update(s)
            texts.update(t)
            left_out.update(o)
        else:
            left_out[tag] = f"a {type(v).__name__}, neither a number nor text"
    return scalars, texts, left_out


def markdown_of(texts):
    """TensorBoard's text plugin reads markdown: each text as an indented code
    block (shown as written, whatever it holds), numbered when there are several."""
    blocks = []
    for i, text in enumerate(texts, start=1):
        code = "\n".join("    " + line for line in text.split("\n"))
        blocks.append(f"**{i} of {len(texts)}**\n\n{code}" if len(texts) > 1 else code)
    return "\n\n".join(blocks)


class TensorBoardOut:
    """Event files in one directory (one TensorBoard run), through tensorboardX."""

    def __init__(self, logdir):
        try:
            from tensorboardX import SummaryWriter
            from tensorboardX.proto.event_pb2 import Event, SessionLog
        except ImportError as e:
            raise MetricsError(f"--tensorboard {logdir}: needs tensorboardX, which "
                               f"{sys.executable} lacks ({e}): {INSTALL_TENSORBOARD}") from e
        self._event, self._session_log = Event, SessionLog
        writable_dir("--tensorboard", logdir)
        try:
            self.writer = SummaryWriter(logdir, flush_secs=1, max_queue=1000)
        except OSError as e:
            raise MetricsError(f"--tensorboard {logdir}: cannot write: {e.strerror}") from e
        self.where = logdir

    def begin(self, step):
        """This session's first step: what an earlier export of the file into this
        directory showed from there on is replaced."""
        self.restart(step, whole_file=False)

    def restart(self, step, whole_file):
        """TensorBoard drops what it holds of this run from `step` on."""
        del whole_file
        self.writer.file_writer.add_event(
            self._event(step=step, session_log=self._session_log(status=self._session_log.START)))

    def write(self, step, scalars, texts):
        for tag, v in scalars.items():
            self.writer.add_scalar(tag, v, step)
        for tag, t in texts.items():
            self.writer.add_text(tag, markdown_of(t), step)

    def flush(self):
        self.writer.flush()

    def describe(self):
        return f"TensorBoard {self.where}"

    def close(self):
        self.writer.close()


class WandbOut:
    """A W&B run in offline mode (no network: `wandb sync` uploads it later)."""

    def __init__(self, root, project, name, config):
        os.environ["WANDB_MODE"] = "offline"
        os.environ.setdefault("WANDB_SILENT", "true")
        try:
            import wandb
        except ImportError as e:
            raise MetricsError(f"--wandb-offline {root}: needs wandb, which {sys.executable} "
                               f"lacks ({e}): {INSTALL_WANDB}") from e
        writable_dir("--wandb-offline", root)
        self.wandb, self.root, self.project, self.name, self.config = wandb, root, project, name, config
        self.run, self.last_step, self.dropped, self.runs = None, 0, [], []
        self.start()

    def start(self):
        settings = self.wandb.Settings(mode="offline", x_disable_stats=True, disable_git=True,
                                       save_code=False, console="off", silent=True,
                                       x_save_requirements=False)
        self.run = self.wandb.init(project=self.project, name=self.name, dir=self.root,
                                   config=self.config, settings=settings)
        self.last_step = 0
        self.where = os.path.dirname(self.run.dir)  # the offline run's directory
        self.runs.append(self.where)

    def begin(self, step):
        del step

    def restart(self, step, whole_file):
        """A file rewritten from its first step is a new run; a resumed run's
        steps that W&B already holds are left as they were."""
        if whole_file:
            self.run.finish()
            self.start()
        elif step <= self.last_step:
            self.dropped.append((step, self.last_step))

    def write(self, step, scalars, texts):
        if step <= self.last_step:
            return
        row = dict(scalars)
        for tag, t in texts.items():
            row[tag] = self.wandb.Table(columns=["text"], data=[[s] for s in t])
        self.run.log(row, step=step)
        self.last_step = step

    def flush(self):
        pass

    def describe(self):
        return f"W&B offline {self.where}"

    def close(self):
        self.run.finish()


def writable_dir(flag, path):
    """Creates path (and its parents); raises MetricsError naming it when it
    cannot be or is not a writable directory."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise MetricsError(f"{flag} {path}: not a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise MetricsError(f"{flag} {path}: cannot create the directory: {e.strerror}") from e
    if not os.path.isdir(path):
        raise MetricsError(f"{flag} {path}: not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise MetricsError(f"{flag} {path}: not writable")


class MetricsFile:
    """The metrics file as it grows: whole lines, in order, and whether it was
    rewritten (another file renamed over it, truncated, or changed before the
    point read) since they were read."""

    def __init__(self, path):
        self.path = path
        self.f = None
        self.ino = None
        self.consumed = 0        # bytes read, the partial line's included
        self.partial = b""       # the last line read, not yet ended by a newline
        self.last_line = b""     # the last whole line read, with its newline
        self.line_number = 0

    def exists(self):
        return os.path.exists(self.path)

    def open(self):
        """(Re)opens the file from its start; raises MetricsError when it is not a
        regular file or cannot be read."""
        self.close()
        try:
            # Only a regular file: a FIFO would wait for a writer, /dev/zero never end.
            if not stat.S_ISREG(os.stat(self.path).st_mode):
                raise MetricsError(f"{self.path}: not a regular file")
            f = open(self.path, "rb")
        except OSError as e:
            raise MetricsError(f"{self.path}: cannot read: {e.strerror}") from e
        self.f, self.ino = f, os.fstat(f.fileno()).st_ino
        self.consumed, self.partial, self.last_line, self.line_number = 0, b"", b"", 0

    def rewritten(self):
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False  # between a delete and the file written again: wait for it
        if st.st_ino != self.ino or st.st_size < self.consumed:
            return True
        if not self.last_line:
            return False
        at = self.consumed - len(self.partial) - len(self.last_line)
        return os.pread(self.f.fileno(), len(self.last_line), at) != self.last_line

    def lines(self):
        """The whole lines appended since the last call: [(path:line, bytes)]."""
        data = self.f.read()
        if not data:
            return []
        self.consumed += len(data)
        data = self.partial + data
        *whole, self.partial = data.split(b"\n")
        out = []
        for raw in whole:
            self.line_number += 1
            out.append((f"{self.path}:{self.line_number}", raw))
            self.last_line = raw + b"\n"
        return out

    def close(self):
        if self.f:
            self.f.close()
            self.f = None


class Exporter:
    """Writes each step's line to the outputs once, in step order, and marks a
    restart where a rewritten file's steps go back."""

    def __init__(self, outs):
        self.outs = outs
        self.written = {}        # step: CRC-32 of its line, as written
        self.last_step = 0       # the last step written (0: none)
        self.file_last = 0       # the last step of the file's current version
        self.file_first = 0      # its first step
        self.replaying = False   # reading a rewritten file again: skip what is written
        self.session_started = False
        self.steps = 0
        self.restarts = []       # steps the outputs were told to restart at
        self.left_out = {}       # tag: why, said once each

    def new_version(self):
        """The file was rewritten: its lines come again from its start."""
        self.replaying = bool(self.written)
        self.file_last = self.file_first = 0

    def line(self, where, raw):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise MetricsError(f"{where}: not a text line ({e.reason} at byte {e.start})") from e
        m = metrics_line(where, text)
        if m is None:
            return
        step = m["step"]
        if self.file_last and step <= self.file_last:
            raise MetricsError(f"{where}: step {step} does not follow step {self.file_last}; a "
                               "metrics file is one run (a run resumed into another --metrics "
                               "file: export each)")
        self.file_first = self.file_first or step
        self.file_last = step
        scalars, texts, left_out = flatten(m, where)
        crc = zlib.crc32(raw)
        if self.replaying and step <= self.last_step:
            if self.written.get(step) == crc:
                return  # already written, unchanged
            self.restart(step, whole_file=step == self.file_first)
        self.replaying = False
        if not self.session_started:
            self.session_started = True
            for out in self.outs:
                out.begin(step)
        for tag, why in left_out.items():
            if tag not in self.left_out:
                self.left_out[tag] = why
                note(f"{where}: \"{tag}\" is {why}; left out")
        for out in self.outs:
            out.write(step, scalars, texts)
        self.written[step] = crc
        self.last_step = step
        self.steps += 1

    def restart(self, step, whole_file):
        note(f"{'the file was rewritten from its first step' if whole_file else 'a resumed run'}: "
             f"steps from {step} on are written again (before: up to {self.last_step})")
        for s in [s for s in self.written if s >= step]:
            del self.written[s]
        for out in self.outs:
            out.restart(step, whole_file)
        self.restarts.append(step)
        self.last_step = step - 1

    def flush(self):
        for out in self.outs:
            out.flush()


def note(text):
    print(f"fsdpgen metrics: note: {text}", file=sys.stderr, flush=True)


def pid_running(pid, start_ticks):
    """Whether process pid is the one seen at the start and has not ended (a
    zombie has ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != b"Z" and int(fields[19]) == start_ticks


def pid_start_ticks(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        raise MetricsError(f"--pid {pid}: no such process") from None
    if fields[0] == b"Z":
        raise MetricsError(f"--pid {pid}: the process has ended")
    return int(fields[19])


class Stop:
    """While it is entered, SIGINT and SIGTERM end the following (at the next
    poll, after the lines written so far), not the tool."""

    def __enter__(self):
        self.signal = None
        self.saved = {s: signal.signal(s, self.handler) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *_):
        for s, handler in self.saved.items():
            signal.signal(s, handler)

    def handler(self, number, _frame):
        self.signal = signal.Signals(number).name


def drain(source, exporter):
    for where, raw in source.lines():
        exporter.line(where, raw)


def export_once(source, exporter):
    if not source.exists():
        raise MetricsError(f"{source.path}: cannot read: No such file or directory")
    source.open()
    drain(source, exporter)
    if exporter.steps == 0 and not source.partial:
        raise MetricsError(f"{source.path}: empty: no step to export")


def follow(source, exporter, args):
    """Reads the file as it grows until --pid's process ends or a signal stops
    it; returns the signal's name, or None."""
    start_ticks = pid_start_ticks(args.pid) if args.pid else None
    until = f"until process {args.pid} ends" if args.pid else "until stopped (Ctrl-C)"
    print(f"fsdpgen metrics: following {source.path} {until}", flush=True)
    with Stop() as stop:
        return follow_until(source, exporter, args, stop, start_ticks)


def follow_until(source, exporter, args, stop, start_ticks):
    waiting_said = False
    while True:
        ended = stop.signal or (args.pid and not pid_running(args.pid, start_ticks))
        if source.f is None:
            if source.exists():
                source.open()
            elif ended:
                if args.pid and not stop.signal:
                    raise MetricsError(f"{source.path}: process {args.pid} ended and the file "
                                       "was never written")
                break
            elif not waiting_said:
                print(f"fsdpgen metrics: waiting for {source.path} to be written", flush=True)
                waiting_said = True
        if source.f is not None:
            if source.rewritten():
                source.open()
                exporter.new_version()
            drain(source, exporter)
            exporter.flush()
        if ended:
            return stop.signal
        time.sleep(args.interval)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="fsdpgen metrics",
        description="Write an fsdpgen --metrics file as TensorBoard event files and/or a W&B "
                    "offline run, once or live beside the run (--follow).")
    parser.add_argument("metrics", help="the run's --metrics file (JSON lines)")
    parser.add_argument("--tensorboard", metavar="DIR",
                        help="write event files here (one TensorBoard run: tensorboard --logdir "
                             "its parent compares runs)")
    parser.add_argument("--wandb-offline", metavar="DIR",
                        help="write a W&B offline run under DIR/wandb (wandb sync uploads it)")
    parser.add_argument("--wandb-project", default="fsdpgen", help="W&B project (default fsdpgen)")
    parser.add_argument("--name", help="W&B run name (default: the metrics file's name)")
    parser.add_argument("--follow", action="store_true",
                        help="keep reading lines as the run appends them, until --pid ends or "
                             "Ctrl-C (SIGINT) or SIGTERM")
    parser.add_argument("--pid", type=int, help="with --follow: stop when this process ends "
                        "(the training run's, or its launcher's: mpirun, srun)")
    parser.add_argument("--interval", type=float, default=1.0, metavar="S",
                        help="with --follow: seconds between reads (default 1)")
    args = parser.parse_args(argv)
    try:
        if not args.tensorboard and not args.wandb_offline:
            raise MetricsError("nothing to write: give --tensorboard DIR and/or --wandb-offline DIR")
        if (args.pid is not None) and not args.follow:
            raise MetricsError("--pid is for --follow")
        if args.interval <= 0 or args.interval > 3600:
            raise MetricsError(f"--interval {args.interval}: seconds between 0 and 3600")
        source = MetricsFile(args.metrics)
        if not args.follow and not source.exists():
            raise MetricsError(f"{args.metrics}: cannot read: No such file or directory")
        outs = []
        try:
            if args.tensorboard:
                outs.append(TensorBoardOut(args.tensorboard))
            if args.wandb_offline:
                name = args.name or os.path.splitext(os.path.basename(args.metrics))[0]
                outs.append(WandbOut(args.wandb_offline, args.wandb_project, name,
                                     {"metrics_file": os.path.abspath(args.metrics)}))
            exporter = Exporter(outs)
            stopped = follow(source, exporter, args) if args.follow else \
                export_once(source, exporter)
        finally:
            for out in outs:
                out.close()
            source.close()
    except MetricsError as e:
        print(f"fsdpgen metrics: error: {e}", file=sys.stderr)
        return 2
    if source.partial.strip():
        note(f"{source.path}:{source.line_number + 1}: the last line has no newline (the run "
             "is writing it, or ended while it did); left out")
    shown = len(exporter.written)
    steps = f"{shown} step{'s' if shown != 1 else ''}"
    if exporter.last_step:
        steps += f" (to step {exporter.last_step})"
    again = f"; steps from {', '.join(map(str, exporter.restarts))} on written again (the " \
        "file was rewritten)" if exporter.restarts else ""
    where = " and ".join(o.describe() for o in outs)
    print(f"fsdpgen metrics: {steps} written to {where}{again}"
          + (f"; stopped by {stopped}" if args.follow and stopped else ""))
    for out in outs:
        if isinstance(out, WandbOut):
            for first, last in out.dropped:
                note(f"W&B: steps {first}-{last} were trained again by a resumed run; W&B keeps "
                     "their first values (its steps only go forward)")
            print(f"fsdpgen metrics: upload with: wandb sync {' '.join(out.runs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
