"""The facts of each operator, in one place; every cross-cutting test
parametrizes over ``OPS``.

A row says what the op is called in PyTorch (``torch.ops.customops.<name>``)
and in ONNX (``<DOMAIN>::<onnx_name>``), its inputs with the dtypes each
binding accepts and which are optional, its attributes with their ONNX
defaults, its outputs, sample calls, an independent reference, the Python API
call, and the bad inputs its kernel check refuses.  Adding an op means adding
its row (and its kernel, bindings and wrappers); the error, fuzz,
concurrency, leak, version, deployment and browser tests then cover it.

numpy only at import (the torch-free deployment test reads it too); what
needs torch imports it when called.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from customops.ort import DOMAIN, OPSET_VERSION  # noqa: F401  (re-exported for the tests)
from helpers import knn_reference, ms_deform_attn_reference, random_clouds

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
I32, I64 = np.dtype(np.int32), np.dtype(np.int64)


@dataclass(frozen=True)
class Input:
    name: str
    onnx: tuple         # dtypes the ORT kernels accept (the first: the one models declare)
    torch: tuple        # dtypes the PyTorch op accepts, in its message's order
    optional: bool = False
    same_as: str | None = None  # must have the dtype of that input


@dataclass(frozen=True)
class Output:
    name: str
    dtype: object       # a numpy dtype, or the name of the input whose dtype it has


@dataclass
class Sample:
    """One valid call: inputs (None = absent), attributes, and the inputs
    handed to PyTorch in a strided (non-contiguous) layout."""

    id: str
    inputs: dict
    attrs: dict = field(default_factory=dict)
    noncontiguous: tuple = ()
    basic: bool = False  # one of the few calls every cross-cutting test makes


@dataclass
class Bad:
    """One bad call: the op's inputs (None = absent), attributes, the regex
    its error must match, the bindings that see it, and whether the error
    depends on tensor values (offsets), which a fake kernel cannot see."""

    id: str
    inputs: dict
    attrs: dict
    match: str
    bindings: tuple = ("torch", "ort")
    noncontiguous: tuple = ()
    values: bool = False


@dataclass(frozen=True)
class Op:
    name: str
    onnx_name: str
    inputs: tuple
    attrs: dict                 # name -> ONNX default, None when required
    outputs: tuple
    samples: Callable           # rng -> [Sample]
    large: Callable             # (rng, i) -> [Sample] big enough to split over a thread pool
    reference: Callable         # (inputs, attrs) -> [np.ndarray], independent of our kernels
    python: Callable            # (tensors, attrs) -> outputs through the customops Python API
    refuse: Callable            # Sample -> input changes its kernel refuses at run time
    base: Sample                # the small valid call the bad ones start from
    bad: list                   # [Bad], besides the dtype cases tests derive from `inputs`
    rtol: float = 0.0
    atol: float = 0.0
    differentiable: bool = False  # has a registered gradient
    torch_free_reference: bool = True  # reference runs without torch (test_deploy's child)
    fake_checks: bool = True    # its fake kernel runs the C++ checks (test_fake.py)

    @property
    def input_names(self):
        return [i.name for i in self.inputs]

    @property
    def output_names(self):
        return [o.name for o in self.outputs]

    def output_dtypes(self, inputs: dict):
        return [np.dtype(inputs[o.dtype].dtype if isinstance(o.dtype, str) else o.dtype)
                for o in self.outputs]

    def declared(self, inputs: dict) -> dict:
        """Each input as an array of the dtype the ONNX models declare."""
        spec = {i.name: i for i in self.inputs}
        return {k: None if v is None else np.zeros(np.shape(v), spec[k].onnx[0])
                for k, v in inputs.items()}

    def runs_in_ort(self, inputs: dict) -> bool:
        spec = {i.name: i for i in self.inputs}
        return all(v is None or v.dtype in spec[k].onnx for k, v in inputs.items())

    # --- PyTorch --------------------------------------------------------------

    @property
    def torch_op(self):
        import torch

        return getattr(torch.ops.customops, self.name).default

    def torch_args(self, tensors: dict, attrs: dict) -> tuple:
        """The op's arguments in its schema's order (the schema names them as
        the ONNX node does); absent attributes take the ONNX default."""
        values = {**self.attrs, **tensors, **attrs}
        return tuple(values.get(a.name) for a in self.torch_op._schema.arguments)


def tensors(inputs: dict, noncontiguous=()):
    """numpy -> torch; the inputs named in ``noncontiguous`` as strided views
    (same shape and values, every other element of a buffer twice as long)."""
    import torch

    out = {}
    for name, a in inputs.items():
        if a is None:
            out[name] = None
        elif name in noncontiguous and a.ndim and a.shape[-1] > 0:
            wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
            wide[..., ::2] = a
            out[name] = torch.from_numpy(wide)[..., ::2]
            assert not out[name].is_contiguous()
        else:
            out[name] = torch.from_numpy(np.array(a, order="C"))  # (0-d stays 0-d)
    return out


f32 = lambda *shape: np.zeros(shape, np.float32)  # noqa: E731
i32 = lambda *values: np.array(values, np.int32)  # noqa: E731


def _rows(values: np.ndarray) -> np.ndarray:
    """Drops the last row of each leading index: same rank, another shape."""
    return values[..., :-1] if values.ndim and values.shape[-1] else values[None]


# --- my_add ---------------------------------------------------------------------

ADD_SHAPES = [(), (0,), (1,), (7,), (3, 5), (2, 3, 4), (1 << 17,), (5, 1, 0, 2)]


def _add_samples(rng):
    samples = [Sample("basic", _add_inputs(rng, (4, 5), F32), basic=True)]
    for dtype in (F32, F64, F16):
        samples += [Sample(f"{dtype}-{list(s)}", _add_inputs(rng, s, dtype)) for s in ADD_SHAPES]
    samples += [Sample(f"{dtype}-strided-{names}", _add_inputs(rng, (3, 6), dtype),
                       noncontiguous=names)
                for dtype in (F32, F16) for names in (("a",), ("a", "b"))]
    return samples


def _add_inputs(rng, shape, dtype):
    return {k: rng.standard_normal(shape, dtype=np.float32).astype(dtype) for k in "ab"}


def _add_reference(x, attrs):
    a, b = x["a"], x["b"]
    wide = np.float64 if a.dtype == F64 else np.float32  # float16 is computed in float32
    return [np.asarray(2 * a.astype(wide) + b.astype(wide)).astype(a.dtype)]


def _add_python(t, attrs):
    import customops

    return customops.my_add(t["a"], t["b"])


ADD = dict(a=f32(2, 3), b=f32(2, 3))


def _add_bad(id, match, **changes):
    return Bad(id, {**ADD, **changes}, {}, match)


MY_ADD = Op(
    name="my_add",
    onnx_name="my_add",
    inputs=(Input("a", (F32, F64, F16), (F32, F64, F16)),
            Input("b", (F32, F64, F16), (F32, F64, F16), same_as="a")),
    attrs={},
    outputs=(Output("c", "a"),),
    samples=_add_samples,
    large=lambda rng, i: [Sample(f"{i}", _add_inputs(rng, (2 + i, 40_000), F32))],
    reference=_add_reference,
    python=_add_python,
    refuse=lambda s: {"b": s.inputs["b"].T.copy()},
    base=Sample("base", ADD),
    differentiable=True,
    bad=[
        _add_bad("b-transposed", r"my_add: b must have the shape of a \[2, 3\], got \[3, 2\]",
                 b=f32(3, 2)),
        _add_bad("b-extra-dim", r"b must have the shape of a \[2, 3\], got \[2, 3, 1\]",
                 b=f32(2, 3, 1)),
        _add_bad("b-broadcastable", r"b must have the shape of a \[2, 3\], got \[1, 3\]",
                 b=f32(1, 3)),
        _add_bad("b-scalar", r"b must have the shape of a \[2, 3\], got \[\]",
                 b=np.array(1, np.float32)),
        _add_bad("a-scalar", r"b must have the shape of a \[\], got \[2, 3\]",
                 a=np.array(1, np.float32)),
        _add_bad("a-empty", r"b must have the shape of a \[0, 3\], got \[2, 3\]", a=f32(0, 3)),
        _add_bad("b-empty", r"b must have the shape of a \[2, 3\], got \[2, 0\]", b=f32(2, 0)),
    ],
)


# --- knn_query ------------------------------------------------------------------

# (cloud sizes, query cloud sizes or None for "queries are the points", nsample)
KNN_CASES = [
    ([1], None, 1),
    ([50], None, 8),
    ([200], [40], 16),
    ([30, 0, 70], [5, 3, 9], 12),      # an empty cloud (its queries get -1 / inf)
    ([5, 9], None, 16),                # nsample larger than every cloud
    ([300, 120, 1, 77], [60, 0, 2, 11], 32),
    ([0], [0], 4),                     # nothing at all
    ([1000], [250], 1),
]


def knn_inputs(rng, sizes, query_sizes=None, duplicates=False):
    xyz, offset = random_clouds(rng, sizes, duplicates=duplicates)
    new_xyz = new_offset = None
    if query_sizes is not None:
        new_xyz, new_offset = random_clouds(rng, query_sizes)
    return dict(xyz=xyz, offset=offset, new_xyz=new_xyz, new_offset=new_offset)


def _knn_samples(rng):
    samples = [Sample("basic-queries", knn_inputs(rng, [20, 12], [5, 4]), {"nsample": 6},
                      basic=True),
               Sample("basic-self", knn_inputs(rng, [20, 12]), {"nsample": 5}, basic=True)]
    for sizes, query_sizes, nsample in KNN_CASES:
        for duplicates in (False, True):
            samples.append(Sample(f"{sizes}-{query_sizes}-{nsample}"
                                  f"{'-duplicates' if duplicates else ''}",
                                  knn_inputs(rng, sizes, query_sizes, duplicates),
                                  {"nsample": nsample}))
    # PyTorch-only calls: int64 offsets (Pointcept passes either), strided points
    wide = knn_inputs(rng, [30, 0, 70], [5, 3, 9])
    samples += [
        Sample("int64-offsets", {**wide, "offset": wide["offset"].astype(I64),
                                 "new_offset": wide["new_offset"].astype(I64)}, {"nsample": 7}),
        Sample("int64-offset-int32-new_offset", {**wide, "offset": wide["offset"].astype(I64)},
               {"nsample": 7}),
        Sample("int64-self", {**knn_inputs(rng, [9, 14]), "offset": np.array([9, 23])},
               {"nsample": 4}),
        Sample("strided-xyz", wide, {"nsample": 5}, noncontiguous=("xyz",)),
        Sample("strided-all", wide, {"nsample": 5},
               noncontiguous=("xyz", "offset", "new_xyz", "new_offset")),
    ]
    return samples


def _knn_large(rng, i):
    return [Sample(f"{i}", knn_inputs(rng, [300 + 40 * i, 500, 7 * i], [100, 200 + 10 * i, 5],
                                      duplicates=i % 2 == 1), {"nsample": 12})]


def _knn_reference(x, attrs):
    offset = x["offset"].astype(np.int64)
    new_offset = None if x["new_offset"] is None else x["new_offset"].astype(np.int64)
    return list(knn_reference(attrs["nsample"], x["xyz"], offset, x["new_xyz"], new_offset))


def _knn_python(t, attrs):
    import customops

    return customops.knn_query(attrs["nsample"], t["xyz"], t["offset"], t["new_xyz"],
                               t["new_offset"])


def _knn_refuse(sample):
    offset = sample.inputs["offset"].copy()
    offset[0] = offset[-1] + 1  # past the last point
    return {"offset": offset}


# 2 clouds of 2 and 3 points, 1 and 2 queries.
KNN = dict(xyz=f32(5, 3), offset=i32(2, 5), new_xyz=f32(3, 3), new_offset=i32(1, 3))


def _with(array, index, value):
    """A copy of array with array[index] = value."""
    changed = array.copy()
    changed[index] = value
    return changed


def _knn_bad(id, match, bindings=("torch", "ort"), nsample=2, values=False, **changes):
    return Bad(id, {**KNN, **changes}, {"nsample": nsample}, match, bindings, values=values)


KNN_QUERY = Op(
    name="knn_query",
    onnx_name="knnquery",
    inputs=(Input("xyz", (F32,), (F32,)), Input("offset", (I32,), (I32, I64)),
            Input("new_xyz", (F32,), (F32,), optional=True),
            Input("new_offset", (I32,), (I32, I64), optional=True)),
    attrs={"nsample": None},
    outputs=(Output("idx", I32), Output("dist", F32)),
    samples=_knn_samples,
    large=_knn_large,
    reference=_knn_reference,
    python=_knn_python,
    refuse=_knn_refuse,
    rtol=1e-6,
    base=Sample("base", KNN, {"nsample": 2}),
    bad=[
        # xyz
        _knn_bad("xyz-2-columns", r"knn_query: xyz must have shape \(n, 3\), got \[5, 2\]",
                 xyz=f32(5, 2)),
        _knn_bad("xyz-4-columns", r"xyz must have shape \(n, 3\), got \[5, 4\]", xyz=f32(5, 4)),
        _knn_bad("xyz-1d", r"xyz must have shape \(n, 3\), got \[15\]", xyz=f32(15)),
        _knn_bad("xyz-3d", r"xyz must have shape \(n, 3\), got \[5, 3, 1\]", xyz=f32(5, 3, 1)),
        _knn_bad("xyz-scalar", r"xyz must have shape \(n, 3\), got \[\]",
                 xyz=np.array(1, np.float32)),
        # non-finite points are refused (csrc/kernels/knn_query.h), naming the first
        *[_knn_bad(f"{name}-{value}-{row}-{col}",
                   rf"knn_query: {name} must be finite \(no NaN or inf\), got {text} at "
                   rf"{name}\[{row}, {col}\]", values=True,
                   **{name: _with(KNN[name], (row, col), value), **extra})
           for name, row, col, extra in [("xyz", 0, 0, {}), ("xyz", 4, 2, {}),
                                         ("xyz", 3, 1, dict(new_xyz=None, new_offset=None)),
                                         ("new_xyz", 2, 1, {}), ("new_xyz", 0, 2, {})]
           for value, text in [(np.nan, "nan"), (np.inf, "inf"), (-np.inf, "-inf")]],
        # offset
        _knn_bad("offset-scalar", r"offset must be 1-D with at least one element, got shape \[\]",
                 offset=np.array(5, np.int32)),
        _knn_bad("offset-empty",
                 r"offset must be 1-D with at least one element, got shape \[0\]",
                 offset=i32(), new_offset=i32()),
        _knn_bad("offset-2d", r"offset must be 1-D with at least one element, got shape \[1, 2\]",
                 offset=i32(2, 5).reshape(1, 2), new_offset=i32(1, 3).reshape(1, 2)),
        _knn_bad("offset-decreasing",
                 r"offset must be non-decreasing, got offset\[1\] = 2 < offset\[0\] = 3",
                 offset=i32(3, 2, 5), new_offset=i32(1, 2, 3), values=True),
        _knn_bad("offset-negative", r"offset must be non-negative, got offset\[0\] = -1",
                 offset=i32(-1, 5), values=True),
        _knn_bad("offset-ends-before-n", r"the last value of offset must equal the number of "
                 r"points n = 5, got 4", offset=i32(2, 4), values=True),
        _knn_bad("offset-ends-after-n", r"the last value of offset must equal the number of "
                 r"points n = 5, got 6", offset=i32(2, 6), values=True),
        _knn_bad("offset-int32-max", r"offset must be non-decreasing, got offset\[1\] = 5 < "
                 r"offset\[0\] = 2147483647", offset=i32(2**31 - 1, 5), values=True),
        _knn_bad("offset-int-min", r"offset must be non-negative, got offset\[0\] = -2147483648",
                 offset=i32(-2**31, 5), values=True),
        _knn_bad("offset-past-n-then-back", r"offset must be non-decreasing, got offset\[1\] = 5 < "
                 r"offset\[0\] = 7", offset=i32(7, 5), values=True),
        _knn_bad("offset-int64-beyond-int32", r"knn_query: offset must hold int32 values \(idx is "
                 r"int32\), got offset\[0\] = 4294967298", ("torch",),
                 offset=np.array([2**32 + 2, 5]), values=True),
        _knn_bad("new_offset-int64-below-int32", r"knn_query: new_offset must hold int32 values "
                 r"\(idx is int32\), got new_offset\[1\] = -4294967293", ("torch",),
                 new_offset=np.array([1, 3 - 2**32]), values=True),
        # new_xyz / new_offset
        _knn_bad("new_xyz-without-new_offset", r"new_xyz and new_offset must be given together",
                 new_offset=None),
        _knn_bad("new_offset-without-new_xyz", r"new_xyz and new_offset must be given together",
                 new_xyz=None),
        _knn_bad("new_xyz-2-columns", r"new_xyz must have shape \(m, 3\), got \[3, 2\]",
                 new_xyz=f32(3, 2)),
        _knn_bad("new_xyz-1d", r"new_xyz must have shape \(m, 3\), got \[9\]", new_xyz=f32(9)),
        _knn_bad("new_offset-shorter", r"new_offset must have the shape of offset \[2\], got \[1\]",
                 new_offset=i32(3)),
        _knn_bad("new_offset-longer", r"new_offset must have the shape of offset \[2\], got \[3\]",
                 new_offset=i32(1, 2, 3)),
        _knn_bad("new_offset-2d", r"new_offset must have the shape of offset \[2\], got \[2, 1\]",
                 new_offset=i32(1, 3).reshape(2, 1)),
        _knn_bad("new_offset-decreasing", r"new_offset must be non-decreasing, got "
                 r"new_offset\[1\] = 0 < new_offset\[0\] = 1", new_offset=i32(1, 0), values=True),
        _knn_bad("new_offset-negative", r"new_offset must be non-negative, got new_offset\[0\] = -2",
                 new_offset=i32(-2, 3), values=True),
        _knn_bad("new_offset-ends-before-m", r"the last value of new_offset must equal the "
                 r"number of queries m = 3, got 2", new_offset=i32(1, 2), values=True),
        _knn_bad("new_offset-ends-after-m", r"the last value of new_offset must equal the "
                 r"number of queries m = 3, got 4", new_offset=i32(1, 4), values=True),
        _knn_bad("new_offset-nonempty-queries-none", r"the last value of new_offset must equal "
                 r"the number of queries m = 0, got 1", new_xyz=f32(0, 3), new_offset=i32(0, 1),
                 values=True),
        # nsample (in ORT an attribute; 0 and absence are load-time errors, see test_errors)
        _knn_bad("nsample-negative", r"knn_query: nsample must be at least 1, got -1", nsample=-1),
        _knn_bad("nsample-int64-min", r"nsample must be at least 1, got -9223372036854775808",
                 nsample=-2**63),
        _knn_bad("nsample-zero", r"knn_query: nsample must be at least 1, got 0", ("torch",),
                 nsample=0),
        _knn_bad("nsample-65537", r"knn_query: nsample must be at most 65536, got 65537",
                 nsample=65537),
        _knn_bad("nsample-2**40", r"nsample must be at most 65536, got 1099511627776",
                 nsample=2**40),
        _knn_bad("nsample-int64-max", r"nsample must be at most 65536, got 9223372036854775807",
                 nsample=2**63 - 1),
        _knn_bad("m-times-nsample", r"knn_query: m \* nsample must be at most 268435456 "
                 r"\(1 GiB per output\), got m = 4097, nsample = 65536", nsample=65536,
                 xyz=f32(4097, 3), offset=i32(4097), new_xyz=None, new_offset=None),
    ],
)


# --- deform_conv2d --------------------------------------------------------------

# batch, in/out channels, input size, kernel, stride, padding, dilation,
# groups, offset_groups, mask, bias
DEFORM_CONFIGS = [
    dict(n=1, c=3, o=5, hw=(8, 8), k=(3, 3), s=(1, 1), p=(1, 1), d=(1, 1), g=1, og=1, mask=False, bias=False),
    dict(n=2, c=4, o=6, hw=(9, 7), k=(3, 2), s=(2, 1), p=(0, 2), d=(1, 2), g=2, og=1, mask=True, bias=True),
    dict(n=1, c=8, o=8, hw=(10, 10), k=(3, 3), s=(1, 1), p=(2, 2), d=(2, 2), g=4, og=2, mask=True, bias=False),
    dict(n=3, c=6, o=4, hw=(5, 6), k=(1, 1), s=(1, 1), p=(0, 0), d=(1, 1), g=1, og=3, mask=False, bias=True),
    dict(n=1, c=4, o=4, hw=(12, 9), k=(5, 3), s=(3, 2), p=(1, 0), d=(1, 1), g=1, og=4, mask=True, bias=True),
    dict(n=2, c=16, o=32, hw=(16, 16), k=(3, 3), s=(1, 1), p=(1, 1), d=(1, 1), g=1, og=1, mask=True, bias=True),
    dict(n=1, c=2, o=2, hw=(1, 1), k=(1, 1), s=(1, 1), p=(0, 0), d=(1, 1), g=1, og=1, mask=False, bias=False),
    dict(n=0, c=4, o=4, hw=(6, 6), k=(3, 3), s=(1, 1), p=(1, 1), d=(1, 1), g=1, og=1, mask=True, bias=True),
    # Wide enough for whole vectors of channels and output channels, several
    # tiles, and offset groups that straddle weight groups (og 3, g 2).
    dict(n=1, c=48, o=40, hw=(21, 19), k=(3, 3), s=(1, 1), p=(1, 1), d=(1, 1), g=2, og=3, mask=True, bias=True),
    dict(n=2, c=64, o=64, hw=(23, 17), k=(3, 3), s=(2, 1), p=(1, 1), d=(1, 1), g=1, og=1, mask=False, bias=True),
]


def deform_config_id(c):
    return (f"n{c['n']}g{c['g']}og{c['og']}k{c['k'][0]}{c['k'][1]}"
            f"{'m' if c['mask'] else ''}{'b' if c['bias'] else ''}")


def out_size(size, k, s, p, d):
    return (size + 2 * p - (d * (k - 1) + 1)) // s + 1


def deform_inputs(rng, cfg, dtype=F32):
    """Arrays in torchvision's C++ order, of one dtype; offsets large enough
    to sample outside the image and between pixels."""
    (h, w), (kh, kw) = cfg["hw"], cfg["k"]
    oh = out_size(h, kh, cfg["s"][0], cfg["p"][0], cfg["d"][0])
    ow = out_size(w, kw, cfg["s"][1], cfg["p"][1], cfg["d"][1])
    taps = cfg["og"] * kh * kw
    normal = lambda *shape: rng.standard_normal(shape).astype(dtype)  # noqa: E731
    return {
        "input": normal(cfg["n"], cfg["c"], h, w),
        "weight": normal(cfg["o"], cfg["c"] // cfg["g"], kh, kw),
        "offset": (2.0 * normal(cfg["n"], 2 * taps, oh, ow)).astype(dtype),
        "mask": rng.random((cfg["n"], taps, oh, ow)).astype(dtype) if cfg["mask"] else None,
        "bias": normal(cfg["o"]) if cfg["bias"] else None,
    }


def deform_attrs(cfg):
    return dict(stride=list(cfg["s"]), padding=list(cfg["p"]), dilation=list(cfg["d"]),
                groups=cfg["g"], offset_groups=cfg["og"])


_DEFORM_BASIC = dict(n=1, c=4, o=4, hw=(6, 6), k=(3, 3), s=(1, 1), p=(0, 0), d=(1, 1), g=2,
                     og=2, mask=True, bias=True)


def _deform_samples(rng):
    samples = [Sample("basic", deform_inputs(rng, _DEFORM_BASIC), deform_attrs(_DEFORM_BASIC),
                      basic=True),
               # the node that skips a middle optional input: bias given, mask absent
               Sample("basic-nomask", deform_inputs(rng, {**_DEFORM_BASIC, "mask": False}),
                      deform_attrs(_DEFORM_BASIC), basic=True)]
    # the other dtypes: their fakes and defaults must follow the input's dtype
    samples += [Sample(f"basic-{dtype}", deform_inputs(rng, _DEFORM_BASIC, dtype),
                       deform_attrs(_DEFORM_BASIC)) for dtype in (F64, F16)]
    return samples + [Sample(deform_config_id(c), deform_inputs(rng, c), deform_attrs(c))
                      for c in DEFORM_CONFIGS]


def _deform_large(rng, i):
    cfg = dict(n=1 + i % 2, c=8, o=8, hw=(12 + i, 16), k=(3, 3), s=(1, 1), p=(1, 1), d=(1, 1),
               g=2, og=2, mask=True, bias=True)
    return [Sample(f"{i}", deform_inputs(rng, cfg), deform_attrs(cfg)),
            Sample(f"{i}-nomask", deform_inputs(rng, {**cfg, "mask": False}), deform_attrs(cfg))]


def _deform_reference(x, attrs):
    import torch
    import torchvision

    t = lambda name: None if x[name] is None else torch.from_numpy(x[name])  # noqa: E731
    return [torchvision.ops.deform_conv2d(
        t("input"), t("offset"), t("weight"), t("bias"), stride=attrs["stride"],
        padding=attrs["padding"], dilation=attrs["dilation"], mask=t("mask")).numpy()]


def _deform_python(t, attrs):
    import customops

    # groups and offset_groups follow from the shapes, as in torchvision
    return customops.deform_conv2d(t["input"], t["offset"], t["weight"], t["bias"],
                                   stride=attrs["stride"], padding=attrs["padding"],
                                   dilation=attrs["dilation"], mask=t["mask"])


# N=1, C=4, 6x6, 6 output channels, 3x3 kernel, groups 2, offset_groups 2 ->
# output 4x4; offset (1, 2*2*9, 4, 4), mask (1, 2*9, 4, 4).
DCN = dict(input=f32(1, 4, 6, 6), weight=f32(6, 2, 3, 3), offset=f32(1, 36, 4, 4),
           mask=f32(1, 18, 4, 4), bias=f32(6))
DCN_ATTRS = dict(stride=[1, 1], padding=[0, 0], dilation=[1, 1], groups=2, offset_groups=2)


def _dcn_bad(id, match, bindings=("torch", "ort"), noncontiguous=(), inputs=None, **attrs):
    return Bad(id, {**DCN, **(inputs or {})}, {**DCN_ATTRS, **attrs}, match, bindings,
               noncontiguous)


OFFSET_LAYOUT = r"offset must have shape \(N, 2\*offset_groups\*kh\*kw, out_h, out_w\) = "
MASK_LAYOUT = r"mask must have shape \(N, offset_groups\*kh\*kw, out_h, out_w\) = "

DEFORM_CONV2D = Op(
    name="deform_conv2d",
    onnx_name="deform_conv2d",
    # torchvision's order: input, weight, offset, mask, bias
    inputs=(Input("input", (F32, F64, F16), (F32, F64, F16)),
            Input("weight", (F32, F64, F16), (F32, F64, F16), same_as="input"),
            Input("offset", (F32, F64, F16), (F32, F64, F16), same_as="input"),
            Input("mask", (F32, F64, F16), (F32, F64, F16), optional=True, same_as="input"),
            Input("bias", (F32, F64, F16), (F32, F64, F16), optional=True, same_as="input")),
    attrs=dict(stride=[1, 1], padding=[0, 0], dilation=[1, 1], groups=1, offset_groups=1),
    outputs=(Output("y", "input"),),
    samples=_deform_samples,
    large=_deform_large,
    reference=_deform_reference,
    python=_deform_python,
    refuse=lambda s: {"bias": _rows(s.inputs["bias"])},
    rtol=1e-4,
    atol=1e-4,
    differentiable=True,
    base=Sample("base", DCN, DCN_ATTRS),
    torch_free_reference=False,
    bad=[
        # ranks and sizes
        _dcn_bad("input-3d", r"deform_conv2d: input must be 4-D \(N, C, H, W\), got shape "
                 r"\[4, 6, 6\]", inputs=dict(input=f32(4, 6, 6))),
        _dcn_bad("input-5d", r"input must be 4-D \(N, C, H, W\), got shape \[1, 4, 6, 6, 1\]",
                 inputs=dict(input=f32(1, 4, 6, 6, 1))),
        _dcn_bad("weight-3d", r"weight must be 4-D \(out_channels, C/groups, kh, kw\), got shape "
                 r"\[6, 2, 3\]", inputs=dict(weight=f32(6, 2, 3))),
        _dcn_bad("input-no-channels", r"input must have N >= 0 and C, H, W >= 1, got shape "
                 r"\[1, 0, 6, 6\]", inputs=dict(input=f32(1, 0, 6, 6))),
        _dcn_bad("input-no-rows", r"input must have N >= 0 and C, H, W >= 1, got shape "
                 r"\[1, 4, 0, 6\]", inputs=dict(input=f32(1, 4, 0, 6))),
        _dcn_bad("weight-empty-kernel", r"weight dimensions must all be >= 1, got shape "
                 r"\[6, 2, 0, 3\]", inputs=dict(weight=f32(6, 2, 0, 3))),
        _dcn_bad("weight-no-outputs", r"weight dimensions must all be >= 1, got shape "
                 r"\[0, 2, 3, 3\]", inputs=dict(weight=f32(0, 2, 3, 3), bias=f32(0))),
        # attributes
        _dcn_bad("stride-zero", r"deform_conv2d: stride must be >= 1, got \[0, 1\]", stride=[0, 1]),
        _dcn_bad("stride-negative", r"stride must be >= 1, got \[1, -2\]", stride=[1, -2]),
        _dcn_bad("stride-3-values", r"stride must have 2 values \(h, w\), got \[1, 1, 1\]",
                 stride=[1, 1, 1]),
        _dcn_bad("stride-huge", r"stride values must be at most 2147483647, got "
                 r"\[1099511627776, 1\]", stride=[2**40, 1]),
        _dcn_bad("padding-negative", r"padding must be >= 0, got \[-1, 0\]", padding=[-1, 0]),
        _dcn_bad("padding-1-value", r"padding must have 2 values \(h, w\), got \[1\]", padding=[1]),
        _dcn_bad("padding-huge", r"padding values must be at most 2147483647, got "
                 r"\[0, 4611686018427387904\]", padding=[0, 2**62]),
        _dcn_bad("dilation-zero", r"dilation must be >= 1, got \[0, 1\]", dilation=[0, 1]),
        _dcn_bad("dilation-3-values", r"dilation must have 2 values \(h, w\), got \[1, 1, 1\]",
                 dilation=[1, 1, 1]),
        _dcn_bad("dilation-huge", r"dilation values must be at most 2147483647, got "
                 r"\[1, 2147483648\]", dilation=[1, 2**31]),
        # channel and group arithmetic
        _dcn_bad("groups-zero", r"deform_conv2d: groups must be >= 1, got 0", groups=0),
        _dcn_bad("groups-negative", r"groups must be >= 1, got -2", groups=-2),
        _dcn_bad("offset_groups-zero", r"offset_groups must be >= 1, got 0", offset_groups=0),
        _dcn_bad("groups-not-dividing-C", r"input channels C = 4 must be divisible by groups = 3",
                 groups=3),
        _dcn_bad("groups-huge", r"input channels C = 4 must be divisible by groups = "
                 r"1099511627776", groups=2**40),
        _dcn_bad("offset_groups-not-dividing-C",
                 r"input channels C = 4 must be divisible by offset_groups = 3", offset_groups=3),
        _dcn_bad("offset_groups-more-than-C",
                 r"input channels C = 4 must be divisible by offset_groups = 8", offset_groups=8),
        _dcn_bad("out_channels-not-divisible",
                 r"weight\.shape\[0\] \(out_channels\) = 5 must be divisible by groups = 2",
                 inputs=dict(weight=f32(5, 2, 3, 3), bias=f32(5))),
        _dcn_bad("weight-channels-not-C/groups", r"weight\.shape\[1\] must be C/groups = 2, got 4",
                 inputs=dict(weight=f32(6, 4, 3, 3))),
        _dcn_bad("weight-channels-for-groups-1", r"weight\.shape\[1\] must be C/groups = 4, got 2",
                 groups=1),
        # kernel size against the padded input
        _dcn_bad("kernel-taller-than-input", r"kernel height extent 3 \(dilation \* \(k - 1\) \+ "
                 r"1\) must fit in the padded input height 2 \(height \+ 2 \* padding\)",
                 inputs=dict(input=f32(1, 4, 2, 6))),
        _dcn_bad("dilated-kernel-wider-than-input", r"kernel width extent 9 \(dilation \* "
                 r"\(k - 1\) \+ 1\) must fit in the padded input width 6", dilation=[1, 4]),
        _dcn_bad("kernel-wider-than-padded-input", r"kernel width extent 7 .* must fit in the "
                 r"padded input width 6", inputs=dict(weight=f32(6, 2, 3, 7))),
        # offset, mask, bias shapes
        _dcn_bad("offset-channels-for-1-group", OFFSET_LAYOUT + r"\[1, 36, 4, 4\], got "
                 r"\[1, 18, 4, 4\]", inputs=dict(offset=f32(1, 18, 4, 4))),
        _dcn_bad("offset-spatial", OFFSET_LAYOUT + r"\[1, 36, 4, 4\], got \[1, 36, 6, 6\]",
                 inputs=dict(offset=f32(1, 36, 6, 6))),
        _dcn_bad("offset-batch", OFFSET_LAYOUT + r"\[1, 36, 4, 4\], got \[2, 36, 4, 4\]",
                 inputs=dict(offset=f32(2, 36, 4, 4))),
        _dcn_bad("offset-3d", OFFSET_LAYOUT + r"\[1, 36, 4, 4\], got \[36, 4, 4\]",
                 inputs=dict(offset=f32(36, 4, 4))),
        _dcn_bad("offset-for-stride-1-with-stride-2", OFFSET_LAYOUT + r"\[1, 36, 2, 2\], got "
                 r"\[1, 36, 4, 4\]", stride=[2, 2]),
        _dcn_bad("mask-channels", MASK_LAYOUT + r"\[1, 18, 4, 4\], got \[1, 36, 4, 4\]",
                 inputs=dict(mask=f32(1, 36, 4, 4))),
        _dcn_bad("mask-spatial", MASK_LAYOUT + r"\[1, 18, 4, 4\], got \[1, 18, 4, 3\]",
                 inputs=dict(mask=f32(1, 18, 4, 3))),
        _dcn_bad("mask-1d", MASK_LAYOUT + r"\[1, 18, 4, 4\], got \[288\]",
                 inputs=dict(mask=f32(288))),
        _dcn_bad("bias-length", r"bias must have shape \(out_channels\) = \[6\], got \[5\]",
                 inputs=dict(bias=f32(5))),
        _dcn_bad("bias-2d", r"bias must have shape \(out_channels\) = \[6\], got \[6, 1\]",
                 inputs=dict(bias=f32(6, 1))),
        _dcn_bad("bias-without-mask-wrong", r"bias must have shape \(out_channels\) = \[6\], "
                 r"got \[7\]", inputs=dict(mask=None, bias=f32(7))),
    ],
)


# --- ms_deform_attn -------------------------------------------------------------

# batch N, heads M, channels D, levels (H, W), queries Q, points P
MSDA_CONFIGS = [
    dict(n=1, m=2, d=4, shapes=[(3, 4), (2, 3)], q=5, p=2),
    dict(n=2, m=3, d=5, shapes=[(4, 5), (2, 2), (1, 1)], q=7, p=3),   # D not a vector's width
    dict(n=1, m=8, d=32, shapes=[(6, 7), (3, 4)], q=9, p=4),          # Deformable DETR's heads
    dict(n=1, m=1, d=1, shapes=[(1, 1)], q=1, p=1),
    dict(n=2, m=2, d=12, shapes=[(5, 3), (1, 4), (2, 1), (3, 3)], q=6, p=2),
    dict(n=1, m=2, d=4, shapes=[(3, 3), (0, 5), (2, 2)], q=4, p=2),  # an empty level
    dict(n=0, m=2, d=4, shapes=[(2, 2)], q=3, p=2),                   # nothing at all
    dict(n=1, m=2, d=4, shapes=[(2, 3)], q=0, p=2),
    dict(n=1, m=2, d=0, shapes=[(2, 3)], q=3, p=2),
    dict(n=1, m=2, d=4, shapes=[(2, 3)], q=3, p=0),
]


def msda_config_id(c):
    return (f"n{c['n']}m{c['m']}d{c['d']}q{c['q']}p{c['p']}-"
            + "_".join(f"{h}x{w}" for h, w in c["shapes"]))


def msda_inputs(rng, cfg, dtype=F32, spread=0.3):
    """Arrays of the op's contract; locations in [-spread, 1 + spread], so
    that some samples fall partly or wholly outside their level."""
    shapes = np.array(cfg["shapes"], np.int64).reshape(-1, 2)
    areas = shapes[:, 0] * shapes[:, 1]
    n, m, levels, q, p = cfg["n"], cfg["m"], len(shapes), cfg["q"], cfg["p"]
    uniform = lambda *shape: rng.uniform(-spread, 1 + spread, shape).astype(dtype)  # noqa: E731
    return {
        "value": rng.standard_normal((n, int(areas.sum()), m, cfg["d"])).astype(dtype),
        "spatial_shapes": shapes,
        "level_start_index": np.concatenate([[0], np.cumsum(areas)[:-1]]).astype(np.int64),
        "sampling_locations": uniform(n, q, m, levels, p, 2),
        "attention_weights": rng.random((n, q, m, levels, p)).astype(dtype),
    }


def msda_border_inputs(rng, cfg, dtype=F32):
    """Locations on pixel centres, pixel edges, the level's borders and just
    beyond them: where floor() and the inside tests change their answer."""
    x = msda_inputs(rng, cfg, dtype)
    shape = x["sampling_locations"].shape
    sizes = np.array(cfg["shapes"], np.float64)[:, None, ::-1]  # (L, 1, 2): (W, H) per level
    k = rng.integers(-2, 2 * int(sizes.max()) + 3, shape)
    x["sampling_locations"] = (k / (2 * sizes)).astype(dtype)    # multiples of half a pixel
    return x


def _msda_samples(rng):
    base = MSDA_CONFIGS[0]
    step = {"im2col_step": 64}  # the default, written (test_attribute_defaults leaves it out)
    samples = [Sample("basic", msda_inputs(rng, base), step, basic=True),
               Sample("basic-borders", msda_border_inputs(rng, base), step),
               Sample("basic-im2col_step-1", msda_inputs(rng, base), {"im2col_step": 1})]
    samples += [Sample(f"basic-{dtype}", msda_inputs(rng, base, dtype), step)
                for dtype in (F64, F16)]
    samples += [Sample(msda_config_id(c), msda_inputs(rng, c), step) for c in MSDA_CONFIGS[1:]]
    samples += [Sample(f"strided-{names}", msda_inputs(rng, MSDA_CONFIGS[1]), step,
                       noncontiguous=names)
                for names in (("value",), ("value", "sampling_locations", "attention_weights"))]
    return samples


def _msda_large(rng, i):
    cfg = dict(n=1 + i % 2, m=4, d=16, shapes=[(12 + i, 16), (6, 8), (3, 4)], q=150 + 10 * i,
               p=4)
    return [Sample(f"{i}", msda_inputs(rng, cfg), {"im2col_step": 64})]


def _msda_reference(x, attrs):
    return [ms_deform_attn_reference(x["value"], x["spatial_shapes"], x["level_start_index"],
                                     x["sampling_locations"], x["attention_weights"])]


def _msda_python(t, attrs):
    import customops

    return customops.ms_deform_attn(t["value"], t["spatial_shapes"], t["level_start_index"],
                                    t["sampling_locations"], t["attention_weights"],
                                    attrs.get("im2col_step", 64))


def i64(*values):
    return np.array(values, np.int64)


# N=1, S = 3*4 + 2*3 = 18, M=2, D=4; Q=5, L=2, P=3
MSDA = dict(value=f32(1, 18, 2, 4), spatial_shapes=i64(3, 4, 2, 3).reshape(2, 2),
            level_start_index=i64(0, 12), sampling_locations=f32(1, 5, 2, 2, 3, 2),
            attention_weights=f32(1, 5, 2, 2, 3))
LOCATIONS_LAYOUT = r"sampling_locations must have shape \(N, Q, M, L, P, 2\) = "
WEIGHTS_LAYOUT = r"attention_weights must have shape \(N, Q, M, L, P\) = "
AREAS = r"the areas H \* W of spatial_shapes must sum to S = value\.shape\[1\] = 18, got "
PREFIX = (r"level_start_index must hold the prefix sums of the areas H \* W of spatial_shapes, "
          r"got level_start_index")


def _msda_bad(id, match, values=False, im2col_step=64, **changes):
    return Bad(id, {**MSDA, **changes}, {"im2col_step": im2col_step}, match, values=values)


MS_DEFORM_ATTN = Op(
    name="ms_deform_attn",
    onnx_name="ms_deform_attn",
    inputs=(Input("value", (F32, F64, F16), (F32, F64, F16)),
            Input("spatial_shapes", (I64,), (I64,)),
            Input("level_start_index", (I64,), (I64,)),
            Input("sampling_locations", (F32, F64, F16), (F32, F64, F16), same_as="value"),
            Input("attention_weights", (F32, F64, F16), (F32, F64, F16), same_as="value")),
    attrs={"im2col_step": 64},
    outputs=(Output("output", "value"),),
    samples=_msda_samples,
    large=_msda_large,
    reference=_msda_reference,
    python=_msda_python,
    refuse=lambda s: {"level_start_index": s.inputs["level_start_index"] + 1},
    rtol=1e-4,
    atol=1e-5,
    differentiable=True,
    base=Sample("base", MSDA, {"im2col_step": 64}),
    bad=[
        # ranks and shapes
        _msda_bad("value-3d", r"ms_deform_attn: value must be 4-D \(N, S, M, D\), got shape "
                  r"\[18, 2, 4\]", value=f32(18, 2, 4)),
        _msda_bad("value-5d", r"value must be 4-D \(N, S, M, D\), got shape \[1, 18, 2, 4, 1\]",
                  value=f32(1, 18, 2, 4, 1)),
        _msda_bad("spatial_shapes-3-columns", r"ms_deform_attn: spatial_shapes must have shape "
                  r"\(L, 2\), got \[2, 3\]", spatial_shapes=i64(3, 4, 1, 2, 3, 1).reshape(2, 3)),
        _msda_bad("spatial_shapes-1d", r"spatial_shapes must have shape \(L, 2\), got \[4\]",
                  spatial_shapes=i64(3, 4, 2, 3)),
        _msda_bad("level_start_index-length", r"ms_deform_attn: level_start_index must have "
                  r"shape \(L\) = \[2\], got \[3\]", level_start_index=i64(0, 12, 18)),
        _msda_bad("level_start_index-2d", r"level_start_index must have shape \(L\) = \[2\], "
                  r"got \[2, 1\]", level_start_index=i64(0, 12).reshape(2, 1)),
        _msda_bad("sampling_locations-5d", r"ms_deform_attn: sampling_locations must be 6-D "
                  r"\(N, Q, M, L, P, 2\), got shape \[1, 5, 2, 2, 3\]",
                  sampling_locations=f32(1, 5, 2, 2, 3)),
        _msda_bad("sampling_locations-heads", LOCATIONS_LAYOUT + r"\[1, 5, 2, 2, 3, 2\] "
                  r"\(N, M from value, L from spatial_shapes\), got \[1, 5, 3, 2, 3, 2\]",
                  sampling_locations=f32(1, 5, 3, 2, 3, 2)),
        _msda_bad("sampling_locations-batch", LOCATIONS_LAYOUT + r"\[1, 5, 2, 2, 3, 2\] .*got "
                  r"\[2, 5, 2, 2, 3, 2\]", sampling_locations=f32(2, 5, 2, 2, 3, 2)),
        _msda_bad("sampling_locations-levels", LOCATIONS_LAYOUT + r"\[1, 5, 2, 2, 3, 2\] .*got "
                  r"\[1, 5, 2, 3, 3, 2\]", sampling_locations=f32(1, 5, 2, 3, 3, 2)),
        _msda_bad("sampling_locations-3-coordinates", LOCATIONS_LAYOUT + r"\[1, 5, 2, 2, 3, 2\] "
                  r".*got \[1, 5, 2, 2, 3, 3\]", sampling_locations=f32(1, 5, 2, 2, 3, 3)),
        _msda_bad("attention_weights-points", WEIGHTS_LAYOUT + r"\[1, 5, 2, 2, 3\], got "
                  r"\[1, 5, 2, 2, 4\]", attention_weights=f32(1, 5, 2, 2, 4)),
        _msda_bad("attention_weights-queries", WEIGHTS_LAYOUT + r"\[1, 5, 2, 2, 3\], got "
                  r"\[1, 4, 2, 2, 3\]", attention_weights=f32(1, 4, 2, 2, 3)),
        _msda_bad("attention_weights-with-coordinates", WEIGHTS_LAYOUT + r"\[1, 5, 2, 2, 3\], "
                  r"got \[1, 5, 2, 2, 3, 2\]", attention_weights=f32(1, 5, 2, 2, 3, 2)),
        _msda_bad("im2col_step-zero", r"ms_deform_attn: im2col_step must be >= 1, got 0",
                  im2col_step=0),
        _msda_bad("im2col_step-negative", r"im2col_step must be >= 1, got -64", im2col_step=-64),
        # the values of spatial_shapes and level_start_index
        _msda_bad("spatial_shapes-negative", r"ms_deform_attn: spatial_shapes must be >= 0, got "
                  r"spatial_shapes\[0\] = \(-3, 4\)", values=True,
                  spatial_shapes=i64(-3, 4, 2, 3).reshape(2, 2)),
        _msda_bad("spatial_shapes-negative-pair", r"spatial_shapes must be >= 0, got "
                  r"spatial_shapes\[1\] = \(-2, -3\)", values=True,
                  spatial_shapes=i64(3, 4, -2, -3).reshape(2, 2)),
        _msda_bad("spatial_shapes-areas-short", AREAS + "16", values=True,
                  spatial_shapes=i64(3, 4, 2, 2).reshape(2, 2)),
        _msda_bad("spatial_shapes-areas-over", AREAS + r"more by level 1 \(2, 4\)", values=True,
                  spatial_shapes=i64(3, 4, 2, 4).reshape(2, 2)),
        _msda_bad("spatial_shapes-swapped-over", AREAS + r"more by level 0 \(4, 5\)",
                  values=True, spatial_shapes=i64(4, 5, 2, 3).reshape(2, 2)),
        _msda_bad("spatial_shapes-area-overflow", AREAS + r"more by level 0 "
                  r"\(4611686018427387904, 4\)", values=True,
                  spatial_shapes=i64(2**62, 4, 2, 3).reshape(2, 2)),
        _msda_bad("level_start_index-not-prefix", PREFIX + r"\[1\] = 11, expected 12",
                  values=True, level_start_index=i64(0, 11)),
        _msda_bad("level_start_index-first", PREFIX + r"\[0\] = 1, expected 0",
                  values=True, level_start_index=i64(1, 12)),
        _msda_bad("level_start_index-ends", PREFIX + r"\[1\] = 18, expected 12",
                  values=True, level_start_index=i64(0, 18)),
        # non-finite locations are refused, naming the first
        *[_msda_bad(f"sampling_locations-{text}-{'-'.join(map(str, at))}",
                    rf"ms_deform_attn: sampling_locations must be finite \(no NaN or inf\), "
                    rf"got {text} at sampling_locations\[{', '.join(map(str, at))}\]",
                    values=True, sampling_locations=_with(MSDA["sampling_locations"], at, value))
          for at in [(0, 0, 0, 0, 0, 0), (0, 4, 1, 1, 2, 1), (0, 2, 1, 0, 1, 0)]
          for value, text in [(np.nan, "nan"), (np.inf, "inf"), (-np.inf, "-inf")]],
    ],
)


OPS = {op.name: op for op in (MY_ADD, KNN_QUERY, DEFORM_CONV2D, MS_DEFORM_ATTN)}
BY_ONNX_NAME = {op.onnx_name: op for op in OPS.values()}


def basic_samples(op: Op, rng=None):
    rng = rng if rng is not None else np.random.default_rng(0)
    return [s for s in op.samples(rng) if s.basic]
