#!/usr/bin/env python3
"""muon_reference: the independent reference that tests/runtime/MuonTest.cpp
compares fsdpgen's Muon (runtime/cpu/muon.h) against. With fixed seeds it builds a
few weight matrices of different shapes (square, tall: rows > cols, wide, and
small odd ones), oriented as torch's nn.Linear weight (out_features,
in_features), and a sequence of gradients for each, then steps
torch.optim.Muon on them in three configurations:

  nesterov_original       nesterov, adjust_lr_fn "original", Newton-Schulz in fp64
  plain_match_rms         no nesterov, "match_rms_adamw", Newton-Schulz in fp64
  nesterov_original_bf16  as the first, Newton-Schulz as torch ships it (bf16)

"In fp64" means torch.optim._muon._zeropower_via_newtonschulz replaced by the
same iteration (coefficients, eps, normalisation, transpose of tall matrices)
computed in float64 and returned in the parameter's dtype, so the reference
has no rounding error of its own worth speaking of at fp32.

It writes one safetensors file (F32): per matrix M the initial weights M.w0,
the gradient of step t M.grad.t (t = 1..STEPS), the momentum buffer after step
t M.momentum.t (the same in every configuration: it depends only on the
gradients), and per configuration C the weights after step t C.M.w.t. The
hyperparameters and the list of matrices and configurations are in the
header's __metadata__ (strings, JSON where structured).

Regenerate with (PyTorch 2.9 or later; CPU is enough):
  python3 -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch numpy
  /tmp/torchenv/bin/python tools/muon_reference.py tests/data/muon_reference.safetensors
(checked in; the test suite itself needs no torch).
"""
import json
import struct
import sys

import numpy as np
import torch
import torch.optim._muon as muon_module

# (name, rows, cols) as nn.Linear stores them: (out_features, in_features).
MATRICES = [("square", 16, 16), ("tall", 24, 8), ("wide", 8, 24), ("odd_wide", 3, 7),
            ("odd_tall", 7, 3)]
STEPS = 4
LR, MOMENTUM, WEIGHT_DECAY, NS_STEPS = 0.02, 0.95, 0.1, 5
CONFIGS = [
    {"name": "nesterov_original", "nesterov": True, "adjust_lr_fn": "original", "ns": "fp64"},
    {"name": "plain_match_rms", "nesterov": False, "adjust_lr_fn": "match_rms_adamw", "ns": "fp64"},
    {"name": "nesterov_original_bf16", "nesterov": True, "adjust_lr_fn": "original", "ns": "bf16"},
]

SHIPPED_NS = muon_module._zeropower_via_newtonschulz


def zeropower_fp64(grad, ns_coefficients, ns_steps, eps):
    """torch's _zeropower_via_newtonschulz, line for line, in float64."""
    a, b, c = ns_coefficients
    x = grad.to(dtype=torch.float64, copy=True)
    if grad.size(0) > grad.size(1):
        x = x.T
    x.div_(x.norm().clamp(min=eps))
    for _ in range(ns_steps):
        gram = x @ x.T
        gram_update = torch.addmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.addmm(x, gram_update, x, beta=a)
    if grad.size(0) > grad.size(1):
        x = x.T
    return x.to(grad.dtype)


def inputs():
    """Initial weights and STEPS gradients per matrix, fp32, from fixed seeds.
    Gradient scales vary by step so that the momentum's history matters."""
    g = torch.Generator().manual_seed(36)
    out = {}
    for name, rows, cols in MATRICES:
        w0 = 0.05 * torch.randn(rows, cols, generator=g)
        grads = [(0.5 + t) * 1e-2 * torch.randn(rows, cols, generator=g) for t in range(STEPS)]
        out[name] = (w0, grads)
    return out


def run(config, data):
    """STEPS steps of torch.optim.Muon; each step's weights and momentum per matrix."""
    muon_module._zeropower_via_newtonschulz = (
        zeropower_fp64 if config["ns"] == "fp64" else SHIPPED_NS)
    params = {name: torch.nn.Parameter(data[name][0].clone()) for name, _, _ in MATRICES}
    opt = torch.optim.Muon(list(params.values()), lr=LR, weight_decay=WEIGHT_DECAY,
                           momentum=MOMENTUM, nesterov=config["nesterov"], ns_steps=NS_STEPS,
                           adjust_lr_fn=config["adjust_lr_fn"])
    weights, momenta = [], []
    for t in range(STEPS):
        for name, p in params.items():
            p.grad = data[name][1][t].clone()
        opt.step()
        weights.append({n: p.detach().clone() for n, p in params.items()})
        momenta.append({n: opt.state[p]["momentum_buffer"].clone() for n, p in params.items()})
    muon_module._zeropower_via_newtonschulz = SHIPPED_NS
    return weights, momenta


def write_safetensors(path, tensors, metadata):
    """tensors: ordered (name, fp32 array); the format's header, data packed in order."""
    header, offset = {"__metadata__": metadata}, 0
    for name, a in tensors:
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, a in tensors:
            f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())


def main(path):
    data = inputs()
    tensors = []
    for name, _, _ in MATRICES:
        tensors.append((f"{name}.w0", data[name][0].numpy()))
        for t in range(STEPS):
            tensors.append((f"{name}.grad.{t + 1}", data[name][1][t].numpy()))
    results = {c["name"]: run(c, data) for c in CONFIGS}
    momenta = results[CONFIGS[0]["name"]][1]
    for c in CONFIGS:  # the buffer depends only on the gradients
        for t in range(STEPS):
            for name, _, _ in MATRICES:
                assert torch.equal(results[c["name"]][1][t][name], momenta[t][name])
    for name, _, _ in MATRICES:
        for t in range(STEPS):
            tensors.append((f"{name}.momentum.{t + 1}", momenta[t][name].numpy()))
    for c in CONFIGS:
        for name, _, _ in MATRICES:
            for t in range(STEPS):
                tensors.append((f"{c['name']}.{name}.w.{t + 1}",
                                results[c["name"]][0][t][name].numpy()))
    # How far torch's shipped bf16 iteration lands from fp64 (for the record).
    ref, bf = results["nesterov_original"][0], results["nesterov_original_bf16"][0]
    for name, _, _ in MATRICES:
        moved = (ref[-1][name] - data[name][0]).abs().max().item()
        diff = (ref[-1][name] - bf[-1][name]).abs().max().item()
        print(f"{name}: bf16 vs fp64 after {STEPS} steps: max |diff| {diff:.3g}, "
              f"{diff / moved:.3g} of the largest move")
    metadata = {
        "torch": torch.__version__,
        "matrices": json.dumps([[n, r, c] for n, r, c in MATRICES]),
        "configs": json.dumps(CONFIGS),
        "steps": str(STEPS), "lr": repr(LR), "momentum": repr(MOMENTUM),
        "weight_decay": repr(WEIGHT_DECAY), "ns_steps": str(NS_STEPS),
        "ns_coefficients": json.dumps([muon_module.DEFAULT_A, muon_module.DEFAULT_B,
                                       muon_module.DEFAULT_C]),
        "eps": repr(muon_module.EPS),
    }
    write_safetensors(path, tensors, metadata)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "muon_reference.safetensors")
