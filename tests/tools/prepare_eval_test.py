#!/usr/bin/env python3
"""Tests of tools/prepare_eval.py (fsdpgen prepare-eval) on the tokenizers
tools/prepare_fixture.py makes: the file read back field by field against the
library's own encode (context as it stands, after Llama 3's BOS; each ending
with a leading space), version 2 for a vocabulary past uint16, every bad
input named with its line, and the `fsdpgen prepare-eval` launcher. Runs
under the python of `bash tools/setup.sh python` (--python); exits 77 (CTest:
skipped) saying why when that python is not there. (The C++ reader reads the
same writer's file in tests/e2e/EvalReferenceTest.cpp.)"""
import contextlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import prepare_test  # noqa: E402  the re-exec under the tools' python, shared

EXAMPLES = [
    {"ctx": "The man walks to the store. He", "endings": ["buys bread.", "flies away.", "sings."],
     "label": 0},
    {"ctx": "A cat sits", "endings": ["on the mat.", "in the tree."], "label": "1"},
]


def read_eval(path):
    """(version, [(label, context, [endings])]) of an evaluation file."""
    with open(path, "rb") as f:
        data = f.read()
    magic, version, count, longest = struct.unpack("<4i", data[:16])
    assert magic == 20240522, magic
    code, width = {1: ("H", 2), 2: ("I", 4)}[version]
    fields = list(struct.unpack(f"<{(len(data) - 1024) // width}{code}", data[1024:]))
    out, at = [], 0
    for index in range(count):
        _, nbytes, idx, label, n = fields[at:at + 5]
        assert idx == index and nbytes <= longest
        start, at = at, at + 5
        ctx_len = fields[at]
        context, at = fields[at + 1:at + 1 + ctx_len], at + 1 + ctx_len
        ends = []
        for _ in range(n):
            k = fields[at]
            ends.append(fields[at + 1:at + 1 + k])
            at += 1 + k
        assert (at - start) * width == nbytes
        out.append((label, context, ends))
    assert at == len(fields)
    return version, out


class PrepareEvalTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import prepare_fixture
        cls.fixtures = tempfile.mkdtemp(prefix="prepare-eval-fixtures.")
        prepare_fixture.write_all(cls.fixtures, 512)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.fixtures)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="prepare-eval-test.")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def jsonl(self, lines):
        path = os.path.join(self.dir, "in.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            f.write("".join(line if isinstance(line, str) else json.dumps(line) + "\n"
                            for line in lines))
        return path

    def run_tool(self, path, tokenizer="gpt2", expect=0, extra=()):
        import prepare_eval
        out = os.path.join(self.dir, "out.bin")
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = prepare_eval.main([path, "--tokenizer", os.path.join(self.fixtures, tokenizer),
                                    "-o", out, *extra])
        self.assertEqual(rc, expect, err.getvalue())
        return out, err.getvalue()

    def library(self, name):
        from tokenizers import Tokenizer
        t = Tokenizer.from_file(os.path.join(self.fixtures, name, "tokenizer.json"))
        t.encode_special_tokens = True
        return t

    def test_tokens_are_the_librarys_with_a_leading_space_before_each_ending(self):
        out, _ = self.run_tool(self.jsonl(EXAMPLES))
        version, got = read_eval(out)
        self.assertEqual(version, 1)
        t = self.library("gpt2")
        for x, (label, context, ends) in zip(EXAMPLES, got):
            self.assertEqual(label, int(x["label"]))
            self.assertEqual(context, t.encode(x["ctx"], add_special_tokens=False).ids)
            self.assertEqual(ends, [t.encode(" " + e, add_special_tokens=False).ids
                                    for e in x["endings"]])

    def test_llama3_contexts_begin_with_its_bos(self):
        out, _ = self.run_tool(self.jsonl(EXAMPLES), tokenizer="llama3")
        t = self.library("llama3")
        bos = t.token_to_id("<|begin_of_text|>")
        _, got = read_eval(out)
        self.assertEqual(got[0][1], [bos] + t.encode(EXAMPLES[0]["ctx"], add_special_tokens=False).ids)
        self.assertNotIn(bos, got[0][2][0])

    def test_a_vocabulary_past_uint16_writes_version_2(self):
        out, _ = self.run_tool(self.jsonl([{"ctx": "w3 w69999", "endings": ["w65536", "w2"],
                                            "label": 1}]), tokenizer="wide")
        version, got = read_eval(out)
        self.assertEqual(version, 2)
        self.assertEqual(got[0][1], [3, 69999])
        self.assertEqual(got[0][2][0], [65536])

    def test_bad_inputs_are_named_with_their_line(self):
        cases = [
            (["not json\n"], "in.jsonl:1: not a JSON line"),
            ([EXAMPLES[0], {"ctx": "x", "endings": ["a"]}], "in.jsonl:2: no \"label\" field"),
            ([{"ctx": "x", "endings": ["a", "b"], "label": 2}],
             "in.jsonl:1: label 2 is out of range for its 2 endings"),
            ([{"ctx": "x", "endings": ["a"], "label": ""}], "the test split has no labels"),
            ([{"ctx": "", "endings": ["a"], "label": 0}], "in.jsonl:1: \"ctx\" is not a non-empty"),
            ([{"ctx": "x", "endings": [], "label": 0}], "\"endings\" is not a list of non-empty"),
            (["\n"], "in.jsonl: no example in it"),
        ]
        for lines, message in cases:
            _, err = self.run_tool(self.jsonl(lines), expect=1)
            self.assertIn(message, err)
        _, err = self.run_tool(self.jsonl(EXAMPLES), tokenizer="missing", expect=1)
        self.assertIn("no such tokenizer file or model directory", err)

    def test_the_fsdpgen_launcher(self):
        if not prepare_test.FSDPGEN:
            self.skipTest("no --fsdpgen binary given")
        out = os.path.join(self.dir, "cli.bin")
        r = subprocess.run([prepare_test.FSDPGEN, "prepare-eval", self.jsonl(EXAMPLES), "--tokenizer",
                            os.path.join(self.fixtures, "gpt2"), "-o", out],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("2 examples, 5 candidates", r.stdout)
        self.assertEqual(read_eval(out)[1][1][0], 1)


if __name__ == "__main__":
    prepare_test.reexec_with_tokenizers()
    unittest.main()
