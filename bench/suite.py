"""Wall-clock times of the notebook suite (pytest --nbval, one notebook per
subprocess), of a from-scratch build in a temporary directory, and of
`python -m customops.check` on a single-node model (target: under 30 s)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import REPO

# What setup.py needs to build; copied so the build never touches the repo.
BUILD_INPUTS = ("setup.py", "pyproject.toml", "csrc", "tools")


def _timed_run(command, cwd) -> tuple[float, int, str]:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    tail = (done.stdout + done.stderr).strip().splitlines()[-1:] or [""]
    return seconds, done.returncode, tail[0]


def notebooks(log=print) -> list[dict]:
    rows = []
    for notebook in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        command = [sys.executable, "-m", "pytest", str(notebook.relative_to(REPO)), "-q",
                   "-p", "no:cacheprovider"]
        seconds, code, tail = _timed_run(command, REPO)
        rows.append({"notebook": notebook.name, "seconds": seconds, "passed": code == 0,
                     "summary": tail})
        log(f"  {notebook.name:<28} {seconds:7.1f} s  {'passed' if code == 0 else tail}")
    return rows


def build(log=print) -> dict:
    """setup.py build_ext of a copy of the sources, with --build-temp and
    --build-lib inside the temporary directory."""
    with tempfile.TemporaryDirectory(prefix="customops-bench-build-") as tmp:
        root = Path(tmp)
        for name in BUILD_INPUTS:
            source = REPO / name
            if source.is_dir():
                shutil.copytree(source, root / name)
            else:
                shutil.copy2(source, root / name)
        package = root / "customops"
        package.mkdir()
        for module in (REPO / "customops").glob("*.py"):
            shutil.copy2(module, package / module.name)
        command = [sys.executable, "setup.py", "-q", "build_ext",
                   "--build-temp", str(root / "build-temp"), "--build-lib", str(root / "build-lib")]
        seconds, code, tail = _timed_run(command, root)
        built = sorted(p.name for p in (root / "build-lib" / "customops").glob("*.so"))
    log(f"  build_ext {seconds:.1f} s, {'ok' if code == 0 else 'FAILED: ' + tail}: {built}")
    return {"seconds": seconds, "ok": code == 0, "built": built, "summary": tail}


CHECK_LIMIT = 30.0  # seconds for a single-node model and two samples, older runtimes included


def check_tool(log=print) -> dict:
    """`python -m customops.check` with every check on my_add as one node,
    two samples (4x5 and 300x1000) and a reference, as docs/check.md runs it."""
    import numpy as np
    import onnx

    from customops.builder import single_node_model
    from customops.ort import library_path

    rng = np.random.default_rng(0)
    samples = [{name: rng.random(shape, dtype=np.float32) for name in "ab"}
               for shape in ((4, 5), (300, 1000))]
    with tempfile.TemporaryDirectory(prefix="customops-bench-check-") as tmp:
        root = Path(tmp)
        onnx.save(single_node_model("my_add", samples[0], ["c"]), root / "my_add.onnx")
        for name, sample in zip(("small", "large"), samples):
            np.savez(root / f"{name}.npz", **sample)
        (root / "reference.py").write_text("def my_add(a, b):\n    return 2 * a + b\n")
        command = [sys.executable, "-m", "customops.check", "my_add.onnx", "--library",
                   library_path(), "--inputs", "small.npz", "--inputs", "large.npz",
                   "--reference", "reference.py:my_add"]
        seconds, code, tail = _timed_run(command, root)
    verdict = "PASS" if code == 0 and seconds < CHECK_LIMIT else "FAIL"
    log(f"  customops.check {seconds:.1f} s (exit {code}): {verdict} (target < {CHECK_LIMIT:.0f} s)")
    return {"seconds": seconds, "exit": code, "verdict": verdict, "summary": tail}


def markdown(notebook_rows, build_row, check_row=None) -> list[str]:
    lines = []
    if notebook_rows:
        total = sum(r["seconds"] for r in notebook_rows)
        lines += ["## Notebook suite (pytest --nbval, one process per notebook)", "",
                  "| notebook | seconds | result |", "| --- | ---: | --- |"]
        lines += [f"| {r['notebook']} | {r['seconds']:.1f} | "
                  f"{'passed' if r['passed'] else 'FAILED: ' + r['summary']} |"
                  for r in notebook_rows]
        lines += [f"| total | {total:.1f} | |", ""]
    if build_row:
        result = "ok" if build_row["ok"] else "FAILED: " + build_row["summary"]
        lines += ["## Build", "",
                  f"`setup.py build_ext` from scratch in a temporary copy: "
                  f"{build_row['seconds']:.1f} s ({result})", ""]
    if check_row:
        lines += ["## customops.check", "",
                  f"Every check of `my_add` as one node, two samples, the prepared older runtimes "
                  f"included: {check_row['seconds']:.1f} s, exit status {check_row['exit']}: "
                  f"{check_row['verdict']} (target < {CHECK_LIMIT:.0f} s)", ""]
    return lines
