"""examples/cmake_ort_library: the CMakeLists.txt notebook 22 (section 3) gives
for an ORT custom-op library built against the ORT headers alone.  Its guard
messages, and a build of the course's own sources with it: only
RegisterCustomOps exported, no libonnxruntime needed, and every op runs.
(A project of customops.new_op built with it: tests/test_new_op.py.)"""

import re
import subprocess
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import customops.headers

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "cmake_ort_library"
EMBED = EXAMPLE.parent / "my_first_op" / "embed_classic.cc"


def cmake(*args, cwd=None):
    return subprocess.run(["cmake", *map(str, args)], capture_output=True, text=True, cwd=cwd)


def configure(build, **variables):
    return cmake("-S", EXAMPLE, "-B", build, *(f"-D{k}={v}" for k, v in variables.items()))


@pytest.mark.parametrize("variables, message", [
    ({"OP_NAME": "embed", "OP_SOURCES": EMBED}, "set ORT_INCLUDE_DIR to a directory holding onnxruntime_cxx_api.h"),
    ({"OP_NAME": "embed", "OP_SOURCES": EMBED, "ORT_INCLUDE_DIR": EXAMPLE},
     "set ORT_INCLUDE_DIR to a directory holding onnxruntime_cxx_api.h"),
    ({"OP_SOURCES": EMBED, "ORT_INCLUDE_DIR": "HEADERS"}, "set OP_NAME (the library's name) and OP_SOURCES"),
    ({"OP_NAME": "embed", "ORT_INCLUDE_DIR": "HEADERS"}, "set OP_NAME (the library's name) and OP_SOURCES"),
])
def test_configure_names_what_is_missing(tmp_path, variables, message):
    variables = {k: customops.headers.include_dir() if v == "HEADERS" else v for k, v in variables.items()}
    done = configure(tmp_path / "build", **variables)
    assert done.returncode != 0
    assert message in " ".join(done.stderr.split())


@pytest.fixture(scope="module")
def embed_library(tmp_path_factory):
    build = tmp_path_factory.mktemp("cmake") / "build"
    done = configure(build, OP_NAME="embed", OP_SOURCES=EMBED, ORT_INCLUDE_DIR=customops.headers.include_dir())
    assert done.returncode == 0, done.stderr
    done = cmake("--build", build)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return build / "libembed.so"


def test_exports_register_custom_ops_alone_and_needs_no_onnxruntime(embed_library):
    exported = subprocess.run(["nm", "-D", "--defined-only", embed_library], capture_output=True, text=True,
                              check=True).stdout.split()[2::3]
    needed = re.findall(r"NEEDED.*\[(.+)\]", subprocess.run(["readelf", "-d", embed_library], capture_output=True,
                                                            text=True, check=True).stdout)
    assert exported == ["RegisterCustomOps"]
    assert needed and not [n for n in needed if "onnxruntime" in n or "torch" in n]


@pytest.mark.parametrize("with_scale", [False, True])
def test_the_built_op_runs_against_numpy(embed_library, with_scale):
    inputs = ["ids", "table", "scale"] if with_scale else ["ids", "table"]
    graph = helper.make_graph(
        [helper.make_node("embed", inputs, ["out"], domain="my_ops")], "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [7]),
         helper.make_tensor_value_info("table", TensorProto.FLOAT, [5, 3]),
         helper.make_tensor_value_info("scale", TensorProto.FLOAT, [3])][:len(inputs)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("my_ops", 2)],
                              ir_version=10)
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(embed_library))
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    ids, table, scale = rng.integers(0, 5, 7), rng.standard_normal((5, 3)).astype(np.float32), np.float32([1, 2, 3])
    feeds = dict(zip(inputs, [ids, table, scale]))
    expected = table[ids] * (scale if with_scale else 1)
    np.testing.assert_allclose(session.run(None, feeds)[0], expected, rtol=1e-6)
