"""Claims the notebooks 03-06 and docs/new_op_checklist.md state in prose, kept here instead of in a cell.

Each test is the measurement behind one sentence of a notebook (named in its
docstring), on the pinned stack.
"""

import inspect
import io
import warnings

import numpy as np
import onnx
import onnxruntime
import onnxscript
import pytest
import torch
from onnxscript import FLOAT, opset18
from torch.onnx import register_custom_op_symbolic

import customops
import customops.ops  # noqa: F401  (torch.ops.customops.*)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


def _legacy_export(model, args, **kwargs):
    buffer = io.BytesIO()
    torch.onnx.export(model, args, buffer, dynamo=False, **kwargs)
    return onnx.load_from_string(buffer.getvalue())


def _root(error):
    while error.__cause__ is not None:
        error = error.__cause__
    return error


@torch.library.custom_op("course_claims::my_add", mutates_args=())
def _claims_my_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return 2 * a + b


@_claims_my_add.register_fake
def _(a, b):
    return torch.empty_like(a)


class _ClaimsModel(torch.nn.Module):
    def forward(self, a, b):
        return _claims_my_add(a, b)


def test_operator_export_type_fallthrough_keeps_the_node_only_on_the_legacy_exporter():
    """04, section 5: ONNX_FALLTHROUGH writes an op with no symbolic as is, in its
    namespace, with dynamo=False; dynamo=True drops the argument without a word."""
    a, b = torch.ones(2, 3), torch.ones(2, 3)
    model = _legacy_export(_ClaimsModel(), (a, b),
                           operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    assert [(n.domain, n.op_type) for n in model.graph.node] == [("course_claims", "my_add")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(Exception) as error:
            torch.onnx.export(_ClaimsModel(), (a, b), dynamo=True, verbose=False,
                              operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    assert "No ONNX function found for <OpOverload(op='course_claims.my_add'" in str(_root(error.value))
    assert not any("operator_export_type" in str(w.message) for w in caught)


def test_seed_prim_pythonop_registration_name_is_never_called():
    """03, legacy: seed 001 registers its symbolic as '::prim_PythonOp'; on
    torch 2.14.1 that name never matches the node kind prim::PythonOp."""
    calls = []

    def counting_symbolic(g, *args, **kwargs):
        calls.append(kwargs.get("name"))
        return None

    class MyRelu(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clamp(min=0)

    class Model(torch.nn.Module):
        def forward(self, x):
            return MyRelu.apply(x)

    register_custom_op_symbolic("::prim_PythonOp", counting_symbolic, 1)
    model = _legacy_export(Model(), (torch.zeros(2, 3),))
    assert calls == []
    assert [n.op_type for n in model.graph.node if n.op_type != "Constant"] == ["Clip"]  # forward inlined


def test_setup_py_develop_is_a_deprecated_wrapper_around_pip():
    """03, section 1: on the pinned setuptools, `setup.py develop` is deprecated
    and runs `pip install -e .` without --no-build-isolation."""
    import setuptools
    from setuptools.command import develop

    source = inspect.getsource(develop.develop.run)
    assert setuptools.__version__.startswith("84.")
    assert develop.DevelopDeprecationWarning._SUMMARY == "develop command is deprecated."
    assert "'pip', 'install', '-e'" in source and "no-build-isolation" not in source


def test_knn_legacy_symbolic_without_queries_writes_a_two_input_node(rng):
    """05, legacy: the varyingSizes() symbolic, without queries and with dynamic
    axes, writes knnquery(xyz, offset) with typed (n, nsample) outputs."""
    xyz = torch.from_numpy(rng.random((40, 3), np.float32))
    offset = torch.tensor([15, 40], dtype=torch.int32)

    class Net(torch.nn.Module):
        def forward(self, xyz, offset):
            return customops.KNNQuery.apply(8, xyz, offset)

    model = _legacy_export(Net(), (xyz, offset), opset_version=18, input_names=["xyz", "offset"],
                           output_names=["idx", "dist"],
                           dynamic_axes={"xyz": {0: "n"}, "offset": {0: "b"}, "idx": {0: "n"}, "dist": {0: "n"}})
    (node,) = model.graph.node
    assert list(node.input) == ["xyz", "offset"]
    dims = [[d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim] for o in model.graph.output]
    assert dims == [["n", 8], ["n", 8]]
    options = onnxruntime.SessionOptions()
    options.register_custom_ops_library(customops.ort.library_path())
    session = onnxruntime.InferenceSession(model.SerializeToString(), options)
    more = torch.from_numpy(rng.random((70, 3), np.float32))
    idx, _ = session.run(None, {"xyz": more.numpy(), "offset": np.array([70], np.int32)})
    np.testing.assert_array_equal(idx, customops.knn_query(8, more, torch.tensor([70], dtype=torch.int32))[0])



@onnxscript.script(onnxscript.values.Opset("course-claims", 1))
def _selu(X: FLOAT) -> FLOAT:
    alpha = opset18.CastLike(1.6732632423543772, X)
    gamma = opset18.CastLike(1.0507009873554805, X)
    return opset18.Where(X <= opset18.CastLike(0, X), gamma * (alpha * opset18.Exp(X) - alpha), gamma * X)


def test_new_exporter_inlines_an_onnxscript_translation_even_without_optimization():
    """06, section 2: the function of a translation never reaches the file, with
    optimize=False too (the version converter inlines it)."""
    for optimize in (True, False):
        model = torch.onnx.export(torch.nn.SELU(), (torch.zeros(2, 3),), dynamo=True, verbose=False,
                                  optimize=optimize,
                                  custom_translation_table={torch.ops.aten.selu.default: _selu}).model_proto
        ops = {n.op_type for n in model.graph.node}
        assert "Where" in ops and "Selu" not in ops, ops        # our function was used, not the built-in Selu
        assert not model.functions and all(n.domain == "" for n in model.graph.node), optimize


class _WithFloatAttribute(torch.nn.Module):
    def forward(self, x):
        return torch.onnx.ops.symbolic("course_claims::voxel", (x,), attrs={"size": 0.1},
                                       dtype=x.dtype, shape=x.shape)


def test_a_float_attribute_is_float32_and_moves_a_floor_boundary():
    """docs/new_op_checklist.md, step 3: PyTorch passes a schema `float` as a double,
    the exporter stores the attribute as float32, and floor(0.5 / size) is 5 with
    the double 0.1 but 4 with the float32 0.1 (computed in double)."""
    model = torch.onnx.export(_WithFloatAttribute(), (torch.ones(2),), dynamo=True, verbose=False).model_proto
    (node,) = [n for n in model.graph.node if n.op_type == "voxel"]
    (size,) = [a for a in node.attribute if a.name == "size"]
    assert size.type == onnx.AttributeProto.FLOAT and size.f == float(np.float32(0.1)) != 0.1
    assert np.floor(0.5 / 0.1) == 5 and np.floor(0.5 / size.f) == 4
