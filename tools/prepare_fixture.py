#!/usr/bin/env python3
"""prepare_fixture: small tokenizers made with Hugging Face `tokenizers`, for
the tests of tools/prepare.py (tests/tools/prepare_test.py) and its
benchmark: no download, the same library prepare reads them with.

    python tools/prepare_fixture.py DIR [--vocab N]

writes into DIR:
  gpt2/tokenizer.json      byte-level BPE as GPT-2's: <|endoftext|> special, no BOS
  gpt2-slow/               the same BPE as GPT-2's vocab.json and merges.txt (no tokenizer.json)
  llama3/tokenizer.json    byte-level BPE as Llama 3's: <|begin_of_text|> added before each
                           text by its post-processor, <|end_of_text|> the eos_token of its
                           tokenizer_config.json
  wide/tokenizer.json      a word-level tokenizer of 70,000 tokens (ids beyond uint16)
  corpus.txt               the text the BPEs were trained on
The BPEs have --vocab tokens (default 512)."""
import argparse
import json
import os
import random
import sys

WORDS = ("the of and to in is was for that with as on by at from his her it an be this which or "
         "are were had has have not but all they one their been we there would who when more "
         "time year new first people city river market north music record school system state "
         "water world game group house light model number order paper place point power range "
         "shard token vocabulary gradient parameter optimizer schedule").split()


def corpus(n_sentences=2000, seed=7):
    """Deterministic English-like text: sentences of the words above, some
    digits, punctuation and non-ASCII letters (so byte-level merges matter)."""
    rng = random.Random(seed)
    lines = []
    for i in range(n_sentences):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 14))]
        if i % 7 == 0:
            words.insert(rng.randint(0, len(words)), str(rng.randint(0, 9999)))
        if i % 11 == 0:
            words.append(rng.choice(("café", "naïve", "Zürich", "日本", "🙂")))
        lines.append(" ".join(words).capitalize() + rng.choice((".", "!", "?", ",")))
    return "\n".join(lines) + "\n"


def byte_level_bpe(text, vocab, special):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text.splitlines(), trainer=trainer)
    return tok


def write_all(out, vocab):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    text = corpus()
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "corpus.txt"), "w", encoding="utf-8") as f:
        f.write(text)

    gpt2 = byte_level_bpe(text, vocab, ["<|endoftext|>"])
    gpt2.post_processor = processors.ByteLevel(trim_offsets=False)
    os.makedirs(os.path.join(out, "gpt2"), exist_ok=True)
    gpt2.save(os.path.join(out, "gpt2", "tokenizer.json"))
    os.makedirs(os.path.join(out, "gpt2-slow"), exist_ok=True)
    gpt2.model.save(os.path.join(out, "gpt2-slow"))  # vocab.json, merges.txt
    with open(os.path.join(out, "gpt2-slow", "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>"}, f)

    llama = byte_level_bpe(text, vocab, ["<|begin_of_text|>", "<|end_of_text|>"])
    llama.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", llama.token_to_id("<|begin_of_text|>"))])
    os.makedirs(os.path.join(out, "llama3"), exist_ok=True)
    llama.save(os.path.join(out, "llama3", "tokenizer.json"))
    with open(os.path.join(out, "llama3", "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}, f)

    words = {"[UNK]": 0, "<|endoftext|>": 1}
    words.update({f"w{i}": i for i in range(2, 70000)})
    wide = Tokenizer(models.WordLevel(words, unk_token="[UNK]"))
    wide.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    wide.add_special_tokens(["<|endoftext|>"])
    os.makedirs(os.path.join(out, "wide"), exist_ok=True)
    wide.save(os.path.join(out, "wide", "tokenizer.json"))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir")
    p.add_argument("--vocab", type=int, default=512)
    args = p.parse_args(argv)
    write_all(args.dir, args.vocab)
    return 0


if __name__ == "__main__":
    sys.exit(main())
