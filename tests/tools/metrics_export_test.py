#!/usr/bin/env python3
"""Tests of tools/metrics_export.py (fsdpgen metrics): the TensorBoard event
files it writes, read back by TensorBoard's own EventAccumulator, hold every
number of the metrics file at its step (as the 32-bit floats TensorBoard
keeps) and the samples as text; --follow picks up lines appended after it
started, waits for a partial line, shows a resumed run's rewritten file as it
is now, and stops when --pid ends or on SIGINT; bad inputs are errors naming
the file and line. The W&B offline run is read back from its .wandb file and
makes no network call (under strace, where it is installed). Runs under the
python of `bash tools/setup.sh python`: given as --python (with --fsdpgen,
the binary), it runs itself again with it; exits 77 (CTest: skipped) saying
why when that python is not there; W&B tests skip, saying why, without wandb."""
import contextlib
import glob
import io
import json
import logging
import math
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TOOL = os.path.join(ROOT, "tools", "metrics_export.py")
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prepare_test  # noqa: E402  (its re-exec under the venv's python, and FSDPGEN)


def has_wandb():
    try:
        import wandb  # noqa: F401
        return True
    except ImportError:
        return False


def step_line(s, ms=10.0, **extra):
    """A metrics line with the keys run_log_metrics_line writes (CPU run)."""
    m = {"step": s, "loss": 5.0 / s, "lr": 1e-3 * s, "grad_norm": 0.5 + s, "ms": ms,
         "host_resident_bytes": 123456789 + s, "arena_resident_bytes": 4096 * s,
         "arena_growth_bytes": 0, "set_up_beside_arena_bytes": 245760, "skipped": s == 2,
         "loss_scale": 1, "tokens_per_s": 51200.5, "epoch": 0}
    m.update(extra)
    return json.dumps(m)


def write(path, lines, mode="w"):
    with open(path, mode, encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")


def f32(v):
    return struct.unpack("f", struct.pack("f", v))[0]


def read_tensorboard(logdir):
    """{tag: [(step, value)]} of scalars and {tag: [(step, text)]} of texts, as
    TensorBoard's EventAccumulator reads the directory (restarts applied)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    logging.getLogger("tensorboard").setLevel(logging.ERROR)  # its note on each restart it applies
    acc = EventAccumulator(logdir, size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    scalars = {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in tags["scalars"]}
    texts = {t: [(e.step, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors(t)]
             for t in tags["tensors"]}
    return scalars, texts


def wait_for(what, check, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def wandb_records(run_dir):
    """The records of an offline run's .wandb file (LevelDB's log format after
    W&B's 7-byte header), parsed with W&B's own protobuf schema."""
    from wandb.proto import wandb_internal_pb2 as pb
    (path,) = glob.glob(os.path.join(run_dir, "*.wandb"))
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b":W&B", data[:7]
    pos, block, records, pending = 7, 32768, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        fragment = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 1:          # full
            records.append(fragment)
        elif kind == 2:        # first
            pending = fragment
        elif kind == 3:        # middle
            pending += fragment
        elif kind == 4:        # last
            records.append(pending + fragment)
    out = []
    for r in records:
        record = pb.Record()
        record.ParseFromString(r)
        out.append(record)
    return out


class MetricsExport(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def run_main(self, args):
        import metrics_export
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = metrics_export.main(args)
        return rc, out.getvalue(), err.getvalue()

    def start(self, args):
        p = subprocess.Popen([sys.executable, TOOL] + args, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p

    def sleeper(self):
        """A process standing for the training run, for --pid."""
        return self.start_raw([sys.executable, "-c", "import time; time.sleep(600)"])

    def start_raw(self, argv):
        p = subprocess.Popen(argv)
        self.procs.append(p)
        return p

    def test_every_number_at_its_step_and_samples_as_text(self):
        lines = [step_line(1), step_line(2, val_loss=4.5),
                 step_line(3, samples=["Once upon a time", "```\nx = 1\n\n# not a heading"],
                           eval_acc=0.25, eval_acc_norm=0.3125, eval_examples=16,
                           straggler={"rank": 1, "busy_s": 0.5, "median_rank": 0,
                                      "median_busy_s": 0.25, "step_s": 0.6, "op_kind": "forward",
                                      "lost_s": 0.25}),
                 step_line(4, loss=None, val_loss=float("nan"), checkpoint_stall_s=0.125,
                           skipped_spike=0)]
        write(self.path("run.jsonl"), lines)
        rc, out, err = self.run_main([self.path("run.jsonl"), "--tensorboard", self.path("tb")])
        self.assertEqual(rc, 0, err)
        self.assertIn(f"4 steps (to step 4) written to TensorBoard {self.path('tb')}", out)
        scalars, texts = read_tensorboard(self.path("tb"))
        want = {}
        for line in lines:
            m = json.loads(line)
            for key, v in m.items():
                if key in ("step", "samples") or v is None or \
                        (isinstance(v, float) and math.isnan(v)):
                    continue
                if key == "straggler":
                    for k, x in v.items():
                        if k != "op_kind":
                            want.setdefault(f"straggler/{k}", []).append((m["step"], f32(x)))
                    continue
                want.setdefault(key, []).append((m["step"], f32(float(v))))
        self.assertEqual(sorted(scalars), sorted(want))
        for tag, points in want.items():
            self.assertEqual(scalars[tag], points, tag)
        self.assertEqual(scalars["skipped"], [(1, 0.0), (2, 1.0), (3, 0.0), (4, 0.0)])
        self.assertEqual(scalars["loss"], [(1, 5.0), (2, 2.5), (3, f32(5 / 3))])  # null left out
        self.assertEqual(scalars["val_loss"], [(2, 4.5)])  # NaN left out
        self.assertEqual(scalars["eval_acc"], [(3, 0.25)])
        self.assertEqual(sorted(texts), ["samples/text_summary", "straggler/op_kind/text_summary"])
        (step, text), = texts["samples/text_summary"]
        self.assertEqual(step, 3)
        # Each sample an indented code block: markdown shows it as written.
        self.assertEqual(text, "**1 of 2**\n\n    Once upon a time\n\n**2 of 2**\n\n"
                               "    ```\n    x = 1\n    \n    # not a heading")
        self.assertEqual(texts["straggler/op_kind/text_summary"], [(3, "    forward")])

    def test_values_outside_numbers_and_text_are_left_out_and_said_once(self):
        write(self.path("run.jsonl"), [step_line(1, hist=[1, 2]), step_line(2, hist=[3])])
        rc, _, err = self.run_main([self.path("run.jsonl"), "--tensorboard", self.path("tb")])
        self.assertEqual(rc, 0, err)
        self.assertEqual(err.count("\"hist\" is a list, neither a number nor text; left out"), 1,
                         err)
        self.assertIn(self.path("run.jsonl") + ":1: \"hist\"", err)

    def test_exporting_again_into_the_directory_replaces_what_it_showed(self):
        write(self.path("run.jsonl"), [step_line(s) for s in range(1, 7)])
        self.assertEqual(self.run_main([self.path("run.jsonl"), "--tensorboard",
                                        self.path("tb")])[0], 0)
        time.sleep(1.1)  # event file names hold the second they were made in
        write(self.path("run.jsonl"), [step_line(s, ms=20.0) for s in range(1, 4)])
        self.assertEqual(self.run_main([self.path("run.jsonl"), "--tensorboard",
                                        self.path("tb")])[0], 0)
        self.assertEqual(len(glob.glob(self.path("tb/events.out.tfevents.*"))), 2)
        scalars, _ = read_tensorboard(self.path("tb"))
        self.assertEqual(scalars["ms"], [(1, 20.0), (2, 20.0), (3, 20.0)])

    def test_follow_picks_up_appended_lines_and_stops_when_the_run_ends(self):
        run = self.sleeper()
        metrics, tb = self.path("run.jsonl"), self.path("tb")
        p = self.start([metrics, "--tensorboard", tb, "--follow", "--pid", str(run.pid),
                        "--interval", "0.05"])
        # The file does not exist yet: the follower says it waits for it (read
        # as it prints: a follower slow to start must not find the file).
        said, deadline = b"", time.monotonic() + 60
        while b"to be written" not in said and time.monotonic() < deadline:
            if select.select([p.stdout], [], [], deadline - time.monotonic())[0]:
                chunk = os.read(p.stdout.fileno(), 4096)
                if not chunk:
                    break
                said += chunk
        self.assertIn(f"waiting for {metrics} to be written", said.decode())
        self.assertIsNone(p.poll())
        write(metrics, [step_line(1), step_line(2)])
        wait_for("steps 1-2", lambda: os.path.isdir(tb) and
                 [s for s, _ in read_tensorboard(tb)[0].get("loss", [])] == [1, 2])
        third = step_line(3, samples=["hello"])
        with open(metrics, "a") as f:
            f.write(third[:20])  # a partial line waits for its end
            f.flush()
            time.sleep(0.5)
            self.assertEqual([s for s, _ in read_tensorboard(tb)[0]["loss"]], [1, 2])
            f.write(third[20:] + "\n")
        wait_for("step 3", lambda: [s for s, _ in read_tensorboard(tb)[0]["loss"]] == [1, 2, 3])
        write(metrics, [step_line(4)], mode="a")
        run.kill()  # the lines written before the run ended are read, then it stops
        run.wait()
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("4 steps (to step 4) written", out)
        scalars, texts = read_tensorboard(tb)
        self.assertEqual([s for s, _ in scalars["loss"]], [1, 2, 3, 4])
        self.assertEqual(texts["samples/text_summary"], [(3, "    hello")])

    def test_follow_shows_a_resumed_runs_rewritten_file_as_it_is(self):
        metrics, tb = self.path("run.jsonl"), self.path("tb")
        write(metrics, [step_line(s) for s in range(1, 7)])
        p = self.start([metrics, "--tensorboard", tb, "--follow", "--interval", "0.05"])
        wait_for("steps 1-6", lambda: os.path.isdir(tb) and
                 len(read_tensorboard(tb)[0].get("loss", [])) == 6)
        # What run_log_metrics_resume does: the lines of steps 1-3 (the
        # checkpoint's) renamed over the file, then the run appends steps 4-8.
        write(metrics + ".partial", [step_line(s) for s in range(1, 4)])
        os.rename(metrics + ".partial", metrics)
        time.sleep(0.3)
        write(metrics, [step_line(s, ms=20.0) for s in range(4, 9)], mode="a")
        wait_for("steps 1-8", lambda: len(read_tensorboard(tb)[0]["loss"]) == 8)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("8 steps (to step 8) written to TensorBoard", out)
        self.assertIn("; steps from 4 on written again (the file was rewritten); stopped by SIGINT", out)
        self.assertIn("a resumed run: steps from 4 on are written again (before: up to 6)", err)
        scalars, _ = read_tensorboard(tb)
        self.assertEqual(scalars["ms"], [(s, 10.0) for s in range(1, 4)] +
                         [(s, 20.0) for s in range(4, 9)])

    def test_follow_shows_a_new_run_that_truncated_the_file(self):
        metrics, tb = self.path("run.jsonl"), self.path("tb")
        write(metrics, [step_line(s) for s in range(1, 6)])
        p = self.start([metrics, "--tensorboard", tb, "--follow", "--interval", "0.05"])
        wait_for("steps 1-5", lambda: os.path.isdir(tb) and
                 len(read_tensorboard(tb)[0].get("loss", [])) == 5)
        write(metrics, [step_line(s, ms=30.0) for s in range(1, 4)])  # "w": the same file
        wait_for("the new run", lambda: read_tensorboard(tb)[0]["ms"] ==
                 [(1, 30.0), (2, 30.0), (3, 30.0)])
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("the file was rewritten from its first step: steps from 1 on", err)
        self.assertIn("stopped by SIGTERM", out)

    def test_bad_inputs_name_the_file_and_line(self):
        write(self.path("ok.jsonl"), [step_line(1)])
        cases = {
            "text.jsonl": (["step 1 loss 2"], "text.jsonl:1: not JSON"),
            "list.jsonl": ([step_line(1), "[1, 2]"], "list.jsonl:2: a line is one JSON object"),
            "nostep.jsonl": (['{"loss": 1.0}'], "nostep.jsonl:1: no whole-number \"step\""),
            "back.jsonl": ([step_line(2), "", step_line(2)],
                           "back.jsonl:3: step 2 does not follow step 2"),
            "big.jsonl": (['{"step": 1, "loss": ' + "9" * 401 + "}"],
                          "big.jsonl:1: \"loss\" is an integer of 401 digits"),
            "empty.jsonl": ([], "empty.jsonl: empty: no step to export"),
        }
        for name, (lines, message) in cases.items():
            write(self.path(name), lines)
            rc, _, err = self.run_main([self.path(name), "--tensorboard", self.path("tb-" + name)])
            self.assertEqual(rc, 2, name)
            self.assertIn("fsdpgen metrics: error: " + self.path(message.split(":")[0]), err, name)
            self.assertIn(message.split(":", 1)[1], err, name)
        with open(self.path("binary.jsonl"), "wb") as f:
            f.write(b'{"step": 1, "loss": 1.0}\n\xff\xfe\n')
        rc, _, err = self.run_main([self.path("binary.jsonl"), "--tensorboard", self.path("tbb")])
        self.assertEqual(rc, 2)
        self.assertIn(self.path("binary.jsonl") + ":2: not a text line", err)
        os.mkfifo(self.path("fifo"))
        for path in (self.path("fifo"), self.dir, "/dev/zero"):
            rc, _, err = self.run_main([path, "--tensorboard", self.path("tbf")])
            self.assertEqual(rc, 2, path)
            self.assertIn(path + ": not a regular file", err)
        with open(self.path("afile"), "w") as f:
            f.write("x")
        for args, message in (
                ([self.path("missing.jsonl"), "--tensorboard", self.path("tbm")],
                 self.path("missing.jsonl") + ": cannot read: No such file"),
                ([self.path("ok.jsonl"), "--tensorboard", self.path("afile")],
                 "--tensorboard " + self.path("afile") + ": not a directory"),
                ([self.path("ok.jsonl"), "--tensorboard", self.path("afile/tb")],
                 "--tensorboard " + self.path("afile/tb") + ": cannot create the directory"),
                ([self.path("ok.jsonl")], "nothing to write: give --tensorboard DIR"),
                ([self.path("ok.jsonl"), "--tensorboard", self.path("tb"), "--pid", "1"],
                 "--pid is for --follow"),
                ([self.path("ok.jsonl"), "--tensorboard", self.path("tb"), "--follow", "--pid",
                  "999999999"], "--pid 999999999: no such process"),
                ([self.path("ok.jsonl"), "--tensorboard", self.path("tb"), "--follow",
                  "--interval", "0"], "--interval 0.0: seconds between 0 and 3600")):
            rc, _, err = self.run_main(args)
            self.assertEqual(rc, 2, args)
            self.assertIn("fsdpgen metrics: error: " + message, err, args)

    def test_a_run_that_ends_without_writing_its_file_is_an_error(self):
        # The run ends while followed and is not reaped (this test waits for it
        # only later): a zombie counts as ended.
        run = self.start_raw([sys.executable, "-c", "import time; time.sleep(1)"])
        p = self.start([self.path("never.jsonl"), "--tensorboard", self.path("tb"), "--follow",
                        "--pid", str(run.pid), "--interval", "0.05"])
        out, err = p.communicate(timeout=60)
        self.assertIsNone(run.returncode)
        self.assertIn(f"process {run.pid} ended and the file was never written", err)
        self.assertEqual(p.returncode, 2, out + err)
        rc, _, err = self.run_main([self.path("never.jsonl"), "--tensorboard", self.path("tb"),
                                    "--follow", "--pid", str(run.pid)])
        self.assertEqual(rc, 2)
        self.assertIn(f"--pid {run.pid}: the process has ended", err)

    def test_a_missing_library_names_the_install_command(self):
        write(self.path("ok.jsonl"), [step_line(1)])
        saved = {m: sys.modules.get(m) for m in ("tensorboardX", "wandb")}
        sys.modules["tensorboardX"] = None  # import raises ImportError
        sys.modules["wandb"] = None
        try:
            rc, _, err = self.run_main([self.path("ok.jsonl"), "--tensorboard", self.path("tb")])
            self.assertEqual(rc, 2)
            self.assertIn(f"--tensorboard {self.path('tb')}: needs tensorboardX, which "
                          f"{sys.executable} lacks", err)
            self.assertIn("bash tools/setup.sh python", err)
            self.assertIn("requirements-metrics.txt", err)
            rc, _, err = self.run_main([self.path("ok.jsonl"), "--wandb-offline", self.path("wb")])
            self.assertEqual(rc, 2)
            self.assertIn("needs wandb", err)
            self.assertIn("bash tools/setup.sh wandb", err)
        finally:
            for m, v in saved.items():
                if v is None:
                    del sys.modules[m]
                else:
                    sys.modules[m] = v

    def test_wandb_offline_run_holds_the_steps_and_makes_no_network_call(self):
        if not has_wandb():
            self.skipTest(f"wandb is not installed in {sys.executable} (bash tools/setup.sh wandb)")
        lines = [step_line(1), step_line(2, val_loss=4.5),
                 step_line(3, samples=["Once upon a time"], eval_acc=0.25)]
        write(self.path("run.jsonl"), lines)
        argv = [sys.executable, TOOL, self.path("run.jsonl"), "--wandb-offline", self.path("wb"),
                "--tensorboard", self.path("tb")]
        strace = shutil.which("strace")
        trace = self.path("strace.txt")
        if strace:
            argv = [strace, "-f", "-qq", "-e", "trace=connect,sendto,sendmsg", "-o", trace] + argv
        else:
            print("note: no strace here: the test does not watch for network calls")
        r = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, WANDB_MODE="online"))  # the tool forces offline
        self.assertEqual(r.returncode, 0, r.stderr)
        (run_dir,) = glob.glob(self.path("wb/wandb/offline-run-*"))
        self.assertIn(f"written to TensorBoard {self.path('tb')} and W&B offline {run_dir}",
                      r.stdout)
        self.assertIn(f"upload with: wandb sync {run_dir}", r.stdout)
        if strace:
            with open(trace) as f:
                calls = [line for line in f if "connect(" in line or "sendto(" in line or
                         "sendmsg(" in line]
            self.assertTrue(calls, "strace saw no calls at all")
            network = [c for c in calls if "AF_INET" in c]
            self.assertEqual(network, [], "network calls in offline mode")
        history = {}
        for record in wandb_records(run_dir):
            if record.WhichOneof("record_type") == "history":
                items = {i.key or "/".join(i.nested_key): json.loads(i.value_json)
                         for i in record.history.item}
                history[items["_step"]] = items
        self.assertEqual(sorted(history), [1, 2, 3])
        for line in lines:
            m = json.loads(line)
            row = history[m["step"]]
            for key, v in m.items():
                if key in ("step", "samples"):
                    continue
                self.assertEqual(row[key], float(v), (m["step"], key))  # doubles: exact
        self.assertEqual(history[3]["samples/_type"], "table-file")
        with open(os.path.join(run_dir, "files", history[3]["samples/path"])) as f:
            table = json.load(f)
        self.assertEqual(table["columns"], ["text"])
        self.assertEqual(table["data"], [["Once upon a time"]])


class FsdpgenMetrics(unittest.TestCase):
    """`fsdpgen metrics` runs the tool with the tools' python."""

    def setUp(self):
        if not prepare_test.FSDPGEN:
            self.skipTest("no --fsdpgen binary given")
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_the_command_runs_the_tool(self):
        env = dict(os.environ, FSDPGEN_PYTHON=sys.executable)
        r = subprocess.run([prepare_test.FSDPGEN, "metrics", "--help"], capture_output=True, text=True,
                           env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("usage: fsdpgen metrics", r.stdout)
        metrics = os.path.join(self.dir, "run.jsonl")
        write(metrics, [step_line(1), step_line(2)])
        tb = os.path.join(self.dir, "tb")
        r = subprocess.run([prepare_test.FSDPGEN, "metrics", metrics, "--tensorboard", tb],
                           capture_output=True,
                           text=True, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([s for s, _ in read_tensorboard(tb)[0]["loss"]], [1, 2])
        r = subprocess.run([prepare_test.FSDPGEN, "metrics", metrics, "--tensorboard", tb],
                           capture_output=True,
                           text=True, env=dict(os.environ, FSDPGEN_PYTHON="/nonexistent/python"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("fsdpgen metrics: error: /nonexistent/python: no python there", r.stderr)
        self.assertIn("bash tools/setup.sh python", r.stderr)


if __name__ == "__main__":
    prepare_test.reexec_with(("tensorboardX", "tensorboard"),
                             "bash tools/setup.sh python installs them in build/python")
    unittest.main(verbosity=2)
