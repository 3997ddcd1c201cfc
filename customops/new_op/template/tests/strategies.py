"""Hypothesis strategies derived from schema.py: the op's inputs (each named
size drawn once, values, group ids, each optional input present or not) and
its attribute values (schema.VALUES).  Small, so that Hypothesis shrinks a
failing case to a minimal one, which ``as_code`` prints as a test to paste."""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from samples import within_budget
from schema import DTYPES, GROUP_IDS, INPUTS, OPTIONAL, VALUES

# Named sizes from 1 to MAX_SIZE, at most MAX_ELEMENTS per tensor: Hypothesis
# draws each element, and shrinks each.  samples.py draws the large inputs.
MAX_SIZE, MAX_ELEMENTS = 6, 64
WIDTH = {"float16": 16, "float32": 32, "float64": 64}


def elements(dtype):
    if dtype.kind == "f":
        return st.floats(-8, 8, width=WIDTH[dtype.name])
    if dtype == np.bool_:
        return st.booleans()
    return st.integers(0, 2)


@st.composite
def cases(draw):
    """(dtype, {input name: array}, {attribute: value}): an absent optional input has no key."""
    dtype = draw(st.sampled_from(DTYPES))
    sizes = {}
    for _, dims in INPUTS.values():
        sizes.update({d: draw(st.integers(1, MAX_SIZE)) for d in dims if isinstance(d, str) and d not in sizes})
    sizes = within_budget(sizes, tensor=MAX_ELEMENTS, total=4 * MAX_ELEMENTS)
    arrays = {}
    for name, (element, dims) in INPUTS.items():
        if name in OPTIONAL and not draw(st.booleans()):
            continue
        shape = tuple(sizes[d] if isinstance(d, str) else d for d in dims)
        stored = np.dtype(dtype if element == "T" else element)
        if name in GROUP_IDS:  # sorted, from 0 to n: a gap, an empty group 0, one group, each its own
            ids = draw(st.lists(st.integers(0, shape[0]), min_size=shape[0], max_size=shape[0]))
            arrays[name] = np.array(sorted(ids), stored)
        else:
            arrays[name] = draw(hnp.arrays(stored, shape, elements=elements(stored)))
    attributes = {name: draw(st.sampled_from(values)) for name, values in VALUES.items()}
    return dtype, arrays, attributes


def literal(value):
    """Python source for a value: non-finite floats included."""
    if isinstance(value, float) and not np.isfinite(value):
        return f'float("{value}")'
    if isinstance(value, list):
        return "[" + ", ".join(map(literal, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {literal(v)}" for k, v in value.items()) + "}"
    return repr(value)


def as_code(dtype, arrays, attributes):
    """The case as a test for tests/test_math.py."""
    lines = ["# paste into tests/test_math.py, which then needs `import numpy as np` and `from test_domain import check_case`:",
             "def test_found_by_hypothesis():",
             f"    check_case({dtype!r}, {{"]
    lines += [f"        {name!r}: np.array({literal(a.tolist())}, np.{a.dtype}),  # shape {a.shape}"
              for name, a in arrays.items()]
    lines.append(f"    }}, {literal(attributes)})")
    return "\n".join(lines)
