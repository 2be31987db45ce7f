"""The PyTorch baseline of tests/bench/cuda/run.sh: HF GPT-2's model trained
with FSDP2 (fully_shard per block and at the root, world 1, bf16 params, fp32
reduce), fused AdamW and clipping on random tokens; prints one JSON line."""
import argparse
import json
import math
import os
import socket
import sys
import time

import torch
import torch._dynamo
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

try:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
except ImportError:  # torch 2.4 and 2.5 keep FSDP2 under _composable
    from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard

EXIT_OOM = 3  # run.sh reports "OOM" for this status instead of failing


class Block(nn.Module):
    """Pre-norm block: causal self-attention and a 4x GELU(tanh) MLP, with biases."""

    def __init__(self, width, heads, eps):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(width, eps=eps)
        self.c_attn = nn.Linear(width, 3 * width)  # (3C, C)
        self.attn_proj = nn.Linear(width, width)  # (C, C)
        self.ln_2 = nn.LayerNorm(width, eps=eps)
        self.c_fc = nn.Linear(width, 4 * width)  # (4C, C)
        self.mlp_proj = nn.Linear(4 * width, width)  # (C, 4C)

    def forward(self, x):  # x: (B, T, C)
        B, T, C = x.shape
        q, k, v = [t.view(B, T, self.heads, C // self.heads).transpose(1, 2)  # (B, H, T, C/H)
                   for t in self.c_attn(self.ln_1(x)).split(C, dim=2)]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, C/H)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    """Token and learned position embeddings, blocks, final LayerNorm, tied head."""

    def __init__(self, a):
        super().__init__()
        self.wte = nn.Embedding(a.vocab, a.width)  # (V, C), also the head
        self.wpe = nn.Embedding(a.context, a.width)  # (T, C)
        self.blocks = nn.ModuleList(Block(a.width, a.heads, a.norm_eps) for _ in range(a.layers))
        self.ln_f = nn.LayerNorm(a.width, eps=a.norm_eps)
        for name, p in self.named_parameters():  # GPT-2 init
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 1:  # LayerNorm gains
                nn.init.ones_(p)
            else:
                std = 0.02 / math.sqrt(2 * a.layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, idx):  # idx: (B, T) -> logits (B, T, V)
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def loss_fn(logits, targets):  # fp32 cross-entropy over the bf16 logits, as torchtitan does
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1))


def init_world_of_one():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="localhost", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1",
                      LOCAL_RANK="0")
    torch.cuda.set_device(0)
    dist.init_process_group(backend="nccl", rank=0, world_size=1)


def build(a):
    """The model sharded like torchtitan: compile each block (then the loss), then
    fully_shard each block and the root."""
    with torch.device("cuda"):
        model = GPT2(a)
    if a.compile:  # blocks share one graph; older torch recompiles per instance up to a limit
        cfg = torch._dynamo.config
        limit = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
        setattr(cfg, limit, max(getattr(cfg, limit), a.layers + 8))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for i, block in enumerate(model.blocks):
        if a.compile:
            block = torch.compile(block, fullgraph=True)
            model.blocks[i] = block
        fully_shard(block, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    decay = [p for p in model.parameters() if p.dim() >= 2]  # matrices and embeddings
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0}],
        lr=a.lr, betas=tuple(a.betas), eps=a.eps, fused=True)
    return model, opt


def train(a):
    model, opt = build(a)
    loss_of = torch.compile(loss_fn) if a.compile else loss_fn
    gen = torch.Generator(device="cuda").manual_seed(7)
    batches = [torch.randint(0, a.vocab, (a.micro_batch, a.context + 1), device="cuda",
                             generator=gen) for _ in range(4)]

    def step(i):
        tokens = batches[i % len(batches)]
        loss = loss_of(model(tokens[:, :-1]), tokens[:, 1:])
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for i in range(a.warmup):  # the first steps compile and create the optimizer state
        step(i)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for i in range(a.steps):
        loss = step(i)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    return {
        "tokens_per_s": a.steps * a.micro_batch * a.context / seconds,
        "peak_mem_bytes": torch.cuda.max_memory_allocated(),
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
        "ms_per_step": 1e3 * seconds / a.steps,
        "params": sum(p.numel() for p in model.parameters()),
        "loss": loss.item(),
        "compile": a.compile,
        "torch": torch.__version__,
    }


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    for name, default in [("layers", 12), ("width", 768), ("heads", 12), ("vocab", 50257),
                          ("context", 1024), ("micro-batch", 8), ("steps", 20), ("warmup", 5)]:
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--norm-eps", type=float, default=1e-5)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--betas", type=float, nargs=2, default=[0.9, 0.95])
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0, help="global gradient norm; 0 for none")
    p.add_argument("--compile", action="store_true", help="torch.compile each block and the loss")
    return p.parse_args()


def main():
    a = parse_args()
    if a.steps < 1:
        sys.exit("torch_gpt2.py: error: --steps must be at least 1")
    if not torch.cuda.is_available():
        sys.exit("torch_gpt2.py: error: torch sees no CUDA device")
    init_world_of_one()
    try:
        result = train(a)
    except torch.cuda.OutOfMemoryError as e:
        print(json.dumps({"error": "out of memory", "detail": str(e).splitlines()[0]}), flush=True)
        dist.destroy_process_group()
        sys.exit(EXIT_OOM)
    print(json.dumps(result), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
