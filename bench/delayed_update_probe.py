#!/usr/bin/python3
"""The one-step-delayed update's quality, computed independently of skytrain (docs/EXPERIMENTS.md,
"The quality cost of the one-step-delayed update").

One process trains the demo GPT (bench/torch_pipeline.py's modules, skytrain's initialisation,
sampling and learning-rate schedule, AdamW, global-norm clipping) with either the synchronous
update or the delayed one, W(t+1) = W(t) - u(g(W(t-1))): each step's gradient is taken at the
weights from before the previous step's update. --predict takes it at 2 W(t-1) - W(t-2)
instead (weight prediction, as skytrain's "delayed" does). --delay limits the staleness to
some parameters (the others see the current weights), to find where it costs.

Validation: 64 windows of the held-out last 5% of the file, the same windows for every run,
so rows of one table compare; the absolute values differ from skytrain's own validation
sample.

Usage: /usr/bin/python3 bench/delayed_update_probe.py --data web.txt --update delayed --seeds 1,2,3
"""
import argparse
import os
import sys
import types

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_pipeline as tp  # noqa: E402

CLIP = 1.0  # the recipe's clip_norm
FIRST_STAGE = ("tok_emb", "pos_emb", "blocks.block0.", "blocks.block1.")  # the demo's stage 0
DELAYED = {
    "all": lambda name: True,
    "stage0": lambda name: name.startswith(FIRST_STAGE),
    "embeddings": lambda name: "emb" in name,
}


def validation_loss(model, path):
    with open(path, "rb") as f:
        tokens = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).to(torch.int64)
    held = tokens[tokens.numel() - int(tokens.numel() * 0.05):]
    starts = torch.randint(0, held.numel() - 129, (64,), generator=torch.Generator().manual_seed(7))
    window = held[starts.unsqueeze(1) + torch.arange(129).unsqueeze(0)]
    with torch.no_grad():
        return float(F.cross_entropy(model(window[:, :-1]).reshape(-1, 256), window[:, 1:].reshape(-1)))


def train(a, seed):
    model = tp.Slice(a, 0, a.layers)
    tp.initialise(model, a.layers, seed)
    named = list(model.named_parameters())
    params = [p for _, p in named]
    stale = [DELAYED[a.delay](name) for name, _ in named]
    optimizer = torch.optim.AdamW(params, lr=a.lr, betas=(a.beta1, 0.95), weight_decay=0.01)
    data = tp.Corpus(a.data, a.seq_len, seed)
    older = before = [p.detach().clone() for p in params]  # W(t-2), W(t-1)
    previous_norm = None
    for step in range(a.steps):
        for group in optimizer.param_groups:
            group["lr"] = tp.learning_rate(a, step)
        current = [p.detach().clone() for p in params]
        delayed = a.update == "delayed" and step >= max(1, a.sync_steps)
        with torch.no_grad():
            for p, s, w, o in zip(params, stale, before, older):
                if delayed and s:
                    p.copy_(2 * w - o if a.predict and step >= max(2, a.sync_steps + 1) else w)
        optimizer.zero_grad()
        for first in range(0, a.batch, a.micro):
            x, y = data.batch(step, first, a.micro)
            loss = F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1)) * a.micro / a.batch
            loss.backward()
        if a.clip == "now":
            torch.nn.utils.clip_grad_norm_(params, CLIP)
        else:  # by the previous step's global norm: no stage waits for this step's
            norm = torch.norm(torch.stack([p.grad.norm() for p in params]))
            if previous_norm is not None and previous_norm > CLIP:
                for p in params:
                    p.grad.mul_(CLIP / previous_norm)
            previous_norm = float(norm)
        if delayed:  # the update applies to the current weights
            with torch.no_grad():
                for p, c in zip(params, current):
                    p.copy_(c)
        optimizer.step()
        older, before = before, current
    return validation_loss(model, a.data)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--update", choices=["sync", "delayed"], default="delayed")
    p.add_argument("--predict", action="store_true")
    p.add_argument("--delay", choices=sorted(DELAYED), default="all")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--sync-steps", type=int, default=0, help="the first N steps update synchronously")
    p.add_argument("--clip", choices=["now", "previous"], default="now",
                   help="clip to the norm CLIP by this step's global gradient norm, or by the previous step's")
    p.add_argument("--seeds", default="1,2,3")
    run_seeds(p.parse_args(), train)


def run_seeds(a, train):
    """Trains the demo recipe (deploy/jobs/gpt-web.json, m = 4) once per seed of a.seeds with
    train(args, seed) -> validation loss, and prints each and their mean."""
    a.__dict__.update(vocab=256, d_model=128, heads=4, layers=4, d_ff=512, seq_len=128, dropout=0.0,
                      batch=16, micro=4, min_lr=a.lr / 10, warmup_lr_steps=30)
    torch.set_num_threads(1)
    losses = []
    for seed in map(int, a.seeds.split(",")):
        losses.append(train(types.SimpleNamespace(**vars(a)), seed))
        print(f"seed {seed}: validation {losses[-1]:.4f}", flush=True)
    print(f"mean {sum(losses) / len(losses):.4f}")


if __name__ == "__main__":
    main()
