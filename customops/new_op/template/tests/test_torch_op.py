"""The PyTorch op against the numpy reference for each dtype, with and without
each optional input, small and large, each pattern of group ids; its
registration (opcheck); the shape and dtype errors that follow from the
schema.  The op runs in a child process (conftest.torch_op) wherever it
reaches the math, so a crash fails one case."""

import numpy as np
import pytest
import torch
from conftest import torch_op

import op  # noqa: F401  (loads the op)
from reference import reference
from samples import ID_PATTERNS, LARGE, sample
from schema import DTYPES, EXPORTED, GROUP_IDS, INPUTS, NAME, NAMESPACE, OPTIONAL, OUTPUTS

OP = getattr(getattr(torch.ops, NAMESPACE), NAME)
TOLERANCE = {"float16": 1e-2, "float32": 1e-5, "float64": 1e-12}
# Sizes: all 1; up to 9; the large ones grown within the budget (samples.py).
SIZES = {"ones": 1, "small": 9, "large": LARGE}


def call(arrays, attributes=EXPORTED):
    """OP on numpy arrays (an absent optional input: None or no key), outputs as numpy."""
    return torch_op.request("call", arrays, attributes)


def expected(arrays, attributes=EXPORTED):
    outputs = reference(**{k: v for k, v in arrays.items() if v is not None}, **attributes)
    return list(outputs) if isinstance(outputs, tuple) else [outputs]


def assert_outputs_equal(got, want, dtype):
    assert len(got) == len(want) == len(OUTPUTS)
    for (name, (element, _)), g, w in zip(OUTPUTS.items(), got, want):
        assert g.dtype == np.dtype(dtype if element == "T" else element), name
        assert g.shape == np.shape(w), name
        if np.issubdtype(g.dtype, np.floating):
            np.testing.assert_allclose(g, w, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype], err_msg=name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=name)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_optional", [True, False] if OPTIONAL else [True])
@pytest.mark.parametrize("size", SIZES)
def test_equals_reference(rng, dtype, with_optional, size):
    arrays = sample(dtype, rng, with_optional, largest=SIZES[size])
    assert_outputs_equal(call(arrays), expected(arrays), dtype)


if GROUP_IDS:  # (an op without them has nothing to test here)
    @pytest.mark.parametrize("ids", ID_PATTERNS)
    @pytest.mark.parametrize("size", ["small", "large"])
    def test_each_pattern_of_group_ids(rng, ids, size):
        arrays = sample(DTYPES[0], rng, largest=SIZES[size], ids=ids)
        assert_outputs_equal(call(arrays), expected(arrays), DTYPES[0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_optional", [True, False] if OPTIONAL else [True])
def test_opcheck(rng, dtype, with_optional):
    """Schema, fake kernel against the real one, registrations."""
    torch_op.request("opcheck", sample(dtype, rng, with_optional, smallest=2), EXPORTED)


def tensors(arrays):
    return [None if arrays.get(name) is None else torch.from_numpy(arrays[name]) for name in INPUTS]


def wrong_dtype(element):
    return torch.int32 if element != "int32" else torch.int64


@pytest.mark.parametrize("name", list(INPUTS))
def test_wrong_dtype_is_refused_by_name(rng, name):
    args = tensors(sample(DTYPES[0], rng))
    element = INPUTS[name][0]
    args[list(INPUTS).index(name)] = args[list(INPUTS).index(name)].to(wrong_dtype(element))
    with pytest.raises(RuntimeError, match=f"{NAME}: {name} must be .*, got Int"):
        OP(*args, **EXPORTED)


@pytest.mark.parametrize("name", list(INPUTS))
def test_wrong_rank_is_refused_by_name(rng, name):
    args = tensors(sample(DTYPES[0], rng))
    index = list(INPUTS).index(name)
    args[index] = args[index].unsqueeze(0)
    with pytest.raises(ValueError, match=f"{NAME}: {name} must have shape"):
        OP(*args, **EXPORTED)


# Each named size that two inputs share, and each static size: changed on one input only.
SHARED = [(name, axis) for name, (_, dims) in INPUTS.items() for axis, d in enumerate(dims)
          if isinstance(d, int) or any(d in other for n, (_, other) in INPUTS.items() if n != name)]


if SHARED:  # (an op without one has nothing to test here)
    @pytest.mark.parametrize("name, axis", SHARED)
    def test_inconsistent_size_is_refused_by_name(rng, name, axis):
        arrays = sample(DTYPES[0], rng, smallest=2)
        arrays[name] = np.concatenate([arrays[name], arrays[name].take([0], axis=axis)], axis=axis)
        with pytest.raises(ValueError, match=f"{NAME}: \\w+ must have shape"):
            OP(*tensors(arrays), **EXPORTED)
