#!/usr/bin/env python3
"""Independent Hugging Face reference for skytrain's tests (run it with Debian's /usr/bin/python3).

Written only from the published transformers semantics of LlamaForCausalLM, GPT2LMHeadModel and
BertForMaskedLM, never from skytrain's C++ code, so a test that agrees with it does not agree by
construction.
Needs only torch, numpy and the standard library: safetensors files are read and written by hand.

  make     --family {llama,gpt2,bert} --out DIR --seed S [--vocab 96 --hidden 32 --layers 3 --heads 4
           --kv-heads 2 --intermediate 48 --max-pos 64 --rope-theta 10000 --eps E --tie
           --dtype float32|bfloat16|float16 --shards N --bare-names --type-vocab 2 --pooler]
      A small random checkpoint in HF layout: DIR/config.json and DIR/model.safetensors, or with
      --shards N>1 DIR/model-0000k-of-0000N.safetensors plus DIR/model.safetensors.index.json.
      Values come from torch.Generator(seed S) in the canonical order below, in float32
      (weights and biases N(0, 0.1), norm weights 1 + N(0, 0.1)), then cast to --dtype.
      --eps defaults to 1e-5 (llama rms_norm_eps, gpt2 layer_norm_epsilon), 1e-12 for bert.
      bert is BertForMaskedLM as save_pretrained writes it (the decoder weight, tied to the word
      embeddings, is not stored; its bias is cls.predictions.bias); --pooler adds the
      bert.pooler.dense of BertModel / BertForSequenceClassification, drawn after every other
      tensor so that it changes none of them.
  logits   --dir DIR --tokens "3,17,5;9,2,4" --out FILE [--features]
      The float64 forward of DIR's model on B sequences of equal length T (';' between them,
      positions 0..T-1). FILE is safetensors: "logits" F32 [B,T,V] and "tokens" I64 [B,T].
      bert: the MLM logits, bidirectional, token_type_ids 0, no padding mask; with --features
      "logits" is instead the last hidden state [B,T,d] (BertModel's last_hidden_state).
  compare  --a DIR --b DIR
      Exit 0 and print "same: N tensors" when both directories hold the same config fields
      (torch_dtype and one-sided fields are only reported), the same tensor names (a tied model's
      lm_head.weight equal to its embedding counts as absent; so do bert's
      cls.predictions.decoder.weight equal to the word embeddings and cls.predictions.decoder.bias
      equal to cls.predictions.bias; bert's old LayerNorm.gamma / .beta names count as .weight /
      .bias), with equal dtypes, shapes and bytes, however sharded, and each has a layout
      from_pretrained would load; otherwise exit 1 and list every difference. --loose-names also
      treats gpt2's bare and "transformer." names alike and ignores the attn.bias /
      attn.masked_bias buffers, and treats bert's bare and "bert." names alike and ignores the
      embeddings.position_ids buffer.

safetensors: 8-byte little-endian header length N; N bytes of JSON {name: {"dtype", "shape",
"data_offsets": [begin, end]}, "__metadata__": {"format": "pt"}} padded with spaces so that 8+N
is a multiple of 8; then the raw little-endian data, tensors contiguous in header order.
"""
import argparse, json, math, os, struct, sys
import numpy as np
import torch

# ---------------------------------------------------------------- safetensors by hand
DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64,
          "F64": torch.float64, "I32": torch.int32}
NAME_OF = {v: k for k, v in DTYPES.items()}
SIZE = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "F64": 8, "I32": 4}


def tensor_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:  # numpy has no bf16: take the raw 16-bit patterns from torch
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    return t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()


def write_safetensors(path, tensors):
    """tensors: list of (name, torch tensor), written in that order."""
    header, blobs, off = {}, [], 0
    for name, t in tensors:
        b = tensor_bytes(t)
        header[name] = {"dtype": NAME_OF[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-(8 + len(h))) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    """-> {name: (dtype string, shape list, raw bytes)}; checks that the data is tiled exactly."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n:]
    out, spans = {}, []
    for name, e in header.items():
        b, end = e["data_offsets"]
        want = SIZE[e["dtype"]] * math.prod(e["shape"])
        if end - b != want:
            raise ValueError(f"{path}: {name} spans {end - b} bytes, its shape needs {want}")
        out[name] = (e["dtype"], list(e["shape"]), body[b:end])
        spans.append((b, end))
    pos = 0
    for b, end in sorted(spans):
        if b != pos:
            raise ValueError(f"{path}: data not contiguous at byte {pos}")
        pos = end
    if pos != len(body):
        raise ValueError(f"{path}: data is {len(body)} bytes, tensors cover {pos}")
    return out


def to_tensor(dtype, shape, raw):
    if dtype == "BF16":
        return torch.from_numpy(np.frombuffer(raw, "<i2").copy()).view(torch.bfloat16).reshape(shape)
    npd = {"F32": "<f4", "F16": "<f2", "I64": "<i8", "F64": "<f8", "I32": "<i4"}[dtype]
    return torch.from_numpy(np.frombuffer(raw, npd).copy()).reshape(shape)


def load_dir(d):
    """Like from_pretrained: model.safetensors if present, else the index and its shards.
    -> (config, {name: (dtype, shape, raw)}, [layout problems])."""
    cfg = json.load(open(os.path.join(d, "config.json")))
    single, index = os.path.join(d, "model.safetensors"), os.path.join(d, "model.safetensors.index.json")
    problems, tensors = [], {}
    if os.path.exists(single):
        if os.path.exists(index):
            problems.append(f"{d}: both model.safetensors and an index (from_pretrained takes the single file)")
        return cfg, read_safetensors(single), problems
    if not os.path.exists(index):
        raise FileNotFoundError(f"{d}: neither model.safetensors nor model.safetensors.index.json")
    idx = json.load(open(index))
    wmap = idx["weight_map"]
    for f in sorted(set(wmap.values())):
        p = os.path.join(d, f)
        if not os.path.exists(p):
            problems.append(f"{d}: index names {f}, which is missing")
            continue
        for name, v in read_safetensors(p).items():
            if wmap.get(name) != f:
                problems.append(f"{d}: {name} is in {f} but the weight_map " +
                                (f"says {wmap[name]}" if name in wmap else "lacks it"))
            tensors[name] = v
    problems += [f"{d}: weight_map names {n} but {f} lacks it" for n, f in wmap.items()
                 if n not in tensors and os.path.exists(os.path.join(d, f))]
    total = sum(len(v[2]) for v in tensors.values())
    if idx.get("metadata", {}).get("total_size") != total:
        problems.append(f"{d}: total_size {idx.get('metadata', {}).get('total_size')} != {total} tensor bytes")
    return cfg, tensors, problems


# ---------------------------------------------------------------- make
def make(a):
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[a.dtype]
    g = torch.Generator().manual_seed(a.seed)
    w = lambda *s: torch.randn(*s, generator=g) * 0.1           # weights and biases
    nw = lambda n: 1 + torch.randn(n, generator=g) * 0.1         # norm weights
    d, V, L, I, P = a.hidden, a.vocab, a.layers, a.intermediate, a.max_pos
    eps = a.eps if a.eps is not None else (1e-12 if a.family == "bert" else 1e-5)
    units = []  # canonical order; each unit (a layer, or one other tensor) is kept in one shard
    if a.family == "llama":
        H, KV = a.heads, a.kv_heads
        hd = d // H
        assert d % H == 0 and H % KV == 0, "hidden % heads and heads % kv-heads must be 0"
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V,
               "hidden_size": d, "intermediate_size": I, "num_hidden_layers": L, "num_attention_heads": H,
               "num_key_value_heads": KV, "max_position_embeddings": P, "rms_norm_eps": eps,
               "rope_theta": a.rope_theta, "tie_word_embeddings": a.tie, "hidden_act": "silu",
               "attention_bias": False, "torch_dtype": a.dtype}
        units.append([("model.embed_tokens.weight", w(V, d))])
        for i in range(L):
            p = f"model.layers.{i}."
            units.append([(p + "input_layernorm.weight", nw(d)),
                          (p + "self_attn.q_proj.weight", w(H * hd, d)), (p + "self_attn.k_proj.weight", w(KV * hd, d)),
                          (p + "self_attn.v_proj.weight", w(KV * hd, d)), (p + "self_attn.o_proj.weight", w(d, H * hd)),
                          (p + "post_attention_layernorm.weight", nw(d)),
                          (p + "mlp.gate_proj.weight", w(I, d)), (p + "mlp.up_proj.weight", w(I, d)),
                          (p + "mlp.down_proj.weight", w(d, I))])
        units.append([("model.norm.weight", nw(d))])
        if not a.tie:
            units.append([("lm_head.weight", w(V, d))])
    elif a.family == "bert":
        H, TV, Ieff = a.heads, a.type_vocab, I if I else 4 * d
        assert d % H == 0, "hidden % heads must be 0"
        cfg = {"architectures": ["BertForMaskedLM"], "model_type": "bert", "vocab_size": V, "hidden_size": d,
               "num_hidden_layers": L, "num_attention_heads": H, "intermediate_size": Ieff, "hidden_act": "gelu",
               "max_position_embeddings": P, "type_vocab_size": TV, "layer_norm_eps": eps,
               "position_embedding_type": "absolute", "tie_word_embeddings": True, "torch_dtype": a.dtype}
        e = "bert.embeddings."
        units += [[(e + "word_embeddings.weight", w(V, d))], [(e + "position_embeddings.weight", w(P, d))],
                  [(e + "token_type_embeddings.weight", w(TV, d))],
                  [(e + "LayerNorm.weight", nw(d)), (e + "LayerNorm.bias", w(d))]]
        for i in range(L):
            p = f"bert.encoder.layer.{i}."
            u = [(p + f"attention.self.{n}.{k}", w(d, d) if k == "weight" else w(d))
                 for n in ("query", "key", "value") for k in ("weight", "bias")]
            u += [(p + "attention.output.dense.weight", w(d, d)), (p + "attention.output.dense.bias", w(d)),
                  (p + "attention.output.LayerNorm.weight", nw(d)), (p + "attention.output.LayerNorm.bias", w(d)),
                  (p + "intermediate.dense.weight", w(Ieff, d)), (p + "intermediate.dense.bias", w(Ieff)),
                  (p + "output.dense.weight", w(d, Ieff)), (p + "output.dense.bias", w(d)),
                  (p + "output.LayerNorm.weight", nw(d)), (p + "output.LayerNorm.bias", w(d))]
            units.append(u)
        c = "cls.predictions."
        units += [[(c + "transform.dense.weight", w(d, d)), (c + "transform.dense.bias", w(d)),
                   (c + "transform.LayerNorm.weight", nw(d)), (c + "transform.LayerNorm.bias", w(d))],
                  [(c + "bias", w(V))]]
        if a.pooler:  # drawn last, stored where BertModel has it: after the encoder
            units.insert(4 + L, [("bert.pooler.dense.weight", w(d, d)), ("bert.pooler.dense.bias", w(d))])
    else:
        Ieff = I if I else 4 * d
        cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_embd": d,
               "n_layer": L, "n_head": a.heads, "n_positions": P, "n_ctx": P, "n_inner": I if I else None,
               "layer_norm_epsilon": eps, "activation_function": "gelu_new", "tie_word_embeddings": True,
               "torch_dtype": a.dtype}
        t = "" if a.bare_names else "transformer."
        units += [[(t + "wte.weight", w(V, d))], [(t + "wpe.weight", w(P, d))]]
        for i in range(L):
            p = f"{t}h.{i}."
            u = [(p + "ln_1.weight", nw(d)), (p + "ln_1.bias", w(d)),
                 (p + "attn.c_attn.weight", w(d, 3 * d)), (p + "attn.c_attn.bias", w(3 * d)),
                 (p + "attn.c_proj.weight", w(d, d)), (p + "attn.c_proj.bias", w(d)),
                 (p + "ln_2.weight", nw(d)), (p + "ln_2.bias", w(d)),
                 (p + "mlp.c_fc.weight", w(d, Ieff)), (p + "mlp.c_fc.bias", w(Ieff)),
                 (p + "mlp.c_proj.weight", w(Ieff, d)), (p + "mlp.c_proj.bias", w(d))]
            if a.bare_names:  # the old openai-community/gpt2 file also stores the causal-mask buffer
                u.insert(2, (p + "attn.bias", torch.tril(torch.ones(P, P)).view(1, 1, P, P)))
            units.append(u)
        units += [[(t + "ln_f.weight", nw(d))], [(t + "ln_f.bias", w(d))]]
    units = [[(n, x.to(torch_dtype)) for n, x in u] for u in units]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:  # as save_pretrained writes it
        f.write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    N = a.shards
    if N <= 1:
        write_safetensors(os.path.join(a.out, "model.safetensors"), [nt for u in units for nt in u])
        return
    groups = split(units, N) or split([[nt] for u in units for nt in u], N)
    if not groups:
        sys.exit(f"cannot split {sum(map(len, units))} tensors into {N} shards")
    wmap, total = {}, 0
    for k, grp in enumerate(groups):
        fname = f"model-{k + 1:05d}-of-{N:05d}.safetensors"
        write_safetensors(os.path.join(a.out, fname), grp)
        for n, x in grp:
            wmap[n] = fname
            total += x.numel() * x.element_size()
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        f.write(json.dumps({"metadata": {"total_size": total}, "weight_map": wmap}, indent=2, sort_keys=True) + "\n")


def split(units, N):
    """Units in order into N non-empty groups of roughly equal bytes (a unit goes to the shard
    holding its byte midpoint; by count if that leaves a shard empty); None if fewer units than N."""
    if len(units) < N:
        return None
    size = [sum(x.numel() * x.element_size() for _, x in u) for u in units]
    total, c, which = sum(size), 0, []
    for s in size:
        which.append(min(N - 1, int((c + s / 2) * N // total)))
        c += s
    if len(set(which)) < N:
        which = [i * N // len(units) for i in range(len(units))]
    return [[nt for u, k in zip(units, which) if k == j for nt in u] for j in range(N)]


# ---------------------------------------------------------------- the reference forwards (float64)
def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def layernorm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = (x - mu).pow(2).mean(-1, keepdim=True)  # biased variance, as torch.nn.LayerNorm
    return (x - mu) / torch.sqrt(var + eps) * w + b


def attention(q, k, v, causal=True):
    """q, k, v: [B, heads, T, hd] -> [B, T, heads*hd]; softmax(q k^T / sqrt(hd)) with a causal mask
    (none with causal=False: every position attends to every position)."""
    T, hd = q.shape[-2], q.shape[-1]
    s = q @ k.transpose(-1, -2) / math.sqrt(hd)
    if causal:
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    o = torch.softmax(s, -1) @ v
    return o.transpose(1, 2).reshape(q.shape[0], T, -1)


def llama_forward(cfg, W, ids):
    assert not cfg.get("rope_scaling") and not cfg.get("attention_bias") and not cfg.get("mlp_bias")
    assert cfg.get("hidden_act", "silu") == "silu"
    d, H = cfg["hidden_size"], cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads") or H
    hd = cfg.get("head_dim") or d // H
    eps, theta = cfg["rms_norm_eps"], cfg.get("rope_theta", 10000.0)
    B, T = ids.shape
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), -1)
    cos, sin = emb.cos(), emb.sin()                                   # [T, hd]
    rotate_half = lambda x: torch.cat((-x[..., hd // 2:], x[..., :hd // 2]), -1)
    rope = lambda x: x * cos + rotate_half(x) * sin
    h = W["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = rmsnorm(h, W[p + "input_layernorm.weight"], eps)
        heads = lambda t, n: t.view(B, T, n, hd).transpose(1, 2)      # [B, n, T, hd]
        q = rope(heads(x @ W[p + "self_attn.q_proj.weight"].T, H))
        k = rope(heads(x @ W[p + "self_attn.k_proj.weight"].T, KV))
        v = heads(x @ W[p + "self_attn.v_proj.weight"].T, KV)
        k, v = (t.repeat_interleave(H // KV, dim=1) for t in (k, v))  # kv head j serves q heads j*rep..
        h = h + attention(q, k, v) @ W[p + "self_attn.o_proj.weight"].T
        x = rmsnorm(h, W[p + "post_attention_layernorm.weight"], eps)
        gate, up = x @ W[p + "mlp.gate_proj.weight"].T, x @ W[p + "mlp.up_proj.weight"].T
        h = h + (torch.nn.functional.silu(gate) * up) @ W[p + "mlp.down_proj.weight"].T
    h = rmsnorm(h, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else W["lm_head.weight"]
    return h @ head.T


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def gpt2_forward(cfg, W, ids):
    assert cfg.get("activation_function", "gelu_new") == "gelu_new"
    assert cfg.get("scale_attn_weights", True) and not cfg.get("scale_attn_by_inverse_layer_idx", False)
    W = {n[len("transformer."):] if n.startswith("transformer.") else n: x for n, x in W.items()}
    d, H, eps = cfg["n_embd"], cfg["n_head"], cfg.get("layer_norm_epsilon", 1e-5)
    B, T = ids.shape
    assert T <= cfg["n_positions"], "sequence longer than n_positions"
    h = W["wte.weight"][ids] + W["wpe.weight"][torch.arange(T)]
    heads = lambda t: t.view(B, T, H, d // H).transpose(1, 2)
    for i in range(cfg["n_layer"]):
        p = f"h.{i}."
        a = layernorm(h, W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps)
        qkv = a @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]   # Conv1D: x @ W + b
        q, k, v = qkv.split(d, dim=-1)
        o = attention(heads(q), heads(k), heads(v))
        h = h + o @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        m = layernorm(h, W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
        m = gelu_new(m @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"])
        h = h + m @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    h = layernorm(h, W["ln_f.weight"], W["ln_f.bias"], eps)
    tied = cfg.get("tie_word_embeddings", True) or "lm_head.weight" not in W
    return h @ (W["wte.weight"] if tied else W["lm_head.weight"]).T


def gelu_exact(x):  # transformers' "gelu" (GELUActivation): the erf form
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


LEGACY_NORM_NAMES = {".LayerNorm.gamma": ".LayerNorm.weight", ".LayerNorm.beta": ".LayerNorm.bias"}


def bert_names(tensors, prefix=True):
    """bert: the old LayerNorm.gamma / .beta names as .weight / .bias (as from_pretrained renames
    them); with prefix, a bare BertModel's names (embeddings., encoder., pooler.) get "bert."."""
    out = {}
    for n, v in tensors.items():
        for old, new in LEGACY_NORM_NAMES.items():
            if n.endswith(old):
                n = n[:-len(old)] + new
        if prefix and n.startswith(("embeddings.", "encoder.", "pooler.")):
            n = "bert." + n
        out[n] = v
    return out


def bert_forward(cfg, W, ids, features=False):
    """BertForMaskedLM's MLM logits [B,T,V], or with features the encoder's last hidden state [B,T,d]."""
    assert cfg.get("hidden_act", "gelu") == "gelu"
    assert cfg.get("position_embedding_type", "absolute") == "absolute"
    W = bert_names(W)
    d, H, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg.get("layer_norm_eps", 1e-12)
    B, T = ids.shape
    assert T <= cfg["max_position_embeddings"], "sequence longer than max_position_embeddings"
    lin = lambda x, n: x @ W[n + ".weight"].T + W[n + ".bias"]        # nn.Linear: [out, in]
    norm = lambda x, n: layernorm(x, W[n + ".weight"], W[n + ".bias"], eps)
    heads = lambda t: t.view(B, T, H, d // H).transpose(1, 2)
    e = "bert.embeddings."
    h = W[e + "word_embeddings.weight"][ids] + W[e + "token_type_embeddings.weight"][0]  # token_type_ids 0
    h = norm(h + W[e + "position_embeddings.weight"][torch.arange(T)], e + "LayerNorm")
    for i in range(cfg["num_hidden_layers"]):                           # post-norm layers
        p = f"bert.encoder.layer.{i}."
        q, k, v = (heads(lin(h, p + "attention.self." + n)) for n in ("query", "key", "value"))
        h = norm(h + lin(attention(q, k, v, causal=False), p + "attention.output.dense"),
                 p + "attention.output.LayerNorm")
        m = gelu_exact(lin(h, p + "intermediate.dense"))
        h = norm(h + lin(m, p + "output.dense"), p + "output.LayerNorm")
    if features:
        return h
    c = "cls.predictions."
    t = norm(gelu_exact(lin(h, c + "transform.dense")), c + "transform.LayerNorm")
    tied = cfg.get("tie_word_embeddings", True) or c + "decoder.weight" not in W
    return t @ W[e + "word_embeddings.weight" if tied else c + "decoder.weight"].T + W[c + "bias"]


def logits(a):
    cfg, raw, problems = load_dir(a.dir)
    for p in problems:
        print("warning:", p, file=sys.stderr)
    # every tensor -> float32 (what the checkpoint means), then float64 for the arithmetic
    W = {n: to_tensor(*v).to(torch.float32).to(torch.float64) for n, v in raw.items()}
    rows = [[int(t) for t in s.split(",")] for s in a.tokens.split(";")]
    assert len({len(r) for r in rows}) == 1, "sequences must have equal length"
    ids = torch.tensor(rows, dtype=torch.int64)
    assert 0 <= ids.min() and ids.max() < cfg["vocab_size"], "token id out of range"
    fwd = {"llama": llama_forward, "gpt2": gpt2_forward, "bert": bert_forward}[cfg["model_type"]]
    if a.features and fwd is not bert_forward:
        sys.exit("--features is for bert only")
    with torch.no_grad():
        out = bert_forward(cfg, W, ids, features=True) if a.features else fwd(cfg, W, ids)
    write_safetensors(a.out, [("logits", out.to(torch.float32)), ("tokens", ids)])


# ---------------------------------------------------------------- compare
def canonical(cfg, tensors, loose):
    t = dict(tensors)
    if cfg.get("model_type") == "llama" and cfg.get("tie_word_embeddings", False):
        if "lm_head.weight" in t and t["lm_head.weight"] == t.get("model.embed_tokens.weight"):
            del t["lm_head.weight"]
    if cfg.get("model_type") == "gpt2":
        if loose:
            t = {n[len("transformer."):] if n.startswith("transformer.") else n: v for n, v in t.items()
                 if not n.endswith((".attn.bias", ".attn.masked_bias"))}
        if cfg.get("tie_word_embeddings", True):
            wte = t.get("wte.weight", t.get("transformer.wte.weight"))
            if "lm_head.weight" in t and t["lm_head.weight"] == wte:
                del t["lm_head.weight"]
    if cfg.get("model_type") == "bert":
        t = bert_names(t, prefix=False)
        c, word = "cls.predictions.", t.get("bert.embeddings.word_embeddings.weight")
        if cfg.get("tie_word_embeddings", True) and c + "decoder.weight" in t and t[c + "decoder.weight"] == word:
            del t[c + "decoder.weight"]
        if c + "decoder.bias" in t and t[c + "decoder.bias"] == t.get(c + "bias"):  # one parameter
            del t[c + "decoder.bias"]
        if loose:
            t = {n[len("bert."):] if n.startswith("bert.") else n: v for n, v in t.items()
                 if n not in ("embeddings.position_ids", "bert.embeddings.position_ids")}
    return t


def compare(a):
    (ca, ta, pa), (cb, tb, pb) = load_dir(a.a), load_dir(a.b)
    diffs = pa + pb
    for k in sorted(set(ca) | set(cb)):
        if (k == "torch_dtype" and ca.get(k) != cb.get(k)) or (k in ca) != (k in cb):
            print(f"note: config {k}: {ca.get(k, '<absent>')!r} vs {cb.get(k, '<absent>')!r}")
        elif k != "torch_dtype" and ca[k] != cb[k]:
            diffs.append(f"config {k}: {ca[k]!r} vs {cb[k]!r}")
    ta, tb = canonical(ca, ta, a.loose_names), canonical(cb, tb, a.loose_names)
    diffs += [f"tensor {n} only in {a.a}" for n in sorted(set(ta) - set(tb))]
    diffs += [f"tensor {n} only in {a.b}" for n in sorted(set(tb) - set(ta))]
    for n in sorted(set(ta) & set(tb)):
        (da, sa, ra), (db, sb, rb) = ta[n], tb[n]
        if (da, sa) != (db, sb):
            diffs.append(f"tensor {n}: {da}{sa} vs {db}{sb}")
        elif ra != rb:
            x, y = to_tensor(da, sa, ra).float(), to_tensor(db, sb, rb).float()
            diffs.append(f"tensor {n}: values differ (max |a-b| = {(x - y).abs().max().item():.3g})")
    if diffs:
        print("\n".join(diffs))
        sys.exit(1)
    print(f"same: {len(ta)} tensors")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make", help="write a small random HF checkpoint")
    m.add_argument("--family", choices=["llama", "gpt2", "bert"], required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--seed", type=int, required=True)
    for flag, typ, dflt in [("--vocab", int, 96), ("--hidden", int, 32), ("--layers", int, 3),
                            ("--heads", int, 4), ("--kv-heads", int, 2), ("--intermediate", int, 48),
                            ("--max-pos", int, 64), ("--rope-theta", float, 10000.0), ("--eps", float, None),
                            ("--shards", int, 1), ("--type-vocab", int, 2)]:
        m.add_argument(flag, type=typ, default=dflt)
    m.add_argument("--tie", action="store_true", help="llama: tie lm_head to embed_tokens (gpt2 always is)")
    m.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    m.add_argument("--bare-names", action="store_true", help="gpt2: no 'transformer.' prefix, with attn.bias buffers")
    m.add_argument("--pooler", action="store_true", help="bert: also write bert.pooler.dense (BertModel's pooler)")
    lg = sub.add_parser("logits", help="float64 reference logits of a checkpoint")
    lg.add_argument("--dir", required=True)
    lg.add_argument("--tokens", required=True, help='e.g. "3,17,5;9,2,4" (sequences of equal length)')
    lg.add_argument("--out", required=True)
    lg.add_argument("--features", action="store_true", help="bert: the last hidden state [B,T,d] instead of logits")
    c = sub.add_parser("compare", help="are two HF directories the same model, whatever the sharding")
    c.add_argument("--a", required=True)
    c.add_argument("--b", required=True)
    c.add_argument("--loose-names", action="store_true", help="gpt2/bert: bare == prefixed names, ignore buffers")
    a = ap.parse_args()
    {"make": make, "logits": logits, "compare": compare}[a.cmd](a)


if __name__ == "__main__":
    main()
