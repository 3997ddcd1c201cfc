"""Benchmark of the customops kernels against their references, side by side.

    .venv/bin/python bench/run.py [--threads N] [--only knn,my_add] [--no-notebooks] [--no-build]
                                  [--publish]
    make bench BENCH_ARGS="--threads 1"

Writes bench/results/results.json, results.md and ratios.png; see bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _threads_option(argv) -> int:
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--threads", type=int, default=os.cpu_count())
    return early.parse_known_args(argv)[0].threads


# The OpenMP runtimes (torch's libgomp, pykdtree's own copy) read these once,
# when loaded.  PASSIVE is OpenMP's allow_spinning = 0: by default a pool's
# threads spin after each parallel region and steal the cores of whichever
# contender runs next.
os.environ["OMP_NUM_THREADS"] = str(_threads_option(sys.argv[1:]))
os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
# numpy's OpenBLAS keeps a server thread busy (measured with perf: about 10%
# of the samples of a loop of ORT runs that made no BLAS call), and no
# contender times a BLAS call of numpy's: one thread, none to steal a core.
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import cases  # noqa: E402
import report  # noqa: E402
import suite  # noqa: E402
from harness import TimingPlan, run_case  # noqa: E402

RESULTS = HERE / "results"
PUBLISHED_PNG = "docs/bench.png"  # relative to the repository
PUBLISHED_PAGE = "docs/benchmarks.md"  # the README links to it
# The page's generated section lies between these two lines.
PUBLISHED_MARKERS = ("<!-- bench/run.py --publish: start -->", "<!-- bench/run.py --publish: end -->")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="threads for every contender (default: all cores); the "
                             "thread-scaling group always compares 1 and 2")
    parser.add_argument("--only", default=",".join(cases.GROUPS),
                        help=f"comma-separated groups to run (default: all of {','.join(cases.GROUPS)})")
    parser.add_argument("--warmup", type=int, default=1,
                        help="untimed rounds first, at least 1 (default 1)")
    parser.add_argument("--min-repeat", type=int, default=5,
                        help="timed rounds at least (default 5)")
    parser.add_argument("--max-repeat", type=int, default=1001,
                        help="timed rounds at most (default 1001)")
    parser.add_argument("--budget", type=float, default=1.0,
                        help="seconds of timed calls per contender and case; decides the "
                             "repetitions between the two bounds (default 1)")
    parser.add_argument("--cdist-limit", type=float, default=2.0 ** 26,
                        help="largest n*m per cloud for cdist+topk (default 2^26)")
    parser.add_argument("--notebooks", action=argparse.BooleanOptionalAction, default=True,
                        help="time pytest --nbval per notebook (default on: ~1 min)")
    parser.add_argument("--build", action=argparse.BooleanOptionalAction, default=True,
                        help="time a from-scratch build in a temp dir and customops.check on "
                             "one node (default on: ~1 min)")
    parser.add_argument("--publish", action="store_true",
                        help=f"also copy the plot to {PUBLISHED_PNG} and write the report into {PUBLISHED_PAGE}")
    parser.add_argument("--out", type=Path, default=RESULTS, help="output directory")
    args = parser.parse_args(argv)
    if args.warmup < 1:
        parser.error("--warmup: at least 1 (the first call sizes preallocated outputs)")
    unknown = set(args.only.split(",")) - set(cases.GROUPS)
    if unknown:
        parser.error(f"--only: unknown group(s) {', '.join(sorted(unknown))}")
    return args


def set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)


def run_groups(groups, plan) -> dict:
    results = {}
    for group in groups:
        print(f"\n== {group.title}", flush=True)
        for case in group.cases:
            print(f"{case.label}", flush=True)
            results[case.key] = run_case(case, plan, log=lambda line: print(line, flush=True))
    return results


def run_suite(args) -> tuple[dict, list[str]]:
    extras, notebook_rows, build_row, check_row = {}, None, None, None
    if args.notebooks:
        print("\n== notebooks (pytest --nbval)", flush=True)
        notebook_rows = extras["notebooks"] = suite.notebooks()
    if args.build:
        print("\n== build", flush=True)
        build_row = extras["build"] = suite.build()
        print("\n== customops.check", flush=True)
        check_row = extras["check"] = suite.check_tool()
    return extras, suite.markdown(notebook_rows, build_row, check_row)


def write_outputs(out: Path, text: str, data: dict, groups, results, target_rows) -> Path:
    import json

    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(text)
    (out / "results.json").write_text(json.dumps(data, indent=2) + "\n")
    png = out / "ratios.png"
    report.plot(groups, results, target_rows, png)
    return png


def publish(png: Path, text: str, root: Path = report.REPO) -> None:
    """Copies the plot to PUBLISHED_PNG and replaces the generated section of
    PUBLISHED_PAGE (between the two PUBLISHED_MARKERS) with this run's report."""
    target = root / PUBLISHED_PNG
    target.parent.mkdir(exist_ok=True)
    shutil.copy2(png, target)
    page = root / PUBLISHED_PAGE
    content = page.read_text()
    start, end = (content.index(marker) for marker in PUBLISHED_MARKERS)
    section = text.split("\n", 1)[1]  # without the title: the page has its own
    image = os.path.relpath(target, page.parent)
    content = (content[:start + len(PUBLISHED_MARKERS[0])] + "\n" + section.strip() + "\n\n"
               + f"![benchmark ratios]({image})\n" + content[end:])
    page.write_text(content)
    print(f"\ncopied {png} -> {target}; replaced the generated section of {page}")


def main(argv=None) -> int:
    start = time.perf_counter()
    args = parse_args(argv)
    set_threads(args.threads)
    plan = TimingPlan(args.warmup, args.min_repeat, args.max_repeat, args.budget)
    groups = cases.groups(args.only.split(","), args.threads, args.cdist_limit)
    env = report.environment(args.threads)
    print(f"{env['cpu']} ({env['vector_code']}), {env['cores']} cores, {args.threads} threads")

    results = run_groups(groups, plan)
    target_rows = report.evaluate_targets(cases.targets(), groups, results)
    extras, suite_lines = run_suite(args)

    settings = {k: v for k, v in vars(args).items() if k not in ("out",)}
    settings["elapsed_s"] = time.perf_counter() - start
    suite_lines.append(f"Benchmark run time: {settings['elapsed_s']:.0f} s.")
    text = report.markdown(env, settings, groups, results, target_rows, suite_lines)
    data = report.to_json(env, settings, groups, results, target_rows, extras)
    png = write_outputs(args.out, text, data, groups, results, target_rows)

    print("\n" + text)
    print(f"wrote {args.out / 'results.md'}, {args.out / 'results.json'}, {png}")
    if args.publish:
        publish(png, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
