#!/usr/bin/env python3
"""generate_reference: the independent reference that tests/runtime/GenerateTest.cpp
compares fsdpgen's generator (runtime/generate/) against. For each family it builds
a small random model with Hugging Face transformers (fp32, eager attention): a GPT-2
with tied embeddings, a Llama with grouped-query attention (4 heads, 2 for k and
v), llama3 rope scaling and an untied head, a Qwen2 (Llama's block with q, k
and v biases, tied), a Qwen3 (an RMSNorm on each head's q and k, heads of
16 where width / heads is 8, tied), a Mistral (each query attending its
last 5 positions, so the 6-token prompt already slides), an OLMo 2 (norms
after attention and the MLP, one RMSNorm across all of q's heads and one
across k's, untied), a Gemma (the embedding scaled by sqrt(width), (1 +
weight) RMSNorms, GeGLU, one kv head, heads of 16, tied) and a Gemma 3
(Gemma's, with norms before and after attention and the MLP, each head's q
and k normed, and layers alternating: 0 and 2 attend their last 5
positions with rotary base 10000, 1 and 3 all with base 1000000 and linear
rope scaling of factor 8, as in Gemma 3 4B and larger). It saves each with
save_pretrained (config.json and model.safetensors) in OUT/gpt2, OUT/llama,
OUT/qwen2, OUT/qwen3, OUT/mistral, OUT/olmo2, OUT/gemma and OUT/gemma3, and writes
OUT/<family>/expected.json: the prompt's ids, the prefill logits of every prompt
position, the ids generate(do_sample=False) adds to the prompt, and the logits of
the whole sequence (prompt and generated ids) in one uncached forward.

Regenerate with
  /tmp/hf/bin/python tools/generate_reference.py tests/runtime/generate_reference
(checked in; the test suite itself needs neither torch nor transformers).
"""
import json
import os
import sys

import torch
import transformers

import reference_run  # beside this script

PROMPT_LEN, NEW_TOKENS = 6, 20
# Weights drawn wider than GPT-2's 0.02 so the logits spread (a greedy run of
# a near-uniform model repeats one token) and the MLPs reach GELU's and
# SiLU's curved parts.
INIT_STD = 0.3


def gpt2_model():
    config = transformers.GPT2Config(
        vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=4, n_inner=128,
        activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True, initializer_range=INIT_STD,
        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return transformers.GPT2LMHeadModel(config)


def llama_model():
    config = transformers.LlamaConfig(
        vocab_size=96, max_position_embeddings=64, hidden_size=32, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=64, num_hidden_layers=2, rms_norm_eps=1e-5,
        rope_theta=10000.0, tie_word_embeddings=False, initializer_range=INIT_STD,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return transformers.LlamaForCausalLM(config)


def qwen2_model():
    config = transformers.Qwen2Config(
        vocab_size=96, max_position_embeddings=64, hidden_size=32, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=64, num_hidden_layers=2, rms_norm_eps=1e-6,
        rope_theta=100000.0, tie_word_embeddings=True, initializer_range=INIT_STD,
        use_sliding_window=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return transformers.Qwen2ForCausalLM(config)


def qwen3_model():
    config = transformers.Qwen3Config(
        vocab_size=96, max_position_embeddings=64, hidden_size=32, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, intermediate_size=64, num_hidden_layers=2,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
        initializer_range=INIT_STD, attention_bias=False, use_sliding_window=False,
        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return transformers.Qwen3ForCausalLM(config)


def mistral_model():
    config = transformers.MistralConfig(
        vocab_size=96, max_position_embeddings=64, hidden_size=32, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=64, num_hidden_layers=2, rms_norm_eps=1e-5,
        rope_theta=10000.0, tie_word_embeddings=False, initializer_range=INIT_STD,
        sliding_window=5, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return transformers.MistralForCausalLM(config)


def olmo2_model():
    config = transformers.Olmo2Config(
        vocab_size=96, max_position_embeddings=64, hidden_size=32, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=64, num_hidden_layers=2, rms_norm_eps=1e-6,
        rope_theta=500000.0, tie_word_embeddings=False, initializer_range=INIT_STD,
        attention_bias=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return transformers.Olmo2ForCausalLM(config)


def gemma_model():
    config = transformers.GemmaConfig(
        vocab_size=96, max_position_embeddings=64, hidden_size=32, num_attention_heads=4,
        num_key_value_heads=1, head_dim=16, intermediate_size=64, num_hidden_layers=2,
        rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True,
        initializer_range=INIT_STD, hidden_act="gelu_pytorch_tanh", bos_token_id=None,
        eos_token_id=None, pad_token_id=None)
    return transformers.GemmaForCausalLM(config)


def gemma3_model():
    layers, every = 4, 2
    config = transformers.Gemma3TextConfig(
        vocab_size=96, max_position_embeddings=64, hidden_size=32, num_attention_heads=4,
        num_key_value_heads=1, head_dim=16, intermediate_size=64, num_hidden_layers=layers,
        rms_norm_eps=1e-6, tie_word_embeddings=True, initializer_range=INIT_STD,
        hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=16, sliding_window=5,
        layer_types=reference_run.layer_types(layers, every),
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0,
                                            "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        attn_logit_softcapping=None, final_logit_softcapping=None, bos_token_id=None,
        eos_token_id=None, pad_token_id=None)
    return transformers.Gemma3ForCausalLM(config)


def write(model, out_dir, seed):
    model = model.float().eval()
    model.config._attn_implementation = "eager"
    # Norm weights and biases moved off 1 and 0, so a tensor loaded into the
    # wrong place shows.
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    vocab = model.config.vocab_size
    prompt = torch.randint(0, vocab, (1, PROMPT_LEN), generator=g)
    with torch.no_grad():
        logits = model(prompt).logits[0]
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                             max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                             pad_token_id=0, eos_token_id=None)
        # The smallest gap between the largest two logits along the greedy
        # path: fp32 differences far below it cannot change a choice.
        sequence_logits = model(out).logits[0]
        top2 = torch.topk(sequence_logits[PROMPT_LEN - 1:-1], 2, dim=-1).values
        margin = float((top2[:, 0] - top2[:, 1]).min())
    new = out[0, PROMPT_LEN:].tolist()
    assert len(new) == NEW_TOKENS and margin > 1e-3, (new, margin)
    expected = {"prompt": prompt[0].tolist(), "prefill_logits": logits.tolist(), "greedy": new,
                "sequence_logits": sequence_logits.tolist(),
                "greedy_min_margin": margin, "transformers": transformers.__version__,
                "torch": torch.__version__}
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f)
        f.write("\n")
    print(f"{out_dir}: greedy {new}, smallest top-2 margin {margin:.4f}")


def main(out_dir):
    torch.manual_seed(0)
    write(gpt2_model(), os.path.join(out_dir, "gpt2"), 1)
    torch.manual_seed(1)
    write(llama_model(), os.path.join(out_dir, "llama"), 2)
    torch.manual_seed(2)
    write(qwen2_model(), os.path.join(out_dir, "qwen2"), 3)
    torch.manual_seed(3)
    write(qwen3_model(), os.path.join(out_dir, "qwen3"), 4)
    torch.manual_seed(4)
    write(mistral_model(), os.path.join(out_dir, "mistral"), 5)
    # Seeds whose greedy path keeps its top two logits 0.09 apart (5 and 6: 0.0015).
    torch.manual_seed(8)
    write(olmo2_model(), os.path.join(out_dir, "olmo2"), 9)
    torch.manual_seed(5)
    write(gemma_model(), os.path.join(out_dir, "gemma"), 6)
    torch.manual_seed(6)
    write(gemma3_model(), os.path.join(out_dir, "gemma3"), 7)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
