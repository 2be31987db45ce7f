#!/usr/bin/env python3
"""prepare_eval: HellaSwag's JSON lines (ctx, endings, label) into llm.c's
multiple-choice evaluation file, through the model's tokenizer (Hugging Face
tokenizers), for the training binary's --eval (docs/eval.md).

  fsdpgen prepare-eval hellaswag_val.jsonl --tokenizer TOKENIZER -o hellaswag_val.bin

Each example's context is encoded as it stands (after the BOS the tokenizer
puts before a text, Llama 3's, if any) and each ending with a leading space,
as llm.c's dev/data/hellaswag.py does. The layout is llm.c's write_evalfile
(runtime/files/eval_file.h): a header of 256 int32 (magic 20240522,
version, examples, longest example's bytes), then per example a delimiter,
its bytes, index, label, completion count, the context's count and tokens and
each completion's count and tokens: uint16 fields in version 1 (llm.c's,
every token below 65535), uint32 in version 2 (a larger vocabulary).
"""
import argparse
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

EVAL_MAGIC = 20240522
HEADER_INTS = 256
# Per version: the struct code of a field and its delimiter (all ones).
FIELDS = {1: ("H", 0xFFFF), 2: ("I", 0xFFFFFFFF)}


class EvalError(Exception):
    """Bad input or a bad flag: the message names the file, the line and the problem."""


def example_fields(index, label, context, completions, version):
    """One example's fields (a list of ints), its byte count filled in."""
    code, delimiter = FIELDS[version]
    fields = [delimiter, 0, index, label, len(completions), len(context), *context]
    for c in completions:
        fields += [len(c), *c]
    fields[1] = len(fields) * struct.calcsize(code)
    return fields


def write_eval_file(path, examples, version):
    """examples: (label, context ids, [completion ids, ...]) in order; written
    to path.partial and renamed. Raises EvalError where a field does not fit."""
    code, delimiter = FIELDS[version]
    body, longest = [], 0
    for index, (label, context, completions) in enumerate(examples):
        fields = example_fields(index, label, context, completions, version)
        too_big = [v for v in fields[1:] if v >= delimiter]
        if too_big:
            raise EvalError(f"example {index}: the value {too_big[0]} does not fit a version {version} "
                            f"field (below {delimiter}): use --version 2 (uint32 fields)")
        longest = max(longest, fields[1])
        body.append(struct.pack(f"<{len(fields)}{code}", *fields))
    header = [EVAL_MAGIC, version, len(examples), longest] + [0] * (HEADER_INTS - 4)
    partial = path + ".partial"
    with open(partial, "wb") as f:
        f.write(struct.pack(f"<{HEADER_INTS}i", *header))
        for b in body:
            f.write(b)
    os.replace(partial, path)


def read_examples(path, limit):
    """(line, ctx, endings, label) of each JSON line, checked."""
    out = []
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        raise EvalError(f"{path}: cannot read it: {e.strerror}") from None
    with f:
        for n, line in enumerate(f, 1):
            if limit and len(out) >= limit:
                break
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                x = json.loads(line)
            except ValueError as e:
                raise EvalError(f"{where}: not a JSON line: {e}") from None
            if not isinstance(x, dict):
                raise EvalError(f"{where}: not a JSON object")
            for key in ("ctx", "endings", "label"):
                if key not in x:
                    raise EvalError(f"{where}: no \"{key}\" field (HellaSwag's lines have ctx, endings "
                                    "and label)")
            ctx, endings, label = x["ctx"], x["endings"], x["label"]
            if not isinstance(ctx, str) or not ctx:
                raise EvalError(f"{where}: \"ctx\" is not a non-empty string")
            if (not isinstance(endings, list) or not endings
                    or not all(isinstance(e, str) and e for e in endings)):
                raise EvalError(f"{where}: \"endings\" is not a list of non-empty strings")
            if isinstance(label, str) and label.strip().isdigit():
                label = int(label)  # the Hugging Face dataset's labels are strings
            if not isinstance(label, int) or isinstance(label, bool):
                raise EvalError(f"{where}: \"label\" is {json.dumps(label)}, not an index (the test "
                                "split has no labels: use the validation split)")
            if not 0 <= label < len(endings):
                raise EvalError(f"{where}: label {label} is out of range for its {len(endings)} endings")
            out.append((n, ctx, endings, label))
    if not out:
        raise EvalError(f"{path}: no example in it")
    return out


def encode_examples(raw, info):
    """(label, context ids, [ending ids]) of each example, by the tokenizer."""
    from prepare_tokenizer import begin_of_text

    bos = begin_of_text(info, None)
    tok = info.tok
    texts = [ctx for _, ctx, _, _ in raw]
    endings = [" " + e for _, _, ends, _ in raw for e in ends]
    ctx_ids = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    end_ids = [e.ids for e in tok.encode_batch(endings, add_special_tokens=False)]
    out, at = [], 0
    for (_, _, ends, label), ctx in zip(raw, ctx_ids):
        context = ([bos[1]] if bos else []) + ctx
        out.append((label, context, end_ids[at:at + len(ends)]))
        at += len(ends)
    return out


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="fsdpgen prepare-eval",
        description="HellaSwag-style JSON lines (ctx, endings, label) into llm.c's multiple-choice "
                    "evaluation file through the model's tokenizer, for the training binary's --eval.")
    p.add_argument("input", help="JSON lines with ctx, endings and label (HellaSwag's hellaswag_val.jsonl)")
    p.add_argument("--tokenizer", required=True,
                   help="a tokenizer.json, a Hugging Face model directory, or a token set made by "
                        "fsdpgen prepare (its tokenizer.json)")
    p.add_argument("-o", "--output", required=True, help="the .bin file to write")
    p.add_argument("--limit", type=int, default=0, help="the first N examples only (default: all)")
    p.add_argument("--version", type=int, choices=(1, 2), default=0,
                   help="1: uint16 fields (llm.c's; every token id below 65535); 2: uint32 "
                        "(default: 1 where the vocabulary fits, else 2)")
    return p.parse_args(argv)


def run(args):
    from prepare_inputs import PrepareError
    from prepare_tokenizer import load_tokenizer

    if args.limit < 0:
        raise EvalError(f"--limit {args.limit}: not a count")
    raw = read_examples(args.input, args.limit)
    try:
        info = load_tokenizer(args.tokenizer)
    except PrepareError as e:
        raise EvalError(str(e)) from None
    version = args.version or (1 if info.vocab_size <= FIELDS[1][1] else 2)
    examples = encode_examples(raw, info)
    write_eval_file(args.output, examples, version)
    longest = max(len(c) + max(len(e) for e in ends) for _, c, ends in examples)
    print(f"wrote {args.output}: {len(examples):,} examples, "
          f"{sum(len(ends) for _, _, ends in examples):,} candidates, the longest {longest} tokens "
          f"(version {version}, {'uint16' if version == 1 else 'uint32'}; tokenizer {info.name})")
    return 0


def main(argv=None):
    from prepare_inputs import run_tool
    return run_tool("prepare-eval", run, parse_args(sys.argv[1:] if argv is None else argv),
                    errors=(EvalError,))


if __name__ == "__main__":
    sys.exit(main())
