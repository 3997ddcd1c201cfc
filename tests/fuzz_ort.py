"""Property-based fuzzing of the ONNX Runtime kernels (a plain script).

tests/test_fuzz.py runs this file in a subprocess, so that a kernel that
crashes (a signal) fails that test instead of taking pytest down; run it by
hand with ``python tests/fuzz_ort.py [--examples N] [--last-example PATH]``.
(The name does not start with ``test_``: pytest does not collect it.)

For each op, hypothesis draws shapes, dtypes, offsets and attribute values,
valid ones and invalid ones, and runs them through a single-node model in a
session with the custom-op library.  An independent Python model of each op's
contract (``*_problem`` below, written from the headers in csrc/kernels, not
from the kernels' code) says whether the draw is valid and, if not, which
argument the error must name:

* valid draws must give the reference's result (knn: helpers.knn_reference,
  deform_conv2d: torchvision.ops.deform_conv2d, my_add: numpy,
  ms_deform_attn: helpers.ms_deform_attn_reference);
* invalid draws must raise InvalidArgument at run (or fail the session's
  creation, for a bad attribute the kernel reads when it is built) with a
  message naming that argument;
* none may kill the process.

Generation is derandomized (the same examples on every run, so CI is
reproducible) and the number of examples per op is fixed.  Before running an
example its description goes to --last-example, so that the parent can show
which input crashed the process.  The last line printed is a JSON summary of
the counts.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
import traceback
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import onnxruntime  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from onnxruntime.capi.onnxruntime_pybind11_state import (  # noqa: E402
    Fail,
    InvalidArgument,
    RuntimeException,
)

from customops.ort import session  # noqa: E402
from helpers import feeds, knn_reference, single_node_model  # noqa: E402
from optable import OPS  # noqa: E402

INT32_MAX = 2**31 - 1
COUNTS: dict[str, Counter] = {op: Counter() for op in OPS}
LAST_EXAMPLE: str | None = None
_SESSIONS: dict[bytes, onnxruntime.InferenceSession] = {}


def record(description: str) -> None:
    """Writes the example about to run where the parent can read it after a crash."""
    if LAST_EXAMPLE:
        with open(LAST_EXAMPLE, "w") as f:
            f.write(description)


def describe(inputs: dict, attrs: dict) -> str:
    parts = []
    for name, a in inputs.items():
        if a is None:
            parts.append(f"{name}=None")
        elif a.dtype.kind == "i" and a.size <= 8:
            parts.append(f"{name}={a.dtype}{list(a.shape)} {a.tolist()}")
        else:
            parts.append(f"{name}={a.dtype}{list(a.shape)}")
    return ", ".join(parts) + f"; attributes {attrs}"


def declared(op, inputs: dict) -> dict:
    """Each input declared with its own dtype where the kernels take it, else
    with the op's first dtype (the draw is then fed to that model as it is)."""
    spec = {i.name: i for i in op.inputs}
    return {name: None if a is None else
            np.zeros((0,) * a.ndim, a.dtype if a.dtype in spec[name].onnx else spec[name].onnx[0])
            for name, a in inputs.items()}


def get_session(op, inputs: dict, attrs: dict):
    """A session for the single-node model (cached by model)."""
    model = single_node_model(op.onnx_name, declared(op, inputs), op.output_names,
                              **attrs).SerializeToString()
    if model not in _SESSIONS:
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 4  # refused runs are expected here
        _SESSIONS[model] = session(model, sess_options=options)
    return _SESSIONS[model]


def check_example(op, inputs: dict, attrs: dict, problem, reference):
    """Runs one draw and checks it against the contract.  ``problem`` is None
    (valid), ("load", regex) or ("run", regex)."""
    name = op.name
    record(f"{name}: {describe(inputs, attrs)}; expected problem: {problem}")
    if problem is not None and problem[0] == "load":
        try:
            get_session(op, inputs, attrs)
        except (RuntimeException, Fail) as error:
            assert re.search(problem[1], str(error)), f"expected /{problem[1]}/, got: {error}"
            COUNTS[name]["invalid (refused at load)"] += 1
            return
        raise AssertionError(f"session creation should have failed: {problem}")
    sess = get_session(op, inputs, attrs)
    if problem is None:
        got = sess.run(None, feeds(inputs))
        reference(got)
        COUNTS[name]["valid"] += 1
        return
    try:
        sess.run(None, feeds(inputs))
    except InvalidArgument as error:
        message = str(error)
        assert re.search(problem[1], message), f"expected /{problem[1]}/, got: {message}"
        if "Unexpected input data type" not in message:
            assert f"Status Message: {name}: " in message, message
        COUNTS[name]["invalid (refused at run)"] += 1
        return
    raise AssertionError(f"run should have failed with /{problem[1]}/")


def _dtype_problem(op, inputs: dict):
    """From the table: inputs that must share a dtype but are declared with
    different ones find no kernel at load; a dtype no kernel takes (declared
    as the op's first dtype) is refused when fed."""
    spec = {i.name: i for i in op.inputs}
    types = {name: None if a is None else a.dtype for name, a in declared(op, inputs).items()}
    for name, dtype in types.items():
        other = spec[name].same_as
        if dtype is not None and other and dtype != types[other]:
            return ("load", rf"no kernel def matches node inputs for Op: {op.onnx_name}")
    for name, a in inputs.items():
        if a is not None and a.dtype not in spec[name].onnx:
            return ("run", r"Unexpected input data type")
    return None


# --- my_add -----------------------------------------------------------------


def my_add_problem(a, b):
    dtype = _dtype_problem(OPS["my_add"], {"a": a, "b": b})
    if dtype:
        return dtype
    if a.shape != b.shape:
        return ("run", r"my_add: b must have the shape of a \[")
    return None


SHAPES = st.lists(st.integers(0, 6), min_size=0, max_size=4).map(tuple)
FLOATS = st.sampled_from(["float32"] * 6 + ["float64"] * 2 + ["float16"] * 2 + ["int32"])


@st.composite
def my_add_draws(draw):
    shape = draw(SHAPES)
    change = draw(st.sampled_from(["same"] * 6 + ["dim", "extra", "drop", "scalar", "other"]))
    b_shape = shape
    if change == "dim" and shape:
        i = draw(st.integers(0, len(shape) - 1))
        b_shape = shape[:i] + (shape[i] + draw(st.sampled_from([-1, 1, 2])),) + shape[i + 1:]
        b_shape = tuple(max(d, 0) for d in b_shape)
    elif change == "extra":
        b_shape = shape + (1,)
    elif change == "drop" and shape:
        b_shape = shape[1:]
    elif change == "scalar":
        b_shape = ()
    elif change == "other":
        b_shape = draw(SHAPES)
    special = draw(st.booleans())
    return shape, b_shape, draw(FLOATS), draw(FLOATS), special, draw(st.integers(0, 2**32 - 1))


def fuzz_my_add(examples):
    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck), phases=(Phase.generate, Phase.shrink))
    @given(my_add_draws())
    def prop(draw):
        shape, b_shape, a_type, b_type, special, seed = draw
        rng = np.random.default_rng(seed)
        a = rng.standard_normal(shape).astype(a_type)
        b = rng.standard_normal(b_shape).astype(b_type)
        if special and a.size and a.dtype.kind == "f":  # non-finite values pass through
            a.flat[rng.integers(0, a.size)] = rng.choice([np.inf, -np.inf, np.nan])
        inputs = {"a": a, "b": b}

        def reference(got):
            (out,) = got
            (expected,) = OPS["my_add"].reference(inputs, {})
            assert out.shape == shape and out.dtype == a.dtype
            np.testing.assert_array_equal(out, expected)

        check_example(OPS["my_add"], inputs, {}, my_add_problem(a, b), reference)

    prop()


# --- knn_query ----------------------------------------------------------------


def _offset_problem(name, values, total, total_name):
    if values[0] < 0:
        return ("run", rf"knn_query: {name} must be non-negative, got {name}\[0\] = ")
    for i in range(1, len(values)):
        if values[i] < values[i - 1]:
            return ("run", rf"knn_query: {name} must be non-decreasing, got {name}\[{i}\]")
    if values[-1] != total:
        return ("run", rf"knn_query: the last value of {name} must equal {total_name} = {total}")
    return None


def knn_problem(xyz, offset, new_xyz, new_offset, nsample):
    """The contract of csrc/kernels/knn_query.h, checked in the kernel's order."""
    if nsample is None:  # the ORT kernel requires the attribute
        return ("load", r"knn_query: attribute nsample \(int\) is required")
    inputs = dict(xyz=xyz, offset=offset, new_xyz=new_xyz, new_offset=new_offset)
    dtype = _dtype_problem(OPS["knn_query"], inputs)
    if dtype:
        return dtype
    if not (xyz.ndim == 2 and xyz.shape[1] == 3):
        return ("run", r"knn_query: xyz must have shape \(n, 3\)")
    if not (offset.ndim == 1 and offset.shape[0] >= 1):
        return ("run", r"knn_query: offset must be 1-D with at least one element")
    if (new_xyz is None) != (new_offset is None):
        return ("run", r"knn_query: new_xyz and new_offset must be given together")
    if new_xyz is not None:
        if not (new_xyz.ndim == 2 and new_xyz.shape[1] == 3):
            return ("run", r"knn_query: new_xyz must have shape \(m, 3\)")
        if new_offset.shape != offset.shape:
            return ("run", r"knn_query: new_offset must have the shape of offset")
    if nsample < 1:
        return ("run", rf"knn_query: nsample must be at least 1, got {nsample}")
    if nsample > 65536:
        return ("run", rf"knn_query: nsample must be at most 65536, got {nsample}")
    m = len(new_xyz if new_xyz is not None else xyz)
    if m * nsample > 2**28:
        return ("run", r"knn_query: m \* nsample must be at most 268435456")
    problem = _offset_problem("offset", offset.tolist(), len(xyz), "the number of points n")
    if problem is None and new_xyz is not None:
        problem = _offset_problem("new_offset", new_offset.tolist(), len(new_xyz),
                                  "the number of queries m")
    for name, points in (("xyz", xyz), ("new_xyz", new_xyz)):
        if problem is None and points is not None and not np.isfinite(points).all():
            row, col = np.argwhere(~np.isfinite(points))[0]  # the first, in memory order
            text = {np.inf: "inf", -np.inf: "-inf"}.get(float(points[row, col]), "nan")
            problem = ("run", rf"knn_query: {name} must be finite \(no NaN or inf\), got "
                       rf"{text} at {name}\[{row}, {col}\]")
    return problem


KNN_CORRUPTIONS = [
    "offset-decreasing", "offset-last", "offset-negative", "offset-empty", "offset-2d",
    "xyz-columns", "xyz-1d", "new_offset-length", "new_offset-last", "new_offset-decreasing",
    "new_xyz-only", "new_offset-only", "new_xyz-columns", "xyz-float64", "offset-int64",
    "new_offset-int64", "non-finite-points", "non-finite-queries",
]


@st.composite
def knn_draws(draw):
    b = draw(st.integers(1, 4))
    sizes = draw(st.lists(st.integers(0, 25), min_size=b, max_size=b))
    query_sizes = draw(st.none() | st.lists(st.integers(0, 12), min_size=b, max_size=b))
    nsample = draw(st.one_of(
        st.integers(1, 40), st.integers(1, 40), st.integers(1, 40), st.integers(1, 40),
        st.sampled_from([None, 0, -1, -2**40, 129, 200, 65536, 65537, 2**31, 2**62])))
    corruption = draw(st.sampled_from([None] * len(KNN_CORRUPTIONS) + KNN_CORRUPTIONS))
    amount = draw(st.integers(1, 3))
    return (sizes, query_sizes, nsample, corruption, amount, draw(st.booleans()),
            draw(st.integers(0, 2**32 - 1)))


def _clouds(rng, sizes, duplicates):
    parts = []
    for size in sizes:
        points = rng.random((size, 3), dtype=np.float32)
        if duplicates and size > 1:  # exact repeats: ties only the index breaks
            points = points[rng.integers(0, max(1, size // 3), size)]
        parts.append(points)
    return np.concatenate(parts).astype(np.float32), np.cumsum(sizes).astype(np.int32)


def _corrupt_knn(rng, corruption, amount, xyz, offset, new_xyz, new_offset):
    if corruption == "offset-decreasing" and len(offset) >= 2:
        i = int(rng.integers(1, len(offset)))
        offset[i] = offset[i - 1] - amount
    elif corruption == "offset-last" or (corruption == "offset-decreasing"):
        offset[-1] += amount * rng.choice([-1, 1])
    elif corruption == "offset-negative":
        offset[0] = -amount
    elif corruption == "offset-empty":
        offset = offset[:0]
        new_offset = None if new_offset is None else new_offset[:0]
    elif corruption == "offset-2d":
        offset = offset.reshape(1, -1)
        new_offset = None if new_offset is None else new_offset.reshape(1, -1)
    elif corruption == "xyz-columns":
        xyz = np.zeros((len(xyz), 3 + amount * rng.choice([-1, 1])), np.float32)
    elif corruption == "xyz-1d":
        xyz = xyz.reshape(-1)
    elif corruption == "new_offset-length" and new_offset is not None:
        new_offset = np.append(new_offset, new_offset[-1]).astype(np.int32)
    elif corruption == "new_offset-last" and new_offset is not None:
        new_offset[-1] += amount
    elif corruption == "new_offset-decreasing" and new_offset is not None:
        new_offset[0] = new_offset[-1] + amount
    elif corruption == "new_xyz-only":
        new_xyz = xyz.copy() if new_xyz is None else new_xyz
        new_offset = None
    elif corruption == "new_offset-only":
        new_offset = offset.copy() if new_offset is None else new_offset
        new_xyz = None
    elif corruption == "new_xyz-columns" and new_xyz is not None:
        new_xyz = np.zeros((len(new_xyz), 2), np.float32)
    elif corruption == "xyz-float64":
        xyz = xyz.astype(np.float64)
    elif corruption == "offset-int64":
        offset = offset.astype(np.int64)
    elif corruption == "new_offset-int64" and new_offset is not None:
        new_offset = new_offset.astype(np.int64)
    return xyz, offset, new_xyz, new_offset


def fuzz_knn(examples):
    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck), phases=(Phase.generate, Phase.shrink))
    @given(knn_draws())
    def prop(draw):
        sizes, query_sizes, nsample, corruption, amount, duplicates, seed = draw
        rng = np.random.default_rng(seed)
        xyz, offset = _clouds(rng, sizes, duplicates)
        new_xyz = new_offset = None
        if query_sizes is not None:
            new_xyz, new_offset = _clouds(rng, query_sizes, False)
        xyz, offset, new_xyz, new_offset = _corrupt_knn(
            rng, corruption, amount, xyz, offset, new_xyz, new_offset)
        # Refused, naming the first bad coordinate (knn_problem), like cKDTree.
        points = new_xyz if corruption == "non-finite-queries" else xyz
        if corruption in ("non-finite-points", "non-finite-queries") and points is not None \
                and points.size and points.dtype == np.float32:
            points.flat[rng.integers(0, points.size, amount)] = \
                rng.choice([np.nan, np.inf, -np.inf], amount)
        inputs = dict(xyz=xyz, offset=offset, new_xyz=new_xyz, new_offset=new_offset)
        attrs = {} if nsample is None else {"nsample": nsample}

        def reference(got):
            idx, dist = got
            m = len(xyz if new_xyz is None else new_xyz)
            assert idx.shape == dist.shape == (m, nsample), (idx.shape, m, nsample)
            assert idx.dtype == np.int32 and dist.dtype == np.float32
            assert ((idx >= -1) & (idx < max(len(xyz), 1))).all()
            ref_idx, ref_dist = knn_reference(nsample, xyz, offset, new_xyz, new_offset)
            np.testing.assert_array_equal(idx, ref_idx)
            np.testing.assert_allclose(dist, ref_dist, rtol=1e-6, atol=0)

        problem = knn_problem(xyz, offset, new_xyz, new_offset, nsample)
        check_example(OPS["knn_query"], inputs, attrs, problem, reference)

    prop()


# --- deform_conv2d ------------------------------------------------------------


def _out(size, k, s, p, d):
    return (size + 2 * p - (d * (k - 1) + 1)) // s + 1


def deform_conv2d_problem(x: dict, a: dict):
    """The contract of csrc/kernels/deform_conv2d.h, in the kernel's order."""
    dtype = _dtype_problem(OPS["deform_conv2d"], x)
    if dtype:
        return dtype
    run = lambda regex: ("run", "deform_conv2d: " + regex)  # noqa: E731
    inp, wt = x["input"].shape, x["weight"].shape
    stride, padding, dilation = a["stride"], a["padding"], a["dilation"]
    groups, offset_groups = a["groups"], a["offset_groups"]
    if len(inp) != 4:
        return run(r"input must be 4-D")
    if len(wt) != 4:
        return run(r"weight must be 4-D")
    for name, v in (("stride", stride), ("padding", padding), ("dilation", dilation)):
        if len(v) != 2:
            return run(rf"{name} must have 2 values")
    if not (inp[0] >= 0 and min(inp[1:]) >= 1):
        return run(r"input must have N >= 0 and C, H, W >= 1")
    if min(wt) < 1:
        return run(r"weight dimensions must all be >= 1")
    if min(stride) < 1:
        return run(r"stride must be >= 1")
    if min(padding) < 0:
        return run(r"padding must be >= 0")
    if min(dilation) < 1:
        return run(r"dilation must be >= 1")
    if groups < 1:
        return run(r"groups must be >= 1")
    if offset_groups < 1:
        return run(r"offset_groups must be >= 1")
    for name, v in (("input shape", inp), ("weight shape", wt), ("stride", stride),
                    ("padding", padding), ("dilation", dilation)):
        if max(v) > INT32_MAX:
            return run(rf"{name} values must be at most {INT32_MAX}")
    n, c, h, w = inp
    o, cg, kh, kw = wt
    if c % groups:
        return run(rf"input channels C = {c} must be divisible by groups = {groups}")
    if c % offset_groups:
        return run(rf"input channels C = {c} must be divisible by offset_groups = {offset_groups}")
    if o % groups:
        return run(rf"weight.shape\[0\] \(out_channels\) = {o} must be divisible by groups")
    if cg != c // groups:
        return run(rf"weight.shape\[1\] must be C/groups = {c // groups}, got {cg}")
    for axis, size, k, p, d in (("height", h, kh, padding[0], dilation[0]),
                                ("width", w, kw, padding[1], dilation[1])):
        if d * (k - 1) + 1 > size + 2 * p:
            return run(rf"kernel {axis} extent {d * (k - 1) + 1} .* must fit in the padded input")
    oh = _out(h, kh, stride[0], padding[0], dilation[0])
    ow = _out(w, kw, stride[1], padding[1], dilation[1])
    if x["offset"].shape != (n, 2 * offset_groups * kh * kw, oh, ow):
        return run(r"offset must have shape \(N, 2\*offset_groups\*kh\*kw, out_h, out_w\)")
    if x["mask"] is not None and x["mask"].shape != (n, offset_groups * kh * kw, oh, ow):
        return run(r"mask must have shape \(N, offset_groups\*kh\*kw, out_h, out_w\)")
    if x["bias"] is not None and x["bias"].shape != (o,):
        return run(r"bias must have shape \(out_channels\)")
    return None


DCN_CORRUPTIONS = [
    "groups", "groups-zero", "offset_groups", "offset_groups-zero", "stride-zero", "stride-3",
    "padding-negative", "padding-1", "dilation-zero", "weight-channels", "out-channels",
    "offset-channels", "offset-spatial", "offset-batch", "mask-channels", "bias-length",
    "input-3d", "weight-5d", "input-float64", "offset-float64", "mask-float64", "huge-stride",
    "huge-groups", "huge-padding", "input-empty-channels", "non-finite-offsets",
]


@st.composite
def deform_draws(draw):
    g, og = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    c = math.lcm(g, og) * draw(st.integers(1, 2))
    cfg = dict(
        n=draw(st.integers(0, 2)), c=c, o=g * draw(st.integers(1, 2)), g=g, og=og,
        h=draw(st.integers(1, 9)), w=draw(st.integers(1, 9)),
        kh=draw(st.integers(1, 3)), kw=draw(st.integers(1, 3)),
        s=[draw(st.integers(1, 3)), draw(st.integers(1, 3))],
        p=[draw(st.integers(0, 2)), draw(st.integers(0, 2))],
        d=[draw(st.integers(1, 2)), draw(st.integers(1, 2))],
        mask=draw(st.booleans()), bias=draw(st.booleans()),
        scale=draw(st.sampled_from([0.0, 0.5, 2.0, 6.0])),
    )
    corruption = draw(st.sampled_from([None] * len(DCN_CORRUPTIONS) + DCN_CORRUPTIONS))
    return cfg, corruption, draw(st.integers(0, 2**32 - 1))


def _deform_inputs(rng, cfg):
    oh = max(_out(cfg["h"], cfg["kh"], cfg["s"][0], cfg["p"][0], cfg["d"][0]), 1)
    ow = max(_out(cfg["w"], cfg["kw"], cfg["s"][1], cfg["p"][1], cfg["d"][1]), 1)
    taps = cfg["og"] * cfg["kh"] * cfg["kw"]
    f32 = lambda *shape: rng.standard_normal(shape, dtype=np.float32)  # noqa: E731
    x = {
        "input": f32(cfg["n"], cfg["c"], cfg["h"], cfg["w"]),
        "weight": f32(cfg["o"], cfg["c"] // cfg["g"], cfg["kh"], cfg["kw"]),
        "offset": np.float32(cfg["scale"]) * f32(cfg["n"], 2 * taps, oh, ow),
        "mask": rng.random((cfg["n"], taps, oh, ow), dtype=np.float32) if cfg["mask"] else None,
        "bias": f32(cfg["o"]) if cfg["bias"] else None,
    }
    a = dict(stride=list(cfg["s"]), padding=list(cfg["p"]), dilation=list(cfg["d"]),
             groups=cfg["g"], offset_groups=cfg["og"])
    return x, a


def _corrupt_deform(rng, corruption, x, a):
    grow = lambda arr, axis: np.concatenate([arr, arr.take([0], axis=axis)], axis=axis) \
        if arr.shape[axis] else np.zeros(arr.shape[:axis] + (1,) + arr.shape[axis + 1:],
                                         np.float32)  # noqa: E731
    if corruption == "groups":
        a["groups"] += 1
    elif corruption == "groups-zero":
        a["groups"] = int(rng.choice([0, -1]))
    elif corruption == "offset_groups":
        a["offset_groups"] += 1
    elif corruption == "offset_groups-zero":
        a["offset_groups"] = 0
    elif corruption == "stride-zero":
        a["stride"][int(rng.integers(0, 2))] = 0
    elif corruption == "stride-3":
        a["stride"] = a["stride"] + [1]
    elif corruption == "padding-negative":
        a["padding"][int(rng.integers(0, 2))] = -1
    elif corruption == "padding-1":
        a["padding"] = a["padding"][:1]
    elif corruption == "dilation-zero":
        a["dilation"][int(rng.integers(0, 2))] = 0
    elif corruption == "weight-channels":
        x["weight"] = grow(x["weight"], 1)
    elif corruption == "out-channels" and a["groups"] > 1:
        x["weight"] = grow(x["weight"], 0)
    elif corruption == "offset-channels":
        x["offset"] = grow(grow(x["offset"], 1), 1)
    elif corruption == "offset-spatial":
        x["offset"] = grow(x["offset"], 3)
    elif corruption == "offset-batch":
        x["offset"] = grow(x["offset"], 0)
    elif corruption == "mask-channels" and x["mask"] is not None:
        x["mask"] = grow(x["mask"], 1)
    elif corruption == "bias-length" and x["bias"] is not None:
        x["bias"] = grow(x["bias"], 0)
    elif corruption == "input-3d":
        x["input"] = x["input"][0] if len(x["input"]) else np.zeros(x["input"].shape[1:],
                                                                     np.float32)
    elif corruption == "weight-5d":
        x["weight"] = x["weight"][..., None]
    elif corruption == "input-float64":
        x["input"] = x["input"].astype(np.float64)
    elif corruption == "offset-float64":
        x["offset"] = x["offset"].astype(np.float64)
    elif corruption == "mask-float64" and x["mask"] is not None:
        x["mask"] = x["mask"].astype(np.float64)
    elif corruption == "huge-stride":
        a["stride"][0] = 2**40
    elif corruption == "huge-groups":
        a["groups"] = 2**40
    elif corruption == "huge-padding":
        a["padding"][1] = 2**33
    elif corruption == "input-empty-channels":
        x["input"] = x["input"][:, :0]
    elif corruption == "non-finite-offsets" and x["offset"].size:
        x["offset"].flat[rng.integers(0, x["offset"].size, 3)] = \
            rng.choice([np.nan, np.inf, -np.inf, 1e30])
    return x, a


def fuzz_deform_conv2d(examples):
    import torch
    import torchvision

    torch.set_num_threads(1)

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck), phases=(Phase.generate, Phase.shrink))
    @given(deform_draws())
    def prop(draw):
        cfg, corruption, seed = draw
        rng = np.random.default_rng(seed)
        x, a = _deform_inputs(rng, cfg)
        x, a = _corrupt_deform(rng, corruption, x, a)
        non_finite = corruption == "non-finite-offsets"

        def reference(got):
            (y,) = got
            t = lambda name: None if x[name] is None else torch.from_numpy(x[name])  # noqa: E731
            offset = t("offset")
            if non_finite:
                # torchvision 0.29.1 reads out of bounds (SIGSEGV seen) on a NaN
                # offset: its bounds test lets NaN through to floor() and an int
                # index.  Our kernel reads zero there, as for any sample outside
                # the image, so the reference gets an offset far outside instead.
                offset = torch.nan_to_num(offset, nan=1e30)
            expected = torchvision.ops.deform_conv2d(
                t("input"), offset, t("weight"), t("bias"), stride=a["stride"],
                padding=a["padding"], dilation=a["dilation"], mask=t("mask")).numpy()
            assert y.shape == expected.shape and y.dtype == np.float32, (y.shape, expected.shape)
            np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)

        problem = deform_conv2d_problem(x, a)
        check_example(OPS["deform_conv2d"], x, a, problem, reference)

    prop()


# --- ms_deform_attn -----------------------------------------------------------


def ms_deform_attn_problem(x, im2col_step):
    """The contract of csrc/kernels/ms_deform_attn.h, checked in the kernel's order."""
    dtype = _dtype_problem(OPS["ms_deform_attn"], x)
    if dtype:
        return dtype
    op = "ms_deform_attn: "
    value, shapes, starts = x["value"], x["spatial_shapes"], x["level_start_index"]
    locations, weights = x["sampling_locations"], x["attention_weights"]
    if value.ndim != 4:
        return ("run", op + r"value must be 4-D")
    if shapes.ndim != 2 or shapes.shape[1] != 2:
        return ("run", op + r"spatial_shapes must have shape \(L, 2\)")
    n, s, m, _ = value.shape
    levels = shapes.shape[0]
    if starts.shape != (levels,):
        return ("run", op + r"level_start_index must have shape \(L\)")
    if locations.ndim != 6:
        return ("run", op + r"sampling_locations must be 6-D")
    q, p = locations.shape[1], locations.shape[4]
    if locations.shape != (n, q, m, levels, p, 2):
        return ("run", op + r"sampling_locations must have shape \(N, Q, M, L, P, 2\)")
    if weights.shape != (n, q, m, levels, p):
        return ("run", op + r"attention_weights must have shape \(N, Q, M, L, P\)")
    if im2col_step < 1:
        return ("run", op + r"im2col_step must be >= 1")
    total = 0
    for level, ((h, w), start) in enumerate(zip(shapes.tolist(), starts.tolist())):
        if h < 0 or w < 0:
            return ("run", op + rf"spatial_shapes must be >= 0, got spatial_shapes\[{level}\]")
        if start != total:
            return ("run", op + rf"level_start_index must hold the prefix sums .* got "
                    rf"level_start_index\[{level}\] = {start}, expected {total}")
        total += h * w
        if total > s:
            return ("run", op + rf"the areas H \* W of spatial_shapes must sum to S = "
                    rf"value\.shape\[1\] = {s}, got more by level {level}")
    if total != s:
        return ("run", op + rf"the areas .* must sum to S = value\.shape\[1\] = {s}, got {total}")
    if not np.isfinite(locations).all():
        return ("run", op + r"sampling_locations must be finite \(no NaN or inf\)")
    return None


MSDA_CHANGES = ["valid"] * 8 + ["value-rank", "value-S", "shapes-columns", "starts-length",
                                "starts-value", "shapes-negative", "shapes-huge", "locations-dim",
                                "weights-dim", "im2col_step", "non-finite", "far", "dtype"]


@st.composite
def ms_deform_attn_draws(draw):
    size = st.integers(0, 4)
    cfg = dict(n=draw(st.integers(0, 2)), m=draw(st.integers(1, 3)), d=draw(st.integers(0, 9)),
               q=draw(size), p=draw(st.integers(0, 3)),
               shapes=draw(st.lists(st.tuples(size, size), min_size=0, max_size=3)))
    return (cfg, draw(st.sampled_from(MSDA_CHANGES)), draw(FLOATS),
            draw(st.integers(-2, 200)), draw(st.integers(0, 2**32 - 1)))


def fuzz_ms_deform_attn(examples):
    from optable import msda_inputs

    op = OPS["ms_deform_attn"]

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck), phases=(Phase.generate, Phase.shrink))
    @given(ms_deform_attn_draws())
    def prop(draw):
        cfg, change, dtype, step, seed = draw
        rng = np.random.default_rng(seed)
        x = msda_inputs(rng, cfg, np.float32, spread=0.5)
        im2col_step = step if change == "im2col_step" else 64
        pick = lambda array: tuple(rng.integers(0, d) for d in array.shape)  # noqa: E731
        if change == "value-rank":
            x["value"] = x["value"][..., None] if rng.random() < 0.5 else np.zeros(
                x["value"].shape[1:], np.float32)
        elif change == "value-S":
            x["value"] = np.zeros((cfg["n"], x["value"].shape[1] + 1, cfg["m"], cfg["d"]),
                                  np.float32)
        elif change == "shapes-columns":
            x["spatial_shapes"] = np.ones((len(cfg["shapes"]), 3), np.int64)
        elif change == "starts-length":
            x["level_start_index"] = np.zeros(len(cfg["shapes"]) + 1, np.int64)
        elif change == "starts-value" and cfg["shapes"]:
            x["level_start_index"][rng.integers(0, len(cfg["shapes"]))] += rng.choice([-1, 1])
        elif change == "shapes-negative" and cfg["shapes"]:
            x["spatial_shapes"][rng.integers(0, len(cfg["shapes"])), rng.integers(0, 2)] = -1
        elif change == "shapes-huge" and cfg["shapes"]:
            x["spatial_shapes"][rng.integers(0, len(cfg["shapes"]))] = rng.choice(
                [2**62, 2**31, 2**32 + 1]), rng.choice([2, 2**31, 2**40])
        elif change in ("locations-dim", "weights-dim"):
            name = "sampling_locations" if change == "locations-dim" else "attention_weights"
            shape = list(x[name].shape)
            shape[rng.integers(0, len(shape))] += 1
            x[name] = np.zeros(shape, np.float32)
        elif change == "non-finite" and x["sampling_locations"].size:
            x["sampling_locations"][pick(x["sampling_locations"])] = rng.choice(
                [np.nan, np.inf, -np.inf])
        elif change == "far":
            x["sampling_locations"] *= np.float32(rng.choice([1e6, -1e30, 3e38]))
        if change == "dtype":  # value's dtype unlike the locations' (float32)
            x["value"] = x["value"].astype(dtype if dtype != "float32" else "float64")
        else:
            for name in ("value", "sampling_locations", "attention_weights"):
                x[name] = x[name].astype(dtype)
        attrs = {"im2col_step": im2col_step}

        def reference(got):
            (out,) = got
            (expected,) = op.reference(x, attrs)
            assert out.shape == expected.shape and out.dtype == expected.dtype
            tolerance = 1e-2 if out.dtype == np.float16 else 1e-4
            np.testing.assert_allclose(out.astype(np.float64), expected.astype(np.float64),
                                       rtol=tolerance, atol=tolerance)

        check_example(op, x, attrs, ms_deform_attn_problem(x, im2col_step), reference)

    prop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200, help="examples per op")
    parser.add_argument("--last-example", help="file that holds the example being run")
    parser.add_argument("--ops", default=",".join(OPS))
    args = parser.parse_args()
    global LAST_EXAMPLE
    LAST_EXAMPLE = args.last_example
    fuzzers = {"my_add": fuzz_my_add, "knn_query": fuzz_knn, "deform_conv2d": fuzz_deform_conv2d,
               "ms_deform_attn": fuzz_ms_deform_attn}
    assert set(fuzzers) == set(OPS), "every op of tests/optable.py needs a fuzzer here"
    failed, times = [], {}
    for op in args.ops.split(","):
        start = time.perf_counter()
        try:
            fuzzers[op](args.examples)
        except Exception:  # a property failed: report it, go on with the other ops
            traceback.print_exc()
            failed.append(op)
        times[op] = round(time.perf_counter() - start, 1)
        counts = dict(COUNTS[op])
        print(f"fuzz {op}: {sum(counts.values())} examples in {times[op]} s: "
              + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())), flush=True)
    record("(finished)")
    print(json.dumps({"counts": {op: dict(c) for op, c in COUNTS.items()}, "seconds": times,
                      "failed": failed}))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
