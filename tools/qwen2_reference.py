#!/usr/bin/env python3
"""qwen2_reference: the independent reference that tests/e2e/Qwen2ReferenceTest.cpp
compares fsdpgen's llama with qkv_bias against. It builds a small
Qwen2ForCausalLM with Hugging Face transformers (eager attention, tied
embeddings), gives its q, k and v biases random values (transformers
initializes them to zero, which would leave the forward's bias untested at the
first step), saves those initial weights in fp32 as model.safetensors and a
token file in llm.c's format, then trains the model in fp64 a few steps with
torch.optim.AdamW on exactly the batches an fsdpgen run reads from that file,
and writes each step's loss and gradient norm (before clipping) to
expected.json. The initial weights are also saved by save_pretrained into hf/
(config.json and sharded safetensors with their index), as a model directory
on the Hub looks.

The model and run must match tests/e2e/qwen2_reference/qwen2.fsdp. Regenerate with
  python3 -m venv /tmp/hf && /tmp/hf/bin/pip install torch transformers safetensors
  /tmp/hf/bin/python tools/qwen2_reference.py tests/e2e/qwen2_reference
(checked in; the test suite itself needs neither torch nor transformers).
"""
import sys

import torch
import transformers

import reference_run  # beside this script

VOCAB, CONTEXT, WIDTH, HEADS, KV_HEADS, FFN, LAYERS = 64, 16, 32, 4, 2, 88, 2
ROPE_THETA, NORM_EPS, MAX_POSITIONS = 100000.0, 1e-6, 256
# Half the scale of q, k and v at the start (0.02 * sqrt(32) = 0.11): far
# from negligible, small enough that the loss falls 12% over the 6 steps.
BIAS_STD = 0.05
GLOBAL_BATCH, STEPS, TOKENS = 4, 6, 4000
LR, BETAS, EPS, WEIGHT_DECAY, CLIP = 1e-2, (0.9, 0.95), 1e-8, 0.1, 1.0


def build_model():
    """The reference Qwen2ForCausalLM, freshly initialized (torch's seed as
    set), its q, k and v biases drawn from N(0, BIAS_STD^2)."""
    config = transformers.Qwen2Config(
        vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
        max_position_embeddings=MAX_POSITIONS, rms_norm_eps=NORM_EPS, tie_word_embeddings=True,
        use_sliding_window=False, rope_theta=ROPE_THETA, torch_dtype=torch.float32)
    config._attn_implementation = "eager"
    model = transformers.Qwen2ForCausalLM(config).float()
    with torch.no_grad():
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0.0, BIAS_STD)
    return model


def main(out_dir):
    torch.manual_seed(0)
    reference_run.write_tied_fp64_fixture(out_dir, build_model(), VOCAB, TOKENS, CONTEXT,
                                          GLOBAL_BATCH, STEPS, LR, BETAS, EPS, WEIGHT_DECAY, CLIP)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
