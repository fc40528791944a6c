#!/usr/bin/env python3
"""Summarises scripts/compare-pytorch-gpt's runs: lockstep against PyTorch's best, per precision
and device count, as the medians over the rounds.

usage: compare_gpt.py DIR

DIR holds lockstep-<precision>-<round>.json (lockstep-scale, runs on 1 and 2 devices) and
pytorch-<precision>-<processes>-<round>.json (pytorch_gpt.py; its run is the faster of eager and
torch.compile, both listed in "compile_tokens_per_s"). Prints one markdown row per precision and
device count: lockstep tokens/s, PyTorch eager and compiled tokens/s, lockstep / the best (of the
medians), and the median of the rounds' own ratios (lockstep's run of round r over PyTorch's best
run of round r): on a machine whose speed drifts over minutes, runs of one round are the ones
that saw the same machine.
"""
import glob
import json
import os
import re
import statistics
import sys


def median_or_none(values):
    return statistics.median(values) if values else None


def round_of(path):
    return int(re.search(r"-(\d+)\.json$", path).group(1))


def main(argv):
    if len(argv) != 1 or not os.path.isdir(argv[0]):
        print(__doc__, file=sys.stderr)
        return 2
    root = argv[0]
    lockstep, torch_eager, torch_compiled, torch_best = {}, {}, {}, {}
    by_round = {}  # (precision, devices) -> {round: [lockstep, PyTorch's best]}
    for path in glob.glob(os.path.join(root, "lockstep-*.json")):
        doc = json.load(open(path))
        for run in doc["runs"]:
            key = (doc["precision"], run["devices"])
            lockstep.setdefault(key, []).append(run["tokens_per_s"])
            by_round.setdefault(key, {}).setdefault(round_of(path), [None, None])[0] = \
                run["tokens_per_s"]
    for path in glob.glob(os.path.join(root, "pytorch-*.json")):
        doc = json.load(open(path))
        key = (doc["precision"], doc.get("processes", 1))
        variants = doc["runs"][0].get("compile_tokens_per_s", {})
        if "eager" in variants:
            torch_eager.setdefault(key, []).append(variants["eager"])
        if "compiled" in variants:
            torch_compiled.setdefault(key, []).append(variants["compiled"])
        torch_best.setdefault(key, []).append(doc["runs"][0]["tokens_per_s"])
        by_round.setdefault(key, {}).setdefault(round_of(path), [None, None])[1] = \
            doc["runs"][0]["tokens_per_s"]
    print("| precision | devices | lockstep tokens/s | PyTorch eager | PyTorch compiled | "
          "lockstep / PyTorch's best | median of the rounds' ratios | rounds |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    fmt = lambda v: "-" if v is None else f"{v:.0f}"
    for key in sorted(set(lockstep) | set(torch_best), key=lambda k: (k[0] != "f32", k[1])):
        ours = median_or_none(lockstep.get(key, []))
        eager = median_or_none(torch_eager.get(key, []))
        compiled = median_or_none(torch_compiled.get(key, []))
        best = max((v for v in (eager, compiled) if v is not None), default=None)
        ratio = f"**{ours / best:.2f}**" if ours and best else "-"
        rounds = min(len(lockstep.get(key, [])), len(torch_best.get(key, [])))
        pairs = [ours_r / theirs_r for ours_r, theirs_r in by_round.get(key, {}).values()
                 if ours_r and theirs_r]
        per_round = (f"**{statistics.median(pairs):.2f}** ("
                     + ", ".join(f"{r:.2f}" for r in pairs) + ")") if pairs else "-"
        print(f"| {key[0]} | {key[1]} | {fmt(ours)} | {fmt(eager)} | {fmt(compiled)} | {ratio} | "
              f"{per_round} | {rounds} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
