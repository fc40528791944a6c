#!/usr/bin/env python3
"""PyTorch peer for lockstep's GPT training step: a GPT-2-layout language model in plain PyTorch.

Model: token + learned position embeddings, --layers pre-norm blocks (LayerNorm eps 1e-5 ->
causal multi-head attention with a fused qkv Linear and F.scaled_dot_product_attention -> output
Linear -> residual; LayerNorm -> Linear 4C -> GELU tanh form -> Linear C -> residual), final
LayerNorm, logits = h @ wte^T (tied, no bias), mean cross-entropy of the next token. GPT-2's init
(N(0, 0.02), residual projections N(0, 0.02/sqrt(2 layers)), zero biases). No dropout unless
--dropout. AdamW (lr, weight decay on every parameter, as lockstep does), fused where this torch
has it. One process, --threads compute threads (torch.set_num_threads and OPENBLAS/OMP/MKL
threads, set before torch loads).

Data: random tokens in [0, vocab) (seeded), or --data FILE: byte tokens (0..255) from random
windows of the file. All batches of the run are made before the timed loop ([batch, seq + 1]
contiguous int64; inputs are the first seq, targets the last seq). Each step: zero grads (None),
forward, loss, backward, optimizer step. --compile auto (default) measures eager and
torch.compile(model) and reports the faster ("torch_compile" in the run).

--precision f32 (default) runs everything in f32. --precision bf16 runs forward and loss under
torch.autocast(device_type="cpu", dtype=torch.bfloat16): PyTorch's standard mixed
precision, the split lockstep's bf16 uses -- matmul operands (Linear, attention, the tied
lm_head) in bf16 with f32 accumulation, autocast's f32-listed ops (cross-entropy, ...) in f32;
master weights, grads and AdamW state stay f32. "precision" in the JSON says which, and
"onednn_bf16" whether this torch's oneDNN reports native bf16 support on this CPU.

  python3 bench/peers/pytorch_gpt.py --layers 4 --hidden 256 --heads 4 --seq 128 --vocab 258 \\
      --batch 8 --steps 30 --warmup 5 --threads 1 --precision bf16 --json out/gpt-pytorch.json

--device cuda runs on the first GPU instead, as nanoGPT trains GPT-2 there: bf16 autocast on
CUDA, F.scaled_dot_product_attention (its flash kernel for causal bf16), fused AdamW, TF32
allowed for the f32 matmuls autocast leaves, and each step timed to a torch.cuda.synchronize().
scripts/gpu-check runs it at the GPT-2 124M step (12 x 768, seq 1024, batch 16, vocabulary
50,257, --compile on) as the same-card peer of lockstep-bench's Gpt2/124M/cuda:0/bf16.

tokens_per_s = batch * seq / median step time over the timed steps (after --warmup);
samples_per_s = sequences/s likewise. --processes N (> 1) runs N DDP processes over gloo
(torch.multiprocessing spawn), each with --batch sequences of its own and --threads threads:
tokens_per_s = N * batch * seq / rank 0's median step time. The JSON has the shape of
pytorch_ddp.py's (one run, devices N) plus "gpt": {layers, hidden, heads, seq, vocab}, "batch",
"processes", tokens_per_s in the run;
compare.py reads both. Exit codes: 0 success, 1 runtime failure, 2 usage error.
"""
import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time


def parse_args(argv):
    p = argparse.ArgumentParser(prog="pytorch_gpt.py", description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--vocab", type=int, default=258)
    p.add_argument("--batch", type=int, default=8, help="sequences per step")
    p.add_argument("--steps", type=int, default=30, help="steps in all, warm-up included")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--windows", type=int, default=5)
    p.add_argument("--threads", "--host-threads", dest="threads", type=int, default=1)
    p.add_argument("--processes", type=int, default=1,
                   help="DDP processes (gloo), each with --batch sequences and --threads threads")
    p.add_argument("--data", default="", help="a file whose bytes are the tokens (else random)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--compile", default="auto", choices=["auto", "off", "on"])
    p.add_argument("--precision", default="f32", choices=["f32", "bf16"],
                   help="bf16: forward and loss under torch.autocast bfloat16 (weights, grads, "
                        "optimizer f32)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="cuda: the first GPU (one process); cpu: host threads")
    p.add_argument("--json", default="")
    a = p.parse_args(argv)
    for name in ("layers", "hidden", "heads", "seq", "vocab", "batch", "steps", "windows", "threads",
                 "processes"):
        if getattr(a, name) <= 0:
            p.error(f"--{name} must be positive")
    if a.hidden % a.heads:
        p.error(f"--hidden {a.hidden} does not divide by --heads {a.heads}")
    if a.device == "cuda" and a.processes != 1:
        p.error("--device cuda runs one process on the first GPU: drop --processes")
    if a.data and a.vocab < 256:
        p.error("--data gives byte tokens 0..255: --vocab must be at least 256")
    if not 0 <= a.dropout < 1:
        p.error("--dropout must be in [0, 1)")
    if a.warmup < 0 or a.steps - a.warmup < a.windows:
        p.error(f"--steps {a.steps} minus --warmup {a.warmup} leaves fewer timed steps than "
                f"--windows {a.windows}")
    return a


def build_model(a, torch):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            c = a.hidden
            self.ln_1, self.ln_2 = nn.LayerNorm(c, eps=1e-5), nn.LayerNorm(c, eps=1e-5)
            self.c_attn, self.attn_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
            self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).view(b, t, 3, a.heads, c // a.heads).unbind(2)
            y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               dropout_p=a.dropout if self.training else 0.0,
                                               is_causal=True)
            y = self.attn_proj(y.transpose(1, 2).reshape(b, t, c))
            x = x + F.dropout(y, a.dropout, self.training)
            y = self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
            return x + F.dropout(y, a.dropout, self.training)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(a.vocab, a.hidden), nn.Embedding(a.seq, a.hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(a.layers))
            self.ln_f = nn.LayerNorm(a.hidden, eps=1e-5)
            for name, p in self.named_parameters():
                if name.endswith("proj.weight"):
                    nn.init.normal_(p, std=0.02 / math.sqrt(2 * a.layers))
                elif p.dim() == 2:
                    nn.init.normal_(p, std=0.02)
                elif not name.startswith("ln") and ".ln_" not in name:
                    nn.init.zeros_(p)
            self.register_buffer("pos", torch.arange(a.seq), persistent=False)

        def forward(self, ids, targets):
            x = F.dropout(self.wte(ids) + self.wpe(self.pos[:ids.shape[1]]), a.dropout, self.training)
            for block in self.blocks:
                x = block(x)
            logits = self.ln_f(x) @ self.wte.weight.t()  # tied lm_head
            return F.cross_entropy(logits.reshape(-1, a.vocab), targets.reshape(-1))

    return GPT()


def make_optimizer(model, a, torch):
    for impl in ({"fused": True}, {"foreach": True}, {}):
        try:
            opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay, **impl)
            return opt, next(iter(impl), "for-loop")
        except (RuntimeError, TypeError, ValueError):
            continue
    raise RuntimeError("no AdamW implementation accepted these parameters")


def premade_batches(a, torch, rank=0):
    gen = torch.Generator().manual_seed(a.seed + 1000 * rank)
    count = min(a.steps, 64)  # later steps reuse them in turn
    if not a.data:
        return [torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=gen) for _ in range(count)]
    with open(a.data, "rb") as f:
        data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
    if data.numel() < a.seq + 1:
        raise RuntimeError(f"{a.data}: {data.numel()} bytes, fewer than --seq + 1 = {a.seq + 1}")
    batches = []
    for _ in range(count):
        starts = torch.randint(0, data.numel() - a.seq, (a.batch,), generator=gen)
        batches.append(torch.stack([data[s:s + a.seq + 1] for s in starts.tolist()]).long().contiguous())
    return batches


def measure(a, torch, use_compile, rank=0, world=1):
    torch.manual_seed(a.seed)
    cuda = a.device == "cuda"
    model = build_model(a, torch).train()
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        model = model.to("cuda")
    opt, opt_impl = make_optimizer(model, a, torch)
    wrapped = model
    if world > 1:  # DDP: each process its own batch; gradients averaged over gloo, bucketed
        wrapped = torch.nn.parallel.DistributedDataParallel(model)
    net = torch.compile(wrapped) if use_compile else wrapped
    batches = [(b[:, :-1].contiguous().to(a.device), b[:, 1:].contiguous().to(a.device))
               for b in premade_batches(a, torch, rank)]
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if a.precision == "bf16":
        autocast = lambda: torch.autocast(device_type=a.device, dtype=torch.bfloat16)
    else:
        autocast = contextlib.nullcontext
    losses, step_s = [], []
    start = time.perf_counter()
    for s in range(a.steps):
        ids, targets = batches[s % len(batches)]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = net(ids, targets)
        loss.backward()
        opt.step()
        sync()
        dt = time.perf_counter() - t0
        losses.append(loss.detach())
        if s >= a.warmup:
            step_s.append(dt)
    wall = time.perf_counter() - start
    timed = len(step_s)
    windows = []
    for w in range(a.windows):
        part = step_s[timed * w // a.windows:timed * (w + 1) // a.windows]
        windows.append(len(part) * a.batch * a.seq / sum(part))
    median = statistics.median(step_s)
    windows = [w * world for w in windows]
    device_list = "cuda:0" if cuda else ",".join(f"host:{r}" for r in range(world))
    return {"devices": world, "device_list": device_list,
            "global_batch": a.batch * world,
            "samples_per_s": world * a.batch / median, "per_device_samples_per_s": a.batch / median,
            "tokens_per_s": world * a.batch * a.seq / median, "efficiency": None,
            "step_ms_median": median * 1e3, "comm_exposed_ms": None,
            "final_loss": torch.stack(losses[-10:]).mean().item(),
            "first_loss": losses[0].item(), "window_tokens_per_s": windows,
            "window_samples_per_s": [w / a.seq for w in windows], "wall_s": wall,
            "torch_compile": use_compile}, sum(p.numel() for p in model.parameters()), opt_impl


def ddp_worker(rank, a, use_compile, port, results):
    """One DDP process: joins the gloo group, measures, and rank 0 hands its run back."""
    import torch
    import torch.distributed as dist
    torch.set_num_threads(a.threads)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=a.processes)
    try:
        run = measure(a, torch, use_compile, rank, a.processes)
        if rank == 0:
            results.put(run)
    finally:
        dist.destroy_process_group()


def measure_ddp(a, torch, use_compile):
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as sock:  # a free port for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    mp.start_processes(ddp_worker, args=(a, use_compile, port, results), nprocs=a.processes,
                       start_method="spawn")
    return results.get()


def onednn_bf16(torch):
    """Whether oneDNN is present and reports native bf16 on this CPU (None where torch can't say)."""
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return None


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def main(argv):
    a = parse_args(argv)  # exits 2 on bad flags
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(a.threads)  # before torch loads its BLAS
    try:
        import torch
    except ImportError:
        print("pytorch_gpt.py: PyTorch is missing: python3 -m pip install torch", file=sys.stderr)
        return 1
    if a.device == "cuda" and not torch.cuda.is_available():
        print("pytorch_gpt.py: --device cuda, but this torch sees no GPU", file=sys.stderr)
        return 1
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    variants = {"off": [False], "on": [True], "auto": [False, True]}[a.compile]
    if not hasattr(torch, "compile"):
        variants = [False]
    print(f"pytorch_gpt.py: {a.layers} layers, hidden {a.hidden}, {a.heads} heads, seq {a.seq}, "
          f"vocab {a.vocab}, batch {a.batch}, {a.steps} steps ({a.warmup} warm-up), "
          f"{a.threads} thread(s) x {a.processes} process(es), {a.precision}, "
          f"torch {torch.__version__}", file=sys.stderr, flush=True)
    tried, params, opt_impl = {}, 0, ""
    for use_compile in variants:
        name = "compiled" if use_compile else "eager"
        try:
            measured = measure_ddp if a.processes > 1 else measure
            tried[use_compile], params, opt_impl = measured(a, torch, use_compile)
        except Exception as e:
            if not use_compile or a.compile == "on":
                raise
            print(f"pytorch_gpt.py: compiled run failed ({type(e).__name__}: {e}); keeping eager",
                  file=sys.stderr)
            continue
        r = tried[use_compile]
        print(f"pytorch_gpt.py: {name}: {r['tokens_per_s']:.0f} tokens/s, step {r['step_ms_median']:.1f} ms, "
              f"loss {r['first_loss']:.3f} -> {r['final_loss']:.3f}", file=sys.stderr, flush=True)
    best = max(tried, key=lambda c: tried[c]["tokens_per_s"])
    run = tried[best]
    run["compile_tokens_per_s"] = {("compiled" if c else "eager"): t["tokens_per_s"] for c, t in tried.items()}
    doc = {"mode": "weak" if a.processes > 1 else "single", "model": "gpt", "backend": "pytorch",
           "device_kind": "cuda" if a.device == "cuda" else "host",
           "gpt": {"layers": a.layers, "hidden": a.hidden, "heads": a.heads, "seq": a.seq,
                   "vocab": a.vocab, "dropout": a.dropout},
           "widths": [a.layers, a.hidden, a.heads, a.seq, a.vocab], "params": params,
           "optimizer": "adamw", "optimizer_impl": opt_impl, "lr": a.lr, "seed": a.seed,
           "steps": a.steps, "warmup": a.warmup, "windows": a.windows, "global_batch": a.batch,
           "batch": a.batch, "per_device_batch": a.batch, "processes": a.processes,
           "data": a.data or "random", "compile": a.compile,
           "precision": a.precision, "onednn_bf16": onednn_bf16(torch),
           "torch_version": torch.__version__, "threads_per_process": a.threads,
           "host_threads_per_device": a.threads,
           "machine": {"cores": len(os.sched_getaffinity(0)), "cpu": cpu_model(),
                       "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0},
           "runs": [run]}
    print(f"pytorch gpt {a.layers}x{a.hidden} ({params} params): {run['tokens_per_s']:.0f} tokens/s "
          f"({'torch.compile' if best else 'eager'}), step {run['step_ms_median']:.1f} ms, "
          f"batch {a.batch} x seq {a.seq} per process, {a.processes} process(es) (DDP over gloo "
          f"when > 1), {a.threads} thread(s) each, {a.precision}")
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"results written to {a.json}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:  # a runtime failure: one line, exit 1
        print(f"pytorch_gpt.py: error: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
