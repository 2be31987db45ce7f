#!/usr/bin/env python3
"""llama_reference: the independent reference that tests/e2e/LlamaReferenceTest.cpp
compares fsdpgen's llama against. It builds a small LlamaForCausalLM with Hugging
Face transformers (fp32, eager attention), saves its initial weights as
model.safetensors and a token file in llm.c's format, trains it a few steps with
torch.optim.AdamW on exactly the batches an fsdpgen run reads from that file, and
writes each step's loss and gradient norm (before clipping) to expected.json. The
initial weights are also saved by save_pretrained into hf/ (config.json and
sharded safetensors with their index), as a model directory on the Hub looks.

The model and run must match tests/e2e/llama_reference/llama.fsdp. Regenerate with
  python3 -m venv /tmp/hf && /tmp/hf/bin/pip install torch transformers safetensors
  /tmp/hf/bin/python tools/llama_reference.py tests/e2e/llama_reference
(checked in; the test suite itself needs neither torch nor transformers).
"""
import os
import sys

import torch
import transformers
from safetensors.torch import save_file

import reference_run  # beside this script

VOCAB, CONTEXT, WIDTH, HEADS, KV_HEADS, FFN, LAYERS = 64, 16, 32, 4, 2, 88, 2
ROPE_THETA, NORM_EPS = 10000.0, 1e-5
# Llama 3.1's frequency scaling at this head size (frequencies 1, 0.1, 0.01,
# 0.001): wavelength 6.3 kept (below 128 / 4), 63 interpolated, 628 and 6283
# divided by 4 (above 128 / 1). transformers wants max_position_embeddings
# above the original context; it does not enter the computation.
ROPE_SCALING = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 128}
MAX_POSITIONS = 256
GLOBAL_BATCH, STEPS, TOKENS = 4, 6, 4000
LR, BETAS, EPS, WEIGHT_DECAY, CLIP = 1e-2, (0.9, 0.95), 1e-8, 0.1, 1.0


def build_model():
    """The reference LlamaForCausalLM, freshly initialized (torch's seed as set)."""
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=NORM_EPS, tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
        rope_theta=ROPE_THETA, rope_scaling=ROPE_SCALING, torch_dtype=torch.float32)
    config._attn_implementation = "eager"
    return transformers.LlamaForCausalLM(config).float()


def main(out_dir):
    torch.manual_seed(0)
    model = build_model()
    print("inv_freq", model.model.rotary_emb.inv_freq.tolist())
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    # The same weights as transformers saves a model directory: config.json
    # and shards of at most 40 kB with model.safetensors.index.json.
    model.save_pretrained(os.path.join(out_dir, "hf"), max_shard_size="40kB")

    tokens = reference_run.learnable_stream(VOCAB, TOKENS)
    reference_run.write_tokens(os.path.join(out_dir, "tokens.bin"), tokens)
    losses, _, norms = reference_run.train(model, tokens, CONTEXT, VOCAB, GLOBAL_BATCH, STEPS, LR,
                                           BETAS, EPS, WEIGHT_DECAY, CLIP)
    reference_run.write_expected(os.path.join(out_dir, "expected.json"),
                                 {"losses": losses, "grad_norms": norms})


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
