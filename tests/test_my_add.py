"""my_add = 2a + b: the kernel through both bindings against numpy, in
float32, float64 and float16 (computed in float32, rounded once)."""

import numpy as np
import pytest
import torch

import customops
from customops.ort import session
from exporting import verify
from helpers import feeds, single_node_model, torch_generator
from optable import OPS, tensors

OP = OPS["my_add"]
SAMPLES = OP.samples(np.random.default_rng(0))


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.id)
def test_torch_op_matches_numpy(sample):
    (expected,) = OP.reference(sample.inputs, {})
    out = OP.python(tensors(sample.inputs, sample.noncontiguous), {})
    assert out.is_contiguous() and out.dtype == torch.from_numpy(expected).dtype
    np.testing.assert_array_equal(out.numpy(), expected)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.id)
def test_ort_kernel_matches_numpy(sample):
    (out,) = session(single_node_model("my_add", sample.inputs, ["c"])).run(
        None, feeds(sample.inputs))
    (expected,) = OP.reference(sample.inputs, {})
    assert out.dtype == expected.dtype and out.shape == expected.shape
    np.testing.assert_array_equal(out, expected)


def test_float16_rounding_matches_numpy_on_every_half():
    """Every finite float16 as b (with a = 0 and with a = b): the kernel's own
    half <-> float conversions against numpy's, bit for bit; overflow to inf."""
    every = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    b = every[np.isfinite(every)]
    for a in (np.zeros_like(b), b):
        out = customops.my_add(torch.from_numpy(a), torch.from_numpy(b)).numpy()
        with np.errstate(over="ignore"):  # beyond 65504: inf, in numpy and in ours
            expected = (2 * a.astype(np.float32) + b.astype(np.float32)).astype(np.float16)
        np.testing.assert_array_equal(out.view(np.uint16), expected.view(np.uint16))
    # a = b: 3b overflows to inf from 65520 on (the midpoint above 65504, the largest half)
    overflows = np.abs(3 * b.astype(np.float32)) >= 65520
    assert overflows.any() and (np.isinf(out) == overflows).all()


def test_float16_is_computed_in_float32_once():
    """2a + b rounded once; torch's own 2 * a + b rounds 2a first (two roundings)."""
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal(100_000).astype(np.float16) for _ in range(2))
    ours = customops.my_add(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    exact = 2 * a.astype(np.float64) + b.astype(np.float64)
    torch_err = np.abs((2 * torch.from_numpy(a) + torch.from_numpy(b)).numpy() - exact)
    our_err = np.abs(ours.astype(np.float64) - exact)
    assert (our_err <= torch_err).all()


def test_pybind_function_matches_numpy(rng):
    a, b = (rng.standard_normal((4, 6)) for _ in range(2))  # float64
    out = customops.ops._C.my_add(torch.from_numpy(a), torch.from_numpy(b))
    np.testing.assert_array_equal(out.numpy(), 2 * a + b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16], ids=str)
def test_gradient(rng, dtype):
    gen = torch_generator(rng)
    a = torch.randn(5, dtype=dtype, generator=gen).requires_grad_()
    b = torch.randn(5, dtype=dtype, generator=gen).requires_grad_()
    customops.my_add(a, b).sum().backward()
    assert torch.equal(a.grad, torch.full((5,), 2.0, dtype=dtype))
    assert torch.equal(b.grad, torch.ones(5, dtype=dtype))


class MyAddModel(torch.nn.Module):
    def forward(self, a, b):
        return customops.my_add(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16], ids=str)
@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_export_runs_in_ort(rng, dynamo, dtype):
    gen = torch_generator(rng)
    a, b = (torch.randn(2, 3, dtype=dtype, generator=gen) for _ in range(2))
    model = verify(MyAddModel(), (a, b), dynamo=dynamo, rtol=1e-3, atol=1e-3,
                   reference=lambda a, b: OP.reference({"a": a, "b": b}, {}))
    assert [(n.domain, n.op_type) for n in model.graph.node] == [("custom", "my_add")]
    assert {i.type.tensor_type.elem_type for i in model.graph.input} == {
        {torch.float32: 1, torch.float64: 11, torch.float16: 10}[dtype]}
