#!/usr/bin/env python3
"""Bring your own model to skytrain: a small causal language model defined in plain PyTorch,
cut into pipeline stages and exported as one TorchScript file per stage.

    /usr/bin/python3 deploy/examples/torchscript/tiny_lm.py --out /tmp/tiny-lm
    # writes stage-0.pt, stage-1.pt (the two halves), whole.pt (the uncut model, for
    # comparison) and job.json (a job spec training the halves on two daemons)

Every part is a `Part`: an ordered ModuleDict keyed by the layer's place in the whole
model ("embed", "block0", ..., "head"), so a parameter has the same name in its stage as in
the uncut model (e.g. "layers.block2.fc.weight"), and checkpoints of the halves line up with
the whole. The parts share the whole model's modules, so they start from the same weights.
Needs Debian's python3-torch (LibTorch 1.13's Python side).
"""
import argparse
import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


class Embed(nn.Module):
    def __init__(self, vocab: int, d: int, seq: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.tok(ids) + self.pos[: ids.size(1)]


class Block(nn.Module):
    """Pre-norm transformer block with causal self-attention."""

    def __init__(self, d: int, heads: int, ff: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, ff)
        self.proj = nn.Linear(ff, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.size(0), x.size(1), x.size(2)
        qkv = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        attention = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        x = x + self.out(torch.matmul(attention, v).transpose(1, 2).reshape(b, t, d))
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


class Head(nn.Module):
    def __init__(self, d: int, vocab: int):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.logits = nn.Linear(d, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits(self.norm(x))


class Part(nn.Module):
    """A consecutive range of the model's layers; forward runs them in order."""

    def __init__(self, layers: "dict[str, nn.Module]"):
        super().__init__()
        self.layers = nn.ModuleDict(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers.values():
            x = layer(x)
        return x


class LastPart(Part):
    """The part holding the head also carries the loss, as a TorchScript method."""

    @torch.jit.export
    def loss(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The training loss skytrain calls with "loss": "module" (mean token cross-entropy)."""
        return F.cross_entropy(output.reshape(-1, output.size(-1)), targets.reshape(-1))


def build(vocab: int, d: int, heads: int, ff: int, layers: int, seq: int) -> "list[tuple[str, nn.Module]]":
    named = [("embed", Embed(vocab, d, seq))]
    named += [("block%d" % i, Block(d, heads, ff)) for i in range(layers)]
    named.append(("head", Head(d, vocab)))
    return named


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for stage-<i>.pt, whole.pt and job.json")
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-ff", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--cut", type=int, nargs="*", default=None,
                   help="blocks after which to cut (default: half way)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trace", action="store_true", help="torch.jit.trace instead of torch.jit.script")
    p.add_argument("--tie", action="store_true",
                   help="the head's weight is the token embedding's (the spec's model.tied keeps the copies equal)")
    a = p.parse_args()

    torch.manual_seed(a.seed)
    named = build(a.vocab, a.d_model, a.heads, a.d_ff, a.layers, a.seq)
    if a.tie:  # one Parameter: whole.pt shares it; each stage file holds its own copy
        named[-1][1].logits.weight = named[0][1].tok.weight
    cuts = a.cut if a.cut is not None else [a.layers // 2]
    if any(c < 1 or c >= a.layers for c in cuts) or sorted(set(cuts)) != cuts:
        p.error("--cut: increasing block counts in [1, layers)")
    # Part k holds blocks [bounds[k], bounds[k+1]); the embedding goes first, the head last.
    bounds = [0] + cuts + [a.layers]
    parts = []
    for k in range(len(bounds) - 1):
        lo, hi = bounds[k] + 1, bounds[k + 1] + 1  # +1: named[0] is the embedding
        if k == 0:
            lo = 0
        if k == len(bounds) - 2:
            hi += 1
        parts.append((LastPart if k == len(bounds) - 2 else Part)(dict(named[lo:hi])))

    os.makedirs(a.out, exist_ok=True)
    example = torch.randint(0, a.vocab, (2, a.seq))

    def export(module: nn.Module, sample: torch.Tensor, path: str) -> torch.Tensor:
        module.train()
        scripted = torch.jit.trace(module, sample) if a.trace else torch.jit.script(module)
        scripted.save(path)
        with torch.no_grad():
            return module(sample)

    export(LastPart(dict(named)), example, os.path.join(a.out, "whole.pt"))
    x = example
    stages = []
    for k, part in enumerate(parts):
        path = os.path.abspath(os.path.join(a.out, "stage-%d.pt" % k))
        stage = {"daemon": "tcp://127.0.0.1:%d" % (7000 + 10 * k), "module": path}
        if k > 0:
            stage["input_shape"] = list(x.shape[1:])
        x = export(part, x, path)
        stages.append(stage)
    spec = {
        "name": "tiny-lm-torchscript",
        "seed": a.seed,
        "steps": 100,
        "batch_size": 16,
        "micro_batches": "auto",
        "model": {"kind": "torchscript", "vocab_size": a.vocab, "seq_len": a.seq,
                  **({"tied": [["layers.embed.tok.weight", "layers.head.logits.weight"]]} if a.tie else {})},
        "data": {"files": ["/var/lib/skytrain/data/web.txt"]},
        "optimizer": {"lr": 2e-3, "schedule": "cosine", "warmup_steps": 10, "min_lr": 2e-4, "clip_norm": 1.0},
        "stages": stages,
    }
    with open(os.path.join(a.out, "job.json"), "w") as f:
        json.dump(spec, f, indent=2)
        f.write("\n")
    print("wrote %d stages, whole.pt and job.json to %s" % (len(parts), a.out))


if __name__ == "__main__":
    main()
