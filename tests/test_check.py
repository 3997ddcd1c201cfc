"""customops.check against libraries with known bugs, and against our own.

tests/check_cases/scale_add.cc is a correct op; each BUG_* macro adds one bug
that one check exists for.  The correct build passes every check; each
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
# bug -> (the check that must fail, words its finding must hold): each of the
# ten checks before the exploring ones (tests/test_check_explore.py) fails on at least one library
BUGS = {
    "": None,
    "BUG_LARGE_SAMPLE": ("reference", "sample large"),
    "BUG_WRONG_RANK": ("declared", "the session no shape"),
    "BUG_UNNAMED_DIM": ("declared", "dimension 0 is 'u0' in the model"),
    "BUG_WRAPPER_SHAPE": ("declared", "no shape: it leaves out the rank 2"),
    "BUG_LITE_API": ("omitted", "input 0 (x) omitted: killed the process with SIG"),
    "BUG_OPTIONAL_UNCHECKED": ("omitted", "input 2 (appended, empty name): killed the process"),
    "BUG_ABORT_ON_RANK": ("types", "one more dimension: killed the process with SIGABRT"),
    "BUG_EMPTY_INPUT": ("empty", "set to 0"),
    "BUG_INF_LOOP": ("nonfinite", "inf in x (sample small.npz): did not finish within"),
    "BUG_MEMBER_SCRATCH": ("threads", "differ from the serial run"),
    "BUG_ACCUMULATE": ("determinism", "a second run in the same session gives other bits"),
    "BUG_INSTANCE_ORDER": ("determinism", "a fresh session gives other bits"),
    "BUG_API_VERSION": ("runtimes", "killed the process"),
    "BUG_EXPORTS": ("library", "symbols besides its entry point"),
}
HANG = 10  # seconds: --timeout, so that BUG_INF_LOOP's hang costs no more


def build(source, out, bug=""):
    """g++ as a user would, with the version script (BUG_EXPORTS: without it)."""
    script = [] if bug == "BUG_EXPORTS" else \
        [f"-Wl,--version-script={ROOT / 'csrc/ort/exports.lds'}"]
    subprocess.run(["g++", "-std=c++17", "-O2", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror",
                    *script, f"-I{headers.include_dir()}",
                    *([f"-D{bug}"] if bug and bug != "BUG_EXPORTS" else []), str(source),
                    "-o", str(out)], check=True, timeout=900)
    return out


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    folder = tmp_path_factory.mktemp("check_cases")
    return {bug: build(SOURCE, folder / f"libscale_add{bug and '_' + bug.lower()}.so", bug)
            for bug in [*BUGS, "BUG_WRONG_SIZE"]}


@pytest.fixture(scope="module")
def scale_add(tmp_path_factory):
    """The model (z keeps x's named dimension u0) and three samples, two of
    them larger than the 64-row buffer of BUG_LARGE_SAMPLE and different, so
    that two threads run different large inputs at once."""
    folder = tmp_path_factory.mktemp("scale_add")
    onnx.save(scale_add_model(["u0", 16]), folder / "scale_add.onnx")
    rng = np.random.default_rng(30)  # module-scoped: one stream for every test here
    for name, rows in (("small", 5), ("large", 100_000), ("large2", 100_000)):
        np.savez(folder / f"{name}.npz", x=rng.standard_normal((rows, 16), dtype=np.float32),
                 y=rng.standard_normal((rows, 16), dtype=np.float32))
    (folder / "reference.py").write_text("def scale_add(x, y):\n    return 2 * x + y\n")
    return folder


def scale_add_model(z_dims):
    node = helper.make_node("scale_add", ["x", "y"], ["z"], domain="check")
    graph = helper.make_graph(
        [node], "scale_add",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["u0", 16]) for n in "xy"],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, z_dims)])
    return helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 19), helper.make_opsetid("check", 1)])


@pytest.mark.parametrize("bug", BUGS)
def test_each_bug_fails_its_check(bug, libraries, scale_add):
    """The correct build passes every check; each bug fails its check (run
    with determinism and library, which only their own bugs fail)."""
    checks = [] if not BUGS[bug] else \
        [a for name in {BUGS[bug][0], "determinism", "library"} for a in ("--check", name)]
    if bug == "BUG_API_VERSION":  # a release older than the headers, even on a fresh clone
        from customops.envs import ort_python

        checks += ["--runtime", str(ort_python("1.24.4"))]
    done = subprocess.run(
        [sys.executable, "-m", "customops.check", str(scale_add / "scale_add.onnx"),
         "--library", str(libraries[bug]), "--inputs", str(scale_add / "small.npz"),
         "--inputs", str(scale_add / "large.npz"), "--inputs", str(scale_add / "large2.npz"),
         "--reference", f"{scale_add / 'reference.py'}:scale_add", "--json",
         "--timeout", str(HANG), *checks],
        capture_output=True, text=True, timeout=900)
    report = json.loads(done.stdout)
    verdicts = {c["name"]: c for c in report["checks"]}
    if not BUGS[bug]:
        assert list(verdicts) == check.CHECKS
        assert done.returncode == 0 and report["ok"], done.stdout
        return
    name, words = BUGS[bug]
    assert done.returncode == 1 and not report["ok"]
    assert verdicts[name]["ok"] is False and words in verdicts[name]["detail"], verdicts[name]
    # the op is otherwise correct: the checks the bug does not touch pass
    for other in {"determinism", "library"} - {name}:
        assert verdicts[other]["ok"] or bug == "BUG_API_VERSION", verdicts[other]


def test_declared_compares_sizes_with_the_arrays(libraries, scale_add):
    """A shape function declaring a wrong static size, on a model that
    declares no output shape: only the arrays returned show it."""
    samples = [dict(np.load(scale_add / "small.npz"))]
    found = check.run(scale_add_model(None), [libraries["BUG_WRONG_SIZE"]], samples,
                      checks=["declared"])
    assert found[0]["ok"] is False and "the session declares ['u0', 8], the run returns [5, 16]" \
        in found[0]["detail"], found
    found = check.run(scale_add_model(None), [libraries[""]], samples, checks=["declared"])
    assert found[0]["ok"] is True, found


def test_nan_outputs_are_no_false_alarm(libraries, scale_add):
    """A correct op whose outputs hold NaN (where x does): the reference
    compares NaN as equal, threads and determinism compare bits."""
    arrays = dict(np.load(scale_add / "small.npz"))
    arrays["x"][::2, 3] = np.nan
    found = check.run(scale_add / "scale_add.onnx", [libraries[""]], [arrays],
                      reference=lambda x, y: 2 * x + y,
                      checks=["reference", "declared", "threads", "determinism"])
    assert all(r["ok"] is True for r in found), found


def test_cannot_run_is_one_line_and_exit_2(tmp_path, scale_add):
    done = subprocess.run([sys.executable, "-m", "customops.check", str(tmp_path / "none.onnx"),
                           "--library", str(SOURCE), "--inputs", str(scale_add / "small.npz")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "cannot read the model" in done.stderr


def test_skip_leaves_checks_out(libraries, scale_add):
    run = [sys.executable, "-m", "customops.check", str(scale_add / "scale_add.onnx"), "--library",
           str(libraries[""]), "--inputs", str(scale_add / "small.npz"), "--json"]
    done = subprocess.run([*run, "--check", "reference", "--check", "declared", "--skip", "declared"],
                          capture_output=True, text=True, timeout=900)
    assert [c["name"] for c in json.loads(done.stdout)["checks"]] == ["reference"], done.stdout + done.stderr
    done = subprocess.run([*run, "--check", "library", "--skip", "library"], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr == "customops.check: --skip leaves no check to run\n"


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

        def reference(**given):  # the arrays, and the node's attributes by name
            return op.reference({name: given.get(name) for name in op.input_names},
                                {k: given.get(k, v) for k, v in samples[0].attrs.items()})

        records = check.run(model, [library_path()], [s.inputs for s in samples], reference,
                            rtol=max(op.rtol, 1e-6), atol=max(op.atol, 1e-6))
        failed = [r for r in records if r["ok"] is not True]
        assert not failed, failed
