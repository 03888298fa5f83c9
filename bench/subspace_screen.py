#!/usr/bin/python3
"""The subspace methods on the 20.8M recipe, many runs at once on a GPU: a screen computed
independently of skytrain (docs/EXPERIMENTS.md, "Subspace methods at 20.8M parameters").

skytrain's own 20M runs (bench/subspace_20m.sh) take an hour each on the 2-core VM, so which
method and which variant deserve one is screened here: the same byte-level GPT (d_model 512,
8 heads, 6 blocks, d_ff 2304, 64-token sequences, untied head, GPT-2 initialisation), the same
sampling (bench/torch_pipeline.py's Corpus), AdamW (0.9, 0.95, weight decay 0.01 except on
embeddings and 1-D tensors), 1e-3 cosine to 1e-4 after 100 warm-up steps, clipping at 1.0,
2,000 steps of 2 sequences, validation on 256 fixed windows of the held-out 5%, fp32 (TF32
off unless --tf32). The model is one process: a cut is a function in the forward pass, which is what the
pipeline computes (skytrain's equivalence tests: a pipeline equals one process).

Models (SPEC; K the numbers a token at the cut, d_model 512 = 1x):
  none             unconstrained
  half[:N]         only the 3 blocks after the cut (or the blocks from N on), on token +
                   position embeddings (what a receiver that ignores the code can reach)
  shared:K         model.subspace {"rank": K}: frozen random token/position tables and a
                   frozen orthonormal U [512, K]; every block writes K coefficients
                   (stages/models/subspace/subspace_modules.cpp)
  cut:K[:OPT...]   model.subspace {"rank": K, "method": "cut"} before block 3 (at=2,4: before
                   blocks 2 and 4, a 3-stage chain; every cut its own code): encode
                   [512 -> K], decode [K -> 512] plus an anchor (token and position tables,
                   trained by the receiver) (stages/models/subspace/cut_code.cpp). Options:
                     ortho     encode = U^T, decode = U for a random orthonormal U
                     split     ortho, and the anchor starts as the embeddings' part outside U
                               (what fine-tuning's conversion does): at K = d_model the cut
                               starts as the identity, below it as the projection onto U
                     frozen    (with ortho or split) encode and decode stay U^T and U: a
                               predefined subspace at the cut; the blocks around it adapt
                     anneal=N  the code starts at full width as the identity (split at K =
                               d_model) and sends fewer numbers over the first N steps, down
                               to K (channel j is faded out as the width passes it): K a
                               token after step N, more before
                     stiefel   one orthonormal U [512, K] learned by both ends (encode U^T,
                               decode U), put back on the orthonormal matrices after each
                               step (QR): a learned projection, as MAPL's (arXiv 2606.05484)
                     fixanchor the anchor stays as it starts (with split: the embeddings'
                               part outside U as drawn, as the paper's frozen tables)
                     noanchor  no anchor: the receiver's h is decode(code) alone
                     q13       the code through compression/'s q13 both ways (values and gradients)
                     bf16      the code as bf16 both ways (half the bytes of K fp32 numbers)
                     skip      the sender sends encode(h - its own embeddings), the receiver
                               adds its anchor, initialised to the sender's embeddings
                     context=N the anchor adds a table for each of the N - 1 tokens before
                               each token too (a causal n-gram of ids the receiver has)
                     nocode    the receiver's h is its anchor alone (the code is not read):
                               the control for what the anchor can do without the code
                     embed=N   (also on none) the model's own input embedding adds a table for
                               each of the N - 1 tokens before each token (drawn last)
                     aux=W     (also on none, with at=) the sender's stream at each cut also
                               predicts the next token through a head of its own (LayerNorm,
                               linear; drawn last), its loss added at weight W: the blocks
                               before a cut learn from their own loss, not only through the code
                     auxfade=N (with aux=W) the weight falls linearly from W at step 0 to 0
                               at step N, and stays 0 after
                     auxstride=S (with aux=W) the head reads positions 0, S, 2S, ... only
                               (skytrain's model.subspace.sender_stride)
                     auxrot    (with auxstride=S) row r of a batch reads positions r mod S,
                               r mod S + S, ... instead: every position read, as often
                     paired    embeddings, blocks and head start as the unconstrained model's
                               of the same seed (the codes are drawn after them; without it
                               the anchors are drawn first, so every other tensor differs):
                               a cut model and "none" then differ by the cut alone
  any SPEC@bN      the same with N sequences a step (more tokens, same steps)
  any SPEC#S,...   the same on seeds S,... only
A spec with an unknown or contradictory option is refused before any run. A cut model is
also validated with each cut's code, then all codes, shuffled across the
windows (each window decodes another's code: the same values, none of its information);
"shuffled" in its line; "code_share" is each cut's RMS of the decoded code over RMS of
the state it enters, on the held-out windows (what skytrain reports as code_share).

Usage: python3 bench/subspace_screen.py --data web.txt --out results.jsonl --workers 8 \\
           --seeds 1,2,3 SPEC...
--size "d=64,heads=4,layers=4,ff=256,t=128,cut=2,lr=2e-3,warmup=30" runs another model (here
the one docs/EXPERIMENTS.md trains on the 2-core VM, 1 thread a worker: --device cpu --threads 1).
Each finished run appends one JSON line (spec, seed, loss at 1000 and 2000, seconds);
--summary FILE prints the mean and spread per spec against "none".
"""
import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import activation_codec_probe as probe  # noqa: E402
import torch_pipeline as tp  # noqa: E402

D, HEADS, LAYERS, D_FF, T, VOCAB, CUT = 512, 8, 6, 2304, 64, 256, 3
LR, WARMUP = 1e-3, 100


def configure(size):
    """--size "d=128,heads=4,layers=8,ff=512,t=128,cut=4,lr=2e-3,warmup=30": another model than
    the 20.8M recipe (min_lr stays lr / 10); each worker sets it before it builds a model."""
    global D, HEADS, LAYERS, D_FF, T, CUT, LR, WARMUP
    names = {"d": "D", "heads": "HEADS", "layers": "LAYERS", "ff": "D_FF", "t": "T", "cut": "CUT",
             "lr": "LR", "warmup": "WARMUP"}
    for item in filter(None, size.split(",")):
        key, _, value = item.partition("=")
        if key not in names:
            raise SystemExit(f"--size: unknown key {key!r} (known: {', '.join(names)})")
        globals()[names[key]] = float(value) if key == "lr" else int(value)


def attention(qkv, heads):
    b, t, three_d = qkv.shape
    q, k, v = qkv.view(b, t, 3, heads, three_d // 3 // heads).permute(2, 0, 3, 1, 4)
    if hasattr(F, "scaled_dot_product_attention"):
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:  # LibTorch 1.13's Python (Debian): the same by hand
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
        y = torch.softmax(scores.masked_fill(mask, float("-inf")), -1) @ v
    return y.transpose(1, 2).reshape(b, t, three_d // 3)


class Block(nn.Module):
    """A pre-LN block writing `out` numbers (d_model, or K for a shared-subspace block)."""

    def __init__(self, out=None):
        super().__init__()
        out = out or D
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.attn_proj = nn.Linear(D, 3 * D), nn.Linear(D, out)
        self.fc, self.proj = nn.Linear(D, D_FF), nn.Linear(D_FF, out)

    def attn(self, h):
        return self.attn_proj(attention(self.qkv(self.ln1(h)), HEADS))

    def mlp(self, h):
        return self.proj(F.gelu(self.fc(self.ln2(h))))

    def forward(self, x):
        x = x + self.attn(x)
        return x + self.mlp(x)


def orthonormal(rows, cols, g):
    q, _ = torch.linalg.qr(torch.randn(rows, cols, generator=g, dtype=torch.float64))
    return q.float()


def previous_tokens(tables, ids):
    """Table j - 1 looked up at the id j tokens back, summed (zero where there is none)."""
    return sum(F.pad(table[ids[:, :-j]], (0, 0, j, 0)) for j, table in enumerate(tables, start=1))


class Code(nn.Module):
    """One cut's learned code: the sender's encode, the receiver's decode and anchor."""

    def __init__(self, k, anchor, context=1, tied=False):
        super().__init__()
        self.encode = nn.Linear(D, k, bias=False)
        self.decode = (lambda c: c @ self.encode.weight) if tied else nn.Linear(k, D, bias=False)
        self.anchor_tok = nn.Parameter(torch.zeros(VOCAB, D)) if anchor else None
        self.anchor_pos = nn.Parameter(torch.zeros(T, D)) if anchor else None
        # context=N: tables for the N - 1 tokens before each one too (the receiver has the ids)
        self.anchor_prev = nn.Parameter(torch.zeros(context - 1, VOCAB, D)) if context > 1 else None

    def anchor(self, ids):
        a = self.anchor_tok[ids] + self.anchor_pos[: ids.size(1)]
        return a if self.anchor_prev is None else a + previous_tokens(self.anchor_prev, ids)


def q13_tensor(x):
    """compression/codecs/q13_codec.cpp on a tensor: its flattened values in 64-blocks, thirteen levels
    a block (bench/activation_codec_probe.py's q13)."""
    flat = x.reshape(-1)
    pad = (-flat.numel()) % 64
    blocks = F.pad(flat, (0, pad)).view(-1, 64)
    return probe.q13(blocks).view(-1)[: flat.numel()].view(x.shape)


class Q13(torch.autograd.Function):
    """The code through q13 both ways: the receiver decodes the quantised code, the sender
    gets the quantised gradient of it."""

    @staticmethod
    def forward(ctx, x):
        return q13_tensor(x.detach())

    @staticmethod
    def backward(ctx, grad):
        return q13_tensor(grad)


class BF16(torch.autograd.Function):
    """The code as compression/codecs/half_codec.cpp's bf16 both ways (round to nearest)."""

    @staticmethod
    def forward(ctx, x):
        return x.detach().to(torch.bfloat16).float()

    @staticmethod
    def backward(ctx, grad):
        return grad.to(torch.bfloat16).float()


class Model(nn.Module):
    def __init__(self, spec, g):
        super().__init__()
        kind, *rest = spec.split(":")
        if kind == "none":  # options only
            rest = [str(D)] + rest
        self.kind, self.k = kind, int(rest[0]) if rest else D
        self.options = set(rest[1:])
        known = {"ortho", "split", "frozen", "fixanchor", "noanchor", "q13", "bf16", "skip", "paired", "nocode", "stiefel", "auxrot"}
        unknown = {o for o in self.options if o not in known and not o.startswith(("at=", "context=", "embed=", "anneal=", "aux=", "auxfade=", "auxstride="))}
        misplaced = {o for o in self.options if not o.startswith(("embed=", "aux=", "auxfade=", "at="))} if kind == "none" else set()
        if unknown or misplaced or (kind not in ("cut", "none") and self.options):
            raise ValueError(f"{spec}: unknown or misplaced options {sorted(unknown or misplaced or self.options)}")
        if "frozen" in self.options and not self.options & {"ortho", "split"}:
            raise ValueError(f"{spec}: frozen keeps the start of ortho or split; alone it would freeze random maps")
        if {"stiefel", "frozen"} <= self.options:
            raise ValueError(f"{spec}: stiefel learns U; frozen keeps it")
        if {"q13", "bf16"} <= self.options:
            raise ValueError(f"{spec}: one codec on the code, q13 or bf16")
        value = lambda name, default: next((o[len(name) + 1:] for o in self.options if o.startswith(name + "=")), default)  # noqa: E731
        context, embed = int(value("context", 1)), int(value("embed", 1))
        self.aux, self.aux_fade = float(value("aux", 0)), int(value("auxfade", 0))
        if self.aux_fade and not self.aux:
            raise ValueError(f"{spec}: auxfade= fades aux=; alone it does nothing")
        self.aux_stride, self.aux_rot = int(value("auxstride", 1)), "auxrot" in self.options
        if (self.aux_stride > 1 or self.aux_rot) and not self.aux or self.aux_rot and self.aux_stride == 1:
            raise ValueError(f"{spec}: auxstride= thins aux=, auxrot rotates auxstride=")
        if self.aux_rot and T % self.aux_stride:
            raise ValueError(f"{spec}: auxrot needs the sequence length {T} a multiple of auxstride=")
        if kind == "none" and value("at", None) and not self.aux:
            raise ValueError(f"{spec}: at= on none places aux=; alone it does nothing")
        self.anneal, self.step = int(value("anneal", 0)), 0
        if self.anneal and self.options & {"ortho", "split", "stiefel", "frozen", "noanchor", "skip"}:
            raise ValueError(f"{spec}: anneal starts as split at full width; it takes no other start")
        if self.anneal:
            self.options.add("split")
        width = D if self.anneal else self.k  # the numbers the maps hold; anneal sends fewer
        if "noanchor" in self.options and (self.options & {"split", "skip", "fixanchor", "nocode"} or context > 1):
            raise ValueError(f"{spec}: noanchor removes the anchor that split, skip, fixanchor, nocode and context= need")
        first = (int(rest[0]) if rest else CUT) if kind == "half" else 0
        if kind == "shared":
            self.register_buffer("fixed_tok", torch.randn(VOCAB, D, generator=g) * 0.02)
            self.register_buffer("fixed_pos", torch.randn(T, D, generator=g) * 0.02)
            self.register_buffer("basis", orthonormal(D, self.k, g))
            self.tok_emb, self.pos_emb = nn.Embedding(VOCAB, self.k), nn.Parameter(torch.zeros(T, self.k))
            self.blocks = nn.ModuleList(Block(self.k) for _ in range(LAYERS))
        else:
            self.tok_emb, self.pos_emb = nn.Embedding(VOCAB, D), nn.Parameter(torch.zeros(T, D))
            self.blocks = nn.ModuleList(Block() for _ in range(first, LAYERS))
        self.prev_emb = nn.Parameter(torch.zeros(embed - 1, VOCAB, D)) if embed > 1 else None
        if self.aux:  # named so that draw() gives its LayerNorm ones and zeros
            self.aux_heads = nn.ModuleDict({"ln": nn.LayerNorm(D), "head": nn.Linear(D, VOCAB, bias=False)})
        self.aux_streams = []
        self.cuts = [int(c) for c in value("at", str(CUT)).split(",")]
        if kind == "cut":
            self.codes = nn.ModuleDict({str(c): Code(width, "noanchor" not in self.options, context, "stiefel" in self.options) for c in self.cuts})
        self.ln_f, self.head = nn.LayerNorm(D), nn.Linear(D, VOCAB, bias=False)
        self.ablated = set()
        self.shares = {}  # each cut's RMS(decode(code)) / RMS(state), last forward (code_share)
        self.initialise(g)

    def initialise(self, g):
        # Drawn in the order the first screen drew them (a module's own tensors, then its
        # children's), so its figures stand with the codes in a ModuleDict.
        named = list(self.named_parameters())
        later = lambda n: n == "prev_emb" or n.startswith("aux_heads.")  # noqa: E731
        last = [(n, p) for n, p in named if later(n)]  # embed=N's tables, aux='s head: after the model's own
        named = [(n, p) for n, p in named if not later(n)]
        if "paired" in self.options:  # the unconstrained model's draws, then the codes'
            own = [(n, p) for n, p in named if not n.startswith("codes.")]
            order = [(n, p) for n, p in own if n == "pos_emb"] + [(n, p) for n, p in own if n != "pos_emb"] + last
            order += [(n, p) for n, p in named if n.startswith("codes.")]
        else:
            first = [(n, p) for n, p in named if n == "pos_emb" or n.endswith(("anchor_tok", "anchor_pos"))]
            order = first + [(n, p) for n, p in named if n not in {n for n, _ in first}] + last
        tp.draw(order, LAYERS, g)
        with torch.no_grad():
            for code in self.codes.values() if self.kind == "cut" else []:
                if self.options & {"ortho", "split", "stiefel"}:
                    u = orthonormal(D, code.encode.weight.size(0), g)
                    code.encode.weight.copy_(u.t())
                    if "stiefel" not in self.options:
                        code.decode.weight.copy_(u)
                if "frozen" in self.options:
                    code.encode.weight.requires_grad_(False)
                    code.decode.weight.requires_grad_(False)
                if "split" in self.options:
                    outside = lambda table: table - (table @ u) @ u.t()  # noqa: E731
                    code.anchor_tok.copy_(outside(self.tok_emb.weight))
                    code.anchor_pos.copy_(outside(self.pos_emb))
                if "fixanchor" in self.options:
                    code.anchor_tok.requires_grad_(False)
                    code.anchor_pos.requires_grad_(False)
                if "skip" in self.options:
                    code.anchor_tok.copy_(self.tok_emb.weight)
                    code.anchor_pos.copy_(self.pos_emb)

    def width_mask(self):
        """anneal: 1 for the channels still sent at this step, a fade on the one being dropped."""
        width = D - (D - self.k) * min(1.0, self.step / self.anneal)
        return (width - torch.arange(D, dtype=torch.float32)).clamp(0, 1)

    def retract(self):
        """stiefel: each U back to the nearest orthonormal frame of its column space (QR)."""
        with torch.no_grad():
            for code in self.codes.values() if "stiefel" in self.options else []:
                q, r = torch.linalg.qr(code.encode.weight.t())
                code.encode.weight.copy_((q * torch.sign(torch.diagonal(r))).t())

    def aux_loss(self, y):
        """aux=W: W times each sender's own next-token loss, on the streams of the last forward."""
        head = lambda h: self.aux_heads["head"](self.aux_heads["ln"](h))  # noqa: E731
        w = self.aux * (max(0.0, 1 - self.step / self.aux_fade) if self.aux_fade else 1.0)
        s = self.aux_stride

        def pick(t):  # [b, T, ...] -> the positions the head reads
            if s == 1 or not self.aux_rot:
                return t[:, ::s]
            b, n = t.size(0), t.size(1) // s  # T a multiple of S (checked in __init__)
            rows = torch.arange(b, device=t.device) % s
            index = (rows[:, None] + s * torch.arange(n, device=t.device)[None, :]).view(b, n, *[1] * (t.dim() - 2))
            return torch.gather(t, 1, index.expand(b, n, *t.shape[2:]))
        return sum(w * F.cross_entropy(head(pick(h)).reshape(-1, VOCAB), pick(y).reshape(-1)) for h in self.aux_streams)

    def embeddings(self, ids):
        h = self.tok_emb(ids) + self.pos_emb[: ids.size(1)]
        return h if self.prev_emb is None else h + previous_tokens(self.prev_emb, ids)

    def forward(self, ids):
        if self.kind == "shared":
            fixed = self.fixed_tok[ids] + self.fixed_pos[: ids.size(1)]
            c = self.embeddings(ids)
            lift = lambda c: fixed + c @ self.basis.t()  # noqa: E731
            for block in self.blocks:
                c = c + block.attn(lift(c))
                c = c + block.mlp(lift(c))
            return self.head(self.ln_f(lift(c)))
        h = self.embeddings(ids)
        self.aux_streams = []
        for i, block in enumerate(self.blocks):
            if self.aux and self.training and i in self.cuts:  # the sender's stream, before any code
                self.aux_streams.append(h)
            if self.kind == "cut" and i in self.cuts:
                code = self.codes[str(i)]
                sent = code.encode(h - self.embeddings(ids) if "skip" in self.options else h)
                if self.anneal:
                    sent = sent * self.width_mask().to(sent.device)
                if i in self.ablated:  # each sequence gets another's code: same values, no information
                    sent = sent.roll(1, dims=0)
                if self.options & {"q13", "bf16"}:
                    sent = (Q13 if "q13" in self.options else BF16).apply(sent)
                if "nocode" in self.options:  # the anchor alone
                    h = code.anchor(ids)
                elif code.anchor_tok is not None:
                    decoded = code.decode(sent)
                    h = decoded + code.anchor(ids)
                    if not self.training:  # skytrain's code_share, read after training
                        self.shares[i] = float(decoded.norm() / h.norm())
                else:
                    h = code.decode(sent)
            h = block(h)
        return self.head(self.ln_f(h))


def validation_windows(path, device):
    with open(path, "rb") as f:
        tokens = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).to(torch.int64)
    held = tokens[tokens.numel() - int(tokens.numel() * 0.05):]
    starts = torch.randint(0, held.numel() - T - 1, (256,), generator=torch.Generator().manual_seed(7))
    return held[starts.unsqueeze(1) + torch.arange(T + 1).unsqueeze(0)].to(device)


def evaluate(model, windows):
    model.eval()
    with torch.no_grad():
        loss = F.cross_entropy(model(windows[:, :-1]).reshape(-1, VOCAB), windows[:, 1:].reshape(-1))
    model.train()
    return float(loss)


def train(job):
    spec, seed, a = job
    if time.time() > a.deadline:  # past --minutes: left for another run
        return {"spec": spec, "seed": seed, "skipped": True}
    device = a.device
    configure(a.size)
    if device == "cpu":
        torch.set_num_threads(a.threads)
    torch.set_float32_matmul_precision("high" if a.tf32 else "highest")  # --tf32: TF32 matrix products
    torch.backends.cudnn.allow_tf32 = False
    base, _, batch = spec.partition("@b")
    batch = int(batch) if batch else 2
    g = torch.Generator().manual_seed(seed)
    model = Model(base, g).to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "emb" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "emb" not in n)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
                                  lr=LR, betas=(0.9, 0.95))
    schedule = argparse.Namespace(lr=LR, min_lr=LR / 10, warmup_lr_steps=WARMUP, steps=a.steps)
    data = tp.Corpus(a.data, T, seed)
    windows = validation_windows(a.data, device)
    params = [p for p in model.parameters()]
    evals, start = {}, time.time()
    for step in range(a.steps):
        for group in optimizer.param_groups:
            group["lr"] = tp.learning_rate(schedule, step)
        x, y = data.batch(step, 0, batch)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        model.step = step
        loss = F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1)) + model.aux_loss(y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        model.retract()
        if (step + 1) % (a.steps // 2) == 0:
            model.step = step + 1
            evals[step + 1] = evaluate(model, windows)
    trained = sum(p.numel() for p in params if p.requires_grad)  # frozen maps and anchors not counted
    result = {"spec": spec, "seed": seed, "params": trained, "evals": evals, "seconds": round(time.time() - start, 1)}
    if model.kind == "cut":  # what the receivers get from the codes: each cut's, then all, shuffled
        # each cut's code_share, from the last validation (the held-out windows, codes in place)
        result["code_share"] = {str(c): round(s, 5) for c, s in sorted(model.shares.items())}
        result["shuffled"] = {}
        for cuts in [[c] for c in model.cuts] + ([model.cuts] if len(model.cuts) > 1 else []):
            model.ablated = set(cuts)
            result["shuffled"][",".join(map(str, cuts))] = evaluate(model, windows)
        model.ablated = set()
    return result


def summary(path):
    runs = [r for r in map(json.loads, open(path)) if not r.get("skipped")]
    by = {}
    for r in runs:
        by.setdefault(r["spec"], []).append(r)
    last = lambda r: r["evals"][max(r["evals"], key=int)]  # noqa: E731
    base = by.get("none")
    base_mean = sum(map(last, base)) / len(base) if base else None
    for spec, rs in by.items():
        values = sorted(map(last, rs))
        mean = sum(values) / len(values)
        versus = f"{100 * (mean / base_mean - 1):+.1f}%" if base_mean and "@" not in spec else ""
        print(f"{spec:28s} n={len(values)} mean {mean:.4f} ({values[0]:.4f}-{values[-1]:.4f}) {versus}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("specs", nargs="*")
    p.add_argument("--data")
    p.add_argument("--out")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--size", default="", help="another model: d=,heads=,layers=,ff=,t=,cut=,lr=,warmup=")
    p.add_argument("--threads", type=int, default=1, help="on a CPU: threads a worker")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tf32", action="store_true", help="on a GPU: matrix products in TF32 (fp32 storage)")
    p.add_argument("--minutes", type=float, default=1e9, help="start no run after this many minutes")
    p.add_argument("--summary")
    a = p.parse_args()
    a.deadline = time.time() + 60 * a.minutes
    configure(a.size)  # refuse an unknown key before any worker starts
    if a.summary:
        return summary(a.summary)
    jobs = []
    for spec in a.specs:  # SPEC#1,2: those seeds only
        spec, _, seeds = spec.partition("#")
        jobs += [(spec, int(seed), a) for seed in (seeds or a.seeds).split(",")]
    for base in {spec.partition("@b")[0] for spec, _, _ in jobs}:  # refuse a bad spec before any run
        Model(base, torch.Generator())
    with mp.get_context("spawn").Pool(a.workers) as pool, open(a.out, "a") as out:
        for result in pool.imap_unordered(train, jobs):
            out.write(json.dumps(result) + "\n")
            out.flush()
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
