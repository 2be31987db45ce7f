#!/usr/bin/env python3
"""fsdpgen prepare's output trains: a small corpus through a fixture BPE of
512 tokens (tools/prepare_fixture.py) into token files, a spec of vocab 512
built with fsdpgen and trained a few steps on them, from the spec's
tokens(...) and from --data/--val; and the binary checks the set's
manifest.json against the model: a tokenizer of more tokens than the model's
vocab, and a shard the manifest does not list as it is, are refused, named.
Usage: prepare_train_test.py --python PY --fsdpgen FSDPGEN (exit 77, skipped,
when PY is not there)."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prepare_test  # noqa: E402  (its re-exec under the venv's python, and FSDPGEN)

SPEC = """model tiny_bpe {
  family  = gpt2
  vocab   = 512         # the fixture tokenizer's
  context = 32
  width   = 32
  heads   = 2
  layers  = 2
  tie_embeddings = true
}
units { each block }
parallel {
  world     = 1
  sharding  = full_shard
  precision { param = fp32  reduce = fp32  master = fp32 }
}
train {
  optimizer   = adamw(lr = 3e-3, betas = (0.9, 0.95), eps = 1e-8, weight_decay = 0.0)
  micro_batch = 4
  steps       = 6
  seed        = 1
  data        = tokens("data/train_*.bin")
  val         = tokens("data/val_*.bin")
  val_every   = 3
  val_sequences = 8
  log_every   = 1
}
"""


class PrepareTrainTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not prepare_test.FSDPGEN:
            raise unittest.SkipTest("no --fsdpgen binary given")
        import prepare_fixture
        cls.dir = tempfile.mkdtemp(prefix="prepare-train.")
        for vocab in (512, 1024):
            prepare_fixture.write_all(os.path.join(cls.dir, f"tok{vocab}"), vocab)
        with open(os.path.join(cls.dir, "spec.fsdp"), "w") as f:
            f.write(SPEC)
        cls.fsdpgen = prepare_test.FSDPGEN
        env = dict(os.environ, FSDPGEN_PYTHON=sys.executable)
        corpus = os.path.join(cls.dir, "tok512", "corpus.txt")
        for vocab, out in ((512, "data"), (1024, "data1024")):
            r = subprocess.run([cls.fsdpgen, "prepare", corpus, "-o", os.path.join(cls.dir, out),
                                "--tokenizer", os.path.join(cls.dir, f"tok{vocab}", "gpt2"),
                                "--text-docs", "line", "--val-fraction", "0.05", "--shard-tokens", "4000"],
                               capture_output=True, text=True, env=env)
            assert r.returncode == 0, r.stderr
        r = subprocess.run([cls.fsdpgen, "spec.fsdp", "--target", "cpu", "-o", "train"], cwd=cls.dir,
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def train(self, *args):
        return subprocess.run([os.path.join(self.dir, "train"), *args], cwd=self.dir, capture_output=True,
                              text=True, timeout=300)

    def test_the_prepared_set_trains_from_the_spec_and_from_flags(self):
        with open(os.path.join(self.dir, "data", "manifest.json")) as f:
            m = json.load(f)
        self.assertGreater(len(m["splits"]["train"]["shards"]), 2)
        for args in ((), ("--data", "data/train_*.bin", "--val", "data/val_*.bin")):
            r = self.train("--steps", "6", *args)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn(f"tokens data/train_*.bin: {len(m['splits']['train']['shards'])} files, "
                          f"{m['splits']['train']['tokens']:,} tokens (uint16)", r.stdout)
            losses = [float(x) for x in re.findall(r"^step \d+/6 \| loss ([0-9.]+)", r.stdout, re.M)]
            self.assertEqual(len(losses), 6, r.stdout)
            self.assertLess(abs(losses[0] - 6.238), 0.3, losses)  # ln 512 at the start
            self.assertLess(losses[-1], losses[0] - 0.1, losses)
            self.assertRegex(r.stdout, r"step 6/6 \| val loss [0-9.]+ \| 8 sequences")

    def test_a_tokenizer_beyond_the_models_vocab_is_named(self):
        r = self.train("--steps", "1", "--data", "data1024/train_*.bin", "--val-every", "0")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("data1024/manifest.json: these tokens were made by the tokenizer 'gpt2' of 1024 "
                      "tokens (ids up to 1023), but the model's vocab is 512", r.stdout + r.stderr)

    def test_a_shard_the_manifest_does_not_list_as_it_is_is_named(self):
        stale = os.path.join(self.dir, "stale")
        shutil.copytree(os.path.join(self.dir, "data"), stale)
        path = os.path.join(stale, "manifest.json")
        with open(path) as f:
            m = json.load(f)
        m["splits"]["train"]["shards"][1]["tokens"] += 1
        with open(path, "w") as f:
            json.dump(m, f)
        shutil.copy(os.path.join(stale, "val_000000.bin"), os.path.join(stale, "train_extra.bin"))
        r = self.train("--steps", "1", "--data", "stale/train_000001.bin", "--val-every", "0")
        self.assertIn("stale/train_000001.bin: holds 4000 tokens, but stale/manifest.json lists 4001",
                      r.stdout + r.stderr)
        r = self.train("--steps", "1", "--data", "stale/train_extra.bin", "--val-every", "0")
        self.assertIn("stale/train_extra.bin: not a shard that stale/manifest.json lists", r.stdout + r.stderr)


if __name__ == "__main__":
    prepare_test.reexec_with_tokenizers()
    unittest.main()
