"""customops.check against libraries with known bugs, and against our own.

tests/check_cases/scale_add.cc is a correct op; each BUG_* macro adds one bug
that one check exists for.  The correct build passes all ten checks; each
broken build fails the check for its bug, naming the case.  The project's
three ops pass every check on their basic samples (tests/optable.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

from customops import headers

from customops import check  # noqa: E402
from customops.ort import library_path  # noqa: E402
from helpers import single_node_model  # noqa: E402
from optable import OPS, basic_samples  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tests" / "check_cases" / "scale_add.cc"
# bug -> (the check that must fail, words its finding must hold)
BUGS = {
    "": None,
    "BUG_LITE_API": ("omitted", "killed the process with SIG"),
    "BUG_WRONG_RANK": ("declared", "the session no shape"),
    "BUG_UNNAMED_DIM": ("declared", "dimension 0 is 'u0' in the model"),
    "BUG_MEMBER_SCRATCH": ("threads", "differ from the serial run"),
    "BUG_LARGE_SAMPLE": ("reference", "sample large"),
    "BUG_EMPTY_INPUT": ("empty", "set to 0"),
}


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    folder = tmp_path_factory.mktemp("check_cases")
    built = {}
    for bug in BUGS:
        built[bug] = folder / f"libscale_add{bug and '_' + bug.lower()}.so"
        subprocess.run(["g++", "-std=c++17", "-O2", "-shared", "-fPIC", "-Wall", "-Wextra",
                        "-Werror", f"-Wl,--version-script={ROOT / 'csrc/ort/exports.lds'}",
                        f"-I{headers.include_dir()}", *([f"-D{bug}"] if bug else []),
                        str(SOURCE), "-o", str(built[bug])], check=True, timeout=900)
    return built


@pytest.fixture(scope="module")
def scale_add(tmp_path_factory):
    """The model (z keeps x's named dimension u0) and three samples, two of
    them larger than the 64-row buffer of BUG_LARGE_SAMPLE and different, so
    that two threads run different large inputs at once."""
    folder = tmp_path_factory.mktemp("scale_add")
    node = helper.make_node("scale_add", ["x", "y"], ["z"], domain="check")
    graph = helper.make_graph(
        [node], "scale_add",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["u0", 16]) for n in "xy"],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["u0", 16])])
    model = helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 19), helper.make_opsetid("check", 1)])
    onnx.save(model, folder / "scale_add.onnx")
    rng = np.random.default_rng(30)  # module-scoped: one stream for every test here
    for name, rows in (("small", 5), ("large", 100_000), ("large2", 100_000)):
        np.savez(folder / f"{name}.npz", x=rng.standard_normal((rows, 16), dtype=np.float32),
                 y=rng.standard_normal((rows, 16), dtype=np.float32))
    (folder / "reference.py").write_text("def scale_add(x, y):\n    return 2 * x + y\n")
    return folder


@pytest.mark.parametrize("bug", BUGS)
def test_each_bug_fails_its_check(bug, libraries, scale_add):
    done = subprocess.run(
        [sys.executable, "-m", "customops.check", str(scale_add / "scale_add.onnx"),
         "--library", str(libraries[bug]), "--inputs", str(scale_add / "small.npz"),
         "--inputs", str(scale_add / "large.npz"), "--inputs", str(scale_add / "large2.npz"),
         "--reference", f"{scale_add / 'reference.py'}:scale_add", "--json"],
        capture_output=True, text=True, timeout=900)
    report = json.loads(done.stdout)
    verdicts = {c["name"]: c for c in report["checks"]}
    assert list(verdicts) == check.CHECKS
    if not BUGS[bug]:
        assert done.returncode == 0 and report["ok"], done.stdout
        return
    name, words = BUGS[bug]
    assert done.returncode == 1 and not report["ok"]
    assert verdicts[name]["ok"] is False and words in verdicts[name]["detail"], verdicts[name]
    # the op is otherwise correct: the checks the bug does not touch pass
    assert verdicts["determinism"]["ok"] and verdicts["library"]["ok"], done.stdout


def test_cannot_run_is_one_line_and_exit_2(tmp_path, scale_add):
    done = subprocess.run([sys.executable, "-m", "customops.check", str(tmp_path / "none.onnx"),
                           "--library", str(SOURCE), "--inputs", str(scale_add / "small.npz")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "cannot read the model" in done.stderr


def test_runtime_option_names_the_releases_to_run(libraries, scale_add):
    """--runtime replaces the cached onnxruntime venvs: only the release given
    (and the installed one) runs the samples; a path that is no python is
    refused in one line."""
    from customops.envs import ort_python

    def check_with(*runtimes):
        return subprocess.run(
            [sys.executable, "-m", "customops.check", str(scale_add / "scale_add.onnx"),
             "--library", str(libraries[""]), "--inputs", str(scale_add / "small.npz"),
             "--check", "runtimes", *(a for r in runtimes for a in ("--runtime", str(r)))],
            capture_output=True, text=True, timeout=300)

    done = check_with(ort_python("1.25.0"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == ("PASS runtimes: 1.25.0 runs them; "
                           f"{onnxruntime.__version__} (installed) runs them\n")
    done = check_with(scale_add / "reference.py")
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1
    assert "--runtime" in done.stderr and "not an executable python" in done.stderr


def _groups(op):
    """Basic samples grouped by attributes (one model per attribute set)."""
    groups = {}
    for sample in basic_samples(op):
        groups.setdefault(json.dumps(sample.attrs, sort_keys=True), []).append(sample)
    return list(groups.values())


@pytest.mark.parametrize("op", OPS.values(), ids=lambda op: op.name)
def test_our_ops_pass_every_check(op):
    for samples in _groups(op):
        full = {i.name: next(s.inputs[i.name] for s in samples
                             if s.inputs.get(i.name) is not None) for i in op.inputs
                if any(s.inputs.get(i.name) is not None for s in samples)}
        model = single_node_model(op.onnx_name, full, op.output_names, **samples[0].attrs)

        def reference(**arrays):
            return op.reference({name: arrays.get(name) for name in op.input_names},
                                samples[0].attrs)

        records = check.run(model, [library_path()], [s.inputs for s in samples], reference,
                            rtol=max(op.rtol, 1e-6), atol=max(op.atol, 1e-6))
        failed = [r for r in records if r["ok"] is not True]
        assert not failed, failed
