"""customops.check's exploring checks (attributes, indices, larger) against
tests/check_cases/group_sum.cc: a correct op with a group-id input, a float
and an int attribute and float16/32/64 kernels, and three builds with a bug
the user's small samples never show.  Each bug fails its check naming the
value, the ids or the size, and leaves a shrunk case whose replay command
fails alone; the correct build passes every check; bad input is one line,
exit 2."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from customops import check
from test_check import build  # noqa: E402  the same g++ line as the other check cases

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tests" / "check_cases" / "group_sum.cc"
# bug -> (the check that must fail, words its finding holds, the check that fails on replay)
BUGS = {
    "BUG_MEAN_ATTRIBUTE": ("attributes", "mean=1 (sample small.npz): differs from the reference",
                           "reference"),
    "BUG_HALF_SUM": ("larger", ", float16 (sample", "larger"),
    "BUG_EMPTY_GROUP": ("indices", "has no rows (the ids from it on moved up by one) (sample "
                        "small.npz): killed the process with SIGFPE", "determinism"),
}
REFERENCE = '''import numpy as np


def group_sum(x, group, scale=1.0, mean=0):
    groups = int(group.max()) + 1 if group.size else 0
    y = np.zeros((groups, x.shape[1]), np.float64)
    np.add.at(y, group, x.astype(np.float64))
    if mean:
        counts = np.bincount(group, minlength=groups)[:, None]
        y = np.divide(y, counts, out=np.zeros_like(y), where=counts > 0)
    return (y * scale).astype(x.dtype)


def broken(x, group, scale=1.0, mean=0):
    return x[group.size]  # one past the last row
'''


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    folder = tmp_path_factory.mktemp("group_sum")
    return {bug: build(SOURCE, folder / f"libgroup_sum{bug and '_' + bug.lower()}.so", bug)
            for bug in ["", *BUGS]}


def group_sum_model(elem=TensorProto.FLOAT, **attributes):
    node = helper.make_node("group_sum", ["x", "group"], ["y"], domain="check",
                            **{"scale": 0.5, "mean": 0, **attributes})
    graph = helper.make_graph(
        [node], "group_sum", [helper.make_tensor_value_info("x", elem, ["n", "d"]),
                              helper.make_tensor_value_info("group", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("y", elem, None)])
    return helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 19), helper.make_opsetid("check", 1)])


@pytest.fixture(scope="module")
def group_sum(tmp_path_factory):
    """The model and two ordinary small samples: groups of 1 to 9 rows, ids
    0.. without a gap, float32."""
    folder = tmp_path_factory.mktemp("group_sum_samples")
    onnx.save(group_sum_model(), folder / "group_sum.onnx")
    rng = np.random.default_rng(49)
    for name, sizes in (("small", [2, 3, 1]), ("medium", [6, 9, 5, 7])):
        group = np.repeat(np.arange(len(sizes)), sizes).astype(np.int64)
        np.savez(folder / f"{name}.npz", group=group,
                 x=rng.standard_normal((len(group), 3)).astype(np.float32))
    (folder / "reference.py").write_text(REFERENCE)
    return folder


def run_check(folder, library, *options):
    return subprocess.run(
        [sys.executable, "-m", "customops.check", str(folder / "group_sum.onnx"),
         "--library", str(library), "--inputs", str(folder / "small.npz"),
         "--inputs", str(folder / "medium.npz"),
         "--reference", f"{folder / 'reference.py'}:group_sum", *options],
        capture_output=True, text=True, timeout=900, cwd=folder)


@pytest.mark.parametrize("bug", BUGS)
def test_each_bug_is_found_shrunk_and_replays(bug, libraries, group_sum, tmp_path):
    name, words, on_replay = BUGS[bug]
    done = run_check(group_sum, libraries[bug], "--check", name, "--failures", str(tmp_path),
                     "--json")
    found = json.loads(done.stdout)["checks"][0]
    assert done.returncode == 1 and found["ok"] is False and words in found["detail"], found
    replay = found["detail"].split("; replay: ")[1]
    words = shlex.split(replay)
    assert words[:3] == ["python", "-m", "customops.check"] and \
        Path(words[3]).parent == tmp_path, replay
    # the written case alone, in a new process, fails again
    again = subprocess.run([sys.executable, *words[1:], "--check", "reference", "--check",
                            "determinism", "--check", "larger"],
                           capture_output=True, text=True, timeout=900, cwd=group_sum)
    assert again.returncode == 1 and f"FAIL {on_replay}:" in again.stdout, again.stdout
    if bug == "BUG_EMPTY_GROUP":  # shrunk to a row or two whose ids leave a group empty
        assert "shrunk to 1 row, ids [" in found["detail"], found["detail"]
        assert "killed the process with SIGFPE" in again.stdout


def test_correct_library_passes_every_check(libraries, group_sum, tmp_path):
    done = run_check(group_sum, libraries[""], "--failures", str(tmp_path), "--json")
    report = json.loads(done.stdout)
    assert [c["name"] for c in report["checks"]] == check.CHECKS
    assert done.returncode == 0 and report["ok"], done.stdout
    details = {c["name"]: c["detail"] for c in report["checks"]}
    assert "grown up to" in details["larger"] and "float16 and float64" in details["larger"]
    assert not list(tmp_path.iterdir())  # nothing failed: nothing written


@pytest.mark.parametrize("limit, factor", [(0.0, 1), (60.0, 512)])
def test_a_sample_grows_on_only_while_its_runs_are_quick(limit, factor, libraries, group_sum,
                                                          monkeypatch):
    """With no time to spare every run is too slow to grow on: the samples stay as
    given; with a minute, they grow to the largest factor (medium.npz has 27 rows)."""
    from customops.check import explore

    monkeypatch.setattr(explore, "GROW_SECONDS", limit)
    namespace = {}
    exec(REFERENCE, namespace)
    samples = [dict(np.load(group_sum / f"{name}.npz")) for name in ("small", "medium")]
    (found,) = check.run(group_sum / "group_sum.onnx", [libraries[""]], samples,
                         namespace["group_sum"], checks=["larger"])
    assert found["ok"] and f"grown up to {27 * factor} rows" in found["detail"], found


def test_the_reference_gets_the_attributes_it_declares(libraries, group_sum, tmp_path):
    """The node's attributes go to the reference by name, only those it
    declares (all with **kwargs); one that declares none keeps working, and
    then an attribute's other values are run but not compared."""
    seen = []
    sample = dict(np.load(group_sum / "small.npz"))
    namespace = {}
    exec(REFERENCE, namespace)

    def scale_only(x, group, scale):
        seen.append({"scale": scale})
        return namespace["group_sum"](x, group, scale)

    def every(x, group, **attributes):
        seen.append(attributes)
        return namespace["group_sum"](x, group, **attributes)

    def none(x, group):
        return namespace["group_sum"](x, group, 0.5)

    for reference, judged in ((scale_only, "3 ran and agree, 2 ran with nothing to compare"),
                              (every, "5 cases: 5 ran and agree"),
                              (none, "0 ran and agree, 5 ran with nothing to compare")):
        seen.clear()
        found = check.run(group_sum / "group_sum.onnx", [libraries[""]], [sample], reference,
                          checks=["reference", "attributes"], failures=tmp_path)
        assert [r["ok"] for r in found] == [True, True], found
        assert judged in found[1]["detail"], found[1]
        if reference is every:  # the model's values, then each other value of one at a time
            assert seen[0] == {"scale": 0.5, "mean": 0}, seen
            assert {"scale": 0.5, "mean": 1} in seen and {"scale": -0.5, "mean": 0} in seen
        if reference is scale_only:
            assert seen[0] == {"scale": 0.5} and {"scale": 0.0} in seen, seen


@pytest.mark.parametrize("options,words", [
    (["--budget", "0.0001"], "--budget: sample small.npz's inputs take 120 bytes, more than the budget of 104 bytes"),
    (["--reference", "REFERENCE:broken"], "--reference raises on sample small.npz (IndexError"),
])
def test_cannot_run_is_one_line_exit_2(options, words, libraries, group_sum):
    options = [o.replace("REFERENCE", str(group_sum / "reference.py")) for o in options]
    done = subprocess.run(
        [sys.executable, "-m", "customops.check", str(group_sum / "group_sum.onnx"),
         "--library", str(libraries[""]), "--inputs", str(group_sum / "small.npz"), *options],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr.count("\n") == 1 and words in done.stderr, done.stderr
