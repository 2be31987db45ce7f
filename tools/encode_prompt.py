#!/usr/bin/env python3
"""encode_prompt: a prompt's text into token ids with a tokenizer.json, through
Hugging Face tokenizers (with its special tokens, as fsdpgen prepare encodes a
document: Llama 3's post-processor adds <|begin_of_text|>), for
`fsdpgen sample --prompt`. fsdpgen has no encoder of its own.

    python tools/encode_prompt.py TOKENIZER_JSON TEXT OUT_JSON

writes {"ids": [...]} to OUT_JSON; an error is one line on stderr, exit 1.
"""
import json
import sys


def main(argv):
    if len(argv) != 3:
        print("usage: encode_prompt.py TOKENIZER_JSON TEXT OUT_JSON", file=sys.stderr)
        return 2
    path, text, out = argv
    try:
        from tokenizers import Tokenizer
        ids = Tokenizer.from_file(path).encode(text).ids
    except Exception as e:  # the library's own message names the problem
        print(f"{path}: cannot encode the prompt: {e}", file=sys.stderr)
        return 1
    with open(out, "w") as f:
        json.dump({"ids": ids}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
