#!/usr/bin/env python3
"""gemma2_reference: the independent reference that tests/e2e/Gemma2ReferenceTest.cpp
compares fsdpgen's llama with Gemma 2's pieces against. It builds a small
Gemma2ForCausalLM with Hugging Face transformers: eager attention, tied
embeddings, the embedding scaled by sqrt(width), every RMSNorm scaling by
(1 + weight), norms before and after attention and the MLP, a GeGLU MLP
with GELU's tanh form, a head size of 16 where width / heads is 8, q . k
scaled by query_pre_attn_scalar^-0.5 with 24 rather than the head size,
attention scores soft-capped at 2 and the logits at 1.5, and layers that
alternate: layers 0 and 2 attend the last 6 positions, 1 and 3 every
earlier one (one rotary base). Its weights are drawn with a standard
deviation of 0.2 (initializer_range), not transformers' 0.02, so that the
scores and logits reach their caps (scores of about 4, logits of about 1)
and the caps' slopes are tested; its RMSNorm weights near 0 (transformers
initializes them to zeros). It saves those initial weights in fp32 as
model.safetensors and a token file in llm.c's format, then trains the model
in fp64 a few steps with torch.optim.AdamW on exactly the batches an
fsdpgen run reads from that file, and writes each step's loss and gradient
norm (before clipping) to expected.json; save_pretrained also writes them
into hf/. Its pad_token_id is None, as in tools/gemma_reference.py. Its
learning rate is 3e-3: transformers' own fp32 run stays within 5.6e-7 of
its fp64 run over the 6 steps (at 1e-2, 5.2e-6 by step 5).

The model and run must match tests/e2e/gemma2_reference/gemma2.fsdp. Regenerate with
  python3 -m venv /tmp/hf && /tmp/hf/bin/pip install torch transformers safetensors
  /tmp/hf/bin/python tools/gemma2_reference.py tests/e2e/gemma2_reference
(checked in; the test suite itself needs neither torch nor transformers).
"""
import sys

import torch
import transformers

import reference_run  # beside this script

VOCAB, CONTEXT, WIDTH, HEADS, KV_HEADS, HEAD_DIM, FFN, LAYERS = 64, 16, 32, 4, 2, 16, 88, 4
ROPE_THETA, NORM_EPS, MAX_POSITIONS = 10000.0, 1e-6, 256
WINDOW, GLOBAL_EVERY, QUERY_SCALAR, ATTN_CAP, FINAL_CAP, INIT_STD = 6, 2, 24, 2.0, 1.5, 0.2
# Every RMSNorm's weight: N(0, NORM_STD^2), so that (1 + weight) is near 1.
NORM_STD = 0.2
GLOBAL_BATCH, STEPS, TOKENS = 4, 6, 4000
LR, BETAS, EPS, WEIGHT_DECAY, CLIP = 3e-3, (0.9, 0.95), 1e-8, 0.1, 1.0


def build_model():
    """The reference Gemma2ForCausalLM, freshly initialized (torch's seed as
    set), its RMSNorm weights drawn from N(0, NORM_STD^2)."""
    config = transformers.Gemma2Config(
        vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POSITIONS, rms_norm_eps=NORM_EPS, tie_word_embeddings=True,
        attention_bias=False, hidden_activation="gelu_pytorch_tanh",
        query_pre_attn_scalar=QUERY_SCALAR, sliding_window=WINDOW,
        layer_types=reference_run.layer_types(LAYERS, GLOBAL_EVERY),
        rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA},
        attn_logit_softcapping=ATTN_CAP, final_logit_softcapping=FINAL_CAP,
        initializer_range=INIT_STD, pad_token_id=None, torch_dtype=torch.float32)
    config._attn_implementation = "eager"
    model = transformers.Gemma2ForCausalLM(config).float()
    return reference_run.draw_norms(model, NORM_STD)


def main(out_dir):
    torch.manual_seed(0)
    reference_run.write_tied_fp64_fixture(out_dir, build_model(), VOCAB, TOKENS, CONTEXT,
                                          GLOBAL_BATCH, STEPS, LR, BETAS, EPS, WEIGHT_DECAY, CLIP)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
