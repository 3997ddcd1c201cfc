"""ONNX translations for the torch.export-based exporter (dynamo=True).

The new exporter does not call symbolic functions.  It sees the operators
themselves in the exported FX graph (``torch.ops.customops.knn_query.default``)
and looks each one up in ``custom_translation_table``: a function written in
onnxscript that builds the ONNX nodes.  Pass ``TABLE``::

    torch.onnx.export(model, args, dynamo=True,
                      custom_translation_table=customops.translations.TABLE)

The functions live in their own domain and are inlined on export, leaving
only the ``custom::`` nodes.  (A function in domain ``custom`` named
``my_add`` that calls ``custom::my_add`` would call itself.)  Optional inputs
that are None become omitted ONNX inputs; multi-output functions need their
return annotation, or the exporter cannot count the outputs.
"""

from __future__ import annotations

from typing import Optional

import onnxscript
import torch
from onnxscript import FLOAT, INT32

from . import ops  # noqa: F401  (defines torch.ops.customops.*)

custom = onnxscript.values.Opset("custom", 1)
_translations = onnxscript.values.Opset("customops.translations", 1)


@onnxscript.script(_translations)
def my_add(a: FLOAT, b: FLOAT) -> FLOAT:
    return custom.my_add(a, b)


@onnxscript.script(_translations)
def knn_query(
    nsample: int,
    xyz: FLOAT,
    offset: INT32,
    new_xyz: Optional[FLOAT] = None,
    new_offset: Optional[INT32] = None,
) -> tuple[INT32, FLOAT]:
    idx, dist = custom.knnquery(xyz, offset, new_xyz, new_offset, nsample=nsample)
    return idx, dist


@onnxscript.script(_translations)
def deform_conv2d(
    input: FLOAT,
    weight: FLOAT,
    offset: FLOAT,
    mask: Optional[FLOAT],
    bias: Optional[FLOAT],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    offset_groups: int,
) -> FLOAT:
    return custom.deform_conv2d(
        input, weight, offset, mask, bias, stride=stride, padding=padding,
        dilation=dilation, groups=groups, offset_groups=offset_groups,
    )


TABLE = {
    torch.ops.customops.my_add.default: my_add,
    torch.ops.customops.knn_query.default: knn_query,
    torch.ops.customops.deform_conv2d.default: deform_conv2d,
}
