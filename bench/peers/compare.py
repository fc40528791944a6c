#!/usr/bin/env python3
"""Merges scaling-test JSON reports (lockstep-scale, pytorch_ddp.py) into one markdown table.

usage: compare.py A.json B.json [...]

One row per device count; for each report its samples/s, efficiency and median step time, and
the ratio of the first report's samples/s to each other's (> 1: the first is faster). Warns
when the reports did not run the same work (mode, widths, batch, steps, optimizer).
"""
import json
import sys


def label(report):
    return report.get("backend", "?")


def work(report):
    batch = report.get("per_device_batch") if report.get("mode") == "weak" else report.get("global_batch")
    return (report.get("mode"), tuple(report.get("widths", [])), batch, report.get("steps"),
            report.get("warmup"), report.get("windows"), report.get("optimizer"))


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    reports = []
    for path in argv[1:]:
        with open(path) as f:
            reports.append(json.load(f))
    for r in reports[1:]:
        if work(r) != work(reports[0]):
            print(f"warning: {label(r)} ran different work than {label(reports[0])}: "
                  f"{work(r)} vs {work(reports[0])}", file=sys.stderr)
    first = reports[0]
    batch = (f"{first.get('per_device_batch')} per device" if first.get("mode") == "weak"
             else f"global batch {first.get('global_batch')}")
    print(f"{first.get('mode')} scaling, mlp {'-'.join(map(str, first.get('widths', [])))}, {batch}, "
          f"{first.get('optimizer')}, {first.get('steps')} steps ({first.get('warmup')} warm-up), "
          f"median of {first.get('windows')} windows, {first.get('machine', {}).get('cores')} cores "
          f"({first.get('machine', {}).get('cpu', '')})")
    print()
    header = ["devices"]
    for r in reports:
        header += [f"{label(r)} samples/s", "efficiency", "step ms"]
    for r in reports[1:]:
        header.append(f"{label(first)} / {label(r)}")
    print("| " + " | ".join(header) + " |")
    print("|" + "---:|" * len(header))
    by_devices = [{run["devices"]: run for run in r["runs"]} for r in reports]
    for n in sorted(set().union(*by_devices)):
        row = [str(n)]
        for runs in by_devices:
            run = runs.get(n)
            row += ([f"{run['samples_per_s']:.0f}", f"{run['efficiency']:.3f}", f"{run['step_ms_median']:.2f}"]
                    if run else ["-", "-", "-"])
        for runs in by_devices[1:]:
            a, b = by_devices[0].get(n), runs.get(n)
            row.append(f"{a['samples_per_s'] / b['samples_per_s']:.2f}x" if a and b else "-")
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
