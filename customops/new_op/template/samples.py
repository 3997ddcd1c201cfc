"""Inputs for my_ops::scaled_row_sum drawn from schema.INPUTS: each named size
drawn once per sample (so the inputs that share it agree), static sizes as
declared.  Floats are standard normal; integers are 0, 1 or 2.  Edit
``draw`` if the math needs other values (sorted, positive, ...)."""

import numpy as np

from schema import INPUTS, OPTIONAL


def draw(dtype, shape, rng):
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(0, 3, shape).astype(dtype)


def sample(dtype, rng, with_optional=True, smallest=1, largest=9, sizes=None):
    """{input name: array}, T being ``dtype``; an optional input left out when
    not ``with_optional``.  ``sizes`` fixes some named sizes."""
    sizes = dict(sizes or {})
    arrays = {}
    for name, (element, dims) in INPUTS.items():
        for d in dims:
            if isinstance(d, str) and d not in sizes:
                sizes[d] = int(rng.integers(smallest, largest + 1))
        if name in OPTIONAL and not with_optional:
            continue
        shape = tuple(sizes[d] if isinstance(d, str) else d for d in dims)
        arrays[name] = draw(np.dtype(dtype if element == "T" else element), shape, rng)
    return arrays
