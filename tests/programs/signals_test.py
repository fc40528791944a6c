#!/usr/bin/env python3
"""Ctrl-C and SIGTERM sent to lockstep-train and lockstep-scale at random points.

Each trial starts the program, waits a random time (sometimes before training has started,
usually in the middle of it), sends SIGINT or SIGTERM and checks that
  - the program exits within BOUND_S with 130 (SIGINT) or 143 (SIGTERM), never killed by it,
  - lockstep-train says after which step it stopped, `latest` names that step's checkpoint,
    at most --keep-checkpoints step directories are left, and a --resume run continues from
    exactly that step;
  - a second signal during a long step ends the program at once;
  - lockstep-scale prints that it stopped.
A signal that arrives before main() has installed the handler (the first tens of milliseconds,
while the libraries load; told by the process's SigCgt mask) ends the program by its default
action, as for any program: that is accepted, since nothing has started. A program that hangs
(a replica blocked in a collective, a thread never joined) fails by timeout. The seed is printed; --seed replays a failing sequence.

usage: signals_test.py --train PATH --scale PATH [--trials N] [--seed S]
"""
import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BOUND_S = 20.0  # stopping may take a step and a checkpoint: milliseconds here
NAMES = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}


def fail(message, out="", err=""):
    print(f"FAIL: {message}")
    if out:
        print("--- stdout (tail) ---\n" + out[-2000:])
    if err:
        print("--- stderr (tail) ---\n" + err[-2000:])
    sys.exit(1)


def catches(pid, sig):
    """Whether process `pid` has a handler for `sig` now (the SigCgt mask of /proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (sig - 1)))
    except OSError:
        pass
    return False


def stop_after(cmd, delay_s, signals, gap_s=0.05):
    """Runs cmd, sends `signals` (gap_s apart) after delay_s; returns (rc, out, err, seconds,
    handled): handled is whether the program had its handler installed when the first signal
    went out. Before main() has run it has none, and the signal's default action ends it, as it
    would any program: nothing has started then, so nothing is lost."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(delay_s)
    handled = catches(proc.pid, signals[0])
    sent = time.monotonic()
    for i, sig in enumerate(signals):
        if i:
            time.sleep(gap_s)
        if proc.poll() is None:
            proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        fail(f"{' '.join(cmd)} did not exit within {BOUND_S} s of the signal", out, err)
    return proc.returncode, out, err, time.monotonic() - sent, handled


def train_trial(train, workdir, rng, trial):
    sig = rng.choice([signal.SIGINT, signal.SIGTERM])
    delay = rng.choice([rng.uniform(0.0, 0.3), rng.uniform(0.5, 3.0)])  # data load or training
    every = rng.randint(1, 40)
    ckpt = os.path.join(workdir, f"train-{trial}")
    base = [train, "--devices", f"host:{rng.randint(1, 3)}", "--hidden", "32", "--batch", "48",
            "--checkpoint-dir", ckpt, "--checkpoint-every", str(every),
            "--keep-checkpoints", "2", "--log-every", "0", "--seed", str(trial)]
    rc, out, err, took, handled = stop_after(base + ["--steps", "1000000"], delay, [sig])
    what = f"trial {trial}: {NAMES[sig]} after {delay:.2f} s (checkpoint every {every})"
    if not handled and rc == -sig:
        if os.path.exists(os.path.join(ckpt, "latest")):
            fail(f"{what}: killed before main() yet a checkpoint exists", out, err)
        print(f"ok  {what}: arrived before main() installed the handler: ended by the signal")
        return
    if rc != 128 + sig:
        fail(f"{what}: exit code {rc}, expected {128 + sig}", out, err)
    m = re.search(rf"stopped by {NAMES[sig]} after step (\d+) of 1000000", out)
    if not m:
        fail(f"{what}: no 'stopped by {NAMES[sig]} after step N' line", out, err)
    step = int(m.group(1))
    latest = os.path.join(ckpt, "latest")
    if step == 0:
        if os.path.exists(latest):
            fail(f"{what}: stopped before step 1 but a checkpoint exists", out, err)
        print(f"ok  {what}: stopped before the first step, in {took:.2f} s")
        return
    with open(latest) as f:
        if f.read().strip() != f"step-{step:06d}":
            fail(f"{what}: latest does not name step {step}", out, err)
    steps = [d for d in os.listdir(ckpt) if d.startswith("step-")]
    if len(steps) > 2:
        fail(f"{what}: {len(steps)} checkpoints left with --keep-checkpoints 2: {steps}")
    resumed = subprocess.run(base + ["--steps", str(step + 2), "--resume"], capture_output=True,
                             text=True, timeout=120)
    if resumed.returncode != 0 or f"at step {step}\n" not in resumed.stdout:
        fail(f"{what}: --resume did not continue from step {step}", resumed.stdout,
             resumed.stderr)
    print(f"ok  {what}: stopped after step {step} in {took:.2f} s, resumed from it")


def second_signal_trial(train, workdir):
    # After the first SIGINT the program finishes its step (~0.5 s: a 784-8192-10 MLP, batch
    # 1024) and then writes a ~230 MB checkpoint: the second SIGINT, 10 ms later, lands in one
    # of the two whatever the scheduler does between them.
    cmd = [train, "--devices", "host:1", "--hidden", "8192", "--batch", "1024", "--steps",
           "1000", "--log-every", "1", "--checkpoint-dir", os.path.join(workdir, "second")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = ""
    deadline = time.monotonic() + 60
    while not line.startswith("step 1/") and time.monotonic() < deadline:
        line = proc.stdout.readline()  # wait until training steps run
        if not line and proc.poll() is not None:
            break
    proc.send_signal(signal.SIGINT)
    time.sleep(0.01)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        fail("a second SIGINT did not end lockstep-train")
    took = time.monotonic() - sent
    if proc.returncode != 130 or "received again: exiting now" not in err:
        fail(f"second SIGINT: exit code {proc.returncode}, expected 130 and 'exiting now'", out,
             err)
    print(f"ok  second SIGINT ended lockstep-train in {took:.2f} s")


def scale_trial(scale, rng, trial):
    sig = rng.choice([signal.SIGINT, signal.SIGTERM])
    delay = rng.uniform(0.5, 3.0)
    cmd = [scale, "--devices", "host:2", "--steps", "100000", "--warmup", "1", "--windows", "1",
           "--hidden", "32"]
    rc, out, err, took, handled = stop_after(cmd, delay, [sig])
    if not handled and rc == -sig:
        print(f"ok  lockstep-scale trial {trial}: {NAMES[sig]} after {delay:.2f} s arrived before "
              "main() installed the handler")
        return
    if rc != 128 + sig or f"stopped by {NAMES[sig]}" not in out:
        fail(f"lockstep-scale trial {trial}: {NAMES[sig]} after {delay:.2f} s: exit code {rc}, "
             f"expected {128 + sig} and a 'stopped by' line", out, err)
    print(f"ok  lockstep-scale trial {trial}: {NAMES[sig]} after {delay:.2f} s, exited in "
          f"{took:.2f} s")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", required=True)
    parser.add_argument("--scale", required=True)
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"signals_test: seed {seed}")
    rng = random.Random(seed)
    workdir = tempfile.mkdtemp(prefix="lockstep-signals-")
    try:
        for trial in range(args.trials):
            train_trial(args.train, workdir, rng, trial)
        second_signal_trial(args.train, workdir)
        for trial in range(2):
            scale_trial(args.scale, rng, trial)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("signals_test: all passed")


if __name__ == "__main__":
    main()
