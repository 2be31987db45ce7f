#!/usr/bin/env python3
"""train_tokenizer: a byte-level BPE trained on the user's own text with
Hugging Face `tokenizers` (its BpeTrainer: no BPE of fsdpgen's own), what
`fsdpgen train-tokenizer` runs (docs/prepare.md#your-own-tokenizer).

    fsdpgen train-tokenizer INPUT... -o DIR --vocab N [--style gpt2|llama3]
        [--field text] [--text-docs file|paragraph|line] [--hf-split train]
        [--max-bytes N] [--overwrite]

INPUT: what `fsdpgen prepare` reads (text, JSON lines, Parquet, Arrow, glob
patterns, saved Hugging Face datasets), read in the same way. --style gpt2:
GPT-2's layout (byte-level pre-tokenizer and decoder, <|endoftext|> the one
special token, no BOS); llama3: Llama 3's (<|begin_of_text|> put before
each text by the post-processor, <|end_of_text|> the end of text). The
special tokens take the first ids. Writes DIR/tokenizer.json and
DIR/tokenizer_config.json, which `fsdpgen prepare --tokenizer DIR` reads;
the same inputs and flags give the same files, byte for byte."""
import argparse
import json
import os
import sys
import time

from prepare_inputs import INSTALL_HINT, PrepareError, documents, expand_inputs, make_tasks, run_tool

STYLES = {
    # style: (special tokens in id order, bos, eos)
    "gpt2": (["<|endoftext|>"], None, "<|endoftext|>"),
    "llama3": (["<|begin_of_text|>", "<|end_of_text|>"], "<|begin_of_text|>", "<|end_of_text|>"),
}
MIN_VOCAB = 256 + 3  # the 256 byte tokens, the special tokens and at least one merge
MAX_VOCAB = 1 << 20
CHUNK_BYTES = 4 << 20


def texts(sources, args, budget):
    """Every document of the inputs in order (as prepare reads them), up to
    `budget` bytes of UTF-8 in all (0: no limit); counts them in args."""
    tasks, _ = make_tasks(sources, args)
    used = 0
    for task in tasks:
        for text, _where in documents(sources[task[0]], task, args.field, args.text_docs):
            if not text:
                continue
            size = len(text.encode("utf-8"))
            if budget and used + size > budget:
                if used == 0:  # a first document larger than the budget: its start
                    text = text.encode("utf-8")[:budget].decode("utf-8", "ignore")
                    args.documents, args.bytes_read = 1, budget
                    yield text
                return
            used += size
            args.documents += 1
            args.bytes_read = used
            yield text


def train(sources, args):
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    except ImportError:
        raise PrepareError(f"this python ({sys.executable}) has no `tokenizers`; install it with "
                           f"{INSTALL_HINT}") from None
    special, bos, eos = STYLES[args.style]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=args.vocab, special_tokens=special,
                                  show_progress=not args.quiet,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    args.documents, args.bytes_read = 0, 0
    tok.train_from_iterator(texts(sources, args, args.max_bytes), trainer=trainer)
    if args.documents == 0:
        raise PrepareError("the inputs hold no text to train on (every document is empty)")
    if bos:
        bos_id = tok.token_to_id(bos)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok, bos, eos


def config_of(bos, eos, context):
    c = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eos,
         "bos_token": bos if bos else eos, "add_bos_token": bool(bos),
         "clean_up_tokenization_spaces": False}
    if context:
        c["model_max_length"] = context
    return c


def write(args, tok, bos, eos):
    os.makedirs(args.output, exist_ok=True)
    tj = os.path.join(args.output, "tokenizer.json")
    cj = os.path.join(args.output, "tokenizer_config.json")
    for path, text in ((tj, tok.to_str(pretty=True)),
                       (cj, json.dumps(config_of(bos, eos, args.context), indent=2, sort_keys=True))):
        partial = path + ".partial"
        with open(partial, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        os.replace(partial, path)
    return tj


def run(args):
    for name in ("tokenizer.json", "tokenizer_config.json"):
        path = os.path.join(args.output, name)
        if os.path.exists(path) and not args.overwrite:
            raise PrepareError(f"{path}: already there; --overwrite replaces it")
    if os.path.exists(args.output) and not os.path.isdir(args.output):
        raise PrepareError(f"{args.output}: not a directory (-o names the tokenizer's directory)")
    sources = expand_inputs(args.inputs, args.hf_split)
    start = time.monotonic()
    tok, bos, eos = train(sources, args)
    path = write(args, tok, bos, eos)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    print(f"trained on {args.documents:,} documents ({args.bytes_read:,} bytes) in "
          f"{time.monotonic() - start:.1f} s")
    print(f"wrote {path}: {vocab:,} tokens ({args.style}: end of text {eos} = {tok.token_to_id(eos)}"
          + (f", BOS {bos} = {tok.token_to_id(bos)}" if bos else "") + ")")
    if vocab < args.vocab:
        print(f"note: the text gave only {vocab:,} tokens of the {args.vocab:,} asked (no more pairs "
              "to merge)")
    print(f"next: fsdpgen prepare INPUT... -o DATA --tokenizer {args.output}, and the spec's "
          f"model: vocab = {vocab}")
    return 0


def _vocab(text):
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text} is not an integer") from None
    if not MIN_VOCAB <= n <= MAX_VOCAB:
        raise argparse.ArgumentTypeError(
            f"{n}: a byte-level BPE has 256 byte tokens, its special tokens and merges: "
            f"{MIN_VOCAB} to {MAX_VOCAB:,}")
    return n


def _non_negative(text):
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text} is not an integer") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{n} is negative")
    return n


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="fsdpgen train-tokenizer", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="A byte-level BPE tokenizer trained on your text with Hugging Face tokenizers, "
                    "for fsdpgen prepare and a spec's vocab (docs/prepare.md).",
        epilog="\n\n".join(__doc__.split("\n\n")[2:]))
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="text, JSON lines, Parquet or Arrow files, glob patterns, or dataset directories")
    p.add_argument("-o", "--output", required=True, help="the directory of tokenizer.json")
    p.add_argument("--vocab", type=_vocab, required=True,
                   help="tokens in all: bytes, special tokens and merges (e.g. 4096; GPT-2 has 50,257)")
    p.add_argument("--style", choices=sorted(STYLES), default="gpt2",
                   help="special tokens as GPT-2's (default) or Llama 3's")
    p.add_argument("--field", default="text", help="JSON lines, Parquet, Arrow: the document's field")
    p.add_argument("--text-docs", choices=("file", "paragraph", "line"), default="file",
                   help="text files: a document is the whole file (default), a paragraph, or a line")
    p.add_argument("--hf-split", default="train", help="dataset directories: the split read")
    p.add_argument("--max-bytes", type=_non_negative, default=0,
                   help="train on the first this many bytes of text only (default 0: all)")
    p.add_argument("--context", type=_non_negative, default=0,
                   help="model_max_length in tokenizer_config.json (the spec's context; default unset)")
    p.add_argument("--overwrite", action="store_true", help="replace a tokenizer in the directory")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    args.chunk_bytes = CHUNK_BYTES
    return args


def main(argv=None):
    return run_tool("train-tokenizer", run, parse_args(sys.argv[1:] if argv is None else argv),
                    stopped="stopped; nothing written")


if __name__ == "__main__":
    sys.exit(main())
