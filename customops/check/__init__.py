"""A conformance check for an ONNX Runtime custom-op library, as
torch.library.opcheck is for PyTorch ops.

    python -m customops.check MODEL.onnx --library LIB.so --inputs SAMPLE.npz
        [--inputs ...] [--reference FILE.py:FUNCTION] [--rtol R] [--atol A]
        [--threads N] [--budget MIB] [--failures DIR] [--json]

    from customops.check import run
    for r in run("model.onnx", ["libmy_ops.so"], ["small.npz", "large.npz"], reference=fn):
        print(r["name"], r["ok"], r["detail"])

Thirteen named checks (record.CHECKS), each a record {"name", "ok", "detail"};
ok is None for a check that did not run (reference, without a reference).
Everything that runs the library does so in child processes with a time
limit (runner.py, child.py), so a crash or a hang fails a check, naming the
case, and never the checker.  Needs onnx, onnxruntime and numpy, never torch.

The package, by concern:
    cli.py       the command line
    target.py    reads the model, samples and reference; the model variants
    runner.py    runs cases in child processes; child.py is that child
    valid.py     reference, declared vs actual, threads, determinism
    hostile.py   omitted inputs and outputs, wrong types and ranks, empty, non-finite
    explore.py   other attribute values, integer ids varied, grown samples, float types
    shrink.py    a failure of explore.py shrunk and written as a case to replay
    runtimes.py  the other onnxruntime releases at hand
    library.py   the library file (exports, needs, API version; api_probe.py)
"""

from __future__ import annotations

import tempfile

from .. import envs
from . import explore, hostile, library, runtimes, valid
from .record import CHECKS
from .runner import run_cases
from .target import CannotRun, read

__all__ = ["CHECKS", "CannotRun", "run"]
ON_SAMPLES = ("reference", "declared", "threads", "determinism", "runtimes")


def run(model, libraries, samples, reference=None, *, rtol=1e-5, atol=1e-6, threads=4, calls=8,
        checks=CHECKS, runtimes_python=None, timeout=60.0, budget=64 << 20,
        failures="customops-check-failures") -> list:
    """The records of ``checks`` for ``model`` (a path or onnx.ModelProto) with
    ``libraries`` registered, on ``samples`` (.npz paths or dicts of arrays,
    keyed by model input name; an absent key is an omitted optional input).

    ``reference(**arrays)`` returns the expected outputs in the model's output
    order (an array or a tuple).  ``threads`` threads share one session and
    each makes ``calls`` runs, going round the samples.  ``runtimes_python``: the pythons of other onnxruntime
    releases (default: the cached venvs of `customops.envs`).  ``timeout``: seconds a
    case may take before it counts as a hang.  Raises CannotRun when the
    check cannot start.  ``budget``: bytes the inputs of one grown copy of a
    sample may take (a sample larger than that cannot run).  ``failures``:
    the folder a failure of attributes, indices or larger is written to, as
    a model and an .npz that replay it."""
    unknown = sorted(set(checks) - set(CHECKS))
    if unknown:
        raise CannotRun(f"unknown check {', '.join(unknown)}; the checks: {', '.join(CHECKS)}")
    pythons = envs.ort_releases() if runtimes_python is None else runtimes_python
    with tempfile.TemporaryDirectory(prefix="customops-check-") as workdir:
        target = read(model, libraries, samples, reference, rtol, atol, workdir, budget)
        # the samples as given: what the checks on them, and runtimes, compare with
        cases = valid.cases(target, threads, calls) if set(checks) & set(ON_SAMPLES) else []
        for name, make in hostile.CASES.items():
            if name in checks:
                cases += make(target)
        results = run_cases(cases, target.libraries, target.workdir / "main", timeout)
        verdicts = {
            "reference": lambda: valid.check_reference(target, results),
            "declared": lambda: valid.check_declared(target, results),
            **{name: (lambda name=name: hostile.check(name, target, cases, results))
               for name in hostile.CASES},
            **{name: (lambda name=name: explore.check(name, target, timeout, failures))
               for name in explore.NOTHING},
            "threads": lambda: valid.check_threads(target, results, threads, calls),
            "determinism": lambda: valid.check_determinism(target, results),
            "runtimes": lambda: runtimes.check(target, results, pythons, timeout),
            "library": lambda: library.check(target, pythons, timeout),
        }
        return [verdicts[name]() for name in CHECKS if name in checks]
