#!/usr/bin/python3
"""What a 4-bit activation codec costs the demo model, computed independently of skytrain
(docs/EXPERIMENTS.md, "Four bits an activation on the demo model").

One process trains the demo GPT (bench/torch_pipeline.py's modules, skytrain's initialisation,
sampling, learning-rate schedule, AdamW and clipping, as bench/delayed_update_probe.py) with the
synchronous update, and passes the activation between block 1 and block 2 (the demo's stage
boundary) through a simulated codec: forward, the decoded value; backward, the gradient
unchanged (what the next stage computes its input gradient at and sends back). --backward
simulates a codec on that gradient too.

Codecs (64-element blocks of the flattened tensor, as compression/):
  none       the activation as it is
  q13        thirteen levels, scale = absmax / 6 rounded up to bfloat16 (compression/codecs/q13_codec.cpp)
  q13+rot    the same on each block after an orthonormal 64-point Hadamard rotation
  X@chan     X after dividing each channel by a per-channel scale both sides know without bytes:
             the root mean square of that channel over the previous decoded message (the first
             message goes without)
  X@chanex   the same with this message's own per-channel scale (an upper bound: it would
             cost d_model scales a message)
  X@ef       X with error feedback: the previous message's error is added before encoding
  X@pred     X on the activation less a prediction both ends can make: a table by token ID
             plus one by position, each an average of earlier decoded messages (every
             sixteenth; compression/codecs/predictive_codec.cpp's "X+pred")
  X@pred2    the same plus a table by (previous token ID, token ID)
  int4       fifteen levels a 32-block, float32 scale absmax / 7 (compression/codecs/int4_codec.cpp)
  int6       sixty-three levels a 64-block, scale absmax / 31 (not in compression/)
  bf16       each element rounded to bfloat16 (the control: a perturbation with no quality
             cost expected)
  t3sr, t3   ternary {-absmax, 0, absmax} a 64-block, stochastic (unbiased) or nearest
             rounding (not in compression/)

Usage: /usr/bin/python3 bench/activation_codec_probe.py --data web.txt --forward q13+rot@chan --seeds 1,2,3
"""
import argparse
import math
import os
import sys
import types

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_pipeline as tp  # noqa: E402
from delayed_update_probe import CLIP, run_seeds, validation_loss  # noqa: E402

BLOCK = 64
LEARN_EVERY = 16  # compression/kernels/prediction_kernels.h's kLearnEvery


def hadamard(n):
    h = torch.ones(1, 1)
    while h.size(0) < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / math.sqrt(n)


H = hadamard(BLOCK)


def bf16_up(x):
    """Rounds a positive float32 up to the next bfloat16 (as the codec stores its scale)."""
    r = x.to(torch.bfloat16).to(torch.float32)
    bumped = (r.view(torch.int32) + 0x10000).view(torch.float32)
    return torch.where(r < x, bumped, r)


def uniform(blocks, half, round_scale=lambda s: s):
    """Levels -half..half a row, scale = round_scale(absmax / half); an all-zero row stays zero."""
    scale = round_scale(blocks.abs().amax(1, keepdim=True) / half)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.clamp(torch.round(blocks / safe), -half, half) * scale


def q13(blocks):
    """compression/codecs/q13_codec.cpp: thirteen levels, the scale rounded up to bfloat16."""
    return uniform(blocks, 6, bf16_up)


def int4(blocks):
    """compression/codecs/int4_codec.cpp: 32-blocks, fifteen levels, a float32 scale absmax / 7."""
    return uniform(blocks.reshape(-1, 32), 7).reshape(blocks.shape)


def int6(blocks):
    """Sixty-three levels a 64-block, scale absmax / 31 (six bits an element)."""
    return uniform(blocks, 31)


STOCHASTIC = torch.Generator().manual_seed(11)


def t3sr(blocks):
    """Ternary with stochastic rounding: each element becomes sign(x) * absmax with probability
    |x| / absmax, else 0, so the decoded value is unbiased (about 1.6 bits an element)."""
    scale = bf16_up(blocks.abs().amax(1, keepdim=True))
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    keep = torch.rand(blocks.shape, generator=STOCHASTIC) < blocks.abs() / safe
    return torch.where(keep, torch.sign(blocks) * scale, torch.zeros_like(blocks))


def t3(blocks):
    """Ternary, nearest: sign(x) * absmax where |x| > absmax / 2, else 0 (biased)."""
    scale = bf16_up(blocks.abs().amax(1, keepdim=True))
    return torch.where(blocks.abs() * 2 > scale, torch.sign(blocks) * scale, torch.zeros_like(blocks))


def bf16(blocks):
    """Round to nearest bfloat16 (compression/'s bf16): the control, 2x, eight significant bits."""
    return blocks.to(torch.bfloat16).to(torch.float32)


BASES = {"q13": q13, "int4": int4, "int6": int6, "t3sr": t3sr, "t3": t3, "bf16": bf16}


class Codec:
    """One direction's codec, with the state both ends would keep (the previous message's scales)."""

    def __init__(self, spec):
        self.base, _, self.chan = spec.partition("@")
        self.rotated = self.base.endswith("+rot")
        name = self.base.removesuffix("+rot")
        if self.base != "none" and name not in BASES:
            raise SystemExit(f"unknown codec {self.base} (known: none, {', '.join(BASES)}, each with +rot)")
        self.quantise = BASES.get(name)
        self.previous = None  # per-channel RMS of the previous decoded message
        self.residual = None  # error feedback's carried error
        self.ids = None  # @pred: this message's token IDs (the receiver knows them from its targets)
        self.by_token = self.by_position = None  # @pred: the shared predictor's tables
        self.energy = []  # @pred: |x - prediction|^2 / |x|^2 of each message
        self.messages = 0  # @pred: the tables learn from every LEARN_EVERY-th message

    def __call__(self, x):
        if self.base == "none":
            return x
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        scale = None
        if self.chan == "chanex":
            scale = flat.pow(2).mean(0).sqrt().clamp_min(1e-12)
        elif self.chan == "chan":
            scale = self.previous
        if scale is not None:
            flat = flat / scale
        if self.chan == "ef" and self.residual is not None and self.residual.shape == flat.shape:
            flat = flat + self.residual
        prediction = None
        if self.chan.startswith("pred"):
            prediction = self.predict(x.shape).reshape(flat.shape)
            self.energy.append((flat - prediction).pow(2).sum().item() / max(flat.pow(2).sum().item(), 1e-30))
            flat = flat - prediction
        blocks = flat.reshape(-1, BLOCK)
        decoded = self.quantise(blocks @ H) @ H.t() if self.rotated else self.quantise(blocks)
        decoded = decoded.reshape(flat.shape)
        if self.chan == "ef":
            self.residual = flat - decoded
        if prediction is not None:
            decoded = decoded + prediction
            if self.messages % LEARN_EVERY == 0:
                self.learn(decoded.reshape(shape))
            self.messages += 1
        if scale is not None:
            decoded = decoded * scale
        if self.chan == "chan":
            self.previous = decoded.pow(2).mean(0).sqrt().clamp_min(1e-12)
        return decoded.reshape(shape)


    def pairs(self):
        """@pred2: each token's index with the token before it (0 before the first)."""
        previous = torch.cat([torch.zeros_like(self.ids[:, :1]), self.ids[:, :-1]], 1)
        return previous * 256 + self.ids

    def predict(self, shape):
        """@pred: by_token[id] + by_position[t], both learnt from decoded messages only, so the
        sender and the receiver hold the same tables; @pred2 adds by_pair[previous id, id]."""
        if self.by_token is None:
            self.by_token = torch.zeros(256, shape[-1])
            self.by_position = torch.zeros(shape[1], shape[-1])
            self.by_pair = torch.zeros(256 * 256, shape[-1]) if self.chan == "pred2" else None
        out = self.by_token[self.ids] + self.by_position[: shape[1]].unsqueeze(0)
        if self.by_pair is not None:
            out = out + self.by_pair[self.pairs()]
        return out

    def learn(self, decoded, rate=0.5):
        """Each table in turn moves half way to the mean, over its key, of what the tables
        before it leave of the decoded residual (compression/codecs/predictive_codec.cpp's update)."""
        d = decoded.shape[-1]
        t = decoded.shape[1]
        rest = (decoded - self.predict(decoded.shape)).reshape(-1, d)

        def absorb(table, keys, size):
            sums = torch.zeros(size, d).index_add_(0, keys, rest)
            counts = torch.zeros(size).index_add_(0, keys, torch.ones(keys.numel()))
            seen = counts > 0
            step = torch.zeros(size, d)
            step[seen] = rate * sums[seen] / counts[seen].unsqueeze(1)
            table += step
            return rest - step[keys]

        rest = absorb(self.by_token, self.ids.reshape(-1), 256)
        positions = torch.arange(t).repeat(decoded.shape[0])
        rest = absorb(self.by_position[:t], positions, t)
        if self.by_pair is not None:
            absorb(self.by_pair, self.pairs().reshape(-1), 256 * 256)


class Boundary(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, forward, backward):
        ctx.backward = backward
        return forward(x.detach())

    @staticmethod
    def backward(ctx, grad):
        return ctx.backward(grad), None, None


class Split(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.first = tp.Slice(a, 0, a.cut)
        self.second = tp.Slice(a, a.cut, a.layers)
        self.forward_codec = Codec(a.forward)
        self.backward_codec = Codec(a.backward)
        self.coded = True

    def forward(self, x):
        h = self.first(x)
        self.forward_codec.ids = x
        self.backward_codec.ids = x
        if self.coded:
            h = Boundary.apply(h, self.forward_codec, self.backward_codec)
        return self.second(h)


def train(a, seed):
    model = Split(a)
    # Both slices initialised as one model, so seeds match delayed_update_probe.py's.
    whole = tp.Slice(a, 0, a.layers)
    tp.initialise(whole, a.layers, seed)
    source = dict(whole.named_parameters())
    with torch.no_grad():
        for name, p in model.first.named_parameters():
            p.copy_(source[name])
        for name, p in model.second.named_parameters():
            p.copy_(source[name])
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.95), weight_decay=0.01)
    data = tp.Corpus(a.data, a.seq_len, seed)
    for step in range(a.steps):
        for group in optimizer.param_groups:
            group["lr"] = tp.learning_rate(a, step)
        optimizer.zero_grad()
        for first in range(0, a.batch, a.micro):
            x, y = data.batch(step, first, a.micro)
            loss = F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1)) * a.micro / a.batch
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, CLIP)
        optimizer.step()
    model.coded = a.eval_coded
    for direction, codec in (("activation", model.forward_codec), ("gradient", model.backward_codec)):
        energy = codec.energy
        if not energy:
            continue
        marks = [0, len(energy) // 4, len(energy) // 2, len(energy) - 1]
        print(f"  {direction}'s residual energy after the prediction: " +
              ", ".join(f"message {i}: {energy[i]:.3f}" for i in marks), flush=True)
    return validation_loss(model, a.data)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--forward", default="none")
    p.add_argument("--backward", default="none")
    p.add_argument("--eval-coded", action="store_true", help="validate through the codec too")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seeds", default="1,2,3")
    a = p.parse_args()
    a.cut = 2  # the demo's stage boundary: blocks [0, 2) and [2, 4)
    run_seeds(a, train)


if __name__ == "__main__":
    main()
