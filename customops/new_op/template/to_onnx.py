"""How each exporter writes my_ops::scaled_row_sum as one ONNX node of domain
my_ops, which the ORT library in csrc/ort_op.cc implements.

- torch.onnx.export(dynamo=True): pass TABLE as custom_translation_table.
- torch.onnx.export(dynamo=False), legacy: call register_symbolic() first.
"""

from typing import Optional, Sequence  # noqa: F401  (the translation's annotations)

import onnxscript
import torch
from onnxscript import BOOL, DOUBLE, FLOAT, FLOAT16, INT32, INT64  # noqa: F401
from onnxscript.onnx_types import TensorType  # noqa: F401  (an input of several dtypes)
from torch.onnx import register_custom_op_symbolic
from torch.onnx.symbolic_helper import parse_args

import op  # noqa: F401  (defines torch.ops.my_ops.scaled_row_sum)

DOMAIN_VERSION = 1  # export with custom_opsets={"my_ops": DOMAIN_VERSION} on the legacy route
custom = onnxscript.values.Opset("my_ops", DOMAIN_VERSION)


# A script function in a domain of its own (a function my_ops::scaled_row_sum
# would call itself), inlined on export so only the my_ops node remains.
# A typed Python parameter (float, int, bool, str, Sequence[...]) becomes the
# node's attribute.  An optional input absent from the traced call (None, or
# left out when the schema defaults it to None, hence the default here) is
# omitted from the node: dropped at the end, the empty name before a present
# input; export.py writes a model without each optional input this way.
# <schema:translation>
@onnxscript.script(onnxscript.values.Opset("my_ops_translations", 1))
def translation(x: FLOAT, weight: Optional[FLOAT], scale: float) -> tuple[FLOAT, INT64]:
    sum, argmax = custom.scaled_row_sum(x, weight, scale=scale)
    return sum, argmax
# </schema:translation>


TABLE = {torch.ops.my_ops.scaled_row_sum.default: translation}


def omit_absent(inputs):
    """The node's inputs: an absent optional input at the end is left out, one
    before a present input is an empty name."""
    inputs = list(inputs)
    while inputs and inputs[-1].node().mustBeNone():
        inputs.pop()
    return inputs


# <schema:symbolic>
@parse_args("v", "v", "f")
def symbolic(g, x, weight, scale):
    inputs = omit_absent([x, weight])
    sum, argmax = g.op("my_ops::scaled_row_sum", *inputs, scale_f=scale, outputs=2)
    # The legacy exporter cannot infer an unknown op's outputs: state each one's
    # dtype and sizes (a dynamic size is None, named by export.py's dynamic_axes).
    rows = x.type().varyingSizes()[0]
    sum.setType(x.type().with_sizes([rows]))
    argmax.setType(x.type().with_dtype(torch.int64).with_sizes([rows]))
    return sum, argmax
# </schema:symbolic>


def register_symbolic() -> None:
    register_custom_op_symbolic("my_ops::scaled_row_sum", symbolic, 9)
