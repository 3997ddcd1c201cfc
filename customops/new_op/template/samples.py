"""Inputs for my_ops::scaled_row_sum drawn from schema.INPUTS, with numpy: each
named size drawn once per sample (so the inputs that share it agree), static
sizes as declared.  Floats are standard normal; integers are 0, 1 or 2; group
ids (`sorted` in --shapes, schema.GROUP_IDS) are sorted and non-negative, in
one of the ID_PATTERNS.  Every sample stays within the element budget below,
whatever the rank.  Edit ``draw`` if the math needs other values (positive, ...).
tests/strategies.py draws the same inputs with Hypothesis."""

import math

import numpy as np

from schema import GROUP_IDS, GROWN, INPUTS, OPTIONAL, OUTPUTS

# At most this many elements in one tensor (an input, or an output whose sizes
# the inputs give) and in one sample's inputs and outputs together: 32768
# float64 are 256 KiB, so no test holds more than a few MiB at once.
MAX_TENSOR, MAX_SAMPLE = 1 << 15, 1 << 16
# A large sample: the sizes in schema.GROWN (group ids, reductions) drawn up to
# LARGE, the others up to SMALL; then halved, largest first, within the budget.
SMALL, LARGE = 9, 4096
# How group ids are drawn: every group present; one group; every row its own
# group; an id with no rows between two others; group 0 empty.
ID_PATTERNS = ("dense", "one", "each", "gap", "empty_first")


def group_ids(n, pattern, rng):
    """n sorted non-negative group ids of one of the ID_PATTERNS."""
    groups = int(rng.integers(1, max(1, n // 2) + 1))
    if pattern == "one":
        return np.zeros(n, np.int64)
    if pattern == "each":
        return np.arange(n, dtype=np.int64)
    ids = np.sort(np.concatenate([np.arange(min(groups, n)), rng.integers(0, groups, n - min(groups, n))]))
    if pattern == "gap" and n > 1:  # the ids from a random row on move up, leaving one id without rows
        row = int(rng.integers(1, n))
        ids[row:] += ids[row - 1] + 2 - ids[row]
    if pattern == "empty_first":
        ids += 1
    return ids.astype(np.int64)


def draw(name, dtype, shape, rng, ids="dense"):
    if name in GROUP_IDS:
        return group_ids(shape[0], ids, rng).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(0, 3, shape).astype(dtype)


def elements(dims, sizes):
    return math.prod(sizes[d] if isinstance(d, str) else d for d in dims)


def within_budget(sizes, smallest=1, tensor=MAX_TENSOR, total=MAX_SAMPLE):
    """``sizes`` with the largest named size halved (not below ``smallest``)
    until every tensor holds at most ``tensor`` elements and all together ``total``."""
    tensors = [dims for _, dims in INPUTS.values()] + \
        [dims for _, dims in OUTPUTS.values() if all(isinstance(d, int) or d in sizes for d in dims)]
    while True:
        counts = [elements(dims, sizes) for dims in tensors]
        if max(counts) <= tensor and sum(counts) <= total:
            return sizes
        name = max((s for s in sizes if sizes[s] > smallest), key=sizes.get, default=None)
        if name is None:  # the static sizes alone are over the budget
            return sizes
        sizes[name] = max(smallest, sizes[name] // 2)


def sample(dtype, rng, with_optional=True, smallest=1, largest=SMALL, sizes=None, ids=None):
    """{input name: array}, T being ``dtype``; an optional input left out when
    not ``with_optional``.  Named sizes from ``smallest`` to ``largest``, the
    ones not in GROWN at most SMALL, within the budget; ``sizes`` fixes some.
    ``ids``: the pattern of group ids (default: one drawn from ID_PATTERNS)."""
    drawn = {}
    for _, dims in INPUTS.values():
        for d in dims:
            if isinstance(d, str) and d not in drawn:
                top = largest if d in GROWN else min(largest, SMALL)
                drawn[d] = int(rng.integers(smallest, max(smallest, top) + 1))
    drawn = {**within_budget(drawn, smallest), **(sizes or {})}
    ids = ids or ID_PATTERNS[int(rng.integers(len(ID_PATTERNS)))]
    arrays = {}
    for name, (element, dims) in INPUTS.items():
        if name in OPTIONAL and not with_optional:
            continue
        shape = tuple(drawn[d] if isinstance(d, str) else d for d in dims)
        arrays[name] = draw(name, np.dtype(dtype if element == "T" else element), shape, rng, ids)
    return arrays
