"""The from-scratch example ops (examples/my_first_op, examples/port_seed) that
notebook 07 builds: each builds with the g++ line its header comment gives,
warning-free, needing nothing but the ORT headers, and runs in an older
onnxruntime than the headers'; and the ownership mistake the classic op's
shape inference warns about really kills the process."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import build_example as build
from helpers import single_node_model

from customops.envs import ort_python

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SOURCES = [EXAMPLES / "my_first_op" / "embed_lite.cc", EXAMPLES / "my_first_op" / "embed_classic.cc",
           EXAMPLES / "my_first_op" / "embed_versions.cc",
           EXAMPLES / "port_seed" / "foo_op.cc"]


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_builds_with_its_documented_command(source, tmp_path):
    """The documented command's version script leaves RegisterCustomOps the one export."""
    build(source, tmp_path / f"lib{source.stem}.so")
    exported = subprocess.run(["nm", "-D", "--defined-only", str(tmp_path / f"lib{source.stem}.so")],
                              capture_output=True, text=True, check=True).stdout.split()[2::3]
    assert exported == ["RegisterCustomOps"]


CHILD = """
import sys
import numpy as np, onnxruntime as ort
from onnx import TensorProto, helper
node = helper.make_node("embed", ["ids", "table"], ["out"], domain="my_ops")
graph = helper.make_graph([node], "g", [
    helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"]),
    helper.make_tensor_value_info("table", TensorProto.FLOAT, ["rows", 3])],
    [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
model = helper.make_model(graph, ir_version=10, opset_imports=[
    helper.make_opsetid("", 19), helper.make_opsetid("my_ops", 2)])
options = ort.SessionOptions()
options.register_custom_ops_library(sys.argv[1])
sess = ort.InferenceSession(model.SerializeToString(), options)  # runs shape inference
print(sess.get_outputs()[0].shape, flush=True)
"""


def test_owning_wrapper_in_shape_inference_is_a_double_free(tmp_path):
    """embed_classic.cc reads the context's type-and-shape infos through the
    non-owning Ort::ConstTensorTypeAndShapeInfo.  With the owning
    Ort::TensorTypeAndShapeInfo instead, they are freed twice."""
    source = EXAMPLES / "my_first_op" / "embed_classic.cc"
    right = "const Ort::ConstTensorTypeAndShapeInfo ids(ids_info), table(table_info);"
    wrong = "const Ort::TensorTypeAndShapeInfo ids(ids_info), table(table_info);"
    assert right in source.read_text()
    results = {}
    for name, text in {"right": None, "wrong": source.read_text().replace(right, wrong)}.items():
        library = tmp_path / f"libembed_{name}.so"
        build(source, library, text)
        results[name] = subprocess.run([sys.executable, "-c", CHILD, str(library)],
                                       capture_output=True, text=True, timeout=120)
    assert results["right"].returncode == 0, results["right"].stderr
    assert results["right"].stdout.strip() == "['n', 3]"
    assert results["wrong"].returncode == -signal.SIGABRT, results["wrong"]
    assert "free(): double free detected" in results["wrong"].stderr


# (example, op, domain, its version, inputs, expected output) for a session in
# an older runtime.
OLDER_RUNTIME = "1.24.4"
IDS, FLOATS = np.array([1, 0]), np.ones((2, 3), np.float32)
RUNS = [
    (EXAMPLES / "my_first_op" / "embed_lite.cc", "embed", "my_ops", 1,
     {"ids": IDS, "table": FLOATS}, FLOATS[IDS]),
    (EXAMPLES / "my_first_op" / "embed_classic.cc", "embed", "my_ops", 2,
     {"ids": IDS, "table": FLOATS}, FLOATS[IDS]),
    (EXAMPLES / "port_seed" / "foo_op.cc", "Foo", "custom", 1,
     {"X": FLOATS, "Y": FLOATS}, FLOATS + FLOATS),
]
RUN_CHILD = """
import sys
import numpy as np, onnxruntime as ort
options = ort.SessionOptions()
options.register_custom_ops_library(sys.argv[1])
sess = ort.InferenceSession(sys.argv[2], options)
print(sess.run(None, dict(np.load(sys.argv[3])))[0].tolist())
"""


@pytest.mark.parametrize("source, op, domain, version, inputs, expected", RUNS,
                         ids=lambda v: getattr(v, "name", None))
def test_runs_in_an_older_runtime(source, op, domain, version, inputs, expected, tmp_path):
    """The examples negotiate the API version with the runtime and claim it
    for their ops: onnxruntime 1.24.4 refuses an op that claims the headers'
    newer version ("Unsupported version '29' in custom op") when a session
    creates its kernel."""
    library = tmp_path / f"lib{source.stem}.so"
    build(source, library)
    model = single_node_model(op, inputs, ["out"], domain=domain)
    model.opset_import[1].version = version  # the domain's version the example registers
    onnx.save(model, tmp_path / "model.onnx")
    np.savez(tmp_path / "feeds.npz", **inputs)
    done = subprocess.run([str(ort_python(OLDER_RUNTIME)), "-c", RUN_CHILD, str(library),
                           str(tmp_path / "model.onnx"), str(tmp_path / "feeds.npz")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(expected.tolist())



# (op, the node's inputs, what refuses the node): embed_lite.cc's guards
LEFT_OUT = [
    ("embed", ["", "table"], "Node ()'s input 0 is marked single but has an empty string in the graph"),
    ("embed_affine", ["ids", "table", "", "bias"],
     'Exception during initialization: embed_affine: the node leaves out scale (named "")'),
    ("embed_affine", ["ids", "table", "scale", ""], 'embed_affine: the node leaves out bias (named "")'),
]
SESSION_CHILD = """
import sys
import onnxruntime as ort
options = ort.SessionOptions()
options.register_custom_ops_library(sys.argv[1])
for model in sys.argv[2:]:
    try:
        ort.InferenceSession(model, options)
        print("session created")
    except Exception as error:
        print(str(error).replace(chr(10), " "))
"""


@pytest.mark.parametrize("runtime", ["installed", OLDER_RUNTIME])
def test_lite_ops_refuse_a_node_naming_an_input_empty(runtime, tmp_path):
    """The lite API marks every input optional and reads each one a node
    lists: embed_lite.cc declares ids and table required (ORT refuses the
    node), and embed_affine's constructor refuses an input named "".
    (Unguarded, these nodes die of SIGSEGV at their first run: notebook 07.)"""
    library = tmp_path / "libembed_lite.so"
    build(EXAMPLES / "my_first_op" / "embed_lite.cc", library)
    types = {"ids": (onnx.TensorProto.INT64, ["n"]), "table": (onnx.TensorProto.FLOAT, ["rows", "width"]),
             "scale": (onnx.TensorProto.FLOAT, ["width"]), "bias": (onnx.TensorProto.FLOAT, ["width"])}
    models = []
    for k, (op, inputs, _) in enumerate(LEFT_OUT):
        graph = onnx.helper.make_graph(
            [onnx.helper.make_node(op, inputs, ["out"], domain="my_ops")], op,
            [onnx.helper.make_tensor_value_info(name, *types[name]) for name in inputs if name],
            [onnx.helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, None)])
        models.append(tmp_path / f"model{k}.onnx")
        onnx.save(onnx.helper.make_model(graph, ir_version=10, opset_imports=[
            onnx.helper.make_opsetid("", 19), onnx.helper.make_opsetid("my_ops", 1)]), models[-1])
    python = sys.executable if runtime == "installed" else str(ort_python(runtime))
    done = subprocess.run([python, "-c", SESSION_CHILD, str(library), *map(str, models)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    answers = done.stdout.splitlines()
    assert len(answers) == len(LEFT_OUT), answers
    for (op, inputs, message), answer in zip(LEFT_OUT, answers):
        assert message in answer, (op, inputs, answer)
