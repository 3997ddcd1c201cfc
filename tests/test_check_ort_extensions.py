"""customops.check on a library nobody here wrote: onnxruntime-extensions,
at the version requirements.txt pins.  The check finds its real crashes
(docs/check.md, "A library we did not write"), each also reproduced with
onnxruntime alone, so that the finding is the library's and not the
checker's; and it takes string tensors (StringECMARegexReplace).  When the
pin moves, these findings are to be measured again."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from customops import check
from helpers import ort_extensions

ROOT = Path(__file__).resolve().parent.parent
PIN = re.search(r"^onnxruntime-extensions==(\S+)$", (ROOT / "requirements.txt").read_text(),
                re.M)[1]
CONTRIB = "ai.onnx.contrib"


@pytest.fixture(scope="module")
def extensions():
    onnxruntime_extensions = ort_extensions()
    assert onnxruntime_extensions.__version__ == PIN, "the venv does not hold the pinned release"
    return onnxruntime_extensions.get_library_path()


def node_model(op, inputs, outputs):
    """One ai.onnx.contrib node; inputs {name: (elem type, dims)}, outputs undeclared."""
    graph = helper.make_graph(
        [helper.make_node(op, list(inputs), outputs, domain=CONTRIB)], op,
        [helper.make_tensor_value_info(n, t, dims) for n, (t, dims) in inputs.items()],
        [helper.make_empty_tensor_value_info(n) for n in outputs])
    return helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(CONTRIB, 1)])


def test_pin_is_the_release_measured():
    assert PIN == "0.15.2", "findings below measured on 0.15.2: measure them again"


@pytest.mark.parametrize("op,inputs,sample,hostile", [
    ("Inverse", {"x": (TensorProto.FLOAT, [3, 3])},
     {"x": np.eye(3, dtype=np.float32) * 2}, ["omitted", "empty"]),
    ("SegmentExtraction", {"x": (TensorProto.INT64, ["n"])},
     {"x": np.array([0, 2, 2, 0, 3, 3, 3, 0], np.int64)}, ["omitted"]),
])
def test_check_finds_the_crashes(op, inputs, sample, hostile, extensions):
    outputs = ["y"] if op == "Inverse" else ["position", "value"]
    found = {r["name"]: r for r in check.run(node_model(op, inputs, outputs), [extensions],
                                             [sample], checks=hostile, timeout=30)}
    assert found["omitted"]["ok"] is False, found
    assert found["omitted"]["detail"] == "input 0 (x) omitted: killed the process with SIGSEGV"
    if "empty" in found:  # dlib's second fatal error aborts the process
        assert found["empty"]["ok"] is False and found["empty"]["detail"] == (
            "x dimension 0 set to 0 (sample sample 0): killed the process with SIGABRT when run "
            "a second time in the session that refused it with an error"), found


REPRODUCE = textwrap.dedent("""
    import sys
    import numpy as np, onnxruntime, onnxruntime_extensions
    from onnx import helper, TensorProto
    op, case = sys.argv[1:]
    node = helper.make_node(op, ["" if case == "empty-name" else "x"], ["y"],
                            domain="ai.onnx.contrib")
    inputs = [] if case == "empty-name" else [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, None)]
    graph = helper.make_graph([node], "g", inputs, [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.contrib", 1)])
    options = onnxruntime.SessionOptions()
    options.register_custom_ops_library(onnxruntime_extensions.get_library_path())
    session = onnxruntime.InferenceSession(model.SerializeToString(), options)
    for run in range(2):  # twice: the first refused run returns an error status
        try:
            session.run(None, {} if case == "empty-name" else
                        {"x": np.zeros((0, 3), np.float32)})
        except Exception as error:
            print("refused:", str(error).splitlines()[0][:80], flush=True)
""")


@pytest.mark.parametrize("op,case,died", [
    ("Inverse", "empty-name", signal.SIGSEGV),
    ("SegmentExtraction", "empty-name", signal.SIGSEGV),
    ("Inverse", "two-refused", signal.SIGABRT),
])
def test_the_crashes_are_the_librarys(op, case, died, extensions):
    """The same crashes with onnxruntime alone, no checker in the process."""
    done = subprocess.run([sys.executable, "-c", REPRODUCE, op, case], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == -died, (done.returncode, done.stdout, done.stderr[-2000:])
    if case == "two-refused":  # the first refusal is an error status; the second, an abort
        assert done.stdout.count("refused:") == 1 and "Two fatal errors" in done.stderr


def test_strings_and_the_c_api(extensions):
    """A string op runs every check with strings compared as strings; the
    library check tells its deliberate C API from the symbols that can clash."""
    model = node_model("StringECMARegexReplace", {"text": (TensorProto.STRING, ["n"]),
                                                  "pattern": (TensorProto.STRING, [1]),
                                                  "rewrite": (TensorProto.STRING, [1])}, ["y"])
    sample = {"text": np.array(["a1b22", "c3", "none"]), "pattern": np.array([r"\d+"]),
              "rewrite": np.array(["#"])}

    def reference(text, pattern, rewrite):
        return np.array([re.sub(str(pattern[0]), str(rewrite[0]), t) for t in text])

    found = {r["name"]: r for r in check.run(model, [extensions], [sample], reference,
                                             checks=["reference", "types", "nonfinite", "threads",
                                                     "determinism", "library"],
                                             runtimes_python=[], timeout=30)}
    for name in ("reference", "types", "threads", "determinism"):
        assert found[name]["ok"] is True, found[name]
    assert found["nonfinite"] == {"name": "nonfinite", "ok": True,
                                  "detail": "does not apply: no input of a float type"}
    library = found["library"]
    assert library["ok"] is False and "C++ (std::" in library["detail"], library
    assert "its public C API of" in library["detail"] and "AddExternalCustomOp" in \
        library["detail"], library
