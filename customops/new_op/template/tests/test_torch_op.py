"""The PyTorch op against the numpy reference for each dtype, with and without
each optional input; its registration (opcheck); the shape and dtype errors
that follow from the schema."""

import numpy as np
import pytest
import torch

import op  # noqa: F401  (loads the op)
from reference import reference
from samples import sample
from schema import DTYPES, EXPORTED, INPUTS, NAME, NAMESPACE, OPTIONAL, OUTPUTS

OP = getattr(getattr(torch.ops, NAMESPACE), NAME)
TOLERANCE = {"float16": 1e-2, "float32": 1e-5, "float64": 1e-12}


def call(arrays):
    """OP on numpy arrays (an absent optional input: None), outputs as numpy."""
    tensors = [None if arrays.get(name) is None else torch.from_numpy(arrays[name]) for name in INPUTS]
    outputs = OP(*tensors, **EXPORTED)
    return [t.numpy() for t in (outputs if isinstance(outputs, tuple) else (outputs,))]


def expected(arrays):
    outputs = reference(**arrays, **EXPORTED)
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
@pytest.mark.parametrize("largest", [1, 9, 300])
def test_equals_reference(rng, dtype, with_optional, largest):
    arrays = sample(dtype, rng, with_optional, largest=largest)
    assert_outputs_equal(call(arrays), expected(arrays), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_optional", [True, False] if OPTIONAL else [True])
def test_opcheck(rng, dtype, with_optional):
    """Schema, fake kernel against the real one, registrations."""
    arrays = sample(dtype, rng, with_optional, smallest=2)
    args = tuple(None if arrays.get(name) is None else torch.from_numpy(arrays[name]) for name in INPUTS)
    torch.library.opcheck(OP.default, args, EXPORTED)


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
