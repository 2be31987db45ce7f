#!/usr/bin/env python3
"""eval_reference: the independent reference that tests/e2e/EvalReferenceTest.cpp
compares fsdpgen's multiple-choice evaluation against. It writes a small
hand-made evaluation file in llm.c's format (tools/prepare_eval.py's writer)
and scores it with Hugging Face transformers' GPT2LMHeadModel on the weights of
tests/e2e/gpt2_reference/model.safetensors, as llm.c's dev/data/hellaswag.py
scores HellaSwag: each candidate is the context followed by one ending, its
loss the cross-entropy summed over the ending's tokens; acc takes the lowest
sum, acc_norm the lowest mean per ending token. expected.json holds every
candidate's loss sum and both scores.

Regenerate with
  /tmp/hf/bin/python tools/eval_reference.py tests/e2e/eval_reference
(checked in; the test suite itself needs neither torch nor transformers).
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file
from torch.nn import functional as F

import gpt2_reference  # beside this script: the same model
import prepare_eval  # beside this script: the file's writer

HERE = os.path.dirname(os.path.abspath(__file__))
WEIGHTS = os.path.join(HERE, "..", "tests", "e2e", "gpt2_reference", "model.safetensors")

# (label, context, endings) over the model's 64 ids, chosen by hand to cover:
# four endings of different lengths (so acc and acc_norm can differ), two and
# five endings, a one-token context and one-token endings, and a candidate of
# exactly the model's 16 tokens.
EXAMPLES = [
    (0, [1, 2, 3, 4, 5], [[6, 7], [8], [9, 10, 11], [12, 13, 14, 15]]),
    (3, [20, 21, 22], [[23, 24, 25], [26], [27, 28], [29, 30, 31, 32, 33]]),
    (1, [7], [[3], [5], [9], [11]]),
    (2, [40, 41, 42, 43, 44, 45, 46, 47, 48, 49], [[50, 51], [52, 53, 54, 55, 56, 57], [58]]),
    (1, [2, 4, 6, 8], [[10, 12], [14, 16, 18]]),
    (4, [60, 61, 62, 63], [[0, 1], [2, 3, 4], [5], [6, 7, 8, 9], [10, 11, 12]]),
    (0, [33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44], [[45, 46, 47, 48], [49], [50, 51],
                                                          [52, 53, 54]]),
    (2, [5, 15, 25, 35, 45, 55], [[1, 1, 1], [2, 3], [4, 9, 16, 25], [36]]),
]
# Candidates whose loss sums (or means) lie closer than this would make the
# argmin depend on rounding: the examples are chosen so that none do.
MIN_GAP = 1e-3


def model_with_weights():
    model = gpt2_reference.build_model()
    state = load_file(WEIGHTS)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and missing == ["lm_head.weight"], (missing, unexpected)
    model.tie_weights()
    return model.eval()


@torch.no_grad()
def candidate_losses(model, context, ending):
    """The ending's per-token losses after the context (llm.c's shifted mask)."""
    tokens = torch.tensor([context + ending])
    logits = model(tokens).logits[0, :-1]
    losses = F.cross_entropy(logits, tokens[0, 1:], reduction="none")
    return losses[len(context) - 1:].tolist()


def main(out_dir):
    assert all(len(c) + len(e) <= gpt2_reference.CONTEXT for _, c, ends in EXAMPLES for e in ends)
    assert any(len(c) + len(e) == gpt2_reference.CONTEXT for _, c, ends in EXAMPLES for e in ends)
    prepare_eval.write_eval_file(os.path.join(out_dir, "hellaswag_tiny.bin"), EXAMPLES, 1)
    model = model_with_weights()
    sums, correct, correct_norm = [], 0, 0
    for label, context, endings in EXAMPLES:
        s = [sum(candidate_losses(model, context, e)) for e in endings]
        means = [x / len(e) for x, e in zip(s, endings)]
        for values in (s, means):
            ordered = sorted(values)
            assert ordered[1] - ordered[0] > MIN_GAP, (label, context, values)
        correct += min(range(len(s)), key=s.__getitem__) == label
        correct_norm += min(range(len(s)), key=means.__getitem__) == label
        sums.append(s)
    n = len(EXAMPLES)
    expected = {"loss_sums": sums, "acc": correct / n, "acc_norm": correct_norm / n,
                "examples": n, "torch": torch.__version__}
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")
    print(f"{n} examples: acc {correct / n:.4f} acc_norm {correct_norm / n:.4f}")


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
