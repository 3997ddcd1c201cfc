"""Where one deform_conv2d training step's time goes, phase by phase.

    .venv/bin/python bench/step_profile.py [--sizes 64,128] [--threads 1,2] [--steps 15]
    make profile

For each vector code this CPU runs (CUSTOMOPS_ISA caps the kernels' choice:
baseline, avx2, avx512) and each thread count, a fresh process runs the
bench's training step (N=1, C=O=64, 3x3, padding 1, mask and bias, float32)
with the kernels' phase timers on (csrc/kernels/profile.h), and prints per
step: the time inside each phase summed over the threads, the wall time of
the parallel loops, and each GEMM's GFLOP/s per thread beside torch.mm's on
the same shapes at one thread (MKL or oneDNN: its ratio means the same on
any CPU).  conv2d's step is timed in the same rounds, interleaved.  Figures
are medians over the steps.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# Phase names in the order of csrc/kernels/profile.h's Phase, with whether
# the figure is a wall time on the calling thread (True) or a time inside
# the phase summed over the threads (False).
PHASES = [
    ("forward: weights packed", False),
    ("forward: input to channels last", True),
    ("forward: sampling (weights, corners)", False),
    ("forward: gather (im2col)", False),
    ("forward: GEMM output = columns W", False),
    ("forward: tile loop", True),
    ("backward: packing, transposes", False),
    ("backward: layout copies", True),
    ("backward: input gradient zeroed", True),
    ("backward: GEMM G = dy^T W", False),
    ("backward: sampling (weights, corners)", False),
    ("backward: gather + offset/mask grads", False),
    ("backward: scatter (input gradient)", False),
    ("backward: GEMM grad_W = dy columns", False),
    ("backward: band loop (A, B, C)", True),
]
GEMMS = {4: "forward", 9: "G", 13: "grad_W"}
C = O = 64
TAPS = 9
K = C * TAPS


def child(size: int, threads: int, steps: int) -> dict:
    import torch

    import customops._C as _C
    import customops.ops

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, C, size, size, generator=g)
    weight = torch.randn(O, C, 3, 3, generator=g) * 0.05
    bias = torch.randn(O, generator=g)
    offset = torch.randn(1, 2 * TAPS, size, size, generator=g) * 2
    mask = torch.rand(1, TAPS, size, size, generator=g)
    grad = torch.randn(1, O, size, size, generator=g)

    def ours():
        t = [v.clone().requires_grad_() for v in (x, offset, weight, bias, mask)]
        y = customops.ops.deform_conv2d(t[0], t[1], t[2], t[3], padding=(1, 1), mask=t[4])
        y.backward(grad)

    def conv2d():
        t = [v.clone().requires_grad_() for v in (x, weight, bias)]
        torch.nn.functional.conv2d(t[0], t[1], t[2], padding=1).backward(grad)

    for _ in range(3):
        ours(), conv2d()
    rows, walls, conv = [], [], []
    for _ in range(steps):
        _C.profile_start()
        start = time.perf_counter()
        ours()
        walls.append(time.perf_counter() - start)
        rows.append(_C.profile_stop())
        start = time.perf_counter()
        conv2d()
        conv.append(time.perf_counter() - start)

    def mm_gflops(m, n, k):
        """torch.mm's GFLOP/s at one thread for (m x k) (k x n)."""
        torch.set_num_threads(1)
        a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
        for _ in range(3):
            torch.mm(a, b)
        times = []
        for _ in range(max(5, int(2e9 / (2 * m * n * k + 1)) // 10)):
            start = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - start)
        torch.set_num_threads(threads)
        return 2 * m * n * k / statistics.median(times) / 1e9

    phases = []
    for i in range(len(PHASES)):
        ns = statistics.median(r[i][0] for r in rows)
        calls, flops = rows[0][i][1], rows[0][i][2]
        phases.append({"ms": ns / 1e6, "calls": calls, "flops": flops,
                       "gflops": statistics.median(r[i][2] / r[i][0] for r in rows)
                       if flops else None})
    plane = size * size
    # The shapes as our kernels call them: a tile of pixels for the forward
    # and G GEMMs (its rows from the flop count), the image for grad_W.
    tile = lambda i, n, k: round(phases[i]["flops"] / phases[i]["calls"] / (2 * n * k))  # noqa: E731
    shapes = {4: (tile(4, O, K), O, K), 9: (tile(9, K, O), K, O), 13: (O, K, plane)}
    for i, (m, n, k) in shapes.items():
        phases[i]["shape"] = [m, n, k]
        phases[i]["mm_gflops"] = mm_gflops(m, n, k)
    return {"vector_code": _C.vector_code(), "step_ms": statistics.median(walls) * 1e3,
            "conv2d_ms": statistics.median(conv) * 1e3, "phases": phases}


def run_child(isa: str | None, size: int, threads: int, steps: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE")
    env.pop("CUSTOMOPS_ISA", None)
    if isa:
        env["CUSTOMOPS_ISA"] = isa
    out = subprocess.run([sys.executable, __file__, "--child", str(size), str(threads),
                          str(steps)], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def vector_codes() -> list[str]:
    """The vector codes this CPU runs, from the kernels' own choice."""
    best = run_child(None, 8, 1, 1)["vector_code"]
    order = ["baseline", "avx2", "avx512"]
    return order[: order.index(best) + 1]


def table(result: dict, size: int, threads: int) -> str:
    step = result["step_ms"]
    lines = [f"### {result['vector_code']}, {threads} thread{'s' if threads > 1 else ''}, "
             f"{size}x{size}: step {step:.2f} ms, conv2d step {result['conv2d_ms']:.2f} ms "
             f"({step / result['conv2d_ms']:.2f}x)",
             "",
             "| phase | ms per step | of the step | GEMM shape (m, n, k) | GFLOP/s per thread | "
             "torch.mm, 1 thread | ours / torch.mm |",
             "|---|---|---|---|---|---|---|"]
    for (name, wall), phase in zip(PHASES, result["phases"]):
        kind = " (wall)" if wall else ""
        cells = [f"{name}{kind}", f"{phase['ms']:.2f}", f"{100 * phase['ms'] / step:.0f}%"]
        if "shape" in phase:
            cells += ["x".join(map(str, phase["shape"])), f"{phase['gflops']:.1f}",
                      f"{phase['mm_gflops']:.1f}", f"{100 * phase['gflops'] / phase['mm_gflops']:.0f}%"]
        else:
            cells += ["", "", "", ""]
        lines.append("| " + " | ".join(cells) + " |")
    walls = sum(p["ms"] for (_, wall), p in zip(PHASES, result["phases"]) if wall)
    walls += result["phases"][0]["ms"]
    lines.append(f"| outside the kernels' loops (autograd, allocation, serial packing) | "
                 f"{step - walls:.2f} | {100 * (step - walls) / step:.0f}% | | | | |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="64,128", help="image sizes (default 64,128)")
    parser.add_argument("--threads", default="1,2", help="thread counts (default 1,2)")
    parser.add_argument("--steps", type=int, default=15, help="profiled steps (default 15)")
    parser.add_argument("--isa", default=None,
                        help="vector codes (default: every one this CPU runs)")
    parser.add_argument("--child", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    codes = args.isa.split(",") if args.isa else vector_codes()
    print(f"load average {os.getloadavg()[0]:.2f}; vector codes {', '.join(codes)}")
    print("Phases marked (wall) are loop times on the calling thread; the others are "
          "time inside the phase summed over the threads.\n")
    for size in map(int, args.sizes.split(",")):
        for code in codes:
            for threads in map(int, args.threads.split(",")):
                result = run_child(code, size, threads, args.steps)
                print(table(result, size, threads) + "\n", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
