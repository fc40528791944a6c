#!/usr/bin/env python3
"""The fault soak's driver: runs RUNS randomized fault scenarios of lockstep-soak-run.

Each run draws a fault kind (from a shuffled deck of all kinds, so a short soak still covers
each), a device count, a replica, a step, a seed, a shard and recompute mode, or (for some of
the kinds) a pipeline with its schedule and the stage the fault fires in; runs the program
under a hard wall-clock limit and checks that the run ended the way it must. The program judges in-process faults
itself (exit 0: the named error within its bound, or the skipped step); this driver judges the
kill -9: it kills a checkpointing run at a random moment, resumes it to the end, and requires
the final parameters to be bitwise those of an uninterrupted run. A run that outlives the wall-
clock limit is a hang, reported with the program's output (heartbeats: where each replica is).

Prints a line per failure, the counts per fault kind, and closes with `N passed, M failed`;
exits 0 only when M == 0. Standard library only. Usage: soak.py [RUNS] --program PATH [--seed X]
"""

import argparse
import collections
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

THROWS = ["throw-forward", "throw-backward", "throw-optimizer"]
COLLECTIVE = ["skip-collective", "stall", "wrong-count"]  # need a peer: 2 devices or more
KINDS = THROWS + COLLECTIVE + ["nan", "kill-9"]
# The faults a pipeline scenario takes (lockstep-soak-run --pipeline); a third of their draws
# are pipelines of 2 or 4 stages under a random schedule.
PIPELINE_KINDS = ["throw-forward", "throw-backward", "stall", "nan"]

STEPS = 6  # in-process faults
KILL_STEPS = 20  # the kill -9 runs: a checkpoint after every step
KILL_SEEDS = 3  # kill -9 runs draw their seed from 1..KILL_SEEDS, so references are reused
TIMEOUT_MS = 400  # the collective timeout
HANG_S = 20.0  # default wall-clock limit of one program run: past it, a hang

LANDINGS = ["before the first checkpoint", "inside a commit", "between commits", "after the end"]


class ProgramRun:
    """One finished (or killed) run of the program."""

    def __init__(self, rc, output, seconds, hung):
        self.rc, self.output, self.seconds, self.hung = rc, output, seconds, hung

    def summary(self):
        if self.hung:
            return (f"HANG: still running after {self.seconds:.0f} s, killed; its output:\n"
                    + self.output)
        return f"exit {self.rc} after {self.seconds:.2f} s; output:\n{self.output}"


class Soak:
    def __init__(self, program, work_dir, hang_s):
        self.program = program
        self.hang_s = hang_s
        self.work_dir = work_dir
        self.references = {}  # (devices, seed) -> (digest, seconds of a checkpointing run)

    def start(self, args):
        # Its own process group, so that a kill reaches whatever it started too.
        return subprocess.Popen([self.program] + args, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def run(self, args):
        start = time.monotonic()
        proc = self.start(args)
        try:
            output, _ = proc.communicate(timeout=self.hang_s)
            return ProgramRun(proc.returncode, output, time.monotonic() - start, False)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            return ProgramRun(proc.returncode, output, time.monotonic() - start, True)

    def fresh_dir(self, name):
        path = os.path.join(self.work_dir, name)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        return path

    # ---- in-process faults: the program judges ------------------------------------------

    def in_process(self, scenario):
        args = ["--fault", scenario["kind"], "--devices", str(scenario["devices"]),
                "--replica", str(scenario["replica"]), "--step", str(scenario["step"]),
                "--steps", str(STEPS), "--seed", str(scenario["seed"]),
                "--collective-timeout-ms", str(TIMEOUT_MS),
                "--shard", scenario["shard"], "--recompute", scenario["recompute"]]
        if scenario["pipeline"]:
            args += ["--pipeline", str(scenario["pipeline"]), "--schedule", scenario["schedule"]]
        result = self.run(args)
        ok = not result.hung and result.rc == 0
        return ok, None, ("" if ok else result.summary())

    # ---- kill -9 while checkpointing: the driver judges ---------------------------------

    def plain_args(self, devices, seed):
        return ["--devices", str(devices), "--steps", str(KILL_STEPS), "--seed", str(seed)]

    def digest_of(self, args, digest_file):
        result = self.run(args + ["--digest-out", digest_file])
        if result.hung or result.rc != 0:
            return None, result
        with open(digest_file) as f:
            return f.read().strip(), result

    def reference(self, devices, seed):
        """The uninterrupted run's digest, and how long a checkpointing run takes (to draw the
        kill's moment from). The run without checkpoints and the one with them must agree."""
        key = (devices, seed)
        if key not in self.references:
            ref_dir = self.fresh_dir(f"reference-{devices}-{seed}")
            plain, result = self.digest_of(self.plain_args(devices, seed),
                                           os.path.join(ref_dir, "plain"))
            if plain is None:
                raise SoakError("the uninterrupted reference run failed: " + result.summary())
            checkpointing = ["--checkpoint-dir", os.path.join(ref_dir, "ckpt")]
            checkpointed, result = self.digest_of(self.plain_args(devices, seed) + checkpointing,
                                                  os.path.join(ref_dir, "checkpointed"))
            if checkpointed != plain:
                raise SoakError(f"checkpointing changed the result: {checkpointed} vs {plain} "
                                "without checkpoints; " + result.summary())
            shutil.rmtree(ref_dir)
            self.references[key] = (plain, result.seconds)
        return self.references[key]

    def kill9(self, scenario, rng):
        devices, seed = scenario["devices"], scenario["seed"]
        want, run_s = self.reference(devices, seed)
        run_dir = self.fresh_dir("kill")
        ckpt = os.path.join(run_dir, "ckpt")
        args = self.plain_args(devices, seed) + ["--checkpoint-dir", ckpt,
                                                 "--checkpoint-every", "1"]
        delay = rng.uniform(0.0, 1.2 * run_s)
        proc = self.start(args + ["--digest-out", os.path.join(run_dir, "x")])
        try:
            output, _ = proc.communicate(timeout=delay)
            landing = "after the end"
            if proc.returncode != 0:
                return False, landing, (f"the run to be killed failed (exit {proc.returncode}):\n"
                                        + output)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            landing = where_it_landed(ckpt)
        got, result = self.digest_of(args + ["--resume"], os.path.join(run_dir, "digest"))
        if got is None:
            return False, landing, f"the resumed run failed: {result.summary()}"
        if got != want:
            return False, landing, (f"resumed run ended at '{got}', the uninterrupted one at "
                                    f"'{want}'; {result.summary()}")
        shutil.rmtree(run_dir)
        return True, landing, ""


class SoakError(Exception):
    """A failure of the soak's own set-up (a reference run), counted against the scenario."""


def where_it_landed(ckpt):
    """Where in the run a kill landed, from what it left on disk (Note [Checkpoint commit
    protocol]: temps, or a step directory newer than `latest`, mean inside a commit)."""
    if not os.path.isdir(ckpt):
        return "before the first checkpoint"
    names = os.listdir(ckpt)
    if any(n.startswith(".tmp-") or n.startswith(".latest.tmp-") for n in names):
        return "inside a commit"
    steps = [int(n[len("step-"):]) for n in names if n.startswith("step-")]
    if "latest" not in names:
        return "inside a commit" if steps else "before the first checkpoint"
    with open(os.path.join(ckpt, "latest")) as f:
        latest = int(f.read().strip()[len("step-"):])
    return "inside a commit" if max(steps) > latest else "between commits"


def draw(rng, deck):
    """The next scenario: the fault kind from the shuffled deck, the rest at random."""
    if not deck:
        deck.extend(KINDS)
        rng.shuffle(deck)
    kind = deck.pop()
    devices = rng.randint(2, 4) if kind in COLLECTIVE else rng.randint(1, 4)
    last_step = STEPS - 1 if kind == "nan" else STEPS  # a step after the NaN shows training goes on
    if kind in PIPELINE_KINDS and rng.random() < 1 / 3:
        devices = rng.choice([2, 4])
        stages = rng.choice([2, devices])
        return {
            "kind": kind, "devices": devices, "replica": rng.randrange(stages),
            "step": rng.randint(1, last_step), "seed": rng.randint(1, 1 << 30),
            "shard": "none", "recompute": rng.choice(["none", "blocks"]),
            "pipeline": stages, "schedule": rng.choice(["1f1b", "gpipe", "zb-h1"]),
        }
    return {
        "kind": kind,
        "devices": devices,
        "replica": rng.randrange(devices),
        "step": rng.randint(1, last_step),
        "seed": rng.randint(1, KILL_SEEDS) if kind == "kill-9" else rng.randint(1, 1 << 30),
        # Every mode meets every fault (kill-9's runs compare digests with plain references).
        "shard": "none" if kind == "kill-9"
                 else rng.choice(["none", "optimizer", "gradients", "parameters"]),
        "recompute": "none" if kind == "kill-9" else rng.choice(["none", "blocks"]),
        "pipeline": 0,
    }


def describe(s):
    if s["kind"] == "kill-9":
        return f"kill-9 on host:{s['devices']}, seed {s['seed']}"
    if s["pipeline"]:
        return (f"{s['kind']} on host:{s['devices']}, pipeline {s['pipeline']} "
                f"({s['schedule']}), stage {s['replica']}, step {s['step']}, "
                f"recompute {s['recompute']}, seed {s['seed']}")
    return (f"{s['kind']} on host:{s['devices']}, replica {s['replica']}, step {s['step']}, "
            f"shard {s['shard']}, recompute {s['recompute']}, seed {s['seed']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="?", type=int, default=200, help="scenarios (default 200)")
    parser.add_argument("--seed", type=int, help="the soak's seed (default: random; printed)")
    parser.add_argument("--program", required=True, help="path of lockstep-soak-run")
    parser.add_argument("--work-dir", help="scratch space (default: a temporary directory)")
    parser.add_argument("--hang-s", type=float, default=HANG_S,
                        help=f"a run past this many seconds is a hang (default {HANG_S:.0f})")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="lockstep-soak-")
    shutil.rmtree(work_dir, ignore_errors=True)
    os.makedirs(work_dir)
    print(f"soak: {args.runs} runs, seed {seed} (replay: --seed {seed}), work dir {work_dir}",
          flush=True)

    rng = random.Random(seed)
    soak = Soak(os.path.abspath(args.program), work_dir, args.hang_s)
    counts = {kind: [0, 0] for kind in KINDS}  # passed, failed
    landings = collections.Counter()
    pipelines = collections.Counter()  # the pipeline scenarios, by schedule
    deck = []
    start = time.monotonic()
    for i in range(1, args.runs + 1):
        scenario = draw(rng, deck)
        try:
            if scenario["kind"] == "kill-9":
                ok, landing, detail = soak.kill9(scenario, rng)
                landings[landing] += 1
            else:
                ok, landing, detail = soak.in_process(scenario)
        except SoakError as e:
            ok, detail = False, str(e)
        counts[scenario["kind"]][0 if ok else 1] += 1
        if scenario.get("pipeline"):
            pipelines[scenario["schedule"]] += 1
        if not ok:
            print(f"FAIL run {i}: {describe(scenario)}: {detail.rstrip()}", flush=True)

    elapsed = time.monotonic() - start
    print(f"{'fault':<18}{'passed':>8}{'failed':>8}")
    for kind in KINDS:
        print(f"{kind:<18}{counts[kind][0]:>8}{counts[kind][1]:>8}")
    if pipelines:
        print("of them pipelines: " + ", ".join(f"{schedule} {pipelines[schedule]}"
                                                for schedule in sorted(pipelines)))
    if landings:
        print("kill -9 landed: " + ", ".join(f"{where} {landings[where]}" for where in LANDINGS))
    passed = sum(c[0] for c in counts.values())
    failed = sum(c[1] for c in counts.values())
    print(f"wall time {elapsed:.1f} s")
    if failed == 0 and not args.work_dir:
        shutil.rmtree(work_dir, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
