#!/usr/bin/python3
"""A hand-written PyTorch pipeline: the peer skytrain is measured against (docs/BENCHMARKS.md,
"PyTorch pipeline peer").

The same GPT as skytrain's zoo (stages/gpt_modules.cpp: token + position embeddings, pre-LN
blocks of causal self-attention and a GELU MLP, final LayerNorm, an LM head without bias,
GPT-2 initialisation), cut by layer ranges as skytrain's stages are (stage 0: embeddings and
its blocks; the last stage: its blocks, ln_f, head and the token cross-entropy), trained in
fp32 with AdamW, a linear warm-up and cosine decay and global-norm clipping, on P processes
joined by torch.distributed (backend gloo). Activations go forward and their gradients
backward with isend/irecv; the schedule is GPipe or 1F1B with exactly skytrain's per-stage op
order (scheduler/schedule.cpp); each micro-batch's loss is scaled by 1/m; every step ends with
the clipping norm's all-reduce and an AdamW step on every stage.

Gloo's send/recv is receiver-driven: a send's bytes leave only once the receiver's "recv
ready" notice has arrived (gloo/transport/tcp/pair.cc), so a receive posted only when it is
needed costs an extra one-way trip before its data moves, and a small all-reduce costs
several. --comm tuned (the default) posts every receive of a step at the step's start: the
activations, the gradients, and the other stages' squared gradient norms, which every stage
sends every other (one one-way trip, where dist.all_reduce takes two round trips on two
ranks). --comm naive is the pipeline as first written: dist.recv when the schedule reaches
it, dist.all_reduce for the clipping norm.

Tokens: with --data FILE, the byte tokenizer's ids of that file and skytrain's sampling
(stages/data/text_data.cpp: sample j of step s starts at splitmix64(...) % positions of the
train split, the last 5% held out), so both systems train on the same sequences; without
it, random ids of the same shape.

Usage:
  /usr/bin/python3 bench/torch_pipeline.py [options]              # all ranks here (loopback)
  /usr/bin/python3 bench/torch_pipeline.py --rank R [options]     # one rank (e.g. in a netns)
Per-step times go to stderr; the last line on stdout (rank 0) is JSON: tokens_per_s is
batch * seq_len over the mean step time of the steps after --warmup, a step's time being the
longest of the ranks' (as skytrain's status reports it).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time


def _threads_from_argv(argv):
    for i, arg in enumerate(argv):
        if arg == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--threads="):
            return arg.split("=", 1)[1]
    return "1"


# OpenBLAS (Debian's libblas.so.3 alternative) keeps its own thread pool, which
# torch.set_num_threads leaves alone, and its threads spin while they wait: two processes on
# two cores slow each other down unless each keeps to its share. skytraind caps it at
# torch_threads (daemon/ops/blas_info.h); so does this, before torch loads it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", _threads_from_argv(sys.argv))
os.environ.setdefault("OMP_NUM_THREADS", _threads_from_argv(sys.argv))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

MASK64 = (1 << 64) - 1
NORM_TAG = 1 << 20  # the squared gradient norms' messages (activations: 2i, gradients: 2i + 1)


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


class Corpus:
    """stages/data/text_data.cpp with the byte tokenizer: the train split, skytrain's sampling."""

    def __init__(self, path, seq_len, seed, validation_fraction=0.05):
        with open(path, "rb") as f:
            data = f.read()
        tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(torch.int64)
        held = int(tokens.numel() * validation_fraction)
        self.train = tokens[: tokens.numel() - held]
        self.t = seq_len
        self.seed = seed

    def batch(self, step, first, count):
        positions = self.train.numel() - self.t
        key = splitmix64(self.seed ^ splitmix64(step))
        starts = [splitmix64(key ^ splitmix64(first + j + 0x51ED)) % positions for j in range(count)]
        idx = torch.tensor(starts).unsqueeze(1) + torch.arange(self.t + 1).unsqueeze(0)
        window = self.train[idx]
        return window[:, :-1].contiguous(), window[:, 1:].contiguous()


class RandomTokens:
    def __init__(self, vocab, seq_len, seed):
        self.vocab, self.t, self.seed = vocab, seq_len, seed

    def batch(self, step, first, count):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + step * 65_537 + first)
        window = torch.randint(0, self.vocab, (count, self.t + 1), generator=g)
        return window[:, :-1].contiguous(), window[:, 1:].contiguous()


class Attention(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        dh = d // self.heads
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, dh).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(dh)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        attention = F.dropout(torch.softmax(scores, -1), self.dropout, self.training)
        y = torch.matmul(attention, v).transpose(1, 2).reshape(b, t, d)
        return F.dropout(self.proj(y), self.dropout, self.training)


class Block(nn.Module):
    def __init__(self, d, heads, d_ff, dropout):
        super().__init__()
        self.dropout = dropout
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads, dropout)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, d_ff)
        self.proj = nn.Linear(d_ff, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        h = F.dropout(self.proj(F.gelu(self.fc(self.ln2(x)))), self.dropout, self.training)
        return x + h


class Slice(nn.Module):
    """Blocks [first, last), with the embeddings when first == 0 and ln_f + head when last == layers."""

    def __init__(self, a, first, last):
        super().__init__()
        self.dropout = a.dropout
        self.tok_emb = nn.Embedding(a.vocab, a.d_model) if first == 0 else None
        self.pos_emb = nn.Parameter(torch.zeros(a.seq_len, a.d_model)) if first == 0 else None
        self.blocks = nn.ModuleDict({f"block{i}": Block(a.d_model, a.heads, a.d_ff, a.dropout) for i in range(first, last)})
        self.ln_f = nn.LayerNorm(a.d_model) if last == a.layers else None
        self.head = nn.Linear(a.d_model, a.vocab, bias=False) if last == a.layers else None

    def forward(self, x):
        if self.tok_emb is not None:
            x = F.dropout(self.tok_emb(x) + self.pos_emb[: x.size(1)], self.dropout, self.training)
        for block in self.blocks.values():
            x = block(x)
        if self.ln_f is not None:
            x = self.head(self.ln_f(x))
        return x


def initialise(model, layers, seed):
    """GPT-2 initialisation as stages/gpt_modules.cpp's initialise() (own RNG stream)."""
    draw(model.named_parameters(), layers, torch.Generator().manual_seed(seed))


def draw(named, layers, g):
    """initialise() on (name, tensor) pairs, drawn in their order from the generator g."""
    residual = 0.02 / math.sqrt(2.0 * layers)
    with torch.no_grad():
        for name, p in named:
            if ".ln" in name or name.startswith("ln_f"):
                p.fill_(1.0) if name.endswith("weight") else p.zero_()
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.normal_(0.0, residual if name.endswith("proj.weight") else 0.02, generator=g)


def schedule_ops(kind, stage, stages, m):
    """scheduler/schedule.cpp: GPipe (all F, then B in reverse) or 1F1B (warm-up p-s-1)."""
    if kind == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in reversed(range(m))]
    warmup = min(stages - stage - 1, m)
    ops = [("F", i) for i in range(warmup)]
    for f in range(warmup, m):
        ops += [("F", f), ("B", f - warmup)]
    ops += [("B", b) for b in range(m - warmup, m)]
    return ops


def learning_rate(a, step):
    """daemon/protocol/spec/job_spec.cpp learningRate: linear warm-up, then cosine to min_lr."""
    if step < a.warmup_lr_steps:
        return a.lr * (step + 1) / a.warmup_lr_steps
    span = max(1, a.steps - 1 - a.warmup_lr_steps)
    progress = min(1.0, (step - a.warmup_lr_steps) / span)
    return a.min_lr + (a.lr - a.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def run_rank(a):
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    rank, p = a.rank, a.world_size
    if a.ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = a.ifname
    dist.init_process_group("gloo", init_method=f"tcp://{a.master_addr}:{a.master_port}", rank=rank, world_size=p)
    per = a.layers // p
    first, last = rank * per, (rank + 1) * per if rank < p - 1 else a.layers
    model = Slice(a, first, last)
    initialise(model, a.layers, a.seed)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01)
    data = Corpus(a.data, a.seq_len, a.seed) if a.data else RandomTokens(a.vocab, a.seq_len, a.seed)
    m, b = a.micro_batches, a.batch // a.micro_batches
    ops = schedule_ops(a.schedule, rank, p, m)
    is_first, is_last = rank == 0, rank == p - 1
    act_shape = (b, a.seq_len, a.d_model)
    times, computes, losses = [], [], []
    for step in range(a.steps):
        start = time.perf_counter()
        waited = 0.0  # blocked in recv, in waiting for sends, in the clipping all-reduce
        inputs, outputs, pending = {}, {}, []
        early = {}
        if a.comm == "tuned":
            for r in range(p):
                if r != rank:
                    buf = torch.empty(1)
                    early[("N", r)] = (dist.irecv(buf, src=r, tag=NORM_TAG), buf)
            for i in range(m):
                if not is_first:
                    buf = torch.empty(act_shape)
                    early[("F", i)] = (dist.irecv(buf, src=rank - 1, tag=2 * i), buf)
                if not is_last:
                    buf = torch.empty(act_shape)
                    early[("B", i)] = (dist.irecv(buf, src=rank + 1, tag=2 * i + 1), buf)

        def receive(kind, i):
            nonlocal waited
            t0 = time.perf_counter()
            if a.comm == "tuned":
                work, buf = early.pop((kind, i))
                work.wait()
            else:
                buf = torch.empty(act_shape)
                dist.recv(buf, src=rank - 1 if kind == "F" else rank + 1, tag=2 * i + (kind == "B"))
            waited += time.perf_counter() - t0
            return buf
        loss_sum = 0.0
        for kind, i in ops:
            if kind == "F":
                tokens, targets = data.batch(step, i * b, b) if (is_first or is_last) else (None, None)
                if is_first:
                    x = tokens
                else:
                    x = receive("F", i).requires_grad_(True)
                inputs[i] = x
                y = model(x)
                if is_last:
                    loss = F.cross_entropy(y.reshape(-1, a.vocab), targets.reshape(-1))
                    loss_sum += loss.item()
                    outputs[i] = loss / m
                else:
                    outputs[i] = y
                    out = y.detach()
                    pending.append((dist.isend(out, dst=rank + 1, tag=2 * i), out))
            else:
                if is_last:
                    outputs.pop(i).backward()
                else:
                    outputs.pop(i).backward(receive("B", i))
                x = inputs.pop(i)
                if not is_first:
                    grad = x.grad
                    pending.append((dist.isend(grad, dst=rank - 1, tag=2 * i + 1), grad))
        t0 = time.perf_counter()
        for work, _ in pending:
            work.wait()
        waited += time.perf_counter() - t0
        # Global-norm clipping over every stage's parameters (skytrain: clip_norm), then AdamW.
        grads = [q.grad for q in model.parameters() if q.grad is not None]
        sq = torch.stack([gr.pow(2).sum() for gr in grads]).sum().reshape(1)
        t0 = time.perf_counter()
        if a.comm == "tuned":
            sends = [dist.isend(sq, dst=r, tag=NORM_TAG) for r in range(p) if r != rank]
            for work in sends:
                work.wait()
            parts = []
            for r in range(p):
                if r != rank:
                    work, buf = early.pop(("N", r))
                    work.wait()
                parts.append(sq if r == rank else buf)
            sq = torch.stack(parts).sum().reshape(1)
        else:
            dist.all_reduce(sq)
        waited += time.perf_counter() - t0
        total = sq.sqrt().item()
        if a.clip > 0 and total > a.clip:
            for gr in grads:
                gr.mul_(a.clip / (total + 1e-6))
        for group in opt.param_groups:
            group["lr"] = learning_rate(a, step)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
        computes.append(times[-1] - waited)
        losses.append(loss_sum / m if is_last else float("nan"))
        if is_last:
            print(f"step {step + 1:4d}/{a.steps}  loss {loss_sum / m:.4f}  {times[-1]:.4f} s", file=sys.stderr, flush=True)
    # A step's time is the longest of the ranks' (skytrain's status does the same).
    all_times = [torch.zeros(a.steps, dtype=torch.float64) for _ in range(p)]
    dist.all_gather(all_times, torch.tensor(times, dtype=torch.float64))
    step_s = torch.stack(all_times).max(0).values.tolist()
    all_computes = [torch.zeros(a.steps, dtype=torch.float64) for _ in range(p)]
    dist.all_gather(all_computes, torch.tensor(computes, dtype=torch.float64))
    compute_s = [sum(c.tolist()[a.warmup:] or c.tolist()) / len(c.tolist()[a.warmup:] or c.tolist()) for c in all_computes]
    final_loss = torch.tensor([losses[-1] if is_last else 0.0])
    dist.broadcast(final_loss, src=p - 1)
    if rank == 0:
        steady = step_s[a.warmup:] or step_s
        mean = sum(steady) / len(steady)
        print(json.dumps({
            "system": "torch-gloo", "schedule": a.schedule, "comm": a.comm, "micro_batches": m, "stages": p,
            "batch": a.batch, "seq_len": a.seq_len, "steps": a.steps, "warmup_steps_excluded": a.warmup,
            "mean_step_s": mean, "compute_s_per_stage": compute_s, "tokens_per_s": a.batch * a.seq_len / mean,
            "threads": a.threads, "blas_threads": os.environ["OPENBLAS_NUM_THREADS"], "data": a.data or "random", "final_loss": final_loss.item(),
        }), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rank", type=int, help="run this rank only (else spawn every rank on this machine)")
    ap.add_argument("--world-size", type=int, default=2, help="pipeline stages (processes)")
    ap.add_argument("--master-addr", default="127.0.0.1")
    ap.add_argument("--master-port", type=int, default=29511)
    ap.add_argument("--ifname", default="", help="GLOO_SOCKET_IFNAME (the interface Gloo binds and advertises)")
    ap.add_argument("--schedule", choices=["gpipe", "1f1b"], default="1f1b")
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--comm", choices=["tuned", "naive"], default="tuned",
                    help="tuned: a step's receives posted at its start, norms exchanged point to point; "
                         "naive: dist.recv when needed, dist.all_reduce")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5, help="steps left out of the mean")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads per process")
    ap.add_argument("--data", default="", help="text file (byte tokens, skytrain's sampling); default: random ids")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-ff", type=int, default=512)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--lr", type=float, default=0.002)
    ap.add_argument("--min-lr", type=float, default=0.0002)
    ap.add_argument("--warmup-lr-steps", type=int, default=30)
    ap.add_argument("--clip", type=float, default=1.0)
    a = ap.parse_args()
    if a.batch % a.micro_batches:
        ap.error(f"--micro-batches {a.micro_batches} does not divide --batch {a.batch}")
    if a.layers < a.world_size:
        ap.error("fewer layers than stages")
    if a.rank is not None:
        run_rank(a)
        return
    children = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank", str(r)] + sys.argv[1:])
                for r in range(a.world_size)]
    sys.exit(max(c.wait() for c in children))


if __name__ == "__main__":
    main()
