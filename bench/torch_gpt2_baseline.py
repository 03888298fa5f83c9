#!/usr/bin/env python3
"""The gpt2-small preset (124M: 12 blocks, d 768, 12 heads, d_ff 3072, vocab 50257, tied head,
learned positions, pre-LayerNorm, tanh GELU, attention without a fused kernel, as skytrain's
stages compute it) trained in one plain PyTorch process on one device, for the ratio in
docs/BENCHMARKS.md ("124M on a GPU"). Same batch, sequence, AdamW and clipping as
bench/gpu_precision.sh's jobs; random token IDs below 256 (the byte tokenizer's), since
reading data is not what is timed. Prints the median step time and tokens/s of the steps
after the first two.

Usage: python3 bench/torch_gpt2_baseline.py --precision fp32|bf16|fp16 [--steps N]
       [--batch B] [--seq T] [--micro-batches M] [--device cuda]
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads, dff):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, dff), nn.Linear(dff, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        attended = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        x = x + self.proj(attended.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt2(nn.Module):
    def __init__(self, vocab=50257, d=768, layers=12, heads=12, dff=3072, context=1024):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads, dff) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        for name, w in self.named_parameters():  # GPT-2's: N(0, 0.02), biases zero
            if name.endswith("bias"):
                nn.init.zeros_(w)
            elif w.dim() > 1:
                nn.init.normal_(w, std=0.02)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.ln(x) @ self.tok.weight.t()  # the tied head


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--micro-batches", type=int, default=4)
    p.add_argument("--device", default="cuda")
    a = p.parse_args()
    torch.manual_seed(1)
    model = Gpt2().to(a.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.01)
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[a.precision]
    fp16 = a.precision == "fp16"
    scaler = torch.amp.GradScaler("cuda", enabled=fp16) if hasattr(torch.amp, "GradScaler") else \
        torch.cuda.amp.GradScaler(enabled=fp16)  # LibTorch 1.13's Python
    micro = a.batch // a.micro_batches
    times, losses = [], []
    for step in range(a.steps):
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(a.micro_batches):
            ids = torch.randint(0, 256, (micro, a.seq + 1), device=a.device)
            with torch.autocast(device_type=a.device.split(":")[0], dtype=dtype, enabled=dtype is not None):
                logits = model(ids[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
            scaler.scale(loss / a.micro_batches).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    step = statistics.median(times[2:])
    peak = torch.cuda.max_memory_allocated() / 2**20 if a.device.startswith("cuda") else float("nan")
    print(f"{a.precision}: median step {step:.4f} s, {a.batch * a.seq / step:.0f} tokens/s, "
          f"last loss {losses[-1]:.4f}, peak GPU memory {peak:.0f} MiB")


if __name__ == "__main__":
    main()
