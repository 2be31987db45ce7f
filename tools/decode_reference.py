#!/usr/bin/env python3
"""decode_reference: what Hugging Face tokenizers' decode(ids, skip_special_tokens=False)
makes of many ids, for tests/runtime/TokenDecoderTest.cpp to compare fsdpgen's decoder
(runtime/generate/token_decoder.h) against. Small tokenizers trained here on
prepare_fixture's corpus (no download):
  gpt2/           byte-level BPE with GPT-2's <|endoftext|> (decoder ByteLevel)
  llama3/         byte-level BPE with Llama 3's <|begin_of_text|> and <|end_of_text|>
  sentencepiece/  a Llama 2 style BPE: '▁' for spaces, the 256 <0xHH> byte tokens, <unk>,
                  <s>, </s>, decoder Sequence(Replace '▁' -> ' ', ByteFallback, Fuse,
                  Strip one leading space)
  metaspace/      the same vocabulary with the Metaspace decoder
each with tokenizer.json and expected.json: [{"ids": [...], "text": "..."}] for every id
alone, then random sequences (any id, so partial UTF-8 and lone byte tokens occur) and
the corpus's own lines encoded.

Regenerate with the project's venv (bash tools/setup.sh python):
  build/python/bin/python tools/decode_reference.py tests/runtime/decode_reference
"""
import json
import os
import random
import sys

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

import prepare_fixture  # beside this script

VOCAB, SEQUENCES = 400, 300


def sentencepiece_style(text):
    """A BPE over '▁'-joined words whose vocabulary also holds <0x00>..<0xFF>
    (byte fallback), as Llama 2's tokenizer.json is laid out."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                           normalizers.Replace(" ", "▁")])
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<unk>", "<s>", "</s>"],
                                  show_progress=False)
    tok.train_from_iterator(text.splitlines(), trainer=trainer)
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    # The byte tokens at ids 3..258, the rest after them (merges name tokens, not ids).
    rest = sorted((i, t) for t, i in vocab.items() if i >= 3)
    new = {t: i for t, i in vocab.items() if i < 3}
    new.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    for k, (_, t) in enumerate(t for t in rest if t[1] not in new):
        new[t] = 259 + k
    spec["model"]["vocab"] = new
    spec["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    return Tokenizer.from_str(json.dumps(spec))


def cases(tok, text, rng):
    vocab = tok.get_vocab_size(with_added_tokens=True)
    seqs = [[i] for i in range(vocab)]
    seqs += [[rng.randrange(vocab) for _ in range(rng.randint(2, 12))] for _ in range(SEQUENCES)]
    seqs += [tok.encode(line).ids for line in text.splitlines()[:60]]
    return [{"ids": ids, "text": tok.decode(ids, skip_special_tokens=False)} for ids in seqs]


def write(out_dir, name, tok, text, seed):
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(cases(tok, text, random.Random(seed)), f, ensure_ascii=False)
        f.write("\n")


def main(out_dir):
    text = prepare_fixture.corpus(400)
    write(out_dir, "gpt2", prepare_fixture.byte_level_bpe(text, VOCAB, ["<|endoftext|>"]), text, 1)
    write(out_dir, "llama3",
          prepare_fixture.byte_level_bpe(text, VOCAB, ["<|begin_of_text|>", "<|end_of_text|>"]),
          text, 2)
    sp = sentencepiece_style(text)
    write(out_dir, "sentencepiece", sp, text, 3)
    sp.decoder = decoders.Metaspace()
    write(out_dir, "metaspace", sp, text, 4)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
