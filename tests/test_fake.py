"""The PyTorch ops under torch.library's scrutiny, for every op of the table.

* ``torch.library.opcheck`` on every sample call of tests/optable.py: the
  schema, the fake (meta) kernel against the real one (shapes, dtypes,
  strides), autograd registration, and tracing with dynamic shapes.
* The fake kernels run the C++ checks that need no tensor data: every bad
  call of the table that PyTorch refuses is refused by the fake kernel too,
  with the same message, unless its error depends on tensor values
  (offsets), which only the real kernel sees.
* So ``torch.compile`` rejects a bad call while tracing.
"""

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from optable import OPS, tensors
from test_errors import all_cases, run_torch

SAMPLES = [pytest.param(op, s, id=f"{op.name}-{s.id}")
           for op in OPS.values() for s in op.samples(np.random.default_rng(0))]


@pytest.mark.parametrize("op,sample", SAMPLES)
def test_opcheck(op, sample):
    t = tensors(sample.inputs, sample.noncontiguous)
    if op.differentiable:
        t = {k: v.requires_grad_() if v is not None and v.is_floating_point() else v
             for k, v in t.items()}
    torch.library.opcheck(op.torch_op, op.torch_args(t, sample.attrs))


BAD = [pytest.param(op, case, id=f"{op.name}-{case.id}")
       for op in OPS.values() if op.fake_checks
       for case in all_cases(op) if "torch" in case.bindings]


def run_fake(op, case):
    with FakeTensorMode() as mode:
        fake = {k: None if v is None else mode.from_tensor(v)
                for k, v in tensors(case.inputs, case.noncontiguous).items()}
        return op.torch_op(*op.torch_args(fake, case.attrs))


@pytest.mark.parametrize("op,case", BAD)
def test_fake_kernel_refuses_like_the_real_one(op, case):
    with pytest.raises(RuntimeError) as real:
        run_torch(op, case.inputs, case.attrs, case.noncontiguous)
    if case.values:  # only the data shows it: the fake kernel lets it through
        run_fake(op, case)
        return
    with pytest.raises(RuntimeError) as fake:
        run_fake(op, case)
    assert str(fake.value) == str(real.value)


def test_every_op_is_checked_by_its_fake_kernel_or_says_so():
    assert {op.name for op in OPS.values() if op.fake_checks} >= {"my_add", "knn_query"}


@pytest.mark.parametrize("op", [op for op in OPS.values() if op.fake_checks], ids=lambda o: o.name)
def test_compile_rejects_a_bad_call_while_tracing(op):
    """A wrong dtype on the first input: torch.compile fails in Dynamo's fake
    propagation (TorchRuntimeError), before any kernel runs."""
    import torch._dynamo

    case = next(c for c in all_cases(op) if c.id.startswith(op.inputs[0].name + "-int32"))
    args = op.torch_args(tensors(case.inputs), case.attrs)
    tensor_at = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]

    def call(*values):
        full = list(args)
        for i, value in zip(tensor_at, values):
            full[i] = value
        return op.torch_op(*full)

    values = [args[i] for i in tensor_at]
    with pytest.raises(RuntimeError) as real:
        call(*values)
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.TorchRuntimeError) as traced:
        torch.compile(call, backend="eager", fullgraph=True)(*values)
    assert str(real.value) in str(traced.value)


class _Call(torch.nn.Module):
    def __init__(self, op, **attrs):
        super().__init__()
        self.op, self.attrs = op, attrs

    def forward(self, *args):
        return self.op(*args, **self.attrs)


_GEN = torch.Generator().manual_seed(0)   # module-level examples: no test's rng yet


def _rand(*shape):
    return torch.rand(shape, generator=_GEN)


def _deform_args(n=2, c=4, h=6, w=5):
    """input, weight, offset, mask of a 3x3 deform_conv2d with padding 1 (out = in)."""
    return (_rand(n, c, h, w), _rand(8, c, 3, 3), _rand(n, 18, h, w),
            _rand(n, 9, h, w))


_DEFORM_ATTRS = dict(bias=None, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1,
                     offset_groups=1)
Dim = torch.export.Dim
# (id, op, args, attrs, dynamic shapes that break a relation the kernel checks, message)
RELATIONS = [
    ("my_add-b-of-a", torch.ops.customops.my_add, (_rand(2, 8), _rand(2, 8)), {},
     ({0: Dim("n")}, {0: Dim("m")}), "must always be equal"),
    ("knn-xyz-3-columns", torch.ops.customops.knn_query.default,
     (4, _rand(32, 3), torch.tensor([32], dtype=torch.int32)), {},
     (None, {0: Dim("n"), 1: Dim("c")}, None), "specialized it to be a constant (3)"),
    ("knn-new_offset-of-offset", torch.ops.customops.knn_query.default,
     (4, _rand(32, 3), torch.tensor([16, 32], dtype=torch.int32), _rand(8, 3),
      torch.tensor([4, 8], dtype=torch.int32)), {},
     (None, None, {0: Dim("b")}, None, {0: Dim("b2")}), "must always be equal"),
    ("deform-offset-batch", torch.ops.customops.deform_conv2d.default, _deform_args(),
     _DEFORM_ATTRS, ({0: Dim("n")}, None, {0: Dim("m")}, {0: Dim("n")}), "must always be equal"),
    ("deform-mask-height", torch.ops.customops.deform_conv2d.default, _deform_args(),
     _DEFORM_ATTRS, ({2: Dim("h")}, None, {2: Dim("h")}, {2: Dim("h2")}),
     "must always be equal"),
    ("deform-backward-grad", torch.ops.customops.deform_conv2d_backward.default,
     (_rand(2, 8, 6, 5), *_deform_args()),
     {k: v for k, v in _DEFORM_ATTRS.items() if k != "bias"},
     ({0: Dim("m")}, {0: Dim("n")}, None, {0: Dim("n")}, {0: Dim("n")}), "must always be equal"),
]


@pytest.mark.parametrize("op,args,attrs,dynamic,message", [pytest.param(*r[1:], id=r[0])
                                                           for r in RELATIONS])
def test_export_refuses_dynamic_shapes_that_break_a_relation(op, args, attrs, dynamic, message):
    """With symbolic sizes the C++ checks cannot run; the fakes state the
    equalities the kernels check, so export refuses dimensions declared
    independent (or dynamic) that the kernel would refuse at run time."""
    module = _Call(op, **attrs)
    module(*args)  # the example itself is valid
    with pytest.raises(Exception, match="Constraints violated") as refused:
        torch.export.export(module, args, dynamic_shapes=(dynamic,))
    assert message in str(refused.value)
