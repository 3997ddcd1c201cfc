"""The ORT op: both exported models against PyTorch and the reference, a node
without the optional weight, the shapes it declares, its errors."""

import numpy as np
import onnxruntime as ort
import pytest
import torch
from conftest import LIBRARY, MODELS
from onnx import TensorProto, helper

import op  # noqa: F401  (loads the PyTorch op)
from reference import EXPORTED_SCALE, reference


def session(model):
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(LIBRARY))
    source = str(model) if not hasattr(model, "SerializeToString") else model.SerializeToString()
    return ort.InferenceSession(source, options)


def single_node_model(inputs=("x", "weight"), **attributes):
    """A node written by hand: it may omit weight, and declares no output shape."""
    node = helper.make_node("scaled_row_sum", list(inputs), ["sum", "argmax"], domain="my_ops", **attributes)
    declared = {"x": ["rows", "cols"], "weight": ["cols"]}
    graph = helper.make_graph(
        [node], "scaled_row_sum",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, declared[name]) for name in inputs if name],
        [helper.make_tensor_value_info("sum", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("argmax", TensorProto.INT64, None)])
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("my_ops", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)  # onnx writes IR 14; older ORT refuse it


@pytest.mark.parametrize("route", sorted(MODELS))
@pytest.mark.parametrize("rows", [1, 7, 300])
def test_ort_equals_pytorch(rng, route, rows):
    x = rng.standard_normal((rows, 4), dtype=np.float32)
    weight = rng.standard_normal(4, dtype=np.float32)
    total, argmax = session(MODELS[route]).run(None, {"x": x, "weight": weight})
    expected = torch.ops.my_ops.scaled_row_sum(torch.from_numpy(x), torch.from_numpy(weight), EXPORTED_SCALE)
    np.testing.assert_array_equal(total, expected[0].numpy())  # the same kernel: equal to the bit
    np.testing.assert_array_equal(argmax, expected[1].numpy())
    np.testing.assert_allclose(total, reference(x, weight, EXPORTED_SCALE)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("inputs", [("x",), ("x", "")], ids=["dropped", "empty name"])
def test_weight_omitted(rng, inputs):
    x = rng.standard_normal((5, 3), dtype=np.float32)
    total, argmax = session(single_node_model(inputs, scale=2.0)).run(None, {"x": x})
    expected_total, expected_argmax = reference(x, None, 2.0)
    np.testing.assert_allclose(total, expected_total, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(argmax, expected_argmax)


def test_declared_shapes_keep_the_symbol():
    """Read from the shape function: the hand-written node declares none."""
    outputs = session(single_node_model(scale=1.0)).get_outputs()
    assert [(o.name, o.type, o.shape) for o in outputs] == [
        ("sum", "tensor(float)", ["rows"]), ("argmax", "tensor(int64)", ["rows"])]


def test_bad_weight_fails_the_run_by_name():
    with pytest.raises(Exception) as raised:
        session(single_node_model(scale=1.0)).run(None, {"x": np.ones((2, 3), np.float32),
                                                         "weight": np.ones(5, np.float32)})
    assert "INVALID_ARGUMENT" in str(raised.value)
    assert "scaled_row_sum: weight must have one value per column of x (3), got 5" in str(raised.value)


@pytest.mark.parametrize("attributes, message", [
    ({}, "attribute scale (a FLOAT) is missing or not a float"),
    ({"scale": 2}, "attribute scale (a FLOAT) is missing or not a float"),
    ({"scale": float("inf")}, "scale must be finite, got inf"),
])
def test_bad_attribute_fails_the_session(attributes, message):
    with pytest.raises(Exception) as raised:
        session(single_node_model(**attributes))
    assert f"scaled_row_sum: {message}" in str(raised.value)
