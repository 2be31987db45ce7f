#!/usr/bin/env python3
"""gemma3_text: the text model of a Gemma 3 checkpoint that also holds a
vision tower (Gemma3ForConditionalGeneration: gemma-3-4b, 12b and 27b), saved
alone as Gemma3ForCausalLM, the model_type gemma3_text that `fsdpgen
import-hf` reads and `--init-from` loads. fsdpgen refuses the whole
checkpoint by name (it builds no vision tower); this writes the language
model's config (its text_config: the global layers' linear rope scaling
among it) and its weights unchanged, the tokenizer's files beside them, and
checks that both models give the same logits on a few tokens.

Usage (torch and transformers, as tools/gemma3_reference.py):
  python3 tools/gemma3_text.py gemma-3-4b-pt/ gemma-3-4b-text/
then
  build/fsdpgen import-hf gemma-3-4b-text/ -o gemma3-4b.fsdp
"""
import argparse
import os
import shutil
import sys

# The tokenizer's files a model directory may hold; copied as they are.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model",
                   "special_tokens_map.json", "added_tokens.json", "generation_config.json")


def fail(message):
    print(f"gemma3_text: error: {message}", file=sys.stderr)
    sys.exit(1)


def text_model(source):
    """The Gemma3ForCausalLM holding the source's language model, in the
    source's dtype, and the source model itself."""
    import transformers
    config = transformers.AutoConfig.from_pretrained(source)
    if config.model_type == "gemma3_text":
        fail(f"{source} is already a text model (model_type gemma3_text): "
             "fsdpgen import-hf reads it as it is")
    if config.model_type != "gemma3":
        fail(f"{source} holds model_type {config.model_type!r}, not Gemma 3's \"gemma3\"")
    full = transformers.Gemma3ForConditionalGeneration.from_pretrained(source, dtype="auto")
    text = transformers.Gemma3ForCausalLM(config.text_config).to(full.dtype)
    text.model.load_state_dict(full.model.language_model.state_dict(), strict=True)
    text.lm_head.weight = text.model.embed_tokens.weight  # Gemma 3's head is the embedding
    return full.eval(), text.eval()


def same_logits(full, text):
    """The largest difference of the two models' logits on 8 tokens."""
    import torch
    ids = torch.arange(1, 9).unsqueeze(0) % text.config.vocab_size
    with torch.no_grad():
        return float((full(ids).logits.float() - text(ids).logits.float()).abs().max())


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source", help="a Gemma3ForConditionalGeneration model directory")
    p.add_argument("out", help="the directory to write the Gemma3ForCausalLM into")
    a = p.parse_args(argv)
    if not os.path.isfile(os.path.join(a.source, "config.json")):
        fail(f"{a.source} has no config.json: not a model directory")
    if os.path.exists(a.out) and os.listdir(a.out):
        fail(f"{a.out} exists and is not empty: give a new directory")
    full, text = text_model(a.source)
    diff = same_logits(full, text)
    if diff != 0:
        fail(f"the text model's logits differ from the checkpoint's by {diff}; nothing written")
    text.save_pretrained(a.out)
    for name in TOKENIZER_FILES:
        if os.path.isfile(os.path.join(a.source, name)):
            shutil.copy(os.path.join(a.source, name), os.path.join(a.out, name))
    params = sum(t.numel() for t in text.parameters())
    print(f"gemma3_text: {a.out}: Gemma3ForCausalLM, {params} parameters, logits equal to "
          f"{a.source}'s on 8 tokens")


if __name__ == "__main__":
    main(sys.argv[1:])
