#!/usr/bin/env python3
"""Tests of tools/train_tokenizer.py (fsdpgen train-tokenizer): the vocabulary
asked, the special tokens of each style at their ids, text round-tripping
through the library's own encode and decode, the same files from the same
inputs, --max-bytes, the tokenizer read by fsdpgen prepare, and bad input.
Runs under the python of `bash tools/setup.sh python` (re-executes itself
with --python; exits 77, skipped, when it is not there)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prepare_test  # noqa: E402  (its re-exec under the venv's python, and FSDPGEN)

ROOT = prepare_test.ROOT
TOOL = os.path.join(ROOT, "tools", "train_tokenizer.py")


def run_tool(*args):
    return subprocess.run([sys.executable, TOOL, *args, "--quiet"], capture_output=True, text=True)


def tokenizer_bytes(directory):
    with open(os.path.join(directory, "tokenizer.json"), "rb") as f:
        return f.read()


class TrainTokenizerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import prepare_fixture
        cls.dir = tempfile.mkdtemp(prefix="train-tokenizer.")
        cls.corpus = os.path.join(cls.dir, "corpus.txt")
        with open(cls.corpus, "w", encoding="utf-8") as f:
            f.write(prepare_fixture.corpus())

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def trained(self, name, *args):
        out = os.path.join(self.dir, name)
        r = run_tool(self.corpus, "-o", out, *args)
        self.assertEqual(r.returncode, 0, r.stderr)
        from tokenizers import Tokenizer
        return out, Tokenizer.from_file(os.path.join(out, "tokenizer.json")), r.stdout

    def test_gpt2_style(self):
        out, tok, stdout = self.trained("gpt2", "--vocab", "600", "--text-docs", "line")
        self.assertEqual(tok.get_vocab_size(with_added_tokens=True), 600)
        self.assertEqual(tok.token_to_id("<|endoftext|>"), 0)
        self.assertIn("vocab = 600", stdout)
        text = "The gradient of the shard, café and 日本 🙂 12345 times.\n"
        enc = tok.encode(text)
        self.assertEqual(tok.decode(enc.ids), text)  # byte-level: every text round-trips
        self.assertLess(len(enc.ids), len(text.encode("utf-8")))  # merges were learned
        self.assertNotIn(0, enc.ids)  # no BOS in GPT-2's layout
        with open(os.path.join(out, "tokenizer_config.json")) as f:
            config = json.load(f)
        self.assertEqual(config["eos_token"], "<|endoftext|>")
        self.assertFalse(config["add_bos_token"])

    def test_llama3_style(self):
        out, tok, _ = self.trained("llama3", "--vocab", "600", "--style", "llama3", "--context", "256")
        bos, eos = tok.token_to_id("<|begin_of_text|>"), tok.token_to_id("<|end_of_text|>")
        self.assertEqual((bos, eos), (0, 1))
        self.assertEqual(tok.encode("a river").ids[0], bos)  # the post-processor puts BOS first
        with open(os.path.join(out, "tokenizer_config.json")) as f:
            config = json.load(f)
        self.assertEqual(config["model_max_length"], 256)
        self.assertEqual(config["bos_token"], "<|begin_of_text|>")

    def test_same_inputs_same_files(self):
        a, _, _ = self.trained("same-a", "--vocab", "700")
        b, _, _ = self.trained("same-b", "--vocab", "700")
        c, _, _ = self.trained("same-c", "--vocab", "701")
        self.assertEqual(tokenizer_bytes(a), tokenizer_bytes(b))
        self.assertNotEqual(tokenizer_bytes(a), tokenizer_bytes(c))

    def test_max_bytes_reads_the_start(self):
        _, _, stdout = self.trained("head", "--vocab", "400", "--text-docs", "line",
                                    "--max-bytes", "2000")
        bytes_read = int(stdout.split("documents (")[1].split(" bytes")[0].replace(",", ""))
        self.assertLessEqual(bytes_read, 2000)
        self.assertGreater(bytes_read, 1500)
        r = run_tool(self.corpus, "-o", os.path.join(self.dir, "x"), "--vocab", "400", "--max-bytes", "-1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("-1 is negative", r.stderr)

    def test_prepare_reads_it(self):
        out, tok, _ = self.trained("for-prepare", "--vocab", "512")
        data = os.path.join(self.dir, "data")
        r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "prepare.py"), self.corpus,
                            "-o", data, "--tokenizer", out, "--val-fraction", "0", "--quiet"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        ids = prepare_test.split_tokens(data, "train")
        with open(self.corpus, encoding="utf-8") as f:
            text = f.read()
        self.assertEqual(ids, tok.encode(text, add_special_tokens=False).ids + [0])

    def test_bad_input(self):
        bad = os.path.join(self.dir, "bad")
        cases = [
            ((self.corpus, "-o", bad, "--vocab", "100"), 2, "259 to"),
            ((self.corpus, "-o", bad, "--vocab", "many"), 2, "not an integer"),
            ((os.path.join(self.dir, "missing.txt"), "-o", bad, "--vocab", "300"), 1,
             "missing.txt: no such file"),
            ((self.corpus, "-o", self.corpus, "--vocab", "300"), 1, "not a directory"),
        ]
        empty = os.path.join(self.dir, "empty.jsonl")
        with open(empty, "w") as f:
            f.write('{"text": ""}\n')
        cases.append(((empty, "-o", bad, "--vocab", "300"), 1, "no text to train on"))
        nofield = os.path.join(self.dir, "nofield.jsonl")
        with open(nofield, "w") as f:
            f.write('{"body": "x"}\n')
        cases.append(((nofield, "-o", bad, "--vocab", "300"), 1, "nofield.jsonl:1: no field 'text'"))
        for args, code, message in cases:
            with self.subTest(args=args):
                r = run_tool(*args)
                self.assertEqual(r.returncode, code, r.stdout + r.stderr)
                self.assertIn(message, r.stderr)
                self.assertNotIn("Traceback", r.stderr)
        kept, _, _ = self.trained("kept", "--vocab", "300")
        before = tokenizer_bytes(kept)
        r = run_tool(self.corpus, "-o", kept, "--vocab", "400")
        self.assertEqual(r.returncode, 1)
        self.assertIn("already there; --overwrite replaces it", r.stderr)
        self.assertEqual(tokenizer_bytes(kept), before)

    def test_fsdpgen_command(self):
        if not prepare_test.FSDPGEN:
            self.skipTest("no --fsdpgen binary given")
        out = os.path.join(self.dir, "via-fsdpgen")
        env = dict(os.environ, FSDPGEN_PYTHON=sys.executable)
        r = subprocess.run([prepare_test.FSDPGEN, "train-tokenizer", self.corpus, "-o", out, "--vocab",
                            "300", "--quiet"], capture_output=True, text=True, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.isfile(os.path.join(out, "tokenizer.json")))


if __name__ == "__main__":
    prepare_test.reexec_with_tokenizers()
    unittest.main()
