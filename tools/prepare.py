#!/usr/bin/env python3
"""prepare: text corpora into llm.c token files through a model's own
tokenizer (Hugging Face `tokenizers`), what `fsdpgen prepare` runs
(docs/prepare.md).

    fsdpgen prepare INPUT... -o DIR --tokenizer TOKENIZER [--field text]
        [--text-docs file|paragraph|line] [--hf-split train] [--val-fraction 0.01]
        [--shard-tokens 100000000] [--dtype auto|uint16|uint32] [--eot TOKEN]
        [--bos | --no-bos] [--jobs N] [--overwrite] [--quiet]

INPUT: text files, JSON lines (.jsonl, .json, .ndjson: one object a line, its
--field the document), Parquet files (.parquet), Arrow files (.arrow), glob
patterns of these (each pattern's matches sorted), and directories: a saved
Hugging Face dataset (save_to_disk: dataset_dict.json or state.json with its
.arrow files) or a directory of Parquet files in the Hub's layout (the files
of --hf-split). TOKENIZER: a tokenizer.json, or a Hugging Face model
directory (tokenizer.json, or GPT-2's vocab.json and merges.txt).

Each document is its tokens (special-token strings in the text are text),
then the end-of-text token; it begins with BOS where the tokenizer's own
post-processor adds one (Llama 3). Documents whose hash falls below
--val-fraction go to the validation split. Output in DIR: train_NNNNNN.bin
and val_NNNNNN.bin, llm.c token files of --shard-tokens tokens each (the last
of a split shorter), manifest.json, and the tokenizer as tokenizer.json (the
library's serialization) with a tokenizer_config.json for transformers. The output is a function of the
inputs and flags only (not of --jobs). A run stopped part way resumes from its
last whole shard when run again with the same inputs and flags; a finished
one is left as it is."""
import argparse
import bisect
import fcntl
import hashlib
import json
import os
import re
import sys
import time
from array import array
from fractions import Fraction

from prepare_inputs import (INSTALL_HINT, PrepareError, documents, expand_inputs, make_tasks, read_json,
                            run_tool)
from prepare_tokenizer import (EOT_NAMES, TOKENIZER_FILE, begin_of_text, end_of_text, load_tokenizer,
                               write_tokenizer_files)

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "fsdpgen-tokens/1"
LOCK = ".prepare.lock"  # beside the manifest: one run writes a directory at a time
HEADER_INTS = 256  # llm.c's header: 256 int32 (magic, version, token count, unused)
FORMATS = {"uint16": (20240520, 1, "H"), "uint32": (20240801, 7, "I")}
SPLITS = ("train", "val")
DEFAULT_CHUNK_BYTES = 4 << 20  # text and JSON lines are read in pieces of about this size


# ---------------------------------------------------------------------------
# Tokenizing one task (in a worker process)

_W = {}  # the worker's settings, set before the pool forks


def in_val(text, fraction):
    """Whether a document is held out: its hash, read as a number in [0, 1),
    is below the fraction (so duplicates share a split, whatever the order)."""
    if fraction == 0:
        return False
    h = int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")
    return h * fraction.denominator < fraction.numerator << 64


def _encode(tok, docs):
    """The library's batch encode of the (text, where) documents; a document
    it refuses (a lone surrogate from a JSON escape) is an error naming it."""
    try:
        return tok.encode_batch_fast([d for d, _ in docs], add_special_tokens=False) if docs else []
    except Exception as batch_error:
        for text, where in docs:
            try:
                tok.encode(text, add_special_tokens=False)
            except Exception as e:
                raise PrepareError(f"{where}: the tokenizer cannot encode this document ({e}): "
                                   "not Unicode text (a lone surrogate?)") from None
        raise PrepareError(f"{docs[0][1]}: the tokenizer failed on these documents: {batch_error}") from None


def tokenize_task(task):
    """Train and val token blobs of the task's documents (BOS, ids, EOT each),
    with each document's cumulative end in tokens; the task's documents;
    the empty ones among them and where the first is."""
    docs = documents(_W["sources"][task[0]], task, _W["args"].field, _W["args"].text_docs)
    tok, bos, eot, code = _W["tok"], _W["bos"], _W["eot"], _W["code"]
    fraction = _W["fraction"]
    kept = [(d, w) for d, w in docs if d]
    empty = len(docs) - len(kept)
    first_empty = next((w for d, w in docs if not d), None)
    encodings = _encode(tok, kept)
    out = {s: (array(code), array("Q")) for s in SPLITS}
    for (text, _), enc in zip(kept, encodings):
        ids, ends = out["val" if in_val(text, fraction) else "train"]
        if bos is not None:
            ids.append(bos)
        ids.extend(enc.ids)
        ids.append(eot)
        ends.append(len(ids))
    if sys.byteorder != "little":
        for ids, _ in out.values():
            ids.byteswap()
    return {s: (out[s][0].tobytes(), out[s][1]) for s in SPLITS}, len(docs), empty, first_empty


# ---------------------------------------------------------------------------
# Writing shards


class Split:
    """One split's shards: whole ones named in `shards`, the one being
    written as NAME.bin.partial (appended to, its header's count written when
    it closes)."""

    def __init__(self, out, name, dtype, shard_tokens, state=None):
        self.out, self.name, self.dtype, self.shard_tokens = out, name, dtype, shard_tokens
        self.magic, self.version, code = FORMATS[dtype]
        self.itemsize = array(code).itemsize
        self.shards = list(state["shards"]) if state else []
        self.tokens = state["current"]["tokens"] if state else 0
        self.documents = state["current"]["documents"] if state else 0
        self.fh = None
        if state:
            self._reopen()

    def file(self, n=None):
        return f"{self.name}_{len(self.shards) if n is None else n:06d}.bin"

    def _path(self, partial=True):
        return os.path.join(self.out, self.file() + (".partial" if partial else ""))

    def _reopen(self):
        part, whole = self._path(), self._path(False)
        if not os.path.exists(part) and os.path.exists(whole):
            os.replace(whole, part)  # closed, but stopped before the manifest said so
        if self.tokens == 0:
            if os.path.exists(part):
                os.remove(part)
            return
        want = HEADER_INTS * 4 + self.tokens * self.itemsize
        if not os.path.exists(part) or os.path.getsize(part) < want:
            raise PrepareError(f"{part}: shorter than the {self.tokens} tokens {MANIFEST} records; "
                               "pass --overwrite to start again")
        self.fh = open(part, "r+b")
        self.fh.truncate(want)
        self.fh.seek(want)

    def append(self, blob, ends, skip, on_close):
        """Appends blob's tokens from `skip` on; on_close(position) after each
        shard it fills, position being the tokens of blob consumed."""
        n = len(blob) // self.itemsize
        pos = skip
        while pos < n:
            if self.fh is None:
                self.fh = open(self._path(), "wb")
                self.fh.write(bytes(HEADER_INTS * 4))
            take = min(self.shard_tokens - self.tokens, n - pos)
            self.fh.write(blob[pos * self.itemsize:(pos + take) * self.itemsize])
            self.documents += bisect.bisect_right(ends, pos + take) - bisect.bisect_right(ends, pos)
            self.tokens += take
            pos += take
            if self.tokens == self.shard_tokens:
                self.close()
                on_close(pos)

    def close(self):
        """Writes the header, names the shard and records it."""
        if self.fh is None:
            return
        self.fh.seek(0)
        self.fh.write(array("i", [self.magic, self.version, self.tokens] + [0] * (HEADER_INTS - 3)).tobytes())
        self.fh.close()
        self.fh = None
        os.replace(self._path(), self._path(False))
        digest = hashlib.sha256()
        with open(self._path(False), "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                digest.update(block)
        self.shards.append({"file": self.file(), "tokens": self.tokens, "documents": self.documents,
                            "sha256": digest.hexdigest()})
        self.tokens = self.documents = 0

    def state(self):
        return {"shards": self.shards, "current": {"tokens": self.tokens, "documents": self.documents}}


# ---------------------------------------------------------------------------
# The run


class Progress:
    """One line on stderr: bytes read of the total, tokens, tokens/s, ETA;
    redrawn on a terminal, else printed every 30 s."""

    def __init__(self, total_bytes, quiet):
        self.total, self.quiet = max(total_bytes, 1), quiet
        self.tty = sys.stderr.isatty()
        self.start = self.last = time.monotonic()
        self.bytes = self.tokens = 0

    def update(self, nbytes, ntokens, final=False):
        self.bytes += nbytes
        self.tokens += ntokens
        now = time.monotonic()
        if self.quiet or (not final and now - self.last < (0.5 if self.tty else 30)):
            return
        self.last = now
        elapsed = max(now - self.start, 1e-9)
        done = min(self.bytes / self.total, 1.0)
        eta = elapsed * (1 - done) / done if done > 0 else 0
        line = (f"prepare: {100 * done:5.1f}% | {self.tokens:,} tokens | {self.tokens / elapsed:,.0f} tok/s"
                f" | {'done in' if final else 'ETA'} {_clock(elapsed if final else eta)}")
        sys.stderr.write(("\r" + line + ("\n" if final else "")) if self.tty else line + "\n")
        sys.stderr.flush()


def _clock(s):
    s = int(s + 0.5)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def settings_of(args, info, eot, bos, dtype, sources):
    return {
        "tokenizer": {"name": info.name, "path": info.path, "sha256": info.sha256, "file": TOKENIZER_FILE,
                      "vocab_size": info.vocab_size, "special_tokens": info.special,
                      "eot": {"token": eot[0], "id": eot[1]},
                      "bos": {"token": bos[0], "id": bos[1]} if bos else None},
        "dtype": dtype, "magic": FORMATS[dtype][0], "version": FORMATS[dtype][1],
        "shard_tokens": args.shard_tokens, "val_fraction": float(args.val_fraction),
        "field": args.field, "text_docs": args.text_docs, "hf_split": args.hf_split,
        "sources": [s.record() for s in sources],
    }


def write_manifest(out, manifest):
    tmp = os.path.join(out, MANIFEST + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    os.replace(tmp, os.path.join(out, MANIFEST))


def open_output(args, settings, info):
    """The resume state of a run stopped in DIR with the same settings, None
    to start afresh, or "done"; refuses another preparation's directory, and
    the tokenizer's own (its files would be replaced)."""
    if os.path.realpath(args.output) in (os.path.realpath(os.path.dirname(f)) for f in info.files):
        raise PrepareError(f"-o {args.output}: the tokenizer's own directory; prepare writes its "
                           f"{TOKENIZER_FILE} there: write elsewhere")
    try:
        os.makedirs(args.output, exist_ok=True)
    except OSError as e:
        raise PrepareError(f"-o {args.output}: cannot create the directory: {e.strerror}") from None
    lock = open(os.path.join(args.output, LOCK), "a")  # held until main returns
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise PrepareError(f"-o {args.output}: another fsdpgen prepare is writing there") from None
    _W["lock"] = lock
    path = os.path.join(args.output, MANIFEST)
    ours = [f for f in os.listdir(args.output)
            if re.fullmatch(r"(train|val)_\d{6}\.bin(\.partial)?|manifest\.json(\.tmp)?", f)]
    if args.overwrite:
        for f in ours:
            os.remove(os.path.join(args.output, f))
        return None
    if not os.path.exists(path):
        if ours:
            raise PrepareError(f"{args.output}: holds token files but no {MANIFEST}; pass --overwrite "
                               "to replace them, or write elsewhere")
        return None
    old = read_json(path)
    if old.get("format") != MANIFEST_FORMAT:
        raise PrepareError(f"{path}: not a manifest of fsdpgen prepare; write elsewhere")
    changed = [k for k in settings if old.get(k) != settings[k]]
    if changed:
        raise PrepareError(f"{args.output}: prepared with other {', '.join(changed)}; pass --overwrite "
                           "to prepare it again, or write elsewhere")
    if old.get("complete"):
        return "done"
    resume = old.get("resume", {})
    if resume.get("chunk_bytes") != args.chunk_bytes:
        raise PrepareError(f"{args.output}: stopped with --chunk-bytes {resume.get('chunk_bytes')}; "
                           "resume with the same, or pass --overwrite")
    return old


def run(args):
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # parallel over processes, not threads
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        raise PrepareError(f"the Hugging Face tokenizers library is not installed for {sys.executable}; "
                           f"install it with {INSTALL_HINT}") from None
    info = load_tokenizer(args.tokenizer)
    eot = end_of_text(info, args.eot)
    bos = begin_of_text(info, args.bos)
    dtype = args.dtype
    if dtype == "auto":
        dtype = "uint16" if info.vocab_size <= 1 << 16 else "uint32"
    if dtype == "uint16" and info.vocab_size > 1 << 16:
        raise PrepareError(f"--dtype uint16: the tokenizer {info.path} has {info.vocab_size:,} tokens, "
                           "ids above uint16's 65,535; use --dtype uint32 (or auto)")
    sources = expand_inputs(args.inputs, args.hf_split)
    settings = settings_of(args, info, eot, bos, dtype, sources)
    old = open_output(args, settings, info)
    if old == "done":
        print(f"prepare: {args.output} already holds this preparation ({MANIFEST} complete); nothing to do")
        return 0
    write_tokenizer_files(info, args.output, eot, bos)
    tasks, weights = make_tasks(sources, args)
    resume = old["resume"] if old else None
    splits = {s: Split(args.output, s, dtype, args.shard_tokens, resume["splits"][s] if resume else None)
              for s in SPLITS}
    counts = dict(resume["counts"]) if resume else {"documents": 0, "empty_documents": 0}
    first_task = resume["task"] if resume else 0
    skip = dict(resume["skip"]) if resume else {s: 0 for s in SPLITS}
    if resume:
        print(f"prepare: resuming in {args.output} at piece {first_task} of {len(tasks)} "
              f"({sum(len(splits[s].shards) for s in SPLITS)} shards written)", file=sys.stderr)
    manifest = dict(format=MANIFEST_FORMAT, **settings)

    def save(task, position, before):
        """The state a run stopped after this point resumes from: task `task`
        run again, each split's first position[split] tokens of it skipped."""
        manifest["resume"] = {"chunk_bytes": args.chunk_bytes, "task": task, "skip": position,
                              "counts": before, "splits": {s: splits[s].state() for s in SPLITS}}
        write_manifest(args.output, manifest)

    _W.update(sources=sources, args=args, tok=info.tok, bos=bos[1] if bos else None, eot=eot[1],
              code=FORMATS[dtype][2], fraction=args.val_fraction)
    progress = Progress(sum(weights), args.quiet)
    progress.update(sum(weights[:first_task]), 0)
    first_empty = None
    for t, (blobs, ndocs, empty, where) in enumerate(_results(tasks[first_task:], args.jobs), first_task):
        before = dict(counts)
        length = {s: len(blobs[s][0]) // splits[s].itemsize for s in SPLITS}
        for k, s in enumerate(SPLITS):  # train's tokens, then val's
            # when s closes a shard at `position`: the splits before it are
            # all written, those after it no further than where they began
            def closed(position, k=k, s=s):
                at = {x: length[x] if j < k else skip[x] for j, x in enumerate(SPLITS)}
                save(t, dict(at, **{s: position}), before)

            splits[s].append(blobs[s][0], blobs[s][1], skip[s], closed)
        skip = {s: 0 for s in SPLITS}
        counts = {"documents": before["documents"] + ndocs,
                  "empty_documents": before["empty_documents"] + empty}
        first_empty = first_empty or where
        progress.update(weights[t], sum(length.values()))
    for s in SPLITS:
        splits[s].close()
    progress.update(0, 0, final=True)
    manifest.pop("resume", None)
    manifest["complete"] = True
    manifest["documents"] = counts["documents"]
    manifest["empty_documents"] = counts["empty_documents"]
    manifest["splits"] = {s: {"documents": sum(x["documents"] for x in splits[s].shards),
                              "tokens": sum(x["tokens"] for x in splits[s].shards),
                              "shards": splits[s].shards} for s in SPLITS}
    write_manifest(args.output, manifest)
    if counts["empty_documents"]:
        print(f"prepare: warning: skipped {counts['empty_documents']} empty documents"
              f"{f' (the first: {first_empty})' if first_empty else ''}", file=sys.stderr)
    if args.val_fraction > 0 and not splits["val"].shards:
        print(f"prepare: warning: no document fell into the validation split (--val-fraction "
              f"{args.val_fraction} of {counts['documents']} documents); raise it for a val_*.bin",
              file=sys.stderr)
    for s in SPLITS:
        m = manifest["splits"][s]
        print(f"prepare: {s}: {m['documents']:,} documents, {m['tokens']:,} tokens ({dtype}) in "
              f"{len(m['shards'])} shards: {os.path.join(args.output, s + '_*.bin')}")
    # What a spec reads it with (the token files, not the directory).
    reads = f'data = tokens("{os.path.join(args.output, "train_*.bin")}")'
    if splits["val"].shards:
        reads += f' and val = tokens("{os.path.join(args.output, "val_*.bin")}")'
    print(f"next: in the spec's train section, {reads}; in its model section, vocab = "
          f"{info.vocab_size}")
    return 0


def _results(tasks, jobs):
    """tokenize_task over the tasks in order: in this process, or in `jobs`
    forked workers (which leave Ctrl-C to this process: it stops them)."""
    if jobs <= 1 or len(tasks) <= 1:
        yield from map(tokenize_task, tasks)
        return
    import multiprocessing
    import signal
    with multiprocessing.get_context("fork").Pool(jobs, signal.signal, (signal.SIGINT, signal.SIG_IGN)) as pool:
        yield from pool.imap(tokenize_task, tasks)


def _fraction(text):
    try:
        f = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not 0 <= f < 1:
        raise argparse.ArgumentTypeError(f"{text} is not in [0, 1)")
    return f


def _positive(text):
    try:
        n = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text} is not positive")
    return n


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="fsdpgen prepare", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Text, JSON lines, Parquet and saved Hugging Face datasets into llm.c token "
                    "files through a model's own tokenizer: sharded, with a validation split and "
                    "manifest.json (docs/prepare.md).",
        epilog="\n\n".join(__doc__.split("\n\n")[2:]))
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="text, JSON lines, Parquet or Arrow files, glob patterns, or dataset directories")
    p.add_argument("-o", "--output", required=True, help="the directory of the shards and manifest.json")
    p.add_argument("--tokenizer", required=True, help="a tokenizer.json, or a Hugging Face model directory")
    p.add_argument("--field", default="text", help="JSON lines, Parquet, Arrow: the document's field (default text)")
    p.add_argument("--text-docs", choices=("file", "paragraph", "line"), default="file",
                   help="text files: a document is the whole file (default), a paragraph (blank lines "
                        "between), or a line")
    p.add_argument("--hf-split", default="train", help="dataset directories: the split read (default train)")
    p.add_argument("--val-fraction", type=_fraction, default=Fraction(1, 100),
                   help="about this fraction of the documents (by a hash of their text) form the "
                        "validation split (default 0.01; 0: none)")
    p.add_argument("--shard-tokens", type=_positive, default=100_000_000,
                   help="tokens per shard, the last of a split fewer (default 100,000,000)")
    p.add_argument("--dtype", choices=("auto", "uint16", "uint32"), default="auto",
                   help="token width: auto (uint16 when the vocabulary fits, else uint32)")
    p.add_argument("--eot", help="the end-of-text token (default: tokenizer_config.json's eos_token, "
                                 "else " + ", ".join(EOT_NAMES[:2]) + ", ...)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--bos", dest="bos", action="store_true", default=None,
                   help="begin each document with BOS (default: when the tokenizer adds one)")
    g.add_argument("--no-bos", dest="bos", action="store_false")
    p.add_argument("--jobs", type=_positive, default=os.cpu_count() or 1,
                   help="tokenizing processes (default: the CPUs)")
    p.add_argument("--chunk-bytes", type=_positive, default=DEFAULT_CHUNK_BYTES, help=argparse.SUPPRESS)
    p.add_argument("--overwrite", action="store_true",
                   help="replace a preparation in the directory instead of resuming or keeping it")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    args = p.parse_args(argv)
    if args.shard_tokens >= 1 << 31:
        p.error(f"--shard-tokens {args.shard_tokens}: the header's count is an int32; at most 2,147,483,647")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return run_tool("prepare", run, args, stopped="stopped; run the same command again to resume")
    finally:
        if "lock" in _W:  # the output directory's, taken by open_output
            _W.pop("lock").close()


if __name__ == "__main__":
    sys.exit(main())
