"""deform_conv2d's backward (customops::deform_conv2d_backward, registered as
its autograd formula): torch.autograd.gradcheck, torchvision's gradients as
the reference, determinism, the op under torch.library.opcheck, a few
training steps side by side with torchvision."""

import numpy as np
import pytest
import torch
import torchvision
from torch._subclasses.fake_tensor import FakeTensorMode

import customops
from optable import DEFORM_CONFIGS, deform_config_id, deform_inputs

NAMES = ("input", "offset", "weight", "bias", "mask")  # torchvision's Python order


def inputs(rng, cfg, dtype=np.float64, offsets=None):
    """The tensors of deform_inputs, all requiring gradients; `offsets`
    (a function of the offset array) replaces the offsets."""
    x = deform_inputs(rng, cfg, dtype)
    if offsets is not None:
        x["offset"] = offsets(x["offset"]).astype(dtype)
    return {k: None if v is None else torch.tensor(v, requires_grad=True) for k, v in x.items()}


def max_abs(t):
    return t.abs().max().item() if t.numel() else 0.0


def call(fn, t, cfg):
    return fn(t["input"], t["offset"], t["weight"], t["bias"], stride=cfg["s"],
              padding=cfg["p"], dilation=cfg["d"], mask=t["mask"])


def gradients(fn, t, cfg, grad_output=None):
    """The output and the gradients of every present input, for grad_output
    (default: a fixed random one)."""
    t = {k: None if v is None else v.detach().clone().requires_grad_() for k, v in t.items()}
    y = call(fn, t, cfg)
    if grad_output is None:
        grad_output = torch.randn(y.shape, dtype=y.dtype,
                                  generator=torch.Generator().manual_seed(1))
    present = [k for k in NAMES if t[k] is not None]
    grads = torch.autograd.grad(y, [t[k] for k in present], grad_output, allow_unused=True)
    return y, dict(zip(present, grads))


# Offsets beyond the table's random ones: far outside the image (every
# sample reads zero: all gradients but bias and the taps that stay inside
# are zero), and whole numbers, where the bilinear weights have kinks and
# torchvision's one-sided conventions decide (zero offsets with padding put
# the first tap exactly on the line y = -1).
OFFSETS = {
    "random": None,
    "far": lambda o: o * 40,
    "zero": lambda o: 0 * o,
    "integer": lambda o: np.round(o),
}
# gradcheck refuses empty tensors: the zero batch is compared with torchvision.
NONEMPTY = [c for c in DEFORM_CONFIGS if c["n"] > 0]
GEOMETRIES = [pytest.param(c, id=deform_config_id(c)) for c in DEFORM_CONFIGS]
NONEMPTY_GEOMETRIES = [pytest.param(c, id=deform_config_id(c)) for c in NONEMPTY]


@pytest.mark.parametrize("offsets", ["random", "far"])
@pytest.mark.parametrize("cfg", NONEMPTY_GEOMETRIES)
def test_gradcheck(rng, cfg, offsets):
    """Finite differences in float64 (random offsets: a sample sits on a
    kink of the bilinear weights with probability ~0).  fast_mode checks
    random projections of the Jacobian (the full one takes minutes here)."""
    t = inputs(rng, cfg, offsets=OFFSETS[offsets])
    present = [k for k in NAMES if t[k] is not None]

    def f(*values):
        return call(customops.deform_conv2d, dict(t, **dict(zip(present, values))), cfg)

    assert torch.autograd.gradcheck(f, [t[k] for k in present], eps=1e-6, atol=1e-7,
                                    fast_mode=True)


def test_gradcheck_covers_the_table():
    def has(key, values):
        return {v for c in NONEMPTY for v in np.ravel(c[key])} >= set(values)

    assert has("n", [1, 2]) and has("g", [1, 2]) and has("og", [1, 2])
    assert has("s", [1, 2]) and has("p", [0, 1]) and has("d", [1, 2])
    assert {(c["mask"], c["bias"]) for c in NONEMPTY} == {(m, b) for m in (0, 1) for b in (0, 1)}
    assert any(c["n"] == 0 for c in DEFORM_CONFIGS)  # in the comparisons with torchvision


@pytest.mark.parametrize("offsets", list(OFFSETS))
@pytest.mark.parametrize("cfg", GEOMETRIES)
def test_float64_gradients_equal_torchvision(rng, cfg, offsets):
    t = inputs(rng, cfg, offsets=OFFSETS[offsets])
    y, ours = gradients(customops.deform_conv2d, t, cfg)
    y_ref, theirs = gradients(torchvision.ops.deform_conv2d, t, cfg)
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-10)
    assert ours.keys() == theirs.keys()
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], rtol=1e-10, atol=1e-10,
                                   msg=lambda m: f"grad of {name}: {m}")


@pytest.mark.parametrize("cfg", GEOMETRIES)
def test_float32_gradients_equal_torchvision_in_float64(rng, cfg):
    """float32 against torchvision in float64 on the same float32 values:
    the error is float32 rounding, relative to the size of the terms."""
    t = inputs(rng, cfg, np.float32)
    t64 = {k: None if v is None else v.detach().double() for k, v in t.items()}
    grad = torch.randn(call(customops.deform_conv2d, t, cfg).shape,
                       generator=torch.Generator().manual_seed(1))
    _, ours = gradients(customops.deform_conv2d, t, cfg, grad)
    _, exact = gradients(torchvision.ops.deform_conv2d, t64, cfg, grad.double())
    _, theirs = gradients(torchvision.ops.deform_conv2d, t, cfg, grad)
    for name in ours:
        assert ours[name].dtype == torch.float32
        error = max_abs(ours[name].double() - exact[name])
        scale = max_abs(exact[name]) + 1
        assert error <= 2e-5 * scale, (name, error, scale)
        # and no worse than torchvision's own float32 (up to a small factor)
        their_error = max_abs(theirs[name].double() - exact[name])
        assert error <= 4 * their_error + 1e-6 * scale, (name, error, their_error)


@pytest.mark.parametrize("cfg", GEOMETRIES[:6])
def test_float16_gradients_are_float32_rounded_once(rng, cfg):
    """float16 is computed in float32 and each gradient rounded once: within
    a float16 ulp or so of the float64 gradients of the same values."""
    t = inputs(rng, cfg, np.float16)
    t64 = {k: None if v is None else v.detach().double() for k, v in t.items()}
    grad = torch.randn(call(customops.deform_conv2d, t, cfg).shape,
                       generator=torch.Generator().manual_seed(1)).half()
    _, ours = gradients(customops.deform_conv2d, t, cfg, grad)
    _, exact = gradients(torchvision.ops.deform_conv2d, t64, cfg, grad.double())
    for name in ours:
        assert ours[name].dtype == torch.float16
        torch.testing.assert_close(ours[name].double(), exact[name], rtol=2e-3,
                                   atol=2e-3 * (max_abs(exact[name]) + 1),
                                   msg=lambda m: f"grad of {name}: {m}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_non_finite_and_huge_offsets_have_zero_gradient(dtype):
    """NaN, infinite or beyond-int32 offsets sample nothing (as in the
    forward): their offset and mask gradients are 0, and the other
    gradients equal those of offsets far outside the image."""
    gen = torch.Generator().manual_seed(0)
    cfg = dict(s=(1, 1), p=(1, 1), d=(1, 1))
    far = torch.randn(2, 18, 13, 17, dtype=dtype, generator=gen) * 3
    odd = torch.rand(far.shape, generator=gen) < 0.2
    far[odd] = 1e6
    bad = far.clone()
    values = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e30, -3e9], dtype=dtype)
    bad[odd] = values[torch.randint(0, len(values), (int(odd.sum()),), generator=gen)]
    t = dict(input=torch.randn(2, 6, 13, 17, dtype=dtype, generator=gen),
             weight=torch.randn(4, 6, 3, 3, dtype=dtype, generator=gen),
             mask=torch.rand(2, 9, 13, 17, dtype=dtype, generator=gen), bias=None)
    _, with_far = gradients(customops.deform_conv2d, dict(t, offset=far), cfg)
    _, with_bad = gradients(customops.deform_conv2d, dict(t, offset=bad), cfg)
    _, theirs = gradients(torchvision.ops.deform_conv2d, dict(t, offset=far), cfg)
    for name in with_far:
        torch.testing.assert_close(with_far[name], theirs[name], rtol=1e-4, atol=1e-4)
        assert torch.equal(with_bad[name], with_far[name]), name
    assert not with_bad["offset"][odd].any()


def backward_args(rng, cfg, dtype=np.float32):
    t = inputs(rng, cfg, dtype)
    y = call(customops.deform_conv2d, t, cfg)
    grad = torch.from_numpy(rng.standard_normal(y.shape).astype(dtype))
    return (grad, *(None if t[k] is None else t[k].detach()
                    for k in ("input", "weight", "offset", "mask")),
            list(cfg["s"]), list(cfg["p"]), list(cfg["d"]), cfg["g"], cfg["og"])


def test_deterministic_across_threads_and_runs(rng):
    """Every gradient has the same bits at 1 and 2 threads and from run to
    run: no output is accumulated by racing threads."""
    cfg = dict(n=2, c=32, o=16, hw=(37, 29), k=(3, 3), s=(1, 1), p=(1, 1), d=(1, 1), g=2, og=2,
               mask=True, bias=True)
    args = backward_args(rng, cfg)
    threads = torch.get_num_threads()
    runs = []
    try:
        for n in (1, 2, 2, 1):
            torch.set_num_threads(n)
            runs.append(torch.ops.customops.deform_conv2d_backward(*args))
    finally:
        torch.set_num_threads(threads)
    for run in runs[1:]:
        for a, b in zip(run, runs[0]):
            assert torch.equal(a, b)


@pytest.mark.parametrize("cfg", GEOMETRIES)
def test_opcheck_backward(rng, cfg):
    """opcheck, and the gradients of the call it checks against torchvision's
    autograd in float64 (bias given as zeros: its gradient is always returned)."""
    args = backward_args(rng, cfg)
    torch.library.opcheck(torch.ops.customops.deform_conv2d_backward.default, args)
    ours = dict(zip(("input", "weight", "offset", "mask", "bias"),
                    torch.ops.customops.deform_conv2d_backward(*args)))
    grad, x, weight, offset, mask = (None if a is None else a.double() for a in args[:5])
    t64 = dict(input=x, weight=weight, offset=offset, mask=mask,
               bias=torch.zeros(weight.shape[0], dtype=torch.float64))
    _, exact = gradients(torchvision.ops.deform_conv2d, t64, cfg, grad)
    for name, want in exact.items():
        error, scale = max_abs(ours[name].double() - want), max_abs(want) + 1
        assert error <= 2e-5 * scale, (name, error, scale)


def test_mask_gradient_without_mask_is_for_a_mask_of_ones(rng):
    cfg = DEFORM_CONFIGS[1] | {"mask": False}
    grad, x, w, offset, _, *attrs = backward_args(rng, cfg, np.float64)
    ones = torch.ones(offset.shape[0], offset.shape[1] // 2, *offset.shape[2:],
                      dtype=torch.float64)
    without = torch.ops.customops.deform_conv2d_backward(grad, x, w, offset, None, *attrs)
    with_ones = torch.ops.customops.deform_conv2d_backward(grad, x, w, offset, ones, *attrs)
    for a, b in zip(without, with_ones):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_double_backward_raises_naming_the_op(rng):
    cfg = DEFORM_CONFIGS[1]
    t = inputs(rng, cfg)
    y = call(customops.deform_conv2d, t, cfg)
    (grad_input,) = torch.autograd.grad(y.sum(), [t["input"]], create_graph=True)
    with pytest.raises(RuntimeError, match=r"customops::deform_conv2d_backward has no gradient: "
                       r"the second derivative of deform_conv2d \(double backward"):
        grad_input.sum().backward()


BAD_BACKWARD = [
    ("grad-shape", lambda a: {0: a[0][..., :-1]},
     r"deform_conv2d_backward: grad_output must have the shape of the output \(N, out_channels, "
     r"out_h, out_w\) = \[1, 8, 10, 10\], got \[1, 8, 10, 9\]"),
    ("grad-dtype", lambda a: {0: a[0].double()},
     r"deform_conv2d_backward: grad_output must have the dtype of input, Float, got Double"),
    ("grad-int", lambda a: {0: a[0].int()},
     r"deform_conv2d_backward: grad_output must be Float, Double or Half, got Int"),
    ("offset-shape", lambda a: {3: a[3][:, :-2]},
     r"deform_conv2d: offset must have shape \(N, 2\*offset_groups\*kh\*kw, out_h, out_w\)"),
]


@pytest.mark.parametrize("changes,match", [b[1:] for b in BAD_BACKWARD],
                         ids=[b[0] for b in BAD_BACKWARD])
def test_backward_refuses_bad_calls_also_while_tracing(rng, changes, match):
    args = list(backward_args(rng, DEFORM_CONFIGS[2]))
    for i, value in changes(args).items():
        args[i] = value.contiguous()
    op = torch.ops.customops.deform_conv2d_backward
    with pytest.raises(RuntimeError, match=match) as real:
        op(*args)
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        with pytest.raises(RuntimeError) as traced:
            op(*fake)
    assert str(traced.value).splitlines()[0] == str(real.value).splitlines()[0]


class DCN(torch.nn.Module):
    """A small DCNv2 block: a convolution predicts offsets and mask."""

    def __init__(self, deform_conv2d):
        super().__init__()
        self.deform_conv2d = deform_conv2d
        self.predict = torch.nn.Conv2d(4, 27, 3, padding=1)
        self.weight = torch.nn.Parameter(torch.randn(8, 4, 3, 3) / 6)
        self.bias = torch.nn.Parameter(torch.zeros(8))
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x):
        offset, mask = self.predict(x).split([18, 9], dim=1)
        y = self.deform_conv2d(x, 3 * offset, self.weight, self.bias, padding=(1, 1),
                               mask=torch.sigmoid(mask))
        return self.head(torch.relu(y).mean(dim=(2, 3)))


def train(deform_conv2d, backend=None):
    # The same seed for every call, so the runs compared start alike; the
    # global generator is restored afterwards (tests/conftest.py checks).
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = DCN(deform_conv2d).double()
        x = torch.randn(6, 4, 9, 11, dtype=torch.float64)
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    step_model = torch.compile(model, backend=backend, fullgraph=True) if backend else model
    losses = []
    for _ in range(4):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(step_model(x), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model.state_dict()


def test_sgd_steps_equal_torchvision():
    ours, ours_state = train(customops.deform_conv2d)
    theirs, their_state = train(torchvision.ops.deform_conv2d)
    assert ours[-1] < ours[0]  # it learns
    np.testing.assert_allclose(ours, theirs, rtol=1e-10)
    for name in their_state:
        torch.testing.assert_close(ours_state[name], their_state[name], rtol=1e-10, atol=1e-10)


def test_compiled_training_step_runs_the_backward_op():
    """torch.compile traces the forward and the registered backward (AOT
    autograd, fullgraph): the backward graph calls the op, and the steps
    equal eager ones."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    backward_graphs = []

    def record(gm, example_inputs):
        backward_graphs.append(str(gm.graph))
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=lambda gm, example_inputs: make_boxed_func(gm.forward),
                           bw_compiler=record)
    compiled, compiled_state = train(customops.deform_conv2d, backend)
    eager, eager_state = train(customops.deform_conv2d)
    assert any("customops.deform_conv2d_backward" in g for g in backward_graphs)
    np.testing.assert_allclose(compiled, eager, rtol=1e-12)
    for name in eager_state:
        torch.testing.assert_close(compiled_state[name], eager_state[name], rtol=1e-12,
                                   atol=1e-12)


def test_an_image_in_many_bands_equals_torchvision(rng):
    """A large image goes through the backward in bands of pixels (at most
    2 MiB of column gradient each: here 1,155 pixels of 4.5 KiB, three
    bands); the bands meet without seams."""
    cfg = dict(n=2, c=64, o=16, hw=(33, 35), k=(3, 3), s=(1, 1), p=(1, 1), d=(1, 1), g=1, og=2,
               mask=True, bias=True)
    t = inputs(rng, cfg)
    _, ours = gradients(customops.deform_conv2d, t, cfg)
    _, theirs = gradients(torchvision.ops.deform_conv2d, t, cfg)
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scratch_a_previous_call_left_is_never_read(rng, dtype):
    """A thread keeps its scratch arrays between calls, uninitialized
    (csrc/kernels/cpu/scratch.h).  A call right after one on a larger image
    that filled them with NaN gives the same bits as before it."""
    cfg = dict(n=2, c=8, o=4, hw=(9, 11), k=(3, 3), s=(1, 1), p=(1, 1), d=(1, 1), g=1, og=1,
               mask=True, bias=True)
    t = inputs(rng, cfg, dtype)
    y, before = gradients(customops.deform_conv2d, t, cfg)
    big = dict(cfg, hw=(20, 23))
    poisoned = inputs(rng, big, dtype)
    poisoned["input"] = torch.full_like(poisoned["input"], float("nan")).requires_grad_()
    nan_y, _ = gradients(customops.deform_conv2d, poisoned, big,
                         grad_output=torch.full((2, 4, 20, 23), float("nan"),
                                                dtype=poisoned["input"].dtype))
    assert nan_y.isnan().all()
    y_again, after = gradients(customops.deform_conv2d, t, cfg)
    assert torch.equal(y_again, y)
    for name in before:
        assert torch.equal(after[name], before[name]), name
