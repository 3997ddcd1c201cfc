"""The PyTorch op against the numpy reference, its registration, its errors."""

import numpy as np
import pytest
import torch

import op  # noqa: F401  (loads the op)
from reference import reference

OP = torch.ops.my_ops.scaled_row_sum


@pytest.mark.parametrize("rows, cols", [(1, 1), (5, 3), (64, 17), (0, 4)])
@pytest.mark.parametrize("with_weight", [True, False])
def test_equals_reference(rng, rows, cols, with_weight):
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    weight = rng.standard_normal(cols, dtype=np.float32) if with_weight else None
    scale = float(rng.uniform(-2, 2))
    total, argmax = OP(torch.from_numpy(x), None if weight is None else torch.from_numpy(weight), scale)
    expected_total, expected_argmax = reference(x, weight, scale)
    np.testing.assert_allclose(total.numpy(), expected_total, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(argmax.numpy(), expected_argmax)


def test_argmax_takes_the_first_of_equal_terms():
    _, argmax = OP(torch.tensor([[1.0, 3.0, 3.0]]), None, 1.0)
    assert argmax.tolist() == [1]


@pytest.mark.parametrize("with_weight", [True, False])
def test_opcheck(rng, with_weight):
    """Schema, fake kernel against the real one, registrations."""
    x = torch.from_numpy(rng.standard_normal((6, 4), dtype=np.float32))
    weight = torch.from_numpy(rng.standard_normal(4, dtype=np.float32)) if with_weight else None
    torch.library.opcheck(OP.default, (x, weight, 0.5))


@pytest.mark.parametrize("args, error, message", [
    ((torch.ones(3, 4), torch.ones(5), 1.0), ValueError, "weight must have one value per column of x (4), got 5"),
    ((torch.ones(3, 0), None, 1.0), ValueError, "x needs at least one column"),
    ((torch.ones(3, 4), None, float("nan")), ValueError, "scale must be finite, got nan"),
    ((torch.ones(3, 4, dtype=torch.float64), None, 1.0), RuntimeError, "x must be float32 of shape (rows, cols), got Double"),
    ((torch.ones(12), None, 1.0), RuntimeError, "x must be float32 of shape (rows, cols)"),
    ((torch.ones(3, 4), torch.ones(2, 2), 1.0), RuntimeError, "weight must be float32 of shape (cols,)"),
])
def test_bad_input_is_refused_by_name(args, error, message):
    with pytest.raises(error) as raised:
        OP(*args)
    assert message in str(raised.value)
