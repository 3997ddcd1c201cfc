"""Each exported model: one node of the op, its attributes typed as the schema
says, its inputs (every one, or all but the optional one it goes without)
and outputs typed and their sizes named as in --shapes."""

import onnx
import pytest
from conftest import MODELS, model_id
from onnx import AttributeProto, TensorProto

from schema import ATTRIBUTES, EXPORTED, INPUTS, NAME, NAMESPACE, OUTPUTS

ELEMENT = {"float16": TensorProto.FLOAT16, "float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE,
           "int64": TensorProto.INT64, "int32": TensorProto.INT32, "bool": TensorProto.BOOL}


def dims(value_info):
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def without(name, empty_name):
    """The node's inputs without ``name``: left out at the end, or named ""."""
    inputs = [("" if n == name else n) for n in INPUTS]
    if not empty_name:
        while inputs and inputs[-1] == "":
            inputs.pop()
    return inputs


@pytest.mark.parametrize("model", sorted(MODELS), ids=model_id)
def test_one_node_with_typed_attributes(model):
    absent = model[2]  # the exporters omit it as a hand-written node would
    model = onnx.load(MODELS[model])
    assert [(n.domain, n.op_type) for n in model.graph.node] == [(NAMESPACE, NAME)]
    node = model.graph.node[0]
    # (the legacy exporter writes them in alphabetical order)
    assert sorted((a.name, AttributeProto.AttributeType.Name(a.type)) for a in node.attribute) == sorted(ATTRIBUTES.items())
    for attribute in node.attribute:
        value = onnx.helper.get_attribute_value(attribute)
        wanted = EXPORTED[attribute.name]
        if isinstance(value, bytes):
            value = value.decode()
        if isinstance(wanted, (bool, str)):
            assert value == wanted, attribute.name  # a bool is an INT 0 or 1
        else:
            assert value == pytest.approx(wanted), attribute.name
    assert list(node.input) == without(absent, False) and list(node.output) == list(OUTPUTS)
    assert [i.name for i in model.graph.input] == [name for name in INPUTS if name != absent]
    assert any(o.domain == NAMESPACE and o.version == 1 for o in model.opset_import)


@pytest.mark.parametrize("model", sorted(MODELS), ids=model_id)
def test_types_and_named_sizes(model):
    dtype = model[0]
    graph = onnx.load(MODELS[model]).graph
    declared = {**INPUTS, **OUTPUTS}
    for value in [*graph.input, *graph.output]:
        element, sizes = declared[value.name]
        assert value.type.tensor_type.elem_type == ELEMENT[dtype if element == "T" else element], value.name
        assert dims(value) == sizes, value.name  # "E" for a size only the data give, never u0
