"""my_add = 2a + b: the kernel through both bindings against numpy."""

import numpy as np
import pytest
import torch

import customops
from customops.ort import session
from customops.verify import verify
from helpers import feeds, single_node_model

SHAPES = [(), (0,), (1,), (7,), (3, 5), (2, 3, 4), (1 << 17,), (5, 1, 0, 2)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_torch_op_matches_numpy(rng, shape):
    a, b = (rng.standard_normal(shape, dtype=np.float32) for _ in range(2))
    out = customops.my_add(torch.from_numpy(a), torch.from_numpy(b))
    np.testing.assert_allclose(out.numpy(), 2 * a + b, rtol=1e-6)


def test_pybind_function_matches_numpy(rng):
    a, b = (rng.standard_normal((4, 6), dtype=np.float32) for _ in range(2))
    out = customops.ops._C.my_add(torch.from_numpy(a), torch.from_numpy(b))
    np.testing.assert_allclose(out.numpy(), 2 * a + b, rtol=1e-6)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_ort_kernel_matches_numpy(rng, shape):
    inputs = {"a": rng.standard_normal(shape, dtype=np.float32),
              "b": rng.standard_normal(shape, dtype=np.float32)}
    (out,) = session(single_node_model("my_add", inputs, ["c"])).run(None, feeds(inputs))
    np.testing.assert_allclose(out, 2 * inputs["a"] + inputs["b"], rtol=1e-6)
    assert out.shape == shape


def test_opcheck():
    a = torch.randn(3, 4, requires_grad=True)
    b = torch.randn(3, 4, requires_grad=True)
    torch.library.opcheck(torch.ops.customops.my_add.default, (a, b))


def test_gradient():
    a = torch.randn(5, dtype=torch.float64).float().requires_grad_()
    b = torch.randn(5).requires_grad_()
    customops.my_add(a, b).sum().backward()
    assert torch.equal(a.grad, torch.full((5,), 2.0)) and torch.equal(b.grad, torch.ones(5))


class MyAddModel(torch.nn.Module):
    def forward(self, a, b):
        return customops.my_add(a, b)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_export_runs_in_ort(dynamo):
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    model = verify(MyAddModel(), (a, b), dynamo=dynamo, verbose=False)
    assert [(n.domain, n.op_type) for n in model.graph.node] == [("custom", "my_add")]
