"""Your own tests of the math: the cases the generic tests cannot know."""

# <schema:math-tests>
import pytest
import torch
from conftest import OrtError, run_ort
from test_ort import attribute_values, single_node_model

import op  # noqa: F401  (loads the op)

OP = torch.ops.my_ops.scaled_row_sum


def test_argmax_takes_the_first_of_equal_terms():
    _, argmax = OP(torch.tensor([[1.0, 3.0, 3.0]]), None, 1.0)
    assert argmax.tolist() == [1]


def test_no_column_is_refused():
    with pytest.raises(ValueError, match="scaled_row_sum: x needs at least one column for argmax, got 0"):
        OP(torch.ones(3, 0), None, 1.0)


def test_scale_must_be_finite():
    with pytest.raises(ValueError, match="scaled_row_sum: scale must be finite, got nan"):
        OP(torch.ones(3, 4), None, float("nan"))
    with pytest.raises(OrtError, match="scaled_row_sum: scale must be finite, got inf") as raised:
        run_ort(single_node_model("float32", attributes=attribute_values(scale=float("inf"))), {})
    assert raised.value.stage == "session"
# </schema:math-tests>
