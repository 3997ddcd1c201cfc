"""customops.notebook.verify and customops.translations against the op table."""

import numpy as np
import onnxruntime
import pytest
import torch
from onnx import helper

import customops.translations as translations
from customops.builder import single_node_model
from customops.notebook.verify import compare
from optable import OPS


@pytest.mark.parametrize("op", OPS.values(), ids=lambda op: op.name)
def test_translation_signatures_take_the_dtypes_the_kernels_take(op):
    """Each script translation declares, per tensor input, exactly the
    element types the ORT kernels accept (tests/optable.py), so its ONNX
    function does not claim float32 for an op that also runs float64 and
    float16."""
    params = {p.name: p for p in getattr(translations, op.onnx_name).op_signature.params}
    for spec in op.inputs:
        declared = {int(t.dtype) for t in params[spec.name].type_constraint.allowed_types}
        assert declared == {helper.np_dtype_to_tensor_dtype(d) for d in spec.onnx}, spec.name


class Add(torch.nn.Module):
    def forward(self, a, b):
        return a + b


def test_compare_refuses_inputs_it_cannot_pair():
    """A session with one input for a model given two arguments (an export
    that folded one in) is refused, not compared on the first argument."""
    a = np.ones((2, 3), np.float32)
    session = onnxruntime.InferenceSession(
        single_node_model("Relu", {"a": a}, ["y"], domain="", opset=17).SerializeToString())
    args = (torch.from_numpy(a), torch.from_numpy(a))
    with pytest.raises(ValueError, match=r"the session takes 1 input\(s\) \(a\) but 2 "
                                         r"argument\(s\) were given"):
        compare(session, Add(), args)
    with pytest.raises(ValueError, match=r"takes 1 input\(s\) \(a\) but 3 argument"):
        compare(session, Add(), (*args, torch.from_numpy(a)))
    assert compare(session, torch.nn.ReLU(), torch.from_numpy(a)) == [0.0]
