#!/usr/bin/env python3
"""Draws a scaling test's throughput and efficiency against the device count.

usage: plot_scale.py SCALE.json [MORE.json ...] OUT.png

Each JSON is a lockstep-scale (or bench/peers/pytorch_ddp.py) report: {"mode", "model",
"backend", "runs": [{"devices", "samples_per_s", "efficiency", ...}]}. Several reports are
drawn as one line each (e.g. lockstep against PyTorch DDP), and within a report one line per
"processes" count (runs spanning processes under mpirun: dashed, square markers). Uses
A third panel shows how each device of each run of the first report spent its steps (the runs'
"device_use": compute, input, comm wait, idle; lockstep/device_use.h), one bar per device.
matplotlib's Agg backend (no display needed). Exit codes: 0 drawn, 2 usage or unreadable JSON, 3 matplotlib missing
(lockstep-scale then tries another python3 or prints how to install it).
"""
import json
import sys


PARTS = (("compute_ms", "compute", "tab:green"), ("input_ms", "input", "tab:orange"),
         ("comm_wait_ms", "comm wait", "tab:red"), ("idle_ms", "idle", "tab:gray"))


def draw_device_use(ax, runs):
    """One horizontal bar per device of every run: its window split into the four parts."""
    labels = []
    rows = []
    for run in sorted(runs, key=lambda r: (r.get("processes", 1), r["devices"])):
        for d in run["device_use"]["devices"]:
            window = d["window_ms"] or 1.0
            rows.append([100.0 * d[key] / window for key, _, _ in PARTS])
            labels.append(f"{run['devices']} dev: {d['device']}")
    lefts = [0.0] * len(rows)
    for i, (_, name, color) in enumerate(PARTS):
        widths = [row[i] for row in rows]
        ax.barh(range(len(rows)), widths, left=lefts, color=color, label=name)
        lefts = [left + w for left, w in zip(lefts, widths)]
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("device use: % of each device's steps")
    ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, frameon=False)


def main(argv):
    if len(argv) < 3 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_scale.py: matplotlib is missing (apt-get install python3-matplotlib, "
              "or python3 -m pip install matplotlib)", file=sys.stderr)
        return 3
    reports = []
    for path in argv[1:-1]:
        try:
            with open(path) as f:
                reports.append(json.load(f))
        except (OSError, ValueError) as e:
            print(f"plot_scale.py: cannot read {path}: {e}", file=sys.stderr)
            return 2
    out = argv[-1]

    use_runs = [r for r in reports[0]["runs"] if r.get("device_use", {}).get("devices")]
    panels = 3 if use_runs else 2
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4.2))
    ax_rate, ax_eff = axes[0], axes[1]
    max_devices = 1
    for report in reports:
        backend = report.get("backend", "?")
        # One line per process count: runs that span processes (mpirun) are drawn dashed with
        # square markers, so the points whose collectives cross MPI stand out.
        for procs in sorted({r.get("processes", 1) for r in report["runs"]}):
            runs = sorted((r for r in report["runs"] if r.get("processes", 1) == procs),
                          key=lambda r: r["devices"])
            devices = [r["devices"] for r in runs]
            rates = [r["samples_per_s"] for r in runs]
            effs = [r["efficiency"] for r in runs]
            max_devices = max(max_devices, max(devices))
            label = backend if procs == 1 else f"{backend}, {procs} processes"
            style = "o-" if procs == 1 else "s--"
            line, = ax_rate.plot(devices, rates, style, label=label)
            base = next((r["samples_per_s"] for r in runs if r["devices"] == 1), None)
            if base:
                ax_rate.plot(devices, [base * n for n in devices], ":", color=line.get_color(),
                             label=f"{label} ideal")
            ax_eff.plot(devices, effs, style, color=line.get_color(), label=label)
            for n, e in zip(devices, effs):
                ax_eff.annotate(f"{e:.2f}", (n, e), textcoords="offset points", xytext=(0, 6),
                                ha="center", fontsize=8)

    first = reports[0]
    widths = "-".join(str(w) for w in first.get("widths", []))
    if first.get("mode") == "weak":
        batch = f"{first.get('per_device_batch')} per device"
    else:
        batch = f"global batch {first.get('global_batch')}"
    cores = first.get("machine", {}).get("cores")
    fig.suptitle(f"{first.get('mode')} scaling, {first.get('model')} {widths}, {batch}"
                 + (f" ({cores}-core machine)" if cores else ""))
    ticks = sorted({r["devices"] for rep in reports for r in rep["runs"]})
    for ax in (ax_rate, ax_eff):
        ax.set_xlabel("devices")
        ax.set_xticks(ticks)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    ax_rate.set_ylabel("samples/s (median of windows)")
    ax_rate.set_ylim(bottom=0)
    ax_eff.set_ylabel("efficiency = T(N) / (N T(1))")
    ax_eff.axhline(1.0, color="gray", lw=0.8)
    ax_eff.set_ylim(0, max(1.15, max(r["efficiency"] for rep in reports for r in rep["runs"]) + 0.1))
    if use_runs:
        draw_device_use(axes[2], use_runs)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
