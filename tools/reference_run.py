"""reference_run: what the reference fixtures' scripts (tools/gpt2_reference.py,
tools/llama_reference.py, tools/qwen2_reference.py, tools/qwen3_reference.py) share: llm.c's token file,
a learnable token stream, AdamW steps over exactly the batches an fsdpgen run
reads from it, expected.json, and a tied-embedding model's whole fp64 fixture. Imported by them;
torch and transformers only where they run."""
import json
import os
import struct

import torch
import transformers
from safetensors.torch import save_file


def write_tokens(path, tokens):
    """llm.c's GPT-2 token file: 256 int32 header (magic, version, count), uint16 ids."""
    header = [20240520, 1, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))


def read_tokens(path):
    """The ids of a token file write_tokens wrote."""
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        assert header[0] == 20240520 and header[1] == 1, path
        return list(struct.unpack(f"<{header[2]}H", f.read(2 * header[2])))


def learnable_stream(vocab, n):
    """A learnable stream of n ids: each is (5 * previous + 3) mod vocab, one
    in five drawn at random instead, so the loss falls within a few steps."""
    g = torch.Generator().manual_seed(1)
    noise = torch.randint(0, vocab, (n,), generator=g).tolist()
    keep = (torch.rand(n, generator=g) < 0.8).tolist()
    tokens = [noise[0]]
    for i in range(1, n):
        tokens.append((5 * tokens[-1] + 3) % vocab if keep[i] else noise[i])
    return tokens


def train(model, tokens, context, vocab, global_batch, steps, lr, betas, eps, weight_decay,
          clip, lr_at=None):
    """torch.optim.AdamW on the model for `steps` steps of `global_batch`
    sequences of the token stream, as fsdpgen reads them; weight decay on the
    2-D tensors only (fsdpgen decays the normal-initialized weights,
    runtime/init.cpp), gradients clipped to `clip`, the learning rate lr or
    lr_at(step). Returns each step's loss, lr and gradient norm (before
    clipping)."""
    stream = torch.tensor(tokens, dtype=torch.long)
    windows = (len(tokens) - 1) // context
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=betas, eps=eps)
    losses, lrs, norms = [], [], []
    for step in range(steps):
        # fsdpgen's sequence j is tokens [w T, w T + T + 1), w = j mod windows;
        # the global batch's loss is the mean over all its tokens.
        rows = [stream[(j % windows) * context:(j % windows) * context + context + 1]
                for j in range(step * global_batch, (step + 1) * global_batch)]
        batch = torch.stack(rows)
        logits = model(input_ids=batch[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab),
                                                 batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        step_lr = lr_at(step) if lr_at else lr
        for group in opt.param_groups:
            group["lr"] = step_lr
        opt.step()
        losses.append(loss.item())
        lrs.append(step_lr)
        norms.append(norm.item())
    return losses, lrs, norms


def draw_norms(model, std):
    """Every norm weight (a parameter named *norm*) drawn from N(0, std^2), in
    named_parameters' order: Gemma's (1 + weight) norms start at zeros in
    transformers, which would leave them untested at the first step."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(0.0, std)
    return model


def layer_types(layers, global_every):
    """transformers' layer_types of alternating layers (Gemma 2's and 3's,
    fsdpgen's global_every N): layers N - 1, 2N - 1, ... full attention, the
    others sliding, as runtime/model/llama.h's local_layer."""
    return ["full_attention" if (i + 1) % global_every == 0 else "sliding_attention"
            for i in range(layers)]


def write_expected(path, figures):
    """expected.json: the library versions and each step's figures
    (a dict of lists: losses, grad_norms, and lrs where they vary); printed too."""
    with open(path, "w") as f:
        json.dump({"torch": torch.__version__, "transformers": transformers.__version__,
                   **figures}, f, indent=1)
        f.write("\n")
    print(json.dumps(figures))


def write_tied_fp64_fixture(out_dir, model, vocab, tokens, context, global_batch, steps, lr, betas,
                            eps, weight_decay, clip):
    """A tied-embedding model's fixture: model.safetensors (the state dict
    with the embedding once, as save_pretrained writes it), the same weights
    as a model directory of shards of at most 40 kB (hf/), the learnable
    token stream of `tokens` tokens (tokens.bin), and expected.json from
    training the model in fp64."""
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(state, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    model.save_pretrained(os.path.join(out_dir, "hf"), max_shard_size="40kB")
    stream = learnable_stream(vocab, tokens)
    write_tokens(os.path.join(out_dir, "tokens.bin"), stream)
    losses, _, norms = train(model.double(), stream, context, vocab, global_batch, steps, lr, betas,
                             eps, weight_decay, clip)
    write_expected(os.path.join(out_dir, "expected.json"),
                   {"dtype": "float64", "losses": losses, "grad_norms": norms})
