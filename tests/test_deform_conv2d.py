"""deform_conv2d: both bindings against torchvision and ONNX's reference DeformConv."""

import numpy as np
import pytest
import torch
import torchvision
from onnx.reference import ReferenceEvaluator

import customops
from customops.ort import session
from customops.verify import verify
from helpers import feeds, single_node_model

# batch, in/out channels, input size, kernel, stride, padding, dilation,
# groups, offset_groups, mask, bias
CONFIGS = [
    dict(n=1, c=3, o=5, hw=(8, 8), k=(3, 3), s=(1, 1), p=(1, 1), d=(1, 1), g=1, og=1, mask=False, bias=False),
    dict(n=2, c=4, o=6, hw=(9, 7), k=(3, 2), s=(2, 1), p=(0, 2), d=(1, 2), g=2, og=1, mask=True, bias=True),
    dict(n=1, c=8, o=8, hw=(10, 10), k=(3, 3), s=(1, 1), p=(2, 2), d=(2, 2), g=4, og=2, mask=True, bias=False),
    dict(n=3, c=6, o=4, hw=(5, 6), k=(1, 1), s=(1, 1), p=(0, 0), d=(1, 1), g=1, og=3, mask=False, bias=True),
    dict(n=1, c=4, o=4, hw=(12, 9), k=(5, 3), s=(3, 2), p=(1, 0), d=(1, 1), g=1, og=4, mask=True, bias=True),
    dict(n=2, c=16, o=32, hw=(16, 16), k=(3, 3), s=(1, 1), p=(1, 1), d=(1, 1), g=1, og=1, mask=True, bias=True),
    dict(n=1, c=2, o=2, hw=(1, 1), k=(1, 1), s=(1, 1), p=(0, 0), d=(1, 1), g=1, og=1, mask=False, bias=False),
    dict(n=0, c=4, o=4, hw=(6, 6), k=(3, 3), s=(1, 1), p=(1, 1), d=(1, 1), g=1, og=1, mask=True, bias=True),
]


def out_size(size, k, s, p, d):
    return (size + 2 * p - (d * (k - 1) + 1)) // s + 1


def make_inputs(rng, cfg):
    """Arrays in torchvision's C++ order; offsets large enough to sample
    outside the image and between pixels."""
    (h, w), (kh, kw) = cfg["hw"], cfg["k"]
    oh = out_size(h, kh, cfg["s"][0], cfg["p"][0], cfg["d"][0])
    ow = out_size(w, kw, cfg["s"][1], cfg["p"][1], cfg["d"][1])
    taps = cfg["og"] * kh * kw
    f32 = lambda *shape: rng.standard_normal(shape, dtype=np.float32)  # noqa: E731
    return {
        "input": f32(cfg["n"], cfg["c"], h, w),
        "weight": f32(cfg["o"], cfg["c"] // cfg["g"], kh, kw),
        "offset": 2.0 * f32(cfg["n"], 2 * taps, oh, ow),
        "mask": rng.random((cfg["n"], taps, oh, ow), dtype=np.float32) if cfg["mask"] else None,
        "bias": f32(cfg["o"]) if cfg["bias"] else None,
    }


def torchvision_reference(x, cfg):
    t = lambda name: None if x[name] is None else torch.from_numpy(x[name])  # noqa: E731
    return torchvision.ops.deform_conv2d(
        t("input"), t("offset"), t("weight"), t("bias"), stride=cfg["s"], padding=cfg["p"],
        dilation=cfg["d"], mask=t("mask")).numpy()


def attrs(cfg):
    return dict(stride=list(cfg["s"]), padding=list(cfg["p"]), dilation=list(cfg["d"]),
                groups=cfg["g"], offset_groups=cfg["og"])


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"n{c['n']}g{c['g']}og{c['og']}k{c['k'][0]}{c['k'][1]}"
                         f"{'m' if c['mask'] else ''}{'b' if c['bias'] else ''}")
def test_both_bindings_match_torchvision(rng, cfg):
    x = make_inputs(rng, cfg)
    expected = torchvision_reference(x, cfg)
    t = lambda name: None if x[name] is None else torch.from_numpy(x[name])  # noqa: E731
    ours = customops.deform_conv2d(t("input"), t("offset"), t("weight"), t("bias"),
                                   stride=cfg["s"], padding=cfg["p"], dilation=cfg["d"],
                                   mask=t("mask"))
    np.testing.assert_allclose(ours.numpy(), expected, rtol=1e-4, atol=1e-4)
    model = single_node_model("deform_conv2d", x, ["y"], **attrs(cfg))
    (got,) = session(model).run(None, feeds(x))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cfg", CONFIGS[:5], ids=str)
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
    crashes ORT's lite API (see csrc/ort/ort_support.h)."""
    cfg = CONFIGS[1] | {"mask": False}
    x = make_inputs(rng, cfg)
    model = single_node_model("deform_conv2d", x, ["y"], **attrs(cfg))
    assert list(model.graph.node[0].input) == ["input", "weight", "offset", "", "bias"]
    (got,) = session(model).run(None, feeds(x))
    np.testing.assert_allclose(got, torchvision_reference(x, cfg), rtol=1e-4, atol=1e-4)


def test_opcheck(rng):
    x = make_inputs(rng, CONFIGS[1])
    cfg = CONFIGS[1]
    args = (*(torch.from_numpy(x[k]) for k in ("input", "weight", "offset", "mask", "bias")),
            list(cfg["s"]), list(cfg["p"]), list(cfg["d"]), cfg["g"], cfg["og"])
    torch.library.opcheck(torch.ops.customops.deform_conv2d.default, args)


class DeformModel(torch.nn.Module):
    """The seeds' model: a Conv2d predicts offsets (and a mask) for a deformable conv."""

    def __init__(self, mask: bool, bias: bool):
        super().__init__()
        self.offset = torch.nn.Conv2d(4, 2 * 9, 3, padding=1)
        self.mask = torch.nn.Conv2d(4, 9, 3, padding=1) if mask else None
        self.weight = torch.nn.Parameter(torch.randn(6, 4, 3, 3))
        self.bias = torch.nn.Parameter(torch.randn(6)) if bias else None

    def forward(self, x):
        mask = torch.sigmoid(self.mask(x)) if self.mask is not None else None
        return customops.deform_conv2d(x, self.offset(x), self.weight, self.bias,
                                       padding=(1, 1), mask=mask)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("mask,bias", [(False, False), (True, True), (False, True)],
                         ids=["plain", "mask-bias", "bias-only"])
def test_export_runs_in_ort(dynamo, mask, bias):
    torch.manual_seed(0)
    model = DeformModel(mask, bias).eval()
    args = (torch.randn(2, 4, 11, 9),)
    onnx_model = verify(model, args, dynamo=dynamo, rtol=1e-4, atol=1e-4, verbose=False)
    (node,) = [n for n in onnx_model.graph.node if n.domain == "custom"]
    assert node.op_type == "deform_conv2d"
    present = [name != "" for name in node.input]
    assert present == [True, True, True, mask, bias][:len(present)] and len(present) >= 3
