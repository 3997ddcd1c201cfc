"""The library against other onnxruntime releases than the pinned one.

Each release gets a small venv of its own (onnxruntime + numpy from PyPI,
built once and cached outside the repository by customops.envs, which
the notebooks and the doctor's tests share).  The oldest supported release and
the newest one measured run every op with the pinned runtime's results; the
release before the oldest gets a clear refusal, not a crash.
"""

import subprocess
import textwrap

import numpy as np
import onnxruntime as ort
import pytest

from customops.envs import ort_python, venvs_dir
from customops.ort import library_path
from helpers import single_node_model
from optable import OPS, basic_samples

SCRIPT = textwrap.dedent("""
    import sys, numpy as np, onnxruntime as ort
    opts = ort.SessionOptions()
    opts.register_custom_ops_library(sys.argv[1])
    for path in sys.argv[2:]:
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        feeds = {i.name: np.load(path + "." + i.name + ".npy") for i in sess.get_inputs()}
        for out, value in zip(sess.get_outputs(), sess.run(None, feeds)):
            np.save(path + ".out." + out.name + ".npy", value)
    print(ort.__version__)
""")


def models(tmp_path):
    """One single-node model per basic sample of each op, with its inputs and the pinned
    runtime's outputs, written where the other venv can read them."""
    from customops.ort import session

    cases = {f"{op.name}-{s.id}": (op, s) for op in OPS.values() for s in basic_samples(op)}
    written = {}
    for name, (op, sample) in cases.items():
        inputs, outputs = sample.inputs, op.output_names
        model = single_node_model(op.onnx_name, inputs, outputs, opset=17, **sample.attrs)
        model.ir_version = 8
        path = tmp_path / f"{name}.onnx"
        path.write_bytes(model.SerializeToString())
        present = {k: v for k, v in inputs.items() if v is not None}
        for name, value in present.items():
            np.save(f"{path}.{name}.npy", value)
        written[str(path)] = dict(zip(outputs, session(model).run(None, present)))
    return written


def run(python, paths):
    return subprocess.run([python, "-c", SCRIPT, library_path(), *paths],
                          capture_output=True, text=True)


# The version matrix's two ends (docs/versions.md): the first release of the
# oldest supported series, and the newest release, which is the pin.
OLDEST, NEWEST = "1.24.1", "1.32.0"


def test_the_newest_release_is_the_pin():
    assert ort.__version__ == NEWEST


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
def test_supported_runtime_runs_every_op(tmp_path, version):
    expected = models(tmp_path)
    done = run(ort_python(version), list(expected))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == version
    for path, outputs in expected.items():
        for name, value in outputs.items():
            np.testing.assert_array_equal(np.load(f"{path}.out.{name}.npy"), value)


# RegisterCustomOps reads the runtime's API version from its version string
# ("1.32.0" -> 32, csrc/ort/register.cc) and asks for min(that, the headers').
# Checked through the C API itself: GetApi(minor) exists, GetApi(minor + 1) does not.
API_PROBE = textwrap.dedent("""
    import ctypes, pathlib, onnxruntime
    lib = next(pathlib.Path(onnxruntime.__file__).parent.glob("capi/libonnxruntime.so*"))
    class ApiBase(ctypes.Structure):
        _fields_ = [("GetApi", ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint32)),
                    ("GetVersionString", ctypes.CFUNCTYPE(ctypes.c_char_p))]
    get_base = ctypes.CDLL(str(lib)).OrtGetApiBase
    get_base.restype = ctypes.POINTER(ApiBase)
    base = get_base().contents
    minor = int(base.GetVersionString().decode().split(".")[1])
    print(minor, bool(base.GetApi(minor)), bool(base.GetApi(minor + 1)))
""")


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
def test_the_api_version_is_the_minor_version(version):
    done = subprocess.run([ort_python(version), "-c", API_PROBE], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [version.split(".")[1], "True", "False"]


def test_a_release_venv_holds_onnxruntime_and_numpy_only():
    """docs/versions.md: the cached venv onnxruntime-<version>/ holds that
    onnxruntime and numpy, no onnx or torch: models are built in the main venv."""
    python = ort_python(OLDEST)
    probe = ("import importlib.util as u; "
             "print([m for m in ('onnxruntime', 'numpy', 'onnx', 'torch') if u.find_spec(m)])")
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    assert done.stdout.strip() == "['onnxruntime', 'numpy']", done.stderr
    assert python == venvs_dir() / f"onnxruntime-{OLDEST}" / "bin" / "python"


def test_older_runtime_is_refused_with_a_message(tmp_path):
    done = run(ort_python("1.23.2"), list(models(tmp_path))[:1])
    assert done.returncode != 0
    assert "customops needs onnxruntime >= 1.24, this is 1.23.2" in done.stderr


def test_standard_deformconv_needs_onnxruntime_1_25(tmp_path):
    """Notebook 02's fact: ORT's CPU DeformConv kernel first ships in 1.25.0;
    1.24.4 loads no model that uses it.  (The pinned runtime runs it.)"""
    from customops.ort import session

    rng = np.random.default_rng(0)
    inputs = {"X": rng.random((1, 2, 5, 5), np.float32), "W": rng.random((3, 2, 3, 3), np.float32),
              "offset": rng.random((1, 18, 3, 3), np.float32)}
    model = single_node_model("DeformConv", inputs, ["Y"], domain="")
    path = tmp_path / "deformconv.onnx"
    path.write_bytes(model.SerializeToString())
    assert session(model).run(None, inputs)[0].shape == (1, 3, 3, 3)
    load = "import sys, onnxruntime as ort; ort.InferenceSession(sys.argv[1])"
    done = subprocess.run([ort_python("1.24.4"), "-c", load, path], capture_output=True, text=True)
    assert done.returncode != 0
    assert ("NOT_IMPLEMENTED : Could not find an implementation for DeformConv(19)"
            in done.stderr), done.stderr


def test_onnx_default_ir_version_loads_from_onnxruntime_1_32_only(tmp_path):
    """The notebooks' IR-version fact: onnx 1.23.2's make_model writes IR 14 by
    default; the pinned 1.32.0 reads it, the releases before it read up to 13."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    assert model.ir_version == 14
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    path = tmp_path / "relu.onnx"
    path.write_bytes(model.SerializeToString())
    load = "import sys, onnxruntime as ort; ort.InferenceSession(sys.argv[1])"
    for version in (OLDEST, "1.31.1"):
        done = subprocess.run([ort_python(version), "-c", load, path], capture_output=True, text=True)
        assert "Unsupported model IR version: 14, max supported IR version: 13" in done.stderr, version
