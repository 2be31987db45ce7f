#!/usr/bin/env python3
"""muon_train_reference: the independent reference that tests/e2e/MuonReferenceTest.cpp
compares fsdpgen's optimizer = muon(...) against. It loads the GPT-2 and llama
reference fixtures (tests/e2e/gpt2_reference and llama_reference: the initial
weights in model.safetensors, tokens.bin; written by tools/gpt2_reference.py and
tools/llama_reference.py), trains each model a few steps with torch.optim.Muon on
the blocks' 2-D hidden matrices and torch.optim.AdamW on the rest, on exactly the
batches an fsdpgen run reads, and writes each step's loss, learning rate and
gradient norm (before clipping) to muon_expected.json (Newton-Schulz in float64:
torch's _zeropower_via_newtonschulz replaced by the same iteration in float64) and
muon_bf16_expected.json (torch.optim.Muon as shipped: Newton-Schulz in bfloat16).

A matrix is oriented as nn.Linear stores it, (out_features, in_features), as
fsdpgen reads it; GPT-2's Conv1D weights are stored (in, out), so their group's
learning rate (and weight decay, inversely) is scaled so that torch's
adjust_lr_fn, which reads the stored shape, gives the nn.Linear orientation's.

The runs must match MuonReferenceTest's specs (kMuonGpt2, kMuonLlama). Regenerate with
  python3 -m venv /tmp/hf && /tmp/hf/bin/pip install torch transformers safetensors
  /tmp/hf/bin/python tools/muon_train_reference.py tests/e2e
(checked in; the test suite itself needs neither torch nor transformers).
"""
import math
import os
import sys

import torch
import torch.optim._muon as muon_module
from safetensors.torch import load_file

import gpt2_reference  # beside this script
import llama_reference
import muon_reference
import reference_run

SHIPPED_NS = muon_module._zeropower_via_newtonschulz

# Each model's run: Muon's settings, the nested AdamW's, the schedule.
RUNS = {
    "gpt2": {"module": gpt2_reference, "fixture": "gpt2_reference", "lr": 0.02,
             "momentum": 0.95, "nesterov": True, "weight_decay": 0.01,
             "adjust_lr_fn": "original", "adamw_lr": 1e-2, "warmup": 2, "min_lr": 1e-3},
    "llama": {"module": llama_reference, "fixture": "llama_reference", "lr": 0.01,
              "momentum": 0.9, "nesterov": False, "weight_decay": 0.0,
              "adjust_lr_fn": "match_rms_adamw", "adamw_lr": 1e-2, "warmup": 0,
              "min_lr": None},
}
NS_STEPS = 5


def adjusted(rule, out_features, in_features):
    """torch.optim.Muon's _adjust_lr factor for a weight of shape (A, B) = (out, in)."""
    if rule == "original":
        return math.sqrt(max(1.0, out_features / in_features))
    return 0.2 * math.sqrt(max(out_features, in_features))


def muon_matrices(model, family):
    """(parameter, is_conv1d) of every block's linear weight: what fsdpgen
    gives Muon (codegen/planner/Muon.h muon_matrices)."""
    out = []
    for name, p in model.named_parameters():
        if ".h." in name or ".layers." in name:
            if p.dim() == 2 and name.endswith("weight"):
                out.append((name, p, family == "gpt2"))
    return out


def lr_at(run, step, steps):
    """fsdpgen's schedule at 0-based step (runtime/optimizer.cpp optimizer_lr)."""
    lr, warmup = run["lr"], run["warmup"]
    if step < warmup:
        return lr * (step + 1) / warmup
    if run["min_lr"] is None:
        return lr
    ratio = (step - warmup) / (steps - 1 - warmup)
    return run["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - run["min_lr"])


def train(family, fixture_dir, ns):
    run = RUNS[family]
    mod = run["module"]
    model = mod.build_model()
    state = load_file(os.path.join(fixture_dir, "model.safetensors"))
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    tokens = reference_run.read_tokens(os.path.join(fixture_dir, "tokens.bin"))
    matrices = muon_matrices(model, family)
    matrix_ids = {id(p) for _, p, _ in matrices}
    rest = [p for p in model.parameters() if id(p) not in matrix_ids]
    # One group per matrix: its lr factor turns torch's orientation (the stored
    # shape) into nn.Linear's, which fsdpgen's rule reads.
    groups, factors = [], []
    for name, p, conv1d in matrices:
        rows, cols = p.shape
        out_f, in_f = (cols, rows) if conv1d else (rows, cols)
        f = adjusted(run["adjust_lr_fn"], out_f, in_f) / adjusted(run["adjust_lr_fn"], rows, cols)
        groups.append({"params": [p], "weight_decay": run["weight_decay"] / f})
        factors.append(f)
    muon = torch.optim.Muon(groups, lr=run["lr"], weight_decay=run["weight_decay"],
                            momentum=run["momentum"], nesterov=run["nesterov"],
                            ns_steps=NS_STEPS, adjust_lr_fn=run["adjust_lr_fn"])
    decay = [p for p in rest if p.dim() >= 2]
    no_decay = [p for p in rest if p.dim() < 2]
    adamw = torch.optim.AdamW([{"params": decay, "weight_decay": mod.WEIGHT_DECAY},
                               {"params": no_decay, "weight_decay": 0.0}],
                              lr=run["adamw_lr"], betas=mod.BETAS, eps=mod.EPS)
    muon_module._zeropower_via_newtonschulz = (
        muon_reference.zeropower_fp64 if ns == "fp64" else SHIPPED_NS)
    stream = torch.tensor(tokens, dtype=torch.long)
    context, vocab, batch_size = mod.CONTEXT, mod.VOCAB, mod.GLOBAL_BATCH
    windows = (len(tokens) - 1) // context
    losses, lrs, norms = [], [], []
    for step in range(mod.STEPS):
        rows = [stream[(j % windows) * context:(j % windows) * context + context + 1]
                for j in range(step * batch_size, (step + 1) * batch_size)]
        batch = torch.stack(rows)
        logits = model(input_ids=batch[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab),
                                                 batch[:, 1:].reshape(-1))
        muon.zero_grad()
        adamw.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), mod.CLIP)
        step_lr = lr_at(run, step, mod.STEPS)
        for group, f in zip(muon.param_groups, factors):
            group["lr"] = step_lr * f
        for group in adamw.param_groups:
            group["lr"] = step_lr * run["adamw_lr"] / run["lr"]
        muon.step()
        adamw.step()
        losses.append(loss.item())
        lrs.append(step_lr)
        norms.append(norm.item())
    muon_module._zeropower_via_newtonschulz = SHIPPED_NS
    return {"losses": losses, "lrs": lrs, "grad_norms": norms}


def main(tests_e2e):
    torch.manual_seed(0)
    for family, run in RUNS.items():
        fixture_dir = os.path.join(tests_e2e, run["fixture"])
        for ns, name in (("fp64", "muon_expected.json"), ("bf16", "muon_bf16_expected.json")):
            reference_run.write_expected(os.path.join(fixture_dir, name),
                                         train(family, fixture_dir, ns))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/e2e")
