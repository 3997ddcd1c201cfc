"""Every ORT attribute that has a default (tests/optable.py's ``attrs``) run
in a node that leaves it out, against the same node writing the default.

Every other test writes all attributes (both exporters do), so without this a
wrong default in csrc/ort/ (say stride [2, 2] where ONNX models expect
[1, 1]) would pass everything.  A new op's defaults are covered by its row.
"""

import numpy as np
import pytest

from customops.ort import session
from helpers import feeds, single_node_model
from optable import OPS

DEFAULTED = [(op, name) for op in OPS.values() for name, default in op.attrs.items()
             if default is not None]


def run(op, sample, attrs):
    model = single_node_model(op.onnx_name, sample.inputs, op.output_names, **attrs)
    return session(model).run(None, feeds(sample.inputs))


def uses_default(op, sample, names):
    return op.runs_in_ort(sample.inputs) and all(
        sample.attrs.get(name) == op.attrs[name] for name in names)


@pytest.mark.parametrize("op,names", [
    *[pytest.param(op, (name,), id=f"{op.name}-{name}") for op, name in DEFAULTED],
    *[pytest.param(op, tuple(n for o, n in DEFAULTED if o is op), id=f"{op.name}-all")
      for op in {op.name: op for op, _ in DEFAULTED}.values()]])
def test_absent_attribute_means_its_default(rng, op, names):
    """Each sample whose attributes already equal the defaults of ``names``,
    run with those attributes written and left out: identical outputs (the
    written node is compared with the op's reference in tests/test_<op>.py)."""
    samples = [s for s in op.samples(rng) if uses_default(op, s, names)]
    assert samples, f"{op.name}: no sample of tests/optable.py uses the default of {names}"
    for sample in samples:
        attrs = {**op.attrs, **sample.attrs}
        written = run(op, sample, attrs)
        left_out = run(op, sample, {k: v for k, v in attrs.items() if k not in names})
        assert len(left_out) == len(written) == len(op.outputs)
        for got, want in zip(left_out, written):
            np.testing.assert_array_equal(got, want, err_msg=f"{sample.id}: {names} left out")
