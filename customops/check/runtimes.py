"""The runtimes check: the samples in each onnxruntime release at hand.

Other releases are the venvs `python -m customops.envs onnxruntime==VERSION`
caches (`make ort-venvs` prepares the course's), or any python given; each
holds only onnxruntime and numpy, which is all child.py needs.  A release that refuses
the library or the model is reported with its message (a library may well
support only newer runtimes); one that crashes, hangs or gives other outputs
than the installed runtime fails the check.
"""

from __future__ import annotations

import numpy as np
import onnxruntime

from .record import record
from .runner import run_cases, stopped
from .valid import compare, line, outputs

def check(target, results, pythons, timeout):
    reports, failed = [], None
    installed, problem = zip(*[outputs(target, results, "first", i)
                               for i in range(len(target.samples))])
    if any(problem):
        return record("runtimes", False, f"onnxruntime {onnxruntime.__version__} (installed): "
                      f"{next(p for p in problem if p)}")
    for python in pythons:
        version, verdict, bad = _one(target, python, installed, timeout)
        reports.append(f"{version} {verdict}")
        failed = failed or (bad and f"onnxruntime {version}: {verdict}")
    reports.append(f"{onnxruntime.__version__} (installed) runs them")
    if failed:
        return record("runtimes", False, failed)
    return record("runtimes", True, "; ".join(reports))


def _one(target, python, installed, timeout):
    """(version, what happened, whether it is a failure) for one runtime."""
    workdir = target.new_path("-runtime")
    cases = []
    for i, sample in enumerate(target.samples):
        cases.append({"id": f"first:{i}", "kind": "run", "model": target.write_model(
            target.sample_model(sample)), "feeds": [target.write_feeds(sample.arrays)],
            "out": str(workdir / f"first{i}.npz")})
    results = run_cases(cases, target.libraries, workdir, timeout, python)
    version = next((r["runtime"] for r in results.values() if "runtime" in r), str(python))
    for i, sample in enumerate(target.samples):
        done = results[f"first:{i}"]
        if stopped(done):
            return version, f"sample {sample.name}: {stopped(done)}", True
        if done["status"] != "ran":
            return version, f"refuses: {line(done)}", False
        with np.load(workdir / f"first{i}.npz") as data:
            got = [data[k] for k in target.output_names]
        problem = compare(got, installed[i], target.output_names, target.rtol, target.atol)
        if problem:
            return version, f"sample {sample.name} differs from the installed runtime: {problem}", True
    return version, "runs them", False
