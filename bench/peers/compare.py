#!/usr/bin/env python3
"""Merges scaling-test JSON reports (lockstep-scale, pytorch_ddp.py) into one markdown table.

usage: compare.py A.json B.json [...]

One row per device count; for each report its samples/s, efficiency and median step time, and
the ratio of the first report's samples/s to each other's (> 1: the first is faster). Warns
when the reports did not run the same work (mode, widths, batch, steps, optimizer, threads).
GPT reports ("model": "gpt", e.g. from pytorch_gpt.py, with "gpt": {layers, hidden, heads, seq,
vocab}) are compared in tokens/s (a run's "tokens_per_s", else samples_per_s * seq).
"""
import json
import sys


def label(report):
    return report.get("backend", "?")


def is_gpt(report):
    return report.get("model") == "gpt"


def work(report):
    batch = report.get("per_device_batch") if report.get("mode") == "weak" else report.get("global_batch")
    shape = (tuple(report.get("gpt", {}).get(k) for k in ("layers", "hidden", "heads", "seq", "vocab"))
             if is_gpt(report)
             else tuple(report.get("widths", [])))
    return (report.get("model", "mlp"), report.get("mode"), shape, batch, report.get("steps"),
            report.get("warmup"), report.get("windows"), report.get("optimizer"),
            report.get("host_threads_per_device", report.get("threads_per_process", 1)))


def rate(report, run):
    """samples/s, or tokens/s for a GPT report."""
    if not is_gpt(report):
        return run["samples_per_s"]
    return run.get("tokens_per_s", run["samples_per_s"] * report.get("gpt", {}).get("seq", 1))


def title(first):
    batch = (f"{first.get('per_device_batch')} per device" if first.get("mode") == "weak"
             else f"global batch {first.get('global_batch')}")
    threads = first.get("host_threads_per_device", first.get("threads_per_process", 1))
    common = (f"{first.get('optimizer')}, {first.get('steps')} steps ({first.get('warmup')} warm-up), "
              f"median of {first.get('windows')} windows, {threads} thread(s) per device, "
              f"{first.get('machine', {}).get('cores')} cores ({first.get('machine', {}).get('cpu', '')})")
    if is_gpt(first):
        g = first.get("gpt", {})
        return (f"gpt {g.get('layers')} layers, hidden {g.get('hidden')}, {g.get('heads')} heads, "
                f"seq {g.get('seq')}, vocab {g.get('vocab')}, {batch}, " + common)
    return (f"{first.get('mode')} scaling, mlp {'-'.join(map(str, first.get('widths', [])))}, "
            f"{batch}, " + common)


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    reports = []
    for path in argv[1:]:
        with open(path) as f:
            reports.append(json.load(f))
    if any(is_gpt(r) != is_gpt(reports[0]) for r in reports):
        print("compare.py: cannot compare a GPT report with an MLP report", file=sys.stderr)
        return 2
    for r in reports[1:]:
        if work(r) != work(reports[0]):
            print(f"warning: {label(r)} ran different work than {label(reports[0])}: "
                  f"{work(r)} vs {work(reports[0])}", file=sys.stderr)
    first = reports[0]
    unit = "tokens/s" if is_gpt(first) else "samples/s"
    print(title(first))
    print()
    header = ["devices"]
    for r in reports:
        header += [f"{label(r)} {unit}", "efficiency", "step ms"]
    for r in reports[1:]:
        header.append(f"{label(first)} / {label(r)}")
    print("| " + " | ".join(header) + " |")
    print("|" + "---:|" * len(header))
    by_devices = [{run["devices"]: run for run in r["runs"]} for r in reports]
    for n in sorted(set().union(*by_devices)):
        row = [str(n)]
        for r, runs in zip(reports, by_devices):
            run = runs.get(n)
            row += ([f"{rate(r, run):.0f}", f"{run['efficiency']:.3f}", f"{run['step_ms_median']:.2f}"]
                    if run else ["-", "-", "-"])
        for r, runs in zip(reports[1:], by_devices[1:]):
            a, b = by_devices[0].get(n), runs.get(n)
            row.append(f"{rate(first, a) / rate(r, b):.2f}x" if a and b else "-")
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
