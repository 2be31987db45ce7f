#!/usr/bin/env python3
"""gpt2_reference: the independent reference that tests/e2e/Gpt2ReferenceTest.cpp
compares fsdpgen's gpt2 against. It builds a small GPT2LMHeadModel with Hugging
Face transformers (fp32, eager attention, lm_head tied to wte, no dropout), saves
its initial weights as model.safetensors and a token file in llm.c's format,
trains it a few steps with torch.optim.AdamW under fsdpgen's warm-up and cosine
learning-rate schedule on exactly the batches an fsdpgen run reads from that
file, and writes each step's loss, learning rate and gradient norm (before
clipping) to expected.json.

The model and run must match tests/e2e/gpt2_reference/gpt2.fsdp. Regenerate with
  python3 -m venv /tmp/hf && /tmp/hf/bin/pip install torch transformers safetensors
  /tmp/hf/bin/python tools/gpt2_reference.py tests/e2e/gpt2_reference
(checked in; the test suite itself needs neither torch nor transformers).
"""
import math
import os
import sys

import torch
import transformers
from safetensors.torch import save_file

import reference_run  # beside this script

VOCAB, CONTEXT, WIDTH, HEADS, LAYERS = 64, 16, 32, 4, 2
FFN = 4 * WIDTH
NORM_EPS = 1e-5  # fsdpgen's gpt2 LayerNorm (runtime/cpu/kernels.h kLayerNormEps)
# Weights drawn 2.5 times as wide as GPT-2's 0.02, so that the MLP's inputs
# reach where GELU's tanh form (gelu_new, fsdpgen's) and its erf form part:
# 4e-5 apart in step 2's loss here, 2e-7 at 0.02.
INIT_STD = 0.05
GLOBAL_BATCH, STEPS, TOKENS, ALPHABET = 4, 6, 1000, 16
LR, MIN_LR, WARMUP = 1e-2, 1e-3, 2
BETAS, EPS, WEIGHT_DECAY, CLIP = (0.9, 0.95), 1e-8, 0.1, 1.0


def lr_at(step):
    """fsdpgen's cosine(warmup, min) at 0-based step (runtime/optimizer.cpp
    optimizer_lr): linear warm-up to LR over WARMUP steps, then a half cosine
    from LR at step WARMUP down to MIN_LR at the run's last step."""
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    ratio = (step - WARMUP) / (STEPS - 1 - WARMUP)
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


def build_model():
    """The reference GPT2LMHeadModel, freshly initialized (torch's seed as set)."""
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=CONTEXT, n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS,
        n_inner=FFN, activation_function="gelu_new", layer_norm_epsilon=NORM_EPS,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True,
        initializer_range=INIT_STD, bos_token_id=None, eos_token_id=None,
        torch_dtype=torch.float32)
    config._attn_implementation = "eager"
    model = transformers.GPT2LMHeadModel(config).float()
    assert model.lm_head.weight is model.transformer.wte.weight
    return model


def main(out_dir):
    torch.manual_seed(0)
    model = build_model()
    # GPT-2's initialization leaves every bias 0 and every LayerNorm weight 1;
    # moved off those, each tensor enters the first step's loss, so a tensor
    # loaded into the wrong place (or a Conv1D weight transposed) shows at once.
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.05 * torch.randn(p.shape, generator=g))
    # lm_head.weight is transformer.wte.weight: written once, under the
    # embedding's name, as save_pretrained does.
    save_file({k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"},
              os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})

    # A learnable stream over the first ALPHABET ids, so the loss falls within
    # a few steps: each token is (previous + 2 * the one before + 1) mod
    # ALPHABET, one in five drawn at random instead.
    g = torch.Generator().manual_seed(1)
    noise = torch.randint(0, ALPHABET, (TOKENS,), generator=g).tolist()
    keep = (torch.rand(TOKENS, generator=g) < 0.8).tolist()
    tokens = noise[:2]
    for i in range(2, TOKENS):
        tokens.append((tokens[-1] + 2 * tokens[-2] + 1) % ALPHABET if keep[i] else noise[i])
    reference_run.write_tokens(os.path.join(out_dir, "tokens.bin"), tokens)
    # fsdpgen decays the normal-initialized weights (runtime/init.cpp): wte
    # (and so the tied head), wpe and the four Conv1D weights, the 2-D ones.
    losses, lrs, norms = reference_run.train(model, tokens, CONTEXT, VOCAB, GLOBAL_BATCH, STEPS,
                                             LR, BETAS, EPS, WEIGHT_DECAY, CLIP, lr_at)
    reference_run.write_expected(os.path.join(out_dir, "expected.json"),
                                 {"losses": losses, "lrs": lrs, "grad_norms": norms})


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
