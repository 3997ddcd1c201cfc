"""Claims the notebooks 03-06 state in prose, kept here instead of in a cell.

Each test is the measurement behind one sentence of a notebook (named in its
docstring), on the pinned stack.
"""

import inspect
import io
import sys
import warnings
from pathlib import Path

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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "notebooks"))
from torch_cluster_standin import grid_cluster  # noqa: E402  (the notebooks' stand-in package)


@torch.library.register_fake("torch_cluster::grid")
def _(pos, size, optional_start, optional_end):
    return pos.new_empty(pos.shape[0], dtype=torch.int64)

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
    a, b = torch.rand(2, 3), torch.rand(2, 3)
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
    model = _legacy_export(Model(), (torch.randn(2, 3),))
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


def _grid_reference(pos, size, start, end):
    q = np.floor((pos - start) / size).astype(np.int64)
    n = np.floor((end - start) / size).astype(np.int64) + 1
    strides = np.concatenate([[1], np.cumprod(n)[:-1]])
    return (q * strides).sum(1)


@pytest.mark.parametrize("dims", [2, 3])
def test_grid_standin_matches_torch_cluster_semantics(dims):
    """04, section 4: the stand-in computes torch_cluster's grid (voxel index,
    x fastest), with and without start and end."""
    pos = torch.rand(200, dims) * 5
    size = torch.full((dims,), 0.7)
    start, end = torch.full((dims,), -0.5), torch.full((dims,), 6.0)
    p = pos.numpy()
    np.testing.assert_array_equal(grid_cluster(pos, size).numpy(),
                                  _grid_reference(p, 0.7, p.min(0), p.max(0)))
    np.testing.assert_array_equal(grid_cluster(pos, size, start, end).numpy(),
                                  _grid_reference(p, 0.7, start.numpy(), end.numpy()))


def test_knn_legacy_symbolic_without_queries_writes_a_two_input_node():
    """05, legacy: the varyingSizes() symbolic, without queries and with dynamic
    axes, writes knnquery(xyz, offset) with typed (n, nsample) outputs."""
    xyz = torch.rand(40, 3)
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
    more = torch.rand(70, 3)
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
        model = torch.onnx.export(torch.nn.SELU(), (torch.randn(2, 3),), dynamo=True, verbose=False,
                                  optimize=optimize,
                                  custom_translation_table={torch.ops.aten.selu.default: _selu}).model_proto
        ops = {n.op_type for n in model.graph.node}
        assert "Where" in ops and "Selu" not in ops, ops        # our function was used, not the built-in Selu
        assert not model.functions and all(n.domain == "" for n in model.graph.node), optimize


def test_torch_verify_true_reports_a_wrong_translation_without_failing(capsys):
    """04, section 3: torch.onnx.export(..., verify=True) runs ORT on the example
    inputs and compares, but a wrong result is only a progress line and a log
    warning: the export returns normally."""

    def wrong_translation(pos, size, optional_start=None, optional_end=None):   # no strides: wrong ids
        start = opset18.ReduceMin(pos, opset18.Constant(value_ints=[0]), keepdims=0)
        cell = opset18.Cast(opset18.Div(opset18.Sub(pos, start), size), to=onnx.TensorProto.INT64)
        return opset18.ReduceSum(cell, opset18.Constant(value_ints=[1]), keepdims=0)

    class Voxelize(torch.nn.Module):
        def forward(self, pos, size):
            return grid_cluster(pos, size)

    pos, size = torch.rand(30, 3) * 4, torch.ones(3)
    program = torch.onnx.export(Voxelize(), (pos, size), dynamo=True, verbose=True, verify=True,
                                custom_translation_table={torch.ops.torch_cluster.grid.default: wrong_translation})
    assert "Verify output accuracy... ❌" in capsys.readouterr().out
    session = onnxruntime.InferenceSession(program.model_proto.SerializeToString())
    (got,) = session.run(None, {"pos": pos.numpy(), "size": size.numpy()})
    assert not np.array_equal(got, grid_cluster(pos, size).numpy())
