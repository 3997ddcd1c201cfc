"""Every tool that reads a model file, on hostile model files (a module and a script).

tests/test_model_fuzz.py runs a fixed number of cases; by hand:

    python tests/model_fuzz.py --cases 2000 [--seed S] [--tool doctor]... [--notebooks]
    python tests/model_fuzz.py --seed S --case K --keep DIR   # replay one case

The cases come from tests/hostile_models.py.  Each tool runs on each case in
its own process with a time limit, and its verdict function says whether the
answer is acceptable.  Adding a tool that reads models means adding one row
to TOOLS.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from customops.ort import library_path  # noqa: E402
from hostile_models import ROOT, Case, make_case, seeds  # noqa: E402
from test_fuzz import child_env  # noqa: E402  (the children import the customops under test)

RUN_MODEL = Path(os.environ.get("CUSTOMOPS_RUN_MODEL", ROOT / "build" / "cpp" / "run_model"))
TIMEOUT = 60  # seconds per tool and case: a hang fails the case


# -- the tools and what they may answer ------------------------------------------

@dataclass(frozen=True)
class Answer:
    status: int
    stdout: str
    stderr: str


def cli(prog: str, statuses: dict, report: Callable) -> Callable[[Answer], str | None]:
    """The verdict on a command-line tool: a status in ``statuses`` (status ->
    how many stderr lines, naming the program, it prints; 0 for a report on
    stdout, which ``report`` checks), never a Python traceback."""
    def verdict(answer: Answer) -> str | None:
        if "Traceback (most recent call last)" in answer.stderr:
            return "a Python traceback"
        if answer.status not in statuses:
            return f"exit status {answer.status}"
        lines = answer.stderr.splitlines()
        if len(lines) != statuses[answer.status]:
            return f"{len(lines)} line(s) on stderr with exit status {answer.status}"
        if lines and not lines[0].startswith(f"{prog}: "):
            return "stderr does not start with the program's name"
        return None if lines else report(answer)
    return verdict


def doctor_report(answer: Answer) -> str | None:
    """The doctor's stdout, nothing else: its JSON report, giving the exit
    status, or its text, from the header line to the count of errors."""
    if answer.stdout.startswith("{"):
        try:
            status = json.loads(answer.stdout)["exit_status"]
        except (ValueError, KeyError):
            return "stdout is not the JSON report"
        return None if status == answer.status else f"the JSON report says exit status {status}"
    lines = answer.stdout.splitlines() or [""]
    if not re.search(r": onnxruntime \S+ \(reads IR <= \d+\), libraries: ", lines[0]):
        return "stdout does not start with the report's header"
    return None if re.match(r"\d+ error\(s\), \d+ warning\(s\)", lines[-1]) else \
        "no summary on stdout"


def run_model_report(answer: Answer) -> str | None:
    """run_model's stdout: one line per output, its name, dtype and shape."""
    lines = answer.stdout.splitlines()
    if lines and all(re.fullmatch(r".*: \w+ \(.*\)( -> .*\.npy)?", line) for line in lines):
        return None
    return "stdout is not one line per output"


def check_report(answer: Answer) -> str | None:
    """customops.check's stdout: its JSON, agreeing with the exit status, or
    one PASS/FAIL/SKIP line per check."""
    if answer.stdout.startswith("{"):
        try:
            ok = json.loads(answer.stdout)["ok"]
        except (ValueError, KeyError):
            return "stdout is not the JSON report"
        return None if ok == (answer.status == 0) else "the JSON's ok disagrees with the exit status"
    lines = answer.stdout.splitlines()
    if lines and all(re.match(r"(PASS|FAIL|SKIP) \w+: ", line) for line in lines):
        return None
    return "stdout is not one line per check"


# The doctor's verdict is onnxruntime's: an error only where a plain session
# with the library refuses the model (issue 49: IR version 0 was an error).
# Except a string that is not UTF-8 (kind not-utf8), an error of the doctor's
# own: onnxruntime 1.32.0 loads such a model, Python's protobuf cannot store it.
DOCTOR_AGREES = """
import sys

import onnxruntime

from customops import doctor

path, library = sys.argv[1:]
try:
    errors = [f for f in doctor.diagnose(path, [library]).errors if f.kind != "not-utf8"]
except doctor.ModelReadError:  # cannot read it: the doctor tool checks that answer
    sys.exit(0)
options = onnxruntime.SessionOptions()
options.log_severity_level = 4
options.register_custom_ops_library(library)
try:
    onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
except Exception:  # noqa: BLE001  refused: any verdict of the doctor agrees
    sys.exit(0)
if errors:
    sys.exit(f"doctor-agrees: the doctor reports an error where onnxruntime loads the model: "
             f"{errors[0].kind}: {errors[0].summary}")
"""


@dataclass(frozen=True)
class Tool:
    name: str
    argv: Callable[[Case], list]       # the command line for a case
    verdict: Callable[[Answer], str | None]  # None: acceptable; else what is wrong
    needs: Path | None = None          # a file that must exist (a built program)
    share: float = 1.0                 # the fraction of the cases it gets (a slow tool fewer)


# doctor: 0 or 1 with its report on stdout (as JSON in every other case), 2 with
# one line (cannot read the model); never 3 (its "internal error") or a traceback.
# doctor-agrees: 0, never an error where onnxruntime loads the model.
# run_model: 0 with its outputs, or 1 with one line.  Neither may die of a signal or hang.
TOOLS = {tool.name: tool for tool in [
    Tool("doctor", lambda c: [sys.executable, "-m", "customops.doctor", c.model,
                              "--library", library_path(), *["--json"] * (c.number % 2)],
         cli("customops.doctor", {0: 0, 1: 0, 2: 1}, doctor_report)),
    Tool("doctor-agrees", lambda c: [sys.executable, "-c", DOCTOR_AGREES, c.model, library_path()],
         cli("doctor-agrees", {0: 0}, lambda answer: None), share=1 / 3),
    Tool("run_model", lambda c: [RUN_MODEL, "--library", library_path(), c.model,
                                 *(f"{k}={v}" for k, v in c.inputs.items()), "--out", c.out],
         cli("run_model", {0: 0, 1: 1}, run_model_report), needs=RUN_MODEL),
    # customops.check starts child processes of its own for every model: its two
    # cheapest checks, on a third of the cases
    Tool("check", lambda c: [sys.executable, "-m", "customops.check", c.model,
                             "--library", library_path(), "--inputs", c.npz,
                             "--check", "declared", "--check", "determinism",
                             *["--json"] * (c.number % 2)],
         cli("customops.check", {0: 0, 1: 0, 2: 1}, check_report), share=1 / 3),
]}


def run_tool(tool: Tool, case: Case, timeout: float = TIMEOUT) -> str | None:
    """What is wrong with ``tool``'s answer on ``case`` (None: nothing)."""
    argv = [str(a) for a in tool.argv(case)]
    process = subprocess.Popen(argv, cwd=case.folder, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=child_env(), start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the tool and anything it started
        process.communicate()
        return f"no answer within {timeout} s (a hang)"
    if process.returncode < 0:
        return f"killed by signal {signal.Signals(-process.returncode).name}"
    answer = Answer(process.returncode, out.decode(errors="replace"),
                    err.decode(errors="replace"))
    problem = tool.verdict(answer)
    return None if problem is None else f"{problem}:\n{answer.stderr[-3000:]}"


def children_cpu() -> float:
    """CPU seconds used by the finished child processes: the cost on an idle machine."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(seed_value: int, cases: range, tools: list[Tool], folder: Path, workers: int = 2,
        notebooks: bool = False, keep: bool = False, progress=None) -> list[str]:
    """Every case with every tool; the failures, each naming its case.  The
    files of failing cases stay in ``folder``, and with ``keep`` all."""
    corpus = seeds(notebooks)

    def one(k):
        case = make_case(seed_value, k, corpus, folder / f"case{k}")
        failures = [f"{tool.name} on {case.key} ({case.what}): {problem}"
                    for tool in tools if (problem := run_tool(tool, case)) is not None]
        if not failures and not keep:
            shutil.rmtree(case.folder)
        if progress:
            progress(k, failures)
        return failures

    with ThreadPoolExecutor(workers) as pool:
        return [failure for failures in pool.map(one, cases) for failure in failures]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", type=int, default=300, help="how many cases (from 0)")
    parser.add_argument("--case", type=int, help="only this case (a replay)")
    parser.add_argument("--tool", action="append", choices=list(TOOLS),
                        help="only this tool (repeatable; default: all)")
    parser.add_argument("--notebooks", action="store_true",
                        help="also mutate notebooks/models/*.onnx")
    parser.add_argument("--keep", type=Path, help="write the cases here (and keep the failing "
                        "ones, or the one replayed)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    tools = [TOOLS[name] for name in args.tool or TOOLS]
    cases = range(args.case, args.case + 1) if args.case is not None else range(args.cases)
    folder = args.keep or Path(tempfile.mkdtemp(prefix="model_fuzz_"))
    start = time.perf_counter()
    failures = run(args.seed, cases, tools, folder, args.workers, args.notebooks,
                   keep=args.case is not None, progress=lambda k, f: print(f"case {k}: " + ("ok" if not f else "FAIL"),
                                               flush=True))
    print("\n".join(failures))
    print(f"{len(cases)} case(s) x {len(tools)} tool(s): {len(failures)} failure(s) in "
          f"{time.perf_counter() - start:.1f} s ({children_cpu():.1f} s CPU in the tools)"
          + (f"; files in {folder}" if failures else ""))
    if not args.keep and not failures:
        shutil.rmtree(folder)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
