#!/usr/bin/env python3
"""Runs lockstep-bench with the given arguments and checks its JSON report (ctest entry
bench_collectives_host_2, see bench/CMakeLists.txt).

usage: check_collectives.py LOCKSTEP_BENCH [ARGS...]   (ARGS should include --benchmark_format=json)

Fails (exit 1) unless stdout is one JSON document (nothing else printed there), at least one
collective ran, and every collective result has wrong == 0, size > 0, and busbw_GBps > 0
wherever the bus factor is (every collective on 2+ ranks, broadcast on any).
"""
import json
import re
import subprocess
import sys

NAME = re.compile(r"^(all_reduce|reduce_scatter|all_gather|broadcast)/(host|cuda)/devices:(\d+)/bytes:\d+")


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    run = subprocess.run(argv[1:], stdout=subprocess.PIPE, text=True)
    if run.returncode != 0:
        print(f"lockstep-bench exited with {run.returncode}", file=sys.stderr)
        return 1
    try:
        report = json.loads(run.stdout)
    except json.JSONDecodeError as e:
        print(f"stdout is not one JSON document ({e}):\n{run.stdout[:2000]}", file=sys.stderr)
        return 1
    failures, checked = [], 0
    for bench in report.get("benchmarks", []):
        match = NAME.match(bench.get("name", ""))
        if not match:
            continue
        name = bench["name"]
        if bench.get("error_occurred"):
            failures.append(f"{name}: {bench.get('error_message')}")
            continue
        checked += 1
        collective, ranks = match.group(1), int(match.group(3))
        if bench.get("wrong") != 0:
            failures.append(f"{name}: wrong = {bench.get('wrong')} (expected 0)")
        if not bench.get("size", 0) > 0:
            failures.append(f"{name}: size = {bench.get('size')}")
        if (ranks > 1 or collective == "broadcast") and not bench.get("busbw_GBps", 0) > 0:
            failures.append(f"{name}: busbw_GBps = {bench.get('busbw_GBps')} (expected > 0)")
        print(f"{name}: wrong={bench.get('wrong'):g} busbw_GBps={bench.get('busbw_GBps'):.4g}",
              file=sys.stderr)
    if checked == 0:
        failures.append("no collective benchmark ran (check --benchmark_filter)")
    for failure in failures:
        print("FAIL " + failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
