"""The op over its domain.  Each attribute at each of its values (schema.VALUES,
the others at EXPORTED), in PyTorch and in ORT (a single-node model written
with those values), against the reference; a value the reference refuses (it
raises ValueError) PyTorch refuses with a ValueError and ORT at session
creation, with the same message.  Then inputs and attribute values drawn by
Hypothesis (tests/strategies.py) through PyTorch: a failure is shrunk to a
minimal case, printed as a test to paste into tests/test_math.py."""

import numpy as np
import pytest
from conftest import OrtError, run_ort
from hypothesis import HealthCheck, given, note, settings
from strategies import as_code, cases
from test_ort import single_node_model
from test_torch_op import assert_outputs_equal, call, expected

from samples import sample
from schema import DTYPES, EXPORTED, VALUES

CASES = [(name, value) for name, values in VALUES.items() for value in values]


def refused_by_reference(arrays, attributes):
    """The reference's ValueError for this case, or None when it computes it."""
    try:
        expected(arrays, attributes)
    except ValueError as error:
        return error
    return None


def check_case(dtype, arrays, attributes):
    """PyTorch on one case: the reference's outputs, or a ValueError where the reference raises one."""
    refusal = refused_by_reference(arrays, attributes)
    if refusal is None:
        assert_outputs_equal(call(arrays, attributes), expected(arrays, attributes), dtype)
    else:
        with pytest.raises(ValueError):
            call(arrays, attributes)


if CASES:  # (an op without attributes has nothing to test here)
    @pytest.mark.parametrize("name, value", CASES, ids=[f"{n}={v!r}" for n, v in CASES])
    def test_each_attribute_value_in_pytorch_and_ort(rng, name, value):
        dtype, attributes = DTYPES[0], {**EXPORTED, name: value}
        arrays = sample(dtype, rng)
        model = single_node_model(dtype, attributes=attributes)
        if refused_by_reference(arrays, attributes) is None:
            want = expected(arrays, attributes)
            assert_outputs_equal(call(arrays, attributes), want, dtype)
            assert_outputs_equal(run_ort(model, arrays), want, dtype)
            return
        with pytest.raises(ValueError) as by_torch:
            call(arrays, attributes)
        with pytest.raises(OrtError) as by_ort:
            run_ort(model, arrays)
        assert by_ort.value.stage == "session", f"ORT accepted {name}={value!r} at session creation: {by_ort.value}"
        assert str(by_torch.value) in str(by_ort.value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_pytorch_on_drawn_cases(case):
    note(as_code(*case))  # printed for the minimal failing case only
    check_case(*case)
