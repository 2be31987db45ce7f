#!/usr/bin/env python3
"""gemma_reference: the independent reference that tests/e2e/GemmaReferenceTest.cpp
compares fsdpgen's llama with Gemma's pieces against. It builds a small
GemmaForCausalLM (Gemma 1's architecture) with Hugging Face transformers
(eager attention, tied embeddings, the embedding scaled by sqrt(width), every
RMSNorm scaling by (1 + weight), a GeGLU MLP with GELU's tanh form, a head
size of 16 where width / heads is 8), gives its RMSNorm weights random values
near 0 (transformers initializes them to zeros, which would leave the norms'
weights untested at the first step), saves those initial weights in fp32 as
model.safetensors and a token file in llm.c's format, then trains the model
in fp64 a few steps with torch.optim.AdamW on exactly the batches an fsdpgen
run reads from that file, and writes each step's loss and gradient norm
(before clipping) to expected.json. The initial weights are also saved by
save_pretrained into hf/ (config.json and sharded safetensors with their
index), as a model directory on the Hub looks. Its pad_token_id is None:
with Gemma's 0, nn.Embedding would hold token 0's row out of the embedding's
gradient, which fsdpgen, like llm.c and torchtitan, does not do.

The model and run must match tests/e2e/gemma_reference/gemma.fsdp. Regenerate with
  python3 -m venv /tmp/hf && /tmp/hf/bin/pip install torch transformers safetensors
  /tmp/hf/bin/python tools/gemma_reference.py tests/e2e/gemma_reference
(checked in; the test suite itself needs neither torch nor transformers).
"""
import sys

import torch
import transformers

import reference_run  # beside this script

VOCAB, CONTEXT, WIDTH, HEADS, KV_HEADS, HEAD_DIM, FFN, LAYERS = 64, 16, 32, 4, 2, 16, 88, 2
ROPE_THETA, NORM_EPS, MAX_POSITIONS = 10000.0, 1e-6, 256
# Every RMSNorm's weight: N(0, NORM_STD^2), so that (1 + weight) is near 1.
NORM_STD = 0.2
GLOBAL_BATCH, STEPS, TOKENS = 4, 6, 4000
LR, BETAS, EPS, WEIGHT_DECAY, CLIP = 1e-2, (0.9, 0.95), 1e-8, 0.1, 1.0


def build_model():
    """The reference GemmaForCausalLM, freshly initialized (torch's seed as
    set), its RMSNorm weights drawn from N(0, NORM_STD^2)."""
    config = transformers.GemmaConfig(
        vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POSITIONS, rms_norm_eps=NORM_EPS, tie_word_embeddings=True,
        attention_bias=False, hidden_act="gelu_pytorch_tanh", rope_theta=ROPE_THETA,
        pad_token_id=None, torch_dtype=torch.float32)
    config._attn_implementation = "eager"
    model = transformers.GemmaForCausalLM(config).float()
    return reference_run.draw_norms(model, NORM_STD)


def main(out_dir):
    torch.manual_seed(0)
    reference_run.write_tied_fp64_fixture(out_dir, build_model(), VOCAB, TOKENS, CONTEXT,
                                          GLOBAL_BATCH, STEPS, LR, BETAS, EPS, WEIGHT_DECAY, CLIP)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
