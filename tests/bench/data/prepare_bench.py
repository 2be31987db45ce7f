#!/usr/bin/env python3
"""Benchmark (not a test) of fsdpgen prepare against the tokenizer library's
own batch encode, in the same run on the same text: a JSON lines corpus of
SIZE_MB (documents of a few hundred words, tools/prepare_fixture.py's
vocabulary) through a byte-level BPE of VOCAB tokens trained by the same
library. Times, best of REPEATS each:
  library      Tokenizer.encode_batch_fast on the documents already in memory
               (the library's own threads: TOKENIZERS_PARALLELISM=true)
  library+ids  the same, plus each document's ids gathered into one list (what
               any writer of token files must do at least)
  prepare      `fsdpgen prepare corpus.jsonl -o DIR --jobs JOBS` end to end:
               reading and parsing the file, the split, tokenizing, writing
               the shards and manifest
and prints tokens/s of each and prepare's time over the library's.
    build/python/bin/python tests/bench/data/prepare_bench.py [SIZE_MB] [VOCAB] [JOBS] [REPEATS]
    (defaults 64, 8192, 2, 3; FSDPGEN_BIN: the fsdpgen binary, default build/fsdpgen)"""
import json
from array import array
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))


def corpus(path, size_mb):
    import prepare_fixture
    rng = random.Random(11)
    sentences = prepare_fixture.corpus(20000, seed=3).splitlines()
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < size_mb << 20:
            doc = " ".join(rng.choice(sentences) for _ in range(rng.randint(5, 60)))
            line = json.dumps({"text": doc}) + "\n"
            f.write(line)
            written += len(line.encode("utf-8"))


def timed(fn):
    """fn's wall and CPU seconds (this process's threads and its waited-for
    children's, the worker processes included)."""
    r0, c0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    result = fn()
    wall = time.perf_counter() - t0
    r1, c1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = sum(getattr(b, k) - getattr(a, k) for a, b in ((r0, r1), (c0, c1)) for k in ("ru_utime", "ru_stime"))
    return wall, cpu, result


def main(argv):
    size_mb = int(argv[1]) if len(argv) > 1 else 64
    vocab = int(argv[2]) if len(argv) > 2 else 8192
    jobs = int(argv[3]) if len(argv) > 3 else 2
    repeats = int(argv[4]) if len(argv) > 4 else 3
    fsdpgen = os.environ.get("FSDPGEN_BIN", os.path.join(ROOT, "build", "fsdpgen"))
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    import prepare_fixture
    from tokenizers import Tokenizer
    work = tempfile.mkdtemp(prefix="fsdpgen-prepare-bench.")
    try:
        prepare_fixture.write_all(os.path.join(work, "tok"), vocab)
        tokenizer = os.path.join(work, "tok", "gpt2", "tokenizer.json")
        data = os.path.join(work, "corpus.jsonl")
        corpus(data, size_mb)
        with open(data, encoding="utf-8") as f:
            docs = [json.loads(line)["text"] for line in f]
        tok = Tokenizer.from_file(tokenizer)
        tok.encode_special_tokens = True
        encs = tok.encode_batch_fast(docs, add_special_tokens=False)
        tokens = sum(len(e.ids) for e in encs) + len(docs)  # + one EOT each
        del encs

        def with_ids():
            ids = array("H")
            for e in tok.encode_batch_fast(docs, add_special_tokens=False):
                ids.extend(e.ids)
                ids.append(0)
            return len(ids)

        env = dict(os.environ, FSDPGEN_PYTHON=sys.executable)
        out = os.path.join(work, "out")

        def prepare():
            subprocess.run([fsdpgen, "prepare", data, "-o", out, "--tokenizer", tokenizer, "--jobs", str(jobs),
                            "--overwrite", "--quiet", "--val-fraction", "0.01"], check=True, env=env,
                           stdout=subprocess.DEVNULL)

        runs = {"library": [], "ids": [], "prepare": []}
        for _ in range(repeats):  # interleaved, so that a busy spell of the machine hits all three
            runs["library"].append(timed(lambda: tok.encode_batch_fast(docs, add_special_tokens=False))[:2])
            runs["ids"].append(timed(with_ids)[:2])
            runs["prepare"].append(timed(prepare)[:2])
        best = {k: min(v) for k, v in runs.items()}
        with open(os.path.join(out, "manifest.json")) as f:
            m = json.load(f)
        written = sum(m["splits"][s]["tokens"] for s in ("train", "val"))
        assert written == tokens, (written, tokens)
        print(f"corpus: {size_mb} MiB of JSON lines, {len(docs):,} documents, {tokens:,} tokens; "
              f"BPE of {vocab} tokens; {os.cpu_count()} CPUs; best of {repeats}, load average "
              f"{os.getloadavg()[0]:.1f} at the end")
        for name, key in (("library encode_batch_fast", "library"), ("library + ids gathered", "ids"),
                          (f"fsdpgen prepare --jobs {jobs}", "prepare")):
            wall, cpu = best[key]
            print(f"  {name:28s} {wall:7.2f} s  {tokens / wall:12,.0f} tok/s  ({cpu:6.2f} CPU s; "
                  f"all runs: {', '.join(f'{w:.2f}' for w, _ in runs[key])} s)")
        ratio = best["prepare"][0] / best["library"][0]
        print(f"prepare / library: {ratio:.2f}x (goal <= 1.3x); prepare / library + ids: "
              f"{best['prepare'][0] / best['ids'][0]:.2f}x")
    finally:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
