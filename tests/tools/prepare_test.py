#!/usr/bin/env python3
"""Tests of tools/prepare.py (fsdpgen prepare) on tokenizers that
tools/prepare_fixture.py makes with the same library: token ids against the
library's own encode, document boundaries (BOS, EOT), the split, shards,
determinism, resume, every kind of bad input, and the `fsdpgen prepare`
launcher. Runs under the python of `bash tools/setup.sh python`: given as
--python (with --fsdpgen, the binary), it runs itself again with it; exits
77 (CTest: skipped) saying why when that python is not there."""
import contextlib
import faulthandler
import glob
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
FSDPGEN = os.environ.get("FSDPGEN_BIN", "")


def reexec_with(modules, hint):
    """Runs this script with the python given as --python when this one
    cannot import every module of `modules`; exits 77 (CTest: skipped),
    saying why, when that one is missing too. Takes --fsdpgen (the binary)
    out of the arguments into FSDPGEN."""
    global FSDPGEN
    # As fsdpgen prepare runs it (prepare.run sets this before the library's
    # first use): a test that trains a fixture tokenizer in this process and
    # then forks prepare's workers must not leave the library's thread pool
    # behind the fork (a forked child of a threaded parent can deadlock; a
    # CI run once hung here before any test ended).
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # A hang says where: every thread's stack, then exit 1, before CTest's
    # timeout (300 s at the least for these tests; their slowest took 60 s
    # in a CI run) kills the test without a word.
    faulthandler.dump_traceback_later(float(os.environ.get("FSDPGEN_TEST_STACKS_AFTER", "270")),
                                      exit=True)
    args = sys.argv[1:]
    python = None
    if "--python" in args:
        i = args.index("--python")
        python = args[i + 1]
        del args[i:i + 2]
    if "--fsdpgen" in args:
        i = args.index("--fsdpgen")
        FSDPGEN = os.environ["FSDPGEN_BIN"] = args[i + 1]
        del args[i:i + 2]
    sys.argv[1:] = args
    try:
        for m in modules:
            __import__(m)
        return
    except ImportError:
        pass
    if python and os.path.exists(python) and os.path.realpath(python) != os.path.realpath(sys.executable):
        os.execv(python, [python, os.path.abspath(sys.argv[0])] + args)
    print(f"skipped: no python with {' and '.join(modules)} ({python or 'no --python'} is not there "
          f"or lacks them); {hint}")
    sys.exit(77)


def reexec_with_tokenizers():
    """reexec_with the tokenizers and pyarrow of build/python."""
    reexec_with(("tokenizers", "pyarrow"), "bash tools/setup.sh python installs them in build/python")


def read_tokens(path):
    with open(path, "rb") as f:
        data = f.read()
    magic, version, n = struct.unpack("<3i", data[:12])
    width = {20240520: 2, 20240801: 4}[magic]
    assert version == {2: 1, 4: 7}[width], (path, version)
    assert len(data) == 1024 + n * width, (path, n, len(data))
    return magic, list(struct.unpack(f"<{n}{'H' if width == 2 else 'I'}", data[1024:]))


def split_tokens(out, split):
    ids = []
    for path in sorted(glob.glob(os.path.join(out, f"{split}_*.bin"))):
        ids += read_tokens(path)[1]
    return ids


def file_bytes(out):
    found = {}
    for p in sorted(glob.glob(os.path.join(out, "*.bin"))):
        with open(p, "rb") as f:
            found[os.path.basename(p)] = f.read()
    return found


class PrepareTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import prepare_fixture
        cls.fixtures = tempfile.mkdtemp(prefix="prepare-fixtures.")
        prepare_fixture.write_all(cls.fixtures, 512)
        with open(os.path.join(cls.fixtures, "corpus.txt"), encoding="utf-8") as f:
            cls.lines = f.read().splitlines()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.fixtures)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="prepare-test.")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def path(self, *names):
        return os.path.join(self.dir, *names)

    def tok(self, name):
        return os.path.join(self.fixtures, name)

    def library(self, name):
        """The fixture tokenizer as the library loads it, encoding as prepare must."""
        from tokenizers import Tokenizer
        t = Tokenizer.from_file(os.path.join(self.tok(name), "tokenizer.json"))
        t.encode_special_tokens = True
        return t

    def write(self, name, text):
        with open(self.path(name), "w", encoding="utf-8") as f:
            f.write(text)
        return self.path(name)

    def write_jsonl(self, name, docs, field="text"):
        return self.write(name, "".join(json.dumps({field: d, "id": i}) + "\n" for i, d in enumerate(docs)))

    def prepare(self, *args, out="out", tokenizer="gpt2", expect=0):
        import prepare
        argv = [a if not a.startswith("@") else self.path(a[1:]) for a in args]
        argv += ["-o", self.path(out), "--quiet"]
        if tokenizer:
            argv += ["--tokenizer", self.tok(tokenizer)]
        err, stdout = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(stdout):
            rc = prepare.main(argv)
        self.assertEqual(rc, expect, err.getvalue())
        self.stderr = err.getvalue()
        self.stdout = stdout.getvalue()
        return err.getvalue()

    def manifest(self, out="out"):
        with open(self.path(out, "manifest.json")) as f:
            return json.load(f)

    def expected(self, name, docs, bos=None, eot=0):
        t = self.library(name)
        ids = []
        for d in docs:
            ids += ([bos] if bos is not None else []) + t.encode(d, add_special_tokens=False).ids + [eot]
        return ids

    # --- ids, boundaries, tokenizers

    def test_ids_are_the_librarys_and_each_document_ends_with_eot(self):
        docs = self.lines[:300] + ["a literal <|endoftext|> is text", "café 日本 🙂"]
        self.write_jsonl("docs.jsonl", docs)
        self.prepare("@docs.jsonl", "--val-fraction", "0")
        eot = self.library("gpt2").token_to_id("<|endoftext|>")
        got = split_tokens(self.path("out"), "train")
        self.assertEqual(got, self.expected("gpt2", docs, eot=eot))
        self.assertEqual(got.count(eot), len(docs))  # the literal is not the special token
        m = self.manifest()
        self.assertTrue(m["complete"])
        self.assertEqual(m["tokenizer"]["eot"], {"token": "<|endoftext|>", "id": eot})
        # The last line says what a spec reads the set with (no val split here).
        self.assertEqual(self.stdout.splitlines()[-1],
                         f"next: in the spec's train section, data = tokens(\"{self.path('out')}/"
                         f"train_*.bin\"); in its model section, vocab = {m['tokenizer']['vocab_size']}")
        self.assertIsNone(m["tokenizer"]["bos"])
        self.assertEqual(m["tokenizer"]["vocab_size"], 512)
        self.assertEqual(m["tokenizer"]["special_tokens"], {"<|endoftext|>": eot})
        self.assertEqual((m["dtype"], m["magic"], m["version"]), ("uint16", 20240520, 1))
        self.assertEqual(m["splits"]["train"]["documents"], len(docs))
        self.assertEqual(m["splits"]["train"]["tokens"], len(got))
        self.assertEqual(m["splits"]["val"], {"documents": 0, "tokens": 0, "shards": []})

    def test_llama3_documents_begin_with_bos_and_end_with_its_eos(self):
        docs = self.lines[:50]
        self.write_jsonl("docs.jsonl", docs)
        self.prepare("@docs.jsonl", "--val-fraction", "0", tokenizer="llama3")
        t = self.library("llama3")
        bos, eos = t.token_to_id("<|begin_of_text|>"), t.token_to_id("<|end_of_text|>")
        self.assertEqual(split_tokens(self.path("out"), "train"), self.expected("llama3", docs, bos, eos))
        m = self.manifest()
        self.assertEqual(m["tokenizer"]["bos"], {"token": "<|begin_of_text|>", "id": bos})
        self.assertEqual(m["tokenizer"]["eot"]["id"], eos)
        self.prepare("@docs.jsonl", "--val-fraction", "0", "--no-bos", "--overwrite", tokenizer="llama3")
        self.assertEqual(split_tokens(self.path("out"), "train"), self.expected("llama3", docs, None, eos))

    def test_gpt2_vocab_and_merges_directory_tokenizes_as_its_tokenizer_json(self):
        docs = self.lines[:200]
        self.write_jsonl("docs.jsonl", docs)
        self.prepare("@docs.jsonl", "--val-fraction", "0", tokenizer="gpt2-slow", out="slow")
        self.prepare("@docs.jsonl", "--val-fraction", "0", tokenizer="gpt2", out="fast")
        self.assertEqual(split_tokens(self.path("slow"), "train"), split_tokens(self.path("fast"), "train"))

    def test_the_tokenizer_is_written_beside_the_shards_as_the_library_serializes_it(self):
        from tokenizers import Tokenizer
        docs = self.lines[:80] + ["café 日本 🙂 <|endoftext|>"]
        self.write_jsonl("docs.jsonl", docs)
        src = self.path("llama3-src")  # the fixture with a config naming a length and a pad token
        shutil.copytree(self.tok("llama3"), src)
        with open(os.path.join(src, "tokenizer_config.json"), "w") as f:
            json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
                       "pad_token": "<|end_of_text|>", "unk_token": "<unk-not-a-token>",
                       "model_max_length": 2048}, f)
        cases = (("gpt2", self.tok("gpt2"), None, "<|endoftext|>"),
                 ("slow", self.tok("gpt2-slow"), None, "<|endoftext|>"),
                 ("llama3", src, "<|begin_of_text|>", "<|end_of_text|>"))
        for out, tokenizer, bos, eot in cases:
            import prepare
            with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(prepare.main([self.path("docs.jsonl"), "-o", self.path(out), "--quiet",
                                               "--val-fraction", "0", "--tokenizer", tokenizer]), 0)
            m = self.manifest(out)
            self.assertEqual(m["tokenizer"]["file"], "tokenizer.json", out)
            written = Tokenizer.from_file(self.path(out, "tokenizer.json"))
            written.encode_special_tokens = True
            ids = []
            for d in docs:  # the set's tokens are the written tokenizer's encode of each document
                ids += ([written.token_to_id(bos)] if bos else []) + \
                    written.encode(d, add_special_tokens=False).ids + [written.token_to_id(eot)]
            self.assertEqual(split_tokens(self.path(out), "train"), ids, out)
            self.assertEqual(written.get_vocab_size(), m["tokenizer"]["vocab_size"], out)
            with open(self.path(out, "tokenizer_config.json")) as f:
                config = json.load(f)
            want = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos or eot, "eos_token": eot,
                    "clean_up_tokenization_spaces": False}
            if out == "llama3":  # the source's length and pad token kept; an unk that is no token dropped
                want.update(pad_token="<|end_of_text|>", model_max_length=2048)
            self.assertEqual(config, want, out)
        # vocab.json and merges.txt give the tokenizer.json of the same BPE (GPT-2's fast tokenizer)
        self.assertEqual(Tokenizer.from_file(self.path("slow", "tokenizer.json")).get_vocab(),
                         Tokenizer.from_file(self.path("gpt2", "tokenizer.json")).get_vocab())
        with open(self.path("slow", "tokenizer.json"), "rb") as f:
            first = f.read()
        self.prepare("@docs.jsonl", "--val-fraction", "0", "--jobs", "2", tokenizer="gpt2-slow", out="slow2")
        with open(self.path("slow2", "tokenizer.json"), "rb") as f:
            self.assertEqual(f.read(), first, "the same tokenizer, the same bytes")
        err = self.prepare("@docs.jsonl", out=os.path.relpath(self.tok("gpt2"), self.dir), expect=1)
        self.assertIn("the tokenizer's own directory; prepare writes its tokenizer.json there", err)
        self.assertFalse(os.path.exists(os.path.join(self.tok("gpt2"), "manifest.json")))

    def test_text_documents_are_files_paragraphs_or_lines(self):
        self.write("a.txt", "one two\nthree\n\n\nfour five\n")
        self.write("b.txt", "six\n")
        for mode, docs in (("file", ["one two\nthree\n\n\nfour five\n", "six\n"]),
                           ("paragraph", ["one two\nthree", "four five\n", "six\n"]),
                           ("line", ["one two", "three", "four five", "six"])):
            self.prepare(self.path("*.txt"), "--text-docs", mode, "--val-fraction", "0", "--overwrite")
            self.assertEqual(split_tokens(self.path("out"), "train"), self.expected("gpt2", docs), mode)
            self.assertEqual(self.manifest()["documents"], len(docs), mode)

    def test_pieces_of_a_large_file_join_as_one(self):
        text = "\n\n".join(self.lines[:600]) + "\n"
        self.write("big.txt", text)
        self.prepare("@big.txt", "--text-docs", "paragraph", "--val-fraction", "0", out="whole")
        self.prepare("@big.txt", "--text-docs", "paragraph", "--val-fraction", "0", "--chunk-bytes", "997",
                     "--jobs", "2", out="pieces")
        self.assertEqual(file_bytes(self.path("whole")), file_bytes(self.path("pieces")))
        self.assertEqual(self.manifest("pieces")["documents"], 600)

    def test_progress_line_gives_tokens_rate_and_time(self):
        import prepare
        self.write_jsonl("docs.jsonl", self.lines[:100])
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(prepare.main([self.path("docs.jsonl"), "-o", self.path("out"), "--val-fraction", "0",
                                           "--tokenizer", self.tok("gpt2")]), 0)
        tokens = self.manifest()["splits"]["train"]["tokens"]
        self.assertRegex(err.getvalue(), rf"prepare: 100.0% \| {tokens:,} tokens \| [0-9,]+ tok/s \| done in 0:00:0\d")

    # --- split, shards, determinism

    def test_split_holds_out_documents_by_hash_and_shards_hold_the_token_count(self):
        import prepare
        from fractions import Fraction
        docs = self.lines[:400]
        self.write_jsonl("docs.jsonl", docs)
        self.prepare("@docs.jsonl", "--val-fraction", "0.1", "--shard-tokens", "500")
        val = [d for d in docs if prepare.in_val(d, Fraction(1, 10))]
        train = [d for d in docs if d not in val]
        self.assertTrue(20 < len(val) < 60, len(val))
        self.assertEqual(split_tokens(self.path("out"), "train"), self.expected("gpt2", train))
        self.assertEqual(split_tokens(self.path("out"), "val"), self.expected("gpt2", val))
        self.assertIn(f" and val = tokens(\"{self.path('out')}/val_*.bin\"); ",
                      self.stdout.splitlines()[-1])
        m = self.manifest()
        for split in ("train", "val"):
            shards = m["splits"][split]["shards"]
            files = sorted(os.path.basename(p) for p in glob.glob(self.path("out", f"{split}_*.bin")))
            self.assertEqual([s["file"] for s in shards], files)
            self.assertTrue(all(s["tokens"] == 500 for s in shards[:-1]))
            self.assertTrue(0 < shards[-1]["tokens"] <= 500)
            ids = split_tokens(self.path("out"), split)
            ends, total = 0, 0
            for s in shards:  # a shard's documents: those whose EOT it holds
                part = ids[total:total + s["tokens"]]
                self.assertEqual(s["documents"], part.count(0))
                total += s["tokens"]
                ends += s["documents"]
            self.assertEqual(ends, m["splits"][split]["documents"])
        self.assertEqual(m["splits"]["val"]["documents"], len(val))

    def test_same_input_same_shards_whatever_the_jobs(self):
        self.write_jsonl("docs.jsonl", self.lines)
        self.prepare("@docs.jsonl", "--shard-tokens", "3000", "--jobs", "1", out="one")
        self.prepare("@docs.jsonl", "--shard-tokens", "3000", "--jobs", "2", "--chunk-bytes", "5000", out="two")
        one, two = file_bytes(self.path("one")), file_bytes(self.path("two"))
        self.assertGreater(len(one), 5)
        self.assertEqual(one, two)
        shards = lambda m: {s: m["splits"][s] for s in ("train", "val")}  # noqa: E731
        self.assertEqual(shards(self.manifest("one")), shards(self.manifest("two")))

    # --- resume

    def interrupted(self, after, *args, target="Split.close"):
        """Runs prepare with `target` raising KeyboardInterrupt on its call
        number `after`."""
        import prepare
        owner, name = target.split(".") if "." in target else (None, target)
        holder = getattr(prepare, owner) if owner else prepare
        real = getattr(holder, name)
        calls = [0]

        def stopping(*a, **k):
            calls[0] += 1
            if calls[0] == after:
                raise KeyboardInterrupt
            return real(*a, **k)

        setattr(holder, name, stopping)
        try:
            self.prepare(*args, expect=130)
        finally:
            setattr(holder, name, real)
        self.assertIn("run the same command again to resume", self.stderr)

    def test_a_stopped_run_resumes_to_the_same_shards(self):
        self.write_jsonl("docs.jsonl", self.lines)
        args = ("@docs.jsonl", "--shard-tokens", "2000", "--val-fraction", "0.2", "--chunk-bytes", "4000")
        self.prepare(*args, out="whole")
        whole = file_bytes(self.path("whole"))
        for target, after in (("Split.close", 4), ("Split.close", 9), ("write_manifest", 3)):
            shutil.rmtree(self.path("out"), ignore_errors=True)
            self.interrupted(after, *args, target=target)
            self.assertFalse(self.manifest().get("complete"))
            err = self.prepare(*args)
            self.assertIn("resuming", err)
            self.assertEqual(file_bytes(self.path("out")), whole, (target, after))
            self.assertEqual(self.manifest()["splits"], self.manifest("whole")["splits"])
            self.assertEqual([f for f in os.listdir(self.path("out")) if "partial" in f or "tmp" in f], [])

    def test_a_finished_run_is_kept_and_other_flags_are_refused(self):
        self.write_jsonl("docs.jsonl", self.lines[:100])
        self.prepare("@docs.jsonl")
        before = {p: os.stat(p).st_mtime_ns for p in glob.glob(self.path("out", "*"))}
        import prepare
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            self.assertEqual(prepare.main([self.path("docs.jsonl"), "-o", self.path("out"), "--quiet",
                                           "--tokenizer", self.tok("gpt2")]), 0)
        self.assertIn("nothing to do", out.getvalue())
        self.assertEqual(before, {p: os.stat(p).st_mtime_ns for p in glob.glob(self.path("out", "*"))})
        err = self.prepare("@docs.jsonl", "--shard-tokens", "10", expect=1)
        self.assertIn("prepared with other shard_tokens; pass --overwrite", err)
        self.prepare("@docs.jsonl", "--shard-tokens", "1000", "--overwrite")
        self.assertEqual(self.manifest()["shard_tokens"], 1000)

    def test_a_cut_partial_shard_is_an_error(self):
        self.write_jsonl("docs.jsonl", self.lines)
        args = ("@docs.jsonl", "--shard-tokens", "2000", "--val-fraction", "0.2", "--chunk-bytes", "4000")
        self.interrupted(3, *args)  # saved when train's shard 1 closed, val's shard 0 part way
        val = self.manifest()["resume"]["splits"]["val"]
        self.assertEqual(val["shards"], [])
        self.assertGreater(val["current"]["tokens"], 100)
        with open(self.path("out", "val_000000.bin.partial"), "r+b") as f:
            f.truncate(1000)
        err = self.prepare(*args, expect=1)
        self.assertIn("shorter than the", err)
        self.assertIn("--overwrite", err)

    # --- sources

    def test_parquet_and_saved_datasets_read_as_json_lines(self):
        import pyarrow as pa
        import pyarrow.parquet as pq
        docs = self.lines[:120]
        self.write_jsonl("docs.jsonl", docs)
        self.prepare("@docs.jsonl", "--val-fraction", "0", out="jsonl")
        want = file_bytes(self.path("jsonl"))
        table = pa.table({"id": list(range(len(docs))), "text": docs})
        hub = self.path("hub", "data")
        os.makedirs(hub)
        pq.write_table(table.slice(0, 70), os.path.join(hub, "train-00000-of-00002.parquet"), row_group_size=25)
        pq.write_table(table.slice(70), os.path.join(hub, "train-00001-of-00002.parquet"), row_group_size=25)
        pq.write_table(pa.table({"text": ["not read"]}), os.path.join(hub, "test-00000-of-00001.parquet"))
        self.prepare(self.path("hub"), "--val-fraction", "0", out="hub-out")
        self.assertEqual(file_bytes(self.path("hub-out")), want)
        saved = self.path("saved", "train")
        os.makedirs(saved)
        for k, part in enumerate((table.slice(0, 50), table.slice(50))):
            with pa.OSFile(os.path.join(saved, f"data-0000{k}-of-00002.arrow"), "wb") as sink:
                with pa.ipc.new_stream(sink, part.schema) as w:  # as datasets' save_to_disk
                    for batch in part.to_batches(max_chunksize=20):
                        w.write_batch(batch)
        with open(os.path.join(saved, "state.json"), "w") as f:
            json.dump({"_data_files": [{"filename": "data-00000-of-00002.arrow"},
                                       {"filename": "data-00001-of-00002.arrow"}]}, f)
        with open(self.path("saved", "dataset_dict.json"), "w") as f:
            json.dump({"splits": ["train"]}, f)
        self.prepare(self.path("saved"), "--val-fraction", "0", "--chunk-bytes", "2000", out="saved-out")
        self.assertEqual(file_bytes(self.path("saved-out")), want)
        err = self.prepare(self.path("saved"), "--hf-split", "test", expect=1, out="x")
        self.assertIn("without the split 'test' (--hf-split); it has train", err)
        err = self.prepare(self.path("hub"), "--hf-split", "validation", expect=1, out="x")
        self.assertIn("splits found: test, train", err)

    def test_vocabulary_beyond_uint16_writes_uint32_or_is_refused(self):
        self.write("w.txt", "w2 w65535 w65536 w69999 nope")
        self.prepare("@w.txt", "--val-fraction", "0", tokenizer="wide")
        magic, ids = read_tokens(self.path("out", "train_000000.bin"))
        self.assertEqual((magic, ids), (20240801, [2, 65535, 65536, 69999, 0, 1]))
        self.assertEqual(self.manifest()["dtype"], "uint32")
        err = self.prepare("@w.txt", "--dtype", "uint16", "--overwrite", tokenizer="wide", expect=1)
        self.assertIn("--dtype uint16: the tokenizer", err)
        self.assertIn("70,000 tokens, ids above uint16's 65,535", err)

    # --- bad input: each an error naming the file and place, or a counted warning

    def test_bad_inputs_are_named(self):
        p = self.write
        cases = [
            (p("nofield.jsonl", '{"text": "a"}\n{"body": "b"}\n'),
             "nofield.jsonl:2: no field 'text' (--field); its fields: body"),
            (p("notjson.jsonl", '{"text": "a"}\nhello\n'), "notjson.jsonl:2: not a JSON object"),
            (p("array.jsonl", '[1, 2]\n'), "array.jsonl:1: a JSON list, not an object"),
            (p("number.jsonl", '{"text": 3}\n'), "number.jsonl:1: field 'text' is 3, not a string"),
            (p("surrogate.jsonl", '{"text": "ok"}\n{"text": "a \\ud800 b"}\n'),
             "surrogate.jsonl:2: the tokenizer cannot encode this document"),
            (p("bad.parquet", "not parquet"), "bad.parquet: not a Parquet file"),
            (p("bad.arrow", "not arrow"), "bad.arrow: not an Arrow file"),
            (self.path("nothing_*.txt"), "nothing_*.txt: no file matches this pattern"),
            (self.path("missing.txt"), "missing.txt: no such file or directory"),
        ]
        with open(self.path("latin1.txt"), "wb") as f:
            f.write("ok\ncaf\xe9".encode("latin-1"))
        cases.append((self.path("latin1.txt"), "latin1.txt: byte offset 6 is not UTF-8"))
        for source, message in cases:
            err = self.prepare(source, out="bad", expect=1)
            self.assertIn(message, err, source)
            self.assertTrue(err.startswith("fsdpgen prepare: error: "), err)
        import pyarrow as pa
        import pyarrow.parquet as pq
        pq.write_table(pa.table({"body": ["x"]}), self.path("nocol.parquet"))
        err = self.prepare("@nocol.parquet", out="bad", expect=1)
        self.assertIn("nocol.parquet: no column 'text' (--field); its columns: body", err)
        err = self.prepare("@nocol.parquet", out="/proc/no/such/dir", expect=1)
        self.assertIn("fsdpgen prepare: error: -o /proc/no/such/dir: cannot create the directory: No such file", err)

    def test_empty_documents_are_skipped_and_counted(self):
        self.write_jsonl("docs.jsonl", ["one", "", "two", ""])
        self.write("empty.txt", "")
        err = self.prepare("@docs.jsonl", "@empty.txt", "--val-fraction", "0")
        self.assertIn("skipped 3 empty documents (the first: " + self.path("docs.jsonl") + ":2)", err)
        self.assertEqual(split_tokens(self.path("out"), "train"), self.expected("gpt2", ["one", "two"]))
        m = self.manifest()
        self.assertEqual((m["documents"], m["empty_documents"], m["splits"]["train"]["documents"]), (5, 3, 2))

    def test_bad_tokenizers_flags_and_outputs_are_named(self):
        self.write("a.txt", "hello")
        for tokenizer, message in ((self.path("none.json"), "none.json: no such tokenizer file"),
                                   (self.dir, "a model directory needs tokenizer.json")):
            import prepare
            e = io.StringIO()
            with contextlib.redirect_stderr(e):
                rc = prepare.main([self.path("a.txt"), "-o", self.path("o"), "--tokenizer", tokenizer])
            self.assertEqual(rc, 1)
            self.assertIn(message, e.getvalue())
        err = self.prepare("@a.txt", "--eot", "<nope>", expect=1)
        self.assertIn("--eot <nope>: not a token of the tokenizer", err)
        err = self.prepare("@a.txt", "--bos", expect=1)
        self.assertIn("--bos: the tokenizer", err)
        import fcntl
        os.makedirs(self.path("busy"))
        with open(self.path("busy", ".prepare.lock"), "a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)  # another run's
            err = self.prepare("@a.txt", out="busy", expect=1)
        self.assertIn("busy: another fsdpgen prepare is writing there", err)
        self.prepare("@a.txt", out="busy")
        os.makedirs(self.path("foreign"))
        self.write(os.path.join("foreign", "train_000000.bin"), "x")
        err = self.prepare("@a.txt", out="foreign", expect=1)
        self.assertIn("holds token files but no manifest.json; pass --overwrite", err)


class LauncherTest(unittest.TestCase):
    """fsdpgen prepare: the tool run with the build's python, or an error
    naming the install command."""

    def setUp(self):
        if not FSDPGEN:
            self.skipTest("no --fsdpgen binary given")

    def test_runs_the_tool_and_names_the_install_command_without_python(self):
        r = subprocess.run([FSDPGEN, "prepare", "--help"], capture_output=True, text=True,
                           env=dict(os.environ, FSDPGEN_PYTHON=sys.executable))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("usage: fsdpgen prepare", r.stdout)
        r = subprocess.run([FSDPGEN, "prepare", "x.txt", "-o", "out"], capture_output=True, text=True,
                           env=dict(os.environ, FSDPGEN_PYTHON="/nonexistent/python"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("/nonexistent/python: no python there ($FSDPGEN_PYTHON)", r.stderr)
        self.assertIn("bash tools/setup.sh python", r.stderr)
        r = subprocess.run([FSDPGEN, "prepare", "missing.txt", "-o", "out", "--tokenizer", "none"],
                           capture_output=True, text=True, env=dict(os.environ, FSDPGEN_PYTHON=sys.executable))
        self.assertEqual(r.returncode, 1)
        self.assertIn("fsdpgen prepare: error: none: no such tokenizer", r.stderr)


if __name__ == "__main__":
    reexec_with_tokenizers()
    unittest.main()
