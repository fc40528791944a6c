#!/usr/bin/env python3
"""A PROJECTION, not a measurement: data-parallel efficiency of GPT-2 124M across nodes of 8 GPUs.

usage: internode.py [--step-ms X] [--intra-busbw GBps] [--nic-gbit Gbps] [--nodes 1,2,4,8] ...

Model (stated so it can be checked and replaced by measured inputs):
  - each step computes for `step_ms` per GPU (weak scaling: the same per GPU at any size), of which
    `backward_share` is backward, where the gradient all-reduce overlaps it bucket by bucket;
  - the all-reduce moves S = parameters x gradient bytes over all n = 8 x nodes GPUs in
    time = S x 2(n-1)/n / busbw (nccl-tests' busbw definition). One node: the in-node NVLink
    busbw. Several: NCCL runs one ring per channel, each leaving the node through another GPU's
    NIC (rail-optimised fabric, one NIC per GPU), so a node's 8 NICs share its 2(n-1)/n x S of
    outgoing traffic: busbw = min(in-node busbw, 8 x NIC bandwidth x `nic_efficiency`). NCCL's
    tree and NVLS algorithms, and latency, are not modelled;
  - exposed communication = max(0, all-reduce - overlap x backward) + the last bucket's
    all-reduce, which cannot overlap; efficiency = step / (step + exposed).
Defaults (assumptions, with their sources in docs/benchmarks.md): step_ms from issue 12's goal of
MFU 0.45 on an H200 (989 TFLOP/s dense bf16) at 16 x 1024 tokens per GPU; in-node busbw 460 GB/s
(8 x H100/H200 SXM with NVSwitch, nccl-tests); 400 Gb/s InfiniBand per GPU at 90%.
"""
import argparse


def flops_per_token(params, layers, hidden, seq):
    # 6 per weight (forward + backward) plus attention's 12 x layers x hidden x seq (PaLM's count).
    return 6 * params + 12 * layers * hidden * seq


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=float, default=124.4e6)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--tokens-per-gpu", type=int, default=16 * 1024)
    ap.add_argument("--mfu", type=float, default=0.45)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--step-ms", type=float, default=None, help="measured step time (overrides MFU)")
    ap.add_argument("--grad-bytes", type=int, default=4, help="4: f32 gradients (today), 2: bf16")
    ap.add_argument("--intra-busbw", type=float, default=460.0, help="GB/s, in-node all-reduce")
    ap.add_argument("--nic-gbit", type=float, default=400.0, help="Gb/s per GPU between nodes")
    ap.add_argument("--nic-efficiency", type=float, default=0.9)
    ap.add_argument("--backward-share", type=float, default=2 / 3)
    ap.add_argument("--overlap", type=float, default=0.9, help="share of backward the reduce can hide under")
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    ap.add_argument("--nodes", default="1,2,4,8")
    a = ap.parse_args()

    step_ms = a.step_ms
    if step_ms is None:
        flops = flops_per_token(a.params, a.layers, a.hidden, a.seq) * a.tokens_per_gpu
        step_ms = flops / (a.mfu * a.peak_tflops * 1e12) * 1e3
    size = a.params * a.grad_bytes
    print(f"PROJECTION (not measured): step {step_ms:.1f} ms per GPU, gradients "
          f"{size / 1e6:.0f} MB ({a.grad_bytes} B each), in-node busbw {a.intra_busbw:.0f} GB/s, "
          f"{a.nic_gbit:.0f} Gb/s per GPU between nodes at {a.nic_efficiency:.0%}\n")
    print("| nodes | GPUs | busbw GB/s | all-reduce ms | exposed ms | efficiency |")
    print("|---:|---:|---:|---:|---:|---:|")
    for nodes in (int(x) for x in a.nodes.split(",")):
        n = 8 * nodes
        nic_busbw = 8 * a.nic_gbit / 8 * a.nic_efficiency  # 8 NICs per node, Gb/s -> GB/s
        busbw = a.intra_busbw if nodes == 1 else min(a.intra_busbw, nic_busbw)
        factor = 2 * (n - 1) / n
        allreduce_ms = size * factor / (busbw * 1e9) * 1e3
        tail_ms = min(size, a.bucket_mb * 2**20) * factor / (busbw * 1e9) * 1e3
        hidden_ms = a.overlap * a.backward_share * step_ms
        exposed_ms = max(0.0, allreduce_ms - hidden_ms) + tail_ms
        print(f"| {nodes} | {n} | {busbw:.0f} | {allreduce_ms:.2f} | {exposed_ms:.2f} | "
              f"{step_ms / (step_ms + exposed_ms):.3f} |")


if __name__ == "__main__":
    main()
