"""How each exporter writes my_ops::scaled_row_sum as one ONNX node of domain
my_ops, which the ORT library in csrc/ort_op.cc implements.

- torch.onnx.export(dynamo=True): pass TABLE as custom_translation_table.
- torch.onnx.export(dynamo=False), legacy: call register_symbolic() first.
"""

from typing import Optional

import onnxscript
import torch
from onnxscript import FLOAT, INT64
from torch.onnx import register_custom_op_symbolic
from torch.onnx.symbolic_helper import parse_args

import op  # noqa: F401  (defines torch.ops.my_ops.scaled_row_sum)

DOMAIN_VERSION = 1  # export with custom_opsets={"my_ops": DOMAIN_VERSION} on the legacy route
custom = onnxscript.values.Opset("my_ops", DOMAIN_VERSION)


# A script function in a domain of its own (a function my_ops::scaled_row_sum
# would call itself), inlined on export so only the my_ops node remains.
# A float parameter becomes the node's attribute; a None weight becomes an
# omitted input; two outputs need the return annotation.
@onnxscript.script(onnxscript.values.Opset("my_ops_translations", 1))
def translation(x: FLOAT, weight: Optional[FLOAT], scale: float) -> tuple[FLOAT, INT64]:
    total, argmax = custom.scaled_row_sum(x, weight, scale=scale)
    return total, argmax


TABLE = {torch.ops.my_ops.scaled_row_sum.default: translation}


@parse_args("v", "v", "f")
def symbolic(g, x, weight, scale):
    inputs = [x] if weight.node().mustBeNone() else [x, weight]  # omit an absent optional input
    total, argmax = g.op("my_ops::scaled_row_sum", *inputs, scale_f=scale, outputs=2)
    # The legacy exporter cannot infer an unknown op's outputs: state each
    # one's dtype and shape.  A dynamic size is None here (varyingSizes).
    rows = x.type().varyingSizes()[0]
    total.setType(x.type().with_sizes([rows]))
    argmax.setType(x.type().with_dtype(torch.int64).with_sizes([rows]))
    return total, argmax


def register_symbolic() -> None:
    register_custom_op_symbolic("my_ops::scaled_row_sum", symbolic, 9)
