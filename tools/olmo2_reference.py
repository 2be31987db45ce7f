#!/usr/bin/env python3
"""olmo2_reference: the independent reference that tests/e2e/Olmo2ReferenceTest.cpp
compares fsdpgen's llama with block_norms = post and qk_norm = across_heads
against. It builds a small Olmo2ForCausalLM with Hugging Face transformers
(eager attention, untied embeddings as OLMo 2's, no biases; its norms follow
attention and the MLP, and q_norm and k_norm each span all heads), gives its
four norms' weights random values near 1 (transformers initializes them to
ones, which would leave the norms' weights untested at the first step), saves
those initial weights in fp32 as model.safetensors and a token file in llm.c's
format, then trains the model in fp64 a few steps with torch.optim.AdamW on
exactly the batches an fsdpgen run reads from that file, and writes each
step's loss and gradient norm (before clipping) to expected.json. The initial
weights are also saved by save_pretrained into hf/ (config.json and sharded
safetensors with their index), as a model directory on the Hub looks.

The model and run must match tests/e2e/olmo2_reference/olmo2.fsdp. Regenerate with
  python3 -m venv /tmp/hf && /tmp/hf/bin/pip install torch transformers safetensors
  /tmp/hf/bin/python tools/olmo2_reference.py tests/e2e/olmo2_reference
(checked in; the test suite itself needs neither torch nor transformers).
"""
import os
import sys

import torch
import transformers
from safetensors.torch import save_file

import reference_run  # beside this script

VOCAB, CONTEXT, WIDTH, HEADS, KV_HEADS, FFN, LAYERS = 64, 16, 32, 4, 2, 88, 2
ROPE_THETA, NORM_EPS, MAX_POSITIONS = 500000.0, 1e-6, 256
# The norms' weights: 1 + N(0, NORM_STD^2).
NORM_STD = 0.2
GLOBAL_BATCH, STEPS, TOKENS = 4, 8, 4000
# Weights drawn with std 0.1, not transformers' 0.02: behind post norms the
# 0.02 model's loss falls 1% in 8 steps, this one's 13%.
INIT_STD = 0.1
LR, BETAS, EPS, WEIGHT_DECAY, CLIP = 1e-2, (0.9, 0.95), 1e-8, 0.1, 1.0


def build_model():
    """The reference Olmo2ForCausalLM, freshly initialized (torch's seed as
    set), its q_norm, k_norm, post_attention_layernorm and
    post_feedforward_layernorm weights drawn from N(1, NORM_STD^2)."""
    config = transformers.Olmo2Config(
        vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
        max_position_embeddings=MAX_POSITIONS, rms_norm_eps=NORM_EPS, tie_word_embeddings=False,
        attention_bias=False, rope_theta=ROPE_THETA, initializer_range=INIT_STD, pad_token_id=None, eos_token_id=None,
        torch_dtype=torch.float32)
    config._attn_implementation = "eager"
    model = transformers.Olmo2ForCausalLM(config).float()
    with torch.no_grad():
        for layer in model.model.layers:
            for norm in (layer.self_attn.q_norm, layer.self_attn.k_norm,
                         layer.post_attention_layernorm, layer.post_feedforward_layernorm):
                norm.weight.normal_(1.0, NORM_STD)
    return model


def main(out_dir):
    torch.manual_seed(0)
    model = build_model()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    model.save_pretrained(os.path.join(out_dir, "hf"), max_shard_size="40kB")
    stream = reference_run.learnable_stream(VOCAB, TOKENS)
    reference_run.write_tokens(os.path.join(out_dir, "tokens.bin"), stream)
    losses, _, norms = reference_run.train(model.double(), stream, CONTEXT, VOCAB, GLOBAL_BATCH,
                                           STEPS, LR, BETAS, EPS, WEIGHT_DECAY, CLIP)
    reference_run.write_expected(os.path.join(out_dir, "expected.json"),
                                 {"dtype": "float64", "losses": losses, "grad_norms": norms})


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
