"""Bad input never reaches memory: every op, in both bindings, refuses it with
a message that names the argument and what was expected.

One table of bad inputs per op.  A case lists the op's inputs (numpy arrays,
None for an absent optional input), its attributes, and the regular
expression the message must match.  Each case runs

* through the PyTorch binding (``torch.ops.customops.<op>``), which must raise
  RuntimeError (TORCH_CHECK), and
* through ONNX Runtime, as a single-node model run by a session with the
  custom-op library, which must raise InvalidArgument
  (ORT_INVALID_ARGUMENT) while the process lives on,

unless the case is marked for one binding only: dtype and contiguity are
checked by the PyTorch binding; in ONNX Runtime the runtime itself checks
the dtypes (the library declares them), with its own message, tested here
too.  ``test_summary`` prints how many cases each op has per binding.

Empty inputs (n = 0, m = 0, N = 0) are not errors: they give empty outputs
of the right shape (``test_empty_inputs_*``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import onnxruntime
import pytest
import torch
from onnxruntime.capi.onnxruntime_pybind11_state import (
    InvalidArgument,
    InvalidGraph,
    RuntimeException,
)

import customops.ops  # noqa: F401  (registers torch.ops.customops.*)
from customops.ort import session
from helpers import feeds, knn_reference, single_node_model

ops = torch.ops.customops

f32 = lambda *shape: np.zeros(shape, np.float32)  # noqa: E731
i32 = lambda *values: np.array(values, np.int32)  # noqa: E731


@dataclass
class Bad:
    """One bad input: the op's inputs (None = absent), attributes, and the
    regex the error message must match."""

    id: str
    inputs: dict
    attrs: dict
    match: str
    bindings: tuple = ("torch", "ort")
    # names of inputs passed to torch as non-contiguous tensors
    noncontiguous: tuple = field(default=())


# --- the valid inputs each table starts from -----------------------------------

# knn_query: 2 clouds of 2 and 3 points, 1 and 2 queries.
KNN = dict(xyz=f32(5, 3), offset=i32(2, 5), new_xyz=f32(3, 3), new_offset=i32(1, 3))
KNN_ATTRS = dict(nsample=2)

# my_add: a and b of one shape.
ADD = dict(a=f32(2, 3), b=f32(2, 3))

# deform_conv2d: N=1, C=4, 6x6, 6 output channels, 3x3 kernel, groups 2,
# offset_groups 2 -> output 4x4; offset (1, 2*2*9, 4, 4), mask (1, 2*9, 4, 4).
DCN = dict(input=f32(1, 4, 6, 6), weight=f32(6, 2, 3, 3), offset=f32(1, 36, 4, 4),
           mask=f32(1, 18, 4, 4), bias=f32(6))
DCN_ATTRS = dict(stride=[1, 1], padding=[0, 0], dilation=[1, 1], groups=2, offset_groups=2)

def knn(id, match, bindings=("torch", "ort"), noncontiguous=(), nsample=2, **changes):
    return Bad(id, {**KNN, **changes}, {"nsample": nsample}, match, bindings, noncontiguous)


def add(id, match, bindings=("torch", "ort"), noncontiguous=(), **changes):
    return Bad(id, {**ADD, **changes}, {}, match, bindings, noncontiguous)


def dcn(id, match, bindings=("torch", "ort"), noncontiguous=(), inputs=None, **attrs):
    return Bad(id, {**DCN, **(inputs or {})}, {**DCN_ATTRS, **attrs}, match, bindings,
               noncontiguous)


TORCH, ORT = ("torch",), ("ort",)
ORT_DTYPE = r"Unexpected input data type\. Actual: \(tensor\({}\)\) , expected: \(tensor\({}\)\)"

KNN_CASES = [
    # xyz
    knn("xyz-2-columns", r"knn_query: xyz must have shape \(n, 3\), got \[5, 2\]", xyz=f32(5, 2)),
    knn("xyz-4-columns", r"xyz must have shape \(n, 3\), got \[5, 4\]", xyz=f32(5, 4)),
    knn("xyz-1d", r"xyz must have shape \(n, 3\), got \[15\]", xyz=f32(15)),
    knn("xyz-3d", r"xyz must have shape \(n, 3\), got \[5, 3, 1\]", xyz=f32(5, 3, 1)),
    knn("xyz-scalar", r"xyz must have shape \(n, 3\), got \[\]", xyz=np.array(1, np.float32)),
    knn("xyz-float64", r"knn_query: xyz must be Float, got Double", TORCH, xyz=np.zeros((5, 3))),
    knn("xyz-float16", r"xyz must be Float, got Half", TORCH, xyz=np.zeros((5, 3), np.float16)),
    knn("xyz-noncontiguous", r"knn_query: xyz must be contiguous", TORCH, ("xyz",)),
    knn("xyz-float64-ort", ORT_DTYPE.format("double", "float"), ORT, xyz=np.zeros((5, 3))),
    # offset
    knn("offset-scalar", r"offset must be 1-D with at least one element, got shape \[\]",
        offset=np.array(5, np.int32)),
    knn("offset-empty", r"offset must be 1-D with at least one element, got shape \[0\]",
        offset=i32(), new_offset=i32()),
    knn("offset-2d", r"offset must be 1-D with at least one element, got shape \[1, 2\]",
        offset=i32(2, 5).reshape(1, 2), new_offset=i32(1, 3).reshape(1, 2)),
    knn("offset-decreasing", r"offset must be non-decreasing, got offset\[1\] = 2 < offset\[0\] = 3",
        offset=i32(3, 2, 5), new_offset=i32(1, 2, 3)),
    knn("offset-negative", r"offset must be non-negative, got offset\[0\] = -1", offset=i32(-1, 5)),
    knn("offset-ends-before-n", r"the last value of offset must equal the number of points "
        r"n = 5, got 4", offset=i32(2, 4)),
    knn("offset-ends-after-n", r"the last value of offset must equal the number of points "
        r"n = 5, got 6", offset=i32(2, 6)),
    knn("offset-int32-max", r"offset must be non-decreasing, got offset\[1\] = 5 < "
        r"offset\[0\] = 2147483647", offset=i32(2**31 - 1, 5)),
    knn("offset-int-min", r"offset must be non-negative, got offset\[0\] = -2147483648",
        offset=i32(-2**31, 5)),
    knn("offset-past-n-then-back", r"offset must be non-decreasing, got offset\[1\] = 5 < "
        r"offset\[0\] = 7", offset=i32(7, 5)),
    knn("offset-int64", r"knn_query: offset must be Int, got Long", TORCH,
        offset=np.array([2, 5], np.int64)),
    knn("offset-float", r"offset must be Int, got Float", TORCH, offset=np.array([2, 5], np.float32)),
    knn("offset-noncontiguous", r"knn_query: offset must be contiguous", TORCH, ("offset",)),
    knn("offset-int64-ort", ORT_DTYPE.format("int64", "int32"), ORT,
        offset=np.array([2, 5], np.int64)),
    # new_xyz / new_offset
    knn("new_xyz-without-new_offset", r"new_xyz and new_offset must be given together",
        new_offset=None),
    knn("new_offset-without-new_xyz", r"new_xyz and new_offset must be given together",
        new_xyz=None),
    knn("new_xyz-2-columns", r"new_xyz must have shape \(m, 3\), got \[3, 2\]", new_xyz=f32(3, 2)),
    knn("new_xyz-1d", r"new_xyz must have shape \(m, 3\), got \[9\]", new_xyz=f32(9)),
    knn("new_offset-shorter", r"new_offset must have the shape of offset \[2\], got \[1\]",
        new_offset=i32(3)),
    knn("new_offset-longer", r"new_offset must have the shape of offset \[2\], got \[3\]",
        new_offset=i32(1, 2, 3)),
    knn("new_offset-2d", r"new_offset must have the shape of offset \[2\], got \[2, 1\]",
        new_offset=i32(1, 3).reshape(2, 1)),
    knn("new_offset-decreasing", r"new_offset must be non-decreasing, got new_offset\[1\] = 0 < "
        r"new_offset\[0\] = 1", new_offset=i32(1, 0)),
    knn("new_offset-negative", r"new_offset must be non-negative, got new_offset\[0\] = -2",
        new_offset=i32(-2, 3)),
    knn("new_offset-ends-before-m", r"the last value of new_offset must equal the number of "
        r"queries m = 3, got 2", new_offset=i32(1, 2)),
    knn("new_offset-ends-after-m", r"the last value of new_offset must equal the number of "
        r"queries m = 3, got 4", new_offset=i32(1, 4)),
    knn("new_offset-nonempty-queries-none", r"the last value of new_offset must equal the "
        r"number of queries m = 0, got 1", new_xyz=f32(0, 3), new_offset=i32(0, 1)),
    knn("new_xyz-float64", r"new_xyz must be Float, got Double", TORCH, new_xyz=np.zeros((3, 3))),
    knn("new_offset-int64", r"new_offset must be Int, got Long", TORCH,
        new_offset=np.array([1, 3], np.int64)),
    knn("new_xyz-noncontiguous", r"new_xyz must be contiguous", TORCH, ("new_xyz",)),
    knn("new_offset-noncontiguous", r"new_offset must be contiguous", TORCH, ("new_offset",)),
    knn("new_xyz-float64-ort", ORT_DTYPE.format("double", "float"), ORT,
        new_xyz=np.zeros((3, 3))),
    knn("new_offset-int64-ort", ORT_DTYPE.format("int64", "int32"), ORT,
        new_offset=np.array([1, 3], np.int64)),
    # nsample (in ORT an attribute; 0 and absence are load-time errors, below)
    knn("nsample-negative", r"knn_query: nsample must be at least 1, got -1", nsample=-1),
    knn("nsample-int64-min", r"nsample must be at least 1, got -9223372036854775808",
        nsample=-2**63),
    knn("nsample-zero", r"knn_query: nsample must be at least 1, got 0", TORCH, nsample=0),
    knn("nsample-65537", r"knn_query: nsample must be at most 65536, got 65537", nsample=65537),
    knn("nsample-2**40", r"nsample must be at most 65536, got 1099511627776", nsample=2**40),
    knn("nsample-int64-max", r"nsample must be at most 65536, got 9223372036854775807",
        nsample=2**63 - 1),
]

ADD_CASES = [
    add("b-transposed", r"my_add: b must have the shape of a \[2, 3\], got \[3, 2\]", b=f32(3, 2)),
    add("b-extra-dim", r"b must have the shape of a \[2, 3\], got \[2, 3, 1\]", b=f32(2, 3, 1)),
    add("b-broadcastable", r"b must have the shape of a \[2, 3\], got \[1, 3\]", b=f32(1, 3)),
    add("b-scalar", r"b must have the shape of a \[2, 3\], got \[\]", b=np.array(1, np.float32)),
    add("a-scalar", r"b must have the shape of a \[\], got \[2, 3\]", a=np.array(1, np.float32)),
    add("a-empty", r"b must have the shape of a \[0, 3\], got \[2, 3\]", a=f32(0, 3)),
    add("b-empty", r"b must have the shape of a \[2, 3\], got \[2, 0\]", b=f32(2, 0)),
    add("a-float64", r"my_add: a must be Float, got Double", TORCH, a=np.zeros((2, 3))),
    add("b-int32", r"my_add: b must be Float, got Int", TORCH, b=np.zeros((2, 3), np.int32)),
    add("b-float16", r"my_add: b must be Float, got Half", TORCH, b=np.zeros((2, 3), np.float16)),
    add("a-noncontiguous", r"my_add: a must be contiguous", TORCH, ("a",)),
    add("b-noncontiguous", r"my_add: b must be contiguous", TORCH, ("b",)),
    add("a-float64-ort", ORT_DTYPE.format("double", "float"), ORT, a=np.zeros((2, 3))),
    add("b-int32-ort", ORT_DTYPE.format("int32", "float"), ORT, b=np.zeros((2, 3), np.int32)),
]

OFFSET_LAYOUT = r"offset must have shape \(N, 2\*offset_groups\*kh\*kw, out_h, out_w\) = "
MASK_LAYOUT = r"mask must have shape \(N, offset_groups\*kh\*kw, out_h, out_w\) = "

DCN_CASES = [
    # ranks and sizes
    dcn("input-3d", r"deform_conv2d: input must be 4-D \(N, C, H, W\), got shape \[4, 6, 6\]",
        inputs=dict(input=f32(4, 6, 6))),
    dcn("input-5d", r"input must be 4-D \(N, C, H, W\), got shape \[1, 4, 6, 6, 1\]",
        inputs=dict(input=f32(1, 4, 6, 6, 1))),
    dcn("weight-3d", r"weight must be 4-D \(out_channels, C/groups, kh, kw\), got shape \[6, 2, 3\]",
        inputs=dict(weight=f32(6, 2, 3))),
    dcn("input-no-channels", r"input must have N >= 0 and C, H, W >= 1, got shape \[1, 0, 6, 6\]",
        inputs=dict(input=f32(1, 0, 6, 6))),
    dcn("input-no-rows", r"input must have N >= 0 and C, H, W >= 1, got shape \[1, 4, 0, 6\]",
        inputs=dict(input=f32(1, 4, 0, 6))),
    dcn("weight-empty-kernel", r"weight dimensions must all be >= 1, got shape \[6, 2, 0, 3\]",
        inputs=dict(weight=f32(6, 2, 0, 3))),
    dcn("weight-no-outputs", r"weight dimensions must all be >= 1, got shape \[0, 2, 3, 3\]",
        inputs=dict(weight=f32(0, 2, 3, 3), bias=f32(0))),
    # attributes
    dcn("stride-zero", r"deform_conv2d: stride must be >= 1, got \[0, 1\]", stride=[0, 1]),
    dcn("stride-negative", r"stride must be >= 1, got \[1, -2\]", stride=[1, -2]),
    dcn("stride-3-values", r"stride must have 2 values \(h, w\), got \[1, 1, 1\]", stride=[1, 1, 1]),
    dcn("stride-huge", r"stride values must be at most 2147483647, got \[1099511627776, 1\]",
        stride=[2**40, 1]),
    dcn("padding-negative", r"padding must be >= 0, got \[-1, 0\]", padding=[-1, 0]),
    dcn("padding-1-value", r"padding must have 2 values \(h, w\), got \[1\]", padding=[1]),
    dcn("padding-huge", r"padding values must be at most 2147483647, got \[0, 4611686018427387904\]",
        padding=[0, 2**62]),
    dcn("dilation-zero", r"dilation must be >= 1, got \[0, 1\]", dilation=[0, 1]),
    dcn("dilation-3-values", r"dilation must have 2 values \(h, w\), got \[1, 1, 1\]",
        dilation=[1, 1, 1]),
    dcn("dilation-huge", r"dilation values must be at most 2147483647, got \[1, 2147483648\]",
        dilation=[1, 2**31]),
    # channel and group arithmetic
    dcn("groups-zero", r"deform_conv2d: groups must be >= 1, got 0", groups=0),
    dcn("groups-negative", r"groups must be >= 1, got -2", groups=-2),
    dcn("offset_groups-zero", r"offset_groups must be >= 1, got 0", offset_groups=0),
    dcn("groups-not-dividing-C", r"input channels C = 4 must be divisible by groups = 3", groups=3),
    dcn("groups-huge", r"input channels C = 4 must be divisible by groups = 1099511627776",
        groups=2**40),
    dcn("offset_groups-not-dividing-C",
        r"input channels C = 4 must be divisible by offset_groups = 3", offset_groups=3),
    dcn("offset_groups-more-than-C",
        r"input channels C = 4 must be divisible by offset_groups = 8", offset_groups=8),
    dcn("out_channels-not-divisible",
        r"weight\.shape\[0\] \(out_channels\) = 5 must be divisible by groups = 2",
        inputs=dict(weight=f32(5, 2, 3, 3), bias=f32(5))),
    dcn("weight-channels-not-C/groups", r"weight\.shape\[1\] must be C/groups = 2, got 4",
        inputs=dict(weight=f32(6, 4, 3, 3))),
    dcn("weight-channels-for-groups-1", r"weight\.shape\[1\] must be C/groups = 4, got 2",
        groups=1),
    # kernel size against the padded input
    dcn("kernel-taller-than-input", r"kernel height extent 3 \(dilation \* \(k - 1\) \+ 1\) must "
        r"fit in the padded input height 2 \(height \+ 2 \* padding\)",
        inputs=dict(input=f32(1, 4, 2, 6))),
    dcn("dilated-kernel-wider-than-input", r"kernel width extent 9 \(dilation \* \(k - 1\) \+ 1\) "
        r"must fit in the padded input width 6", dilation=[1, 4]),
    dcn("kernel-wider-than-padded-input", r"kernel width extent 7 .* must fit in the padded "
        r"input width 6", inputs=dict(weight=f32(6, 2, 3, 7))),
    # offset, mask, bias shapes
    dcn("offset-channels-for-1-group", OFFSET_LAYOUT + r"\[1, 36, 4, 4\], got \[1, 18, 4, 4\]",
        inputs=dict(offset=f32(1, 18, 4, 4))),
    dcn("offset-spatial", OFFSET_LAYOUT + r"\[1, 36, 4, 4\], got \[1, 36, 6, 6\]",
        inputs=dict(offset=f32(1, 36, 6, 6))),
    dcn("offset-batch", OFFSET_LAYOUT + r"\[1, 36, 4, 4\], got \[2, 36, 4, 4\]",
        inputs=dict(offset=f32(2, 36, 4, 4))),
    dcn("offset-3d", OFFSET_LAYOUT + r"\[1, 36, 4, 4\], got \[36, 4, 4\]",
        inputs=dict(offset=f32(36, 4, 4))),
    dcn("offset-for-stride-1-with-stride-2", OFFSET_LAYOUT + r"\[1, 36, 2, 2\], got \[1, 36, 4, 4\]",
        stride=[2, 2]),
    dcn("mask-channels", MASK_LAYOUT + r"\[1, 18, 4, 4\], got \[1, 36, 4, 4\]",
        inputs=dict(mask=f32(1, 36, 4, 4))),
    dcn("mask-spatial", MASK_LAYOUT + r"\[1, 18, 4, 4\], got \[1, 18, 4, 3\]",
        inputs=dict(mask=f32(1, 18, 4, 3))),
    dcn("mask-1d", MASK_LAYOUT + r"\[1, 18, 4, 4\], got \[288\]", inputs=dict(mask=f32(288))),
    dcn("bias-length", r"bias must have shape \(out_channels\) = \[6\], got \[5\]",
        inputs=dict(bias=f32(5))),
    dcn("bias-2d", r"bias must have shape \(out_channels\) = \[6\], got \[6, 1\]",
        inputs=dict(bias=f32(6, 1))),
    dcn("bias-without-mask-wrong", r"bias must have shape \(out_channels\) = \[6\], got \[7\]",
        inputs=dict(mask=None, bias=f32(7))),
    # dtypes and layout
    dcn("input-int32", r"deform_conv2d: input must be float32, float64 or float16, got int32",
        TORCH, inputs=dict(input=np.zeros((1, 4, 6, 6), np.int32))),
    dcn("weight-float16", r"weight must have the dtype of input \(float32\), got float16", TORCH,
        inputs=dict(weight=np.zeros((6, 2, 3, 3), np.float16))),
    dcn("offset-float64", r"offset must have the dtype of input \(float32\), got float64", TORCH,
        inputs=dict(offset=np.zeros((1, 36, 4, 4)))),
    dcn("mask-int32", r"mask must have the dtype of input \(float32\), got int32", TORCH,
        inputs=dict(mask=np.zeros((1, 18, 4, 4), np.int32))),
    dcn("bias-float64", r"bias must have the dtype of input \(float32\), got float64", TORCH,
        inputs=dict(bias=np.zeros(6))),
    # (any layout is accepted: see test_deform_conv2d.py)
    dcn("input-float64-ort", ORT_DTYPE.format("double", "float"), ORT,
        inputs=dict(input=np.zeros((1, 4, 6, 6)))),
    dcn("offset-float64-ort", ORT_DTYPE.format("double", "float"), ORT,
        inputs=dict(offset=np.zeros((1, 36, 4, 4)))),
    dcn("bias-float64-ort", ORT_DTYPE.format("double", "float"), ORT,
        inputs=dict(bias=np.zeros(6))),
]

TABLES = {"knn_query": KNN_CASES, "my_add": ADD_CASES, "deform_conv2d": DCN_CASES}
ORT_NAME = {"knn_query": "knnquery", "my_add": "my_add", "deform_conv2d": "deform_conv2d"}
OUTPUTS = {"knn_query": ["idx", "dist"], "my_add": ["c"], "deform_conv2d": ["y"]}
# Inputs declared int32 in the ONNX models (all others are float32).
INT32_INPUTS = {"knn_query": {"offset", "new_offset"}}


def _params(binding):
    return [pytest.param(op, case, id=f"{op}-{case.id}")
            for op, table in TABLES.items() for case in table if binding in case.bindings]


# --- through PyTorch --------------------------------------------------------------


def _tensor(array, noncontiguous):
    if array is None:
        return None
    if not noncontiguous:
        return torch.from_numpy(np.asarray(array, order="C"))
    # Same shape and values, every other element of a buffer twice as long.
    wide = np.zeros(array.shape[:-1] + (2 * array.shape[-1],), array.dtype)
    wide[..., ::2] = array
    tensor = torch.from_numpy(wide)[..., ::2]
    assert not tensor.is_contiguous() and tuple(tensor.shape) == array.shape
    return tensor


def run_torch(op, inputs, attrs, noncontiguous=()):
    t = {name: _tensor(a, name in noncontiguous) for name, a in inputs.items()}
    if op == "knn_query":
        return ops.knn_query(attrs["nsample"], t["xyz"], t["offset"], t["new_xyz"],
                             t["new_offset"])
    if op == "my_add":
        return ops.my_add(t["a"], t["b"])
    return ops.deform_conv2d(t["input"], t["weight"], t["offset"], t["mask"], t["bias"],
                             attrs["stride"], attrs["padding"], attrs["dilation"],
                             attrs["groups"], attrs["offset_groups"])


@pytest.mark.parametrize("op,case", _params("torch"))
def test_torch_refuses(op, case):
    with pytest.raises(RuntimeError, match=case.match) as raised:
        run_torch(op, case.inputs, case.attrs, case.noncontiguous)
    # Every message starts with the op's name (TORCH_CHECK adds no prefix of its own).
    assert str(raised.value).startswith(f"{op}: "), str(raised.value)


# --- through ONNX Runtime ---------------------------------------------------------


def quiet_options(threads=None):
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4  # the refused runs are expected: no error lines on stderr
    if threads:
        options.intra_op_num_threads = threads
    return options


def ort_model(op, inputs, attrs):
    """The single-node model, with each input declared in the op's own dtype
    (a case with another dtype feeds it to that model)."""
    declared = {name: None if a is None else
                np.zeros(a.shape, np.int32 if name in INT32_INPUTS.get(op, ()) else np.float32) for name, a in inputs.items()}
    return single_node_model(ORT_NAME[op], declared, OUTPUTS[op], **attrs)


def run_ort(op, inputs, attrs):
    sess = session(ort_model(op, inputs, attrs), sess_options=quiet_options())
    return sess.run(None, feeds(inputs))


@pytest.mark.parametrize("op,case", _params("ort"))
def test_ort_refuses(op, case):
    with pytest.raises(InvalidArgument, match=case.match) as raised:
        run_ort(op, case.inputs, case.attrs)
    message = str(raised.value)
    if "Unexpected input data type" not in message:  # the runtime's own check has no prefix
        assert f"Status Message: {op}: " in message, message


def test_ort_session_survives_refused_runs():
    """A refused run leaves the session usable: the next good run works."""
    sess = session(ort_model("knn_query", KNN, KNN_ATTRS), sess_options=quiet_options())
    rng = np.random.default_rng(0)
    xyz = rng.random((5, 3), dtype=np.float32)
    good = {**KNN, "xyz": xyz}
    for _ in range(3):
        with pytest.raises(InvalidArgument, match="offset must be non-decreasing"):
            sess.run(None, feeds({**good, "offset": i32(3, 2)}))
        idx, dist = sess.run(None, feeds(good))
        ref_idx, _ = knn_reference(2, xyz, KNN["offset"], KNN["new_xyz"], KNN["new_offset"])
        np.testing.assert_array_equal(idx, ref_idx)


# Errors ORT reports while creating the session (the kernel's constructor reads
# the attributes, or the runtime checks the declared types), not at run time.
# ORT wraps a kernel constructor's status into RUNTIME_EXCEPTION
# ("Exception during initialization: ..."), whatever its code.
LOAD_CASES = [
    pytest.param("knn_query", {**KNN}, {}, RuntimeException,
                 r"knn_query: attribute nsample \(int\) is required", id="knn-nsample-missing"),
    pytest.param("knn_query", {**KNN, "xyz": np.zeros((5, 3))}, KNN_ATTRS, InvalidGraph,
                 r"Type 'tensor\(double\)' of input parameter \(xyz\) of operator \(knnquery\)",
                 id="knn-xyz-declared-double"),
    pytest.param("knn_query", {**KNN, "offset": np.zeros(2, np.int64)}, KNN_ATTRS, InvalidGraph,
                 r"Type 'tensor\(int64\)' of input parameter \(offset\) of operator \(knnquery\)",
                 id="knn-offset-declared-int64"),
    pytest.param("my_add", {**ADD, "b": np.zeros((2, 3))}, {}, InvalidGraph,
                 r"Type 'tensor\(double\)' of input parameter \(b\) of operator \(my_add\)",
                 id="my_add-b-declared-double"),
    pytest.param("deform_conv2d", {**DCN, "mask": np.zeros((1, 18, 4, 4), np.int32)}, DCN_ATTRS,
                 InvalidGraph, r"Type 'tensor\(int32\)' of input parameter \(mask\) of operator "
                 r"\(deform_conv2d\)", id="deform_conv2d-mask-declared-int32"),
]


@pytest.mark.parametrize("op,inputs,attrs,error,match", LOAD_CASES)
def test_ort_refuses_at_load(op, inputs, attrs, error, match):
    model = single_node_model(ORT_NAME[op], inputs, OUTPUTS[op], **attrs)
    with pytest.raises(error, match=match):
        session(model, sess_options=quiet_options())


def test_ort_nsample_zero_message_names_the_value():
    """A missing nsample fails at load; a bad value fails at run, like torch."""
    model = single_node_model("knnquery", KNN, ["idx", "dist"], nsample=0)
    with pytest.raises(InvalidArgument, match=r"knn_query: nsample must be at least 1, got 0"):
        session(model, sess_options=quiet_options()).run(None, feeds(KNN))


def test_ort_attribute_of_the_wrong_type_is_refused_not_replaced():
    """stride given as floats is refused at load, with the reason."""
    model = single_node_model("deform_conv2d", DCN, ["y"], **{**DCN_ATTRS, "stride": [1.0, 1.0]})
    with pytest.raises(Exception, match=r"deform_conv2d: attribute stride must be a list of ints"):
        session(model, sess_options=quiet_options()).run(None, feeds(DCN))


def test_ort_float_groups_is_refused():
    inputs = dict(DCN, weight=f32(6, 4, 3, 3), bias=f32(6))  # valid for groups=1 only
    model = single_node_model("deform_conv2d", inputs, ["y"], **{**DCN_ATTRS, "groups": 2.0,
                                                                 "offset_groups": 2})
    with pytest.raises(Exception, match="deform_conv2d: attribute groups must be an int"):
        session(model, sess_options=quiet_options()).run(None, feeds(inputs))


@pytest.mark.parametrize("weight_shape", [(6, 0, 3, 3), (6, 2, 0, 3)], ids=str)
def test_python_wrapper_reports_empty_weight(weight_shape):
    t = torch.from_numpy
    with pytest.raises(RuntimeError, match="weight"):
        customops.ops.deform_conv2d(t(DCN["input"]), t(DCN["offset"]), t(f32(*weight_shape)))


# --- empty inputs are not errors --------------------------------------------------

KNN_EMPTY = [
    pytest.param(f32(0, 3), i32(0), None, None, id="n0"),
    pytest.param(f32(0, 3), i32(0, 0, 0), f32(4, 3), i32(1, 1, 4), id="n0-queries"),
    pytest.param(f32(4, 3), i32(4), f32(0, 3), i32(0), id="m0"),
    pytest.param(f32(0, 3), i32(0), f32(0, 3), i32(0), id="n0-m0"),
    pytest.param(f32(6, 3), i32(0, 6, 6), f32(3, 3), i32(1, 1, 3), id="empty-clouds"),
]


@pytest.mark.parametrize("binding", ["torch", "ort"])
@pytest.mark.parametrize("xyz,offset,new_xyz,new_offset", KNN_EMPTY)
def test_empty_inputs_knn(binding, xyz, offset, new_xyz, new_offset):
    rng = np.random.default_rng(1)
    xyz = rng.random(xyz.shape, dtype=np.float32)
    inputs = dict(xyz=xyz, offset=offset, new_xyz=new_xyz, new_offset=new_offset)
    if binding == "torch":
        idx, dist = (t.numpy() for t in run_torch("knn_query", inputs, {"nsample": 3}))
    else:
        idx, dist = run_ort("knn_query", inputs, {"nsample": 3})
    ref_idx, ref_dist = knn_reference(3, xyz, offset, new_xyz, new_offset)
    assert idx.shape == dist.shape == ref_idx.shape
    assert idx.dtype == np.int32 and dist.dtype == np.float32
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_array_equal(dist, ref_dist)


@pytest.mark.parametrize("binding", ["torch", "ort"])
@pytest.mark.parametrize("shape", [(0,), (0, 3), (2, 0, 4)], ids=str)
def test_empty_inputs_my_add(binding, shape):
    inputs = dict(a=f32(*shape), b=f32(*shape))
    out = run_torch("my_add", inputs, {}).numpy() if binding == "torch" else \
        run_ort("my_add", inputs, {})[0]
    assert out.shape == shape and out.dtype == np.float32


@pytest.mark.parametrize("binding", ["torch", "ort"])
@pytest.mark.parametrize("mask,bias", [(True, True), (False, True), (True, False), (False, False)])
def test_empty_inputs_deform_conv2d(binding, mask, bias):
    inputs = dict(input=f32(0, 4, 6, 6), weight=f32(6, 2, 3, 3), offset=f32(0, 36, 4, 4),
                  mask=f32(0, 18, 4, 4) if mask else None, bias=f32(6) if bias else None)
    out = run_torch("deform_conv2d", inputs, DCN_ATTRS).numpy() if binding == "torch" else \
        run_ort("deform_conv2d", inputs, DCN_ATTRS)[0]
    assert out.shape == (0, 6, 4, 4) and out.dtype == np.float32


@pytest.mark.parametrize("binding", ["torch", "ort"])
def test_largest_nsample_is_accepted_and_bounded(binding):
    """nsample = 65536 (the limit) works on a small cloud; one more is refused
    before any (m, nsample) output is allocated."""
    xyz = np.random.default_rng(2).random((3, 3), dtype=np.float32)
    inputs = dict(xyz=xyz, offset=i32(3), new_xyz=None, new_offset=None)
    run = (lambda a: [t.numpy() for t in run_torch("knn_query", inputs, a)]) \
        if binding == "torch" else (lambda a: run_ort("knn_query", inputs, a))
    idx, dist = run({"nsample": 65536})
    assert idx.shape == (3, 65536) and (idx[:, 3:] == -1).all() and np.isinf(dist[:, 3:]).all()
    error = RuntimeError if binding == "torch" else InvalidArgument
    with pytest.raises(error, match="nsample must be at most 65536"):
        run({"nsample": 65537})


@pytest.mark.parametrize("binding", ["torch", "ort"])
def test_huge_output_is_refused_before_allocation(binding):
    """m * nsample above 2^28 (1 GiB per output) is refused: on Linux an
    overcommitted allocation would not fail but kill the process later."""
    xyz = np.zeros((4097, 3), np.float32)  # 4097 * 65536 > 2^28
    inputs = dict(xyz=xyz, offset=i32(4097), new_xyz=None, new_offset=None)
    error = RuntimeError if binding == "torch" else InvalidArgument
    with pytest.raises(error, match=r"knn_query: m \* nsample must be at most 268435456 "
                                    r"\(1 GiB per output\), got m = 4097, nsample = 65536"):
        if binding == "torch":
            run_torch("knn_query", inputs, {"nsample": 65536})
        else:
            run_ort("knn_query", inputs, {"nsample": 65536})


# --- counts -----------------------------------------------------------------------


def case_counts():
    counts = {}
    for op, table in TABLES.items():
        counts[op] = {b: sum(b in c.bindings for c in table) for b in ("torch", "ort")}
        counts[op]["ort-load"] = sum(1 for p in LOAD_CASES if p.values[0] == op)
    return counts


def test_summary(capsys):
    """Prints the number of bad inputs per op and binding (shown with -s or
    in the terminal summary); fails if a table lost its cases."""
    counts = case_counts()
    lines = [f"  {op:<14} torch {c['torch']:3d}   ort {c['ort']:3d} (+{c['ort-load']} at load)"
             for op, c in counts.items()]
    total = sum(c["torch"] + c["ort"] + c["ort-load"] for c in counts.values())
    with capsys.disabled():
        print("\nbad inputs tried per op and binding:\n" + "\n".join(lines) +
              f"\n  total {total}")
    for op, c in counts.items():
        assert c["torch"] >= 10 and c["ort"] >= 5, (op, c)
    # every case id is unique within its table
    for table in TABLES.values():
        ids = [c.id for c in table]
        assert len(ids) == len(set(ids))
    # the regexes compile
    for table in TABLES.values():
        for c in table:
            re.compile(c.match)
