#!/usr/bin/env python3
"""mistral_reference: the independent reference that tests/e2e/MistralReferenceTest.cpp
compares fsdpgen's llama with sliding_window against. It builds a small
MistralForCausalLM with Hugging Face transformers (eager attention, tied
embeddings, grouped-query attention, a sliding window of 5 positions in
sequences of 16, so most queries see only their last 5 keys), saves its
initial weights in fp32 as model.safetensors and a token file in llm.c's
format, then trains the model in fp64 a few steps with torch.optim.AdamW on
exactly the batches an fsdpgen run reads from that file, and writes each
step's loss and gradient norm (before clipping) to expected.json. The initial
weights are also saved by save_pretrained into hf/ (config.json and sharded
safetensors with their index), as a model directory on the Hub looks.

The model and run must match tests/e2e/mistral_reference/mistral.fsdp. Regenerate with
  python3 -m venv /tmp/hf && /tmp/hf/bin/pip install torch transformers safetensors
  /tmp/hf/bin/python tools/mistral_reference.py tests/e2e/mistral_reference
(checked in; the test suite itself needs neither torch nor transformers).
"""
import sys

import torch
import transformers

import reference_run  # beside this script

VOCAB, CONTEXT, WIDTH, HEADS, KV_HEADS, FFN, LAYERS = 64, 16, 32, 4, 2, 88, 2
WINDOW, ROPE_THETA, NORM_EPS, MAX_POSITIONS = 5, 10000.0, 1e-5, 256
GLOBAL_BATCH, STEPS, TOKENS = 4, 6, 4000
LR, BETAS, EPS, WEIGHT_DECAY, CLIP = 1e-2, (0.9, 0.95), 1e-8, 0.1, 1.0


def build_model():
    """The reference MistralForCausalLM, freshly initialized (torch's seed as set)."""
    config = transformers.MistralConfig(
        vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
        max_position_embeddings=MAX_POSITIONS, rms_norm_eps=NORM_EPS, tie_word_embeddings=True,
        sliding_window=WINDOW, rope_theta=ROPE_THETA, torch_dtype=torch.float32)
    config._attn_implementation = "eager"
    return transformers.MistralForCausalLM(config).float()


def main(out_dir):
    torch.manual_seed(0)
    reference_run.write_tied_fp64_fixture(out_dir, build_model(), VOCAB, TOKENS, CONTEXT,
                                          GLOBAL_BATCH, STEPS, LR, BETAS, EPS, WEIGHT_DECAY, CLIP)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
