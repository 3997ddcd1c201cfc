"""The ORT op, run in child processes (conftest.run_ort): every exported model
(with and without each optional input) against PyTorch and the reference;
nodes written by hand without each optional input; the shapes its shape
function declares; its errors; concurrent runs."""

import numpy as np
import pytest
from conftest import LIBRARY, MODELS, OrtError, model_id, run_ort
from onnx import AttributeProto, helper
from test_export import ELEMENT, without
from test_torch_op import SHARED, SIZES, assert_outputs_equal, call, expected

from samples import LARGE, sample
from schema import ATTRIBUTES, DTYPES, EXPORTED, INPUTS, NAME, NAMESPACE, OPTIONAL, OUTPUTS


@pytest.mark.parametrize("model", sorted(MODELS), ids=model_id)
@pytest.mark.parametrize("size", SIZES)
def test_ort_equals_pytorch_and_the_reference(rng, model, size):
    dtype, _, without = model
    arrays = sample(dtype, rng, largest=SIZES[size])
    arrays.pop(without, None)
    got = run_ort(MODELS[model], arrays)
    for g, t in zip(got, call(arrays)):
        np.testing.assert_array_equal(g, t)  # the same kernel: equal to the bit
    assert_outputs_equal(got, expected(arrays), dtype)


def attribute_values(**changes):
    values = {**EXPORTED, **changes}
    return {k: v for k, v in values.items() if v is not None}


def single_node_model(dtype, inputs=tuple(INPUTS), attributes=None):
    """A node written by hand: it may omit optional inputs, and its graph
    declares no output shape, so what a session shows comes from infer_shape."""
    node = helper.make_node(NAME, list(inputs), list(OUTPUTS), domain=NAMESPACE)
    for name, value in (attribute_values() if attributes is None else attributes).items():
        # an empty list has no type of its own: the schema's
        typed = {"attr_type": getattr(AttributeProto, ATTRIBUTES[name])} if value == [] else {}
        node.attribute.append(helper.make_attribute(name, value, **typed))
    graph = helper.make_graph(
        [node], NAME,
        [helper.make_tensor_value_info(name, ELEMENT[dtype if INPUTS[name][0] == "T" else INPUTS[name][0]],
                                       INPUTS[name][1]) for name in inputs if name],
        [helper.make_tensor_value_info(name, ELEMENT[dtype if element == "T" else element], None)
         for name, (element, _) in OUTPUTS.items()])
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid(NAMESPACE, 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)  # onnx writes IR 14; older ORT refuse it


if OPTIONAL:  # (an op without one has nothing to test here)
    @pytest.mark.parametrize("dtype", DTYPES)
    @pytest.mark.parametrize("name", OPTIONAL)
    @pytest.mark.parametrize("empty_name", [False, True], ids=["dropped", "empty name"])
    def test_optional_input_omitted(rng, dtype, name, empty_name):
        arrays = sample(dtype, rng, with_optional=True)
        del arrays[name]
        inputs = without(name, empty_name)
        got = run_ort(single_node_model(dtype, inputs), {n: arrays[n] for n in inputs if n})
        assert_outputs_equal(got, expected(arrays), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_declared_shapes_keep_every_name(dtype):
    """Read from the shape function: the hand-written node declares no output shape."""
    import onnxruntime as ort  # in this process only to read declarations: no run

    options = ort.SessionOptions()
    options.register_custom_ops_library(str(LIBRARY))
    session = ort.InferenceSession(single_node_model(dtype).SerializeToString(), options)
    declared = {o.name: (o.type, o.shape) for o in session.get_outputs()}
    types = {"float16": "float16", "float32": "float", "float64": "double", "int64": "int64", "int32": "int32",
             "bool": "bool"}
    for name, (element, sizes) in OUTPUTS.items():
        assert declared[name] == (f"tensor({types[dtype if element == 'T' else element]})", sizes), name


if SHARED:  # (an op without one has nothing to test here)
    @pytest.mark.parametrize("name, axis", SHARED[:1])
    def test_inconsistent_sizes_fail_the_run_by_name(rng, name, axis):
        arrays = sample(DTYPES[0], rng, smallest=2)
        arrays[name] = np.concatenate([arrays[name], arrays[name].take([0], axis=axis)], axis=axis)
        with pytest.raises(OrtError) as raised:
            run_ort(MODELS[DTYPES[0], "dynamo", ""], arrays)
        assert raised.value.stage == "run" and "INVALID_ARGUMENT" in str(raised.value)
        assert f"{NAME}: " in str(raised.value) and "must have shape" in str(raised.value)


# ORT reads a list of another type as an empty list: csrc/ort_op.cc tells them apart.
WRONG = {"FLOAT": "a", "INT": 1.5, "STRING": 2, "INTS": 3, "FLOATS": [1, 2]}


if ATTRIBUTES:  # (an op without one has nothing to test here)
    @pytest.mark.parametrize("name", list(ATTRIBUTES))
    def test_attribute_of_a_wrong_type_fails_the_session(name):
        model = single_node_model(DTYPES[0], attributes=attribute_values(**{name: WRONG[ATTRIBUTES[name]]}))
        with pytest.raises(OrtError) as raised:
            run_ort(model, {})
        assert raised.value.stage == "session"
        assert f"{NAME}: attribute {name} (a {ATTRIBUTES[name]}) is missing or not a {ATTRIBUTES[name]}" in str(raised.value)


def test_concurrent_runs_on_different_inputs(rng):
    """One session, 4 threads, 12 different inputs of different sizes at once:
    a race between runs (state shared in the kernel) shows as a mismatch."""
    dtype = DTYPES[-1]
    feeds = [sample(dtype, rng, smallest=9, largest=LARGE) for _ in range(12)]
    assert "equal their lone runs" in run_ort(MODELS[dtype, "dynamo", ""], feeds, threads=4, rounds=4)
