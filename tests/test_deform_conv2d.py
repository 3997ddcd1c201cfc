"""deform_conv2d: both bindings against torchvision and ONNX's reference DeformConv."""

import numpy as np
import pytest
import torch
import torchvision
from onnx.reference import ReferenceEvaluator
from onnxruntime.capi.onnxruntime_pybind11_state import Fail as OrtFail
from torch._subclasses.fake_tensor import FakeTensorMode

import customops
from customops.ort import session
from exporting import verify
from helpers import feeds, single_node_model
from optable import DEFORM_CONFIGS, deform_config_id
from optable import deform_attrs as attrs
from optable import deform_inputs as make_inputs

CONFIGS = DEFORM_CONFIGS
CONFIG_IDS = [deform_config_id(c) for c in CONFIGS]
NAMES = ("input", "weight", "offset", "mask", "bias")  # torchvision's C++ order

# Tolerances against torchvision in the same dtype (float32, float64), and
# for float16 against torchvision in float64 on the same float16 inputs: we
# compute in float32 and round once to float16 (half an ulp is 2^-11
# relative), where torchvision's own float16 path rounds every step.
TOLERANCE = {np.float32: 1e-4, np.float64: 1e-10, np.float16: 1e-3}
DTYPES = list(TOLERANCE)


def torchvision_reference(x, cfg):
    """torchvision.ops.deform_conv2d; float16 inputs are evaluated in float64."""
    t = lambda name: None if x[name] is None else torch.from_numpy(  # noqa: E731
        x[name].astype(np.float64) if x[name].dtype == np.float16 else x[name])
    return torchvision.ops.deform_conv2d(
        t("input"), t("offset"), t("weight"), t("bias"), stride=cfg["s"], padding=cfg["p"],
        dilation=cfg["d"], mask=t("mask")).numpy()


def assert_close(got, expected, dtype):
    assert got.dtype == dtype
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=tol, atol=tol)


def op_args(x, cfg):
    """The arguments of torch.ops.customops.deform_conv2d."""
    tensors = [None if x[name] is None else torch.from_numpy(x[name]) for name in NAMES]
    return (*tensors, list(cfg["s"]), list(cfg["p"]), list(cfg["d"]), cfg["g"], cfg["og"])


def noncontiguous(t):
    """The same values, not contiguous: every other element of a buffer twice
    as long along the longest dimension."""
    if t is None or t.numel() <= 1:
        return t
    dim = max(range(t.dim()), key=lambda i: t.shape[i])
    shape = list(t.shape)
    shape[dim] *= 2
    every_other = tuple(slice(None, None, 2 if i == dim else 1) for i in range(t.dim()))
    out = torch.zeros(shape, dtype=t.dtype)[every_other]
    out.copy_(t)
    assert not out.is_contiguous()
    return out


def torch_binding(x, cfg, layout=lambda t: t):
    t = lambda name: None if x[name] is None else layout(torch.from_numpy(x[name]))  # noqa: E731
    return customops.deform_conv2d(t("input"), t("offset"), t("weight"), t("bias"),
                                   stride=cfg["s"], padding=cfg["p"], dilation=cfg["d"],
                                   mask=t("mask")).numpy()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("cfg", CONFIGS, ids=CONFIG_IDS)
def test_both_bindings_match_torchvision(rng, cfg, dtype):
    x = make_inputs(rng, cfg, dtype)
    expected = torchvision_reference(x, cfg)
    assert_close(torch_binding(x, cfg), expected, dtype)
    assert_close(torch_binding(x, cfg, noncontiguous), expected, dtype)
    model = single_node_model("deform_conv2d", x, ["y"], **attrs(cfg))
    (got,) = session(model).run(None, feeds(x))
    assert_close(got, expected, dtype)


def test_float16_is_at_least_as_accurate_as_torchvision(rng):
    """Computing in float32 and rounding once beats torchvision's float16
    path, which rounds every step (both measured against float64)."""
    cfg = CONFIGS[9]
    x = make_inputs(rng, cfg, np.float16)
    exact = torchvision_reference(x, cfg)
    t = lambda name: None if x[name] is None else torch.from_numpy(x[name])  # noqa: E731
    theirs = torchvision.ops.deform_conv2d(t("input"), t("offset"), t("weight"), t("bias"),
                                           stride=cfg["s"], padding=cfg["p"]).numpy()
    ours = torch_binding(x, cfg)
    assert np.abs(ours - exact).max() <= np.abs(theirs.astype(np.float64) - exact).max()


@pytest.mark.parametrize("cfg", CONFIGS[:5], ids=CONFIG_IDS[:5])
def test_ort_kernel_matches_onnx_reference_deformconv(rng, cfg):
    """ONNX's own DeformConv (reference implementation) as a second oracle."""
    x = make_inputs(rng, cfg)
    kh, kw = cfg["k"]
    ref_inputs = {"X": x["input"], "W": x["weight"], "offset": x["offset"], "B": x["bias"],
                  "mask": x["mask"]}
    ref_model = single_node_model(
        "DeformConv", ref_inputs, ["Y"], domain="", dilations=list(cfg["d"]), group=cfg["g"],
        kernel_shape=[kh, kw], offset_group=cfg["og"], pads=[*cfg["p"], *cfg["p"]],
        strides=list(cfg["s"]))
    (expected,) = ReferenceEvaluator(ref_model).run(None, feeds(ref_inputs))
    model = single_node_model("deform_conv2d", x, ["y"], **attrs(cfg))
    (got,) = session(model).run(None, feeds(x))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_ort_node_without_mask_but_with_bias(rng):
    """The middle optional input is skipped with an empty name: the case that
    crashes ORT's lite API (see csrc/ort/classic_op.h)."""
    cfg = CONFIGS[1] | {"mask": False}
    for dtype in DTYPES:
        x = make_inputs(rng, cfg, dtype)
        model = single_node_model("deform_conv2d", x, ["y"], **attrs(cfg))
        assert list(model.graph.node[0].input) == ["input", "weight", "offset", "", "bias"]
        (got,) = session(model).run(None, feeds(x))
        assert_close(got, torchvision_reference(x, cfg), dtype)


def test_ort_refuses_mixed_dtypes_at_load(rng):
    """Each kernel declares one type for all inputs: a node mixing float32
    and float64 matches none of them (message of onnxruntime 1.31)."""
    x = make_inputs(rng, CONFIGS[0])
    x["weight"] = x["weight"].astype(np.float64)
    model = single_node_model("deform_conv2d", x, ["y"], **attrs(CONFIGS[0]))
    with pytest.raises(OrtFail, match="no kernel def matches node inputs for Op: deform_conv2d"):
        session(model)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_non_finite_and_huge_offsets_sample_zero(dtype):
    """Offsets that are NaN, infinite or beyond int32 land nowhere: the output
    equals that of offsets far outside the image, which torchvision zeroes.
    (torchvision itself converts such positions to int, undefined in C++.)"""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 6, 13, 17, dtype=dtype, generator=gen)
    weight = torch.randn(4, 6, 3, 3, dtype=dtype, generator=gen)
    mask = torch.rand(2, 9, 13, 17, dtype=dtype, generator=gen)
    far = torch.randn(2, 18, 13, 17, dtype=dtype, generator=gen) * 3
    odd = torch.rand(far.shape, generator=gen) < 0.2
    values = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e30, -3e9], dtype=dtype)
    far[odd] = 1e6
    bad = far.clone()
    bad[odd] = values[torch.randint(0, len(values), (int(odd.sum()),), generator=gen)]
    ours = [customops.deform_conv2d(x, offset, weight, padding=(1, 1), mask=mask)
            for offset in (far, bad)]
    expected = torchvision.ops.deform_conv2d(x, far, weight, padding=(1, 1), mask=mask)
    torch.testing.assert_close(ours[0], expected, rtol=1e-4, atol=1e-4)
    assert torch.equal(ours[1], ours[0])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("cfg", CONFIGS, ids=CONFIG_IDS)
def test_opcheck(rng, cfg, dtype):
    """opcheck, and the values of the call it checks against torchvision."""
    x = make_inputs(rng, cfg, dtype)
    args = op_args(x, cfg)
    torch.library.opcheck(torch.ops.customops.deform_conv2d.default, args)
    got = torch.ops.customops.deform_conv2d.default(*args).numpy()
    assert_close(got, torchvision_reference(x, cfg), dtype)


# Bad calls the fake kernel must refuse with the C++ binding's own message:
# (id, changes to the inputs of CONFIGS[2] as a function of them, attribute changes).
BAD_CALLS = [
    ("input-int32", lambda x: {"input": x["input"].astype(np.int32)}, {}),
    ("weight-float64", lambda x: {"weight": x["weight"].astype(np.float64)}, {}),
    ("mask-float16", lambda x: {"mask": x["mask"].astype(np.float16)}, {}),
    ("input-3d", lambda x: {"input": x["input"][0]}, {}),
    ("stride-3-values", lambda x: {}, {"s": (1, 1, 1)}),
    ("padding-negative", lambda x: {}, {"p": (-1, 2)}),
    ("groups-not-dividing-C", lambda x: {}, {"g": 3}),
    ("weight-channels", lambda x: {"weight": x["weight"][:, :1]}, {}),
    ("kernel-too-big", lambda x: {"input": x["input"][:, :, :2, :2]}, {"p": (0, 0)}),
    ("offset-spatial", lambda x: {"offset": x["offset"][..., :-1]}, {}),
    ("mask-channels", lambda x: {"mask": x["mask"][:, :-1]}, {}),
    ("bias-length", lambda x: {"bias": np.zeros(7, np.float32)}, {}),
]


def bad_call(rng, changes, attr_changes):
    cfg = CONFIGS[2] | {"bias": True} | attr_changes
    x = make_inputs(rng, CONFIGS[2] | {"bias": True})
    x |= {name: np.ascontiguousarray(a) for name, a in changes(x).items()}
    return op_args(x, cfg)


def cpp_message(args):
    with pytest.raises(RuntimeError) as raised:
        torch.ops.customops.deform_conv2d(*args)
    return str(raised.value).splitlines()[0]


@pytest.mark.parametrize("changes,attr_changes", [c[1:] for c in BAD_CALLS],
                         ids=[c[0] for c in BAD_CALLS])
def test_fake_kernel_refuses_like_the_cpp_binding(rng, changes, attr_changes):
    args = bad_call(rng, changes, attr_changes)
    message = cpp_message(args)
    assert message.startswith("deform_conv2d: ")
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        with pytest.raises(RuntimeError) as raised:
            torch.ops.customops.deform_conv2d(*fake)
    assert str(raised.value).splitlines()[0] == message


class Call(torch.nn.Module):
    def forward(self, input, weight, offset, mask, bias):
        return torch.ops.customops.deform_conv2d(input, weight, offset, mask, bias, [1, 1],
                                                 [2, 2], [2, 2], 4, 2)


def test_torch_export_rejects_a_bad_call_while_tracing(rng):
    """A float64 weight with a float32 input fails in torch.export, before
    any kernel runs, with the message the C++ binding would give."""
    x = make_inputs(rng, CONFIGS[2] | {"bias": True})
    x["weight"] = x["weight"].astype(np.float64)
    args = op_args(x, CONFIGS[2])[:5]
    with pytest.raises(Exception, match=r"deform_conv2d: weight must have the dtype of input, "
                       r"Float, got Double"):
        torch.export.export(Call(), args)
    good = op_args(make_inputs(rng, CONFIGS[2] | {"bias": True}), CONFIGS[2])[:5]
    torch.export.export(Call(), good)  # the same call with good inputs traces


class DeformModel(torch.nn.Module):
    """The seeds' model: a Conv2d predicts offsets (and a mask) for a deformable conv."""

    def __init__(self, mask: bool, bias: bool, deform_conv2d=customops.deform_conv2d):
        super().__init__()
        self.deform_conv2d = deform_conv2d  # torchvision's for the reference
        self.offset = torch.nn.Conv2d(4, 2 * 9, 3, padding=1)
        self.mask = torch.nn.Conv2d(4, 9, 3, padding=1) if mask else None
        self.weight = torch.nn.Parameter(torch.randn(6, 4, 3, 3))
        self.bias = torch.nn.Parameter(torch.randn(6)) if bias else None

    def forward(self, x):
        mask = torch.sigmoid(self.mask(x)) if self.mask is not None else None
        return self.deform_conv2d(x, self.offset(x), self.weight, self.bias, padding=(1, 1),
                                  mask=mask)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("mask,bias", [(False, False), (True, True), (False, True)],
                         ids=["plain", "mask-bias", "bias-only"])
def test_export_runs_in_ort(torch_seeded, dynamo, mask, bias):
    model = DeformModel(mask, bias).eval()
    args = (torch.randn(2, 4, 11, 9),)
    reference = DeformModel(mask, bias, torchvision.ops.deform_conv2d).eval()
    reference.load_state_dict(model.state_dict())

    def expected(x):
        with torch.no_grad():
            return [reference(torch.from_numpy(x)).numpy()]

    onnx_model = verify(model, args, dynamo=dynamo, rtol=1e-4, atol=1e-4, reference=expected)
    (node,) = [n for n in onnx_model.graph.node if n.domain == "custom"]
    assert node.op_type == "deform_conv2d"
    present = [name != "" for name in node.input]
    assert present == [True, True, True, mask, bias][:len(present)] and len(present) >= 3


class OffsetsGiven(torch.nn.Module):
    """deform_conv2d alone, in the dtype of its parameters (ORT's CPU Conv,
    which would predict the offsets, runs float32 only)."""

    def __init__(self, dtype):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(6, 4, 3, 3, dtype=dtype))
        self.bias = torch.nn.Parameter(torch.randn(6, dtype=dtype))

    def forward(self, x, offset, mask):
        return customops.deform_conv2d(x, offset, self.weight, self.bias, padding=(1, 1),
                                       mask=mask)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16], ids=str)
def test_other_dtypes_export_and_run_in_ort(torch_seeded, dynamo, dtype):
    args = (torch.randn(1, 4, 7, 8), 2 * torch.randn(1, 18, 7, 8), torch.rand(1, 9, 7, 8))
    args = tuple(a.to(dtype) for a in args)
    # Both bindings compute float16 in float32 and round once: same result.
    tol = 1e-10 if dtype == torch.float64 else 1e-3
    model = OffsetsGiven(dtype).eval()

    def reference(x, offset, mask):  # torchvision in float64 on the same values
        t = lambda a: torch.from_numpy(a).double()  # noqa: E731
        return [torchvision.ops.deform_conv2d(
            t(x), t(offset), model.weight.detach().double(), model.bias.detach().double(),
            padding=(1, 1), mask=t(mask)).numpy()]

    onnx_model = verify(model, args, dynamo=dynamo, rtol=tol, atol=tol, reference=reference)
    assert onnx_model.graph.output[0].type.tensor_type.elem_type == \
        {torch.float64: 11, torch.float16: 10}[dtype]


def test_too_few_offset_channels_are_named_in_this_apis_terms():
    """The torchvision-compatible API deduces offset_groups from the offset;
    fewer than 2*kh*kw channels would make it 0, an argument this API does
    not take, so the message speaks of the offset's channels instead."""
    x, weight = torch.ones(1, 4, 6, 6), torch.ones(4, 4, 3, 3)
    with pytest.raises(RuntimeError, match=r"^deform_conv2d: offset must have "
                       r"2\*offset_groups\*kh\*kw channels, a positive multiple of 2\*kh\*kw = "
                       r"18 for the 3x3 kernel, got offset of shape \[1, 17, 4, 4\]$"):
        customops.deform_conv2d(x, torch.zeros(1, 17, 4, 4), weight)
    with pytest.raises(RuntimeError, match=r"offset must have shape \(N, 2\*offset_groups\*kh\*kw"
                       r", out_h, out_w\) = \[1, 18, 4, 4\], got \[1, 19, 4, 4\]"):
        customops.deform_conv2d(x, torch.zeros(1, 19, 4, 4), weight)
