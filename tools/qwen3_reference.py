#!/usr/bin/env python3
"""qwen3_reference: the independent reference that tests/e2e/Qwen3ReferenceTest.cpp
compares fsdpgen's llama with qk_norm and head_dim against. It builds a small
Qwen3ForCausalLM with Hugging Face transformers (eager attention, tied
embeddings, no q/k/v biases, a head size of 16 where width / heads is 8, so q
is 64 wide and o_proj maps 64 -> 32), gives its q_norm and k_norm weights
random values near 1 (transformers initializes them to ones, which would leave
the norms' weights untested at the first step), saves those initial weights
in fp32 as model.safetensors and a token file in llm.c's format, then trains
the model in fp64 a few steps with torch.optim.AdamW on exactly the batches an
fsdpgen run reads from that file, and writes each step's loss and gradient
norm (before clipping) to expected.json. The initial weights are also saved by
save_pretrained into hf/ (config.json and sharded safetensors with their
index), as a model directory on the Hub looks.

The model and run must match tests/e2e/qwen3_reference/qwen3.fsdp. Regenerate with
  python3 -m venv /tmp/hf && /tmp/hf/bin/pip install torch transformers safetensors
  /tmp/hf/bin/python tools/qwen3_reference.py tests/e2e/qwen3_reference
(checked in; the test suite itself needs neither torch nor transformers).
"""
import sys

import torch
import transformers

import reference_run  # beside this script

VOCAB, CONTEXT, WIDTH, HEADS, KV_HEADS, HEAD_DIM, FFN, LAYERS = 64, 16, 32, 4, 2, 16, 88, 2
ROPE_THETA, NORM_EPS, MAX_POSITIONS = 1000000.0, 1e-6, 256
# The q and k norms' weights: 1 + N(0, NORM_STD^2).
NORM_STD = 0.2
GLOBAL_BATCH, STEPS, TOKENS = 4, 6, 4000
LR, BETAS, EPS, WEIGHT_DECAY, CLIP = 1e-2, (0.9, 0.95), 1e-8, 0.1, 1.0


def build_model():
    """The reference Qwen3ForCausalLM, freshly initialized (torch's seed as
    set), its q_norm and k_norm weights drawn from N(1, NORM_STD^2)."""
    config = transformers.Qwen3Config(
        vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POSITIONS, rms_norm_eps=NORM_EPS, tie_word_embeddings=True,
        attention_bias=False, use_sliding_window=False, rope_theta=ROPE_THETA,
        torch_dtype=torch.float32)
    config._attn_implementation = "eager"
    model = transformers.Qwen3ForCausalLM(config).float()
    with torch.no_grad():
        for layer in model.model.layers:
            for norm in (layer.self_attn.q_norm, layer.self_attn.k_norm):
                norm.weight.normal_(1.0, NORM_STD)
    return model


def main(out_dir):
    torch.manual_seed(0)
    reference_run.write_tied_fp64_fixture(out_dir, build_model(), VOCAB, TOKENS, CONTEXT,
                                          GLOBAL_BATCH, STEPS, LR, BETAS, EPS, WEIGHT_DECAY, CLIP)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
