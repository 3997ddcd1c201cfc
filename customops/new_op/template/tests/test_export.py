"""Both exported models: one my_ops node with a FLOAT attribute, rows dynamic."""

import onnx
import pytest
from conftest import MODELS

from reference import EXPORTED_SCALE


def dims(value_info):
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


@pytest.mark.parametrize("route", sorted(MODELS))
def test_one_custom_node(route):
    model = onnx.load(MODELS[route])
    node = next(n for n in model.graph.node if n.domain == "my_ops")
    assert [n.op_type for n in model.graph.node if n.domain == "my_ops"] == ["scaled_row_sum"]
    assert [(a.name, a.type) for a in node.attribute] == [("scale", onnx.AttributeProto.FLOAT)]
    assert node.attribute[0].f == pytest.approx(EXPORTED_SCALE)
    assert list(node.input) == ["x", "weight"] and len(node.output) == 2
    assert any(o.domain == "my_ops" and o.version == 1 for o in model.opset_import)


@pytest.mark.parametrize("route", sorted(MODELS))
def test_rows_stay_dynamic(route):
    graph = onnx.load(MODELS[route]).graph
    x, weight = graph.input
    assert dims(x) == ["rows", 4] and dims(weight) == [4]
    total, argmax = graph.output
    assert (total.type.tensor_type.elem_type, argmax.type.tensor_type.elem_type) == (
        onnx.TensorProto.FLOAT, onnx.TensorProto.INT64)
    assert dims(total) == dims(argmax) == ["rows"]
