#!/usr/bin/env python3
"""The walk of docs/walkthrough.md, as a new user runs it, on a small corpus
(this repository's own docs/*.md) and a tokenizer trained on it: train a
tokenizer, prepare the token files, make a HellaSwag-format evaluation file
from the text, build a small GPT-2 and train it at 2 ranks with samples,
evaluations and validation in the log, save a Hugging Face model directory,
sample from it offline, and write the metrics as TensorBoard event files.
Checks that each step did its work: the validation loss falls well below
its first value, samples are in the log and the metrics, the evaluation's
scores are the saved model's scored offline, a seeded offline sample is reproducible and
greedy sampling of the saved directory equals the training binary's own
forward, and TensorBoard's reader finds the scalars. With a python that has
transformers (FSDPGEN_TRANSFORMERS_PYTHON, else /tmp/hf/bin/python), the
saved directory is loaded by transformers and its greedy generation equals
fsdpgen sample's, token for token (skipped, said, without one).

Usage: journey_test.py --python PY --fsdpgen FSDPGEN (exit 77, skipped, when
PY is not there)."""
import glob
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
import prepare_test  # noqa: E402  (its re-exec under the venv's python, and FSDPGEN)

STEPS = 240
SPEC = f"""model journey {{
  family  = gpt2
  vocab   = 512          # the tokenizer's (fsdpgen train-tokenizer --vocab 512)
  context = 128
  width   = 96
  heads   = 4
  layers  = 3
  tie_embeddings = true
}}
units {{ each block }}
parallel {{
  world     = 2
  sharding  = full_shard
  precision {{ param = fp32  reduce = fp32  master = fp32 }}
}}
train {{
  optimizer   = adamw(lr = 3e-3, betas = (0.9, 0.95), eps = 1e-8, weight_decay = 0.0)
  lr_schedule = cosine(warmup = 10, min = 3e-4)
  micro_batch = 8
  steps       = {STEPS}
  seed        = 1
  data        = tokens("data/train_*.bin")
  val         = tokens("data/val_*.bin")
  val_every   = 60
  val_sequences = 16
  eval        = "eval.bin"
  eval_every  = 120
  sample_every  = 120
  sample_tokens = 24
  log_every   = 20
}}
"""


def eval_examples(text, n=20, seed=5):
    """HellaSwag-format examples from the corpus's own sentences: the
    context is a sentence's first words, the right ending its rest, the
    wrong endings the rests of three other sentences."""
    rng = random.Random(seed)
    sentences = re.split(r"(?<=[.!?])\s+", " ".join(text.split()))
    sentences = [s for s in sentences
                 if 8 <= len(s.split()) and len(s) <= 160 and "|" not in s and "#" not in s]
    n = min(n, len(sentences) // 4)
    picked = rng.sample(sentences, n + 3 * n)
    out = []
    for i in range(n):
        words = picked[i].split()
        cut = len(words) // 2
        label = rng.randrange(4)
        wrong = [" ".join(s.split()[len(s.split()) // 2:]) for s in picked[n + 3 * i:n + 3 * i + 3]]
        endings = wrong[:label] + [" ".join(words[cut:])] + wrong[label:]
        out.append({"ctx": " ".join(words[:cut]), "endings": endings, "label": label})
    return out


def transformers_python():
    for p in (os.environ.get("FSDPGEN_TRANSFORMERS_PYTHON", ""), "/tmp/hf/bin/python"):
        if p and os.path.exists(p):
            r = subprocess.run([p, "-c", "import transformers, torch"], capture_output=True)
            if r.returncode == 0:
                return p
    return None


class JourneyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not prepare_test.FSDPGEN:
            raise unittest.SkipTest("no --fsdpgen binary given")
        cls.fsdpgen = os.path.abspath(prepare_test.FSDPGEN)
        cls.dir = tempfile.mkdtemp(prefix="journey.")
        cls.env = dict(os.environ, FSDPGEN_PYTHON=sys.executable, OMPI_ALLOW_RUN_AS_ROOT="1",
                       OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        corpus = os.path.join(cls.dir, "corpus")
        os.makedirs(corpus)
        for path in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
            shutil.copy(path, corpus)
        text = ""
        for path in sorted(glob.glob(os.path.join(corpus, "*.md"))):
            with open(path, encoding="utf-8") as f:
                text += f.read()
        examples = eval_examples(text)
        cls.n_eval = len(examples)
        with open(os.path.join(cls.dir, "eval.jsonl"), "w") as f:
            for e in examples:
                f.write(json.dumps(e) + "\n")
        with open(os.path.join(cls.dir, "journey.fsdp"), "w") as f:
            f.write(SPEC)
        cls.run_step("train-tokenizer", "corpus/*.md", "-o", "tok", "--vocab", "512", "--quiet")
        cls.run_step("prepare", "corpus/*.md", "-o", "data", "--tokenizer", "tok", "--text-docs",
                     "paragraph", "--val-fraction", "0.1", "--quiet")
        cls.run_step("prepare-eval", "eval.jsonl", "--tokenizer", "data", "-o", "eval.bin")
        cls.run_step("journey.fsdp", "--target", "cpu", "-o", "train")
        cls.log = cls.run_cmd(["mpirun", "-n", "2", "--oversubscribe", "--bind-to", "none", "./train",
                               "--metrics", "run.jsonl", "--save", "model/"], timeout=900)

    @classmethod
    def tearDownClass(cls):
        if os.environ.get("FSDPGEN_KEEP_JOURNEY"):
            print(f"kept {cls.dir}")
            return
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def run_cmd(cls, argv, timeout=600):
        r = subprocess.run(argv, cwd=cls.dir, capture_output=True, text=True, env=cls.env, timeout=timeout)
        assert r.returncode == 0, f"{' '.join(argv)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r.stdout

    @classmethod
    def run_step(cls, *args):
        return cls.run_cmd([cls.fsdpgen, *args])

    def metrics(self):
        with open(os.path.join(self.dir, "run.jsonl")) as f:
            return [json.loads(line) for line in f]

    def test_the_model_learns_the_text(self):
        vals = [float(v) for v in re.findall(r"\| val loss ([0-9.]+) \| \d+ sequences", self.log)]
        self.assertEqual(len(vals), 4, self.log)  # steps 60, 120, 180, 240
        self.assertLess(vals[-1], vals[0] - 0.3, vals)
        self.assertLess(vals[-1], 0.8 * math.log(512), vals)  # the untrained model's ln 512 = 6.24

    def test_samples_in_the_log_and_the_metrics(self):
        lines = {m["step"]: m for m in self.metrics()}
        self.assertEqual(len(lines), STEPS)
        for step in (120, 240):
            self.assertIn("samples", lines[step], lines[step])
            self.assertTrue(all(isinstance(s, str) and s for s in lines[step]["samples"]))
        self.assertNotIn("samples", lines[60])
        self.assertIn(lines[240]["samples"][0].splitlines()[0][:20], self.log)

    def test_the_evaluation_in_the_loop_is_the_saved_models(self):
        lines = {m["step"]: m for m in self.metrics()}
        self.assertGreaterEqual(self.n_eval, 16)
        for step in (120, 240):
            self.assertEqual(lines[step]["eval_examples"], self.n_eval)
            self.assertTrue(0 <= lines[step]["eval_acc"] <= 1 and 0 <= lines[step]["eval_acc_norm"] <= 1)
        self.assertNotIn("eval_acc", lines[60])
        self.assertRegex(self.log, r"step 240/240 \| eval acc [0-9.]+ acc_norm [0-9.]+ \(%d examples\)"
                         % self.n_eval)
        # The saved model, scored offline by a run of no steps, scores as the run's last evaluation.
        out = self.run_cmd(["./train", "--init-from", "model", "--steps", "0", "--eval", "eval.bin",
                            "--val-every", "0", "--eval-scores", "scores.jsonl"])
        found = re.search(r"eval acc ([0-9.]+) acc_norm ([0-9.]+) \((\d+) examples\)", out)
        self.assertIsNotNone(found, out)
        self.assertEqual((float(found[1]), float(found[2]), int(found[3])),
                         (lines[240]["eval_acc"], lines[240]["eval_acc_norm"], self.n_eval))
        with open(os.path.join(self.dir, "scores.jsonl")) as f:
            scores = [json.loads(line) for line in f]
        self.assertEqual(len(scores), self.n_eval)
        right = sum(s["pred"] == s["label"] for s in scores)
        self.assertAlmostEqual(right / self.n_eval, lines[240]["eval_acc"], places=6)

    def test_the_saved_model_samples_offline(self):
        model = os.path.join(self.dir, "model")
        for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                     "tokenizer_config.json"):
            self.assertTrue(os.path.isfile(os.path.join(model, name)), name)
        args = ["sample", "model", "--prompt", "The plan", "--tokens", "16"]
        a = self.run_step(*args, "--seed", "3")
        self.assertEqual(a, self.run_step(*args, "--seed", "3"))
        self.assertNotEqual(a, self.run_step(*args, "--seed", "4"))
        self.assertIn("The plan", a)

    def test_tensorboard_reads_the_metrics(self):
        self.run_step("metrics", "run.jsonl", "--tensorboard", "tb")
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        acc = EventAccumulator(os.path.join(self.dir, "tb"))
        acc.Reload()
        tags = acc.Tags()["scalars"]
        for tag in ("loss", "val_loss", "eval_acc", "lr"):
            self.assertIn(tag, tags)
        self.assertEqual(len(acc.Scalars("loss")), STEPS)

    def test_transformers_loads_and_generates_the_same(self):
        python = transformers_python()
        if not python:
            self.skipTest("no python with transformers and torch (FSDPGEN_TRANSFORMERS_PYTHON)")
        ours = self.run_step("sample", "model", "--prompt", "The plan", "--tokens", "16",
                             "--temperature", "0")
        script = ("import sys, transformers\n"
                  "d = sys.argv[1]\n"
                  "tok = transformers.AutoTokenizer.from_pretrained(d)\n"
                  "m = transformers.AutoModelForCausalLM.from_pretrained(d)\n"
                  "x = tok('The plan', return_tensors='pt')\n"
                  "y = m.generate(**x, max_new_tokens=16, do_sample=False)\n"
                  "sys.stdout.write(tok.decode(y[0]))\n")
        r = subprocess.run([python, "-c", script, os.path.join(self.dir, "model")], capture_output=True,
                           text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(r.stdout, ours)

if __name__ == "__main__":
    prepare_test.reexec_with_tokenizers()
    unittest.main(verbosity=2)
