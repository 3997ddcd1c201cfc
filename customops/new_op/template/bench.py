"""`make bench`: the speed of my_ops::scaled_row_sum in ONNX Runtime and in
PyTorch, at 1 thread and at N (the CPUs this process may use), side by side in
one run.  Writes the table to build/bench.md and the plot to build/bench.png.

The inputs are drawn as samples.py draws them, every named size set to one
number k, grown until one PyTorch call on one thread takes about --ms
milliseconds of CPU time (10 by default).  Each runtime's 1-thread and N-thread runs are
interleaved (which goes first alternates), and a speed-up is the median of the
per-pair ratios, so a load that comes and goes slows both sides of a pair.  The
ORT sessions do not spin between runs (session.intra_op.allow_spinning 0), or
the idle session's threads would take the cores from the running one.  Every
run's outputs must equal the first's, in both runtimes at every thread count:
the bench exits 1 otherwise."""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

import op  # noqa: F401  (loads the op)
from samples import sample
from schema import DTYPES, EXPORTED, INPUTS, NAME, NAMESPACE

BUILD = Path(__file__).resolve().parent / "build"
MODEL = BUILD / f"{NAME}_{DTYPES[0]}.onnx"  # the torch.export route's model
LIBRARY = BUILD / f"lib{NAME}_ort.so"
OP = getattr(getattr(torch.ops, NAMESPACE), NAME)
SYMBOLS = sorted({d for _, dims in INPUTS.values() for d in dims if isinstance(d, str)})
LIMIT = 1 << 26  # input elements: the size search stops there (a math too fast to reach the time)


def call_torch(arrays, threads=None):
    if threads:
        torch.set_num_threads(threads)
    tensors = [torch.from_numpy(arrays[name]) if name in arrays else None for name in INPUTS]
    outputs = OP(*tensors, **EXPORTED)
    return [t.numpy() for t in (outputs if isinstance(outputs, tuple) else (outputs,))]


def seconds(run, clock=time.perf_counter):
    start = clock()
    result = run()
    return clock() - start, result


def one_thread_seconds(arrays, calls=3):
    """The CPU time of a PyTorch call on this thread: unlike the time a call
    takes, it does not grow when other processes take the CPU."""
    call_torch(arrays, 1)  # warm
    return statistics.median(seconds(lambda: call_torch(arrays), time.thread_time)[0] for _ in range(calls))


def scaled_sample(dtype, target):
    """Inputs with every named size k: k doubled until a PyTorch call on one
    thread takes ``target`` seconds, then bisected between k/2 and k."""
    def draw(k):
        return sample(dtype, np.random.default_rng(0), sizes={s: k for s in SYMBOLS})

    def elements(k):
        return sum(np.prod([k if isinstance(d, str) else d for d in dims]) for _, dims in INPUTS.values())

    k = 1
    while SYMBOLS and elements(2 * k) <= LIMIT and one_thread_seconds(draw(k)) < target:
        k *= 2
    low, high = k // 2, k
    while high - low > max(1, high // 32):
        middle = (low + high) // 2
        low, high = (middle, high) if one_thread_seconds(draw(middle)) < target else (low, middle)
    return draw(high)


def ort_session(threads):
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(LIBRARY))
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(MODEL), options, providers=["CPUExecutionProvider"])


def interleaved(runs, rounds, prepare=lambda threads: None):
    """{threads: [seconds per round]} of each run, alternately first, each
    after an untimed prepare(threads); exits 1 when an output differs from the
    first run's."""
    first = {n: (prepare(n), run())[1] for n, run in runs.items()}  # warm, and the outputs to compare with
    reference = next(iter(first.values()))
    times = {n: [] for n in runs}
    for r in range(rounds):
        for n in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
            prepare(n)
            took, outputs = seconds(runs[n])
            times[n].append(took)
            for got, want in zip(outputs, reference):
                if not np.array_equal(got, want, equal_nan=True):
                    sys.exit(f"bench: the outputs at {n} threads differ from those at {next(iter(runs))}")
    return times, reference


def cpu_name():
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown CPU"


def plot(rows, title, path):
    import matplotlib
    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    runtimes = list(dict.fromkeys(r[0] for r in rows))
    counts = list(dict.fromkeys(r[1] for r in rows))
    figure, axes = plt.subplots(figsize=(6, 3.5))
    width = 0.8 / len(counts)
    for j, n in enumerate(counts):
        mine = [next(r for r in rows if r[0] == runtime and r[1] == n) for runtime in runtimes]
        bars = axes.bar([i + j * width for i in range(len(runtimes))], [r[2] for r in mine], width,
                        label=f"{n} thread{'s' * (n > 1)}")
        axes.bar_label(bars, [f"{r[2]:.2f} ms" + (f", {r[3]:.2f}x" if n > 1 else "") for r in mine])
    axes.set_xticks([i + width * (len(counts) - 1) / 2 for i in range(len(runtimes))], runtimes)
    axes.set_ylabel("ms per call (median)")
    axes.set_title(title, fontsize=9)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ms", type=float, default=10.0, help="one-thread PyTorch time to size the inputs for")
    parser.add_argument("--rounds", type=int, default=30, help="interleaved pairs per runtime")
    args = parser.parse_args()
    counts = sorted({1, len(os.sched_getaffinity(0))})
    dtype = DTYPES[0]
    arrays = scaled_sample(dtype, args.ms / 1000)
    sizes = ", ".join(f"{name} {tuple(a.shape)}" for name, a in arrays.items())

    results = {}
    sessions = {n: ort_session(n) for n in counts}
    results["ONNX Runtime"] = interleaved({n: (lambda s=s: s.run(None, arrays)) for n, s in sessions.items()},
                                          args.rounds)
    results["PyTorch"] = interleaved({n: (lambda: call_torch(arrays)) for n in counts}, args.rounds,
                                     prepare=torch.set_num_threads)
    torch.set_num_threads(counts[-1])
    (_, by_ort), (_, by_torch) = results.values()
    if not all(np.array_equal(a, b, equal_nan=True) for a, b in zip(by_ort, by_torch)):
        sys.exit("bench: the outputs of ONNX Runtime and PyTorch differ")

    rows = []
    for runtime, (times, _) in results.items():
        for n in counts:
            ratios = [one / mine for one, mine in zip(times[1], times[n])]
            rows.append((runtime, n, 1000 * statistics.median(times[n]), statistics.median(ratios)))
    title = f"{NAMESPACE}::{NAME} {dtype}: {sizes}\n{cpu_name()}, {args.rounds} interleaved pairs"
    table = [f"{title.replace(chr(10), '; ')}", "",
             "| runtime | threads | ms per call (median) | speed-up over 1 thread (median of per-pair ratios) |",
             "|---|---|---|---|",
             *(f"| {r} | {n} | {ms:.3f} | {ratio:.2f}x |" for r, n, ms, ratio in rows), "",
             f"Outputs identical at {' and '.join(map(str, counts))} threads in both runtimes, and between them."]
    BUILD.mkdir(exist_ok=True)
    (BUILD / "bench.md").write_text("\n".join(table) + "\n")
    plot(rows, title, BUILD / "bench.png")
    print("\n".join(table))
    print("wrote build/bench.md and build/bench.png")


if __name__ == "__main__":
    main()
