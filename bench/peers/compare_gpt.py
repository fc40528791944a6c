#!/usr/bin/env python3
"""Summarises scripts/compare-pytorch-gpt's runs: lockstep against PyTorch's best, per precision
and device count, as the medians over the rounds.

usage: compare_gpt.py DIR

DIR holds lockstep-<precision>-<round>.json (lockstep-scale, runs on 1 and 2 devices) and
pytorch-<precision>-<processes>-<round>.json (pytorch_gpt.py; its run is the faster of eager and
torch.compile, both listed in "compile_tokens_per_s"). Prints one markdown row per precision and
device count: lockstep tokens/s, PyTorch eager and compiled tokens/s, and lockstep / the best.
"""
import glob
import json
import os
import statistics
import sys


def median_or_none(values):
    return statistics.median(values) if values else None


def main(argv):
    if len(argv) != 1 or not os.path.isdir(argv[0]):
        print(__doc__, file=sys.stderr)
        return 2
    root = argv[0]
    lockstep, torch_eager, torch_compiled, torch_best = {}, {}, {}, {}
    for path in glob.glob(os.path.join(root, "lockstep-*.json")):
        doc = json.load(open(path))
        for run in doc["runs"]:
            lockstep.setdefault((doc["precision"], run["devices"]), []).append(run["tokens_per_s"])
    for path in glob.glob(os.path.join(root, "pytorch-*.json")):
        doc = json.load(open(path))
        key = (doc["precision"], doc.get("processes", 1))
        variants = doc["runs"][0].get("compile_tokens_per_s", {})
        if "eager" in variants:
            torch_eager.setdefault(key, []).append(variants["eager"])
        if "compiled" in variants:
            torch_compiled.setdefault(key, []).append(variants["compiled"])
        torch_best.setdefault(key, []).append(doc["runs"][0]["tokens_per_s"])
    print("| precision | devices | lockstep tokens/s | PyTorch eager | PyTorch compiled | "
          "lockstep / PyTorch's best | rounds |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    fmt = lambda v: "-" if v is None else f"{v:.0f}"
    for key in sorted(set(lockstep) | set(torch_best), key=lambda k: (k[0] != "f32", k[1])):
        ours = median_or_none(lockstep.get(key, []))
        eager = median_or_none(torch_eager.get(key, []))
        compiled = median_or_none(torch_compiled.get(key, []))
        best = max((v for v in (eager, compiled) if v is not None), default=None)
        ratio = f"**{ours / best:.2f}**" if ours and best else "-"
        rounds = min(len(lockstep.get(key, [])), len(torch_best.get(key, [])))
        print(f"| {key[0]} | {key[1]} | {fmt(ours)} | {fmt(eager)} | {fmt(compiled)} | {ratio} | "
              f"{rounds} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
