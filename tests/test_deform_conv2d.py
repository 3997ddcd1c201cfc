"""deform_conv2d: both bindings against torchvision and ONNX's reference DeformConv."""

import numpy as np
import pytest
import torch
import torchvision
from onnx.reference import ReferenceEvaluator

import customops
from customops.ort import session
from exporting import verify
from helpers import feeds, single_node_model
from optable import DEFORM_CONFIGS, deform_attrs, deform_config_id, deform_inputs

CONFIGS = DEFORM_CONFIGS
make_inputs = deform_inputs


def torchvision_reference(x, cfg):
    t = lambda name: None if x[name] is None else torch.from_numpy(x[name])  # noqa: E731
    return torchvision.ops.deform_conv2d(
        t("input"), t("offset"), t("weight"), t("bias"), stride=cfg["s"], padding=cfg["p"],
        dilation=cfg["d"], mask=t("mask")).numpy()


attrs = deform_attrs


@pytest.mark.parametrize("cfg", CONFIGS, ids=deform_config_id)
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
    onnx_model = verify(model, args, dynamo=dynamo, rtol=1e-4, atol=1e-4)
    (node,) = [n for n in onnx_model.graph.node if n.domain == "custom"]
    assert node.op_type == "deform_conv2d"
    present = [name != "" for name in node.input]
    assert present == [True, True, True, mask, bias][:len(present)] and len(present) >= 3
