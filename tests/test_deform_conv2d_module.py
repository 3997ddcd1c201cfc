"""customops.DeformConv2d: torchvision.ops.DeformConv2d's module on our kernel."""

import inspect

import pytest
import torch
import torchvision

import customops
from exporting import verify

GEOMETRIES = [
    dict(in_channels=4, out_channels=6, kernel_size=3, padding=1),
    dict(in_channels=4, out_channels=6, kernel_size=(3, 2), stride=(2, 1), padding=(2, 1),
         dilation=(1, 2), groups=2, bias=False),
]


def offsets(module, x, offset_groups, mask):
    """Random offsets of a few pixels (so samples leave the grid) and a mask,
    for the module's output size (a plain conv's)."""
    n, taps = x.shape[0], module.kernel_size[0] * module.kernel_size[1]
    h, w = ((size + 2 * p - d * (k - 1) - 1) // s + 1 for size, k, s, p, d in zip(
        x.shape[2:], module.kernel_size, module.stride, module.padding, module.dilation))
    offset = 3 * torch.randn(n, 2 * offset_groups * taps, h, w)
    return offset, (torch.rand(n, offset_groups * taps, h, w) if mask else None)


def test_constructor_is_torchvisions():
    ours = inspect.signature(customops.DeformConv2d.__init__).parameters
    theirs = inspect.signature(torchvision.ops.DeformConv2d.__init__).parameters
    assert [(p.name, p.default) for p in ours.values()] == \
        [(p.name, p.default) for p in theirs.values()]
    forward = inspect.signature(customops.DeformConv2d.forward).parameters
    assert list(forward) == list(inspect.signature(torchvision.ops.DeformConv2d.forward).parameters)
    with pytest.raises(ValueError, match="in_channels must be divisible by groups"):
        customops.DeformConv2d(3, 4, 3, groups=2)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=["plain", "grouped-no-bias"])
def test_same_parameters_repr_and_seeded_initialisation(torch_seeded, geometry):
    torch.manual_seed(0)
    theirs = torchvision.ops.DeformConv2d(**geometry)
    torch.manual_seed(0)
    ours = customops.DeformConv2d(**geometry)
    assert [(k, v.shape) for k, v in ours.state_dict().items()] == \
        [(k, v.shape) for k, v in theirs.state_dict().items()]
    for name, value in theirs.state_dict().items():
        torch.testing.assert_close(ours.state_dict()[name], value, rtol=0, atol=0)
    assert repr(ours) == repr(theirs)
    for attribute in ("in_channels", "out_channels", "kernel_size", "stride", "padding",
                      "dilation", "groups"):
        assert getattr(ours, attribute) == getattr(theirs, attribute), attribute


@pytest.mark.parametrize("mask", [False, True], ids=["no-mask", "mask"])
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=["plain", "grouped-no-bias"])
def test_torchvision_checkpoint_loads_and_gives_torchvisions_output(torch_seeded, geometry, mask):
    theirs = torchvision.ops.DeformConv2d(**geometry)
    ours = customops.DeformConv2d(**geometry)           # other random weights...
    ours.load_state_dict(theirs.state_dict())           # ...replaced by the checkpoint (strict)
    x = torch.randn(2, 4, 9, 11)
    for offset_groups in (1, 2):
        offset, m = offsets(ours, x, offset_groups, mask)
        with torch.no_grad():
            torch.testing.assert_close(ours(x, offset, m), theirs(x, offset, m),
                                       rtol=1e-4, atol=1e-5)


class DCN(torch.nn.Module):
    """An offset-and-mask Conv feeding the module, as a DCNv2 block does."""

    def __init__(self, module_class):
        super().__init__()
        self.offset_mask = torch.nn.Conv2d(4, 27, 3, padding=1)
        self.dcn = module_class(4, 6, 3, padding=1)

    def forward(self, x):
        offset, mask = self.offset_mask(x).split([18, 9], dim=1)
        return self.dcn(x, offset.contiguous(), mask.sigmoid())


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_torchvision_checkpoint_exports_to_our_node(torch_seeded, dynamo):
    reference = DCN(torchvision.ops.DeformConv2d).eval()
    ours = DCN(customops.DeformConv2d).eval()
    ours.load_state_dict(reference.state_dict())
    x, other = torch.randn(2, 4, 10, 12), torch.randn(3, 4, 7, 5)
    dynamic = ({"dynamic_shapes": {"x": {0: torch.export.Dim("n"), 2: torch.export.Dim("h"),
                                         3: torch.export.Dim("w")}}} if dynamo
               else {"dynamic_axes": {"x": [0, 2, 3]}})
    def expected(x):
        with torch.no_grad():
            return [reference(torch.from_numpy(x)).numpy()]

    onnx_model = verify(ours, (x,), dynamo=dynamo, more_args=[(other,)], rtol=1e-4, atol=1e-4,
                        input_names=["x"], reference=expected, **dynamic)
    assert sorted((n.domain or "ai.onnx", n.op_type) for n in onnx_model.graph.node
                  if n.op_type not in ("Split", "Slice", "Constant")) == \
        [("ai.onnx", "Conv"), ("ai.onnx", "Sigmoid"), ("custom", "deform_conv2d")]


def test_trains_like_torchvisions_module(torch_seeded):
    """The module's parameters get torchvision's gradients (the backward is the op's)."""
    reference = DCN(torchvision.ops.DeformConv2d)
    ours = DCN(customops.DeformConv2d)
    ours.load_state_dict(reference.state_dict())
    x = torch.randn(2, 4, 9, 8)
    for net in (reference, ours):
        net(x).square().mean().backward()
    for (name, theirs), mine in zip(reference.named_parameters(), ours.parameters()):
        assert mine.grad is not None and mine.grad.abs().max() > 0, name
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-4, atol=1e-5)
