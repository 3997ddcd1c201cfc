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

from typing import Optional, TypeVar, Union

import onnxscript
import torch
from onnxscript import DOUBLE, FLOAT, FLOAT16, INT32, INT64
from onnxscript import opset18 as op

from . import ops  # noqa: F401  (defines torch.ops.customops.*)
from .ort import DOMAIN, OPSET_VERSION

custom = onnxscript.values.Opset(DOMAIN, OPSET_VERSION)
_translations = onnxscript.values.Opset("customops.translations", 1)

TFloat = TypeVar("TFloat", bound=Union[FLOAT, DOUBLE, FLOAT16])
TOffset = TypeVar("TOffset", bound=Union[INT32, INT64])


@onnxscript.script(_translations)
def my_add(a: TFloat, b: TFloat) -> TFloat:
    return custom.my_add(a, b)


@onnxscript.script(_translations)
def knnquery(
    nsample: int,
    xyz: FLOAT,
    offset: INT32,
    new_xyz: Optional[FLOAT] = None,
    new_offset: Optional[INT32] = None,
) -> tuple[INT32, FLOAT]:
    idx, dist = custom.knnquery(xyz, offset, new_xyz, new_offset, nsample=nsample)
    return idx, dist


def _int32(offsets):
    """int64 offsets (which PyTorch accepts) cast to the ONNX op's int32."""
    if offsets is None or offsets.dtype == INT32.dtype:
        return offsets
    return op.Cast(offsets, to=INT32.dtype)


def knn_query(
    nsample: int,
    xyz: FLOAT,
    offset: TOffset,
    new_xyz: Optional[FLOAT] = None,
    new_offset: Optional[TOffset] = None,
) -> tuple[INT32, FLOAT]:
    # A plain function, run while exporting, so it can look at the offsets'
    # dtype; the script function above becomes the node.
    return knnquery(nsample, xyz, _int32(offset), new_xyz, _int32(new_offset))


@onnxscript.script(_translations)
def deform_conv2d(
    input: TFloat,
    weight: TFloat,
    offset: TFloat,
    mask: Optional[TFloat],
    bias: Optional[TFloat],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    offset_groups: int,
) -> TFloat:
    return custom.deform_conv2d(
        input, weight, offset, mask, bias, stride=stride, padding=padding,
        dilation=dilation, groups=groups, offset_groups=offset_groups,
    )


@onnxscript.script(_translations)
def ms_deform_attn(
    value: TFloat,
    spatial_shapes: INT64,
    level_start_index: INT64,
    sampling_locations: TFloat,
    attention_weights: TFloat,
    im2col_step: int = 64,
) -> TFloat:
    return custom.ms_deform_attn(
        value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
        im2col_step=im2col_step,
    )


TABLE = {
    torch.ops.customops.my_add.default: my_add,
    torch.ops.customops.knn_query.default: knn_query,
    torch.ops.customops.deform_conv2d.default: deform_conv2d,
    torch.ops.customops.ms_deform_attn.default: ms_deform_attn,
}
