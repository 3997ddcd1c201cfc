"""The library against other onnxruntime releases than the pinned one.

Each release gets a small venv of its own (the ``runtime`` fixture of
conftest.py: onnxruntime + numpy from PyPI, made once per test session).
The oldest supported release runs every op; the one before gets a clear
refusal, not a crash.
"""

import subprocess
import textwrap

import numpy as np

from customops.ort import library_path
from helpers import single_node_model

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
    """One single-node model per op with its inputs and the pinned
    runtime's outputs, written where the other venv can read them."""
    from customops.ort import session

    rng = np.random.default_rng(0)
    cases = {
        "my_add": ({"a": rng.random((3, 4), np.float32), "b": rng.random((3, 4), np.float32)},
                   ["c"], {}),
        "knnquery": ({"xyz": rng.random((50, 3), np.float32),
                      "offset": np.array([20, 50], np.int32)}, ["idx", "dist"], {"nsample": 6}),
        "deform_conv2d": ({"input": rng.random((1, 2, 5, 5), np.float32),
                           "weight": rng.random((3, 2, 3, 3), np.float32),
                           "offset": rng.random((1, 18, 3, 3), np.float32),
                           "mask": None, "bias": rng.random(3, np.float32)}, ["y"], {}),
    }
    written = {}
    for op, (inputs, outputs, attrs) in cases.items():
        model = single_node_model(op, inputs, outputs, opset=17, **attrs)
        model.ir_version = 8
        path = tmp_path / f"{op}.onnx"
        path.write_bytes(model.SerializeToString())
        present = {k: v for k, v in inputs.items() if v is not None}
        for name, value in present.items():
            np.save(f"{path}.{name}.npy", value)
        written[str(path)] = dict(zip(outputs, session(model).run(None, present)))
    return written


def run(python, paths):
    return subprocess.run([python, "-c", SCRIPT, library_path(), *paths],
                          capture_output=True, text=True)


def test_oldest_supported_runtime_runs_every_op(runtime, tmp_path):
    expected = models(tmp_path)
    done = run(runtime("1.24.4"), list(expected))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1.24.4"
    for path, outputs in expected.items():
        for name, value in outputs.items():
            np.testing.assert_array_equal(np.load(f"{path}.out.{name}.npy"), value)


def test_older_runtime_is_refused_with_a_message(runtime, tmp_path):
    done = run(runtime("1.23.2"), list(models(tmp_path))[:1])
    assert done.returncode != 0
    assert "customops needs onnxruntime >= 1.24, this is 1.23.2" in done.stderr
