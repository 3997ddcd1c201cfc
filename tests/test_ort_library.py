"""The ONNX Runtime library as a deployment artefact: what it links, what it
exports, and that it runs where torch cannot even be imported."""

import subprocess
import sys
import textwrap

import numpy as np
import onnx
import onnxruntime
import pytest

from customops.ort import library_path, session
from helpers import single_node_model


def test_links_neither_torch_nor_onnxruntime():
    ldd = subprocess.run(["ldd", library_path()], capture_output=True, text=True, check=True)
    libraries = ldd.stdout
    assert "libstdc++" in libraries  # the check reads real ldd output
    for forbidden in ("torch", "c10", "onnxruntime", "python"):
        assert forbidden not in libraries, libraries


def test_exports_only_the_entry_point():
    nm = subprocess.run(["nm", "-D", "--defined-only", library_path()],
                        capture_output=True, text=True, check=True)
    symbols = [line.split()[-1] for line in nm.stdout.splitlines() if line.strip()]
    assert symbols == ["RegisterCustomOps"]


def my_add_model():
    inputs = {"a": np.zeros((2, 3), np.float32), "b": np.zeros((2, 3), np.float32)}
    return single_node_model("my_add", inputs, ["c"])


@pytest.mark.parametrize("form", ["path", "bytes", "proto"])
def test_session_accepts_path_bytes_and_proto(tmp_path, form):
    model = my_add_model()
    if form == "path":
        onnx.save(model, tmp_path / "m.onnx")
        model = tmp_path / "m.onnx"
    elif form == "bytes":
        model = model.SerializeToString()
    sess = session(model)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(sess.run(None, {"a": a, "b": a})[0], 3 * a)


def test_session_passes_options_and_providers_through():
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    sess = session(my_add_model(), sess_options=options, providers=["CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    assert sess.get_session_options().intra_op_num_threads == 1


def test_shape_inference_types_the_outputs():
    """Outputs declared without a type get one from the kernels' inference."""
    sess = session(my_add_model())
    (out,) = sess.get_outputs()
    assert out.type == "tensor(float)" and out.shape == ["a_0", "a_1"]
    knn = single_node_model("knnquery", {"xyz": np.zeros((4, 3), np.float32),
                                         "offset": np.zeros(1, np.int32)},
                            ["idx", "dist"], nsample=5)
    idx, dist = session(knn).get_outputs()
    assert (idx.type, idx.shape, dist.type, dist.shape) == (
        "tensor(int32)", ["xyz_0", 5], "tensor(float)", ["xyz_0", 5])


def test_without_the_library_ort_refuses_the_model():
    with pytest.raises(Exception, match="my_add.*is not a registered function/op"):
        onnxruntime.InferenceSession(my_add_model().SerializeToString())


TORCH_FREE = textwrap.dedent("""
    import sys
    sys.modules["torch"] = None          # any `import torch` now raises ImportError
    import numpy as np
    from customops.ort import session
    import customops                     # the package root must stay torch-free too
    model = sys.stdin.buffer.read()
    a = np.full((2, 2), 1.5, np.float32)
    out = session(model).run(None, {"a": a, "b": a})[0]
    assert "torch" not in [m for m in sys.modules if sys.modules[m] is not None]
    print(out.sum())
""")


def test_runs_in_a_process_that_cannot_import_torch():
    done = subprocess.run([sys.executable, "-c", TORCH_FREE], capture_output=True,
                          input=my_add_model().SerializeToString(), check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().strip() == "18.0"


def test_one_sessionoptions_serves_several_sessions():
    options = onnxruntime.SessionOptions()
    first, second = (session(my_add_model(), sess_options=options) for _ in range(2))
    a = np.ones((2, 3), np.float32)
    assert first.run(None, {"a": a, "b": a})[0].sum() == second.run(None, {"a": a, "b": a})[0].sum() == 18
