#!/usr/bin/env python3
"""PyTorch DDP peer of lockstep-scale: the same scaling test with torch.nn.parallel.DDP.

Same model (784-H...-10 MLP, ReLU, PyTorch's default init, which is lockstep's: U(+-1/sqrt(in))
for weights and biases), data (Fashion-MNIST IDX files, x/255 standardised with mean 0.2860 and
std 0.3530), batches (a seeded shuffle per epoch, each rank taking its contiguous shard of the
global batch), optimizer (AdamW lr 1e-3 wd 0.01 by default), modes, steps, warm-up and windows,
and the SAME JSON schema as lockstep-scale. One process per device (torch.multiprocessing
spawn on localhost, a free port), gloo on CPU with --host-threads compute threads per process
(default 1, as lockstep-scale's flag of the same name: torch.set_num_threads(N) and
OPENBLAS/OMP/MKL_NUM_THREADS=N), nccl on GPUs. Rank 0 times the steps (forward + backward +
all-reduce + optimizer); the result of each device count goes back to the parent through a
temporary file.

PyTorch at its best: every batch of the run is cut from the shuffled data and made contiguous
before the timed loop (so the loop has no indexing or copying on the Python side), gradients are
set to None rather than zeroed, AdamW/SGD use their fused (else foreach) implementation where this
torch has one, and --compile auto (the default) runs each device count both eagerly and with
torch.compile(ddp_model) and reports the faster, naming it in each run's "torch_compile"
(false/true) next to "compile_samples_per_s" with both numbers. --compile off / on run one.

  python3 bench/peers/pytorch_ddp.py --devices host:2 --per-device-batch 128 --steps 100 \\
      --warmup 10 --host-threads 1 --json out/pytorch-ddp.json

Needs PyTorch (Debian: apt-get install -y python3-torch, then run with /usr/bin/python3).
comm_exposed_ms is null: DDP does not expose its all-reduce timeline.
Exit codes: 0 success, 1 runtime failure, 2 usage error.
"""
import argparse
import gzip
import json
import os
import socket
import statistics
import sys
import tempfile
import time

MEAN, STD = 0.2860, 0.3530


class UsageError(Exception):
    pass


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="pytorch_ddp.py",
        description="Scaling test with PyTorch DDP, mirroring lockstep-scale's flags and JSON.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="--devices names the devices as lockstep-scale does: host:N (N processes on the "
               "host), host (one per core), cuda (every GPU), cuda:N (the first N GPUs), auto "
               "(every GPU, else one per core); --counts the device counts to run (default 1,2,4,"
               "... up to all, and all). The counts must contain 1.")
    p.add_argument("--devices", default="auto")
    p.add_argument("--counts", default="")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--model", default="mlp", choices=["mlp"])
    p.add_argument("--hidden", default="1024,1024")
    p.add_argument("--mode", default="weak", choices=["weak", "strong"])
    p.add_argument("--per-device-batch", type=int, default=None)
    p.add_argument("--global-batch", type=int, default=None)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--windows", type=int, default=5)
    p.add_argument("--optimizer", default="adamw", choices=["adamw", "sgd"])
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--host-threads", "--threads", dest="host_threads", type=int, default=1,
                   help="compute threads per process (lockstep-scale's --host-threads)")
    p.add_argument("--compile", default="auto", choices=["auto", "off", "on"],
                   help="torch.compile: auto runs both and reports the faster")
    p.add_argument("--batch-pool-mb", type=float, default=1024.0,
                   help="most memory per process for the pre-made batches; past it they repeat")
    p.add_argument("--json", default="")
    p.add_argument("--plot", default="", help="draw the plot with bench/scale/plot_scale.py")
    a = p.parse_args(argv)  # exits 2 on bad flags
    try:
        a.hidden = [int(w) for w in a.hidden.split(",")]
    except ValueError:
        raise UsageError(f"--hidden: '{a.hidden}' is not a list of widths")
    if any(w <= 0 for w in a.hidden):
        raise UsageError("--hidden: widths must be positive")
    if a.mode == "weak" and a.global_batch is not None:
        raise UsageError("--global-batch is for --mode strong; weak scaling takes --per-device-batch")
    if a.mode == "strong" and a.per_device_batch is not None:
        raise UsageError("--per-device-batch is for --mode weak; strong scaling takes --global-batch")
    a.per_device_batch = a.per_device_batch or 128
    a.global_batch = a.global_batch or 1024
    for name in ("steps", "windows", "per_device_batch", "global_batch", "host_threads"):
        if getattr(a, name) <= 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive")
    if a.warmup < 0:
        raise UsageError("--warmup must be >= 0")
    if a.steps - a.warmup < a.windows:
        raise UsageError(f"--steps {a.steps} leaves {max(0, a.steps - a.warmup)} timed step(s) after "
                         f"--warmup {a.warmup}, fewer than the {a.windows} --windows")
    return a


def resolve_devices(a, torch):
    spec = a.devices
    kind = "cuda" if spec.startswith("cuda") else "host"
    if spec == "auto" and torch.cuda.is_available() and torch.cuda.device_count() > 0:
        kind = "cuda"
    if spec in ("auto", "host", "cuda"):
        top = torch.cuda.device_count() if kind == "cuda" else len(os.sched_getaffinity(0))
        if top == 0:
            raise RuntimeError("--devices cuda: no GPU is usable")
    elif spec.startswith(("host:", "cuda:")) and spec[5:].isdigit() and int(spec[5:]) > 0:
        top = int(spec[5:])
    else:
        raise UsageError(f"--devices: unknown spec '{spec}'; use host:N, host, cuda, cuda:N or auto "
                         "(the counts to run go in --counts)")
    if a.counts:
        try:
            counts = sorted(int(c) for c in a.counts.split(","))
        except ValueError:
            raise UsageError(f"--counts: '{a.counts}' is not a list of device counts")
        if counts[0] <= 0 or len(set(counts)) != len(counts):
            raise UsageError(f"--counts {a.counts}: counts must be positive and listed once")
        if counts[-1] > top:
            raise UsageError(f"--counts asks for {counts[-1]} devices; --devices {spec} gives {top}")
    else:
        counts, n = [], 1
        while n < top:
            counts.append(n)
            n *= 2
        counts.append(top)
    if counts[0] != 1:
        raise UsageError(f"--counts {a.counts} has no 1-device run; scaling efficiency is measured "
                         "against one device, so the list must contain 1")
    if a.mode == "strong":
        for n in counts:
            if a.global_batch % n:
                raise UsageError(f"--mode strong: --global-batch {a.global_batch} does not divide "
                                 f"by {n} devices")
    if kind == "cuda" and counts[-1] > torch.cuda.device_count():
        raise RuntimeError(f"--devices {spec} asks for {counts[-1]} GPUs; this machine has "
                           f"{torch.cuda.device_count()}")
    return kind, counts


def read_idx(path):
    """An IDX file (plain or .gz) as (dims, bytes)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if data[0] != 0 or data[1] != 0 or data[2] != 8:
        raise RuntimeError(f"{path}: not an unsigned-byte IDX file")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return dims, data[4 + 4 * ndim:]


def find_idx(directory, stem):
    for name in (stem + ".gz", stem):
        path = os.path.join(directory, name)
        if os.path.exists(path):
            return path
    raise RuntimeError(f"{directory}: no {stem}[.gz] (Debian: apt-get install dataset-fashion-mnist)")


def load_fashion_mnist(directory, torch):
    dims, pixels = read_idx(find_idx(directory, "train-images-idx3-ubyte"))
    _, labels = read_idx(find_idx(directory, "train-labels-idx1-ubyte"))
    count, features = dims[0], dims[1] * dims[2]
    x = torch.frombuffer(bytearray(pixels), dtype=torch.uint8).reshape(count, features)
    x = (x.to(torch.float32) / 255.0 - MEAN) / STD
    y = torch.frombuffer(bytearray(labels), dtype=torch.uint8).to(torch.int64)
    return x.contiguous(), y


def make_mlp(widths, torch):
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def make_optimizer(params, a, torch):
    """The fused implementation where this torch has one for these tensors, else foreach, else the
    plain loop (torch 1.13 has no fused CPU AdamW)."""
    params = list(params)
    for impl in ({"fused": True}, {"foreach": True}, {}):
        try:
            if a.optimizer == "adamw":
                opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=a.weight_decay, **impl)
            else:
                opt = torch.optim.SGD(params, lr=a.lr, momentum=a.momentum,
                                      weight_decay=a.weight_decay, **impl)
            return opt, next(iter(impl), "for-loop")
        except (RuntimeError, TypeError, ValueError):
            continue
    raise RuntimeError("no optimizer implementation accepted these parameters")


def premade_batches(x, y, a, rank, world, global_batch, device, torch):
    """The batches of this rank for steps 0, 1, ... as contiguous tensors on the device: a seeded
    shuffle per epoch (the last partial batch dropped, as lockstep does), each rank taking its
    contiguous shard of the global batch. At most --batch-pool-mb of them; later steps reuse
    them in turn."""
    shard = global_batch // world
    per_epoch = x.shape[0] // global_batch
    if per_epoch == 0:
        raise RuntimeError(f"global batch {global_batch} is larger than the training set")
    bytes_per_batch = shard * (x.shape[1] * x.element_size() + y.element_size())
    count = max(1, min(a.steps, int(a.batch_pool_mb * 2**20 // bytes_per_batch)))
    gen = torch.Generator().manual_seed(a.seed)
    batches, order = [], None
    for s in range(count):
        pos = s % per_epoch
        if pos == 0:
            order = torch.randperm(x.shape[0], generator=gen)
        idx = order[pos * global_batch + rank * shard:pos * global_batch + (rank + 1) * shard]
        batches.append((x.index_select(0, idx).contiguous().to(device),
                        y.index_select(0, idx).contiguous().to(device)))
    return batches


def worker(rank, world, kind, a, port, result_path, use_compile):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(a.host_threads)
    torch.set_num_interop_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    backend = "nccl" if kind == "cuda" else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world)
    device = torch.device(f"cuda:{rank}" if kind == "cuda" else "cpu")
    if kind == "cuda":
        torch.cuda.set_device(device)
    sync = torch.cuda.synchronize if kind == "cuda" else (lambda: None)

    x, y = load_fashion_mnist(a.data, torch)
    widths = [x.shape[1]] + a.hidden + [10]
    torch.manual_seed(a.seed)
    model = make_mlp(widths, torch).to(device)
    # One device is PyTorch at its best without the DDP wrapper (its hooks cost even alone).
    ddp = model if world == 1 else torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[rank] if kind == "cuda" else None, bucket_cap_mb=a.bucket_mb)
    opt, opt_impl = make_optimizer(ddp.parameters(), a, torch)
    net = torch.compile(ddp) if use_compile else ddp  # Dynamo splits the graph at DDP's buckets
    loss_fn = torch.nn.CrossEntropyLoss()

    global_batch = a.per_device_batch * world if a.mode == "weak" else a.global_batch
    batches = premade_batches(x, y, a, rank, world, global_batch, device, torch)
    del x, y
    losses = []
    state = {"step": 0}

    def step():
        xb, yb = batches[state["step"] % len(batches)]
        state["step"] += 1
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(xb), yb)
        loss.backward()  # DDP all-reduces gradient buckets during backward
        opt.step()
        losses.append(loss.detach())
        sync()

    build_start = time.perf_counter()
    for _ in range(a.warmup):
        step()
    dist.barrier()
    timed = a.steps - a.warmup
    windows, step_ms = [], []
    for w in range(a.windows):
        n = timed * (w + 1) // a.windows - timed * w // a.windows
        window_s = 0.0
        for _ in range(n):
            t0 = time.perf_counter()
            step()
            dt = time.perf_counter() - t0
            window_s += dt
            step_ms.append(dt * 1e3)
        windows.append(n * global_batch / window_s)
    last = torch.stack(losses[-10:]).to(torch.float64).mean().reshape(1)
    dist.all_reduce(last)  # equal shards: the mean of shard means is the global mean
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump({"devices": world, "device_list": ",".join(f"{kind}:{i}" for i in range(world)),
                       "global_batch": global_batch,
                       "samples_per_s": statistics.median(windows),
                       "step_ms_median": statistics.median(step_ms),
                       "comm_exposed_ms": None,
                       "final_loss": last.item() / world,
                       "window_samples_per_s": windows,
                       "wall_s": time.perf_counter() - build_start,
                       "params": sum(p.numel() for p in model.parameters()),
                       "widths": widths, "optimizer_impl": opt_impl,
                       "batch_pool": len(batches)}, f)
    # Leave without running destructors: in torch 1.13 a DDP Reducer destroyed at interpreter
    # exit can deadlock with its gloo worker thread (seen here: a rank spinning forever after
    # its peer left). Everything this process owes is written; the barrier makes sure every
    # rank is done with the process group before any goes away.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def print_table(a, runs, widths):
    print(f"\n{a.mode} scaling, mlp {'-'.join(map(str, widths))}, {a.optimizer}, "
          f"{a.steps - a.warmup} timed steps per run (median of {a.windows} windows), PyTorch DDP, "
          f"{a.host_threads} thread(s) per process ('other': samples/s of the slower of eager and "
          "torch.compile)")
    print(f"{'devices':>7} {'batch':>8} {'samples/s':>12} {'per device':>12} {'efficiency':>10} "
          f"{'step ms':>9} {'final loss':>10} {'compiled':>8} {'other':>12}")
    for r in runs:
        other = [v for k, v in r["compile_samples_per_s"].items()
                 if k != ("compiled" if r["torch_compile"] else "eager")]
        print(f"{r['devices']:>7} {r['global_batch']:>8} {r['samples_per_s']:>12.0f} "
              f"{r['per_device_samples_per_s']:>12.0f} {r['efficiency']:>10.3f} "
              f"{r['step_ms_median']:>9.2f} {r['final_loss']:>10.4f} "
              f"{'yes' if r['torch_compile'] else 'no':>8} "
              f"{(f'{other[0]:.0f}' if other else '-'):>12}")
    sys.stdout.flush()


def main(argv):
    try:
        a = parse_args(argv)
    except UsageError as e:
        print(f"pytorch_ddp.py: {e}", file=sys.stderr)
        return 2
    # --host-threads compute threads per process, as lockstep's host devices use that many cores
    # each (default 1). Must be set before torch loads its BLAS: torch.set_num_threads(1) alone
    # leaves Debian's OpenBLAS with one thread per core (measured on 2 cores: 1 process at batch
    # 256 ran 14400 samples/s using 1.3 cores, 8800 with OpenBLAS pinned to 1 thread). The
    # spawned ranks inherit the environment.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(a.host_threads)
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        print("pytorch_ddp.py: PyTorch is missing. Debian: sudo apt-get install -y python3-torch "
              "(then run it with /usr/bin/python3); elsewhere: python3 -m pip install torch",
              file=sys.stderr)
        return 1
    try:
        kind, counts = resolve_devices(a, torch)
    except UsageError as e:
        print(f"pytorch_ddp.py: {e}", file=sys.stderr)
        return 2
    for stem in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"):
        find_idx(a.data, stem)  # a clear error here rather than a traceback from every rank
    backend = f"pytorch-ddp-{'nccl' if kind == 'cuda' else 'gloo'}"
    print(f"pytorch_ddp.py: {a.mode} scaling with {backend} on {kind} device counts "
          f"{','.join(map(str, counts))} ({len(os.sched_getaffinity(0))} cores), torch {torch.__version__}")
    variants = {"off": [False], "on": [True], "auto": [False, True]}[a.compile]
    if True in variants and not hasattr(torch, "compile"):
        if a.compile == "on":
            print(f"pytorch_ddp.py: torch {torch.__version__} has no torch.compile", file=sys.stderr)
            return 2
        variants = [False]
    runs, info = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            tried = {}
            for use_compile in variants:
                name = "compiled" if use_compile else "eager"
                path = os.path.join(tmp, f"run-{n}-{name}.json")
                print(f"{backend} x{n} {name}: {a.steps} steps ({a.warmup} warm-up) ...",
                      file=sys.stderr, flush=True)
                try:
                    mp.spawn(worker, args=(n, kind, a, free_port(), path, use_compile), nprocs=n,
                             join=True)
                except Exception as e:
                    if not use_compile or a.compile == "on":
                        raise
                    print(f"{backend} x{n} compiled: failed ({type(e).__name__}: "
                          f"{str(e).strip().splitlines()[-1] if str(e).strip() else ''}); "
                          "keeping the eager run", file=sys.stderr, flush=True)
                    continue
                with open(path) as f:
                    tried[use_compile] = json.load(f)
                print(f"{backend} x{n} {name}: {tried[use_compile]['samples_per_s']:.0f} samples/s",
                      file=sys.stderr, flush=True)
            best = max(tried, key=lambda c: tried[c]["samples_per_s"])
            r = tried[best]
            r["torch_compile"] = best
            r["compile_samples_per_s"] = {("compiled" if c else "eager"): t["samples_per_s"]
                                          for c, t in tried.items()}
            info = {"params": r.pop("params"), "widths": r.pop("widths"),
                    "optimizer_impl": r.pop("optimizer_impl"), "batch_pool": r.pop("batch_pool")}
            runs.append(r)
    base = runs[0]["samples_per_s"]
    for r in runs:
        r["per_device_samples_per_s"] = r["samples_per_s"] / r["devices"]
        r["efficiency"] = r["samples_per_s"] / (r["devices"] * base)
    ordered = ["devices", "device_list", "global_batch", "samples_per_s", "per_device_samples_per_s",
               "efficiency", "step_ms_median", "comm_exposed_ms", "final_loss",
               "window_samples_per_s", "wall_s", "torch_compile", "compile_samples_per_s"]
    runs = [{k: r[k] for k in ordered} for r in runs]
    print_table(a, runs, info["widths"])
    doc = {"mode": a.mode, "model": a.model, "backend": backend, "device_kind": kind,
           "widths": info["widths"], "params": info["params"], "optimizer": a.optimizer,
           "lr": a.lr, "seed": a.seed, "steps": a.steps, "warmup": a.warmup, "windows": a.windows}
    if a.mode == "weak":
        doc["per_device_batch"] = a.per_device_batch
    else:
        doc["global_batch"] = a.global_batch
    doc["torch_version"] = torch.__version__
    doc["threads_per_process"] = a.host_threads
    doc["host_threads_per_device"] = a.host_threads  # lockstep-scale's name for the same setting
    doc["compile"] = a.compile
    doc["optimizer_impl"] = info["optimizer_impl"]
    doc["premade_batches"] = info["batch_pool"]
    doc["machine"] = {"cores": len(os.sched_getaffinity(0)), "cpu": cpu_model(),
                      "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0}
    doc["runs"] = runs
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"results written to {a.json}")
    if a.plot:
        if not a.json:
            print("pytorch_ddp.py: --plot needs --json", file=sys.stderr)
        else:
            script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scale", "plot_scale.py")
            rc = os.spawnv(os.P_WAIT, sys.executable, [sys.executable, script, a.json, a.plot])
            print(f"plot written to {a.plot}" if rc == 0 else f"pytorch_ddp.py: warning: no plot (exit {rc})")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:  # a runtime failure: one line, exit 1
        print(f"pytorch_ddp.py: error: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
