#!/usr/bin/env python3
"""Writes the small Hugging Face fixtures under tests/fixtures/hf/ (run by hand, not by CI).

  python3 -m venv /tmp/venv-hf
  /tmp/venv-hf/bin/pip install torch transformers safetensors numpy
  /tmp/venv-hf/bin/python scripts/make_hf_fixtures.py [--out tests/fixtures/hf]

Made with Python 3.11.7, torch 2.15.0 (CPU), transformers 5.24.0, safetensors 0.8.0, numpy 2.4.6
(the script prints the versions it runs with and writes them into every expected.json). Other
versions may lay out or compute differently: diff the expected.json files after regenerating.

Three tiny f32 models, each saved with save_pretrained(safe_serialization=True) (model.safetensors
+ config.json) next to an expected.json with the inputs, the outputs computed by transformers in
eval mode (no dropout, eager attention) and every tensor name -> shape in model.safetensors:
  gpt2/      GPT2LMHeadModel, logits [2, 8, 64]
  gpt2-cls/  GPT2ForSequenceClassification (4 labels, pad id 0, right-padded rows), logits [2, 4]
  bert/      BertModel without pooler, padded second row, last_hidden_state [2, 8, 32]
  bert-cls/  BertForSequenceClassification (1 layer, pooler, 4 labels), padded second row,
             logits [2, 4]
Parameters are re-drawn from a seeded generator after construction (biases, LayerNorm gains and
offsets included) so that a loader which swaps, transposes or drops a tensor changes the outputs.
tests/fixtures/hf/README.md documents the names, layouts and formulas.
"""
import argparse
import json
import os
import sys

import numpy as np
import safetensors
import safetensors.torch
import torch
import transformers
from transformers import (BertConfig, BertForSequenceClassification, BertModel, GPT2Config,
                          GPT2ForSequenceClassification, GPT2LMHeadModel)

SEED = 1234


def versions():
    return {"python": sys.version.split()[0], "torch": torch.__version__,
            "transformers": transformers.__version__, "safetensors": safetensors.__version__,
            "numpy": np.__version__}


class F32:
    """A tensor that to_json writes as nested lists of the shortest decimal for each float32 value
    (numpy's round-trip repr): parsed as double and cast to float it gives back the exact value."""

    def __init__(self, t):
        self.array = t.detach().to(torch.float32).cpu().numpy()


def to_json(v):
    if isinstance(v, F32):
        return to_json_f32(v.array)
    if isinstance(v, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{to_json(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",".join(to_json(x) for x in v) + "]"
    return json.dumps(v)


def to_json_f32(a):
    if a.ndim == 0:
        assert np.isfinite(a), "non-finite output"
        return str(np.float32(a))
    return "[" + ",".join(to_json_f32(x) for x in a) + "]"


def randomize(model, gen):
    """Redraws every parameter: LayerNorm gains 1 + 0.1 n, other 1-D tensors 0.1 n, matrices 0.2 n."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            n = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if p.dim() == 1 and ("ln" in name or "LayerNorm" in name) and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * n)
            elif p.dim() == 1:
                p.copy_(0.1 * n)
            else:
                p.copy_(0.2 * n)


def tensor_shapes(directory):
    path = os.path.join(directory, "model.safetensors")
    with safetensors.safe_open(path, framework="pt") as f:
        return {k: list(f.get_slice(k).get_shape()) for k in sorted(f.keys())}


def save(model, directory, expected):
    os.makedirs(directory, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True)
    expected["tensors"] = tensor_shapes(directory)
    expected["versions"] = versions()
    with open(os.path.join(directory, "expected.json"), "w") as f:
        f.write(to_json(expected) + "\n")
    for name in sorted(os.listdir(directory)):
        print(f"  {os.path.relpath(directory)}/{name}: {os.path.getsize(os.path.join(directory, name))} bytes")


def gpt2_config(n_layer, **extra):
    return GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=n_layer, n_head=2,
                      activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0,
                      embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None, attn_implementation="eager", **extra)


def make_gpt2(out, gen):
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(gpt2_config(2)).eval()
    randomize(model, gen)
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(), "untied"
    ids = torch.randint(0, 64, (2, 8), generator=gen)
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert list(logits.shape) == [2, 8, 64]
    save(model, os.path.join(out, "gpt2"), {
        "model": "GPT2LMHeadModel", "input_ids": ids.tolist(), "logits_shape": list(logits.shape),
        "logits": F32(logits)})


def make_gpt2_cls(out, gen):
    torch.manual_seed(SEED + 1)
    # One layer (not two) keeps the fixtures under 300 KB and checks that a loader takes n_layer
    # from config.json.
    model = GPT2ForSequenceClassification(gpt2_config(1, num_labels=4, pad_token_id=0)).eval()
    randomize(model, gen)
    lengths = [8, 5]
    ids = torch.randint(1, 64, (2, 8), generator=gen)  # real tokens are never the pad id 0
    valid = torch.zeros(2, 8, dtype=torch.int64)
    for row, n in enumerate(lengths):
        ids[row, n:] = 0
        valid[row, :n] = 1
    with torch.no_grad():
        logits = model(input_ids=ids).logits  # no attention_mask: HF pools by the pad id
        # Right padding and causal attention: the last real token never sees a pad, so passing the
        # mask changes nothing. Checked here so the C++ side may do either.
        masked = model(input_ids=ids, attention_mask=valid).logits
        hidden = model.transformer(input_ids=ids).last_hidden_state
        manual = model.score(hidden[torch.arange(2), torch.tensor(lengths) - 1])
    assert torch.allclose(logits, masked, atol=1e-6), (logits, masked)
    assert torch.allclose(logits, manual, atol=1e-6), (logits, manual)
    assert list(logits.shape) == [2, 4]
    save(model, os.path.join(out, "gpt2-cls"), {
        "model": "GPT2ForSequenceClassification", "input_ids": ids.tolist(), "pad_token_id": 0,
        "lengths": lengths, "last_real_index": [n - 1 for n in lengths],
        "attention_mask": valid.tolist(), "logits_shape": list(logits.shape),
        "logits": F32(logits)})


def make_bert(out, gen):
    torch.manual_seed(SEED + 2)
    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=16, type_vocab_size=2,
                        hidden_act="gelu", layer_norm_eps=1e-12, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, pad_token_id=0,
                        attn_implementation="eager")
    model = BertModel(config, add_pooling_layer=False).eval()
    randomize(model, gen)
    ids = torch.randint(1, 64, (2, 8), generator=gen)
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 6:] = 0
    ids[1, 6:] = 0  # the pad id; its embedding still enters the padded rows' outputs
    types = torch.zeros(2, 8, dtype=torch.int64)
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    assert list(hidden.shape) == [2, 8, 32]
    save(model, os.path.join(out, "bert"), {
        "model": "BertModel", "add_pooling_layer": False, "input_ids": ids.tolist(),
        "attention_mask": mask.tolist(), "token_type_ids": types.tolist(),
        "last_hidden_state_shape": list(hidden.shape), "last_hidden_state": F32(hidden)})


def make_bert_cls(out, gen):
    # Made after the others, so adding it left their files unchanged. One layer keeps it small.
    torch.manual_seed(SEED + 3)
    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=16, type_vocab_size=2,
                        hidden_act="gelu", layer_norm_eps=1e-12, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, classifier_dropout=0.0, pad_token_id=0,
                        num_labels=4, attn_implementation="eager")
    model = BertForSequenceClassification(config).eval()
    randomize(model, gen)
    ids = torch.randint(1, 64, (2, 8), generator=gen)
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 5:] = 0
    ids[1, 5:] = 0
    types = torch.zeros(2, 8, dtype=torch.int64)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
    assert list(logits.shape) == [2, 4]
    save(model, os.path.join(out, "bert-cls"), {
        "model": "BertForSequenceClassification", "input_ids": ids.tolist(),
        "attention_mask": mask.tolist(), "token_type_ids": types.tolist(),
        "logits_shape": list(logits.shape), "logits": F32(logits)})


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    p.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "hf"))
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    print("make_hf_fixtures.py: " + ", ".join(f"{k} {v}" for k, v in versions().items()))
    gen = torch.Generator().manual_seed(SEED)
    make_gpt2(a.out, gen)
    make_gpt2_cls(a.out, gen)
    make_bert(a.out, gen)
    make_bert_cls(a.out, gen)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
