"""customops::ms_deform_attn against two references that share no code with
the kernel: Deformable DETR's grid_sample formula (ms_deform_attn_core_pytorch,
tests/helpers.py) and a numpy one written from the definition; its gradients
against autograd through the formula and gradcheck; both exporters into ONNX
Runtime.  Bad input, fuzzing, threads, leaks and the fake kernel are covered
through its row of tests/optable.py."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

import customops
from customops.ort import session
from exporting import export, verify
from helpers import (feeds, ms_deform_attn_core_pytorch, ms_deform_attn_reference,
                     single_node_model)
from optable import (F16, F32, F64, MSDA_CONFIGS, OPS, msda_border_inputs, msda_config_id,
                     msda_inputs, tensors)

OP = OPS["ms_deform_attn"]
TOLERANCE = {F32: dict(rtol=1e-4, atol=1e-5), F64: dict(rtol=1e-10, atol=1e-12),
             F16: dict(rtol=1e-2, atol=1e-2)}
NAMES = ["value", "spatial_shapes", "level_start_index", "sampling_locations", "attention_weights"]

# grid_sample refuses empty inputs: the formula covers the configs without any
GRID_CONFIGS = [c for c in MSDA_CONFIGS
                if all(h * w for h, w in c["shapes"]) and c["n"] * c["q"] * c["d"] * c["p"]]


def formula(x):
    """The grid_sample formula on numpy inputs."""
    t = {k: torch.from_numpy(v) for k, v in x.items()}
    shapes = [tuple(int(s) for s in hw) for hw in x["spatial_shapes"]]
    with torch.no_grad():
        return ms_deform_attn_core_pytorch(t["value"], shapes, t["sampling_locations"],
                                           t["attention_weights"]).numpy()


def ours(x, im2col_step=64):
    t = {k: torch.from_numpy(v) for k, v in x.items()}
    return customops.ms_deform_attn(*(t[k] for k in NAMES), im2col_step).numpy()


def run_ort(x, attrs=None):
    model = single_node_model(OP.onnx_name, x, OP.output_names, **(attrs or {}))
    return session(model).run(None, feeds(x))[0]


@pytest.mark.parametrize("sample", OP.samples(np.random.default_rng(0)), ids=lambda s: s.id)
@pytest.mark.parametrize("binding", ["torch", "ort"])
def test_matches_numpy_reference(sample, binding):
    """Every sample of the table, both runtimes, against the numpy definition."""
    if binding == "torch":
        got = OP.python(tensors(sample.inputs, sample.noncontiguous), sample.attrs).numpy()
    else:
        got = run_ort(sample.inputs, sample.attrs)
    (expected,) = OP.reference(sample.inputs, sample.attrs)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                               **TOLERANCE[expected.dtype])


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
@pytest.mark.parametrize("spread", [0.0, 0.3, 2.0], ids=lambda s: f"spread{s}")
@pytest.mark.parametrize("cfg", GRID_CONFIGS, ids=msda_config_id)
def test_matches_grid_sample_formula(rng, cfg, spread, dtype):
    """Locations in [-spread, 1 + spread]: inside, across the borders, far out."""
    x = msda_inputs(rng, cfg, dtype, spread)
    expected = formula(x)
    np.testing.assert_allclose(ours(x), expected, **TOLERANCE[dtype])
    np.testing.assert_allclose(run_ort(x), expected, **TOLERANCE[dtype])


@pytest.mark.parametrize("cfg", GRID_CONFIGS[:3], ids=msda_config_id)
def test_borders_match_grid_sample_formula(rng, cfg):
    """Locations on pixel centres and edges, on the borders and half a pixel
    beyond: where floor() and the inside tests switch."""
    x = msda_border_inputs(rng, cfg, F64)
    expected = formula(x)
    np.testing.assert_allclose(ours(x), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ms_deform_attn_reference(*(x[k] for k in NAMES)), expected,
                               rtol=1e-12, atol=1e-12)


def test_far_away_locations_read_zero(rng):
    """Finite but huge locations are outside every level: zero, never a read
    out of bounds (the pixel index is never formed)."""
    x = msda_inputs(rng, MSDA_CONFIGS[1])
    x["sampling_locations"][...] = np.float32(3e38)
    x["sampling_locations"][..., ::2, 0] = np.float32(-3e38)
    assert not ours(x).any() and not run_ort(x).any()


def test_im2col_step_changes_nothing(rng):
    x = msda_inputs(rng, MSDA_CONFIGS[2])
    out = ours(x)
    for step in (1, 2, 7, 1000):
        np.testing.assert_array_equal(ours(x, step), out)
        np.testing.assert_array_equal(run_ort(x, {"im2col_step": step}), run_ort(x))


@pytest.mark.parametrize("cfg", GRID_CONFIGS[:3], ids=msda_config_id)
def test_float16_is_float32_rounded(rng, cfg):
    """float16 is computed in float32 from the same (float16) inputs, rounded once."""
    x16 = msda_inputs(rng, cfg, F16)
    x32 = {k: v.astype(F32) if v.dtype == F16 else v for k, v in x16.items()}
    want = ours(x32)
    for got in (ours(x16), run_ort(x16)):
        assert got.dtype == F16
        np.testing.assert_allclose(got.astype(F32), want, rtol=2**-10, atol=1e-6)


# --- gradients -----------------------------------------------------------------


def leaves(x):
    """Torch tensors of x; value, sampling_locations, attention_weights require grad."""
    t = {k: torch.from_numpy(v.copy()) for k, v in x.items()}
    for k in ("value", "sampling_locations", "attention_weights"):
        t[k].requires_grad_()
    return t


@pytest.mark.parametrize("cfg", GRID_CONFIGS[:2] + [MSDA_CONFIGS[5]], ids=msda_config_id)
def test_gradcheck(rng, cfg):
    """Finite differences in float64.  Locations within [-0.2, 1.2]: the
    bilinear weights have kinks at whole pixels, which a random location
    misses by far more than gradcheck's step."""
    t = leaves(msda_inputs(rng, cfg, F64, spread=0.2))
    assert torch.autograd.gradcheck(customops.ms_deform_attn, tuple(t[k] for k in NAMES))


@pytest.mark.parametrize("spread", [0.0, 0.5], ids=lambda s: f"spread{s}")
@pytest.mark.parametrize("cfg", GRID_CONFIGS, ids=msda_config_id)
def test_gradients_match_grid_sample_formula(rng, cfg, spread):
    """float32 gradients for value, sampling_locations and attention_weights
    against autograd through the formula, within 1e-3 of the largest."""
    x = msda_inputs(rng, cfg, F32, spread)
    grad = torch.from_numpy(rng.standard_normal(formula(x).shape).astype(F32))
    shapes = [tuple(int(s) for s in hw) for hw in x["spatial_shapes"]]
    a, b = leaves(x), leaves(x)
    customops.ms_deform_attn(*(a[k] for k in NAMES)).backward(grad)
    ms_deform_attn_core_pytorch(b["value"], shapes, b["sampling_locations"],
                                b["attention_weights"]).backward(grad)
    for k in ("value", "sampling_locations", "attention_weights"):
        want = b[k].grad.numpy()
        np.testing.assert_allclose(a[k].grad.numpy(), want, rtol=1e-3,
                                   atol=1e-3 * max(1.0, np.abs(want).max()), err_msg=k)


def test_backward_is_deterministic_across_thread_counts(rng):
    x = msda_inputs(rng, dict(n=2, m=4, d=8, shapes=[(9, 7), (4, 3)], q=40, p=3))
    grad = torch.from_numpy(rng.standard_normal((2, 40, 32)).astype(F32))
    t = {k: torch.from_numpy(v) for k, v in x.items()}
    args = [grad, *(t[k] for k in NAMES), 64]
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = torch.ops.customops.ms_deform_attn_backward(*args)
        torch.set_num_threads(2)
        two = torch.ops.customops.ms_deform_attn_backward(*args)
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_no_double_backward(rng):
    t = leaves(msda_inputs(rng, MSDA_CONFIGS[0], F64))
    out = customops.ms_deform_attn(*(t[k] for k in NAMES))
    (g,) = torch.autograd.grad(out.sum(), t["value"], create_graph=True)
    with pytest.raises(RuntimeError, match=r"customops::ms_deform_attn_backward has no "
                       r"gradient: the second derivative of ms_deform_attn"):
        g.sum().backward()


def test_opcheck_with_gradients(rng):
    t = leaves(msda_inputs(rng, MSDA_CONFIGS[1]))
    torch.library.opcheck(torch.ops.customops.ms_deform_attn.default,
                          tuple(t[k] for k in NAMES) + (64,))


# --- export ------------------------------------------------------------------------


class Attention(torch.nn.Module):
    """The op as a model calls it, through MSDeformAttnFunction (Deformable
    DETR's name) or the op; spatial_shapes and level_start_index are inputs,
    as in Deformable DETR."""

    def __init__(self, function: bool):
        super().__init__()
        self.function = function

    def forward(self, value, spatial_shapes, level_start_index, sampling_locations,
                attention_weights):
        args = (value, spatial_shapes, level_start_index, sampling_locations, attention_weights)
        if self.function:
            return customops.MSDeformAttnFunction.apply(*args, 64)
        return customops.ms_deform_attn(*args)


@pytest.mark.parametrize("function", [False, True], ids=["op", "function"])
@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_export_runs_in_ort(rng, dynamo, function):
    x = msda_inputs(rng, MSDA_CONFIGS[4])
    more = msda_inputs(rng, MSDA_CONFIGS[4])
    args = tuple(torch.from_numpy(x[k]) for k in NAMES)
    model = verify(Attention(function), args, dynamo=dynamo, rtol=1e-4, atol=1e-5,
                   more_args=[tuple(torch.from_numpy(more[k]) for k in NAMES)],
                   reference=lambda *arrays: [formula(dict(zip(NAMES, arrays)))])
    (node,) = [n for n in model.graph.node if n.domain == "custom"]
    assert node.op_type == "ms_deform_attn" and len(node.input) == 5
    assert [(a.name, a.i) for a in node.attribute] == [("im2col_step", 64)]
    output = model.graph.output[0].type.tensor_type
    assert output.elem_type == onnx.TensorProto.FLOAT
    assert [d.dim_value for d in output.shape.dim] == [2, 6, 24]


def test_shape_inference_keeps_named_dimensions():
    """An output declared without a shape gets (N, Q, M * D) from the kernel's
    inference: N and Q keep their names; M * D is a number when M and D are,
    else a fresh symbol (never a literal -1 that every run contradicts)."""
    x = msda_inputs(np.random.default_rng(0), MSDA_CONFIGS[0])
    (out,) = session(single_node_model(OP.onnx_name, x, OP.output_names)).get_outputs()
    assert out.type == "tensor(float)"
    assert out.shape[:2] == ["value_0", "sampling_locations_1"]
    assert out.shape[2].startswith("customops_unk__")
    static = single_node_model(OP.onnx_name, x, OP.output_names, static_shapes=True)
    (out,) = session(static).get_outputs()
    assert out.shape == [1, 5, 8]


def test_dynamo_export_keeps_named_dimensions(rng):
    """Batch and queries named at export stay named on the output, and the
    model runs on other sizes."""
    x = msda_inputs(rng, dict(n=2, m=2, d=4, shapes=[(3, 4), (2, 3)], q=5, p=2))
    args = tuple(torch.from_numpy(x[k]) for k in NAMES)
    batch, queries = torch.export.Dim("batch"), torch.export.Dim("queries")
    dynamic = ({0: batch}, None, None, {0: batch, 1: queries}, {0: batch, 1: queries})
    model = export(Attention(False), args, dynamo=True, dynamic_shapes=dynamic)
    dims = model.graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["batch", "queries", 8]
    sess = session(model)
    more = msda_inputs(rng, dict(n=3, m=2, d=4, shapes=[(3, 4), (2, 3)], q=11, p=2))
    np.testing.assert_allclose(sess.run(None, feeds(more))[0], formula(more), rtol=1e-4,
                               atol=1e-5)
