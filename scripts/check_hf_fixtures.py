#!/usr/bin/env python3
"""Recomputes tests/fixtures/hf/*/expected.json from model.safetensors + config.json in float64
numpy, reading the safetensors file by hand: an executable form of tests/fixtures/hf/README.md
(names, layouts, formulas) for whoever writes the C++ loader. Needs only numpy (no torch).

  python3 scripts/check_hf_fixtures.py [tests/fixtures/hf]     (exit 0: every output matches)
"""
import json
import math
import os
import struct
import sys

import numpy as np


def load_safetensors(path):
    """name -> float64 array. Layout: u64 little-endian header length N, N bytes of JSON
    {name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__": {...}}, then the data;
    offsets count from byte 8 + N; F32 little-endian, row-major (C order)."""
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        begin, end = info["data_offsets"]
        data = np.frombuffer(blob[8 + n + begin:8 + n + end], dtype="<f4")
        out[name] = data.reshape(info["shape"]).astype(np.float64)
    return out


def layernorm(x, g, b, eps):  # biased variance, eps inside the square root
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def gelu_tanh(x):  # gelu_new
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):  # gelu
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def attention(q, k, v, heads, allowed):
    """q, k, v [B, T, C]; allowed [B, Tq, Tk] bool. Heads are contiguous slices of C."""
    B, T, C = q.shape
    d = C // heads
    split = lambda x: x.reshape(B, T, heads, d).transpose(0, 2, 1, 3)  # [B, H, T, d]
    s = split(q) @ split(k).transpose(0, 1, 3, 2) / math.sqrt(d)
    s = np.where(allowed[:, None], s, -np.inf)
    return (softmax(s) @ split(v)).transpose(0, 2, 1, 3).reshape(B, T, C)


def gpt2_hidden(w, cfg, ids):
    B, T = ids.shape
    C, eps = cfg["n_embd"], cfg["layer_norm_epsilon"]
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][np.arange(T)][None]
    causal = np.broadcast_to(np.tril(np.ones((T, T), bool)), (B, T, T))
    for i in range(cfg["n_layer"]):
        p = lambda n: w[f"transformer.h.{i}.{n}"]
        h = layernorm(x, p("ln_1.weight"), p("ln_1.bias"), eps)
        qkv = h @ p("attn.c_attn.weight") + p("attn.c_attn.bias")  # Conv1D: [in, out], y = x W + b
        q, k, v = qkv[..., :C], qkv[..., C:2 * C], qkv[..., 2 * C:]
        x = x + attention(q, k, v, cfg["n_head"], causal) @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        h = layernorm(x, p("ln_2.weight"), p("ln_2.bias"), eps)
        h = gelu_tanh(h @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"))
        x = x + h @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
    return layernorm(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)


def check_gpt2(w, cfg, e):
    h = gpt2_hidden(w, cfg, np.array(e["input_ids"]))
    assert "lm_head.weight" not in w
    return h @ w["transformer.wte.weight"].T, e["logits"]  # lm_head tied to wte, no bias


def check_gpt2_cls(w, cfg, e):
    ids = np.array(e["input_ids"])
    h = gpt2_hidden(w, cfg, ids)
    pos = np.arange(ids.shape[1])
    last = (pos * (ids != cfg["pad_token_id"])).argmax(-1)  # rightmost non-pad token
    assert list(last) == e["last_real_index"]
    return h[np.arange(ids.shape[0]), last] @ w["score.weight"].T, e["logits"]  # Linear, no bias


def check_bert(w, cfg, e):
    ids, mask = np.array(e["input_ids"]), np.array(e["attention_mask"])
    types = np.array(e["token_type_ids"])
    B, T = ids.shape
    eps, heads = cfg["layer_norm_eps"], cfg["num_attention_heads"]
    lin = lambda x, n: x @ w[n + ".weight"].T + w[n + ".bias"]  # nn.Linear: [out, in]
    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.token_type_embeddings.weight"][types]
         + w["embeddings.position_embeddings.weight"][np.arange(T)][None])
    x = layernorm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    allowed = np.broadcast_to(mask[:, None, :] != 0, (B, T, T))  # keys masked, every query kept
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        a = attention(lin(x, p + "attention.self.query"), lin(x, p + "attention.self.key"),
                      lin(x, p + "attention.self.value"), heads, allowed)
        x = layernorm(x + lin(a, p + "attention.output.dense"), w[p + "attention.output.LayerNorm.weight"],
                      w[p + "attention.output.LayerNorm.bias"], eps)  # post-norm
        h = gelu_erf(lin(x, p + "intermediate.dense"))
        x = layernorm(x + lin(h, p + "output.dense"), w[p + "output.LayerNorm.weight"],
                      w[p + "output.LayerNorm.bias"], eps)
    return x, e["last_hidden_state"]


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                      "..", "tests", "fixtures", "hf")
    worst = 0.0
    for name, check in (("gpt2", check_gpt2), ("gpt2-cls", check_gpt2_cls), ("bert", check_bert)):
        d = os.path.join(root, name)
        w = load_safetensors(os.path.join(d, "model.safetensors"))
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        with open(os.path.join(d, "expected.json")) as f:
            e = json.load(f)
        assert {k: list(v.shape) for k, v in w.items()} == e["tensors"], name
        got, want = check(w, cfg, e)
        err = float(np.abs(got - np.array(want)).max())
        print(f"{name}: output {list(got.shape)}, max |float64 numpy - transformers f32| = {err:.2e}")
        worst = max(worst, err)
    ok = worst < 1e-4
    print("all match" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
